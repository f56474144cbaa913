"""The control plane works: API version, nodes, garbage collector, scheduler, namespaces."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from hulk_planner.datasets import paper_cluster
from hulk_planner.model import Server
from hulk_sandbox.nodes import GPU, is_ready
from hulk_sandbox.sandbox import Sandbox

pytestmark = pytest.mark.sandbox


def eventually(check: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def core(sandbox: Sandbox) -> Iterator[Any]:
    """CoreV1Api, typed Any: the generated models make every field Optional."""
    with sandbox.api_client() as api:
        yield client.CoreV1Api(api)


def pod(name: str, *, gpus: int = 0, node: str | None = None, owner: Any = None) -> client.V1Pod:
    limits = {GPU: str(gpus)} if gpus else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, owner_references=owner),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(limits=limits),
                )
            ],
            node_selector={"kubernetes.io/hostname": node} if node else None,
        ),
    )


def test_version_is_the_real_one(sandbox: Sandbox) -> None:
    with sandbox.api_client() as api:
        info = client.VersionApi(api).get_code()
    assert info.git_version.startswith("v1.35."), info.git_version
    assert (info.major, info.minor) == ("1", "35")


def test_paper_nodes_are_ready_with_gpu_labels(core: Any) -> None:
    servers = {s.name: s for s in paper_cluster().servers}
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(servers) <= set(nodes)
    for name, server in servers.items():
        node = nodes[name]
        assert is_ready(node), name
        assert node.status.allocatable[GPU] == str(server.gpus)
        labels = node.metadata.labels
        assert labels["kubernetes.io/hostname"] == name
        assert labels["topology.kubernetes.io/region"]
        assert labels["nvidia.com/gpu.count"] == str(server.gpus)
    assert len({n.metadata.labels["topology.kubernetes.io/region"] for n in nodes.values()}) > 5


def test_pods_run_and_namespace_deletion_finishes(core: Any) -> None:
    ns = f"gone-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    eventually(lambda: core.list_namespaced_service_account(ns).items, what="default SA")
    core.create_namespaced_pod(ns, pod("p"))
    eventually(
        lambda: core.read_namespaced_pod("p", ns).status.phase == "Running", what="pod Running"
    )
    core.delete_namespace(ns)

    def gone() -> bool:
        return ns not in {n.metadata.name for n in core.list_namespace().items}

    eventually(gone, timeout=90, what=f"namespace {ns} deleted")


def test_garbage_collector_deletes_pods_of_a_deleted_owner(core: Any, namespace: str) -> None:
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = [
        client.V1OwnerReference(
            api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
        )
    ]
    for i in range(3):
        core.create_namespaced_pod(namespace, pod(f"owned-{i}", owner=ref))
    core.create_namespaced_pod(namespace, pod("free"))

    def running() -> int:
        pods = core.list_namespaced_pod(namespace).items
        return sum(p.status.phase == "Running" for p in pods) == 4

    eventually(running, what="4 pods Running")
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def only_free_left() -> bool:
        return [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["free"]

    eventually(only_free_left, what="owned pods deleted by the garbage collector")


def test_scheduler_binds_gpu_pods_only_while_gpus_are_free(
    sandbox: Sandbox, core: Any, namespace: str
) -> None:
    name = f"sched-{uuid.uuid4().hex[:6]}"
    sandbox.add_node(Server(name, "Testland", gpus=4, gpu_memory_gib=80, gpu_tflops=989))
    try:
        core.create_namespaced_pod(namespace, pod("big", gpus=4, node=name))
        big = eventually(
            lambda: (
                (p := core.read_namespaced_pod("big", namespace)).status.phase == "Running" and p
            ),
            what="the 4-GPU pod Running",
        )
        assert big.spec.node_name == name

        core.create_namespaced_pod(namespace, pod("late", gpus=1, node=name))

        def unschedulable() -> bool:
            p = core.read_namespaced_pod("late", namespace)
            conds = p.status.conditions or []
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)

        eventually(unschedulable, what="the scheduler to find no room for the 1-GPU pod")
        late = core.read_namespaced_pod("late", namespace)
        assert late.spec.node_name is None and late.status.phase == "Pending"

        core.delete_namespaced_pod("big", namespace)
        late = eventually(
            lambda: (
                (p := core.read_namespaced_pod("late", namespace)).status.phase == "Running" and p
            ),
            what="the 1-GPU pod bound once the GPUs are free",
        )
        assert late.spec.node_name == name
    finally:
        sandbox.delete_node(name)


def test_add_and_delete_node(sandbox: Sandbox, core: Any) -> None:
    name = f"extra-{uuid.uuid4().hex[:6]}"
    sandbox.add_node(Server(name, "Paris", gpus=2, gpu_memory_gib=24, gpu_tflops=100))
    assert is_ready(core.read_node(name))
    # the nodes there are now, not the count at up (it said 47 with 48: a user trial)
    assert sandbox.status()["nodes"] == len(core.list_node().items) > sandbox.state["nodes"]
    sandbox.delete_node(name)
    eventually(
        lambda: name not in {n.metadata.name for n in core.list_node().items}, what="node gone"
    )


def test_a_node_made_again_at_once_under_its_name_runs_its_pods(
    sandbox: Sandbox, core: Any, namespace: str
) -> None:
    """Deleted and made again at once: before, kwok took over the old node's lease, lost it
    to the garbage collector, made another 10 s later, and never ran a pod on the node
    after (a flaky operator test: its job never Running again). The sandbox deletes the
    lease with the node."""
    name = f"again-{uuid.uuid4().hex[:6]}"
    server = Server(name, "Testland", gpus=2, gpu_memory_gib=80, gpu_tflops=989)
    sandbox.add_node(server)
    try:
        for i in range(4):  # (four times: the old lease's end raced kwok's renewal)
            time.sleep(1.5)  # (kwok holds the node's lease by now)
            sandbox.delete_node(name)
            sandbox.add_node(server)
            core.create_namespaced_pod(namespace, pod(f"after-{i}", gpus=2, node=name))
            eventually(
                lambda i=i: (
                    core.read_namespaced_pod(f"after-{i}", namespace).status.phase == "Running"
                ),
                timeout=30,
                what=f"the pod on the node made again ({i + 1} time(s)) Running",
            )
            core.delete_namespaced_pod(f"after-{i}", namespace, grace_period_seconds=0)
    finally:
        sandbox.delete_node(name)


def test_hulk_sandbox_add_node_adds_a_new_regions_node(sandbox: Sandbox, core: Any) -> None:
    """Before, adding a node to a running sandbox took the Python API (a user trial)."""
    import subprocess
    import sys

    name = f"singapore-{uuid.uuid4().hex[:4]}"

    def add(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "hulk", "sandbox", "add-node", "--dir", str(sandbox.dir)]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)

    out = add(name, "--region", "Singapore", "--gpus", "4")
    try:
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (
            f"node {name} Ready: 4 x A100-SXM4-80GB (80 GiB, 312 TFLOPS) in region Singapore"
        )
        node = core.read_node(name)
        assert is_ready(node) and node.status.allocatable[GPU] == "4"
        labels = node.metadata.labels
        assert labels["topology.kubernetes.io/region"] == "singapore"
        assert labels["nvidia.com/gpu.memory"] == str(80 * 1024)
        again = add(name, "--region", "Singapore")
        assert again.returncode == 2 and again.stderr.strip() == (
            f"hulk sandbox: node {name} exists (choose another name, or kubectl delete node "
            f"{name} first)"
        )
    finally:
        sandbox.delete_node(name)
    # a GPU of the paper's cluster by its product name: its memory and capability follow
    # (before, 80 GiB, and no capability: a lost paper server added back was not itself)
    known = add(
        f"{name}-b", "--region", "Tokyo", "--gpus", "4", "--gpu-product", "NVIDIA-RTX-A5000"
    )
    try:
        assert known.returncode == 0, known.stderr
        assert "4 x NVIDIA-RTX-A5000 (24 GiB, 111.1 TFLOPS)" in known.stdout, known.stdout
        labels = core.read_node(f"{name}-b").metadata.labels
        assert labels["nvidia.com/gpu.memory"] == str(24 * 1024)
        assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (
            "8",
            "6",
        )
    finally:
        sandbox.delete_node(f"{name}-b")
    bad = add("x-1", "--region", "Singapore", "--gpus", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("hulk sandbox: --gpus: "), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    # a zero was taken for "not given" (312 TFLOPS, 80 GiB); a negative one was named
    # server 'x-1'.gpuTFLOPS; a name the API server refuses was told as "Unprocessable
    # Entity" alone (a review)
    for args, said in (
        (("x-1", "--gpu-tflops", "0"), "hulk sandbox: --gpu-tflops: must be "),
        (("x-1", "--gpu-memory-gib", "0"), "hulk sandbox: --gpu-memory-gib: must be "),
        (("x-1", "--gpu-tflops", "-1"), "hulk sandbox: --gpu-tflops: must be "),
        (
            ("Bad_Name",),
            'hulk sandbox: the API server refused node Bad_Name: Node "Bad_Name" is invalid',
        ),
    ):
        bad = add(*args, "--region", "Singapore")
        assert bad.returncode == 2 and bad.stderr.startswith(said), (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1


def test_hulk_sandbox_latencies_publishes_the_papers_measurements(sandbox: Sandbox) -> None:
    """A sandbox started by hand runs no probe: ``hulk sandbox latencies`` writes the paper's
    measured latencies as the probe would (before, only ``hulk demo`` replayed them, and
    the operator planned a hand-started sandbox on estimates alone: a user trial)."""
    import subprocess
    import sys

    from hulk_probe.replay import GROUP, PLURAL, VERSION, forget_latencies

    paper = paper_cluster()
    cmd = [sys.executable, "-m", "hulk", "sandbox", "latencies", "--dir", str(sandbox.dir)]
    with sandbox.api_client() as api:
        names = [n.metadata.name for n in client.CoreV1Api(api).list_node().items]
        ours = [s.name for s in paper.servers if s.name in names]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            links = [lk for lk in paper.links if lk.a in ours and lk.b in ours]
            pairs = len(ours) * (len(ours) - 1) // 2
            assert out.stdout.startswith(
                f"published the paper's latencies for its {len(ours)} node(s) here: "
                f"{len(links)} measured link(s), {pairs - len(links)} pair(s) without one as "
                "unreachable"
            ), out.stdout
            link = links[0]
            custom = client.CustomObjectsApi(api)
            obj = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, link.a)
            peers = {e["node"]: e for e in obj["status"]["peers"]}
            assert peers[link.b]["reachable"] and peers[link.b]["latencyMs"] == link.latency_ms
            linked = {frozenset((lk.a, lk.b)) for lk in paper.links}
            cut = next(b for b in ours if b != link.a and frozenset((link.a, b)) not in linked)
            assert peers[cut]["reachable"] is False
        finally:
            forget_latencies(api, ours)  # (the other tests publish their own)
    bad = subprocess.run([*cmd, "--every", "-1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("hulk sandbox: --every: must be ")
    none = subprocess.run(
        [*cmd[:-1], str(sandbox.dir / "absent")], capture_output=True, text=True, timeout=60
    )
    assert none.returncode == 2 and "no running sandbox in " in none.stderr, none.stderr
