"""The network between servers as dense matrices, resolved once per cluster.

Latency of a server pair, in order of precedence:

1. a server-level link (``spec.links``);
2. a region-level link (``spec.regionLinks``; ``a == b`` is the intra-region value);
3. otherwise the pair cannot communicate (``inf``), as the planning interface says of a pair
   with no link: a plan that needs it (adjacent stages, or replicas of a stage, on the two
   servers) is infeasible. Nothing is relayed through a third server: stage pods connect
   to each other directly, and a missing pair is often a network policy.

Bandwidth where a link gives none: its region link's (``spec.regionLinks``, where it gives
one), else 10 Gb/s inside a region and 2 Gb/s between regions (docs/formats.md), from
public cloud measurements of about 11 Gb/s within and 1.4-5 Gb/s across regions
(CrossPipe, ATC'25, citing Strati et al. 2024); see docs/cost-model.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from functools import cached_property
from typing import TypeVar

import numpy as np

from hulk_planner.model import Cluster

DEFAULT_INTRA_REGION_GBPS = 10.0
DEFAULT_CROSS_REGION_GBPS = 2.0
ROWS_MAX_SERVERS = 500  # two 500 x 500 lists of floats: about 16 MB


class Network:
    """Latency (ms) and bandwidth (Gb/s) between every pair of a cluster's servers."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.names = [s.name for s in cluster.servers]
        self.index = dict(cluster.index)
        n = len(self.names)
        regions = sorted(set(cluster.regions))
        region_id = {r: i for i, r in enumerate(regions)}
        self.region = np.array([region_id[s.region] for s in cluster.servers], dtype=np.int32)
        same = self.region[:, None] == self.region[None, :]
        lat = np.full((n, n), np.inf)
        bw = np.where(same, DEFAULT_INTRA_REGION_GBPS, DEFAULT_CROSS_REGION_GBPS).astype(float)
        if cluster.region_links:
            k = len(regions)
            rlat = np.full((k, k), np.inf)
            rbw = np.full((k, k), np.nan)
            for rl in cluster.region_links:
                if rl.a in region_id and rl.b in region_id:
                    i, j = region_id[rl.a], region_id[rl.b]
                    rlat[i, j] = rlat[j, i] = rl.latency_ms
                    if rl.bandwidth_gbps:
                        rbw[i, j] = rbw[j, i] = rl.bandwidth_gbps
            lat = rlat[self.region][:, self.region]
            given = rbw[self.region][:, self.region]
            bw = np.where(np.isnan(given), bw, given)
        for link in cluster.links:
            i, j = self.index[link.a], self.index[link.b]
            lat[i, j] = lat[j, i] = link.latency_ms
            if link.bandwidth_gbps:
                bw[i, j] = bw[j, i] = link.bandwidth_gbps
        np.fill_diagonal(lat, 0.0)
        self.direct = np.isfinite(lat)  # the pairs that can communicate
        np.fill_diagonal(bw, np.inf)
        self.latency_ms = lat
        self.bandwidth_gbps = bw
        self.region_names = regions
        self.representative = {
            int(r): int(np.flatnonzero(self.region == r)[0]) for r in np.unique(self.region)
        }
        self._paths: dict[frozenset[int], list[int]] = {}
        # ``layout.linked_order``'s results, by (server ids as given, ring)
        self.orders: dict[tuple[tuple[int, ...], bool], tuple[int, ...]] = {}

    @cached_property
    def rows(self) -> tuple[list[list[float]], list[list[float]]] | None:
        """Latency and bandwidth as Python lists, for the cost model's plain-Python path on
        small grids; None above ``ROWS_MAX_SERVERS`` (two n x n lists of floats cost memory).
        Built on first use: only the search's scoring needs them."""
        if len(self.names) > ROWS_MAX_SERVERS:
            return None
        return self.latency_ms.tolist(), self.bandwidth_gbps.tolist()

    def region_path(self, regions: frozenset[int]) -> list[int]:
        """Regions in a short visiting order (nearest neighbour from every start, the
        shortest kept), between each region's first server; cached per set of regions."""
        cached = self._paths.get(regions)
        if cached is not None:
            return cached
        regs = sorted(regions)
        if len(regs) <= 1:
            path = regs
        else:
            reps = [self.representative[r] for r in regs]
            lat = self.latency_ms[np.ix_(reps, reps)]
            best: tuple[float, list[int]] = (np.inf, list(range(len(regs))))
            for start in range(len(regs)):
                order, rest, total = [start], set(range(len(regs))) - {start}, 0.0
                while rest:
                    nxt = min(rest, key=lambda j: (lat[order[-1], j], j))
                    total += float(lat[order[-1], nxt])
                    order.append(nxt)
                    rest.remove(nxt)
                if total < best[0]:
                    best = (total, order)
            path = [regs[i] for i in best[1]]
        self._paths[regions] = path
        return path

    @cached_property
    def fully_linked(self) -> bool:
        """Whether every pair of servers can communicate."""
        return bool(self.direct.all())

    @cached_property
    def linked(self) -> list[frozenset[int]]:
        """For each server, the servers it can communicate with."""
        return [frozenset(np.flatnonzero(row).tolist()) - {i} for i, row in enumerate(self.direct)]

    @cached_property
    def groups(self) -> list[list[int]]:
        """The servers split into groups that a chain of links joins, largest first (one
        group where the cluster is connected): no pipeline spans two of them."""
        n = len(self.direct)
        if self.fully_linked:  # (``linked`` is n sets of n: not built for nothing)
            return [list(range(n))]
        groups = components(range(n), lambda i, left: self.linked[i] & left)
        return sorted(groups, key=len, reverse=True)

    def ids(self, names: list[str] | tuple[str, ...]) -> list[int]:
        return [self.index[n] for n in names]

    def latency(self, a: str, b: str) -> float:
        return float(self.latency_ms[self.index[a], self.index[b]])

    def reachable(self, a: str, b: str) -> bool:
        return bool(np.isfinite(self.latency_ms[self.index[a], self.index[b]]))


T = TypeVar("T", int, str)  # (sortable: the groups are sorted)


def components(items: Iterable[T], near: Callable[[T, set[T]], AbstractSet[T]]) -> list[list[T]]:
    """``items`` split into connected groups, each sorted, in the order of their least
    item; ``near(item, left)``: those of ``left`` (the items not yet grouped) joined to
    ``item``. A walk that takes each item once."""
    left = set(items)
    groups = []
    while left:
        start = min(left)
        left.discard(start)
        group, queue = [start], [start]
        while queue and left:
            found = near(queue.pop(), left)
            left -= found
            group += found
            queue += found
        groups.append(sorted(group))
    return groups


def unlinked_pairs(cluster: Cluster) -> int:
    """How many server pairs cannot communicate (neither a link nor a region link), counted
    from the topology alone: the same as ``Network``'s, without its n x n matrices."""
    sizes = Counter(s.region for s in cluster.servers)
    covered = {frozenset((rl.a, rl.b)) for rl in cluster.region_links}
    linked = 0
    for pair in covered:
        ends = sorted(pair)
        a, b = ends[0], ends[-1]  # (a region with itself: one end)
        linked += sizes[a] * sizes[b] if a != b else sizes[a] * (sizes[a] - 1) // 2
    region = {s.name: s.region for s in cluster.servers}
    linked += sum(
        1 for lk in cluster.links if frozenset((region[lk.a], region[lk.b])) not in covered
    )
    n = len(cluster.servers)
    return n * (n - 1) // 2 - linked
