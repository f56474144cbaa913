"""Jobs limited to some regions (a HulkTrainingJob's ``spec.allowedRegions``) or of
different priorities on a topology file, planned as the operator plans them on a live
cluster: jobs with the same regions and priority together, the highest priority first (of
equal priorities, the group whose regions hold fewer servers first, then in the order
given), each group on the servers of its regions that earlier groups left. (Before, jobs
of different priorities were planned together, and a higher-priority job could get a
slower plan than a lower one: a user trial.) (Before the fewest-servers rule, a job free to go
anywhere, given first, could take every server of a region that a later job of the same
priority was limited to, and that job was left unplaced: a user trial.)

A region is named as in the topology file or as the operator's node label writes it (the
lower-case slug: ``new-delhi`` for ``New Delhi``).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hulk_planner.cost import memory_need_bytes, server_capacity
from hulk_planner.datasets import slug
from hulk_planner.errors import (
    QUOTE_FIX,
    InvalidRequest,
    NoFeasiblePlan,
    each_error,
    one_or_all,
    shown,
)
from hulk_planner.io import placed_documents
from hulk_planner.model import Cluster, Job, Plan, Server, Unplaced
from hulk_planner.planners.search import _gib


def region_limits(
    files: Iterable[tuple[str, Sequence[Any]]], cluster: Cluster, notes: list[str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Job name -> the cluster's regions its ``spec.allowedRegions`` names, for the jobs
    that have the field (documents as ``io.jobs_from_documents`` reads them: those are
    valid jobs). An entry that is not a region of the cluster is an error naming the
    file, the document and the regions there are; one that names a region only by its
    slug adds a line to ``notes``. Every job's errors are told at once, a line each, in
    file order, as the jobs' own are (before, the first job's alone: a user trial); a
    document that is no valid job is checked too (its own errors are told beside these)."""
    out: dict[str, tuple[str, ...]] = {}
    errors: list[InvalidRequest] = []
    for source, doc in placed_documents(files):
        spec = doc.get("spec") if isinstance(doc, Mapping) else None
        allowed = spec.get("allowedRegions") if isinstance(spec, Mapping) else None
        if allowed is None:
            continue
        # (a job of its own errors is checked too, told with them: ``hulk plan``)
        meta = doc.get("metadata")
        name = str(meta.get("name") if isinstance(meta, Mapping) else None)
        field = f"{source}: spec.allowedRegions"
        try:
            out[name] = resolve_regions(field, allowed, cluster, name, notes)
        except InvalidRequest as exc:
            errors.extend(each_error(exc))
    if errors:
        raise one_or_all(errors)
    return out


def resolve_regions(
    field: str, allowed: object, cluster: Cluster, job: str, notes: list[str] | None = None
) -> tuple[str, ...]:
    """The cluster's regions that ``allowed`` (a job's list of region names) names; an
    error names ``field`` and the regions there are, each wrong entry's on a line of its
    own (``InvalidRequests``; before, the first alone: a user trial)."""
    by_slug: dict[str, list[str]] = {}
    for r in cluster.regions:
        by_slug.setdefault(slug(r), []).append(r)  # an exact name is looked up first (below)
    if not isinstance(allowed, list):
        raise InvalidRequest(
            field,
            f"must be a list of region names, got {shown(allowed)}",
            f"write it as a list, e.g. [{allowed}]"
            if isinstance(allowed, str)
            else "write it as a list, e.g. [Beijing, Paris]",
        )
    if not allowed:
        raise InvalidRequest(field, "is empty", "list one region or more, or drop it")
    regions: list[str] = []
    errors: list[InvalidRequest] = []
    for k, name in enumerate(allowed):
        try:
            region = _region_of(f"{field}[{k}]", name, cluster, by_slug)
        except InvalidRequest as exc:
            errors.append(exc)
            continue
        # (not for the node label's own spelling, "new-delhi" for "New Delhi": it is the
        # documented form, and the note came at every run of a correct file: a user trial)
        if region != name and name != slug(region) and notes is not None:
            notes.append(
                f"job {job}: spec.allowedRegions[{k}] {name!r} is taken as region "
                f"{region!r} (regions are matched without regard to case, spaces or "
                "punctuation; the operator matches the node label "
                "topology.kubernetes.io/region the same way)"
            )
        regions.append(region)
    if errors:
        raise one_or_all(errors)
    return tuple(dict.fromkeys(regions))


