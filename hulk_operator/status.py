"""The job's status: the plan as shown to users (and read back), and metav1-style
conditions (type, status, reason, message, lastTransitionTime, observedGeneration).

Condition types: ``Planned``, ``Ready``, ``Replanning``, ``Failed``, ``LatencyEstimated``
(the plan used fallback latencies for some server pairs) and ``Suspended``
(``spec.suspend``)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hulk_planner.model import Cluster, JobPlan, Stage

if TYPE_CHECKING:
    from hulk_operator.context import PodEntry

PLANNED, READY, REPLANNING, FAILED, ESTIMATED, SUSPENDED_COND = (
    "Planned",
    "Ready",
    "Replanning",
    "Failed",
    "LatencyEstimated",
    "Suspended",
)
# True once every stage finished, as batch/v1 Job's: `kubectl wait --for=condition=Complete`
COMPLETE = "Complete"
CONDITION_TYPES = (PLANNED, READY, REPLANNING, FAILED, COMPLETE, ESTIMATED, SUSPENDED_COND)

PENDING, PLACING, RUNNING, SUCCEEDED = "Pending", "Placing", "Running", "Succeeded"
PHASE_FAILED, SUSPENDED = "Failed", "Suspended"
# the stage pods of the job's run seen exited 0, by name (``exited_0``)
SUCCEEDED_PODS = "succeededPods"
PHASES = (PENDING, PLACING, RUNNING, SUCCEEDED, PHASE_FAILED, SUSPENDED)


def exited_0(status: Mapping[str, Any], pods: Iterable[PodEntry]) -> list[str]:
    """The stage pods of the job's run seen exited 0 (phase Succeeded), by name: those the
    pod index holds, and those ``status.succeededPods`` recorded, which may be gone since
    (deleted by hand, or with their node). Once there is one, the run has ended: the ranks
    leave together, after the last step's collectives, so no stage is made again, moved or
    restarted (it would wait at the rendezvous for peers that have exited, for good), and
    rank 0 decides the job's end (``pod_step``). A pod gone before the operator saw it
    exit 0 is not among them: nothing tells it did (docs/operator.md, Known limits)."""
    seen = {p.name for p in pods if not p.deleting and p.phase == "Succeeded"}
    return sorted(seen.union(status.get(SUCCEEDED_PODS) or ()))


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions_seen(new: dict[str, Any], status: Mapping[str, Any], gen: int) -> dict[str, Any]:
    """``new`` with the conditions a reconciliation at ``gen`` holds to brought up to
    ``gen``: every one but ``Planned`` (its generation says which spec a plan or a refusal
    was made for) and a ``Failed=True`` (it tells of the run that failed). After an edit
    that changed none of them (``spec.priority``: its plan stands, or it waits as it did),
    they kept the generation before it, and a tool comparing a condition's
    ``observedGeneration`` with the job's read them as stale (``Failed=False`` first, then
    ``Ready``, ``LatencyEstimated``, ``Suspended``: user trials)."""
    conds = new.get("conditions", status.get("conditions")) or []

    def lags(c: Mapping[str, Any]) -> bool:
        if c.get("observedGeneration") == gen or c.get("type") == PLANNED:
            return False
        return c.get("type") != FAILED or c.get("status") == "False"

    if not any(lags(c) for c in conds):
        return new
    return new | {"conditions": [{**c, "observedGeneration": gen} if lags(c) else c
                                 for c in conds]}  # fmt: skip


# metav1.Condition's limits, which the CRD's schema holds conditions to
REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MAX_MESSAGE = 32768
MAX_REASON = 1024


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int | None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """The list with condition ``type_`` set; ``lastTransitionTime`` moves only when the
    status flips. Conditions keep the order of :data:`CONDITION_TYPES`."""
    text = "True" if status else "False"
    if not (REASON.fullmatch(reason) and len(reason) <= MAX_REASON):  # (the CRD's schema,
        # metav1.Condition's, refuses it: the whole status write would fail)
        reason = re.sub("^[^A-Za-z]+", "", re.sub("[^A-Za-z0-9_,:]", "", reason))
        reason = reason[:MAX_REASON].rstrip(",:") or "Unknown"
    if len(message) > MAX_MESSAGE:  # (likewise: the whole status write would be refused)
        message = message[: MAX_MESSAGE - 3] + "..."
    by_type = {str(c.get("type")): dict(c) for c in conditions or []}
    old = by_type.get(type_)
    changed = old is None or old.get("status") != text
    by_type[type_] = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": (now or now_rfc3339())
        if changed or old is None
        else old["lastTransitionTime"],
        **({"observedGeneration": generation} if generation is not None else {}),
    }
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], 99), c["type"]))


def condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def plan_status(job_plan: JobPlan, cluster: Cluster, planner: str) -> dict[str, Any]:
    """``status.plan``: stages in pipeline order with servers, regions and layer ranges.
    The same block is what a dry run shows, and what the operator reads back."""
    stages = []
    for i, st in enumerate(job_plan.stages):
        servers = [cluster.server(n) for n in st.nodes]
        stages.append(
            {
                "index": i,
                "layers": {"start": st.layers[0], "end": st.layers[1]},
                "parallelism": st.parallelism,
                "nodes": [{"name": s.name, "region": s.region, "gpus": s.gpus} for s in servers],
            }
        )
    return {"planner": planner, "microBatches": job_plan.micro_batches, "stages": stages}


def job_plan_from_status(name: str, status: Mapping[str, Any] | None) -> JobPlan | None:
    """The plan recorded in ``status.plan``, or None if there is none (or it is unreadable)."""
    plan = (status or {}).get("plan") or {}
    try:
        stages = tuple(
            Stage(
                (int(s["layers"]["start"]), int(s["layers"]["end"])),
                tuple(str(n["name"]) for n in s["nodes"]),
                s.get("parallelism", "data"),
            )
            for s in plan["stages"]
        )
        return JobPlan(
            name,
            stages,
            int(plan["microBatches"]),
            float((status or {}).get("predictedIterationSeconds") or math.nan),
        )
    except (KeyError, TypeError, ValueError):
        return None


def seconds_text(x: float) -> str:
    """A step time to three significant digits, its zeros kept: ``1.00`` (``:.3g`` wrote
    a 1.0028 s step as "1 s" beside "0.446 s": a trial), ``0.446``, ``136``, ``1.23e+03``."""
    text = f"{x:#.3g}"
    return text[:-1] if text.endswith(".") else text


def plan_line(stages: int, servers: int, regions: int, planner: str, step_s: float) -> str:
    """The ``Planned`` condition's summary of a plan."""
    step = f"; predicted {seconds_text(step_s)} s per iteration" if not math.isnan(step_s) else ""
    return (
        f"{stages} stage(s) on {servers} server(s) in {regions} region(s) by planner "
        f"{planner}{step}"
    )


