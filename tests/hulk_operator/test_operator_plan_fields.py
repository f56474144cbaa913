"""The status fields of a job's plan, and its ``Ready`` while it has none."""

from __future__ import annotations

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
