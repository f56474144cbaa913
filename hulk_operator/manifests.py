"""Pure builders of what the operator creates for a job: one pod per (stage, server) and a
headless Service. Dicts in, dicts out, no cluster needed (tested in
``tests/hulk_operator/test_manifests.py``).

Names are deterministic, so a restarted operator recreates exactly the same objects:

- Service: the job's name (a DNS-1035 label; hashed down when too long).
- Pod hostname (stable DNS ``<hostname>.<service>``): ``<job>-<stage>-<replica>``, the
  same whichever server holds that slot, so neighbours' addresses never change.
- Pod name: ``<hostname>-<hash>``, where the hash covers the whole pod (server, layers,
  env, template). A pod that must change gets a new name: the new one is created while the
  old one is deleted, and pods that need not change keep their name and are left alone.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from hulk_operator import (
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    GANG_GATE,
    GPU,
    GROUP,
    KIND,
    LABEL_JOB,
    LABEL_REPLICA,
    LABEL_STAGE,
)
from hulk_operator.quotas import effective_resources
from hulk_planner.model import JobPlan, Stage

DEFAULT_MASTER_PORT = 29500
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` when it is a DNS-1035 label of at most ``limit`` characters, else a
    deterministic one: a cut prefix plus a hash of the whole text."""
    if len(text) <= limit and _DNS1035.match(text):
        return text
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not clean or not clean[0].isalpha():
        clean = "h-" + clean
    return f"{clean[: limit - 9].rstrip('-')}-{_digest(text, 8)}"


def service_name(job: str) -> str:
    return dns_label(job)


def job_label(job: str) -> str:
    """The ``hulk.dev/job`` label value (label values hold at most 63 characters)."""
    return job if len(job) <= 63 else f"{job[:54].rstrip('-.')}-{_digest(job, 8)}"


def hostname(job: str, stage: int, replica: int) -> str:
    return dns_label(f"{job}-{stage}-{replica}")


@dataclass(frozen=True, slots=True)
class Slot:
    """One stage pod's place in the pipeline: stage ``stage``, ``replica``-th server of it."""

    stage: int
    replica: int
    node: str
    rank: int


def slots(job_plan: JobPlan) -> list[Slot]:
    """Pods in pipeline order; rank 0 (stage 0, first server) is the master."""
    out: list[Slot] = []
    for i, st in enumerate(job_plan.stages):
        for j, node in enumerate(st.nodes):
            out.append(Slot(i, j, node, len(out)))
    return out


def neighbour(job_plan: JobPlan, stage: int, replica: int) -> int:
    """Which server of stage ``stage`` talks to replica ``replica`` of an adjacent stage:
    the same replica when data-parallel, else the stage's first server."""
    st = job_plan.stages[stage]
    if st.parallelism == "data" and replica < len(st.nodes):
        return replica
    return 0


def stage_env(
    job: str, job_plan: JobPlan, slot: Slot, gpus: int, master_port: int = DEFAULT_MASTER_PORT
) -> list[dict[str, str]]:
    """The variables a training program needs (PyTorchJob's and torchrun's, plus Hulk's)."""
    svc = service_name(job)

    def addr(stage: int, replica: int) -> str:
        return f"{hostname(job, stage, replica)}.{svc}"

    n = len(job_plan.stages)
    st = job_plan.stages[slot.stage]
    world = sum(len(s.nodes) for s in job_plan.stages)
    prev = (
        addr(slot.stage - 1, neighbour(job_plan, slot.stage - 1, slot.replica))
        if slot.stage
        else ""
    )
    nxt = (
        addr(slot.stage + 1, neighbour(job_plan, slot.stage + 1, slot.replica))
        if slot.stage + 1 < n
        else ""
    )
    master = addr(0, 0)
    pairs = [
        ("MASTER_ADDR", master),
        ("MASTER_PORT", str(master_port)),
        ("WORLD_SIZE", str(world)),
        ("RANK", str(slot.rank)),
        ("PET_NNODES", str(world)),
        ("PET_NPROC_PER_NODE", str(gpus)),
        ("PET_NODE_RANK", str(slot.rank)),
        ("PET_MASTER_ADDR", master),
        ("PET_MASTER_PORT", str(master_port)),
        ("PYTHONUNBUFFERED", "1"),
        ("HULK_STAGE_INDEX", str(slot.stage)),
        ("HULK_NUM_STAGES", str(n)),
        ("HULK_LAYER_START", str(st.layers[0])),
        ("HULK_LAYER_END", str(st.layers[1])),
        ("HULK_PREV_STAGE_ADDR", prev),
        ("HULK_NEXT_STAGE_ADDR", nxt),
        ("HULK_STAGE_REPLICA", str(slot.replica)),
        ("HULK_STAGE_NODES", str(len(st.nodes))),
        ("HULK_STAGE_PARALLELISM", st.parallelism),
        ("HULK_MICRO_BATCHES", str(job_plan.micro_batches)),
        ("HULK_NODE_NAME", slot.node),
    ]
    return [{"name": k, "value": v} for k, v in pairs]


