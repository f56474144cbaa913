"""A HulkTrainingJob as the operator keeps it (``JobEntry``), from its manifest and status.

Kopf-free, so that ``hulk plan --kubeconfig`` reads jobs exactly as the operator does.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes.utils import parse_quantity

from hulk_operator import GPU
from hulk_operator import status as st
from hulk_operator.inventory import Resources, pod_requests, region_keys
from hulk_operator.manifests import (
    DEFAULT_MASTER_PORT,
    asks_gpus,
    quantities_as_text,
    running_containers,
    trainer_ask,
    trainer_gpus,
)
from hulk_operator.quotas import MAX_AMOUNT, stage_quota, template_facts, with_defaults
from hulk_planner.datasets import slug
from hulk_planner.errors import InvalidRequest, shown
from hulk_planner.io import check_operator_fields, job_from_dict, regrow_settings
from hulk_planner.model import Job

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class JobEntry:
    """What the operator keeps of a HulkTrainingJob (the value of the ``jobs`` index)."""

    key: Key
    uid: str
    generation: int
    job: Job | None  # None when the spec is invalid
    error: str | None
    plan_nodes: frozenset[str]
    phase: str | None
    deleting: bool
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    allowed_regions: tuple[str, ...] = ()
    selector_from: str = "spec.nodeSelector"  # where node_selector's pairs were written
    affinity: tuple[Mapping[str, Any], ...] = ()  # the template's required nodeSelectorTerms
    requests: Resources = field(default_factory=Resources)  # one stage pod of the template
    # (name, GPUs) of its plain init container that asks the most: the node must have them
    init_gpus: tuple[str, int] = ("", 0)
    # its trainer container's GPUs where the template asks GPUs itself (0: it asks none, and
    # the trainer gets its server's): a stage's compute and memory, as the planner counts
    # them (``manifests.trainer_gpus``)
    trainer_gpus: int = 0
    suspended: bool = False  # spec.suspend: no stage pods, no servers, not planned
    regrow: tuple[float, float] | None = None  # spec.regrow: (minSpeedup, afterSeconds)
    # what one stage pod counts toward a ResourceQuota besides its GPUs (``stage_quota``)
    pod_quota: tuple[tuple[str, float], ...] = (("count/pods", 1.0), ("pods", 1.0))
    # the template's containers' resources: the namespace's LimitRanges may fill them in
    pod_resources: Mapping[str, Any] = field(default_factory=dict)
    # what scoped ResourceQuotas read of the template (``template_facts``)
    pod_facts: tuple[bool, str, bool] = (False, "", False)
    # metadata.creationTimestamp, in seconds since the epoch (a manifest not applied yet:
    # infinity, the newest): of equal priority, the job submitted first is placed first
    created: float = math.inf

    @property
    def pending(self) -> bool:
        return (
            self.job is not None
            and not self.plan_nodes
            and not self.deleting
            and not self.suspended
            and self.phase not in ("Failed", "Succeeded")
        )

    def pod_gpus(self, planned: int) -> int:
        """The GPUs one stage pod requests on a server the plan counts ``planned`` GPUs of
        (its trainer's): the template's own ask where it asks, its sidecars' beside the
        trainer's, else the server's as planned. What a quota counts, where the planner
        counts the trainer's alone (``trainer_gpus``)."""
        return self.requests.gpus or planned

    @property
    def constraints(self) -> tuple[Any, ...]:
        tol = tuple(sorted(repr(sorted(t.items())) for t in self.tolerations))
        terms = json.dumps(list(self.affinity), sort_keys=True)
        # regions as matched (``inventory.selected``): ``[Berlin, Rome]`` and ``[rome,
        # berlin]`` are one group (before, two, planned one after the other; a user trial)
        regions = tuple(sorted(region_keys(self.allowed_regions)))
        return (self.node_selector, regions, tol, terms, self.requests)


def object_entry(obj: Mapping[str, Any], namespace: str | None = None) -> JobEntry:
    """A HulkTrainingJob object, a live body or a manifest not applied, as the operator
    keeps it; ``namespace`` wins over the object's own (``default`` where it has none, as
    for kubectl)."""
    meta = obj.get("metadata") or {}
    return job_entry(
        namespace or str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        obj,
        meta,
        obj.get("spec") or {},
        obj.get("status") or {},
    )


def job_entry(
    namespace: str,
    name: str,
    uid: str,
    body: Mapping[str, Any],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> JobEntry:
    raw = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": name},
        "spec": dict(spec),
    }
    job, error = None, None
    try:
        job = job_from_dict(raw)
        check_operator_fields(spec)
    except InvalidRequest as exc:
        job, error = None, str(exc)
    plan = st.job_plan_from_status(name, status)
    finished = status.get("phase") == st.SUCCEEDED
    shape = template_shape_error(spec.get("template"))
    if shape is not None and error is None:
        job, error = None, shape
        # its quantities told with it (before, a second round: "cpu: lots" only once the
        # shape was fixed; a user trial)
        given: object = spec.get("template")
        pod = given.get("spec") if isinstance(given, Mapping) else None
        if isinstance(pod, Mapping) and (bad := _bad_quantity(pod)) is not None:
            error = f"{shape}; {bad}"
    # (a template of the wrong shape is read as none: its requests, tolerations... were
    # read from it, and a string where a mapping goes failed every tick and the preview)
    tmpl_spec = _at(spec, "template", "spec") if shape is None else {}
    tmpl_meta = _at(spec, "template", "metadata") if shape is None else {}
    # the stage pods keep the template's node selector: it constrains the plan as
    # spec.nodeSelector does (and as the template's tolerations do)
    # (a hostname pin there too: Hulk sets the hostname per stage pod, on the servers the
    # pin allows)
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):  # (the CRD's schema refuses it; a manifest not)
        if error is None:
            job, error = None, str(_not_a_mapping("spec.nodeSelector", selector))
        selector = {}
    ours, theirs = dict(selector), dict(tmpl_spec.get("nodeSelector") or {})
    clash = sorted(k for k in ours.keys() & theirs.keys() if ours[k] != theirs[k])
    if clash and error is None:
        k = clash[0]
        job, error = (
            None,
            str(
                InvalidRequest(
                    "spec.template.spec.nodeSelector",
                    f"{k}={theirs[k]} contradicts spec.nodeSelector {k}={ours[k]}",
                    "no node can match both: keep one",
                )
            ),
        )
    if error is None:  # every one of these at once (before, the first alone: a trial
        # fixed restartPolicy, then was told of nodeName a round later); those that read
        # the containers only where the quantities read
        found = [
            why
            for why in (
                _bad_selector(ours),
                _bad_restart(tmpl_spec),
                _blank_region(spec),
                _bad_quantity(tmpl_spec)
                or _no_containers(tmpl_spec)
                or _gpuless_trainer(tmpl_meta, tmpl_spec),
                _node_name(tmpl_spec),
            )
            if why is not None
        ]
        if found:
            job, error = None, "; ".join(found)
    where = [
        w
        for w, d in (("spec.nodeSelector", ours), ("spec.template.spec.nodeSelector", theirs))
        if d
    ]
    return JobEntry(
        key=(namespace, name),
        uid=uid,
        generation=int(meta.get("generation") or 0),
        job=job,
        error=error,
        # a finished job's plan stays in its status for the record; its servers are free
        plan_nodes=frozenset(plan.nodes) if plan and not finished else frozenset(),
        phase=status.get("phase"),
        deleting=bool(meta.get("deletionTimestamp")),
        tolerations=tuple(tmpl_spec.get("tolerations") or ()),
        node_selector=tuple(sorted({**theirs, **ours}.items())),
        allowed_regions=tuple(spec.get("allowedRegions") or ()),
        selector_from=" and ".join(where) if theirs else "spec.nodeSelector",
        requests=stage_requests(tmpl_spec),
        init_gpus=init_gpus(tmpl_spec),
        trainer_gpus=trainer_gpus(tmpl_meta, tmpl_spec),
        pod_quota=stage_quota(tmpl_spec),
        pod_resources=with_defaults(tmpl_spec, ()),
        pod_facts=template_facts(tmpl_spec),
        suspended=spec.get("suspend") is True,
        created=_created(meta),
        regrow=_regrow(spec) if job is not None else None,
        affinity=tuple(
            _at(
                tmpl_spec,
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ).get("nodeSelectorTerms")
            or ()
        ),
    )


