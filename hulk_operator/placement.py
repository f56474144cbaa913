"""Placement: pending jobs are planned together on the servers no job holds.

:func:`plan_pending` is pure (a snapshot and a planner function in, decisions out). The
:class:`Placer` wraps it for the operator: one planning round at a time (an asyncio lock),
a short batch window so jobs applied together are planned together, and in-memory
reservations for decisions not yet written to a job's status: a reserved job is not planned
again and its servers stay held, so two rounds never hand out the same server (before,
a later round re-planned reserved jobs and pinned pods of two jobs to one server). Jobs
whose constraints differ (``allowedRegions``, ``nodeSelector``, tolerations) are planned in
groups, highest priority first, each on what the previous groups left. Gang semantics: a
job gets a server for every stage or nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hulk_operator import GPU, regrow
from hulk_operator.entries import JobEntry, Key
from hulk_operator.errors import classify
from hulk_operator.fit import describe, matching_nodes, missing_resources, planned_within, unmatched
from hulk_operator.inventory import (
    ALWAYS_TOLERATED,
    QUOTA_GPU,
    Bound,
    Latencies,
    NodeInfo,
    PodFacts,
    Resources,
    Scope,
    best_effort,
    bounds_refuse,
    build_cluster,
    cut_pairs,
    estimated_pairs,
    fits,
    scopes_match,
    selected,
    stage_quota,
    tolerates,
    with_defaults,
)
from hulk_planner.errors import HulkError
from hulk_planner.io import seconds
from hulk_planner.model import Cluster, Job, JobPlan, Plan

PlanFn = Callable[..., Plan]
BASELINES = ("baseline-a", "baseline-b", "baseline-c")
WRITE_TIMEOUT_S = 30.0  # a status write not seen by then is taken as lost
MAX_REFUSED_WAIT_S = 600.0  # the longest pause of a job whose pods were refused
REFUSALS_APART_S = 60.0  # refusals further apart are not one run (retries are 10 s apart)
# An unplaced job whose namespace's quota figures alone moved (any pod there came or went)
# is planned again at most this often: a busy namespace must not start a round at every pod.
QUOTA_RECHECK_S = 10.0


def clock() -> float:
    """The placer's clock, ``time.monotonic`` (a test replaces ``placement.clock``, not the
    process-wide ``time.monotonic`` that asyncio's own timers read)."""
    return time.monotonic()


# (ResourceQuota, resource): what a round's jobs took of a quota that counts their pods
Taken = tuple[str, str]


@dataclass
class Refused:
    """A job whose stage pods the API server refuses (an admission policy, a quota on objects)."""

    uid: str  # the job object's (one deleted and applied again starts afresh)
    generation: int
    since: float | None  # monotonic: the first refusal of its current placement
    servers: frozenset[str] = frozenset()  # that placement's
    last: float = 0.0  # monotonic: the latest refusal (a refused pod is tried every 10 s)
    times: int = 0  # placements given back in a row
    until: float = 0.0  # monotonic: not planned before, once it gave its servers back
    decision: Decision | None = None  # what it is told meanwhile
    policies: tuple[tuple[str, str], ...] = ()  # its namespace's, when it gave servers back


@dataclass(frozen=True)
class Decision:
    """A planning result for one job: a plan, or why there is none."""

    key: Key
    job_plan: JobPlan | None
    cluster: Cluster | None
    reason: str
    planner: str
    estimated: int = 0  # pairs of the job's servers whose latency is an estimate
    unreachable: int = 0  # pairs of the job's servers reported unreachable
    baselines: Mapping[str, float | None] = field(default_factory=dict)
    made: float = field(default_factory=lambda: clock())
    # unique per decision made (``id()`` is not: a freed decision's id is reused)
    serial: int = field(default_factory=itertools.count().__next__)
    base: JobPlan | None = None  # for a re-plan: the plan it replaces
    note: str = ""  # said with the plan, e.g. that a quota made it smaller
    refused: bool = False  # no plan: its pods were refused, it waits (Placer.give_back)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.job_plan.nodes) if self.job_plan else frozenset()


def refusals(infos: Sequence[NodeInfo], tolerations: Sequence[Mapping[str, Any]]) -> str:
    """Why these nodes take no new stage, counted by cause; untolerated taints named, with
    the toleration that would let the job use them."""
    counts: dict[str, int] = {}
    taints: set[str] = set()
    for i in infos:
        if not i.ready:
            why = "not Ready"
        elif i.unschedulable:
            why = "cordoned"
        elif i.server is None:
            why = f"no usable GPUs ({i.problem})" if i.problem else "no usable GPUs"
        else:
            bad = [
                t
                for t in i.taints
                if t.effect in ("NoSchedule", "NoExecute")
                and not tolerates([*ALWAYS_TOLERATED, *tolerations], t)
            ]
            taints.update(f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in bad)
            why = "tainted"
        counts[why] = counts.get(why, 0) + 1
    out = ", ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    if taints:
        out += (
            f"; the taint(s) {', '.join(sorted(taints))} need a toleration in "
            "spec.template.spec.tolerations"
        )
    return out


# quota resources that every container must set for a pod to be admitted (Kubernetes'
# pod evaluator's Constraints, kept for backward compatibility)
_MUST_SET = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)


@dataclass(frozen=True)
class Short:
    """A plan's stage pods need more of ``resource`` than namespace ``namespace``'s
    ResourceQuota ``quota`` leaves: ``more`` (what the pods need beyond what the job's own
    pods count now: all of ``need`` for a job that has none) against ``left``."""

    namespace: str
    quota: str
    resource: str
    left: float
    more: float
    need: float

    def __str__(self) -> str:
        return (
            f"namespace {self.namespace}'s ResourceQuota {self.quota} leaves "
            f"{amount_text(self.resource, max(self.left, 0.0))}"
        )


