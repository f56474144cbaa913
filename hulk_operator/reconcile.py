"""One reconciliation of one job, run by its kopf timer: plan it if pending, re-plan it
if it lost servers, make its pods match its plan, and compute its new status.

Level-triggered and idempotent: the desired pods follow from ``status.plan`` alone and
their names are deterministic, so running this any number of times, or after a crash at
any point, converges on exactly one pod per slot and no other pod of the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hulk_operator import edits
from hulk_operator import status as st
from hulk_operator.context import Context
from hulk_operator.edits import Refusal
from hulk_operator.entries import JobEntry, spec_hashes
from hulk_operator.errors import EDIT_REFUSED, INVALID_SPEC
from hulk_operator.failures import limit_lowered
from hulk_operator.plan_fields import counts, unplanned
from hulk_operator.plan_step import check_plan, place
from hulk_operator.plan_step import same_cause as same_cause
from hulk_operator.pod_step import edited_since as edited_since
from hulk_operator.pod_step import make_pods
from hulk_operator.pod_step import refused_edit as refused_edit
from hulk_operator.refused import run_on
from hulk_operator.suspension import suspend


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
        return await suspend(ctx, entry, status, conds, new)
    suspended = (st.condition(status, st.SUSPENDED_COND) or {}).get("status") == "True"
    if suspended or status.get("phase") == st.SUSPENDED:  # (the phase alone: the update
        # handler's, resumed before this timer made it Suspended; a review)
        msg = "spec.suspend is false: the job is planned again"
        ctx.event("Normal", "Resumed", msg)
        new["phase"] = st.PENDING  # planned at the next round, once this status is written
        # (Planned and Ready said "Suspended" beside phase Pending until then: a trial)
        waits = "spec.suspend is false: planned at the next round"
        conds = st.set_condition(conds, st.PLANNED, False, "Resumed", waits, gen)
        conds = st.set_condition(conds, st.READY, False, "Resumed", f"{waits}: no stage pods", gen)
        new["conditions"] = st.set_condition(conds, st.SUSPENDED_COND, False, "Resumed", msg, gen)
        return new
    if entry.job is None and status.get("phase") == st.SUCCEEDED:
        return {}  # finished: an invalid edit is told (InvalidSpec), its pods not made again
        # (before, a deleted one was made again from the plan kept for the record: a review)
    if entry.job is None:
        error = entry.error or "invalid spec"
        failed = st.condition(status, st.FAILED) or {}
        if status.get("phase") == st.PHASE_FAILED and failed.get("reason") not in (
            None,
            INVALID_SPEC,
        ):  # it failed for another cause (a stage), which stays its reason: the spec's
            # error is told as why it is not planned again (before, every condition was
            # rewritten to InvalidSpec a tick after StageFailed: a review)
            why = f"not planned again: {error}"
            conds = st.set_condition(conds, st.PLANNED, False, INVALID_SPEC, why, gen)
            return new | {"conditions": conds}
        if status.get("plan") is not None:  # an edit broke a planned job's spec
            conds = refused_edit(conds, Refusal(error, waits=False), gen)
            return new | {"conditions": conds} | await run_on(ctx, entry, body, status, conds, gen)
        new.update(unplanned(st.PHASE_FAILED))
        new.update(counts(status))  # (kubectl -o wide's REPLANS and RESTARTS were blank: a trial)
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
        kept = await run_on(ctx, entry, body, status, conds, gen)
        return new | kept if kept else {}
    if (planned.get("reason"), planned.get("observedGeneration")) == (EDIT_REFUSED, gen):
        # refused by the cluster: the last valid spec's pods run on until it allows the edit
        again = await edits.recheck(ctx, entry, body.get("spec") or {}, conds, gen, status)
        if "plan" in again:  # allowed now: planned afresh, or its plan kept
            return new | again
        conds = again.get("conditions", conds)
        return new | again | await run_on(ctx, entry, body, status, conds, gen)
    spec = body.get("spec") or {}
    made_for = (status.get("plan") or {}).get("specHashes")
    if made_for and made_for != spec_hashes(spec) and planned.get("observedGeneration") != gen:
        # the plan is for another spec, and the update handler's word on this one is not
        # in sight: kopf writes its record of the spec handled and the status apart, and
        # pods made meanwhile from this spec on that plan replaced the running ones
        return {}
    if (stops := await limit_lowered(ctx, entry, spec, status, conds, new)) is not None:
        return stops
    plan = st.job_plan_from_status(name, status)
    if plan is None:
        step = await place(ctx, entry, spec, status, planned, conds, new)
    else:
        step = await check_plan(ctx, entry, spec, status, plan, conds, new)
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
    return await make_pods(ctx, entry, body, spec, status, step, new)
