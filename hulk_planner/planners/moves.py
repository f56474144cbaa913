"""The search planner's neighbourhood: a state (which servers each job holds) and the
moves that change it.

Moves: move a server to another job or to the free pool; take a free server; swap two
servers between jobs (half the time the partner is drawn from a job picked uniformly, so a
job of one server gets its share of swaps); let two small jobs trade their whole sets;
relocate a job to a region's fastest free servers, or regrow it where it is; let two jobs
trade regions; move a job's servers in one region to another job. Targets favour regions a
job already uses. Relocations and trades matter on large clusters, where each job fits in
one region and most servers are free: one server at a time, a job crosses the map only
through plans split over two regions, which the slow link between them makes far worse.
A few proposals (``REBUILD_P``) free two to four jobs and place them again one by one, each
on its best region (``Moves.rebuild``): on small crowded clusters good plans differ by a
rotation of three or four jobs over the regions, which no chain of pair trades reaches
without passing through far worse plans. As many again (the search's ``SETTLE_P``) are judged
only after a short descent among the rebuilt jobs' servers (its ``_settled_rebuild``): laid on each
region's fastest servers at a guessed size, a new arrangement is often a few server moves
from its own best, and judged bare, at a low temperature, it is refused.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence

from hulk_planner.cost import CostModel, memory_need_bytes, server_capacity
from hulk_planner.model import Job

EXCHANGE_MAX = 4  # servers: jobs this small may trade their whole sets in one move
REBUILD_P = 0.03  # of the proposals: free 2 to REBUILD_MAX jobs and place them again
REBUILD_MAX = 4
GROWTH = (math.inf, 1.5, 1.25, 0.8)  # a job regrown in its home region: factors of its GPU memory


Change = tuple[str, str | None, str | None]  # (server, from job, to job); None: free


class State:
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


class Moves:
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

    def home(self, state: State, job: str) -> str | None:
        """The region where ``job`` holds the most GPU memory (None if it holds none)."""
        held: dict[str, float] = {}
        for n in sorted(state.sets[job]):
            held[self.region_of[n]] = held.get(self.region_of[n], 0.0) + self.capacity[n]
        return max(sorted(held), key=held.__getitem__) if held else None

    def relocation(self, state: State, job: str, region: str, factor: float = 1.0) -> list[Change]:
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

    def trade(self, state: State, a: str, b: str, factor: float = 1.0) -> list[Change]:
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

    def rebuild(self, rng: random.Random, state: State) -> list[Change]:
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

    def propose(self, rng: random.Random, state: State) -> list[Change]:
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
