"""Writes this node's ``NodeLatency`` object (cluster-scoped, named after the node).

The object is created once (owned by the Node, so it goes when the Node goes) and from
then on only its status subresource is patched, at most once per publish interval: the
agent calls :meth:`Publisher.write_status` when its :class:`Pacer` says so, never more
often.

Each status lists every peer, so N agents write N statuses of O(N) bytes, and etcd keeps
every version until the API server compacts it (every 5 minutes by default): at a fixed
10 s, 1,000 nodes wrote gigabytes per compaction window, past etcd's default 2 GiB quota
(``bench/probe_writes.py``). :func:`publish_spacing` stretches the time between one
agent's writes so that all agents together stay within a write budget.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hulk_probe import API_VERSION, KIND
from hulk_probe.estimator import Estimate
from hulk_probe.kube import NODE_LATENCIES, Kube
from hulk_probe.metrics import ProbeMetrics

log = logging.getLogger(__name__)

# Cluster-wide status bytes per second all agents together may write (``--write-budget``,
# in KB/s). etcd holds 5-10 minutes of history (the API server compacts every 5 minutes,
# to the revision of the compaction before): at most about 300 MB of statuses, a seventh
# of etcd's default 2 GiB quota
DEFAULT_WRITE_BUDGET_KB_S = 500.0
# The longest time between two writes the budget may set (a --publish-interval above it
# still wins): a third of the operator's --latency-max-age-s default (600 s), so that a
# link measured just after one write is still fresh when the operator reads the next one
MAX_BUDGET_SPACING_S = 200.0
# Episodes of early writes (a peer's reachability flipped) an agent may open at once; one
# more comes back per spacing (``Pacer``)
EARLY_EPISODES = 3


def rfc3339(ts: float) -> str:
    """``2026-01-02T03:04:05.678Z`` for a Unix time."""
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def status_body(
    estimates: Mapping[str, Estimate],
    now: float,
    interval_s: float,
    publish_interval_s: float | None = None,
) -> dict[str, Any]:
    """The status patch for the current estimates (peers never probed yet are left out);
    ``publish_interval_s``: the agent's current time between two writes, if known."""
    peers: list[dict[str, Any]] = []
    for name in sorted(estimates):
        est = estimates[name]
        if est.reachable is None:
            continue
        entry: dict[str, Any] = {"node": name, "reachable": est.reachable, "samples": est.samples}
        if est.one_way_ms is not None:
            entry["latencyMs"] = round(est.one_way_ms, 3)
        if est.last_success is not None:
            entry["lastUpdated"] = rfc3339(est.last_success)
        if est.consecutive_failures:
            entry["consecutiveFailures"] = est.consecutive_failures
        peers.append(entry)
    reachable = sum(1 for p in peers if p["reachable"])
    status: dict[str, Any] = {"intervalSeconds": interval_s}
    if publish_interval_s is not None:
        status["publishIntervalSeconds"] = round(publish_interval_s, 1)
    status.update(
        lastPublished=rfc3339(now),
        reachablePeers=reachable,
        unreachablePeers=len(peers) - reachable,
        peers=peers,
    )
    return {"status": status}


def body_bytes(body: Mapping[str, Any]) -> int:
    """The size of a status patch as sent (compact JSON)."""
    return len(json.dumps(body, separators=(",", ":")))


def publish_spacing(
    status_bytes: int,
    nodes: int,
    floor_s: float,
    budget_bytes_s: float,
    cap_s: float = MAX_BUDGET_SPACING_S,
) -> float:
    """Seconds between two status writes of one agent: ``floor_s`` (``--publish-interval``),
    or longer where ``nodes`` agents writing ``status_bytes`` each that often would pass
    ``budget_bytes_s`` together; never longer than ``cap_s`` unless the floor is. A budget
    of 0 or less is no budget."""
    if budget_bytes_s <= 0:
        return floor_s
    return max(floor_s, min(nodes * status_bytes / budget_bytes_s, cap_s))


