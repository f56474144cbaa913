"""Priority groups with one GNN inference against one per group.

``api.plan`` plans jobs of different priorities one priority after another, each on the
servers left. The hulk planner runs its network once, on the whole cluster with every job,
and each group decodes its jobs' columns on its servers' rows
(``gnn.planner.SharedScores``); before, each group built its own graph and ran its own
inference on the servers left to it. This bench plans every preset job (10) at 5 and at 10
priorities on random clusters of 1,000 and 5,000 servers (seeds 1-3), both ways:

- with the refinement's default time budget: wall time and geometric-mean step time;
- with a fixed 30 refinement moves per group (``max_iterations``): the step time of plans
  that do not depend on the machine's speed.

It prints each case and the geometric means of the ratios shared / per group (below 1:
shared is faster, or its plans' steps shorter).

    python bench/priority_groups.py [--sizes 1000,5000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import math
import time
from dataclasses import replace
from unittest import mock

import numpy as np
from gnn_common import geo_mean

from hulk_planner.api import plan
from hulk_planner.generate import random_cluster
from hulk_planner.gnn import planner as gnn_planner
from hulk_planner.model import Cluster, Job
from hulk_planner.presets import PRESETS, preset_jobs


def per_group(*_: object) -> gnn_planner.SharedScores:
    """Scores of no server: each group runs its own inference, as before."""
    return gnn_planner.SharedScores({}, {}, np.zeros((0, 0)))


def run(cluster: Cluster, jobs: list[Job], shared: bool, moves: int | None) -> tuple[float, float]:
    t = time.perf_counter()
    if shared:
        p = plan(cluster, jobs, "hulk", max_iterations=moves)
    else:
        with mock.patch.object(gnn_planner, "shared_scores", per_group):
            p = plan(cluster, jobs, "hulk", max_iterations=moves)
    return time.perf_counter() - t, geo_mean(p, jobs)


def geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    base = preset_jobs(sorted(PRESETS))
    walls: list[float] = []
    steps: list[float] = []
    fixed: list[float] = []
    print("servers seed priorities | wall shared / per group | step shared / per group (ratio) "
          "| 30 moves a group: step shared / per group (ratio)")  # fmt: skip
    for n in [int(x) for x in args.sizes.split(",")]:
        for seed in range(1, args.seeds + 1):
            cluster = random_cluster(n, seed)
            for levels in (5, 10):
                jobs = [replace(j, priority=k % levels) for k, j in enumerate(base)]
                w1, g1 = run(cluster, jobs, True, None)
                w0, g0 = run(cluster, jobs, False, None)
                _, f1 = run(cluster, jobs, True, 30)
                _, f0 = run(cluster, jobs, False, 30)
                walls.append(w1 / w0)
                steps.append(g1 / g0)
                fixed.append(f1 / f0)
                print(
                    f"{n:>7,} {seed:>4} {levels:>10} | {w1:6.2f} s / {w0:6.2f} s | "
                    f"{g1:.4f} / {g0:.4f} s ({g1 / g0:.3f}) | {f1:.4f} / {f0:.4f} s "
                    f"({f1 / f0:.3f})",
                    flush=True,
                )
    print(
        f"geometric means over {len(walls)} cases, shared / per group: wall {geo(walls):.3f}, "
        f"step {geo(steps):.3f} (default budget), {geo(fixed):.3f} (30 moves a group); "
        f"step ratios {min(steps + fixed):.3f}-{max(steps + fixed):.3f}"
    )


if __name__ == "__main__":
    main()
