"""The status fields and conditions of a job's plan: those of a job just planned (first
or again), and those of a job left without one. Pure functions of the planner's
``Decision`` and the job's spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hulk_operator import status as st
from hulk_operator.config import OperatorConfig
from hulk_operator.decision import Decision
from hulk_operator.entries import JobEntry, pod_source, spec_hashes
from hulk_operator.latencies import INFERRED_WORDS, used_words
from hulk_planner.cost import batch_note
from hulk_planner.io import seconds
from hulk_planner.model import Job


def unplanned(phase: str) -> dict[str, Any]:
    """Status fields of a job left without a plan (its servers released)."""
    return {
        "phase": phase,
        "plan": None,
        "numStages": 0,
        "numNodes": 0,
        "regions": "",
        "predictedIterationSeconds": None,
        "baselines": None,
        st.SUCCEEDED_PODS: None,  # (of the run the plan was: the next one starts afresh)
    }


def counts(status: Mapping[str, Any]) -> dict[str, int]:
    """The job's re-plans and stage restarts so far, 0 where none was counted yet (kubectl's
    REPLANS and RESTARTS columns were blank for a job never placed)."""
    return {
        "replans": int(status.get("replans") or 0),
        "stageRestarts": int(status.get("stageRestarts") or 0),
    }


def not_ready(conds: list[dict[str, Any]], gen: int) -> list[dict[str, Any]]:
    """``Ready`` of a job with no plan (its pods gone, or never made): False, not a stale
    'all running' nor missing (kubectl's READY column was blank for a job never placed: a
    user trial); and no ``LatencyEstimated``, which told of the plan gone."""
    conds = [c for c in conds if c.get("type") != st.ESTIMATED]  # it spoke of a plan
    ready = st.condition({"conditions": conds}, st.READY)
    if ready is not None and (ready.get("reason"), ready.get("message")) == ("NotPlanned", NO_PLAN):
        return conds
    # (an edit's "the new plan's stage pods replace those it changes" stood on once no plan
    # fitted and its pods were removed: a user trial)
    return st.set_condition(conds, st.READY, False, "NotPlanned", NO_PLAN, gen)


NO_PLAN = "no plan: no stage pods"


def replanning_ended(
    conds: list[dict[str, Any]], why: str, gen: int, reason: str = "NoPlan"
) -> list[dict[str, Any]]:
    """``Replanning`` of a job whose plan is dropped: False (``reason``, ``why``) where it
    was True, as no re-plan goes on (before, a job that failed during a re-plan kept
    ``Replanning=True`` for good: a review)."""
    if (st.condition({"conditions": conds}, st.REPLANNING) or {}).get("status") != "True":
        return conds
    return st.set_condition(conds, st.REPLANNING, False, reason, why, gen)


def plan_gpus(decision: Decision) -> dict[str, int]:
    assert decision.cluster is not None and decision.job_plan is not None
    return {n: decision.cluster.server(n).gpus for n in decision.job_plan.nodes}


def placed_fields(decision: Decision, spec: Mapping[str, Any]) -> dict[str, Any]:
    assert decision.cluster is not None and decision.job_plan is not None
    jp = decision.job_plan
    out = {
        # the spec it was made for: an edit back to it leaves the pods alone
        "plan": {
            **st.plan_status(jp, decision.cluster, decision.planner),
            "specHashes": spec_hashes(spec),
            "podTemplate": pod_source(spec),
        },
        "predictedIterationSeconds": seconds(jp.predicted_iteration_seconds),
        **st.summary(jp, decision.cluster),
    }
    if decision.baselines:
        # no key where a baseline cannot place the job: the API server drops nulls inside a
        # merge-patched list anyway (and kopf then warns that the patch did not hold)
        # (and why it cannot: `hulk plan --kubeconfig --jobs` shows it for a running job)
        why = decision.baselines_why
        out["baselines"] = [
            {"planner": k, "predictedIterationSeconds": v}
            if v is not None
            else {"planner": k, **({"reason": why[k]} if k in why else {})}
            for k, v in sorted(decision.baselines.items())
        ]
    return out


def planned_conditions(
    conds: list[dict[str, Any]], d: Decision, entry: JobEntry, cfg: OperatorConfig, gen: int
) -> list[dict[str, Any]]:
    """The conditions of a job just planned (first or again): ``Planned`` with the plan's
    summary, and whether its latencies are estimates."""
    conds = st.set_condition(conds, st.PLANNED, True, "Planned", planned_message(d, entry.job), gen)
    return estimated(conds, d, cfg, gen)


def planned_message(d: Decision, job: Job | None) -> str:
    assert d.job_plan is not None and d.cluster is not None
    jp = d.job_plan
    regions = len({d.cluster.server(n).region for n in jp.nodes})
    line = st.plan_line(len(jp.stages), len(jp.nodes), regions, d.planner,
                        jp.predicted_iteration_seconds)  # fmt: skip
    notes = [n for n in (d.note, batch_note(job, jp) if job else None) if n]
    return "; ".join([line, *notes])


def estimated(
    conds: list[dict[str, Any]], d: Decision, cfg: OperatorConfig, gen: int
) -> list[dict[str, Any]]:
    stale = (
        f", {d.unreachable_stale} of them in reports older than {cfg.latency_max_age_s:g} s "
        "(kept apart until a probe measures them)"
        if d.unreachable_stale
        else ""
    )
    inferred = (
        f", {d.unreachable_inferred} of them {INFERRED_WORDS}" if d.unreachable_inferred else ""
    )
    cut = (
        f"; {d.unreachable} pair(s) reported unreachable had no latency (no link, no "
        f"estimate{stale}{inferred})"
        if d.unreachable
        else ""
    )
    if d.estimated:
        msg = (
            f"when planned, {d.estimated} server pair(s) had no fresh latency measurement; used "
            f"{used_words(d.estimates, cfg.same_region_latency_ms, cfg.cross_region_latency_ms)}"
            f"{cut}"
        )
        return st.set_condition(conds, st.ESTIMATED, True, "FallbackLatency", msg, gen)
    if d.job_plan is not None and len(d.job_plan.nodes) < 2:
        msg = "one server: no latency between servers in this plan"
        return st.set_condition(conds, st.ESTIMATED, False, "OneServer", msg, gen)
    msg = (
        f"when planned, every {'reachable ' if cut else ''}server pair's latency was measured{cut}"
    )
    return st.set_condition(conds, st.ESTIMATED, False, "Measured", msg, gen)
