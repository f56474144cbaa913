"""One reconciliation of one job, run by its kopf timer: plan it if pending, re-plan it
if it lost servers, make its pods match its plan, and compute its new status.

Level-triggered and idempotent: the desired pods follow from ``status.plan`` alone and
their names are deterministic, so running this any number of times, or after a crash at
any point, converges on exactly one pod per slot and no other pod of the job.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from hulk_operator import edits, kube, manifests, recovery, regrow
from hulk_operator import status as st
from hulk_operator.context import Context
from hulk_operator.edits import Refusal
from hulk_operator.entries import (
    JobEntry,
    object_entry,
    planned_pod_spec,
    pod_source,
    spec_hashes,
)
from hulk_operator.errors import (
    EDIT_REFUSED,
    INVALID_SPEC,
    PODS_FORBIDDEN,
    UNSCHEDULABLE,
    ServiceTaken,
    forbidden_pods,
    namespace_terminating,
    rejected_template,
)
from hulk_operator.failures import DEFAULT_BACKOFF_LIMIT, fail, stage_failed
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
from hulk_operator.snapshot import filled_requests
from hulk_operator.stage_pods import delete_pods, desired_pods, pods_phase, remove_all, sync_pods
from hulk_planner.model import Cluster, JobPlan


def same_cause(told: str, reason: str) -> bool:
    """Whether two reasons a job is not placed differ in their figures alone (free GPUs,
    what a quota leaves, with their units: ``1.5Gi``): the same cause, not worth another
    Event. Digits within a name (quota ``gpu-q1``, server ``rome-44``) are not figures."""
    return cause_of(told) == cause_of(reason)


def cause_of(reason: str) -> str:
    """A reason with its figures taken out (``same_cause``)."""
    return FIGURE.sub("#", reason)


FIGURE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?:[A-Za-z]+)?(?![\w-])")


DISRUPTED = "Disrupted"  # the Event of a job not moved off NotReady servers (a disruption)
LOST_TOLD = "lost/"  # Context.recent key prefix: when a StatusLost Event was posted


def refused_edit(conds: list[dict[str, Any]], refused: Refusal, gen: int) -> list[dict[str, Any]]:
    """Conditions of a planned job whose latest spec is refused: it keeps running as
    planned (a typo must not stop a training run) until a valid edit, or until the cluster
    allows an edit it refused (``edits.recheck``)."""
    return st.set_condition(conds, st.PLANNED, False, refused.reason, refused.message, gen)


async def reconcile(
    ctx: Context, entry: JobEntry, body: Mapping[str, Any], status: Mapping[str, Any]
) -> dict[str, Any]:
    """The job's new status fields (only those to change need patching)."""
    ns, name = entry.key
    gen = entry.generation
    conds = list(status.get("conditions") or [])
    new: dict[str, Any] = {"observedGeneration": gen}
    finished = status.get("phase") in (st.SUCCEEDED, st.PHASE_FAILED)
    if entry.suspended and not finished:  # (a finished job ignores it, as a batch/v1 Job)
        return await _suspend(ctx, entry, status, conds, new)
    if (st.condition(status, st.SUSPENDED_COND) or {}).get("status") == "True":
        msg = "spec.suspend is false: the job is planned again"
        ctx.event("Normal", "Resumed", msg)
        new["phase"] = st.PENDING  # planned at the next round, once this status is written
        new["conditions"] = st.set_condition(conds, st.SUSPENDED_COND, False, "Resumed", msg, gen)
        return new
    if entry.job is None:
        error = entry.error or "invalid spec"
        if status.get("plan") is not None:  # an edit broke a planned job's spec
            conds = refused_edit(conds, Refusal(error, waits=False), gen)
            return new | {"conditions": conds} | await _run_on(ctx, entry, body, status, conds, gen)
        new.update(unplanned(st.PHASE_FAILED))
        ctx.metrics.set_predicted(ns, name, None)
        conds = st.set_condition(conds, st.READY, False, INVALID_SPEC, error, gen)
        conds = st.set_condition(conds, st.PLANNED, False, INVALID_SPEC, error, gen)
        new["conditions"] = st.set_condition(conds, st.FAILED, True, INVALID_SPEC, error, gen)
        return new
    if status.get("phase") == st.SUCCEEDED or (
        status.get("phase") == st.PHASE_FAILED and status.get("plan") is None
    ):
        return {}  # finished: a lost server or pod is no reason to run it again
    planned = st.condition(status, st.PLANNED) or {}
    if (planned.get("reason"), planned.get("observedGeneration")) == (INVALID_SPEC, gen):
        # this spec's pod template was refused: the last valid one's pods run on
        kept = await _run_on(ctx, entry, body, status, conds, gen)
        return new | kept if kept else {}
    if (planned.get("reason"), planned.get("observedGeneration")) == (EDIT_REFUSED, gen):
        # refused by the cluster: the last valid spec's pods run on until it allows the edit
        again = await edits.recheck(ctx, entry, body.get("spec") or {}, conds, gen)
        if "plan" in again:  # allowed now: planned afresh
            return new | again
        conds = again.get("conditions", conds)
        return new | again | await _run_on(ctx, entry, body, status, conds, gen)
    spec = body.get("spec") or {}
    made_for = (status.get("plan") or {}).get("specHashes")
    if made_for and made_for != spec_hashes(spec) and planned.get("observedGeneration") != gen:
        # the plan is for another spec, and the update handler's word on this one is not
        # in sight: kopf writes its record of the spec handled and the status apart, and
        # pods made meanwhile from this spec on that plan replaced the running ones
        return {}
    plan = st.job_plan_from_status(name, status)
    if plan is None:
        step = await _place(ctx, entry, spec, status, planned, conds, new)
    else:
        step = await _check_plan(ctx, entry, spec, status, plan, conds, new)
    if step is None:
        return new if "conditions" in new else {}
    if (
        (body.get("metadata") or {}).get("deletionTimestamp")
        or ctx.stopped()
        or edited_since(body, entry)
    ):
        # deleted, or its spec edited, while we planned (``body`` is kopf's live view):
        # create nothing, write nothing (an edit's new plan comes at the next round)
        return {}
    return await _make_pods(ctx, entry, body, spec, status, step, new)


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
class _Step:
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


