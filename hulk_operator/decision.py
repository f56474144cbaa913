"""A planning result for one job (:class:`Decision`) and the clock that dates it."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from hulk_operator.entries import Key
from hulk_planner.model import Cluster, JobPlan


def clock() -> float:
    """The placer's clock, ``time.monotonic`` (a test replaces ``decision.clock``, not the
    process-wide ``time.monotonic`` that asyncio's own timers read)."""
    return time.monotonic()


@dataclass(frozen=True)
class Decision:
    """A planning result for one job: a plan, or why there is none."""

    key: Key
    job_plan: JobPlan | None
    cluster: Cluster | None
    reason: str
    planner: str
    estimated: int = 0  # pairs of the job's servers whose latency is an estimate
    unreachable: int = 0  # pairs of the job's servers reported unreachable
    unreachable_stale: int = 0  # of those, pairs only old reports say so (``Latencies``)
    unreachable_inferred: int = 0  # of those, pairs no report names (``with_regions``)
    # the estimates of the unmeasured ones, (region, region, ms) (``estimates_used``)
    estimates: tuple[tuple[str, str, float], ...] = ()
    baselines: Mapping[str, float | None] = field(default_factory=dict)
    baselines_why: Mapping[str, str] = field(default_factory=dict)  # why one places it not
    made: float = field(default_factory=lambda: clock())
    # unique per decision made (``id()`` is not: a freed decision's id is reused)
    serial: int = field(default_factory=itertools.count().__next__)
    base: JobPlan | None = None  # for a re-plan: the plan it replaces
    note: str = ""  # said with the plan, e.g. that a quota made it smaller
    # a re-plan's: why the job was not repaired in place (``hulk_planner.api.repair_declined``)
    repair_declined: str = ""
    refused: bool = False  # no plan: its pods were refused, it waits (Placer.give_back)
    generation: int = 0  # the job's metadata.generation it was made for (0: not stamped)
    uid: str = ""  # the job object's uid it was made for ("": not stamped)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.job_plan.nodes) if self.job_plan else frozenset()
