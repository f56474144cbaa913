"""The operator's in-memory view of the cluster: kopf indexes, and the ``Snapshot`` that a
planning round reads from them (``build_snapshot``).

Indexes (``@kopf.index``; kopf passes each to the handlers by its function's name):
``hulk_nodes`` (Node -> NodeInfo), ``hulk_jobs`` (HulkTrainingJob -> JobEntry),
``hulk_pods`` (stage pods by job), ``hulk_other_pods`` (what other pods request, by
node), and the namespaces' ResourceQuotas, LimitRanges and the default PriorityClass. An
index function returns ``{}`` for an object it does not index, never None: kopf keeps an
object's last value when the function returns None (a pod that finished kept its GPUs
counted).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from hulk_operator import GANG_GATE, GROUP, LABEL_JOB, PLURAL, VERSION, kube, manifests, recovery
from hulk_operator.config import OperatorConfig
from hulk_operator.context import PodEntry
from hulk_operator.entries import JobEntry, Key, job_entry
from hulk_operator.inventory import (
    NO_GPUS,
    NodeInfo,
    Resources,
    Usage,
    counted_until,
    epoch,
    named,
    node_info,
    other_pods,
    pod_requests,
    served,
)
from hulk_operator.latencies import (
    Latencies,
    node_regions,
    read_latencies,
    server_regions,
    slowest_publisher,
    stale_probes,
    with_regions,
)
from hulk_operator.quotas import (
    Bound,
    Scope,
    default_class,
    gpu_limit,
    gpu_minimum,
    limit_bounds,
    limit_defaults,
    live_facts,
    policy_text,
    quota_left,
    quota_scopes,
    quota_usage,
    scoped_counts,
    service_left,
    summed,
)
from hulk_operator.snapshot import Snapshot, held_servers

LATENCY_CACHE_S = 10.0  # NodeLatency objects, and other namespaces' pods, listed this often
# ... or less often, the NodeLatency objects: reading them may take at most this share of
# the time between two listings (1,000 probed nodes: 109 MB of JSON, 6.8 s to read on one
# core, bench/latency_listing.py; every 10 s, that was most of a core)
LATENCY_LISTING_SHARE = 0.05


def held_now(hulk_jobs: Any, hulk_pods: Any) -> tuple[dict[Key, JobEntry], dict[str, Key]]:
    """The jobs of the index, and server -> the job that holds it (its plan, then its live
    stage pods: ``held_servers``)."""
    jobs = {k: e for k, s in (hulk_jobs or {}).items() if (e := one(s)) is not None}
    pods = (
        (k, p.node)
        for k, store in (hulk_pods or {}).items()
        for p in store
        if p.node and p.phase not in ("Succeeded", "Failed")
    )
    return jobs, held_servers(jobs, pods)


def listing_interval(cost_s: float, max_age_s: float = math.inf) -> float:
    """Seconds until the NodeLatency objects are listed again, after a listing whose
    reading took ``cost_s`` of CPU: ``LATENCY_CACHE_S``, or longer where reading them would
    take more than ``LATENCY_LISTING_SHARE`` of the operator's time (a large cluster's
    listing; the latencies change slowly), but at most half ``max_age_s``
    (``latency_max_age_s``): a listing older would hold reports past it."""
    return max(LATENCY_CACHE_S, min(cost_s / LATENCY_LISTING_SHARE, max_age_s / 2))


@dataclass
class Listings:
    """What the operator lists rather than indexes (``LATENCY_CACHE_S``), kept once for
    every job (``memo.listings``, set at start-up): kopf hands each object's handlers a
    shallow copy of the memo, so what one job's handler set on the memo was its own, and
    every job listed the NodeLatency objects, and other namespaces' pods, for itself."""

    latency: tuple[float, Latencies] = (-LATENCY_CACHE_S, Latencies())
    latency_every: float = LATENCY_CACHE_S  # (``listing_interval`` of the last listing)
    slow_told: bool = False  # (``_warn_slow_publisher`` warned, and it still holds)
    stale_told: bool = False  # (``_warn_stale_probes`` warned, and it still holds)
    outside: tuple[float, dict[str, list[Resources]]] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one listing at a time