def amount_text(resource: str, amount: float) -> str:
    """``12 nvidia.com/gpu (requests.nvidia.com/gpu)``, ``3 pod(s) (pods)``,
    ``1.5Gi (limits.memory)``: an amount of a quota's resource, in the resource's units."""
    name = resource.split(".", 1)[1] if resource.startswith(("requests.", "limits.")) else resource
    if name in ("pods", "count/pods"):
        return f"{amount:g} pod(s) ({resource})"
    if name == "cpu":
        return f"{amount:g} CPU ({resource})"
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        return f"{amount / 2**30:.4g}Gi ({resource})"
    if name == resource:
        return f"{amount:g} {resource}"
    return f"{amount:g} {name} ({resource})"


@dataclass
class Snapshot:
    nodes: Mapping[str, NodeInfo]
    latencies: Latencies
    jobs: Mapping[Key, JobEntry]
    held: Mapping[str, Key]  # server -> the job that holds it (plans, pods, reservations)
    used: Mapping[str, Resources] = field(default_factory=dict)  # server -> other pods' requests
    # namespace -> (ResourceQuota, what it leaves of each resource pods count toward) of
    # each unscoped one (``quotas_for``: those that count a job's pods, scoped ones too)
    quotas: Mapping[str, Sequence[tuple[str, Mapping[str, float]]]] = field(default_factory=dict)
    # job -> what its existing stage pods count toward its namespace's quotas
    counted: Mapping[Key, Mapping[str, float]] = field(default_factory=dict)

    # namespace -> (LimitRange, most GPUs one stage pod may request) for each that sets one
    gpu_limits: Mapping[str, Sequence[tuple[str, float]]] = field(default_factory=dict)
    # namespace -> (LimitRange, default requests, default limits) for each that sets some
    limit_defaults: Mapping[str, Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]] = (
        field(default_factory=dict)
    )
    # namespace -> the bounds of its LimitRanges on containers' and pods' resources (not GPUs)
    limit_bounds: Mapping[str, Sequence[Bound]] = field(default_factory=dict)
    # namespace -> ("ResourceQuota q" / "LimitRange l", its spec) of each, scoped ones too
    policies: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    # namespace -> (ResourceQuota, what it leaves, its scopes) of each scoped one
    scoped_quotas: Mapping[str, Sequence[tuple[str, Mapping[str, float], tuple[Scope, ...]]]] = (
        field(default_factory=dict)
    )
    default_priority_class: str = ""  # the PriorityClass a pod without one gets (globalDefault)

    def pod_facts(self, entry: JobEntry) -> PodFacts:
        """What scoped quotas read of the job's stage pods (as admitted: LimitRange
        defaults filled in, the default PriorityClass where the template names none)."""
        terminating, priority_class, cross = entry.pod_facts
        return PodFacts(
            terminating,
            best_effort(self.pod_resources(entry)),
            priority_class or self.default_priority_class,
            cross,
        )

    def quotas_for(self, entry: JobEntry) -> list[tuple[str, Mapping[str, float]]]:
        """The (name, what it leaves) of each ResourceQuota of the job's namespace that
        counts its stage pods: the unscoped ones, and the scoped ones whose scopes match."""
        ns = entry.key[0]
        out = list(self.quotas.get(ns, ()))
        scoped = self.scoped_quotas.get(ns, ())
        if scoped:
            facts = self.pod_facts(entry)
            out += [(n, left) for n, left, scopes in scoped if scopes_match(scopes, facts)]
        return out

    def policies_seen(self, namespace: str) -> tuple[tuple[str, str], ...]:
        """The namespace's ResourceQuotas' and LimitRanges' specs (not what they count)."""
        return tuple(sorted(self.policies.get(namespace, ())))

    def pod_resources(self, entry: JobEntry) -> Mapping[str, Any]:
        """The job's stage pod's containers' resources once the namespace's LimitRanges
        filled in the requests and limits its template leaves out."""
        defaults = sorted(self.limit_defaults.get(entry.key[0], ()), key=lambda d: d[0])
        if not defaults:
            return entry.pod_resources
        return with_defaults(entry.pod_resources, [(r, lim) for _, r, lim in defaults])

    def pod_quota(self, entry: JobEntry) -> tuple[tuple[str, float], ...]:
        """What one of the job's stage pods counts toward a quota, its GPUs aside."""
        if not self.limit_defaults.get(entry.key[0]):
            return entry.pod_quota
        return stage_quota(self.pod_resources(entry))

    def quota_refuses(self, entry: JobEntry) -> str | None:
        """Why the namespace's quotas refuse every stage pod of the job, whatever its plan:
        a quota on CPU or memory makes Kubernetes refuse a pod unless each container sets
        that request (or limit), and the template, LimitRange defaults included, does not."""
        quotas = self.quotas_for(entry)
        if not quotas:
            return None
        spec = self.pod_resources(entry)
        containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        pod_level = spec.get("resources") or {}
        set_for_pod = [*(pod_level.get("requests") or {}), *(pod_level.get("limits") or {})]
        if any(r in ("cpu", "memory") or r.startswith("hugepages-") for r in set_for_pod):
            # pod-level resources (spec.resources): Kubernetes skips the whole check
            # (PodLevelResources, on by default since 1.34)
            return None
        for name, left in quotas:
            for r in sorted(set(left) & _MUST_SET):
                kind, res = r.split(".") if "." in r else ("requests", r)
                missing = [
                    str(c.get("name")) for c in containers if res not in c["resources"][kind]
                ]
                if missing:
                    return (
                        f"namespace {entry.key[0]}'s ResourceQuota {name} limits {r}, so "
                        f"Kubernetes refuses pods whose containers do not all set "
                        f"resources.{kind}.{res}, and spec.template's {', '.join(missing)} "
                        f"does not: set it there (or give the namespace a LimitRange default)"
                    )
        return None

    def quota_need(self, entry: JobEntry, d: Decision | None) -> dict[str, float]:
        """What a plan's stage pods count toward a ResourceQuota: one pod per server, each
        with its server's GPUs and the template's other requests and limits."""
        if d is None or d.job_plan is None or d.cluster is None:
            return {}
        return self.pods_need(entry, [d.cluster.server(n).gpus for n in d.job_plan.nodes])

    def uncounted(self, entry: JobEntry, d: Decision | None) -> dict[str, float]:
        """What a plan's stage pods will count toward a quota beyond what the job's own
        pods count now (they go when it replaces them)."""
        mine = self.counted.get(entry.key, {})
        return {r: max(0.0, v - mine.get(r, 0.0)) for r, v in self.quota_need(entry, d).items()}

    def pods_need(self, entry: JobEntry, gpus: Sequence[int]) -> dict[str, float]:
        """What stage pods with these GPUs count toward a ResourceQuota."""
        out = {k: v * len(gpus) for k, v in self.pod_quota(entry)}
        out[QUOTA_GPU] = float(sum(gpus))
        return out

    def gpu_max(self, namespace: str) -> tuple[str, float] | None:
        """The namespace's tightest LimitRange maximum of GPUs per pod or container."""
        return _tightest(self.gpu_limits.get(namespace))

    def quota_seen(self, namespace: str) -> tuple[Any, ...]:
        """The namespace's quotas as a fingerprint: a quota raised, or freed, is a change."""
        quotas = [
            *self.quotas.get(namespace, ()),
            *((n, left) for n, left, _ in self.scoped_quotas.get(namespace, ())),
        ]
        return tuple(sorted((n, tuple(sorted(q.items()))) for n, q in quotas))

    def quota_short(
        self,
        entry: JobEntry,
        need: Mapping[str, float],
        given: Mapping[Taken, float] | None = None,
        quotas: Sequence[tuple[str, Mapping[str, float]]] | None = None,
    ) -> Short | None:
        """The first resource of the quotas counting the job's pods that ``need`` (what a
        plan's stage pods count) exceeds: what the quota leaves, less what ``given`` (the
        namespace's other jobs planned but not yet counted, by quota and resource) took,
        plus what the job's own pods count now (they go when the plan replaces them); None
        where every quota holds it. ``quotas``: ``quotas_for(entry)``, where the caller has
        it already (it asks many times)."""
        mine = self.counted.get(entry.key, {})
        for name, left in self.quotas_for(entry) if quotas is None else quotas:
            for r, amount in sorted(left.items()):
                room = amount - (given or {}).get((name, r), 0.0)
                # (a quota lowered below what the job's pods use leaves less than nothing:
                # its new pods must still fit, so ``more`` may be negative and still short)
                more = need.get(r, 0.0) - mine.get(r, 0.0)
                if need.get(r, 0.0) > 0 and more > room + 1e-9:
                    return Short(entry.key[0], name, r, room, more, need.get(r, 0.0))
        return None

    def bounds_refuse(self, entry: JobEntry) -> str | None:
        """Why the namespace's LimitRanges refuse every stage pod of the job, whatever its
        plan: its template (their defaults filled in) is out of their bounds (GPUs aside)."""
        bounds = sorted(self.limit_bounds.get(entry.key[0], ()))
        if not bounds:
            return None
        why = bounds_refuse(self.pod_resources(entry), bounds)
        if why is None:
            return None
        return (
            f"namespace {entry.key[0]}'s {why}: Kubernetes refuses such stage pods; change "
            "spec.template's resources, or the LimitRange"
        )

    def limit_refuses(self, entry: JobEntry) -> tuple[str, float] | None:
        """The namespace's LimitRange (name, maximum) when it allows none of the job's
        stage pods: a maximum under one GPU, or under what the template asks."""
        limit = self.gpu_max(entry.key[0])
        if limit is not None and (limit[1] < 1 or entry.requests.gpus > limit[1]):
            return limit
        return None

    def free(self, entry: JobEntry, also: Iterable[str] = ()) -> list[NodeInfo]:
        """Servers this job may get: unheld, healthy, matching its constraints; a server
        whose GPUs other (non-Hulk) pods request offers only the rest of them, and one
        whose stage pod the template gives fewer GPUs than it has offers that many."""
        mine = set(also)
        sel = dict(entry.node_selector)
        out: list[NodeInfo] = []
        if self.limit_refuses(entry) or self.bounds_refuse(entry):
            return out  # no stage pod the namespace allows: why_none_free says so
        limit = self.gpu_max(entry.key[0])
        most = int(limit[1]) if limit is not None else None
        for info in self.nodes.values():
            holder = self.held.get(info.name)
            if holder is not None and holder != entry.key and info.name not in mine:
                continue
            if info.name in mine:
                ok = info.server is not None and info.sick(entry.tolerations) is None
            else:
                ok = info.offers(entry.tolerations)
            info = self._unused(info)  # its own stage pods are Hulk's: not counted
            ok = ok and info.server is not None and self._fits(info, entry.requests)
            if ok and selected(info, sel, entry.allowed_regions, entry.affinity):
                asked = entry.requests.gpus  # a template that asks for GPUs gets that many
                if asked and info.server is not None and info.server.gpus > asked:
                    info = replace(info, server=replace(info.server, gpus=asked))
                if most is not None and info.server is not None and info.server.gpus > most:
                    info = replace(info, server=replace(info.server, gpus=most))  # LimitRange
                out.append(info)
        return sorted(out, key=lambda i: i.name)

    def _fits(self, info: NodeInfo, need: Resources) -> bool:
        """Whether a stage pod requesting ``need`` fits beside the node's other pods."""
        gpus = info.server.gpus if info.server is not None else 0
        return fits(info.allocatable, self.used.get(info.name, Resources()), need, gpus)

    def _unused(self, info: NodeInfo) -> NodeInfo:
        """The node with the GPUs other pods request taken off (no server if none is left)."""
        taken = self.used.get(info.name, Resources()).gpus
        if not taken or info.server is None:
            return info
        left = info.server.gpus - taken
        server = replace(info.server, gpus=left) if left > 0 else None
        return replace(info, server=server)

    def why_none_free(self, entry: JobEntry) -> str:
        """Why ``free(entry)`` is empty, naming the constraint to change."""
        bounds = self.bounds_refuse(entry)
        if bounds is not None:
            return bounds
        limit = self.limit_refuses(entry)
        if limit is not None:
            return (
                f"namespace {entry.key[0]}'s LimitRange {limit[0]} allows {limit[1]:g} {GPU} "
                f"per pod, and the template asks {entry.requests.gpus}: ask for at most "
                f"{limit[1]:g}, or raise the LimitRange's max"
                if entry.requests.gpus
                else f"namespace {entry.key[0]}'s LimitRange {limit[0]} allows no {GPU}"
            )
        no_match = unmatched(entry, self.nodes)
        if no_match is not None:
            return no_match
        matching = matching_nodes(entry, self.nodes)
        usable = [i for i in matching if i.offers(entry.tolerations)]
        need = entry.requests
        if not usable:
            return f"the {len(matching)} node(s) matching the job take no new stage: " + refusals(
                matching, entry.tolerations
            )
        full = [i for i in usable if self._unused(i).server is None]
        unfit = [i for i in usable if i not in full and not self._fits(self._unused(i), need)]
        absent = missing_resources(need, usable)
        if absent:
            return (
                f"none of the {len(usable)} usable node(s) matching the job has "
                f"{', '.join(absent)}, which the stage pods request: advertise it on the nodes "
                "(a device plugin, or the node's status.capacity) or drop it from the template"
            )
        if unfit and len(full) + len(unfit) == len(usable):
            return (
                f"the stage pods' requests ({describe(need)}) fit on none of the "
                f"{len(usable)} usable node(s) matching the job"
                + (f" ({len(full)} have every GPU requested by other pods)" if full else "")
                + "; lower the template's requests"
            )
        if len(full) == len(usable):
            return (
                f"every GPU of the {len(usable)} usable node(s) matching the job is requested "
                "by other pods (not Hulk's)"
            )
        if not full and not unfit:
            return f"all {len(usable)} usable node(s) matching the job are held by other jobs"
        held = len(usable) - len(full) - len(unfit)  # free() offered none: the rest are held
        parts = [
            f"{held} held by other jobs" if held else "",
            f"{len(full)} with every GPU requested by other pods" if full else "",
            f"{len(unfit)} without room for the stage pods' requests ({describe(need)})"
            if unfit
            else "",
        ]
        return f"none of the {len(usable)} usable node(s) matching the job is free: " + ", ".join(
            p for p in parts if p
        )


