"""Probes every peer on its schedule and keeps an estimate per peer.

Runs on the agent's asyncio loop: one small task a probe, at most one probe in flight per
peer (a probe still running when its next slot comes makes that slot skip). The set of
peers comes from discovery through :meth:`Measurer.set_peers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hulk_probe.config import ProbeSettings, format_hostport
from hulk_probe.echo import LOCAL, EchoClient, ProbeError
from hulk_probe.estimator import Estimate, PeerEstimator
from hulk_probe.metrics import ProbeMetrics
from hulk_probe.schedule import Slot, first_slot, next_slot, phase

log = logging.getLogger(__name__)


@dataclass
class _Peer:
    name: str
    address: tuple[str, int]
    estimator: PeerEstimator
    client: EchoClient
    slot: Slot
    task: asyncio.Task[None] | None = field(default=None)


class Measurer:
    def __init__(
        self,
        source: str,
        settings: ProbeSettings,
        metrics: ProbeMetrics | None = None,
        *,
        local_host: str | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.settings = settings
        self.metrics = metrics
        self.local_host = local_host
        self._rng = rng or random.Random()
        self._clock, self._wall = clock, wall
        self._peers: dict[str, _Peer] = {}
        self._changed = asyncio.Event()
        self.probes_sent = 0

    # -- peers ---------------------------------------------------------------------------
    def set_peers(self, peers: Mapping[str, tuple[str, int]]) -> None:
        """Probe exactly these peers from now on (call on the loop's thread)."""
        for name in list(self._peers):
            if name not in peers or peers[name] != self._peers[name].address:
                self._drop(name)
        now = self._clock()
        s = self.settings
        for name, address in peers.items():
            if name == self.source or name in self._peers:
                continue
            log.info("peer %s at %s", name, format_hostport(address))
            self._peers[name] = _Peer(
                name=name,
                address=address,
                estimator=PeerEstimator(s.window, s.failures),
                client=EchoClient(address, s.timeout_s, self.local_host),
                slot=first_slot(now, s.interval_s, phase(self.source, name)),
            )
            if self.metrics is not None:
                self.metrics.add(name)
        if self.metrics is not None:
            self.metrics.peers.labels(self.source).set(len(self._peers))
        self._changed.set()

    def _drop(self, name: str) -> None:
        peer = self._peers.pop(name)
        log.info("peer %s gone (was at %s)", name, format_hostport(peer.address))
        if peer.task is not None and not peer.task.done():
            # closed once the probe has ended: closed under it, its socket's descriptor
            # stayed registered with the loop, and the next socket given that number (an
            # echo connection, a probe) was never read; the probe ended in a ValueError (a
            # review)
            peer.task.cancel()
            peer.task.add_done_callback(lambda _: peer.client.close())
        else:
            peer.client.close()
        if self.metrics is not None:
            self.metrics.forget(name)

    @property
    def peers(self) -> dict[str, tuple[str, int]]:
        return {name: peer.address for name, peer in self._peers.items()}

    def estimates(self) -> dict[str, Estimate]:
        return {name: peer.estimator.estimate() for name, peer in self._peers.items()}

    # -- the loop ------------------------------------------------------------------------
    async def run(self) -> None:
        s = self.settings
        try:
            while True:
                now = self._clock()
                for peer in self._peers.values():
                    if peer.slot.due > now:
                        continue
                    if peer.task is None or peer.task.done():
                        peer.task = asyncio.create_task(self._probe(peer))
                    peer.slot = next_slot(peer.slot, now, s.interval_s, s.jitter, self._rng)
                wake = min((p.slot.due for p in self._peers.values()), default=now + s.interval_s)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._changed.wait(), timeout=max(0.0, wake - self._clock())
                    )
        finally:
            await self.close()

    async def _probe(self, peer: _Peer) -> None:
        self.probes_sent += 1
        try:
            rtt = await peer.client.round_trip()
        except ProbeError as exc:
            if exc.reason == LOCAL:  # (before, told as the peer's failure: a review)
                log.warning("cannot probe %s: %s (this agent's own limit)", peer.name, exc)
                return
            if self.metrics is not None:
                self.metrics.error(peer.name, exc.reason)
            if peer.estimator.add_failure():
                log.warning(
                    "peer %s unreachable after %d failed probes (last: %s)",
                    peer.name,
                    peer.estimator.consecutive_failures,
                    exc,
                )
            else:
                log.debug("probe of %s failed: %s", peer.name, exc)
        else:
            if peer.estimator.reachable is False:
                log.info("peer %s reachable again", peer.name)
            peer.estimator.add_sample(rtt, self._wall())
        if self.metrics is not None:
            self.metrics.observe(peer.name, peer.estimator.estimate())

    async def close(self) -> None:
        tasks = [p.task for p in self._peers.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for peer in self._peers.values():
            peer.client.close()
