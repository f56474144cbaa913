"""A planned job whose latest spec is refused (invalid, or refused by the cluster): it
runs on as planned (``run_on``), a failed stage pod restarted, a missing one made again,
and planned again from the spec its pods run where it lost servers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hulk_operator import edits
from hulk_operator import status as st
from hulk_operator.context import Context
from hulk_operator.entries import JobEntry, object_entry, planned_pod_spec
from hulk_operator.failures import DEFAULT_BACKOFF_LIMIT
from hulk_operator.plan_step import check_plan
from hulk_operator.pod_step import make_pods, pods_failed


async def run_on(
    ctx: Context,
    entry: JobEntry,
    body: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
) -> dict[str, Any]:
    """The status fields to write for a job whose latest spec is refused: it runs on as
    planned, a failed stage pod restarted (``spec.backoffLimit`` as for any job; not once
    others of the run exited 0: ``pods_failed``), a missing one made again from the spec
    the plan was made for (``edits``). Before, a stage pod that failed stayed Failed,
    while Ready said it was being made again."""
    failed = [p for p in ctx.pods.get(entry.key, []) if not p.deleting and p.phase == "Failed"]
    if failed:
        limit = (body.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            limit = DEFAULT_BACKOFF_LIMIT  # (the refused spec's may be what is wrong)
        made = {**(planned_pod_spec(status.get("plan")) or {}), "backoffLimit": limit}
        return await pods_failed(ctx, entry, made, status, failed, conds, {}, gen)
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
    step = await check_plan(ctx, running, made, status, plan, conds, new)
    if step is None:  # its re-plan just written, not seen yet; or none fit (``new`` says)
        return new
    # (until a new plan's pods run: their gang gate, held while the old pods went, lifted
    # by ``sync_pods``, and the phase and Ready read from them)
    gated = any(p.gated for p in ctx.pods.get(entry.key, []) if not p.deleting)
    # (where a stage pod exited 0, the job ends as its pods say, none made again: before,
    # a deleted one was made again alone, and a job whose pods all exited 0 stayed Running,
    # StagesMissing)
    if (
        step.replanned is None
        and step.finishing is None
        and not gated
        and status.get("phase") != st.PLACING
    ):
        return None
    out = await make_pods(ctx, running, body, made, status, step, new)
    refusal = st.condition({"conditions": conds}, st.PLANNED) or {}
    if out.get("conditions") and refusal.get("status") == "False":
        reason, message = str(refusal.get("reason")), str(refusal.get("message") or "")
        out["conditions"] = st.set_condition(
            out["conditions"], st.PLANNED, False, reason, message, gen
        )
    return out
