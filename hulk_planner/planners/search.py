"""The search planner: simulated annealing over which servers train which job.

State: each job's set of servers (the rest are free). A job's plan is ``layout_job`` of its
set, so the search only decides membership; the layout decides order, replicas and layers.

Objective (minimised): the sum over jobs of ``log(step seconds)``, i.e. the geometric mean
of the step times, so a job's relative speed-up counts the same whatever its size; a job
whose set holds no feasible layout costs ``UNPLACED_PENALTY`` plus its missing memory
fraction (so the search is pulled towards placing it). With a previous plan, each server
taken from the job it served costs ``STICKINESS``.

Moves: move a server to another job or to the free pool; take a free server; swap two
servers between jobs (half the time the partner is drawn from a job picked uniformly, so a
job of one server gets its share of swaps); let two small jobs trade their whole sets; move
a job's servers in one region to another job. Targets favour regions a job already uses.
The start is a greedy region-by-region fill (``greedy_start``) or a given assignment (the
GNN's). Temperature falls geometrically over ``ANNEAL_SHARE`` of the budget; the rest
polishes the best state seen (``_polish``: every single move, then every swap, first
improvement taken, until none helps). The same seed and iteration budget give the same plan.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from hulk_planner.cost import CostModel, memory_need_bytes, server_capacity
from hulk_planner.layout import layout_job
from hulk_planner.model import Job, JobPlan, Plan, Unplaced

UNPLACED_PENALTY = 100.0
STICKINESS = 0.002
T_START, T_END = 0.05, 0.0005
EXCHANGE_MAX = 4  # servers: jobs this small may trade their whole sets in one move
ANNEAL_SHARE = 0.8  # of the budget; the rest polishes the best state to a local optimum


class _Evaluator:
    """Cached layouts: (job, frozenset of servers) -> (plan or None, objective term)."""

    def __init__(self, cost: CostModel, jobs: Sequence[Job]) -> None:
        self.cost = cost
        self.jobs = {j.name: j for j in jobs}
        self.cache: dict[tuple[str, frozenset[str]], tuple[JobPlan | None, float]] = {}
        self.capacity = {s.name: server_capacity(s) for s in cost.cluster.servers}

    def __call__(self, job: str, servers: frozenset[str]) -> tuple[JobPlan | None, float]:
        key = (job, servers)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        jp = layout_job(self.cost, self.jobs[job], servers) if servers else None
        value: tuple[JobPlan | None, float]
        if jp is not None and math.isfinite(jp.predicted_iteration_seconds):
            value = (jp, math.log(jp.predicted_iteration_seconds))
        else:
            need = memory_need_bytes(self.jobs[job])
            have = sum(self.capacity[n] for n in servers)
            value = (None, UNPLACED_PENALTY + max(0.0, 1.0 - have / need))
        if len(self.cache) > 200_000:
            self.cache.clear()
        self.cache[key] = value
        return value


def greedy_start(cost: CostModel, jobs: Sequence[Job]) -> dict[str, str]:
    """Largest job first, each fills whole regions, nearest first, until it has its memory
    need (with 25% room) and an equal share of the cluster's compute: with step times about
    inversely proportional to compute, equal shares maximise the sum of log speeds, the
    search's objective (proportional fairness)."""
    net = cost.net
    free = {s.name for s in cost.cluster.servers}
    by_region: dict[int, list[str]] = {}
    for s in sorted(cost.cluster.servers, key=lambda s: -s.flops):
        by_region.setdefault(int(net.region[net.index[s.name]]), []).append(s.name)
    target = float(cost.flops.sum()) / max(1, len(jobs))
    assign: dict[str, str] = {}
    for job in sorted(jobs, key=lambda j: -memory_need_bytes(j)):
        need = memory_need_bytes(job) * 1.25
        regions = sorted(
            by_region,
            key=lambda r: -sum(cost.flops[net.index[n]] for n in by_region[r] if n in free),
        )
        if not regions:
            break
        seed = regions[0]
        rep = net.representative
        regions.sort(key=lambda r: net.latency_ms[rep[seed], rep[r]])
        memory = flops = 0.0
        for r in regions:
            for n in by_region[r]:
                if n not in free:
                    continue
                if memory >= need and flops >= target:
                    break
                assign[n] = job.name
                free.discard(n)
                memory += float(cost.capacity[net.index[n]])
                flops += float(cost.flops[net.index[n]])
    return assign


