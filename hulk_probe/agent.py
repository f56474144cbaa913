"""The agent: wires the echo server, measurer, discovery, publisher and metrics together.

Start-up, in order: listen for echoes; write our address on our Node; create our
NodeLatency object if missing; then watch the Nodes for peers, probe them on schedule,
and patch our status once per publish interval, or less often where the write budget
says so (``publisher.Pacer``). Kubernetes calls are blocking and run
off the event loop (discovery on its own thread, writes in the default executor).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import Any

from hulk_probe.config import ProbeConfig, format_hostport
from hulk_probe.discovery import NodeDirectory
from hulk_probe.echo import EchoServer, connection_cap, raise_open_files_limit
from hulk_probe.estimator import Estimate
from hulk_probe.kube import load_api_client, said
from hulk_probe.measurer import Measurer
from hulk_probe.metrics import MetricsServer, ProbeMetrics
from hulk_probe.publisher import Pacer, Publisher, body_bytes, reachability, status_body

log = logging.getLogger(__name__)


def one_line(exc: BaseException) -> str:
    """An error as /healthz and the log show it: one line (an ApiException's text carries
    the response headers and body over many lines; its status and reason say enough)."""
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None and reason is not None:
        text = f"{status} {reason}"
    else:
        text = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text.strip()}"[:200]


class StartupError(RuntimeError):
    """Start-up cannot go on; the message is one line for the user."""


def make_api_client(kubeconfig: str | None) -> Any:
    from kubernetes.config import ConfigException

    where = kubeconfig or "the default kubeconfig"
    try:
        return load_api_client(kubeconfig)
    except (ConfigException, OSError) as exc:
        raise StartupError(f"cannot load Kubernetes config from {where}: {exc}") from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # YAML, not a kubeconfig
        raise StartupError(  # (before: a 43-line traceback, a trial)
            f"cannot load Kubernetes config from {where}: it is not a kubeconfig (a YAML "
            f"mapping with clusters, users and contexts; {type(exc).__name__}: {exc})"
        ) from None


def _specific_host(host: str) -> str | None:
    try:
        return None if ipaddress.ip_address(host).is_unspecified else host
    except ValueError:
        return None


def _status_message(exc: Any) -> str:
    """The API server's own message of a refusal (an admission policy's reason), or its
    body as sent."""
    return said(exc) or str(getattr(exc, "body", None) or "")[:300] or "no message"


class Agent:
    def __init__(self, config: ProbeConfig, api_factory: Any = make_api_client) -> None:
        self.config = config
        self.api_factory = api_factory
        self.metrics = ProbeMetrics(config.node_name)
        self.echo = EchoServer(*config.listen)
        self.measurer = Measurer(
            config.node_name,
            config.probe,
            self.metrics,
            local_host=_specific_host(config.listen[0]),
        )
        self.ready = False
        self._beat = time.monotonic()
        self._publisher: Publisher | None = None
        self._directory: NodeDirectory | None = None
        self._last_publish_error: str | None = None
        self._counts = (0, 0)  # (peers, reachable) as of the last publish; read by /healthz
        # (spacing, budget passed) as the log last told it
        self._told_spacing = (config.publish_interval_s, False)

    def health(self) -> tuple[bool, str]:
        # (before it is ready, its start-up retries the API for as long as it takes, which
        # says so in the log and in last_error: not stale)
        stale = (
            self.ready and time.monotonic() - self._beat > 3 * self.config.publish_interval_s + 5
        )
        ok = self.echo.serving and not stale
        peers, reachable = self._counts  # not the measurer's dicts: another thread owns them
        writes = self._publisher.writes if self._publisher else 0
        text = (
            f"{'ok' if ok else 'unhealthy'} node={self.config.node_name} "
            f"ready={str(self.ready).lower()} peers={peers} "
            f"reachable={reachable} writes={writes}"
        )
        if self._last_publish_error:
            text += f" last_error={self._last_publish_error!r}"
        return ok, text

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: healthy, and started (its address advertised, its object made): a
        DaemonSet rollout waits for it (before, /healthz, which is ok while the start-up
        waits for the API; a review)."""
        ok, text = self.health()
        return ok and self.ready, text

    async def _startup(self, directory: NodeDirectory, publisher: Publisher) -> None:
        """Advertise and create our object, retrying while the API is unavailable."""
        from kubernetes.client.exceptions import ApiException

        delay = 1.0
        while True:
            try:
                uid = await asyncio.to_thread(directory.advertise, self.config.advertise)
                await asyncio.to_thread(publisher.ensure_object, uid)
                return
            except ApiException as exc:
                if exc.status == 404:
                    raise StartupError(
                        f"node {self.config.node_name!r} not found, or the NodeLatency CRD "
                        "is not installed (kubectl apply -f crds/nodelatencies.hulk.dev.yaml)"
                    ) from None
                if exc.status in (401, 403):
                    raise StartupError(
                        f"the API refused us ({exc.status} {exc.reason}): check the agent's RBAC"
                    ) from None
                if (
                    exc.status is not None
                    and 400 <= exc.status < 500
                    and exc.status
                    not in (
                        408,
                        429,
                    )
                ):  # (e.g. 422 from an admission policy: its reason, not "cannot reach"; a
                    # review)
                    raise StartupError(
                        f"the API refused our writes ({exc.status} {exc.reason}): "
                        f"{_status_message(exc)}"
                    ) from None
                problem = f"{exc.status} {exc.reason}"
            except Exception as exc:  # urllib3's errors carry their cause in .reason
                problem = str(getattr(exc, "reason", None) or exc)[:300]
            # alive and retrying: /healthz stays ok (before, it went stale after 35 s, and
            # the kubelet restarted the pod over and over while the API was away; a review)
            self._beat = time.monotonic()
            self._last_publish_error = f"start-up: {problem}"
            log.warning("cannot reach the API yet (%s); retrying in %.0fs", problem, delay)
            self.metrics.api_errors.labels(self.config.node_name, "startup").inc()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _publish_loop(self, publisher: Publisher) -> None:
        """Looks every publish interval; writes when the pacer says so (``Pacer``: the
        budget's spacing has passed, a peer's reachability flipped, or a failed write is
        tried again)."""
        cfg = self.config
        period = cfg.publish_interval_s
        pacer = Pacer(
            period,
            cfg.write_budget_kb_s * 1000.0,
            cap_s=cfg.max_publish_interval_s,
            settle_s=cfg.probe.interval_s + cfg.probe.timeout_s + period,
        )
        next_at = time.monotonic() + period
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            estimates = self.measurer.estimates()
            self._counts = (len(estimates), sum(1 for e in estimates.values() if e.reachable))
            reach = reachability(estimates)
            now = time.monotonic()
            if pacer.due(now, reach):
                await self._publish(publisher, pacer, estimates, reach, now)
            next_at += period
            if next_at < time.monotonic():  # fell behind: skip, never burst
                next_at = time.monotonic() + period

    async def _publish(
        self,
        publisher: Publisher,
        pacer: Pacer,
        estimates: Mapping[str, Estimate],
        reach: Mapping[str, bool],
        now: float,
    ) -> None:
        cfg = self.config
        # (of all the agents: with --peers-per-region an agent probes a few of them)
        known = self._directory.agents if self._directory is not None else 0
        before, nodes = pacer.spacing_s, max(len(estimates) + 1, known)
        body = status_body(estimates, time.time(), cfg.probe.interval_s, before)
        size = body_bytes(body)
        spacing = pacer.spacing_for(size, nodes)
        body["status"]["publishIntervalSeconds"] = round(spacing, 1)  # (what follows this one)
        written = False
        try:
            written = await asyncio.to_thread(publisher.write_status, body)
            self._last_publish_error = None
        except Exception as exc:
            self._last_publish_error = one_line(exc)
            log.warning("publishing status failed: %s", self._last_publish_error)
            self.metrics.api_errors.labels(cfg.node_name, "status").inc()
        if not written:  # (tried again at the next tick, then backing off)
            pacer.failed(now)
            return
        pacer.wrote(now, reach, spacing)
        self.metrics.publish_interval.labels(cfg.node_name).set(spacing)
        self.metrics.status_bytes.labels(cfg.node_name).inc(body_bytes(body))
        budget = cfg.write_budget_kb_s
        rate_kb_s = nodes * size / spacing / 1000.0
        capped = bool(budget) and rate_kb_s > budget * 1.05  # (the cap binds)
        told, was_capped = self._told_spacing
        if capped == was_capped and abs(spacing - told) < max(1.0, 0.2 * told):
            return  # (compared with what was last logged: a cluster grows a node at a time)
        self._told_spacing = (spacing, capped)
        if capped:
            log.warning(
                "publishing every %.0fs (--max-publish-interval): %d nodes' statuses of %.3g KB "
                "each write about %.3g KB/s together, above the --write-budget of %g KB/s; "
                "raise --max-publish-interval with the operator's --latency-max-age-s "
                "(keep it under a third of it)",
                spacing,
                nodes,
                size / 1000,
                rate_kb_s,
                budget,
            )
        else:
            log.info(
                "publishing every %.0fs: %d nodes' statuses of %.3g KB each within the "
                "--write-budget of %g KB/s (sooner where a peer's reachability flips)",
                spacing,
                nodes,
                size / 1000,
                budget,
            )

    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.config
        log.debug("open descriptors allowed: %d", raise_open_files_limit())
        try:
            bound = await self.echo.start()
        except OSError as exc:  # an unknown host, an address in use or not ours
            reason = exc.strerror or str(exc)
            raise StartupError(
                f"--listen {format_hostport(cfg.listen)}: cannot listen there ({reason})"
            ) from exc
        log.info(
            "echo server on %s, advertised as %s",
            format_hostport(bound),
            format_hostport(cfg.advertise),
        )
        server = None
        if cfg.metrics is not None:
            try:
                server = MetricsServer(
                    cfg.metrics, self.metrics.registry, self.health, self.readiness
                ).start()
            except OSError as exc:
                await self.echo.close()
                reason = exc.strerror or str(exc)
                raise StartupError(
                    f"--metrics {format_hostport(cfg.metrics)}: cannot listen there ({reason})"
                ) from exc
            log.info("metrics on http://%s/metrics", format_hostport(server.address))
        loop = asyncio.get_running_loop()

        def on_peers(peers: dict[str, tuple[str, int]]) -> None:
            loop.call_soon_threadsafe(self.measurer.set_peers, peers)
            # (every agent may probe this one: its echo server holds a connection each)
            known = self._directory.agents if self._directory is not None else 0
            loop.call_soon_threadsafe(setattr, self.echo, "max_connections", connection_cap(known))

        api_client = self.api_factory(cfg.kubeconfig)  # thread-safe: shared by both
        directory = NodeDirectory(
            api_client,
            cfg.node_name,
            on_peers,
            overrides=cfg.peer_addresses,
            metrics=self.metrics,
            per_region=cfg.peers_per_region,
        )
        self._directory = directory
        self._publisher = Publisher(api_client, cfg.node_name, self.metrics)
        publisher = self._publisher

        def owned_by(uid: str) -> None:  # (our Node made again: its NodeLatency follows)
            publisher.owner_uid = uid

        directory.on_uid = owned_by
        tasks: list[asyncio.Task[None]] = []
        waiter = asyncio.create_task(stop.wait())
        try:
            startup = asyncio.create_task(self._startup(directory, self._publisher))
            await asyncio.wait([waiter, startup], return_when=asyncio.FIRST_COMPLETED)
            if not startup.done():  # asked to stop while still starting
                startup.cancel()
                return
            startup.result()
            directory.start()
            tasks = [
                asyncio.create_task(self.measurer.run()),
                asyncio.create_task(self._publish_loop(self._publisher)),
            ]
            self.ready = True
            log.info(
                "ready: probing every %gs, publishing every %gs or less often "
                "(--write-budget %g KB/s)",
                cfg.probe.interval_s,
                cfg.publish_interval_s,
                cfg.write_budget_kb_s,
            )
            done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not waiter:
                    task.result()  # a crashed loop: surface it
        finally:
            waiter.cancel()
            directory.stop()
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            if self.ready:  # we advertised: withdraw before the echo server goes
                self.ready = False
                try:
                    await asyncio.wait_for(asyncio.to_thread(directory.withdraw), 5.0)
                except Exception as exc:  # the API away: peers mark us unreachable instead
                    log.warning("withdrawing the address annotation failed: %s", one_line(exc))
            await self.echo.close()
            if server is not None:
                server.close()
