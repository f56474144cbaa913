"""What starting ``hulk plan`` costs: the time to import torch and PyTorch Geometric (which
``hulk plan`` never imports: its GNN runs in numpy) against the planner it does import.

    python bench/import_time.py [--repeat 3]

Each import runs in a fresh interpreter; the figures are wall seconds, min and max over
the repeats.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CASES = {
    "torch": ("", "torch"),
    "torch_geometric, after torch": ("torch", "torch_geometric"),
    "hulk_planner.api (what hulk plan loads)": ("", "hulk_planner.api"),
}
PROBE = """
import time, warnings
warnings.simplefilter("ignore")
{before}
t = time.perf_counter()
import {module}
print(time.perf_counter() - t)
import sys
print("torch" in sys.modules)
"""


def once(before: str, module: str) -> tuple[float, bool]:
    code = PROBE.format(before=f"import {before}" if before else "", module=module)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, torch = out.stdout.split()
    return float(seconds), torch == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, (before, module) in CASES.items():
        runs = [once(before, module) for _ in range(args.repeat)]
        times = [t for t, _ in runs]
        torch = "" if before else f"  (torch loaded: {runs[0][1]})"
        print(f"import {name}: {min(times):.2f}-{max(times):.2f} s{torch}")


if __name__ == "__main__":
    main()
