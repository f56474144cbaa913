"""What first-come-first-served costs a planning round: one round of the operator's own
``rounds.plan_pending`` over a queue of equal-priority jobs (copies of the paper's four,
named so that name order is the reverse of age), with every server free.

    python bench/queue_round.py [--servers 47 500] [--jobs 8 16] [--planner hulk] [--repeat 3]

Each row plans the queue twice: with creation times (the job created first is placed first:
where the joint plan leaves a job waiting while a newer one is placed, the group is planned
again without the newer ones, which then get what is left), and with no creation times
(every job of equal age: the joint plan alone decides, as before). Printed: the planner
calls and the median seconds of a round, their ratio, the jobs placed, and the pairs of an
older job waiting while a newer one is placed (a newer job may still be placed beside a
waiting one where it fits on what the older ones left).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.inventory import node_info
from hulk_operator.latencies import Latencies
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.model import Cluster, Plan
from hulk_sandbox.nodes import node_manifest


def queue(n: int, aged: bool) -> list[JobEntry]:
    """``n`` jobs, copies of the paper's four in turn; job i created at second i (the
    names sort newest first)."""
    jobs = paper_jobs()
    out = []
    for i in range(n):
        job = replace(jobs[i % len(jobs)], name=f"q{n - i:03d}-{jobs[i % len(jobs)].name}")
        created = float(i) if aged else float("inf")
        base = JobEntry(("ml", job.name), f"uid-{i}", 1, job, None, frozenset(), None, False)
        out.append(replace(base, created=created))
    return out


def snapshot(cluster: Cluster, entries: list[JobEntry]) -> Snapshot:
    nodes = {}
    for s in cluster.servers:
        body = node_manifest(s)
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes[s.name] = node_info(body)
    return Snapshot(nodes, Latencies(), {e.key: e for e in entries}, {})


def timed(
    snap: Snapshot, planner: str, repeat: int, **kw: Any
) -> tuple[float, int, dict[Key, Decision]]:
    """The median seconds of ``repeat`` rounds, the planner calls of one and its decisions
    (``kw``: more of ``plan_pending``'s arguments)."""
    times, out = [], {}
    counted: list[int] = []

    def counting(*args: Any, **kw: Any) -> Plan:
        counted.append(1)
        return plan(*args, **kw)

    for _ in range(repeat):
        counted.clear()
        start = time.perf_counter()
        out = plan_pending(snap, counting, planner=planner, **kw)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(counted), out


def overtaken(entries: list[JobEntry], out: dict[Key, Decision]) -> int:
    """Pairs (older waiting, newer placed)."""
    placed = {k for k, d in out.items() if d.job_plan is not None}
    return sum(
        1
        for i, older in enumerate(entries)
        for newer in entries[i + 1 :]
        if older.key not in placed and newer.key in placed
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[47, 500])
    ap.add_argument("--jobs", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--planner", default="hulk")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"planner {args.planner}, median of {args.repeat} rounds, every server free")
    print(
        f"{'servers':>7} {'jobs':>4} | {'by age: calls':>13} {'s':>6} {'placed':>6} "
        f"{'overtaken':>9} | {'no age: calls':>13} {'s':>6} {'placed':>6} {'overtaken':>9} "
        f"| {'time ratio':>10}"
    )
    for n in args.servers:
        cluster = paper_cluster() if n == 47 else random_cluster(n, seed=n)
        for k in args.jobs:
            row = []
            for aged in (True, False):
                entries = queue(k, aged)
                secs, calls, out = timed(snapshot(cluster, entries), args.planner, args.repeat)
                placed = sum(d.job_plan is not None for d in out.values())
                row.append((calls, secs, placed, overtaken(queue(k, True), out)))
            (c1, s1, p1, o1), (c2, s2, p2, o2) = row
            print(
                f"{n:>7} {k:>4} | {c1:>13} {s1:>6.2f} {p1:>6} {o1:>9} | {c2:>13} {s2:>6.2f} "
                f"{p2:>6} {o2:>9} | {s1 / s2:>9.2f}x"
            )


if __name__ == "__main__":
    main()
