"""Real agents (processes on 127.0.0.x) against the sandbox's API server, with delays
injected by toxiproxy: they find one another, measure, publish, and recover."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from hulk_probe import ADDRESS_ANNOTATION, GROUP, PLURAL, VERSION, harness
from hulk_probe.discovery import REGION_LABEL
from hulk_probe.links import links_from_node_latencies

pytestmark = pytest.mark.sandbox


def within_goal(measured: float, injected: float) -> bool:
    """The injected one-way delay is what is measured: within 25% + 1 ms of it, which a
    round trip taken for one way (twice it) or a delay not seen (loopback's) fails. The
    issue's accuracy goal (10% + 0.5 ms) is measured by ``bench/probe_scale.py``, not
    asserted here: on a loaded 2-core CI machine the agents' event loops wait for a core
    (a CI run measured 22.6 ms for 20 ms)."""
    return abs(measured - injected) <= 0.25 * injected + 1.0


def all_measured(nodes: list[str], min_samples: int = 1) -> Callable[[list[Any]], bool]:
    def check(objects: list[dict[str, Any]]) -> bool:
        pairs = harness.status_peers(objects)
        return all(
            (a, b) in pairs
            and pairs[(a, b)]["reachable"]
            and pairs[(a, b)]["samples"] >= min_samples
            for a in nodes
            for b in nodes
            if a != b
        )

    return check


def count_status_writes(api: Any, names: set[str], seconds: int) -> Counter[str]:
    """MODIFIED events per object seen by a watch over ``seconds``."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    listing: Any = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    version = listing["metadata"]["resourceVersion"]
    resp: Any = custom.list_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        watch=True,
        resource_version=version,
        timeout_seconds=seconds,
        _preload_content=False,
    )
    from kubernetes.watch.watch import iter_resp_lines

    writes: Counter[str] = Counter()
    for line in iter_resp_lines(resp):
        if line:
            event = json.loads(line)
            name = event["object"]["metadata"]["name"]
            if event["type"] == "MODIFIED" and name in names:
                writes[name] += 1
    return writes


def test_agents_measure_injected_delays_and_publish(mesh: Any, node_names: list[str]) -> None:
    nodes = node_names[:4]
    n0, n1, n2, n3 = nodes
    delays = {(n0, n1): 20.0, (n2, n3): 50.0}
    agents = mesh.start(nodes, delays=delays)

    objects = mesh.wait_for("every pair measured 5 times", all_measured(nodes, 5))
    pairs = harness.status_peers(objects)
    print({f"{a}->{b}": entry["latencyMs"] for (a, b), entry in sorted(pairs.items())})
    for a in nodes:
        for b in nodes:
            if a == b:
                continue
            injected = delays.get((a, b)) or delays.get((b, a)) or 0.0
            measured = pairs[(a, b)]["latencyMs"]
            if injected:
                assert within_goal(measured, injected), (a, b, measured, injected)
            else:
                # plain loopback: well below the smallest injected delay, even on a busy CI
                # machine where the agents' event loops wait for a core
                assert measured < 4.0, (a, b, measured)

    links = links_from_node_latencies(objects, datetime.now(UTC), max_age_s=10)
    assert len(links) == 6
    assert within_goal(links[frozenset((n0, n1))], 20.0)
    assert within_goal(links[frozenset((n2, n3))], 50.0)

    # the addresses were published on the Nodes; the objects are owned by them
    from kubernetes import client

    core = client.CoreV1Api(mesh.api)
    for agent in agents:
        node: Any = core.read_node(agent.node)
        assert node.metadata.annotations[ADDRESS_ANNOTATION] == f"{agent.host}:{agent.port}"
    owners = {o["metadata"]["name"]: o["metadata"]["ownerReferences"][0] for o in objects}
    assert all(owners[n]["kind"] == "Node" and owners[n]["name"] == n for n in nodes)

    # Prometheus and health
    code, text = agents[0].get("/metrics")
    assert code == 200
    # (the pair's series carry its nodes' topology.kubernetes.io/region labels)
    read: Any = core.read_node
    region = {n: (read(n).metadata.labels or {}).get(REGION_LABEL, "") for n in (n0, n1)}
    assert all(region.values()), region  # (the sandbox labels every node)
    sample = (
        f'hulk_probe_one_way_latency_seconds{{source="{n0}",source_region="{region[n0]}",'
        f'target="{n1}",target_region="{region[n1]}"}} '
    )
    (line,) = [row for row in text.splitlines() if row.startswith(sample)]
    assert within_goal(float(line.split()[-1]) * 1000, 20.0)
    code, text = agents[0].get("/healthz")
    assert code == 200 and "ready=true peers=3 reachable=3" in text

    # bounded writes: at most one status write per node per interval (1 s), plus one
    # for an interval cut in two by the watch's start
    writes = count_status_writes(mesh.api, set(nodes), seconds=6)
    assert set(writes) == set(nodes), writes
    assert all(1 <= count <= 7 for count in writes.values()), writes