def template_shape_error(template: object) -> str | None:
    """Why ``spec.template`` is no pod template the Kubernetes client could send (its
    models: a string or list where a mapping goes, a field it does not know), naming the
    field as a path of the job; None if it is one. The API server refuses the CRD's
    missing template and containers; a manifest given to ``hulk plan --kubeconfig`` is
    told here (before, the preview planned it, a user trial)."""
    from kubernetes import client
    from pydantic import ValidationError

    from hulk_operator.errors import client_rejection

    if template is None:
        return None  # (then no containers: _no_containers tells)
    template = copy.deepcopy(dict(template) if isinstance(template, Mapping) else template)
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        quantities_as_text(template["spec"])  # (cpu: 2 is a quantity, as the pods get it)
        if template["spec"].get("containers") is None:  # (none: _no_containers tells)
            template["spec"]["containers"] = []
    try:
        client.V1PodTemplateSpec.model_validate(template)
    except ValidationError as exc:
        return client_rejection(exc, "spec.template.")
    except Exception:  # the check is advisory: the API server has the last word
        return None
    return None


def _not_a_mapping(field: str, value: object) -> InvalidRequest:
    """The error of a node selector given as no mapping (a manifest given to ``hulk plan``:
    it crashed the preview, a review)."""
    return InvalidRequest(
        field,
        f"must be a mapping of node label: value, got {shown(value)}",
        "write it as key: value pairs, e.g. nodeSelector: {pool: a100}",
    )


