"""Pure tests of Node -> Server, health and constraints; the operator's shared listings
(other namespaces' pods, NodeLatency) on the sandbox."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from hulk_operator import inventory
from hulk_operator.inventory import Taint, node_info, pod_requests, tolerates
from hulk_planner.datasets import paper_cluster
from hulk_sandbox.nodes import node_manifest


def node(**over: Any) -> dict[str, Any]:
    body = {
        "metadata": {
            "name": "bj-0",
            "labels": {
                "topology.kubernetes.io/region": "beijing",
                "topology.kubernetes.io/zone": "bj-a",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.memory": "40960",
                "nvidia.com/gpu.count": "8",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for path, value in over.items():
        where: Any = body
        keys = path.split("__")
        for k in keys[:-1]:
            where = where.setdefault(k, {})
        where[keys[-1]] = value
    return body


def test_gfd_labels_become_a_server() -> None:
    info = node_info(node())
    assert info.problem is None and info.server is not None
    s = info.server
    assert (s.region, s.gpus, s.gpu_memory_gib, s.gpu_tflops, s.zone) == (
        "beijing",
        8,
        40.0,
        312.0,
        "bj-a",
    )
    assert info.offers() and info.sick() is None


def test_a_label_change_alone_makes_the_node_info_unequal() -> None:
    """kopf keeps an index's old value when the new one compares equal: before, the labels
    did not take part, so a node labelled for a job's nodeSelector stayed unseen."""
    plain = node_info(node())
    labelled = node_info(node(metadata__labels__team="ml"))
    assert plain != labelled and plain == node_info(node())
    assert hash(plain) == hash(labelled)  # (equal-by-fields still hash alike)


def test_allocatable_not_label_counts_gpus() -> None:
    info = node_info(node(status__allocatable={"nvidia.com/gpu": "6"}))
    assert info.server is not None and info.server.gpus == 6


def test_every_paper_node_from_the_sandbox_is_usable() -> None:
    cluster = paper_cluster()
    for server in cluster.servers:
        body = node_manifest(server)
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        info = node_info(body)
        assert info.server is not None, (server.name, info.problem)
        assert info.server.gpus == server.gpus
        assert info.server.gpu_tflops == server.gpu_tflops


def test_unusable_nodes_say_why() -> None:
    assert "allocatable" in str(node_info(node(status__allocatable={})).problem)
    assert "MIG" in str(
        node_info(
            node(
                metadata__labels={
                    **node()["metadata"]["labels"],
                    "nvidia.com/mig.strategy": "mixed",
                }
            )
        ).problem
    )
    labels = copy.deepcopy(node()["metadata"]["labels"])
    labels["nvidia.com/gpu.product"] = "Tesla-T4-SHARED"
    assert "time-sliced" in str(node_info(node(metadata__labels=labels)).problem)
    labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB"
    del labels["nvidia.com/gpu.memory"]
    assert "memory" in str(node_info(node(metadata__labels=labels)).problem)
    labels = {"nvidia.com/gpu.memory": "1000", "nvidia.com/gpu.product": "Mystery"}
    assert "speed" in str(node_info(node(metadata__labels=labels)).problem)
    labels["hulk.dev/x"] = "1"
    body = node(metadata__labels=labels, metadata__annotations={"hulk.dev/gpu-tflops": "50"})
    info = node_info(body)
    assert info.server is not None and info.server.gpu_tflops == 50.0
    assert info.server.region == inventory.UNLABELLED


