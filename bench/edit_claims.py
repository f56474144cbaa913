"""What waiting edits cost a planning round: one round of the operator's own
``rounds.plan_pending`` over a queue of pending jobs, with 0, 1 or 2 running jobs whose
edits wait for servers (``edits``: each planned, edited, in its turn, and the servers of its
plan kept from the jobs ranked below it; ``Placer.edits_waiting`` lists them).

    python bench/edit_claims.py [--servers 47 500] [--jobs 4 8] [--edits 0 1 2] [--repeat 3]

The running jobs are OPT-175B copies at priority 10 holding three servers each (their pods),
edited to a model of 30 billion parameters; the queue is copies of the paper's four jobs at
priority 0. A waiting edit whose servers' GPU memory cannot hold it is not planned
(``no_room_now``): here every one is. Printed per row: the planner calls and the median
seconds of a round, the queued jobs placed, and the time over the same round with no
waiting edit.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from queue_round import queue, snapshot, timed

from hulk_operator.entries import JobEntry, Key
from hulk_operator.snapshot import Snapshot
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster


def with_edits(snap: Snapshot, n: int) -> tuple[Snapshot, set[Key]]:
    """``snap`` with ``n`` running jobs (three servers each, by name order) whose edits wait."""
    opt = paper_jobs()[0]
    names = sorted(snap.nodes)
    jobs, held, keys = dict(snap.jobs), dict(snap.held), set()
    for i in range(n):
        own = frozenset(names[3 * i : 3 * i + 3])
        model = replace(opt.model, parameters=30 * 10**9, preset=None)
        job = replace(opt, name=f"edited-{i}", priority=10, model=model)
        e = JobEntry(("ml", job.name), f"uid-edited-{i}", 1, job, None, own, "Running", False)
        jobs[e.key] = e
        held.update(dict.fromkeys(own, e.key))
        keys.add(e.key)
    return replace(snap, jobs=jobs, held=held), keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[47, 500])
    ap.add_argument("--jobs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--edits", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"planner hulk, median of {args.repeat} rounds")
    print(
        f"{'servers':>7} {'jobs':>4} {'edits':>5} | {'calls':>5} {'s':>6} {'placed':>6} "
        f"| {'time ratio':>10}"
    )
    for n in args.servers:
        cluster = paper_cluster() if n == 47 else random_cluster(n, seed=n)
        for k in args.jobs:
            base = None
            for m in args.edits:
                snap, keys = with_edits(snapshot(cluster, queue(k, True)), m)
                secs, calls, out = timed(snap, "hulk", args.repeat, edits=keys)
                base = secs if base is None else base
                placed = sum(d.job_plan is not None for d in out.values())
                print(
                    f"{n:>7} {k:>4} {m:>5} | {calls:>5} {secs:>6.2f} {placed:>6} "
                    f"| {secs / base:>9.2f}x"
                )


if __name__ == "__main__":
    main()