def test_partition_marks_peers_unreachable_and_recovers(mesh: Any, node_names: list[str]) -> None:
    nodes = node_names[4:7]
    n0, n1, n2 = nodes
    mesh.start(nodes, delays={(n0, n1): 0.0})
    mesh.wait_for("every pair measured", all_measured(nodes))

    for pair in ((n0, n1), (n1, n0)):
        mesh.proxy.set_enabled(mesh.proxies[pair], False)

    def partitioned(objects: list[dict[str, Any]]) -> bool:
        pairs = harness.status_peers(objects)
        return pairs[(n0, n1)]["reachable"] is False and pairs[(n1, n0)]["reachable"] is False

    objects = mesh.wait_for("n0 and n1 to give up on each other", partitioned, timeout_s=30)
    pairs = harness.status_peers(objects)
    assert pairs[(n0, n1)]["consecutiveFailures"] >= 3 and "latencyMs" not in pairs[(n0, n1)]
    assert pairs[(n0, n2)]["reachable"] and pairs[(n2, n1)]["reachable"]
    links = links_from_node_latencies(objects, datetime.now(UTC), max_age_s=10)
    assert set(links) == {frozenset((n0, n2)), frozenset((n1, n2))}

    for pair in ((n0, n1), (n1, n0)):
        mesh.proxy.set_enabled(mesh.proxies[pair], True)
    objects = mesh.wait_for("the pair to heal", all_measured(nodes), timeout_s=30)
    assert len(links_from_node_latencies(objects, datetime.now(UTC), max_age_s=10)) == 3


def test_within_a_write_budget_agents_write_less_often_but_a_partition_at_once(
    mesh: Any, node_names: list[str]
) -> None:
    """``--write-budget``: three agents whose ~0.4 KB statuses may take 0.03 KB/s together
    write every ~40 s instead of every second, and say so in the status; a pair cut just
    after a write is still published within seconds (before the budget: a status write
    every interval whatever the cluster's size, gigabytes per etcd compaction window on
    1,000 nodes, ``bench/probe_writes.py``)."""
    nodes = node_names[10:13]
    n0, n1 = nodes[:2]
    mesh.start(nodes, delays={(n0, n1): 0.0}, extra=("--write-budget", "0.03"))
    objects = mesh.wait_for("every pair measured", all_measured(nodes), timeout_s=120)
    spacings = {o["metadata"]["name"]: o["status"]["publishIntervalSeconds"] for o in objects}
    assert all(20 <= s <= 200 for s in spacings.values()), spacings

    writes = count_status_writes(mesh.api, set(nodes), seconds=15)
    assert all(count <= 2 for count in writes.values()), writes  # at 1 s: about 15 each

    def published(objs: list[dict[str, Any]]) -> str:
        (mine,) = [o for o in objs if o["metadata"]["name"] == n0]
        return str(mine["status"]["lastPublished"])

    before = published(mesh.objects())
    mesh.wait_for(f"{n0} to write again", lambda objs: published(objs) != before, 120)
    cut_at = time.monotonic()
    for pair in ((n0, n1), (n1, n0)):
        mesh.proxy.set_enabled(mesh.proxies[pair], False)
    mesh.wait_for(
        f"{n0} to publish that {n1} is unreachable",
        lambda objs: harness.status_peers(objs)[(n0, n1)]["reachable"] is False,
        timeout_s=120,
    )
    told_after = time.monotonic() - cut_at
    assert told_after < spacings[n0] / 2, (told_after, spacings)


