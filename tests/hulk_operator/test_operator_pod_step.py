"""A reconciliation's pod step (``pod_step.make_pods``), on a fake context: no cluster."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from placement_helpers import entry

from hulk_operator import kube, manifests
from hulk_operator import status as st
from hulk_operator.context import PodEntry
from hulk_operator.plan_step import Step
from hulk_operator.pod_step import make_pods
from hulk_operator.refused import run_on
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


def _finishing(
    monkeypatch: pytest.MonkeyPatch, phases: dict[tuple[int, int], str]
) -> tuple[Any, Any, list[str], list[tuple[str, str, str]], dict[tuple[int, int], str]]:
    """A fake context of a job on a plan of two stages (servers a; b and c) whose stage pods,
    by (stage, replica), are in ``phases``: what the pod step deletes and tells goes to the
    lists returned, beside the pods' names."""
    deleted: list[str] = []
    monkeypatch.setattr(kube, "delete_pods", lambda api, ns, names, forced: deleted.extend(names))
    told: list[tuple[str, str, str]] = []
    counted = SimpleNamespace(inc=lambda n=1: None)
    job = entry(paper_jobs()[2], phase=st.RUNNING)
    nodes = {(0, 0): "a", (1, 0): "b", (1, 1): "c"}
    names = {k: f"{manifests.hostname(job.key[1], *k)}-abcde" for k in nodes}
    pods = [
        PodEntry(names[k], nodes[k], phase, False, False, reason="Evicted" * (phase == "Failed"))
        for k, phase in phases.items()
    ]
    ctx: Any = SimpleNamespace(
        api=None,
        stopped=lambda: False,
        pods={job.key: pods},
        event=lambda kind, reason, msg: told.append((kind, reason, msg)),
        placer=SimpleNamespace(forget=lambda key: None),
        recent={},
        metrics=SimpleNamespace(
            set_predicted=lambda *a: None,
            set_free_speedup=lambda *a: None,
            stage_failures=SimpleNamespace(labels=lambda **k: counted),
        ),
    )
    return ctx, job, deleted, told, names


def _finishing_step() -> Step:
    plan = JobPlan("j", (Stage((0, 24), ("a",)), Stage((24, 48), ("b", "c"))), 8)
    return Step(plan, {"a": 8, "b": 8, "c": 8}, st.set_condition([], st.READY, True, "x", "y", 1))


def test_a_stage_that_fails_after_rank_0_finished_ends_the_job_succeeded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 0 (stage 0, replica 0) exited 0, then another stage pod was evicted: training
    had ended (ranks exit together, after the last step's collectives). Before, the evicted
    pod was deleted and made again alone (StageRestarted): it waited at the rendezvous for
    peers that had exited, for good, holding its server's GPUs, and the job never ended.
    Now it is not restarted: the job is Succeeded, as a PyTorchJob whose master succeeded,
    a pod still running is deleted (its server is released), the ended pods stay for
    their logs."""
    ctx, job, deleted, told, names = _finishing(
        monkeypatch, {(0, 0): "Succeeded", (1, 0): "Failed", (1, 1): "Running"}
    )
    status = {"phase": "Running", "plan": {"stages": []}, "stageRestarts": 0}
    got = asyncio.run(make_pods(ctx, job, {}, {"template": {}}, status, _finishing_step(), {}))
    assert got["phase"] == st.SUCCEEDED and "plan" not in got  # (its plan kept for the record)
    complete = st.condition(got, st.COMPLETE) or {}
    assert (complete.get("status"), complete.get("reason")) == ("True", "Succeeded"), complete
    assert f"{names[1, 0]} on b (Evicted)" in complete["message"]
    assert names[0, 0] in complete["message"]
    assert (st.condition(got, st.READY) or {})["reason"] == "Succeeded"
    assert (st.condition(got, st.FAILED) or {})["status"] == "False"
    assert "stageRestarts" not in got and not any(r == "StageRestarted" for _, r, _ in told)
    ((kind, reason, msg),) = told
    assert (kind, reason) == ("Normal", "Succeeded") and names[1, 0] in msg
    assert deleted == [names[1, 1]]  # the one still running; the ended ones stay for logs


def test_a_stage_that_fails_after_another_finished_fails_the_job_unless_rank_0_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another stage exited 0, then one was evicted while rank 0 still ran: the run had
    ended, so the evicted pod is not made again alone (before: StageRestarted, and it
    waited for its peers for good); rank 0, which writes the run's last record, did not
    finish, so the job fails, naming the pods, its servers released and the ended pods
    kept for their logs."""
    ctx, job, deleted, told, names = _finishing(
        monkeypatch, {(0, 0): "Running", (1, 0): "Succeeded", (1, 1): "Failed"}
    )
    spec = {"template": {}, "backoffLimit": 6}
    status = {"phase": "Running", "plan": {"stages": []}, "stageRestarts": 0}
    got = asyncio.run(make_pods(ctx, job, {}, spec, status, _finishing_step(), {}))
    assert got["phase"] == st.PHASE_FAILED and got.get("plan") is None
    failed = st.condition(got, st.FAILED) or {}
    assert (failed.get("status"), failed.get("reason")) == ("True", "StageFailedAfterSuccess")
    assert f"{names[1, 1]} on c (Evicted)" in failed["message"]
    assert names[1, 0] in failed["message"] and names[0, 0] in failed["message"]
    assert (st.condition(got, st.READY) or {})["reason"] == "StageFailedAfterSuccess"
    assert json.loads(got["failedSpec"]) == spec  # (an edit kopf never saw is told from it)
    assert "stageRestarts" not in got
    assert [r for _, r, _ in told] == ["StageFailedAfterSuccess"]
    assert deleted == [names[0, 0]]  # rank 0, which would wait for its peer; not the ended


def test_a_refused_edits_job_whose_stage_fails_after_rank_0_finished_is_succeeded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same, for a job whose latest edit is refused (it runs on as planned,
    ``refused.run_on``): before, the evicted pod was made again alone there too."""
    ctx, job, deleted, told, names = _finishing(
        monkeypatch, {(0, 0): "Succeeded", (1, 0): "Failed", (1, 1): "Succeeded"}
    )
    status = {"phase": "Running", "plan": {"stages": []}, "stageRestarts": 0}
    body = {"spec": {"backoffLimit": 6}}
    got = asyncio.run(run_on(ctx, job, body, status, [], 1))
    assert got["phase"] == st.SUCCEEDED and "stageRestarts" not in got
    ((kind, reason, msg),) = told
    assert (kind, reason) == ("Normal", "Succeeded") and names[1, 0] in msg and deleted == []
