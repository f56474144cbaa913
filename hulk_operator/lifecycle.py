"""The operator's own lifecycle handlers: how kopf connects (``operator_login``), the
settings tuned once at start and the shared state every job's handlers use
(``operator_startup``), the clean stop (``operator_cleanup``), and the liveness probes.
Registered with kopf when ``hulk_operator.handlers`` imports this module."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from hulk_operator import crd, kube
from hulk_operator.config import OperatorConfig
from hulk_operator.entries import Key
from hulk_operator.exits import Exits
from hulk_operator.indexes import Listings, NodeView
from hulk_operator.metrics import Metrics
from hulk_operator.pauses import PAUSED_NOW
from hulk_operator.placement import Placer
from hulk_planner.api import USES_GNN
from hulk_planner.gnn.planner import WEIGHTS_ENV, default_weights, untrained

INTERVAL_S = float(os.environ.get("HULK_OPERATOR_RECONCILE_INTERVAL_S") or 1.0)
# kopf's record of the spec its handlers last took (an annotation), read by the timer too
DIFFBASE = kopf.AnnotationsDiffBaseStorage(prefix="hulk.dev", key="last-handled-configuration")
EVENT_SOURCE = "hulk-operator"  # the Events' reportingComponent (kubectl describe's From)
PEERING_LIFETIME_S = 20  # seconds a replica's peering record counts after its last refresh


class _QuietTimers(logging.Filter):
    """Drops kopf's "Timer ... succeeded." line, logged every tick of every job, and its
    "Handler 'node_event' succeeded." line, logged at every change of every node (a
    kubelet's status updates: one line a node every few seconds)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.endswith(" succeeded.") and msg.startswith(QUIET_LINES))


QUIET_LINES = ("Timer ", "Handler 'node_event'")


@kopf.on.login()
def operator_login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo | None:
    """Credentials from ``memo.kubeconfig`` (``hulk operator --kubeconfig``), else
    ``$KUBECONFIG`` or ``~/.kube/config``, else the in-cluster service account."""
    cfg = kube.configuration(memo.get("kubeconfig"))
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        token=(cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization") or "").split(" ")[
            -1
        ]
        or None,
        scheme="Bearer" if cfg.api_key else None,
    )