def held_servers(
    jobs: Mapping[Key, JobEntry], stage_pods: Iterable[tuple[Key, str]]
) -> dict[str, Key]:
    """Server -> the job that holds it: the servers of its plan, then those its live stage
    pods sit on (pods left over, e.g. after a crash mid-placement)."""
    held = {n: k for k, e in jobs.items() for n in e.plan_nodes}
    for k, node in stage_pods:
        held.setdefault(node, k)
    return held


def planner_names(entries: Sequence[JobEntry]) -> dict[str, Key]:
    """Planner job name -> key: the job's name, or ``<name>.<namespace>`` when two
    namespaces use the same name."""
    names = [e.key[1] for e in entries]
    return {
        (k[1] if names.count(k[1]) == 1 else f"{k[1]}.{k[0]}"): k for k in (e.key for e in entries)
    }


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
    cluster = build_cluster(
        [i.server for i in servers if i.server is not None],
        snap.latencies,
        same_region_ms=same_region_ms,
        cross_region_ms=cross_region_ms,
    )
    names = planner_names(entries)
    by_key = {e.key: e for e in entries}
    jobs = [_rename(by_key[k].job, n) for n, k in names.items()]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {"seed": seed, "time_budget_s": budget_s}
    if previous is not None:
        kwargs["previous"] = previous
    try:
        result = plan_fn(cluster, jobs, planner, **kwargs)
    except (HulkError, ValueError) as exc:
        scope = planned_within(entries[0], len(servers))
        reason = classify(exc).message + scope
        own = {u.name: u.reason + scope for u in getattr(exc, "unplaced", ())}  # each its own
        return {
            k: Decision(k, None, cluster, own.get(n, reason), planner) for n, k in names.items()
        }
    extra: dict[str, dict[str, float | None]] = {n: {} for n in names}
    if baselines:
        for name in BASELINES:
            try:
                other = plan_fn(cluster, jobs, name, seed=0)
            except (HulkError, ValueError):
                other = Plan(name)
            for n in names:
                jp = other.job(n)
                t = jp.predicted_iteration_seconds if jp else None
                extra[n][name] = seconds(t)
    out: dict[Key, Decision] = {}
    for n, k in names.items():
        jp = result.job(n)
        if jp is not None:
            jp = replace(jp, name=k[1])
            out[k] = Decision(
                k,
                jp,
                cluster,
                "",
                planner,
                estimated=estimated_pairs(jp.nodes, snap.latencies),
                unreachable=cut_pairs(jp.nodes, snap.latencies),
                baselines=extra[n],
            )
        else:
            why = next((u.reason for u in result.unplaced if u.name == n), "not placed")
            out[k] = Decision(
                k, None, cluster, why + planned_within(by_key[k], len(servers)), planner
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
) -> dict[Key, Decision]:
    """Decisions for every pending job of the snapshot, planned together per constraint
    group (highest priority first); placed servers are taken out for later groups. Within a
    group a job is never left pending for a lower-priority one: if the joint plan does
    that, the group is planned again without its lowest priority, whose jobs are planned
    afterwards on what is left. Among equal priorities a job whose stage pods still hold
    servers (re-planned after an edit, or left mid-placement) comes first: an edit must not
    hand a running job's servers to a waiting one. Jobs in ``decided`` already have a
    decision that their status does not show yet: they are not planned again (their
    servers are in ``snap.held``; ``taken``, by namespace, is what their pods will count
    toward its quotas and do not yet, by (quota, resource))."""
    pending = [e for e in snap.jobs.values() if e.pending and e.key not in decided]
    out: dict[Key, Decision] = {}
    # a template out of its namespace's LimitRange bounds gets no server: told here, as the
    # bounds read the template's limits, which do not group jobs (one such member made
    # its whole group's servers unfree, or was planned with them)
    for e in list(pending):
        refused = snap.bounds_refuse(e)
        if refused is not None:
            out[e.key] = Decision(e.key, None, None, refused, planner)
            pending.remove(e)
    holding = set(snap.held.values())

    def rank(e: JobEntry) -> tuple[int, bool]:
        return (_priority(e), e.key in holding)

    groups: dict[tuple[Any, ...], list[JobEntry]] = {}
    for e in sorted(pending, key=lambda e: e.key):
        groups.setdefault(e.constraints, []).append(e)
    order = sorted(groups.values(), key=lambda g: max(rank(e) for e in g), reverse=True)
    held = dict(snap.held)

    # namespace -> what its jobs took in this round (and reservations not yet counted)
    given = {ns: dict(use) for ns, use in (taken or {}).items()}

    def plan(members: list[JobEntry], only: Collection[str] | None = None) -> dict[Key, Decision]:
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
            baselines=baselines,
            seed=seed,
        )

    for group in order:
        todo = group
        while todo:
            members = todo
            decisions = plan(members)
            while _inverted(members, decisions, rank):
                lowest = min(rank(e) for e in members)
                members = [e for e in members if rank(e) > lowest]
                decisions = plan(members)
            for k, d in decisions.items():
                for n in d.nodes:
                    held[n] = k
            ranked = sorted(members, key=rank, reverse=True)
            joint = dict(decisions)  # the group's plans before the quotas
            for e in ranked:
                # a job a quota shrinks is planned again on its own servers and the free
                # ones, never on those this round gave its other members (held above)
                was = decisions[e.key]
                decisions[e.key] = _within_quota(e, was, snap, given, plan)
                _rehold(held, was, decisions[e.key])
            rd = _Round(snap, joint, decisions, given, held, plan)
            for m in ranked:  # a job the quota left out, when another took its room
                _make_room(m, ranked, rank, rd)
            out.update(decisions)
            todo = [e for e in todo if e.key not in decisions]
    return out


