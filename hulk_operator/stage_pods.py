"""A job's stage pods made to match its plan: deleted, created behind the gang gate, the
gate lifted once all exist (``sync_pods``), and the job's phase read from them
(``pods_phase``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hulk_operator import manifests, recovery, regrow
from hulk_operator import status as st
from hulk_operator.context import Context, PodEntry
from hulk_operator.entries import JobEntry
from hulk_operator.errors import AFTER_DELETES, PODS_FORBIDDEN, SERVICE_MARK
from hulk_planner.model import JobPlan

ENDED = ("Failed", "Succeeded")  # the phases of a stage pod that will not run again

if TYPE_CHECKING:
    from hulk_operator.inventory import NodeInfo

TAKEN_TOLD = "taken/"  # Context.recent key prefix: when a StagePodTaken Event was posted
SERVICE_TRIED = "service/"  # Context.recent key prefix: when a job's Service was made again
HELD = "held/"  # Context.recent key prefix: since when a job's gang gate waits on old pods
# Context.recent key prefix: a stage pod (by uid) this operator deleted, which the pod index
# may still hold beside the one made again under its name (``gone``)
GONE = "gone/"
# At most this long the new pods wait for a Terminating pod of their hostname (the 30 s
# grace of a checkpointing step): one on a node that stopped answering would never go
# (below the 60 s after which Context.recent forgets the start).
HOLD_S = 45.0


async def delete_pods(ctx: Context, namespace: str, names: list[str]) -> None:
    from hulk_operator import kube

    if names:
        await asyncio.to_thread(kube.delete_pods, ctx.api, namespace, names, [])


async def remove_all(ctx: Context, key: tuple[str, str], force: set[str] | None = None) -> int:
    """Deletes the job's stage pods not already going; returns how many."""
    from hulk_operator import kube

    pods = [p for p in ctx.pods.get(key, []) if not p.deleting]
    if pods:
        forced = _forced(ctx, pods, force or set())
        await asyncio.to_thread(kube.delete_pods, ctx.api, key[0], [p.name for p in pods], forced)
    return len(pods)


async def delete_running(ctx: Context, key: tuple[str, str], force: Collection[str] = ()) -> None:
    """Deletes the job's stage pods that have not ended (those that did stay for ``kubectl
    logs``): with grace period 0 on a server gone or in ``force``, as ``remove_all`` does
    (no kubelet is left to end them: they stayed Terminating, and held their GPUs on a node
    made again under the name; a flaky test)."""
    from hulk_operator import kube

    pods = [p for p in ctx.pods.get(key, []) if p.phase not in ENDED]
    if pods:
        forced = _forced(ctx, pods, force)
        await asyncio.to_thread(kube.delete_pods, ctx.api, key[0], [p.name for p in pods], forced)


def _forced(ctx: Context, pods: Sequence[PodEntry], force: Collection[str]) -> list[str]:
    """The pods to delete with grace period 0: on a server in ``force``, or gone."""
    return [p.name for p in pods if p.node in force or p.node not in ctx.nodes]


def desired_pods(
    entry: JobEntry,
    spec: Mapping[str, Any],
    plan: JobPlan,
    gpus: Mapping[str, int],
    built: dict[tuple[str, str], tuple[Any, dict[str, dict[str, Any]]]] | None = None,
    nodes: Mapping[str, NodeInfo] | None = None,
) -> dict[str, dict[str, Any]]:
    """The job's stage pods under ``plan``, by name, each pinned to its server by that
    Node's ``kubernetes.io/hostname`` label in ``nodes`` (``manifests.pin``; a server not
    in ``nodes``: the label is its name). With ``built`` (``Context.built_pods``) the pods
    last built for the job are given again while the job, its template, plan, GPUs and
    those labels are the same: they are the same dicts, to read and not to change."""
    template = spec.get("template") or {}
    port = int(spec.get("masterPort") or manifests.DEFAULT_MASTER_PORT)
    known = nodes or {}
    hostnames = {n: known[n].labels.get(manifests.HOSTNAME) for n in plan.nodes if n in known}
    source = (
        entry.uid,
        repr(plan),  # (its step time may be NaN, which equals nothing)
        sorted(gpus.items()),
        port,
        json.dumps(template, sort_keys=True, default=str),
        sorted(hostnames.items()),  # (names are unique: a None label is never compared)
    )
    last = built.get(entry.key) if built is not None else None
    if last is not None and last[0] == source:
        return last[1]
    pods = manifests.desired_pods(
        job=entry.key[1],
        namespace=entry.key[0],
        uid=entry.uid,
        template=template,
        job_plan=plan,
        gpus=gpus,
        master_port=port,
        hostnames=hostnames,
    )
    if built is not None:
        built[entry.key] = (source, pods)
    return pods


