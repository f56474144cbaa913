"""Laying one job over a set of servers: pipeline order, replicas and layer balance.

Every planner that decides *which* servers train a job (search, GNN) calls ``layout_job``
to decide *how*:

1. Order the regions along a short path (nearest neighbour from each start, keep the
   shortest), servers inside a region fastest first. Consecutive stages then cross as few
   slow links as possible, and the replicas of one stage sit side by side, mostly in one
   region: data parallelism stays inside regions, pipeline stages span regions (the
   heuristic Sailor, SOSP'25, also found best).
2. For a few replica counts ``R`` (and ``p = min(layers, n // R)`` stages), and the
   fastest server alone, keep the ``R * p`` fastest servers, cut the order into stages of
   ``R`` and balance layers; the same again with only the servers of the region holding
   most of the set's compute.
3. Balance layers by water-filling: each next layer goes to the stage that would finish it
   soonest, never past a stage's memory (``cost.stage_memory``).
4. Score the candidates with the cost model and keep the fastest: the most promising
   first (lowest lower bound on its step, ``_step_floor``), until the best so far beats
   every bound left, and none whose layers cannot fit (``_may_fit``; of the servers it
   takes, ``_may_fit_servers``) nor whose links alone, its stages ordered, make it slower
   than the best so far (``_links_floor``). The bounds are exact, so the layout is the one
   scoring every candidate would give (tested), 1.3-2.6x as fast (``bench/layout_speed.py``;
   1.0-1.3x the layout before ``_links_floor``, ``--against``). A candidate scored before
   for the same job on the same cost model (the same servers, order and replicas: a
   search's next set often differs by one slow server) is taken from a memo (``_Memo``).
5. Where none fits and links are missing (the chains of the fastest servers break), a path
   along the links themselves with room for the job (``linked_path``), one stage a server.

``repair_job`` keeps a running job's healthy stages where they are and replaces only lost
servers, for re-planning after a failure.
"""

from __future__ import annotations

import heapq
import itertools
import math
import weakref
from collections.abc import Collection, Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np

from hulk_planner.cost import (
    BYTES_PER_PARAM,
    BYTES_PER_VALUE,
    FLOPS_PER_PARAM_TOKEN,
    SMALL_GRID,
    CostModel,
    activation_bytes_per_layer,
    link_terms,
    memory_need_bytes,
    micro_batches,
    params_per_layer,
)
from hulk_planner.model import Job, JobPlan, Stage
from hulk_planner.topology import Network

_STAGE_COUNTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128)


def order_servers(cost: CostModel, names: Sequence[str]) -> list[str]:
    """Servers in pipeline order: regions along a short path, fastest servers first."""
    net = cost.net
    return [net.names[i] for i in _order_ids(cost, net.ids(list(names)))]


def _order_ids(cost: CostModel, ids: list[int]) -> list[int]:
    """``order_servers`` by server ids (sorted in place): each server's region and its rank
    among all servers by speed (fastest first, then by id) read from lists made once per
    cost model (``_ranks``), where numpy's scalar reads cost most of the sort."""
    region, rank = _ranks(cost)
    path = cost.net.region_path(frozenset([region[i] for i in ids]))
    n = len(rank)
    pos = {r: k * n for k, r in enumerate(path)}
    ids.sort(key=lambda i: pos[region[i]] + rank[i])
    return ids


def _ranks(cost: CostModel) -> tuple[list[int], list[int]]:
    """Each server's region id and its rank by (-speed, id), per cost model."""
    ranks = _RANKS.get(cost)
    if ranks is None:
        flops = cost.flops_list
        by_speed = sorted(range(len(flops)), key=lambda i: (-flops[i], i))
        rank = [0] * len(flops)
        for k, i in enumerate(by_speed):
            rank[i] = k
        ranks = _RANKS[cost] = (cost.net.region.tolist(), rank)
    return ranks


_RANKS: weakref.WeakKeyDictionary[CostModel, tuple[list[int], list[int]]] = (
    weakref.WeakKeyDictionary()
)


