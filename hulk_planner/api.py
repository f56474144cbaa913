"""The planning facade: ``plan(cluster, jobs, planner=...)``.

Planners (``PLANNERS``): ``hulk`` (the default), ``search``, ``baseline-a``, ``baseline-b``,
``baseline-c``. All return a ``Plan`` whose placed jobs carry the cost model's predicted step
time; a job that cannot be placed is listed in ``plan.unplaced`` with the reason, never
dropped. ``NoFeasiblePlan`` is raised when no job at all can be placed.

With ``previous`` (the plan now running), jobs of that plan keep their healthy servers:
each is first repaired in place (``layout.repair_job``: only lost servers are replaced) and
the repair is kept when its step time is within ``REPAIR_TOLERANCE`` of the job's previous
prediction; otherwise the job is planned again, starting from where it was, with a small
cost for every server it moves, and the repair still stands unless that new layout is more
than ``REPAIR_TOLERANCE`` faster or other jobs' new plans took servers the repair needs;
the plan's ``notes`` say why a repair was not kept (``repair_declined``). New jobs are
planned on the servers left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from hulk_planner.cost import CostModel, communicating_pairs, validate_plan
from hulk_planner.errors import InvalidRequest, NoFeasiblePlan, each_error, one_or_all
from hulk_planner.gnn import gnn_planner
from hulk_planner.layout import repair_job
from hulk_planner.model import Cluster, Job, JobPlan, Plan, Unplaced, check_positive, check_seed
from hulk_planner.planners.baseline_a import plan_baseline_a
from hulk_planner.planners.baseline_b import plan_baseline_b
from hulk_planner.planners.baseline_c import plan_baseline_c
from hulk_planner.planners.search import search_plan
from hulk_planner.regions import by_priority, plan_in_regions, resolve_regions, tiered

if TYPE_CHECKING:
    from hulk_planner.gnn.planner import SharedScores

REPAIR_TOLERANCE = 0.10
NOT_REPAIRED = "not repaired in place"  # a plan note's words: ``job X: not repaired ...: why``
SEARCH_BUDGET_S = 10.0
MAX_TIME_BUDGET_S = 86_400.0  # a day: more can only be a typo (1e9 s ran on unbounded)
MAX_MOVES = 10**7  # moves (max_iterations, --moves) above this can only be a typo: hours


@dataclass(frozen=True, slots=True)
class Options:
    seed: int = 0
    time_budget_s: float | None = None
    max_iterations: int | None = None
    initial: dict[str, str] | None = None
    sticky: dict[str, str] | None = None
    weights: str | None = None  # the GNN's (hulk, gnn); None: $HULK_GNN_WEIGHTS or the shipped
    shared: SharedScores | None = None  # the GNN's scores of a larger cluster (hulk, gnn)


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
    jobs: Iterable[Job],
    planner: str = "hulk",
    *,
    seed: int = 0,
    time_budget_s: float | None = None,
    max_iterations: int | None = None,
    previous: Plan | None = None,
    cost: CostModel | None = None,
    allowed_regions: Mapping[str, Sequence[str]] | None = None,
    weights: str | PathLike[str] | None = None,
    shared: SharedScores | None = None,
) -> Plan:
    """Place ``jobs`` on ``cluster`` with the named planner (``PLANNERS``).

    As the operator plans: jobs of a higher ``Job.priority`` are planned first (not by the
    baselines, which split the servers among all jobs), never on the servers a job of
    ``previous`` still asked for holds, and a job
    named in ``allowed_regions`` (job name -> region names, a HulkTrainingJob's
    ``spec.allowedRegions``) gets servers of those regions only (``regions.plan_in_regions``;
    the groups share the time budget).
    ``previous``: the plan now running, whose jobs keep their healthy servers where they can.
    ``time_budget_s`` or ``max_iterations`` bound the search (and hulk's refinement); with
    ``max_iterations`` alone a seed gives the same plan on any machine. ``weights``: a
    ``hulk train`` weights file for the hulk planner (default ``$HULK_GNN_WEIGHTS``, else
    the shipped weights). ``shared``: the hulk planner's scores of a cluster ``cluster``
    is part of, with ``jobs`` among its (``plan_in_regions`` plans each group with one
    inference on the whole cluster): used in place of an inference, with the weights they
    were made with; jobs planned in groups share their own. ``cost``: a ``CostModel`` of
    ``cluster`` to reuse (it caches the network; plans are the same without it), used where
    every job is planned on the whole cluster: with priorities or ``allowed_regions`` each
    group's servers get their own.
    Bad arguments raise ``InvalidRequest`` naming the argument; a
    plan that places no job raises ``NoFeasiblePlan``."""
    jobs = _check_args(cluster, jobs, planner, seed, max_iterations, previous, cost)
    if shared is not None:
        from hulk_planner.gnn.planner import SharedScores

        if not isinstance(shared, SharedScores):
            raise InvalidRequest(
                "shared",
                f"must be SharedScores, got {type(shared).__name__}",
                "make them with hulk_planner.gnn.planner.shared_scores, or drop them",
            )
    # the name asked for (hulk runs the GNN); "gnn" is another name for it, and one planner
    # under two names split a script's plans by planner (a user trial; and every path
    # writes it, those of priorities and allowedRegions too: a review)
    planner = "hulk" if planner == "gnn" else planner
    if time_budget_s is not None:
        # (the library's own name: it said "--time-budget" to a script; a trial)
        check_positive("time_budget_s", time_budget_s, at_most=MAX_TIME_BUDGET_S)
    if weights is not None and planner not in USES_GNN:
        raise InvalidRequest("weights", f"apply to the hulk planner, not {planner}", "drop them")
    limits = _region_limits(cluster, jobs, allowed_regions)
    priorities = by_priority(planner)
    if tiered(jobs, limits, priorities):
        return plan_in_regions(
            cluster,
            jobs,
            limits,
            planner,
            previous=previous,
            priorities=priorities,
            seed=seed,
            time_budget_s=time_budget_s,
            max_iterations=max_iterations,
            weights=weights,
        )
    cost = cost or CostModel(cluster)
    if not jobs:
        return Plan(planner)
    options = Options(seed, time_budget_s, max_iterations, weights=_path(weights), shared=shared)
    if previous is None or planner not in ADAPTS_TO_PREVIOUS:
        result = PLANNERS[planner](cost, jobs, options)
    else:
        result = _replan(cost, jobs, planner, options, previous)
    result = _drop_infeasible(cost, cost.with_predictions(result, jobs), jobs)
    result = replace(result, planner=planner)
    if not result.jobs and result.unplaced:
        raise NoFeasiblePlan(
            "; ".join(f"{u.name}: {u.reason}" for u in result.unplaced), result.unplaced
        )
    validate_plan(result, cluster, jobs)
    return result


def _path(weights: str | PathLike[str] | None) -> str | None:
    return None if weights is None else str(Path(weights))


def _check_args(
    cluster: object,
    jobs: object,
    planner: object,
    seed: object,
    max_iterations: object,
    previous: object,
    cost: object,
) -> tuple[Job, ...]:
    """``plan``'s arguments checked before any planning (before, a Job given for the list,
    a string for a Job or a dict for ``previous`` surfaced as TypeError or AttributeError
    deep inside, and jobs given as a generator were read once and planned as none: a
    trial); the jobs as a tuple."""
    if not isinstance(planner, str) or planner not in PLANNERS:
        raise InvalidRequest(
            "planner", f"unknown planner {planner!r}", f"use one of {', '.join(PLANNERS)}"
        )
    if not isinstance(cluster, Cluster):
        raise InvalidRequest(
            "cluster",
            f"must be a Cluster, got {type(cluster).__name__}",
            "build one with Cluster(...), or read a topology file with "
            "hulk_planner.io.load_cluster",
        )
    if isinstance(jobs, Job) or isinstance(jobs, str | bytes | Mapping):
        raise InvalidRequest(
            "jobs", f"must be a list of Job, got {type(jobs).__name__}", "give a list: [job]"
        )
    if not isinstance(jobs, Iterable):
        raise InvalidRequest("jobs", f"must be a list of Job, got {type(jobs).__name__}")
    out = tuple(jobs)
    for i, job in enumerate(out):
        if not isinstance(job, Job):
            raise InvalidRequest(
                f"jobs[{i}]",
                f"must be a Job, got {job!r}",
                "build it with Job(name, model, global_batch_size, micro_batch_size)",
            )
    names = [j.name for j in out]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise InvalidRequest(f"jobs[{i}].name", f"job {n!r} is given twice", "rename one")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidRequest("seed", f"must be a whole number, got {seed!r}", "e.g. seed=0")
    check_seed("seed", seed)  # (as hulk plan --seed: -1 and 10**30 were taken; a trial)
    if max_iterations is not None:  # (10**30 searched for ever: a trial)
        check_positive("max_iterations", max_iterations, integer=True, at_most=MAX_MOVES)
    if previous is not None and not isinstance(previous, Plan):
        raise InvalidRequest(
            "previous",
            f"must be the Plan now running, got {type(previous).__name__}",
            "read a plan file with hulk_planner.io.load_plan",
        )
    if cost is not None and (not isinstance(cost, CostModel) or cost.cluster != cluster):
        raise InvalidRequest(
            "cost",
            "must be a CostModel of the cluster given",
            "drop it (one is made), or give CostModel(cluster)",
        )
    return out


def _region_limits(
    cluster: Cluster, jobs: Sequence[Job], allowed: Mapping[str, Sequence[str]] | None
) -> dict[str, tuple[str, ...]]:
    """``allowed_regions`` checked as ``hulk plan`` checks ``spec.allowedRegions``."""
    if not allowed:
        return {}
    if not isinstance(allowed, Mapping):
        raise InvalidRequest(
            "allowed_regions",
            f"must map job names to region names, got {type(allowed).__name__}",
            'e.g. {"my-job": ["tokyo"]}',
        )
    names = {j.name for j in jobs}
    out = {}
    errors: list[InvalidRequest] = []  # every entry's, a line each (the first alone: a trial)
    for name, regions in allowed.items():
        field = f"allowed_regions[{name!r}]"
        try:
            if name not in names:
                raise InvalidRequest(field, "names no job given", f"use one of {sorted(names)}")
            regions = list(regions) if isinstance(regions, tuple) else regions
            out[name] = resolve_regions(field, regions, cluster, name)
        except InvalidRequest as exc:
            errors.extend(each_error(exc))
    if errors:
        raise one_or_all(errors)
    return out


def _unreached(cost: CostModel, jp: JobPlan) -> str:
    """Why a plan that fits in memory cannot run: a pair of servers it sends over (``cost.
    communicating_pairs``: neighbouring stages, all-reduce rings) with no link, named
    (before, none was; then any pair of its servers was, often one the plan never uses,
    where a link would change nothing: a review)."""
    sent = communicating_pairs(jp)
    pairs = [(a, b) for a, b in sent if not cost.net.reachable(a, b)]
    if not pairs:
        return "its servers cannot all reach each other"
    a, b = pairs[0]
    return (
        f"its servers cannot all reach each other: {len(pairs)} of the {len(sent)} server "
        f"pair(s) its plan sends over have no link, such as {a} and {b}"
    )


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
            else _unreached(cost, jp),
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
    # listed in the order the jobs were given, as a plan afresh lists them (before, the
    # jobs kept came first, and a re-plan's file did not diff against the plan before it:
    # a user trial)
    order = {j.name: k for k, j in enumerate(jobs)}
    held = {n for jp in previous.jobs if jp.name in requested for n in jp.nodes if n in alive}
    free = alive - held
    kept: list[JobPlan] = []
    declined: list[str] = []
    slow: dict[str, tuple[JobPlan, JobPlan]] = {}  # job -> (its old plan, its repair)
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
        elif fixed is not None:  # too slow for its old plan: judged against a new one too
            slow[old.name] = (old, fixed)
        else:
            declined.append(repair_note(old.name, _not_repaired(old, fixed, alive, free)))
    kept_names = {jp.name for jp in kept}
    rest = [j for j in jobs if j.name not in kept_names]
    if not rest:
        return Plan(planner, tuple(sorted(kept, key=lambda jp: order[jp.name])))
    taken = {n for jp in kept for n in jp.nodes}
    sub = cost.cluster.without(taken)
    sticky = {n: jp.name for jp in previous.jobs for n in jp.nodes if n in alive}
    initial = {n: j for n, j in sticky.items() if n not in taken and j in requested}
    sub_cost = CostModel(sub)
    more = PLANNERS[planner](sub_cost, rest, replace(options, initial=initial, sticky=sticky))
    placed, unplaced = list(more.jobs), list(more.unplaced)
    for name, (old, fixed) in slow.items():
        k = next((i for i, jp in enumerate(placed) if jp.name == name), None)
        new = placed[k] if k is not None else None
        others = taken | {n for i, jp in enumerate(placed) if i != k for n in jp.nodes}
        bound = math.inf if new is None else new.predicted_iteration_seconds
        overlap = bool(set(fixed.nodes) & others)
        if not overlap and fixed.predicted_iteration_seconds <= bound * (1 + REPAIR_TOLERANCE):
            # a new layout gains less than the tolerance (or none fits): the repair moves less
            if k is None:
                placed.append(fixed)
                unplaced = [u for u in unplaced if u.name != name]
            else:
                placed[k] = fixed
            continue
        declined.append(repair_note(name, _not_repaired(old, fixed, alive, free, new, overlap)))
    notes = tuple(declined) + more.notes
    ordered = sorted((*kept, *placed), key=lambda jp: order[jp.name])
    return Plan(planner, tuple(ordered), tuple(unplaced), notes)


def _not_repaired(
    old: JobPlan,
    fixed: JobPlan | None,
    alive: Collection[str],
    free: Collection[str],
    new: JobPlan | None = None,
    held: bool = False,
) -> str:
    """Why ``repair_job``'s repair of ``old`` (``fixed``) was not kept: the words of a
    re-plan that moved healthy stages too (before, the operator's Event gave the old and
    new step times and not why the stages were not kept where they were: a user trial)."""
    lost = [n for n in old.nodes if n not in alive]
    pool = [n for n in free if n not in old.nodes]
    if fixed is not None:
        # (a job of one server has no other stage: "keeping its other stages" read
        # oddly there; a user trial)
        others = len(set(old.nodes)) > len(lost)
        how = (
            ("keeping its other stages" if others else "moved whole to a free server")
            if lost
            else "as it is"
        )
        if held:
            return f"{how}, it needs servers other jobs' new plans hold"
        now, was = fixed.predicted_iteration_seconds, old.predicted_iteration_seconds
        than = f"the {was:.3g} s it had"
        if new is not None:
            than = f"both {than} and the {new.predicted_iteration_seconds:.3g} s laid out again"
        return (
            f"{how}, it would predict {now:.3g} s a step, more than "
            f"{1 + REPAIR_TOLERANCE:g}x {than}"
        )
    if not lost:
        return (
            "its servers as they are cannot run it (a stage no longer fits its server, or a "
            "pair of them lost its link)"
        )
    listed = listed_names(lost)
    if not pool:
        return f"no free server to take the place of {listed}"
    if len(pool) < len(lost):
        return f"{len(pool)} free server(s) for the {len(lost)} it lost ({listed})"
    return (
        f"no free server can take the place of {listed} (none near its stage's neighbours "
        "both holds the stage and has a link to them)"
    )


def listed_names(names: Sequence[str], most: int = 4) -> str:
    """``a, b, c, d and 2 more``."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def repair_note(job: str, why: str) -> str:
    """A plan's note that ``job``'s repair in place was not kept, and ``why``."""
    return f"job {job}: {NOT_REPAIRED}: {why}"


def repair_declined(plan: Plan, job: str) -> str | None:
    """Why ``plan`` (a re-plan's) did not keep ``job``'s stages where they were, from its
    notes (:func:`repair_note`); None where it kept them or planned the job afresh."""
    head = repair_note(job, "")
    return next((n[len(head) :] for n in plan.notes if n.startswith(head)), None)
