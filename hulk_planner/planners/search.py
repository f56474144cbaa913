"""The search planner: simulated annealing over which servers train which job.

State: each job's set of servers (the rest are free). A job's plan is ``layout_job`` of its
set, so the search only decides membership; the layout decides order, replicas and layers.

Objective (minimised): the sum over jobs of ``log(step seconds)``, i.e. the geometric mean
of the step times, so a job's relative speed-up counts the same whatever its size; a job
whose set holds no feasible layout costs ``UNPLACED_PENALTY`` plus its missing memory
fraction, plus the fraction missing to ``UNPLACED_REACH`` times its need, so the search is
pulled towards placing it also when its set holds its need but admits no layout yet (the
activations of in-flight micro-batches, a stage's smallest server). With a previous plan,
each server taken from the job it served costs ``STICKINESS``.

Moves: move a server to another job or to the free pool; take a free server; swap two
servers between jobs (half the time the partner is drawn from a job picked uniformly, so a
job of one server gets its share of swaps); let two small jobs trade their whole sets;
relocate a job to a region's fastest free servers, or regrow it where it is; let two jobs
trade regions; move a job's servers in one region to another job. Targets favour regions a
job already uses. Relocations and trades matter on large clusters, where each job fits in
one region and most servers are free: one server at a time, a job crosses the map only
through plans split over two regions, which the slow link between them makes far worse.
A few proposals (``REBUILD_P``) free two to four jobs and place them again one by one, each
on its best region (``_Moves.rebuild``): on small crowded clusters good plans differ by a
rotation of three or four jobs over the regions, which no chain of pair trades reaches
without passing through far worse plans. As many again (``SETTLE_P``) are judged only after
a short descent among the rebuilt jobs' servers (``_settled_rebuild``): laid on each
region's fastest servers at a guessed size, a new arrangement is often a few server moves
from its own best, and judged bare, at a low temperature, it is refused.

Schedule: the start is a greedy region-by-region fill (``greedy_start``) or a given
assignment (the GNN's). First, for at most ``COARSE_SHARE`` of the budget, a copy of the
start descends through relocations and trades alone; that is the best state so far. The
annealing then runs from the start itself (on small clusters the coarse descent can lock a
good start into a worse basin) for ``ANNEAL_SHARE`` of the budget, its temperature falling
geometrically. The rest polishes the best state seen (``_polish``: relocations and trades,
single moves, then swaps, first improvement taken, until none helps). The same seed and
iteration budget give the same plan.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from hulk_planner.cost import CostModel, memory_need_bytes, server_capacity
from hulk_planner.layout import layout_job
from hulk_planner.model import Job, JobPlan, Plan, Unplaced

UNPLACED_PENALTY = 100.0
UNPLACED_REACH = 4.0  # an unplaced job is pulled towards this many times its memory need
STICKINESS = 0.002
T_START, T_END = 0.05, 0.0005
EXCHANGE_MAX = 4  # servers: jobs this small may trade their whole sets in one move
COARSE_SHARE = 0.1  # of the budget, at most: relocations and trades from the start
ANNEAL_SHARE = 0.7  # of the budget; the rest polishes the best state to a local optimum
REBUILD_P = 0.03  # of the proposals: free 2 to REBUILD_MAX jobs and place them again
REBUILD_MAX = 4
SETTLE_P = 0.03  # of the proposals: a rebuild judged after a short descent (_settled_rebuild)
SETTLE = 20  # moves that descent may try, per job the rebuild changed
GROWTH = (math.inf, 1.5, 1.25, 0.8)  # a job regrown in its home region: factors of its GPU memory


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
            have = math.fsum(self.capacity[n] for n in servers)  # order-free: sets vary
            short = max(0.0, 1.0 - have / need) + max(0.0, 1.0 - have / (UNPLACED_REACH * need))
            value = (None, UNPLACED_PENALTY + short)
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
    settle: bool = True,
    name: str = "search",
) -> Plan:
    """Search from ``initial_assignment`` (server -> job; default ``greedy_start``) for
    ``time_budget_s`` seconds or ``max_iterations`` moves, whichever ends first (the
    schedule is in the module's docstring). ``settle=False`` leaves out the settled
    rebuilds: each costs tens of layouts, which pays in a long search and not in a short
    refinement of a good start (the GNN planner's)."""
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
    moves = _Moves(cost, jobs)
    sticky = dict(previous or {})

    def term(job: str, members: set[str]) -> float:
        moved = sum(STICKINESS for n in members if n in sticky and sticky[n] != job)
        return evaluate(job, frozenset(members))[1] + moved

    state = _State(names, sets, term)
    t0 = time.perf_counter()
    if max_iterations is not None:
        coarse_moves, anneal_moves = (int(max_iterations * x) for x in (COARSE_SHARE, ANNEAL_SHARE))
        coarse_deadline = deadline = math.inf
    else:
        coarse_moves = anneal_moves = 10**12
        coarse_deadline = t0 + time_budget_s * COARSE_SHARE
        deadline = t0 + time_budget_s * (COARSE_SHARE + ANNEAL_SHARE)
    current = state.total()
    coarse = _polish(
        rng, _State(names, state.copy_sets(), term), moves, coarse_moves, coarse_deadline, True
    )
    best, best_sets = coarse.total(), coarse.copy_sets()
    t1 = time.perf_counter()
    anneal_s = max(1e-9, deadline - t1)
    limit = anneal_moves
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
        if settle and rng.random() < SETTLE_P:
            delta = _settled_rebuild(rng, state, moves, metropolis)
        else:
            changes = moves.propose(rng, state)
            if not changes:
                continue
            delta = state.attempt(changes, metropolis)
        if delta is not None:
            current += delta
            if current < best - 1e-12:
                best = current
                best_sets = state.copy_sets()
    if max_iterations is not None:
        moves_left: float = max_iterations - coarse_moves - anneal_moves
        polish_deadline = math.inf
    else:
        moves_left, polish_deadline = math.inf, t0 + time_budget_s
    polished = _polish(rng, _State(names, best_sets, term), moves, moves_left, polish_deadline)
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
        # sorted: a set of strings iterates in an order that varies between processes
        # (hash randomisation), and the float sum below must not
        touched = sorted({j for _, a, b in changes for j in (a, b) if j is not None})
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


def _settled_rebuild(
    rng: random.Random,
    state: _State,
    moves: _Moves,
    accept: Callable[[float], bool],
    tries_per_job: int = SETTLE,
) -> float | None:
    """A rebuild judged after it settles (ruin and recreate): make ``_Moves.rebuild``'s
    change, then descend, first improvement taken, through moves of one server (of a job
    it changed, or free in their regions) to one of those jobs or to the free pool, at
    most ``tries_per_job`` x (jobs changed) tries; ``accept`` then takes or refuses the
    whole (returned: its change of the objective; None: refused, the state as before). A
    rebuild lays each job on a region's fastest servers at a guessed size, so a new
    arrangement of the jobs is often a few server moves from its own best, and judged
    bare, at a low temperature, it is refused."""
    changes = moves.rebuild(rng, state)
    if not changes:
        return None
    jobs = sorted({j for _, a, b in changes for j in (a, b) if j is not None})
    log = [changes]
    total = state.attempt(changes, lambda d: True) or 0.0
    region_of = moves.region_of
    regions = {region_of[n] for j in jobs for n in state.sets[j]}
    pool = sorted(
        n
        for n, owner in state.owner_of.items()
        if owner in jobs or (owner is None and region_of[n] in regions)
    )
    targets: list[str | None] = [*jobs, None]
    left = tries_per_job * len(jobs)
    improved = True
    while improved and left > 0:  # first improvement, server by server, until none helps
        improved = False
        rng.shuffle(pool)
        for n, dst in itertools.product(pool, targets):
            src = state.owner_of[n]
            if dst == src:
                continue
            if left <= 0:
                break
            left -= 1
            delta = state.attempt([(n, src, dst)], lambda d: d < -1e-12)
            if delta is not None:
                total += delta
                log.append([(n, src, dst)])
                improved = True
    if accept(total):
        return total
    for step in reversed(log):
        state.attempt([(n, b, a) for n, a, b in reversed(step)], lambda d: True)
    return None


def _polish(
    rng: random.Random,
    state: _State,
    moves: _Moves,
    budget: float,
    deadline: float,
    coarse_only: bool = False,
) -> _State:
    """Descend to a local optimum, first improvement taken, through neighbourhoods from
    the cheapest to the largest: every job to every region and every two jobs trading
    regions (``_Moves.relocation``, ``_Moves.trade``: jobs x regions layouts), every server
    to a job in its region (or free), to any job, every swap of two servers of a region,
    of any two. A round that improves something starts again from the first; the descent
    ends when a round improves nothing or ``budget`` moves or the ``deadline`` pass. The
    annealing's random proposals rarely hit the one swap that helps (a small job trading
    its server for a faster one); a sweep tries each."""
    owner_of = state.owner_of
    servers = sorted(owner_of)
    names = list(state.terms)
    region_of = moves.region_of

    def coarse() -> Iterator[list[Change]]:
        for job in names:
            home = moves.home(state, job)
            grown = [(home, f) for f in GROWTH if home is not None]
            for region, factor in [
                *grown,
                *((r, f) for r in moves.regions for f in (1.0, 2.0, math.inf)),
            ]:
                yield moves.relocation(state, job, region, factor)
        for k, a in enumerate(names):
            for b in names[k + 1 :]:
                for factor in (1.0, 2.0, math.inf):
                    yield moves.trade(state, a, b, factor)

    def singles(local: bool) -> Iterator[list[Change]]:
        rng.shuffle(servers)
        for n in servers:
            for dst in [*names, None]:
                near = dst is None or any(region_of[x] == region_of[n] for x in state.sets[dst])
                if dst != owner_of[n] and near == local:
                    yield [(n, owner_of[n], dst)]

    def swaps(local: bool) -> Iterator[list[Change]]:
        for k, n in enumerate(servers):
            for m in servers[k + 1 :]:
                a, b = owner_of[n], owner_of[m]
                if a != b and (region_of[n] == region_of[m]) == local:
                    yield [(n, a, b), (m, b, a)]

    phases: list[Callable[[], Iterator[list[Change]]]] = [
        coarse,
        lambda: singles(True),
        lambda: singles(False),
        lambda: swaps(True),
        lambda: swaps(False),
    ][: 1 if coarse_only else None]
    done = 0
    improved = True
    while improved:
        improved = False
        for phase in phases:
            for changes in phase():
                if done >= budget or time.perf_counter() >= deadline:
                    return state
                done += 1
                if changes and state.attempt(changes, lambda d: d < -1e-9) is not None:
                    improved = True
            if improved:
                break
    return state


class _Moves:
    """The search's neighbourhood: ``propose`` draws a random change of a state;
    ``relocation`` builds the one that moves a whole job to another region."""

    def __init__(self, cost: CostModel, jobs: Sequence[Job]) -> None:
        servers = cost.cluster.servers
        self.names = [j.name for j in jobs]
        self.all_servers = [s.name for s in servers]
        self.region_of = {s.name: s.region for s in servers}
        self.capacity = {s.name: server_capacity(s) for s in servers}
        self.need = {j.name: memory_need_bytes(j) for j in jobs}
        self.ranked: dict[str, list[str]] = {}  # region -> its servers, fastest first
        for s in sorted(servers, key=lambda s: (-s.flops, s.name)):
            self.ranked.setdefault(s.region, []).append(s.name)
        self.regions = sorted(self.ranked)
        net = cost.net  # its region ids index its sorted region names, as self.regions
        rep = {r: net.representative[i] for i, r in enumerate(net.region_names)}
        self.nearest = {  # region -> every region, nearest first (itself first)
            a: sorted(self.regions, key=lambda b: (a != b, net.latency_ms[rep[a], rep[b]], b))
            for a in self.regions
        }

    def memory(self, servers: Iterable[str]) -> float:
        """The usable GPU memory of ``servers``, bytes."""
        return math.fsum(self.capacity[n] for n in servers)

    def fastest(self, region: str, target: float, available: Callable[[str], bool]) -> list[str]:
        """``region``'s ``available`` servers, fastest first, until they hold ``target``
        bytes of GPU memory (all of them if they hold less)."""
        chosen: list[str] = []
        got = 0.0
        for n in self.ranked[region]:
            if got >= target:
                break
            if available(n):
                chosen.append(n)
                got += self.capacity[n]
        return chosen

    def goal(self, job: str, held: float, factor: float) -> float:
        """Bytes of GPU memory a job moved or placed again asks for: ``factor`` x what it
        held, or 1.25 x its need if it held nothing."""
        return factor * (held if held > 0 else 1.25 * self.need[job])

    def home(self, state: _State, job: str) -> str | None:
        """The region where ``job`` holds the most GPU memory (None if it holds none)."""
        held: dict[str, float] = {}
        for n in sorted(state.sets[job]):
            held[self.region_of[n]] = held.get(self.region_of[n], 0.0) + self.capacity[n]
        return max(sorted(held), key=held.__getitem__) if held else None

    def relocation(self, state: _State, job: str, region: str, factor: float = 1.0) -> list[Change]:
        """Free all of ``job``'s servers and give it ``region``'s fastest free ones (or its
        own there), until they hold ``factor`` x the GPU memory it held (or, if it held
        none, 1.25 x its need). The move that takes a job across the map in one step: one
        server at a time, the way passes through plans split over two regions, which the
        slow link between them makes far worse than either end."""
        mine = state.sets[job]
        target = self.goal(job, self.memory(mine), factor)
        chosen = self.fastest(region, target, lambda n: state.owner_of[n] is None or n in mine)
        keep = set(chosen)
        if keep == mine or not chosen:
            return []
        return [(n, job, None) for n in mine if n not in keep] + [
            (n, None, job) for n in chosen if n not in mine
        ]

    def trade(self, state: _State, a: str, b: str, factor: float = 1.0) -> list[Change]:
        """Jobs ``a`` and ``b`` swap home regions: each takes the other's region's fastest
        servers that are free or theirs, ``factor`` x the GPU memory it held. Relocation alone
        cannot do this: each region is full until the other job has left it."""
        ra, rb = self.home(state, a), self.home(state, b)
        if ra is None or rb is None or ra == rb:
            return []
        pair = state.sets[a] | state.sets[b]
        new: dict[str, str | None] = dict.fromkeys(pair)

        def untaken(n: str) -> bool:  # free or theirs, and not given to the other yet
            return new.get(n) is None and (n in pair or state.owner_of[n] is None)

        for job, region in ((a, rb), (b, ra)):
            for n in self.fastest(region, factor * self.memory(state.sets[job]), untaken):
                new[n] = job
        return [(n, state.owner_of[n], j) for n, j in new.items() if state.owner_of[n] != j]

    def rebuild(self, rng: random.Random, state: _State) -> list[Change]:
        """Free two or more jobs and place them again one by one, each on the best (by its
        own term) of every region's fastest untaken servers, spilling into the nearest
        regions when one is short, at 1 or 1.5 x the GPU memory it held."""
        names = self.names
        if len(names) < 2:
            return []
        chosen = rng.sample(names, rng.randint(2, min(REBUILD_MAX, len(names))))
        if rng.random() < 0.5:
            chosen.sort(key=lambda j: -self.need[j])
        freed = {n for j in chosen for n in state.sets[j]}
        taken: dict[str, str] = {}

        def untaken(n: str) -> bool:
            return n not in taken and (n in freed or state.owner_of[n] is None)

        for job in chosen:
            held = self.memory(state.sets[job])
            best: tuple[float, list[str]] | None = None
            for region in self.regions:
                for factor in (1.0, 1.5):
                    target = self.goal(job, held, factor)
                    picked: list[str] = []
                    for r in self.nearest[region]:
                        got = self.memory(picked)
                        if got >= target:
                            break
                        picked += self.fastest(r, target - got, untaken)
                    if picked:
                        value = state.term(job, set(picked))
                        if best is None or value < best[0]:
                            best = (value, picked)
            if best is not None:
                taken.update(dict.fromkeys(best[1], job))
        return [
            (n, state.owner_of[n], taken.get(n))
            for n in sorted(freed | set(taken))
            if state.owner_of[n] != taken.get(n)
        ]

    def propose(self, rng: random.Random, state: _State) -> list[Change]:
        names, sets, owner_of = self.names, state.sets, state.owner_of
        region_of = self.region_of
        if rng.random() < REBUILD_P:
            return self.rebuild(rng, state)
        kind = rng.random()
        n = rng.choice(self.all_servers)
        src = owner_of[n]
        if kind < 0.5:  # move one server to a job (often one already in its region) or free it
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
        if kind < 0.8:  # swap with a server of another owner
            if rng.random() < 0.5:
                m = rng.choice(self.all_servers)
            else:  # a server of a job picked uniformly: small jobs get their share of swaps
                pool = sets[rng.choice(names)]
                if not pool:
                    return []
                m = rng.choice(sorted(pool))
            if owner_of[m] == src:
                return []
            return [(n, src, owner_of[m]), (m, owner_of[m], src)]
        if kind < 0.87 and src is not None and len(sets[src]) <= EXCHANGE_MAX:
            # two small jobs trade their whole sets (a swap of one server each is the case of one)
            small = [j for j in names if j != src and len(sets[j]) <= EXCHANGE_MAX]
            if not small:
                return []
            other: str | None = rng.choice(small)
            mine: str | None = src
            return [(x, mine, other) for x in sets[mine]] + [(x, other, mine) for x in sets[other]]
        if kind < 0.9:  # two jobs swap regions
            a, b = rng.sample(names, 2) if len(names) > 1 else (names[0], names[0])
            return self.trade(state, a, b, rng.choice((1.0, 1.0, 2.0, math.inf)))
        if kind < 0.95:  # a job to n's region, or grown or shrunk where it is
            job = rng.choice(names)
            home = self.home(state, job)
            if home is not None and rng.random() < 0.5:
                return self.relocation(state, job, home, rng.choice(GROWTH))
            return self.relocation(state, job, region_of[n], rng.choice((0.8, 1.0, 1.0, 1.25)))
        # move every server of n's region held by src to another job (or free them)
        options = [j for j in names if j != src] + ([None] if src is not None else [])
        if not options:
            return []
        dst = rng.choice(options)
        return [(x, src, dst) for x in sets[src] if region_of[x] == region_of[n]]


def _gib(x: float) -> str:
    return f"{x:.0f} GiB" if 10 <= x < 1e6 or x == 0 else f"{x:.2g} GiB"


def _to_plan(
    name: str,
    cost: CostModel,
    jobs: Sequence[Job],
    sets: dict[str | None, set[str]],
    evaluate: _Evaluator,
) -> Plan:
    placed, missing = [], []
    for job in jobs:
        jp, _ = evaluate(job.name, frozenset(sets[job.name]))
        if jp is None:
            missing.append(job)
        else:
            placed.append(jp)
    gib = 2.0**30
    total = float(np.sum(cost.capacity)) / gib
    held = sum(float(cost.capacity[cost.net.index[n]]) for jp in placed for n in jp.nodes) / gib
    unplaced = []
    servers = f"the {len(cost.cluster.servers)} server(s) planned on"
    for job in missing:
        need = memory_need_bytes(job) / gib
        others = f"other jobs planned with it hold {_gib(held)} of the {_gib(total)} usable"
        if need > total:
            why = f"needs {_gib(need)} of GPU memory; {servers} have {_gib(total)} usable"
        elif need > total - held:
            why = f"needs {_gib(need)} of GPU memory; {others}, {_gib(total - held)} is left"
        elif held:
            why = (
                f"needs {_gib(need)} of GPU memory in servers that can reach each other; "
                f"{others}, and no pipeline over the {_gib(total - held)} left fits it"
            )
        else:
            why = (
                f"needs {_gib(need)} of GPU memory in servers that can reach each other; "
                f"no pipeline over the {_gib(total)} usable on {servers} fits it"
            )
        unplaced.append(Unplaced(job.name, why))
    return Plan(name, tuple(placed), tuple(unplaced))
