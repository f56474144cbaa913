"""/metrics (prometheus-client's exposition) and /healthz on one small server."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from hulk_probe.echo import PROBE_ERROR_REASONS
from hulk_probe.estimator import Estimate
from hulk_probe.metrics import MetricsServer, ProbeMetrics


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# the pairs' labels where no Node told its region
N1 = 'source="beijing-0",source_region="",target="nanjing-1",target_region=""'
N2 = 'source="beijing-0",source_region="",target="nanjing-2",target_region=""'

Served = tuple[ProbeMetrics, str, list[bool]]


@pytest.fixture
def served() -> Iterator[Served]:
    metrics = ProbeMetrics("beijing-0")
    healthy = [True]
    server = MetricsServer(
        ("127.0.0.1", 0), metrics.registry, lambda: (healthy[0], "ok" if healthy[0] else "stuck")
    ).start()
    yield metrics, f"http://127.0.0.1:{server.address[1]}", healthy
    server.close()


def test_metrics_exposition(served: Served) -> None:
    metrics, url, _ = served
    metrics.observe("nanjing-1", Estimate(12.5, 7, 1_800_000_000.0, True, 0))
    metrics.error("nanjing-2", "timeout")
    status, text = fetch(url + "/metrics")
    assert status == 200
    assert f"hulk_probe_one_way_latency_seconds{{{N1}}} 0.0125" in text
    assert f"hulk_probe_samples{{{N1}}} 7.0" in text
    assert f"hulk_probe_peer_reachable{{{N1}}} 1.0" in text
    assert f"hulk_probe_last_success_timestamp_seconds{{{N1}}} 1.8e+09" in text
    assert f'hulk_probe_errors_total{{reason="timeout",{N2}}} 1.0' in text
    assert "process_resident_memory_bytes" in text
    # no <counter>_created series: a third of the per-pair ones, which grow as the square
    # of the nodes (a review)
    assert "_created" not in text


def test_a_peer_that_became_unreachable_exports_no_latency(served: Served) -> None:
    """Before, its last figure stayed beside ``samples 0`` and ``reachable 0`` (a user
    trial): dashboards counted the dead link as measured."""
    metrics, url, _ = served
    metrics.observe("nanjing-1", Estimate(12.5, 7, 1_800_000_000.0, True, 0))
    metrics.observe("nanjing-1", Estimate(None, 0, 1_800_000_000.0, False, 5))
    _, text = fetch(url + "/metrics")
    assert "hulk_probe_one_way_latency_seconds{" not in text, text
    assert f"hulk_probe_peer_reachable{{{N1}}} 0.0" in text
    metrics.observe("nanjing-1", Estimate(None, 0, None, None, 0))  # (none to drop: no error)
    metrics.observe("nanjing-1", Estimate(9.0, 3, 1_800_000_100.0, True, 0))  # back
    _, text = fetch(url + "/metrics")
    assert f"hulk_probe_one_way_latency_seconds{{{N1}}} 0.009" in text


def test_healthz_follows_the_agent(served: Served) -> None:
    _, url, healthy = served
    assert fetch(url + "/healthz") == (200, "ok\n")
    healthy[0] = False
    assert fetch(url + "/healthz") == (503, "stuck\n")
    assert fetch(url + "/nope")[0] == 404


def test_readyz_is_its_own_check_and_healthz_where_none_is_given(served: Served) -> None:
    _, url, healthy = served
    assert fetch(url + "/readyz") == (200, "ok\n")  # (no readiness given: health's)
    healthy[0] = False
    assert fetch(url + "/readyz") == (503, "stuck\n")
    metrics = ProbeMetrics("beijing-0")
    started = [False]
    server = MetricsServer(
        ("127.0.0.1", 0),
        metrics.registry,
        lambda: (True, "ok"),
        lambda: (started[0], "ready" if started[0] else "starting"),
    ).start()
    try:
        base = f"http://127.0.0.1:{server.address[1]}"
        assert fetch(base + "/healthz") == (200, "ok\n")
        assert fetch(base + "/readyz") == (503, "starting\n")
        started[0] = True
        assert fetch(base + "/readyz") == (200, "ready\n")
    finally:
        server.close()


# ---- region labels ----------------------------------------------------------------------

PER_PAIR = (
    "hulk_probe_one_way_latency_seconds",
    "hulk_probe_samples",
    "hulk_probe_peer_reachable",
    "hulk_probe_last_success_timestamp_seconds",
    "hulk_probe_errors_total",
)
SEEN = Estimate(12.5, 7, 1_800_000_000.0, True, 0)


def pair_series(metrics: ProbeMetrics) -> list[tuple[str, dict[str, str], float]]:
    """Every per-pair sample the registry exports: (name, labels, value)."""
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name in PER_PAIR
    ]


def regions_of(metrics: ProbeMetrics, target: str) -> set[tuple[str, str]]:
    """The (source_region, target_region) of every series of the pair to ``target``."""
    return {
        (labels["source_region"], labels["target_region"])
        for _, labels, _ in pair_series(metrics)
        if labels["target"] == target
    }


def one_series_per_pair(metrics: ProbeMetrics) -> None:
    """Each metric has one series per (source, target) (per reason for the errors)."""
    keys = [
        (name, labels["source"], labels["target"], labels.get("reason"))
        for name, labels, _ in pair_series(metrics)
    ]
    assert keys and len(keys) == len(set(keys)), sorted(keys)


def test_pair_series_carry_the_nodes_regions() -> None:
    metrics = ProbeMetrics("beijing-0")
    metrics.set_regions({"beijing-0": "cn-north", "nanjing-1": "cn-east", "bare-2": ""})
    for target in ("nanjing-1", "bare-2", "unknown-3"):
        metrics.add(target)
        metrics.observe(target, SEEN)
    metrics.error("nanjing-1", "timeout")
    labels = {
        "source": "beijing-0",
        "target": "nanjing-1",
        "source_region": "cn-north",
        "target_region": "cn-east",
    }
    get = metrics.registry.get_sample_value
    assert get("hulk_probe_one_way_latency_seconds", labels) == 0.0125
    assert get("hulk_probe_samples", labels) == 7
    assert get("hulk_probe_peer_reachable", labels) == 1
    assert get("hulk_probe_last_success_timestamp_seconds", labels) == 1.8e9
    assert get("hulk_probe_errors_total", {**labels, "reason": "timeout"}) == 1
    # every per-pair metric has the labels, and a node without a region label (or one
    # discovery has not seen) gets ""
    for target, regions in (
        ("nanjing-1", ("cn-north", "cn-east")),
        ("bare-2", ("cn-north", "")),
        ("unknown-3", ("cn-north", "")),
    ):
        named = {name for name, lab, _ in pair_series(metrics) if lab["target"] == target}
        assert named == set(PER_PAIR), named
        assert regions_of(metrics, target) == {regions}
    one_series_per_pair(metrics)
    text = generate_latest(metrics.registry).decode()
    assert (
        'hulk_probe_one_way_latency_seconds{source="beijing-0",source_region="cn-north",'
        'target="bare-2",target_region=""} 0.0125' in text
    )


def test_a_region_change_drops_the_pair_s_old_series() -> None:
    metrics = ProbeMetrics("beijing-0")
    metrics.set_regions({"beijing-0": "cn-north", "nanjing-1": "cn-east", "rome-2": "eu"})
    for target in ("nanjing-1", "rome-2"):
        metrics.add(target)
        metrics.observe(target, SEEN)
        metrics.error(target, "io")
    before = len(pair_series(metrics))
    # nanjing-1 relabelled: its series move, rome-2's stay as they are
    metrics.set_regions({"beijing-0": "cn-north", "nanjing-1": "cn-south", "rome-2": "eu"})
    assert regions_of(metrics, "nanjing-1") == {("cn-north", "cn-south")}
    assert regions_of(metrics, "rome-2") == {("cn-north", "eu")}
    assert len(pair_series(metrics)) == before
    one_series_per_pair(metrics)
    get = metrics.registry.get_sample_value
    old = {"source": "beijing-0", "target": "nanjing-1", "source_region": "cn-north"}
    assert get("hulk_probe_peer_reachable", {**old, "target_region": "cn-east"}) is None
    moved = {**old, "target_region": "cn-south"}
    # the gauges keep the last estimate (no gap until the next probe); the counters start
    # again from 0 (a new series)
    assert get("hulk_probe_one_way_latency_seconds", moved) == 0.0125
    assert get("hulk_probe_last_success_timestamp_seconds", moved) == 1.8e9
    assert get("hulk_probe_errors_total", {**moved, "reason": "io"}) == 0
    kept = {"source": "beijing-0", "target": "rome-2", "source_region": "cn-north"}
    assert get("hulk_probe_errors_total", {**kept, "target_region": "eu", "reason": "io"}) == 1
    # later figures go to the new series only
    metrics.observe("nanjing-1", Estimate(9.0, 8, 1_800_000_100.0, True, 0))
    assert get("hulk_probe_one_way_latency_seconds", moved) == 0.009
    one_series_per_pair(metrics)
    # our own node relabelled: every pair moves
    metrics.set_regions({"beijing-0": "cn-west", "nanjing-1": "cn-south", "rome-2": "eu"})
    assert regions_of(metrics, "nanjing-1") == {("cn-west", "cn-south")}
    assert regions_of(metrics, "rome-2") == {("cn-west", "eu")}
    assert len(pair_series(metrics)) == before
    one_series_per_pair(metrics)
    # its label removed: ""
    metrics.set_regions({"beijing-0": "cn-west", "nanjing-1": "", "rome-2": "eu"})
    assert regions_of(metrics, "nanjing-1") == {("cn-west", "")}
    one_series_per_pair(metrics)


def test_a_node_gone_keeps_its_labels_until_forgotten() -> None:
    """A deleted Node leaves the regions before the measurer forgets its peer: its series
    are not moved to "" for that moment, and are all gone once it is forgotten."""
    metrics = ProbeMetrics("beijing-0")
    metrics.set_regions({"beijing-0": "cn-north", "nanjing-1": "cn-east"})
    metrics.add("nanjing-1")
    metrics.observe("nanjing-1", Estimate(None, 0, None, False, 3))  # (unreachable)
    metrics.set_regions({"beijing-0": "cn-north"})
    assert regions_of(metrics, "nanjing-1") == {("cn-north", "cn-east")}
    metrics.set_regions({"beijing-0": "cn-north", "nanjing-1": "cn-south"})  # (moved)
    assert regions_of(metrics, "nanjing-1") == {("cn-north", "cn-south")}
    assert not [n for n, _, _ in pair_series(metrics) if n == "hulk_probe_one_way_latency_seconds"]
    metrics.forget("nanjing-1")
    assert pair_series(metrics) == []
    # (come back: exported under its region as now known, errors from 0)
    metrics.add("nanjing-1")
    assert regions_of(metrics, "nanjing-1") == {("cn-north", "cn-south")}
    assert len(pair_series(metrics)) == len(PROBE_ERROR_REASONS)
