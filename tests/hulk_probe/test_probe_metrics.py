"""/metrics (prometheus-client's exposition) and /healthz on one small server."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from hulk_probe.estimator import Estimate
from hulk_probe.metrics import MetricsServer, ProbeMetrics


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


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
    assert (
        'hulk_probe_one_way_latency_seconds{source="beijing-0",target="nanjing-1"} 0.0125' in text
    )
    assert 'hulk_probe_samples{source="beijing-0",target="nanjing-1"} 7.0' in text
    assert 'hulk_probe_peer_reachable{source="beijing-0",target="nanjing-1"} 1.0' in text
    assert (
        'hulk_probe_last_success_timestamp_seconds{source="beijing-0",target="nanjing-1"} '
        "1.8e+09" in text
    )
    assert (
        'hulk_probe_errors_total{reason="timeout",source="beijing-0",target="nanjing-2"} '
        "1.0" in text
    )
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
    assert 'hulk_probe_peer_reachable{source="beijing-0",target="nanjing-1"} 0.0' in text
    metrics.observe("nanjing-1", Estimate(None, 0, None, None, 0))  # (none to drop: no error)
    metrics.observe("nanjing-1", Estimate(9.0, 3, 1_800_000_100.0, True, 0))  # back
    _, text = fetch(url + "/metrics")
    assert 'hulk_probe_one_way_latency_seconds{source="beijing-0",target="nanjing-1"} 0.009' in text


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
