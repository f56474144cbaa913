"""Peer discovery through the Kubernetes API.

Each agent writes its echo address into an annotation of its own Node object
(``hulk.dev/probe-address: HOST:PORT``, as flannel does with its public IP) and watches the
Nodes: every other Node with that annotation is a peer. Nodes change rarely, so the watch
costs next to nothing, whereas watching the NodeLatency objects would send every agent
every other agent's status at every interval (N² traffic).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hulk_probe import ADDRESS_ANNOTATION
from hulk_probe.config import ConfigError, format_hostport, parse_hostport
from hulk_probe.kube import Kube
from hulk_probe.metrics import ProbeMetrics

log = logging.getLogger(__name__)

Address = tuple[str, int]

#: A Node's region (kubelets set it where the provider knows it; admins on premises): the
#: probe's per-pair series carry it as ``source_region`` and ``target_region``.
REGION_LABEL = "topology.kubernetes.io/region"


def peers_from_nodes(
    nodes: Iterable[Mapping[str, Any]],
    self_name: str,
    overrides: Mapping[str, Address] | None = None,
) -> dict[str, Address]:
    """Peer name -> address for every annotated Node but ``self_name``.

    ``overrides`` replaces the published address of a peer (a proxy, a tunnel); it does
    not add peers that publish nothing, since no agent runs there.
    """
    overrides = overrides or {}
    peers: dict[str, Address] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        text = (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION)
        if not name or not text or name == self_name:
            continue
        try:
            peers[name] = overrides.get(name) or parse_hostport(text, f"node {name}")
        except ConfigError as exc:
            log.warning("ignoring peer with a bad %s annotation: %s", ADDRESS_ANNOTATION, exc)
    return peers


def pair_rank(a: str, b: str) -> int:
    """A stable, well-mixed number for the unordered pair {a, b}: the same from both ends
    (apart from ``schedule.phase``'s, so that the pairs chosen do not share a time)."""
    lo, hi = sorted((a, b))
    digest = hashlib.blake2b(f"{lo}\0{hi}".encode(), digest_size=8, person=b"hulk-sample")
    return int.from_bytes(digest.digest(), "big")


def ring_rank(name: str) -> int:
    """A stable, well-mixed number for one node: its place on its region's ring."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"hulk-ring")
    return int.from_bytes(digest.digest(), "big")


def sample_peers(
    peers: Mapping[str, Address], regions: Mapping[str, str], self_name: str, per_region: int
) -> dict[str, Address]:
    """``--peers-per-region``: every peer where ``per_region`` is 0; else, of each region's
    peers (no region label: one region ""), ``per_region``:

    - of this node's own region, the next ones after it on the region's ring (its nodes
      ordered by ``ring_rank``): each node is probed by exactly that many of its own region,
      so that one whose peers lose it is reported by them (``hulk_operator.latencies.
      cut_off``), and a node joining or leaving moves the choice of those before it alone;
    - of every other region, those that rank first by ``pair_rank`` with this node
      (rendezvous hashing: a node joining or leaving changes only the choices it enters
      or leaves, each agent's other picks stay; the rank is the pair's, so two nodes that
      choose each other probe both ways)."""
    if per_region <= 0:
        return dict(peers)
    mine = regions.get(self_name, "")
    by_region: dict[str, list[str]] = {}
    for name in peers:
        by_region.setdefault(regions.get(name, ""), []).append(name)
    chosen: dict[str, Address] = {}
    for region, names in by_region.items():
        if region == mine:
            ring = sorted([*names, self_name], key=lambda n: (ring_rank(n), n))
            at = ring.index(self_name)
            after = [ring[(at + k) % len(ring)] for k in range(1, len(ring))]
            chosen.update((n, peers[n]) for n in after[:per_region])
        else:
            names.sort(key=lambda n: (pair_rank(self_name, n), n))
            chosen.update((n, peers[n]) for n in names[:per_region])
    return chosen


def regions_from_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> its ``topology.kubernetes.io/region`` label, "" where it has none
    (every Node, annotated or not, ours included)."""
    regions: dict[str, str] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if name:
            regions[name] = str((meta.get("labels") or {}).get(REGION_LABEL) or "")
    return regions


READVERTISE_EVERY_S = 30.0  # the annotation written back at most this often

# Nodes as their metadata alone (PartialObjectMetadata), else whole (an API server that
# cannot: the second choice)
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


def _slim(node: Mapping[str, Any]) -> dict[str, Any]:
    """Only what discovery reads: a Node's name, our annotation and its region label
    (Nodes are big)."""
    meta = node.get("metadata") or {}
    address = (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION)
    region = (meta.get("labels") or {}).get(REGION_LABEL)
    return {
        "metadata": {
            "name": meta.get("name"),
            "annotations": {ADDRESS_ANNOTATION: address} if address else {},
            "labels": {REGION_LABEL: region} if region else {},
        }
    }


class NodeDirectory:
    """Publishes this node's address and follows the other nodes' (on its own thread)."""

    def __init__(
        self,
        api_client: Any,
        node_name: str,
        on_peers: Callable[[dict[str, Address]], None],
        overrides: Mapping[str, Address] | None = None,
        metrics: ProbeMetrics | None = None,
        watch_timeout_s: int = 300,
        per_region: int = 0,
    ) -> None:
        self.kube = Kube(api_client)
        self.node_name = node_name
        self.on_peers = on_peers
        self.overrides = dict(overrides or {})
        self.metrics = metrics
        self.watch_timeout_s = watch_timeout_s
        self.per_region = per_region  # ``--peers-per-region``: 0, every peer
        # the agents in the cluster (annotated Nodes, ours included), sampled or not: the
        # write budget's share is of all of them
        self.agents = 1
        self._nodes: dict[str, dict[str, Any]] = {}
        self._peers: dict[str, Address] | None = None
        self._regions: dict[str, str] | None = None
        self._stop = threading.Event()
        self.writes = 0
        self._advertised: str | None = None  # our annotation's value, once written
        self.uid: str | None = None  # our Node's, as last seen
        # called with our Node's new uid where it was made again under its name (the
        # NodeLatency object's owner must follow it)
        self.on_uid: Callable[[str], None] | None = None
        self._readvertised = -1e9  # (monotonic) when the annotation was last written back

    def advertise(self, address: Address) -> str:
        """Set the annotation on our Node if it differs (one write); returns the Node's uid."""
        value = format_hostport(address)
        path = f"/api/v1/nodes/{self.node_name}"
        meta = self.kube.request("GET", path)["metadata"]
        if (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION) != value:
            self._write_address(value)
        self._advertised, self.uid = value, str(meta["uid"])
        return self.uid

    def _write_address(self, value: str) -> None:
        path = f"/api/v1/nodes/{self.node_name}"
        self.kube.merge_patch(path, {"metadata": {"annotations": {ADDRESS_ANNOTATION: value}}})
        self.writes += 1
        if self.metrics is not None:
            self.metrics.api_writes.labels(self.node_name, "annotation").inc()

    def _own(self, meta: Mapping[str, Any]) -> None:
        """Our Node as the list or the watch shows it: the annotation written back where it
        went (the Node made again under its name, a ``kubectl annotate ...-`` while the
        agent runs), and a new uid told (``on_uid``). Before, the node was never probed
        again until the agent restarted, and the NodeLatency object, owned by the old uid,
        was deleted by the garbage collector and made again, each interval (a review)."""
        if self._advertised is None or self._stop.is_set():
            return  # (not yet advertised, or withdrawing)
        uid = meta.get("uid")
        if uid and uid != self.uid:
            log.info("node %s was made again (uid %s)", self.node_name, uid)
            self.uid = str(uid)
            if self.on_uid is not None:
                self.on_uid(self.uid)
        if (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION) == self._advertised:
            return
        now = time.monotonic()
        if now - self._readvertised < READVERTISE_EVERY_S:  # (another writer: no ping-pong)
            return
        self._readvertised = now
        log.warning("our address annotation is gone or changed; writing it again")
        self._write_address(self._advertised)

    def withdraw(self) -> None:
        """Remove our address annotation (a clean stop): the peers stop probing this node
        instead of reporting it unreachable while it is away, e.g. during a rolling update
        of the DaemonSet, where the planner would avoid its pairs; its links fall back to
        estimates until it is back."""
        patch = {"metadata": {"annotations": {ADDRESS_ANNOTATION: None}}}
        self.kube.merge_patch(f"/api/v1/nodes/{self.node_name}", patch)
        if self.metrics is not None:
            self.metrics.api_writes.labels(self.node_name, "annotation").inc()

    def _emit(self) -> None:
        # the regions first: the peers' series are made with theirs (``set_peers`` runs
        # after this, on the event loop), and a relabelled Node's are exported again
        regions = regions_from_nodes(self._nodes.values())
        if regions != self._regions:
            self._regions = regions
            if self.metrics is not None:
                self.metrics.set_regions(regions)
        everyone = peers_from_nodes(self._nodes.values(), self.node_name, self.overrides)
        self.agents = len(everyone) + 1
        peers = sample_peers(everyone, regions, self.node_name, self.per_region)
        if peers != self._peers:
            self._peers = peers
            self.on_peers(dict(peers))

    def _list(self) -> str:
        # the API server's cache (resourceVersion 0), metadata alone: a Node is 10-30 kB,
        # and every agent listed them all from etcd at each start and relist (a review)
        listing = self.kube.request(
            "GET", "/api/v1/nodes", query=[("resourceVersion", "0")], accept=METADATA_LIST
        )
        for n in listing.get("items", []):
            if (n.get("metadata") or {}).get("name") == self.node_name:
                self._own(n["metadata"])
        self._nodes = {n["metadata"]["name"]: _slim(n) for n in listing.get("items", [])}
        self._emit()
        return str(listing["metadata"]["resourceVersion"])

    def run(self) -> None:
        """List, then watch from the list's version; relist after any error or expiry."""
        from kubernetes.client.exceptions import ApiException

        backoff = 1.0
        while not self._stop.is_set():
            try:
                version = self._list()
                backoff = 1.0
                while not self._stop.is_set():
                    events = self.kube.watch(
                        "/api/v1/nodes", version, self.watch_timeout_s, accept=METADATA
                    )
                    for event in events:
                        version = self._apply(event) or version
            except ApiException as exc:
                if exc.status != 410:  # 410: our version expired; relisting is the cure
                    self._api_error(f"{exc.status} {exc.reason}")
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
            except Exception as exc:  # network trouble: keep trying, never die
                self._api_error(f"{type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _apply(self, event: Mapping[str, Any]) -> str | None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=obj.get("code", 500), reason=obj.get("message", ""))
        meta = obj.get("metadata") or {}
        if kind in ("ADDED", "MODIFIED"):
            if meta.get("name") == self.node_name:
                self._own(meta)
            self._nodes[meta["name"]] = _slim(obj)
            self._emit()
        elif kind == "DELETED":
            self._nodes.pop(meta.get("name", ""), None)
            self._emit()
        return meta.get("resourceVersion")

    def _api_error(self, text: str) -> None:
        log.warning("watching nodes failed, retrying: %s", text)
        if self.metrics is not None:
            self.metrics.api_errors.labels(self.node_name, "watch-nodes").inc()

    def stop(self) -> None:
        """Stop after the current watch call (the thread is a daemon: exit needs no join)."""
        self._stop.set()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="discovery", daemon=True)
        thread.start()
        return thread
