"""What a pod counts toward its namespace's ResourceQuotas, and how its LimitRanges bound
and default its resources, as Kubernetes' admission reads them (kopf-free, so that ``hulk
plan --kubeconfig`` reads them exactly as the operator does).

- ResourceQuota: what it leaves (``quota_left``), which pods it counts (``quota_scopes``,
  ``scopes_match`` on a pod's ``PodFacts``), what a pod counts (``quota_usage``).
- LimitRange: the defaults it fills in (``limit_defaults``, ``with_defaults``), its bounds
  (``limit_bounds``, ``bounds_refuse``) and its GPU maximum (``gpu_limit``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from hulk_operator import GPU

QUOTA_GPU = f"requests.{GPU}"  # the only quota key an extended resource may have
_COMPUTE = ("cpu", "memory", "ephemeral-storage")
_POD_KEYS = ("pods", "count/pods", *_COMPUTE)
# the limits a pod counts toward: Kubernetes' pod evaluator counts no other (a quota on
# limits.<an extended resource> matches no pod; before, it was taken to: a review)
_LIMIT_KEYS = tuple(f"limits.{name}" for name in _COMPUTE)


def counts_pods(resource: str) -> bool:
    """Whether a ResourceQuota's ``resource`` counts what pods use (``pods``, ``cpu``,
    ``requests.memory``, ``limits.cpu``, ``requests.nvidia.com/gpu``, ...), as Kubernetes'
    pod evaluator tracks them, as opposed to objects or volume claims (``services``,
    ``requests.storage``) and names it tracks for nothing (``requests.kubernetes.io/x``:
    its status never gets a ``used``, and it was taken to leave nothing; a review)."""
    if resource in _POD_KEYS or resource in _LIMIT_KEYS or resource.startswith("hugepages-"):
        return True
    name = resource.removeprefix("requests.")
    if name == resource:
        return False
    extended = "/" in name and "kubernetes.io/" not in name  # (Kubernetes' own test)
    return name in _COMPUTE or name.startswith("hugepages-") or extended


def quota_left(body: Mapping[str, Any]) -> dict[str, float] | None:
    """What a ResourceQuota leaves its namespace (hard minus used) of each resource that
    pods count toward, or None where it limits none of them. (A scoped one counts only the
    pods its ``quota_scopes`` match.) The hard limits are those its status holds, as
    admission reads them (a ``spec.hard`` raised counts once the quota controller has
    synced it); a resource there with no ``used`` yet leaves nothing, as admission refuses
    pods then ("status unknown"); a quota with no status yet, its ``spec.hard`` with none
    used (a review)."""
    status = body.get("status") or {}
    used = status.get("used") or {}
    synced = status.get("hard")
    hard = (synced if synced else (body.get("spec") or {}).get("hard") or {}).items()
    left = {
        k: parse_amount(v) - parse_amount(used.get(k)) if k in used or not synced else 0.0
        for k, v in hard
        if counts_pods(k)
    }
    return left or None


SERVICE_KEYS = ("services", "count/services")  # what a job's headless Service counts toward


def service_left(body: Mapping[str, Any]) -> tuple[str, float] | None:
    """(resource, Services left) of an unscoped ResourceQuota that limits Services (the
    tighter of ``services`` and ``count/services``), or None. Every job needs one Service,
    its headless Service, created before its stage pods. (Scopes apply to pods only.)"""
    spec = body.get("spec") or {}
    if spec.get("scopes") or spec.get("scopeSelector"):
        return None
    used = (body.get("status") or {}).get("used") or {}
    hard = spec.get("hard") or {}
    left = [
        (k, parse_amount(hard[k]) - parse_amount(used.get(k))) for k in SERVICE_KEYS if k in hard
    ]
    return min(left, key=lambda kv: kv[1]) if left else None


# (scopeName, operator, values) of a ResourceQuota's scopes and scopeSelector
Scope = tuple[str, str, tuple[str, ...]]


def quota_scopes(body: Mapping[str, Any]) -> tuple[Scope, ...]:
    """The pods a ResourceQuota counts, as Kubernetes reads its ``scopes`` (each an
    ``Exists``) and its ``scopeSelector``'s expressions; () for every pod."""
    spec = body.get("spec") or {}
    out: list[Scope] = [(str(s), "Exists", ()) for s in spec.get("scopes") or ()]
    for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or ():
        out.append((str(e.get("scopeName")), str(e.get("operator")), tuple(e.get("values") or ())))
    return tuple(out)