async def _place(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    planned: Mapping[str, Any],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> _Step | None:
    """A job without a plan: the placer's decision for it. None where there is nothing to
    make (``new`` then holds the status to write, if any: an unplaced job's)."""
    ns, name = entry.key
    gen = entry.generation
    _status_lost(ctx, entry, status)
    blocker = ctx.placer.blocking_service(entry)
    if (
        blocker is not None
        and await asyncio.to_thread(kube.service_uid, ctx.api, ns, blocker[0]) != blocker[1]
    ):
        ctx.placer.end_pause(entry.key)  # the Service it waited on is gone: no pause
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
            planned.get("reason") == UNSCHEDULABLE
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
                if not text.startswith("fits nowhere"):
                    text = f"no plan fits: {text}"
                ctx.event("Warning", "Unschedulable", f"{text}{gone}")
        new.update(unplanned(st.PENDING))  # an edit's old plan may have left its fields
        new.update(counts(status))  # (0 shown before its first plan, not a blank column)
        conds = not_ready(conds, gen)
        cause = PODS_FORBIDDEN if decision.refused else UNSCHEDULABLE
        new["conditions"] = st.set_condition(conds, st.PLANNED, False, cause, decision.reason, gen)
        ctx.metrics.set_predicted(ns, name, None)
        return None
    new.update(placed_fields(decision, spec))
    new["phase"] = st.PLACING
    new.update(counts(status))  # (0 shown, not a blank column)
    conds = planned_conditions(conds, decision, entry, ctx.config, gen)
    if (st.condition({"conditions": conds}, st.REPLANNING) or {}).get("reason") == "NoPlan":
        conds = st.set_condition(
            conds, st.REPLANNING, False, "PlacedAgain", "placed again after no plan fit", gen
        )
    step = _Step(decision.job_plan, plan_gpus(decision), conds)
    if ctx.placer.first_use(decision):
        ctx.metrics.plans.labels(result="placed").inc()
        # posted once its pods are made or wait for room: a template the API server
        # rejects fails the job, which got a Normal "Planned" beside it (a user trial)
        step.told = planned_message(decision, entry.job)
    return step


async def _check_plan(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    plan: JobPlan,
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> _Step | None:
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
    )
    if ctx.disrupted is not None:
        _tell_disruption(ctx, entry.key, plan)
    elif not lost:
        await _tell_cut_links(ctx, entry.key, plan)
    pods = ctx.pods.get(entry.key, [])
    # (over NotReady: it is new; not by a pod made within 10 s, the one made again there
    # while the index still has the old one: a review)
    now_m = time.monotonic()
    older = [p for p in pods if now_m - ctx.recent.get(p.name, -1e9) > 10.0]
    lost.update(recovery.remade_servers(older, ctx.nodes))
    # (its pods' requests with the LimitRange defaults the API server gave them: before,
    # the template's alone, and a pod those overfill waited, not taken as stuck; a review)
    need = filled_requests(entry, ctx.limit_defaults)
    lost.update(
        recovery.stuck_servers(pods, ctx.used, lost, ctx.nodes, need, gpus, entry.tolerations)
    )
    barred = recovery.barred_servers(plan, ctx.nodes, entry.tolerations, lost)
    # a stage pod to make again (deleted, evicted) where a NoSchedule taint bars it: moved
    # at once (before: made again, told StageRecreated, then re-planned once it waited)
    unmade = set(plan.nodes) - {p.node for p in pods if not p.deleting}
    lost.update((n, why) for n, why in barred.items() if n in unmade)
    causes = sorted(set(lost.values()))
    if lost:  # the re-plan leaves NoSchedule-tainted servers too (snapshot.free): say so
        lost.update(barred)
    # a re-plan: servers lost, or (spec.regrow) free servers make the job faster
    decision = None
    if lost:
        cause = causes[0].split()[0]  # (what made the re-plan, not the servers it leaves)
        decision = await ctx.placer.replan(entry, plan, ctx.snapshot)
    elif ctx.disrupted is None and regrow.due(entry, status):
        cause = regrow.REASON
        decision = await ctx.placer.regrow(entry, plan, ctx.snapshot)  # None: it stays
        declined = ctx.placer.regrow_declined.pop(entry.key, None)
        if declined is not None:
            ctx.event("Normal", regrow.DECLINED, declined)
    if decision is None:
        return _Step(plan, gpus, conds)
    if (
        decision.job_plan is not None
        and causes == ["NotReady"]
        and same_plan(decision.job_plan, plan)
        and plan_gpus(decision) == gpus
    ):  # its NotReady servers came back meanwhile: the plan stands (before: a Warning
        # Replanned, "0 pod(s) replaced", counted as a re-plan: a user trial)
        ctx.placer.reserved.pop(entry.key, None)
        return _Step(plan, gpus, conds)
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
            conds, st.PLANNED, False, UNSCHEDULABLE, decision.reason, gen
        )
        ctx.placer.forget(entry.key)
        ctx.metrics.set_predicted(ns, name, None)
        return None
    # the plan replaced (a regrowth's as scored beside the new one)
    new.update(placed_fields(decision, spec))
    new["phase"] = st.PLACING
    conds = planned_conditions(conds, decision, entry, ctx.config, gen)
    return _Step(
        decision.job_plan,
        plan_gpus(decision),
        conds,
        (decision.base or plan, lost),
        recovery.forced(lost),
        cluster=decision.cluster,
    )


