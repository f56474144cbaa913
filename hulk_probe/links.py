"""From published ``NodeLatency`` objects to the topology's undirected links.

This is the one function the operator calls (pure: objects in, links out)::

    items = custom_api.list_cluster_custom_object("hulk.dev", "v1alpha1", "nodelatencies")
    links = links_from_node_latencies(items["items"], datetime.now(UTC), max_age_s=60)

Rules:

- Each object is its node's view: ``status.peers[*]`` holds the one-way latency (half the
  median round trip of a 64-byte message) from that node to a peer.
- An entry counts only if it says ``reachable: true``, has a finite ``latencyMs >= 0``, and
  its ``lastUpdated`` (the time of its last successful probe) is at most ``max_age_s`` old.
  Anything else is stale or missing and is ignored, never guessed.
- A link {a, b} takes the **mean of the two directions** when both are fresh, or the one
  fresh direction when only one is.
- A fresh *unreachable* report vetoes the link, whatever the other direction says: a pair
  that cannot talk both ways cannot train together. (The report is fresh when its object's
  ``status.lastPublished`` is at most ``max_age_s`` old.)
- Self-entries are ignored. A sensible ``max_age_s`` is a few publish intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

Link = frozenset[str]


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _fresh(text: Any, now: datetime, max_age_s: float) -> bool:
    moment = _parse_time(text)
    return moment is not None and (now - moment).total_seconds() <= max_age_s


def _latency(entry: Mapping[str, Any]) -> float | None:
    value = entry.get("latencyMs")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def links_from_node_latencies(
    objects: Iterable[Mapping[str, Any]], now: datetime, max_age_s: float
) -> dict[Link, float]:
    """``{frozenset({a, b}): one-way latency in ms}`` for every pair with fresh data."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    directed: dict[tuple[str, str], float] = {}
    vetoed: set[Link] = set()
    for obj in objects:
        source = (obj.get("metadata") or {}).get("name")
        status = obj.get("status") or {}
        if not source:
            continue
        report_fresh = _fresh(status.get("lastPublished"), now, max_age_s)
        for entry in status.get("peers") or []:
            target = entry.get("node")
            if not isinstance(target, str) or not target or target == source:
                continue
            if entry.get("reachable") is False:
                if report_fresh:
                    vetoed.add(frozenset((source, target)))
                continue
            latency = _latency(entry)
            if (
                entry.get("reachable") is True
                and latency is not None
                and _fresh(entry.get("lastUpdated"), now, max_age_s)
            ):
                directed[(source, target)] = latency
    links: dict[Link, float] = {}
    for (a, b), ms in directed.items():
        key = frozenset((a, b))
        if key in vetoed or key in links:
            continue
        back = directed.get((b, a))
        links[key] = ms if back is None else (ms + back) / 2.0
    return links


def planner_links(
    objects: Iterable[Mapping[str, Any]], now: datetime, max_age_s: float
) -> list[dict[str, Any]]:
    """The same links as the planner's ``ClusterTopology`` wants them:
    ``[{"a": ..., "b": ..., "latencyMs": ...}]``, sorted, with ``a < b``."""
    links = links_from_node_latencies(objects, now, max_age_s)
    rows = []
    for key, ms in links.items():
        a, b = sorted(key)
        rows.append({"a": a, "b": b, "latencyMs": round(ms, 3)})
    return sorted(rows, key=lambda row: (row["a"], row["b"]))