def _region_of(field: str, name: object, cluster: Cluster, by_slug: Mapping[str, list[str]]) -> str:
    """The cluster's region that ``name`` (an entry of allowedRegions, at ``field``) names."""
    if not isinstance(name, str) or not name:  # (the fix, and YAML's words: a trial)
        listed = ", ".join(sorted(cluster.regions)[:6])
        more = ", ..." if len(cluster.regions) > 6 else ""
        fix = (
            QUOTE_FIX
            if isinstance(name, bool | int | float)
            else f"write one of the cluster's regions: {listed}{more}"
        )
        raise InvalidRequest(field, f"must be a region name, got {shown(name)}", fix)
    alike = by_slug.get(slug(name), [])
    if name not in cluster.regions and len(alike) > 1:  # (the first was taken)
        raise InvalidRequest(
            field,
            f"{name!r} names regions {' and '.join(map(repr, alike))} alike",
            "name one exactly as the topology file writes it",
        )
    region = name if name in cluster.regions else next(iter(alike), None)
    if region is None:
        close = difflib.get_close_matches(slug(name), list(by_slug), n=1, cutoff=0.75)
        raise InvalidRequest(
            field,
            f"{name!r} is not a region of cluster {cluster.name}"
            + (f" (did you mean {by_slug[close[0]][0]}?)" if close else ""),
            f"use one of {', '.join(cluster.regions)}",
        )
    return region


def _groups(
    jobs: Sequence[Job],
    limits: Mapping[str, tuple[str, ...]],
    cluster: Cluster,
    priorities: bool = True,
) -> list[list[Job]]:
    """Jobs of the same regions and priority together; the highest priority first
    (``priorities`` False: of the same regions, whatever their priorities)."""
    by_key: dict[tuple[frozenset[str] | None, int], list[Job]] = {}
    for job in jobs:
        key = frozenset(limits[job.name]) if job.name in limits else None
        by_key.setdefault((key, job.priority if priorities else 0), []).append(job)

    def servers(key: frozenset[str] | None) -> int:
        return sum(1 for s in cluster.servers if key is None or s.region in key)

    order = sorted(by_key, key=lambda k: (-k[1], servers(k[0])))
    return [by_key[k] for k in order]


def by_priority(planner: str) -> bool:
    """Whether ``planner`` plans jobs of different priorities one after another: not the
    baselines, which split the servers among all jobs (planned one priority after another,
    the first took every server and the others got none: a user trial;
    docs/cost-model.md, "The baselines' multi-job split")."""
    return not planner.startswith("baseline-")


def tiered(
    jobs: Sequence[Job], limits: Mapping[str, tuple[str, ...]], priorities: bool = True
) -> bool:
    """Whether the jobs are planned in groups (``plan_in_regions``), not all together:
    some are limited to regions, or their priorities differ (where ``priorities``)."""
    return bool(limits) or (priorities and len({j.priority for j in jobs}) > 1)


# How a job comes to be planned before another: by priority, or (the baselines, which
# split the servers among jobs whatever their priorities: ``priorities`` False) by regions
# (before, a baseline's note told a job of the highest priority to raise it: a user trial)
_FIRST = {
    True: "a higher spec.priority plans it first",
    False: "jobs limited to regions of fewer servers are planned first, whatever their priorities",
}
_FIRST_OF_EQUAL = "of one priority, jobs limited to regions of fewer servers are planned first"


