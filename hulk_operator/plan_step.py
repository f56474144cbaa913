"""The plan one reconciliation goes on with (a ``Step``): a job without one placed by the
placer (``place``); a planned job's plan kept, or made again where it lost servers or,
with ``spec.regrow``, free servers make it faster (``check_plan``). And whether an
unplaced job's new reason is the cause already told (``same_cause``)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hulk_operator import kube, manifests, recovery, regrow
from hulk_operator import status as st
from hulk_operator.context import Context
from hulk_operator.decision import Decision
from hulk_operator.disruptions import (
    tell_cut_links,
    tell_disruption,
    tell_unmet_constraints,
    told_before,
)
from hulk_operator.entries import JobEntry
from hulk_operator.errors import (
    INVALID_SPEC,
    NOWHERE,
    PODS_FORBIDDEN,
    UNSCHEDULABLE,
    rejected_template,
)
from hulk_operator.failures import JOB_FAILED, fail
from hulk_operator.fit import says_fits_nowhere
from hulk_operator.placement import same_plan
from hulk_operator.plan_fields import (
    counts,
    not_ready,
    placed_fields,
    plan_gpus,
    planned_conditions,
    planned_message,
    unplanned,
)
from hulk_operator.snapshot import HOLDERS, filled_requests
from hulk_operator.stage_pods import remove_all
from hulk_planner.model import Cluster, JobPlan


def same_cause(told: str, reason: str) -> bool:
    """Whether two reasons a job is not placed differ in their figures alone (free GPUs,
    what a quota leaves, with their units: ``1.5Gi``): the same cause, not worth another
    Event. Digits within a name (quota ``gpu-q1``, server ``rome-44``) are not figures."""
    return cause_of(told) == cause_of(reason)


def unplaced_reason(reason: str) -> str:
    """Planned's reason for a job no plan places: ``FitsNowhere`` where no set of the
    servers it may use could hold it (change the job), else ``Unschedulable`` (it waits)."""
    return NOWHERE if says_fits_nowhere(reason) else UNSCHEDULABLE


def cause_of(reason: str) -> str:
    """A reason with its figures and the jobs holding its servers taken out
    (``same_cause``; other jobs coming and going would post an Event each: a review)."""
    return FIGURE.sub("#", HOLDERS.sub(" (held)", reason))


FIGURE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?:[A-Za-z]+)?(?![\w-])")


LOST_TOLD = "lost/"  # Context.recent key prefix: when a StatusLost Event was posted


async def _template_rejected(ctx: Context, entry: JobEntry, spec: Mapping[str, Any]) -> str | None:
    """Why the API server rejects the stage pods of a job to be planned (a server-side dry
    run of one, once per spec), or None: told at once, where before a job whose servers
    were held waited for them to learn of a typo in its template (a user trial). A policy
    that forbids the pod is not this: it may change, and the job waits for it when placed."""
    ns, name = entry.key
    seen = (entry.uid, entry.generation)
    if ctx.placer.template_checked.get(entry.key) == seen:
        return None
    pod = manifests.template_check_pod(
        job=name, namespace=ns, uid=entry.uid, template=spec.get("template") or {}
    )
    error = await asyncio.to_thread(kube.dry_run_pod, ctx.api, pod)
    why = rejected_template(error) if error is not None else None
    if why is None:
        ctx.placer.template_checked[entry.key] = seen
    return why


@dataclass
class Step:
    """What one reconciliation goes on with once the job has a plan: the plan and its
    GPUs per server, the conditions so far, a re-plan's old plan and lost servers, those
    whose pods are deleted with grace period 0 (``recovery.forced``), and the ``Planned``
    Event to post once the pods are made."""

    plan: JobPlan
    gpus: dict[str, int]
    conds: list[dict[str, Any]]
    replanned: tuple[JobPlan, dict[str, str]] | None = None
    force: set[str] = field(default_factory=set)
    told: str | None = None
    cluster: Cluster | None = None  # a re-plan's, as the planner saw it (its links)
    declined: str = ""  # a re-plan's: why the job was not repaired in place (``Decision``)
    regrows: bool = True  # the job has spec.regrow (``recovery.event_message``'s hint)
    # a run a stage pod of which exited 0 (``status.exited_0``): its servers lost (server
    # -> why), for ``make_pods``, which makes nothing; None for a run that goes on
    finishing: dict[str, str] | None = None


DRAINED = "(drained: its stage pod gone)"  # a barred server whose pod was evicted
LEFT_TOO = "(left with this re-plan: a stage pod made again there would not start)"


async def place(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    planned: Mapping[str, Any],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> Step | None:
    """A job without a plan: the placer's decision for it. None where there is nothing to
    make (``new`` then holds the status to write, if any: an unplaced job's)."""
    ns, name = entry.key
    gen = entry.generation
    _status_lost(ctx, entry, status)
    blocker = ctx.placer.refusals.blocking_service(entry)
    if (
        blocker is not None
        and await asyncio.to_thread(kube.service_uid, ctx.api, ns, blocker[0]) != blocker[1]
    ):
        ctx.placer.refusals.end_pause(entry.key)  # the Service it waited on is gone: no pause
    if (rejected := await _template_rejected(ctx, entry, spec)) is not None:
        await remove_all(ctx, entry.key)
        fail(ctx, entry, new, conds, INVALID_SPEC, rejected, gen)  # (into ``new``)
        return None
    decision = await ctx.placer.decide(entry.key, ctx.snapshot)
    if decision is None:
        return None
    if decision.job_plan is None:
        removed = await remove_all(ctx, entry.key)  # gang: all stages or none
        # still unplaceable at a later round for the same cause (others came and went,
        # the reason's figures moved), or for one told in the last 10 minutes: the Event
        # was posted; the condition keeps the latest reason. Another cause is posted.
        said = (
            planned.get("reason") in (UNSCHEDULABLE, NOWHERE)
            and planned.get("status") == "False"
            and same_cause(str(planned.get("message") or ""), decision.reason)
        )
        if ctx.placer.first_use(decision):
            ctx.metrics.plans.labels(result="unplaced").inc()
            gone = f"; its {removed} stage pod(s) removed" if removed else ""
            if not ctx.placer.newly_told(entry.key, cause_of(decision.reason), time.monotonic()):
                said = True
            if removed or not said:
                text = decision.reason  # ("fits nowhere: ..." says it already)
                if not says_fits_nowhere(text):
                    text = f"no plan fits: {text}"
                ctx.event("Warning", "Unschedulable", f"{text}{gone}")
        new.update(unplanned(st.PENDING))  # an edit's old plan may have left its fields
        new.update(counts(status))  # (0 shown before its first plan, not a blank column)
        conds = not_ready(conds, gen)
        cause = PODS_FORBIDDEN if decision.refused else unplaced_reason(decision.reason)
        new["conditions"] = st.set_condition(conds, st.PLANNED, False, cause, decision.reason, gen)
        ctx.metrics.set_predicted(ns, name, None)
        return None
    new.update(placed_fields(decision, spec))
    new["phase"] = st.PLACING
    new.update(counts(status))  # (0 shown, not a blank column)
    conds = planned_conditions(conds, decision, entry, ctx.config, gen)
    again = {  # what the last re-plan's condition said, now past (before, "the job is
        # suspended" stayed on a job resumed and running: a user trial)
        "NoPlan": "placed again after no plan fit",
        JOB_FAILED: "placed again after the job failed",
        "SpecChanged": "planned afresh after its spec changed",
    }.get(str((st.condition({"conditions": conds}, st.REPLANNING) or {}).get("reason")))
    if again is not None:
        conds = st.set_condition(conds, st.REPLANNING, False, "PlacedAgain", again, gen)
    step = Step(decision.job_plan, plan_gpus(decision), conds)
    if ctx.placer.first_use(decision):
        ctx.metrics.plans.labels(result="placed").inc()
        # posted once its pods are made or wait for room: a template the API server
        # rejects fails the job, which got a Normal "Planned" beside it (a user trial)
        step.told = planned_message(decision, entry.job)
    return step


async def check_plan(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    plan: JobPlan,
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> Step | None:
    """A planned job: its plan as it is, or a new one where it lost servers or (with
    ``spec.regrow``) free servers make it faster. None where there is nothing to make
    (``new`` then holds the status to write, if any: a failed re-plan's)."""
    ns, name = entry.key
    gen = entry.generation
    if ctx.placer.pending_write(entry.key, plan) is not None:
        # We re-planned exactly this plan a moment ago (pods synced, counted, Event
        # posted); its status patch is not visible yet. Wait for it: re-planning or
        # re-writing from the stale status would write a second, uncounted plan.
        return None
    gpus = st.plan_gpus(status)
    lost = recovery.lost_servers(
        plan,
        ctx.nodes,
        entry.tolerations,
        now=time.time(),
        not_ready_grace_s=ctx.config.not_ready_grace_s,
        disrupted=ctx.disrupted is not None,
        settled_at=ctx.settled_at,
        cordon_moves=ctx.config.cordon_moves,
    )
    if ctx.disrupted is not None:
        tell_disruption(ctx, entry.key, plan)
    elif not lost:
        await tell_cut_links(ctx, entry.key, plan)
        await tell_unmet_constraints(ctx, entry, plan)
    pods = ctx.pods.get(entry.key, [])
    # (over NotReady: it is new)
    lost.update(recovery.remade_servers(pods, ctx.nodes, time.time()))
    if st.exited_0(status, pods):
        # the run has ended (a stage pod exited 0): nothing is re-planned, grown or advised,
        # as a stage moved would wait at the rendezvous for peers that have exited, for good
        # (before, it was); a stage its lost server took ends the job (``make_pods``), not
        # one on a server cordoned (``cordon_moves``): it runs on, to exit as the others do
        gone = {n: why for n, why in lost.items() if why != "Cordoned"}
        return Step(plan, gpus, conds, finishing=gone)
    # (each waiting pod's requests as the API server admitted it, LimitRange defaults in;
    # these filled-in ones for a pod the index has not read yet: before, the template's
    # alone, and a pod the defaults overfill waited, not taken as stuck; a review)
    need = filled_requests(entry, ctx.limit_defaults)
    lost.update(
        recovery.stuck_servers(
            pods, ctx.used, lost, ctx.nodes, need, gpus, entry.tolerations, entry.init_gpus[1]
        )
    )
    barred = recovery.barred_servers(plan, ctx.nodes, entry.tolerations, lost)
    # a stage pod to make again (deleted, evicted) where a NoSchedule taint bars it: moved
    # at once (before: made again, told StageRecreated, then re-planned once it waited)
    unmade = set(plan.nodes) - {p.node for p in pods if not p.deleting}
    lost.update((n, f"{why} {DRAINED}") for n, why in barred.items() if n in unmade)
    causes = sorted({why.split(" (")[0] for why in lost.values()})
    if lost:  # the re-plan leaves NoSchedule-tainted servers too (snapshot.free): say so,
        # and why, beside the server that made it (a trial: "beijing-0 cordoned, rome-44
        # cordoned" where rome-44 alone was drained read as both drained)
        lost.update((n, f"{why} {LEFT_TOO}") for n, why in barred.items() if n not in lost)
    # its servers NotReady but not lost yet: a re-plan for the lost ones waits for them,
    # and no regrowth or advice looks meanwhile (before, either planned on the servers
    # free and Ready, and moved the job off them, in a disruption too; a review: a re-plan
    # that kept them re-split their layers, and made pods there that could not start)
    doubt = {
        n
        for n in plan.nodes
        if n not in lost
        and (info := ctx.nodes.get(n)) is not None
        and info.sick(entry.tolerations) == "NotReady"
    }
    if lost and doubt:
        words = recovery.waits_message(lost, doubt, ctx.disrupted is not None)
        if ctx.placer.newly_told(entry.key, recovery.REPLAN_WAITS, time.monotonic()):
            ctx.event("Normal", recovery.REPLAN_WAITS, words)
        new["conditions"] = st.set_condition(
            conds, st.READY, False, recovery.REPLAN_WAITS, words, gen
        )
        return None  # (no pod made meanwhile: not on a deleted or drained server)
    # a re-plan: servers lost, or (spec.regrow) free servers make the job faster
    decision = None
    if lost:
        cause = causes[0].split()[0]  # (what made the re-plan, not the servers it leaves)
        decision = await ctx.placer.replan(entry, plan, ctx.snapshot)
    elif ctx.disrupted is None and not doubt and regrow.due(entry, status):
        cause = regrow.REASON
        decision = await ctx.placer.regrow(entry, plan, ctx.snapshot)  # None: it stays
        declined = ctx.placer.regrow_declined.pop(entry.key, None)
        if declined is not None and not await told_before(ctx, entry, regrow.DECLINED, declined):
            ctx.event("Normal", regrow.DECLINED, declined)
        _free_speedup(ctx, entry, decision)
    elif (
        ctx.disrupted is None
        and not doubt
        and regrow.advice_due(entry, status, ctx.config.advise_speedup)
    ):
        # (no spec.regrow: never moved, told where free servers would make it faster)
        await ctx.placer.regrow(entry, plan, ctx.snapshot, ctx.config.advise_speedup)
        advice = ctx.placer.regrow_declined.pop(entry.key, None)
        if advice is not None and not await told_before(ctx, entry, regrow.ADVISED, advice):
            ctx.event("Normal", regrow.ADVISED, advice)
        _free_speedup(ctx, entry, None)
    if decision is None:
        return Step(plan, gpus, conds)
    if (
        decision.job_plan is not None
        and causes == ["NotReady"]
        and same_plan(decision.job_plan, plan)
        and plan_gpus(decision) == gpus
    ):  # its NotReady servers came back meanwhile: the plan stands (before: a Warning
        # Replanned, "0 pod(s) replaced", counted as a re-plan: a user trial)
        ctx.placer.reserved.pop(entry.key, None)
        return Step(plan, gpus, conds)
    if decision.job_plan is not None:  # a node deleted and back by the re-plan's look
        lost = recovery.came_back(lost, decision.job_plan.nodes)
    ctx.metrics.replans.labels(reason=cause).inc()
    new["replans"] = int(status.get("replans") or 0) + 1
    if decision.job_plan is None:  # (only a recovery's: a regrowth is None instead)
        await remove_all(ctx, entry.key, force=recovery.forced(lost))
        msg = recovery.event_message(lost, plan, None, 0, 0)
        ctx.event("Warning", "ReplanFailed", msg)
        new.update(unplanned(st.PENDING))
        conds = not_ready(conds, gen)
        conds = st.set_condition(conds, st.REPLANNING, False, "NoPlan", msg, gen)
        new["conditions"] = st.set_condition(
            conds, st.PLANNED, False, unplaced_reason(decision.reason), decision.reason, gen
        )
        ctx.placer.forget(entry.key)
        ctx.metrics.set_predicted(ns, name, None)
        return None
    # the plan replaced (a regrowth's as scored beside the new one)
    new.update(placed_fields(decision, spec))
    new["phase"] = st.PLACING
    conds = planned_conditions(conds, decision, entry, ctx.config, gen)
    return Step(
        decision.job_plan,
        plan_gpus(decision),
        conds,
        (decision.base or plan, lost),
        recovery.forced(lost),
        cluster=decision.cluster,
        declined=decision.repair_declined,
        regrows=entry.regrow is not None,
    )


def _free_speedup(ctx: Context, entry: JobEntry, grown: Decision | None) -> None:
    """``hulk_job_free_speedup`` from a look that planned (a look that did not leaves the
    figure as it was); none once the job grows (its new plan has no figure yet)."""
    if (looked := ctx.placer.speedups.pop(entry.key, False)) is not False:
        ctx.metrics.set_free_speedup(*entry.key, None if grown is not None else looked)


def _status_lost(ctx: Context, entry: JobEntry, status: Mapping[str, Any]) -> None:
    """A job with no status at all whose stage pods run: its status was emptied (by hand,
    or a restore that drops it), or an operator was killed between releasing a first plan's
    pods and writing that plan (kopf writes a handler's status when it returns; a user
    trial, kill -9: the Warning named only the first two). It is planned again, as it has
    no plan to keep; told once, as its pods may move (before, only a second ``Planned``
    Event showed it; a user trial)."""
    if status.get("phase") or status.get("conditions"):
        return
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    live = [p.name for p in pods]
    told = f"{LOST_TOLD}{entry.uid}"
    if not live or told in ctx.recent:
        return
    if all(p.gated for p in pods):
        # pods made for a first plan, never released: an operator stopped between making
        # them and writing the plan (docs/operator.md: a crash in between loses no pod),
        # nobody's doing (before: this Warning sent a user looking for one; a user trial)
        return
    ctx.recent[told] = time.monotonic()
    ctx.event(
        "Warning",
        "StatusLost",
        f"the job's status is empty while {len(live)} of its stage pods exist (emptied by "
        "hand, restored without it, or an operator stopped between releasing a first "
        "plan's pods and writing it): it is planned again; pods the new plan keeps on "
        "their servers run on, the others are replaced",
    )