@dataclass(frozen=True)
class PodFacts:
    """What a ResourceQuota's scopes read of a pod."""

    terminating: bool = False  # spec.activeDeadlineSeconds set
    best_effort: bool = False  # QoS class BestEffort: no CPU or memory asked anywhere
    priority_class: str = ""  # spec.priorityClassName, the global default's where unset
    cross_namespace_affinity: bool = False  # a pod (anti-)affinity term naming namespaces


def scopes_match(scopes: Sequence[Scope], pod: PodFacts) -> bool:
    """Whether a quota with these scopes counts the pod, as Kubernetes' pod evaluator
    matches each (all must): a PriorityClass selector reads the class as a label that is
    absent when the pod has none."""
    for name, op, values in scopes:
        if name == "PriorityClass":
            pc = pod.priority_class
            ok = {
                "Exists": pc != "",
                "DoesNotExist": pc == "",
                "In": pc != "" and pc in values,
                "NotIn": pc == "" or pc not in values,
            }.get(op, False)
        else:
            facts = {
                "Terminating": pod.terminating,
                "NotTerminating": not pod.terminating,
                "BestEffort": pod.best_effort,
                "NotBestEffort": not pod.best_effort,
                "CrossNamespacePodAffinity": pod.cross_namespace_affinity,
            }
            # (their operator is always Exists; VolumeAttributesClass: claims, not pods)
            ok = facts.get(name, False)
        if not ok:
            return False
    return True


def default_class(defaults: Iterable[tuple[float, str]]) -> str:
    """The PriorityClass a pod naming none gets, of the (value, name) of those marked
    ``globalDefault``: the lowest value, as the Priority admission plugin picks it where
    several are marked; "" where none is."""
    return min(defaults, default=(0.0, ""))[1]


def best_effort(spec: Mapping[str, Any]) -> bool:
    """Whether a pod (its resources, ``with_defaults``') is of QoS class BestEffort: no
    CPU or memory requested or limited above zero, by its pod-level resources where set,
    else by any container (GPUs do not count)."""
    pod = spec.get("resources") or {}
    if pod.get("requests") or pod.get("limits"):
        lists = [pod]
    else:
        cs = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
        lists = [c.get("resources") or {} for c in cs]
    return not any(
        k in ("cpu", "memory") and parse_amount(v) > 0
        for res in lists
        for kind in ("requests", "limits")
        for k, v in (res.get(kind) or {}).items()
    )


def live_facts(spec: Mapping[str, Any], status: Mapping[str, Any]) -> PodFacts:
    """What scoped quotas read of an admitted pod: its spec (the Priority admission plugin
    has set the global default's class where it named none) and its QoS class."""
    terminating, priority_class, cross = template_facts(spec)
    qos = status.get("qosClass")
    return PodFacts(
        terminating,
        qos == "BestEffort" if qos else best_effort(spec),
        priority_class,
        cross,
    )


def scoped_counts(
    pods: Mapping[tuple[str, str], Iterable[tuple[PodFacts, Mapping[str, float]]]],
    scoped: Mapping[str, Sequence[tuple[str, Any, tuple[Scope, ...]]]],
) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    """Job -> scoped ResourceQuota of its namespace -> what the job's pods (their facts,
    what each counts) count toward it: only those its scopes match (before, every pod of
    the job was credited to each quota that counts its new pods; a template edited from
    one PriorityClass to another credited pods the new class's quota never counted, and
    the new pods were refused: a review)."""
    return {
        key: {
            name: summed(use for facts, use in listed if scopes_match(scopes, facts))
            for name, _, scopes in scoped.get(key[0], ())
        }
        for key, store in pods.items()
        if scoped.get(key[0]) and (listed := list(store))
    }


