"""What planning within a namespace's ResourceQuota costs the operator: one job's planning
round (``rounds.plan_pending``, the operator's own) on generated clusters, without a
quota and under a quota on pods that holds half the servers the free plan takes.

    python bench/quota_planning.py [--servers 47 500 2000] [--planner hulk] [--repeat 3]

A quota the plan fits costs nothing beyond the check; one it exceeds makes the operator plan
the job again on a few sets of its servers within the quota (``quota_fit.within_quota``)
and keep the fastest: printed as the ratio of the round's time to a round without a quota,
with each plan's predicted step (the quota's plan is slower: it has fewer servers). Links are
the operator's region estimates (no NodeLatency measurements).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry
from hulk_operator.inventory import node_info
from hulk_operator.latencies import Latencies
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.model import Cluster
from hulk_sandbox.nodes import node_manifest


def snapshot(cluster: Cluster, entry: JobEntry) -> Snapshot:
    nodes = {}
    for s in cluster.servers:
        body = node_manifest(s)
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes[s.name] = node_info(body)
    return Snapshot(nodes, Latencies(), {entry.key: entry}, {})


def timed(snap: Snapshot, entry: JobEntry, planner: str, repeat: int) -> tuple[float, Decision]:
    times, d = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        d = plan_pending(snap, plan, planner=planner)[entry.key]
        times.append(time.perf_counter() - start)
    assert d is not None
    return statistics.median(times), d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[47, 500, 2000])
    ap.add_argument("--planner", default="hulk")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    job = paper_jobs()[1]  # T5-11B: several servers when it may
    entry = JobEntry(("ml", job.name), "uid", 1, job, None, frozenset(), None, False)
    print(f"one job ({job.name}), planner {args.planner}, median of {args.repeat} rounds")
    print(f"{'servers':>8} {'no quota':>10} {'quota':>10} {'ratio':>6}  plan: servers, step")
    for n in args.servers:
        cluster = paper_cluster() if n == 47 else random_cluster(n, seed=n)
        snap = snapshot(cluster, entry)
        free_s, free = timed(snap, entry, args.planner, args.repeat)
        if free.job_plan is None:
            print(f"{n:>8} no plan: {free.reason}")
            continue
        half = max(1, len(free.nodes) // 2)
        quota = replace(snap, quotas={"ml": [("half", {"pods": float(half)})]})
        quota_s, within = timed(quota, entry, args.planner, args.repeat)
        steps = [
            f"{len(d.nodes)}, {d.job_plan.predicted_iteration_seconds:.3g} s"
            if d.job_plan
            else "none"
            for d in (free, within)
        ]
        print(
            f"{n:>8} {free_s:>9.2f}s {quota_s:>9.2f}s {quota_s / free_s:>5.1f}x  "
            f"free: {steps[0]}; within {half} pod(s): {steps[1]}"
        )


if __name__ == "__main__":
    main()