def test_dead_agent_goes_unreachable_and_stale(mesh: Any, node_names: list[str]) -> None:
    nodes = node_names[7:10]
    n0, n1, n2 = nodes
    agents = mesh.start(nodes)
    mesh.wait_for("every pair measured", all_measured(nodes))

    agents[2].stop(signal.SIGKILL)
    killed = datetime.now(UTC)
    objects = mesh.wait_for(
        f"{n2} marked unreachable by both peers",
        lambda objs: all(
            harness.status_peers(objs)[(n, n2)]["reachable"] is False for n in (n0, n1)
        ),
        timeout_s=30,
    )
    # the peers' fresh reports veto its links; its own report stopped at its death
    assert set(links_from_node_latencies(objects, datetime.now(UTC), max_age_s=10)) == {
        frozenset((n0, n1))
    }
    (dead,) = [o for o in objects if o["metadata"]["name"] == n2]
    assert datetime.fromisoformat(dead["status"]["lastPublished"]) <= killed

    # a deleted object is recreated by its agent, and its status comes back
    from kubernetes import client

    client.CustomObjectsApi(mesh.api).delete_cluster_custom_object(GROUP, VERSION, PLURAL, n0)
    mesh.wait_for(
        f"{n0} republished", lambda objs: (n0, n1) in harness.status_peers(objs), timeout_s=15
    )

    assert agents[0].stop() == 0  # SIGTERM: a clean exit
    # ...which withdraws its address: its peer stops probing it instead of reporting it
    # unreachable (before, a rolling update of the DaemonSet made each restarting node
    # unreachable for a while, and the planner avoided its pairs)
    node: Any = client.CoreV1Api(mesh.api).read_node(n0)
    assert ADDRESS_ANNOTATION not in (node.metadata.annotations or {})
    mesh.wait_for(
        f"{n1} reports nothing of {n0}",
        lambda objs: (n1, n0) not in harness.status_peers(objs),
        timeout_s=15,
    )


def test_sampling_agents_probe_k_peers_a_region_and_a_node_lost_is_cut_off(
    mesh: Any, node_names: list[str]
) -> None:
    """--peers-per-region 2: each agent probes 2 peers of each region (every pair is N^2
    probes, statuses and series); each node is probed by 2 of its own region, so that one
    killed is reported by them, and the operator takes it for cut off from every peer
    (its other pairs, never probed, had the region pair's estimate)."""
    from kubernetes import client

    from hulk_operator.latencies import read_latencies, with_regions

    core = client.CoreV1Api(mesh.api)
    read: Any = core.read_node
    region = {n: (read(n).metadata.labels or {}).get(REGION_LABEL, "") for n in node_names}
    by: dict[str, list[str]] = {}
    for n in node_names:
        by.setdefault(region[n], []).append(n)
    big = sorted((r for r in by if len(by[r]) >= 4), key=lambda r: (-len(by[r]), r))
    assert len(big) >= 2, by  # (the paper's cluster: several regions of 4 nodes or more)
    nodes = by[big[0]][:4] + by[big[1]][:3]
    agents = mesh.start(nodes, extra=("--peers-per-region", "2"))

    def sampled(objects: list[dict[str, Any]]) -> bool:
        pairs = harness.status_peers(objects)
        return all(
            sum(1 for (a, b), e in pairs.items() if a == n and e["reachable"]) == 4 for n in nodes
        )

    objects = mesh.wait_for("each agent measuring 2 peers of each region", sampled)
    pairs = harness.status_peers(objects)
    for n in nodes:
        mine = [b for (a, b) in pairs if a == n]
        assert sorted(Counter(region[b] for b in mine).values()) == [2, 2], (n, mine)
    near = Counter(b for (a, b) in pairs if region[a] == region[b])
    assert all(near[n] == 2 for n in nodes), near  # (each by 2 of its own region)
    code, text = agents[0].get("/healthz")
    assert code == 200 and "peers=4 reachable=4" in text, text

    lost = by[big[0]][1]
    agents[nodes.index(lost)].stop(signal.SIGKILL)
    probers = [a for (a, b) in pairs if b == lost]
    objects = mesh.wait_for(
        f"{lost} reported unreachable by its probers {probers}",
        lambda objs: all(
            harness.status_peers(objs).get((a, lost), {}).get("reachable") is False for a in probers
        ),
        timeout_s=30,
    )
    seen = with_regions(read_latencies(objects, 60, datetime.now(UTC)), region)
    others = [n for n in node_names if n != lost]
    assert all(frozenset((lost, n)) in seen.unreachable for n in others)
    unprobed = [n for n in others if n not in probers]
    assert all(frozenset((lost, n)) in seen.inferred_unreachable for n in unprobed)
    # the others' pairs not probed are estimated, not cut: nothing else is inferred
    assert all(lost in p for p in seen.inferred_unreachable)