def latencies_now(memo: Any) -> Latencies:
    """What the NodeLatency objects say, listed again where the last listing (shared by
    every job: ``memo.listings``) is ``listing_interval`` old (blocking: for a thread)."""
    cache: Listings = memo.listings
    when, latencies = cache.latency
    if time.monotonic() - when >= cache.latency_every:
        cfg: OperatorConfig = memo.config
        cpu = time.thread_time()  # (this thread's CPU: not the wait on a busy API server)
        items = kube.list_objects(memo.api, GROUP, VERSION, "nodelatencies", page=kube.LATENCY_PAGE)
        latencies = read_latencies(items, cfg.latency_max_age_s)
        cost = time.thread_time() - cpu
        cache.latency, cache.latency_every = (
            (time.monotonic(), latencies),
            listing_interval(cost, cfg.latency_max_age_s),
        )
        _warn_slow_publisher(cache, items, cfg.latency_max_age_s)
        _warn_stale_probes(cache, items, cfg.latency_max_age_s, latencies.probes_stale)
    # read with the servers' regions (the node index as the timers last built it): what
    # plans, edit checks and cut-link warnings all use (``latencies.with_regions``)
    view: NodeView | None = memo.get("node_view")
    built = view.built if view is not None else None
    if not built:
        return latencies
    return with_regions(latencies, server_regions(built[1]), node_regions(built[1]))


def _warn_stale_probes(
    cache: Listings, items: Sequence[Any], max_age_s: float, stale: bool
) -> None:
    """Once while it holds (``stale_probes``), and once when probes publish again.
    ``stale``: what ``read_latencies`` found of the same listing (the words are made only
    then: every status was parsed twice a listing; a review)."""
    said = stale_probes(items, max_age_s) if stale else None
    log = logging.getLogger("hulk_operator")
    if said and not cache.stale_told:
        log.warning(said)
    elif not said and cache.stale_told and items:  # (none left: the probes gone, not back)
        log.info("NodeLatency statuses are published again: measured latencies are used")
    cache.stale_told = said is not None


def _warn_slow_publisher(cache: Listings, items: Sequence[Any], max_age_s: float) -> None:
    """Once while it holds: a probe whose measurements may be older than
    ``latency_max_age_s`` when read (its write spacing and probe interval, plus this
    listing's interval) leaves its links to fallback estimates for part of the time (a
    large cluster within the probes' write budget, or a long ``--publish-interval``)."""
    slowest = slowest_publisher(items)
    if slowest is None or slowest[0] + cache.latency_every <= max_age_s:
        cache.slow_told = False
        return
    if cache.slow_told:
        return
    cache.slow_told = True
    seconds, node = slowest
    logging.getLogger("hulk_operator").warning(
        "the probe on %s publishes measurements up to %.0f s old and this operator lists "
        "them every %.0f s, more than --latency-max-age-s (%g s) together: links fall "
        "back to estimates between writes; raise --latency-max-age-s (chart: "
        "operator.config.latency_max_age_s) or lower the probes' probe.maxPublishInterval",
        node,
        seconds,
        cache.latency_every,
        max_age_s,
    )


async def shared_latencies(memo: Any) -> Latencies:
    """``latencies_now`` off the event loop, one listing at a time (``Listings.lock``): at
    each expiry of the cache, the timers of N jobs listed the objects N times at once."""
    cache: Listings = memo.listings
    async with cache.lock:
        return await asyncio.to_thread(latencies_now, memo)


@dataclass
class NodeView:
    """The node index as one dict, ``{name: NodeInfo}``, built again only when a node
    changed (``memo.node_view``, set at start-up, shared by every job): each job's 1 s
    timer built it afresh from the 1,000 entries of a large cluster, the largest part of
    the operator's CPU at rest (a profile, ``bench/operator_scale.py``). ``node_event``
    counts the changes; kopf updates the index before it calls that handler, so a tick
    sees a change at the latest one tick late, and a removal at once (the count differs).
    Also keeps ``recovery.disrupted`` for the dict."""

    changes: int = 0
    built: tuple[int, dict[str, NodeInfo], dict[float, str | None]] | None = None

    def nodes(self, index: Mapping[str, Any]) -> dict[str, NodeInfo]:
        """The index's nodes by name (the same dict until a node changes: read only)."""
        built = self.built
        if built is None or built[0] != self.changes or len(built[1]) != len(index):
            built = self.built = (self.changes, {n: one(s) for n, s in index.items()}, {})
        return built[1]

    def disrupted(self, index: Mapping[str, Any], threshold: float) -> str | None:
        """``recovery.disrupted`` of ``nodes(index)``, worked out once a change."""
        nodes = self.nodes(index)
        assert self.built is not None
        said = self.built[2]
        if threshold not in said:
            said[threshold] = recovery.disrupted(nodes, threshold)
        return said[threshold]


