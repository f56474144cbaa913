"""The cluster as the planner sees it, from Node objects and NodeLatency measurements.

A Node becomes a planner ``Server`` from (see ``docs/operator.md``):

- region: label ``topology.kubernetes.io/region`` (``unlabelled`` when absent); zone:
  ``topology.kubernetes.io/zone``;
- GPUs: ``status.allocatable["nvidia.com/gpu"]`` (not the ``gpu.count`` label);
- memory per GPU: GPU Feature Discovery's ``nvidia.com/gpu.memory`` (MiB);
- TFLOPS per GPU: annotation ``hulk.dev/gpu-tflops`` if set, else from
  ``nvidia.com/gpu.product``, else from ``nvidia.com/gpu.compute.major``/``minor``.

Nodes whose GPUs are MIG slices (``nvidia.com/mig.strategy`` other than ``none``, or a
``-MIG-`` product) or time-sliced (product ending in ``-SHARED``) are not offered to the
planner: a slice is not a pipeline worker with the labelled memory and speed.

Health: a node hosts stages while it is Ready, not cordoned and has no NoExecute taint
(other than ones the job tolerates); new stages go only where no NoSchedule taint is left
untolerated (``nvidia.com/gpu:NoSchedule`` is always tolerated).

Latencies: ``hulk_operator.latencies``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple

from hulk_operator import GPU
from hulk_operator.manifests import stage_job
from hulk_operator.quotas import effective_resources, parse_amount
from hulk_planner.datasets import slug
from hulk_planner.errors import InvalidRequest
from hulk_planner.hardware import normalize_capability, tflops_for
from hulk_planner.model import MAX_GPU_MEMORY_GIB, Server

REGION = "topology.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
COUNT = "nvidia.com/gpu.count"  # (GPU Feature Discovery's; the GPUs are allocatable's)
MAJOR = "nvidia.com/gpu.compute.major"
MINOR = "nvidia.com/gpu.compute.minor"
MIG = "nvidia.com/mig.strategy"
TFLOPS_ANNOTATION = "hulk.dev/gpu-tflops"
UNLABELLED = "unlabelled"
# Plausibility bounds on what a node's labels say of one GPU (several times the largest
# made, 288 GB and about 2,500 dense 16-bit TFLOPS in 2025): a typo'd label otherwise made a
# model no GPU could hold fit one server, and a running job's pods moved there (a user trial)
MAX_LABEL_MEMORY_MIB = MAX_GPU_MEMORY_GIB * 1024  # 1 TiB: the planner's bound
MAX_ANNOTATED_TFLOPS = 20_000.0
NOT_EXTRA = (GPU, "cpu", "memory", "pods")  # allocatable kept apart, or not a request
ALWAYS_TOLERATED = ({"key": GPU, "operator": "Exists", "effect": "NoSchedule"},)
# the node lifecycle controller's taints of a NotReady node: judged as NotReady (its grace,
# the disruption rule: ``recovery.lost_servers``), not as taints
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class Resources(NamedTuple):
    """GPUs, CPU cores, memory bytes and any other resource (``ephemeral-storage``,
    ``hugepages-*``, extended resources such as ``example.com/fpga``): a node's allocatable,
    or what pods request. ``extra`` holds the others as (name, amount) pairs sorted by name."""

    gpus: int = 0
    cpu: float = 0.0
    memory: float = 0.0
    extra: tuple[tuple[str, float], ...] = ()

    def plus(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus,
            self.cpu + other.cpu,
            self.memory + other.memory,
            _merge(self.extra, other.extra, float.__add__),
        )

    def most(self, other: Resources) -> Resources:
        return Resources(
            max(self.gpus, other.gpus),
            max(self.cpu, other.cpu),
            max(self.memory, other.memory),
            _merge(self.extra, other.extra, max),
        )

    def amount(self, name: str) -> float:
        """An ``extra`` resource's amount (0 where absent, as the scheduler counts it)."""
        return dict(self.extra).get(name, 0.0)