def test_health_readiness_cordon_taints() -> None:
    assert (
        node_info(node(status__conditions=[{"type": "Ready", "status": "False"}])).sick()
        == "NotReady"
    )
    assert node_info(node(spec__unschedulable=True)).sick() == "Cordoned"
    noexec = node_info(node(spec__taints=[{"key": "maint", "effect": "NoExecute"}]))
    assert noexec.sick() == "Tainted maint:NoExecute"
    assert noexec.sick([{"key": "maint", "operator": "Exists"}]) is None
    nosched = node_info(node(spec__taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}]))
    assert nosched.sick() is None and not nosched.offers()
    assert nosched.offers([{"key": "x", "value": "y", "effect": "NoSchedule"}])
    gpu = node_info(node(spec__taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    assert gpu.offers()
    unreachable = node_info(
        node(spec__taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    )
    assert not unreachable.ready


def test_tolerations() -> None:
    t = Taint("k", "v", "NoSchedule")
    assert tolerates([{"operator": "Exists"}], t)
    assert tolerates([{"key": "k", "operator": "Equal", "value": "v"}], t)
    assert not tolerates([{"key": "k", "value": "w"}], t)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], t)


def test_constraints() -> None:
    info = node_info(node())
    assert inventory.selected(info, {"nvidia.com/gpu.count": "8"}, ["beijing"])
    assert not inventory.selected(info, {"nvidia.com/gpu.count": "4"}, None)
    assert not inventory.selected(info, None, ["shanghai"])
    # without regard to case, spaces or punctuation, as hulk plan takes them (before: the
    # label exactly)
    assert inventory.selected(info, None, ["Beijing"]) and inventory.selected(
        info, None, [" BEIJING"]
    )


def test_gpu_requests_count_as_the_scheduler_does() -> None:
    def c(**res: Any) -> dict[str, Any]:
        return {"name": "c", "resources": {k: {"nvidia.com/gpu": v} for k, v in res.items()}}

    assert pod_requests({"containers": [c(limits="2"), c(requests=1, limits=1), c()]}).gpus == 3
    init = {"containers": [c(limits="1")], "initContainers": [c(limits="4")]}
    assert pod_requests(init).gpus == 4
    assert pod_requests({"containers": [{"name": "c"}]}).gpus == 0
    assert pod_requests({"containers": [c(limits="lots")]}).gpus == 0


def test_required_node_affinity_as_the_scheduler_reads_it() -> None:
    info = node_info(node())
    labels = dict(info.labels)
    region = labels["topology.kubernetes.io/region"]

    def expr(key: str, op: str, *values: str) -> dict[str, Any]:
        return {"key": key, "operator": op, **({"values": list(values)} if values else {})}

    def term(*exprs: dict[str, Any]) -> dict[str, Any]:
        return {"matchExpressions": list(exprs)}

    r = "topology.kubernetes.io/region"
    assert inventory.affinity_matches(info, [])
    assert inventory.affinity_matches(info, [term(expr(r, "In", region, "mars"))])
    assert not inventory.affinity_matches(info, [term(expr(r, "NotIn", region))])
    assert inventory.affinity_matches(info, [term(expr(r, "NotIn", "mars"), expr(r, "Exists"))])
    assert not inventory.affinity_matches(info, [term(expr(r, "DoesNotExist"))])
    assert inventory.affinity_matches(info, [term(expr("nope", "DoesNotExist"))])
    # terms are ORed, expressions ANDed; an empty term matches nothing
    assert inventory.affinity_matches(
        info, [term(expr(r, "In", "mars")), term(expr(r, "In", region))]
    )
    assert not inventory.affinity_matches(info, [term(expr(r, "In", region), expr(r, "In", "x"))])
    assert not inventory.affinity_matches(info, [{}])
    gpus = "nvidia.com/gpu.count"
    assert labels.get(gpus) is not None
    n = int(labels[gpus])
    assert inventory.affinity_matches(info, [term(expr(gpus, "Gt", str(n - 1)))])
    assert not inventory.affinity_matches(info, [term(expr(gpus, "Lt", str(n)))])
    assert not inventory.affinity_matches(info, [term(expr(r, "Gt", "1"))])  # not a number
    name = {"key": "metadata.name", "operator": "In", "values": [info.name]}
    assert inventory.affinity_matches(info, [{"matchFields": [name]}])


def test_pod_requests_sum_containers_and_take_the_largest_init_container() -> None:
    def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> Any:
        return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}

    spec = {
        "containers": [
            c({"cpu": "500m", "memory": "4Gi"}, {"nvidia.com/gpu": "2"}),
            c({"cpu": "1"}, {"cpu": "2", "memory": "1Gi"}),  # memory: the limit
        ],
        "initContainers": [c({"cpu": "4"}), c({"memory": "1Gi"})],
    }
    assert inventory.pod_requests(spec) == inventory.Resources(2, 4.0, 5 * 2**30)
    assert inventory.pod_requests({"containers": [c({"cpu": "lots"})]}) == inventory.Resources()
    alloc = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}
    assert node_info(node(status__allocatable=alloc)).allocatable == inventory.Resources(
        0, 96.0, 2.0**40
    )
    assert node_info(node()).allocatable == inventory.Resources()  # not reported: not checked


