"""A planning round: pending jobs are planned together on the servers no job holds.

:func:`plan_pending` is pure (a snapshot and a planner function in, decisions out). Jobs
whose constraints (``allowedRegions``, ``nodeSelector``, tolerations) or priorities differ
are planned in groups, highest priority first, each on what the previous groups left;
each job's plan is then fitted to its namespace's ResourceQuotas (``quota_fit``). Gang
semantics: a job gets a server for every stage or nothing.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.errors import classify
from hulk_operator.fit import (
    matching_nodes,
    no_room_now,
    planned_within,
    requests_refused,
    too_big_for,
    unknown_regions,
    unmatched,
)
from hulk_operator.inventory import NodeInfo
from hulk_operator.latencies import (
    build_cluster,
    cut_pairs,
    estimated_pairs,
    estimates_used,
    stale_note,
)
from hulk_operator.quota_fit import Round, make_room, quota_too_small, rehold, within_quota
from hulk_operator.snapshot import Snapshot, Taken
from hulk_planner.api import repair_declined
from hulk_planner.cost import MEMORY_USABLE, memory_need_bytes
from hulk_planner.errors import HulkError
from hulk_planner.io import seconds
from hulk_planner.model import Job, Plan, Server, Unplaced

PlanFn = Callable[..., Plan]


BASELINES = ("baseline-a", "baseline-b", "baseline-c")


def planner_names(entries: Sequence[JobEntry]) -> dict[str, Key]:
    """Planner job name -> key: the job's name, or ``<name>.<namespace>`` when two
    namespaces use the same name, or a job's name is another's qualified one (a job may
    be named ``bert.team-a``: before, it and team-a's ``bert`` took one name, and every
    round failed on the job left out; a review). One-to-one: a namespace has no dot, so a
    qualified name is one job's."""
    keys = [e.key for e in entries]
    counts = Counter(name for _, name in keys)
    clash = {name for name, n in counts.items() if n > 1}
    while True:  # (a bare name that a qualified one takes is qualified too, and so on)
        qualified = {f"{name}.{ns}" for ns, name in keys if name in clash}
        more = {name for _, name in keys if name not in clash and name in qualified}
        if not more:
            break
        clash |= more
    return {(_qualified(name, ns) if name in clash else name): (ns, name) for ns, name in keys}


def _qualified(name: str, namespace: str) -> str:
    """``<name>.<namespace>``, the name cut and marked with a digest of the whole where
    that would pass a name's 253 characters (a 250-character name in two namespaces made
    every round fail: a review). Still one to one: the namespace is the part after the
    last dot, and the digest tells cut names apart."""
    whole = f"{name}.{namespace}"
    if len(whole) <= 253:
        return whole
    digest = hashlib.sha256(whole.encode()).hexdigest()[:10]
    return f"{name[: 253 - len(namespace) - 12].rstrip('.-')}-{digest}.{namespace}"


def _rename(job: Job, name: str) -> Job:
    return job if job.name == name else replace(job, name=name)