def search_plan(
    cost: CostModel,
    jobs: Sequence[Job],
    *,
    seed: int = 0,
    time_budget_s: float = 5.0,
    max_iterations: int | None = None,
    initial_assignment: Mapping[str, str] | None = None,
    previous: Mapping[str, str] | None = None,
    name: str = "search",
) -> Plan:
    """Anneal from ``initial_assignment`` (server -> job; default ``greedy_start``) for
    ``time_budget_s`` seconds or ``max_iterations`` moves, whichever ends first."""
    rng = random.Random(seed)
    evaluate = _Evaluator(cost, jobs)
    names = [j.name for j in jobs]
    if not names:
        return Plan(name)
    start = dict(initial_assignment) if initial_assignment is not None else greedy_start(cost, jobs)
    sets: dict[str | None, set[str]] = {j: set() for j in names}
    sets[None] = set()
    for s in cost.cluster.servers:
        owner = start.get(s.name)
        sets[owner if owner in sets else None].add(s.name)
    region_of = {s.name: s.region for s in cost.cluster.servers}
    sticky = dict(previous or {})

    def term(job: str, members: set[str]) -> float:
        moved = sum(STICKINESS for n in members if n in sticky and sticky[n] != job)
        return evaluate(job, frozenset(members))[1] + moved

    state = _State(names, sets, term)
    current = best = state.total()
    best_sets = state.copy_sets()
    all_servers = [s.name for s in cost.cluster.servers]
    t0 = time.perf_counter()
    anneal_s = time_budget_s * ANNEAL_SHARE
    deadline = t0 + anneal_s
    limit = int(max_iterations * ANNEAL_SHARE) if max_iterations is not None else 10**12
    it = 0
    temp = T_START

    def metropolis(delta: float) -> bool:
        """Always downhill; uphill with probability exp(-delta / temperature)."""
        return delta <= 0 or rng.random() < math.exp(-delta / temp)

    while it < limit and (max_iterations is not None or time.perf_counter() < deadline):
        it += 1
        frac = (
            min(1.0, it / limit)
            if max_iterations
            else 1 - (deadline - time.perf_counter()) / anneal_s
        )
        temp = T_START * (T_END / T_START) ** max(0.0, min(1.0, frac))
        changes = _propose(rng, names, state.sets, state.owner_of, all_servers, region_of)
        if not changes:
            continue
        delta = state.attempt(changes, metropolis)
        if delta is not None:
            current += delta
            if current < best - 1e-12:
                best = current
                best_sets = state.copy_sets()
    if max_iterations is not None:
        moves_left: float = max_iterations - limit
        polish_deadline = math.inf
    else:
        moves_left, polish_deadline = math.inf, t0 + time_budget_s
    polished = _polish(rng, _State(names, best_sets, term), moves_left, polish_deadline)
    return _to_plan(name, cost, jobs, polished.sets, evaluate)


Change = tuple[str, str | None, str | None]  # (server, from job, to job); None: free


class _State:
    """Which servers each job holds (key None: the free ones), each server's owner and each
    job's objective term, changed only through ``attempt``."""

    def __init__(
        self,
        names: list[str],
        sets: dict[str | None, set[str]],
        term: Callable[[str, set[str]], float],
    ) -> None:
        self.sets = sets
        self.term = term
        self.owner_of = {n: j for j, members in sets.items() for n in members}
        self.terms = {j: term(j, sets[j]) for j in names}

    def total(self) -> float:
        return sum(self.terms.values())

    def copy_sets(self) -> dict[str | None, set[str]]:
        return {k: set(v) for k, v in self.sets.items()}

    def attempt(self, changes: Sequence[Change], accept: Callable[[float], bool]) -> float | None:
        """Make ``changes``; keep them if ``accept`` takes the objective's change (returned),
        else undo them (None)."""
        touched = {j for _, a, b in changes for j in (a, b) if j is not None}
        for n, a, b in changes:
            self.sets[a].discard(n)
            self.sets[b].add(n)
        new = {j: self.term(j, self.sets[j]) for j in touched}
        delta = sum(new[j] - self.terms[j] for j in touched)
        if accept(delta):
            self.terms.update(new)
            for n, _, b in changes:
                self.owner_of[n] = b
            return delta
        for n, a, b in changes:
            self.sets[b].discard(n)
            self.sets[a].add(n)
        return None