@cache
def _stage_env_names() -> frozenset[str]:
    """The names ``stage_env`` sets (those of a one-server plan: it sets the same names on
    every stage pod)."""
    one = JobPlan("j", (Stage((0, 1), ("n",)),), 1)
    return frozenset(e["name"] for e in stage_env("j", one, Slot(0, 0, "n", 0), 1))


def _replaced_by_container(template: object) -> list[tuple[str, list[str]]]:
    """("container NAME" or "init container NAME", the variables it sets that
    ``stage_env`` sets too), for each container of the template that sets some, init
    containers first, in order."""
    names = _stage_env_names()
    spec = template.get("spec") if isinstance(template, Mapping) else None
    out = []
    for kind, said in (("initContainers", "init container"), ("containers", "container")):
        containers = spec.get(kind) if isinstance(spec, Mapping) else None
        for c in containers if isinstance(containers, list) else ():
            env = c.get("env") if isinstance(c, Mapping) else None
            env = env if isinstance(env, list) else []
            set_here = {
                n for e in env if isinstance(e, Mapping) and isinstance(n := e.get("name"), str)
            }
            if given := sorted(set_here & names):
                out.append((f"{said} {c.get('name')}", given))
    return out


def replaced_names(template: object) -> frozenset[str]:
    """The variables the template's containers set that Hulk replaces (``replaced_env``)."""
    return frozenset(n for _, given in _replaced_by_container(template) for n in given)


def replaced_env(template: object) -> str | None:
    """What a Warning says where the template's containers set variables that Hulk sets on
    every stage pod (``stage_env``: the pod's own are replaced by them), or None: the
    values the template gives are never seen by the program, and a ``MASTER_PORT`` given
    there left the job on 29500 with nothing said (a user trial)."""
    found = _replaced_by_container(template)
    if not found:
        return None
    said = [f"{c} sets {', '.join(given)}" for c, given in found]
    ports = {"MASTER_PORT", "PET_MASTER_PORT"} & {n for _, given in found for n in given}
    port = " (set the port with spec.masterPort)" if ports else ""
    return (
        f"{'; '.join(said)}: Hulk sets these on every stage pod, in place of the template's "
        f"values{port}"
    )


def replaced_labels(template: object, job: str) -> str | None:
    """What a Warning says where the template's labels set one that Hulk sets on every
    stage pod (``hulk.dev/job`` other than the job's, ``hulk.dev/stage``,
    ``hulk.dev/replica``: Hulk's value replaces it), or None. Before, it was replaced with
    nothing said, and a selector on the template's value matched no stage pod (a user
    trial). A Warning, not a refusal: a job made before it was told runs on as it did."""
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return None
    own = job_label(job)
    given = [
        f"{k}={labels[k]}"
        for k in (LABEL_JOB, LABEL_STAGE, LABEL_REPLICA)
        if k in labels and not (k == LABEL_JOB and labels[k] == own)
    ]
    if not given:
        return None
    return (
        f"spec.template.metadata.labels sets {', '.join(given)}: Hulk sets {LABEL_JOB}={own}, "
        f"{LABEL_STAGE} and {LABEL_REPLICA} on every stage pod, in place of the template's "
        f"values (select the stage pods by {LABEL_JOB}={own}, or give a label of your own)"
    )