def linked_order(
    net: Network, ids: Sequence[int], *, ring: bool = False, tries: int = 2
) -> list[int]:
    """``ids`` (in pipeline order) reordered so that consecutive servers can communicate
    wherever the links allow, the given order kept otherwise; with ``ring`` the last must
    reach the first too (an all-reduce ring). Each next server is the first remaining one
    linked to the last; where that chain breaks (no remaining server linked to the last),
    chains from the next few starts are tried, then chains that take the linked server with
    the fewest links left first (Warnsdorff's rule: the hard ones before they are
    stranded), and the one with the fewest breaks kept. A break left makes the layout
    infeasible, as the cost model scores it."""
    ids = list(ids)
    if net.fully_linked or len(ids) < 2:
        return ids
    linked = net.linked
    if all(b in linked[a] for a, b in pairwise(ids)) and (not ring or ids[0] in linked[ids[-1]]):
        return ids  # linked as given (the common case inside a region)
    key = (tuple(ids), ring)
    cached = net.orders.get(key)
    if cached is not None:
        return list(cached)
    out = _linked_order(linked, ids, ring, tries)
    if len(net.orders) >= ORDER_CACHE:  # the search lays out many sets, most of them again
        net.orders.clear()
    net.orders[key] = tuple(out)
    return out


ORDER_CACHE = 100_000  # linked orders kept per network


def linked_names(net: Network, names: Sequence[str], *, ring: bool = False) -> list[str]:
    """:func:`linked_order` by server names, every start tried: for the baselines, which
    order each job's servers once."""
    ids = net.ids(list(names))
    return [net.names[i] for i in linked_order(net, ids, ring=ring, tries=len(ids))]


