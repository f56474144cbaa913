"""``spec.allowedRegions`` on a topology file: jobs planned per region group, the group with
the highest priority first, on hand-built two-region clusters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from planner_helpers import assert_valid_plan, cluster, server, tiny_job, usable_gib

from hulk_planner.api import plan
from hulk_planner.cost import memory_need_bytes, server_capacity
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.errors import InvalidRequest, InvalidRequests, NoFeasiblePlan
from hulk_planner.model import Cluster, Job
from hulk_planner.regions import plan_in_regions, region_limits, tiered

NEED = memory_need_bytes(tiny_job())


def two_regions(r2_gib: float) -> Cluster:
    """r1: a, b, each holding 80% of a tiny job (it needs both); r2: c, d of ``r2_gib``."""
    big = usable_gib(NEED * 0.8)
    servers = [server("a", "r1", memory_gib=big), server("b", "r1", memory_gib=big)]
    servers += [server(n, "r2", memory_gib=r2_gib) for n in ("c", "d")]
    names = [s.name for s in servers]
    links = [(x, y, 1.0 if x < "c" or y < "c" else 50.0) for x in names for y in names if x < y]
    return cluster(servers, links)


def regions_of(c: Cluster, nodes: tuple[str, ...]) -> set[str]:
    return {c.server(n).region for n in nodes}


@pytest.mark.parametrize("planner", ["hulk", "search", "baseline-b"])
def test_a_limited_job_runs_only_in_its_regions(planner: str) -> None:
    c = two_regions(usable_gib(NEED * 2))
    jobs = [tiny_job("limited"), tiny_job("free")]  # equal priority: in this order
    result = plan_in_regions(c, jobs, {"limited": ("r2",)}, planner, time_budget_s=0.2)
    assert_valid_plan(result, c, jobs)
    limited, free = result.job("limited"), result.job("free")
    assert limited is not None and regions_of(c, limited.nodes) == {"r2"}
    assert free is not None  # on what the limited job left (never the same server: checked above)


@pytest.mark.parametrize(("limited", "free", "placed"), [(0, 1, "free"), (1, 0, "limited")])
def test_the_group_with_the_higher_priority_is_planned_first(
    limited: int, free: int, placed: str
) -> None:
    c = two_regions(usable_gib(NEED * 0.01))  # r2 holds nothing: both jobs need r1 whole
    jobs = [
        replace(tiny_job("limited"), priority=limited),
        replace(tiny_job("free"), priority=free),
    ]
    result = plan_in_regions(c, jobs, {"limited": ("r1",)}, "search", time_budget_s=0.2)
    assert_valid_plan(result, c, jobs)
    assert [jp.name for jp in result.jobs] == [placed]
    assert regions_of(c, result.jobs[0].nodes) == {"r1"}
    (waiting,) = result.unplaced
    if waiting.name == "limited":
        assert (
            waiting.reason
            == "in spec.allowedRegions ['r1']: no server is left (jobs planned before it hold "
            "them; a higher spec.priority plans it first)"
        )
    else:  # r2 is left: what the limited job holds of its reach is said too (a trial)
        assert "GPU memory" in waiting.reason, waiting.reason
        held = sum(server_capacity(c.server(n)) for n in "ab") / 2**30
        assert waiting.reason.endswith(
            f"; jobs planned before it hold 2 more server(s) it may use, {held:.2g} GiB usable "
            "(a higher spec.priority plans it first)"
        ), waiting.reason


def test_a_baseline_tells_no_job_to_raise_its_priority() -> None:
    """The baselines split the servers whatever the priorities: a job they leave out is
    told how they order jobs, not to raise a priority it may have highest already (a user
    trial)."""
    c = two_regions(usable_gib(NEED * 0.01))  # r2 holds nothing: both jobs need r1 whole
    jobs = [replace(tiny_job("limited"), priority=0), replace(tiny_job("free"), priority=9)]
    result = plan_in_regions(
        c, jobs, {"limited": ("r1",)}, "baseline-b", time_budget_s=0.2, priorities=False
    )
    assert [jp.name for jp in result.jobs] == ["limited"]
    (waiting,) = result.unplaced
    assert waiting.name == "free" and "spec.priority" not in waiting.reason, waiting.reason
    assert waiting.reason.endswith(
        "(jobs limited to regions of fewer servers are planned first, whatever their priorities)"
    ), waiting.reason


@pytest.mark.parametrize("planner", ["hulk", "search", "baseline-b"])
def test_of_equal_priority_the_group_with_fewer_servers_is_planned_first(planner: str) -> None:
    """A job free to go anywhere, given first, took the fast region a job of the same
    priority was limited to, and that job was left unplaced (a user trial): now the group
    whose regions hold fewer servers is planned first, and both are placed."""
    big = usable_gib(NEED * 0.8)  # r1: fast, and a job needs both its servers
    servers = [server(n, "r1", memory_gib=big, tflops=100.0) for n in ("a", "b")]
    servers += [server(n, "r2", memory_gib=usable_gib(NEED * 2), tflops=0.1) for n in "cde"]
    names = [s.name for s in servers]
    c = cluster(servers, [(x, y, 1.0) for x in names for y in names if x < y])
    jobs = [tiny_job("free"), tiny_job("limited")]  # the free one given first
    alone = plan_in_regions(c, jobs[:1], {}, planner, time_budget_s=0.2)
    assert regions_of(c, alone.jobs[0].nodes) & {"r1"}  # (it would take r1)
    result = plan_in_regions(c, jobs, {"limited": ("r1",)}, planner, time_budget_s=0.2)
    assert_valid_plan(result, c, jobs)
    assert not result.unplaced, result.unplaced
    limited, free = result.job("limited"), result.job("free")
    assert limited is not None and set(limited.nodes) == {"a", "b"}
    assert free is not None and regions_of(c, free.nodes) == {"r2"}


def test_a_higher_priority_job_gets_the_plan_it_would_get_alone() -> None:
    """Jobs of different priorities were planned together (the servers shared: the
    higher one could get the slower plan, a user trial of the operator, which plans the
    same way): now each priority is a group of its own, the highest first."""
    paper = paper_cluster()
    kept = sorted(s.name for s in paper.servers if s.region == "Beijing")[:3]
    c = paper.without([s.name for s in paper.servers if s.name not in kept])
    # T5-11B alone takes all three (a pipeline over them; GPT2-XL now takes one: its 1F1B
    # window would wait on the links)
    t5 = next(j for j in paper_jobs() if j.name == "t5-11b")
    high, low = replace(t5, name="high", priority=100), replace(t5, name="low")
    assert tiered([high, low], {}) and not tiered([t5, replace(t5, name="b")], {})
    alone = plan_in_regions(c, [high], {}, "search", max_iterations=300)
    both = plan_in_regions(c, [low, high], {}, "search", max_iterations=300)
    assert_valid_plan(both, c, [low, high])
    assert both.job("high") == alone.job("high") and set(alone.jobs[0].nodes) == set(kept)
    assert [u.name for u in both.unplaced] == ["low"], both.unplaced
    assert "a higher spec.priority plans it first" in both.unplaced[0].reason


def test_no_job_placed_anywhere_is_no_feasible_plan_naming_the_region() -> None:
    c = two_regions(usable_gib(NEED * 0.01))
    with pytest.raises(NoFeasiblePlan, match=r"in spec.allowedRegions \['r2'\]: ") as info:
        plan_in_regions(c, [tiny_job("limited")], {"limited": ("r2",)}, "search")
    assert [u.name for u in info.value.unplaced] == ["limited"]


def _doc(name: str, regions: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"allowedRegions": regions}}


def test_region_limits_accept_the_topology_names_and_the_label_slugs() -> None:
    c = cluster([server("a", "New Delhi"), server("b", "Rome")], [("a", "b", 50.0)])
    docs = [("jobs.yaml", [_doc("x", ["new-delhi", "Rome", "rome"]), {"metadata": {"name": "y"}}])]
    notes: list[str] = []
    assert region_limits(docs, c, notes) == {"x": ("New Delhi", "Rome")}
    # ("new-delhi" and "rome" as node labels write them: no note, a user trial)
    assert notes == []


def test_a_region_with_accents_is_named_as_its_label_writes_it() -> None:
    """Before: 'sao-paulo' is not a region of the cluster (did you mean São Paulo?)."""
    c = cluster([server("a", "São Paulo"), server("b", "Rome")], [("a", "b", 50.0)])
    assert region_limits([("j", [_doc("x", ["sao-paulo"])])], c, []) == {"x": ("São Paulo",)}


def test_a_region_named_exactly_wins_over_one_with_the_same_slug() -> None:
    c = cluster(
        [server("a", "US East"), server("b", "us-east"), server("c", "x")],
        [("a", "b", 5.0), ("a", "c", 5.0), ("b", "c", 5.0)],
    )
    for name in ("US East", "us-east"):
        assert region_limits([("j", [_doc("x", [name])])], c) == {"x": (name,)}
    # a name that is neither, matching both alike, is an error (before: the first taken)
    with pytest.raises(InvalidRequest) as exc:
        region_limits([("j", [_doc("x", ["US-EAST"])])], c)
    assert str(exc.value) == (
        "j (document 1): spec.allowedRegions[0]: 'US-EAST' names regions 'US East' and "
        "'us-east' alike (name one exactly as the topology file writes it)"
    )


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        (
            ["r1", "mars"],
            "jobs.yaml (document 1): spec.allowedRegions[1]: 'mars' is not a region of cluster "
            "hand-built (use one of r1, r2)",
        ),
        (  # a typo: the region it is likely meant for (before, the list alone)
            ["r1", "r22"],
            "jobs.yaml (document 1): spec.allowedRegions[1]: 'r22' is not a region of cluster "
            "hand-built (did you mean r2?) (use one of r1, r2)",
        ),
        (
            "r1",
            "jobs.yaml (document 1): spec.allowedRegions: must be a list of region names, got 'r1' "
            "(write it as a list, e.g. [r1])",
        ),
        (
            [],
            "jobs.yaml (document 1): spec.allowedRegions: is empty (list one region or more, "
            "or drop it)",
        ),
        (
            [7],
            "jobs.yaml (document 1): spec.allowedRegions[0]: must be a region name, got 7 "
            "(quote it: YAML reads on, off, yes, no, true, false and numbers unquoted as other "
            "types)",
        ),
        # as YAML writes them, and with the fix (it said "got None", "got False": a trial)
        (
            [None],
            "jobs.yaml (document 1): spec.allowedRegions[0]: must be a region name, got null "
            "(write one of the cluster's regions: r1, r2)",
        ),
        ([False], "spec.allowedRegions[0]: must be a region name, got false (quote it: YAML"),
        ([{"a": 1}], "spec.allowedRegions[0]: must be a region name, got {'a': 1} (write one"),
    ],
)
def test_region_limits_name_the_field_at_fault(regions: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        region_limits([("jobs.yaml", [_doc("x", regions)])], two_regions(1.0))
    assert message in str(info.value) and str(info.value).startswith("jobs.yaml"), str(info.value)


def test_jobs_without_limits_are_planned_together_as_before() -> None:
    c = two_regions(usable_gib(NEED * 2))
    jobs: list[Job] = [tiny_job("one"), tiny_job("two")]
    result = plan_in_regions(c, jobs, {}, "search", max_iterations=200)
    assert_valid_plan(result, c, jobs)
    assert {jp.name for jp in result.jobs} == {"one", "two"}


def test_a_job_no_server_it_may_use_could_hold_is_not_told_of_held_ones() -> None:
    """What higher-priority jobs hold is said only where it would make room: a job larger
    than every server it may use, held or not, gets its reason alone."""
    c = two_regions(usable_gib(NEED * 0.01))
    first = replace(tiny_job("first"), priority=1)
    huge = tiny_job("huge", parameters=1_000_000 * 10)  # 10x the tiny job: fits nowhere
    result = plan_in_regions(c, [first, huge], {}, "search", time_budget_s=0.2)
    (waiting,) = result.unplaced
    assert waiting.name == "huge" and "GPU memory" in waiting.reason
    assert "jobs planned before it" not in waiting.reason, waiting.reason


def test_a_running_job_keeps_its_servers_from_a_new_job_of_a_higher_priority() -> None:
    """With ``previous``, a new job of a higher priority was planned first on every server,
    the running job's too, and took them while others were free ("kept 0 of its 2
    server(s)": a user trial); the operator never preempts a running job, nor does this."""
    from hulk_planner.api import plan

    # r1: a, b, fast, each 80% of a job (the running job's); r2: c, d, slow, free
    servers = [server(n, "r1", memory_gib=usable_gib(NEED * 0.8), tflops=100.0) for n in "ab"]
    servers += [server(n, "r2", memory_gib=usable_gib(NEED * 2), tflops=0.1) for n in "cd"]
    c = cluster(servers, [(x, y, 1.0) for x in "abcd" for y in "abcd" if x < y])
    running = tiny_job("running")
    before = plan(c.without(["c", "d"]), [running], "search", max_iterations=200)
    assert set(before.jobs[0].nodes) == {"a", "b"}
    alone = plan(c, [tiny_job("urgent")], "search", max_iterations=200)
    assert set(alone.jobs[0].nodes) == {"a", "b"}  # (alone, it would take them)
    urgent = replace(tiny_job("urgent"), priority=10)
    both = plan(c, [running, urgent], "search", max_iterations=200, previous=before)
    assert_valid_plan(both, c, [running, urgent])
    assert both.job("running") == before.jobs[0]  # kept as it was
    job = both.job("urgent")
    assert job is not None and set(job.nodes) <= {"c", "d"}
    # its own group re-plans it: it is not kept where the new job may not go
    assert [jp.name for jp in both.jobs] == ["running", "urgent"]  # as given


