"""Helpers of the operator's in-memory placement tests: the paper's cluster as the
operator sees it (Ready kwok nodes) and job entries as its index keeps them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hulk_operator.entries import JobEntry, object_entry
from hulk_operator.inventory import NodeInfo, node_info
from hulk_operator.latencies import Latencies
from hulk_operator.quotas import stage_quota, with_defaults
from hulk_operator.snapshot import Snapshot
from hulk_planner.datasets import paper_cluster
from hulk_planner.model import Job
from hulk_sandbox.nodes import node_manifest


def nodes() -> dict[str, NodeInfo]:
    out = {}
    for s in paper_cluster().servers:
        body = node_manifest(s)
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        out[s.name] = node_info(body)
    return out


def not_ready(name: str, since: str | None) -> NodeInfo:
    """The paper's server ``name`` as a Node NotReady since ``since`` (None: not said)."""
    body = node_manifest(paper_cluster().server(name))
    ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
    if since is not None:
        ready["lastTransitionTime"] = since
    body["status"]["conditions"] = [ready]
    return node_info(body)


def entry(job: Job, ns: str = "ml", **kw: Any) -> JobEntry:
    base = dict(
        key=(ns, job.name),
        uid=f"uid-{job.name}",
        generation=1,
        job=job,
        error=None,
        plan_nodes=frozenset(),
        phase=None,
        deleting=False,
    )
    base.update(kw)
    return JobEntry(**base)  # type: ignore[arg-type]


def snap(entries: list[JobEntry], held: dict[str, Any] | None = None) -> Snapshot:
    return Snapshot(nodes(), Latencies(), {e.key: e for e in entries}, held or {})


def templated(e: JobEntry, pod_spec: dict[str, Any]) -> JobEntry:
    """``e`` with a template whose pod spec is ``pod_spec``, as ``job_entry`` reads it."""
    return replace(e, pod_quota=stage_quota(pod_spec), pod_resources=with_defaults(pod_spec, ()))


def applied(
    name: str,
    preset: str,
    pod_spec: dict[str, Any],
    meta: dict[str, Any] | None = None,
    **spec: Any,
) -> JobEntry:
    """A job of model ``preset`` in namespace ml whose template is ``meta`` and
    ``pod_spec``, as the operator's index reads its manifest (``object_entry``)."""
    template = {"metadata": meta or {}, "spec": pod_spec}
    body = {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": name},
        "spec": {"model": {"preset": preset}, "template": template, **spec},
    }
    return object_entry(body, "ml")