@kopf.on.startup()
async def operator_startup(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    cfg: OperatorConfig = memo.get("config") or OperatorConfig.from_env()
    memo.config = cfg
    if cfg.gnn_weights:  # what the GNN planner loads (checked in OperatorConfig)
        os.environ[WEIGHTS_ENV] = os.path.abspath(cfg.gnn_weights)
    given = os.environ.get(WEIGHTS_ENV) if cfg.planner in USES_GNN else None
    try:
        weak = untrained(given) if given else None
    except Exception:  # (not weights: checked at start by the command, else each plan says)
        weak = None
    if weak:  # (the plans' Events would not show it: a laptop trial of hulk plan)
        logger.warning(f"GNN weights {given}: {weak}")
    # Keep kopf's bookkeeping in annotations under our own prefix and out of .status,
    # which belongs to the job's users.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="hulk.dev")
    settings.persistence.diffbase_storage = DIFFBASE
    settings.persistence.finalizer = "hulk.dev/kopf-finalizer"
    # Post our own kopf.event() calls (Planned, Replanned...) as Kubernetes Events, from
    # Hulk's operator and its replica (before, kopf's defaults: kubectl describe said "From:
    # kopf", every replica "dev"; a review)
    settings.posting.level = logging.INFO
    settings.posting.reporting_component = EVENT_SOURCE
    settings.posting.reporting_instance = socket.gethostname()  # (in a pod: its name)
    settings.posting.event_name_prefix = "hulk-"
    # Blocking (sync) handlers and API calls share a small thread pool.
    settings.execution.max_workers = 8
    # Notice an API server restart quickly instead of waiting on a dead watch.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    # Stop the timers promptly when a job is deleted or the operator stops. A deleted
    # job's timer caught mid-tick (e.g. planning) finishes that tick; kopf then checks
    # again after `cancellation_polling` (default 60 s, which held deletions for a minute).
    settings.process.ultimate_exiting_timeout = 10
    settings.background.cancellation_polling = 0.5
    # A replica killed (kill -9, OOM) leaves its peering record until it expires: a new one
    # with a lower priority pauses until then (60 s by kopf's default, with nothing in the
    # log at INFO). 20 s keeps that short; each replica refreshes its record every ~10 s.
    settings.peering.lifetime = PEERING_LIFETIME_S
    logging.getLogger("kopf.objects").addFilter(_QuietTimers())
    # each /healthz call (a kubelet's every 10 s) logged one INFO line per probe, and
    # aiohttp's access line
    logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    memo.metrics = memo.get("metrics") or Metrics()
    if isinstance(paused := memo.get(PAUSED_NOW), threading.Event):
        memo.metrics.paused = paused  # (the peering log's word: ``pauses.PauseWatch``)
    if cfg.metrics_port:  # (``hulk operator`` and the demo serve them before kopf starts)
        try:
            memo.metrics.serve(cfg.metrics_port, cfg.metrics_address)
        except OSError as exc:  # (before: kopf retried the whole start-up a minute later)
            raise kopf.PermanentError(
                f"metrics port {cfg.metrics_port}: cannot listen on it "
                f"({exc.strerror or exc}): pick another port, or 0 to turn it off"
            ) from None
    # (after the metrics: kopf runs no clean-up after a failed start, to close it)
    if memo.get("api") is None:
        memo.api = kube.make_client(memo.get("kubeconfig"))
        # (kopf watches once the start-up is done: CRDs applied a moment before are served
        # first, or its first list is an ERROR line, 429; a user trial)
        namespaces = memo.get("namespaces") or ()
        waited, served = await asyncio.to_thread(crd.wait_storage, memo.api, namespaces)
        if waited >= 1.0:
            logger.info(
                f"waited {waited:.1f} s for the API server to serve HulkTrainingJobs and "
                "NodeLatency objects (their CRDs were just applied: storage initializing)"
                + ("" if served else "; not served yet: kopf retries its lists")
            )
    if "plan_fn" not in memo:
        from hulk_planner.api import plan

        memo.plan_fn = plan

    def on_round(seconds: float, decisions: Mapping[Key, Any]) -> None:
        memo.metrics.planning_seconds.observe(seconds)

    memo.placer = Placer(
        memo.plan_fn,
        planner=cfg.planner,
        batch_window_s=cfg.batch_window_s,
        same_region_ms=cfg.same_region_latency_ms,
        cross_region_ms=cfg.cross_region_latency_ms,
        budget_s=cfg.planning_budget_s,
        baselines=cfg.baselines,
        on_round=on_round,
    )
    memo.recent = {}
    # (a dict: every job's shallow copy of the memo shares it). A NotReady node's grace
    # runs from the operator's start at the earliest, as kube-controller-manager's does
    # from its own: a restart during a disruption's end took every node still NotReady as
    # lost at once, as the disruption logic exists to prevent (a review)
    memo.disruption = {"ended": time.time()}
    memo.env_told = {}  # job key -> the variables EnvReplaced told of (shared too)
    memo.listings = Listings()  # (shared: each job's copy of the memo holds the same)
    memo.node_view = NodeView()  # (shared too)
    memo.built_pods = {}  # job key -> its stage pods as last built (``stage_pods``; shared)
    memo.exits = Exits()  # stage pods deleted once they exited 0 (``exits``; shared)
    weights = f", GNN weights {default_weights()}" if cfg.planner in USES_GNN else ""
    if cfg.same_region_latency_ms > cfg.cross_region_latency_ms:  # (taken silently: a trial)
        logger.warning(
            f"--same-region-latency-ms ({cfg.same_region_latency_ms:g}) is above "
            f"--cross-region-latency-ms ({cfg.cross_region_latency_ms:g}): unmeasured pairs "
            "within a region are estimated as slower than across regions; swapped?"
        )
    # (with the latency settings: a restarted operator's were not to be seen; a user trial)
    logger.info(
        f"Hulk operator started (planner {cfg.planner}{weights}, tick {INTERVAL_S:g} s; "
        f"latency reports fresh for {cfg.latency_max_age_s:g} s; unmeasured pairs estimated "
        "by their regions' measured median, else "
        f"{cfg.same_region_latency_ms:g} / {cfg.cross_region_latency_ms:g} ms within / across "
        "regions)"
    )


@kopf.on.cleanup()
async def operator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Closes the API client, and sets ``hulk operator``'s stop flag: kopf waits for that
    flag in a thread of the event loop's executor, which the loop's end then waited for
    until kopf's own deadline killed the process (SIGTERM: 10 s, exit code -9)."""
    api = memo.get("api")
    if api is not None and not memo.get("keep_api"):
        api.close()
    stop = memo.get("stop_flag")
    if stop is not None:
        stop.set()


@kopf.on.probe(id="jobs")
def operator_jobs_probe(memo: kopf.Memo, hulk_jobs: Any = None, **_: Any) -> int:
    """Liveness (``/healthz``): how many HulkTrainingJobs this replica serves; 0 while a
    peer pauses it (before, a standby counted the jobs of its stale view; a user trial)."""
    return 0 if _paused(memo) else len(hulk_jobs or {})


@kopf.on.probe(id="paused")
def operator_paused_probe(memo: kopf.Memo, **_: Any) -> bool:
    """Liveness: whether a peer of higher priority pauses this replica (``hulk operator``
    reads it from kopf's log, ``pauses``)."""
    return _paused(memo)


def _paused(memo: kopf.Memo) -> bool:
    paused = memo.get(PAUSED_NOW)
    return bool(paused is not None and paused.is_set())


@kopf.on.probe(id="placing")
def operator_placing_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness: how many jobs are planned and not yet written to their status (before,
    this was the figure under "jobs": 0 with 4 jobs running read as none; a user trial)."""
    placer = memo.get("placer")
    return len(placer.reserved) if placer else 0