def test_when_only_a_running_jobs_servers_are_left_a_new_job_says_so() -> None:
    from hulk_planner.api import plan

    c = two_regions(usable_gib(NEED * 2))
    running = tiny_job("running")
    before = plan(c.without(["c", "d"]), [running], "search", max_iterations=200)
    urgent = replace(tiny_job("urgent"), priority=10)
    out = plan(
        c,
        [running, urgent],
        "search",
        max_iterations=200,
        previous=before,
        allowed_regions={"urgent": ["r1"]},
    )
    assert out.job("running") == before.jobs[0]
    (u,) = out.unplaced
    assert u.name == "urgent" and u.reason == (
        "in spec.allowedRegions ['r1']: no server is left (running jobs hold them: a "
        "running job keeps its servers)"
    )


def test_the_groups_share_the_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each group had the whole budget: ``--time-budget 3`` took 5.7 s over two
    priorities, search's default 10 s took 40 s over six (a user trial). Now an even share
    each, of the budget given or of the planner's default for the whole cluster."""
    from hulk_planner import api
    from hulk_planner.gnn.planner import refine_budget

    given: list[float | None] = []
    real = api.plan

    def recorded(*args: object, time_budget_s: float | None = None, **kw: object) -> object:
        given.append(time_budget_s)
        return real(*args, **{**kw, "max_iterations": 50})  # type: ignore[arg-type]

    monkeypatch.setattr(api, "plan", recorded)
    c = two_regions(usable_gib(NEED * 8))
    jobs = [replace(tiny_job(f"j{p}"), priority=p) for p in range(3)]
    plan_in_regions(c, jobs, {}, "search", time_budget_s=0.3)
    assert given == pytest.approx([0.1, 0.1, 0.1])
    given.clear()
    plan_in_regions(c, jobs, {}, "search")  # search's default, 10 s, for the whole run
    assert given == pytest.approx([api.SEARCH_BUDGET_S / 3] * 3)
    given.clear()
    plan_in_regions(c, jobs, {}, "hulk")  # hulk's refinement's, for the whole cluster
    assert given == pytest.approx([refine_budget(len(c.servers)) / 3] * 3)
    given.clear()
    plan_in_regions(c, jobs, {}, "search", max_iterations=50)  # moves bound it: no time
    assert given == [None, None, None]