def _no_containers(tmpl_spec: Mapping[str, Any]) -> str | None:
    """The error for a template with no container to run, or None. The CRD's schema
    requires them on a write; a manifest given to ``hulk plan --kubeconfig`` is told here."""
    if tmpl_spec.get("containers"):
        return None
    return str(
        InvalidRequest(
            "spec.template.spec.containers",
            "is required: the stage pods run the template's containers",
            "give spec.template.spec.containers: [{name: trainer, image: IMAGE}]",
        )
    )


def _gpuless_trainer(meta: Mapping[str, Any], tmpl_spec: Mapping[str, Any]) -> str | None:
    """The error for a template whose other containers ask GPUs and its trainer none, or
    None: Hulk gives the trainer its server's GPUs only where the template asks none, so
    it would train without a GPU, while the plan counted one (before, not told: a review)."""
    if not asks_gpus(tmpl_spec):
        return None
    i, gpus = trainer_ask(meta, tmpl_spec)
    if gpus:
        return None
    name = (tmpl_spec.get("containers") or [{}])[i].get("name") or f"#{i}"
    return str(
        InvalidRequest(
            f"spec.template.spec.containers[{i}].resources",
            f"asks no {GPU} for the trainer container {name}, while other containers of "
            "the template ask some: Hulk gives the trainer its server's GPUs only where the "
            "template asks none, so it would train without a GPU",
            f"give container {name} its {GPU} (requests and limits), or name the container "
            "that trains in the template's annotation kubectl.kubernetes.io/default-container",
        )
    )


def _created(meta: Mapping[str, Any]) -> float:
    """``metadata.creationTimestamp`` (RFC 3339) in seconds; infinity where it is not
    set (a manifest not applied) or not readable."""
    try:
        return datetime.fromisoformat(str(meta["creationTimestamp"])).timestamp()
    except (KeyError, ValueError):
        return math.inf