def plan_group(
    entries: Sequence[JobEntry],
    servers: Sequence[NodeInfo],
    snap: Snapshot,
    plan_fn: PlanFn,
    *,
    planner: str,
    same_region_ms: float,
    cross_region_ms: float,
    budget_s: float | None = None,
    previous: Plan | None = None,
    baselines: bool = False,
    seed: int = 0,
) -> dict[Key, Decision]:
    """Plans ``entries`` together on ``servers``; every entry gets a decision."""
    if not servers:
        return {e.key: Decision(e.key, None, None, snap.why_none_free(e), planner) for e in entries}
    try:
        cluster = build_cluster(
            [i.server for i in servers if i.server is not None],
            snap.latencies,
            same_region_ms=same_region_ms,
            cross_region_ms=cross_region_ms,
        )
    except HulkError as exc:  # told on the jobs, not a round failed in the log alone
        why = f"the cluster's latencies cannot be planned with: {classify(exc).message}"
        return {e.key: Decision(e.key, None, None, why, planner) for e in entries}
    names = planner_names(entries)
    by_key = {e.key: e for e in entries}
    jobs = [_rename(by_key[k].job, n) for n, k in names.items()]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {"seed": seed, "time_budget_s": budget_s}
    if previous is not None:
        kwargs["previous"] = previous
    try:
        result = plan_fn(cluster, jobs, planner, **kwargs)
    except (HulkError, ValueError) as exc:
        scope = planned_within(entries[0], len(servers), snap.server_count())
        reason = classify(exc).message + scope
        own = {u.name: u.reason + scope for u in getattr(exc, "unplaced", ())}  # each its own
        return {
            k: Decision(k, None, cluster, own.get(n, reason), planner) for n, k in names.items()
        }
    extra: dict[str, dict[str, float | None]] = {n: {} for n in names}
    why_not: dict[str, dict[str, str]] = {n: {} for n in names}  # job -> baseline -> why
    if baselines:
        for name in BASELINES:
            try:
                other = plan_fn(cluster, jobs, name, seed=0)
            except (HulkError, ValueError) as exc:
                own = {u.name: u.reason for u in getattr(exc, "unplaced", ())}
                other = Plan(name, (), tuple(Unplaced(n, own.get(n, str(exc))) for n in names))
            told = {u.name: u.reason for u in other.unplaced}
            for n in names:
                jp = other.job(n)
                t = jp.predicted_iteration_seconds if jp else None
                extra[n][name] = seconds(t)
                if jp is None:
                    why_not[n][name] = told.get(n, "not placed")
    out: dict[Key, Decision] = {}
    total = snap.server_count()  # (an unplaced job is told it: once, not per job)
    for n, k in names.items():
        jp = result.job(n)
        if jp is not None:
            jp = replace(jp, name=k[1])
            cut, stale, inferred = cut_pairs(jp.nodes, snap.latencies)
            guessed = estimated_pairs(jp.nodes, snap.latencies)
            out[k] = Decision(
                k,
                jp,
                cluster,
                "",
                planner,
                estimated=guessed,
                estimates=estimates_used(jp.nodes, snap.latencies, cluster) if guessed else (),
                unreachable=cut,
                unreachable_stale=stale,
                unreachable_inferred=inferred,
                baselines=extra[n],
                baselines_why=why_not[n],
                repair_declined=repair_declined(result, n) or "",
            )
        else:
            why = next((u.reason for u in result.unplaced if u.name == n), "not placed")
            out[k] = Decision(
                k,
                None,
                cluster,
                why + planned_within(by_key[k], len(servers), total),
                planner,
            )
    return out