@kopf.on.event("nodes")
async def node_event(memo: kopf.Memo, **_: Any) -> None:
    """A node added, changed or deleted (after kopf updated ``hulk_nodes``): the jobs'
    dict of nodes is built again at their next tick."""
    view = memo.get("node_view")
    if view is not None:
        view.changes += 1


@kopf.index("nodes")
def hulk_nodes(
    name: str, body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any
) -> dict[str, NodeInfo]:
    try:
        info = node_info(body)
    except Exception as exc:  # kopf would keep the node's old entry: a later cordon unseen
        logger.warning(f"node {name} is not offered: {exc}")
        return {name: NodeInfo(name, problem=f"unreadable: {exc}", ready=False)}
    # a GPU node whose labels Hulk cannot read: said once a change (before, it was left out
    # of planning with no word anywhere; a user trial); CPU-only nodes are no news
    told: dict[str, str | None] = memo.setdefault("node_problems", {})
    problem = info.problem if info.problem != NO_GPUS else None
    if told.get(name) != problem:
        if problem is not None:
            logger.warning(f"node {name} is not offered to jobs: {problem}")
        elif info.server is not None:
            logger.info(f"node {name} is offered to jobs again")
        told[name] = problem
    return {name: info}


@kopf.index(GROUP, VERSION, PLURAL)
def hulk_jobs(
    namespace: str | None,
    name: str,
    uid: str,
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[Key, JobEntry]:
    return {
        (namespace or "", name): job_entry(namespace or "", name, uid, body, meta, spec, status)
    }


@kopf.index("pods", labels={LABEL_JOB: kopf.PRESENT})
def hulk_pods(
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[Key, PodEntry]:
    """Stage pods by job: pods a HulkTrainingJob owns that its label names (the label alone
    is not enough, nor the owner alone: ``manifests.stage_job``)."""
    job = manifests.stage_job(meta)
    if job is None:
        return {}
    return {
        (namespace or "", job): PodEntry(
            name=name,
            node=spec.get("nodeName") or manifests.pinned_node(spec),
            phase=str(status.get("phase") or "Pending"),
            gated=any(g.get("name") == GANG_GATE for g in spec.get("schedulingGates") or []),
            deleting=bool(meta.get("deletionTimestamp")),
            reason=str(status.get("reason") or ""),
            unschedulable=next(
                (
                    str(c.get("message") or "Unschedulable")
                    for c in status.get("conditions") or []
                    if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                ),
                "",
            ),
            quota=tuple(sorted(quota_usage(spec).items())),
            bound_at=_bound_at(spec, status),
            counted_until=counted_until(meta),
            requests=pod_requests(spec),
            uid=str(meta.get("uid") or ""),
            facts=live_facts(spec, status),
        )
    }


def _bound_at(spec: Mapping[str, Any], status: Mapping[str, Any]) -> float | None:
    """When a pod bound to a node was bound (its PodScheduled condition turned True)."""
    if not spec.get("nodeName"):
        return None
    return next(
        (
            epoch(c.get("lastTransitionTime"))
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "True"
        ),
        None,
    )


@kopf.index("pods")
def hulk_other_pods(
    meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, **_: Any
) -> dict[str, Resources]:
    """What other pods (not Hulk's stage pods) request, by node: the planner offers only
    the rest of a node's GPUs, and only nodes where a stage pod's CPU and memory fit."""
    node = spec.get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed") or manifests.stage_job(meta):
        return {}
    need = pod_requests(spec)
    return {str(node): need} if any(need) else {}


@kopf.index("resourcequotas")
def hulk_quotas(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, dict[str, float]]]:
    """Quotas by namespace: what each ResourceQuota leaves of the resources pods count
    toward (GPUs, pods, CPU, memory), so that a job is planned within them instead of
    holding servers its stage pods may not use. Scoped ones: ``hulk_scoped_quotas``."""
    left = quota_left(body)
    if not namespace or left is None or quota_scopes(body):
        return {}
    return {namespace: (name, left)}


@kopf.index("resourcequotas")
def hulk_scoped_quotas(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, dict[str, float], tuple[Scope, ...]]]:
    """Scoped quotas by namespace (by PriorityClass, QoS class, deadline): they count a
    job's stage pods where their scopes match them."""
    left, scopes = quota_left(body), quota_scopes(body)
    if not namespace or left is None or not scopes:
        return {}
    return {namespace: (name, left, scopes)}


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses")
def hulk_default_priority(name: str, body: kopf.Body, **_: Any) -> dict[str, tuple[float, str]]:
    """The PriorityClasses that pods naming none may get (``globalDefault``; of several,
    the lowest value wins, as in the Priority admission plugin): scoped quotas read it as
    theirs."""
    if body.get("globalDefault") is not True:
        return {}
    return {"default": (float(body.get("value") or 0), name)}


