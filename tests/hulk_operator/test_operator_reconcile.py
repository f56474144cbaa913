"""Pure helpers of the reconcile loop, and a re-plan's outcome with the planner's result
given (its handlers run end to end in test_operator_e2e)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from placement_helpers import entry, nodes, not_ready

from hulk_operator import recovery
from hulk_operator import status as st
from hulk_operator.config import OperatorConfig
from hulk_operator.context import Context
from hulk_operator.decision import Decision
from hulk_operator.metrics import Metrics
from hulk_operator.reconcile import _check_plan, same_cause
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import JobPlan, Stage

LEFT = (
    "namespace ml's ResourceQuota {q} leaves {n} nvidia.com/gpu (requests.nvidia.com/gpu); "
    "one stage pod needs 4 nvidia.com/gpu (requests.nvidia.com/gpu): raise the quota"
)


def test_a_reason_whose_figures_alone_moved_is_the_same_cause() -> None:
    assert same_cause(LEFT.format(q="gpus", n=3), LEFT.format(q="gpus", n=1.5))
    assert not same_cause(LEFT.format(q="be-pods", n=0), LEFT.format(q="high-gpus", n=0))
    assert not same_cause("", LEFT.format(q="gpus", n=3))
    # digits within a name are not figures; amounts with units are
    assert not same_cause(LEFT.format(q="gpu-q1", n=3), LEFT.format(q="gpu-q2", n=3))
    assert same_cause("leaves 1.5Gi (limits.memory)", "leaves -0.5Gi (limits.memory)")
    assert not same_cause("held by rome-44", "held by rome-45")


def test_a_replan_that_gives_the_plan_back_unchanged_is_no_replan() -> None:
    """A NotReady server back by the time the re-plan reads the cluster: the planner keeps
    the plan as it is. Before, that was a Warning "Replanned ... 0 pod(s) replaced",
    counted as a re-plan (a user trial, restoring nodes after an outage)."""
    cluster = paper_cluster()
    job = paper_jobs()[3]
    servers = [s.name for s in cluster.servers if s.region == "Paris"][:2]
    plan = JobPlan(job.name, (Stage((0, 12), (servers[0],)), Stage((12, 24), (servers[1],))), 8)
    e = replace(entry(job), plan_nodes=frozenset(servers))
    status = {"plan": st.plan_status(plan, cluster, "hulk"), "replans": 0}
    view = nodes()
    view[servers[1]] = not_ready(servers[1], "2026-01-01T00:00:00Z")  # long since
    events: list[tuple[str, str, str]] = []

    def run(back: JobPlan) -> tuple[Any, dict[str, Any]]:
        async def replan(*_: Any) -> Decision:
            return Decision(e.key, back, cluster, "", "hulk", base=plan)

        placer = SimpleNamespace(
            pending_write=lambda *_: None, replan=replan, reserved={e.key: "made"}
        )
        metrics = Metrics()
        ctx = Context(
            api=None, config=OperatorConfig(), placer=placer,  # type: ignore[arg-type]
            metrics=metrics, nodes=view, pods={}, snapshot=None,  # type: ignore[arg-type]
            event=lambda *a: events.append(a), recent={},
        )  # fmt: skip
        new: dict[str, Any] = {}
        step = asyncio.run(_check_plan(ctx, e, {}, status, plan, [], new))
        replans = metrics.registry.get_sample_value("hulk_replans_total", {"reason": "NotReady"})
        return step, {"new": new, "replans": replans, "reserved": placer.reserved}

    step, seen = run(plan)  # the planner gives the same plan back
    assert step.plan == plan and step.replanned is None
    assert seen["replans"] == 0 and not seen["new"] and not seen["reserved"] and not events
    other = [s.name for s in cluster.servers if s.region == "Paris"][2]
    moved = JobPlan(job.name, (plan.stages[0], Stage((12, 24), (other,))), 8)
    step, seen = run(moved)  # a real re-plan is one, as before
    assert step.plan == moved and step.replanned == (plan, {servers[1]: "NotReady"})
    assert seen["replans"] == 1 and seen["new"]["replans"] == 1


def test_only_a_deleted_servers_stage_pods_are_deleted_without_their_grace() -> None:
    """A re-plan for a cordoned server and a deleted one: the deleted server's pod goes
    with grace period 0 (its kubelet is gone), the cordoned one's with its grace, so the
    trainer there may checkpoint. Before, every lost server's pods were deleted with grace
    0 (a review: a cordon killed healthy trainers at once)."""
    cluster = paper_cluster()
    job = paper_jobs()[3]
    a, b, c, d = [s.name for s in cluster.servers if s.region == "Paris"][:4]
    plan = JobPlan(
        job.name, tuple(Stage((8 * i, 8 * i + 8), (n,)) for i, n in enumerate((a, b, c))), 8
    )
    e = replace(entry(job), plan_nodes=frozenset(plan.nodes))
    status = {"plan": st.plan_status(plan, cluster, "hulk"), "replans": 0}
    view = nodes()
    view[b] = replace(view[b], unschedulable=True)
    del view[c]
    moved = JobPlan(job.name, (plan.stages[0], Stage((8, 24), (d,))), 8)

    async def replan(*_: Any) -> Decision:
        return Decision(e.key, moved, cluster, "", "hulk", base=plan)

    placer = SimpleNamespace(pending_write=lambda *_: None, replan=replan, reserved={})
    ctx = Context(
        api=None, config=OperatorConfig(), placer=placer,  # type: ignore[arg-type]
        metrics=Metrics(), nodes=view, pods={}, snapshot=None,  # type: ignore[arg-type]
        event=lambda *a: None, recent={},
    )  # fmt: skip
    step = asyncio.run(_check_plan(ctx, e, {}, status, plan, [], {}))
    assert step is not None and step.replanned == (plan, {b: "Cordoned", c: "Deleted"})
    assert step.force == {c}
    assert recovery.forced({a: recovery.REMADE, b: "NotReady", c: "Tainted x=y:NoExecute"}) == {a}


def test_cut_links_are_told_once_restored_only_when_measured_again_and_errors_pass() -> None:
    """LinkUnreachable once per set of cut pairs; LinksRestored when the pairs are reached
    again, not when the job moved off them (before, it was posted then too), and a failed
    NodeLatency read tells nothing and raises nothing (before, it cut the tick's recovery
    short: a review)."""
    from urllib3.exceptions import ProtocolError

    from hulk_operator.reconcile import _tell_cut_links

    plan = JobPlan("j", (Stage((0, 12), ("a",)), Stage((12, 24), ("b",))), 8)
    moved = JobPlan("j", (Stage((0, 12), ("c",)), Stage((12, 24), ("d",))), 8)
    events: list[tuple[str, str, str]] = []
    said: dict[str, Any] = {}
    cut: list[Any] = [frozenset({frozenset({"a", "b"})})]

    async def unreachable() -> frozenset[frozenset[str]]:
        if isinstance(cut[0], Exception):
            raise cut[0]
        return cut[0]  # type: ignore[no-any-return]

    ctx = Context(
        api=None, config=OperatorConfig(), placer=None, metrics=Metrics(),  # type: ignore[arg-type]
        nodes={}, pods={}, snapshot=None, event=lambda *a: events.append(a),  # type: ignore[arg-type]
        recent={}, unreachable=unreachable, disruption=said,
    )  # fmt: skip

    def tell(p: JobPlan) -> list[str]:
        events.clear()
        asyncio.run(_tell_cut_links(ctx, ("ml", "j"), p))
        return [reason for _, reason, _ in events]

    assert tell(plan) == ["LinkUnreachable"]
    assert tell(plan) == []  # once
    cut[0] = ProtocolError("connection reset")
    assert tell(plan) == []  # (no error out of it)
    cut[0] = frozenset({frozenset({"a", "b"})})
    assert tell(moved) == []  # moved off a pair still cut: nothing restored
    assert tell(plan) == ["LinkUnreachable"]  # (back on it: told again)
    cut[0] = frozenset()
    assert tell(plan) == ["LinksRestored"]
    assert tell(plan) == [] and "j" not in str(said.get("cut_links"))