def _first(group: Sequence[Job], before: Sequence[Job], priorities: bool) -> str:
    """Why the jobs ``before`` ``group`` were planned first: a higher priority only where
    one of them has it (before, said of jobs of equal priority too, where the narrower
    regions went first: a review)."""
    if not priorities:
        return _FIRST[False]
    mine = max(j.priority for j in group)
    return _FIRST[True] if any(j.priority > mine for j in before) else _FIRST_OF_EQUAL


def _held(
    u: Unplaced, group: Sequence[Job], held: Sequence[Server], reach: float, first: str
) -> str:
    """What jobs planned before ``u``'s group hold of the servers it may use, where they
    would make room for it: ``reach``, the usable bytes of its servers, held or not
    (before: "the 1 server(s) planned on have 144 GiB usable" of a cluster with 2,203, the
    rest held by jobs of a higher priority: a trial)."""
    job = next((j for j in group if j.name == u.name), None)
    if job is None or not held:
        return ""
    need = memory_need_bytes(job)
    if u.reason.startswith("no server holds"):  # data parallel: one server must hold it
        if max(server_capacity(s) for s in held) < need:
            return ""
    elif need > reach:
        return ""
    usable = _gib(sum(server_capacity(s) for s in held) / 2**30)
    return (
        f"; jobs planned before it hold {len(held)} more server(s) it may use, {usable} "
        f"usable ({first})"
    )


def plan_in_regions(
    cluster: Cluster,
    jobs: Sequence[Job],
    limits: Mapping[str, tuple[str, ...]],
    planner: str = "hulk",
    *,
    previous: Plan | None = None,
    priorities: bool = True,
    time_budget_s: float | None = None,
    **options: Any,
) -> Plan:
    """``api.plan`` for jobs some of which may use only ``limits[name]`` regions (see the
    module's docstring). A group that gets nothing lists its jobs under ``unplaced``;
    ``NoFeasiblePlan`` only when no job is placed at all. ``priorities`` False: groups by
    regions alone (the baselines split the servers among all jobs, as without priorities).

    ``previous``: jobs of the running plan keep their servers from other groups' jobs (a
    higher priority never takes a running job's servers, as in the operator; before, a new
    job of a higher priority was planned on them: a user trial); their own group re-plans
    them. The time budget (``time_budget_s``, else the planner's default) is the whole
    run's, an even share to each group (before, each group had all of it: a user trial saw
    ``--time-budget 3`` take 5.7 s)."""
    from hulk_planner.api import USES_GNN, plan

    groups = _groups(jobs, limits, cluster, priorities)
    requested = {j.name for j in jobs}
    running = {  # server -> the job of the running plan on it
        n: jp.name
        for jp in (previous.jobs if previous else ())
        if jp.name in requested
        for n in jp.nodes
    }
    total = _budget(planner, cluster, time_budget_s, options.get("max_iterations"))
    if len(groups) > 1 and planner in USES_GNN:  # one graph and inference for all groups
        from hulk_planner.gnn.planner import shared_scores

        options["shared"] = shared_scores(cluster, jobs, options.get("weights"))
    taken: set[str] = set()
    settled: set[str] = set()  # jobs whose group was planned: their old servers are free
    placed: list[Any] = []
    unplaced: list[Unplaced] = []
    notes: list[str] = []
    for group in groups:
        names = {j.name for j in group}
        regions = limits.get(group[0].name)
        where = f"in spec.allowedRegions {list(regions)}: " if regions else ""
        kept = {n for n, j in running.items() if j not in names and j not in settled}
        out = [
            s.name
            for s in cluster.servers
            if s.name in taken
            or s.name in kept
            or (regions is not None and s.region not in regions)
        ]
        settled |= names
        held = [
            s
            for s in cluster.servers
            if s.name in taken and (regions is None or s.region in regions)
        ]
        # why the jobs that hold them went first: of those jobs alone (before, a higher
        # priority elsewhere was named where jobs of its own priority held them; a review)
        holding = {s.name for s in held}
        holders = {jp.name for jp in placed if holding.intersection(jp.nodes)}
        first = _first(group, [j for j in jobs if j.name in holders], priorities)
        if len(out) == len(cluster.servers):
            if not holders:  # (running jobs alone: no job went before it; a review)
                held_by = "running jobs hold them: a running job keeps its servers"
            elif kept:
                held_by = f"jobs planned before it, or running jobs, hold them; {first}"
            else:
                held_by = f"jobs planned before it hold them; {first}"
            unplaced += [Unplaced(j.name, f"{where}no server is left ({held_by})") for j in group]
            continue
        before = (
            replace(previous, jobs=tuple(jp for jp in previous.jobs if jp.name in names))
            if previous
            else None
        )
        left = set(out)  # (a set: a cluster's thousands of servers, each looked up)
        reach = sum(server_capacity(s) for s in cluster.servers if s.name not in left)
        reach += sum(server_capacity(s) for s in held)
        # an even share each (as a deadline, the first groups' set-up, a GNN's graph and
        # inference outside the refinement's budget, starved the last ones: a review)
        budget = None if total is None else total / len(groups)
        try:
            result = plan(
                cluster.without(out),
                group,
                planner,
                previous=before,
                time_budget_s=budget,
                **options,
            )
        except NoFeasiblePlan as exc:
            unplaced += [
                Unplaced(u.name, where + u.reason + _held(u, group, held, reach, first))
                for u in exc.unplaced or [Unplaced(j.name, exc.reason) for j in group]
            ]
            continue
        placed += result.jobs
        unplaced += [
            Unplaced(u.name, where + u.reason + _held(u, group, held, reach, first))
            for u in result.unplaced
        ]
        notes += _held_before(result.notes, before, taken)
        taken |= {n for jp in result.jobs for n in jp.nodes}
    if not placed:
        raise NoFeasiblePlan("; ".join(f"{u.name}: {u.reason}" for u in unplaced), unplaced)
    order = {j.name: k for k, j in enumerate(jobs)}
    return Plan(
        planner,
        tuple(sorted(placed, key=lambda jp: order[jp.name])),
        tuple(sorted(unplaced, key=lambda u: order[u.name])),
        tuple(dict.fromkeys(notes)),
    )


