from hulk.cli import main

raise SystemExit(main())
