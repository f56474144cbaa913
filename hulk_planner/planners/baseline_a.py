"""Baseline A (the Hulk paper): data parallelism on every server whose memory holds the whole
model. Each server trains a full replica; gradients are all-reduced over a ring of all of
them (in the listed order, but for servers that cannot reach the next: see
``layout.linked_order``). Several jobs divide the fitting servers as
``split.split_servers`` says."""

from __future__ import annotations

from collections.abc import Sequence

from hulk_planner.cost import CostModel, gib_text, micro_batches, server_capacity, stage_memory
from hulk_planner.layout import linked_names
from hulk_planner.model import Job, JobPlan, Plan, Server, Stage, Unplaced
from hulk_planner.planners.split import split_servers


def holds_model(job: Job, server: Server) -> bool:
    return stage_memory(job, job.model.layers, 1) <= server_capacity(server)


def data_over(cost: CostModel, job: Job, names: Sequence[str]) -> JobPlan | None:
    """A replica on each server of ``names`` that holds the whole model, the all-reduce ring
    in their order (but for servers that cannot reach the next); None if none holds it."""
    fitting = [n for n in names if holds_model(job, cost.cluster.server(n))]
    if not fitting:
        return None
    nodes = tuple(linked_names(cost.net, fitting, ring=True))
    return JobPlan(
        job.name, (Stage((0, job.model.layers), nodes, "data"),), micro_batches(job, len(nodes))
    )


def plan_baseline_a(cost: CostModel, jobs: Sequence[Job]) -> Plan:
    unplaced = []
    fitting = []
    for job in jobs:
        if any(holds_model(job, s) for s in cost.cluster.servers):
            fitting.append(job)
        else:
            need = stage_memory(job, job.model.layers, 1)
            biggest = max(server_capacity(s) for s in cost.cluster.servers)
            unplaced.append(  # (gib_text: a small model's "needs 0 GiB ... 0 GiB": a review)
                Unplaced(
                    job.name,
                    f"no server holds the whole model: needs {gib_text(need)}, "
                    f"the largest server has {gib_text(biggest)} usable",
                )
            )
    # a job's share needs one server that holds the model (need 0); the largest jobs, by
    # their memory need, still choose first (split_servers)
    shares, reasons = split_servers(cost, fitting, eligible=holds_model, need=lambda job: 0.0)
    placed = []
    for job in fitting:
        jp = data_over(cost, job, shares[job.name]) if job.name in shares else None
        if jp is None:
            unplaced.append(Unplaced(job.name, reasons.get(job.name, "no fitting server left")))
        else:
            placed.append(jp)
    return cost.with_predictions(Plan("baseline-a", tuple(placed), tuple(unplaced)), jobs)
