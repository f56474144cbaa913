"""What an edit of a running job's spec means for its plan (the update handler acts).

A job's plan keeps fingerprints of the spec parts it and its stage pods were made from
(``status.plan.specHashes``, :func:`hulk_operator.entries.spec_hashes`). An edit leaves the
running pods alone when, after it, the spec:

- differs only by defaults filled in (a CRD upgrade that adds a defaulted field);
- makes the same fingerprints (``priority`` or ``backoffLimit`` changed, a preset's own
  sizes written out, or a refused typo undone: the spec is back to what the pods run);
- differs from what the pods run only in ``allowedRegions`` or ``nodeSelector``, in a way
  every server of the plan still meets.

Anything else is planned again from scratch, unless :func:`refusal` refuses it: then the
pods of the last valid spec run on (a typo must not stop a training run). An edit refused
for the cluster's sake (a policy, a LimitRange, no node to hold it, no room on the servers
free for it now), not its own, is checked again (:func:`recheck`) and planned once the
cluster allows it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hulk_operator import kube, manifests, recovery
from hulk_operator import status as st
from hulk_operator.context import Context, PodEntry
from hulk_operator.entries import (
    CONSTRAINTS,
    JobEntry,
    normalized,
    object_entry,
    planned_pod_spec,
    pod_source,
    spec_hashes,
)
from hulk_operator.errors import EDIT_REFUSED, INVALID_SPEC, policy_refusal, rejected_template
from hulk_operator.fit import fits_nowhere, holds, matching_nodes, no_room_now, says_fits_nowhere
from hulk_operator.inventory import NodeInfo
from hulk_operator.latencies import Pair
from hulk_operator.placement import Placer
from hulk_operator.plan_fields import unplanned
from hulk_operator.quota_fit import quota_too_small
from hulk_operator.snapshot import Snapshot, filled_requests
from hulk_operator.stage_pods import desired_pods, restore_service, sync_pods

BOOKKEEPING = frozenset({"priority", "backoffLimit", "suspend", "regrow"})  # Succeeded ignores
RECHECK_S = 15.0  # how often an edit the cluster refused is checked again
KEPT_RUNNING = "the pods of the last valid spec keep running; fix the spec to plan it again"
# (for an edit that fits nowhere, "planned once the cluster allows it" read as if waiting
# would do: a user trial; nodes added or relabelled are still looked at)
KEPT_NOWHERE = (
    "the pods of the last valid spec keep running; fix the spec (the edit is checked again "
    "as nodes are added or relabelled)"
)
KEPT_WAITING = (
    f"the pods of the last valid spec keep running; the edit is checked again every "
    f"{RECHECK_S:g} s and planned once the cluster allows it (or fix the spec)"
)


@dataclass(frozen=True)
class Refusal:
    """Why an edit of a running job is refused. ``waits``: refused by the cluster (a
    policy, a LimitRange, nodes), not for the spec's own fault: checked again."""

    why: str
    waits: bool

    @property
    def reason(self) -> str:
        return EDIT_REFUSED if self.waits else INVALID_SPEC

    @property
    def message(self) -> str:
        if not self.waits:
            return f"{self.why}; {KEPT_RUNNING}"
        nowhere = says_fits_nowhere(self.why)
        return f"{self.why}; {KEPT_NOWHERE if nowhere else KEPT_WAITING}"


