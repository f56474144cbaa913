"""Hulk's command line: one ``hulk`` entry point dispatching to each package's subcommands."""
