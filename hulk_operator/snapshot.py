"""What a planning round sees (:class:`Snapshot`): the servers, who holds them, the jobs,
and the namespaces' ResourceQuotas and LimitRanges, with the questions a round asks of
them (which servers a job may get, what its stage pods count toward a quota, why none
is free)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hulk_operator import GPU
from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.fit import (
    describe,
    matching_nodes,
    missing_resources,
    stage_gpu_cap,
    stage_server,
    unmatched,
)
from hulk_operator.inventory import (
    ALWAYS_TOLERATED,
    NodeInfo,
    Resources,
    bounded,
    fits,
    pod_requests,
    selected,
    taint_text,
    tolerates,
)
from hulk_operator.latencies import Latencies
from hulk_operator.quotas import (
    QUOTA_GPU,
    Bound,
    PodFacts,
    Scope,
    best_effort,
    bounds_refuse,
    scopes_match,
    stage_quota,
    with_defaults,
)

# (ResourceQuota, resource): what a round's jobs took of a quota that counts their pods
Taken = tuple[str, str]


def refusals(infos: Sequence[NodeInfo], tolerations: Sequence[Mapping[str, Any]]) -> str:
    """Why these nodes take no new stage, counted by cause; untolerated taints named, with
    the toleration that would let the job use them."""
    counts: dict[str, int] = {}
    taints: set[str] = set()
    timed = False  # a NoExecute taint tolerated for a while only among them
    for i in infos:
        if not i.ready:
            why = "not Ready"
        elif i.unschedulable:
            why = "cordoned"
        elif i.server is None:
            why = f"not offered ({i.problem})" if i.problem else "not offered"
        else:
            bad = [
                t
                for t in i.taints
                if t.effect in ("NoSchedule", "NoExecute")
                and not tolerates([*ALWAYS_TOLERATED, *tolerations], t)
            ]
            taints.update(taint_text(t, tolerations) for t in bad)  # (its bound said: a review)
            timed = timed or any(
                t.effect == "NoExecute" and bounded(tolerations, t) is not None for t in bad
            )
            why = "tainted"
        counts[why] = counts.get(why, 0) + 1
    out = ", ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    if taints:
        out += (
            f"; the taint(s) {', '.join(sorted(taints))} need a toleration in "
            "spec.template.spec.tolerations"
            + (" (for good: no tolerationSeconds)" if timed else "")
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


LimitDefaults = Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]


def filled_resources(entry: JobEntry, defaults: LimitDefaults) -> Mapping[str, Any]:
    """The job's stage pod's containers' resources once the namespace's LimitRanges'
    ``defaults`` (name, default requests, default limits) fill in the requests and limits
    its template leaves out, in the LimitRanges' name order, as the API server applies
    them."""
    if not defaults:
        return entry.pod_resources
    ordered = sorted(defaults, key=lambda d: d[0])
    return with_defaults(entry.pod_resources, [(r, lim) for _, r, lim in ordered])


def filled_requests(entry: JobEntry, defaults: LimitDefaults) -> Resources:
    """What one of the job's stage pods requests of its node, ``defaults`` filled in
    (``filled_resources``); GPUs stay the template's own ask."""
    if not defaults:
        return entry.requests
    return pod_requests(filled_resources(entry, defaults))._replace(gpus=entry.requests.gpus)


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
    # job -> scoped quota of its namespace -> what those of them it counts count there
    # (``quotas.scoped_counts``); a quota missing here counts all of them (``counted``)
    counted_scoped: Mapping[Key, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)

    # namespace -> (LimitRange, most GPUs one stage pod may request) for each that sets one
    gpu_limits: Mapping[str, Sequence[tuple[str, float]]] = field(default_factory=dict)
    # namespace -> (LimitRange, fewest GPUs one stage pod may request) for each that sets one
    gpu_minimums: Mapping[str, Sequence[tuple[str, float]]] = field(default_factory=dict)
    # namespace -> (LimitRange, default requests, default limits) for each that sets some
    limit_defaults: Mapping[str, LimitDefaults] = field(default_factory=dict)
    # namespace -> the bounds of its LimitRanges on containers' and pods' resources (not GPUs)
    limit_bounds: Mapping[str, Sequence[Bound]] = field(default_factory=dict)
    # namespace -> ("ResourceQuota q" / "LimitRange l", its spec) of each, scoped ones too
    policies: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    # namespace -> (ResourceQuota, what it leaves, its scopes) of each scoped one
    scoped_quotas: Mapping[str, Sequence[tuple[str, Mapping[str, float], tuple[Scope, ...]]]] = (
        field(default_factory=dict)
    )
    default_priority_class: str = ""  # the PriorityClass a pod without one gets (globalDefault)
    # namespace -> (ResourceQuota, resource, Services it leaves) of each that limits them
    service_quotas: Mapping[str, Sequence[tuple[str, str, float]]] = field(default_factory=dict)
    services: frozenset[Key] = frozenset()  # the jobs whose headless Service exists

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
        return filled_resources(entry, self.limit_defaults.get(entry.key[0], ()))

    def stage_requests(self, entry: JobEntry) -> Resources:
        """What one stage pod requests of its node, the namespace's LimitRange default
        requests filled in where its template sets none, as the API server admits it
        (before, the template's alone: a node the defaults overfill was offered, and the
        pod waited unschedulable; a review). GPUs stay the template's own ask."""
        return filled_requests(entry, self.limit_defaults.get(entry.key[0], ()))

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
        with its GPUs (``JobEntry.pod_gpus``) and the template's other requests and limits."""
        if d is None or d.job_plan is None or d.cluster is None:
            return {}
        return self.pods_need(entry, [d.cluster.server(n).gpus for n in d.job_plan.nodes])

    def own_use(self, entry: JobEntry, quota: str) -> Mapping[str, float]:
        """What the job's existing stage pods count toward its namespace's ResourceQuota
        ``quota``: they go when a plan replaces them, so a new plan is credited that."""
        scoped = self.counted_scoped.get(entry.key, {})
        return scoped[quota] if quota in scoped else self.counted.get(entry.key, {})

    def uncounted(self, entry: JobEntry, need: Mapping[str, float], quota: str) -> dict[str, float]:
        """What stage pods that count ``need`` will count toward ``quota`` beyond what the
        job's own pods count there now (they go when the plan replaces them)."""
        mine = self.own_use(entry, quota)
        return {r: max(0.0, v - mine.get(r, 0.0)) for r, v in need.items()}

    def pods_need(self, entry: JobEntry, gpus: Sequence[int]) -> dict[str, float]:
        """What stage pods on servers the plan counts these GPUs of count toward a
        ResourceQuota: each its pod's GPUs, a sidecar's too (``JobEntry.pod_gpus``)."""
        out = {k: v * len(gpus) for k, v in self.pod_quota(entry)}
        # (a pod's largest init container's GPUs, where more than its trainer's: they count)
        out[QUOTA_GPU] = float(sum(max(entry.pod_gpus(g), entry.init_gpus[1]) for g in gpus))
        return out

    def gpu_max(self, namespace: str) -> tuple[str, float] | None:
        """The namespace's tightest LimitRange maximum of GPUs per pod or container."""
        return _tightest(self.gpu_limits.get(namespace))

    def gpu_min(self, namespace: str) -> tuple[str, float] | None:
        """The namespace's tightest LimitRange minimum of GPUs per pod or container."""
        return max(self.gpu_minimums.get(namespace) or [], key=lambda q: q[1], default=None)

    def quota_seen(self, namespace: str) -> tuple[Any, ...]:
        """The namespace's quotas as a fingerprint: a quota raised, or freed, is a change."""
        quotas = [
            *self.quotas.get(namespace, ()),
            *((n, left) for n, left, _ in self.scoped_quotas.get(namespace, ())),
        ]
        return (
            tuple(sorted((n, tuple(sorted(q.items()))) for n, q in quotas)),
            tuple(sorted(self.service_quotas.get(namespace, ()))),
        )

    def service_short(self, entry: JobEntry, others: int) -> str | None:
        """Why the job cannot get its headless Service: it has none yet, and a quota of its
        namespace leaves fewer than one beside the ``others`` (jobs placed but whose
        Service is not created yet). None where it may."""
        ns = entry.key[0]
        if entry.key in self.services:
            return None
        for name, resource, left in sorted(self.service_quotas.get(ns, ())):
            if left - others < 1:
                # (one wording whatever the figures: a later round that finds the same
                # cause in other figures posts no second Event)
                return (
                    f"namespace {ns}'s ResourceQuota {name} leaves {max(left, 0.0):g} "
                    f"Service(s) ({resource}), {min(others, max(left, 0.0)):g} of them for "
                    "jobs placed just now (their Services not created yet); each job needs "
                    "one, its headless Service (the stage pods' addresses), created before "
                    "its pods: raise the "
                    f"quota's {resource}, or delete a Service the namespace no longer uses"
                )
        return None

    def waiting_services(self, namespace: str, held: Mapping[str, Key], but: Key) -> int:
        """The jobs of ``namespace`` that hold servers (``held``) and have no Service yet,
        ``but`` aside: each will create one."""
        return len({k for k in held.values() if k[0] == namespace and k != but} - self.services)

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
        for name, left in self.quotas_for(entry) if quotas is None else quotas:
            mine = self.own_use(entry, name)
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

    def minimum_refuses(self, entry: JobEntry) -> str | None:
        """Why the namespace's LimitRange minimum of GPUs allows none of the job's stage
        pods, whatever the server: the template asks fewer, or a maximum is lower."""
        least, most = self.gpu_min(entry.key[0]), self.gpu_max(entry.key[0])
        if least is None:
            return None
        ns, name, amount = entry.key[0], least[0], least[1]
        asked = entry.requests.gpus
        if asked and asked < amount:
            return (
                f"namespace {ns}'s LimitRange {name} asks at least {amount:g} {GPU} per pod, "
                f"and the template asks {asked}: ask for at least {amount:g}, or lower the "
                "LimitRange's min"
            )
        if most is not None and most[1] < amount:
            return (
                f"namespace {ns}'s LimitRange {name} asks at least {amount:g} {GPU} per pod, "
                f"and LimitRange {most[0]} allows at most {most[1]:g}: no stage pod can meet "
                "both; lower the min, or raise the max"
            )
        return None

    def offer_key(self, entry: JobEntry) -> tuple[Any, ...]:
        """What :meth:`free` reads of the job beyond which servers are held: jobs of one key are
        offered the same servers with the same GPUs, and a round plans them as one group (groups go
        one after another, by priority and then by how few servers they may use: not in first-come
        order across them). Its constraints, what its stage pod requests (LimitRange defaults in),
        its init container's GPUs, its trainer's (what the planner counts of each server), and its
        namespace's LimitRange GPU bounds (before, jobs of namespaces with other LimitRanges were
        one group, all offered the first one's view: a GPU maximum of one namespace was broken, or
        applied to another's job, and a job its namespace refused left the others of its group no
        server; a review)."""
        ns = entry.key[0]
        refused = (
            self.limit_refuses(entry),
            self.minimum_refuses(entry),
            self.bounds_refuse(entry),
        )
        # bounds that change no server's offer are left out (a maximum of 16 GPUs a pod
        # where no server has more split jobs off their first-come order for nothing)
        largest = max((i.server.gpus for i in self.nodes.values() if i.server), default=0)
        most = (self.gpu_max(ns) or ("", None))[1]
        least = (self.gpu_min(ns) or ("", None))[1]
        return (
            entry.constraints,
            self.stage_requests(entry),
            entry.init_gpus[1],
            entry.trainer_gpus,
            most if most is not None and most < largest else None,
            least if least is not None and least > 1 else None,
            any(r is not None for r in refused),
        )

    def free(self, entry: JobEntry, also: Iterable[str] = ()) -> list[NodeInfo]:
        """Servers this job may get: unheld, healthy, matching its constraints; a server
        whose GPUs other (non-Hulk) pods request offers only the rest of them, and one
        whose stage pod the template gives fewer GPUs than it has offers that many, of
        them its trainer container's alone (``fit.stage_server``: what the planner counts;
        ``JobEntry.pod_gpus`` the pod's)."""
        mine = set(also)
        sel = dict(entry.node_selector)
        out: list[NodeInfo] = []
        if self.limit_refuses(entry) or self.bounds_refuse(entry) or self.minimum_refuses(entry):
            return out  # no stage pod the namespace allows: why_none_free says so
        floor = self.gpu_min(entry.key[0])
        least = floor[1] if floor is not None else 0.0
        need = self.stage_requests(entry)
        for info in self.nodes.values():
            holder = self.held.get(info.name)
            if holder is not None and holder != entry.key and info.name not in mine:
                continue
            # its own servers too: its running pods stay, but a plan may make new ones
            # there, and not where a NoSchedule taint bars them (they would wait for ever)
            ok = info.offers(entry.tolerations)
            info = self._unused(info)  # its own stage pods are Hulk's: not counted
            # (an init container's GPUs before the trainer's are capped: it holds its own)
            ok = (
                ok
                and info.server is not None
                and self._fits(info, need)
                and info.server.gpus >= entry.init_gpus[1]
            )
            if ok and selected(info, sel, entry.allowed_regions, entry.affinity):
                info = self._capped(info, entry)
                if info.server is None or info.server.gpus < least:
                    continue  # its stage pod would ask fewer GPUs than the LimitRange's min
                server = stage_server(info.server, entry)  # (the planner's: its trainer's)
                out.append(info if server is info.server else replace(info, server=server))
        return sorted(out, key=lambda i: i.name)

    def _capped(self, info: NodeInfo, entry: JobEntry) -> NodeInfo:
        """The node (other pods' GPUs taken off already) with the GPUs the job's stage pod
        would ask: what the template asks, within the namespace's LimitRange maximum."""
        if info.server is None:
            return info
        cap = stage_gpu_cap(entry.requests.gpus, self.gpu_max(entry.key[0]))
        gpus = info.server.gpus if cap is None else min(info.server.gpus, cap)
        return (
            info
            if gpus == info.server.gpus
            else replace(info, server=replace(info.server, gpus=gpus))
        )

    def _offered(self, info: NodeInfo, entry: JobEntry) -> int:
        """The GPUs the node's stage pod for the job would ask (as ``free`` gives them)."""
        server = self._capped(self._unused(info), entry).server
        return server.gpus if server is not None else 0

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

    def _holders(self, infos: Iterable[NodeInfo], namespace: str) -> str:
        return _holders_text(self.held, (i.name for i in infos), namespace)

    def server_count(self) -> int:
        """The cluster's usable GPU servers, free or not."""
        return sum(1 for i in self.nodes.values() if i.server is not None and i.offers())

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
        refused = self.minimum_refuses(entry)
        if refused is not None:
            return refused
        no_match = unmatched(entry, self.nodes)
        if no_match is not None:
            return no_match
        matching = matching_nodes(entry, self.nodes)
        usable = [i for i in matching if i.offers(entry.tolerations)]
        if not usable:
            return f"the {len(matching)} node(s) matching the job take no new stage: " + refusals(
                matching, entry.tolerations
            )
        others = [i for i in matching if i not in usable]  # (before, left unsaid: a user trial)
        return self._none_free(entry, usable) + (
            f"; {len(others)} other matching node(s) take no new stage: "
            + refusals(others, entry.tolerations)
            if others
            else ""
        )

    def _none_free(self, entry: JobEntry, usable: Sequence[NodeInfo]) -> str:
        """Why none of the ``usable`` nodes (matching the job, offered) is free for it."""
        need = self.stage_requests(entry)
        full = [i for i in usable if self._unused(i).server is None]
        unfit = [i for i in usable if i not in full and not self._fits(self._unused(i), need)]
        floor = self.gpu_min(entry.key[0])
        few = [
            i
            for i in usable
            if floor is not None
            and i not in full
            and i not in unfit
            and self._offered(i, entry) < floor[1]
        ]
        init, wanted = entry.init_gpus
        short = [
            i
            for i in usable
            if wanted
            and i not in full
            and i not in unfit
            and i not in few
            and (s.gpus if (s := self._unused(i).server) is not None else 0) < wanted
        ]
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
        if floor is not None and few and len(few) == len(usable):
            return (
                f"none of the {len(usable)} usable node(s) matching the job offers the "
                f"{floor[1]:g} {GPU} namespace {entry.key[0]}'s LimitRange {floor[0]} asks at "
                "least per pod: lower the LimitRange's min, or allow servers with more GPUs"
            )
        if short and len(full) + len(unfit) + len(few) + len(short) == len(usable):
            return (
                f"none of the {len(usable)} usable node(s) matching the job has the {wanted} "
                f"{GPU} free that init container {init} asks (it holds them before the trainer "
                "starts): lower its ask, or allow servers with more GPUs"
            )
        if not full and not unfit and not few and not short:
            return (
                f"all {len(usable)} usable node(s) matching the job are held by other jobs"
                + self._holders(usable, entry.key[0])
            )
        other = {i.name for i in (*full, *unfit, *few, *short)}
        rest = [i for i in usable if i.name not in other]  # the rest: held
        held = len(rest)
        parts = [
            f"{held} held by other jobs{self._holders(rest, entry.key[0])}" if held else "",
            f"{len(full)} with every GPU requested by other pods" if full else "",
            f"{len(unfit)} without room for the stage pods' requests ({describe(need)})"
            if unfit
            else "",
            f"{len(few)} offering fewer than the {floor[1]:g} {GPU} LimitRange {floor[0]} asks"
            if few and floor is not None
            else "",
            f"{len(short)} with fewer than the {wanted} {GPU} init container {init} asks free"
            if short
            else "",
        ]
        return f"none of the {len(usable)} usable node(s) matching the job is free: " + ", ".join(
            p for p in parts if p
        )