@kopf.index("resourcequotas")
def hulk_service_quotas(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, str, float]]:
    """Quotas on Services by namespace (``services``, ``count/services``): a job with no
    Service yet is planned only where one is left, as its headless Service comes first."""
    left = service_left(body)
    return {namespace: (name, *left)} if namespace and left is not None else {}


@kopf.index("services", labels={LABEL_JOB: kopf.PRESENT})
def hulk_services(namespace: str | None, meta: kopf.Meta, **_: Any) -> dict[Key, bool]:
    """The jobs whose headless Service exists (a Service a HulkTrainingJob owns)."""
    job = manifests.owner_job(meta)
    return {(namespace or "", job): True} if job else {}


@kopf.index("resourcequotas")
def hulk_quota_specs(
    namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[str, tuple[str, str]]:
    """Each ResourceQuota's spec by namespace, scoped ones and object counts included: a
    change ends the pause of a job whose pods were refused (a quota raised, or gone)."""
    return {namespace: (f"ResourceQuota {name}", policy_text(spec))} if namespace else {}


@kopf.index("limitranges")
def hulk_limit_specs(
    namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[str, tuple[str, str]]:
    """Each LimitRange's spec by namespace (as ``hulk_quota_specs``)."""
    return {namespace: (f"LimitRange {name}", policy_text(spec))} if namespace else {}


@kopf.index("limitranges")
def hulk_gpu_limits(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, float]]:
    """GPU maximums per stage pod by namespace (LimitRanges): a server offers a job at
    most that many GPUs."""
    most = gpu_limit(body)
    return {namespace: (name, most)} if namespace and most is not None else {}


@kopf.index("limitranges")
def hulk_gpu_minimums(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, float]]:
    """GPU minimums per stage pod by namespace (LimitRanges): a server that offers a job
    fewer GPUs is not planned for it (its stage pod would be refused)."""
    least = gpu_minimum(body)
    return {namespace: (name, least)} if namespace and least is not None else {}


