"""A reconciliation's pod step (``pod_step.make_pods``), on a fake context: no cluster."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from placement_helpers import entry

from hulk_operator import kube
from hulk_operator import status as st
from hulk_operator.context import PodEntry
from hulk_operator.plan_step import Step
from hulk_operator.pod_step import make_pods
from hulk_planner.datasets import paper_jobs
from hulk_planner.model import JobPlan, Stage


def test_a_stage_that_fails_in_a_replans_tick_fails_a_never_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """restartPolicy Never, a server lost and, in the same tick, a stage failed on a server
    the re-plan keeps: the re-plan deleted the failed pod as not in its plan, the job ran
    on, and no StageFailed was told (a review). It fails now, the failed pod kept for its
    logs; a pod that failed on the lost server is its server's loss, not a failure."""
    deleted: list[str] = []
    monkeypatch.setattr(kube, "delete_pods", lambda api, ns, names, forced: deleted.extend(names))
    told: list[tuple[str, str]] = []
    counted = SimpleNamespace(inc=lambda n=1: None)
    job = entry(paper_jobs()[2])
    old = JobPlan(job.key[1], (Stage((0, 24), ("a",)), Stage((24, 48), ("b",))), 8)
    new_plan = JobPlan(job.key[1], (Stage((0, 24), ("a",)), Stage((24, 48), ("c",))), 8)
    pods = [
        PodEntry("p-0", "a", "Failed", False, False, reason="Error"),
        PodEntry("p-1", "b", "Running", False, False),
    ]
    ctx: Any = SimpleNamespace(
        api=None,
        stopped=lambda: False,
        pods={job.key: pods},
        event=lambda kind, reason, msg: told.append((kind, reason)),
        placer=SimpleNamespace(forget=lambda key: None),
        metrics=SimpleNamespace(
            set_predicted=lambda *a: None,
            stage_failures=SimpleNamespace(labels=lambda **k: counted),
        ),
    )
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t"}]}}}
    conds = st.set_condition([], st.REPLANNING, True, "Deleted", "b deleted", 1)
    step = Step(new_plan, {"a": 8, "c": 8}, conds, replanned=(old, {"b": "deleted"}))
    status = {"phase": "Running", "plan": {"stages": []}}
    got = asyncio.run(make_pods(ctx, job, {}, spec, status, step, {}))
    assert got["phase"] == st.PHASE_FAILED and got.get("plan") is None
    assert (st.condition(got, st.FAILED) or {})["reason"] == "StageFailed"
    assert "p-0 on a (Error)" in (st.condition(got, st.FAILED) or {})["message"]
    assert (st.condition(got, st.REPLANNING) or {})["status"] == "False"
    assert ("Warning", "StageFailed") in told
    assert deleted == ["p-1"]  # the others go; the failed pod stays for kubectl logs


def test_a_stage_failure_is_left_for_the_next_tick_where_the_job_was_edited_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage failed and the job's spec was edited (its priority, say) during the tick:
    the handler writes no status for a tick an edit overtook, so the failed pod, deleted,
    went uncounted in status.stageRestarts (a restart past spec.backoffLimit). Nothing is
    done now; the next tick sees the failed pod and counts it."""
    deleted: list[str] = []
    monkeypatch.setattr(kube, "delete_pods", lambda api, ns, names, forced: deleted.extend(names))
    told: list[tuple[str, str]] = []
    job = entry(paper_jobs()[2])
    plan = JobPlan(job.key[1], (Stage((0, 24), ("a",)), Stage((24, 48), ("b",))), 8)
    pods = [
        PodEntry("p-0", "a", "Failed", False, False, reason="Evicted"),
        PodEntry("p-1", "b", "Running", False, False),
    ]
    edited = [True]
    ctx: Any = SimpleNamespace(
        api=None,
        stopped=lambda: edited[0],
        pods={job.key: pods},
        event=lambda kind, reason, msg: told.append((kind, reason)),
        placer=SimpleNamespace(forget=lambda key: None),
        metrics=SimpleNamespace(
            set_predicted=lambda *a: None,
            stage_failures=SimpleNamespace(
                labels=lambda **k: SimpleNamespace(inc=lambda n=1: None)
            ),
        ),
    )
    spec = {"template": {"spec": {"containers": [{"name": "t"}]}}, "backoffLimit": 1}
    status = {"phase": "Running", "plan": {"stages": []}, "stageRestarts": 1}
    step = Step(plan, {"a": 8, "b": 8}, [])
    assert asyncio.run(make_pods(ctx, job, {}, spec, status, step, {})) == {}
    assert deleted == [] and told == []
    edited[0] = False  # the next tick: the failure is counted (past the limit of 1)
    got = asyncio.run(make_pods(ctx, job, {}, spec, status, step, {}))
    assert (st.condition(got, st.FAILED) or {})["reason"] == "BackoffLimitExceeded"
    assert deleted == ["p-1"] and ("Warning", "BackoffLimitExceeded") in told