def test_the_baselines_split_the_servers_among_jobs_of_every_priority() -> None:
    """A baseline planned one priority after another gave the first job every server and
    the others "no server is left" (a user trial): it splits them as without priorities."""
    from hulk_planner.api import plan

    paper = paper_cluster()
    jobs = paper_jobs()
    ranked = [replace(j, priority=p) for j, p in zip(jobs, (40, 30, 20, 10), strict=True)]
    assert tiered(ranked, {}) and not tiered(ranked, {}, priorities=False)
    for name in ("baseline-a", "baseline-b", "baseline-c"):
        same = plan(paper, jobs, name)
        got = plan(paper, ranked, name)
        assert got.jobs == same.jobs and got.unplaced == same.unplaced, name
    assert len(plan(paper, ranked, "baseline-b").jobs) == 4


def test_a_region_named_as_its_node_label_is_taken_without_a_note() -> None:
    """The label's spelling is the documented one: a note on it came at every run of a
    correct file (a user trial); another spelling is still noted."""
    from hulk_planner.regions import resolve_regions

    paper = paper_cluster()
    notes: list[str] = []
    assert resolve_regions("f", ["beijing"], paper, "j", notes) == ("Beijing",)
    assert notes == []
    assert resolve_regions("f", ["BEIJING"], paper, "j", notes) == ("Beijing",)
    assert notes == [
        "job j: spec.allowedRegions[0] 'BEIJING' is taken as region 'Beijing' (regions are "
        "matched without regard to case, spaces or punctuation; the operator matches the node "
        "label topology.kubernetes.io/region the same way)"
    ]


