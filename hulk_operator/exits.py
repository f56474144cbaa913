"""Stage pods that exited 0 and were deleted before a job's tick saw them exited 0.

A job's run has ended once one of its stage pods exits 0 (``status.exited_0``); the ticks
record such pods in ``status.succeededPods``, so that one deleted since still counts. But a
tick comes once a second, and a pod that exits 0 and is deleted at once (by hand, a cleanup
script, its node going) left between two ticks unseen: its stage was taken as gone
unfinished and made again alone, to wait at the rendezvous for peers that had exited (the
known limit of docs/operator.md before). The pod watch sees the deletion with the pod's last
state, phase ``Succeeded``: ``stage_pod_event`` records it here, and the next tick reads it
as ``status.succeededPods`` does (``Exits.status_of``), and writes it there.

Only pods of the job's current run count: those a tick has seen (by uid) since its plan was
made. A pod of an earlier run that bears the same name (names follow the plan), deleted as
the new run starts, is not one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from hulk_operator import LABEL_JOB, manifests
from hulk_operator import status as st
from hulk_operator.context import PodEntry
from hulk_operator.entries import Key


@dataclass
class Exits:
    """The operator's record (one, in its memo, shared by the jobs' ticks)."""

    # job -> uids: the stage pods the job's ticks have seen in its current run
    run: dict[Key, set[str]] = field(default_factory=dict)
    # job -> names: pods of its current run deleted (or being deleted) after exiting 0
    gone: dict[Key, set[str]] = field(default_factory=dict)

    def deleted(self, key: Key, uid: str, name: str) -> bool:
        """A stage pod of ``key`` deleted with phase Succeeded: recorded (True) where it is
        of the job's current run."""
        if not uid or uid not in self.run.get(key, ()):
            return False
        self.gone.setdefault(key, set()).add(name)
        return True

    def status_of(
        self, key: Key, status: Mapping[str, Any], pods: Iterable[PodEntry]
    ) -> Mapping[str, Any]:
        """``status`` as a tick of ``key`` reads it, its ``succeededPods`` with the pods
        recorded gone (``status`` itself where there are none it lacks); ``pods``: the
        job's stage pods now, remembered as of its run. A job without a plan starts a new
        run: what was recorded of the last is forgotten."""
        if status.get("plan") is None:
            self.forget(key)
            return status
        self.run.setdefault(key, set()).update(p.uid for p in pods if p.uid and not p.deleting)
        gone = self.gone.get(key)
        recorded = status.get(st.SUCCEEDED_PODS) or []
        if not gone or gone.issubset(recorded):
            return status
        return {**status, st.SUCCEEDED_PODS: sorted(gone.union(recorded))}

    def forget(self, key: Key) -> None:
        self.run.pop(key, None)
        self.gone.pop(key, None)


def told_status(seen: Mapping[str, Any], status: Mapping[str, Any], new: dict[str, Any]) -> None:
    """After a tick that read ``seen`` (``Exits.status_of``) for ``status``: the pods it
    added to ``succeededPods`` written with the tick's ``new`` fields, unless these set the
    field themselves (a new run's plan starts it afresh)."""
    if seen is not status and st.SUCCEEDED_PODS not in new:
        new[st.SUCCEEDED_PODS] = seen[st.SUCCEEDED_PODS]


@kopf.on.event("pods", labels={LABEL_JOB: kopf.PRESENT})
def stage_pod_event(
    type: str | None,  # (kopf passes the watch event's type by this name)
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A stage pod deleted, or being deleted, with phase Succeeded: recorded in the
    operator's ``Exits`` (the pod index drops a deleted pod, and its phase with it)."""
    if status.get("phase") != "Succeeded":
        return
    if type != "DELETED" and not meta.get("deletionTimestamp"):
        return
    exits = memo.get("exits")
    job = manifests.stage_job(meta)
    if exits is not None and job is not None:
        exits.deleted((namespace or "", job), str(meta.get("uid") or ""), name)
