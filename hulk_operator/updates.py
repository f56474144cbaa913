"""Edits of a HulkTrainingJob's spec: the update handler (``hulktrainingjob_update``,
registered on import here; ``hulk_operator.handlers`` imports this module) and what it
decides with.

- A changed spec is validated (a bad one gets a Warning Event) and planned again from
  scratch, unless the running job's plan stands for it (``edits``) or the edit is refused
  (a running job keeps its plan and pods; a condition says why).
- What tells an edit the handler has yet to take, or one kopf never saw (a job replaced
  with no record of its handled spec, a record rewritten with the spec, one unreadable),
  for the create handler and the reconcile timer of ``handlers``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import replace as dc_replace
from typing import Any

import kopf

from hulk_operator import GROUP, PLURAL, VERSION, edits, plan_fields
from hulk_operator import status as st
from hulk_operator.edits import Refusal
from hulk_operator.entries import (
    JobEntry,
    Key,
    object_entry,
    planned_pod_spec,
    pod_source,
    spec_hashes,
)
from hulk_operator.errors import (
    EDIT_REFUSED,
    ENV_REPLACED,
    INVALID_SPEC,
    LABELS_REPLACED,
)
from hulk_operator.fit import unknown_regions
from hulk_operator.indexes import latencies_now, one, snapshot_now
from hulk_operator.lifecycle import DIFFBASE
from hulk_operator.manifests import replaced_env, replaced_labels, replaced_names
from hulk_operator.reconcile import refused_edit
from hulk_operator.snapshot import filled_requests
from hulk_operator.suspension import suspending_conditions


def tell_replaced_env(
    body: kopf.Body, logger: kopf.Logger, memo: kopf.Memo, old: Any, new: Any
) -> None:
    """A Warning ``EnvReplaced`` where the template of spec ``new`` sets variables Hulk
    sets on every stage pod, unless the same variables were told for this job already
    (``memo.env_told``: a ``kubectl replace`` reads as a new job to kopf, and told it again;
    a user trial) or, where this operator told none, spec ``old`` set the same (an edit of
    another field); with no ``old`` (an edit kopf never saw), the spec the job's pods were
    made from. By the variables' names alone: a container renamed tells nothing new."""
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    told: dict[Key, frozenset[str]] = memo.setdefault("env_told", {})
    names = replaced_names((new or {}).get("template"))
    if key in told:
        before = told[key]
    else:
        if old is None:
            old = planned_pod_spec((body.get("status") or {}).get("plan"))
        before = replaced_names((old or {}).get("template"))
    told[key] = names
    if names and names != before:
        warn_job(body, logger, ENV_REPLACED, str(replaced_env((new or {}).get("template"))))
    # the labels Hulk sets (LabelsReplaced), told the same way
    labels: dict[Key, str | None] = memo.setdefault("labels_told", {})
    said = replaced_labels((new or {}).get("template"), key[1])
    was = labels[key] if key in labels else replaced_labels((old or {}).get("template"), key[1])
    labels[key] = said
    if said and said != was:
        warn_job(body, logger, LABELS_REPLACED, said)


REPLACED = "(replaced)"  # the changed fields of a spec replaced whole, with no record of them


def _fields(changed: set[str]) -> str:
    """How a message names the spec's changed fields: ``spec.model, spec.template``; a spec
    replaced whole with no record of what it was, so."""
    known = sorted(changed - {REPLACED})
    return f"spec.{', spec.'.join(known)}" if known else "the spec, replaced whole,"


def unreadable_record(body: kopf.Body) -> str | None:
    """The annotation of kopf's record of the handled spec where it is no JSON, or None."""
    try:
        DIFFBASE.fetch(body=body)
        return None
    except ValueError:  # (json.JSONDecodeError)
        annotations = body.get("metadata", {}).get("annotations") or {}
        keys = DIFFBASE.make_keys(DIFFBASE.key, body=body)
        return next((k for k in keys if k in annotations), None)


def replaced_whole(body: kopf.Body) -> bool:
    """Whether kopf has no record of the spec it last handled for this job."""
    return DIFFBASE.fetch(body=body) is None