def _tell_disruption(ctx: Context, key: tuple[str, str], plan: JobPlan) -> None:
    """A Warning Event, once per disruption, on each job with a stage on a NotReady
    server: why it is not moved (before: the operator's log alone said it, and the job was
    torn down, unexplained, as the disruption cleared: a user trial)."""
    down = sorted(n for n in plan.nodes if (i := ctx.nodes.get(n)) is not None and not i.ready)
    if not down or recovery.disruption_told(ctx.disruption, key):
        return
    ctx.event(
        "Warning",
        DISRUPTED,
        f"{ctx.disrupted}: its server(s) {', '.join(down)} are not taken as lost while so "
        "many are (an API server or network outage is likelier than so many failures); "
        f"once fewer are, one still NotReady {ctx.config.not_ready_grace_s:g} s later is lost",
    )


LINK_UNREACHABLE, LINKS_RESTORED = "LinkUnreachable", "LinksRestored"
log = logging.getLogger(__name__)


async def _tell_cut_links(ctx: Context, key: tuple[str, str], plan: JobPlan) -> None:
    """A Warning Event, once per set of cut pairs, on a running job that sends over a
    server pair its probes now report unreachable (and a Normal one when they reach each
    other again). The job is not moved: only lost servers move a job (before, nothing told
    of a partition between two of its stages: a user trial)."""
    try:
        latencies = await ctx.latencies()
    except (ApiException, HTTPError, OSError) as exc:  # (it only tells: recovery goes on)
        log.debug(f"{key[1]}: NodeLatency not read ({exc}): cut links told later")
        return
    unreachable = latencies.unreachable
    cut = recovery.cut_links(plan, unreachable)
    told: dict[tuple[str, str], frozenset[tuple[str, str]]] = ctx.disruption.setdefault(
        "cut_links", {}
    )
    before = told.get(key, frozenset())
    if frozenset(cut) == before:
        return
    if not cut and any(frozenset(p) in unreachable for p in before):
        told.pop(key, None)  # moved off the pairs, which are still cut: nothing restored
        return
    if cut:
        told[key] = frozenset(cut)
        shown = ", ".join(f"{a} and {b}" for a, b in cut[:5]) + (" ..." if len(cut) > 5 else "")
        ctx.event(
            "Warning",
            LINK_UNREACHABLE,
            f"the probes report {len(cut)} server pair(s) this job's stages send over "
            f"unreachable: {shown} (NodeLatency). Its pods are not moved (only lost servers "
            "move a job); if its training stalls, suspend and resume it (spec.suspend) to "
            "plan it again around them",
        )
    else:
        told.pop(key, None)
        if not any(frozenset(p) in latencies.measured for p in before):
            # no report on them at all: the probes' objects deleted, or the probe
            # uninstalled (before, told as restored; a review)
            log.info(f"{key[1]}: the probes no longer report on the cut pairs it was told of")
            return
        ctx.event("Normal", LINKS_RESTORED, "its servers' probes reach each other again")