def plan_pending(
    snap: Snapshot,
    plan_fn: PlanFn,
    *,
    planner: str = "hulk",
    same_region_ms: float = 1.0,
    cross_region_ms: float = 100.0,
    budget_s: float | None = None,
    baselines: bool = False,
    decided: Collection[Key] = (),
    seed: int = 0,
    taken: Mapping[str, Mapping[Taken, float]] | None = None,
    edits: Collection[Key] = (),
) -> dict[Key, Decision]:
    """Decisions for every pending job of the snapshot, planned together per group of equal
    constraints and priority, offered the same servers (``Snapshot.offer_key``: a namespace's
    LimitRanges may offer them otherwise; highest priority first); placed servers are taken out for
    later groups. Within a group a job whose stage pods still hold servers (re-planned after an
    edit, or left mid-placement) comes first: an edit must not hand a running job's servers to a
    waiting one; then the job submitted first. If the joint plan leaves a job pending while one
    ranked below it is placed, the group is planned again on the most of its jobs, highest ranked
    first, whose joint plan does not (``_first_come``); the others are planned afterwards on what is
    left. Groups are planned again oldest first where the order above passes an older job over for a
    newer one of another group (``_overtaken_across``). Jobs in ``decided`` already have a decision
    that their status does not show yet: they are not planned again (their servers are in
    ``snap.held``; ``taken``, by namespace, is what their pods will count toward its quotas and do
    not yet, by (quota, resource)). Jobs in ``edits`` run while an edit of theirs waits for room
    (``edits.unplannable``): each is planned, edited, in its turn (its priority; it holds servers)
    and the servers its plan would use are kept from the jobs ranked below it, but it gets no
    decision: its own reconciliation plans the edit once it sees them free (before, a waiting edit
    took no part in the rounds, and a pending job of lower priority got the servers another job
    freed first)."""
    pending = [e for e in snap.jobs.values() if e.pending and e.key not in decided]
    claims = {  # (running: its servers are held by its pods, so it ranks as holding)
        k
        for k in edits
        if k in snap.jobs
        and k not in decided
        and not snap.jobs[k].pending
        and not snap.jobs[k].deleting
        and not snap.jobs[k].suspended
        and snap.jobs[k].phase not in ("Succeeded", "Failed")
        and snap.jobs[k].job is not None
    }
    pending += [snap.jobs[k] for k in sorted(claims)]
    out: dict[Key, Decision] = {}
    # a template out of its namespace's LimitRange bounds gets no server: told here, as the
    # bounds read the template's limits, which do not group jobs (one such member made
    # its whole group's servers unfree, or was planned with them); nor does a job that
    # fits on no set of the servers it may use, even all free: told so (before, it was
    # told the free servers' shortfall, or that other jobs held the servers: a user waited
    # for them in vain); nor does a job its namespace's quotas leave too little for, whatever
    # its plan (``quota_too_small``)
    for e in list(pending):
        refused = snap.bounds_refuse(e) or (
            too_big_for(
                replace(e, requests=snap.stage_requests(e)),
                snap.nodes,
                snap.latencies.unreachable,
                snap.gpu_max(e.key[0]),
            )
            # (one no node could hold, even with nothing else on it: "cpu: 5000" was told
            # as Unschedulable, a job that waits, where it must be changed; a user trial)
            or requests_refused(replace(e, requests=snap.stage_requests(e)), snap.nodes)
            or quota_too_small(e, snap)
            # (a LimitRange that refuses every stage pod is told as such, not as a job too
            # big at the GPUs it allows: "give each pod more GPUs" misled; a review)
            if unmatched(e, snap.nodes) is None
            and snap.limit_refuses(e) is None
            and snap.minimum_refuses(e) is None
            else None
        )
        if refused is not None:
            out[e.key] = Decision(e.key, None, None, refused, planner)
            pending.remove(e)
    holding = set(snap.held.values())

    def standing(e: JobEntry) -> tuple[int, bool]:
        return (job_priority(e), e.key in holding)

    def rank(e: JobEntry) -> tuple[int, bool, float]:
        # of equal standing, the job submitted first comes first (as Kueue's and Volcano's
        # FIFO queues: before, a group was planned together and the planner chose which of
        # its jobs waited, the oldest as often as not; a user trial)
        return (*standing(e), -e.created)

    # jobs of the same constraints and priority, offered the same servers (``offer_key``),
    # together: planned together, jobs of
    # different priorities shared the servers, and a higher one could get the slower plan
    # (a user trial: priority 100 on 1 server at 796 s, priority 0 on 2 at 658 s)
    groups: dict[tuple[Any, ...], list[JobEntry]] = {}
    for e in sorted(pending, key=lambda e: e.key):  # (a waiting edit alone: planned with
        # others, its own running servers could go to them)
        alone = e.key if e.key in claims else None
        groups.setdefault((snap.offer_key(e), job_priority(e), alone), []).append(e)

    def scope(g: list[JobEntry]) -> tuple[tuple[int, bool], int, float]:
        # of equal standing, the group its constraints allow fewer servers first: a job
        # free to go anywhere took every server of the region another was limited to (a
        # user trial of ``hulk plan``, which orders its groups the same way); then the
        # group with the oldest job
        allowed = sum(1 for i in matching_nodes(g[0], snap.nodes) if i.server is not None)
        return (max(standing(e) for e in g), -allowed, max(-e.created for e in g))

    # who holds which server, and, by namespace, what its jobs took in this round (and
    # reservations not yet counted): set afresh by each ``run`` of the groups
    held: dict[str, Key]
    given: dict[str, dict[Taken, float]]

    def plan(
        members: list[JobEntry], only: Collection[str] | None = None, compare: bool = True
    ) -> dict[Key, Decision]:  # (``compare``: the baselines too, where ``baselines``)
        view = replace(snap, held=held)
        keys = {e.key for e in members}
        # Servers that the group's own leftover pods sit on (after a crash) are theirs.
        mine = [n for n, k in held.items() if k in keys]
        servers = view.free(members[0], also=mine)
        return plan_group(
            members,
            servers if only is None else [i for i in servers if i.name in only],
            view,
            plan_fn,
            planner=planner,
            same_region_ms=same_region_ms,
            cross_region_ms=cross_region_ms,
            budget_s=budget_s,
            baselines=baselines and compare,
            seed=seed,
        )

    def run(order: list[list[JobEntry]]) -> dict[Key, Decision]:
        """The groups planned in ``order``, each on what the ones before it left."""
        nonlocal held, given
        held = dict(snap.held)
        given = {ns: dict(use) for ns, use in (taken or {}).items()}
        got: dict[Key, Decision] = {}
        for group in order:
            if group[0].key in claims:
                _claim(group[0], plan, held, got, snap)
                continue
            todo = []
            for e in group:  # no Service to be had: no server held (its pods would wait on it)
                why = snap.service_short(e, snap.waiting_services(e.key[0], held, e.key))
                if why is None:
                    todo.append(e)
                else:
                    got[e.key] = Decision(e.key, None, None, why, planner)
            spent = 0  # planner calls spent on first-come order in this group
            while todo:
                members = todo
                decisions = plan(members)
                if spent < FIRST_COME_CALLS and _inverted(members, decisions, rank):
                    members, decisions, calls = _first_come(members, plan, rank)
                    spent += calls
                while _inverted(members, decisions, standing):  # (first-come order given up)
                    lowest = min(standing(e) for e in members)
                    members = [e for e in members if standing(e) > lowest]
                    decisions = plan(members)
                for k, d in decisions.items():
                    for n in d.nodes:
                        held[n] = k
                ranked = sorted(members, key=rank, reverse=True)
                _within_services(ranked, decisions, snap, held)
                joint = dict(decisions)  # the group's plans before the quotas
                for e in ranked:
                    # a job a quota shrinks is planned again on its own servers and the free
                    # ones, never on those this round gave its other members (held above)
                    was = decisions[e.key]
                    decisions[e.key] = within_quota(e, was, snap, given, plan)
                    rehold(held, was, decisions[e.key])
                rd = Round(snap, joint, decisions, given, held, plan)
                for m in ranked:  # a job the quota left out, when another of its standing
                    make_room(m, ranked, standing, rd)  # took its room
                got.update(decisions)
                # a job the joint plan left waiting while a quota then refused another's plan
                # is planned again on what that one left (before, those servers stayed free: a
                # tenant whose quota could not hold its job kept another's off them; a user
                # trial). Each pass decides at least the refused ones.
                quota_refused = any(
                    d.job_plan is None and joint[k].job_plan is not None
                    for k, d in decisions.items()
                )
                again = (
                    {k for k, d in joint.items() if d.job_plan is None} if quota_refused else set()
                )
                todo = [e for e in todo if e.key not in decisions or e.key in again]
        return got

    got = run(sorted(groups.values(), key=scope, reverse=True))
    queued = [g for g in groups.values() if g[0].key not in claims]  # (the jobs to place)
    passed = _overtaken_across(got, queued, standing, snap)
    if passed:
        # an older job waits while a newer one of its standing, of a group planned before
        # its own, holds a server it may use: the groups planned again oldest first, and
        # that kept where fewer are passed over (a user trial: a newer job limited to
        # [paris] took the Paris server an older [berlin, paris] job waited for)
        def age(g: list[JobEntry]) -> tuple[tuple[int, bool], float, int]:
            return (max(standing(e) for e in g), max(-e.created for e in g), scope(g)[1])

        by_age = run(sorted(groups.values(), key=age, reverse=True))
        if _overtaken_across(by_age, queued, standing, snap) < passed:
            got = by_age
    out.update(got)
    _tell_kept(out, claims, standing, snap, got)
    stale = stale_note(snap.latencies)
    for k, d in out.items():  # a typo among the regions: said with the plan or the reason
        note = unknown_regions(snap.jobs[k], snap.nodes)
        if note is not None and d.job_plan is not None:
            out[k] = replace(d, note="; ".join(n for n in (d.note, note) if n))
        elif note is not None:
            out[k] = replace(d, reason=f"{d.reason}; {note}")
        if stale is not None and d.job_plan is None and d.reason:  # (probes down)
            out[k] = replace(out[k], reason=f"{out[k].reason}; {stale}")
    return out