def warn_job(body: kopf.Body, logger: kopf.Logger, reason: str, message: str) -> None:
    """A Warning Event, also in the operator's log at WARNING (as the timer's are)."""
    kopf.warn(body, reason=reason, message=message)
    logger.warning(f"{reason}: {message}")


def spec_refused(
    body: kopf.Body, logger: kopf.Logger, entry: JobEntry, running: bool = False, new: bool = False
) -> bool:
    """Whether the job's spec is invalid, for the planner or for the operator (a template
    ``nodeName``, node selectors that contradict each other): then posted as a Warning
    Event, also in the log as a warning; for a ``running`` job's edit, saying that its
    pods run on, as its condition does. Not posted again where its condition says the
    same already (an edit of another field that leaves the same error: before, the same
    Warning again; a user trial), but for a ``new`` job, whose condition the timer may
    have written first (before, it then got no Event at all; a user trial)."""
    if entry.job is not None:
        return False
    message = entry.error or "invalid spec"
    if running:
        message = Refusal(message, waits=False).message
    status = body.get("status") or {}
    said = st.condition(status, st.PLANNED if running else st.FAILED) or {}
    if (said.get("reason"), said.get("message")) == (INVALID_SPEC, message) and not new:
        logger.info(f"{INVALID_SPEC} (said already): {message}")
    else:
        warn_job(body, logger, INVALID_SPEC, message)
    return True


