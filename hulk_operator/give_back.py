"""A job whose stage pods the API server keeps refusing (an admission policy, a quota on
objects): how long they have been refused, and the pause of a job that gave its servers
back for it (:class:`Refusals`, the planning rounds' record: ``Placer.refusals``).

The pause lasts ``grace_s``, doubled at each time in a row, at most ``MAX_REFUSED_WAIT_S``,
and ends early when the job's spec, its namespace's quotas or LimitRanges, or the Service
that held its name change. A paused job is not planned (``Placer.decide``)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from hulk_operator import decision
from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, Key
from hulk_operator.snapshot import Snapshot

MAX_REFUSED_WAIT_S = 600.0  # the longest pause of a job whose pods were refused
REFUSALS_APART_S = 60.0  # refusals further apart are not one run (retries are 10 s apart)


@dataclass
class Refused:
    """A job whose stage pods the API server refuses (an admission policy, a quota on objects)."""

    uid: str  # the job object's (one deleted and applied again starts afresh)
    generation: int
    since: float | None  # monotonic: the first refusal of its current placement
    servers: frozenset[str] = frozenset()  # that placement's
    last: float = 0.0  # monotonic: the latest refusal (a refused pod is tried every 10 s)
    times: int = 0  # placements given back in a row
    until: float = 0.0  # monotonic: not planned before, once it gave its servers back
    decision: Decision | None = None  # what it is told meanwhile
    policies: tuple[tuple[str, str], ...] = ()  # its namespace's, when it gave servers back
    blocker: tuple[str, str] | None = None  # (name, uid): the Service of the job's name it
    # gave its servers back for (``ServiceTaken``); its pause ends when that is gone


class Refusals:
    """The jobs whose stage pods are refused, by job (see the module's docstring)."""

    def __init__(self) -> None:
        self.records: dict[Key, Refused] = {}

    def pods_refused(self, entry: JobEntry, servers: Collection[str]) -> float:
        """Notes that the job's stage pods on ``servers`` (its plan's) are refused; returns
        for how many seconds they have been, in this placement (a re-plan's new servers,
        or a placement after a pause, start the clock again)."""
        now = decision.clock()
        r = self._record(entry)
        if r.since is None or r.servers != frozenset(servers) or now - r.last > REFUSALS_APART_S:
            r.since, r.servers = now, frozenset(servers)  # (a gap: the job went and came back)
        r.last = now
        return now - r.since

    def pods_admitted(self, key: Key) -> None:
        """The job's stage pods all exist: its refusals are over."""
        self.records.pop(key, None)

    def _record(self, entry: JobEntry) -> Refused:
        """The job's record of refusals, a fresh one for a new object or spec."""
        r = self.records.get(entry.key)
        if r is None or (r.uid, r.generation) != (entry.uid, entry.generation):
            r = self.records[entry.key] = Refused(entry.uid, entry.generation, None)
        return r

    def pause(
        self,
        entry: JobEntry,
        why: str,
        grace_s: float,
        planner: str,
        policies: tuple[tuple[str, str], ...] = (),
        blocker: tuple[str, str] | None = None,
    ) -> Decision:
        """The job gives its servers back: it is not planned for ``grace_s``, doubled at
        each time in a row, at most ``MAX_REFUSED_WAIT_S``, or until its spec or its
        namespace's ``policies`` (quotas and LimitRanges, as they are now) change, or the
        ``blocker`` Service is gone. Returns what it is told meanwhile."""
        r = self._record(entry)
        wait = min(grace_s * 2 ** min(r.times, 30), MAX_REFUSED_WAIT_S)  # (no overflow)
        r.times += 1
        r.since = None
        r.until = decision.clock() + wait
        at = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
        gone = f", or Service {blocker[0]} is gone" if blocker else ""
        reason = (
            f"{why}; planned again in {wait:.0f} s (at {at}), or when its spec or the "
            f"namespace's ResourceQuotas or LimitRanges change{gone}"
        )
        r.policies, r.blocker = policies, blocker
        r.decision = Decision(entry.key, None, None, reason, planner, refused=True)
        return r.decision

    def blocking_service(self, entry: JobEntry) -> tuple[str, str] | None:
        """The (name, uid) of the Service the job waits out its pause for, if it does."""
        r = self.records.get(entry.key)
        if r is None or r.decision is None or r.blocker is None:
            return None
        if (r.uid, r.generation) != (entry.uid, entry.generation):
            return None
        return r.blocker if decision.clock() < r.until else None

    def end_pause(self, key: Key) -> None:
        """The cause of the job's pause is gone: it is planned at the next round (a
        refusal after that still waits twice as long as the last)."""
        r = self.records.get(key)
        if r is not None:
            r.until, r.blocker = 0.0, None

    def waiting_out(self, entry: JobEntry, snap: Snapshot) -> Decision | None:
        """What a job that gave its servers back is told while it waits, or None once its
        pause is over, or its spec or its namespace's quotas or LimitRanges changed."""
        r = self.records.get(entry.key)
        if r is None or r.decision is None:
            return None
        if (r.uid, r.generation) != (entry.uid, entry.generation):
            return None
        if snap.policies_seen(entry.key[0]) != r.policies:
            return None
        return r.decision if decision.clock() < r.until else None

    def pausing(self, snap: Snapshot) -> set[Key]:
        """Jobs that gave their servers back and wait: not planned in a round."""
        return {k for k, e in snap.jobs.items() if self.waiting_out(e, snap) is not None}

    def decisions(self) -> Iterator[Decision]:
        """What the paused jobs are told."""
        return (r.decision for r in self.records.values() if r.decision is not None)

    def prune(self, jobs: Mapping[Key, JobEntry]) -> None:
        """Drops the records of jobs gone."""
        for k in [k for k in self.records if k not in jobs]:
            del self.records[k]
