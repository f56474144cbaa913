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