def hulktrainingjob_update(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    old: Any,
    new: Any,
    hulk_nodes: Any = None,  # kopf.Index[str, NodeInfo]; kopf passes every index
    hulk_limit_defaults: Any = None,  # kopf.Index[str, (LimitRange, requests, limits)]
    hulk_jobs: Any = None,  # kopf.Index[Key, JobEntry]
    hulk_pods: Any = None,  # kopf.Index[Key, PodEntry]
    **_: Any,
) -> None:
    """A changed spec is planned again from scratch (the old pods go when the new plan's
    pods are created); so is a Failed job (an invalid spec fixed, or a failed stage after
    any valid edit). A running job runs on when the edit leaves what its pods are made
    from as it is (``edits.plan_stands``: defaults filled in, ``priority`` or
    ``backoffLimit``, a refused edit undone, constraints its servers still meet). An
    invalid change leaves the job as it was (``reconcile`` says why in a condition), and so
    does one whose constraints no node of the cluster matches or whose model no set of the
    nodes it may use could hold (a typo'd region or parameter count must not stop a
    training run). A finished job runs again after any edit but defaults filled in.

    Every edit taken stamps its generation as observed, whatever the edit did (nothing, a
    refusal, a new plan): a generation with no stamp is one kopf never handled
    (``edit_unseen``; before, an edit that left the status as it was, a ``priority`` or a
    failed job's ``suspend``, read as never handled and was taken again, which ran a failed
    job again: a review)."""
    patch.status["observedGeneration"] = int(body.get("metadata", {}).get("generation") or 0)
    if old is None and status.get("plan") is None and status.get("failedSpec"):
        # a job its stage pods failed: against the spec it failed with, as if kopf had seen
        # the edit (a search-and-replace flipping suspend ran it again: a trial)
        old = json.loads(status["failedSpec"])
    if old is None and not (status.get("plan") or {}).get("specHashes"):
        # replaced with no record to tell what changed (a job failed for its spec): said
        # so, not every field named (before, "spec.allowedRegions, spec.masterPort, ...
        # changed" for a template fixed by kubectl replace; a user trial)
        changed = {REPLACED}
    elif old is None:  # replaced (``hulktrainingjob_create``): against what the pods run
        changed = _changed_from_running(status.get("plan") or {}, new)
        if not changed and status.get("phase") in (st.PHASE_FAILED, st.SUCCEEDED):
            logger.info(f"{name} is {status.get('phase')}: replaced with its spec, nothing to do")
            return
        changed = changed or {REPLACED}  # the same spec: a refusal is lifted below
    else:
        changed = edits.changed_fields(old, new)
    if "template" in changed or REPLACED in changed:
        tell_replaced_env(body, logger, memo, old, new)
    if not changed:
        logger.debug(f"{name}: only defaults filled in (a CRD upgrade): nothing to do")
        return
    phase = status.get("phase")
    ended = phase in (st.PHASE_FAILED, st.SUCCEEDED)  # an edit runs it again, but:
    if (phase == st.SUCCEEDED and changed <= edits.BOOKKEEPING) or (
        phase == st.PHASE_FAILED and changed <= {"suspend", "regrow"}
    ):  # a job done keeps its pods and record (a failed one runs again for a new limit)
        logger.info(f"{name} is {phase}: {', '.join(sorted(changed))} changed, nothing to do")
        return
    after = dict(new or {})
    suspending = after.get("suspend") is True  # never refused, whatever else the edit does
    entry = object_entry(body)  # (the body's spec is ``new``)
    gen = int(body.get("metadata", {}).get("generation") or 0)
    plan = status.get("plan")
    if not suspending and spec_refused(body, logger, entry, plan is not None and not ended):
        return
    if plan is not None and not ended and not suspending:
        nodes = {n: one(v) for n, v in (hulk_nodes or {}).items()}
        pods = (hulk_pods or {}).get((namespace or "", name), [])
        # a stage pod exited 0: its run has ended, and the edit plans it again (not named
        # ``ended``, which says below whether the job was Failed or Succeeded: a run ended
        # so took it as a finished job's edit, its servers claimed for no round; a review)
        run_ended = bool(st.exited_0(status, pods))
        match = lambda: edits.servers_match(entry, nodes)  # noqa: E731
        stands = edits.plan_stands(old, new, plan, match, run_ended)
        refused, snap = None, None
        if stands is None or stands == edits.TEMPLATE_STANDS:  # new pods: checked first
            # (the API server's dry run, a policy, a LimitRange, as for any template edit; a
            # template edit that keeps its plan needs every server of it to take a new pod.
            # The stage pods' requests as the namespace's LimitRange defaults fill them in:
            # before, the template's alone, and an edit no node could hold was taken; a review)
            defaults = list((hulk_limit_defaults or {}).get(namespace or "", ()))
            filled = dc_replace(entry, requests=filled_requests(entry, defaults))
            cut = latencies_now(memo).unreachable
            refused = edits.refusal(memo.api, name, namespace, after, filled, nodes, cut)
            if refused is None:  # (who holds which server now)
                indexes = {
                    **_,
                    "hulk_nodes": hulk_nodes,
                    "hulk_jobs": hulk_jobs,
                    "hulk_pods": hulk_pods,
                    "hulk_limit_defaults": hulk_limit_defaults,
                }
                snap = snapshot_now(memo, indexes)
                if (refused := edits.quota_refusal(filled, snap)) is not None:
                    stands = None  # (its pods stay: the new ones would be refused)
            if stands is not None and (snap is None or not edits.pods_fit_again(filled, snap)):
                stands = None
        if stands is not None:
            typo = unknown_regions(entry, nodes) if "allowedRegions" in changed else None
            if typo is not None:  # (before, said in the log alone: the typo surfaced when a
                # server was lost and the re-plan left its region out; a user trial)
                warn_job(body, logger, "SpecChanged", f"{stands}; {typo}")
            if _plan_stands(patch, status, stands, after, gen):
                # (before: the refusal's Warning was the last Event; a user trial)
                lifted = f"{stands}; the refusal of the earlier edit is lifted"
                kopf.info(body, reason="SpecChanged", message=lifted)
                logger.info(f"SpecChanged: {lifted}")
            elif stands == edits.TEMPLATE_STANDS:  # (its pods replaced: said, as a re-plan is)
                kopf.info(body, reason="SpecChanged", message=stands)
                logger.info(f"SpecChanged: {stands}")
            else:
                logger.info(f"{name}: {stands}")
            return
        if snap is not None and refused is None:  # planned on the servers free for it:
            # its pods go only where a plan fits
            snap.held = memo.placer.held(snap.held)  # (reservations too)
            refused = edits.unplannable(memo.placer, filled, snap)
        if refused is not None:  # keep the running plan and its pods; say why
            conds = list(status.get("conditions") or [])
            patch.status["conditions"] = refused_edit(conds, refused, gen)
            warn_job(body, logger, refused.reason, refused.message)
            return
    if plan is not None and not ended and not suspending:  # (a running job planned again:
        # a waiting edit for the rounds until the index shows it pending)
        memo.placer.edit_allowed((namespace or "", name), gen)
    else:
        memo.placer.forget((namespace or "", name))
    failed = phase == st.PHASE_FAILED
    if plan is not None or failed:
        # no plan, none of the old one's summary (before, Ready=True "8/8 stage pods
        # running" and the old stages stood while the job was planned again; a trial)
        # (suspending: Suspended at once, as its timer makes it; before, Pending beside
        # Ready "AllStagesRunning" a moment, a waiting blip in hulk_job_waiting: a trial)
        patch.status.update(plan_fields.unplanned(st.SUSPENDED if suspending else st.PENDING))
        patch.status["stageRestarts"] = 0  # a new run: spec.backoffLimit counts afresh
        if status.get("failedSpec") is not None:
            patch.status["failedSpec"] = None
        fields = _fields(changed)
        msg = None
        if plan is not None and not suspending:  # (a Suspended Event tells the other)
            said = (st.condition(status, st.PLANNED) or {}).get("reason")
            lifted = ""
            if said in (INVALID_SPEC, EDIT_REFUSED):
                # what changed from the spec the pods run, not from the refused one (before:
                # the field of the last edit alone, after two refused ones; a user trial)
                moved = _changed_from_running(plan, after) or changed
                fields = _fields(moved)
                lifted = "; the refusal of the earlier edit is lifted"
            msg = (
                f"{fields} changed: planning it again; the new plan's stage pods replace "
                f"those it changes{lifted}"
            )
        elif failed and not suspending:  # (before: the InvalidSpec Warning stood alone)
            why = (st.condition(status, st.FAILED) or {}).get("reason") or "Failed"
            msg = f"{fields} changed: the job had failed ({why}); planning it again"
        if msg is not None:
            kopf.info(body, reason="SpecChanged", message=msg)
            logger.info(f"SpecChanged: {msg}")  # (as every Event is logged: by its reason)
        else:
            again = "suspending it" if suspending else "planning it again"
            logger.info(f"{fields} of {name} changed: {again}")
    conds = list(status.get("conditions") or [])
    if failed:
        conds = st.set_condition(
            conds, st.FAILED, False, "SpecChanged", "the spec changed: planning the job again", gen
        )
    if (st.condition(status, st.COMPLETE) or {}).get("status") == "True":  # a run again
        conds = st.set_condition(
            conds, st.COMPLETE, False, "SpecChanged", "the spec changed: the job runs again", gen
        )
    if plan is not None and st.condition(status, st.REPLANNING) is not None:
        # (it told of the old plan's last re-plan, which the new plan replaces)
        fields = _fields(changed)
        conds = st.set_condition(
            conds, st.REPLANNING, False, "SpecChanged",
            f"{fields} changed: " + ("the job is suspended" if suspending
            else "the job is planned again from scratch"), gen,
        )  # fmt: skip
    if plan is not None and suspending:  # as ``suspension.suspend`` writes them
        conds = suspending_conditions(conds, gen)
    if plan is not None and not suspending:  # (a suspended job's are the Suspended ones)
        fields = _fields(changed)
        conds = [c for c in conds if c.get("type") != st.ESTIMATED]  # it spoke of the plan
        conds = st.set_condition(
            conds, st.PLANNED, False, "SpecChanged", f"{fields} changed: planning it again", gen
        )
        conds = st.set_condition(
            conds, st.READY, False, "NotPlanned",
            f"{fields} changed: the new plan's stage pods replace those it changes", gen,
        )  # fmt: skip
    if conds != list(status.get("conditions") or []):
        patch.status["conditions"] = conds


