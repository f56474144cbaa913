"""Helpers of the operator's end-to-end tests (a real API server, kwok nodes)."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from hulk_operator import GROUP, LABEL_JOB, PLURAL, VERSION
from hulk_operator.config import OperatorConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig(batch_window_s=0.3)
T = TypeVar("T")


def hulk(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m hulk ARGS`` run from the repository's root, as a user runs the CLI,
    its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "hulk", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def paper_manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "examples" / "paper-jobs.yaml").read_text()) if d]


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    base = copy.deepcopy(paper_manifests()[0])
    base["metadata"] = {"name": name}
    base["spec"]["model"] = {"preset": "bert-large"}
    base["spec"].update(spec)
    return base


def wait(what: str, fn: Callable[[], T | None], timeout: float = 60.0, every: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class Kube:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def apply(self, body: dict[str, Any]) -> Any:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def job(self, name: str) -> Any:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def jobs(self) -> list[Any]:
        found: Any = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        return list(found["items"])

    def delete_job(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def pods(self, job: str | None = None) -> list[Any]:
        sel = f"{LABEL_JOB}={job}" if job else LABEL_JOB
        return list(self.core.list_namespaced_pod(self.ns, label_selector=sel).items)

    def live_pods(self, job: str | None = None) -> list[Any]:
        return [p for p in self.pods(job) if p.metadata.deletion_timestamp is None]

    def phase(self, name: str) -> str | None:
        return (self.job(name).get("status") or {}).get("phase")

    def all_running(self, names: list[str]) -> bool:
        return all(self.phase(n) == "Running" for n in names)

    def events(self, reason: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(self.ns).items if e.reason == reason]

    def told(self, reason: str, timeout: float = 10.0) -> list[Any]:
        """The Events of ``reason`` once there is one. kopf posts Events from a queue, after
        the status patch of the same handler: a test that saw the status must wait for its
        Event (a CI run read none a moment after the status counted the re-plan)."""
        return wait(f"a {reason} Event", lambda: self.events(reason), timeout)


def plan_nodes(job: dict[str, Any]) -> list[str]:
    stages = ((job.get("status") or {}).get("plan") or {}).get("stages") or []
    return [n["name"] for s in stages for n in s["nodes"]]


def condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def wait_reason(
    kube: Kube, job: str, type_: str, reason: str, what: str, timeout: float = 30.0
) -> dict[str, Any]:
    """Waits until the job's condition ``type_`` has ``reason``; returns that condition."""

    def reached() -> dict[str, Any] | None:
        c = condition(kube.job(job), type_)
        return c if c.get("reason") == reason else None

    return wait(what, reached, timeout)


@contextmanager
def cleanup_jobs(kube: Kube, timeout: float = 60.0) -> Iterator[None]:
    """Deletes the namespace's jobs while the operator still runs (kopf's finalizer)."""
    try:
        yield
    finally:
        for j in kube.jobs():
            try:
                kube.delete_job(j["metadata"]["name"])
            except client.ApiException:
                pass
        wait("jobs deleted", lambda: not kube.jobs(), timeout)


@contextmanager
def refusing_pods(
    kube: Kube,
    allow: str,
    probe: dict[str, Any],
    why: str,
    resource: str = "pods",
    reason: str | None = "Forbidden",
) -> Iterator[str]:
    """A ValidatingAdmissionPolicy that refuses (403) each pod (or Service: ``resource``
    "services") created in ``kube``'s namespace for which the CEL expression ``allow``
    (``object``: the pod) is false, with the message ``why``: a refusal Hulk cannot plan
    around (a ResourceQuota it can). Waits until the API server refuses ``probe`` (an
    object the policy refuses, created as a dry run); yields the policy's name; on the way
    out deletes it and its binding and waits until the probe is let through. ``reason``
    None: the validation sets none, and the API server answers 422 Invalid."""
    adm = client.AdmissionregistrationV1Api(kube.api)
    name = f"refuse-{kube.ns}"
    create = {
        "pods": kube.core.create_namespaced_pod,
        "services": kube.core.create_namespaced_service,
    }[resource]
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": [resource]}
    pods["operations"] = ["CREATE"]
    policy = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [pods]},
            "validations": [
                {"expression": allow, "message": why, **({"reason": reason} if reason else {})}
            ],
        },
    }
    only_here = {"matchLabels": {"kubernetes.io/metadata.name": kube.ns}}
    binding = {
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": only_here},
        },
    }

    def refused() -> bool:
        try:
            create(kube.ns, probe, dry_run="All")
        except client.ApiException as exc:
            code = {"Forbidden": 403, None: 422, "RequestEntityTooLarge": 413}[reason]
            return exc.status == code and why in str(exc.body)
        return False

    adm.create_validating_admission_policy(policy)
    try:
        adm.create_validating_admission_policy_binding(binding)

        wait("the admission policy in force", lambda: refused(), 30)
        yield name
    finally:
        for delete in (
            adm.delete_validating_admission_policy_binding,
            adm.delete_validating_admission_policy,
        ):
            try:
                delete(name)
            except client.ApiException:
                pass
        wait("the admission policy gone", lambda: not refused(), 30)


def token_kubeconfig(
    sandbox: Any, kube: Kube, who: str, path: Path, namespace: str | None = None
) -> Path:
    """A kubeconfig of the sandbox at ``path`` that authenticates as ServiceAccount ``who``
    of ``namespace`` (the test's by default; created here) with a token from the
    TokenRequest API: it may do what the roles bound to it allow (none: every call is
    refused with 403)."""
    ns = namespace or kube.ns
    kube.core.create_namespaced_service_account(ns, {"metadata": {"name": who}})
    token = kube.core.create_namespaced_service_account_token(
        who, ns, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(sandbox.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path
