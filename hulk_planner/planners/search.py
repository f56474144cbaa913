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

Moves (``hulk_planner.planners.moves``): servers moved between jobs and the free pool,
swaps, whole jobs relocated or traded between regions, and rebuilds of two to four jobs;
as many rebuilds again (``SETTLE_P``) are judged only after a short descent among the
rebuilt jobs' servers (``_settled_rebuild``), as a new arrangement is often a few server
moves from its own best.

Schedule: the start is a greedy region-by-region fill (``greedy_start``) or given
assignments (the GNN's two decodings). First, for at most ``COARSE_SHARE`` of the budget
(the GNN planner's refinement gives it more), a copy of each start descends through
relocations, regrowths at ``COARSE_GROWTH``'s sizes and trades alone (``coarse_descent``);
the best descent is the best state so far. The annealing
then runs from the start of that descent itself (on small clusters the coarse descent can
lock a good start into a worse basin) for ``ANNEAL_SHARE / (1 - COARSE_SHARE)`` of the
budget the coarse phase left (``ANNEAL_SHARE`` of the whole where it took its share), its
temperature falling geometrically. The rest polishes the best state seen (``_polish``:
relocations and trades, single moves, then swaps, first improvement taken, until none
helps). The same seed and iteration budget give the same plan.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from hulk_planner.cost import (
    CostModel,
    gib_text,
    memory_need_bytes,
    server_capacity,
    stage_memory,
)
from hulk_planner.layout import layout_job
from hulk_planner.model import Job, JobPlan, Plan, Unplaced
from hulk_planner.planners.moves import Change, Moves, State

UNPLACED_PENALTY = 100.0
UNPLACED_REACH = 4.0  # an unplaced job is pulled towards this many times its memory need
STICKINESS = 0.002
T_START, T_END = 0.05, 0.0005
COARSE_SHARE = 0.1  # of the budget, at most: relocations and trades from the start
# The descents' regrowths of a job where it is, factors of its GPU memory: finer than the
# annealing's (``moves.GROWTH``). A job's step time is not monotonic in its size (the
# replica and stage counts the layout picks jump), and on large clusters, each job in one
# region, the best size is often a few servers from any coarser factor: 50 of a region's
# servers where 60 and 48 are both slower, which single-server moves reach only by chance.
COARSE_GROWTH = (math.inf, 1.5, 1.25, 1.1, 1.05, 0.95, 0.9, 0.8, 0.7, 0.6)
ANNEAL_SHARE = 0.7  # of the budget; the rest polishes the best state to a local optimum
SETTLE_P = 0.03  # of the proposals: a rebuild judged after a short descent (_settled_rebuild)
SETTLE = 20  # moves that descent may try, per job the rebuild changed


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


def start_sets(
    servers: Iterable[str], names: Sequence[str], start: Mapping[str, str]
) -> dict[str | None, set[str]]:
    """Each job's servers under ``start`` (server -> job), the rest (of no job, or of one
    not in ``names``) under None: a ``State``'s sets."""
    sets: dict[str | None, set[str]] = {j: set() for j in names}
    sets[None] = set()
    for n in servers:
        owner = start.get(n)
        sets[owner if owner in sets else None].add(n)
    return sets


def start_state(cost: CostModel, jobs: Sequence[Job], start: Mapping[str, str]) -> State:
    """``start`` as a search state under the search's objective (no previous plan)."""
    evaluate = _Evaluator(cost, jobs)
    names = [j.name for j in jobs]
    servers = [s.name for s in cost.cluster.servers]
    return State(
        names, start_sets(servers, names, start), lambda j, m: evaluate(j, frozenset(m))[1]
    )


def coarse_descent(
    rng: random.Random,
    state: State,
    moves: Moves,
    budget: float = math.inf,
    deadline: float = math.inf,
) -> tuple[State, int]:
    """The search's coarse phase on ``state``: relocations, regrowths and trades of whole
    jobs, first improvement taken, to a local optimum or until ``budget`` moves or the
    ``deadline`` pass; returns the state and the moves tried."""
    return _polish(rng, state, moves, budget, deadline, coarse_only=True)


def search_plan(
    cost: CostModel,
    jobs: Sequence[Job],
    *,
    seed: int = 0,
    time_budget_s: float = 5.0,
    max_iterations: int | None = None,
    initial_assignment: Mapping[str, str] | None = None,
    alternatives: Sequence[Mapping[str, str]] = (),
    coarse_share: float = COARSE_SHARE,
    previous: Mapping[str, str] | None = None,
    settle: bool = True,
    name: str = "search",
) -> Plan:
    """Search from ``initial_assignment`` (server -> job; default ``greedy_start``) for
    ``time_budget_s`` seconds or ``max_iterations`` moves, whichever ends first (the
    schedule is in the module's docstring). ``alternatives``: other starts, each descended
    in the coarse phase after the first while its share lasts (``coarse_share`` of the
    budget, all the starts together); the annealing runs from the start whose descent
    ended best. ``settle=False`` leaves out the settled rebuilds: each costs tens of
    layouts, which pays in a long search and not in a short refinement of a good start (the
    GNN planner's)."""
    rng = random.Random(seed)
    evaluate = _Evaluator(cost, jobs)
    names = [j.name for j in jobs]
    if not names:
        return Plan(name)
    starts = [
        dict(initial_assignment) if initial_assignment is not None else greedy_start(cost, jobs),
        *(dict(a) for a in alternatives),
    ]
    moves = Moves(cost, jobs)
    sticky = dict(previous or {})

    def term(job: str, members: set[str]) -> float:
        moved = sum(STICKINESS for n in members if n in sticky and sticky[n] != job)
        return evaluate(job, frozenset(members))[1] + moved

    servers = [s.name for s in cost.cluster.servers]
    t0 = time.perf_counter()
    moves_left: float = math.inf
    coarse_deadline = deadline = polish_deadline = math.inf
    if max_iterations is not None:
        coarse_moves: float = int(max_iterations * coarse_share)
    else:
        coarse_moves = math.inf
        coarse_deadline = t0 + time_budget_s * coarse_share
    # coarse: a copy of each start descends through relocations and trades; the best so far
    descents: list[State] = []
    used = 0
    for k, start in enumerate(starts):
        descent = State(names, start_sets(servers, names, start), term)
        if k == 0 or (used < coarse_moves and time.perf_counter() < coarse_deadline):
            descent, tried = coarse_descent(
                rng, descent, moves, coarse_moves - used, coarse_deadline
            )
            used += tried
        descents.append(descent)
    pick = min(range(len(starts)), key=lambda k: descents[k].total())
    best, best_sets = descents[pick].total(), descents[pick].copy_sets()
    # the annealing runs from that start itself (on small clusters the coarse descent can
    # lock a good start into a worse basin), the polish from the best state seen
    state = State(names, start_sets(servers, names, starts[pick]), term)
    current = state.total()
    rest = ANNEAL_SHARE / (1 - COARSE_SHARE)  # of what the coarse phase left: annealing
    t1 = time.perf_counter()
    if max_iterations is not None:
        anneal_moves = int((max_iterations - used) * rest)
        moves_left = max_iterations - used - anneal_moves
    else:
        anneal_moves = 10**12
        deadline = t1 + max(0.0, t0 + time_budget_s - t1) * rest
        polish_deadline = t0 + time_budget_s
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
    polished, _ = _polish(rng, State(names, best_sets, term), moves, moves_left, polish_deadline)
    return _to_plan(name, cost, jobs, polished.sets, evaluate)


def _settled_rebuild(
    rng: random.Random,
    state: State,
    moves: Moves,
    accept: Callable[[float], bool],
    tries_per_job: int = SETTLE,
) -> float | None:
    """A rebuild judged after it settles (ruin and recreate): make ``Moves.rebuild``'s
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
    state: State,
    moves: Moves,
    budget: float,
    deadline: float,
    coarse_only: bool = False,
) -> tuple[State, int]:
    """Descend to a local optimum, first improvement taken, through neighbourhoods from
    the cheapest to the largest: every job regrown where it is (``COARSE_GROWTH``), to
    every region and every two jobs trading regions (``Moves.relocation``,
    ``Moves.trade``: jobs x regions layouts), every server
    to a job in its region (or free), to any job, every swap of two servers of a region,
    of any two. A round that improves something starts again from the first; the descent
    ends when a round improves nothing or ``budget`` moves or the ``deadline`` pass. The
    annealing's random proposals rarely hit the one swap that helps (a small job trading
    its server for a faster one); a sweep tries each. Returns the state and the moves tried."""
    owner_of = state.owner_of
    servers = sorted(owner_of)
    names = list(state.terms)
    region_of = moves.region_of

    def coarse() -> Iterator[list[Change]]:
        for job in names:
            home = moves.home(state, job)
            grown = [(home, f) for f in COARSE_GROWTH if home is not None]
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
                    return state, done
                done += 1
                if changes and state.attempt(changes, lambda d: d < -1e-9) is not None:
                    improved = True
            if improved:
                break
    return state, done


def _gib(x: float) -> str:
    """GiB (not bytes) as ``cost.gib_text`` writes them."""
    return gib_text(x * 2**30)


def _apart(cost: CostModel, need: float) -> str:
    """Where no chain of links joins the servers: how they split, the largest group's
    memory and the fix (before, a user read "no pipeline ... fits it" of a cluster whose
    links missed a server's, and had to find which; a user trial). ``need``: the job's
    memory need in GiB. Where the largest group has that much, joining the groups is not
    the fix: its own links form no chain that holds the job (a star, say), and more links
    among its servers are (before, "link the groups" was said there too: a trial)."""
    groups = cost.net.groups
    if len(groups) < 2:
        return ""
    names = [s.name for s in cost.cluster.servers]
    big = groups[0]
    room = float(np.sum(cost.capacity[big])) / 2.0**30
    alone = [names[g[0]] for g in groups if len(g) == 1]
    told = f" ({', '.join(alone[:5])}{', ...' if len(alone) > 5 else ''} alone)" if alone else ""
    split = f"they form {len(groups)} groups{told}, the largest {len(big)} server(s) with "
    if room >= need:
        return (
            f"; not every pair of them is linked: {split}{_gib(room)} usable, enough, but no "
            "chain of its links (a pipeline's stages in order, each linked to the next) holds "
            f"it (link more of those servers to one another: {LINK_FIX})"
        )
    return (
        f"; no chain of links joins them: {split}{_gib(room)} usable (link the groups: {LINK_FIX})"
    )


# how to add links, in a topology file and under the operator
LINK_FIX = (
    "in a topology file, links or regionLinks between them; under the operator, latency "
    "probes that reach across them, `kubectl get nodelatencies` shows which do not"
)


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
    room = float(np.max(cost.capacity)) / gib if len(cost.capacity) else 0.0
    for job in missing:
        need = memory_need_bytes(job) / gib
        others = f"other jobs planned with it hold {_gib(held)} of the {_gib(total)} usable"
        one = stage_memory(job, 1, 1) / gib  # a stage's server holds one layer at least
        if need > total:
            why = f"needs {_gib(need)} of GPU memory; {servers} have {_gib(total)} usable"
        elif one > room:
            why = (
                f"one layer needs {_gib(one)} of GPU memory (with one micro-batch's "
                f"activations); the largest of {servers} has {_gib(room)} usable"
            )
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
            ) + _apart(cost, need)
        unplaced.append(Unplaced(job.name, why))
    return Plan(name, tuple(placed), tuple(unplaced))