# (registered here, not by a decorator, so that the create handler can call it as typed)
kopf.on.update(GROUP, VERSION, PLURAL, field="spec")(hulktrainingjob_update)


def edit_unhandled(body: kopf.Body) -> bool:
    """Whether the job's spec differs from the one kopf's handlers last took (its
    last-handled annotation): an edit the update handler has yet to take. A job with no
    record is being created (none), or was replaced with its plan kept (one)."""
    handled = DIFFBASE.fetch(body=body)
    if handled is None:  # being created, or a planned job replaced (until handled as edited)
        return (body.get("status") or {}).get("plan") is not None
    # (kopf's record keeps the spec as it was; DIFFBASE.build(body) would deep-copy the
    # whole job at each tick to compare the same)
    return handled.get("spec") != body.get("spec")


EDIT_UNSEEN_S = 5.0  # how long a generation may go unhandled before it is taken as an edit


def edit_unseen(key: Key, body: kopf.Body, status: kopf.Status, memo: kopf.Memo) -> bool:
    """Whether the job's generation was edited in a way kopf saw no change in: its
    last-handled record rewritten with the spec (a search-and-replace over ``kubectl get
    -o yaml | sed | kubectl replace``, or ``:%s`` in ``kubectl edit``), so the update
    handler never ran. Then nothing has stamped the generation after ``EDIT_UNSEEN_S``:
    neither ``status.observedGeneration`` nor a condition. True once per generation
    (before, a fixed preset was ignored and the job stayed Failed: a user trial)."""
    gen = int((body.get("metadata") or {}).get("generation") or 0)
    stamped = [status.get("observedGeneration")] + [
        c.get("observedGeneration") for c in status.get("conditions") or []
    ]
    seen: dict[Key, tuple[int, float]] = memo.setdefault("unseen_edits", {})
    if gen in stamped or not status:
        seen.pop(key, None)
        return False
    first = seen.get(key)
    if first is None or first[0] != gen:
        seen[key] = (gen, time.monotonic())
        return False
    return not math.isinf(first[1]) and time.monotonic() - first[1] >= EDIT_UNSEEN_S


