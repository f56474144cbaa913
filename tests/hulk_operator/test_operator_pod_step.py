"""A reconciliation's pod step (``pod_step.make_pods``), after its plan step
(``plan_step.check_plan``) where it matters, on a fake context: no cluster."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from placement_helpers import entry, nodes

from hulk_operator import kube, manifests
from hulk_operator import status as st
from hulk_operator.config import OperatorConfig
from hulk_operator.context import Context, PodEntry
from hulk_operator.entries import pod_source, spec_hashes
from hulk_operator.metrics import Metrics
from hulk_operator.plan_step import Step, check_plan
from hulk_operator.pod_step import make_pods
from hulk_operator.refused import run_on
from hulk_operator.stage_pods import desired_pods, pod_host
from hulk_planner.datasets import paper_cluster, paper_jobs
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
        nodes=dict.fromkeys("abcd"),
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
        nodes=dict.fromkeys("abcd"),
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
        nodes=dict.fromkeys("abcd"),
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


# a job's spec whose stage pods can be built (``_tick``)
SPEC: dict[str, Any] = {
    "model": {"preset": "gpt2-xl"},
    "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}},
}


def _tick(
    monkeypatch: pytest.MonkeyPatch,
    phases: dict[tuple[int, int], str],
    recorded: tuple[tuple[int, int], ...] = (),
    lost: tuple[tuple[int, int], ...] = (),
    refused: bool = False,
) -> tuple[dict[str, Any], SimpleNamespace, dict[tuple[int, int], str], dict[tuple[int, int], str]]:
    """One reconciliation tick (``check_plan``, then ``make_pods``; with ``refused``, that of
    a job whose latest edit is refused: ``refused.run_on``) of a running job on a plan of
    two stages (servers beijing-0; beijing-1 and beijing-2) whose stage pods, by (stage,
    replica), are in ``phases`` (a slot not there: its pod is gone), ``recorded`` the slots
    ``status.succeededPods`` names, ``lost`` those whose server's Node is deleted. Returns
    the status fields to write, what the tick did (pods made and deleted, Events, re-plans
    asked for), the pods' names and their servers by slot."""
    did = SimpleNamespace(made=[], deleted=[], told=[], replans=[])
    monkeypatch.setattr(kube, "delete_pods", lambda api, ns, names, *a: did.deleted.extend(names))
    monkeypatch.setattr(kube, "create_pods", lambda api, pods, *a: [
        did.made.append(p["metadata"]["name"]) or p["metadata"]["name"] for p in pods
    ])  # fmt: skip
    monkeypatch.setattr(kube, "ensure_service", lambda api, svc: False)
    monkeypatch.setattr(kube, "ungate", lambda api, ns, names: None)
    monkeypatch.setattr(kube, "orphaned_stage_pods", lambda *a: [])
    job = entry(paper_jobs()[2], phase=st.RUNNING)
    servers = ("beijing-0", "beijing-1", "beijing-2")
    plan = JobPlan(job.key[1], (Stage((0, 24), servers[:1]), Stage((24, 48), servers[1:])), 8)
    status: dict[str, Any] = {
        "phase": "Running",
        "plan": {
            **st.plan_status(plan, paper_cluster(), "hulk"),
            "specHashes": spec_hashes(SPEC),
            "podTemplate": pod_source(SPEC),
        },
        "stageRestarts": 0,
    }
    on = {(s.stage, s.replica): s.node for s in manifests.slots(plan)}
    built = desired_pods(job, SPEC, plan, st.plan_gpus(status))
    names = {
        k: next(n for n in built if pod_host(n) == manifests.hostname(job.key[1], *k)) for k in on
    }
    if recorded:
        status[st.SUCCEEDED_PODS] = sorted(names[k] for k in recorded)
    pods = [PodEntry(names[k], on[k], phase, False, False) for k, phase in phases.items()]

    async def replan(job: Any, *a: Any) -> None:  # (None: the plan stands this tick)
        did.replans.append(job.key)

    async def no_snapshot() -> Any:
        raise AssertionError("no snapshot is read")

    placer = SimpleNamespace(
        pending_write=lambda key, plan: None,
        replan=replan,
        forget=lambda key: None,
        refusals=SimpleNamespace(pods_admitted=lambda key: None),
        orphans_told={},
    )
    ctx = Context(
        api=None,
        config=OperatorConfig(),
        placer=placer,  # type: ignore[arg-type]
        metrics=Metrics(),
        nodes={n: i for n, i in nodes().items() if n not in {on[k] for k in lost}},
        pods={job.key: pods},
        snapshot=no_snapshot,
        event=lambda *ev: did.told.append(ev),
        recent={},
    )
    conds = st.set_condition([], st.READY, True, "StagesFinishing", "finishing", 1)

    async def tick() -> dict[str, Any]:
        if refused:
            meta = {"name": job.key[1], "namespace": job.key[0], "uid": job.uid}
            kind = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob"}
            body = {**kind, "metadata": meta, "spec": {**SPEC, "priority": "x"}}
            return await run_on(ctx, job, body, status, conds, 1)
        new: dict[str, Any] = {}
        step = await check_plan(ctx, job, SPEC, status, plan, conds, new)
        assert step is not None
        return await make_pods(ctx, job, {}, SPEC, status, step, new)

    return asyncio.run(tick()), did, names, on


