"""Planning time: seconds to plan the paper's four jobs on generated clusters of 50, 500 and
5,000 servers, per planner, with the growth exponent (slope of log time against log
servers); then ``hulk plan`` on the paper's cluster, wall time including start-up.

    python bench/plan_time.py [--quick] [--repeat N]

Each planner is timed through ``hulk_planner.api.plan`` including the cost model's set-up
(the latency and bandwidth tables: dense up to 2,000 servers), which is also shown on its
own. The hulk planner (the GNN) refines its decoded plan for a wall-clock budget
(``gnn.planner.refine_budget``: 1 s plus 1 s per 1,000 servers, at most 2 s), which
dominates its time, so its exponent says little about the algorithm; the ``search x200``
row (a fixed 200 moves) shows how the search's work grows instead.
--quick: 50 and 500 servers, 3 command runs.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from hulk_planner.api import plan
from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_jobs
from hulk_planner.errors import NoFeasiblePlan
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.planner import refine_budget
from hulk_planner.model import Cluster

PLANNERS = ("hulk", "baseline-a", "baseline-b", "baseline-c")
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def slope(sizes: Sequence[int], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) against log(sizes)."""
    xs = [math.log(n) for n in sizes]
    ys = [math.log(max(t, 1e-6)) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def plan_once(c: Cluster, planner: str, max_iterations: int | None = None) -> tuple[float, int]:
    """(seconds including the cost model's set-up, jobs placed)."""

    def go() -> int:
        try:
            return len(plan(c, paper_jobs(), planner, max_iterations=max_iterations).jobs)
        except NoFeasiblePlan:
            return 0

    return timed(go)


def scaling(sizes: Sequence[int]) -> None:
    rows: dict[str, list[float]] = {}
    placed: dict[str, list[int]] = {}
    for n in sizes:
        c = random_cluster(n, seed=1)
        setup, _ = timed(lambda: CostModel(c))  # noqa: B023 (called at once)
        rows.setdefault("cost model set-up", []).append(setup)
        for name in PLANNERS:
            t, k = plan_once(c, name)
            rows.setdefault(name, []).append(t)
            placed.setdefault(name, []).append(k)
        t, k = plan_once(c, "search", max_iterations=200)
        rows.setdefault("search x200", []).append(t)
        placed.setdefault("search x200", []).append(k)
        print(f"  {n} servers done", file=sys.stderr, flush=True)
    print(
        f"{'seconds':<20}" + "".join(f"{f'{n:,} servers':>16}" for n in sizes) + f"{'exponent':>10}"
    )
    for name, times in rows.items():
        jobs = placed.get(name)
        cells = "".join(
            f"{t:>12.2f}s" + (f" ({jobs[i]})" if jobs else "    ") for i, t in enumerate(times)
        )
        print(f"{name:<20}{cells}{slope(sizes, times):>10.2f}")
    budgets = ", ".join(f"{refine_budget(n):.2f}s" for n in sizes)
    print(f"(n) = jobs of 4 placed; hulk's refinement budgets, which dominate its time: {budgets}")


def command_wall(repeat: int) -> None:
    manifests = Path(__file__).resolve().parent.parent / "examples" / "paper-jobs.yaml"
    for args, what in (
        ((), "the built-in jobs"),
        # (as users apply them: with pod templates, which the operator's notes read)
        (("--jobs", str(manifests)), "--jobs examples/paper-jobs.yaml"),
    ):
        runs = []
        for _ in range(repeat):
            t, _ = timed(
                lambda args=args: subprocess.run(  # type: ignore[misc]
                    [sys.executable, "-m", "hulk", "plan", *args],
                    capture_output=True,
                    text=True,
                    check=True,
                )
            )
            runs.append(t)
        print(
            f"`hulk plan` (paper cluster, 4 jobs, comparison table; {what}), wall incl. "
            f"start-up: median {statistics.median(runs):.2f}s of {repeat} "
            f"(min {min(runs):.2f}s, max {max(runs):.2f}s; goal < 2 s); of which "
            f"{refine_budget(47):.2f}s is the hulk planner's refinement budget"
        )
    startup, _ = timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "hulk", "plan", "--help"], capture_output=True, check=True
        )
    )
    print(f"`hulk plan --help` (start-up and imports only): {startup:.2f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 and 500 servers, 3 runs")
    parser.add_argument("--repeat", type=int, default=None, help="runs of `hulk plan` (5)")
    args = parser.parse_args()
    sizes = (50, 500) if args.quick else (50, 500, 5000)
    repeat = args.repeat or (3 if args.quick else 5)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"planning time, {os.cpu_count()} CPUs, load average {load:.1f}\n")
    scaling(sizes)
    print()
    command_wall(repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