@kopf.index("limitranges")
def hulk_limit_defaults(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """Default requests and limits by namespace (LimitRanges): they count toward the
    namespace's quotas for a template that leaves them out."""
    defaults = limit_defaults(body)
    return {namespace: (name, *defaults)} if namespace and defaults is not None else {}


@kopf.index("limitranges")
def hulk_limit_bounds(
    namespace: str | None, body: kopf.Body, **_: Any
) -> dict[str, tuple[Bound, ...]]:
    """What LimitRanges bound a container's and a pod's requests and limits by (GPUs
    aside), by namespace: a template out of bounds is told before planning, and holds no
    server."""
    bounds = limit_bounds(body)
    return {namespace: bounds} if namespace and bounds is not None else {}


def one(store: Any) -> Any:
    """The one value an index keeps for a key (None when there is none)."""
    return next(iter(store), None) if store is not None else None


async def outside_pods(memo: kopf.Memo) -> dict[str, list[Resources]]:
    """What the pods of the namespaces this operator does not serve request, by node: its
    pod index sees those it serves alone, so the others are listed (every
    ``LATENCY_CACHE_S`` at most, one listing at a time for all jobs); another team's
    notebook, or another operator's stage pod, holds GPUs that must not be offered. A
    listing that fails is logged and the last one kept: recovery goes on."""
    cache: Listings = memo.listings
    async with cache.lock:
        when, outside = cache.outside or (-LATENCY_CACHE_S, None)
        if outside is None or time.monotonic() - when >= LATENCY_CACHE_S:
            try:
                plain = [n for n in memo.namespaces if named(n)]
                pods = await asyncio.to_thread(kube.list_running_pods, memo.api, plain)
            except Exception as exc:  # (forbidden, a timeout: the API server's to fix)
                logging.getLogger("hulk_operator").warning(
                    f"cannot list the pods of other namespaces ({type(exc).__name__}: {exc}); "
                    "the GPUs they hold are those seen last"
                )
                cache.outside = (time.monotonic(), outside or {})
                return outside or {}
            theirs = [
                p for p in pods if not served(str(p["metadata"].get("namespace")), memo.namespaces)
            ]
            outside = other_pods(theirs, memo.namespaces)
            cache.outside = (time.monotonic(), outside)
        return outside


async def build_snapshot(
    memo: kopf.Memo,
    hulk_nodes: Any,
    hulk_jobs: Any,
    hulk_pods: Any,
    used: Mapping[str, Resources] | None = None,
    **indexes: Any,
) -> Snapshot:
    """The cluster now: servers, measured latencies, jobs, who holds which server, and the
    GPUs other pods hold (``snapshot_with`` the latencies listed once for every job)."""
    latencies = await shared_latencies(memo)
    return snapshot_with(latencies, hulk_nodes, hulk_jobs, hulk_pods, used, **indexes)


def snapshot_now(memo: kopf.Memo, indexes: Mapping[str, Any]) -> Snapshot:
    """``build_snapshot`` from a thread (a sync handler: the update handler's edit check),
    from kopf's indexes by name (``hulk_nodes``, ``hulk_jobs``...); the GPUs of pods in the
    namespaces it does not serve as the timers last listed them (``outside_pods``). Read
    again where kopf changed an index meanwhile (a sync handler runs beside the event loop
    that updates them: a review)."""
    for _ in range(4):
        try:
            return _snapshot_now(memo, indexes)
        except RuntimeError:  # dictionary changed size during iteration: read again
            time.sleep(0.01)
    return _snapshot_now(memo, indexes)


def _snapshot_now(memo: kopf.Memo, indexes: Mapping[str, Any]) -> Snapshot:
    cached = memo.listings.outside if memo.get("namespaces") else None
    names = ("hulk_quotas", "hulk_gpu_limits", "hulk_gpu_minimums", "hulk_limit_defaults",
             "hulk_limit_bounds", "hulk_scoped_quotas", "hulk_default_priority",
             "hulk_service_quotas", "hulk_services")  # fmt: skip
    return snapshot_with(
        latencies_now(memo),
        indexes.get("hulk_nodes") or {},
        indexes.get("hulk_jobs") or {},
        indexes.get("hulk_pods") or {},
        Usage(indexes.get("hulk_other_pods") or {}, *([cached[1]] if cached else [])),
        policy_specs=(indexes.get("hulk_quota_specs"), indexes.get("hulk_limit_specs")),
        **{n: indexes.get(n) for n in names},
    )


def snapshot_with(
    latencies: Latencies,
    hulk_nodes: Any,
    hulk_jobs: Any,
    hulk_pods: Any,
    used: Mapping[str, Resources] | None = None,
    *,
    hulk_quotas: Any = None,
    hulk_gpu_limits: Any = None,
    hulk_gpu_minimums: Any = None,
    hulk_limit_defaults: Any = None,
    hulk_limit_bounds: Any = None,
    policy_specs: Sequence[Any] = (),
    hulk_scoped_quotas: Any = None,
    hulk_default_priority: Any = None,
    hulk_service_quotas: Any = None,
    hulk_services: Any = None,
) -> Snapshot:
    """The snapshot of these indexes, with ``latencies`` (as listed)."""
    nodes = {n: one(s) for n, s in hulk_nodes.items() if one(s) is not None}
    jobs, held = held_now(hulk_jobs, hulk_pods)
    now = time.time()
    counting = {k: [p for p in store if p.counts(now)] for k, store in hulk_pods.items()}
    counted = {k: summed(dict(p.quota) for p in pods) for k, pods in counting.items()}

    def by_namespace(index: Any) -> dict[str, list[Any]]:
        return {ns: list(store) for ns, store in (index or {}).items()}

    scoped = by_namespace(hulk_scoped_quotas)

    return Snapshot(
        nodes=nodes,
        latencies=with_regions(latencies, server_regions(nodes), node_regions(nodes)),
        jobs=jobs,
        held=held,
        used=used or {},
        quotas=by_namespace(hulk_quotas),
        counted=counted,
        counted_scoped=scoped_counts(
            {k: [(p.facts, dict(p.quota)) for p in pods] for k, pods in counting.items()}, scoped
        ),
        gpu_limits=by_namespace(hulk_gpu_limits),
        gpu_minimums=by_namespace(hulk_gpu_minimums),
        limit_defaults=by_namespace(hulk_limit_defaults),
        limit_bounds={
            ns: [b for bounds in stores for b in bounds]
            for ns, stores in by_namespace(hulk_limit_bounds).items()
        },
        policies={
            ns: [p for index in policy_specs for p in (index or {}).get(ns, ())]
            for ns in {ns for index in policy_specs for ns in (index or {})}
        },
        scoped_quotas=scoped,
        default_priority_class=default_class((hulk_default_priority or {}).get("default", ())),
        service_quotas=by_namespace(hulk_service_quotas),
        services=frozenset(k for k, store in (hulk_services or {}).items() if any(store)),
    )
