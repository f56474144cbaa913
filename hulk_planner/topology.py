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
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from hulk_planner.model import Cluster

DEFAULT_INTRA_REGION_GBPS = 10.0
DEFAULT_CROSS_REGION_GBPS = 2.0
ROWS_MAX_SERVERS = 500  # two 500 x 500 lists of floats: about 16 MB
DENSE_MAX_SERVERS = 2_000  # dense n x n arrays up to here: 32 MB each


class PairTable:
    """An n x n table of server pairs kept as its regions' k x k table plus the pairs that
    differ from it (server-level links, and each server with itself), for clusters too large
    for dense matrices (a 5,000-server cluster's latency and bandwidth tables were 200 MB
    each, built in 2.4 s, and again for each priority group's servers: a trial). Indexed as
    the dense array is, with ``[i, j]`` of ints or arrays that broadcast (``np.ix_``
    included; indices from 0, none negative); ``np.asarray`` gives the dense table (the
    same numbers: tested)."""

    def __init__(
        self, region: np.ndarray, base: np.ndarray, keys: np.ndarray, values: np.ndarray
    ) -> None:
        self.region = region  # server -> row of ``base``
        self.n = len(region)
        self.k = len(base)
        self.shape = (self.n, self.n)
        self.dtype = base.dtype
        # i * n + j of the pairs that differ, sorted (both orders), and a key above them all
        # (``searchsorted`` then finds a place for any pair)
        self.keys = np.append(keys, np.iinfo(np.int64).max)
        # the region table, then the pairs' values in ``keys``' order (one lookup: ``locate``)
        self.flat = np.concatenate([base.ravel(), values])
        self.base = self.flat[: self.k * self.k].reshape(self.k, self.k)  # (views of it)
        self.values = self.flat[self.k * self.k :]

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        return self.take(self.locate(key[0], key[1]))

    def locate(self, i: Any, j: Any) -> np.ndarray:
        """Where the pairs ``(i, j)`` are in ``flat``: the same for the tables of one network
        (``Network.pairs``: latency and bandwidth in one search)."""
        i, j = np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp)
        at = i * self.n + j
        pos = np.searchsorted(self.keys, at)
        return np.where(
            self.keys[pos] == at, self.k * self.k + pos, self.region[i] * self.k + self.region[j]
        )

    def take(self, where: np.ndarray) -> Any:
        """The values at ``locate``'s pairs."""
        out = self.flat[where]
        return out[()] if out.ndim == 0 else out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.base[self.region][:, self.region]
        rows, cols = np.divmod(self.keys[:-1], self.n)
        out[rows, cols] = self.values
        return out if dtype is None else out.astype(dtype)

    def map(self, f: Callable[[np.ndarray], np.ndarray]) -> PairTable:
        """The table of ``f`` of each entry (``f`` elementwise)."""
        return PairTable(self.region, f(self.base), self.keys[:-1], f(self.values))