def owner_reference(job: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_job(meta: Mapping[str, Any]) -> str | None:
    """The HulkTrainingJob that owns a pod (its stage pod), or None: a pod that only carries
    the ``hulk.dev/job`` label (a user's debug pod, say) is not Hulk's."""
    for o in meta.get("ownerReferences") or []:
        if o.get("kind") == KIND and str(o.get("apiVersion", "")).split("/")[0] == GROUP:
            return str(o.get("name"))
    return None


def stage_job(meta: Mapping[str, Any]) -> str | None:
    """The job a stage pod is of: the HulkTrainingJob that owns it, where its
    ``hulk.dev/job`` label still names that job. A pod whose label was changed or removed
    by hand is not the job's (it counted as running: a user trial), but another pod that
    holds its node's resources."""
    job = owner_job(meta)
    if job is None or (meta.get("labels") or {}).get(LABEL_JOB) != job_label(job):
        return None
    return job


def asks_gpus(spec: Mapping[str, Any]) -> bool:
    """Whether a pod template asks for GPUs itself, in a container or a sidecar (an init
    container with ``restartPolicy: Always``, which runs beside them). A plain init
    container's GPUs are not the trainer's: it runs before, and the trainer gets its
    server's GPUs all the same (before, only the containers were read here, while the
    plan read the init containers' GPUs as the template's ask: an init container asking
    for 1 GPU gave the trainer 1 of its server's 8, and a sidecar's GPU was asked twice; a
    review)."""
    return _requests_gpus(running_containers(spec))


def running_containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A pod spec's containers and sidecars (init containers with ``restartPolicy:
    Always``): those that run beside the trainer."""
    sidecars = [
        c
        for c in spec.get("initContainers") or ()
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    return [*(c for c in spec.get("containers") or () if isinstance(c, Mapping)), *sidecars]


def _requests_gpus(containers: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the template asks for GPUs itself (a container's ``0``, which keeps a
    LimitRange's default GPUs off a sidecar, is not asking)."""
    for c in containers:
        res = c.get("resources") or {}
        for amounts in (res.get("limits") or {}, res.get("requests") or {}):
            if str(amounts.get(GPU, "0")).strip() not in ("0", "0.0", ""):
                return True
    return False


def _as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def quantities_as_text(spec: dict[str, Any]) -> None:
    """Writes the resource quantities of a pod spec as strings, in place, wherever they are:
    ``resources`` (containers', the pod's, an ephemeral volume's claim), ``overhead``,
    ``sizeLimit``, a ``resourceFieldRef``'s ``divisor``; a null amount is left out, as the
    operator reads it (``cpu:`` with nothing after it). Kubernetes takes ``8`` and ``"8"``
    alike (and a manifest may hold either), but the Python client refuses a number where
    its model says string, so the pods were never created."""

    def amounts(given: object) -> object:
        if not isinstance(given, dict):
            return given
        return {k: _as_text(v) for k, v in given.items() if v is not None}

    def walk(node: object) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key == "resources" and isinstance(value, dict):
                for kind in ("limits", "requests"):
                    if kind in value:
                        value[kind] = amounts(value[kind])
            elif key == "overhead":
                node[key] = amounts(value)
            elif key in ("sizeLimit", "divisor"):
                node[key] = _as_text(value)
            walk(node[key])

    walk(spec)