_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _bad_selector(selector: Mapping[str, Any]) -> str | None:
    """Why ``spec.nodeSelector`` holds a key or value no node label can have (as Kubernetes
    validates labels), or None: it was taken, and the job waited for a node that "matches"
    (a user trial). The template's own is the API server's to refuse."""
    for key, value in sorted(selector.items(), key=lambda kv: str(kv[0])):
        prefix, _, name = str(key).rpartition("/")
        if (
            not name
            or len(name) > 63
            or not _LABEL_NAME.match(name)
            or ("/" in str(key) and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))
        ):
            return str(
                InvalidRequest(
                    "spec.nodeSelector",
                    f"{key!r} is not a label key",
                    "a key is NAME or PREFIX/NAME: NAME at most 63 letters, digits, '-', "
                    "'_' or '.', starting and ending with a letter or digit; PREFIX a DNS "
                    "subdomain (kubectl get nodes --show-labels lists the nodes' labels)",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_NAME.match(value):
            return str(
                InvalidRequest(
                    f"spec.nodeSelector.{key}",
                    f"{value!r} is not a label value",
                    "at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
                    "letter or digit; quote numbers and true/false",
                )
            )
    return None


def _blank_region(spec: Mapping[str, Any]) -> str | None:
    """An ``allowedRegions`` entry with no letter or digit (``" "``): it matches no region
    whatever the nodes, and the job waited for ever (a user trial)."""
    for i, region in enumerate(spec.get("allowedRegions") or ()):
        if isinstance(region, str) and not slug(region):
            return str(
                InvalidRequest(
                    f"spec.allowedRegions[{i}]",
                    f"{region!r} names no region",
                    "give a region as the nodes' label topology.kubernetes.io/region writes it, "
                    "e.g. london (case, spaces and punctuation aside)",
                )
            )
    return None


def stage_requests(tmpl_spec: Mapping[str, Any]) -> Resources:
    """What the template's stage pod requests of its node; its GPUs are the template's own
    ask, those of its containers and sidecars (``manifests.asks_gpus``), none where Hulk
    gives the trainer its server's: a plain init container's, which it holds before the
    trainer starts, are not what the trainer runs on (a review)."""
    running = {"containers": running_containers(tmpl_spec)}
    asked = pod_requests(running).gpus if asks_gpus(tmpl_spec) else 0
    return pod_requests(tmpl_spec)._replace(gpus=asked)


def init_gpus(tmpl_spec: Mapping[str, Any]) -> tuple[str, int]:
    """(name, GPUs) of the plain init container (not a sidecar) that asks the most GPUs,
    with those of the sidecars started before it, ("", 0) where none asks any. The
    scheduler holds that many on the node while it runs (a pod's request is its largest
    init container's where that is more), so its stage pod fits only where that many are
    free, whatever its trainer gets, and a quota counts them (before, a server with fewer
    was planned, and the pod waited unschedulable; a review)."""
    most, sidecars = ("", 0), 0
    for c in tmpl_spec.get("initContainers") or ():
        if not isinstance(c, Mapping):
            continue
        gpus = pod_requests({"containers": [c]}).gpus
        if c.get("restartPolicy") == "Always":
            sidecars += gpus  # (running from here on, beside the init containers after it)
        elif gpus and gpus + sidecars > most[1]:
            most = (str(c.get("name") or ""), gpus + sidecars)
    return most


def _bad_quantity(tmpl_spec: Mapping[str, Any]) -> str | None:
    """A container's request or limit that is no Kubernetes quantity (``cpu: lots``),
    named with its container: the API server's own message names neither ("quantities
    must match the regular expression ..."), and came only once the job was placed (a
    user trial)."""
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(tmpl_spec.get(kind) or ()):
            if not isinstance(c, Mapping):
                continue
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                amounts = res.get(part) if isinstance(res, Mapping) else None
                for name, value in (amounts or {}).items() if isinstance(amounts, Mapping) else ():
                    if value is None:  # (a null the API server drops)
                        continue
                    too_big: bool | None = None  # (None: no quantity at all)
                    try:  # (1e400: infinite here, and crashed the job's index; a review)
                        too_big = abs(float(parse_quantity(value))) > MAX_AMOUNT
                    except (ValueError, TypeError, ArithmeticError):
                        pass
                    if too_big is not False:
                        who = f" ({c.get('name')})" if c.get("name") else ""
                        return str(
                            InvalidRequest(
                                f"spec.template.spec.{kind}[{i}]{who}.resources.{part}.{name}",
                                f"{value!r} is "
                                + (
                                    "larger than Kubernetes allows" if too_big else "not a quantity"
                                ),
                                "write it as Kubernetes does: 500m or 2 (CPUs), 4Gi (bytes), "
                                "1 (GPUs)",
                            )
                        )
    for path, value in _other_quantities(tmpl_spec, "spec.template.spec"):
        try:
            parse_quantity(value)
        except (ValueError, TypeError, ArithmeticError):  # (a trial: the regular expression)
            fix = "write it as Kubernetes does: 1, 500m, 4Gi"
            return str(InvalidRequest(path, f"{value!r} is not a quantity", fix))
    return None


def _other_quantities(node: object, path: str) -> list[tuple[str, Any]]:
    """The template's quantities outside ``resources``, with their paths: an emptyDir's
    ``sizeLimit``, a ``resourceFieldRef``'s ``divisor``."""
    if isinstance(node, list):
        return [q for i, item in enumerate(node) for q in _other_quantities(item, f"{path}[{i}]")]
    if not isinstance(node, Mapping):
        return []
    out = []
    for key, value in node.items():
        if key in ("sizeLimit", "divisor") and value is not None:
            out.append((f"{path}.{key}", value))
        else:
            out += _other_quantities(value, f"{path}.{key}")
    return out


def _node_name(tmpl_spec: Mapping[str, Any]) -> str | None:
    """The error for a template that pins its pods to a node, or None."""
    if not tmpl_spec.get("nodeName"):
        return None
    return str(
        InvalidRequest(
            "spec.template.spec.nodeName",
            "is set, but Hulk puts each stage pod on the server its plan picks",
            "remove it; to limit the servers use spec.nodeSelector "
            "(kubernetes.io/hostname: NAME) or spec.allowedRegions",
        )
    )


def _bad_restart(tmpl_spec: Mapping[str, Any]) -> str | None:
    """``restartPolicy: Always`` is refused, as a batch/v1 Job refuses it: a stage that
    finishes would be started again, and the job never succeed (it was taken)."""
    if tmpl_spec.get("restartPolicy") != "Always":
        return None
    return str(
        InvalidRequest(
            "spec.template.spec.restartPolicy",
            "is Always: a stage that finishes would be started again, and the job would never end",
            "use OnFailure (the default: a failed stage restarts in place) or Never",
        )
    )


# spec fields with a default in the CRD: an absent field is its default (a CRD upgrade that
# adds a default must not read as an edit)
DEFAULTS: dict[str, Any] = {
    "priority": 0,
    "masterPort": DEFAULT_MASTER_PORT,
    "backoffLimit": 6,
    "suspend": False,
}
# what the plan and the stage pods are made from (priority orders planning, backoffLimit is
# read at each stage failure, suspend is handled apart), fingerprinted part by part
PLAN_PARTS = ("job", "template", "allowedRegions", "nodeSelector", "masterPort")
CONSTRAINTS = frozenset({"allowedRegions", "nodeSelector"})  # the servers may still meet them


def normalized(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """``spec`` with its defaults filled in and nulls, empty lists and empty maps dropped
    (a merge patch's null removes a field), allowedRegions as a sorted set."""

    def clean(x: Any) -> Any:
        if isinstance(x, Mapping):
            out = {k: clean(v) for k, v in x.items()}
            return {k: v for k, v in out.items() if v not in (None, {}, [])}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    out = {**DEFAULTS, **clean(dict(spec or {}))}
    if out.get("allowedRegions"):
        out["allowedRegions"] = sorted(set(out["allowedRegions"]))
    return out


def _job_part(spec: Mapping[str, Any]) -> Any:
    """The model and batch sizes as the planner reads them (a preset written out in full,
    or its own batch sizes given, is the same job); as written where the spec is invalid."""
    doc = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob"}
    try:
        job = job_from_dict({**doc, "metadata": {"name": "fingerprint"}, "spec": dict(spec)})
    except InvalidRequest:
        n = normalized(spec)
        return [n.get("model"), n.get("training")]
    m = job.model
    return [m.parameters, m.layers, m.hidden_size, m.sequence_length, m.attention_heads,
            job.global_batch_size, job.micro_batch_size]  # fmt: skip


def spec_hashes(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """A fingerprint of each part of the spec the plan and the stage pods are made from
    (``PLAN_PARTS``), kept as ``status.plan.specHashes``: an edit that leaves them as they
    are (a refused typo undone) leaves the running pods alone."""
    n = normalized(spec)
    parts = {k: n.get(k) for k in PLAN_PARTS if k != "job"}
    parts["job"] = _job_part(spec or {})
    return {
        k: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:12]
        for k, v in sorted(parts.items())
    }


POD_PARTS = ("template", "masterPort")  # what the stage pods are made from, with the plan


def pod_source(spec: Mapping[str, Any] | None) -> str:
    """The spec the stage pods are made from, whole, as written (JSON, kept as
    ``status.plan.podTemplate``): a job whose later spec is refused makes its missing
    pods from it (``edits.remake_missing``), and is planned again from it when it loses
    servers (``reconcile``), as a Deployment's old ReplicaSet does. (It kept the
    ``POD_PARTS`` alone: a refused job that lost a server could not be planned again.)"""
    spec = spec or {}
    return json.dumps({k: v for k, v in spec.items() if v is not None}, sort_keys=True)


def planned_pod_spec(plan: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The spec a plan's pods were made from (``pod_source``; an older operator's kept its
    ``POD_PARTS`` alone), where the plan keeps it and it matches the plan's fingerprints of
    those parts (``specHashes``); else None."""
    plan = plan or {}
    text, hashes = plan.get("podTemplate"), plan.get("specHashes") or {}
    if not isinstance(text, str):
        return None
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    ours = spec_hashes(spec) if isinstance(spec, dict) else {}
    if any(ours.get(k) is None or ours.get(k) != hashes.get(k) for k in POD_PARTS):
        return None
    return dict(spec)


def _regrow(spec: Mapping[str, Any]) -> tuple[float, float] | None:
    try:
        return regrow_settings(spec)
    except InvalidRequest:  # (then job_from_dict refused the spec too)
        return None


def _at(obj: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """``obj[k1][k2]...``, an empty mapping where a level is missing or null."""
    for k in keys:
        obj = obj.get(k) or {}
    return obj