HOLDERS_NAMED = 3  # jobs of its namespace a waiting job's reason names as holders, at most
# the holders' part of a reason: left out where reasons are compared (``plan_step.cause_of``)
HOLDERS = re.compile(r" \([^()]* holds? [^()]*\)")


def _holders_text(held: Mapping[str, Key], names: Iterable[str], namespace: str) -> str:
    """`` (l13-4 holds 3, opt 1, other jobs 2)``: which jobs of ``namespace`` hold these
    servers, most first, the rest counted (jobs of other namespaces are not named: their
    names are not this namespace's users' to read); empty where none is held. Before,
    "held by other jobs" named none, and a user looked them up with hulk topology --free (a
    trial)."""
    jobs = Counter(held[n] for n in names if n in held)
    if not jobs:
        return ""
    ranked = sorted(
        ((key, n) for key, n in jobs.items() if key[0] == namespace), key=lambda kv: (-kv[1], kv[0])
    )[:HOLDERS_NAMED]
    named = [f"{key[1]} {'holds ' if k == 0 else ''}{n}" for k, (key, n) in enumerate(ranked)]
    rest = sum(jobs.values()) - sum(n for _, n in ranked)
    if rest and named:
        named.append(f"other jobs {rest}")
    elif rest:
        named.append(f"jobs of other namespaces hold {rest}")
    return f" ({', '.join(named)})"


def held_servers(
    jobs: Mapping[Key, JobEntry], stage_pods: Iterable[tuple[Key, str]]
) -> dict[str, Key]:
    """Server -> the job that holds it: the servers of its plan, then those its live stage
    pods sit on (pods left over, e.g. after a crash mid-placement)."""
    held = {n: k for k, e in jobs.items() for n in e.plan_nodes}
    for k, node in stage_pods:
        held.setdefault(node, k)
    return held


def _tightest(limits: Sequence[tuple[str, float]] | None) -> tuple[str, float] | None:
    """The (name, amount) with the least amount, or None."""
    return min(limits or [], key=lambda q: q[1], default=None)
