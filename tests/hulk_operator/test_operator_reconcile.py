"""Pure helpers of the reconcile loop; a re-plan's outcome, the grace of the pods it
deletes and the cut links it tells of, with the operator on the sandbox (its handlers run
end to end in test_operator_e2e too)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hjob_helpers import (
    CONFIG,
    Kube,
    cleanup_jobs,
    manifest,
    paper_manifests,
    plan_nodes,
    token_kubeconfig,
    wait,
)
from kubernetes import client, watch

from hulk_operator import kube as kube_api
from hulk_operator import recovery
from hulk_operator import status as st
from hulk_operator.reconcile import same_cause
from hulk_operator.runner import OperatorThread
from hulk_planner.api import plan
from hulk_planner.cost import communicating_pairs
from hulk_planner.datasets import paper_cluster
from hulk_probe.replay import forget_latencies, publish_latencies
from hulk_sandbox.nodes import FAKE_ANNOTATION, is_ready

LEFT = (
    "namespace ml's ResourceQuota {q} leaves {n} nvidia.com/gpu (requests.nvidia.com/gpu); "
    "one stage pod needs 4 nvidia.com/gpu (requests.nvidia.com/gpu): raise the quota"
)
BERT = paper_manifests()[3]  # bert-large: a stage pod on each of a few servers
HOLD = {"metadata": {"finalizers": ["hulk.dev/test-hold"]}}  # Terminating until lifted


def test_a_reason_whose_figures_alone_moved_is_the_same_cause() -> None:
    assert same_cause(LEFT.format(q="gpus", n=3), LEFT.format(q="gpus", n=1.5))
    assert not same_cause(LEFT.format(q="be-pods", n=0), LEFT.format(q="high-gpus", n=0))
    assert not same_cause("", LEFT.format(q="gpus", n=3))
    # digits within a name are not figures; amounts with units are
    assert not same_cause(LEFT.format(q="gpu-q1", n=3), LEFT.format(q="gpu-q2", n=3))
    assert same_cause("leaves 1.5Gi (limits.memory)", "leaves -0.5Gi (limits.memory)")
    assert not same_cause("held by rome-44", "held by rome-45")
    # the jobs holding the servers: other jobs coming and going are no other cause (a review)
    held = "all 4 usable node(s) matching the job are held by other jobs ({})"
    assert same_cause(held.format("a holds 3, b 1"), held.format("b holds 2, c 1, other jobs 1"))
    assert same_cause(held.format("a holds 3"), held.format("jobs of other namespaces hold 4"))
    assert not same_cause(held.format("a holds 3"), "fits nowhere: (a holds 3)")


def test_a_job_no_servers_could_ever_hold_is_told_apart_from_one_that_waits() -> None:
    """Planned's reason, which ``kubectl get hjob -o wide`` shows: ``FitsNowhere`` where no
    set of the servers it may use could hold it, ``Unschedulable`` where it waits (both
    read Unschedulable: a queue trial could not tell them apart)."""
    from placement_helpers import entry, nodes

    from hulk_operator.fit import too_big_for
    from hulk_operator.plan_step import unplaced_reason
    from hulk_planner.datasets import paper_jobs

    opt = entry(paper_jobs()[0], allowed_regions=("paris",))
    why = too_big_for(opt, nodes())
    assert why is not None and unplaced_reason(why) == "FitsNowhere", why
    waits = "all 4 usable node(s) matching the job are held by other jobs (a holds 4)"
    assert unplaced_reason(waits) == "Unschedulable"


def _set_ready(kube: Kube, node: str, ready: bool, since: datetime) -> None:
    """kwok keeps a node it manages Ready: without its annotation it lets the node go, and
    the Ready condition written here stays."""
    fake = "fake" if ready else None
    kube.core.patch_node(node, {"metadata": {"annotations": {FAKE_ANNOTATION: fake}}})
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"type": "Ready", "status": str(ready), "reason": "KubeletNotReady",
            "message": "by the test", "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp}  # fmt: skip
    kube.core.patch_node_status(node, {"status": {"conditions": [cond]}})


@pytest.mark.sandbox
def test_a_replan_that_gives_the_plan_back_unchanged_is_no_replan(
    sandbox: Any, kube: Kube, namespace: str
) -> None:
    """A NotReady server back by the time the re-plan reads the cluster: the planner keeps
    the plan as it is. Before, that was a Warning "Replanned ... 0 pod(s) replaced",
    counted as a re-plan (a user trial, restoring nodes after an outage). Here the re-plan
    waits while a planning round holds the placer (its planner held back by the test), and
    the server is Ready again by the time it reads the cluster."""
    shut, opened, held = threading.Event(), threading.Event(), threading.Event()
    planned: list[list[str]] = []

    def plan_fn(cluster: Any, jobs: Any, planner: str, **kwargs: Any) -> Any:
        planned.append([j.name for j in jobs])
        if shut.is_set():  # the next round waits for the test
            shut.clear()
            held.set()
            opened.wait(120)
        return plan(cluster, jobs, planner, **kwargs)

    grace = 2.0
    config = replace(CONFIG, not_ready_grace_s=grace)
    op = OperatorThread(
        sandbox.kubeconfig, namespaces=[namespace], config=config, extra_memo={"plan_fn": plan_fn}
    ).start()
    started = time.time()
    name = BERT["metadata"]["name"]
    victim = ""
    try:
        with cleanup_jobs(kube):
            kube.apply(BERT)
            wait("bert Running", lambda: kube.phase(name) == "Running", 60)
            before = {p.metadata.name: p.metadata.uid for p in kube.live_pods(name)}
            victim = plan_nodes(kube.job(name))[-1]
            time.sleep(max(0.0, started + grace - time.time()))  # (the operator ran its grace)
            shut.set()
            kube.apply(manifest("gate"))  # its round holds the placer until ``opened``
            wait("the round held", held.is_set, 30)
            long_ago = datetime.now(UTC) - timedelta(seconds=grace + 30)
            _set_ready(kube, victim, False, long_ago)
            wait("the re-plan waiting", lambda: op.memo.placer.replans_waiting > 0, 30)
            _set_ready(kube, victim, True, datetime.now(UTC))
            wait("the server Ready", lambda: is_ready(kube.core.read_node(victim)), 60)
            time.sleep(2)  # (the operator's node index follows its watch)
            since = len(planned)
            opened.set()
            wait("the re-plan planned", lambda: any(name in n for n in planned[since:]), 60)
            time.sleep(2 * config.reconcile_interval_s)  # (its outcome written by now)
            assert not kube.events("Replanned"), [e.message for e in kube.events("Replanned")]
            assert not (kube.job(name)["status"].get("replans") or 0)
            assert {p.metadata.name: p.metadata.uid for p in kube.live_pods(name)} == before
            counted = op.memo.metrics.registry.get_sample_value(
                "hulk_replans_total", {"reason": "NotReady"}
            )
            assert not counted, counted
    finally:
        opened.set()
        op.stop()
        if victim and not is_ready(kube.core.read_node(victim)):
            _set_ready(kube, victim, True, datetime.now(UTC))


@pytest.mark.sandbox
def test_only_a_deleted_servers_stage_pods_are_deleted_without_their_grace(
    sandbox: Any, kube: Kube, cordon_operator: Any
) -> None:
    """A re-plan for a cordoned server (``cordon_moves`` on) and a deleted one: the deleted
    server's pod goes with grace period 0 (its kubelet is gone), the cordoned one's with
    its grace, so the trainer there may checkpoint. Before, every lost server's pods were
    deleted with grace 0 (a review: a cordon killed healthy trainers at once)."""
    name = "wide"
    kube.apply(manifest(name, model={"preset": "t5-11b"}))  # a stage on each of 5 servers
    wait("Running", lambda: kube.phase(name) == "Running", 60)
    cordoned, deleted = plan_nodes(kube.job(name))[-2:]
    pods = {p.spec.node_name: p for p in kube.live_pods(name)}
    held = ""
    for node in (cordoned, deleted):  # each stays Terminating, its first deletion seen
        held = kube.core.patch_namespaced_pod(
            pods[node].metadata.name, kube.ns, HOLD
        ).metadata.resource_version
    names = {pods[n].metadata.name: n for n in (cordoned, deleted)}
    grace: dict[str, int] = {}
    try:
        kube.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
        sandbox.delete_node(deleted)
        for e in watch.Watch().stream(
            kube.core.list_namespaced_pod, kube.ns, timeout_seconds=60, resource_version=held
        ):
            meta = e["object"].metadata
            if meta.name in names and meta.deletion_timestamp is not None:
                grace.setdefault(names[meta.name], meta.deletion_grace_period_seconds)
                if len(grace) == 2:
                    break
        assert grace == {
            cordoned: pods[cordoned].spec.termination_grace_period_seconds,
            deleted: 0,
        }, grace
        assert grace[cordoned] > 0
    finally:
        for p in names:
            try:
                kube.core.patch_namespaced_pod(p, kube.ns, {"metadata": {"finalizers": None}})
            except client.ApiException:
                pass
        kube.core.patch_node(cordoned, {"spec": {"unschedulable": None}})
        sandbox.add_node(paper_cluster().server(deleted))


def test_only_servers_whose_node_is_gone_have_their_pods_forced_out() -> None:
    assert recovery.forced(
        {"a": recovery.REMADE, "b": "NotReady", "c": "Tainted x=y:NoExecute"}
    ) == {"a"}
    assert recovery.forced({"b": "Cordoned", "c": "Deleted"}) == {"c"}


@pytest.mark.sandbox
def test_cut_links_are_told_once_not_restored_when_moved_off_and_read_errors_pass(
    sandbox: Any, kube: Kube, namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed NodeLatency read tells nothing and raises nothing (before, it cut the
    tick's recovery short: a review), and a job moved off a pair still cut is told of no
    restored links (before, LinksRestored was posted then). The operator runs as a
    ServiceAccount whose right to list NodeLatency objects the test takes away for a while:
    the API server refuses the listing (403). Told once, and restored when measured again:
    test_operator_latency's test_a_running_job_is_told_when_its_stages_cannot_reach_each_other."""
    tokyo = [f"tokyo-{i}" for i in range(25, 30)]
    near: dict[str, dict[str, float | None]] = {a: {b: 0.5 for b in tokyo if b != a} for a in tokyo}
    rbac = client.RbacAuthorizationV1Api(kube.api)
    who = "operator"
    role = f"hulk-test-{kube.ns}"
    everything = {  # all the operator calls, NodeLatency objects aside (``latencies``)
        "apiGroups": ["", "events.k8s.io", "scheduling.k8s.io", "apiextensions.k8s.io",
                      "kopf.dev", "coordination.k8s.io"],
        "resources": ["*"], "verbs": ["*"],
    }  # fmt: skip
    jobs = {"apiGroups": ["hulk.dev"], "verbs": ["*"], "resources": [
        "hulktrainingjobs", "hulktrainingjobs/status", "hulktrainingjobs/finalizers",
    ]}  # fmt: skip
    latencies = {"apiGroups": ["hulk.dev"], "resources": ["nodelatencies"], "verbs": ["list"]}

    def rules(*given: dict[str, Any]) -> None:
        rbac.replace_cluster_role(role, {"metadata": {"name": role}, "rules": list(given)})

    rbac.create_cluster_role({"metadata": {"name": role}, "rules": [everything, jobs, latencies]})
    a = ""
    op: OperatorThread | None = None
    mine: Any = None
    try:
        rbac.create_cluster_role_binding({
            "metadata": {"name": role},
            "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": kube.ns}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
        })  # fmt: skip
        path = token_kubeconfig(sandbox, kube, who, tmp_path / "operator")
        mine = kube_api.make_client(str(path))

        def may_list() -> bool:
            try:
                client.CustomObjectsApi(mine).list_cluster_custom_object(
                    "hulk.dev", "v1alpha1", "nodelatencies"
                )
                return True
            except client.ApiException as exc:
                assert exc.status == 403, exc
                return False

        wait("its rights in force", may_list, 30)
        # (cordon_moves: the job is moved off the cut pair below by a cordon)
        config = replace(CONFIG, cordon_moves=True)
        op = OperatorThread(str(path), namespaces=[namespace], config=config).start()
        with cleanup_jobs(kube):
            publish_latencies(kube.api, near)
            kube.apply(manifest("linked", allowedRegions=["tokyo"]))
            wait("placed", lambda: len(plan_nodes(kube.job("linked"))) >= 2, 60)
            wait("Running", lambda: kube.phase("linked") == "Running", 60)
            jp = st.job_plan_from_status("linked", kube.job("linked")["status"])
            assert jp is not None
            a, b = communicating_pairs(jp)[0]
            cut = {x: dict(row) for x, row in near.items()}
            cut[a][b] = cut[b][a] = None
            publish_latencies(kube.api, cut)
            wait("told", lambda: kube.events("LinkUnreachable"), 40)
            # its right to list NodeLatency objects taken away: the API server answers 403
            rules(everything, jobs)
            wait("the right taken away", lambda: not may_list(), 30)
            with caplog.at_level(logging.DEBUG, logger="hulk_operator.disruptions"):

                def not_read() -> bool:
                    return any("NodeLatency not read" in r.getMessage() for r in caplog.records)

                wait("a refused read", not_read, 60)
                gone = kube.live_pods("linked")[0]
                kube.core.delete_namespaced_pod(gone.metadata.name, kube.ns, grace_period_seconds=0)

                def remade() -> bool:  # (the tick's recovery goes on)
                    live = kube.live_pods("linked")
                    uids = {p.metadata.uid for p in live}
                    return gone.metadata.uid not in uids and len(live) == len(jp.nodes)

                wait("the stage pod made again meanwhile", remade, 60)
            assert not kube.events("LinksRestored")  # (a refused read is no measurement)
            errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert not errors, errors
            rules(everything, jobs, latencies)
            wait("the right given back", may_list, 30)
            # moved off the pair, still cut: nothing restored, and the told pair forgotten
            kube.core.patch_node(a, {"spec": {"unschedulable": True}})

            def moved() -> bool:
                job = kube.job("linked")
                return job["status"].get("phase") == "Running" and a not in plan_nodes(job)

            wait("moved off", moved, 60)
            key = (kube.ns, "linked")
            told: dict[Any, Any] = op.memo.disruption.setdefault("cut_links", {})
            wait("the told pair forgotten", lambda: key not in told, 30)
            assert not kube.events("LinksRestored")
            assert len(kube.events("LinkUnreachable")) == 1
    finally:
        if op is not None:
            op.stop()
        if a:
            kube.core.patch_node(a, {"spec": {"unschedulable": None}})
        forget_latencies(kube.api, tokyo)
        if mine is not None:
            mine.close()
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(role)
            except client.ApiException:
                pass
