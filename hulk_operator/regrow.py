"""Growing a running job onto free servers (``spec.regrow``).

A running job keeps its servers: a new plan restarts its pipeline from its checkpoint, so
by default a job that was re-planned onto fewer servers after a loss, or placed beside
jobs that have since finished, stays as it is. With ``spec.regrow`` its owner accepts that
restart for a faster step. Once every stage has run without a break (``Ready=True``,
reason AllStagesRunning) for ``afterSeconds``, and while no job waits for servers (a
waiting job gets them first, as does a waiting edit of a job ranked no lower), the job
is planned afresh on its own servers plus the free ones; the new plan replaces the old
one when its predicted step is at least ``minSpeedup`` times faster, both plans scored
by the cost model on the same latencies. The operator looks every 5 s
(``Placer.regrow_every_s``) and plans only when the free servers (or the job's plan or
settings) changed since.

A job without ``spec.regrow`` is looked at the same way (every 30 s, once every stage has
run for a minute, where a server its plan was not planned on is free; these looks together
plan at most a tenth of the time) and never moved: where the new plan would be
``OperatorConfig.advise_speedup`` times faster (1.25), a ``FasterPlanAvailable`` Event
says so, once per change of its words (the same words not again within
``placement.TELL_AGAIN_S``).

Pure functions; the planning round is ``Placer.regrow`` and the pods are reconciled as for
any re-plan.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hulk_operator import status as st
from hulk_operator.entries import JobEntry
from hulk_operator.errors import EDIT_REFUSED, INVALID_SPEC
from hulk_operator.inventory import epoch
from hulk_operator.latencies import build_cluster
from hulk_planner.cost import CostModel
from hulk_planner.errors import HulkError
from hulk_planner.model import Cluster, JobPlan

if TYPE_CHECKING:
    from hulk_operator.decision import Decision
    from hulk_operator.snapshot import Snapshot

REASON = "Regrown"  # the Event's, the Replanning condition's and the replans metric's
ALL_RUNNING = "AllStagesRunning"  # the Ready condition's reason while every stage runs


def running_for(status: Mapping[str, Any], now: float | None = None) -> float | None:
    """How long every stage of a Running job has run without a break (the Ready
    condition's last transition; a stage pod restarted or created again starts the count
    afresh), None while they do not."""
    if status.get("phase") != st.RUNNING:
        return None
    ready = st.condition(status, st.READY) or {}
    since = epoch(ready.get("lastTransitionTime"))
    if ready.get("reason") != ALL_RUNNING or since is None:
        return None  # (StagesFinishing: the run is ending, not to be started over)
    return (time.time() if now is None else now) - since


def due(entry: JobEntry, status: Mapping[str, Any], now: float | None = None) -> bool:
    """Whether ``spec.regrow`` lets the job be planned afresh now: every stage has been
    running, without a break, for ``afterSeconds``."""
    ran = running_for(status, now)
    return entry.regrow is not None and ran is not None and ran >= entry.regrow[1]


# A running job without spec.regrow is told (a Normal Event of this reason) when a plan on
# its servers plus the free ones would make its step ``OperatorConfig.advise_speedup``
# times faster: it keeps its servers, and its owner may set spec.regrow (before, jobs
# stayed on plans up to 4x slower once servers came back, with nothing saying so: a trial).
ADVISED = "FasterPlanAvailable"
ADVISE_AFTER_S = 60.0  # every stage running this long first (a plan just made is left be)
ADVISE_EVERY_S = 30.0  # looked at once per this long (``Placer.advise_every_s``)
ADVISE_SHARE = 0.1  # all such looks together plan at most this share of the time


def advice_due(
    entry: JobEntry, status: Mapping[str, Any], speedup: float, now: float | None = None
) -> bool:
    """Whether a job without ``spec.regrow`` is looked at for a faster plan now
    (``speedup`` 0: never); not while its latest edit is refused or waits (``Planned``
    says so): the advice would be of the spec the edit replaces (a user trial saw
    ``FasterPlanAvailable`` a second after ``EditRefused``)."""
    if (st.condition(status, st.PLANNED) or {}).get("reason") in (INVALID_SPEC, EDIT_REFUSED):
        return False
    ran = running_for(status, now)
    return entry.regrow is None and speedup > 1 and ran is not None and ran >= ADVISE_AFTER_S


DECLINED = "RegrowDeclined"  # the Event's reason when the plan found is not fast enough


def steps(
    decision: Decision, entry: JobEntry, current: JobPlan, scored_on: Cluster | None = None
) -> tuple[float, float] | None:
    """The predicted step of ``current`` and of ``decision``'s plan, both on the decision's
    latencies (or ``scored_on``'s: a cluster that holds the current servers, where the
    decision was planned on a part of it); None where either cannot be scored."""
    new, cluster = decision.job_plan, scored_on or decision.cluster
    if new is None or cluster is None or entry.job is None:
        return None
    if not set(current.nodes) <= set(cluster.index):
        return None  # a server of the plan is gone: that is recovery's to handle
    was = CostModel(cluster).job_seconds(entry.job, current)
    now = new.predicted_iteration_seconds
    if not (math.isfinite(now) and now > 0 and math.isfinite(was)):
        return None  # (a plan whose link was cut since is not scored: nothing to judge)
    return was, now


def faster(
    decision: Decision,
    entry: JobEntry,
    current: JobPlan,
    scored: tuple[float, float] | None,
    advise: float = 0.0,
) -> tuple[Decision | None, str | None]:
    """``decision`` as a re-plan of ``current`` (its ``base``, predicted as ``scored``:
    ``steps``' figures, which the caller keeps for the metric too) when its step is at
    least ``minSpeedup`` times faster; else None and, when the new plan is faster but not by
    ``minSpeedup``, the words of a ``RegrowDeclined`` Event (with no plan, or none faster,
    there is nothing to tell). A job without ``spec.regrow`` is never re-planned: the words
    of a ``FasterPlanAvailable`` Event where the new plan is ``advise`` times faster or
    more, else None."""
    need = entry.regrow[0] if entry.regrow is not None else advise
    if scored is None or decision.job_plan is None or not need > 1:
        return None, None
    (was, now), new = scored, decision.job_plan
    gained = len(set(new.nodes) - set(current.nodes))
    if was < now * need:
        if now >= was or entry.regrow is None:
            return None, None
        return None, (
            f"a new plan ({gained} free server(s) added) would make its step {was / now:.3g}x "
            f"faster (predicted {st.seconds_text(now)} s, {_now(was, current)}), below "
            f"spec.regrow.minSpeedup "
            f"{need:g}: it keeps its servers (checked again when the free servers change)"
        )
    if entry.regrow is None:
        return None, (
            f"free servers would make its step {was / now:.3g}x faster (a new plan with "
            f"{gained} free server(s) added: predicted {st.seconds_text(now)} s, "
            f"{_now(was, current)}); it "
            "keeps its servers, as it has no spec.regrow, which would plan it afresh "
            "(a restart from its checkpoint)"
        )
    return replace(decision, base=replace(current, predicted_iteration_seconds=was)), None


def with_own(
    snap: Snapshot,
    current: JobPlan,
    planned: Cluster | None,
    same_region_ms: float,
    cross_region_ms: float,
) -> Cluster | None:
    """``planned`` (a look's cluster) with the servers of the job's ``current`` plan it
    left out, to score that plan on: a cordoned one keeps its running stage but takes no
    new one (before, a job with a stage on a cordoned server was never grown nor told of a
    faster plan, as its plan could not be scored: a review). ``planned`` where nothing is
    left out, or a server of the plan is gone (recovery's case)."""
    if planned is None or set(current.nodes) <= set(planned.index):
        return planned
    infos = [snap.nodes.get(n) for n in current.nodes]
    servers = [i.server for i in infos if i is not None and i.server is not None]
    if len(servers) < len(infos):
        return planned
    try:
        return build_cluster(
            [*planned.servers, *(s for s in servers if s.name not in planned.index)],
            snap.latencies,
            same_region_ms=same_region_ms,
            cross_region_ms=cross_region_ms,
        )
    except HulkError:
        return planned


def _now(was: float, current: JobPlan) -> str:
    """The running plan's step as scored on the cluster now and, where it is not what the
    plan predicted (``status.predictedIterationSeconds``), that too: its servers were
    relabelled or its links measured again since (before, the Event said "now 5.12 s" where
    the job's status said 1.72, without a word of why: a user trial)."""
    planned = current.predicted_iteration_seconds
    if math.isfinite(planned) and planned > 0 and abs(was - planned) > 0.01 * planned:
        return (
            f"now {st.seconds_text(was)} s on its servers as they are now, planned at "
            f"{st.seconds_text(planned)} s"
        )
    return f"now {st.seconds_text(was)} s"


def cause(old: JobPlan, new: JobPlan) -> str:
    """The Event's opening words: how many times faster the new plan's step is."""
    was, now = old.predicted_iteration_seconds, new.predicted_iteration_seconds
    return f"free servers make its step {was / now:.3g}x faster"