@dataclass
class Pacer:
    """When the agent writes its status. The publish loop asks every ``floor_s`` (its
    tick); a write is due when ``spacing_s`` has passed since the last one
    (``publish_spacing`` of that status's size), or earlier where a peer written reachable
    is now unreachable, or the other way round (a flip).

    A flip opens an episode: its first tick writes at once, and so does every tick with
    another flip for ``settle_s`` after it (the probe interval plus its timeout and one
    tick: the peers of a cut region flip over about one interval, each at its own phase,
    and one early write would name only the first of them). A later flip opens another
    episode where one is left: up to ``EARLY_EPISODES`` at once, then one more per spacing
    (a token bucket), so a second and a third failure a minute apart are each told at
    once, while a peer that flaps (every agent sees it, and each would write at its every
    flip) costs each agent at most one episode of ``settle_s / floor_s + 1`` early writes
    per spacing in the long run (a tenth of a tick of slack aside).
    A peer new or gone waits for the regular write (a new node's links are in its own
    status, a link takes either direction), but for ``settle_s`` after the agent's first
    write: a started agent's first status lists only the peers it had measured by its
    first tick, and each tick with more measured writes again.

    A write that failed (:meth:`failed`) is tried again at the next tick, then after 2, 4,
    ... ticks, at most a spacing apart: what it carried is not taken as written."""

    floor_s: float
    budget_bytes_s: float
    cap_s: float = MAX_BUDGET_SPACING_S
    settle_s: float = 0.0  # (at least floor_s)
    spacing_s: float = field(init=False)  # (floor_s until the first write)
    _last: float | None = field(init=False, default=None)  # the last write that succeeded
    # when the last episode of early writes opened (the first write opens one too)
    _episode: float | None = field(init=False, default=None)
    # episodes left (EARLY_EPISODES at first), as of _episodes_at
    _episodes: float = field(init=False)
    _episodes_at: float | None = field(init=False, default=None)
    _reach: Mapping[str, bool] | None = field(init=False, default=None)  # as last written
    _retry_at: float | None = field(init=False, default=None)
    _failures: int = field(init=False, default=0)
    _starting: bool = field(init=False, default=False)  # (the episode is the first write's)

    def __post_init__(self) -> None:
        self.spacing_s = self.floor_s
        self.settle_s = max(self.settle_s, self.floor_s)
        self._episodes = EARLY_EPISODES

    def _episodes_left(self, now: float) -> float:
        if self._episodes_at is None:
            return self._episodes
        refilled = self._episodes + (now - self._episodes_at) / self.spacing_s
        return min(float(EARLY_EPISODES), refilled)

    def _flipped(self, reach: Mapping[str, bool], *, new_too: bool = False) -> bool:
        """A peer written reachable is now not, or the other way round (``new_too``: or a
        peer the last write did not list)."""
        written = self._reach or {}
        if new_too and any(peer not in written for peer in reach):
            return True
        return any(written.get(peer, now) != now for peer, now in reach.items())

    def due(self, now: float, reach: Mapping[str, bool]) -> bool:
        """Write at ``now`` (monotonic seconds), the peers' reachability being ``reach``?"""
        slack = 0.1 * self.floor_s  # (ticks drift by a little)
        if self._retry_at is not None:  # (what a flip meanwhile changed, the retry carries)
            return now >= self._retry_at - slack
        if self._last is None:
            return True
        since = now - self._last
        if since >= self.spacing_s - slack:
            return True
        if since < self.floor_s - slack:
            return False
        if self._episode is not None and now - self._episode <= self.settle_s + slack:
            # (the same episode: peers flipping one after another; after the first write,
            # peers measured since too: a restarted agent's first status lists only those
            # it had measured by its first tick, and replaces its predecessor's whole)
            return self._flipped(reach, new_too=self._starting)
        return self._flipped(reach) and self._episodes_left(now) >= 1 - 1e-9

    def spacing_for(self, status_bytes: int, nodes: int) -> float:
        """The spacing after a write of ``status_bytes`` among ``nodes`` agents, in whole
        ticks (a write comes at a tick: 12.7 s would be 20), the cap's rounded down."""
        raw = publish_spacing(status_bytes, nodes, self.floor_s, self.budget_bytes_s, self.cap_s)
        most = max(1, math.floor(self.cap_s / self.floor_s + 1e-6))  # (the cap, in whole ticks)
        return self.floor_s * min(math.ceil(raw / self.floor_s - 1e-6), most)

    def wrote(self, now: float, reach: Mapping[str, bool], spacing_s: float) -> None:
        """Record a write made at ``now`` (``spacing_s``: ``spacing_for`` its status)."""
        slack = 0.1 * self.floor_s
        early = self._last is not None and now - self._last < self.spacing_s - slack
        if self._last is None:
            self._episode, self._starting = now, True  # (peers measured in it come too)
        elif early and (self._episode is None or now - self._episode > self.settle_s + slack):
            self._episode, self._starting = now, False  # (a new one: it takes one of those left)
            self._episodes, self._episodes_at = self._episodes_left(now) - 1, now
        self._last, self._reach, self.spacing_s = now, dict(reach), spacing_s
        self._retry_at, self._failures = None, 0

    def failed(self, now: float) -> None:
        """Record a write that did not happen; the next try comes sooner than a spacing."""
        self._failures += 1
        doubled = self.floor_s * 2 ** min(self._failures - 1, 20)  # (2**1024 overflows a float)
        wait = min(doubled, self.spacing_s)  # (never below floor_s)
        self._retry_at = now + wait