async def _make_pods(
    ctx: Context,
    entry: JobEntry,
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    step: _Step,
    new: dict[str, Any],
) -> dict[str, Any]:
    """Makes the job's pods match its plan (``step``) and returns its new status fields:
    a stage failure's, a refusal's (a quota, a policy, a rejected template) or its
    pods' phase."""
    ns, name = entry.key
    gen = entry.generation
    plan, conds, told, replanned = step.plan, step.conds, step.told, step.replanned
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    ended = [p.name for p in pods if p.phase in ("Failed", "Succeeded")]
    failed = [p for p in pods if p.phase == "Failed"]
    if ended and status.get("plan") is None:
        # pods of a run that failed or finished before this plan: gone before the new ones
        # start (they may bear the same names)
        await delete_pods(ctx, ns, ended)
        # ... and going from here on: a re-run whose pods bear the same names was counted
        # as done by them, and Succeeded again at once without running (a review)
        ctx.pods = {
            **ctx.pods,
            entry.key: [
                replace(p, deleting=True) if p.name in ended else p
                for p in ctx.pods.get(entry.key, [])
            ],
        }
    elif failed and replanned is None:
        return await stage_failed(ctx, entry, spec, status, failed, conds, new, gen)
    desired = desired_pods(entry, spec, plan, step.gpus, ctx.built_pods, ctx.nodes)
    try:
        diff = await sync_pods(ctx, entry, spec, desired, force=step.force)
    except Exception as exc:
        if namespace_terminating(exc):
            return {}  # the namespace is going, and its jobs with it
        refused = forbidden_pods(exc)
        if told is not None and (refused is not None or rejected_template(exc) is None):
            ctx.event("Normal", "Planned", told)  # (not for a template the job fails for)
        waited = 0.0
        if refused is not None:
            waited = ctx.placer.pods_refused(entry, plan.nodes)
        if refused is not None and waited >= ctx.config.forbidden_grace_s:
            blocker = (exc.name, exc.uid) if isinstance(exc, ServiceTaken) else None
            return await _give_back(
                ctx, entry, plan, refused, waited, conds, new, step.force, blocker
            )
        if refused is not None:  # a quota or policy: the plan stands, the pods wait for room
            if replanned is not None:  # told now: the next round sees the new plan only
                live = [p.name for p in ctx.pods.get(entry.key, []) if not p.deleting]
                meant = recovery.pod_diff(live, list(desired))
                conds = _replanned(ctx, replanned, plan, meant, conds, gen, step.cluster)
            ready = st.condition(status, st.READY) or {}
            if ready.get("message") != refused:
                ctx.event("Warning", PODS_FORBIDDEN, refused)
            new["phase"] = st.PLACING
            new["conditions"] = st.set_condition(
                conds, st.READY, False, PODS_FORBIDDEN, refused, gen
            )
            return new
        why = rejected_template(exc)
        if why is None:
            raise
        if status.get("plan") is not None:  # an edit broke a planned job's template
            new["conditions"] = refused_edit(conds, Refusal(why, waits=False), gen)
            return new
        await remove_all(ctx, entry.key)  # gang: no stage runs without the others
        return fail(ctx, entry, new, conds, INVALID_SPEC, why, gen)
    if ctx.stopped() or edited_since(body, entry):
        # deleted or edited (or the operator exiting) while its pods were created: the
        # plan is not told either (before, a suspend meanwhile was followed by Planned)
        return {}
    if told is not None:
        ctx.event("Normal", "Planned", told)
    remade = diff.recreated()
    if replanned is None and remade and status.get("phase") == st.RUNNING:
        msg = (
            f"stage pod(s) {', '.join(sorted(remade))} of a running job were deleted; "
            "created again on the same server(s)"
        )
        ctx.event("Warning", "StageRecreated", msg)
    if replanned is not None:
        conds = _replanned(ctx, replanned, plan, diff, conds, gen, step.cluster)
    source = pod_source(spec)
    if "plan" not in new and (status.get("plan") or {}).get("podTemplate") != source:
        new["plan"] = {"podTemplate": source}  # (a plan made before it was kept; merged)
    new.update(pods_phase(ctx, entry, set(diff.create) | set(diff.keep), conds, gen, diff.taken))
    seconds = new.get("predictedIterationSeconds", status.get("predictedIterationSeconds"))
    ctx.metrics.set_predicted(ns, name, seconds)
    return new


