"""The planning facade: ``plan(cluster, jobs, planner=...)``.

Planners (``PLANNERS``): ``hulk`` (the default), ``search``, ``baseline-a``, ``baseline-b``,
``baseline-c``. All return a ``Plan`` whose placed jobs carry the cost model's predicted step
time; a job that cannot be placed is listed in ``plan.unplaced`` with the reason, never
dropped. ``NoFeasiblePlan`` is raised when no job at all can be placed.

With ``previous`` (the plan now running), jobs of that plan keep their healthy servers:
each is first repaired in place (``layout.repair_job``: only lost servers are replaced) and
the repair is kept when its step time is within ``REPAIR_TOLERANCE`` of the job's previous
prediction; otherwise the job is planned again, starting from where it was, with a small
cost for every server it moves. New jobs are planned on the servers left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hulk_planner.cost import CostModel, validate_plan
from hulk_planner.errors import InvalidRequest, NoFeasiblePlan
from hulk_planner.gnn import gnn_planner
from hulk_planner.layout import repair_job
from hulk_planner.model import Cluster, Job, JobPlan, Plan, Unplaced, check_positive
from hulk_planner.planners.baseline_a import plan_baseline_a
from hulk_planner.planners.baseline_b import plan_baseline_b
from hulk_planner.planners.baseline_c import plan_baseline_c
from hulk_planner.planners.search import search_plan

REPAIR_TOLERANCE = 0.10
SEARCH_BUDGET_S = 10.0
MAX_TIME_BUDGET_S = 86_400.0  # a day: more can only be a typo (1e9 s ran on unbounded)


@dataclass(frozen=True, slots=True)
class Options:
    seed: int = 0
    time_budget_s: float | None = None
    max_iterations: int | None = None
    initial: dict[str, str] | None = None
    sticky: dict[str, str] | None = None


def _search(cost: CostModel, jobs: Sequence[Job], o: Options) -> Plan:
    return search_plan(
        cost,
        jobs,
        seed=o.seed,
        time_budget_s=o.time_budget_s
        if o.time_budget_s is not None
        else (math.inf if o.max_iterations is not None else SEARCH_BUDGET_S),
        max_iterations=o.max_iterations,
        initial_assignment=o.initial,
        previous=o.sticky,
    )


Planner = Callable[[CostModel, Sequence[Job], Options], Plan]
PLANNERS: dict[str, Planner] = {
    "hulk": gnn_planner,  # the GNN planner (hulk_planner/gnn, docs/gnn.md)
    "gnn": gnn_planner,
    "search": _search,
    "baseline-a": lambda cost, jobs, o: plan_baseline_a(cost, jobs),
    "baseline-b": lambda cost, jobs, o: plan_baseline_b(cost, jobs),
    "baseline-c": lambda cost, jobs, o: plan_baseline_c(cost, jobs),
}
ADAPTS_TO_PREVIOUS = {"hulk", "gnn", "search"}
USES_GNN = frozenset({"hulk", "gnn"})  # the planners that load the GNN's weights


def plan(
    cluster: Cluster,
    jobs: Sequence[Job],
    planner: str = "hulk",
    *,
    seed: int = 0,
    time_budget_s: float | None = None,
    max_iterations: int | None = None,
    previous: Plan | None = None,
    cost: CostModel | None = None,
) -> Plan:
    """Place ``jobs`` on ``cluster`` with the named planner."""
    if planner not in PLANNERS:
        raise InvalidRequest(
            "--planner", f"unknown planner {planner!r}", f"use one of {', '.join(PLANNERS)}"
        )
    names = [j.name for j in jobs]
    for n in names:
        if names.count(n) > 1:
            raise InvalidRequest("metadata.name", f"job {n!r} is given twice", "rename one")
    if time_budget_s is not None:
        check_positive("--time-budget", time_budget_s, at_most=MAX_TIME_BUDGET_S)
    cost = cost or CostModel(cluster)
    if not jobs:
        return Plan(planner)
    options = Options(seed, time_budget_s, max_iterations)
    if previous is None or planner not in ADAPTS_TO_PREVIOUS:
        result = PLANNERS[planner](cost, jobs, options)
    else:
        result = _replan(cost, jobs, planner, options, previous)
    result = _drop_infeasible(cost, cost.with_predictions(result, jobs), jobs)
    # the name asked for (hulk runs the GNN); "gnn" is another name for it, and one planner
    # under two names split a script's plans by planner (a user trial)
    result = replace(result, planner="hulk" if planner == "gnn" else planner)
    if not result.jobs and result.unplaced:
        raise NoFeasiblePlan(
            "; ".join(f"{u.name}: {u.reason}" for u in result.unplaced), result.unplaced
        )
    validate_plan(result, cluster, jobs)
    return result


def _drop_infeasible(cost: CostModel, result: Plan, jobs: Sequence[Job]) -> Plan:
    """Report as unplaced any job whose plan the cost model scores ``inf`` (the baselines
    spread a job over every server of its share, even servers that cannot reach each other)."""
    bad = [jp for jp in result.jobs if not math.isfinite(jp.predicted_iteration_seconds)]
    if not bad:
        return result
    by_name = {j.name: j for j in jobs}
    unplaced = [
        Unplaced(
            jp.name,
            "its servers do not hold it in GPU memory"
            if not cost.breakdown(by_name[jp.name], jp).memory_ok
            else "its servers cannot all reach each other",
        )
        for jp in bad
    ]
    return replace(
        result,
        jobs=tuple(jp for jp in result.jobs if jp not in bad),
        unplaced=result.unplaced + tuple(unplaced),
    )


def unkept(old: JobPlan, job: Job | None) -> str | None:
    """Why a re-plan does not keep ``old`` (a job of the previous plan) where it is, or None
    if it tries to (keeping its healthy servers)."""
    if job is None:
        return "is not among the jobs planned: its servers are free for the others"
    if old.stages[-1].layers[1] != job.model.layers:
        return (
            f"lays out {old.stages[-1].layers[1]} layers, the job has {job.model.layers}: "
            "planned afresh"
        )
    if any(st.parallelism != "data" for st in old.stages):
        return (
            "has tensor-parallel stages (baseline-c), which a re-plan does not keep: planned afresh"
        )
    return None


def _replan(
    cost: CostModel, jobs: Sequence[Job], planner: str, options: Options, previous: Plan
) -> Plan:
    alive = set(cost.cluster.index)
    requested = {j.name: j for j in jobs}
    held = {n for jp in previous.jobs if jp.name in requested for n in jp.nodes if n in alive}
    free = alive - held
    kept: list[JobPlan] = []
    for old in previous.jobs:
        job = requested.get(old.name)
        if job is None or unkept(old, job) is not None:
            continue  # not asked for, its model changed, or tensor stages: planned afresh
        fixed = repair_job(cost, job, old, free)
        limit = old.predicted_iteration_seconds
        if fixed is not None and (
            math.isnan(limit) or fixed.predicted_iteration_seconds <= limit * (1 + REPAIR_TOLERANCE)
        ):
            kept.append(fixed)
            free -= set(fixed.nodes)
    kept_names = {jp.name for jp in kept}
    rest = [j for j in jobs if j.name not in kept_names]
    if not rest:
        return Plan(planner, tuple(kept))
    taken = {n for jp in kept for n in jp.nodes}
    sub = cost.cluster.without(taken)
    sticky = {n: jp.name for jp in previous.jobs for n in jp.nodes if n in alive}
    initial = {n: j for n, j in sticky.items() if n not in taken and j in requested}
    sub_cost = CostModel(sub)
    more = PLANNERS[planner](sub_cost, rest, replace(options, initial=initial, sticky=sticky))
    return Plan(planner, tuple(kept) + more.jobs, more.unplaced, more.notes)