def reachability(estimates: Mapping[str, Estimate]) -> dict[str, bool]:
    """Each peer a status would list, with whether it is reachable."""
    return {name: est.reachable for name, est in estimates.items() if est.reachable is not None}


class Publisher:
    def __init__(
        self,
        api_client: Any,
        node_name: str,
        metrics: ProbeMetrics | None = None,
        field_manager: str = "hulk-probe",
    ) -> None:
        self.kube = Kube(api_client)
        self.node_name = node_name
        self.path = f"{NODE_LATENCIES}/{node_name}"
        self.metrics = metrics
        self.field_manager = field_manager
        self.owner_uid: str | None = None
        self.writes = 0

    def _count(self, kind: str) -> None:
        self.writes += 1
        if self.metrics is not None:
            self.metrics.api_writes.labels(self.node_name, kind).inc()

    def ensure_object(self, owner_uid: str | None = None) -> bool:
        """Create the object unless it exists; True when this made a write."""
        from kubernetes.client.exceptions import ApiException

        if owner_uid is not None:
            self.owner_uid = owner_uid
        try:
            self.kube.request("GET", self.path)
            return False
        except ApiException as exc:
            if exc.status != 404:
                raise
        meta: dict[str, Any] = {
            "name": self.node_name,
            "labels": {"app.kubernetes.io/managed-by": "hulk-probe"},
        }
        if self.owner_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.owner_uid}
            ]
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
        try:
            self.kube.request(
                "POST", NODE_LATENCIES, body=body, query=[("fieldManager", self.field_manager)]
            )
        except ApiException as exc:
            if exc.status != 409:  # 409: created meanwhile, which is fine
                raise
            return False
        self._count("create")
        log.info("created %s %s", KIND, self.node_name)
        return True

    def write_status(self, body: Mapping[str, Any]) -> bool:
        """One status patch; if the object vanished, recreate it instead (still one write)
        and return False: the status is not written."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.kube.merge_patch(
                f"{self.path}/status", dict(body), query=[("fieldManager", self.field_manager)]
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("%s %s was deleted; recreating it", KIND, self.node_name)
            self.ensure_object()
            return False
        self._count("status")
        return True