def _claim(
    e: JobEntry,
    plan: Callable[..., dict[Key, Decision]],
    held: dict[str, Key],
    got: dict[Key, Decision],
    snap: Snapshot,
) -> None:
    """A running job whose edit waits for servers (``plan_pending``'s ``edits``), in its
    turn: planned alone, edited, on its own servers and those the groups before it left,
    unless their GPU memory alone cannot hold it (``no_room_now``: not planned, as its own
    check would refuse it too); the servers of its plan held for the rest of the round
    (its running ones stay held by its pods whatever it gets). No quotas: what they would
    take off its plan stays kept, for this round."""
    need = replace(e, requests=snap.stage_requests(e))
    if no_room_now(need, snap.nodes, held) is not None:
        return
    d = plan([e], compare=False)[e.key]  # (no baselines: nothing reads them)
    for n in d.nodes:
        held[n] = e.key
    got[e.key] = d


def _memory(servers: Iterable[Server | None]) -> float:
    """The usable GPU memory of ``servers``, in bytes."""
    return sum(s.memory_bytes for s in servers if s is not None) * MEMORY_USABLE


def _tell_kept(
    out: dict[Key, Decision],
    claims: Collection[Key],
    standing: Callable[[JobEntry], tuple[int, bool]],
    snap: Snapshot,
    planned: Collection[Key],
) -> None:
    """Takes the waiting edits' plans out of ``out``; a job ranked below one of them,
    ``planned`` in the round and left waiting, is told how many servers it may use were
    kept for that edit (before it read "other jobs or pods hold the rest" of free
    servers)."""
    kept: dict[Key, set[str]] = {}
    for k in claims:
        d = out.pop(k, None)
        if d is not None and d.job_plan is not None:
            kept[k] = set(d.nodes) - snap.jobs[k].plan_nodes  # (beyond its own)
    for k, d in list(out.items()):
        e = snap.jobs.get(k)
        if d.job_plan is not None or e is None or k not in planned:
            continue
        usable: set[str] | None = None
        told = []
        had = _memory(d.cluster.servers) if d.cluster is not None else 0.0  # (planned on)
        for c, servers in sorted(kept.items()):
            if not servers or standing(snap.jobs[c]) <= standing(e):
                continue
            if usable is None:
                usable = {i.name for i in matching_nodes(e, snap.nodes)}
            mine = [i.server for n in servers & usable if (i := snap.nodes.get(n)) is not None]
            # (not where even they would leave it short of GPU memory: a job that could never
            # fit was told of them, and not one they kept from its only region; a user trial)
            if mine and e.job is not None and memory_need_bytes(e.job) <= had + _memory(mine):
                n = len(mine)
                told.append(f"{n} free server(s) are kept for the edit of job {c[0]}/{c[1]}")
        if told:
            why = "; ".join(told) + ", which waits for servers and ranks above it"
            out[k] = replace(d, reason=f"{d.reason}; {why}")