def _merge(
    a: tuple[tuple[str, float], ...],
    b: tuple[tuple[str, float], ...],
    op: Callable[[float, float], float],
) -> tuple[tuple[str, float], ...]:
    out = dict(a)
    for k, v in b:
        out[k] = op(out.get(k, 0.0), v)
    return tuple(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass(frozen=True)
class NodeInfo:
    """What the operator keeps of a Node (the value of the ``nodes`` index)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    server: Server | None = None
    problem: str | None = None  # why it is no planner server, if it is not
    ready: bool = True
    # when it went NotReady (its Ready condition's lastTransitionTime, epoch seconds);
    # None while Ready or where the node does not say
    not_ready_since: float | None = None
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=Resources)  # all zero: not reported
    created: float | None = None  # its metadata.creationTimestamp (epoch seconds)

    def __eq__(self, other: object) -> bool:
        """Equal fields and equal labels: kopf keeps an index's old value when the new one
        compares equal, so a label change alone (a node labelled for a job's nodeSelector)
        must make it unequal. (The labels stay out of the hash: a dict is unhashable.)"""
        if not isinstance(other, NodeInfo):
            return NotImplemented
        mine = tuple(getattr(self, f.name) for f in fields(self) if f.compare)
        theirs = tuple(getattr(other, f.name) for f in fields(other) if f.compare)
        return mine == theirs and dict(self.labels) == dict(other.labels)

    def sick(self, tolerations: Sequence[Mapping[str, Any]] = ()) -> str | None:
        """Why running stages must leave this node, or None while it can keep them. A
        NoExecute taint the job does not tolerate for good comes first: Kubernetes evicts
        at once, NotReady or not (before, a node tainted and then shut down waited out the
        NotReady grace, or a disruption; a review)."""
        for t in self.taints:
            if t.effect != "NoExecute" or t.key in LIFECYCLE_TAINTS:
                continue
            if not tolerates([*ALWAYS_TOLERATED, *tolerations], t):
                # (one tolerated for tolerationSeconds: evicted then, and made again, for
                # ever, before; a review)
                return f"Tainted {taint_text(t, tolerations)}"
        if not self.ready:
            return "NotReady"
        if self.unschedulable:
            return "Cordoned"
        return None

    def barred(self, tolerations: Sequence[Mapping[str, Any]] = ()) -> str | None:
        """Why no new stage pod of the job may go here though running ones stay (a
        NoSchedule taint it does not tolerate: ``Tainted key=value:NoSchedule``), or None."""
        if self.unschedulable:  # (as its taint says, which the controller adds later)
            return "Cordoned"
        tol = [*ALWAYS_TOLERATED, *tolerations]
        for t in self.taints:  # (a NotReady node's are its grace's: before, a stage pod
            # made again there was re-planned at once, as on a tainted node; a review)
            if t.effect == "NoSchedule" and t.key not in LIFECYCLE_TAINTS and not tolerates(tol, t):
                return f"Tainted {taint_text(t)}"
        return None

    def offers(self, tolerations: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Whether new stage pods may go here."""
        return (
            self.server is not None
            and self.sick(tolerations) is None
            and self.barred(tolerations) is None
        )


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What a pod holds on its node, as the scheduler counts it: the sum over its
    containers or its largest init container, whichever is more, per resource (a request
    missing where a limit is set is the limit, as the API server defaults it)."""
    got = effective_resources(spec, limits=False)
    gpus, cpu, memory = (got.pop(k, 0.0) for k in (GPU, "cpu", "memory"))
    return Resources(int(gpus), cpu, memory, tuple(sorted(got.items())))


def served(namespace: str, patterns: Sequence[str]) -> bool:
    """Whether an operator started with ``--namespace`` ``patterns`` serves ``namespace``
    (every namespace when there are none), by kopf's own matching: any pattern, each
    comma-separated globs read left to right, ``!`` excluding."""
    from kopf._cogs.structs.references import match_namespace  # (kopf's, as kopf serves)

    return not patterns or any(match_namespace(namespace, p) for p in patterns)  # type: ignore[arg-type]


def named(pattern: str) -> bool:
    """Whether a ``--namespace`` pattern names one namespace as it is, with no glob,
    list or exclusion (``served`` reads those)."""
    return not any(c in pattern for c in "*?[!,")


def other_pods(
    pods: Iterable[Mapping[str, Any]], patterns: Sequence[str] = ()
) -> dict[str, list[Resources]]:
    """What the pods bound to nodes request, by node, leaving out the stage pods of the
    jobs this operator serves (the namespaces ``patterns`` name; all where none): those
    it plans itself. A stage pod of another operator's namespace is another pod here."""
    out: dict[str, list[Resources]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (stage_job(meta) and served(str(meta.get("namespace")), patterns)):
            continue
        need = pod_requests(spec)
        if any(need):
            out.setdefault(node, []).append(need)
    return out


def fits(allocatable: Resources, taken: Resources, need: Resources, gpus: int) -> bool:
    """Whether a pod requesting ``need`` fits on a node with ``allocatable`` (and ``gpus``
    GPUs left) beside other pods requesting ``taken``. CPU or memory the node does not
    report is not checked; any other resource it does not report it has none of, as the
    scheduler counts extended resources (a node reporting no allocatable is not checked)."""
    room = allocatable
    return (
        (not need.gpus or gpus >= need.gpus)
        and (not need.cpu or not room.cpu or room.cpu - taken.cpu >= need.cpu)
        and (not need.memory or not room.memory or room.memory - taken.memory >= need.memory)
        and (
            room == Resources() or all(room.amount(k) - taken.amount(k) >= v for k, v in need.extra)
        )
    )


class Usage(Mapping[str, Resources]):
    """What other pods request on each node, added up when a node is looked up: a view of
    node -> each pod's requests (the operator's index), so a reconciliation that needs one
    node does not add up every node."""

    def __init__(self, *by_node: Mapping[str, Iterable[Resources]]) -> None:
        self._by_node = by_node  # (several: the index, and pods listed apart)

    def __getitem__(self, node: str) -> Resources:
        found = [m[node] for m in self._by_node if node in m]
        if not found:
            raise KeyError(node)
        out = Resources()
        for r in (r for rs in found for r in rs):
            out = out.plus(r)
        return out

    def __iter__(self) -> Iterator[str]:
        return iter({n: None for m in self._by_node for n in m})

    def __len__(self) -> int:
        return len({n for m in self._by_node for n in m})


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Kubernetes' toleration matching for one taint, for good: a NoExecute taint that a
    matching toleration bounds with ``tolerationSeconds`` is not (the pod is evicted after
    the least of them, whatever others match without one: the taint eviction
    controller's ``getMinTolerationTime``)."""
    matched = [tol for tol in tolerations if _matches(tol, taint)]
    return bool(matched) and (taint.effect != "NoExecute" or bounded(matched, taint) is None)


def bounded(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> float | None:
    """The least ``tolerationSeconds`` of the tolerations matching ``taint`` (when the pod
    is evicted), or None where none bounds it."""
    found = [
        max(0.0, float(tol["tolerationSeconds"]))
        for tol in tolerations
        if _matches(tol, taint) and isinstance(tol.get("tolerationSeconds"), int | float)
    ]
    return min(found, default=None)


def taint_text(taint: Taint, tolerations: Iterable[Mapping[str, Any]] = ()) -> str:
    """``key=value:Effect``, and for a NoExecute taint ``tolerations`` bound, for how long
    (``maint=yes:NoExecute (tolerated for 30 s only)``)."""
    for_s = bounded(tolerations, taint) if taint.effect == "NoExecute" else None
    told = f" (tolerated for {for_s:g} s only)" if for_s is not None else ""
    return f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}{told}"


def _matches(tol: Mapping[str, Any], taint: Taint) -> bool:
    """Whether one toleration matches ``taint`` (key, value, operator, effect)."""
    effect = tol.get("effect")
    if effect and effect != taint.effect:
        return False
    key = tol.get("key")
    if tol.get("operator", "Equal") == "Exists":
        return not key or key == taint.key
    return key == taint.key and (tol.get("value") or None) == (taint.value or None)


def _float(text: Any) -> float | None:
    """A label's or annotation's number, or None unless it is finite and above zero."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if 0 < value < math.inf else None


def _quantity(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        return 0


def epoch(stamp: Any) -> float | None:
    """An RFC 3339 time (``2026-11-23T00:33:41Z``) as epoch seconds; None if unreadable."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def counted_until(meta: Mapping[str, Any]) -> float | None:
    """When quotas stop counting a Terminating pod: its deletionTimestamp (already the
    deletion's time plus the grace) plus its grace period again, as Kubernetes' quota
    evaluator (``QuotaV1Pod``) has it. Before, a pod stuck Terminating on a node that
    stopped answering was credited to its job for ever, while its quota's ``used`` had
    dropped: a regrowth counted that room twice, and its pods were refused (a review)."""
    stamp = meta.get("deletionTimestamp")
    if not stamp:
        return None
    at = epoch(stamp)
    grace = meta.get("deletionGracePeriodSeconds")
    if at is None or not isinstance(grace, int | float):
        return None  # (Kubernetes counts it on: no grace to run out)
    return at + float(grace)


def still_counted(phase: str | None, until: float | None, now: float) -> bool:
    """Whether ResourceQuotas still count a pod at ``now``: not once Succeeded or Failed,
    nor Terminating past ``until`` (``counted_until``)."""
    return phase not in ("Succeeded", "Failed") and (until is None or now <= until)


NO_GPUS = "no allocatable nvidia.com/gpu"  # a CPU node's (no problem to tell of)


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    """A Node object (dict) -> :class:`NodeInfo`. Pure."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    name = str(meta.get("name"))
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    since = next(
        (epoch(c.get("lastTransitionTime")) for c in conditions if c.get("type") == "Ready"),
        None,
    )
    taints = tuple(
        Taint(str(t.get("key")), t.get("value"), str(t.get("effect")))
        for t in spec.get("taints") or []
    )
    lifecycle = [t for t in spec.get("taints") or [] if t.get("key") in LIFECYCLE_TAINTS]
    if lifecycle and ready:
        # the node lifecycle controller's taint, its Ready condition True (not yet False, or
        # True again, the taint not yet lifted): NotReady since the taint was added, not
        # since the condition last turned True (kwok keeps that time from the node's start:
        # a 20 s NotReady node looked NotReady for minutes and was re-planned at once)
        ready = False
        added = [a for t in lifecycle if (a := epoch(t.get("timeAdded"))) is not None]
        since = min(added, default=None)
    alloc = status.get("allocatable") or {}
    others = {k: parse_amount(v) for k, v in alloc.items() if k not in NOT_EXTRA}
    created = epoch(meta.get("creationTimestamp"))
    info = dict(
        name=name,
        labels=labels,
        ready=ready,
        # a node without a Ready condition yet (just registered): NotReady since it was
        # made (before, since ever: a node made again under its name was lost at once, its
        # stage moved before its kubelet had said a word)
        not_ready_since=None if ready else (since if since is not None else created),
        created=created,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=Resources(
            0,
            parse_amount(alloc.get("cpu")),
            parse_amount(alloc.get("memory")),
            tuple(sorted((k, v) for k, v in others.items() if v)),
        ),
    )
    gpus = _quantity(alloc.get(GPU, 0))
    product = labels.get(PRODUCT)
    problem = None
    capability = None
    if labels.get(MAJOR):
        capability = normalize_capability(f"{labels[MAJOR]}.{labels.get(MINOR, '0')}")
    memory_mib = _float(labels.get(MEMORY))
    tflops = _float(annotations.get(TFLOPS_ANNOTATION)) or tflops_for(product, capability)
    if gpus <= 0:
        problem = NO_GPUS
    elif labels.get(MIG, "none") not in ("none", "") or "-MIG-" in (product or "").upper():
        problem = "GPUs are MIG slices"
    elif (product or "").upper().endswith("-SHARED"):
        problem = "GPUs are time-sliced (-SHARED)"
    elif memory_mib is None and labels.get(MEMORY) is not None:
        problem = f"label {MEMORY}={labels[MEMORY]!r} is not a finite number of MiB above zero"
    elif memory_mib is None:
        problem = f"label {MEMORY} is missing"
    elif memory_mib > MAX_LABEL_MEMORY_MIB:
        problem = (
            f"label {MEMORY}={labels[MEMORY]!r} is more than any GPU has (the label is in MiB: "
            f"at most {MAX_LABEL_MEMORY_MIB}, 1 TiB)"
        )
    elif _float(annotations.get(TFLOPS_ANNOTATION)) is None and TFLOPS_ANNOTATION in annotations:
        problem = (
            f"annotation {TFLOPS_ANNOTATION}={annotations[TFLOPS_ANNOTATION]!r} is not a "
            "finite number above zero"
        )
    elif tflops is None:
        problem = f"unknown GPU speed (set annotation {TFLOPS_ANNOTATION})"
    elif tflops > MAX_ANNOTATED_TFLOPS:
        problem = (
            f"annotation {TFLOPS_ANNOTATION}={annotations[TFLOPS_ANNOTATION]!r} is more than "
            f"any GPU does (at most {MAX_ANNOTATED_TFLOPS:g} dense 16-bit TFLOPS per GPU)"
        )
    if problem:
        return NodeInfo(**info, problem=problem)  # type: ignore[arg-type]
    assert memory_mib is not None and tflops is not None
    try:
        server = Server(
            name=name,
            region=labels.get(REGION) or UNLABELLED,
            gpus=gpus,
            gpu_memory_gib=memory_mib / 1024,
            gpu_tflops=tflops,
            gpu_product=product,
            compute_capability=capability,
            zone=labels.get(ZONE),
        )
    except InvalidRequest as exc:  # a value no server can have: the node is not offered
        return NodeInfo(**info, problem=f"{exc.field.split('.')[-1]} {exc.problem}")  # type: ignore[arg-type]
    return NodeInfo(**info, server=server)  # type: ignore[arg-type]


def selected(
    info: NodeInfo,
    selector: Mapping[str, str] | None,
    regions: Sequence[str] | None,
    affinity: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """The job's ``nodeSelector``, ``allowedRegions`` and required node affinity."""
    if selector and any(info.labels.get(k) != v for k, v in selector.items()):
        return False
    if regions and slug(node_region(info)) not in region_keys(tuple(regions)):
        return False  # (``London`` for label ``london``, as ``hulk plan`` takes it)
    return affinity_matches(info, affinity)


def node_region(info: NodeInfo) -> str:
    """The node's region as ``allowedRegions`` matches it (a node that is no server, e.g.
    its GPU labels unreadable, by its region label: it matches, and is told of as taking
    no stage)."""
    return info.server.region if info.server else info.labels.get(REGION) or UNLABELLED


@functools.cache
def region_keys(regions: tuple[str, ...]) -> frozenset[str]:
    """``allowedRegions`` as matched, without regard to case, spaces or punctuation (the
    region label's slug): before, only the label's exact value matched, where ``hulk plan``
    on a topology file took ``London`` for ``london`` (a user trial)."""
    return frozenset(slug(r) for r in regions)


def affinity_matches(info: NodeInfo, terms: Sequence[Mapping[str, Any]]) -> bool:
    """Kubernetes' required node affinity (``nodeSelectorTerms``): the node matches one
    term, i.e. all of its ``matchExpressions`` and ``matchFields``; no terms, no limit."""
    if not terms:
        return True
    fields = {"metadata.name": info.name}

    def term_matches(term: Mapping[str, Any]) -> bool:
        exprs, by_field = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not by_field:
            return False  # an empty term matches no node
        return all(_expression(info.labels, e) for e in exprs) and all(
            _expression(fields, e) for e in by_field
        )

    return any(term_matches(t) for t in terms)


def _expression(labels: Mapping[str, str], e: Mapping[str, Any]) -> bool:
    key, op, values = e.get("key"), e.get("operator"), [str(v) for v in e.get("values") or []]
    value = labels.get(str(key))
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            mine, bound = int(value), int(values[0])
        except ValueError:
            return False
        return mine > bound if op == "Gt" else mine < bound
    return False
