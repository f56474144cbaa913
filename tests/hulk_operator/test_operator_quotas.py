"""What a pod counts toward ResourceQuotas and how LimitRanges bound it (``quotas``), as
Kubernetes' admission reads them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from placement_helpers import entry, snap, templated

from hulk_operator import GPU
from hulk_operator.quotas import QUOTA_GPU, quota_usage, stage_quota, with_defaults
from hulk_planner.datasets import paper_jobs


def test_quota_usage_counts_sidecars_pod_level_resources_and_overhead() -> None:
    """As Kubernetes adds a pod's requests up (a user trial found sidecars and pod-level
    resources counted short, and the quota refused the pods the plan counted on)."""
    spec = {
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "3"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}},
            {"name": "late", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}},
        ],
        "containers": [{"name": "t", "resources": {"requests": {"cpu": "2"}}}],
    }
    usage = quota_usage(spec)
    # containers 2 + sidecar 2 = 4; "late" 4 + the sidecar started before it = 6
    assert usage["requests.cpu"] == 6 and usage["requests.memory"] == 2**30
    spec["initContainers"] = spec["initContainers"][:2]
    assert quota_usage(spec)["requests.cpu"] == 4  # "init" 3 + no sidecar yet < 4
    pod_level = {**spec, "resources": {"requests": {"cpu": "10"}}, "overhead": {"cpu": "250m"}}
    assert quota_usage(pod_level)["requests.cpu"] == 10.25
    limited = {**pod_level, "containers": [{"name": "t", "resources": {"limits": {"memory": "1"}}}]}
    assert "limits.cpu" not in quota_usage(limited)  # no CPU limit: its overhead adds none
    assert stage_quota(with_defaults(pod_level, ())) == stage_quota(pod_level)


def test_quota_left_reads_hard_minus_used_of_what_pods_count() -> None:
    from hulk_operator.quotas import quota_left, quota_scopes

    body = {
        "spec": {
            "hard": {
                "requests.nvidia.com/gpu": "16",
                "pods": "10",
                "requests.cpu": "8",
                "limits.memory": "4Gi",
                "services": "2",  # objects, not pods: not planned within
                "requests.storage": "1Ti",  # volume claims
            }
        },
        "status": {"used": {"requests.nvidia.com/gpu": "12", "requests.cpu": "500m"}},
    }
    assert quota_left(body) == {
        QUOTA_GPU: 4,
        "pods": 10,
        "requests.cpu": 7.5,
        "limits.memory": 4 * 2**30,
    }
    assert quota_left({"spec": {"hard": {QUOTA_GPU: 8}}}) == {QUOTA_GPU: 8}  # none used
    # as admission reads a quota (a review): the hard limits its status holds (a spec
    # raised counts once synced), and one with no used figure yet leaves nothing
    synced = {
        "spec": {"hard": {QUOTA_GPU: "16", "pods": "4"}},
        "status": {"hard": {QUOTA_GPU: "8", "pods": "4"}, "used": {QUOTA_GPU: "2"}},
    }
    assert quota_left(synced) == {QUOTA_GPU: 6, "pods": 0}
    # limits of an extended resource: Kubernetes' pod evaluator counts none (before,
    # such a quota refused every job, though the API server admits their pods)
    assert quota_left({"spec": {"hard": {"limits.rdma/hca_shared_devices_a": "1"}}}) is None
    # names the pod evaluator tracks for nothing: their status never gets a used figure
    untracked = {"hard": {"requests.kubernetes.io/foo": "1", "requests.foo": "1"}}
    assert quota_left({"spec": untracked, "status": untracked}) is None
    tracked = {"requests.example.com/fpga": "2", "requests.hugepages-2Mi": "1Gi"}
    assert quota_left({"spec": {"hard": tracked}}) == {
        "requests.example.com/fpga": 2,
        "requests.hugepages-2Mi": 2**30,
    }
    assert "limits.example.com/fpga" not in quota_usage(
        {"containers": [{"resources": {"limits": {"example.com/fpga": "1", "cpu": "2"}}}]}
    )
    assert quota_left({"spec": {"hard": {"services": "10"}}}) is None
    assert quota_scopes(body) == ()
    selector = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["hi"]}]
    }
    scoped = {
        "spec": {**body["spec"], "scopes": ["NotTerminating"], "scopeSelector": selector},
        "status": body["status"],
    }
    assert quota_left(scoped) == quota_left(body)  # what it counts: the pods its scopes match
    assert quota_scopes(scoped) == (
        ("NotTerminating", "Exists", ()),
        ("PriorityClass", "In", ("hi",)),
    )


@pytest.mark.parametrize(
    ("scope", "facts", "counted"),
    [
        (("Terminating", "Exists", ()), {"terminating": True}, True),
        (("Terminating", "Exists", ()), {}, False),
        (("NotTerminating", "Exists", ()), {}, True),
        (("BestEffort", "Exists", ()), {"best_effort": True}, True),
        (("NotBestEffort", "Exists", ()), {"best_effort": True}, False),
        (("PriorityClass", "In", ("hi", "mid")), {"priority_class": "hi"}, True),
        (("PriorityClass", "In", ("hi",)), {}, False),
        (("PriorityClass", "NotIn", ("hi",)), {}, True),  # no class: the label is absent
        (("PriorityClass", "NotIn", ("hi",)), {"priority_class": "hi"}, False),
        (("PriorityClass", "Exists", ()), {"priority_class": "lo"}, True),
        (("PriorityClass", "DoesNotExist", ()), {}, True),
        (("PriorityClass", "DoesNotExist", ()), {"priority_class": "lo"}, False),
        (("CrossNamespacePodAffinity", "Exists", ()), {"cross_namespace_affinity": True}, True),
        (("VolumeAttributesClass", "Exists", ()), {}, False),  # claims', not pods'
    ],
)
def test_a_scoped_quota_counts_the_pods_its_scopes_match(
    scope: Any, facts: dict[str, Any], counted: bool
) -> None:
    from hulk_operator.quotas import PodFacts, scopes_match

    assert scopes_match([scope], PodFacts(**facts)) is counted


def test_what_scoped_quotas_read_of_a_stage_pod() -> None:
    """As Kubernetes reads it: the QoS class from CPU and memory only (a GPU-only stage
    pod is BestEffort), after the LimitRange defaults; the global default PriorityClass
    where the template names none; a deadline; affinity terms naming namespaces."""
    from hulk_operator.quotas import PodFacts, template_facts

    gpu_only = {"containers": [{"name": "t", "resources": {"limits": {GPU: "8"}}}]}
    opt = templated(entry(paper_jobs()[0]), gpu_only)
    assert snap([opt]).pod_facts(opt) == PodFacts(best_effort=True)
    defaults = {"ml": [("lr", {"cpu": "1"}, {})]}  # a default CPU request: Burstable
    view = replace(snap([opt]), limit_defaults=defaults, default_priority_class="normal")
    assert view.pod_facts(opt) == PodFacts(best_effort=False, priority_class="normal")
    term = {"topologyKey": "x", "namespaceSelector": {}}
    spec = {
        "activeDeadlineSeconds": 3600,
        "priorityClassName": "hi",
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    }
    assert template_facts(spec) == (True, "hi", True)
    assert template_facts({}) == (False, "", False)
    # a malformed template is the API server's to refuse: read as naming nothing, not a crash
    # (the job would have dropped out of the operator's index, told nothing)
    assert template_facts({"affinity": {"podAffinity": "x"}}) == (False, "", False)
    assert template_facts({"affinity": [1]}) == (False, "", False)


def test_gpu_limit_is_the_smallest_container_or_pod_maximum() -> None:
    from hulk_operator.quotas import gpu_limit

    body = {
        "spec": {
            "limits": [
                {"type": "Container", "max": {"nvidia.com/gpu": "8", "cpu": "4"}},
                {"type": "Pod", "max": {"nvidia.com/gpu": 6}},
                {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}},
            ]
        }
    }
    assert gpu_limit(body) == 6
    assert gpu_limit({"spec": {"limits": [{"type": "Container", "max": {"cpu": "4"}}]}}) is None
