"""Prometheus metrics (prometheus-client), served on ``--metrics-port``.

- ``hulk_plans_total{result}``: plans per job by result (placed, unplaced), counted once
  per decision.
- ``hulk_planning_seconds``: time the planner took per round (histogram).
- ``hulk_replans_total{reason}``: re-plans of running jobs by cause.
- ``hulk_stage_failures_total{action}``: stage pods ended as Failed, by what the operator
  did (``restarted``: created again; ``job_failed``: the job failed, by restartPolicy
  Never or past ``spec.backoffLimit``).
- ``hulk_jobs{phase}``: jobs by phase.
- ``hulk_job_waiting{namespace,job}``: 1 while a job is Pending or Placing; no series
  otherwise (HulkJobPending's ``for`` is then one job's wait).
- ``hulk_predicted_iteration_seconds{namespace,job}``: the planner's predicted step time.
- ``hulk_job_free_speedup{namespace,job}``: how many times faster a running job's step
  would be planned afresh on its servers plus the free ones (the operator's last look,
  ``regrow``); a series only where that is faster, until the job's plan changes.
- ``hulk_operator_active``: 1 while this replica acts, 0 while a peer pauses it; and the
  ``process_*`` series (its memory and CPU).

No ``<counter>_created`` series (as the probe: Prometheus needs none). Every counter's
label values are exported at 0 from the start (``increase()`` misses a series' first
increment otherwise).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)

from hulk_operator.recovery import LOSS_REASONS
from hulk_operator.regrow import REASON as REGROWN
from hulk_operator.status import PENDING, PHASES, PLACING

disable_created_metrics()  # (they were exported, and documented nowhere: a review)

PLAN_RESULTS = ("placed", "unplaced")
STAGE_FAILURE_ACTIONS = ("restarted", "job_failed")
WAITING = frozenset({PENDING, PLACING})  # the phases hulk_job_waiting marks


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._served: tuple[str, int] | None = None
        self._server: Any = None  # (prometheus_client's WSGI server, once serving)
        self._waiting: set[tuple[str, str]] = set()  # the jobs hulk_job_waiting has
        # set while a peer pauses this replica (``pauses.PAUSED_NOW``): no per-job figure
        # is written then (a reconciliation in flight when the pause came wrote one after
        # ``clear_jobs``, and the paused replica exported it for good)
        self.paused = threading.Event()
        r = self.registry
        self.plans = Counter("hulk_plans_total", "Planning results per job", ["result"], registry=r)
        self.planning_seconds = Histogram(
            "hulk_planning_seconds",
            "Seconds per planning round",
            registry=r,
            # (up to 10 min: a planning budget of minutes read as 60 s in quantiles before)
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
        )
        self.replans = Counter(
            "hulk_replans_total", "Re-plans of running jobs", ["reason"], registry=r
        )
        self.stage_failures = Counter(
            "hulk_stage_failures_total",
            "Stage pods the kubelet ended as Failed, by the operator's action",
            ["action"],
            registry=r,
        )
        self.jobs = Gauge("hulk_jobs", "HulkTrainingJobs by phase", ["phase"], registry=r)
        # Every label value a counter can take is exported from the start, at 0: a series
        # first scraped at 1 has no earlier sample, and increase() over it stays 0 (the
        # first job failure since the operator started would never fire HulkJobFailed).
        for result in PLAN_RESULTS:
            self.plans.labels(result=result)
        for reason in (*LOSS_REASONS, REGROWN):
            self.replans.labels(reason=reason)
        for action in STAGE_FAILURE_ACTIONS:
            self.stage_failures.labels(action=action)
        # a series per job while it waits (Pending or Placing), removed once it does not:
        # HulkJobPending fires for a job that waited pendingFor, not whenever the queue was
        # never empty (hulk_jobs counts jobs, not how long one waited: a review)
        self.waiting = Gauge(
            "hulk_job_waiting",
            "1 while a HulkTrainingJob is Pending or Placing (no series otherwise)",
            ["namespace", "job"],
            registry=r,
        )
        self.predicted = Gauge(
            "hulk_predicted_iteration_seconds",
            "Predicted seconds per training iteration",
            ["namespace", "job"],
            registry=r,
        )
        self.free_speedup = Gauge(
            "hulk_job_free_speedup",
            "How many times faster a running job's step would be on its servers plus the free "
            "ones (the last look; no series unless faster)",
            ["namespace", "job"],
            registry=r,
        )
        self._predicted: dict[tuple[str, str], float] = {}  # the last figure set, per job
        # which replica acts: 1 while this one is not paused by a peer (its standby says 0)
        Gauge(
            "hulk_operator_active",
            "1 while this operator replica acts, 0 while a peer of higher priority pauses it",
            registry=r,
        ).set_function(lambda: 0.0 if self.paused.is_set() else 1.0)
        # its own memory and CPU, as the probe exports them (process_resident_memory_bytes:
        # the chart's memory limit is to be raised at scale; before, nothing to watch it by)
        ProcessCollector(registry=r)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serves the figures on ``port`` (once: kopf run again keeps serving them)."""
        if self._served == (addr, port):
            return
        self._server, _ = start_http_server(port, addr=addr, registry=self.registry)
        self._served = (addr, port)

    def close(self) -> None:
        """Stops serving the figures (a test's; an operator serves them until it exits)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._server, self._served = None, None

    def clear_jobs(self) -> None:
        """Drops the per-job figures (a replica paused by a peer: they go stale)."""
        self.jobs.clear()
        self.predicted.clear()
        self.free_speedup.clear()
        self._predicted = {}
        self.waiting.clear()
        self._waiting = set()

    def set_phases(self, jobs: Iterable[tuple[tuple[str, str], str]]) -> None:
        """``hulk_jobs`` and ``hulk_job_waiting`` from every job's (namespace, name) and
        phase."""
        if self.paused.is_set():
            return
        counts: dict[str, int] = dict.fromkeys(PHASES, 0)
        waiting: set[tuple[str, str]] = set()
        for key, p in jobs:
            counts[p] = counts.get(p, 0) + 1
            if p in WAITING:
                waiting.add(key)
        for phase, n in counts.items():
            self.jobs.labels(phase=phase).set(n)
        for namespace, job in self._waiting - waiting:
            try:
                self.waiting.remove(namespace, job)
            except KeyError:
                pass
        for namespace, job in waiting - self._waiting:
            self.waiting.labels(namespace=namespace, job=job).set(1)
        self._waiting = waiting

    def set_predicted(self, namespace: str, job: str, seconds: float | None) -> None:
        """The job's predicted step (None: it has no plan); a new figure (a new plan)
        drops its ``hulk_job_free_speedup``, which was measured against the old one."""
        if self.paused.is_set():
            return
        known = self._predicted.get((namespace, job))
        if seconds is None or (known is not None and known != seconds):
            # (not where none was known: after a restart the first figure set is the plan
            # the speedup was just measured against; before, it was dropped: a review)
            self.set_free_speedup(namespace, job, None)
        if seconds is None:
            self._predicted.pop((namespace, job), None)
            try:
                self.predicted.remove(namespace, job)
            except KeyError:
                pass
        else:
            self._predicted[(namespace, job)] = seconds
            self.predicted.labels(namespace=namespace, job=job).set(seconds)

    def set_free_speedup(self, namespace: str, job: str, speedup: float | None) -> None:
        """How many times faster the last look's plan is: a series only where above 1."""
        if self.paused.is_set():
            return
        if speedup is not None and speedup > 1:
            self.free_speedup.labels(namespace=namespace, job=job).set(speedup)
            return
        try:
            self.free_speedup.remove(namespace, job)
        except KeyError:
            pass

    def text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


def labels_of(samples: Mapping[str, float]) -> list[str]:  # pragma: no cover - helper for docs
    return sorted(samples)