def test_a_server_lost_while_the_stages_finish_is_not_replanned_rank_0_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage pod exited 0, then a server of the job was deleted under a stage pod still
    running: before, the job was re-planned and the lost stage made again alone on another
    server, to wait at the rendezvous for peers that had exited, for good. Now nothing is
    re-planned or made: the lost stage ended without exiting 0 as far as the operator can
    tell, as a failed one, so rank 0 decides at once. Rank 0 exited 0: Succeeded."""
    got, did, names, on = _tick(
        monkeypatch, {(0, 0): "Succeeded", (1, 0): "Running", (1, 1): "Running"}, lost=((1, 0),)
    )
    assert did.replans == [] and did.made == [] and "replans" not in got
    assert got["phase"] == st.SUCCEEDED and "plan" not in got  # (its plan kept for the record)
    complete = st.condition(got, st.COMPLETE) or {}
    assert complete.get("status") == "True", complete
    assert f"stage(s) gone: {names[1, 0]} on {on[1, 0]} (Deleted)" in complete["message"]
    assert f"rank 0 ({names[0, 0]}) exited 0, so the job succeeded" in complete["message"]
    assert sorted(did.deleted) == sorted([names[1, 0], names[1, 1]])  # (those still running)
    assert got[st.SUCCEEDED_PODS] == [names[0, 0]]


def test_rank_0s_server_lost_while_the_stages_finish_fails_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same where the lost server held rank 0, still running: it never exited 0, so the
    job fails (before: re-planned, rank 0 made again alone), the pods still running go."""
    got, did, names, _ = _tick(
        monkeypatch, {(0, 0): "Running", (1, 0): "Succeeded", (1, 1): "Running"}, lost=((0, 0),)
    )
    assert did.replans == [] and did.made == []
    assert got["phase"] == st.PHASE_FAILED and got.get("plan") is None
    failed = st.condition(got, st.FAILED) or {}
    assert (failed.get("status"), failed.get("reason")) == ("True", "StageFailedAfterSuccess")
    assert f"after stage pod(s) {names[1, 0]} exited 0" in failed["message"]
    assert f"rank 0 ({names[0, 0]}) is Running, not exited 0" in failed["message"]
    assert sorted(did.deleted) == sorted([names[0, 0], names[1, 1]])
    assert [r for _, r, _ in did.told] == ["StageFailedAfterSuccess"]


def test_a_stage_pod_that_exited_0_is_recorded_and_not_made_again_once_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage pod seen exited 0 is recorded (``status.succeededPods``); deleted since (by
    hand, or with its node: an autoscaler removes a node left idle), it was made again
    alone from the plan, and waited at the rendezvous for peers that had exited, for good.
    Now it is not: it counts as exited 0, the job Running while the others exit and
    Succeeded once they have, as if it were there."""
    got, did, names, _ = _tick(
        monkeypatch, {(0, 0): "Running", (1, 0): "Succeeded", (1, 1): "Running"}
    )
    assert got[st.SUCCEEDED_PODS] == [names[1, 0]]  # seen: recorded
    got, did, names, _ = _tick(
        monkeypatch, {(0, 0): "Running", (1, 1): "Running"}, recorded=((1, 0),)
    )
    assert did.made == [] and did.deleted == [] and did.told == []
    assert got["phase"] == st.RUNNING and st.SUCCEEDED_PODS not in got  # (as it was)
    ready = st.condition(got, st.READY) or {}
    assert (ready.get("status"), ready.get("reason")) == ("True", "StagesFinishing"), ready
    assert ready["message"] == "2/3 stage pods running, 1 finished"
    got, did, names, _ = _tick(
        monkeypatch, {(0, 0): "Succeeded", (1, 1): "Succeeded"}, recorded=((1, 0),)
    )
    assert did.made == [] and got["phase"] == st.SUCCEEDED
    assert (st.condition(got, st.COMPLETE) or {}).get("message") == "every stage finished"
    assert got[st.SUCCEEDED_PODS] == sorted(names.values())
    # rank 0 exited 0 and was deleted, then a stage failed: rank 0 decides as if it were
    # there (before: "rank 0's pod is gone", Failed)
    got, did, names, _ = _tick(
        monkeypatch, {(1, 0): "Succeeded", (1, 1): "Failed"}, recorded=((0, 0),)
    )
    assert got["phase"] == st.SUCCEEDED and did.made == []
    assert f"rank 0 ({names[0, 0]}) exited 0" in (st.condition(got, st.COMPLETE) or {})["message"]


def test_a_deleted_stage_pod_never_seen_to_exit_0_ends_the_finishing_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage pod gone while others have exited 0, not seen to exit 0 itself (deleted
    while it ran, or exited and deleted between two looks: the operator cannot tell): as a
    failed one, not made again (before: made again alone), and rank 0, still running,
    decides: the job fails."""
    got, did, names, _ = _tick(
        monkeypatch, {(0, 0): "Running", (1, 0): "Succeeded"}, recorded=((1, 0),)
    )
    assert did.made == [] and did.replans == [] and got["phase"] == st.PHASE_FAILED
    failed = st.condition(got, st.FAILED) or {}
    host = manifests.hostname(paper_jobs()[2].name, 1, 1)
    assert f"stage(s) gone: {host} (its pod deleted)" in failed["message"]
    assert did.deleted == [names[0, 0]]