def stage_pod(
    *,
    job: str,
    namespace: str,
    uid: str,
    template: Mapping[str, Any],
    job_plan: JobPlan,
    slot: Slot,
    gpus: int,
    master_port: int = DEFAULT_MASTER_PORT,
    gated: bool = True,
    by_name: bool = False,
) -> dict[str, Any]:
    """The pod of one pipeline slot.

    Pinned to the Node named ``slot.node`` (``pin``) with a ``kubernetes.io/hostname``
    node selector, or by the name itself where that label is not the node's name
    (``by_name``), never by ``nodeName``, so the
    scheduler still checks that it fits; requests the server's ``gpus`` unless the template
    already asks for GPUs; tolerates ``nvidia.com/gpu:NoSchedule``; created behind the
    ``hulk.dev/gang`` scheduling gate, lifted once every pod of the job exists (``gated``)."""
    tmpl = copy.deepcopy(dict(template))
    meta = tmpl.get("metadata") or {}
    spec = tmpl.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        raise ValueError("spec.template.spec.containers must name at least one container")
    quantities_as_text(spec)
    host = hostname(job, slot.stage, slot.replica)
    labels = {
        **(meta.get("labels") or {}),
        LABEL_JOB: job_label(job),
        LABEL_STAGE: str(slot.stage),
        LABEL_REPLICA: str(slot.replica),
    }
    set_gpus = not asks_gpus(spec)
    trainer = trainer_index(meta, containers)
    # torchrun starts a worker per GPU it is told of: the trainer's own where the template
    # asks GPUs itself (``trainer_gpus``)
    nproc = gpus if set_gpus else trainer_gpus(meta, spec)
    env = stage_env(job, job_plan, slot, nproc, master_port)
    ours = {e["name"] for e in env}
    for i, c in enumerate(containers):
        c["env"] = [e for e in (c.get("env") or []) if e.get("name") not in ours] + env
        if set_gpus and i == trainer:
            res = c.setdefault("resources", {})
            res.setdefault("limits", {})[GPU] = str(gpus)
            res.setdefault("requests", {})[GPU] = str(gpus)
    spec["containers"] = containers
    for c in spec.get("initContainers") or []:  # (one waiting for MASTER_ADDR, as
        # PyTorchJob's own does: before, it saw none of them; a review)
        c["env"] = [e for e in (c.get("env") or []) if e.get("name") not in ours] + env
    spec["hostname"] = host
    spec["subdomain"] = service_name(job)
    if spec.get("hostNetwork") and not spec.get("dnsPolicy"):
        # on the node's network the default ClusterFirst falls back to the node's own
        # resolver, where MASTER_ADDR (<hostname>.<service>) does not resolve (a review)
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    pin(spec, slot.node, by_name)
    tolerations = list(spec.get("tolerations") or [])
    gpu_toleration = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
    if gpu_toleration not in tolerations:
        tolerations.append(gpu_toleration)
    spec["tolerations"] = tolerations
    spec.setdefault("restartPolicy", "OnFailure")
    spec.pop("nodeName", None)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": spec,
    }
    digest = _digest(json.dumps(body, sort_keys=True), 10)
    body["metadata"]["name"] = f"{host}-{digest[:5]}"
    body["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = digest
    if gated:  # after the template's own gates, which stay
        theirs = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GANG_GATE]
        spec["schedulingGates"] = [*theirs, {"name": GANG_GATE}]
    return body


HOSTNAME = "kubernetes.io/hostname"


def pin(spec: dict[str, Any], node: str, by_name: bool = False) -> None:
    """Pins the pod ``spec`` to the Node named ``node``: by a ``kubernetes.io/hostname``
    node selector where the node's label of that name is its name (as on most clusters,
    and the pods' specs as before), else (``by_name``) by a required node affinity on the
    name itself (``matchFields metadata.name``, as the DaemonSet controller pins its pods)
    in each of the template's own terms. Kubernetes sets the label from the kubelet's
    hostname, which may differ from the node's name (``--hostname-override``, some cloud
    providers): the selector then matched no node, and every stage pod waited for good (a
    review)."""
    if not by_name:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), HOSTNAME: node}
        return
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
    )
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), field]
    required["nodeSelectorTerms"] = terms


