"""A job that fails: its stage pods ended as Failed past what it may retry, or its pod
template refused. Its status says why, its servers are released."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from hulk_operator import edits
from hulk_operator import status as st
from hulk_operator.context import Context, PodEntry
from hulk_operator.entries import JobEntry
from hulk_operator.errors import INVALID_SPEC
from hulk_operator.plan_fields import not_ready, replanning_ended, unplanned
from hulk_operator.stage_pods import delete_pods, delete_running

DEFAULT_BACKOFF_LIMIT = 6  # stage restarts before a job fails, as a batch/v1 Job
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
JOB_FAILED = "JobFailed"  # Replanning's reason where the job failed during a re-plan


def restart_policy(spec: Mapping[str, Any]) -> str | None:
    """The stage pods' ``restartPolicy`` as the job's template sets it (None: unset)."""
    return ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")


def named(pods: list[PodEntry]) -> str:
    """``pods`` as a stage failure's words name them: name, server and the kubelet's reason."""
    return ", ".join(
        f"{p.name} on {p.node or 'no node'}{f' ({p.reason})' if p.reason else ''}" for p in pods
    )


def backoff_limit(spec: Mapping[str, Any]) -> int:
    """The stage restarts the job may have over its run (``spec.backoffLimit``)."""
    return int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))


def fail(
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
    conds = not_ready(conds, gen)  # (no LatencyEstimated of a plan it does not keep)
    conds = replanning_ended(conds, msg, gen, reason=JOB_FAILED)
    conds = st.set_condition(conds, st.READY, False, reason, msg, gen)
    # (a job that ran and failed was planned: "not planned:" read oddly for it)
    said = "not planned" if reason == INVALID_SPEC else "its plan is released"
    conds = st.set_condition(conds, st.PLANNED, False, reason, f"{said}: {msg}", gen)
    new.update(unplanned(st.PHASE_FAILED))
    new["conditions"] = st.set_condition(conds, st.FAILED, True, reason, msg, gen)
    return new


async def stage_failed(
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
    what = named(failed)
    policy = restart_policy(spec)
    restarts = int(status.get("stageRestarts") or 0) + len(failed)
    limit = backoff_limit(spec)
    if policy == "Never":
        msg = f"stage pod(s) failed: {what}; restartPolicy is Never, so the job stops"
        return await stop_job(ctx, entry, spec, failed, conds, new, "StageFailed", msg, gen)
    if restarts > limit:
        msg = (
            f"stage pod(s) failed: {what}; {restarts} stage failure(s) exceed "
            f"spec.backoffLimit {limit}, so the job stops (raise spec.backoffLimit to "
            "retry longer)"
        )
        return await stop_job(
            ctx, entry, spec, failed, conds, new, BACKOFF_LIMIT_EXCEEDED, msg, gen
        )
    await delete_pods(ctx, entry.key[0], [p.name for p in failed])
    new["stageRestarts"] = restarts
    msg = f"stage pod(s) failed: {what}; created again ({restarts} of spec.backoffLimit {limit})"
    ctx.event("Warning", "StageRestarted", msg)
    ctx.metrics.stage_failures.labels(action="restarted").inc(len(failed))
    new["conditions"] = st.set_condition(conds, st.READY, False, edits.STAGE_RESTARTING, msg, gen)
    new["phase"] = st.PLACING
    return new


async def limit_lowered(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
) -> dict[str, Any] | None:
    """``spec.backoffLimit`` edited below the stage failures the run has had: the job
    fails now, as a batch/v1 Job does (its controller compares the failures with the
    limit at every sync, not at a new failure only); None where the limit holds. Before,
    such a job ran on until one more failure."""
    restarts = int(status.get("stageRestarts") or 0)
    limit = backoff_limit(spec)
    if restarts <= limit:
        return None
    if ctx.stopped():  # (edited again, or deleted, meanwhile: seen at the next tick)
        return {}
    msg = (
        f"{restarts} stage failure(s) exceed spec.backoffLimit {limit}, lowered since, so "
        "the job stops (raise spec.backoffLimit to retry longer)"
    )
    return await stop_job(
        ctx, entry, spec, [], conds, new, BACKOFF_LIMIT_EXCEEDED, msg, entry.generation
    )


async def stop_job(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    failed: list[PodEntry],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    reason: str,
    msg: str,
    gen: int,
    force: Collection[str] = (),
) -> dict[str, Any]:
    """The job fails for its stages: its pods still running go (a pipeline cannot run
    without a stage, and they would hold their GPUs waiting for it; with grace period 0 on
    servers gone or in ``force``), those that ended (the ``failed`` ones among them) stay
    for ``kubectl logs``."""
    await delete_running(ctx, entry.key, force)
    if failed:
        ctx.metrics.stage_failures.labels(action="job_failed").inc(len(failed))
    # the spec it failed with: an edit kopf never saw (``edit_unseen``) is told from it
    # as a seen one is (a suspend alone does not run it again: a trial)
    new["failedSpec"] = json.dumps(dict(spec), sort_keys=True, separators=(",", ":"))
    return fail(ctx, entry, new, conds, reason, msg, gen)
