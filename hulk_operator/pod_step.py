"""A reconciliation's last step: the job's pods made to match its plan (``make_pods``,
through ``stage_pods``) and its new status fields: its pods' phase, a stage failure's (one
after the run ended ends the job), a re-plan's (its Event), pods refused past the grace
(its servers given back), a rejected template's. With the checks ``reconcile`` shares:
``refused_edit``, ``edited_since``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from hulk_operator import manifests, recovery, regrow
from hulk_operator import status as st
from hulk_operator.context import Context, PodEntry
from hulk_operator.edits import Refusal
from hulk_operator.entries import JobEntry, pod_source
from hulk_operator.errors import (
    INVALID_SPEC,
    PODS_FORBIDDEN,
    ServiceTaken,
    forbidden_pods,
    namespace_terminating,
    quota_lag,
    rejected_template,
)
from hulk_operator.failures import (
    fail,
    named,
    restart_policy,
    stage_failed,
    stop_job,
)
from hulk_operator.plan_fields import not_ready, replanning_ended, unplanned
from hulk_operator.plan_step import Step
from hulk_operator.stage_pods import (
    ENDED,
    delete_pods,
    delete_running,
    desired_pods,
    pod_host,
    pods_phase,
    remove_all,
    succeeded,
    sync_pods,
)
from hulk_planner.model import JobPlan

# Failed's reason where a stage pod failed (or went, or lost its server) after others of the
# run exited 0, rank 0 not
STAGE_FAILED_AFTER_SUCCESS = "StageFailedAfterSuccess"


def refused_edit(conds: list[dict[str, Any]], refused: Refusal, gen: int) -> list[dict[str, Any]]:
    """Conditions of a planned job whose latest spec is refused: it keeps running as
    planned (a typo must not stop a training run) until a valid edit, or until the cluster
    allows an edit it refused (``edits.recheck``)."""
    return st.set_condition(conds, st.PLANNED, False, refused.reason, refused.message, gen)


async def make_pods(
    ctx: Context,
    entry: JobEntry,
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    step: Step,
    new: dict[str, Any],
) -> dict[str, Any]:
    """Makes the job's pods match its plan (``step``) and returns its new status fields:
    a stage failure's, a refusal's (a quota, a policy, a rejected template) or its
    pods' phase."""
    ns, name = entry.key
    gen = entry.generation
    plan, conds, told, replanned = step.plan, step.conds, step.told, step.replanned
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    ended = [p.name for p in pods if p.phase in ENDED]
    failed = [p for p in pods if p.phase == "Failed"]
    # the run's pods seen exited 0, recorded: one may be deleted since (by hand, or with its
    # node), and the run has ended all the same (``status.exited_0``)
    done = st.exited_0(status, pods) if status.get("plan") is not None else []
    if done != (status.get(st.SUCCEEDED_PODS) or []):
        new[st.SUCCEEDED_PODS] = done or None
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
        return await pods_failed(ctx, entry, spec, status, failed, conds, new, gen)
    elif restart_policy(spec) == "Never" and (
        kept := [p for p in failed if replanned is not None and p.node not in replanned[1]]
    ):  # a stage failed on a server not lost: with Never, the job fails all the same
        # (before, a re-plan in the same tick deleted the failed pod as not in its plan,
        # and the job ran on: a review); a pod of a lost server failed with its server
        return await pods_failed(ctx, entry, spec, status, kept, conds, new, gen)
    if step.finishing is not None:  # a stage pod of the run exited 0: nothing is made again
        return await _finishing(ctx, entry, spec, step, done, conds, new, gen)
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
            waited = ctx.placer.refusals.pods_refused(entry, plan.nodes)
        if refused is not None and waited >= ctx.config.forbidden_grace_s:
            blocker = (exc.name, exc.uid) if isinstance(exc, ServiceTaken) else None
            return await _give_back(
                ctx, entry, plan, refused, waited, conds, new, step.force, blocker
            )
        if refused is not None:  # a quota or policy: the plan stands, the pods wait for room
            if replanned is not None:  # told now: the next round sees the new plan only
                live = [p.name for p in ctx.pods.get(entry.key, []) if not p.deleting]
                meant = recovery.pod_diff(live, list(desired))
                conds = _replanned(ctx, replanned, plan, meant, conds, gen, step)
            new["phase"] = st.PLACING
            if quota_lag(exc):  # the job's own pods just deleted still count: tried again
                new["conditions"] = conds
                return new
            ready = st.condition(status, st.READY) or {}
            if ready.get("message") != refused:
                ctx.event("Warning", PODS_FORBIDDEN, refused)
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
    # (not where pods of another template go: a template edit's rollout, not a deletion;
    # before, every image edit that kept its plan posted this Warning: a review)
    if replanned is None and remade and not diff.delete and status.get("phase") == st.RUNNING:
        msg = (
            f"stage pod(s) {', '.join(sorted(remade))} of a running job were deleted; "
            "created again on the same server(s)"
        )
        ctx.event("Warning", "StageRecreated", msg)
    if replanned is not None:
        conds = _replanned(ctx, replanned, plan, diff, conds, gen, step)
    source = pod_source(spec)
    if "plan" not in new and (status.get("plan") or {}).get("podTemplate") != source:
        new["plan"] = {"podTemplate": source}  # (a plan made before it was kept; merged)
    new.update(pods_phase(ctx, entry, set(diff.create) | set(diff.keep), conds, gen, diff.taken))
    seconds = new.get("predictedIterationSeconds", status.get("predictedIterationSeconds"))
    ctx.metrics.set_predicted(ns, name, seconds)
    return new