def _linked_order(
    linked: Sequence[frozenset[int]], ids: list[int], ring: bool, tries: int
) -> list[int]:
    members = set(ids)
    degree = {i: len(linked[i] & members) for i in ids}
    ends = [i for i in ids if degree[i] == 1]
    if min(degree.values()) == 0 or len(ends) > 2 or (ring and ends):
        return ids  # no chain holds them all (an isolated server, three dead ends)
    best: tuple[int, list[int]] | None = None
    # the given order's own chain first, then the hard ones first from the dead ends
    for start, fewest_first in [
        *((i, False) for i in ids[: tries // 2]),
        *((i, True) for i in (ends or ids[: tries // 2])),
    ]:
        out, breaks = _chain(linked, ids, start, fewest_first)
        if ring and out[0] not in linked[out[-1]]:
            breaks += 1
        if best is None or breaks < best[0]:
            best = (breaks, out)
        if breaks == 0:
            return out
    assert best is not None
    return best[1]


def _chain(
    linked: Sequence[frozenset[int]], ids: Sequence[int], start: int, fewest_first: bool
) -> tuple[list[int], int]:
    """A chain through ``ids`` from ``start`` (see ``linked_order``) and how often it broke;
    ``fewest_first``: each next server the linked one with the fewest links left."""
    out, left, breaks = [start], [i for i in ids if i != start], 0
    members = set(left)
    links_left = {i: len(linked[i] & members) for i in left} if fewest_first else {}
    while left:
        near = linked[out[-1]]
        if fewest_first:  # the first of the linked ones with the fewest links left
            k, fewest = -1, math.inf
            for j, i in enumerate(left):
                if i in near and links_left[i] < fewest:
                    k, fewest = j, links_left[i]
        else:
            k = next((k for k, i in enumerate(left) if i in near), -1)
        if k < 0:
            breaks, k = breaks + 1, 0
        pick = left.pop(k)
        members.discard(pick)
        if fewest_first:
            for j in linked[pick] & members:
                links_left[j] -= 1
        out.append(pick)
    return out, breaks


PATH_EXPANSIONS = 5_000  # ``linked_path``'s bound on the steps of its search
PATH_MARGINS = (1.0, 1.25, 1.5, 2.0, 3.0)  # room sought on a path, times the job's need


def linked_path(
    net: Network, ids: Sequence[int], room: Sequence[float], need: float
) -> list[int] | None:
    """A path through some of ``ids``, each next server linked to the last, whose servers'
    ``room`` (bytes each) adds up to ``need``; None if a depth-first search finds none
    within ``PATH_EXPANSIONS`` steps. It starts from the servers with the fewest links
    among ``ids`` (where a path through most of them ends) and takes the roomiest linked
    server next."""
    members = set(ids)
    linked = {i: net.linked[i] & members for i in ids}  # (C set operations: fast)
    nearby: dict[int, list[int]] = {}

    def roomiest_first(i: int) -> list[int]:  # (sorted for the servers visited alone)
        if i not in nearby:
            nearby[i] = sorted(linked[i], key=lambda j: (-room[j], j))
        return nearby[i]

    steps = 0
    for start in sorted(ids, key=lambda i: (len(linked[i]), -room[i], i)):
        path, on, total = [start], {start}, room[start]
        stack = [iter(roomiest_first(start))]
        while stack:
            if total >= need:
                return path
            steps += 1
            if steps > PATH_EXPANSIONS:
                return None
            nxt = next((j for j in stack[-1] if j not in on), None)
            if nxt is None:  # a dead end: back one server
                stack.pop()
                gone = path.pop()
                on.discard(gone)
                total -= room[gone]
                continue
            path.append(nxt)
            on.add(nxt)
            total += room[nxt]
            stack.append(iter(roomiest_first(nxt)))
    return None


def balance_layers(
    cost: CostModel, job: Job, stages: Sequence[Sequence[str]], m: int
) -> list[int] | None:
    """Layers per stage minimising the slowest stage within memory; None if they don't fit."""
    grid = [cost.net.ids(list(nodes)) for nodes in stages]
    return _balance(cost, job, grid, m)


def _balance(
    cost: CostModel, job: Job, grid: Sequence[Sequence[int]] | np.ndarray, m: int
) -> list[int] | None:
    p, total = len(grid), job.model.layers
    if p > total:
        return None
    # Row minima are cheaper than scoring, so plain Python pays here up to twice the size.
    if p * len(grid[0]) > 2 * SMALL_GRID and len({len(row) for row in grid}) == 1:
        arr = np.asarray(grid)
        speed = cost.flops[arr].min(axis=1).tolist()
        room = cost.capacity[arr].min(axis=1).tolist()
    elif all(len(row) == 1 for row in grid):  # one replica: no minimum to take
        flops, capacity = cost.flops_list, cost.capacity_list
        speed = [flops[row[0]] for row in grid]
        room = [capacity[row[0]] for row in grid]
    else:  # plain Python: numpy's per-call overhead dominates on the search's small grids
        flops, capacity = cost.flops_list, cost.capacity_list
        speed = [min([flops[i] for i in row]) for row in grid]
        room = [min([capacity[i] for i in row]) for row in grid]
    per_layer = params_per_layer(job) * BYTES_PER_PARAM
    act = activation_bytes_per_layer(job)
    cap = [int(room[k] // (per_layer + min(m, p - k) * act)) for k in range(p)]
    if min(cap) < 1 or sum(cap) < total:
        return None
    # Start below the ideal split in proportion to speed, then hand out the rest one layer at
    # a time to the stage that would finish it soonest (water-filling), within memory.
    fastest = sum(speed)
    counts = [min(cap[k], max(1, math.floor(total * speed[k] / fastest) - 1)) for k in range(p)]
    # The floor of one layer per stage can overshoot when speeds differ widely (5 layers on
    # one fast and four slow stages started at [3, 1, 1, 1, 1]): take layers back from the
    # stage that would finish last (p <= total, so this stops with every stage at >= 1).
    while sum(counts) > total:
        k = max(range(p), key=lambda k: counts[k] / speed[k] if counts[k] > 1 else -math.inf)
        counts[k] -= 1
    left = total - sum(counts)
    heap = [((counts[k] + 1) / speed[k], k) for k in range(p) if counts[k] < cap[k]]
    heapq.heapify(heap)
    for _ in range(left):
        _, k = heapq.heappop(heap)
        counts[k] += 1
        if counts[k] < cap[k]:
            heapq.heappush(heap, ((counts[k] + 1) / speed[k], k))
    return counts


def make_job_plan(
    job: Job,
    stages: Sequence[Sequence[str]],
    counts: Sequence[int],
    predicted: float = math.nan,
) -> JobPlan:
    out, start = [], 0
    for nodes, n in zip(stages, counts, strict=True):
        out.append(Stage((start, start + n), tuple(nodes), "data"))
        start += n
    return JobPlan(job.name, tuple(out), micro_batches(job, len(stages[0])), predicted)


def _candidates(n: int, layers: int) -> list[tuple[int, int]]:
    """(replicas, stages) pairs to try for n servers: for each stage count as many replicas
    as the servers allow, and the fastest server alone (a small job can run fastest on one
    server: the gradient all-reduce of replicas and the transfers of a pipeline both cost
    more than they save, and without this a set of three servers could not shrink to one
    through sets of two, which are slower still)."""
    seen, out = set(), []
    for p in (*_STAGE_COUNTS, min(n, layers)):
        if p > layers or p > n:
            continue
        r = n // p
        if (r, p) not in seen:
            seen.add((r, p))
            out.append((r, p))
    if (1, 1) not in seen:
        out.append((1, 1))
    return out


def _step_floor(job: Job, net: Network, speeds: Sequence[float], p: int, r: int) -> float:
    """A lower bound on the step time of any layout, as ``p`` stages of ``r`` replicas, of
    the ``r * p`` fastest of servers whose speeds are ``speeds`` (fastest first).

    A stage runs at its slowest server's speed, and no stage's slowest is faster than the
    r-th fastest server, nor the stages' slowest together faster than the r-th, 2r-th, ...
    fastest together. So a micro-batch's compute through the stages takes at least
    ``work / speeds[r - 1]`` and the pace (the slowest stage's share, balanced at best) at
    least ``work / sum(speeds[r - 1 :: r])``; each of the ``p - 1`` links is crossed both
    ways and each all-reduce hop taken at no less than the cluster's shortest latency and
    its fastest link's speed, the all-reduce carrying the gradients of the stage with the
    most layers. The cost model's step is these terms plus non-negative others (1F1B's
    window), so no layout scores below the bound; it is shaved by 1e-9 so that rounding
    never drops one that does."""
    b, s, h = job.micro_batch_size, job.model.sequence_length, job.model.hidden_size
    layers, rate = job.model.layers, net.fastest_gbps * 1e9 / 8
    work = FLOPS_PER_PARAM_TOKEN * params_per_layer(job) * b * s * layers
    slowest = speeds[r - 1 : r * p : r]
    pace = work / sum(slowest)
    t = work / slowest[0]
    if p > 1:
        hop = b * s * h * BYTES_PER_VALUE / rate
        t += 2 * (p - 1) * (net.nearest_ms / 1e3 + hop)
        pace = max(pace, hop)
    t += (micro_batches(job, r) - 1) * pace
    if r > 1:
        grads = params_per_layer(job) * -(-layers // p) * BYTES_PER_VALUE
        t += 2 * (r - 1) * net.nearest_ms / 1e3 + 2 * (r - 1) / r * grads / rate
    return t * (1 - 1e-9)


def _links_floor(
    job: Job,
    net: Network,
    tables: tuple[list[list[float]], list[list[float]]] | None,
    speeds: Sequence[float],
    rows: Sequence[Sequence[int]],
    m: int,
) -> float:
    """``_step_floor`` of a candidate once its stages (``rows``, in pipeline order) are
    known, with the links between them as the cost model scores them in place of the
    shortest and fastest link of the cluster: the crossings of the stage boundaries
    (``link_t``, each both ways) and the slowest transfer in the pace. The step's other
    terms are bounded as ``_step_floor`` bounds them (layers are not balanced yet), so no
    layout of these stages scores below it. Where a job crosses slow links, this is most
    of its step: a candidate whose links alone make it slower than the best so far is not
    balanced and scored. ``tables``: ``Network.rows`` (plain Python), or None (numpy,
    as the cost model scores large clusters)."""
    p, r = len(rows), len(rows[0])
    b, s, h = job.micro_batch_size, job.model.sequence_length, job.model.hidden_size
    layers, rate = job.model.layers, net.fastest_gbps * 1e9 / 8
    work = FLOPS_PER_PARAM_TOKEN * params_per_layer(job) * b * s * layers
    msg = b * s * h * BYTES_PER_VALUE
    slowest = speeds[r - 1 : r * p : r]
    if tables is None:
        grid = np.asarray(rows)
        lats, bws = net.pairs(grid[:-1], grid[1:])
        transfers = msg / (bws * 1e9 / 8)
        crossings = float((lats / 1e3 + transfers).max(axis=1).sum())
        widest = float(transfers.max())
    else:
        link_t, link_bw = link_terms(*tables, rows, msg)
        crossings, widest = sum(link_t), max(link_bw, default=0.0)
    t = work / slowest[0] + 2 * crossings + (m - 1) * max(work / sum(slowest), widest)
    if r > 1:
        grads = params_per_layer(job) * -(-layers // p) * BYTES_PER_VALUE
        t += 2 * (r - 1) * net.nearest_ms / 1e3 + 2 * (r - 1) / r * grads / rate
    return t * (1 - 1e-9)


def _may_fit(job: Job, rooms: Sequence[float], p: int, r: int) -> bool:
    """False if no ``p`` stages of ``r`` servers with GPU memory ``rooms`` (largest first)
    can hold the job's layers, each stage as many as its smallest server holds with one
    micro-batch of activations in flight (``_balance`` allows no more): the stages'
    smallest are at most the r-th, 2r-th, ... largest."""
    per_layer = params_per_layer(job) * BYTES_PER_PARAM + activation_bytes_per_layer(job)
    return sum(int(room // per_layer) for room in rooms[r - 1 : r * p : r]) >= job.model.layers


def _may_fit_servers(job: Job, rooms: list[float], p: int, r: int) -> bool:
    """``_may_fit`` of the servers a candidate takes (``rooms``: their GPU memory, ``r * p``
    of them): False also where the smallest cannot hold one layer with one micro-batch in
    flight (its stage, whichever it is, then holds none). Where the fastest servers are not
    the roomiest, most candidates ``_balance`` finds no room for are told here, before
    their servers are ordered."""
    rooms.sort(reverse=True)
    per_layer = params_per_layer(job) * BYTES_PER_PARAM + activation_bytes_per_layer(job)
    return rooms[-1] >= per_layer and _may_fit(job, rooms, p, r)


def _rows(ids: list[int], r: int) -> list[list[int]]:
    """Servers in pipeline order cut into stages of ``r`` replicas."""
    return [ids[k : k + r] for k in range(0, len(ids), r)]


Scored = tuple[float, list[int]] | None  # (step, layers per stage); None: nothing fits
Key = tuple[tuple[int, ...], int]  # (servers in pipeline order before linked_order, replicas)


class _Memo:
    """The candidates ``layout_job`` scored on one cost model, per job: ``Key`` ->
    ``Scored``. The search lays out sets that differ by a server or two, whose candidates
    are often the same fastest servers in the same order (``bench/layout_speed.py``: a
    search's sets with it and without). Emptied, all jobs together, when its entries reach
    ``MEMO_WORDS``: each counts its server ids, its layer counts and ``ENTRY_WORDS``."""

    def __init__(self) -> None:
        self.jobs: dict[Job, dict[Key, Scored]] = {}
        self.room = MEMO_WORDS

    def put(self, scored: dict[Key, Scored], key: Key, value: Scored) -> None:
        words = len(key[0]) + (0 if value is None else len(value[1])) + ENTRY_WORDS
        if self.room < words:
            for each in self.jobs.values():
                each.clear()
            self.room = MEMO_WORDS
        self.room -= words
        scored[key] = value


MEMO_WORDS, ENTRY_WORDS = 3_000_000, 32
_MEMOS: weakref.WeakKeyDictionary[CostModel, _Memo] = weakref.WeakKeyDictionary()


def layout_job(cost: CostModel, job: Job, names: Collection[str]) -> JobPlan | None:
    """The fastest layout of ``job`` on (a subset of) ``names``; None if nothing fits."""
    if not names:
        return None
    net = cost.net
    order = _order_ids(cost, net.ids(list(names)))
    # Candidates: the whole set, and the region holding most of the set's compute alone
    # (a job often runs best inside one region, leaving its far servers unused).
    subsets = [order]
    per_region: dict[int, list[int]] = {}
    region = _ranks(cost)[0]
    for i in order:
        per_region.setdefault(region[i], []).append(i)
    if len(per_region) > 1:
        subsets.append(max(per_region.values(), key=lambda ids: float(cost.flops[ids].sum())))
    best: tuple[float, int, list[int], int, list[int]] | None = None
    memo = _MEMOS.get(cost) or _MEMOS.setdefault(cost, _Memo())
    scored_before = memo.jobs.setdefault(job, {})

    def consider(
        chosen: list[int], p: int, r: int, rank: int, speeds: list[float] | None = None
    ) -> None:
        """Score ``chosen`` as ``p`` stages of ``r``; ``speeds``: its subset's, fastest
        first, where it is a candidate of the queue (the second bound needs them)."""
        nonlocal best
        key = (tuple(chosen), r)
        if key in scored_before:  # for this job on another set
            scored = scored_before[key]
        elif not _may_fit_servers(job, [capacity[i] for i in chosen], p, r):
            scored = None  # as ``_balance`` would find, without ordering the servers
            memo.put(scored_before, key, scored)
        else:
            rows = _rows(linked_order(net, chosen), r)
            m = micro_batches(job, r)
            if best is not None and speeds is not None and p > 1:
                if _links_floor(job, net, tables, speeds, rows, m) >= best[0]:
                    return  # its links alone make it slower than the best (not memoised:
                    # against another set's best it may win)
            counts = _balance(cost, job, rows, m)
            scored = None if counts is None else (cost.data_seconds(job, rows, counts, m), counts)
            memo.put(scored_before, key, scored)
        if scored is not None and (best is None or (scored[0], rank) < best[:2]):
            best = (scored[0], rank, chosen, r, scored[1])

    # Every candidate of every subset whose layers can fit, the most promising (lowest
    # bound) first, until the best so far beats every bound left; ties go to the earlier
    # candidate, as if each were scored in turn.
    flops, capacity = cost.flops_list, cost.capacity_list
    queue: list[tuple[float, int, list[int], list[int], list[float], int, int]] = []
    ranks = itertools.count()
    tables = net.rows  # (None on large clusters: numpy's tables instead)
    for subset in subsets:
        by_speed = sorted(subset, key=flops.__getitem__, reverse=True)  # (stable: ties
        # keep the pipeline order, as with the key -flops)
        speeds = [flops[i] for i in by_speed]
        rooms = sorted([capacity[i] for i in subset], reverse=True)
        for r, p in _candidates(len(subset), job.model.layers):
            rank = next(ranks)
            if _may_fit(job, rooms, p, r):
                bound = _step_floor(job, net, speeds, p, r)
                queue.append((bound, rank, subset, by_speed, speeds, r, p))
    queue.sort(key=lambda q: q[:2])
    for bound, rank, subset, by_speed, speeds, r, p in queue:
        if best is not None and bound >= best[0]:
            break  # no layout left can beat the best
        keep = set(by_speed[: r * p])
        consider([i for i in subset if i in keep], p, r, rank, speeds)
    need = memory_need_bytes(job)
    if (best is None or not math.isfinite(best[0])) and float(cost.capacity[order].sum()) >= need:
        # Nothing fits with the fastest servers first. Under 1F1B the first stages keep the
        # most micro-batches in flight, so the servers hold the most layers in ascending
        # order of memory, the largest last (rearrangement inequality): try that too.
        by_room = sorted(order, key=lambda i: (cost.capacity[i], i))
        for r, p in _candidates(len(by_room), job.model.layers):
            consider(by_room[len(by_room) - r * p :], p, r, next(ranks))
        if (
            (best is None or not math.isfinite(best[0]))
            and not net.fully_linked
            and any(b not in net.linked[a] for a, b in pairwise(linked_order(net, order)))
        ):
            # Nor on chains of the fastest servers: where links are few, those chains break
            # (a pipeline's next stage on a server its last cannot reach). Try a path along
            # the links themselves, with room enough for the job (a 16-server set with 76
            # of its 120 pairs unlinked had one of 9 servers; it was told "no pipeline
            # fits": a user trial). Room for the weights alone is not enough (activations,
            # the first stages' micro-batches in flight): paths with more room in turn,
            # until one fits.
            for margin in PATH_MARGINS:
                path = linked_path(net, order, cost.capacity_list, margin * need)
                if path is None:
                    break
                for r, p in _candidates(len(path), job.model.layers):
                    if r == 1:  # (a path of replicas would need links across it too)
                        consider(path[:p], p, 1, next(ranks))
                if best is not None and math.isfinite(best[0]):
                    break
    if best is None or not math.isfinite(best[0]):
        return None
    t, _, chosen, r, counts = best
    rows = _rows(linked_order(net, chosen), r)  # (the order cached where it reorders)
    stages = [[net.names[i] for i in row] for row in rows]
    return make_job_plan(job, stages, counts, t)


def repair_job(
    cost: CostModel, job: Job, previous: JobPlan, free: Collection[str]
) -> JobPlan | None:
    """Keep ``previous`` where its servers still exist and put each lost server's stage on a
    free server. Candidates are the free servers closest to the lost stage's pipeline
    neighbours (its replica's previous and next stages); each is scored with the old layer
    split and with the split rebalanced, and the fastest kept (the old split wins ties, as
    it moves no layers). None if a lost server has no replacement that fits."""
    alive = set(cost.net.index)
    pool = [n for n in free if n in alive and n not in previous.nodes]
    stages = [list(st.nodes) for st in previous.stages]
    m = micro_batches(job, len(stages[0]))
    counts = [st.num_layers for st in previous.stages]
    lost = [(k, r) for k, nodes in enumerate(stages) for r, n in enumerate(nodes) if n not in alive]

    def neighbours(k: int, r: int) -> list[str]:
        return [
            stages[j][r] for j in (k - 1, k + 1)
            if 0 <= j < len(stages) and stages[j][r] in alive
        ]  # fmt: skip

    # First every lost server gets the free server nearest its neighbours, so that a plan
    # can be scored (several lost at once: a region's outage); then each, in turn, the
    # best of the nearest few, scored with the old layer split and with it rebalanced.
    for k, r in lost:
        near = _nearest(cost, pool, neighbours(k, r))
        if not near:
            return None
        stages[k][r] = near[0]
        pool.remove(near[0])
    for k, r in lost:
        pool.append(stages[k][r])
        best: tuple[float, str, list[int]] | None = None
        for cand in _nearest(cost, pool, neighbours(k, r))[:8]:
            stages[k][r] = cand
            options = [counts]
            balanced = balance_layers(cost, job, stages, m)
            if balanced is not None and balanced != counts:
                options.append(balanced)
            for split in options:
                t = cost.job_seconds(job, make_job_plan(job, stages, split))
                if best is None or t < best[0]:
                    best = (t, cand, split)
        if best is None or not math.isfinite(best[0]):
            return None
        stages[k][r] = best[1]
        counts = best[2]
        pool.remove(best[1])
    jp = make_job_plan(job, stages, counts)
    t = cost.job_seconds(job, jp)
    return replace(jp, predicted_iteration_seconds=t) if math.isfinite(t) else None


def _nearest(cost: CostModel, pool: Sequence[str], anchors: Sequence[str]) -> list[str]:
    """Pool servers by mean latency to the anchors, then by speed."""
    if not pool:
        return []
    net = cost.net
    ids = net.ids(list(pool))
    if anchors:
        lat = net.latency_ms[np.ix_(ids, net.ids(list(anchors)))].mean(axis=1)
    else:
        lat = np.zeros(len(ids))
    order = sorted(range(len(ids)), key=lambda k: (lat[k], -cost.flops[ids[k]]))
    return [pool[k] for k in order]
