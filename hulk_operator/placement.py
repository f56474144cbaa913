"""The operator's planning rounds (:class:`Placer`), around ``rounds.plan_pending``.

One planning round at a time (an asyncio lock), a short batch window so jobs applied
together are planned together, and in-memory reservations for decisions not yet written to
a job's status: a reserved job is not planned again and its servers stay held, so two
rounds never hand out the same server (before, a later round re-planned reserved jobs and
pinned pods of two jobs to one server). A running job's re-plan for lost servers goes
before a round in progress: the round is made again after it (:meth:`Placer.decide`).
An unplaced job is planned again only when what
its round saw changes; a job whose stage pods the API server keeps refusing gives its
servers back and pauses (:meth:`Placer.give_back`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hulk_operator import decision, regrow
from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.fit import says_fits_nowhere
from hulk_operator.give_back import Refusals
from hulk_operator.inventory import NodeInfo
from hulk_operator.quota_fit import add_use, quotas_seen, within_quota
from hulk_operator.rounds import PlanFn, job_priority, plan_group, plan_pending
from hulk_operator.snapshot import Snapshot, Taken, amount_text
from hulk_planner.model import JobPlan, Plan, Server

WRITE_TIMEOUT_S = 30.0  # a status write not seen by then is taken as lost
BATCH_MAX_S = 5.0  # the longest a round waits for more jobs applied with the first
# An unplaced job whose namespace's quota figures alone moved (any pod there came or went)
# is planned again at most this often: a busy namespace must not start a round at every pod.
QUOTA_RECHECK_S = 10.0
TELL_AGAIN_S = 600.0  # an unplaced job's cause is posted as an Event at most this often


ADVICE_ALIKE = 0.1  # a faster plan's speedup within this share of the one told: not told


def same_plan(a: JobPlan, b: JobPlan) -> bool:
    """The same stages (layers, servers) and micro-batches."""
    return (a.stages, a.micro_batches) == (b.stages, b.micro_batches)


class Placer:
    """The operator's planning rounds (see the module's docstring)."""

    def __init__(
        self,
        plan_fn: PlanFn,
        *,
        planner: str = "hulk",
        batch_window_s: float = 0.3,
        same_region_ms: float = 1.0,
        cross_region_ms: float = 100.0,
        budget_s: float | None = None,
        baselines: bool = False,
        on_round: Callable[[float, dict[Key, Decision]], None] | None = None,
        regrow_every_s: float = 5.0,
        advise_every_s: float | None = None,
        advise_share: float | None = None,
    ) -> None:
        self.plan_fn = plan_fn
        self.planner = planner
        self.batch_window_s = batch_window_s
        self.opts = dict(
            same_region_ms=same_region_ms, cross_region_ms=cross_region_ms, budget_s=budget_s
        )
        self.baselines = baselines
        self.on_round = on_round
        self.lock = asyncio.Lock()
        self.replans_waiting = 0  # running jobs' re-plans waiting for the lock
        # Placed, possibly not yet in the job's status. A reservation is final: it is handed
        # to its job (``decide``) and never replaced by a later round, so a job's status is
        # only ever written from one decision per placement or re-plan.
        self.reserved: dict[Key, Decision] = {}
        self.unplaced: dict[Key, tuple[Any, Decision]] = {}  # last failure and its inputs
        self.regrow_checked: dict[Key, tuple[Any, ...]] = {}  # what the last regrow saw
        # a faster plan below minSpeedup, or one a job without spec.regrow is told of: the
        # RegrowDeclined (FasterPlanAvailable) Event's words, until posted
        self.regrow_declined: dict[Key, str] = {}
        # those posted, and when, the last posted last: the same words not again within
        # TELL_AGAIN_S, nor twice running ever (before, only the last was kept: words that
        # came back after others were posted again; a trial)
        self.regrow_told: dict[Key, dict[str, float]] = {}
        # the speedup a FasterPlanAvailable posted said: one within ADVICE_ALIKE of it is
        # not posted again in other words (a time-budgeted planner's figures vary from look
        # to look: a trial saw 2.09x, then 1.98x 30 s later, nothing changed)
        self.told_speedup: dict[Key, tuple[Any, float]] = {}
        # how many times faster the last look's plan was than the job's (None: no plan,
        # or not scored): hulk_job_free_speedup, set by the job's own reconciliation
        self.speedups: dict[Key, float | None] = {}
        # the servers the job's plan was planned on (None: not known, as after a restart)
        self.offered: dict[Key, frozenset[Server] | None] = {}
        self.orphans_told: dict[Key, str] = {}  # job -> its uid once told OrphanedStagePods
        # (namespace, job, reason) whose newest Event was read from the API server once
        self.events_read: set[tuple[str, str, str]] = set()
        # A job's growth is looked at once per regrow_every_s, not at every tick: each look
        # builds a snapshot and the job's free servers under the planning lock; a job
        # without spec.regrow once per advise_every_s (it is only told).
        self.regrow_every_s = regrow_every_s
        self.advise_every_s = regrow.ADVISE_EVERY_S if advise_every_s is None else advise_every_s
        # ... and, all such jobs together, planned at most this share of the time (a look
        # that planned for t seconds holds the next one back t * (1 / share - 1)): 50 jobs
        # on 1,000 servers would otherwise plan one after another at every change
        self.advise_share = regrow.ADVISE_SHARE if advise_share is None else advise_share
        self._advise_next = -math.inf  # (clock) when the next such look may plan
        self._regrow_looked: dict[Key, float] = {}
        self._used: set[int] = set()  # serials of decisions applied
        self.refusals = Refusals()  # jobs whose stage pods are refused
        # when a refused edit was last checked, and the servers free for it then
        self.edit_checked: dict[Key, tuple[float, tuple[NodeInfo, ...]]] = {}
        # an edit tried on the free servers (``edits.unplannable``): what it was tried on
        # (``fingerprint``, generation) and why no plan fit (None: one did)
        self.edit_tried: dict[Key, tuple[Any, str | None]] = {}
        # a running job's edit allowed (planned afresh), by generation: still planned as a
        # waiting edit until the jobs' index shows it pending (``edits_waiting``: before,
        # between the two a round gave the servers its plan needed to lower-ranked jobs)
        self.edit_claimed: dict[Key, int] = {}
        # (uid, generation) of a waiting job whose pod template a dry run took
        self.template_checked: dict[Key, tuple[str, int]] = {}
        # job -> the causes it was told it waits for (figures aside) and when: each is
        # posted as an Event once per TELL_AGAIN_S (``newly_told``)
        self.told: dict[Key, dict[str, float]] = {}
        self.edits_told: dict[Key, dict[str, float]] = {}  # the same, of a waiting edit

    def newly_told(self, key: Key, cause: str, now: float, edit: bool = False) -> bool:
        """Whether an unplaced job's ``cause`` (its reason, figures aside) was not told in
        the last TELL_AGAIN_S, noting it told now (``edit``: a running job's waiting edit's
        refusal). Before, a job whose reason went back and forth between two causes as
        other jobs came and went had an Event at each change (17 in 5 minutes: a user
        trial)."""
        seen = (self.edits_told if edit else self.told).setdefault(key, {})
        for c in [c for c, t in seen.items() if now - t > TELL_AGAIN_S]:
            del seen[c]
        if cause in seen:
            return False
        seen[cause] = now
        return True

    def first_use(self, decision: Decision) -> bool:
        """True the first time a decision is applied (for events and counters)."""
        if decision.serial in self._used:
            return False
        self._used.add(decision.serial)
        if len(self._used) > 10_000:
            self._used = (
                {d.serial for d in self.reserved.values()}
                | {d.serial for _, d in self.unplaced.values()}
                | {d.serial for d in self.refusals.decisions()}
            )
        return True

    def prune(self, jobs: Mapping[Key, JobEntry]) -> None:
        """Drops reservations that the jobs' statuses now show, whose job is gone, or that
        were made for an older spec (an edit while it was planned) or another object of
        the name (deleted and applied again while its round planned: before, the new job,
        at generation 1 too, got the old spec's plan; a review)."""
        for k, d in list(self.reserved.items()):
            e = jobs.get(k)
            stale = e is not None and d.generation and d.generation != e.generation
            other = e is not None and d.uid and d.uid != e.uid
            if e is None or e.deleting or e.plan_nodes == d.nodes or stale or other:
                del self.reserved[k]
        looks: tuple[dict[Key, Any], ...] = (
            self.regrow_checked,
            self._regrow_looked,
            self.regrow_declined,
            self.regrow_told,
            self.told_speedup,
            self.speedups,
            self.offered,
            self.orphans_told,
        )
        for memo in looks:
            for k in [k for k in memo if k not in jobs]:
                del memo[k]
        self.events_read = {k for k in self.events_read if (k[0], k[1]) in jobs}
        self.refusals.prune(jobs)
        for k in [k for k in self.template_checked if k not in jobs]:
            del self.template_checked[k]
        for k in [k for k in self.told if k not in jobs or not jobs[k].pending]:
            del self.told[k]  # (placed, or gone: a later wait tells its causes afresh)
        for k in [k for k in list(self.edits_told) if k not in jobs or jobs[k].pending]:
            del self.edits_told[k]  # (its edit allowed, or gone)

    def give_back(
        self,
        entry: JobEntry,
        why: str,
        grace_s: float,
        policies: tuple[tuple[str, str], ...] = (),
        blocker: tuple[str, str] | None = None,
    ) -> Decision:
        """The job's pods were refused too long: it drops its plan (the caller deletes its
        pods) and pauses (``Refusals.pause``). Returns what it is told."""
        told = self.refusals.pause(entry, why, grace_s, self.planner, policies, blocker)
        self.first_use(told)  # told by the caller, once
        self.forget(entry.key)
        return told

    def reserved_use(self, snap: Snapshot, but: Key | None = None) -> dict[str, dict[Taken, float]]:
        """By namespace, what the reserved decisions' pods will count toward its quotas and
        do not yet (not created, or not counted yet), by quota and resource: a later round
        must not hand the same quota out again (two gangs, each half admitted, would wait
        for good)."""
        out: dict[str, dict[Taken, float]] = {}
        for k, d in self.reserved.items():
            e = snap.jobs.get(k)
            if k != but and e is not None:
                add_use(out.setdefault(k[0], {}), snap, e, d)
        return out

    def held(self, base: Mapping[str, Key]) -> dict[str, Key]:
        out = dict(base)
        for k, d in self.reserved.items():
            for n in d.nodes:
                out[n] = k
        return out

    @staticmethod
    def fingerprint(
        snap: Snapshot, entry: JobEntry, edits: Collection[Key] = ()
    ) -> tuple[Any, ...]:
        """What a job's last failed round saw (``edits``: the waiting edits it planned,
        ``edits_waiting``); the quota figures come last."""
        return (
            # the free servers as offered, with the GPUs other pods leave (before, by name:
            # a notebook's GPUs freed on a free server left the job on its old failure)
            tuple(snap.free(entry)),
            snap.latencies.unreachable,  # (a pair measured again: planned again)
            # every node as the index keeps it (unchanged ones are the same objects, so
            # this compares fast): a relabel that leaves the free set as it was (more GPU
            # memory on a free server, say) was not seen, and the job waited on a failure
            # planning would no longer give
            tuple(snap.nodes.values()),
            entry.generation,
            entry.uid,  # (applied again under its name: not the old object's failure)
            tuple(sorted(k for k, e in snap.jobs.items() if e.pending)),
            snap.gpu_max(entry.key[0]),
            snap.gpu_min(entry.key[0]),
            tuple(sorted(snap.limit_bounds.get(entry.key[0], ()))),
            repr(snap.pod_resources(entry)),  # a LimitRange default added: counted anew
            # (an edit that kept servers from it undone, allowed or edited again: planned
            # again, as it may get them now)
            tuple(sorted((k, snap.jobs[k].generation) for k in edits if k in snap.jobs)),
            *quotas_seen(snap, entry),
        )

    def _unchanged(self, snap: Snapshot, entry: JobEntry) -> Decision | None:
        """The job's last failure, where planning it again now would change nothing: the
        round saw the same, or only its namespace's quota figures moved, less than
        ``QUOTA_RECHECK_S`` ago."""
        last = self.unplaced.get(entry.key)
        if last is None:
            return None
        seen, now = last[0], self.fingerprint(snap, entry, self.edits_waiting(snap))
        if seen == now:
            return last[1]
        if seen[:-1] == now[:-1] and decision.clock() - last[1].made < QUOTA_RECHECK_S:
            return last[1]
        return None

    async def decide(
        self, key: Key, snapshot: Callable[[], Awaitable[Snapshot]]
    ) -> Decision | None:
        """This job's decision: a reservation made by an earlier round, the same failure
        as last time when nothing changed, or a fresh round over all pending jobs. A
        running job's re-plan that comes while the round plans goes first: the round is
        made again after it (once), on what it left (before, the round took the free
        servers the re-plan would have used, and the job came back on fewer or none)."""
        for attempt in range(2):
            async with self.lock:
                snap = await snapshot()
                self.prune(snap.jobs)  # (a reservation for an older spec goes)
                if key in self.reserved:
                    return self.reserved[key]
                entry = snap.jobs.get(key)
                if entry is None or not entry.pending:
                    return None
                waiting = self.refusals.waiting_out(entry, snap)
                if waiting is not None:
                    return waiting
                snap.held = self.held(snap.held)
                last = self._unchanged(snap, entry)
                if last is not None:
                    return last
                snap = await self._batch(snap, snapshot)
                if attempt == 0 and self.replans_waiting:  # (came while it waited)
                    continue
                self.prune(snap.jobs)
                snap.held = self.held(snap.held)
                started = time.perf_counter()
                edits = self.edits_waiting(snap)  # (as the round planned them)
                decisions = await asyncio.to_thread(
                    plan_pending,
                    snap,
                    self.plan_fn,
                    planner=self.planner,
                    baselines=self.baselines,
                    decided=set(self.reserved) | self.refusals.pausing(snap),
                    taken=self.reserved_use(snap),
                    edits=edits,
                    **self.opts,  # type: ignore[arg-type]
                )
                placed = any(d.job_plan is not None for d in decisions.values())
                if attempt == 0 and placed and self.replans_waiting:
                    continue  # (the lock is let go: the waiting re-plans hold it first)
                if self.on_round:
                    self.on_round(time.perf_counter() - started, decisions)
                return self._commit(snap, decisions, key, edits)
        raise AssertionError("unreachable")  # (the second attempt always returns)

    def _commit(
        self, snap: Snapshot, decisions: dict[Key, Decision], key: Key, edits: Collection[Key]
    ) -> Decision | None:
        """Keeps a round's decisions (placed: reserved; unplaced: with what the round saw,
        ``edits`` the waiting edits it planned, not planned again until that changes) and
        returns ``key``'s."""
        after = replace(snap, held=dict(snap.held))
        decisions = {  # (the spec each was made for: an edit since drops it, ``prune``)
            k: replace(d, generation=snap.jobs[k].generation, uid=snap.jobs[k].uid)
            if k in snap.jobs
            else d
            for k, d in decisions.items()
        }
        for k, d in decisions.items():
            if d.job_plan is not None:
                # (the servers the round gave the others were not this job's to take: when
                # they free up, a look is worth it; a review)
                others = {n for o, od in decisions.items() if o != k for n in od.nodes}
                self._reserve(k, d, others)
                self.unplaced.pop(k, None)
                for n in d.nodes:
                    after.held[n] = k  # type: ignore[index]
        for k, d in decisions.items():
            if d.job_plan is None and k in snap.jobs:
                self.unplaced[k] = (self.fingerprint(after, snap.jobs[k], edits), d)
        return decisions.get(key)

    async def _batch(self, snap: Snapshot, snapshot: Callable[[], Awaitable[Snapshot]]) -> Snapshot:
        """The snapshot to plan on, once ``batch_window_s`` passed with no new pending job:
        jobs applied together are planned together, for at most ``BATCH_MAX_S`` (before, a
        fixed 0.3 s: 30 jobs of one ``kubectl apply``, 0.8 s long, went in 4 rounds, the
        later ones on leftover servers; a user trial on 400 nodes)."""
        end = time.monotonic() + BATCH_MAX_S
        seen = {k for k, e in snap.jobs.items() if e.pending}
        while True:
            await asyncio.sleep(self.batch_window_s)
            snap = await snapshot()
            now = {k for k, e in snap.jobs.items() if e.pending}
            if now <= seen or time.monotonic() >= end:
                return snap
            seen = now

    async def replan(
        self,
        entry: JobEntry,
        current: JobPlan,
        snapshot: Callable[[], Awaitable[Snapshot]],
    ) -> Decision:
        """A new plan for a running job that lost servers: its healthy servers plus free
        ones, keeping healthy stages where they are when the cost model allows. A round
        of pending jobs in progress meanwhile is made again after it (``decide``)."""
        self.replans_waiting += 1
        try:
            await self.lock.acquire()
        finally:
            self.replans_waiting -= 1
        try:
            snap = await snapshot()
            self.prune(snap.jobs)
            snap.held = self.held(snap.held)
            servers = snap.free(entry, also=current.nodes)
            started = time.perf_counter()

            plan = self._planning(servers, snap, previous=current)

            def within() -> dict[Key, Decision]:  # the namespace's quotas hold its new pods
                d = plan([entry])[entry.key]
                taken = self.reserved_use(snap, but=entry.key)
                return {entry.key: within_quota(entry, d, snap, taken, plan, keep=current.nodes)}

            decisions = await asyncio.to_thread(within)
            if self.on_round:
                self.on_round(time.perf_counter() - started, decisions)
            d = replace(
                decisions[entry.key], base=current, generation=entry.generation, uid=entry.uid
            )
            if d.job_plan is not None:
                self._reserve(entry.key, d)
            return d
        finally:
            self.lock.release()

    async def regrow(
        self,
        entry: JobEntry,
        current: JobPlan,
        snapshot: Callable[[], Awaitable[Snapshot]],
        advise: float = 0.0,
    ) -> Decision | None:
        """A faster plan for a running job with ``spec.regrow`` on its servers plus the
        free ones (``regrow.faster``); None while a job waits for servers or a running
        job's re-plan for lost servers waits to plan, when no server is free, or when
        nothing changed since the last check. A job without it is only told, where the
        plan found is ``advise`` times faster (``regrow_declined`` holds the words): None."""
        now = decision.clock()
        advising = entry.regrow is None
        every = self.advise_every_s if advising else self.regrow_every_s
        if now - self._regrow_looked.get(entry.key, -math.inf) < every:
            return None
        if advising and now < self._advise_next:
            return None  # (not counted as looked at: its turn comes once the share allows)
        async with self.lock:
            if advising and decision.clock() < self._advise_next:  # (jobs that queued for
                # the lock together would plan back to back: looked at again in the lock)
                return None
            self._regrow_looked[entry.key] = now  # (a job's timer does not overlap itself)
            snap = await snapshot()
            self.prune(snap.jobs)
            if entry.key in self.reserved or self.replans_waiting:  # (they come first)
                return None
            snap.held = self.held(snap.held)
            edits = self.edits_waiting(snap)  # (once, not per job)
            if any(self._waiting(snap, e, edits) for e in snap.jobs.values()):
                return None
            mine = job_priority(entry)
            if any(
                job_priority(e) >= mine and self._edit_may_fit(snap, e)
                for k in edits
                if (e := snap.jobs.get(k)) is not None
            ):  # an edit waiting for servers, of a job ranked at or above this one: it gets
                # them first, as the rounds keep them for it from jobs ranked below (before,
                # a growth took the servers an edit just allowed was about to use; a review)
                return None
            free = snap.free(entry)
            seen = (
                tuple(free),  # (as offered: other pods' GPUs freed there count)
                snap.latencies.unreachable,
                tuple(snap.nodes.values()),  # a relabel (faster GPUs, same name): looked at
                current.stages,
                entry.generation,
                entry.uid,  # (applied again under its name: looked at afresh)
                entry.regrow,
                *quotas_seen(snap, entry),
            )
            if not free:
                self.speedups[entry.key] = None  # (none free: no faster plan, its figure goes)
                return None
            if self.regrow_checked.get(entry.key) == seen:
                return None
            self.regrow_checked[entry.key] = seen
            known = self.offered.get(entry.key)
            if advising and known is not None and {i.server for i in free} <= known:
                # no server is free, or offers more, than when its plan was made: none
                # faster (its figure goes: a faster plan seen before may be taken since)
                self.speedups[entry.key] = None
                return None

            def judge() -> tuple[Decision | None, str | None, float | None]:
                plan = self._planning(snap.free(entry, also=current.nodes), snap)

                d = plan([entry])[entry.key]
                # the namespace's quotas: the fastest plan within them is judged instead
                taken = self.reserved_use(snap, but=entry.key)
                within = within_quota(entry, d, snap, taken, plan, keep=current.nodes)
                on = regrow.with_own(  # (its cordoned ones too)
                    snap,
                    current,
                    d.cluster,
                    same_region_ms=float(self.opts["same_region_ms"] or 0.0),
                    cross_region_ms=float(self.opts["cross_region_ms"] or 0.0),
                )
                scored = regrow.steps(within, entry, current, on)  # (scored once)
                grown, declined = regrow.faster(within, entry, current, scored, advise)
                speedup = scored[0] / scored[1] if scored is not None else None
                if entry.regrow is None:
                    return None, declined, speedup  # (told of a plan within its quotas only)
                if grown is None and d.job_plan is not None and within is not d:
                    short = snap.quota_short(entry, snap.quota_need(entry, d))
                    declined = (
                        f"a faster plan needs {amount_text(short.resource, short.more)} more, "
                        f"and {short}, and none within it is spec.regrow.minSpeedup "
                        f"{entry.regrow[0] if entry.regrow else 0:g} times faster"
                        if short is not None and within.job_plan is not None
                        else f"no faster plan fits: {within.reason}"
                    ) + ": it keeps its servers (checked again when the quota changes)"
                return grown, declined, speedup

            started = time.perf_counter()
            d, declined, speedup = await asyncio.to_thread(judge)
            self.speedups[entry.key] = speedup  # (the metric's: the figure of this look)
            if advising:
                took = time.perf_counter() - started
                self._advise_next = decision.clock() + took * (1 / self.advise_share - 1)
            was = self.told_speedup.get(entry.key)  # (of this very plan: a re-plan or
            # an edit since makes it another's figure; a review)
            alike = (
                advising
                and was is not None
                and speedup is not None
                and was[0] == (current.stages, entry.generation)
                and abs(speedup / was[1] - 1) < ADVICE_ALIKE
            )
            told = self.regrow_told.setdefault(entry.key, {})
            last = next(reversed(told), None)  # (the words told last: never twice running)
            for words in [w for w, t in told.items() if now - t > TELL_AGAIN_S and w != last]:
                del told[words]
            if declined is not None and declined not in told and not alike:
                self.regrow_declined[entry.key] = declined  # (the same words: told once)
                told[declined] = now
                if advising and speedup is not None:
                    self.told_speedup[entry.key] = ((current.stages, entry.generation), speedup)
            if self.on_round:
                self.on_round(time.perf_counter() - started, {entry.key: d} if d else {})
            if d is not None:
                d = replace(d, generation=entry.generation, uid=entry.uid)
                self._reserve(entry.key, d)
            return d

    def _reserve(self, key: Key, d: Decision, others: Collection[str] = ()) -> None:
        """``d`` (a plan) is ``key``'s, and the servers it could have had are noted (those
        it was planned on, as offered then: their GPUs and labels, less those ``others``
        of its round got): a job without spec.regrow is looked at again only once another
        server is free, or one of these offers more."""
        self.reserved[key] = d
        self.offered[key] = (
            frozenset(s for s in d.cluster.servers if s.name not in others)
            if d.cluster is not None
            else None
        )

    def try_plan(self, entry: JobEntry, servers: Sequence[NodeInfo], snap: Snapshot) -> Decision:
        """The job alone planned on ``servers``, as a round would plan it there (blocking,
        outside the planning lock: nothing is reserved): whether an edit of a running job
        can be placed before its pods are removed (``edits.unplannable``); no baselines
        (nothing reads them here, and they ran unbounded: a review)."""
        return self._planning(servers, snap, baselines=False)([entry])[entry.key]

    def _planning(
        self,
        servers: Sequence[NodeInfo],
        snap: Snapshot,
        previous: JobPlan | None = None,
        baselines: bool | None = None,
    ) -> Callable[..., dict[Key, Decision]]:
        """A job group planned on ``servers`` (or the ``only`` ones of them), a re-plan of
        ``previous`` where given: for ``within_quota``'s tries. ``baselines``: whether the
        baselines are planned too (the operator's setting by default)."""
        with_baselines = self.baselines if baselines is None else baselines

        def plan(members: list[JobEntry], only: Collection[str] | None = None) -> Any:
            return plan_group(
                members,
                servers if only is None else [i for i in servers if i.name in only],
                snap,
                self.plan_fn,
                planner=self.planner,
                previous=Plan(self.planner, (previous,)) if previous else None,
                baselines=with_baselines,
                **self.opts,  # type: ignore[arg-type]
            )

        return plan

    def _waiting(self, snap: Snapshot, e: JobEntry, edits: Collection[Key]) -> bool:
        """A pending job that may yet be placed on the free servers: not tried on them, or
        its round is not over (one tried on these very servers and left unplaced waits
        for a change, and does not hold regrowth back)."""
        if self.refusals.waiting_out(e, snap) is not None:
            return False
        last = self.unplaced.get(e.key)  # (a quota's figures moved: it may fit now)
        if not e.pending:
            return False
        return last is None or last[0] != self.fingerprint(snap, e, edits)

    def _edit_may_fit(self, snap: Snapshot, e: JobEntry) -> bool:
        """A waiting edit (``edits_waiting``) just allowed, or not tried on the servers free
        now (``edits.unplannable``): as a pending job not tried on them (``_waiting``), it
        holds growth back; one tried on these very servers that did not fit waits for a
        change, and does not."""
        tried = self.edit_tried.get(e.key)
        seen = (self.fingerprint(snap, e), e.generation)  # (as ``edits.unplannable`` keys it)
        return e.key in self.edit_claimed or tried is None or tried[0] != seen

    def edits_waiting(self, snap: Snapshot) -> set[Key]:
        """Running jobs whose latest edit waits for servers to free up (``edits.
        unplannable`` tried it at their generation, and it would fit were they free), or
        was just allowed (``edit_claimed``) and is not yet seen pending: a round keeps the
        servers each would use from the jobs ranked below it. Records of jobs gone,
        edited again or seen pending are dropped."""
        out = set()

        def over(e: JobEntry | None, gen: int) -> bool:  # (a record of an older spec, or of a
            # job gone, pending, finished or suspended: a Succeeded job kept servers from
            # others for good; a review. One of a newer spec than the snapshot's is kept)
            return (
                e is None
                or e.pending
                or e.suspended
                or e.phase in ("Succeeded", "Failed")
                or gen < e.generation
            )

        # (copies: ``unplannable`` and the update handler write them from other threads)
        for k, tried in list(self.edit_tried.items()):
            e = snap.jobs.get(k)
            if over(e, tried[0][1]):
                if self.edit_tried.get(k) is tried:
                    del self.edit_tried[k]
            elif e is not None and tried[0][1] == e.generation:
                if tried[1] is None or not says_fits_nowhere(tried[1]):
                    out.add(k)  # (one that fits nowhere keeps nothing from anyone)
        for k, gen in list(self.edit_claimed.items()):
            e = snap.jobs.get(k)
            if over(e, gen):
                if self.edit_claimed.get(k) == gen:
                    del self.edit_claimed[k]
            elif e is not None and gen == e.generation:
                out.add(k)
        return out

    def pending_write(self, key: Key, shown: JobPlan) -> Decision | None:
        """This job's re-plan whose status write is not visible yet: a reservation made
        from exactly the plan the status still shows (``shown``), less than
        ``WRITE_TIMEOUT_S`` ago (after that the write is taken as lost). A reservation that
        the status already shows is dropped."""
        d = self.reserved.get(key)
        if d is None or d.job_plan is None:
            return None
        if same_plan(d.job_plan, shown):  # (first: a re-plan that gave the same plan, its
            # base the plan shown too, held the job 30 s for a write with nothing to show,
            # then re-planned it again, for good: a review)
            del self.reserved[key]
            return None
        if d.base is not None and same_plan(d.base, shown):
            if decision.clock() - d.made < WRITE_TIMEOUT_S:
                return d
            del self.reserved[key]
        return None

    def forget(self, key: Key) -> None:
        self.reserved.pop(key, None)
        self.unplaced.pop(key, None)
        self.edit_checked.pop(key, None)
        self.edit_tried.pop(key, None)
        self.edit_claimed.pop(key, None)
        self.edits_told.pop(key, None)

    def edit_allowed(self, key: Key, generation: int) -> None:
        """A running job's edit is allowed and planned afresh: the job's records go
        (``forget``), and it is planned as a waiting edit until seen pending."""
        self.forget(key)
        self.edit_claimed[key] = generation
