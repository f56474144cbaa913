"""Agreement with the search's labels as hulk's refinement time grows.

On the unseen clusters of ``gnn_quality.py`` (``--clusters``, default 20): the search with
``--budget`` seconds (default 60) from seeds 0 and 1 (seed 0's plans are the labels; seed 1
says how far the labeller agrees with itself), then hulk (GNN, decoding, refinement) with
each of ``--hulk-budgets`` seconds. For each budget: mean agreement per server with seed
0's and with seed 1's plans (and up to twins), the clusters at 95% or more, and the step
time over the search's (median, mean). Plans run on ``--workers`` processes, one per core:
on a 2-core machine the default run takes about (40 x 60 + 20 x 48) s / 2 = 28 minutes;
the search runs are cached as ``gnn_quality.py``'s are.

    python bench/gnn_budget.py [--workers 16] [--hulk-budgets 1,2,5,10,30]
"""

from __future__ import annotations

import argparse
import os

# one core per process
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import multiprocessing
import statistics
import time
from typing import Any

from gnn_common import agreement, agreement_up_to_twins, cached_search, geo_mean, unseen


def _run(task: tuple[str, int, float, int]) -> tuple[tuple[str, int, float, int], Any]:
    kind, index, budget, seed = task
    cluster, jobs = unseen(index)
    if kind == "search":
        r = cached_search(cluster, jobs, budget, seed)
        return task, (r["assignment"], r["geo"])
    from hulk_planner.cost import CostModel
    from hulk_planner.gnn.planner import plan_gnn

    plan = plan_gnn(CostModel(cluster), jobs, seed=seed, time_budget_s=budget)
    return task, (plan.assignment, geo_mean(plan, jobs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=60.0, help="search seconds (60)")
    ap.add_argument("--hulk-budgets", default="1,2,5,10,30", help="refinement seconds")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    budgets = [float(b) for b in args.hulk_budgets.split(",")]
    n = args.clusters
    tasks = [("search", i, args.budget, s) for s in (0, 1) for i in range(n)]
    tasks += [("hulk", i, b, 0) for b in budgets for i in range(n)]
    t0 = time.perf_counter()
    out: dict[tuple[str, int, float, int], Any] = {}
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        for task, result in pool.imap_unordered(_run, tasks):
            out[task] = result
    clusters = [unseen(i)[0] for i in range(n)]
    print(
        f"{n} unseen clusters, search {args.budget:.0f} s, {len(tasks)} plans on "
        f"{args.workers} processes in {time.perf_counter() - t0:.0f} s"
    )
    label = [out[("search", i, args.budget, 0)] for i in range(n)]
    other = [out[("search", i, args.budget, 1)] for i in range(n)]
    ss = [agreement(other[i][0], label[i][0], clusters[i]) for i in range(n)]
    st = [agreement_up_to_twins(other[i][0], label[i][0], clusters[i]) for i in range(n)]
    print(
        f"search seed 1 vs seed 0: agreement {statistics.mean(ss):.3f} (twins "
        f"{statistics.mean(st):.3f}), clusters >= 0.95: {sum(a >= 0.95 for a in ss)}/{n}"
    )
    for b in budgets:
        mine = [out[("hulk", i, b, 0)] for i in range(n)]
        ag = [agreement(mine[i][0], label[i][0], clusters[i]) for i in range(n)]
        tw = [agreement_up_to_twins(mine[i][0], label[i][0], clusters[i]) for i in range(n)]
        ag1 = [agreement(mine[i][0], other[i][0], clusters[i]) for i in range(n)]
        ratio = [mine[i][1] / label[i][1] for i in range(n)]
        print(
            f"hulk {b:>4g} s: agreement with seed 0 {statistics.mean(ag):.3f} (twins "
            f"{statistics.mean(tw):.3f}), with seed 1 {statistics.mean(ag1):.3f}; clusters "
            f">= 0.95: {sum(a >= 0.95 for a in ag)}/{n}; step time / search median "
            f"{statistics.median(ratio):.3f} mean {statistics.mean(ratio):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