def plan_line_from_status(status: Mapping[str, Any] | None) -> str | None:
    """:func:`plan_line` for the plan recorded in ``status.plan`` (None if unreadable)."""
    jp = job_plan_from_status("", status)
    if jp is None:
        return None
    plan = (status or {}).get("plan") or {}
    regions = {str(n.get("region")) for s in plan["stages"] for n in s["nodes"]}
    planner = str(plan.get("planner") or "?")
    return plan_line(len(jp.stages), len(jp.nodes), len(regions), planner,
                     jp.predicted_iteration_seconds)  # fmt: skip


def plan_gpus(status: Mapping[str, Any] | None) -> dict[str, int]:
    """Server -> GPUs as recorded in ``status.plan`` (so pods do not depend on the node
    still being there)."""
    out: dict[str, int] = {}
    for s in ((status or {}).get("plan") or {}).get("stages") or []:
        for n in s.get("nodes") or []:
            out[str(n["name"])] = int(n.get("gpus") or 1)
    return out


def summary(job_plan: JobPlan, cluster: Cluster) -> dict[str, Any]:
    """Printer-column helpers: ``numStages``, ``numNodes``, ``regions``."""
    regions = list(dict.fromkeys(cluster.server(n).region for n in job_plan.nodes))
    return {
        "numStages": len(job_plan.stages),
        "numNodes": len(job_plan.nodes),
        "regions": ",".join(regions),
    }


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level status keys of ``new`` that differ from ``old`` (a merge patch)."""
    old = old or {}
    return {k: v for k, v in new.items() if old.get(k) != v}
