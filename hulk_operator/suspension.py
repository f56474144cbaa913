"""``spec.suspend``: a suspended job's stage pods removed, its servers released and
nothing planned for it until it is false again (``suspend``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hulk_operator import status as st
from hulk_operator.context import Context
from hulk_operator.entries import JobEntry
from hulk_operator.plan_fields import unplanned
from hulk_operator.stage_pods import remove_all

#: What ``Suspended`` says from the update handler that suspends a planned job until this
#: module's timer has removed its stage pods (then it says how many, with its Event)
REMOVING = "its stage pods are being removed"


async def suspend(
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
    new.update(unplanned(st.SUSPENDED))
    conds = suspended_conditions(conds, gen)
    said = st.condition(status, st.SUSPENDED_COND) or {}
    if said.get("status") != "True" or str(said.get("message", "")).endswith(REMOVING):
        gone = f"; its {removed} stage pod(s) removed, their servers released" if removed else ""
        msg = f"spec.suspend is true: not planned until it is false{gone}"
        ctx.event("Normal", "Suspended", msg)
        conds = st.set_condition(conds, st.SUSPENDED_COND, True, "JobSuspended", msg, gen)
    new["conditions"] = conds
    return new


def suspended_conditions(
    conds: list[dict[str, Any]], gen: int, pods: str = "no stage pods"
) -> list[dict[str, Any]]:
    """``Planned`` and ``Ready`` False, reason ``Suspended`` (``Ready`` saying ``pods``), as
    a suspended job has them, here and in the update handler that suspends it;
    ``LatencyEstimated``, which spoke of its plan, dropped."""
    conds = [c for c in conds if c.get("type") != st.ESTIMATED]
    conds = st.set_condition(conds, st.READY, False, "Suspended", f"suspended: {pods}", gen)
    return st.set_condition(conds, st.PLANNED, False, "Suspended", "spec.suspend is true", gen)


def suspending_conditions(conds: list[dict[str, Any]], gen: int) -> list[dict[str, Any]]:
    """The update handler's word on a planned job it suspends: ``suspended_conditions`` and
    ``Suspended`` True with phase ``Suspended`` at once (before, ``Suspended`` read False
    beside that phase until the timer removed the pods, about 0.7 s: a trial), saying the
    pods are being removed; ``suspend`` then says how many were, with its Event."""
    conds = suspended_conditions(conds, gen, REMOVING)
    msg = f"spec.suspend is true: not planned until it is false; {REMOVING}"
    return st.set_condition(conds, st.SUSPENDED_COND, True, "JobSuspended", msg, gen)