def _polish(rng: random.Random, state: _State, moves: float, deadline: float) -> _State:
    """Descend to a local optimum: every server to every other job (or free), then every
    swap of two servers of different owners, first improvement taken, until a full round
    improves nothing or ``moves`` moves or the ``deadline`` pass. The annealing's random
    proposals rarely hit the one swap that helps (a small job trading its server for a
    faster one); a sweep tries each."""
    owner_of = state.owner_of
    servers = sorted(owner_of)
    jobs = [*state.terms, None]
    done = 0

    def improves(changes: list[Change]) -> bool:
        nonlocal done
        done += 1
        return state.attempt(changes, lambda d: d < -1e-9) is not None

    def spent() -> bool:
        return done >= moves or time.perf_counter() >= deadline

    improved = True
    while improved and not spent():
        improved = False
        rng.shuffle(servers)
        for n in servers:
            for dst in jobs:
                if spent():
                    return state
                if dst != owner_of[n] and improves([(n, owner_of[n], dst)]):
                    improved = True
                    break
        for k, n in enumerate(servers):
            for m in servers[k + 1 :]:
                if spent():
                    return state
                a, b = owner_of[n], owner_of[m]
                if a != b and improves([(n, a, b), (m, b, a)]):
                    improved = True
    return state


def _propose(
    rng: random.Random,
    names: list[str],
    sets: dict[str | None, set[str]],
    owner_of: dict[str, str | None],
    all_servers: list[str],
    region_of: dict[str, str],
) -> list[Change]:
    kind = rng.random()
    n = rng.choice(all_servers)
    src = owner_of[n]
    if kind < 0.55:  # move one server to a job (often one already in its region) or free it
        local = [
            j for j in names if j != src and any(region_of[x] == region_of[n] for x in sets[j])
        ]
        options: list[str | None] = [j for j in names if j != src]
        if src is not None:
            options.append(None)
        if not options:
            return []
        dst = rng.choice(local) if local and rng.random() < 0.6 else rng.choice(options)
        return [(n, src, dst)]
    if kind < 0.85:  # swap with a server of another owner
        if rng.random() < 0.5:
            m = rng.choice(all_servers)
        else:  # a server of a job picked uniformly: small jobs get their share of swaps
            pool = sets[rng.choice(names)]
            if not pool:
                return []
            m = rng.choice(sorted(pool))
        if owner_of[m] == src:
            return []
        return [(n, src, owner_of[m]), (m, owner_of[m], src)]
    if kind < 0.92 and src is not None and len(sets[src]) <= EXCHANGE_MAX:
        # two small jobs trade their whole sets (a swap of one server each is the case of one)
        small = [j for j in names if j != src and len(sets[j]) <= EXCHANGE_MAX]
        if not small:
            return []
        other: str | None = rng.choice(small)
        mine: str | None = src
        return [(x, mine, other) for x in sets[mine]] + [(x, other, mine) for x in sets[other]]
    # move every server of n's region held by src to another job (or free them)
    options = [j for j in names if j != src] + ([None] if src is not None else [])
    if not options:
        return []
    dst = rng.choice(options)
    return [(x, src, dst) for x in sets[src] if region_of[x] == region_of[n]]


def _to_plan(
    name: str,
    cost: CostModel,
    jobs: Sequence[Job],
    sets: dict[str | None, set[str]],
    evaluate: _Evaluator,
) -> Plan:
    placed, unplaced = [], []
    free_memory = float(np.sum(cost.capacity))
    for job in jobs:
        jp, _ = evaluate(job.name, frozenset(sets[job.name]))
        if jp is None:
            need = memory_need_bytes(job) / 2**30
            unplaced.append(
                Unplaced(
                    job.name,
                    f"needs {need:.0f} GiB of GPU memory in servers that can reach each other; "
                    f"the cluster has {free_memory / 2**30:.0f} GiB usable, shared with the "
                    "other jobs",
                )
            )
        else:
            placed.append(jp)
    return Plan(name, tuple(placed), tuple(unplaced))