@dataclass
class _Round:
    """A constraint group's round, as ``_make_room`` re-plans two of its jobs: their plans
    before the quotas (``joint``), their decisions, what the namespaces' quotas gave out
    (``given``), who holds which server, and the group's planner."""

    snap: Snapshot
    joint: Mapping[Key, Decision]
    decisions: dict[Key, Decision]
    given: dict[str, dict[Taken, float]]
    held: dict[str, Key]
    plan: Callable[[list[JobEntry], Collection[str]], dict[Key, Decision]]


def _make_room(
    m: JobEntry, ranked: Sequence[JobEntry], rank: Callable[[JobEntry], Any], rd: _Round
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
        _add(shared.setdefault(ns, {}), snap, e, snap.uncounted(e, d_e), -1.0)  # e's, back
        for kept_aside in (
            lambda: snap.quota_need(m, was_m),
            lambda: _half_need(m, rd, shared),  # noqa: B023
        ):
            need_m = kept_aside()
            if need_m is not None and _both(e, m, need_m, rd, shared):
                return


def _half_need(m: JobEntry, rd: _Round, given: dict[str, Any]) -> dict[str, float] | None:
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
    d = _within_quota(m, rd.joint[m.key], snap, half, rd.plan)
    return snap.quota_need(m, d) if d.job_plan is not None else None


def _both(
    e: JobEntry, m: JobEntry, need_m: Mapping[str, float], rd: _Round, given: dict[str, Any]
) -> bool:
    """``e`` planned again within ``given`` (the round's, ``e``'s own use taken back) less
    ``need_m``, then ``m`` within the rest: True, with both decided (the round's given and
    held updated), where both fit; else False, nothing changed."""
    snap, held = rd.snap, rd.held
    trial = {k: dict(v) for k, v in given.items()}
    room = trial.setdefault(e.key[0], {})
    _add(room, snap, m, need_m, 1.0)  # kept aside for m
    saved, d_e = dict(held), rd.decisions[e.key]
    new_e = _within_quota(e, rd.joint[e.key], snap, trial, rd.plan, keep=sorted(d_e.nodes))
    if new_e.job_plan is not None and _free_for(new_e, held):
        _rehold(held, d_e, new_e)
        _add(room, snap, m, need_m, -1.0)
        new_m = _within_quota(m, rd.joint[m.key], snap, trial, rd.plan)
        if new_m.job_plan is not None and _free_for(new_m, held):
            held.update(dict.fromkeys(new_m.nodes, m.key))
            rd.decisions[e.key], rd.decisions[m.key] = new_e, new_m
            rd.given.clear()
            rd.given.update(trial)
            return True
    held.clear()
    held.update(saved)
    return False


def _rehold(held: dict[str, Key], was: Decision, now: Decision) -> None:
    """A job's servers in ``held`` as ``now`` decides them, where ``was`` did before."""
    for n in was.nodes - now.nodes:
        del held[n]
    held.update(dict.fromkeys(now.nodes, now.key))


def _free_for(d: Decision, held: Mapping[str, Key]) -> bool:
    """Whether no other job of the round holds a server of ``d``."""
    return all(held.get(n, d.key) == d.key for n in d.nodes)


def _tightest(limits: Sequence[tuple[str, float]] | None) -> tuple[str, float] | None:
    """The (name, amount) with the least amount, or None."""
    return min(limits or [], key=lambda q: q[1], default=None)


def _within_quota(
    e: JobEntry,
    d: Decision,
    snap: Snapshot,
    given: dict[str, dict[Taken, float]],
    plan: Callable[[list[JobEntry], Collection[str]], dict[Key, Decision]],
    keep: Sequence[str] = (),
) -> Decision:
    """``d`` if its stage pods fit what the namespace's ResourceQuotas leave (less what this
    round gave its other jobs): GPUs, pods, CPU, memory; else the fastest of the job's
    plans on a few sets of its servers that fit (its plan's servers in pipeline order;
    ``keep``, the servers it runs on, first; the most GPU memory, compute, or fastest GPUs
    first); else unplaced, saying so. Before, the quota refused the stage pods and the job
    held its servers, which other namespaces needed."""
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
        gpus = {s.name: s.gpus for s in cluster.servers}
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


def _quotas_seen(snap: Snapshot, entry: JobEntry) -> tuple[Any, ...]:
    """Which of its namespace's quotas count the job's pods (the scopes, what they read of
    the pods: the default PriorityClass), then their figures (a quota raised), last."""
    ns = entry.key[0]
    scopes = tuple(sorted((n, sc) for n, _, sc in snap.scoped_quotas.get(ns, ())))
    return (snap.pod_facts(entry), scopes, snap.quota_seen(ns))


def add_use(taken: dict[Taken, float], snap: Snapshot, e: JobEntry, d: Decision) -> None:
    """Adds what ``d``'s stage pods will count and do not yet to each quota that counts
    them (a scoped quota counts only the jobs whose pods its scopes match)."""
    _add(taken, snap, e, snap.uncounted(e, d), 1.0)


def _add(
    taken: dict[Taken, float], snap: Snapshot, e: JobEntry, use: Mapping[str, float], sign: float
) -> None:
    """Adds (``sign`` 1) or takes back (-1) ``use`` of job ``e``'s pods to each quota that
    counts them."""
    for name, _ in snap.quotas_for(e):
        for r, v in use.items():
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
    mine = snap.counted.get(e.key, {}).get(what.resource)
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
    scopes = next((sc for n, _, sc in snap.scoped_quotas.get(e.key[0], ()) if n == what.quota), ())
    if scopes:  # the template decides whether it counts the pods at all
        read = dict.fromkeys(SCOPE_READS.get(name, name) for name, _, _ in scopes)
        return why + (
            ": raise the quota, free what the namespace's other pods hold, or change what its "
            f"scopes ({scopes_text(scopes)}) read of spec.template ({', '.join(read)})"
        )
    return why + ": raise the quota, or free what the namespace's other pods hold"


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


def _priority(e: JobEntry) -> int:
    return e.job.priority if e.job else 0


def _inverted(
    members: Sequence[JobEntry],
    decisions: Mapping[Key, Decision],
    rank: Callable[[JobEntry], tuple[int, bool]],
) -> bool:
    """A job left unplaced while one of lower rank (priority, then holding servers) is
    placed."""
    placed = [rank(e) for e in members if decisions[e.key].job_plan is not None]
    waiting = [rank(e) for e in members if decisions[e.key].job_plan is None]
    return bool(placed and waiting) and max(waiting) > min(placed)


def _same(a: JobPlan, b: JobPlan) -> bool:
    return (a.stages, a.micro_batches) == (b.stages, b.micro_batches)


class Placer:
    """The operator's planning rounds (see the module's docstring)."""

    def __init__(
        self,
        plan_fn: PlanFn,
        *,
        planner: str = "hulk",
        batch_window_s: float = 0.3,
        same_region_ms: float = 1.0,
        cross_region_ms: float = 100.0,
        budget_s: float | None = None,
        baselines: bool = False,
        on_round: Callable[[float, dict[Key, Decision]], None] | None = None,
        regrow_every_s: float = 5.0,
    ) -> None:
        self.plan_fn = plan_fn
        self.planner = planner
        self.batch_window_s = batch_window_s
        self.opts = dict(
            same_region_ms=same_region_ms, cross_region_ms=cross_region_ms, budget_s=budget_s
        )
        self.baselines = baselines
        self.on_round = on_round
        self.lock = asyncio.Lock()
        # Placed, possibly not yet in the job's status. A reservation is final: it is handed
        # to its job (``decide``) and never replaced by a later round, so a job's status is
        # only ever written from one decision per placement or re-plan.
        self.reserved: dict[Key, Decision] = {}
        self.unplaced: dict[Key, tuple[Any, Decision]] = {}  # last failure and its inputs
        self.regrow_checked: dict[Key, tuple[Any, ...]] = {}  # what the last regrow saw
        # a faster plan below minSpeedup: the RegrowDeclined Event's words, until posted
        self.regrow_declined: dict[Key, str] = {}
        self.regrow_told: dict[Key, str] = {}  # the last RegrowDeclined posted: not twice
        # A job's growth is looked at once per regrow_every_s, not at every tick: each look
        # builds a snapshot and the job's free servers under the planning lock.
        self.regrow_every_s = regrow_every_s
        self._regrow_looked: dict[Key, float] = {}
        self._used: set[int] = set()  # serials of decisions applied
        self.refused: dict[Key, Refused] = {}  # jobs whose stage pods are refused

    def first_use(self, decision: Decision) -> bool:
        """True the first time a decision is applied (for events and counters)."""
        if decision.serial in self._used:
            return False
        self._used.add(decision.serial)
        if len(self._used) > 10_000:
            self._used = (
                {d.serial for d in self.reserved.values()}
                | {d.serial for _, d in self.unplaced.values()}
                | {r.decision.serial for r in self.refused.values() if r.decision is not None}
            )
        return True

    def prune(self, jobs: Mapping[Key, JobEntry]) -> None:
        """Drops reservations that the jobs' statuses now show (or whose job is gone)."""
        for k, d in list(self.reserved.items()):
            e = jobs.get(k)
            if e is None or e.deleting or e.plan_nodes == d.nodes:
                del self.reserved[k]
        for k in [k for k in self.regrow_checked if k not in jobs]:
            del self.regrow_checked[k]
        for k in [k for k in self._regrow_looked if k not in jobs]:
            del self._regrow_looked[k]
        for k in [k for k in self.regrow_declined if k not in jobs]:
            del self.regrow_declined[k]
        for k in [k for k in self.regrow_told if k not in jobs]:
            del self.regrow_told[k]
        for k in [k for k in self.refused if k not in jobs]:
            del self.refused[k]

    def pods_refused(self, entry: JobEntry, servers: Collection[str]) -> float:
        """Notes that the job's stage pods on ``servers`` (its plan's) are refused; returns
        for how many seconds they have been, in this placement (a re-plan's new servers,
        or a placement after a pause, start the clock again)."""
        now = clock()
        r = self._refusal(entry)
        if r.since is None or r.servers != frozenset(servers) or now - r.last > REFUSALS_APART_S:
            r.since, r.servers = now, frozenset(servers)  # (a gap: the job went and came back)
        r.last = now
        return now - r.since

    def pods_admitted(self, key: Key) -> None:
        """The job's stage pods all exist: its refusals are over."""
        self.refused.pop(key, None)

    def _refusal(self, entry: JobEntry) -> Refused:
        """The job's record of refusals, a fresh one for a new object or spec."""
        r = self.refused.get(entry.key)
        if r is None or (r.uid, r.generation) != (entry.uid, entry.generation):
            r = self.refused[entry.key] = Refused(entry.uid, entry.generation, None)
        return r

    def give_back(
        self,
        entry: JobEntry,
        why: str,
        grace_s: float,
        policies: tuple[tuple[str, str], ...] = (),
    ) -> Decision:
        """The job's pods were refused too long: it drops its plan (the caller deletes its
        pods) and is not planned for ``grace_s``, doubled at each time in a row, at most
        ``MAX_REFUSED_WAIT_S``, or until its spec or its namespace's ``policies`` (quotas
        and LimitRanges, as they are now) change. Returns what it is told."""
        key = entry.key
        r = self._refusal(entry)
        wait = min(grace_s * 2 ** min(r.times, 30), MAX_REFUSED_WAIT_S)  # (no overflow)
        r.times += 1
        r.since = None
        r.until = clock() + wait
        at = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
        reason = (
            f"{why}; planned again in {wait:.0f} s (at {at}), or when its spec or the "
            "namespace's ResourceQuotas or LimitRanges change"
        )
        r.policies = policies
        r.decision = Decision(key, None, None, reason, self.planner, refused=True)
        self.first_use(r.decision)  # told by the caller, once
        self.forget(key)
        return r.decision

    def waiting_out(self, entry: JobEntry, snap: Snapshot) -> Decision | None:
        """What a job that gave its servers back is told while it waits, or None once its
        pause is over, or its spec or its namespace's quotas or LimitRanges changed."""
        r = self.refused.get(entry.key)
        if r is None or r.decision is None:
            return None
        if (r.uid, r.generation) != (entry.uid, entry.generation):
            return None
        if snap.policies_seen(entry.key[0]) != r.policies:
            return None
        return r.decision if clock() < r.until else None

    def reserved_use(self, snap: Snapshot, but: Key | None = None) -> dict[str, dict[Taken, float]]:
        """By namespace, what the reserved decisions' pods will count toward its quotas and
        do not yet (not created, or not counted yet), by quota and resource: a later round
        must not hand the same quota out again (two gangs, each half admitted, would wait
        for good)."""
        out: dict[str, dict[Taken, float]] = {}
        for k, d in self.reserved.items():
            e = snap.jobs.get(k)
            if k != but and e is not None:
                add_use(out.setdefault(k[0], {}), snap, e, d)
        return out

    def held(self, base: Mapping[str, Key]) -> dict[str, Key]:
        out = dict(base)
        for k, d in self.reserved.items():
            for n in d.nodes:
                out[n] = k
        return out

    @staticmethod
    def fingerprint(snap: Snapshot, entry: JobEntry) -> tuple[Any, ...]:
        """What a job's last failed round saw; the quota figures come last."""
        return (
            tuple(i.name for i in snap.free(entry)),
            entry.generation,
            tuple(sorted(k for k, e in snap.jobs.items() if e.pending)),
            snap.gpu_max(entry.key[0]),
            tuple(sorted(snap.limit_bounds.get(entry.key[0], ()))),
            repr(snap.pod_resources(entry)),  # a LimitRange default added: counted anew
            *_quotas_seen(snap, entry),
        )

    def _unchanged(self, snap: Snapshot, entry: JobEntry) -> Decision | None:
        """The job's last failure, where planning it again now would change nothing: the
        round saw the same, or only its namespace's quota figures moved, less than
        ``QUOTA_RECHECK_S`` ago."""
        last = self.unplaced.get(entry.key)
        if last is None:
            return None
        seen, now = last[0], self.fingerprint(snap, entry)
        if seen == now:
            return last[1]
        if seen[:-1] == now[:-1] and clock() - last[1].made < QUOTA_RECHECK_S:
            return last[1]
        return None

    async def decide(
        self, key: Key, snapshot: Callable[[], Awaitable[Snapshot]]
    ) -> Decision | None:
        """This job's decision: a reservation made by an earlier round, the same failure
        as last time when nothing changed, or a fresh round over all pending jobs."""
        async with self.lock:
            if key in self.reserved:
                return self.reserved[key]
            snap = await snapshot()
            self.prune(snap.jobs)
            entry = snap.jobs.get(key)
            if entry is None or not entry.pending:
                return None
            waiting = self.waiting_out(entry, snap)
            if waiting is not None:
                return waiting
            snap.held = self.held(snap.held)
            last = self._unchanged(snap, entry)
            if last is not None:
                return last
            await asyncio.sleep(self.batch_window_s)
            snap = await snapshot()
            self.prune(snap.jobs)
            snap.held = self.held(snap.held)
            started = time.perf_counter()
            decisions = await asyncio.to_thread(
                plan_pending,
                snap,
                self.plan_fn,
                planner=self.planner,
                baselines=self.baselines,
                decided=set(self.reserved) | self._pausing(snap),
                taken=self.reserved_use(snap),
                **self.opts,  # type: ignore[arg-type]
            )
            if self.on_round:
                self.on_round(time.perf_counter() - started, decisions)
            after = replace(snap, held=dict(snap.held))
            for k, d in decisions.items():
                if d.job_plan is not None:
                    self.reserved[k] = d
                    self.unplaced.pop(k, None)
                    for n in d.nodes:
                        after.held[n] = k  # type: ignore[index]
            for k, d in decisions.items():
                if d.job_plan is None and k in snap.jobs:
                    self.unplaced[k] = (self.fingerprint(after, snap.jobs[k]), d)
            return decisions.get(key)

    async def replan(
        self,
        entry: JobEntry,
        current: JobPlan,
        snapshot: Callable[[], Awaitable[Snapshot]],
    ) -> Decision:
        """A new plan for a running job that lost servers: its healthy servers plus free
        ones, keeping healthy stages where they are when the cost model allows."""
        async with self.lock:
            snap = await snapshot()
            self.prune(snap.jobs)
            snap.held = self.held(snap.held)
            servers = snap.free(entry, also=current.nodes)
            started = time.perf_counter()

            plan = self._planning(servers, snap, previous=current)

            def within() -> dict[Key, Decision]:  # the namespace's quotas hold its new pods
                d = plan([entry])[entry.key]
                taken = self.reserved_use(snap, but=entry.key)
                return {entry.key: _within_quota(entry, d, snap, taken, plan, keep=current.nodes)}

            decisions = await asyncio.to_thread(within)
            if self.on_round:
                self.on_round(time.perf_counter() - started, decisions)
            d = replace(decisions[entry.key], base=current)
            if d.job_plan is not None:
                self.reserved[entry.key] = d
            return d

    async def regrow(
        self,
        entry: JobEntry,
        current: JobPlan,
        snapshot: Callable[[], Awaitable[Snapshot]],
    ) -> Decision | None:
        """A faster plan for a running job with ``spec.regrow`` on its servers plus the
        free ones (``regrow.faster``); None while a job waits for servers, when no server
        is free, or when nothing changed since the last check."""
        now = clock()
        if now - self._regrow_looked.get(entry.key, -math.inf) < self.regrow_every_s:
            return None
        self._regrow_looked[entry.key] = now
        async with self.lock:
            snap = await snapshot()
            self.prune(snap.jobs)
            if entry.key in self.reserved:
                return None
            snap.held = self.held(snap.held)
            if any(self._waiting(snap, e) for e in snap.jobs.values()):
                return None
            free = snap.free(entry)
            seen = (
                tuple(i.name for i in free),
                current.stages,
                entry.generation,
                entry.regrow,
                *_quotas_seen(snap, entry),
            )
            if not free or self.regrow_checked.get(entry.key) == seen:
                return None
            self.regrow_checked[entry.key] = seen

            def judge() -> tuple[Decision | None, str | None]:
                plan = self._planning(snap.free(entry, also=current.nodes), snap)

                d = plan([entry])[entry.key]
                # the namespace's quotas: the fastest plan within them is judged instead
                taken = self.reserved_use(snap, but=entry.key)
                within = _within_quota(entry, d, snap, taken, plan, keep=current.nodes)
                grown, declined = regrow.faster(within, entry, current, d.cluster)
                if grown is None and d.job_plan is not None and within is not d:
                    short = snap.quota_short(entry, snap.quota_need(entry, d))
                    declined = (
                        f"a faster plan needs {amount_text(short.resource, short.more)} more, "
                        f"and {short}, and none within it is spec.regrow.minSpeedup "
                        f"{entry.regrow[0] if entry.regrow else 0:g} times faster"
                        if short is not None and within.job_plan is not None
                        else f"no faster plan fits: {within.reason}"
                    ) + ": it keeps its servers (checked again when the quota changes)"
                return grown, declined

            started = time.perf_counter()
            d, declined = await asyncio.to_thread(judge)
            if declined is not None and self.regrow_told.get(entry.key) != declined:
                self.regrow_declined[entry.key] = declined  # (the same words: told once)
                self.regrow_told[entry.key] = declined
            if self.on_round:
                self.on_round(time.perf_counter() - started, {entry.key: d} if d else {})
            if d is not None:
                self.reserved[entry.key] = d
            return d

    def _planning(
        self, servers: Sequence[NodeInfo], snap: Snapshot, previous: JobPlan | None = None
    ) -> Callable[..., dict[Key, Decision]]:
        """A job group planned on ``servers`` (or the ``only`` ones of them), a re-plan of
        ``previous`` where given: for ``_within_quota``'s tries."""

        def plan(members: list[JobEntry], only: Collection[str] | None = None) -> Any:
            return plan_group(
                members,
                servers if only is None else [i for i in servers if i.name in only],
                snap,
                self.plan_fn,
                planner=self.planner,
                previous=Plan(self.planner, (previous,)) if previous else None,
                baselines=self.baselines,
                **self.opts,  # type: ignore[arg-type]
            )

        return plan

    def _waiting(self, snap: Snapshot, e: JobEntry) -> bool:
        """A pending job that may yet be placed on the free servers: not tried on them, or
        its round is not over (one tried on these very servers and left unplaced waits
        for a change, and does not hold regrowth back)."""
        if self.waiting_out(e, snap) is not None:
            return False
        last = self.unplaced.get(e.key)  # (a quota's figures moved: it may fit now)
        return e.pending and (last is None or last[0] != self.fingerprint(snap, e))

    def _pausing(self, snap: Snapshot) -> set[Key]:
        """Jobs that gave their servers back and wait: not planned in this round."""
        return {k for k, e in snap.jobs.items() if self.waiting_out(e, snap) is not None}

    def pending_write(self, key: Key, shown: JobPlan) -> Decision | None:
        """This job's re-plan whose status write is not visible yet: a reservation made
        from exactly the plan the status still shows (``shown``), less than
        ``WRITE_TIMEOUT_S`` ago (after that the write is taken as lost). A reservation that
        the status already shows is dropped."""
        d = self.reserved.get(key)
        if d is None or d.job_plan is None:
            return None
        if d.base is not None and _same(d.base, shown):
            if clock() - d.made < WRITE_TIMEOUT_S:
                return d
            del self.reserved[key]
            return None
        if _same(d.job_plan, shown):
            del self.reserved[key]
        return None

    def forget(self, key: Key) -> None:
        self.reserved.pop(key, None)
        self.unplaced.pop(key, None)