def template_facts(spec: Mapping[str, Any]) -> tuple[bool, str, bool]:
    """What a pod template says of the scopes (``PodFacts`` but its QoS class, which the
    namespace's LimitRange defaults decide): (terminating, priority class, cross-namespace
    affinity)."""
    deadline = spec.get("activeDeadlineSeconds")

    def items(m: Any, key: str) -> list[Any]:  # (a malformed template: the API server says)
        got = m.get(key) if isinstance(m, Mapping) else None
        return [x for x in got if isinstance(x, Mapping)] if isinstance(got, list) else []

    affinity = spec.get("affinity")
    kinds = (
        [affinity.get(k) for k in ("podAffinity", "podAntiAffinity")]
        if isinstance(affinity, Mapping)
        else []
    )
    terms = [t for k in kinds for t in items(k, "requiredDuringSchedulingIgnoredDuringExecution")]
    terms += [
        w["podAffinityTerm"]
        for k in kinds
        for w in items(k, "preferredDuringSchedulingIgnoredDuringExecution")
        if isinstance(w.get("podAffinityTerm"), Mapping)
    ]
    cross = any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms)
    return (
        isinstance(deadline, int) and deadline >= 0,
        str(spec.get("priorityClassName") or ""),
        cross,
    )


def quota_usage(spec: Mapping[str, Any]) -> dict[str, float]:
    """What a pod counts toward a namespace's ResourceQuota, as Kubernetes' pod evaluator
    counts it: one pod (``pods``, ``count/pods``); its requests as ``requests.<name>`` (and
    compute resources also as ``<name>``) and its limits as ``limits.<name>``; each the sum
    over its containers or its largest init container, whichever is more."""
    out: dict[str, float] = {"pods": 1.0, "count/pods": 1.0}
    for name, amount in effective_resources(spec, limits=False).items():
        out[f"requests.{name}"] = amount
        if name in _POD_KEYS or name.startswith("hugepages-"):
            out[name] = amount
    for name, amount in effective_resources(spec, limits=True).items():
        if f"limits.{name}" in _LIMIT_KEYS:
            out[f"limits.{name}"] = amount
    return out


