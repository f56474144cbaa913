"""The kopf handlers of the HulkTrainingJob operator (``kopf run -m hulk_operator.handlers``).

- The cluster is kept in memory by kopf indexes (``indexes``, registered on import here),
  which kopf passes to the handlers below by name; the operator's own login, start
  (settings tuned once, shared state), stop and probes are ``lifecycle``'s.
- ``hulktrainingjob_create`` validates the spec; a bad one gets a Warning Event. Edits of
  the spec are ``updates``' (``hulktrainingjob_update``, registered on import here).
- ``hulktrainingjob_reconcile`` (a timer, every ``reconcile_interval_s``) does the work:
  plans pending jobs together, re-plans jobs that lost servers, keeps the pods in line with
  the plan and writes the status through ``patch.status``.
- ``hulktrainingjob_delete`` forgets a deleted job and deletes its stage pods at once (the
  garbage collector would, by owner references, but may learn of the CRD late); the
  timer's kopf finalizer is only there to stop the timer first.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kopf

from hulk_operator import GROUP, PLURAL, VERSION, kube, recovery
from hulk_operator import status as st
from hulk_operator.context import Context, PodEntry
from hulk_operator.entries import JobEntry, Key, object_entry
from hulk_operator.errors import classify, to_kopf

# (the pod watch that records stage pods deleted once they exited 0: registered by this import)
from hulk_operator.exits import told_status
from hulk_operator.indexes import (
    build_snapshot,
    one,
    outside_pods,
    shared_latencies,
)
from hulk_operator.inventory import (
    NodeInfo,
    Resources,
    Usage,
)

# (the operator's login, start, stop and probes: registered by this import)
from hulk_operator.lifecycle import INTERVAL_S
from hulk_operator.pauses import RESTARTING
from hulk_operator.quotas import (
    Bound,
    Scope,
)
from hulk_operator.reconcile import edited_since, reconcile
from hulk_operator.snapshot import Snapshot
from hulk_operator.stage_pods import gone

# (the update handler: registered by this import)
from hulk_operator.updates import (
    edit_taken,
    edit_unhandled,
    edit_unseen,
    hulktrainingjob_update,
    replaced_whole,
    spec_refused,
    tell_replaced_env,
    unreadable_record,
    warn_job,
)

# -- job handlers -------------------------------------------------------------------------


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def hulktrainingjob_create(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    reason: str = "",
    hulk_nodes: Any = None,
    hulk_limit_defaults: Any = None,
    hulk_jobs: Any = None,
    hulk_pods: Any = None,
    **_: Any,
) -> None:
    """Validates the spec; an invalid one is the user's to fix, not an operator error: a
    Warning Event says why (``kubectl describe``), the timer's ``Failed`` condition too.
    A planned job with no record of the spec kopf last handled was replaced (``kubectl
    replace`` drops the annotations): kopf takes it for a new one, and it is handled as an
    edit from the spec its pods run (before, the timer made the new spec's pods on the old
    plan; a user trial)."""
    if status.get("plan") is not None and replaced_whole(body):
        spec = dict(body.get("spec") or {})
        hulktrainingjob_update(
            body, name, namespace, status, patch, memo, logger, None, spec, hulk_nodes,
            hulk_limit_defaults, hulk_jobs, hulk_pods,
            **{k: v for k, v in _.items() if k.startswith("hulk_")},
        )  # fmt: skip
        return
    if reason == kopf.Reason.CREATE.value:  # (not again at each operator restart)
        # (before the spec is judged: a refused job's fix edits it, most often, where
        # the variables are told already: a review)
        tell_replaced_env(body, logger, memo, None, body.get("spec"))
    # a running job's refused edit, resumed by a restarted operator: its pods run on, as
    # its Planned condition says already (before, told again, without that: a user trial)
    ended = status.get("phase") in (st.PHASE_FAILED, st.SUCCEEDED)
    running = status.get("plan") is not None and not ended
    new = reason == kopf.Reason.CREATE.value
    if spec_refused(body, logger, object_entry(body), running, new=new):
        return
    logger.debug(f"job {name} accepted")


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def hulktrainingjob_delete(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    memo: kopf.Memo,
    hulk_jobs: Any = None,  # kopf.Index[Key, JobEntry]; kopf passes every index
    hulk_pods: Any = None,  # kopf.Index[Key, PodEntry]
    hulk_nodes: Any = None,  # kopf.Index[str, NodeInfo]
    **_: Any,
) -> None:
    """Forgets the job, deletes its stage pods, and counts the jobs left by phase (the
    timers of the jobs left do too, but there may be none: the last job's count stayed).
    Kubernetes' garbage collector deletes the pods too, and the Service, but it learns of
    a CRD up to 30 s after the CRD is installed: until then the pods of a deleted job kept
    their servers' GPUs from the next job (a test run). ``--cascade=orphan`` keeps them.
    A pod whose node is gone is deleted with grace period 0, deleting already or not: no
    kubelet will confirm it (it stayed Terminating for half a minute; a user trial)."""
    key = (namespace or "", name)
    orphan = "orphan" in (meta.get("finalizers") or [])  # kubectl delete --cascade=orphan
    store = list((hulk_pods or {}).get(key, []))
    nodes = hulk_nodes or {}
    gone = [p.name for p in store if p.node and p.node not in nodes]
    pods = [p.name for p in store if not p.deleting or p.name in gone]
    if pods and not orphan:
        kube.delete_pods(memo.api, namespace or "", pods, force=gone)
    memo.placer.forget(key)
    if (exits := memo.get("exits")) is not None:
        exits.forget(key)
    memo.setdefault("unseen_edits", {}).pop(key, None)  # (a job made again under its name)
    memo.setdefault("env_told", {}).pop(key, None)
    if (said := memo.get("disruption")) is not None:  # (its Warning: once told)
        said.get("cut_links", {}).pop(key, None)
        said.get("cut_links_inferred", {}).pop(key, None)
        said.get("unmet", {}).pop(key, None)  # (a job made again under its name: a review)
    if (built := memo.get("built_pods")) is not None:
        built.pop(key, None)
    memo.metrics.set_predicted(namespace or "", name, None)
    if hulk_jobs is not None:
        left = (one(s) for k, s in hulk_jobs.items() if k != key)
        memo.metrics.set_phases(
            (e.key, e.phase or st.PENDING) for e in left if e and not e.deleting
        )


# kopf passes the indexes by name; its TimerFn protocol does not list them.
@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_S)  # type: ignore[arg-type]
async def hulktrainingjob_reconcile(
    name: str,
    namespace: str | None,
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    hulk_nodes: kopf.Index[str, NodeInfo],
    hulk_jobs: kopf.Index[Key, JobEntry],
    hulk_pods: kopf.Index[Key, PodEntry],
    hulk_other_pods: kopf.Index[str, Resources],
    hulk_quotas: kopf.Index[str, tuple[str, dict[str, float]]],
    hulk_gpu_limits: kopf.Index[str, tuple[str, float]],
    hulk_gpu_minimums: kopf.Index[str, tuple[str, float]],
    hulk_limit_defaults: kopf.Index[str, tuple[str, dict[str, Any], dict[str, Any]]],
    hulk_limit_bounds: kopf.Index[str, tuple[Bound, ...]],
    hulk_quota_specs: kopf.Index[str, tuple[str, str]],
    hulk_limit_specs: kopf.Index[str, tuple[str, str]],
    hulk_scoped_quotas: kopf.Index[str, tuple[str, dict[str, float], tuple[Scope, ...]]],
    hulk_default_priority: kopf.Index[str, tuple[float, str]],
    hulk_service_quotas: kopf.Index[str, tuple[str, str, float]],
    hulk_services: kopf.Index[Key, bool],
    logger: kopf.Logger,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    if (flag := memo.get(RESTARTING)) is not None and flag.is_set():
        return  # resumed after a pause: kopf runs afresh (``pauses``)
    key = (namespace or "", name)
    entry = one(hulk_jobs.get(key))
    if entry is None or entry.deleting:
        return
    if (record := unreadable_record(body)) is not None:
        # kopf cannot read its record of the spec it last handled (edited by hand): with it
        # gone, kopf takes the job for a new one, and the create handler handles it as
        # replaced, against the spec its pods run (before, this timer failed every 60 s, and
        # a lost stage pod was never made again, with nothing said: a trial)
        patch.metadata.annotations[record] = None
        warn_job(body, logger, "RecordUnreadable", f"annotation {record} is not the JSON kopf "
              "wrote (edited by hand?): removed; the job is handled as replaced")  # fmt: skip
        return
    if edit_unhandled(body):
        # the update handler has not taken this edit yet: until it does (refused, or the
        # plan reset), pods made from the new spec on the old plan could replace the running
        # ones with pods it refuses (a user trial: a typo'd edit left a job with no pods)
        return
    if edit_unseen(key, body, status, memo):
        spec = dict(body.get("spec") or {})
        logger.info(
            f"{name}: generation {entry.generation} was never handled as an edit (its "
            "last-handled record was rewritten with it): taken as one now"
        )
        # (in a thread, as kopf runs the handler: it calls the API server)
        await asyncio.to_thread(
            hulktrainingjob_update,
            body, name, namespace, status, patch, memo, logger, None, spec, hulk_nodes,
            hulk_limit_defaults, hulk_jobs, hulk_pods,
            **{k: v for k, v in _.items() if k.startswith("hulk_")},
        )  # fmt: skip
        edit_taken(key, entry.generation, memo)
        return
    nodes = memo.node_view.nodes(hulk_nodes)  # (rebuilt only when a node changed)
    # (not a stage pod this operator deleted with grace 0 that the index still holds: it
    # is gone, and one of its name may be made again)
    pods = {key: [p for p in hulk_pods.get(key, []) if not gone(memo.recent, p)]}
    # (with the pods that exited 0 and were deleted before a tick saw them so: ``exits``)
    seen = memo.exits.status_of(key, status, pods[key])
    disrupted = memo.node_view.disrupted(hulk_nodes, memo.config.disruption_threshold)
    settled_at = recovery.say_disruption(memo.disruption, disrupted, logger, time.time())

    used = Usage(hulk_other_pods, *([await outside_pods(memo)] if memo.get("namespaces") else []))

    async def snapshot() -> Snapshot:
        return await build_snapshot(
            memo,
            hulk_nodes,
            hulk_jobs,
            hulk_pods,
            used,
            hulk_quotas=hulk_quotas,
            hulk_gpu_limits=hulk_gpu_limits,
            hulk_gpu_minimums=hulk_gpu_minimums,
            hulk_limit_defaults=hulk_limit_defaults,
            hulk_limit_bounds=hulk_limit_bounds,
            policy_specs=(hulk_quota_specs, hulk_limit_specs),
            hulk_scoped_quotas=hulk_scoped_quotas,
            hulk_default_priority=hulk_default_priority,
            hulk_service_quotas=hulk_service_quotas,
            hulk_services=hulk_services,
        )

    def event(type_: str, reason: str, message: str) -> None:
        # (also in the operator's log: what happened to a job, without kubectl)
        log = logger.warning if type_ == "Warning" else logger.info
        if stopped:  # the job is being deleted: an Event would outlive it, and say nothing
            log(f"{reason} (not posted: the job is being deleted or the operator stops): {message}")
            return
        kopf.event(body, type=type_, reason=reason, message=message)
        log(f"{reason}: {message}")

    ctx = Context(
        api=memo.api,
        config=memo.config,
        placer=memo.placer,
        metrics=memo.metrics,
        nodes=nodes,
        pods=pods,
        snapshot=snapshot,
        event=event,
        recent=memo.recent,
        used=used,
        disrupted=disrupted,
        settled_at=settled_at,
        disruption=memo.disruption,
        has_service=any(hulk_services.get(key) or ()),
        limit_defaults=tuple(hulk_limit_defaults.get(key[0], ())),
        latencies=lambda: shared_latencies(memo),
        # (an edit meanwhile too: a suspend made while the pods were created waited for
        # all of them, and the plan's Event, before it removed them; a user trial)
        stopped=lambda: bool(stopped) or edited_since(body, entry),
        built_pods=memo.built_pods,
    )
    try:
        new = await reconcile(ctx, entry, body, seen)
    except Exception as exc:
        if classify(exc).permanent:
            raise to_kopf(exc) from exc
        raise kopf.TemporaryError(f"{type(exc).__name__}: {exc}", delay=2.0) from exc
    if edited_since(body, entry):  # an edit came meanwhile: what was worked out is stale,
        return  # and would write over the update handler's conditions (a user trial)
    told_status(seen, status, new)
    if new:
        new = st.conditions_seen(new, status, entry.generation)
    changed = st.diff(status, new)
    if changed:
        patch.status.update(changed)
    memo.metrics.set_phases(
        (e.key, e.phase or st.PENDING) for s in hulk_jobs.values() if (e := one(s))
    )
