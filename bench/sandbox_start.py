"""Warm start of the sandbox: seconds from `up` to every node Ready (goal: 47 nodes < 30 s),
then the same for a larger generated cluster (default 1,000 nodes).

    python bench/sandbox_start.py [--nodes 1000] [--repeat 3]

Binaries are built first if needed (not timed). Each run uses a fresh temporary directory
and is torn down after. Prints one line per run and a summary.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from hulk_sandbox import build
from hulk_sandbox.nodes import cluster_for
from hulk_sandbox.sandbox import Sandbox


def one_run(spec: str) -> tuple[float, float, float]:
    """(seconds to all nodes Ready, of which to the API server's readiness, seconds for
    down)."""
    servers = cluster_for(spec).servers
    began = time.monotonic()
    seen: dict[str, float] = {}

    def progress(line: str) -> None:  # (the API server is ready when the others start)
        if "starting kube-controller-manager" in line:
            seen["api"] = time.monotonic() - began

    with tempfile.TemporaryDirectory(prefix="hulk-bench-") as tmp:
        box = Sandbox(f"{tmp}/sandbox", f"{tmp}/logs")
        try:
            up = box.up(servers, progress=progress, die_with_parent=True, timeout=600)
        finally:
            start = time.monotonic()
            box.down()
            down = time.monotonic() - start
    return up, seen.get("api", float("nan")), down


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000", help="the larger cluster's size (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the 47-node start")
    args = parser.parse_args()
    build.build_all()
    results: dict[str, list[float]] = {}
    for spec, repeat in (("paper", args.repeat), (args.nodes, 1)):
        for i in range(repeat):
            up, api, down = one_run(spec)
            results.setdefault(spec, []).append(up)
            print(
                f"{spec:>6} nodes, run {i + 1}: Ready in {up:6.1f}s (the API server ready in "
                f"{api:.1f}s; down {down:.1f}s)",
                flush=True,
            )
    paper = results["paper"]
    median = statistics.median(paper)
    verdict = "meets" if median < 30 else "MISSES"
    print(
        f"warm start, 47 paper nodes: median {median:.1f}s over {len(paper)} runs ({verdict} < 30s)"
    )
    print(f"warm start, {args.nodes} generated nodes: {results[args.nodes][0]:.1f}s")
    return 0 if median < 30 else 1


if __name__ == "__main__":
    sys.exit(main())
