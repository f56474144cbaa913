"""Baseline B (the Hulk paper): GPipe over all servers. One pipeline runs through every server
of the job's share in the cluster's listed order (no topology awareness; where a server
cannot reach the next, the next listed one it can reach comes first), one stage per
server (at most one per layer, the fastest servers kept), layers balanced to each server's
compute within its memory, as GPipe's partitioner does. Several jobs divide the cluster as
``split.split_servers`` says."""

from __future__ import annotations

from collections.abc import Sequence

from hulk_planner.cost import CostModel, micro_batches
from hulk_planner.layout import balance_layers, linked_names, make_job_plan
from hulk_planner.model import Job, JobPlan, Plan, Unplaced
from hulk_planner.planners.split import split_servers


def gpipe_over(cost: CostModel, job: Job, names: Sequence[str]) -> JobPlan | None:
    keep = set(sorted(names, key=lambda n: -cost.flops[cost.net.index[n]])[: job.model.layers])
    stages = [[n] for n in linked_names(cost.net, [n for n in names if n in keep])]
    counts = balance_layers(cost, job, stages, micro_batches(job, 1))
    return None if counts is None else make_job_plan(job, stages, counts)


def plan_baseline_b(cost: CostModel, jobs: Sequence[Job]) -> Plan:
    shares, reasons = split_servers(cost, jobs)
    placed, unplaced = [], []
    for job in jobs:
        jp = gpipe_over(cost, job, shares[job.name]) if job.name in shares else None
        if jp is None:
            why = reasons.get(job.name, "its layers do not fit in its servers' memory")
            unplaced.append(Unplaced(job.name, why))
        else:
            placed.append(jp)
    return cost.with_predictions(Plan("baseline-b", tuple(placed), tuple(unplaced)), jobs)
