"""The network's tables: dense n x n arrays against ``topology.PairTable`` (region tables
plus the server links), which the planner keeps above ``DENSE_MAX_SERVERS`` servers.

1. Build time and bytes of the latency, bandwidth and reachability tables at 3,000 /
   5,000 / 10,000 random servers (region links only), both ways.
2. The search planner, 300 moves from its greedy start (``max_iterations``: the same plan
   on any machine), on 3,000 servers with region links only and with 30,000 server links
   added: seconds both ways, their ratio, and whether the plans are the same.

    python bench/network_tables.py
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import time
from dataclasses import replace

import numpy as np

from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.model import Cluster, Link
from hulk_planner.planners.search import search_plan
from hulk_planner.topology import Network, PairTable


def nbytes(net: Network) -> int:
    total = 0
    for t in (net.latency_ms, net.bandwidth_gbps, net.direct):
        if isinstance(t, PairTable):
            total += t.flat.nbytes + t.keys.nbytes  # (base and values: views of flat)
        else:
            total += t.nbytes
    return total


def with_links(cluster: Cluster, count: int, seed: int = 3) -> Cluster:
    """``cluster`` plus ``count`` random server links (half with a bandwidth)."""
    rng = np.random.default_rng(seed)
    servers = cluster.servers
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < count:
        x, y = sorted(rng.choice(len(servers), 2, replace=False).tolist())
        pairs.add((x, y))
    links = tuple(
        Link(
            servers[x].name,
            servers[y].name,
            float(rng.uniform(0.2, 60)),
            float(rng.uniform(1, 40)) if x % 2 else None,
        )
        for x, y in sorted(pairs)
    )
    return replace(cluster, links=links)


def main() -> None:
    print("== tables (region links only)")
    for n in (3000, 5000, 10000):
        cluster = random_cluster(n, 1)
        row = []
        for dense in (True, False):
            t = time.perf_counter()
            net = Network(cluster, dense=dense)
            row.append((time.perf_counter() - t, nbytes(net)))
        (td, bd), (tl, bl) = row
        print(
            f"{n:>6,} servers: dense {td:.2f} s, {bd / 2**20:,.0f} MiB; pair tables {tl:.3f} s, "
            f"{bl / 2**20:,.1f} MiB ({bd / bl:,.0f}x less memory)"
        )
    print("== search, 300 moves, 3,000 servers")
    base = random_cluster(3000, 1)
    jobs = paper_jobs(4)
    for label, cluster in [
        ("region links only", base),
        ("+ 30,000 links", with_links(base, 30_000)),
    ]:
        runs = []
        for dense in (True, False):
            cost = CostModel(cluster, network=Network(cluster, dense=dense))
            t = time.perf_counter()
            p = search_plan(cost, jobs, seed=0, max_iterations=300, time_budget_s=math.inf)
            runs.append((time.perf_counter() - t, p))
        (td, pd), (tl, pl) = runs
        print(
            f"{label}: dense {td:.2f} s, pair tables {tl:.2f} s ({tl / td:.2f}x); "
            f"same plan: {pd == pl}"
        )


if __name__ == "__main__":
    main()
