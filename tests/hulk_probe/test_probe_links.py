"""NodeLatency objects -> undirected links: freshness, both directions, vetoes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hulk_probe.links import links_from_node_latencies, planner_links

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def entry(node: str, ms: float | None, age: float = 1.0, reachable: bool = True) -> dict[str, Any]:
    e: dict[str, Any] = {
        "node": node,
        "reachable": reachable,
        "samples": 5,
        "lastUpdated": ago(age),
    }
    if ms is not None:
        e["latencyMs"] = ms
    return e


def obj(name: str, *peers: dict[str, Any], published_age: float = 1.0) -> dict[str, Any]:
    return {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "NodeLatency",
        "metadata": {"name": name},
        "status": {"lastPublished": ago(published_age), "peers": list(peers)},
    }


def test_both_fresh_directions_are_averaged() -> None:
    links = links_from_node_latencies(
        [obj("a", entry("b", 10.0)), obj("b", entry("a", 14.0))], NOW, max_age_s=30
    )
    assert links == {frozenset({"a", "b"}): pytest.approx(12.0)}


def test_one_fresh_direction_is_enough() -> None:
    links = links_from_node_latencies(
        [obj("a", entry("b", 10.0)), obj("b", entry("a", 99.0, age=120))], NOW, max_age_s=30
    )
    assert links == {frozenset({"a", "b"}): pytest.approx(10.0)}


def test_stale_entries_are_missing() -> None:
    links = links_from_node_latencies(
        [obj("a", entry("b", 10.0, age=31), entry("c", 3.0, age=29))], NOW, max_age_s=30
    )
    assert links == {frozenset({"a", "c"}): pytest.approx(3.0)}


def test_fresh_unreachable_report_vetoes_the_link() -> None:
    down = entry("a", None, age=500, reachable=False)
    links = links_from_node_latencies([obj("a", entry("b", 10.0)), obj("b", down)], NOW, 30)
    assert links == {}
    # ...but a stale unreachable report (its agent stopped publishing) does not
    links = links_from_node_latencies(
        [obj("a", entry("b", 10.0)), obj("b", down, published_age=300)], NOW, 30
    )
    assert links == {frozenset({"a", "b"}): pytest.approx(10.0)}


@pytest.mark.parametrize(
    "bad",
    [
        {"node": "b", "reachable": True, "samples": 1},  # no latency
        {"node": "b", "latencyMs": 5.0, "reachable": True, "samples": 1},  # no timestamp
        {"node": "b", "latencyMs": -1.0, "reachable": True, "lastUpdated": ago(1)},
        {"node": "b", "latencyMs": float("nan"), "reachable": True, "lastUpdated": ago(1)},
        {"node": "b", "latencyMs": "5", "reachable": True, "lastUpdated": ago(1)},
        {"node": "b", "latencyMs": 5.0, "lastUpdated": ago(1)},  # reachable unsaid
        {"node": "b", "latencyMs": 5.0, "reachable": True, "lastUpdated": "yesterday"},
        {"node": "a", "latencyMs": 5.0, "reachable": True, "lastUpdated": ago(1)},  # self
    ],
)
def test_malformed_entries_are_ignored(bad: dict[str, Any]) -> None:
    assert links_from_node_latencies([obj("a", bad)], NOW, 30) == {}


def test_objects_without_status_and_naive_now() -> None:
    objects = [{"metadata": {"name": "x"}}, obj("a", entry("b", 2.5))]
    naive_now = NOW.replace(tzinfo=None)
    assert links_from_node_latencies(objects, naive_now, 30) == {
        frozenset({"a", "b"}): pytest.approx(2.5)
    }


def test_planner_links_are_sorted_dicts() -> None:
    objects = [
        obj("c", entry("a", 1.0)),
        obj("b", entry("a", 2.0), entry("c", 3.0)),
        obj("a", entry("b", 4.0)),
    ]
    assert planner_links(objects, NOW, 30) == [
        {"a": "a", "b": "b", "latencyMs": 3.0},
        {"a": "a", "b": "c", "latencyMs": 1.0},
        {"a": "b", "b": "c", "latencyMs": 3.0},
    ]


def test_a_latency_past_the_planners_bound_is_ignored() -> None:
    """89 ms written in ns (89,000,000) had failed every planning round (a trial)."""
    objs = [obj("a", entry("b", 89_000_000.0)), obj("b", entry("a", 3.0))]
    assert links_from_node_latencies(objs, NOW, 60) == {frozenset("ab"): 3.0}
    objs = [obj("a", entry("b", 1e308)), obj("b", entry("a", 1e308))]
    assert links_from_node_latencies(objs, NOW, 60) == {}


def test_an_entry_from_the_future_past_the_skew_is_stale() -> None:
    objs = [obj("a", entry("b", 3.0, age=-3600.0))]
    assert links_from_node_latencies(objs, NOW, 60) == {}
    objs = [obj("a", entry("b", 3.0, age=-60.0))]  # within FUTURE_SKEW_S
    assert links_from_node_latencies(objs, NOW, 60) == {frozenset("ab"): 3.0}