async def sync_pods(
    ctx: Context,
    entry: JobEntry,
    spec: Mapping[str, Any],
    desired: Mapping[str, dict[str, Any]],
    force: set[str] | None = None,
) -> recovery.PodDiff:
    """Deletes pods not in the plan, creates missing ones (``desired``, behind the gang
    gate), and lifts the gates once every pod of the plan exists."""
    from hulk_operator import kube

    ns, name = entry.key
    port = int(spec.get("masterPort") or manifests.DEFAULT_MASTER_PORT)
    pods = {p.name: p for p in ctx.pods.get(entry.key, [])}
    force = force or set()
    # a pod the plan keeps on a node deleted and made again since it was bound
    # (``recovery.REMADE``): it was never on the new node, so it is deleted with grace 0
    # and made again there (before, kept: the job was re-planned to the same plan every
    # tick, and its pod never replaced; a review). (Whether this reconciliation's look at
    # the nodes has the new node or not: the re-plan's later one did.)
    now = time.monotonic()
    remade = sorted(
        n for n, p in pods.items() if n in desired and not p.deleting and p.node in force
    )
    live = [n for n, p in pods.items() if not p.deleting and n not in remade]
    diff = recovery.pod_diff(live, list(desired))
    # (a pod deleted here as its node was made again: made again at once, whenever the
    # last one of its name was made)
    create = [n for n in diff.create if n in remade or now - ctx.recent.get(n, -1e9) > 10.0]
    doomed = [*diff.delete, *remade]
    if doomed:  # first: a quota counts them until they go
        left = force | {p.node for p in pods.values() if p.node and p.node not in ctx.nodes}
        forced = [n for n in doomed if pods[n].node in left]
        uids = {n: pods[n].uid for n in doomed if pods[n].uid}
        # (by uid: a pod of the name made since is not deleted in its place)
        await asyncio.to_thread(kube.delete_pods, ctx.api, ns, doomed, forced, uids)
        # (those deleted with grace 0 are gone at once; the others stay, Terminating)
        ctx.recent.update((f"{GONE}{uids[n]}", now) for n in forced if n in uids)
    if remade:  # going from here on: the job's phase does not count them as running
        ctx.pods = {
            **ctx.pods,
            entry.key: [
                replace(p, deleting=True) if p.name in remade else p
                for p in ctx.pods.get(entry.key, [])
            ],
        }
    made: list[str] = []
    if not create:
        await restore_service(ctx, entry, port, bool(live))
    else:
        svc = manifests.headless_service(job=name, namespace=ns, uid=entry.uid, master_port=port)
        try:
            made_svc = await asyncio.to_thread(kube.ensure_service, ctx.api, svc)
        except Exception as exc:
            setattr(exc, SERVICE_MARK, True)  # told as the Service's (forbidden_pods)
            raise
        if made_svc and (live or entry.phase == st.RUNNING):
            # deleted with a stage pod, or all of them (before, made again without a word)
            ctx.event("Warning", "ServiceRecreated", _service_again(svc))
        if not live:
            await _tell_orphans(ctx, entry)
        for n in create:  # tried now: not again for 10 s, created or refused (backoff)
            ctx.recent[n] = now
        try:
            made = await asyncio.to_thread(
                kube.create_pods,
                ctx.api,
                [desired[n] for n in create],
                ctx.config.create_delay_s,
                ctx.stopped,
            )
        except Exception as exc:
            if doomed:  # (a quota may still count them: errors.quota_lag)
                setattr(exc, AFTER_DELETES, True)
            raise
        if ctx.stopped():
            return diff  # (the job is going: no gate is lifted)
        taken = [n for n in create if n not in made and n not in pods]
        if taken:  # a pod of the name exists, and the pod index has it not as the job's
            _say_taken(ctx, ns, name, taken)
            diff = replace(diff, taken=tuple(taken))
    # the gang gate: lifted only once every pod of the plan exists (a pod refused, e.g. by a
    # quota, and waiting out its retry pause keeps the others gated)
    # (a pod made again under its name that could not be made yet, its old one still
    # going, is missing too: the others wait for it, as for any other)
    again = [n for n in create if n in pods and (pods[n].deleting or n in remade)]
    missing = [n for n in diff.create if n not in create] + [n for n in again if n not in made]
    gated = [n for n in desired if n not in pods or pods[n].gated or n in again]
    # ... and once no old pod of their hostnames is Terminating: the headless Service
    # published both under <hostname>.<job>, and a kept pod could find the old master
    # (before; a user trial), for at most HOLD_S
    leaving = {pod_host(p.name) for p in pods.values() if p.deleting}
    leaving |= set(map(pod_host, diff.delete))
    held = f"{HELD}{ns}/{name}"
    if (
        gated
        and not missing
        and waits_on_old(gated, leaving, ctx.recent.setdefault(held, now), now)
    ):
        gated = []
    if gated and not missing:
        ctx.recent.pop(held, None)
        await asyncio.to_thread(kube.ungate, ctx.api, ns, gated)
    if not missing:  # every pod of the plan exists: no refusal is running out its grace
        ctx.placer.refusals.pods_admitted(entry.key)
    for n in [n for n, t in ctx.recent.items() if now - t > 60]:
        del ctx.recent[n]
    return diff


