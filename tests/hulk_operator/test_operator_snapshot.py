"""What a round sees (``snapshot.Snapshot``): which servers a job may get, and why none is free."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from placement_helpers import applied, entry, nodes, snap

from hulk_operator import GPU, recovery
from hulk_operator.entries import JobEntry
from hulk_operator.inventory import (
    Resources,
    node_info,
)
from hulk_operator.manifests import DEFAULT_CONTAINER
from hulk_operator.quotas import QUOTA_GPU
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_sandbox.nodes import node_manifest


def refusal(s: Snapshot, e: JobEntry) -> str:
    """Why ``e`` gets no server in ``s`` (it must get none)."""
    assert s.free(e) == []
    d = plan_pending(s, plan)[e.key]
    assert d.job_plan is None
    return d.reason


def test_gpus_other_pods_request_are_taken_off_the_servers_offered() -> None:
    bert = entry(paper_jobs()[3], allowed_regions=("paris",))
    paris = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")
    whole = {n: nodes()[n].server.gpus for n in paris}  # type: ignore[union-attr]
    part, *rest = paris
    s = snap([bert])
    s.used = {part: Resources(1), **{n: Resources(whole[n]) for n in rest}}
    (offered,) = s.free(bert)
    assert offered.name == part and offered.server is not None
    assert offered.server.gpus == whole[part] - 1
    # a job's own servers too: other pods that hold GPUs there took them from its stage
    assert [(i.name, i.server.gpus) for i in s.free(bert, also=paris) if i.server] == [
        (part, whole[part] - 1)
    ]
    s.used = {n: Resources(whole[n] + 1) for n in paris}
    assert refusal(s, bert) == (
        f"every GPU of the {len(paris)} usable node(s) matching the job is requested by "
        "other pods (not Hulk's)"
    )


def test_a_waiting_stage_whose_room_other_pods_took_loses_its_server() -> None:
    from hulk_operator.context import PodEntry

    a, b, c, d = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")
    cpu = nodes()[b].allocatable.cpu

    def pod(node: str, waiting: bool = True) -> PodEntry:
        return PodEntry(f"p-{node}", node, "Pending", False, False, "", "no" if waiting else "")

    pods = [pod(a), pod(b), pod(c), pod(d, waiting=False)]
    used = {a: Resources(1), b: Resources(0, cpu, 0.0), c: Resources(0, 1.0, 0.0), d: Resources(8)}
    need = Resources(0, 1.0, 0.0)
    # a: GPUs held; b: no core left for the stage's one; c: room left (the scheduler waits
    # for something else); d: its pod is not waiting
    assert recovery.stuck_servers(pods, used, (), nodes(), need) == {
        a: "GPUsTaken",
        b: "ResourcesTaken",
    }
    assert recovery.stuck_servers(pods, used, (b,), nodes(), need) == {a: "GPUsTaken"}
    # a pod's own requests as admitted, where the index read them, not ``need`` (the
    # LimitRange defaults in force now): one made before a LimitRange asks no CPU, one made
    # under a LimitRange since deleted asks what it gave
    calm = replace(pod(b), requests=Resources())
    assert recovery.stuck_servers([calm], used, (), nodes(), need) == {}
    big = replace(pod(c), requests=Resources(0, nodes()[c].allocatable.cpu, 0.0))
    assert recovery.stuck_servers([big], used, (), nodes(), Resources()) == {c: "ResourcesTaken"}
    assert recovery.stuck_servers(pods, used, (), nodes(), Resources()) == {a: "GPUsTaken"}
    # with the plan's GPUs known: a stage planned on what other pods left waits for
    # something else (re-planning would give it the same server again, and again)
    whole = {n: nodes()[n].server.gpus for n in (a, b, c, d)}  # type: ignore[union-attr]
    left = {n: g - used[n].gpus for n, g in whole.items()}
    assert recovery.stuck_servers(pods, used, (), nodes(), need, left) == {b: "ResourcesTaken"}
    assert recovery.stuck_servers(pods, used, (), nodes(), need, whole) == {
        a: "GPUsTaken",
        b: "ResourcesTaken",
    }
    # the node lost GPUs (a failed one, a stopped device plugin): fewer than the stage asks
    fewer = {**nodes(), c: node_info(_with_gpus(c, whole[c] - 1))}
    assert recovery.stuck_servers(pods, {}, (), fewer, need, whole) == {c: "GPUsGone"}
    none = {**nodes(), c: node_info(_with_gpus(c, 0))}
    assert none[c].server is None
    assert recovery.stuck_servers(pods, {}, (), none, need, whole) == {c: "GPUsGone"}
    # a plain init container holds its own GPUs: planned on what other pods left, the
    # stage waits where fewer than it asks are free (before: waiting for something else)
    assert recovery.stuck_servers(pods, used, (), nodes(), need, left, (), whole[a]) == {
        a: "GPUsTaken",
        b: "ResourcesTaken",
        c: "GPUsGone",  # (6 GPUs: never the 12 it asks)
    }
    assert whole[c] < min(whole[a], whole[b])  # (paris: 12, 12, 6, 11)
    assert recovery.stuck_servers(pods, {}, (), nodes(), need, left, (), whole[c] + 1) == {
        c: "GPUsGone"
    }


def test_a_stage_made_again_on_a_server_tainted_noschedule_loses_it() -> None:
    """Before, a stage pod deleted, or replaced by a re-plan or an edit, was made again on
    its NoSchedule-tainted server and waited there for ever (a user trial)."""
    from hulk_operator.context import PodEntry
    from hulk_operator.inventory import Taint

    a, b, c = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")[:3]
    taint = Taint("maint", "yes", "NoSchedule")
    tainted = {**nodes(), a: replace(nodes()[a], taints=(taint,)), b: nodes()[b]}
    waiting = [PodEntry(f"p-{n}", n, "Pending", False, False, "", "no") for n in (a, b)]
    need = Resources(0, 1.0, 0.0)
    assert recovery.stuck_servers(waiting, {}, (), tainted, need) == {
        a: "Tainted maint=yes:NoSchedule"
    }
    tolerated = [{"key": "maint", "operator": "Exists", "effect": "NoSchedule"}]
    assert recovery.stuck_servers(waiting, {}, (), tainted, need, tolerations=tolerated) == {}
    running = [PodEntry(f"p-{a}", a, "Running", False, False, "", "")]
    assert recovery.stuck_servers(running, {}, (), tainted, need) == {}  # (stays)
    # a re-plan (for whatever loss) leaves it: the job's own servers offered exclude it
    bert = entry(paper_jobs()[3], allowed_regions=("paris",))
    s = replace(snap([bert]), nodes=tainted)
    assert a not in {i.name for i in s.free(bert, also=(a, b))}
    assert b in {i.name for i in s.free(bert, also=(a, b))}
    assert a in {i.name for i in replace(s, nodes=nodes()).free(bert, also=(a, b))}
    tolerant = replace(bert, tolerations=tuple(tolerated))
    assert a in {i.name for i in s.free(tolerant, also=(a, b))}
    # and its Event says why (the servers lost for another cause named as they were)
    (job_plan,) = plan(paper_cluster(), [paper_jobs()[3]], "baseline-b").jobs
    stages = [replace(st, nodes=(n,)) for st, n in zip(job_plan.stages, (a, b, c), strict=False)]
    job_plan = replace(job_plan, stages=tuple(stages))
    assert set(job_plan.nodes) == {a, b, c}
    assert recovery.barred_servers(job_plan, tainted, (), lost={c}) == {
        a: "Tainted maint=yes:NoSchedule"
    }
    assert recovery.barred_servers(job_plan, tainted, (), lost={a}) == {}


def _with_gpus(name: str, gpus: int) -> dict[str, Any]:
    (server,) = [s for s in paper_cluster().servers if s.name == name]
    body = node_manifest(server)
    body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    for k in ("capacity", "allocatable"):
        body["status"][k]["nvidia.com/gpu"] = str(gpus)
    return body


def test_an_extended_resource_limits_the_plan_to_nodes_that_have_it_free() -> None:
    bert = paper_jobs()[3]
    fpga = (("example.com/fpga", 1.0),)
    paris = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")
    a, b, *_ = paris
    e = entry(bert, allowed_regions=("paris",), requests=Resources(extra=fpga))
    s = snap([e])
    # nodes that report no such resource have none of it, as the scheduler counts it
    assert refusal(s, e).startswith(
        f"none of the {len(paris)} usable node(s) matching the job has example.com/fpga, which "
        "the stage pods request: advertise it on the nodes"
    )
    s.nodes = {
        **s.nodes,
        **{
            n: replace(s.nodes[n], allocatable=s.nodes[n].allocatable.plus(Resources(extra=fpga)))
            for n in (a, b)
        },
    }
    assert [i.name for i in s.free(e)] == [a, b]
    s.used = {a: Resources(extra=fpga)}  # another pod holds a's only FPGA
    assert [i.name for i in s.free(e)] == [b]
    s.used = {a: Resources(extra=fpga), b: Resources(extra=fpga)}
    assert refusal(s, e).startswith(
        f"the stage pods' requests (example.com/fpga 1) fit on none of the {len(paris)} usable"
    )


def test_a_job_told_why_no_server_is_free_when_the_causes_are_mixed() -> None:
    need = Resources(0, 1.0, 0.0)
    bert = entry(paper_jobs()[3], allowed_regions=("paris",), requests=need)
    paris = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")
    a, b, *rest = paris
    s = snap([bert], {n: ("other", "job") for n in rest})
    cpu = nodes()[b].allocatable.cpu
    s.used = {a: Resources(nodes()[a].server.gpus), b: Resources(0, cpu, 0.0)}  # type: ignore[union-attr]
    assert refusal(s, bert) == (
        f"none of the {len(paris)} usable node(s) matching the job is free: {len(rest)} held "
        f"by other jobs (jobs of other namespaces hold {len(rest)}), 1 with every GPU "
        "requested by other pods, 1 without room for the stage pods' requests (cpu 1)"
    )
    # a stage pod that asks for no CPU fits however much other pods ask for
    calm = entry(paper_jobs()[3], allowed_regions=("paris",))
    crowded = snap([calm])
    crowded.used = {n: Resources(0, 1e6, 1e15) for n in paris}
    assert [i.name for i in crowded.free(calm)] == paris


def test_a_limitrange_gpu_minimum_keeps_servers_with_fewer_gpus_from_a_job() -> None:
    """A LimitRange's min of GPUs per pod: before, a server offering fewer was planned, and
    its stage pod refused (a Known limit). Servers offering fewer are not offered; a template
    asking fewer, or a max under the min, is told; none left says which LimitRange."""
    gpt = entry(paper_jobs()[2], ns="team-b", allowed_regions=("paris",))  # 12, 12, 6, 11 GPUs
    base = snap([gpt])
    paris = {i.name: i.server.gpus for i in base.free(gpt) if i.server}
    assert sorted(paris.values()) == [6, 11, 12, 12], paris

    def view(e: JobEntry, **kw: Any) -> Snapshot:
        return Snapshot(base.nodes, base.latencies, {e.key: e}, {}, **kw)

    least = view(gpt, gpu_minimums={"team-b": [("floor", 8.0), ("low", 2.0)]})
    assert least.gpu_min("team-b") == ("floor", 8.0)  # the tightest
    assert sorted(i.server.gpus for i in least.free(gpt) if i.server) == [11, 12, 12]
    d = plan_pending(least, plan)[gpt.key]
    assert d.job_plan is not None, d.reason
    assert min(d.cluster.server(n).gpus for n in d.job_plan.nodes) >= 8  # type: ignore[union-attr]
    # every server too small
    high = view(gpt, gpu_minimums={"team-b": [("floor", 13.0)]})
    assert high.free(gpt) == []
    assert plan_pending(high, plan)[gpt.key].reason == (
        "none of the 4 usable node(s) matching the job offers the 13 nvidia.com/gpu namespace "
        "team-b's LimitRange floor asks at least per pod: lower the LimitRange's min, or allow "
        "servers with more GPUs"
    )
    # a template that asks fewer than the min, and a max under the min
    asks = replace(gpt, requests=Resources(gpus=4))
    d = plan_pending(view(asks, gpu_minimums={"team-b": [("floor", 8.0)]}), plan)[asks.key]
    assert d.job_plan is None and d.reason == (
        "namespace team-b's LimitRange floor asks at least 8 nvidia.com/gpu per pod, and the "
        "template asks 4: ask for at least 8, or lower the LimitRange's min"
    )
    both = view(
        gpt, gpu_minimums={"team-b": [("floor", 8.0)]}, gpu_limits={"team-b": [("cap", 4.0)]}
    )
    assert plan_pending(both, plan)[gpt.key].reason == (
        "namespace team-b's LimitRange floor asks at least 8 nvidia.com/gpu per pod, and "
        "LimitRange cap allows at most 4: no stage pod can meet both; lower the min, or raise "
        "the max"
    )


def test_a_limitrange_caps_the_gpus_a_server_offers_a_job() -> None:
    """Before, a server with more GPUs than the namespace's LimitRange allows per pod was
    planned whole, and its stage pod was refused for ever (a multi-tenant user trial)."""
    gpt = entry(paper_jobs()[2], ns="team-b", allowed_regions=("berlin",))
    base = snap([gpt])
    berlin = [i for i in base.free(gpt)]
    assert berlin and max(i.server.gpus for i in berlin if i.server) > 4
    view = Snapshot(
        base.nodes, base.latencies, base.jobs, {}, gpu_limits={"team-b": [("gpus", 4.0)]}
    )
    assert {i.server.gpus for i in view.free(gpt) if i.server} <= {1, 2, 3, 4}
    d = plan_pending(view, plan)[gpt.key]
    assert d.job_plan is not None, d.reason
    assert max(d.cluster.server(n).gpus for n in d.job_plan.nodes) <= 4  # type: ignore[union-attr]
    # a template that asks for more than the LimitRange allows: nothing is offered
    asks = replace(gpt, requests=Resources(gpus=8))
    view = Snapshot(
        base.nodes, base.latencies, {asks.key: asks}, {}, gpu_limits={"team-b": [("gpus", 4.0)]}
    )
    d = plan_pending(view, plan)[asks.key]
    assert d.job_plan is None
    assert d.reason == (
        "namespace team-b's LimitRange gpus allows 4 nvidia.com/gpu per pod, and the template "
        "asks 8: ask for at most 4, or raise the LimitRange's max"
    )


def test_an_init_containers_gpus_must_be_free_on_the_servers_offered() -> None:
    """A plain init container holds its GPUs before the trainer starts: the scheduler puts
    the stage pod only where that many are free, whatever the trainer gets (before, a
    server with fewer was planned, and its pod waited unschedulable; a review). A sidecar's
    GPUs are the template's own ask instead."""
    from hulk_operator.entries import init_gpus, stage_requests

    gpt = entry(paper_jobs()[2], allowed_regions=("paris",))  # 12, 12, 6, 11 GPUs
    base = snap([gpt])
    paris = {i.name: i.server.gpus for i in base.free(gpt) if i.server}
    tmpl = {
        "containers": [{"name": "trainer"}],
        "initContainers": [
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
            {"name": "check", "resources": {"requests": {"nvidia.com/gpu": "2"}}},
            {"name": "side", "restartPolicy": "Always",
             "resources": {"limits": {"nvidia.com/gpu": "16"}}},
        ],
    }  # fmt: skip
    assert init_gpus(tmpl) == ("warm", 8)
    # sidecars started before an init container run beside it: their GPUs add up
    side_first = {**tmpl, "initContainers": tmpl["initContainers"][::-1]}
    assert init_gpus(side_first) == ("warm", 24)
    assert stage_requests(tmpl).gpus == 16  # (the sidecar's: it runs beside the trainer)
    warm = replace(gpt, init_gpus=init_gpus(tmpl))
    s = snap([warm])
    offered = {i.name: i.server.gpus for i in s.free(warm) if i.server}
    assert offered == {n: g for n, g in paris.items() if g >= 8}  # (each whole, for the trainer)
    # a quota counts the init container's GPUs where they are more than the trainer's
    assert s.pods_need(warm, [4, 12])["requests.nvidia.com/gpu"] == 8 + 12
    # other pods' GPUs leave fewer free than it asks on the 11-GPU server
    eleven = next(n for n, g in paris.items() if g == 11)
    s.used = {eleven: Resources(4)}
    assert eleven not in {i.name for i in s.free(warm)}
    greedy = replace(gpt, init_gpus=("warm", 13))
    # no server it may use has 13 GPUs at all: it fits nowhere (Planned's FitsNowhere,
    # change the job), not a job that waits for them to be free (a user trial's cpu case)
    assert refusal(snap([greedy]), greedy) == (
        "fits nowhere: init container warm asks 13 nvidia.com/gpu, more than any of the 4 "
        "node(s) matching the job has (it holds them before the trainer starts); lower its "
        "ask, or allow more servers (spec.allowedRegions ['paris'])"
    )
    twelve = replace(gpt, init_gpus=("warm", 12))
    mixed = snap([twelve], {n: ("other", "job") for n in paris if paris[n] == 12})
    assert refusal(mixed, twelve) == (
        "none of the 4 usable node(s) matching the job is free: 2 held by other jobs "
        "(jobs of other namespaces hold 2), 2 with fewer than the 12 nvidia.com/gpu init "
        "container warm asks free"
    )