def stage_quota(spec: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """What a stage pod of this pod spec counts toward a quota, its GPUs aside (the plan
    gives each stage pod its server's)."""
    return tuple(sorted((k, v) for k, v in quota_usage(spec).items() if k != QUOTA_GPU))


def limit_defaults(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The requests and the limits a LimitRange gives a container that sets none (its
    Container items' ``defaultRequest`` and ``default``), GPUs aside (Hulk sets a stage
    pod's); None where it gives none."""
    req: dict[str, Any] = {}
    lim: dict[str, Any] = {}
    for item in (body.get("spec") or {}).get("limits") or []:
        if item.get("type") == "Container":
            req.update(item.get("defaultRequest") or {})
            lim.update(item.get("default") or {})
    req.pop(GPU, None)
    lim.pop(GPU, None)
    return (req, lim) if req or lim else None


# (LimitRange, Container or Pod, min/max/maxLimitRequestRatio, resource, amount)
Bound = tuple[str, str, str, str, float]
_BOUND_KINDS = ("min", "max", "maxLimitRequestRatio")


def policy_text(spec: Mapping[str, Any]) -> str:
    """A ResourceQuota's or LimitRange's spec as one comparable string."""
    return json.dumps(dict(spec), sort_keys=True, default=str)


def limit_bounds(body: Mapping[str, Any]) -> tuple[Bound, ...] | None:
    """What a LimitRange bounds a container's and a pod's requests and limits by (its
    Container and Pod items' min, max and maxLimitRequestRatio), GPUs aside (a stage pod's
    are its server's, within ``gpu_limit``); None where it sets none."""
    name = str((body.get("metadata") or {}).get("name", ""))
    out: list[Bound] = []
    for item in (body.get("spec") or {}).get("limits") or []:
        if item.get("type") not in ("Container", "Pod"):
            continue
        for kind in _BOUND_KINDS:
            for res, value in sorted((item.get(kind) or {}).items()):
                if res != GPU:
                    out.append((name, str(item["type"]), kind, res, parse_amount(value)))
    return tuple(out) or None


def bounds_refuse(spec: Mapping[str, Any], bounds: Iterable[Bound]) -> str | None:
    """Why Kubernetes' LimitRanger refuses a pod with these resources (``with_defaults``'
    output: the LimitRanges' defaults filled in), as its validation reads each bound; None
    where it admits it. A Container bound holds for every container and init container, a
    Pod bound for the pod's requests and limits added up (pod-level resources where set)."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    whole = {k: v for k, v in spec.items() if k != "overhead"}  # LimitRanger leaves it out
    for limit_range, type_, kind, res, amount in bounds:
        if type_ == "Container":
            targets = [
                (
                    f"container {c.get('name')}",
                    {k: parse_amount(v) for k, v in (c["resources"].get("requests") or {}).items()},
                    {k: parse_amount(v) for k, v in (c["resources"].get("limits") or {}).items()},
                )
                for c in containers
            ]
        else:
            pod = "the pod (its containers added up)"
            targets = [
                (
                    pod,
                    effective_resources(whole, limits=False),
                    effective_resources(whole, limits=True),
                )
            ]
        for who, req, lim in targets:
            why = _out_of_bound(kind, res, amount, req.get(res), lim.get(res))
            if why:
                return f"LimitRange {limit_range} ({type_} {kind}): {who} {why}"
    return None


def _out_of_bound(
    kind: str, res: str, amount: float, req: float | None, lim: float | None
) -> str | None:
    """One bound of a LimitRange against a request and a limit (None: not set), as
    Kubernetes' LimitRanger checks it."""

    def q(v: float) -> str:
        return quantity_text(res, v)

    if kind == "min":
        if req is None:
            return f"requests no {res} (the minimum is {q(amount)})"
        low = min(req, lim if lim is not None else req)
        if low < amount:
            return f"asks {q(low)}, under the minimum of {q(amount)}"
    elif kind == "max":
        if lim is None:
            return f"sets no {res} limit (the maximum is {q(amount)})"
        high = max(lim, req or 0.0)
        if high > amount:
            return f"asks {q(high)}, over the maximum of {q(amount)}"
    else:
        if not req or not lim:
            return f"sets no {res} request or limit (limit/request at most {amount:g})"
        if lim / req > amount:
            return f"has a {res} limit/request of {lim / req:g}, over the maximum of {amount:g}"
    return None


def quantity_text(resource: str, amount: float) -> str:
    """``8 cpu``, ``16Gi memory``: an amount of a resource in its units."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{amount / 2**30:.4g}Gi {resource}"
    return f"{amount:g} {resource}"


def with_defaults(
    spec: Mapping[str, Any], defaults: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
) -> dict[str, Any]:
    """A pod spec's resources (containers', init containers' with their restart policy,
    pod-level, overhead) as the API server admits them: a request missing where a limit is
    set is the limit (defaulting), then each LimitRange's defaults fill the containers'
    requests and limits still missing (the LimitRanger admission plugin)."""
    out: dict[str, Any] = {k: spec[k] for k in ("resources", "overhead") if spec.get(k)}
    for kind in ("containers", "initContainers"):
        filled = []
        for c in spec.get(kind) or []:
            res = c.get("resources") or {}
            lim = dict(res.get("limits") or {})
            req = {**lim, **(res.get("requests") or {})}
            for default_request, default_limit in defaults:
                req = {**default_request, **req}
                lim = {**default_limit, **lim}
            one = {"name": c.get("name"), "resources": {"requests": req, "limits": lim}}
            if c.get("restartPolicy"):
                one["restartPolicy"] = c["restartPolicy"]
            filled.append(one)
        if filled:
            out[kind] = filled
    return out


def summed(usages: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Quota usages added up per resource."""
    out: dict[str, float] = {}
    for usage in usages:
        for k, v in usage.items():
            out[k] = out.get(k, 0.0) + v
    return out


_POD_LEVEL = ("cpu", "memory")  # what pod-level resources (spec.resources) may set


def effective_resources(spec: Mapping[str, Any], *, limits: bool) -> dict[str, float]:
    """A pod's requests (or limits) per resource, as Kubernetes adds them up: its
    containers and its sidecars (init containers with ``restartPolicy: Always``) summed,
    or an init container with the sidecars started before it, whichever is more; then
    the pod-level ``spec.resources`` where set, and the ``overhead`` (a request missing
    where a limit is set is the limit, as the API server defaults it)."""

    def one(res: Mapping[str, Any]) -> dict[str, float]:
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if limits:
            return {k: parse_amount(v) for k, v in lim.items()}
        return {k: parse_amount(req[k] if k in req else lim[k]) for k in {*req, *lim}}

    def add(a: dict[str, float], b: Mapping[str, float]) -> None:
        for k, v in b.items():
            a[k] = a.get(k, 0.0) + v

    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        add(total, one(c.get("resources") or {}))
    sidecars: dict[str, float] = {}
    peak: dict[str, float] = {}  # an init container's, with the sidecars started before it
    for c in spec.get("initContainers") or []:
        need = one(c.get("resources") or {})
        if c.get("restartPolicy") == "Always":
            add(total, need)
            add(sidecars, need)
            continue
        for k in {*need, *sidecars}:
            peak[k] = max(peak.get(k, 0.0), need.get(k, 0.0) + sidecars.get(k, 0.0))
    for k, v in peak.items():
        total[k] = max(total.get(k, 0.0), v)
    pod = one(spec.get("resources") or {})
    total.update({k: v for k, v in pod.items() if k in _POD_LEVEL or k.startswith("hugepages-")})
    overhead = {k: parse_amount(v) for k, v in (spec.get("overhead") or {}).items()}
    # (a limit takes the overhead only where one is set, as Kubernetes' PodLimits adds it)
    add(total, {k: v for k, v in overhead.items() if not limits or total.get(k)})
    return {k: v for k, v in total.items() if v}


def _gpu_bounds(body: Mapping[str, Any], kind: str) -> list[float]:
    """A LimitRange's ``kind`` (``max``, ``min``) amounts of GPUs, of its Container and Pod
    limits."""
    return [
        parse_amount(item[kind][GPU])
        for item in (body.get("spec") or {}).get("limits") or []
        if item.get("type") in ("Container", "Pod") and GPU in (item.get(kind) or {})
    ]


def gpu_limit(body: Mapping[str, Any]) -> float | None:
    """The most GPUs a LimitRange lets one container or one pod request (the smallest
    ``max`` of its Container and Pod limits), or None where it sets none."""
    return min(_gpu_bounds(body, "max"), default=None)


def gpu_minimum(body: Mapping[str, Any]) -> float | None:
    """The fewest GPUs a LimitRange lets one container or one pod request (the largest
    ``min`` of its Container and Pod limits), or None where it sets none."""
    return max(_gpu_bounds(body, "min"), default=None)


# the largest quantity Kubernetes stores (an int64): a larger one (``1e400``, read as
# infinite) is taken as this, as no int() of infinity crashes an index or a round (a review)
MAX_AMOUNT = float(2**63 - 1)


def parse_amount(value: Any) -> float:
    """A Kubernetes quantity (``500m``, ``4Gi``, ``8``) as a number; 0 if unreadable, at
    most ``MAX_AMOUNT``."""
    try:
        amount = float(parse_quantity(value)) if value not in (None, "") else 0.0
    except (ValueError, TypeError, ArithmeticError):
        return 0.0
    return min(max(0.0, amount), MAX_AMOUNT)
