"""The few Kubernetes API calls the operator makes, with the kubernetes client (blocking:
the handlers run them in threads). Every call is idempotent: creating what exists (409)
and deleting what is gone (404) both count as success.

Calls on many pods fan out over one shared pool of ``FAN_OUT`` threads, whatever the
number of jobs reconciled at once, and the client keeps ``POOL`` connections: more threads
than connections would open and discard a TLS connection per call (seen at 1,000 nodes)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from hulk_operator import GANG_GATE, LABEL_JOB
from hulk_operator.errors import ServiceTaken
from hulk_operator.quotas import default_class
from hulk_planner.errors import InvalidRequest

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
FAN_OUT = 16
POOL = 32  # FAN_OUT plus the handlers' own calls (kopf's and asyncio's worker threads)
_fan_out = concurrent.futures.ThreadPoolExecutor(FAN_OUT, thread_name_prefix="hulk-api")


def configuration(kubeconfig: str | None = None) -> client.Configuration:
    """Client settings from ``kubeconfig`` (or ``$KUBECONFIG``/``~/.kube/config``), else
    the in-cluster service account. A file that is missing or holds no usable context, or
    no file outside a cluster, raises ``InvalidRequest`` naming where it came from."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    source = "--kubeconfig" if kubeconfig else "$KUBECONFIG" if path else "~/.kube/config"
    in_cluster = not path and not os.path.exists(os.path.expanduser("~/.kube/config"))
    cfg = client.Configuration()
    first = os.path.expanduser(path.split(os.pathsep)[0]) if path else ""
    if path and not os.path.isfile(first):
        what = "not a regular file" if os.path.exists(first) else "no such file"
        raise InvalidRequest(source, f"{path}: {what}", "check the path")
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=path, client_configuration=cfg)
    except (TypeError, AttributeError, KeyError) as exc:  # YAML, but no mapping (a trial)
        raise InvalidRequest(
            source,
            f"{path or '~/.kube/config'}: is not a kubeconfig",
            "point it at a kubeconfig: a YAML mapping with clusters, users and contexts",
        ) from exc
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        if in_cluster:
            raise InvalidRequest(
                "--kubeconfig",
                "none given, no ~/.kube/config and not running in a cluster",
                "pass --kubeconfig FILE or set KUBECONFIG",
            ) from exc
        raise InvalidRequest(
            source,
            f"{path or '~/.kube/config'}: {' '.join(str(exc).split())}",
            "point it at a valid kubeconfig",
        ) from exc
    if not cfg.verify_ssl:
        # the kubeconfig's insecure-skip-tls-verify: taken as kubectl takes it, without a
        # word (urllib3 warned once a request, nine times a `hulk plan`: a user trial)
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    return cfg


def make_client(
    kubeconfig: str | None = None, pool: int = POOL, timeout_s: float | None = None
) -> client.ApiClient:
    """An API client; with ``timeout_s``, every request it makes without a timeout of its
    own gets that one (the client's default is none: a server that accepts the connection
    and never answers held ``hulk plan --kubeconfig`` for ever; a user trial)."""
    cfg = configuration(kubeconfig)
    cfg.connection_pool_maxsize = pool
    api = client.ApiClient(cfg)
    if timeout_s is not None:
        request: Any = api.rest_client.request

        def timed(*args: Any, **kwargs: Any) -> Any:
            kwargs["_request_timeout"] = kwargs.get("_request_timeout") or timeout_s
            return request(*args, **kwargs)

        api.rest_client.request = timed  # type: ignore[method-assign]
    return api


def _ok(exc: ApiException, *statuses: int) -> bool:
    return exc.status in statuses