TRAINER = {"name": "trainer", "image": "t", "resources": {"limits": {GPU: "2"}}}
SIDE = {"name": "side", "image": "s", "resources": {"limits": {GPU: "1"}}}
SIDECARS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "sidecar": (
        {},
        {"containers": [TRAINER], "initContainers": [{**SIDE, "restartPolicy": "Always"}]},
    ),
    "second container": ({}, {"containers": [TRAINER, SIDE]}),
    "first container": (
        {"annotations": {DEFAULT_CONTAINER: "trainer"}},
        {"containers": [SIDE, TRAINER]},
    ),
}


@pytest.mark.parametrize(("meta", "pod_spec"), SIDECARS.values(), ids=list(SIDECARS))
def test_a_gpu_sidecars_gpus_are_the_stage_pods_not_the_stages(
    meta: dict[str, Any], pod_spec: dict[str, Any]
) -> None:
    """A 2-GPU trainer with a 1-GPU sidecar beside it: each stage pod asks 3 GPUs, which
    must be free on its server and count toward the quota, but the stage computes on and
    holds its layers in the trainer's 2 (torchrun starts 2 workers): its plan is a 2-GPU
    trainer's alone. Before, the planner counted the pod's 3: the predicted step time and
    memory were too generous, and a stage could get more layers than its trainer holds (a
    review)."""
    alone = applied("alone", "gpt2-xl", {"containers": [TRAINER]}, allowedRegions=["paris"])
    side = applied("side", "gpt2-xl", pod_spec, meta, allowedRegions=["paris"])
    assert side.error is None and (side.requests.gpus, alone.requests.gpus) == (3, 2)
    offered = [(i.name, i.server.gpus) for i in snap([side]).free(side) if i.server]
    assert offered == [(i.name, i.server.gpus) for i in snap([alone]).free(alone) if i.server]
    assert {g for _, g in offered} == {2}, offered  # (paris: 12, 12, 6, 11 GPUs)
    plans = {}
    for e in (side, alone):
        d = plan_pending(snap([e]), plan, planner="baseline-b")[e.key]
        assert d.job_plan is not None, d.reason
        plans[e.key[1]] = d
    ours, theirs = plans["side"].job_plan, plans["alone"].job_plan
    assert ours is not None and theirs is not None
    assert ours.stages == theirs.stages
    assert ours.predicted_iteration_seconds == theirs.predicted_iteration_seconds
    # a quota counts each stage pod's 3 (as before), and holds the job to the pods it allows
    pods = len(ours.nodes)
    assert snap([side]).quota_need(side, plans["side"])[QUOTA_GPU] == 3 * pods
    quotas = {"ml": [("gpus", {QUOTA_GPU: 6.0})]}
    view = replace(snap([side]), quotas=quotas)
    d = plan_pending(view, plan, planner="baseline-b")[side.key]
    assert d.job_plan is not None and len(d.nodes) == 2, d.reason
    assert view.quota_need(side, d)[QUOTA_GPU] == 6
