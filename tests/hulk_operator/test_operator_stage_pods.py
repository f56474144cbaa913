"""A job's stage pods as built for each tick (``stage_pods.desired_pods``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from placement_helpers import entry

from hulk_operator import manifests
from hulk_operator.stage_pods import desired_pods
from hulk_planner.model import Job, JobPlan, ModelSpec, Stage

PLAN = JobPlan("j", (Stage((0, 24), ("a",)), Stage((24, 48), ("b",))), micro_batches=8)
SPEC: dict[str, Any] = {
    "template": {"spec": {"containers": [{"name": "t", "image": "train:1"}]}},
    "masterPort": 29501,
}


def test_the_pods_built_for_a_job_are_given_again_until_what_they_come_from_changes() -> None:
    """Building every stage pod each tick was most of a tick; the pods are built again
    when the job's template, plan, GPUs, port or uid change, and not otherwise."""
    job = entry(Job("j", ModelSpec(10**9, 24, 2048, 1024), 64, 1))
    built: dict[Any, Any] = {}
    gpus = {"a": 8, "b": 8}
    first = desired_pods(job, SPEC, PLAN, gpus, built)
    assert first == manifests.desired_pods(
        job="j",
        namespace="ml",
        uid=job.uid,
        template=SPEC["template"],
        job_plan=PLAN,
        gpus=gpus,
        master_port=29501,
    )
    assert desired_pods(job, dict(SPEC), replace(PLAN), dict(gpus), built) is first
    changed = [
        desired_pods(job, SPEC, PLAN, {"a": 8, "b": 4}, built),
        desired_pods(job, {**SPEC, "masterPort": 29502}, PLAN, gpus, built),
        desired_pods(replace(job, uid="other"), SPEC, PLAN, gpus, built),
        desired_pods(job, SPEC, replace(PLAN, micro_batches=16), gpus, built),
        desired_pods(
            job,
            {**SPEC, "template": {"spec": {"containers": [{"name": "t", "image": "train:2"}]}}},
            PLAN,
            gpus,
            built,
        ),
    ]
    for pods in changed:
        assert pods != first  # each a different set of pods (names follow their content)
    assert desired_pods(job, SPEC, PLAN, gpus, built) == first  # (built again)
    assert list(built) == [job.key]  # one entry a job
    assert desired_pods(job, SPEC, PLAN, gpus) is not desired_pods(job, SPEC, PLAN, gpus)


def test_new_pods_wait_for_the_old_pods_of_their_hostnames_for_a_while() -> None:
    """The gang gate stays while an old pod of a new pod's hostname is Terminating, at most
    HOLD_S: one on a node that stopped answering would never go."""
    from hulk_operator.stage_pods import HOLD_S, waits_on_old

    gated = ["bert-0-0-1a2b3", "bert-1-0-4c5d6"]
    assert waits_on_old(gated, {"bert-1-0"}, since=100.0, now=101.0)
    assert not waits_on_old(gated, {"bert-2-0"}, since=100.0, now=101.0)  # another stage's
    assert not waits_on_old(gated, set(), since=100.0, now=101.0)
    assert not waits_on_old(gated, {"bert-1-0"}, since=100.0, now=100.0 + HOLD_S)


def test_a_quota_refusal_right_after_the_jobs_own_pods_were_deleted_is_tried_again(
    monkeypatch: Any,
) -> None:
    """A quota counts a deleted pod until its controller sees it gone: stage pods made just
    after the same reconciliation deleted the job's old ones (a re-plan within a lowered
    pods quota) can be refused for pods that are already going. That refusal is marked
    (``errors.quota_lag``: tried again before it is told); the next try deletes nothing,
    and its refusal is told (before, the first was told at once: a flaky CI run)."""
    import asyncio
    import json
    from types import SimpleNamespace

    from kubernetes.client.exceptions import ApiException

    from hulk_operator import kube
    from hulk_operator.config import OperatorConfig
    from hulk_operator.context import PodEntry
    from hulk_operator.errors import quota_lag
    from hulk_operator.stage_pods import sync_pods

    deleted: list[str] = []
    monkeypatch.setattr(kube, "delete_pods", lambda api, ns, names, *a: deleted.extend(names))
    monkeypatch.setattr(kube, "ensure_service", lambda api, svc: False)
    said = 'pods "new-0" is forbidden: exceeded quota: fewer, requested: pods=1, used: pods=4'

    def refuse(*_: Any) -> list[str]:
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"kind": "Status", "message": said, "code": 403})
        raise exc

    monkeypatch.setattr(kube, "create_pods", refuse)
    job = entry(Job("j", ModelSpec(1_000_000_000, 48, 2048, 1024), 64, 4))
    ns = job.key[0]
    kept = PodEntry("keep-0", "b", "Running", False, False)  # (a stage the plan keeps)
    ctx: Any = SimpleNamespace(
        api=None,
        nodes=dict.fromkeys("ab"),
        stopped=lambda: False,
        pods={job.key: [PodEntry("old-0", "a", "Running", False, False), kept]},
        recent={},
        config=OperatorConfig(),
        event=lambda *a: None,
    )
    desired = {n: {"metadata": {"name": n, "namespace": ns}} for n in ("keep-0", "new-0")}
    try:
        asyncio.run(sync_pods(ctx, job, SPEC, desired))
        raise AssertionError("not refused")
    except ApiException as exc:
        assert quota_lag(exc)
    assert deleted == ["old-0"]
    # the next try: the old pod is going (nothing deleted now), and a refusal is told
    ctx.pods = {job.key: [PodEntry("old-0", "a", "Running", False, True), kept]}
    ctx.recent = {}
    try:
        asyncio.run(sync_pods(ctx, job, SPEC, desired))
        raise AssertionError("not refused")
    except ApiException as exc:
        assert not quota_lag(exc) and "exceeded quota" in str(exc.body)
    assert deleted == ["old-0"]