def create_pods(
    api: client.ApiClient,
    pods: Sequence[Mapping[str, Any]],
    delay_s: float = 0.0,
    stop: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Creates the pods (409 is fine); returns the names created now. With ``delay_s``
    (a testing knob) they are created one at a time with a pause between. Once ``stop()``
    (the job deleted, the operator exiting), the pods not yet created are not."""
    core = client.CoreV1Api(api)

    def one(pod: Mapping[str, Any]) -> str | None:
        if stop():
            return None
        try:
            core.create_namespaced_pod(pod["metadata"]["namespace"], pod)  # type: ignore[arg-type]
            return str(pod["metadata"]["name"])
        except ApiException as exc:
            if _ok(exc, 409):
                return None
            raise

    if delay_s > 0:
        out = []
        for p in pods:
            name = one(p)
            if name:
                out.append(name)
            steps = max(1, round(delay_s / 0.1))  # (a stop is seen within 0.1 s)
            for _ in range(steps):
                if stop():
                    return out
                time.sleep(delay_s / steps)
        return out
    return [n for n in _fan_out.map(one, pods) if n]


def dry_run_pod(api: client.ApiClient, pod: Mapping[str, Any]) -> Exception | None:
    """Creates ``pod`` as a server-side dry run (nothing is stored): the API server's error
    if it refuses the pod, or the client's if its models refuse to send it (a field of the
    wrong type: the real creation would fail the same way), else None (also when the check
    itself cannot run: the real creation will tell)."""
    from pydantic import ValidationError

    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All")  # type: ignore[arg-type]
    except (ApiException, ValidationError) as exc:
        return exc
    except Exception:  # the check is advisory
        return None
    return None


def ungate(api: client.ApiClient, namespace: str, names: Iterable[str]) -> None:
    """Lifts Hulk's gang gate from the pods (gates of the pod template stay), so the
    scheduler binds them once no other gate is left."""
    core = client.CoreV1Api(api)
    lift = {"spec": {"schedulingGates": [{"name": GANG_GATE, "$patch": "delete"}]}}

    def one(name: str) -> None:
        try:
            core.patch_namespaced_pod(name, namespace, lift, _content_type=STRATEGIC)
        except ApiException as exc:
            if not _ok(exc, 404):
                raise

    list(_fan_out.map(one, names))


def delete_pods(
    api: client.ApiClient,
    namespace: str,
    names: Iterable[str],
    force: Iterable[str] = (),
    uids: Mapping[str, str] | None = None,
) -> None:
    """Deletes the pods; those in ``force`` (their node is gone) with grace period 0; those
    in ``uids`` only where the pod of the name is still the one of that uid (another of its
    name made since is not deleted)."""
    core = client.CoreV1Api(api)
    forced = set(force)
    only = uids or {}

    def one(name: str) -> None:
        uid = only.get(name)
        # (the grace in the body, with the precondition: the API server reads a request's
        # body alone where it has one, not its query parameters)
        body = client.V1DeleteOptions(
            grace_period_seconds=0 if name in forced else None,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as exc:
            if not _ok(exc, 404) and not (uid and _ok(exc, 409)):
                raise

    list(_fan_out.map(one, names))


def service_uid(api: client.ApiClient, namespace: str, name: str) -> str | None:
    """The uid of the Service of that name, None where there is none."""
    try:
        there: Any = client.CoreV1Api(api).read_namespaced_service(name, namespace)
    except ApiException as exc:
        if _ok(exc, 404):
            return None
        raise
    return str(there.metadata.uid or "")


def last_event_message(api: client.ApiClient, namespace: str, uid: str, reason: str) -> str | None:
    """The message of the newest Event of ``reason`` about the object ``uid`` (None: none)."""
    events: Any = client.CoreV1Api(api).list_namespaced_event(
        namespace,
        field_selector=f"involvedObject.uid={uid},reason={reason}",
        _request_timeout=10,
    )
    newest = max(
        events.items,
        key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
        default=None,
    )
    return None if newest is None else str(newest.message or "")


def orphaned_stage_pods(api: client.ApiClient, namespace: str, label: str, uid: str) -> list[str]:
    """Stage pods (``hulk.dev/job=label`` and a stage label) no HulkTrainingJob owns and not
    ending: an earlier job of this name deleted with ``--cascade=orphan`` left them running.
    They are not the job's (it does not adopt a running pipeline of another spec), but they
    hold their GPUs and answer its stages' DNS names."""
    from hulk_operator import LABEL_JOB, LABEL_STAGE

    pods: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_JOB}={label},{LABEL_STAGE}", _request_timeout=10
    )
    return sorted(
        p.metadata.name
        for p in pods.items
        if p.metadata.deletion_timestamp is None
        and p.status.phase not in ("Succeeded", "Failed")
        and not any(
            o.kind == "HulkTrainingJob" or o.uid == uid for o in p.metadata.owner_references or []
        )
    )


