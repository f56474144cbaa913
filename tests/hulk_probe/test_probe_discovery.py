"""Peers come from Node annotations; overrides redirect a peer (to a proxy, say)."""

from __future__ import annotations

from typing import Any

from hulk_probe import ADDRESS_ANNOTATION
from hulk_probe.discovery import peers_from_nodes


def node(name: str, address: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {"other": "x"}}
    if address is not None:
        meta["annotations"][ADDRESS_ANNOTATION] = address
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