def test_every_wrong_region_of_every_job_is_told_at_once() -> None:
    """Only the first job's first wrong region was told (a user trial): each is, a line each,
    in file order; the right ones still give their notes."""
    docs = [
        _doc("x", ["mars", "r1", "venus"]),
        _doc("y", ["r2"]),
        _doc("z", ["R1", 7]),
    ]
    notes: list[str] = []
    with pytest.raises(InvalidRequests) as info:
        region_limits([("jobs.yaml", docs)], two_regions(1.0), notes)
    assert [str(e) for e in info.value.errors] == [
        "jobs.yaml (document 1): spec.allowedRegions[0]: 'mars' is not a region of cluster "
        "hand-built (use one of r1, r2)",
        "jobs.yaml (document 1): spec.allowedRegions[2]: 'venus' is not a region of cluster "
        "hand-built (use one of r1, r2)",
        "jobs.yaml (document 3): spec.allowedRegions[1]: must be a region name, got 7 (quote "
        "it: YAML reads on, off, yes, no, true, false and numbers unquoted as other types)",
    ]
    assert [n.partition(" (")[0] for n in notes] == [
        "job z: spec.allowedRegions[0] 'R1' is taken as region 'r1'"
    ]


def test_a_job_of_equal_priority_is_not_told_a_higher_priority_went_first() -> None:
    """Two jobs of priority 0, one limited to Berlin (planned first: fewer servers), the
    other to Berlin and Paris: the second was told "a higher spec.priority plans it first"
    (a review). It is told the narrower regions went first; a job below a higher one is
    still told of the priority."""
    t5 = paper_jobs()[1]
    model = replace(t5.model, parameters=30_000_000_000)
    a = replace(t5, name="a-narrow", model=model)
    b = replace(t5, name="b-wide", model=model)
    limits = {"a-narrow": ["Berlin"], "b-wide": ["Berlin", "Paris"]}
    # (a job of a higher priority elsewhere, planned first too, holds none of their servers)
    tokyo = replace(t5, name="h-tokyo", model=model, priority=5)
    three = limits | {"h-tokyo": ["Tokyo"]}
    got = plan(paper_cluster(), [a, b, tokyo], "hulk", allowed_regions=three, max_iterations=200)
    why = {u.name: u.reason for u in got.unplaced}
    assert "b-wide" in why, why
    assert "a higher spec.priority" not in why["b-wide"], why["b-wide"]
    assert (
        "of one priority, jobs limited to regions of fewer servers are planned first"
        in (why["b-wide"])
    ), why["b-wide"]
    got = plan(paper_cluster(), [replace(a, priority=5), b], "hulk", allowed_regions=limits,
               max_iterations=200)  # fmt: skip
    why = {u.name: u.reason for u in got.unplaced}
    assert "a higher spec.priority plans it first" in why["b-wide"], why["b-wide"]
