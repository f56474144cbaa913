"""Baseline C (the Hulk paper): Megatron-style tensor parallelism over all servers. Every
server of the job's share holds a slice of every layer; each layer costs four all-reduces of
its activations across all of them per micro-batch (a ring in the cluster's order, but
for servers that cannot reach the next: ``layout.linked_order``). Servers too small for an
even slice are left out. Several jobs divide the cluster as
``split.split_servers`` says."""

from __future__ import annotations

from collections.abc import Sequence

from hulk_planner.cost import CostModel, micro_batches, stage_memory
from hulk_planner.layout import linked_names
from hulk_planner.model import Job, JobPlan, Plan, Stage, Unplaced
from hulk_planner.planners.split import region_grouped, split_servers


def tensor_over(cost: CostModel, job: Job, names: Sequence[str]) -> JobPlan | None:
    """Even slices over the most servers of ``names`` that can each hold one (Megatron
    splits every layer evenly, so the smallest server sets the slice size)."""
    order = {s.name: i for i, s in enumerate(region_grouped(cost.cluster.servers))}
    by_room = sorted(names, key=lambda n: -cost.capacity[cost.net.index[n]])
    for t in range(len(by_room), 0, -1):
        room = cost.capacity[cost.net.index[by_room[t - 1]]]
        if stage_memory(job, job.model.layers, 1, t) <= room:
            ring = sorted(by_room[:t], key=order.__getitem__)
            nodes = tuple(linked_names(cost.net, ring, ring=True))
            stage = Stage((0, job.model.layers), nodes, "tensor")
            return JobPlan(job.name, (stage,), micro_batches(job, 1))
    return None


def plan_baseline_c(cost: CostModel, jobs: Sequence[Job]) -> Plan:
    shares, reasons = split_servers(cost, jobs)
    placed, unplaced = [], []
    for job in jobs:
        if job.name not in shares:
            unplaced.append(Unplaced(job.name, reasons[job.name]))
            continue
        jp = tensor_over(cost, job, shares[job.name])
        if jp is None:
            unplaced.append(Unplaced(job.name, "its slices do not fit in its servers' memory"))
        else:
            placed.append(jp)
    return cost.with_predictions(Plan("baseline-c", tuple(placed), tuple(unplaced)), jobs)
