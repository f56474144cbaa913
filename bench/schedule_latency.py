"""What the pipeline schedule does to Hulk's plans: the cost model against 1F1B and GPipe.

    python bench/schedule_latency.py [--moves N]

The cost model (docs/cost-model.md) paces a pipeline's steady phase by its slowest stage or
link, the links' latency hidden by the micro-batches in flight (as GPipe streams them), and
counts each stage's memory as 1F1B holds it: ``min(m, p - k)`` micro-batches on stage k.
``examples/train_stage.py`` runs 1F1B. Under 1F1B stage k has at most ``p - k``
micro-batches in flight, so its pace is at least its round trip, the compute of stages
k..p-1 and each link between them crossed twice, over ``p - k``: on a slow link that
exceeds the model's pace. For each job of Hulk's plans and of baseline B's (GPipe over the
servers the baselines' split gives it) on the paper's cluster this prints:

- ``model``: the cost model's step time;
- ``1F1B``: the same with that bound on the steady phase's pace (a lower bound of a strict
  1F1B step: each loop waits for its round trip), and its ratio to the model;
- ``GPipe mem``: the largest stage's memory under GPipe (all m micro-batches held) over its
  server's usable memory (over 1: does not fit);
- ``hide``: micro-batches stage k would need in flight to hide its round trip at the
  model's pace, and that stage's memory with them over usable memory (the largest).

and B's step time over Hulk's, by the model and with the bound on both. Plans: seed 0, the
``hulk`` planner's refinement bounded by ``--moves`` (so the same plan on any machine).
Figures of the model's own, nothing measured.
"""

from __future__ import annotations

import argparse
import math

from hulk_planner.api import plan
from hulk_planner.cost import CostModel, server_capacity, stage_memory
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import Job, JobPlan


def one_job(cost: CostModel, job: Job, jp: JobPlan) -> tuple[float, float, float, int, float]:
    """(model seconds, 1F1B-bound seconds, GPipe memory over usable, micro-batches in flight
    to hide the round trips, memory with them over usable) of one job's plan."""
    t = cost.stage_terms(job, jp)
    m, p = jp.micro_batches, len(jp.stages)
    model = cost.job_seconds(job, jp)
    pace = max(max(t.stage_t), max(t.link_bw, default=0.0))
    loops = [sum(t.stage_t[k:]) + 2 * sum(t.link_t[k:]) for k in range(p)]
    pace_1f1b = max([pace] + [loops[k] / min(m, p - k) for k in range(p)])
    one_f = sum(t.stage_t) + 2 * sum(t.link_t) + (m - 1) * pace_1f1b + t.dp
    by = {s.name: s for s in cost.cluster.servers}
    gpipe, hide_mem, hide = 0.0, 0.0, 0
    for k, st in enumerate(jp.stages):
        split = len(st.nodes) if st.parallelism == "tensor" else 1
        room = min(server_capacity(by[n]) for n in st.nodes)
        gpipe = max(gpipe, stage_memory(job, st.num_layers, m, split) / room)
        need = min(m, max(p - k, math.ceil(loops[k] / pace)))
        hide = max(hide, need)
        hide_mem = max(hide_mem, stage_memory(job, st.num_layers, need, split) / room)
    return model, one_f, gpipe, hide, hide_mem


def table(
    cost: CostModel, jobs: list[Job], name: str, moves: int
) -> dict[str, tuple[float, float]]:
    """Prints one planner's table; returns job -> (model seconds, 1F1B-bound seconds)."""
    result = plan(cost.cluster, jobs, name, seed=0, max_iterations=moves)
    print(
        f"{name:12} {'stages':>6} {'m':>4} {'model':>10} {'1F1B':>10} {'ratio':>7} "
        f"{'GPipe mem':>10} {'hide':>5} {'its mem':>8}"
    )
    out: dict[str, tuple[float, float]] = {}
    for job in jobs:
        jp = result.job(job.name)
        if jp is None or not math.isfinite(cost.job_seconds(job, jp)):
            print(f"{job.name:12} not placed")
            continue
        model, one_f, gpipe, hide, hide_mem = one_job(cost, job, jp)
        out[job.name] = (model, one_f)
        print(
            f"{job.name:12} {len(jp.stages):>6} {jp.micro_batches:>4} {model:>9.3f}s "
            f"{one_f:>9.3f}s {one_f / model:>6.3f}x {gpipe:>9.2f}x {hide:>5} {hide_mem:>7.2f}x"
        )
    print(f"1F1B bound / model, geometric mean: {gmean([b / a for a, b in out.values()]):.3f}x")
    return out


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=2000, help="hulk's refinement moves (2000)")
    args = ap.parse_args()
    cost = CostModel(paper_cluster())
    for count in (4, 6):
        jobs = paper_jobs(count)
        print(f"== paper's cluster, {count} jobs (seed 0; hulk refined with {args.moves} moves)")
        hulk = table(cost, jobs, "hulk", args.moves)
        b = table(cost, jobs, "baseline-b", args.moves)
        both = sorted(hulk.keys() & b.keys())
        model = gmean([b[j][0] / hulk[j][0] for j in both])
        bound = gmean([b[j][1] / hulk[j][1] for j in both])
        print(
            f"baseline-b / hulk over the {len(both)} jobs both place: {model:.2f}x by the model, "
            f"{bound:.2f}x with the 1F1B bound on both\n"
        )


if __name__ == "__main__":
    main()