def test_other_resources_are_requested_and_offered_by_name() -> None:
    def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> Any:
        return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}

    spec = {
        "containers": [
            c({"ephemeral-storage": "10Gi"}, {"example.com/fpga": "1"}),  # the limit: a request
            c({"ephemeral-storage": "2Gi", "example.com/fpga": "1", "hugepages-2Mi": "0"}),
        ],
        "initContainers": [c({"ephemeral-storage": "20Gi"})],
    }
    need = inventory.pod_requests(spec)
    assert need.extra == (("ephemeral-storage", 20 * 2**30), ("example.com/fpga", 2.0))
    assert (need.gpus, need.cpu, need.memory) == (0, 0.0, 0.0)
    assert need.amount("example.com/fpga") == 2.0 and need.amount("hugepages-1Gi") == 0.0
    both = need.plus(inventory.Resources(1, extra=(("example.com/fpga", 1.0), ("x.io/y", 3.0))))
    assert both.extra == (
        ("ephemeral-storage", 20 * 2**30),
        ("example.com/fpga", 3.0),
        ("x.io/y", 3.0),
    )
    alloc = {"nvidia.com/gpu": "8", "cpu": "96", "pods": "110", "example.com/fpga": "2"}
    assert node_info(node(status__allocatable=alloc)).allocatable.extra == (
        ("example.com/fpga", 2.0),
    )


def _annotate(value: str) -> dict[str, Any]:
    return node(metadata__annotations={"hulk.dev/gpu-tflops": value})


def _memory(value: str) -> dict[str, Any]:
    body = node()
    body["metadata"]["labels"]["nvidia.com/gpu.memory"] = value
    return body


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            _annotate("inf"),
            "annotation hulk.dev/gpu-tflops='inf' is not a finite number above zero",
        ),
        (
            _annotate("fast"),
            "annotation hulk.dev/gpu-tflops='fast' is not a finite number above zero",
        ),
        (
            _memory("1e400"),
            "label nvidia.com/gpu.memory='1e400' is not a finite number of MiB above zero",
        ),
        (
            _memory("-1"),
            "label nvidia.com/gpu.memory='-1' is not a finite number of MiB above zero",
        ),
        # a typo'd label: a model no GPU could hold fitted one server (a user trial)
        (
            _memory("999999999"),
            "label nvidia.com/gpu.memory='999999999' is more than any GPU has (the label is "
            "in MiB: at most 1048576, 1 TiB)",
        ),
        (
            _annotate("250000"),
            "annotation hulk.dev/gpu-tflops='250000' is more than any GPU does (at most 20000 "
            "dense 16-bit TFLOPS per GPU)",
        ),
    ],
)
def test_a_node_with_a_value_no_server_can_have_is_not_offered_and_says_why(
    body: dict[str, Any], problem: str
) -> None:
    """It must not raise: kopf keeps an index entry whose indexer raised, so a later cordon
    of that node would go unseen."""
    info = node_info(body)
    assert info.server is None and info.problem == problem
    if "999999999" in problem:  # the largest GPUs made are still offered
        body["metadata"]["labels"]["nvidia.com/gpu.memory"] = "294912"  # 288 GiB
        assert node_info(body).server is not None
        # the bound itself: the planner's bound on gpuMemoryGiB is the same 1 TiB
        body["metadata"]["labels"]["nvidia.com/gpu.memory"] = "1048576"
        assert node_info(body).server.gpu_memory_gib == 1024  # type: ignore[union-attr]
    body["spec"]["unschedulable"] = True
    assert node_info(body).unschedulable


def test_served_reads_kopfs_namespace_globs() -> None:
    from hulk_operator.inventory import served

    assert served("anything", [])  # -A: every namespace
    assert served("team-a", ["team-*"]) and not served("ml", ["team-*"])
    assert served("ml", ["!team-b"]) and not served("team-b", ["!team-b"])
    # kopf reads each pattern as comma-separated globs and serves a match of any pattern
    assert served("team-a", ["team-*,!team-x"]) and not served("team-x", ["team-*,!team-x"])
    assert served("team-a", ["team-a", "!team-a"])
    # a pattern that names one namespace as it is (listed apart, given a KopfPeering)
    from hulk_operator.inventory import named

    assert named("team-a") and named("ml")
    assert not any(named(p) for p in ("team-*", "team-?", "team-[ab]", "!team-b", "a,b"))


