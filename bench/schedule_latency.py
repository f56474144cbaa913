"""The cost model's step time against an event simulation of the 1F1B schedule the reference
trainer runs, on the paper's plans and on random pipelines.

    python bench/schedule_latency.py [--moves N] [--pipelines N]

``hulk_planner.schedule.simulate`` runs one step of a plan's pipeline in the order of
``examples/train_stage.schedule`` (1F1B), with the cost model's stage and link times
(``CostModel.stage_terms``), and the gradient all-reduce added as the model adds it. For
each job of Hulk's, baseline B's and the search's plans on the paper's cluster (seed 0,
``--moves`` moves, so the same plans on any machine) this prints:

- ``model``: the cost model's step time; ``1F1B``: the simulated step, and model / 1F1B;
- ``no wait``: the model without 1F1B's window (``cost.window_wait``; the formula before
  it counted the window, which paced the steady phase by the slowest stage or link alone,
  the links' latency hidden as GPipe hides it), over 1F1B;
- ``GPipe mem``: the largest stage's memory were all m micro-batches held (GPipe), over
  its server's usable memory (over 1: GPipe would not fit where 1F1B does);

and baseline B's step time over Hulk's, by the model and by the simulation. Then, over
``--pipelines`` random pipelines (1-12 stages, 1-40 micro-batches, links' latency from
free to 50x the slowest stage's time, transfers up to ``--max-transfer`` seconds), the
spread of model / 1F1B with and without the window's wait.
Figures of the model's and the simulation's own, nothing measured on hardware.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys
from pathlib import Path

from hulk_planner.api import plan
from hulk_planner.cost import CostModel, server_capacity, stage_memory
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import Job, JobPlan
from hulk_planner.schedule import Order, random_pipeline, simulate

TRAINER = Path(__file__).resolve().parents[1] / "examples" / "train_stage.py"


def trainer_schedule() -> Order:
    spec = importlib.util.spec_from_file_location("train_stage", TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_stage"] = module
    spec.loader.exec_module(module)
    return module.schedule  # type: ignore[no-any-return]


def one_job(
    cost: CostModel, job: Job, jp: JobPlan, order: Order
) -> tuple[float, float, float, float]:
    """(model seconds, simulated 1F1B seconds, the model without the window's wait, GPipe
    memory over usable) of one job's plan."""
    t = cost.stage_terms(job, jp)
    m = jp.micro_batches
    step = cost.breakdown(job, jp)
    model = step.total
    lat = [a - b for a, b in zip(t.link_t, t.link_bw, strict=True)]
    sim = simulate(t.stage_t, lat, t.link_bw, m, order) + t.dp
    no_wait = model - step.window
    by = {s.name: s for s in cost.cluster.servers}
    gpipe = 0.0
    for st in jp.stages:
        split = len(st.nodes) if st.parallelism == "tensor" else 1
        room = min(server_capacity(by[n]) for n in st.nodes)
        gpipe = max(gpipe, stage_memory(job, st.num_layers, m, split) / room)
    return model, sim, no_wait, gpipe


def table(
    cost: CostModel, jobs: list[Job], name: str, moves: int, order: Order
) -> dict[str, tuple[float, float]]:
    """Prints one planner's table; returns job -> (model seconds, 1F1B seconds)."""
    result = plan(cost.cluster, jobs, name, seed=0, max_iterations=moves)
    print(
        f"{name:12} {'stages':>6} {'m':>4} {'model':>10} {'1F1B':>10} {'ratio':>7} "
        f"{'no wait':>8} {'GPipe mem':>10}"
    )
    out: dict[str, tuple[float, float]] = {}
    for job in jobs:
        jp = result.job(job.name)
        if jp is None or not math.isfinite(cost.job_seconds(job, jp)):
            print(f"{job.name:12} not placed")
            continue
        model, sim, no_wait, gpipe = one_job(cost, job, jp, order)
        out[job.name] = (model, sim)
        print(
            f"{job.name:12} {len(jp.stages):>6} {jp.micro_batches:>4} {model:>9.3f}s "
            f"{sim:>9.3f}s {model / sim:>6.3f}x {no_wait / sim:>7.3f}x {gpipe:>9.2f}x"
        )
    return out


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def spread(xs: list[float]) -> str:
    s = sorted(xs)
    at = [0.0, 0.01, 0.5, 0.99, 1.0]
    return " / ".join(f"{s[min(int(q * len(s)), len(s) - 1)]:.3f}" for q in at)


def random_pipelines(n: int, order: Order, max_transfer: float) -> None:
    rng = random.Random(0)
    with_wait, without = [], []
    for _ in range(n):
        t, lat, xfer, m = random_pipeline(rng, max_transfer)
        link = [a + b for a, b in zip(lat, xfer, strict=True)]
        step = CostModel._combine(t, link, xfer, 0.0, m, True)
        sim = simulate(t, lat, xfer, m, order)
        with_wait.append(step.total / sim)
        without.append((step.total - step.window) / sim)
    print(
        f"== {n} random pipelines, transfers up to {max_transfer:g} s: model / 1F1B "
        "(min / 1% / median / 99% / max)"
    )
    print(f"with the window's wait:    {spread(with_wait)}")
    print(f"without (the GPipe pace):  {spread(without)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=2000, help="hulk's refinement moves (2000)")
    ap.add_argument("--pipelines", type=int, default=4000, help="random pipelines (4000)")
    ap.add_argument(
        "--max-transfer",
        type=float,
        default=0.5,
        help="the random links' largest transfer, seconds (0.5; stages take 0.1-2 s)",
    )
    args = ap.parse_args()
    order = trainer_schedule()
    cost = CostModel(paper_cluster())
    for count in (4, 6):
        jobs = paper_jobs(count)
        print(f"== paper's cluster, {count} jobs (seed 0; refined with {args.moves} moves)")
        found = {name: table(cost, jobs, name, args.moves, order) for name in ("hulk", "search")}
        b = table(cost, jobs, "baseline-b", args.moves, order)
        hulk = found["hulk"]
        both = sorted(hulk.keys() & b.keys())
        model = gmean([b[j][0] / hulk[j][0] for j in both])
        sim = gmean([b[j][1] / hulk[j][1] for j in both])
        print(
            f"baseline-b / hulk over the {len(both)} jobs both place: {model:.2f}x by the model, "
            f"{sim:.2f}x by the 1F1B simulation\n"
        )
    random_pipelines(args.pipelines, order, args.max_transfer)


if __name__ == "__main__":
    main()
