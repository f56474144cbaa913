"""Events on a running job it is not moved for (``disruptions``): servers relabelled out of
its constraints. (Cut links: ``test_operator_latencies``.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from placement_helpers import entry, nodes

from hulk_operator.disruptions import tell_unmet_constraints
from hulk_operator.inventory import node_info
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import JobPlan, Stage
from hulk_sandbox.nodes import node_manifest


def _relabelled(name: str, **labels: str) -> Any:
    body = node_manifest(paper_cluster().server(name))
    body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    body["metadata"]["labels"].update(labels)
    return node_info(body)


def test_servers_out_of_the_jobs_constraints_are_told_once_and_when_they_meet_them() -> None:
    """A node relabelled into another region keeps its stage (IgnoredDuringExecution):
    told once per set of servers, with each one's region now; told again once they meet
    the constraints; nothing where the job moved off them, or has no constraints."""
    told: list[tuple[str, str, str]] = []
    ctx = SimpleNamespace(nodes=nodes(), disruption={}, event=lambda *e: told.append(e))
    job = paper_jobs(4)[0]
    e = entry(job, allowed_regions=("Berlin",))
    plan = JobPlan(job.name, (Stage((0, 12), ("berlin-30",)), Stage((12, 24), ("berlin-31",))), 4)
    tell_unmet_constraints(ctx, e, plan)  # type: ignore[arg-type]
    assert not told  # (Berlin matches the label berlin, as allowedRegions does)
    region = "topology.kubernetes.io/region"
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", **{region: "paris"})
    for _ in range(2):  # once
        tell_unmet_constraints(ctx, e, plan)  # type: ignore[arg-type]
    assert told == [
        (
            "Warning",
            "ConstraintsUnmet",
            "its server(s) berlin-31 (region paris) no longer meet spec.allowedRegions "
            "['Berlin']: their stages stay (node affinity is IgnoredDuringExecution); to move "
            "them, drain those nodes (kubectl drain NODE), or relabel them back",
        )
    ], told
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", **{region: "berlin"})
    tell_unmet_constraints(ctx, e, plan)  # type: ignore[arg-type]
    assert told[1] == (
        "Normal",
        "ConstraintsMet",
        "its server(s) berlin-31 meet its constraints again",
    ), told
    # a node selector too; and moved off the server meanwhile: nothing more to tell
    sel = entry(job, node_selector=(("pool", "a100"),), selector_from="spec.nodeSelector")
    ctx.nodes["berlin-30"] = _relabelled("berlin-30", pool="a100")
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", pool="a100")
    tell_unmet_constraints(ctx, sel, plan)  # type: ignore[arg-type]
    assert len(told) == 2
    ctx.nodes["berlin-31"] = _relabelled("berlin-31", pool="v100")
    tell_unmet_constraints(ctx, sel, plan)  # type: ignore[arg-type]
    assert told[2][1] == "ConstraintsUnmet" and "no longer meet spec.nodeSelector:" in told[2][2]
    moved = JobPlan(job.name, (Stage((0, 24), ("berlin-30",)),), 4)
    tell_unmet_constraints(ctx, sel, moved)  # type: ignore[arg-type]
    assert len(told) == 3, told
    tell_unmet_constraints(ctx, entry(job), plan)  # type: ignore[arg-type]  # no constraints
    assert len(told) == 3