def _overtaken_across(
    got: Mapping[Key, Decision],
    groups: Collection[list[JobEntry]],
    standing: Callable[[JobEntry], tuple[int, bool]],
    snap: Snapshot,
) -> int:
    """Pairs of jobs of equal standing in different groups where the older waits and the
    newer holds a server the older may use."""
    group = {e.key: i for i, g in enumerate(groups) for e in g}
    jobs = [e for g in groups for e in g if e.key in got]
    waiting = [e for e in jobs if got[e.key].job_plan is None]
    placed = [e for e in jobs if got[e.key].job_plan is not None]
    count = 0
    for o in waiting:
        usable: set[str] | None = None
        for n in placed:
            if group[n.key] == group[o.key] or standing(n) != standing(o):
                continue
            if not o.created < n.created:
                continue
            if usable is None:
                usable = {i.name for i in matching_nodes(o, snap.nodes)}
            count += bool(got[n.key].nodes & usable)
    return count


def _within_services(
    ranked: Sequence[JobEntry], decisions: dict[Key, Decision], snap: Snapshot, held: dict[str, Key]
) -> None:
    """Jobs of a group placed together that need more Services than their namespace's
    quotas leave: the highest ranked keep their plans, the others are left unplaced, their
    servers freed (before, the API server refused the last jobs' Services, and they held
    their servers until they gave them back)."""
    unchecked = {e.key for e in ranked if decisions[e.key].job_plan is not None}
    for e in ranked:
        unchecked.discard(e.key)
        d = decisions[e.key]
        if d.job_plan is None:
            continue
        ns = e.key[0]
        later = {k for k in unchecked if k[0] == ns} - snap.services
        why = snap.service_short(e, snap.waiting_services(ns, held, e.key) - len(later))
        if why is not None:
            decisions[e.key] = Decision(e.key, None, d.cluster, why, d.planner)
            rehold(held, d, decisions[e.key])


