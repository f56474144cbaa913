"""What reading a big topology file costs: 300 servers with every pair linked (44,850
links, one a line, as ``hulk topology`` writes them), as YAML read with libyaml (what
``hulk plan --cluster`` does where PyYAML has it), as YAML read with PyYAML's pure-Python
loader (what it did before), and as JSON.

    python bench/yaml_load.py [--servers 300] [--repeat 1]

Each read runs in a fresh interpreter: ``load_cluster`` of the file, in wall seconds (min
and max over the repeats), and the interpreter's peak memory (max RSS, MB).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import resource, sys, time
from hulk_planner.io import documents, load_cluster
if sys.argv[2] == "pure":
    documents._FastLoader = None
t = time.perf_counter()
cluster = load_cluster(sys.argv[1])
seconds = time.perf_counter() - t
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, len(cluster.links))
"""


def once(path: Path, how: str) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), how], capture_output=True, text=True, check=True
    )
    seconds, mb, links = out.stdout.split()
    return float(seconds), float(mb), int(links)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    from hulk_planner.generate import random_cluster
    from hulk_planner.io import dump_cluster

    cluster = random_cluster(args.servers, seed=0, explicit_links=True, drop_fraction=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        files = {fmt: Path(tmp) / f"big.{fmt}" for fmt in ("yaml", "json")}
        for fmt, path in files.items():
            path.write_text(dump_cluster(cluster, fmt))
        cases = {
            "YAML, libyaml (now)": (files["yaml"], "fast"),
            "YAML, pure-Python PyYAML (before)": (files["yaml"], "pure"),
            "JSON": (files["json"], "fast"),
        }
        print(f"{args.servers} servers, {len(cluster.links):,} links; load_cluster:")
        for name, (path, how) in cases.items():
            runs = [once(path, how) for _ in range(args.repeat)]
            times = [r[0] for r in runs]
            mb = max(r[1] for r in runs)
            size = path.stat().st_size / 1e6
            print(
                f"  {name:36s} {min(times):6.2f} s (max {max(times):.2f}), "
                f"{mb:4.0f} MB peak, file {size:.1f} MB"
            )


if __name__ == "__main__":
    main()
