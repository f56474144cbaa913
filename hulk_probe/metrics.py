"""Prometheus metrics of one agent, and the HTTP server for ``/metrics`` and ``/healthz``.

Exposition is prometheus-client's own (its registry and WSGI app); this module only adds
``/healthz`` beside it on the same threaded server.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)

from hulk_probe.echo import PROBE_ERROR_REASONS
from hulk_probe.estimator import Estimate

# No ``<counter>_created`` series: a third of the per-pair series the probe exports, which
# grow as the square of the nodes (a review); Prometheus needs none of them.
disable_created_metrics()

# Per-pair series: the two nodes, and their regions (the Nodes' label
# ``topology.kubernetes.io/region``; "" where a node has none), so that dashboards can
# filter and group links by region. A region is a function of its node: no more series.
PAIR = ("source", "target", "source_region", "target_region")
# the operations hulk_probe_api_errors_total counts (agent.py, discovery.py)
API_OPERATIONS = ("startup", "status", "watch-nodes")


class ProbeMetrics:
    """The agent's series. The per-pair ones carry both nodes' regions, which discovery
    tells (:meth:`set_regions`, from its own thread: a lock keeps each pair's series
    consistent with the measurer's updates on the event loop)."""

    def __init__(self, source: str, registry: CollectorRegistry | None = None) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._regions: dict[str, str] = {}  # node -> region, as discovery last told
        # target -> (source_region, target_region): the labels its series are exported under
        self._pairs: dict[str, tuple[str, str]] = {}
        self._last: dict[str, Estimate] = {}  # target -> its last estimate (re-exported)
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)
        r = self.registry
        self.latency = Gauge(
            "hulk_probe_one_way_latency_seconds",
            "Estimated one-way latency (median round trip / 2) of a 64-byte "
            "message from source to target",
            PAIR,
            registry=r,
        )
        self.samples = Gauge(
            "hulk_probe_samples", "Round trips the estimate is based on", PAIR, registry=r
        )
        self.reachable = Gauge(
            "hulk_probe_peer_reachable",
            "1 if the target answers, 0 if marked unreachable",
            PAIR,
            registry=r,
        )
        self.last_success = Gauge(
            "hulk_probe_last_success_timestamp_seconds",
            "Unix time of the last successful probe",
            PAIR,
            registry=r,
        )
        self.errors = Counter(
            "hulk_probe_errors",
            "Failed probes by reason (connect, timeout, io, garbled)",
            (*PAIR, "reason"),
            registry=r,
        )
        self.peers = Gauge("hulk_probe_peers", "Peers currently probed", ["source"], registry=r)
        self.api_writes = Counter(
            "hulk_probe_api_writes",
            "Writes to the Kubernetes API by kind (annotation, create, status)",
            ["source", "kind"],
            registry=r,
        )
        self.publish_interval = Gauge(
            "hulk_probe_publish_interval_seconds",
            "Seconds between two regular status writes, as of the last one (--publish-interval, "
            "or longer within --write-budget)",
            ["source"],
            registry=r,
        )
        self.status_bytes = Counter(
            "hulk_probe_status_write_bytes",
            "Bytes of NodeLatency status written (as sent; etcd stores about as much)",
            ["source"],
            registry=r,
        )
        self.api_errors = Counter(
            "hulk_probe_api_errors",
            "Failed Kubernetes API calls",
            ["source", "operation"],
            registry=r,
        )
        # counters are exported at 0 from the start (a peer's from when it is added):
        # increase() misses a series' first increment otherwise
        for operation in API_OPERATIONS:
            self.api_errors.labels(source, operation)

    def _labels(self, target: str) -> tuple[str, str, str, str]:
        """The labels of ``target``'s series, as exported (a new target: its region now)."""
        regions = self._pairs.get(target)
        if regions is None:
            regions = (self._regions.get(self.source, ""), self._regions.get(target, ""))
            self._pairs[target] = regions
        return (self.source, target, *regions)

    def observe(self, target: str, estimate: Estimate) -> None:
        with self._lock:
            self._last[target] = estimate
            self._observe(self._labels(target), estimate)

    def _observe(self, labels: tuple[str, ...], estimate: Estimate) -> None:
        if estimate.one_way_ms is not None:
            self.latency.labels(*labels).set(estimate.one_way_ms / 1000.0)
        else:  # no estimate (unreachable, samples dropped): no stale figure (before: the
            # last one stayed, and dashboards counted the dead link as measured)
            try:
                self.latency.remove(*labels)
            except KeyError:
                pass
        self.samples.labels(*labels).set(estimate.samples)
        if estimate.reachable is not None:
            self.reachable.labels(*labels).set(1 if estimate.reachable else 0)
        if estimate.last_success is not None:
            self.last_success.labels(*labels).set(estimate.last_success)

    def add(self, target: str) -> None:
        """A new peer: its error counters start at 0."""
        with self._lock:
            self._add(self._labels(target))

    def _add(self, labels: tuple[str, ...]) -> None:
        for reason in PROBE_ERROR_REASONS:
            self.errors.labels(*labels, reason)

    def error(self, target: str, reason: str) -> None:
        with self._lock:
            self.errors.labels(*self._labels(target), reason).inc()

    def forget(self, target: str) -> None:
        """Drop a peer that left, so its series stop being exported."""
        with self._lock:
            self._forget(target)
            self._last.pop(target, None)

    def _forget(self, target: str) -> None:
        regions = self._pairs.pop(target, None)
        if regions is None:
            return  # (never exported)
        labels = (self.source, target, *regions)
        for gauge in (self.latency, self.samples, self.reachable, self.last_success):
            try:
                gauge.remove(*labels)
            except KeyError:
                pass
        for reason in PROBE_ERROR_REASONS:
            try:
                self.errors.remove(*labels, reason)
            except KeyError:
                pass

    def set_regions(self, regions: Mapping[str, str]) -> None:
        """The nodes' regions (node -> its ``topology.kubernetes.io/region``, "" where it
        has none), as discovery sees them. A pair whose source's or target's region
        changed is exported again under its new labels, and its old series are removed
        (never left stale beside the new ones): its gauges from its last estimate, its
        error counters from 0 (a new series; ``increase()`` over the old one ends there).
        A node missing from ``regions`` keeps its label (a Node deleted: the measurer
        forgets the peer next)."""
        with self._lock:
            self._regions = dict(regions)
            source = self._regions.get(self.source)
            for target, old in list(self._pairs.items()):
                new = (
                    old[0] if source is None else source,
                    self._regions.get(target, old[1]),
                )
                if new == old:
                    continue
                self._forget(target)
                self._pairs[target] = new
                labels = (self.source, target, *new)
                self._add(labels)
                last = self._last.get(target)
                if last is not None:
                    self._observe(labels, last)


Health = Callable[[], tuple[bool, str]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_app(
    registry: CollectorRegistry, health: Health, readiness: Health | None = None
) -> Callable[..., Iterable[bytes]]:
    """``/metrics``; ``/healthz`` (``health``: the kubelet's liveness probe); ``/readyz``
    (``readiness``, else ``health``: its readiness probe)."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/readyz"):
            ok, text = (readiness or health)() if path == "/readyz" else health()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            return [text.encode() + b"\n"]
        if path in ("/metrics", "/"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics, /healthz or /readyz\n"]

    return app


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a daemon thread."""

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        health: Health,
        readiness: Health | None = None,
    ) -> None:
        server_class = _Server6 if ":" in address[0] else _Server
        self._httpd = make_server(
            address[0],
            address[1],
            make_app(registry, health, readiness),
            server_class=server_class,
            handler_class=_QuietHandler,
        )
        self.address: tuple[str, int] = self._httpd.server_address[:2]  # type: ignore[assignment]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