def pinned_node(spec: Mapping[str, Any]) -> str | None:
    """The Node a stage pod's ``spec`` is pinned to (``pin``), None where it is not: the
    last name field of its first required term (``pin`` adds it after the template's),
    else its ``kubernetes.io/hostname`` node selector."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    names = [
        f["values"][0]
        for f in terms[0].get("matchFields") or []
        if f.get("key") == "metadata.name" and f.get("operator") == "In" and f.get("values")
    ]
    if names:
        return str(names[-1])
    node = (spec.get("nodeSelector") or {}).get(HOSTNAME)
    return None if node is None else str(node)


DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


def trainer_index(meta: Mapping[str, Any], containers: Sequence[Mapping[str, Any]]) -> int:
    """The container that trains, and gets the server's GPUs: the one the template's
    ``kubectl.kubernetes.io/default-container`` annotation names (kubectl's own choice for
    logs and exec), else the first (before, always the first: a logging sidecar listed
    first got the GPUs; a user trial). A name no container has falls back to the first,
    as kubectl does."""
    named = (meta.get("annotations") or {}).get(DEFAULT_CONTAINER)
    return next((i for i, c in enumerate(containers) if c.get("name") == named), 0)


def trainer_gpus(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> int:
    """The GPUs of a pod template's trainer container (``trainer_index``) where the template
    asks GPUs itself, at least one; 0 where it asks none (Hulk gives the trainer its
    server's). What torchrun starts a worker per (``PET_NPROC_PER_NODE``; before, the
    containers' sum: a sidecar's GPU made the trainer start a worker on a GPU it did not
    hold; a review) and what the plan counts as the stage's: a sidecar's GPUs are the
    pod's, not the trainer's."""
    return max(1, trainer_ask(meta, spec)[1]) if asks_gpus(spec) else 0


def trainer_ask(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[int, int]:
    """(index, GPUs) of a pod template's trainer container (``trainer_index``): the GPUs it
    asks itself, 0 where it asks none."""
    containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    if not containers:
        return 0, 0
    i = trainer_index(meta, containers)
    own = effective_resources({"containers": [containers[i]]}, limits=False)
    return i, int(own.get(GPU, 0))


def desired_pods(
    *,
    job: str,
    namespace: str,
    uid: str,
    template: Mapping[str, Any],
    job_plan: JobPlan,
    gpus: Mapping[str, int],
    master_port: int = DEFAULT_MASTER_PORT,
    hostnames: Mapping[str, str | None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Pod name -> manifest for every slot of the plan; ``gpus`` maps server -> GPUs,
    ``hostnames`` server -> its ``kubernetes.io/hostname`` label (None: it has none; a
    server not given: the label is its name)."""
    pods = [
        stage_pod(
            job=job,
            namespace=namespace,
            uid=uid,
            template=template,
            job_plan=job_plan,
            slot=s,
            gpus=gpus[s.node],
            master_port=master_port,
            by_name=(hostnames or {}).get(s.node, s.node) != s.node,
        )
        for s in slots(job_plan)
    ]
    return {p["metadata"]["name"]: p for p in pods}


TEMPLATE_CHECK_NODE = "hulk-template-check"


def template_check_pod(
    *,
    job: str,
    namespace: str,
    uid: str,
    template: Mapping[str, Any],
) -> dict[str, Any]:
    """A stage pod built from ``template`` as the operator would build it (one stage on a
    placeholder server, one GPU), for a server-side dry run that validates the template
    before a running job's plan is dropped for it."""
    plan = JobPlan(job, (Stage((0, 1), (TEMPLATE_CHECK_NODE,)),), 1)
    pods = desired_pods(
        job=job,
        namespace=namespace,
        uid=uid,
        template=template,
        job_plan=plan,
        gpus={TEMPLATE_CHECK_NODE: 1},
    )
    return next(iter(pods.values()))


def headless_service(
    *, job: str, namespace: str, uid: str, master_port: int = DEFAULT_MASTER_PORT
) -> dict[str, Any]:
    """The Service that gives every stage pod the DNS name ``<hostname>.<service>``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job),
            "namespace": namespace,
            "labels": {LABEL_JOB: job_label(job)},
            "ownerReferences": [owner_reference(job, uid)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB: job_label(job)},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "master", "port": master_port, "targetPort": master_port}],
        },
    }