async def pods_failed(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    failed: list[PodEntry],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    gen: int,
) -> dict[str, Any]:
    """Stage pods the kubelet ended as Failed: restarted, or failing the job, as
    ``stage_failed`` says; but where others of the run exited 0, the run had ended
    (``_after_success``): before, the failed pod was made again alone, and it waited
    at the rendezvous for peers that had exited, for good, holding its GPUs."""
    if ctx.stopped():
        # edited (or deleted) since this tick began: its status is not written this tick
        # (``handlers``), so a failed pod deleted now went uncounted (an unrelated edit,
        # a priority, lost a restart of spec.backoffLimit). Left as they are, the next
        # tick sees them again and counts them.
        return {}
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    if done := st.exited_0(status, pods):
        what = f"stage pod(s) failed: {named(failed)}"
        return await _after_success(ctx, entry, spec, pods, what, failed, done, conds, new, gen)
    return await stage_failed(ctx, entry, spec, status, failed, conds, new, gen)


async def _after_success(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    pods: list[PodEntry],
    what: str,
    failed: list[PodEntry],
    done: list[str],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    gen: int,
    force: Collection[str] = (),
) -> dict[str, Any]:
    """Stage pods the kubelet ended as Failed (eviction, node shutdown: ``failed``), or
    stages gone without being seen to exit 0 (``_finishing``), once others of the run had
    exited 0 (``done``; ``what`` says which ended so). The ranks leave together, after the
    last step's collectives, so the run has ended: none is made again, whatever
    ``restartPolicy`` and ``spec.backoffLimit`` say (it would wait at the rendezvous for
    peers that have exited, holding its GPUs). Rank 0 (stage 0, replica 0: the master,
    which writes the run's last record) decides, as a PyTorchJob's Master and a batch/v1
    success policy's leader index do: the job is Succeeded where it exited 0 (its pod
    seen Succeeded, there or gone since), else Failed (``STAGE_FAILED_AFTER_SUCCESS``).
    The pods still running go (their servers are released, as a finished job's are; with
    grace period 0 on servers gone or in ``force``); those that ended stay for ``kubectl
    logs``."""
    ended = ", ".join(done[:3]) + (f" and {len(done) - 3} more" * (len(done) > 3))
    story = f"{what}, after stage pod(s) {ended} exited 0: the run had ended, so none is made again"
    lead = manifests.hostname(entry.key[1], 0, 0)
    if (exited := next((n for n in done if pod_host(n) == lead), None)) is not None:
        await delete_running(ctx, entry.key, force)
        msg = f"{story}; rank 0 ({exited}) exited 0, so the job succeeded"
        new["phase"] = st.SUCCEEDED  # (its plan kept for the record, as any finished job's)
        conds = succeeded(ctx, entry, conds, gen, msg, msg)
        new["conditions"] = st.set_condition(conds, st.FAILED, False, "NoFailure", msg, gen)
        return new
    rank_0 = next((p for p in pods if pod_host(p.name) == lead), None)
    who = "rank 0's pod is gone" if rank_0 is None else f"rank 0 ({rank_0.name}) is {rank_0.phase}"
    msg = f"{story}; {who}, not exited 0, so the job fails (an edit runs it again)"
    return await stop_job(
        ctx, entry, spec, failed, conds, new, STAGE_FAILED_AFTER_SUCCESS, msg, gen, force
    )