def changed_fields(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> set[str]:
    """The spec's top-level fields an edit changed, defaults filled in on both sides."""
    a, b = normalized(before), normalized(after)
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def plan_stands(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    plan: Mapping[str, Any],
    servers_still_match: Callable[[], bool],
    run_ended: bool = False,
) -> str | None:
    """Why a running job's plan stands after this edit (a line for the log and the
    ``Planned`` condition), or None when the edit needs a new plan. ``run_ended``: a stage
    pod of the run exited 0 (``status.exited_0``), so no pod of it is made again
    (``pod_step``), and a template edit that would keep the plan and make the pods again
    from the new template (``TEMPLATE_STANDS``) is a new run: planned again, as a finished
    job's edit is. Before, the plan stood, the SpecChanged Event said its pods were made
    again, and none was: the old run finished and the edit was never run (a review)."""
    was = spec_hashes(before)
    running = plan.get("specHashes") or was  # (plans made before them)
    now = spec_hashes(after)
    differ = {k for k, v in now.items() if running.get(k) != v}
    if not differ:
        if was != running:
            return "the spec is back to the one its pods run: its plan stands"
        changed = ", ".join(sorted(changed_fields(before, after))) or "nothing"
        return f"{changed} changed: its plan stands"
    if differ <= CONSTRAINTS and servers_still_match():
        return (
            f"{', '.join(sorted(differ))} changed and every server of its plan still matches: "
            "its plan stands"
        )
    made = planned_pod_spec(plan)
    if differ == {"template"} and made is not None and placed_alike(made, after or {}):
        return None if run_ended else TEMPLATE_STANDS
    return None


# A template edit that changes nothing its stage pods ask of their servers (an image, a
# command, variables, labels): the plan stands and the pods are made again from the new
# template on the same servers, as a Deployment's rollout keeps the pods' shape (before,
# the job was planned afresh, and a trial's image edit went from 24 stages and 74.6 s a
# step to 16 and 79.4 s with nothing lost)
TEMPLATE_STANDS = (
    "spec.template changed, and its stage pods ask the same of their servers: its plan "
    "stands, and its stage pods are made again from the new template"
)
# what a template gives the planner
PLACEMENT = ("requests", "init_gpus", "trainer_gpus", "tolerations", "node_selector", "affinity",
             "pod_quota", "pod_resources", "pod_facts")  # fmt: skip


def placed_alike(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether two specs' templates ask the same of the servers (``PLACEMENT``: requests,
    GPUs, tolerations, node selectors, affinity, what quotas count): an edit between them
    leaves the plan as it is."""
    head = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob"}
    entries = [object_entry({**head, "metadata": {"name": "job"}, "spec": spec})
               for spec in (before, after)]  # fmt: skip
    if any(e.error is not None for e in entries):
        return False
    return all(getattr(entries[0], f) == getattr(entries[1], f) for f in PLACEMENT)


def pods_fit_again(entry: JobEntry, snap: Snapshot) -> bool:
    """Whether every server of the job's plan would take a new stage pod of ``entry``
    (its requests as the namespace's LimitRange defaults fill them in): not cordoned,
    tainted, NotReady, nor too full beside other pods. A template edit that keeps the plan
    makes every pod again; on a server that takes none, the new pod would wait, be taken
    as stuck and the job re-planned after all (a review). Nor where the namespace's quotas,
    once its own pods are gone, leave too little for the new pods on all its servers
    (``quota_refusal`` asks only whether some plan of it fits): before, some of the new
    pods were refused and the job lost its stages; now it is planned as any other edit,
    and a round plans it within the quota (a user trial)."""
    offered = {i.name for i in snap.free(entry, also=entry.plan_nodes)}
    if not entry.plan_nodes or not entry.plan_nodes <= offered:
        return False
    gpus = [s.gpus for n in sorted(entry.plan_nodes) if (s := snap.nodes[n].server) is not None]
    return snap.quota_short(entry, snap.pods_need(entry, gpus)) is None


def servers_match(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> bool:
    """Whether every server of the job's plan meets its (new) constraints."""
    allowed = {i.name for i in matching_nodes(entry, nodes)}
    return bool(entry.plan_nodes) and entry.plan_nodes <= allowed


def refusal(
    api: Any,
    name: str,
    namespace: str | None,
    spec: Mapping[str, Any],
    entry: JobEntry,
    nodes: Mapping[str, NodeInfo],
    unreachable: Collection[Pair] = (),
) -> Refusal | None:
    """Why an edit of a running job is refused (its pods run on), or None: a pod template
    the API server rejects (a server-side dry run of one stage pod: invalid) or forbids
    (out of a LimitRange's bounds, refused by a policy: the cluster's rule, which may
    change), constraints no node matches, a model no set of the servers it may use could
    hold, stage pod requests no node could hold (the cluster's nodes, which may change).
    What other jobs hold is :func:`unplannable`'s to judge."""
    pod = manifests.template_check_pod(
        job=name, namespace=namespace or "", uid=entry.uid, template=spec.get("template") or {}
    )
    error = kube.dry_run_pod(api, pod)
    if error is not None:
        if (why := policy_refusal(error)) is not None:
            return Refusal(why, waits=True)
        if (why := rejected_template(error)) is not None:
            return Refusal(why, waits=False)
    if not nodes:
        return None
    why = fits_nowhere(entry, nodes, unreachable)
    return None if why is None else Refusal(why, waits=True)


def quota_refusal(entry: JobEntry, snap: Snapshot) -> Refusal | None:
    """Why an edit of a running job that makes new pods waits for its namespace's quotas:
    once its own pods are gone, they leave too little for any plan of it
    (``quota_fit.quota_too_small``), or None. Before, the edit's trial plan ignored quotas:
    under a quota lowered below what the namespace held, a ``masterPort`` edit removed a
    running job's 20 pods and left it Pending, and an image edit's new pod was refused with
    the old one gone (a user trial)."""
    why = quota_too_small(entry, snap)
    return None if why is None else Refusal(why, waits=True)


def unplannable(placer: Placer, entry: JobEntry, snap: Snapshot) -> Refusal | None:
    """Why an edit of a running job waits (a :class:`Refusal` the cluster makes), or None:
    the servers free for it now (its own, and those no other job holds: ``Snapshot.free``)
    have too little GPU memory for it (:func:`hulk_operator.fit.no_room_now`, a quick
    count), or the edited job planned alone on them, as a round would plan it, fits no
    plan. Where they cannot, it is planned on every server it may use, as if all were free:
    where none fits there either, waiting does not help, and the words say "fits nowhere"
    (before, "cannot hold the edited job now" sent a trial to free servers for nothing).
    Before any of this, only GPU memory was counted before the running pods were removed,
    and an edit whose servers could not form a pipeline over their links removed them, the
    job left Pending for good (a user trial). Planned again only when what it was tried
    on changed. Meanwhile the planning rounds keep the servers the edited job would use
    from pending jobs ranked below it (``Placer.edits_waiting``), unless it fits nowhere."""
    seen = (placer.fingerprint(snap, entry), entry.generation)
    tried = placer.edit_tried.get(entry.key)
    if tried is None or tried[0] != seen:
        free = snap.free(entry, also=entry.plan_nodes)
        own = sum(1 for i in free if i.name in entry.plan_nodes)
        why = no_room_now(entry, snap.nodes, snap.held)
        if why is None and (d := placer.try_plan(entry, free, snap)).job_plan is None:
            why = (
                f"no plan fits the edited job on the {len(free)} server(s) free for it now "
                f"({own} its own): {d.reason}"
            )
        if why is not None:  # would it fit were every server it may use free (held,
            # cordoned, NotReady or not)? (``fits_nowhere`` counted their memory alone)
            every = [
                i
                for i in matching_nodes(entry, snap.nodes)
                if i.server is not None and holds(i, entry.requests, entry.init_gpus[1])
            ]
            d = placer.try_plan(entry, every, replace(snap, held={}, used={}))
            if d.job_plan is None:
                why = (
                    f"fits nowhere: no plan fits the edited job on the {len(every)} server(s) "
                    f"it may use, even were all of them free: {d.reason}; waiting for other "
                    "jobs to end does not help (fix the spec, or add servers)"
                )
        tried = placer.edit_tried[entry.key] = (seen, why)
    return None if tried[1] is None else Refusal(tried[1], waits=True)


async def recheck(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A running job whose latest edit the cluster refused (``Planned`` reason
    ``EditRefused``), checked again every ``RECHECK_S``, and at once when the servers free
    for it change (seen late, the servers others freed went to pending jobs first; a
    review; meanwhile the rounds keep them from jobs ranked below it: ``Placer.
    edits_waiting``): the status fields that plan it again from
    scratch once the edit is allowed (as an edit accepted at once would), or, for a
    template edit that asks nothing more of the servers (``TEMPLATE_STANDS``), those that
    keep its plan and make its pods again from the new template (before, planned from
    scratch: a review), the refusal's new words if they changed, else nothing."""
    now = time.monotonic()
    # (its stage pods' requests as the namespace's LimitRange defaults fill them in, as
    # planning reads them: before, the template's alone, and an edit no node could hold was
    # taken as allowed, and the running job lost its pods; a review)
    filled = replace(entry, requests=filled_requests(entry, ctx.limit_defaults))
    snap = await ctx.snapshot()
    snap.held = ctx.placer.held(snap.held)  # (servers just reserved for others too)
    free = tuple(snap.free(filled, also=entry.plan_nodes))
    last = ctx.placer.edit_checked.get(entry.key)
    if last is not None and now - last[0] < RECHECK_S and last[1] == free:
        return {}
    ctx.placer.edit_checked[entry.key] = (now, free)
    ns, name = entry.key
    cut = (await ctx.latencies()).unreachable
    refused = await asyncio.to_thread(refusal, ctx.api, name, ns, spec, filled, ctx.nodes, cut)
    if refused is None:
        refused = quota_refusal(filled, snap)
    pods = ctx.pods.get(entry.key, [])
    if (
        refused is None
        and status is not None
        and _template_stands(filled, spec, status, snap, pods)
    ):
        ctx.placer.forget(entry.key)
        return _stands_now(ctx, spec, status, conds, gen)
    if refused is None:  # (a plan tried: its pods go only where one fits)
        refused = await asyncio.to_thread(unplannable, ctx.placer, filled, snap)
    else:  # refused by a rule, not for room: no round keeps servers for it meanwhile
        ctx.placer.edit_tried.pop(entry.key, None)
    told = (st.condition({"conditions": conds}, st.PLANNED) or {}).get("message")
    if refused is not None:
        if refused.message == told:
            return {}
        # (the Event too: before, kubectl describe kept the first words, "cannot hold the
        # edited job now", after the condition said "fits nowhere"; a user trial; not for
        # figures alone, which move as other jobs come and go: a review)
        from hulk_operator.plan_step import cause_of, same_cause  # (it imports this module's
        # users)

        # (a new cause, once per TELL_AGAIN_S, as a waiting job's: as other jobs came and
        # went, "no plan fits ... on 16 servers" then "cannot hold ... 9 servers" were
        # posted at each free; a user trial)
        cause = cause_of(refused.message)
        if not same_cause(str(told or ""), refused.message) and ctx.placer.newly_told(
            entry.key, cause, now, edit=True
        ):
            ctx.event("Warning", refused.reason, refused.message)
        return {
            "conditions": st.set_condition(
                conds, st.PLANNED, False, refused.reason, refused.message, gen
            )
        }
    ctx.placer.edit_allowed(entry.key, gen)  # (a waiting edit until seen pending)
    msg = (
        "the cluster allows the refused edit now: planning the job again; the new plan's "
        "stage pods replace those it changes"
    )
    ctx.event("Normal", "SpecChanged", msg)
    conds = st.set_condition(conds, st.PLANNED, False, "SpecChanged", msg, gen)
    if st.condition({"conditions": conds}, st.REPLANNING) is not None:
        conds = st.set_condition(conds, st.REPLANNING, False, "SpecChanged", msg, gen)
    # Pending with no plan is not Ready, as for an edit allowed at once (before, Ready=True
    # AllStagesRunning stood beside Pending until the new plan: a user trial)
    ready = "the refused edit is allowed now: the new plan's stage pods replace those it changes"
    conds = st.set_condition(conds, st.READY, False, "NotPlanned", ready, gen)
    # (every field of the old plan cleared, as for an edit allowed at once: before, kubectl
    # get showed its stages, regions and step time beside Pending; a user trial)
    return unplanned(st.PENDING) | {"stageRestarts": 0, "conditions": conds}


def _template_stands(
    entry: JobEntry,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    snap: Snapshot,
    pods: Iterable[PodEntry] = (),
) -> bool:
    """Whether an edit allowed now leaves the plan standing, its pods made again from the
    new template (``TEMPLATE_STANDS``, every server of the plan taking a new pod), as the
    update handler judges an edit allowed at once."""
    plan = status.get("plan") or {}
    match = lambda: servers_match(entry, snap.nodes)  # noqa: E731
    stands = plan_stands(None, spec, plan, match, bool(st.exited_0(status, pods)))
    return stands == TEMPLATE_STANDS and pods_fit_again(entry, snap)


def _stands_now(
    ctx: Context,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
) -> dict[str, Any]:
    """The status fields of a refused template edit allowed now that keeps its plan: the
    plan's record of its spec follows the edit (a merge patch: the stages stay), Planned
    says so, and a SpecChanged Event."""
    msg = f"the cluster allows the refused edit now: {TEMPLATE_STANDS}"
    if (st.condition(status, st.READY) or {}).get("reason") == STAGES_MISSING:
        msg += "; its missing stage pods are made again"  # (as the update handler says)
    ctx.event("Normal", "SpecChanged", msg)
    line = st.plan_line_from_status(status)
    conds = st.set_condition(
        conds, st.PLANNED, True, "Planned", f"{line} ({msg})" if line else msg, gen
    )
    return {"plan": {"specHashes": spec_hashes(spec), "podTemplate": pod_source(spec)},
            "conditions": conds}  # fmt: skip


STAGES_MISSING = "StagesMissing"  # Ready's reason: a refused job's pods are not all running
STAGE_RESTARTING = "StageRestarting"  # Ready's reason: a failed stage pod is made again


async def remake_missing(ctx: Context, entry: JobEntry, status: Mapping[str, Any]) -> str | None:
    """Makes a refused job's missing stage pods again from the spec its plan was made
    for (``status.plan.podTemplate``), as a Deployment's old ReplicaSet keeps its pods
    while a new template is refused: the job keeps training. None where every pod is
    there, or was made now; else why none is: a server of the plan deleted, or one of a
    missing pod cordoned, NotReady or tainted (a drain cordons first: its pod would wait
    Pending for ever), where only a new plan helps and a refused spec makes none; no
    record of the spec, or one the plan's fingerprints do not match; pods left that the
    record does not make; the API server refusing them."""
    plan = st.job_plan_from_status(entry.key[1], status)
    if plan is None:
        return None
    made = planned_pod_spec(status.get("plan"))
    if made is None:
        if "podTemplate" not in (status.get("plan") or {}):
            return (
                "none is made again, as the plan keeps no record of its spec (an older operator's)"
            )
        return (
            "none is made again, as the plan's record of its spec does not match its fingerprints"
        )
    gone = [n for n in plan.nodes if n not in ctx.nodes]
    if gone:
        return "none is made again, as a server of the plan is deleted"
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    desired = desired_pods(entry, made, plan, st.plan_gpus(status), ctx.built_pods, ctx.nodes)
    diff = recovery.pod_diff([p.name for p in pods], list(desired))
    if diff.delete:  # not the pods the record makes: left as they are
        return "none is made again, as the pods left are not those its spec makes"
    if not diff.create:  # (its Service, deleted by hand, is made again as any job's)
        port = int(made.get("masterPort") or manifests.DEFAULT_MASTER_PORT)
        await restore_service(ctx, entry, port, bool(pods))
        return None
    servers = {manifests.pinned_node(desired[n]["spec"]) or "" for n in diff.create}
    sick = sorted(f"{n} {why}" for n in servers if (why := ctx.nodes[n].sick(entry.tolerations)))
    if sick:
        return f"none is made again, as server(s) {', '.join(sick)} cannot take it"
    try:  # (a pod made less than 10 s ago is made again once that is over: sync_pods)
        synced = await sync_pods(ctx, entry, made, desired)
    except Exception as exc:  # (a quota, a policy: said, and tried again at a later tick)
        return f"none is made again, as the API server refused them: {type(exc).__name__}: {exc}"
    told = (st.condition(status, st.READY) or {}).get("reason")
    again = synced.recreated()
    noticed = told not in (STAGES_MISSING, STAGE_RESTARTING)  # (now; not a failed stage's)
    if again and noticed:
        ctx.event(
            "Warning",
            "StageRecreated",
            f"stage pod(s) {', '.join(again)} of a job whose spec is refused were "
            "deleted; made again from the spec the plan was made for",
        )
    return None


def kept_pods(
    ctx: Context,
    entry: JobEntry,
    status: Mapping[str, Any],
    conds: list[dict[str, Any]],
    gen: int,
    unmade: str | None = None,
) -> list[dict[str, Any]] | None:
    """A job whose latest spec is refused runs on as planned, its missing pods made again
    from the spec its plan was made for (``remake_missing``; ``unmade``: why they are
    not): the conditions that say so while one of them is not running, or its server is
    gone (Ready False, reason ``StagesMissing``, and a Warning Event when that starts or
    its words change), those that say all run again, or None where Ready stands. (Before,
    Ready said every stage ran while none did: a user trial deleted the pod of a job
    whose edit was refused.)"""
    plan = st.job_plan_from_status(entry.key[1], status)
    if plan is None:
        return None
    slots = [n for s in plan.stages for n in s.nodes]
    pods = [p for p in ctx.pods.get(entry.key, []) if not p.deleting]
    gone = sorted({n for n in slots if n not in ctx.nodes})
    running = sum(1 for p in pods if p.phase == "Running" and p.node in ctx.nodes)
    ready = st.condition({"conditions": conds}, st.READY) or {}
    if running >= len(slots) and not gone:
        if ready.get("reason") not in (STAGES_MISSING, STAGE_RESTARTING):
            return None
        msg = f"{running}/{len(slots)} stage pods running"
        return st.set_condition(conds, st.READY, True, "AllStagesRunning", msg, gen)
    if ready.get("reason") == STAGE_RESTARTING and unmade is None and not gone:
        return None  # (a failed stage's restart, told: it stands until they all run)
    if unmade is None:  # made again, or starting
        fate = "the missing ones are made again from the spec the plan was made for"
    else:
        fate = f"{unmade}: fix the spec, or edit it back, and the job is planned again as needed"
    msg = (
        f"{running}/{len(slots)} stage pods running"
        + (f"; server(s) {', '.join(gone)} deleted" if gone else "")
        + f"; the job's spec is refused (see Planned): {fate}"
    )
    if ready.get("message") == msg:
        return None
    ctx.event("Warning", STAGES_MISSING, msg)  # (once per change of its words)
    return st.set_condition(conds, st.READY, False, STAGES_MISSING, msg, gen)
