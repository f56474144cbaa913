"""Plans within the namespaces' ResourceQuotas: a job's plan that its quotas refuse is
replaced by its fastest plan on servers that fit them (:func:`within_quota`); what a
round's jobs take counts toward the quotas that count their pods (:func:`add_use`); and
two jobs of one namespace and rank planned in the same round share its quota
(:func:`make_room`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.fit import matching_nodes
from hulk_operator.quotas import QUOTA_GPU, Scope
from hulk_operator.snapshot import Short, Snapshot, Taken, amount_text
from hulk_planner.cost import memory_need_bytes, server_capacity


def within_quota(
    e: JobEntry,
    d: Decision,
    snap: Snapshot,
    given: dict[str, dict[Taken, float]],
    plan: Callable[[list[JobEntry], Collection[str]], dict[Key, Decision]],
    keep: Sequence[str] = (),
    avoid: Collection[str] = (),
) -> Decision:
    """``d`` if its stage pods fit what the namespace's ResourceQuotas leave (less what this
    round gave its other jobs): GPUs, pods, CPU, memory; else the fastest of the job's
    plans on a few sets of its servers that fit (its plan's servers in pipeline order;
    ``keep``, the servers it runs on, first; the most GPU memory, compute, or fastest GPUs
    first; none of ``avoid``, servers other jobs of the round hold); else unplaced, saying
    so. Before, the quota refused the stage pods and the job held its servers, which other
    namespaces needed."""
    ns, counting = e.key[0], snap.quotas_for(e)
    if d.job_plan is None or d.cluster is None or not counting:
        return d
    cluster = d.cluster
    refused = snap.quota_refuses(e)
    if refused:
        return Decision(e.key, None, cluster, refused, d.planner)
    taken = given.setdefault(ns, {})
    short = snap.quota_short(e, snap.quota_need(e, d), taken, counting)
    if short is not None:
        gpus = {s.name: e.pod_gpus(s.gpus) for s in cluster.servers}  # (a pod's, sidecars in)
        planned = list(d.job_plan.nodes)
        kept = [n for n in keep if n in gpus]

        def most(key: Callable[[Any], float]) -> list[str]:
            return [s.name for s in sorted(cluster.servers, key=lambda s: (-key(s), s.name))]

        memory = most(lambda s: s.gpus * s.gpu_memory_gib)  # a big model's layers fit
        base = dict(snap.pod_quota(e))
        pools: list[list[str]] = []
        for order in (
            planned,
            [*kept, *planned, *memory],
            memory,
            most(lambda s: s.gpus * s.gpu_tflops),  # the fastest servers
            most(lambda s: s.gpu_tflops),  # the fastest GPUs: most from a quota on GPUs
        ):
            pool: list[str] = []
            held = 0.0  # the pool's GPUs
            for n in dict.fromkeys(order):
                if n in avoid:
                    continue
                need = {k: v * (len(pool) + 1) for k, v in base.items()}
                need[QUOTA_GPU] = held + gpus[n]
                if snap.quota_short(e, need, taken, counting) is None:
                    pool.append(n)
                    held += gpus[n]
            if pool and pool not in pools:
                pools.append(pool)
        tried = [plan([e], pool)[e.key] for pool in pools]
        fits = [
            t
            for t in tried
            if t.job_plan is not None
            and snap.quota_short(e, snap.quota_need(e, t), taken, counting) is None
        ]
        if not fits:
            return Decision(
                e.key, None, cluster, _quota_why(e, d, snap, taken, short, tried), d.planner
            )
        best = min(fits, key=lambda t: t.job_plan.predicted_iteration_seconds)  # type: ignore[union-attr]
        names = sorted({name for name, _ in counting})
        note = (
            f"within namespace {ns}'s ResourceQuota {short.quota} ({short.resource}): "
            f"{len(best.nodes)} server(s), {len(planned)} without it"
            if len(names) == 1
            else f"within namespace {ns}'s ResourceQuotas {', '.join(names)}: "
            f"{len(best.nodes)} server(s), {len(planned)} without them"
        )
        d = replace(best, note=note)
    add_use(taken, snap, e, d)
    return d


def quotas_seen(snap: Snapshot, entry: JobEntry) -> tuple[Any, ...]:
    """Which of its namespace's quotas count the job's pods (the scopes, what they read of
    the pods: the default PriorityClass), then their figures (a quota raised), last."""
    ns = entry.key[0]
    scopes = tuple(sorted((n, sc) for n, _, sc in snap.scoped_quotas.get(ns, ())))
    return (snap.pod_facts(entry), scopes, snap.quota_seen(ns))


def add_use(taken: dict[Taken, float], snap: Snapshot, e: JobEntry, d: Decision) -> None:
    """Adds what ``d``'s stage pods will count and do not yet to each quota that counts
    them (a scoped quota counts only the jobs whose pods its scopes match)."""
    _add(taken, snap, e, snap.quota_need(e, d), 1.0)


def _add(
    taken: dict[Taken, float], snap: Snapshot, e: JobEntry, need: Mapping[str, float], sign: float
) -> None:
    """Adds (``sign`` 1) or takes back (-1) what stage pods of job ``e`` that count
    ``need`` will count and do not yet to each quota that counts them."""
    for name, _ in snap.quotas_for(e):
        for r, v in snap.uncounted(e, need, name).items():
            taken[(name, r)] = taken.get((name, r), 0.0) + sign * v


def _quota_why(
    e: JobEntry,
    d: Decision,
    snap: Snapshot,
    taken: Mapping[Taken, float],
    short: Short,
    tried: Sequence[Decision],
) -> str:
    """Why no plan fits the namespace's quotas: the quota and resource that refuse even
    one stage pod (on the smallest of the plan's servers) where one does, else what the
    plan on the free servers needs; what this round's other jobs took, if they did."""
    assert d.job_plan is not None and d.cluster is not None
    smallest = min(s.gpus for s in d.cluster.servers)  # of the servers offered
    one = snap.quota_short(e, snap.pods_need(e, [smallest]), taken)
    what = one or short
    why = str(what)
    mine = snap.own_use(e, what.quota).get(what.resource)
    if mine:
        why += f" beyond the {amount_text(what.resource, mine)} its own pods hold"
    if taken.get((what.quota, what.resource)):
        why += (
            f" after the namespace's jobs planned just now took "
            f"{amount_text(what.resource, taken[(what.quota, what.resource)])}"
        )
    if one is not None:
        why += f"; one stage pod needs {amount_text(one.resource, one.need)}"
    else:
        why += (
            f"; the plan on the free servers needs {amount_text(short.resource, short.need)} "
            f"on {len(d.job_plan.nodes)} server(s)"
        )
        failed = next((t.reason for t in tried if t.job_plan is None and t.reason), "")
        if failed:
            why += f", and none fits within it ({failed})"
    return why + _quota_fix(e, snap, what.quota)


def _quota_fix(e: JobEntry, snap: Snapshot, quota: str) -> str:
    """``: raise the quota, ...``: what to do about the namespace's ``quota``."""
    scopes = next((sc for n, _, sc in snap.scoped_quotas.get(e.key[0], ()) if n == quota), ())
    if scopes:  # the template decides whether it counts the pods at all
        read = dict.fromkeys(SCOPE_READS.get(name, name) for name, _, _ in scopes)
        return (
            ": raise the quota, free what the namespace's other pods hold, or change what its "
            f"scopes ({scopes_text(scopes)}) read of spec.template ({', '.join(read)})"
        )
    return ": raise the quota, or free what the namespace's other pods hold"


def quota_too_small(e: JobEntry, snap: Snapshot) -> str | None:
    """Why the namespace's quotas leave too little for any plan of the job, before it is
    planned: fewer GPUs than its GPU memory need takes on the servers it may use with the
    most memory per GPU, or fewer pods (and what each pod counts) than it takes on those
    with the most per server. Before, such a job was planned with the others, took servers
    in their joint plan, and the quota then refused it: the others had been left out of
    those servers, and its reason flipped between the quota and the free servers, an
    Event each time (a user trial)."""
    if e.job is None or not snap.quotas_for(e):
        return None
    servers = [i.server for i in matching_nodes(e, snap.nodes) if i.server is not None]
    if not servers:
        return None
    need = memory_need_bytes(e.job)
    per_gpu = max(server_capacity(s) / s.gpus for s in servers)
    per_pod = max(server_capacity(s) for s in servers)
    pods = math.ceil(need / per_pod - 1e-9)
    least = {k: v * pods for k, v in snap.pod_quota(e)}
    least[QUOTA_GPU] = float(math.ceil(need / per_gpu - 1e-9))
    short = snap.quota_short(e, least)
    if short is None:
        return None
    mine = snap.own_use(e, short.quota).get(short.resource, 0.0)
    left = str(short)
    if mine:  # (a running job planned again: its pods go when the new ones come)
        left = (
            f"namespace {short.namespace}'s ResourceQuota {short.quota} leaves "
            f"{amount_text(short.resource, max(short.left + mine, 0.0))} once the job's own "
            f"pods are gone (they hold {amount_text(short.resource, mine)})"
        )
    why = (
        f"{left}; the job needs at least {amount_text(short.resource, short.need)}: "
        f"{need / 2**30:.0f} GiB of GPU memory, and "
        + (
            f"a GPU of the servers it may use has at most {per_gpu / 2**30:.0f} GiB usable"
            if short.resource == QUOTA_GPU
            else f"a server it may use has at most {per_pod / 2**30:.0f} GiB usable"
        )
    )
    return why + _quota_fix(e, snap, short.quota)


# what each ResourceQuota scope reads of a pod
SCOPE_READS = {
    "PriorityClass": "priorityClassName",
    "Terminating": "activeDeadlineSeconds",
    "NotTerminating": "activeDeadlineSeconds",
    "BestEffort": "CPU and memory requests and limits",
    "NotBestEffort": "CPU and memory requests and limits",
    "CrossNamespacePodAffinity": "affinity terms naming namespaces",
}


def scopes_text(scopes: Sequence[Scope]) -> str:
    """``PriorityClass In [hi], NotTerminating``: a quota's scopes as its spec says them."""
    return ", ".join(
        name
        if op == "Exists" and not values
        else f"{name} {op}" + (f" [{', '.join(values)}]" if values else "")
        for name, op, values in scopes
    )


@dataclass
class Round:
    """A constraint group's round, as ``make_room`` re-plans two of its jobs: their plans
    before the quotas (``joint``), their decisions, what the namespaces' quotas gave out
    (``given``), who holds which server, and the group's planner."""

    snap: Snapshot
    joint: Mapping[Key, Decision]
    decisions: dict[Key, Decision]
    given: dict[str, dict[Taken, float]]
    held: dict[str, Key]
    plan: Callable[[list[JobEntry], Collection[str]], dict[Key, Decision]]


def make_room(
    m: JobEntry, ranked: Sequence[JobEntry], rank: Callable[[JobEntry], Any], rd: Round
) -> None:
    """Job ``m``, which its namespace's quotas left unplaced in this round after a job of
    the same rank there took their room first: each such job ``e`` in turn is planned again
    within what the quotas leave less a plan of ``m`` (its plan on the free servers, else
    its plan within half of what ``e`` and it may share), then ``m`` within the rest; where
    both fit, both are kept (else nothing changes). Before, the first job kept its fastest
    plan and the next waited (15 GPUs left: one job took 12, the next needed 4 per stage
    pod: a user trial)."""
    snap, ns, was_m = rd.snap, m.key[0], rd.joint[m.key]
    if rd.decisions[m.key].job_plan is not None or was_m.job_plan is None:
        return
    if not snap.quotas_for(m) or snap.quota_refuses(m) is not None:
        return
    for e in ranked:
        d_e = rd.decisions[e.key]
        if e is m or e.key[0] != ns or rank(e) != rank(m) or d_e.job_plan is None:
            continue
        shared = {k: dict(v) for k, v in rd.given.items()}
        _add(shared.setdefault(ns, {}), snap, e, snap.quota_need(e, d_e), -1.0)  # e's, back
        for kept_aside in (
            lambda: snap.quota_need(m, was_m),
            lambda: _half_need(m, rd, shared),  # noqa: B023
        ):
            need_m = kept_aside()
            if need_m is not None and _both(e, m, need_m, rd, shared):
                return


def _half_need(m: JobEntry, rd: Round, given: dict[str, Any]) -> dict[str, float] | None:
    """What ``m``'s plan within half of what its quotas leave (less ``given``) needs, or
    None where none fits."""
    ns, snap = m.key[0], rd.snap
    half = {k: dict(v) for k, v in given.items()}
    room = half.setdefault(ns, {})
    for name, left in snap.quotas_for(m):
        for r, amount in left.items():
            room[(name, r)] = (
                room.get((name, r), 0.0) + max(amount - room.get((name, r), 0.0), 0.0) / 2
            )
    d = within_quota(m, rd.joint[m.key], snap, half, rd.plan)
    return snap.quota_need(m, d) if d.job_plan is not None else None


def _both(
    e: JobEntry, m: JobEntry, need_m: Mapping[str, float], rd: Round, given: dict[str, Any]
) -> bool:
    """``e`` planned again within ``given`` (the round's, ``e``'s own use taken back) less
    ``need_m``, then ``m`` within the rest: True, with both decided (the round's given and
    held updated), where both fit; else False, nothing changed."""
    snap, held = rd.snap, rd.held
    trial = {k: dict(v) for k, v in given.items()}
    room = trial.setdefault(e.key[0], {})
    _add(room, snap, m, need_m, 1.0)  # kept aside for m
    saved, d_e = dict(held), rd.decisions[e.key]
    new_e = within_quota(e, rd.joint[e.key], snap, trial, rd.plan, keep=sorted(d_e.nodes))
    if new_e.job_plan is not None and _free_for(new_e, held):
        rehold(held, d_e, new_e)
        _add(room, snap, m, need_m, -1.0)
        others = {n for n, k in held.items() if k != m.key}  # (e's new servers among them)
        new_m = within_quota(m, rd.joint[m.key], snap, trial, rd.plan, avoid=others)
        if new_m.job_plan is not None and _free_for(new_m, held):
            held.update(dict.fromkeys(new_m.nodes, m.key))
            rd.decisions[e.key], rd.decisions[m.key] = new_e, new_m
            rd.given.clear()
            rd.given.update(trial)
            return True
    held.clear()
    held.update(saved)
    return False


def rehold(held: dict[str, Key], was: Decision, now: Decision) -> None:
    """A job's servers in ``held`` as ``now`` decides them, where ``was`` did before."""
    for n in was.nodes - now.nodes:
        del held[n]
    held.update(dict.fromkeys(now.nodes, now.key))


def _free_for(d: Decision, held: Mapping[str, Key]) -> bool:
    """Whether no other job of the round holds a server of ``d``."""
    return all(held.get(n, d.key) == d.key for n in d.nodes)