async def _finishing(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    step: Step,
    done: list[str],
    conds: list[dict[str, Any]],
    new: dict[str, Any],
    gen: int,
) -> dict[str, Any]:
    """A run a stage pod of which exited 0 (``done``), none failed: no pod is made again
    (before, a stage pod deleted, or on a server lost, was made again alone, and waited at
    the rendezvous for peers that had exited, for good). A stage neither seen exited 0 nor
    running on a server not lost (its pod deleted; its server deleted, or NotReady past
    the grace: ``step.finishing``) ended without exiting 0 as far as the operator can
    tell, as a failed one: the run ends at once as rank 0 decides (``_after_success``).
    Else the job is as its pods say (``pods_phase``), a pod seen exited 0 and gone since
    (deleted, or its node removed once idle) counting as exited 0: Running while others
    still exit, Succeeded once every stage has, as if it were there."""
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    live = {pod_host(p.name): p for p in pods}
    ended = {pod_host(n): n for n in done}
    lost = step.finishing or {}
    names: set[str] = set()  # the run's stage pods, one per slot
    gone: list[str] = []
    for slot in manifests.slots(step.plan):
        host = manifests.hostname(entry.key[1], slot.stage, slot.replica)
        pod = live.get(host)
        if host in ended:
            names.add(ended[host])
        elif pod is None:
            gone.append(f"{host} (its pod deleted)")
        elif slot.node in lost:
            gone.append(f"{pod.name} on {slot.node} ({lost[slot.node]})")
        else:
            names.add(pod.name)
    if gone:
        what = f"stage(s) gone: {', '.join(gone)}"
        force = recovery.forced(lost)  # (their pods: no kubelet is left to end them)
        return await _after_success(ctx, entry, spec, pods, what, [], done, conds, new, gen, force)
    new.update(pods_phase(ctx, entry, names, conds, gen, exited=done))
    return new


def _replanned(
    ctx: Context,
    replanned: tuple[JobPlan, dict[str, str]],
    plan: JobPlan,
    diff: recovery.PodDiff,
    conds: list[dict[str, Any]],
    gen: int,
    step: Step,
) -> list[dict[str, Any]]:
    """The Event and the ``Replanning`` condition of a re-plan (a loss's or a regrowth's)."""
    old, lost = replanned
    cluster = step.cluster
    if lost:
        made, kept = len(diff.create), len(diff.keep)
        unoffered = {
            n: why
            for n in old.nodes
            if (i := ctx.nodes.get(n)) is not None and (why := i.problem) is not None
        }
        msg = recovery.event_message(
            lost, old, plan, made, kept, None, cluster, unoffered, step.declined, step.regrows
        )
        ctx.event("Warning", "Replanned", msg)
        reason = sorted(set(lost.values()))[0].split()[0]
    else:
        why = regrow.cause(old, plan)
        made, kept = len(diff.create), len(diff.keep)
        msg = recovery.event_message({}, old, plan, made, kept, why, cluster)
        ctx.event("Normal", regrow.REASON, msg)
        reason = regrow.REASON
    return st.set_condition(conds, st.REPLANNING, True, reason, msg, gen)


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
    conds = replanning_ended(conds, decision.reason, gen)
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