def edit_taken(key: Key, gen: int, memo: kopf.Memo) -> None:
    """Marks a generation ``edit_unseen`` told of as taken: it is told once (marked once
    taken, so that one whose taking failed is told again)."""
    memo.setdefault("unseen_edits", {})[key] = (gen, math.inf)


def _changed_from_running(plan: Mapping[str, Any], spec: Mapping[str, Any]) -> set[str]:
    """The spec's fields that differ from those the job's pods were made from (its plan's
    fingerprint); its plan-deciding fields, ``model`` for the job's sizes."""
    running = plan.get("specHashes") or {}
    now = spec_hashes(spec)
    return {"model" if k == "job" else k for k in now if running.get(k) != now[k]}


def _plan_stands(
    patch: kopf.Patch, status: kopf.Status, why: str, spec: Mapping[str, Any], gen: int
) -> bool:
    """The plan goes on for the edited spec: its fingerprint follows the spec, and a
    refusal of an earlier edit is lifted (``Planned`` summarises the plan again, as later
    edits that leave it standing do not touch the condition). True where one was lifted."""
    fingerprint, source = spec_hashes(spec), pod_source(spec)
    made = status.get("plan") or {}
    if (made.get("specHashes"), made.get("podTemplate")) != (fingerprint, source):
        # (a merge patch: the stages stay)
        patch.status["plan"] = {"specHashes": fingerprint, "podTemplate": source}
    planned = st.condition(status, st.PLANNED) or {}
    if planned.get("reason") in (INVALID_SPEC, EDIT_REFUSED):
        conds = list(status.get("conditions") or [])
        line = st.plan_line_from_status(status)
        if (st.condition(status, st.READY) or {}).get("reason") == edits.STAGES_MISSING:
            why += "; its missing stage pods are made again"  # (none was, while refused)
        message = f"{line} ({why})" if line else why
        patch.status["conditions"] = st.set_condition(
            conds, st.PLANNED, True, "Planned", message, gen
        )
        return True
    if planned.get("status") == "True" and planned.get("observedGeneration") != gen:
        # the plan stands for this generation too: said (before, Planned kept the last
        # one's, and a tool reading conditions by observedGeneration took it as stale; a
        # user trial edited spec.priority)
        conds = list(status.get("conditions") or [])
        reason, message = str(planned.get("reason")), str(planned.get("message") or "")
        line = st.plan_line_from_status(status)
        if line and message.startswith(f"{line} (") and message.endswith(")"):
            # the plan alone: the why was of the edit that lifted a refusal, not this one
            # (a user trial read "the spec is back to the one its pods run" of an edit that
            # added allowedRegions and a priority)
            message = line
        patch.status["conditions"] = st.set_condition(conds, st.PLANNED, True, reason, message, gen)
    return False
