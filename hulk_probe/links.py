"""From published ``NodeLatency`` objects to the topology's undirected links.

This is the one function the operator calls (pure: objects in, links out)::

    items = custom_api.list_cluster_custom_object("hulk.dev", "v1alpha1", "nodelatencies")
    links = links_from_node_latencies(items["items"], datetime.now(UTC), max_age_s=60)

Rules:

- Each object is its node's view: ``status.peers[*]`` holds the one-way latency (half the
  median round trip of a 64-byte message) from that node to a peer.
- An entry counts only if it says ``reachable: true``, has a finite ``latencyMs`` from 0 to
  ``MAX_LATENCY_MS``, and its ``lastUpdated`` (the time of its last successful probe) is at
  most ``max_age_s`` old and at most ``FUTURE_SKEW_S`` ahead of now. Anything else is
  stale, out of range or missing and is ignored, never guessed. (A value past the
  planner's bound, e.g. 89 ms written in ns, had stopped every planning round; a time in
  the future never went stale: a user trial.)
- A link {a, b} takes the **mean of the two directions** when both are fresh, or the one
  fresh direction when only one is.
- A fresh *unreachable* report vetoes the link, whatever the other direction says: a pair
  that cannot talk both ways cannot train together. (The report is fresh when its object's
  ``status.lastPublished`` is at most ``max_age_s`` old.)
- Self-entries are ignored. A sensible ``max_age_s`` is a few publish intervals.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

Link = frozenset[str]
MAX_LATENCY_MS = 1e7  # the planner's bound (hulk_planner.model.MAX_LATENCY_MS): about 3 h
FUTURE_SKEW_S = 120.0  # a report this far ahead of now is from a clock that is wrong


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def fresh(text: Any, now: datetime, max_age_s: float) -> bool:
    """Whether the time ``text`` is at most ``max_age_s`` old and not in the future (past
    ``FUTURE_SKEW_S``: a node whose clock runs ahead kept its figures fresh for as long)."""
    moment = parse_time(text)
    if moment is None:
        return False
    age = (now - moment).total_seconds()
    return -FUTURE_SKEW_S <= age <= max_age_s


def _latency(entry: Mapping[str, Any]) -> float | None:
    value = entry.get("latencyMs")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and 0 <= value <= MAX_LATENCY_MS else None


def links_from_node_latencies(
    objects: Iterable[Mapping[str, Any]], now: datetime, max_age_s: float
) -> dict[Link, float]:
    """``{frozenset({a, b}): one-way latency in ms}`` for every pair with fresh data."""
    return links_from_directed(*directed_latencies(objects, now, max_age_s))


def directed_latencies(
    objects: Iterable[Mapping[str, Any]], now: datetime, max_age_s: float
) -> tuple[dict[tuple[str, str], float], set[Link]]:
    """(``{(source, target): one-way ms}`` of every fresh measurement, the pairs a fresh
    report marks unreachable): what ``links_from_node_latencies`` makes its links of (the
    operator also reads which nodes another node measures)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    directed: dict[tuple[str, str], float] = {}
    vetoed: set[Link] = set()
    for obj in objects:
        source = (obj.get("metadata") or {}).get("name")
        status = obj.get("status") or {}
        if not source:
            continue
        report_fresh = fresh(status.get("lastPublished"), now, max_age_s)
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
                and fresh(entry.get("lastUpdated"), now, max_age_s)
            ):
                directed[(source, target)] = latency
    return directed, vetoed


def links_from_directed(
    directed: Mapping[tuple[str, str], float], vetoed: Collection[Link]
) -> dict[Link, float]:
    """``directed_latencies``' as undirected links: the mean of both directions where both
    are measured, none where a fresh report vetoes the pair."""
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
