"""The GNN planner on the Hulk paper's cluster (47 servers, 13 cities) with 4 and 6 jobs,
against the search planner as the previous benchmark ran it (``bench/plan_quality.py``:
0.6 s, the old ``hulk``, and 6 s, its 10x check) and with 60 s.

Printed per scenario: each job's predicted step time under each planner, the geometric
mean, hulk's wall time, and whether hulk is at least as good (goal: geometric mean <= the
search's at 6 s). Also the wall time of a fresh ``python`` process that plans the paper's
cluster with hulk (imports included; ``hulk plan``'s goal is < 2 s).

    python bench/gnn_paper.py [--seed 0]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from gnn_common import cached_search, geo_mean

from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.gnn.planner import Timings, plan_gnn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cluster = paper_cluster()
    for count in (4, 6):
        jobs = paper_jobs(count)
        cost = CostModel(cluster)
        tm = Timings()
        t = time.perf_counter()
        hulk = plan_gnn(cost, jobs, seed=args.seed, timings=tm)
        wall = time.perf_counter() - t
        hulk_times = {jp.name: jp.predicted_iteration_seconds for jp in hulk.jobs}
        searches = {b: cached_search(cluster, jobs, b, args.seed) for b in (0.6, 6.0, 60.0)}
        print(f"== paper cluster, {count} jobs")
        print(
            f"{'job':<16}{'hulk (GNN)':>12}" + "".join(f"{f'search {b:g}s':>14}" for b in searches)
        )
        for j in jobs:
            row = f"{j.name:<16}{hulk_times.get(j.name, float('inf')):>12.3f}"
            for r in searches.values():
                row += f"{r['times'].get(j.name, float('inf')):>14.3f}"
            print(row)
        g = geo_mean(hulk, jobs)
        print(
            f"{'geometric mean':<16}{g:>12.3f}"
            + "".join(f"{r['geo']:>14.3f}" for r in searches.values())
        )
        print(
            f"hulk wall {wall:.2f} s (graph {tm.graph_s:.2f}, inference {tm.inference_s:.2f}, "
            f"decode+refine {tm.decode_s:.2f}); vs search 0.6 s: {g / searches[0.6]['geo']:.3f}x, "
            f"6 s: {g / searches[6.0]['geo']:.3f}x, 60 s: {g / searches[60.0]['geo']:.3f}x "
            f"(goal <= 1 vs the previous benchmark's search)"
        )
        print()
    code = (
        "from hulk_planner.api import plan\n"
        "from hulk_planner.datasets import paper_cluster, paper_jobs\n"
        "plan(paper_cluster(), paper_jobs(4), 'hulk')\n"
    )
    walls = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        walls.append(time.perf_counter() - t)
    print(
        f"fresh process, import + plan paper cluster (4 jobs) with hulk: "
        f"{min(walls):.2f} s best of 3 ({', '.join(f'{w:.2f}' for w in walls)}); goal < 2 s"
    )


if __name__ == "__main__":
    main()