def gone(recent: Mapping[str, float], pod: PodEntry) -> bool:
    """Whether ``pod`` is one this operator deleted with grace period 0 within the minute
    (``recent``: ``Context.recent``), which the pod index may still hold beside the pod made
    again under its name: bound to the node before it was made again, it was taken as on a
    node made again a second time (before, any pod made within 10 s was passed over
    instead, and one whose node was made again in those 10 s was left on it: a flaky
    test). A reconciliation does not see it (``handlers``)."""
    return bool(pod.uid) and f"{GONE}{pod.uid}" in recent


def waits_on_old(gated: Sequence[str], leaving: Collection[str], since: float, now: float) -> bool:
    """Whether the gated pods wait (since ``since``) for the old pods of their hostnames
    still ``leaving`` (Terminating), as they do for at most ``HOLD_S``."""
    return any(pod_host(n) in leaving for n in gated) and now - since < HOLD_S


def pod_host(pod: str) -> str:
    """A stage pod's hostname: its name without the hash (``<hostname>-<hash>``)."""
    return pod.rsplit("-", 1)[0]


def _say_taken(ctx: Context, ns: str, job: str, names: list[str]) -> None:
    """Stage pods that could not be made, as a pod of their name exists that is not the
    job's (its ``hulk.dev/job`` label changed or removed by hand): before, a StageRecreated
    Event said they were made, and the job stayed Placing without a word (a user trial).
    Told at most every minute."""
    now = time.monotonic()
    told = f"{TAKEN_TOLD}{ns}/{','.join(names)}"
    if now - ctx.recent.get(told, -1e9) < 60.0:
        return
    ctx.recent[told] = now
    ctx.event(
        "Warning",
        STAGE_POD_TAKEN,
        f"stage pod(s) {', '.join(names)} cannot be made: a pod of the name exists without "
        f"the job's label {manifests.LABEL_JOB}={manifests.job_label(job)} (changed by "
        "hand?); the job waits for it: delete that pod, or label it back",
    )


async def restore_service(ctx: Context, entry: JobEntry, port: int, live: bool) -> None:
    """Makes the headless Service of a job whose pods run again where it was deleted (by
    hand, say): the stages find one another by name through it, and before it was made
    again only with a stage pod. Tried at most every 10 s; a refusal is an Event."""
    from hulk_operator import kube

    ns, name = entry.key
    tried = f"{SERVICE_TRIED}{ns}/{name}"
    now = time.monotonic()
    if ctx.has_service or not live or now - ctx.recent.get(tried, -1e9) <= 10.0:
        return
    ctx.recent[tried] = now
    svc = manifests.headless_service(job=name, namespace=ns, uid=entry.uid, master_port=port)
    try:
        made = await asyncio.to_thread(kube.ensure_service, ctx.api, svc)
    except Exception as exc:  # (a quota on Services, a policy): tried again in 60 s
        ctx.recent[tried] = now + 50.0
        what = f"the job's headless Service {svc['metadata']['name']} was deleted"
        ctx.event("Warning", "ServiceRecreated", f"{what}; it cannot be made again: {exc}")
        return
    if made:  # (not where the index had not seen it yet)
        ctx.event("Warning", "ServiceRecreated", _service_again(svc))