async def _run_on(
    ctx: Context,
    entry: JobEntry,
    body: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
) -> dict[str, Any]:
    """The status fields to write for a job whose latest spec is refused: it runs on as
    planned, a failed stage pod restarted (``spec.backoffLimit`` as for any job), a
    missing one made again from the spec the plan was made for (``edits``). Before, a
    stage pod that failed stayed Failed, while Ready said it was being made again."""
    failed = [p for p in ctx.pods.get(entry.key, []) if not p.deleting and p.phase == "Failed"]
    if failed:
        limit = (body.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            limit = DEFAULT_BACKOFF_LIMIT  # (the refused spec's may be what is wrong)
        made = {**(planned_pod_spec(status.get("plan")) or {}), "backoffLimit": limit}
        return await stage_failed(ctx, entry, made, status, failed, conds, {}, gen)
    replanned = await _replan_running(ctx, entry, body, status, conds, gen)
    if replanned is not None:
        return replanned
    unmade = await edits.remake_missing(ctx, entry, status)
    kept = edits.kept_pods(ctx, entry, status, conds, gen, unmade)
    if kept is None:
        return {}
    out: dict[str, Any] = {"conditions": kept}
    ready = st.condition({"conditions": kept}, st.READY) or {}
    if ready.get("status") == "True" and status.get("phase") != st.RUNNING:
        out["phase"] = st.RUNNING  # (restarted, or started while refused)
    return out


async def _replan_running(
    ctx: Context,
    entry: JobEntry,
    body: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
) -> dict[str, Any] | None:
    """A job whose latest spec is refused and that lost servers (deleted, NotReady past
    the grace, drained...): planned again from the spec its pods run
    (``status.plan.podTemplate``), as a Deployment's old ReplicaSet replaces its pods
    while a new template is refused; the refusal stays told (``Planned``). Before, a
    lost server was not replaced until the spec was fixed: the job stood with a stage
    missing. The status fields to write, or None where nothing is lost, or the plan keeps
    no whole spec (an older operator's): it runs on as planned."""
    made = planned_pod_spec(status.get("plan"))
    plan = st.job_plan_from_status(entry.key[1], status)
    if made is None or plan is None:
        return None
    running = object_entry({**body, "spec": made})
    if running.job is None:  # (the parts alone, as an older operator kept them)
        return None
    running = replace(running, regrow=None)  # (it runs on: not grown while refused)
    new: dict[str, Any] = {}
    step = await _check_plan(ctx, running, made, status, plan, conds, new)
    if step is None:  # its re-plan just written, not seen yet; or none fit (``new`` says)
        return new
    # (until a new plan's pods run: their gang gate, held while the old pods went, lifted
    # by ``sync_pods``, and the phase and Ready read from them)
    gated = any(p.gated for p in ctx.pods.get(entry.key, []) if not p.deleting)
    if step.replanned is None and not gated and status.get("phase") != st.PLACING:
        return None
    out = await _make_pods(ctx, running, body, made, status, step, new)
    refusal = st.condition({"conditions": conds}, st.PLANNED) or {}
    if out.get("conditions") and refusal.get("status") == "False":
        reason, message = str(refusal.get("reason")), str(refusal.get("message") or "")
        out["conditions"] = st.set_condition(
            out["conditions"], st.PLANNED, False, reason, message, gen
        )
    return out


def _replanned(
    ctx: Context,
    replanned: tuple[JobPlan, dict[str, str]],
    plan: JobPlan,
    diff: recovery.PodDiff,
    conds: list[dict[str, Any]],
    gen: int,
    cluster: Cluster | None = None,
) -> list[dict[str, Any]]:
    """The Event and the ``Replanning`` condition of a re-plan (a loss's or a regrowth's)."""
    old, lost = replanned
    if lost:
        made, kept = len(diff.create), len(diff.keep)
        unoffered = {
            n: why
            for n in old.nodes
            if (i := ctx.nodes.get(n)) is not None and (why := i.problem) is not None
        }
        msg = recovery.event_message(lost, old, plan, made, kept, None, cluster, unoffered)
        ctx.event("Warning", "Replanned", msg)
        reason = sorted(set(lost.values()))[0].split()[0]
    else:
        why = regrow.cause(old, plan)
        made, kept = len(diff.create), len(diff.keep)
        msg = recovery.event_message({}, old, plan, made, kept, why, cluster)
        ctx.event("Normal", regrow.REASON, msg)
        reason = regrow.REASON
    return st.set_condition(conds, st.REPLANNING, True, reason, msg, gen)


def _status_lost(ctx: Context, entry: JobEntry, status: Mapping[str, Any]) -> None:
    """A job with no status at all whose stage pods run: its status was emptied (by hand,
    or a restore that drops it). It is planned again, as it has no plan to keep; told once,
    as its pods may move (before, only a second ``Planned`` Event showed it; a user trial)."""
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
        "hand, or restored without it): it is planned again; pods the new plan keeps on "
        "their servers run on, the others are replaced",
    )


