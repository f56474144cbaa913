"""The record of stage pods deleted once they exited 0 (``hulk_operator.exits``), without a
cluster: the record and the pod watch's handler on hand-made bodies."""

from __future__ import annotations

from typing import Any

from hulk_operator import LABEL_JOB
from hulk_operator import status as st
from hulk_operator.context import PodEntry
from hulk_operator.exits import Exits, stage_pod_event, told_status
from hulk_operator.manifests import owner_reference

KEY = ("ns", "bert")
PLAN = {"stages": [{"nodes": [{"name": "a"}]}, {"nodes": [{"name": "b"}]}]}


def pod(name: str, uid: str, phase: str = "Running", deleting: bool = False) -> PodEntry:
    return PodEntry(name, "a", phase, gated=False, deleting=deleting, uid=uid)


def test_a_pod_of_the_run_deleted_after_exiting_0_counts_as_exited_0() -> None:
    exits = Exits()
    status: dict[str, Any] = {"plan": PLAN}
    pods = [pod("bert-0", "u0"), pod("bert-1", "u1")]
    assert exits.status_of(KEY, status, pods) is status  # a tick sees both running
    assert exits.deleted(KEY, "u0", "bert-0")  # bert-0 exits 0 and is deleted at once
    seen = exits.status_of(KEY, status, pods[1:])  # the next tick: bert-0 is gone
    assert seen[st.SUCCEEDED_PODS] == ["bert-0"] and seen["plan"] == PLAN
    assert st.exited_0(seen, pods[1:]) == ["bert-0"]
    new: dict[str, Any] = {"phase": "Running"}
    told_status(seen, status, new)  # written with the tick's other fields
    assert new == {"phase": "Running", st.SUCCEEDED_PODS: ["bert-0"]}


def test_what_the_status_records_already_is_not_written_again() -> None:
    exits = Exits()
    exits.status_of(KEY, {"plan": PLAN}, [pod("bert-0", "u0"), pod("bert-1", "u1", "Succeeded")])
    exits.deleted(KEY, "u1", "bert-1")
    status = {"plan": PLAN, st.SUCCEEDED_PODS: ["bert-1"]}  # the tick saw it exit 0 before
    assert exits.status_of(KEY, status, [pod("bert-0", "u0")]) is status
    other = {"plan": PLAN, st.SUCCEEDED_PODS: ["bert-0"]}  # one recorded, one more gone
    seen = exits.status_of(KEY, other, [])
    assert seen[st.SUCCEEDED_PODS] == ["bert-0", "bert-1"]
    new: dict[str, Any] = {}
    told_status(other, other, new)  # (read as it was: nothing to add)
    assert new == {}


def test_a_pod_no_tick_saw_or_of_an_earlier_run_does_not_count() -> None:
    exits = Exits()
    status: dict[str, Any] = {"plan": PLAN}
    assert not exits.deleted(KEY, "u0", "bert-0")  # no tick of the job yet
    exits.status_of(KEY, status, [pod("bert-0", "u0"), pod("bert-1", "u1", deleting=True)])
    assert not exits.deleted(KEY, "u1", "bert-1")  # seen deleting only: not of the run
    assert not exits.deleted(("ns", "other"), "u0", "bert-0")  # another job's
    # a new run (an edit reset the plan): the last run's pods, deleted as it starts, bear
    # the names the new run's pods will bear, and do not count for it
    exits.status_of(KEY, status, [pod("bert-0", "u0")])
    assert exits.status_of(KEY, {}, [pod("bert-0", "u0", "Succeeded")]) == {}
    assert not exits.deleted(KEY, "u0", "bert-0")
    seen = exits.status_of(KEY, status, [pod("bert-0", "u2"), pod("bert-1", "u3")])
    assert seen is status and st.exited_0(seen, [pod("bert-1", "u3")]) == []
    # a new plan's own write of the field wins over the record
    exits.deleted(KEY, "u2", "bert-0")
    seen = exits.status_of(KEY, status, [pod("bert-1", "u3")])
    new: dict[str, Any] = {st.SUCCEEDED_PODS: None}
    told_status(seen, status, new)
    assert new == {st.SUCCEEDED_PODS: None}
    exits.forget(KEY)  # the job deleted
    assert KEY not in exits.run and KEY not in exits.gone


def meta(uid: str, *, deleting: bool = False, label: str = "bert") -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "bert-0",
        "uid": uid,
        "labels": {LABEL_JOB: label},
        "ownerReferences": [owner_reference("bert", "job-uid")],
    }
    if deleting:
        out["deletionTimestamp"] = "2026-12-02T18:00:00Z"
    return out


def test_the_pod_watch_records_only_stage_pods_going_after_exiting_0() -> None:
    exits = Exits()
    memo = {"exits": exits}
    exits.status_of(KEY, {"plan": PLAN}, [pod("bert-0", "u0")])

    def event(type_: str | None, m: dict[str, Any], phase: str) -> None:
        stage_pod_event(
            type=type_, namespace="ns", name="bert-0", meta=m, status={"phase": phase}, memo=memo
        )

    event("DELETED", meta("u0"), "Running")  # deleted unfinished: a failure, not an exit
    event("MODIFIED", meta("u0"), "Succeeded")  # exited 0, still there: the index has it
    event("DELETED", meta("u0", label="edited"), "Succeeded")  # its label edited: not Hulk's
    assert exits.gone == {}
    event("MODIFIED", meta("u0", deleting=True), "Succeeded")  # being deleted after exit 0
    assert exits.gone == {KEY: {"bert-0"}}
    exits.gone.clear()
    event("DELETED", meta("u0"), "Succeeded")
    assert exits.gone == {KEY: {"bert-0"}}
    stage_pod_event(
        type="DELETED", namespace="ns", name="bert-0", meta=meta("u0"),
        status={"phase": "Succeeded"}, memo={},
    )  # fmt: skip  # (before the operator's start: no record yet)