def _budget(
    planner: str, cluster: Cluster, budget: float | None, iterations: int | None
) -> float | None:
    """The whole run's time budget: the one given, else the planner's default (search:
    ``api.SEARCH_BUDGET_S`` unless bounded by iterations; hulk: its refinement's for the
    whole cluster); None for the baselines, which search nothing, or a search bounded by
    iterations alone."""
    from hulk_planner.api import SEARCH_BUDGET_S, USES_GNN
    from hulk_planner.gnn.planner import refine_budget

    if budget is None and iterations is None:
        if planner == "search":
            budget = SEARCH_BUDGET_S
        elif planner in USES_GNN:
            budget = refine_budget(len(cluster.servers))
    return budget


def _held_before(notes: Sequence[str], before: Plan | None, taken: Collection[str]) -> list[str]:
    """``notes`` of a group's plan, a repair note (``api.repair_declined``) told which of the
    job's old servers jobs planned before it hold: for its plan they are gone, as lost
    ones are (before, "no free server to take the place of a" where a higher-priority job
    had taken a: a review)."""
    from hulk_planner.api import listed_names, repair_note

    out = list(notes)
    for jp in before.jobs if before else ():
        held = [n for n in jp.nodes if n in taken]
        head = repair_note(jp.name, "")
        for k, note in enumerate(out):
            if held and note.startswith(head):
                out[k] = (
                    f"{note} ({listed_names(held)}: held by jobs planned before it, of a higher "
                    "spec.priority or other spec.allowedRegions)"
                )
    return out
