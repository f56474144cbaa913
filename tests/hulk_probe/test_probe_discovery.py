"""Peers come from Node annotations; overrides redirect a peer (to a proxy, say); the
nodes' region labels go to the metrics."""

from __future__ import annotations

from typing import Any

from hulk_probe import ADDRESS_ANNOTATION
from hulk_probe.discovery import (
    REGION_LABEL,
    NodeDirectory,
    _slim,
    pair_rank,
    peers_from_nodes,
    regions_from_nodes,
    sample_peers,
)
from hulk_probe.estimator import Estimate
from hulk_probe.metrics import ProbeMetrics


def node(name: str, address: str | None = None, region: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {"other": "x"}, "labels": {"o": "y"}}
    if address is not None:
        meta["annotations"][ADDRESS_ANNOTATION] = address
    if region is not None:
        meta["labels"][REGION_LABEL] = region
    return {"metadata": meta}


def test_annotated_nodes_but_self_are_peers() -> None:
    nodes = [
        node("me", "127.0.0.2:7471"),
        node("a", "127.0.0.3:7471"),
        node("b"),
        node("c", "[::1]:9"),
        {"metadata": {"name": "d", "annotations": None}},
    ]
    assert peers_from_nodes(nodes, "me") == {"a": ("127.0.0.3", 7471), "c": ("::1", 9)}


def test_bad_annotation_is_skipped() -> None:
    assert peers_from_nodes([node("a", "no-port"), node("b", "h:1")], "me") == {"b": ("h", 1)}


def test_overrides_redirect_but_never_invent_peers() -> None:
    nodes = [node("a", "127.0.0.3:7471"), node("b", "127.0.0.4:7471")]
    overrides = {"a": ("127.0.0.1", 40001), "zzz": ("127.0.0.1", 40002)}
    assert peers_from_nodes(nodes, "me", overrides) == {
        "a": ("127.0.0.1", 40001),
        "b": ("127.0.0.4", 7471),
    }


def test_regions_come_from_the_region_label_of_every_node() -> None:
    nodes = [
        node("me", "127.0.0.2:7471", "eu-south"),
        node("a", "127.0.0.3:7471", "eu-north"),
        node("b", region="us-east"),  # (no agent: a region all the same)
        node("c", "127.0.0.4:7471"),
        {"metadata": {"name": "d", "labels": None}},
    ]
    assert regions_from_nodes(nodes) == {
        "me": "eu-south",
        "a": "eu-north",
        "b": "us-east",
        "c": "",
        "d": "",
    }
    # what discovery keeps of a Node (it keeps the slim copy) still says its region
    assert regions_from_nodes(_slim(n) for n in nodes) == regions_from_nodes(nodes)
    slim = _slim(node("a", "127.0.0.3:7471", "eu-north"))
    assert slim["metadata"]["labels"] == {REGION_LABEL: "eu-north"}  # (not the others)