def _service_again(svc: Mapping[str, Any]) -> str:
    return (
        f"the job's headless Service {svc['metadata']['name']} was deleted; made again (its "
        "stage pods find one another by name through it)"
    )


ORPHANED = "OrphanedStagePods"


async def _tell_orphans(ctx: Context, entry: JobEntry) -> None:
    """A Warning, once per job object, when stage pods of an earlier job of its name still
    run unowned (``kubectl delete --cascade=orphan``): they hold their GPUs and answer the
    stages' DNS names beside the new pods (before, nothing said so: a user trial found
    MASTER_ADDR resolving to two pods)."""
    from hulk_operator import kube

    ns, name = entry.key
    if ctx.placer.orphans_told.get(entry.key) == entry.uid:  # (kept while the job is:
        # ``recent`` forgets in a minute, and pods refused meanwhile were told again)
        return
    ctx.placer.orphans_told[entry.key] = entry.uid
    try:
        names = await asyncio.to_thread(
            kube.orphaned_stage_pods, ctx.api, ns, manifests.job_label(name), entry.uid
        )
    except Exception:  # (it only tells: the pods are made all the same)
        return
    if names:
        shown = " ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        ctx.event(
            "Warning",
            ORPHANED,
            f"{len(names)} stage pod(s) of an earlier job of this name run unowned (deleted "
            "with --cascade=orphan): they hold their GPUs, and their hostnames answer this "
            "job's stage names beside its own pods (MASTER_ADDR may reach the old run); "
            f"delete them: kubectl delete pod -n {ns} {shown}",
        )


STAGE_POD_TAKEN = "StagePodTaken"
UNSCHEDULABLE_STAGE = "StageUnschedulable"  # Ready's reason and the Event's


def _first_move(ctx: Context, down: Sequence[NodeInfo | None]) -> str:
    """`` (the first at 04:31:05 UTC)``: when the first of the ``down`` nodes is taken as
    lost, its grace counted from its NotReady or from the operator's start (or the last
    disruption's end), whichever is later (before, a restarted operator's job said "once
    NotReady for 60 s" of a node NotReady for 83: a user trial); "" where none says."""
    grace = ctx.config.not_ready_grace_s
    moves = [
        max(info.not_ready_since, ctx.settled_at) + grace
        for info in down
        if info is not None and info.not_ready_since is not None
    ]
    if not moves:
        return ""
    return f" (the first at {time.strftime('%H:%M:%S', time.gmtime(min(moves)))} UTC)"


def succeeded(
    ctx: Context,
    entry: JobEntry,
    conds: list[dict[str, Any]],
    gen: int,
    msg: str,
    told: str,
) -> list[dict[str, Any]]:
    """The conditions of a job whose run finished (phase ``Succeeded``): ``Ready`` False and
    ``Complete`` True saying ``msg``, and a Normal Event ``Succeeded`` saying ``told``, once
    per run."""
    conds = st.set_condition(conds, st.READY, False, "Succeeded", msg, gen)
    # (before, nothing a tool waits on: no condition, no Event; a user trial)
    conds = st.set_condition(conds, st.COMPLETE, True, "Succeeded", msg, gen)
    ctx.metrics.set_free_speedup(*entry.key, None)  # (done: no faster plan to alert of)
    key = f"{st.SUCCEEDED}/{entry.uid}/{gen}"
    if entry.phase != st.SUCCEEDED and key not in ctx.recent:
        ctx.recent[key] = time.monotonic()
        ctx.event("Normal", st.SUCCEEDED, told)
    return conds


