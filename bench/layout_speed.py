"""Layouts per second: how fast ``layout.layout_job`` lays a job over a server set, the
search's inner loop, with the cost model's plain-Python scoring of small grids and with
numpy alone (``Network.rows`` off, as above ``topology.ROWS_MAX_SERVERS`` servers).

    python bench/layout_speed.py [--sets 1500] [--seed 0]

Cases: random sets of 1-40 servers of the paper's cluster (47 servers) and of a generated
cluster of 300, each laying one of the paper's six jobs. Both paths must give the same
layouts (checked); the figure is their speed ratio.
"""

from __future__ import annotations

import argparse
import random
import time

from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.layout import layout_job
from hulk_planner.model import Cluster


def rate(cost: CostModel, cases: list) -> tuple[float, list]:
    t = time.perf_counter()
    out = [layout_job(cost, job, names) for job, names in cases]
    return len(cases) / (time.perf_counter() - t), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=1500, help="server sets per cluster (1500)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    clusters: list[Cluster] = [paper_cluster(), random_cluster(300, seed=3)]
    jobs = paper_jobs(6)
    for c in clusters:
        rng = random.Random(args.seed)
        names = [s.name for s in c.servers]
        cases = [
            (rng.choice(jobs), rng.sample(names, rng.randint(1, min(40, len(names)))))
            for _ in range(args.sets)
        ]
        fast_cost, numpy_cost = CostModel(c), CostModel(c)
        numpy_cost.net.rows = None
        fast_cost.net.rows  # noqa: B018 (built before timing, as the search has it)
        numpy_rate, numpy_out = rate(numpy_cost, cases)
        fast_rate, fast_out = rate(fast_cost, cases)
        assert fast_out == numpy_out, "the two scoring paths gave different layouts"
        print(
            f"{c.name} ({len(c.servers)} servers): {fast_rate:,.0f} layouts/s with plain-Python "
            f"scoring, {numpy_rate:,.0f} with numpy alone: {fast_rate / numpy_rate:.2f}x"
        )


if __name__ == "__main__":
    main()