def test_unknown_node_is_a_one_line_error(probe_api: Any, sandbox: Any) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hulk",
            "probe",
            "--node-name",
            "no-such-node",
            "--listen",
            "127.0.0.99:17471",
            "--metrics",
            "off",
            "--kubeconfig",
            sandbox.kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("hulk probe: error: node 'no-such-node' not found")
    )


def test_discovery_reads_the_nodes_metadata_alone_and_follows_annotations(
    probe_api: Any, node_names: list[str]
) -> None:
    """The agents list and watch Nodes as their metadata alone, from the API server's
    cache: a Node is 10-30 kB, and every agent read them whole, listed from etcd (a
    review). Annotated nodes still become peers, at the list and through the watch."""
    import threading

    from hulk_probe.discovery import METADATA_LIST, NodeDirectory
    from hulk_probe.kube import Kube

    listing = Kube(probe_api).request("GET", "/api/v1/nodes", accept=METADATA_LIST)
    assert listing["kind"] == "PartialObjectMetadataList", listing["kind"]
    assert listing["items"] and all("status" not in n and "spec" not in n for n in listing["items"])
    me, other = node_names[0], node_names[1]
    seen: list[dict[str, Any]] = []
    changed = threading.Event()

    def on_peers(peers: dict[str, Any]) -> None:
        seen.append(peers)
        changed.set()

    directory = NodeDirectory(probe_api, me, on_peers, watch_timeout_s=5)
    path = f"/api/v1/nodes/{other}"
    before = (Kube(probe_api).request("GET", path)["metadata"].get("annotations") or {}).get(
        ADDRESS_ANNOTATION
    )
    thread = directory.start()
    try:
        assert changed.wait(30), "no peers from the list"
        changed.clear()
        directory.kube.merge_patch(
            path, {"metadata": {"annotations": {ADDRESS_ANNOTATION: "127.0.0.77:7471"}}}
        )
        deadline = 30.0
        while deadline > 0 and seen[-1].get(other) != ("127.0.0.77", 7471):
            changed.wait(1.0)
            changed.clear()
            deadline -= 1.0
        assert seen[-1].get(other) == ("127.0.0.77", 7471), seen[-1]
    finally:
        directory.stop()
        thread.join(10)
        directory.kube.merge_patch(
            path, {"metadata": {"annotations": {ADDRESS_ANNOTATION: before}}}
        )


def test_an_agent_writes_its_address_back_and_follows_its_node_made_again(
    probe_api: Any, sandbox: Any
) -> None:
    """Its address annotation removed while the agent runs (`kubectl annotate ...-`), or
    its Node made again under its name: the node was never probed again until the agent
    restarted, and its NodeLatency object, owned by the old uid, was garbage-collected and
    made again each interval (a review). The directory writes the annotation back and
    tells the new uid, which the publisher's object then takes as its owner."""
    import threading
    import time

    from hulk_planner.model import Server
    from hulk_probe.discovery import NodeDirectory
    from hulk_probe.kube import Kube

    name = "probe-remade-0"
    sandbox.add_node(Server(name, "Oslo", 8, 80.0, 312.0))
    kube = Kube(probe_api)
    path = f"/api/v1/nodes/{name}"

    def annotation() -> str | None:
        return (kube.request("GET", path)["metadata"].get("annotations") or {}).get(
            ADDRESS_ANNOTATION
        )

    uids: list[str] = []
    told = threading.Event()

    def on_uid(uid: str) -> None:
        uids.append(uid)
        told.set()

    directory = NodeDirectory(probe_api, name, lambda peers: None, watch_timeout_s=5)
    directory.on_uid = on_uid
    first = directory.advertise(("127.0.0.88", 7471))
    thread = directory.start()
    try:
        assert annotation() == "127.0.0.88:7471"
        kube.merge_patch(path, {"metadata": {"annotations": {ADDRESS_ANNOTATION: None}}})
        deadline = time.monotonic() + 30
        while annotation() != "127.0.0.88:7471" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert annotation() == "127.0.0.88:7471", "not written back"
        directory._readvertised = -1e9  # (the write-back's rate limit: a second one now)
        sandbox.delete_node(name)
        sandbox.add_node(Server(name, "Oslo", 8, 80.0, 312.0))
        assert told.wait(30), "the new uid was not told"
        now = kube.request("GET", path)["metadata"]
        assert uids == [now["uid"]] and now["uid"] != first
        deadline = time.monotonic() + 30
        while annotation() != "127.0.0.88:7471" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert annotation() == "127.0.0.88:7471", "not written on the node made again"
    finally:
        directory.stop()
        thread.join(10)
        sandbox.delete_node(name)