def test_a_refused_edits_job_does_not_make_a_stage_pod_that_exited_0_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a job whose latest edit is refused (``refused.run_on``: its missing
    pods made again from the spec its plan was made for): before, the stage pod that
    exited 0 and was deleted was made again alone; and a job whose stage pods all exited
    0 stayed Running, StagesMissing, for good. Now it ends as any job does."""
    got, did, _, _ = _tick(
        monkeypatch, {(0, 0): "Running", (1, 1): "Running"}, recorded=((1, 0),), refused=True
    )
    assert did.made == [] and got["phase"] == st.RUNNING
    assert (st.condition(got, st.READY) or {}).get("reason") == "StagesFinishing"
    got, did, _, _ = _tick(
        monkeypatch,
        {(0, 0): "Succeeded", (1, 0): "Succeeded", (1, 1): "Succeeded"},
        refused=True,
    )
    assert did.made == [] and got["phase"] == st.SUCCEEDED


@pytest.mark.parametrize("after_deletes", [True, False], ids=["after-deletes", "alone"])
def test_a_quota_refusal_after_the_jobs_own_deletes_waits_a_try_before_it_is_told(
    monkeypatch: pytest.MonkeyPatch, after_deletes: bool
) -> None:
    """``make_pods`` with stage pods refused by a ResourceQuota: where the same sync had just
    deleted the job's own pods (``errors.quota_lag``: the quota still counts them) the job
    waits, Placing, with no Warning nor condition, and is tried again; a refusal alone is
    told (a ``PodsForbidden`` Warning, Ready False for it)."""
    from kubernetes.client.exceptions import ApiException

    from hulk_operator import pod_step
    from hulk_operator.errors import AFTER_DELETES, PODS_FORBIDDEN

    said = 'pods "p-1" is forbidden: exceeded quota: fewer, requested: pods=1, used: pods=4'

    async def refuse(*_: Any, **__: Any) -> Any:
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"kind": "Status", "message": said, "code": 403})
        if after_deletes:
            setattr(exc, AFTER_DELETES, True)
        raise exc

    monkeypatch.setattr(pod_step, "desired_pods", lambda *a: {"p-1": {}})
    monkeypatch.setattr(pod_step, "sync_pods", refuse)
    told: list[tuple[str, str]] = []
    job = entry(paper_jobs()[3])
    plan = JobPlan(job.key[1], (Stage((0, 24), ("a",)),), 8)
    ctx: Any = SimpleNamespace(
        api=None,
        nodes=dict.fromkeys("ab"),
        built_pods={},
        stopped=lambda: False,
        pods={job.key: []},
        config=OperatorConfig(),
        event=lambda kind, reason, msg: told.append((kind, reason)),
        placer=SimpleNamespace(refusals=SimpleNamespace(pods_refused=lambda *a: 0.0)),
    )
    status = {"phase": st.PLACING, "plan": {"podTemplate": {}}}
    step = Step(plan, {"a": 8}, [], None)
    got = asyncio.run(make_pods(ctx, job, {}, {"template": {}}, status, step, {}))
    assert got["phase"] == st.PLACING
    ready = st.condition({"conditions": got["conditions"]}, st.READY)
    if after_deletes:  # tried again after the pause: nothing told yet
        assert told == [] and ready is None, (told, got)
    else:
        assert told == [("Warning", PODS_FORBIDDEN)]
        assert ready is not None and ready["reason"] == PODS_FORBIDDEN, got
        assert said in ready["message"]
