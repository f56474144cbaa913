"""The Hulk paper's measured latencies published into a sandbox as ``NodeLatency`` objects.

A sandbox runs no probe agents (every node is this machine), so the operator would plan on
estimated links alone. :func:`publish_paper` replays the paper's measurements for the
paper's nodes that are there, in the shape the probe writes (``hulk_probe.replay``), and its
pairs without a link (they cannot communicate) as unreachable reports. ``hulk demo`` and
``hulk sandbox latencies`` use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hulk_planner.datasets import paper_cluster


@dataclass(frozen=True)
class Published:
    nodes: int  # the paper's nodes there, whose reports were written
    links: int  # measured pairs among them
    cut: int  # pairs among them without a link, reported unreachable
    others: tuple[str, ...]  # nodes there that are not the paper's (no measurement)


def paper_rows() -> dict[str, dict[str, float | None]]:
    """``rows[a][b]``: the paper's one-way latency in ms between servers ``a`` and ``b``,
    None where it lists no link."""
    paper = paper_cluster()
    servers = [s.name for s in paper.servers]
    rows: dict[str, dict[str, float | None]] = {
        a: {b: None for b in servers if b != a} for a in servers
    }
    for link in paper.links:
        rows[link.a][link.b] = link.latency_ms
        rows[link.b][link.a] = link.latency_ms
    return rows


def publish_paper(api: Any, timeout_s: float = 10.0) -> Published:
    """Writes the NodeLatency reports of the paper's nodes there now (each owned by its
    Node, so a deleted node's goes with it), once; the NodeLatency CRD must be installed."""
    from kubernetes import client

    from hulk_probe.replay import publish_latencies

    nodes = client.CoreV1Api(api).list_node(_request_timeout=timeout_s).items
    here = {str(n.metadata.name): str(n.metadata.uid) for n in nodes if n.metadata}
    rows = paper_rows()
    kept = {a: {b: v for b, v in row.items() if b in here} for a, row in rows.items() if a in here}
    publish_latencies(api, kept, owners=here, timeout_s=timeout_s)
    pairs = [(a, b) for a, row in kept.items() for b, v in row.items() if a < b]
    links = sum(1 for a, b in pairs if kept[a][b] is not None)
    return Published(len(kept), links, len(pairs) - links, tuple(sorted(set(here) - set(kept))))