async def _give_back(
    ctx: Context,
    entry: JobEntry,
    plan: JobPlan,
    refused: str,
    waited: float,
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    force: set[str],
    blocker: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The job's stage pods have been refused for ``waited`` seconds, past the grace: it
    gives its servers back (its pods deleted: a gang runs whole or not at all) and waits
    Pending, ``Planned=False`` with reason ``PodsForbidden``, for the pause the placer sets."""
    gen = entry.generation
    removed = await remove_all(ctx, entry.key, force=force)  # (those on lost servers)
    why = f"{refused} (for {waited:.0f} s): its {len(plan.nodes)} server(s) are given back" + (
        f" and its {removed} stage pod(s) deleted" if removed else ""
    )
    seen = (await ctx.snapshot()).policies_seen(entry.key[0])  # a change ends the pause
    decision = ctx.placer.give_back(entry, why, ctx.config.forbidden_grace_s, seen, blocker)
    ctx.event("Warning", PODS_FORBIDDEN, decision.reason)
    ctx.metrics.set_predicted(*entry.key, None)
    new.update(unplanned(st.PENDING))
    conds = not_ready(conds, gen)
    if (st.condition({"conditions": conds}, st.REPLANNING) or {}).get("status") == "True":
        conds = st.set_condition(conds, st.REPLANNING, False, "NoPlan", decision.reason, gen)
    new["conditions"] = st.set_condition(
        conds, st.PLANNED, False, PODS_FORBIDDEN, decision.reason, gen
    )
    return new


def edited_since(body: Mapping[str, Any], entry: JobEntry) -> bool:
    """Whether the job's spec changed since this reconciliation began (``body`` is kopf's
    live view; ``entry`` what the index held then): its plan is for the old spec. Before,
    a re-plan for a lost server made meanwhile was written over the edit's reset, and the
    job ran the old spec's plan for good (a user trial)."""
    live = (body.get("metadata") or {}).get("generation")
    return live is not None and int(live) != entry.generation


async def _suspend(
    ctx: Context,
    entry: JobEntry,
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> dict[str, Any]:
    """``spec.suspend``: every stage pod removed, the servers released, nothing planned
    until it is false again (then the job is planned afresh, as after an edit)."""
    ns, name = entry.key
    gen = entry.generation
    removed = await remove_all(ctx, entry.key)
    ctx.placer.forget(entry.key)
    ctx.metrics.set_predicted(ns, name, None)
    new.update(unplanned(st.SUSPENDED))
    conds = [c for c in conds if c.get("type") != st.ESTIMATED]  # it spoke of a plan
    conds = st.set_condition(conds, st.READY, False, "Suspended", "suspended: no stage pods", gen)
    conds = st.set_condition(conds, st.PLANNED, False, "Suspended", "spec.suspend is true", gen)
    if (st.condition(status, st.SUSPENDED_COND) or {}).get("status") != "True":
        gone = f"; its {removed} stage pod(s) removed, their servers released" if removed else ""
        msg = f"spec.suspend is true: not planned until it is false{gone}"
        ctx.event("Normal", "Suspended", msg)
        conds = st.set_condition(conds, st.SUSPENDED_COND, True, "JobSuspended", msg, gen)
    new["conditions"] = conds
    return new
