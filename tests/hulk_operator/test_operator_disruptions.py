"""Events on a running job it is not moved for (``disruptions``): servers relabelled out of
its constraints. (Cut links: ``test_operator_latencies``; ``told_before``:
``test_operator_regrow``.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from placement_helpers import entry, nodes

from hulk_operator import kube
from hulk_operator.disruptions import tell_unmet_constraints
from hulk_operator.entries import JobEntry
from hulk_operator.inventory import node_info
from hulk_operator.placement import Placer
from hulk_planner.api import plan as plan_fn
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import JobPlan, Stage
from hulk_sandbox.nodes import node_manifest

REGION = "topology.kubernetes.io/region"
JOB = paper_jobs(4)[0]
PLAN = JobPlan(JOB.name, (Stage((0, 12), ("berlin-30",)), Stage((12, 24), ("berlin-31",))), 4)


def _relabelled(name: str, **labels: str) -> Any:
    body = node_manifest(paper_cluster().server(name))
    body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    body["metadata"]["labels"].update(labels)
    return node_info(body)


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    monkeypatch.setattr(kube, "last_event_message", lambda *_: None)  # no Event before
    return []


def _ctx(told: list[tuple[str, str, str]]) -> SimpleNamespace:
    return SimpleNamespace(
        nodes=nodes(),
        disruption={},
        event=lambda *e: told.append(e),
        placer=Placer(plan_fn),
        api=None,
    )


def _tell(ctx: SimpleNamespace, e: JobEntry, plan: JobPlan = PLAN) -> None:
    asyncio.run(tell_unmet_constraints(ctx, e, plan))  # type: ignore[arg-type]


def test_servers_out_of_the_jobs_regions_are_told_once_and_when_they_meet_them_again(
    told: list[tuple[str, str, str]],
) -> None:
    """A node relabelled into another region keeps its stage (IgnoredDuringExecution):
    told once as it leaves, with its region now; a server more told again; each told again
    as it meets them (a review: a set that shrank was told as a new Warning); nothing of
    servers the job moved off, nor for a job without constraints."""
    ctx = _ctx(told)
    e = entry(JOB, allowed_regions=("Berlin",))
    _tell(ctx, e)
    assert not told  # (Berlin matches the label berlin, as allowedRegions does)
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", **{REGION: "paris"})
    for _ in range(2):  # once
        _tell(ctx, e)
    assert told == [
        (
            "Warning",
            "ConstraintsUnmet",
            "its server(s) berlin-31 (region paris) no longer meet spec.allowedRegions "
            "['Berlin']: their stages stay (node affinity is IgnoredDuringExecution); to move "
            "them, drain those nodes (kubectl drain NODE), or relabel them back",
        )
    ], told
    ctx.nodes["berlin-30"] = _relabelled("berlin-30", **{REGION: "rome"})
    _tell(ctx, e)
    assert told[1][1] == "ConstraintsUnmet" and told[1][2].startswith(
        "its server(s) berlin-30 (region rome), berlin-31 (region paris) no longer meet"
    ), told
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", **{REGION: "berlin"})
    _tell(ctx, e)
    assert told[2:] == [
        ("Normal", "ConstraintsMet", "its server(s) berlin-31 meet its constraints again")
    ], told
    moved = JobPlan(JOB.name, (Stage((0, 24), ("berlin-31",)),), 4)  # off berlin-30
    _tell(ctx, e, moved)
    assert len(told) == 3, told
    _tell(ctx, entry(JOB))  # no constraints
    assert len(told) == 3


def test_only_the_constraints_a_server_fails_are_named(told: list[tuple[str, str, str]]) -> None:
    """Before (a review): "berlin-30 (region berlin) no longer meet spec.allowedRegions
    ['Berlin'] or spec.nodeSelector" where only its pool label had changed."""
    ctx = _ctx(told)
    e = entry(JOB, allowed_regions=("Berlin",), node_selector=(("pool", "a100"),))
    ctx.nodes["berlin-30"] = _relabelled("berlin-30", pool="a100")
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", pool="a100")
    _tell(ctx, e)
    assert not told
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", pool="v100")
    _tell(ctx, e)
    assert told[0][2].startswith(
        "its server(s) berlin-31 no longer meet spec.nodeSelector: their stages stay"
    ), told


def test_a_restarted_operator_does_not_tell_the_same_servers_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its memory starts empty: the job's newest ConstraintsUnmet Event is read, and the
    same words are not posted again."""
    said: list[tuple[str, str, str]] = []
    monkeypatch.setattr(kube, "last_event_message", lambda *_: None)  # none yet
    ctx = _ctx(said)
    e = entry(JOB, allowed_regions=("Berlin",))
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", **{REGION: "paris"})
    _tell(ctx, e)
    (first,) = said
    restarted = _ctx(said)
    restarted.nodes = ctx.nodes
    monkeypatch.setattr(kube, "last_event_message", lambda *_: first[2])
    _tell(restarted, e)
    assert said == [first]