def pods_phase(
    ctx: Context,
    entry: JobEntry,
    desired: set[str],
    conds: list[dict[str, Any]],
    gen: int,
    taken: Sequence[str] = (),
    exited: Collection[str] = (),
) -> dict[str, Any]:
    """Running once every desired pod (by name) runs and no other pod of the job is left.
    ``taken``: desired pods that could not be made, a pod of the name not being the job's
    (``Ready`` names them, as the Event does, until they are made). ``exited``: pods seen
    exited 0 (``status.exited_0``), which count as Succeeded where they are gone since."""
    live = {p.name: p for p in ctx.pods.get(entry.key, []) if not p.deleting}
    pods = {n: p for n, p in live.items() if n in desired}
    want = len(desired)
    gone = [n for n in desired if n in exited and n not in live]  # (not made again)
    phases = [p.phase for p in pods.values()] + ["Succeeded"] * len(gone)
    running = sum(1 for p in phases if p == "Running")
    done = sum(1 for p in phases if p == "Succeeded")
    out: dict[str, Any] = {}
    if want and done == want:
        out["phase"] = st.SUCCEEDED
        told = f"every stage finished ({want} stage pod(s))"
        conds = succeeded(ctx, entry, conds, gen, "every stage finished", told)
    elif running + done == want and len(live) + len(gone) == want:  # finishing: one by one
        out["phase"] = st.RUNNING
        msg = f"{running}/{want} stage pods running" + (f", {done} finished" if done else "")
        why = "StagesFinishing" if done else regrow.ALL_RUNNING
        nodes = {p.node: ctx.nodes.get(p.node) for p in pods.values() if p.node}
        down = sorted(n for n, info in nodes.items() if info is not None and not info.ready)
        if down:  # within its grace: not lost yet, but not all well (before: not a word)
            msg += f"; node(s) {', '.join(down)} NotReady: " + (
                "not taken as lost while the cluster is disrupted"
                if ctx.disrupted
                else f"their stages move once NotReady for {ctx.config.not_ready_grace_s:g} s"
                + _first_move(ctx, [nodes[n] for n in down])
            )
        cordoned = sorted(n for n, i in nodes.items() if i is not None and i.unschedulable)
        if cordoned and not ctx.config.cordon_moves:  # (kept there, as Kubernetes keeps a
            # cordoned node's pods: said, so that a drain's effect is no surprise; a re-plan
            # leaves every cordoned server, where "move once drained" read as one by one: a
            # trial drained one and saw both move)
            msg += (
                f"; node(s) {', '.join(cordoned)} cordoned: their stages run on until one of "
                "them is drained or the job is re-planned for another cause, which moves them all"
            )
        conds = st.set_condition(conds, st.READY, True, why, msg, gen)
        old = st.condition({"conditions": conds}, st.REPLANNING)
        if old and old["status"] == "True":
            over = regrow.REASON if old["reason"] == regrow.REASON else "Recovered"
            conds = st.set_condition(conds, st.REPLANNING, False, over, old["message"], gen)
    else:
        out["phase"] = st.PLACING
        msg = f"{running}/{want} stage pods running"
        stuck = sorted((n, p.unschedulable) for n, p in pods.items() if p.unschedulable)
        ready = st.condition({"conditions": conds}, st.READY) or {}
        if stuck:  # the scheduler cannot place them: say why, or the job just waits
            name, why = stuck[0]
            more = f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""
            msg += f"; the scheduler cannot place {name}{more}: {why}"
            if ready.get("reason") != UNSCHEDULABLE_STAGE:  # told on the job once a spell
                # (before, the condition alone, the scheduler's Event on the pod: a trial)
                ctx.event(
                    "Warning",
                    UNSCHEDULABLE_STAGE,
                    f"the scheduler cannot place {name}{more}: {why}",
                )
            conds = st.set_condition(conds, st.READY, False, UNSCHEDULABLE_STAGE, msg, gen)
        elif taken:  # (before: StagesStarting, and only the Event said why; a user trial)
            label = f"{manifests.LABEL_JOB}={manifests.job_label(entry.key[1])}"
            msg += (
                f"; stage pod(s) {', '.join(sorted(taken))} cannot be made: a pod of the name "
                f"exists without the label {label}: delete that pod, or label it back"
            )
            conds = st.set_condition(conds, st.READY, False, STAGE_POD_TAKEN, msg, gen)
        elif ready.get("reason") in (PODS_FORBIDDEN, STAGE_POD_TAKEN) and len(pods) < want:
            pass  # refused or taken pods wait out their retry pause: that still stands
        else:
            conds = st.set_condition(conds, st.READY, False, "StagesStarting", msg, gen)
    conds = st.set_condition(conds, st.FAILED, False, "NoFailure", "no stage failed", gen)
    out["conditions"] = conds
    return out