def job_priority(e: JobEntry) -> int:
    """The job's spec.priority (0 for a job whose spec is invalid)."""
    return e.job.priority if e.job else 0


# Planner calls a constraint group's round may spend, beyond one per pass, to place its jobs
# in first-come order (past them, its jobs of equal standing are planned together as the
# planner sees fit: keeping the order whole over a long queue took a call per job it
# dropped; ``bench/queue_round.py`` prints what the order costs)
FIRST_COME_CALLS = 6


def _first_come(
    members: Sequence[JobEntry],
    plan: Callable[[list[JobEntry]], dict[Key, Decision]],
    rank: Callable[..., tuple[Any, ...]],
) -> tuple[list[JobEntry], dict[Key, Decision], int]:
    """The most of ``members``, first by rank (the highest, then the oldest), that a joint
    plan leaves no job waiting while one ranked below it is placed, with that plan: found by
    bisection, a planner call per step; the others are planned afterwards on what is left.
    Planned together, the jobs share the servers as the planner sees fit; planned alone,
    the oldest took every server that sped it up, and fewer jobs were placed
    (``bench/queue_round.py``)."""
    ranked = sorted(members, key=rank, reverse=True)
    best: tuple[list[JobEntry], dict[Key, Decision]] | None = None
    lo, hi, calls = 2, len(ranked) - 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        decisions = plan(ranked[:mid])
        calls += 1
        if _inverted(ranked[:mid], decisions, rank):
            hi = mid - 1
        else:
            best, lo = (ranked[:mid], decisions), mid + 1
    if best is None:  # (one job alone: nothing to invert)
        best, calls = (ranked[:1], plan(ranked[:1])), calls + 1
    return (*best, calls)


def _inverted(
    members: Sequence[JobEntry],
    decisions: Mapping[Key, Decision],
    rank: Callable[..., tuple[Any, ...]],
) -> bool:
    """A job left unplaced while one of lower rank (priority, then holding servers, then
    age) is placed."""
    placed = [rank(e) for e in members if decisions[e.key].job_plan is not None]
    waiting = [rank(e) for e in members if decisions[e.key].job_plan is None]
    return bool(placed and waiting) and max(waiting) > min(placed)