def test_other_pods_count_other_operators_stage_pods_but_not_its_own() -> None:
    """An operator of some namespaces: a stage pod of a job in a namespace it does not
    serve holds its GPUs like any other pod; its own namespaces' stage pods it plans."""
    from hulk_operator.inventory import other_pods

    def pod(
        ns: str, node: str | None, gpus: int, job: str | None = None, label: str | None = None
    ) -> dict[str, Any]:
        owner = [{"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "name": job}]
        labels = {"hulk.dev/job": label or job} if job and label != "" else {}
        return {
            "metadata": {
                "namespace": ns,
                "ownerReferences": owner if job else [],
                "labels": labels,
            },
            "spec": {
                "nodeName": node,
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
        }

    pods = [
        pod("ml", "n1", 8, job="mine"),
        pod("team-b", "n1", 2, job="theirs"),
        pod("team-b", "n2", 4),
        pod("team-b", None, 4),  # not bound: holds nothing yet
        # its label changed or removed by hand: no longer the job's, but it holds its GPUs
        pod("ml", "n3", 1, job="mine", label="zzz"),
        pod("ml", "n3", 3, job="mine", label=""),
    ]
    got = {n: [r.gpus for r in rs] for n, rs in other_pods(pods, ["ml"]).items()}
    assert got == {"n1": [2], "n2": [4], "n3": [1, 3]}
    assert {n: [r.gpus for r in rs] for n, rs in other_pods(pods).items()} == {
        "n2": [4],
        "n3": [1, 3],
    }


def _namespace(api: Any, name: str) -> None:
    """Creates namespace ``name`` and waits for its ``default`` ServiceAccount (pods need it)."""
    import time

    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 60
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except client.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _token_kubeconfig(sandbox: Any, kube: Any, who: str, path: Any) -> str:
    """A kubeconfig of the sandbox as ServiceAccount ``who`` of the test's namespace, which
    no role is bound to: the API server refuses it every listing (403)."""
    from hjob_helpers import token_kubeconfig

    return str(token_kubeconfig(sandbox, kube, who, path))


@pytest.mark.sandbox
def test_a_namespaced_operator_lists_other_namespaces_once_and_survives_a_refusal(
    sandbox: Any,
    kube: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every job's timer asks; one listing serves them all until it is stale, and a
    listing the API server refuses is logged, not raised (it stopped every job's
    reconciliation, recovery included)."""
    import asyncio

    import kopf
    from kubernetes import client

    from hulk_operator import indexes
    from hulk_operator import kube as kube_api

    ns = kube.ns
    other, team = f"{ns}-other", f"{ns}-team-b"  # not served; served by a glob
    busy = {p.spec.node_name for p in kube.core.list_pod_for_all_namespaces().items}
    nodes: Any = kube.core.list_node().items
    node = next(
        n.metadata.name
        for n in nodes
        if n.metadata.name not in busy and int(n.status.allocatable.get("nvidia.com/gpu", 0)) >= 6
    )

    def pod(namespace: str, name: str, gpus: int) -> None:
        limits = {"nvidia.com/gpu": str(gpus)}
        container = {"name": "c", "image": "x", "resources": {"limits": limits}}
        body = {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [container]}}
        kube.core.create_namespaced_pod(namespace, body)

    calls: list[list[str]] = []
    listing = kube_api.list_running_pods

    def counted(api: Any, leave_out: Any = (), namespace: str | None = None) -> Any:
        calls.append(list(leave_out))  # (the API server's own answer: counted, not made up)
        return listing(api, leave_out, namespace)

    monkeypatch.setattr(kube_api, "list_running_pods", counted)
    try:
        for made in (other, team):
            _namespace(kube.api, made)
        pod(other, "theirs", 2)  # another team's: holds 2 GPUs the operator must not offer
        pod(ns, "mine", 1)  # its own namespace's (the pod index's): left out by the API server
        pod(team, "ours", 3)  # a namespace its glob serves: left out here
        memo = kopf.Memo(api=kube.api, namespaces=[ns, f"{ns}-team-*"], listings=indexes.Listings())

        nobody = kube_api.make_client(_token_kubeconfig(sandbox, kube, "nobody", tmp_path / "k"))

        async def many() -> list[dict[str, list[Any]]]:
            # five jobs' timers, each with its copy of the memo, as kopf hands them (before,
            # each copy kept its own listing: one per job)
            jobs = [copy.copy(memo) for _ in range(5)]
            return list(await asyncio.gather(*(indexes.outside_pods(m) for m in jobs)))

        async def main() -> tuple[list[dict[str, list[Any]]], dict[str, list[Any]]]:
            got = await many()
            assert await many() == got  # (listed again when 10 s old)
            assert calls == [[ns]]  # once, the named namespace left out by the API server
            memo.listings.outside = (-1e9, got[0])  # stale
            memo.api = nobody  # (one loop: the shared lock is bound to it)
            with caplog.at_level("WARNING", logger="hulk_operator"):
                kept = await indexes.outside_pods(memo)
            return got, kept

        with nobody:
            got, kept = asyncio.run(main())
        assert all(g == got[0] for g in got)
        assert [r.gpus for r in got[0][node]] == [2]  # the other team's pod alone
        assert len(calls) == 2  # it asked again, and was refused
        assert kept == got[0]
        (told,) = [r.getMessage() for r in caplog.records if r.name == "hulk_operator"]
        assert told.startswith(
            "cannot list the pods of other namespaces (ForbiddenException: (403)"
        )
        assert 'cannot list resource \\"pods\\"' in told, told  # (the API server's words)
    finally:
        for made in (other, team):
            try:
                kube.core.delete_namespace(made)
            except client.ApiException:
                pass


@pytest.mark.sandbox
def test_every_jobs_snapshot_shares_one_listing_of_the_latencies(
    sandbox: Any, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NodeLatency objects are listed once for every job's timer, each with its copy
    of the memo (before, each copy kept its own listing: one per job every 10 s)."""
    import asyncio

    import kopf

    from hulk_operator import indexes
    from hulk_operator import kube as kube_api
    from hulk_operator.config import OperatorConfig
    from hulk_probe.replay import forget_latencies, publish_latencies

    a, b = f"{kube.ns}-a", f"{kube.ns}-b"  # (NodeLatency objects of no node: this test's)
    pair = frozenset((a, b))
    calls: list[str] = []
    listing = kube_api.list_objects

    def counted(api: Any, group: str, version: str, plural: str, *rest: Any, **kw: Any) -> Any:
        calls.append(plural)  # (the API server's own answer: counted, not made up)
        assert kw == {"page": kube_api.LATENCY_PAGE}  # (read in pages: below)
        return listing(api, group, version, plural, *rest, **kw)

    monkeypatch.setattr(kube_api, "list_objects", counted)
    memo = kopf.Memo(api=kube.api, config=OperatorConfig(), listings=indexes.Listings())

    async def many() -> list[Any]:
        jobs = [copy.copy(memo) for _ in range(5)]
        return list(await asyncio.gather(*(indexes.build_snapshot(m, {}, {}, {}) for m in jobs)))

    def measured(snaps: list[Any]) -> set[float | None]:
        return {s.latencies.measured.get(pair) for s in snaps}

    async def main() -> None:  # (one loop: the shared lock is bound to it)
        publish_latencies(kube.api, {a: {b: 2.0}})
        snaps = await many()
        assert len(snaps) == 5 and calls == ["nodelatencies"]
        assert measured(snaps) == {2.0}  # what the API server holds
        publish_latencies(kube.api, {a: {b: 3.0}})
        snaps = await many()
        assert calls == ["nodelatencies"]  # (listed again when 10 s old)
        assert measured(snaps) == {2.0}  # the shared listing, not read again
        memo.listings.latency = (-1e9, memo.listings.latency[1])  # stale
        snaps = await many()
        assert calls == ["nodelatencies"] * 2
        assert measured(snaps) == {3.0}

    try:
        asyncio.run(main())
    finally:
        forget_latencies(kube.api, [a, b])


@pytest.mark.sandbox
def test_the_latency_listing_is_read_in_pages(
    sandbox: Any, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``limit``/``continue``: no one response holds every NodeLatency object (at 1,000
    probed nodes, 109 MB whose parse held the GIL and stalled kopf's loop for all of it,
    ``bench/latency_listing.py``); the pages make up the whole listing."""
    from kubernetes import client

    from hulk_operator import GROUP, VERSION
    from hulk_operator import kube as kube_api
    from hulk_probe.replay import forget_latencies, publish_latencies

    names = [f"{kube.ns}-{i}" for i in range(5)]  # (NodeLatency objects of no node)
    publish_latencies(
        kube.api, {a: {b: 1.0 + i} for i, a in enumerate(names) for b in names if b != a}
    )
    limits: list[int | None] = []
    listing = client.CustomObjectsApi.list_cluster_custom_object

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        limits.append(kw.get("limit"))  # (the API server's own pages: counted, not made up)
        return listing(self, *args, **kw)

    try:
        whole = kube_api.list_objects(kube.api, GROUP, VERSION, "nodelatencies")
        monkeypatch.setattr(client.CustomObjectsApi, "list_cluster_custom_object", counted)
        paged = kube_api.list_objects(kube.api, GROUP, VERSION, "nodelatencies", page=2)
        assert len(whole) >= 5 and limits == [2] * ((len(whole) + 1) // 2)
        assert [o["metadata"]["name"] for o in paged] == [o["metadata"]["name"] for o in whole]
        assert set(names) <= {o["metadata"]["name"] for o in paged}
    finally:
        forget_latencies(kube.api, names)


def _etcd(sandbox: Any, call: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call of etcd's JSON gateway (``/v3/kv/...``; keys and values base64)."""
    import json
    import urllib.request

    from hulk_sandbox.components import HOST

    url = f"http://{HOST}:{sandbox.state['ports']['etcd_client']}/v3/kv/{call}"
    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return dict(json.loads(resp.read()))


@pytest.mark.sandbox
def test_a_paged_listing_that_outlasts_a_compaction_is_read_again_whole(
    sandbox: Any, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A continue token older than etcd's compaction is refused (410 Expired): the listing
    starts again, once, and what it returns is the whole of the new one (a real compaction,
    recorded as the API server's own compactor records it, so that its watch cache drops
    the snapshots that could still serve the old token)."""
    import base64

    from kubernetes import client

    from hulk_operator import GROUP, VERSION
    from hulk_operator import kube as kube_api
    from hulk_probe.replay import forget_latencies, publish_latencies

    names = [f"{kube.ns}-c{i}" for i in range(5)]
    publish_latencies(kube.api, {a: {b: 1.0} for a in names for b in names if b != a})
    calls: list[str | None] = []
    expired: list[int] = []
    listing = client.CustomObjectsApi.list_cluster_custom_object

    def compact(token: str) -> None:
        publish_latencies(kube.api, {names[0]: {names[1]: 9.0}})  # (past the token's revision)
        key = base64.b64encode(b"compact_rev_key").decode()
        rev = int(_etcd(sandbox, "range", {"key": key})["header"]["revision"])
        _etcd(sandbox, "put", {"key": key, "value": base64.b64encode(str(rev).encode()).decode()})
        _etcd(sandbox, "compaction", {"revision": str(rev), "physical": True})
        deadline = time.monotonic() + 60  # (the watch cache learns of it within ~15 s)
        while time.monotonic() < deadline:
            try:
                listing(self_api, GROUP, VERSION, "nodelatencies", limit=2, _continue=token)
            except client.ApiException as exc:
                if exc.status == 410:
                    expired.append(rev)
                    return
                raise
            time.sleep(0.5)
        raise AssertionError("the old continue token was never refused")

    self_api = client.CustomObjectsApi(kube.api)

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        token = kw.get("_continue")
        if token and not expired:
            compact(token)
        calls.append(token)
        return listing(self, *args, **kw)

    try:
        monkeypatch.setattr(client.CustomObjectsApi, "list_cluster_custom_object", counted)
        paged = kube_api.list_objects(kube.api, GROUP, VERSION, "nodelatencies", page=2)
        monkeypatch.undo()
        whole = kube_api.list_objects(kube.api, GROUP, VERSION, "nodelatencies")
        assert expired, "no compaction"
        # the first page, its continuation refused, then the whole listing again in pages
        assert calls[0] is None and calls[1] is not None and calls[2] is None, calls
        assert len(calls) == 2 + (len(whole) + 1) // 2, calls
        key = [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in whole]
        assert [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in paged] == key
        (first,) = [o for o in paged if o["metadata"]["name"] == names[0]]
        assert first["status"]["peers"][0]["latencyMs"] == 9.0  # (the new listing's)
    finally:
        forget_latencies(kube.api, names)
