"""Peers come from Node annotations; overrides redirect a peer (to a proxy, say); the
nodes' region labels go to the metrics."""

from __future__ import annotations

from typing import Any

from hulk_probe import ADDRESS_ANNOTATION
from hulk_probe.discovery import (
    REGION_LABEL,
    NodeDirectory,
    _slim,
    peers_from_nodes,
    regions_from_nodes,
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