def ensure_service(api: client.ApiClient, service: Mapping[str, Any]) -> bool:
    """Creates the job's Service, or sets the ports of the one there (``masterPort`` may
    have been edited since), and adopts it when no other controller owns it (left by a job
    of the same name deleted with ``--cascade=orphan``: before, it outlived the new job).
    True where it was created. The one there is the job's where the job owns it (its label
    or selector changed by hand are set back), or where it is as Hulk makes them: headless,
    the job's label and selector, owned by nothing but a HulkTrainingJob. Any other is
    someone else's: :class:`ServiceTaken`, and it is left as it is (before, the label
    alone decided: a user's ClusterIP Service labelled so was taken over)."""
    core = client.CoreV1Api(api)
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    try:
        core.create_namespaced_service(ns, service)  # type: ignore[arg-type]
        return True
    except ApiException as exc:
        if not _ok(exc, 409):
            raise
        patch: dict[str, Any] = {"spec": {"ports": service["spec"]["ports"]}}  # (replaced whole)
        there: Any = core.read_namespaced_service(name, ns)
        mine = service["metadata"]["labels"]
        selector = service["spec"]["selector"]
        owners = there.metadata.owner_references or []
        ours = service["metadata"].get("ownerReferences") or []
        kind = ours[0]["kind"] if ours else "HulkTrainingJob"
        owned = bool(ours) and any(o.uid == ours[0]["uid"] for o in owners)
        alike = (
            all((there.metadata.labels or {}).get(k) == v for k, v in mine.items())
            and there.spec.cluster_ip == "None"
            and (there.spec.selector or {}) == selector
            and all(o.kind == kind for o in owners)
        )
        if not owned and not alike:
            raise ServiceTaken(
                f"Service {name} exists in namespace {ns} and was not made by Hulk for a job "
                f"of this name (Hulk's are headless, with label and selector "
                f"{', '.join(f'{k}={v}' for k, v in mine.items())}); the stage pods need a "
                "headless Service of the job's name: rename the job, or delete that Service "
                "(or make it again under another name)",
                name,
                there.metadata.uid or "",
            ) from exc
        if owned:  # ours: a label or selector changed by hand is set back
            patch["metadata"] = {"labels": mine}
            patch["spec"]["selector"] = {
                **{k: None for k in there.spec.selector or {} if k not in selector},
                **selector,
            }
        elif ours and {o.uid for o in owners} != {o["uid"] for o in ours}:
            patch["metadata"] = {"ownerReferences": ours}  # (alike: owned by no other kind)
        core.patch_namespaced_service(name, ns, patch, _content_type=MERGE)
        return False


# NodeLatency objects are listed in pages of this many (``list_objects``): 11 MB each at
# 1,000 probed nodes, parsed in about a tenth of the whole listing's time
LATENCY_PAGE = 100