class Network:
    """Latency (ms) and bandwidth (Gb/s) between every pair of a cluster's servers: dense
    n x n arrays up to ``DENSE_MAX_SERVERS`` servers or where the links listed are an eighth
    of n^2 or more (a measured cluster: lookups in the arrays are several times faster, and
    a link costs more memory than a dense pair); else ``PairTable``s, indexed alike;
    ``dense`` chooses."""

    def __init__(self, cluster: Cluster, dense: bool | None = None) -> None:
        self.cluster = cluster
        self.names = [s.name for s in cluster.servers]
        self.index = dict(cluster.index)
        n = len(self.names)
        regions = sorted(set(cluster.regions))
        region_id = {r: i for i, r in enumerate(regions)}
        self.region = np.array([region_id[s.region] for s in cluster.servers], dtype=np.int32)
        k = len(regions)
        rlat = np.full((k, k), np.inf)
        rbw = np.full((k, k), DEFAULT_CROSS_REGION_GBPS)
        np.fill_diagonal(rbw, DEFAULT_INTRA_REGION_GBPS)
        for rl in cluster.region_links:
            if rl.a in region_id and rl.b in region_id:
                i, j = region_id[rl.a], region_id[rl.b]
                rlat[i, j] = rlat[j, i] = rl.latency_ms
                if rl.bandwidth_gbps:
                    rbw[i, j] = rbw[j, i] = rl.bandwidth_gbps
        # server links, both orders (``Cluster`` lists a pair once), the cut pairs (no
        # latency: they cannot communicate, a link of theirs or not), and each server with
        # itself (0 ms, no limit): keys i * n + j
        links = cluster.links
        a = np.array([self.index[lk.a] for lk in links], dtype=np.int64)
        b = np.array([self.index[lk.b] for lk in links], dtype=np.int64)
        ms = np.array([lk.latency_ms for lk in links], dtype=float)
        given = np.array([lk.bandwidth_gbps or np.nan for lk in links], dtype=float)
        if cluster.cut:  # (a link of a cut pair dropped; each cut pair once, no latency)
            ca = np.array([self.index[x] for x, _ in cluster.cut], dtype=np.int64)
            cb = np.array([self.index[y] for _, y in cluster.cut], dtype=np.int64)
            cut = np.unique(np.minimum(ca, cb) * n + np.maximum(ca, cb))
            kept = ~np.isin(np.minimum(a, b) * n + np.maximum(a, b), cut)
            a = np.concatenate([a[kept], cut // n])
            b = np.concatenate([b[kept], cut % n])
            ms = np.concatenate([ms[kept], np.full(cut.size, np.inf)])
            given = np.concatenate([given[kept], np.full(cut.size, np.nan)])
        gbps = np.where(np.isnan(given), rbw[self.region[a], self.region[b]], given)
        # the fastest link between two servers (any two, a region's defaults included): the
        # layout's lower bounds on transfers (``layout.layout_job``)
        self.fastest_gbps = float(max(rbw.max(), gbps.max(initial=0.0)))
        nearest = float(min(rlat.min(), ms.min(initial=np.inf)))
        self.nearest_ms = nearest if np.isfinite(nearest) else 0.0  # the shortest, alike
        own = np.arange(n, dtype=np.int64)
        keys = np.concatenate([a * n + b, b * n + a, own * (n + 1)])
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        ms_all = np.concatenate([ms, ms, np.zeros(n)])[order]
        gbps_all = np.concatenate([gbps, gbps, np.full(n, np.inf)])[order]
        lat = PairTable(self.region, rlat, keys, ms_all)
        bw = PairTable(self.region, rbw, keys, gbps_all)
        if dense is None:
            dense = n <= DENSE_MAX_SERVERS or a.size >= n * n // 8
        self.latency_ms: np.ndarray | PairTable = np.asarray(lat) if dense else lat
        self.bandwidth_gbps: np.ndarray | PairTable = np.asarray(bw) if dense else bw
        # the pairs that can communicate
        self.direct: np.ndarray | PairTable = (
            np.isfinite(self.latency_ms) if dense else lat.map(np.isfinite)
        )
        self.region_names = regions
        self.representative = {
            int(r): int(np.flatnonzero(self.region == r)[0]) for r in np.unique(self.region)
        }
        self._paths: dict[frozenset[int], list[int]] = {}
        # ``layout.linked_order``'s results, by (server ids as given, ring)
        self.orders: dict[tuple[tuple[int, ...], bool], tuple[int, ...]] = {}

    @property
    def dense(self) -> bool:
        """Whether the tables are dense n x n arrays (else ``PairTable``s)."""
        return isinstance(self.latency_ms, np.ndarray)

    def pairs(self, a: Any, b: Any) -> tuple[Any, Any]:
        """Latency and bandwidth of the pairs ``(a, b)`` (ints, or arrays that broadcast),
        in one lookup (the cost model's hot path)."""
        lat, bw = self.latency_ms, self.bandwidth_gbps
        if isinstance(lat, PairTable) and isinstance(bw, PairTable):
            where = lat.locate(a, b)
            return lat.take(where), bw.take(where)
        return lat[a, b], bw[a, b]

    @cached_property
    def rows(self) -> tuple[list[list[float]], list[list[float]]] | None:
        """Latency and bandwidth as Python lists, for the cost model's plain-Python path on
        small grids; None above ``ROWS_MAX_SERVERS`` (two n x n lists of floats cost memory).
        Built on first use: only the search's scoring needs them."""
        if len(self.names) > ROWS_MAX_SERVERS:
            return None
        return np.asarray(self.latency_ms).tolist(), np.asarray(self.bandwidth_gbps).tolist()

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
        if isinstance(self.direct, np.ndarray):
            return bool(self.direct.all())
        return unlinked_pairs(self.cluster) == 0

    @cached_property
    def linked(self) -> Sequence[frozenset[int]]:
        """For each server, the servers it can communicate with (above
        ``DENSE_MAX_SERVERS``, each worked out when first asked for)."""
        if isinstance(self.direct, np.ndarray):
            return [
                frozenset(np.flatnonzero(row).tolist()) - {i} for i, row in enumerate(self.direct)
            ]
        return _Rows(self.direct)

    @cached_property
    def groups(self) -> list[list[int]]:
        """The servers split into groups that a chain of links joins, largest first (one
        group where the cluster is connected): no pipeline spans two of them."""
        n = len(self.names)
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


class _Rows(Sequence[frozenset[int]]):
    """``Network.linked`` of a ``PairTable``: a server's row when first asked for."""

    def __init__(self, direct: PairTable) -> None:
        self.direct = direct
        self.all = np.arange(direct.n)
        self.rows: dict[int, frozenset[int]] = {}

    def __len__(self) -> int:
        return self.direct.n

    def __getitem__(self, i: int) -> frozenset[int]:  # type: ignore[override]
        n = self.direct.n
        if not -n <= i < n:  # (iteration ends on IndexError, as a list's: a review)
            raise IndexError(i)
        i = i + n if i < 0 else i  # (-1: the last)
        row = self.rows.get(i)
        if row is None:
            row = frozenset(np.flatnonzero(self.direct[i, self.all]).tolist()) - {i}
            self.rows[i] = row
        return row


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
    cut = {frozenset(p) for p in cluster.cut}
    linked += sum(
        1
        for lk in cluster.links
        if frozenset((region[lk.a], region[lk.b])) not in covered and lk.key not in cut
    )
    # a cut pair a region link covers (one a link gave is not counted above)
    linked -= sum(1 for p in cut if frozenset(region[x] for x in p) in covered)
    n = len(cluster.servers)
    return n * (n - 1) // 2 - linked