class FakeKube:
    """The API calls of a NodeDirectory's list, answered from ``nodes``."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes

    def request(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/api/v1/nodes")
        return {"items": self.nodes, "metadata": {"resourceVersion": "7"}}


def test_the_directory_tells_the_regions_before_the_peers_and_follows_relabels() -> None:
    """The peers' series are made with their regions (``set_peers`` runs after
    ``on_peers``); a Node relabelled through the watch moves its pair's series, leaving
    none under the old region."""
    metrics = ProbeMetrics("me")
    get = metrics.registry.get_sample_value
    north = {
        "source": "me",
        "target": "a",
        "source_region": "eu-south",
        "target_region": "eu-north",
    }
    told: list[dict[str, Any]] = []
    made: list[float | None] = []  # the error counter under the regions, as the peer is added

    def on_peers(peers: dict[str, Any]) -> None:  # (as the measurer does on the loop)
        told.append(peers)
        for name in peers:
            metrics.add(name)
            made.append(get("hulk_probe_errors_total", {**north, "reason": "timeout"}))
            metrics.observe(name, Estimate(5.0, 3, 1_800_000_000.0, True, 0))

    directory = NodeDirectory(object(), "me", on_peers, metrics=metrics)
    directory.kube = FakeKube(  # type: ignore[assignment]
        [node("me", "127.0.0.2:7471", "eu-south"), node("a", "127.0.0.3:7471", "eu-north")]
    )
    assert directory._list() == "7"
    assert told == [{"a": ("127.0.0.3", 7471)}]
    assert made == [0.0]  # (made with its regions, not with "" and then moved)
    assert get("hulk_probe_one_way_latency_seconds", north) == 0.005
    blank = {"source": "me", "target": "a", "source_region": "", "target_region": ""}
    assert get("hulk_probe_errors_total", {**blank, "reason": "timeout"}) is None  # (never "")

    modified = node("a", "127.0.0.3:7471", "eu-west")
    modified["metadata"]["resourceVersion"] = "8"
    assert directory._apply({"type": "MODIFIED", "object": modified}) == "8"
    assert len(told) == 1  # (the same peers: none told)
    west = {**north, "target_region": "eu-west"}
    assert get("hulk_probe_one_way_latency_seconds", west) == 0.005
    for name in ("hulk_probe_one_way_latency_seconds", "hulk_probe_samples"):
        assert get(name, north) is None, name
    assert get("hulk_probe_errors_total", {**north, "reason": "timeout"}) is None
    # a change that is not the region's leaves the series alone
    other = node("a", "127.0.0.3:7471", "eu-west")
    other["metadata"]["labels"]["o"] = "z"
    directory._apply({"type": "MODIFIED", "object": other})
    metrics.error("a", "io")
    directory._apply({"type": "MODIFIED", "object": other})
    assert get("hulk_probe_errors_total", {**west, "reason": "io"}) == 1


def cluster_of(regions: dict[str, int]) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    peers, region = {}, {}
    for r, n in regions.items():
        for i in range(n):
            name = f"{r}-{i}"
            peers[name], region[name] = (f"10.0.{len(peers) // 250}.{len(peers) % 250}", 7471), r
    return peers, region


def test_sampling_probes_k_peers_of_each_region_and_keeps_them_as_nodes_come_and_go() -> None:
    """--peers-per-region: every pair is N^2 probes, statuses and series (a 3,000-node
    cluster wrote past etcd's quota within the budget's longest spacing); K of each region
    instead, chosen by the pair (rendezvous), so that a node joining or leaving moves no
    other choice."""
    peers, region = cluster_of({"paris": 30, "tokyo": 12, "lima": 2, "": 5})
    me = "paris-0"
    del peers[me]
    assert sample_peers(peers, region, me, 0) == peers  # (0: every peer)
    got = sample_peers(peers, region, me, 3)
    by: dict[str, list[str]] = {}
    for name in got:
        by.setdefault(region[name], []).append(name)
    assert {r: len(v) for r, v in by.items()} == {"paris": 3, "tokyo": 3, "lima": 2, "": 3}
    assert all(got[n] == peers[n] for n in got)
    # of another region, the pair's rank, the same from both ends: the K first
    assert pair_rank(me, "tokyo-4") == pair_rank("tokyo-4", me)
    tokyo = sorted((n for n in peers if region[n] == "tokyo"), key=lambda n: pair_rank(me, n))
    assert sorted(by["tokyo"]) == sorted(tokyo[:3])
    # a node joining or leaving changes no other region's choice, in its own one at most
    for gone in ("tokyo-5", by["tokyo"][0], "paris-7", by["paris"][1]):
        fewer = {n: a for n, a in peers.items() if n != gone}
        after = sample_peers(fewer, region, me, 3)
        assert len(set(got) ^ set(after)) <= 2 and gone not in after
        assert {n for n in after if region[n] != region[gone]} == {
            n for n in got if region[n] != region[gone]
        }
    # every node is probed by exactly K of its own region (its ring's K before it), so
    # that a node lost is reported from its own region (the operator's cut_off)
    everyone, _ = cluster_of({"paris": 30, "tokyo": 12, "lima": 2, "": 5})
    near = {n: 0 for n in everyone}
    for a in everyone:
        others = {n: x for n, x in everyone.items() if n != a}
        for n in sample_peers(others, region, a, 3):
            near[n] += region[n] == region[a]
    assert all(near[n] == min(3, sum(1 for m in region if region[m] == region[n]) - 1)
               for n in everyone), near  # fmt: skip


def test_a_sampling_directory_tells_the_sample_and_counts_every_agent() -> None:
    """The write budget's share is of every agent (an agent of a sampling cluster counted
    only its K per region, and wrote as if the cluster were that small)."""
    told: list[dict[str, Any]] = []
    nodes = [node("me", "127.0.0.2:7471", "eu")]
    nodes += [node(f"e{i}", f"127.0.1.{i}:7471", "eu") for i in range(6)]
    nodes += [node(f"u{i}", f"127.0.2.{i}:7471", "us") for i in range(4)]
    nodes += [node("idle", region="us")]  # (no agent: not counted)
    directory = NodeDirectory(object(), "me", told.append, per_region=2)
    directory.kube = FakeKube(nodes)  # type: ignore[assignment]
    directory._list()
    assert len(told) == 1 and len(told[0]) == 4 and directory.agents == 11
    assert sum(1 for n in told[0] if n.startswith("u")) == 2
