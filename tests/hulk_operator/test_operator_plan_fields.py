"""The status fields of a job's plan, and its ``Ready`` while it has none."""

from __future__ import annotations

from typing import Any

from hulk_operator import status as st
from hulk_operator.plan_fields import NO_PLAN, not_ready


def test_ready_says_no_plan_once_an_edits_plan_did_not_fit() -> None:
    """Before: the edit's "the new plan's stage pods replace those it changes" stood on
    after no plan fitted and the job's pods were removed (a user trial)."""
    edited = st.set_condition(
        [], st.READY, False, "NotPlanned",
        "spec.allowedRegions changed: the new plan's stage pods replace those it changes", 5,
    )  # fmt: skip
    estimated = st.set_condition(edited, st.ESTIMATED, True, "Estimated", "of the old plan", 4)
    conds = not_ready(estimated, 5)
    ready = st.condition({"conditions": conds}, st.READY)
    assert ready is not None
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "NotPlanned", NO_PLAN)
    was = st.condition({"conditions": edited}, st.READY) or {}
    assert ready["lastTransitionTime"] == was["lastTransitionTime"]  # (still False)
    assert st.condition({"conditions": conds}, st.ESTIMATED) is None
    assert not_ready(conds, 6) == conds  # (said already: left as it is)


def test_a_job_that_fails_during_a_replan_is_no_longer_replanning() -> None:
    """A kept stage failed past spec.backoffLimit while a re-plan's new pods started: the
    job ended Failed with no plan and ``Replanning=True`` for good (a review). Failing
    ends it (``JobFailed``, the failure's words); one that was not re-planning is left as is."""
    from types import SimpleNamespace

    from placement_helpers import entry

    from hulk_operator.failures import fail
    from hulk_planner.datasets import paper_jobs

    told: list[tuple[str, str]] = []
    ctx: Any = SimpleNamespace(
        event=lambda kind, reason, msg: told.append((kind, reason)),
        placer=SimpleNamespace(forget=lambda key: None),
        metrics=SimpleNamespace(set_predicted=lambda *a: None),
    )
    replanning = st.set_condition([], st.REPLANNING, True, "Deleted", "n1 deleted", 3)
    new = fail(ctx, entry(paper_jobs()[3]), {}, replanning, "BackoffLimitExceeded", "gone", 3)
    got = st.condition(new, st.REPLANNING) or {}
    assert (got["status"], got["reason"], got["message"]) == ("False", "JobFailed", "gone")
    assert (st.condition(new, st.FAILED) or {})["reason"] == "BackoffLimitExceeded"
    assert told == [("Warning", "BackoffLimitExceeded")]
    settled = st.set_condition([], st.REPLANNING, False, "Recovered", "done", 2)
    new = fail(ctx, entry(paper_jobs()[3]), {}, settled, "StageFailed", "gone", 3)
    assert (st.condition(new, st.REPLANNING) or {})["reason"] == "Recovered"