def list_objects(
    api: client.ApiClient,
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    page: int | None = None,
    _again: bool = False,
) -> list[dict[str, Any]]:
    """Raw JSON items of a custom resource ([] when its CRD is not installed); ``page``:
    read in chunks of that many objects (``limit`` and ``continue``, as kubectl does), so
    that no one response is parsed whole: ``json.loads`` holds the GIL, and the 109 MB
    listing of 1,000 probed nodes' NodeLatency objects stalled the operator's event loop
    for the whole of it (``bench/latency_listing.py``). A continue token expired (410: the
    listing outlasted a compaction) starts the listing again, once."""
    custom = client.CustomObjectsApi(api)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query: dict[str, Any] = {"_preload_content": False}
        if page:
            query["limit"] = page
            if token:
                query["_continue"] = token
        resp: Any
        try:
            if namespace:
                resp = custom.list_namespaced_custom_object(
                    group, version, namespace, plural, **query
                )
            else:
                resp = custom.list_cluster_custom_object(group, version, plural, **query)
        except ApiException as exc:
            if _ok(exc, 404):
                return []
            if _ok(exc, 410) and token and not _again:
                return list_objects(api, group, version, plural, namespace, page, _again=True)
            raise
        body = json.loads(resp.data)
        del resp
        items.extend(body["items"])
        token = (body.get("metadata") or {}).get("continue")
        if not page or not token:
            return items


def list_nodes(api: client.ApiClient) -> list[dict[str, Any]]:
    resp: Any = client.CoreV1Api(api).list_node(_preload_content=False)
    return list(json.loads(resp.data)["items"])


def list_running_pods(
    api: client.ApiClient, leave_out: Sequence[str] = (), namespace: str | None = None
) -> list[dict[str, Any]]:
    """Raw JSON of every pod in the cluster (of ``namespace`` alone, if given) that has not
    ended (Succeeded or Failed), but for those of the namespaces ``leave_out`` names (the
    API server leaves them out: an operator's own namespaces may hold most of the pods, and
    parsing them was most of its CPU at rest; a profile, ``bench/operator_scale.py``)."""
    terms = ["status.phase!=Succeeded", "status.phase!=Failed"]
    terms += [f"metadata.namespace!={ns}" for ns in leave_out]
    core = client.CoreV1Api(api)
    selector = ",".join(terms)
    resp: Any = (
        core.list_namespaced_pod(namespace, field_selector=selector, _preload_content=False)
        if namespace
        else core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
    )
    return list(json.loads(resp.data)["items"])


def list_policies(
    api: client.ApiClient, namespace: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Raw JSON of every ResourceQuota and every LimitRange in the cluster (of
    ``namespace`` alone, if given)."""
    core = client.CoreV1Api(api)
    if namespace:
        quotas: Any = core.list_namespaced_resource_quota(namespace, _preload_content=False)
        limits: Any = core.list_namespaced_limit_range(namespace, _preload_content=False)
    else:
        quotas = core.list_resource_quota_for_all_namespaces(_preload_content=False)
        limits = core.list_limit_range_for_all_namespaces(_preload_content=False)
    return list(json.loads(quotas.data)["items"]), list(json.loads(limits.data)["items"])


def list_job_services(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    """Raw JSON of the Services labelled ``hulk.dev/job`` in every namespace (in
    ``namespace`` alone, if given): the jobs' headless Services."""
    core = client.CoreV1Api(api)
    found: Any = (
        core.list_namespaced_service(namespace, label_selector=LABEL_JOB, _preload_content=False)
        if namespace
        else core.list_service_for_all_namespaces(label_selector=LABEL_JOB, _preload_content=False)
    )
    return list(json.loads(found.data)["items"])


def default_priority_class(api: client.ApiClient) -> str | None:
    """The name of the PriorityClass a pod naming none gets (``globalDefault``; of several,
    the lowest value, as the Priority admission plugin picks), "" where there is none,
    None where PriorityClasses cannot be listed (a tenant's kubeconfig)."""
    try:
        found: Any = client.SchedulingV1Api(api).list_priority_class()
    except ApiException:
        return None
    return default_class(
        (float(c.value or 0), str(c.metadata.name)) for c in found.items if c.global_default
    )


def reason_of(exc: BaseException) -> str:
    """The innermost cause of a connection failure (urllib3 wraps it twice), without the
    connection object's repr: "Failed to establish a new connection: [Errno 111] ..."."""
    inner: BaseException = exc
    while isinstance(getattr(inner, "reason", None), BaseException):
        inner = getattr(inner, "reason")  # noqa: B009
    return " ".join(str(inner).split()).rsplit("): ", 1)[-1]
