"""One reconciliation of one job, run by its kopf timer: plan it if pending, re-plan it
if it lost servers, make its pods match its plan, and compute its new status.

Level-triggered and idempotent: the desired pods follow from ``status.plan`` alone and
their names are deterministic, so running this any number of times, or after a crash at
any point, converges on exactly one pod per slot and no other pod of the job.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from typing import Any

from hulk_operator import edits, kube, recovery, regrow
from hulk_operator import status as st
from hulk_operator.config import OperatorConfig
from hulk_operator.context import Context, PodEntry
from hulk_operator.decision import Decision
from hulk_operator.edits import Refusal
from hulk_operator.entries import JobEntry, planned_pod_spec, pod_source, spec_hashes
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
from hulk_operator.stage_pods import delete_pods, desired_pods, pods_phase, remove_all, sync_pods
from hulk_planner.cost import batch_note
from hulk_planner.io import seconds
from hulk_planner.model import Job, JobPlan

DEFAULT_BACKOFF_LIMIT = 6  # stage restarts before a job fails, as a batch/v1 Job


def same_cause(told: str, reason: str) -> bool:
    """Whether two reasons a job is not placed differ in their figures alone (free GPUs,
    what a quota leaves, with their units: ``1.5Gi``): the same cause, not worth another
    Event. Digits within a name (quota ``gpu-q1``, server ``rome-44``) are not figures."""
    return FIGURE.sub("#", told) == FIGURE.sub("#", reason)


FIGURE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?:[A-Za-z]+)?(?![\w-])")


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
        new.update(_unplanned(st.PHASE_FAILED))
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
    gpus = st.plan_gpus(status)
    replans = int(status.get("replans") or 0)
    force: set[str] = set()
    replanned: tuple[JobPlan, dict[str, str]] | None = None
    told: str | None = None  # the Planned Event to post
    if plan is None:
        _status_lost(ctx, entry, status)
        blocker = ctx.placer.blocking_service(entry)
        if (
            blocker is not None
            and await asyncio.to_thread(kube.service_uid, ctx.api, ns, blocker[0]) != blocker[1]
        ):
            ctx.placer.end_pause(entry.key)  # the Service it waited on is gone: no pause
        decision = await ctx.placer.decide(entry.key, ctx.snapshot)
        if decision is None:
            return {}
        if decision.job_plan is None:
            removed = await remove_all(ctx, entry.key)  # gang: all stages or none
            # still unplaceable at a later round for the same cause (others came and went,
            # the reason's figures moved): the Event was posted; the condition keeps the
            # latest reason. Another cause (another quota, say) is posted.
            said = (
                planned.get("reason") == UNSCHEDULABLE
                and planned.get("status") == "False"
                and same_cause(str(planned.get("message") or ""), decision.reason)
            )
            if ctx.placer.first_use(decision):
                ctx.metrics.plans.labels(result="unplaced").inc()
                gone = f"; its {removed} stage pod(s) removed" if removed else ""
                if removed or not said:
                    text = decision.reason  # ("fits nowhere: ..." says it already)
                    if not text.startswith("fits nowhere"):
                        text = f"no plan fits: {text}"
                    ctx.event("Warning", "Unschedulable", f"{text}{gone}")
            new.update(_unplanned(st.PENDING))  # an edit's old plan may have left its fields
            conds = _not_ready(conds, gen)
            cause = PODS_FORBIDDEN if decision.refused else UNSCHEDULABLE
            new["conditions"] = st.set_condition(
                conds, st.PLANNED, False, cause, decision.reason, gen
            )
            ctx.metrics.set_predicted(ns, name, None)
            return new
        plan, gpus = decision.job_plan, _gpus(decision)
        new.update(_placed_fields(decision, spec))
        new["phase"] = st.PLACING
        new["replans"] = replans  # (0 shown, not a blank column, before the first)
        new["stageRestarts"] = int(status.get("stageRestarts") or 0)
        conds = _planned(conds, decision, entry, ctx.config, gen)
        if (st.condition({"conditions": conds}, st.REPLANNING) or {}).get("reason") == "NoPlan":
            conds = st.set_condition(
                conds, st.REPLANNING, False, "PlacedAgain", "placed again after no plan fit", gen
            )
        if ctx.placer.first_use(decision):
            ctx.metrics.plans.labels(result="placed").inc()
            # posted once its pods are made or wait for room: a template the API server
            # rejects fails the job, which got a Normal "Planned" beside it (a user trial)
            told = _planned_message(decision, entry.job)
    else:
        if ctx.placer.pending_write(entry.key, plan) is not None:
            # We re-planned exactly this plan a moment ago (pods synced, counted, Event
            # posted); its status patch is not visible yet. Wait for it: re-planning or
            # re-writing from the stale status would write a second, uncounted plan.
            return {}
        lost = recovery.lost_servers(
            plan,
            ctx.nodes,
            entry.tolerations,
            now=time.time(),
            not_ready_grace_s=ctx.config.not_ready_grace_s,
            disrupted=ctx.disrupted is not None,
        )
        lost.update(
            recovery.stuck_servers(
                ctx.pods.get(entry.key, []), ctx.used, lost, ctx.nodes, entry.requests, gpus
            )
        )
        # a re-plan: servers lost, or (spec.regrow) free servers make the job faster
        decision = None
        if lost:
            cause = sorted(set(lost.values()))[0].split()[0]
            decision = await ctx.placer.replan(entry, plan, ctx.snapshot)
        elif ctx.disrupted is None and regrow.due(entry, status):
            cause = regrow.REASON
            decision = await ctx.placer.regrow(entry, plan, ctx.snapshot)  # None: it stays
            declined = ctx.placer.regrow_declined.pop(entry.key, None)
            if declined is not None:
                ctx.event("Normal", regrow.DECLINED, declined)
        if decision is not None:
            ctx.metrics.replans.labels(reason=cause).inc()
            new["replans"] = replans + 1
            if decision.job_plan is None:  # (only a recovery's: a regrowth is None instead)
                await remove_all(ctx, entry.key, force=set(lost))
                msg = recovery.event_message(lost, plan, None, 0, 0)
                ctx.event("Warning", "ReplanFailed", msg)
                new.update(_unplanned(st.PENDING))
                conds = _not_ready(conds, gen)
                conds = st.set_condition(conds, st.REPLANNING, False, "NoPlan", msg, gen)
                new["conditions"] = st.set_condition(
                    conds, st.PLANNED, False, UNSCHEDULABLE, decision.reason, gen
                )
                ctx.placer.forget(entry.key)
                ctx.metrics.set_predicted(ns, name, None)
                return new
            # the plan replaced (a regrowth's as scored beside the new one)
            replanned, force = (decision.base or plan, lost), set(lost)
            plan, gpus = decision.job_plan, _gpus(decision)
            new.update(_placed_fields(decision, spec))
            conds = _planned(conds, decision, entry, ctx.config, gen)
            new["phase"] = st.PLACING
    if (
        (body.get("metadata") or {}).get("deletionTimestamp")
        or ctx.stopped()
        or edited_since(body, entry)
    ):
        # deleted, or its spec edited, while we planned (``body`` is kopf's live view):
        # create nothing, write nothing (an edit's new plan comes at the next round)
        return {}
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    ended = [p.name for p in pods if p.phase in ("Failed", "Succeeded")]
    failed = [p for p in pods if p.phase == "Failed"]
    if ended and status.get("plan") is None:
        # pods of a run that failed or finished before this plan: gone before the new ones
        # start (they may bear the same names)
        await delete_pods(ctx, ns, ended)
    elif failed and replanned is None:
        return await _stage_failed(ctx, entry, spec, status, failed, conds, new, gen)
    desired = desired_pods(entry, spec, plan, gpus, ctx.built_pods)
    try:
        diff = await sync_pods(ctx, entry, spec, desired, force=force)
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
            return await _give_back(ctx, entry, plan, refused, waited, conds, new, force, blocker)
        if refused is not None:  # a quota or policy: the plan stands, the pods wait for room
            if replanned is not None:  # told now: the next round sees the new plan only
                live = [p.name for p in ctx.pods.get(entry.key, []) if not p.deleting]
                meant = recovery.pod_diff(live, list(desired))
                conds = _replanned(ctx, replanned, plan, meant, conds, gen)
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
        return _fail(ctx, entry, new, conds, INVALID_SPEC, why, gen)
    if told is not None:
        ctx.event("Normal", "Planned", told)
    if ctx.stopped() or edited_since(body, entry):
        return {}  # deleted or edited (or the operator exiting) while its pods were created
    remade = diff.recreated()
    if replanned is None and remade and status.get("phase") == st.RUNNING:
        msg = (
            f"stage pod(s) {', '.join(sorted(remade))} of a running job were deleted; "
            "created again on the same server(s)"
        )
        ctx.event("Warning", "StageRecreated", msg)
    if replanned is not None:
        conds = _replanned(ctx, replanned, plan, diff, conds, gen)
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
        return await _stage_failed(ctx, entry, made, status, failed, conds, {}, gen)
    unmade = await edits.remake_missing(ctx, entry, status)
    kept = edits.kept_pods(ctx, entry, status, conds, gen, unmade)
    if kept is None:
        return {}
    out: dict[str, Any] = {"conditions": kept}
    ready = st.condition({"conditions": kept}, st.READY) or {}
    if ready.get("status") == "True" and status.get("phase") != st.RUNNING:
        out["phase"] = st.RUNNING  # (restarted, or started while refused)
    return out


def _replanned(
    ctx: Context,
    replanned: tuple[JobPlan, dict[str, str]],
    plan: JobPlan,
    diff: recovery.PodDiff,
    conds: list[dict[str, Any]],
    gen: int,
) -> list[dict[str, Any]]:
    """The Event and the ``Replanning`` condition of a re-plan (a loss's or a regrowth's)."""
    old, lost = replanned
    if lost:
        msg = recovery.event_message(lost, old, plan, len(diff.create), len(diff.keep))
        ctx.event("Warning", "Replanned", msg)
        reason = sorted(set(lost.values()))[0].split()[0]
    else:
        why = regrow.cause(old, plan)
        msg = recovery.event_message({}, old, plan, len(diff.create), len(diff.keep), why)
        ctx.event("Normal", regrow.REASON, msg)
        reason = regrow.REASON
    return st.set_condition(conds, st.REPLANNING, True, reason, msg, gen)


def _status_lost(ctx: Context, entry: JobEntry, status: Mapping[str, Any]) -> None:
    """A job with no status at all whose stage pods run: its status was emptied (by hand,
    or a restore that drops it). It is planned again, as it has no plan to keep; told once,
    as its pods may move (before, only a second ``Planned`` Event showed it; a user trial)."""
    if status.get("phase") or status.get("conditions"):
        return
    live = [p.name for p in ctx.pods.get(entry.key, []) if not p.deleting]
    told = f"{LOST_TOLD}{entry.uid}"
    if not live or told in ctx.recent:
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
    new.update(_unplanned(st.PENDING))
    conds = _not_ready(conds, gen)
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


def _fail(
    ctx: Context,
    entry: JobEntry,
    new: dict[str, Any],
    conds: list[dict[str, Any]],
    reason: str,
    msg: str,
    gen: int,
) -> dict[str, Any]:
    """The job fails for ``reason``: Event, ``Failed=True``, ``Ready=False``, no plan
    (its servers released) until its spec changes."""
    ctx.event("Warning", reason, msg)
    ctx.placer.forget(entry.key)
    ctx.metrics.set_predicted(*entry.key, None)
    conds = _not_ready(conds, gen)  # (no LatencyEstimated of a plan it does not keep)
    conds = st.set_condition(conds, st.READY, False, reason, msg, gen)
    # (a job that ran and failed was planned: "not planned:" read oddly for it)
    said = "not planned" if reason == INVALID_SPEC else "its plan is released"
    conds = st.set_condition(conds, st.PLANNED, False, reason, f"{said}: {msg}", gen)
    new.update(_unplanned(st.PHASE_FAILED))
    new["conditions"] = st.set_condition(conds, st.FAILED, True, reason, msg, gen)
    return new


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
    new.update(_unplanned(st.SUSPENDED))
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


def _unplanned(phase: str) -> dict[str, Any]:
    """Status fields of a job left without a plan (its servers released)."""
    return {
        "phase": phase,
        "plan": None,
        "numStages": 0,
        "numNodes": 0,
        "regions": "",
        "predictedIterationSeconds": None,
        "baselines": None,
    }


def _not_ready(conds: list[dict[str, Any]], gen: int) -> list[dict[str, Any]]:
    """``Ready`` of a job with no plan (its pods gone, or never made): False, not a stale
    'all running' nor missing (kubectl's READY column was blank for a job never placed: a
    user trial); and no ``LatencyEstimated``, which told of the plan gone."""
    conds = [c for c in conds if c.get("type") != st.ESTIMATED]  # it spoke of a plan
    ready = st.condition({"conditions": conds}, st.READY)
    if ready is not None and ready.get("reason") == "NotPlanned":
        return conds
    return st.set_condition(conds, st.READY, False, "NotPlanned", "no plan: no stage pods", gen)


def _gpus(decision: Decision) -> dict[str, int]:
    assert decision.cluster is not None and decision.job_plan is not None
    return {n: decision.cluster.server(n).gpus for n in decision.job_plan.nodes}


def _placed_fields(decision: Decision, spec: Mapping[str, Any]) -> dict[str, Any]:
    assert decision.cluster is not None and decision.job_plan is not None
    jp = decision.job_plan
    out = {
        # the spec it was made for: an edit back to it leaves the pods alone
        "plan": {
            **st.plan_status(jp, decision.cluster, decision.planner),
            "specHashes": spec_hashes(spec),
            "podTemplate": pod_source(spec),
        },
        "predictedIterationSeconds": seconds(jp.predicted_iteration_seconds),
        **st.summary(jp, decision.cluster),
    }
    if decision.baselines:
        # no key where a baseline cannot place the job: the API server drops nulls inside a
        # merge-patched list anyway (and kopf then warns that the patch did not hold)
        # (and why it cannot: `hulk plan --kubeconfig --jobs` shows it for a running job)
        why = decision.baselines_why
        out["baselines"] = [
            {"planner": k, "predictedIterationSeconds": v}
            if v is not None
            else {"planner": k, **({"reason": why[k]} if k in why else {})}
            for k, v in sorted(decision.baselines.items())
        ]
    return out


def _planned(
    conds: list[dict[str, Any]], d: Decision, entry: JobEntry, cfg: OperatorConfig, gen: int
) -> list[dict[str, Any]]:
    """The conditions of a job just planned (first or again): ``Planned`` with the plan's
    summary, and whether its latencies are estimates."""
    conds = st.set_condition(
        conds, st.PLANNED, True, "Planned", _planned_message(d, entry.job), gen
    )
    return _estimated(conds, d, cfg, gen)


def _planned_message(d: Decision, job: Job | None) -> str:
    assert d.job_plan is not None and d.cluster is not None
    jp = d.job_plan
    regions = len({d.cluster.server(n).region for n in jp.nodes})
    line = st.plan_line(len(jp.stages), len(jp.nodes), regions, d.planner,
                        jp.predicted_iteration_seconds)  # fmt: skip
    notes = [n for n in (d.note, batch_note(job, jp) if job else None) if n]
    return "; ".join([line, *notes])


def _estimated(
    conds: list[dict[str, Any]], d: Decision, cfg: OperatorConfig, gen: int
) -> list[dict[str, Any]]:
    cut = (
        f"; {d.unreachable} pair(s) reported unreachable had no latency (no link, no estimate)"
        if d.unreachable
        else ""
    )
    if d.estimated:
        msg = (
            f"{d.estimated} server pair(s) had no fresh latency measurement; used "
            f"{cfg.same_region_latency_ms:g} ms within a region and "
            f"{cfg.cross_region_latency_ms:g} ms across regions{cut}"
        )
        return st.set_condition(conds, st.ESTIMATED, True, "FallbackLatency", msg, gen)
    if d.job_plan is not None and len(d.job_plan.nodes) < 2:
        msg = "one server: no latency between servers in this plan"
        return st.set_condition(conds, st.ESTIMATED, False, "OneServer", msg, gen)
    msg = f"every {'reachable ' if cut else ''}server pair's latency was measured{cut}"
    return st.set_condition(conds, st.ESTIMATED, False, "Measured", msg, gen)


async def _stage_failed(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    failed: list[PodEntry],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    gen: int,
) -> dict[str, Any]:
    """Stage pods the kubelet ended as Failed. The stage pods' restart policy decides:
    ``Never`` (the user asked not to retry) fails the job: its other pods go (a pipeline
    cannot run without a stage, and they would hold their GPUs waiting for it), the failed
    ones stay for ``kubectl logs``, and the servers are released. Otherwise the kubelet
    could not restart the pod in place (eviction, node shutdown): it is deleted and
    created again on the same server by the next reconciliation, ``spec.backoffLimit``
    times at most over the job's run (``status.stageRestarts`` counts them); one more
    failure fails the job as ``Never`` does, with reason ``BackoffLimitExceeded``."""
    what = ", ".join(
        f"{p.name} on {p.node or 'no node'}{f' ({p.reason})' if p.reason else ''}" for p in failed
    )
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
    restarts = int(status.get("stageRestarts") or 0) + len(failed)
    limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    if policy == "Never" or restarts > limit:
        others = [p.name for p in ctx.pods.get(entry.key, []) if p.phase != "Failed"]
        await delete_pods(ctx, entry.key[0], others)
        ctx.metrics.stage_failures.labels(action="job_failed").inc(len(failed))
        if policy == "Never":
            msg = f"stage pod(s) failed: {what}; restartPolicy is Never, so the job stops"
            return _fail(ctx, entry, new, conds, "StageFailed", msg, gen)
        msg = (
            f"stage pod(s) failed: {what}; {restarts} stage failure(s) exceed "
            f"spec.backoffLimit {limit}, so the job stops (raise spec.backoffLimit to "
            "retry longer)"
        )
        return _fail(ctx, entry, new, conds, "BackoffLimitExceeded", msg, gen)
    await delete_pods(ctx, entry.key[0], [p.name for p in failed])
    new["stageRestarts"] = restarts
    msg = f"stage pod(s) failed: {what}; created again ({restarts} of spec.backoffLimit {limit})"
    ctx.event("Warning", "StageRestarted", msg)
    ctx.metrics.stage_failures.labels(action="restarted").inc(len(failed))
    new["conditions"] = st.set_condition(conds, st.READY, False, edits.STAGE_RESTARTING, msg, gen)
    new["phase"] = st.PLACING
    return new
