"""A planning round (``rounds.plan_pending``) without a cluster: the real planner, in memory."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from placement_helpers import entry, nodes, snap

from hulk_operator.entries import JobEntry
from hulk_operator.inventory import PRODUCT as PRODUCT_LABEL
from hulk_operator.inventory import Resources, Taint
from hulk_operator.latencies import Latencies
from hulk_operator.reconcile import same_cause
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import Job, ModelSpec, Plan


def test_paper_jobs_planned_together_on_disjoint_servers() -> None:
    jobs = [entry(j) for j in paper_jobs()]
    decisions = plan_pending(snap(jobs), plan, baselines=True)
    assert set(decisions) == {e.key for e in jobs}
    used: list[str] = []
    for d in decisions.values():
        assert d.job_plan is not None, d.reason
        used += d.job_plan.nodes
        assert d.estimated > 0 or len(d.job_plan.nodes) == 1  # no probe data: estimates
        assert set(d.baselines) == {"baseline-a", "baseline-b", "baseline-c"}
    assert len(used) == len(set(used))


def test_held_servers_are_not_offered() -> None:
    bert = entry(paper_jobs()[3])
    all_nodes = set(nodes())
    held = {n: ("other", "job") for n in sorted(all_nodes)[:-1]}
    d = plan_pending(snap([bert], held), plan)[bert.key]
    if d.job_plan is not None:
        assert set(d.job_plan.nodes) <= all_nodes - set(held)


def test_job_that_cannot_fit_gets_a_reason() -> None:
    huge = Job("huge", ModelSpec(10**13, 96, 12288, 2048), 256, 1)
    d = plan_pending(snap([entry(huge)]), plan)[("ml", "huge")]
    assert d.job_plan is None and d.reason


def test_a_suspended_job_is_not_planned_and_holds_no_server() -> None:
    bert, gpt = paper_jobs()[3], paper_jobs()[2]
    asleep = entry(bert, suspended=True)
    awake = entry(gpt)
    assert not asleep.pending and awake.pending
    decisions = plan_pending(snap([asleep, awake]), plan)
    assert set(decisions) == {awake.key}
    assert replace(asleep, suspended=False).pending  # resumed: planned afresh


def test_a_job_with_no_free_server_is_told_which_constraint_to_change() -> None:
    bert = paper_jobs()[3]

    def reason(e: JobEntry, s: Snapshot | None = None) -> str:
        d = plan_pending(s or snap([e]), plan)[e.key]
        assert d.job_plan is None
        return d.reason

    mars = entry(bert, allowed_regions=("mars",))
    assert reason(mars).startswith("spec.allowedRegions ['mars'] names no region")
    assert "beijing" in reason(mars) and "did you mean" not in reason(mars)
    # the paper's names, as the topology file writes them, match the label, the slug
    # (before: refused, "did you mean new-delhi, tokyo?"; hulk plan took them)
    near = entry(bert, allowed_regions=("New Delhi", "Tokyo"))
    d = plan_pending(snap([near]), plan)[near.key]
    assert d.job_plan is not None and d.cluster is not None, d.reason
    assert {d.cluster.server(n).region for n in d.job_plan.nodes} <= {"new-delhi", "tokyo"}
    h100 = entry(bert, node_selector=(("gpu", "h100"),))
    assert reason(h100) == "spec.nodeSelector gpu=h100 matches no node (no node has gpu)"
    both = entry(bert, allowed_regions=("beijing",), node_selector=(("gpu", "h100"),))
    assert reason(both) == "spec.nodeSelector gpu=h100 matches no node (no node has gpu)"
    paris = entry(bert, allowed_regions=("paris",))
    paris_nodes = [n for n, i in nodes().items() if i.server and i.server.region == "paris"]
    held = snap([paris], {n: ("other", "job") for n in paris_nodes})
    assert reason(paris, held) == (
        f"all {len(paris_nodes)} usable node(s) matching the job are held by other jobs "
        f"(jobs of other namespaces hold {len(paris_nodes)})"
    )  # (before, no job named: a user trial looked them up with hulk topology --free)
    for holders, said in (  # most first, three named; other namespaces' jobs counted
        ("acba", "(a holds 2, b 1, c 1)"),  # (jobs of its namespace named: ml)
        ("dcba", "(a holds 1, b 1, c 1, other jobs 1)"),
    ):
        many = snap([paris], {n: ("ml", h) for n, h in zip(paris_nodes, holders, strict=True)})
        assert reason(paris, many).endswith(f"are held by other jobs {said}"), reason(paris, many)
    # the matching nodes that take no new stage are counted too (before, left unsaid: a
    # node with an unreadable GPU label dropped out of the count; a user trial)
    unlabelled, *others = paris_nodes
    broken = dict(nodes())
    problem = "label nvidia.com/gpu.memory='lots' is not a finite number of MiB above zero"
    broken[unlabelled] = replace(broken[unlabelled], server=None, problem=problem)
    held_rest = Snapshot(broken, Latencies(), {paris.key: paris}, {n: ("o", "j") for n in others})
    assert reason(paris, held_rest) == (
        f"all {len(others)} usable node(s) matching the job are held by other jobs (jobs of other "
        f"namespaces hold {len(others)}); 1 other "
        "matching node(s) take no new stage: 1 not offered (label nvidia.com/gpu.memory="
        "'lots' is not a finite number of MiB above zero)"
    )
    cordoned = {
        n: replace(i, unschedulable=True) if n in paris_nodes else i for n, i in nodes().items()
    }
    sick = Snapshot(cordoned, Latencies(), {paris.key: paris}, {})
    assert reason(paris, sick) == (
        f"the {len(paris_nodes)} node(s) matching the job take no new stage: "
        f"{len(paris_nodes)} cordoned"
    )
    # before: "not Ready, cordoned, tainted, or without usable GPU labels", whichever it was
    taint = Taint("team", "vision", "NoSchedule")
    mixed = dict(nodes())
    first, *rest = paris_nodes
    mixed[first] = replace(mixed[first], ready=False)
    for n in rest:
        mixed[n] = replace(mixed[n], taints=(taint,))
    tainted = Snapshot(mixed, Latencies(), {paris.key: paris}, {})
    assert reason(paris, tainted) == (
        f"the {len(paris_nodes)} node(s) matching the job take no new stage: "
        f"{len(rest)} tainted, 1 not Ready; the taint(s) team=vision:NoSchedule need a "
        "toleration in spec.template.spec.tolerations"
    )
    # a selector on a label the nodes carry lists the values they carry
    product = entry(bert, node_selector=((PRODUCT_LABEL, "NVIDIA-H100"),))
    values = sorted(
        {i.labels[PRODUCT_LABEL] for i in nodes().values() if PRODUCT_LABEL in i.labels}
    )
    assert values and "NVIDIA-H100" not in values
    assert reason(product) == (
        f"spec.nodeSelector {PRODUCT_LABEL}=NVIDIA-H100 matches no node ({PRODUCT_LABEL}: "
        + ", ".join(values[:6])
        + (f" and {len(values) - 6} more" if len(values) > 6 else "")
        + ")"
    )


def test_an_unplaceable_job_says_the_servers_it_was_planned_on_were_the_free_ones() -> None:
    """Before: "the 1 server(s) planned on have 54 GiB usable", read as the cluster's size
    (a user trial: a resumed job whose servers a lower-priority job had taken meanwhile)."""
    opt = entry(paper_jobs()[0])  # OPT-175B: far more than one server holds
    free = "beijing-0"
    held = {n: ("other", "job") for n, i in nodes().items() if i.server and n != free}
    d = plan_pending(snap([opt], held), plan)[opt.key]
    total = sum(1 for i in nodes().values() if i.server)
    assert d.job_plan is None and "; the 1 server(s) planned on have " in d.reason
    assert d.reason.endswith(
        f" usable (planned on the 1 free server(s) of the cluster's {total} usable: other "
        "jobs or pods hold the rest; spec.priority does not preempt them)"
    ), d.reason


def test_an_unplaceable_constrained_job_names_the_servers_it_was_limited_to() -> None:
    t5 = entry(paper_jobs()[1], allowed_regions=("paris",))
    held = dict.fromkeys(["paris-37", "paris-38", "paris-39"], ("other", "job"))  # 40 free
    d = plan_pending(snap([t5], held), plan)[t5.key]
    assert d.job_plan is None
    assert d.reason.endswith("1 free server(s) that spec.allowedRegions ['paris'] allow)"), d.reason


def test_a_job_that_fits_no_set_of_the_servers_it_may_use_is_told_so() -> None:
    """Even with every one of them free: before, it was told the free servers' shortfall,
    or that other jobs held the servers, and a user waited for them in vain."""
    opt = entry(paper_jobs()[0], allowed_regions=("paris",))
    held = {n: ("other", "job") for n in list(nodes())[:5]}
    d = plan_pending(snap([opt], held), plan)[opt.key]
    assert d.job_plan is None and d.cluster is None  # (not planned at all)
    assert d.reason == (
        "fits nowhere: needs 2684 GiB of GPU memory, the 4 server(s) it may use have 940 GiB "
        "usable (allow more servers (spec.allowedRegions ['paris']), add servers, or use a "
        "smaller model (microBatchSize is 1 already))"
    ), d.reason


def test_a_job_re_planned_after_an_edit_keeps_first_claim_on_its_servers() -> None:
    """Before: an edit of a running job (an env var) planned it together with a waiting job
    of the same priority, which could take the running job's only server and leave it
    Pending."""
    bert = paper_jobs()[3]
    london = [n for n, i in nodes().items() if i.server and i.server.region == "london"]
    assert len(london) == 1  # room for one of the two
    waiting = entry(replace(bert, name="a-waiting"), allowed_regions=("london",))
    edited = entry(replace(bert, name="z-edited"), allowed_regions=("london",))
    s = snap([waiting, edited], held={london[0]: edited.key})  # its pods still there
    decisions = plan_pending(s, plan)
    assert decisions[edited.key].nodes == set(london), decisions
    assert decisions[waiting.key].job_plan is None
    # without pods holding it, the joint plan decides as before (here: the first name)
    fresh = plan_pending(snap([waiting, edited]), plan)
    assert [k for k, d in fresh.items() if d.job_plan is not None] == [waiting.key]


def test_a_running_jobs_waiting_edit_keeps_the_servers_it_needs_from_jobs_ranked_below() -> None:
    """A running job whose edit waits for servers (``edits``) is planned, edited, in its
    turn: jobs of lower priority, or of equal priority and holding no server, do not get
    the servers its plan would use, and are told so; one of higher priority goes first.
    Before, a waiting edit took no part in the rounds: the pending job planned first got
    the servers another job freed (a known limit of the last release)."""
    # two copies fit the paper's cluster, three do not (8 micro-batches: see
    # test_a_higher_priority_job_is_placed_before_lower_ones)
    opt = replace(paper_jobs()[0], global_batch_size=8)
    # (a search bounded by moves, not time: two copies fit only narrowly, and a search
    # for a time on a loaded machine once left one unplaced)
    planned = partial(plan, max_iterations=1000)
    own = sorted(nodes())[:3]
    waiting = [entry(replace(opt, name=f"p{i}"), created=1000.0 + i) for i in range(2)]
    for priority, kept in ((10, True), (0, True), (-5, False)):
        edited = entry(
            replace(opt, name="w-edited", priority=priority),
            plan_nodes=frozenset(own),
            phase="Running",
        )
        s = snap([edited, *waiting], held=dict.fromkeys(own, edited.key))
        before = plan_pending(s, planned)
        assert all(before[e.key].job_plan is not None for e in waiting)  # (the old way)
        d = plan_pending(s, planned, edits={edited.key})
        assert set(d) == {e.key for e in waiting}  # no decision of its own: it runs
        placed = [k for k, v in d.items() if v.job_plan is not None]
        for k in placed:  # never on the servers its pods run on (a review: planned in one
            assert not d[k].nodes & set(own), (priority, k)  # group with it, they were)
        if kept:
            assert placed == [waiting[0].key], (priority, placed)
            told = d[waiting[1].key].reason
            assert told.endswith(
                "free server(s) are kept for the edit of job ml/w-edited, which waits for "
                "servers and ranks above it"
            ), told
        else:
            assert len(placed) == 2, priority  # (ranked above it: planned first)
    # a job that is pending (its edit allowed) is planned as any: ``edits`` ignores it
    fresh = entry(replace(opt, name="w-edited", priority=10))
    d = plan_pending(snap([fresh, *waiting]), planned, edits={fresh.key})
    assert d[fresh.key].job_plan is not None


def test_a_job_the_kept_servers_could_not_have_placed_is_not_told_of_them() -> None:
    """A job that needs far more GPU memory than the free servers and those a waiting edit
    keeps have together is not told of them (a user trial: OPT-175B, 54 GiB free, read
    that one server was kept from it)."""
    cluster = nodes()
    own = sorted(cluster)[:3]
    held = {n: ("ml", "x") for n in sorted(cluster)[6:]}  # (three free between)
    gpt = next(j for j in paper_jobs() if j.name == "gpt2-xl")
    edited = entry(replace(gpt, name="w", priority=10), plan_nodes=frozenset(own), phase="Running")
    big = entry(paper_jobs()[0])  # OPT-175B
    s = snap([edited, big], held=held | dict.fromkeys(own, edited.key))
    d = plan_pending(s, plan, edits={edited.key})[big.key]
    assert d.job_plan is None and "kept for the edit" not in d.reason, d.reason


def test_a_higher_priority_job_is_placed_before_lower_ones() -> None:
    """Two OPT-175B copies fit the paper's cluster, four do not: the high-priority one
    must be among those placed, whatever the names' order (planned jointly, the first
    names were)."""
    # (8 sequences a step, 8 micro-batches: a plan's stages are as many as its memory needs;
    # with 256 the model spreads one copy over 20 servers to hide the links' latency, and
    # the one left after the high one is planned alone does not fit the rest)
    opt = replace(paper_jobs()[0], global_batch_size=8)
    jobs = [
        entry(replace(opt, name=n, priority=p))
        for n, p in (("a-low", 0), ("b-low", 0), ("c-low", 0), ("z-high", 10))
    ]
    d = plan_pending(snap(jobs), plan)
    assert d[("ml", "z-high")].job_plan is not None
    assert sum(d[("ml", n)].job_plan is not None for n in ("a-low", "b-low", "c-low")) == 1
    used = [n for v in d.values() for n in v.nodes]
    assert len(used) == len(set(used))


def test_of_equal_priority_the_jobs_submitted_first_are_placed_first() -> None:
    """Two OPT-175B copies fit the paper's cluster, four do not: of equal priority, the two
    created first are placed, whatever the names' order (before, the group was planned
    together and the planner chose: here, the first names, the newest jobs)."""
    opt = paper_jobs()[0]
    jobs = [
        entry(replace(opt, name=n), created=t)
        for n, t in (("a-new", 4000.0), ("b-new", 3000.0), ("y-old", 2000.0), ("z-old", 1000.0))
    ]
    d = plan_pending(snap(jobs), plan)
    assert {k[1] for k, v in d.items() if v.job_plan is not None} == {"y-old", "z-old"}, d
    used = [n for v in d.values() for n in v.nodes]
    assert len(used) == len(set(used))
    # a job that holds servers (re-planned after an edit) still comes before older ones
    held = dict.fromkeys(d[("ml", "z-old")].nodes, ("ml", "a-new"))
    again = plan_pending(snap(jobs, held=held), plan)
    assert again[("ml", "a-new")].job_plan is not None, again[("ml", "a-new")].reason


def test_an_entry_reads_its_creation_time_and_a_manifest_not_applied_is_the_newest() -> None:
    from hulk_operator.entries import object_entry

    body: dict[str, Any] = {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": "j", "creationTimestamp": "2026-11-24T20:00:01Z"},
        "spec": {"model": {"preset": "bert-large"}},
    }
    older = object_entry(body)
    assert older.created == 1795550401.0
    body["metadata"] = {"name": "j"}
    assert object_entry(body).created > older.created  # (infinity)


def test_a_higher_priority_job_gets_the_plan_it_would_get_alone() -> None:
    """Jobs of different priorities were planned together: the servers were shared, and
    the higher one could get the slower plan (a user trial: priority 100 on 1 server at
    796 s, priority 0 on 2 at 658 s). Here, three servers of Beijing free: before, they
    were shared, and the high one got the slower plan."""
    kept = set(
        sorted(n for n, i in nodes().items() if i.server and i.server.region == "beijing")[:3]
    )
    ns = {n: i if n in kept else replace(i, unschedulable=True) for n, i in nodes().items()}
    t5 = next(j for j in paper_jobs() if j.name == "t5-11b")  # (GPT2-XL now takes one)
    high = entry(replace(t5, name="a-high", priority=100))
    low = entry(replace(t5, name="b-low"))
    alone = plan_pending(Snapshot(ns, Latencies(), {high.key: high}, {}), plan)[high.key]
    assert alone.job_plan is not None and alone.nodes == kept  # (it uses all three)
    d = plan_pending(Snapshot(ns, Latencies(), {high.key: high, low.key: low}, {}), plan)
    got = d[high.key].job_plan
    assert got is not None and d[high.key].nodes == alone.nodes
    assert got.predicted_iteration_seconds == alone.job_plan.predicted_iteration_seconds
    assert d[low.key].job_plan is None, d[low.key].reason  # nothing left: it waits


def test_of_equal_priority_the_group_allowed_fewer_servers_is_planned_first() -> None:
    """A job free to go anywhere (its name first) took the one server of the region a job of
    the same priority was limited to, and that job waited: now the group its constraints
    allow fewer servers is planned first, and both are placed (as ``hulk plan`` does)."""
    kept = ("london-33", "new-delhi-35")  # the others cordoned
    ns = {n: i if n in kept else replace(i, unschedulable=True) for n, i in nodes().items()}
    bert = next(j for j in paper_jobs() if j.name == "bert-large")
    free = entry(replace(bert, name="a-free"))
    limited = entry(replace(bert, name="b-limited"), allowed_regions=("new-delhi",))
    alone = plan_pending(Snapshot(ns, Latencies(), {free.key: free}, {}), plan)
    assert alone[free.key].nodes == {"new-delhi-35"}  # (it would take it)
    both = {e.key: e for e in (free, limited)}
    d = plan_pending(Snapshot(ns, Latencies(), both, {}), plan)
    assert d[limited.key].nodes == {"new-delhi-35"}, d[limited.key].reason
    assert d[free.key].nodes == {"london-33"}, d[free.key].reason


def test_an_older_job_is_not_passed_over_by_a_newer_one_limited_to_fewer_servers() -> None:
    """Of equal priority, the group allowed fewer servers is planned first, but not to take
    the one server an older job waits for (a user trial: a newer job limited to [paris]
    took paris-40 while an older [berlin, paris] one waited). Where both can be placed, the
    narrower group still goes first."""
    ns = {n: i if n == "paris-40" else replace(i, unschedulable=True) for n, i in nodes().items()}
    bert = next(j for j in paper_jobs() if j.name == "bert-large")
    old = entry(replace(bert, name="z-old"), "tb", allowed_regions=("berlin", "paris"), created=1.0)
    new = entry(replace(bert, name="a-new"), "tc", allowed_regions=("paris",), created=2.0)
    d = plan_pending(Snapshot(ns, Latencies(), {old.key: old, new.key: new}, {}), plan)
    assert d[old.key].nodes == {"paris-40"}, d[old.key].reason
    assert d[new.key].job_plan is None
    # the free job older than the limited one: both placed, the limited one on its region
    kept = ("london-33", "new-delhi-35")
    ns = {n: i if n in kept else replace(i, unschedulable=True) for n, i in nodes().items()}
    free = entry(replace(bert, name="a-free"), created=1.0)
    limited = entry(replace(bert, name="b-limited"), allowed_regions=("new-delhi",), created=2.0)
    d = plan_pending(Snapshot(ns, Latencies(), {free.key: free, limited.key: limited}, {}), plan)
    assert d[limited.key].nodes == {"new-delhi-35"} and d[free.key].nodes == {"london-33"}


def test_allowed_regions_and_same_names_in_two_namespaces() -> None:
    bert = paper_jobs()[3]
    region = nodes()["beijing-0"].server.region  # type: ignore[union-attr]
    a = entry(bert, "a", allowed_regions=(region,))
    b = entry(bert, "b")
    decisions = plan_pending(snap([a, b]), plan)
    da, db = decisions[a.key], decisions[b.key]
    assert da.job_plan and db.job_plan
    assert da.job_plan.name == db.job_plan.name == "bert-large"
    assert all(nodes()[n].server.region == region for n in da.job_plan.nodes)  # type: ignore[union-attr]
    assert not set(da.job_plan.nodes) & set(db.job_plan.nodes)


def test_the_templates_node_selector_joins_the_jobs_constraints() -> None:
    from hulk_operator.entries import job_entry

    def make(spec_sel: dict[str, str] | None, tmpl_sel: dict[str, str]) -> JobEntry:
        spec: dict[str, Any] = {
            "model": {"preset": "bert-large"},
            "template": {"spec": {"containers": [{"name": "c"}], "nodeSelector": tmpl_sel}},
        }
        if spec_sel:
            spec["nodeSelector"] = spec_sel
        body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "spec": spec}
        return job_entry("ml", "j", "u", body, {"generation": 1}, spec, {})

    e = make({"gpu": "a100"}, {"zone": "a", "kubernetes.io/hostname": "x"})  # a pin too
    assert e.job is not None
    assert e.node_selector == (("gpu", "a100"), ("kubernetes.io/hostname", "x"), ("zone", "a"))
    assert e.selector_from == "spec.nodeSelector and spec.template.spec.nodeSelector"
    e = make(None, {"gpu": "h100"})
    assert e.selector_from == "spec.template.spec.nodeSelector"
    d = plan_pending(snap([e]), plan)[e.key]
    assert d.reason == "spec.template.spec.nodeSelector gpu=h100 matches no node (no node has gpu)"
    e = make({"gpu": "a100"}, {"gpu": "h100"})
    assert e.job is None and e.error is not None
    assert e.error.startswith("spec.template.spec.nodeSelector: gpu=h100 contradicts")


def test_plan_pending_passes_its_seed_to_the_planner() -> None:
    seeds: list[int] = []

    def recording(*args: Any, **kw: Any) -> Plan:
        seeds.append(kw["seed"])
        return plan(*args, **kw)

    bert = entry(paper_jobs()[3])
    assert plan_pending(snap([bert]), recording)[bert.key].job_plan is not None
    assert plan_pending(snap([bert]), recording, seed=7)[bert.key].job_plan is not None
    assert seeds == [0, 7]


def test_a_stage_pod_that_does_not_fit_beside_other_pods_is_not_planned_there() -> None:
    bert = paper_jobs()[3]
    paris = sorted(n for n, i in nodes().items() if i.server and i.server.region == "paris")
    room = {n: nodes()[n].allocatable for n in paris}
    cpu = min(r.cpu for r in room.values())
    e = entry(bert, allowed_regions=("paris",), requests=Resources(0, cpu, 0.0))
    s = snap([e])
    assert [i.name for i in s.free(e)] == paris
    tight = min(paris, key=lambda n: room[n].cpu)
    s.used = {tight: Resources(0, 1.0, 0.0)}  # another pod takes a core of the smallest
    assert [i.name for i in s.free(e)] == [n for n in paris if n != tight]
    # one no node holds even with nothing else on it: told as fitting nowhere (Planned's
    # FitsNowhere: change the job), not as a job that waits (a user trial)
    big = entry(bert, allowed_regions=("paris",), requests=Resources(0, cpu, 1e15))
    d = plan_pending(snap([big]), plan)[big.key]
    assert d.job_plan is None and d.reason == (
        f"fits nowhere: the stage pods' requests (cpu {cpu:g}, memory 9.31e+05 GiB) fit on "
        f"none of the {len(paris)} node(s) matching the job, even with nothing else on them; "
        "lower the template's requests, or allow more servers (spec.allowedRegions ['paris'])"
    )
    from hulk_operator.plan_step import unplaced_reason

    assert unplaced_reason(d.reason) == "FitsNowhere"


def test_a_job_is_planned_only_where_a_quota_on_services_leaves_its_service() -> None:
    """Its headless Service is created before its stage pods. Before, a namespace at its
    quota of Services got the job planned: the Service was refused, and the job held its
    servers until it gave them back."""
    gpt = entry(paper_jobs()[2])
    full = replace(snap([gpt]), service_quotas={"ml": [("svc", "services", 0.0)]})
    d = plan_pending(full, plan)[gpt.key]
    assert d.job_plan is None and not d.nodes
    assert d.reason.startswith(
        "namespace ml's ResourceQuota svc leaves 0 Service(s) (services), 0 of them for jobs "
        "placed just now (their Services not created yet); each job needs one, "
        "its headless Service"
    ), d.reason
    assert "raise the quota's services, or delete a Service" in d.reason
    # a job whose Service exists (a re-plan) needs no other
    had = replace(full, services=frozenset({gpt.key}))
    assert plan_pending(had, plan)[gpt.key].job_plan is not None
    # another namespace's quota counts only there
    other = replace(full, service_quotas={"team-b": [("svc", "services", 0.0)]})
    assert plan_pending(other, plan)[gpt.key].job_plan is not None


def test_jobs_planned_together_take_no_more_services_than_the_quota_leaves() -> None:
    """Two jobs of one group, one Service left: the higher priority one is placed, the
    other is told and holds no server; so is a job of a later group, and a job of the
    namespace placed earlier whose Service is not created yet counts too."""
    gpt, bert = (entry(j) for j in paper_jobs()[2:4])
    bert = replace(bert, job=replace(bert.job, priority=5))
    one_left = {"ml": [("svc", "count/services", 1.0)]}
    decisions = plan_pending(replace(snap([gpt, bert]), service_quotas=one_left), plan)
    assert decisions[bert.key].job_plan is not None, decisions[bert.key].reason
    told = decisions[gpt.key]
    assert told.job_plan is None and not told.nodes
    assert "leaves 1 Service(s) (count/services), 1 of them for jobs placed just now" in (
        told.reason
    )
    # in two groups (other allowed regions): the later group's job is told before planning
    apart = replace(gpt, allowed_regions=("berlin", "paris"))
    decisions = plan_pending(replace(snap([apart, bert]), service_quotas=one_left), plan)
    placed = [d for d in decisions.values() if d.job_plan is not None]
    assert len(placed) == 1, [d.reason for d in decisions.values()]
    # a job already holding servers, its Service not yet created, takes the one left
    held = {"berlin-30": bert.key}
    view = replace(snap([gpt, replace(bert, plan_nodes=frozenset(held))], held))
    d = plan_pending(replace(view, service_quotas=one_left), plan)[gpt.key]
    assert d.job_plan is None and "1 of them for jobs placed just now" in d.reason, d.reason
    # one cause in other figures once bert's Service is created and counted: one Event
    counted = {"ml": [("svc", "count/services", 0.0)]}  # bert's Service counted
    after = replace(view, services=frozenset({bert.key}), service_quotas=counted)
    later = plan_pending(after, plan)[gpt.key]
    assert same_cause(d.reason, later.reason), (d.reason, later.reason)
    # its Service created: the quota's figure says so, and gpt is not counted twice
    view = replace(view, services=frozenset({bert.key}))
    d = plan_pending(replace(view, service_quotas=one_left), plan)[gpt.key]
    assert d.job_plan is not None, d.reason


def test_latencies_the_planner_refuses_are_told_on_the_jobs_not_raised() -> None:
    """Before, such a round raised, and kopf logged the timer as failed for every pending
    job while their status stayed empty (a trial)."""
    bert = entry(paper_jobs()[3])
    d = plan_pending(snap([bert]), plan, cross_region_ms=2e7)[bert.key]
    assert d.job_plan is None
    assert d.reason.startswith("the cluster's latencies cannot be planned with"), d.reason
    assert "must be at most" in d.reason


def test_the_condition_says_which_cut_pairs_only_old_reports_give() -> None:
    from hulk_operator.config import OperatorConfig
    from hulk_operator.decision import Decision
    from hulk_operator.plan_fields import estimated

    jp = plan(paper_cluster(), paper_jobs()[3:4], max_iterations=20).jobs[0]
    d = Decision(("ml", "b"), jp, None, "", "hulk", estimated=2, unreachable=3, unreachable_stale=1)
    (c,) = estimated([], d, OperatorConfig(), 1)
    assert c["reason"] == "FallbackLatency"
    assert c["message"].endswith(
        "3 pair(s) reported unreachable had no latency (no link, no estimate, 1 of them in "
        "reports older than 600 s (kept apart until a probe measures them))"
    ), c["message"]


def _two_tenants() -> tuple[JobEntry, JobEntry]:
    """Two jobs alike (constraints, template, priority) in namespaces aa and bb."""
    bert = paper_jobs()[3]
    a = entry(replace(bert, name="a"), ns="aa", created=1.0)
    b = entry(replace(bert, name="b"), ns="bb", created=2.0)
    return a, b


def test_jobs_of_namespaces_with_other_limitranges_are_offered_each_their_own_servers() -> None:
    """Jobs alike in namespaces with other LimitRanges were one group of a round, each
    offered the servers as the first namespace's LimitRanges see them (a review): bb's
    maximum of 4 GPUs a pod was broken (16-GPU pods, refused), aa's capped bb's job, and
    aa's LimitRange that allows no GPU left bb's job no server at all."""
    from hulk_operator.plan_fields import plan_gpus

    a, b = _two_tenants()
    limits = {"bb": [("lr", 4.0)]}
    d = plan_pending(replace(snap([a, b]), gpu_limits=limits), plan)
    assert d[b.key].job_plan is not None, d[b.key].reason
    assert max(plan_gpus(d[b.key]).values()) <= 4, plan_gpus(d[b.key])
    assert max(plan_gpus(d[a.key]).values()) > 4, plan_gpus(d[a.key])
    limits = {"aa": [("lr", 4.0)]}
    d = plan_pending(replace(snap([a, b]), gpu_limits=limits), plan)
    assert max(plan_gpus(d[b.key]).values()) > 4, plan_gpus(d[b.key])
    assert max(plan_gpus(d[a.key]).values()) <= 4, plan_gpus(d[a.key])
    d = plan_pending(replace(snap([a, b]), gpu_limits={"aa": [("lr0", 0.0)]}), plan)
    assert d[a.key].job_plan is None  # (its LimitRange allows no GPU)
    assert d[b.key].job_plan is not None, d[b.key].reason
    # bounds that change no server's offer keep the jobs one group (in first-come order)
    largest = max(i.server.gpus for i in nodes().values() if i.server)
    loose = replace(
        snap([a, b]), gpu_limits={"bb": [("lr", float(largest))]}, gpu_minimums={"bb": [("m", 1.0)]}
    )
    assert loose.offer_key(a) == loose.offer_key(b)
    tight = replace(snap([a, b]), gpu_limits={"bb": [("lr", float(largest - 1))]})
    assert tight.offer_key(a) != tight.offer_key(b)


def test_a_jobs_init_container_gpus_hold_beside_a_job_without_one() -> None:
    """Job b's init container asks 12 GPUs and only smaller servers are free: alone it is
    not planned; beside a job alike without one it was planned on the other's view of the
    free servers, where its pods would wait unschedulable (a review)."""
    info = nodes()
    held = {n: ("x", "y") for n, i in info.items() if i.server and i.server.gpus >= 12}
    bert = paper_jobs()[3]
    a = entry(replace(bert, name="a"), created=1.0)
    b = entry(replace(bert, name="b"), created=2.0, init_gpus=("warmup", 12))
    d = plan_pending(snap([a, b], held), plan)
    assert d[a.key].job_plan is not None
    assert d[b.key].job_plan is None, {n: info[n].server for n in d[b.key].nodes}


def test_a_job_no_set_of_servers_holds_at_the_gpus_its_pods_get_fits_nowhere() -> None:
    """OPT-175B whose template asks 1 GPU a stage pod, or whose namespace allows 1 a pod:
    the whole cluster, all free, offers it 1,087 GiB of the 2,684 it needs. It was told to
    wait (Unschedulable), as its servers' whole GPU memory was counted (a review)."""
    from hulk_operator.plan_step import unplaced_reason

    opt = paper_jobs()[0]
    asks_one = entry(opt, requests=Resources(1, 0.0, 0.0, ()))
    d = plan_pending(snap([asks_one]), plan)[asks_one.key]
    assert d.job_plan is None and unplaced_reason(d.reason) == "FitsNowhere", d.reason
    assert "at the GPUs their stage pods get (the template asks 1 nvidia.com/gpu" in d.reason
    assert "(give each stage pod more GPUs, " in d.reason, d.reason
    capped = entry(opt)
    d = plan_pending(replace(snap([capped]), gpu_limits={"ml": [("lr", 1.0)]}), plan)[capped.key]
    assert d.job_plan is None and unplaced_reason(d.reason) == "FitsNowhere", d.reason
    assert "(LimitRange lr allows at most 1 nvidia.com/gpu a pod)" in d.reason, d.reason
    # a template asking more than the LimitRange allows is told that, not to ask more
    asks_eight = entry(opt, requests=Resources(8, 0.0, 0.0, ()))
    d = plan_pending(replace(snap([asks_eight]), gpu_limits={"ml": [("lr", 2.0)]}), plan)
    reason = d[asks_eight.key].reason
    assert "give each stage pod more GPUs" not in reason and "LimitRange lr" in reason, reason
    # the same job on 8 GPUs a pod fits: not told so
    eight = entry(opt, requests=Resources(8, 0.0, 0.0, ()))
    assert plan_pending(snap([eight]), plan)[eight.key].job_plan is not None


def test_a_job_name_with_a_dot_is_planned_beside_the_names_it_looks_like() -> None:
    """Job names may hold dots: ``bert.team-a`` in namespace x took the planner name of
    team-a's ``bert`` (qualified as two namespaces use ``bert``), one was dropped, and
    every round failed with a KeyError: no pending job of the cluster was placed (a
    review). The planner's names are one to one now."""
    from hulk_operator.rounds import planner_names

    bert = paper_jobs()[3]
    jobs = [
        entry(replace(bert, name="bert.team-a"), ns="x"),
        entry(replace(bert, name="bert"), ns="team-a"),
        entry(replace(bert, name="bert"), ns="team-b"),
    ]
    names = planner_names(jobs)
    assert sorted(names.values()) == sorted(e.key for e in jobs)
    assert names["bert.team-a.x"] == ("x", "bert.team-a")
    d = plan_pending(snap(jobs), plan)
    assert set(d) == {e.key for e in jobs}
    assert sum(v.job_plan is not None for v in d.values()) >= 2
    # a qualified name past 253 characters is cut, marked with a digest (it failed every
    # round: a review)
    long = [entry(replace(bert, name="b" * 250), ns=ns) for ns in ("team-a", "team-b")]
    names = planner_names(long)
    assert len(names) == 2 and all(len(n) <= 253 for n in names), [len(n) for n in names]
    d = plan_pending(snap(long), plan)
    assert set(d) == {e.key for e in long}
    # no clash: the names as they are
    assert planner_names([jobs[0], jobs[1]]) == {"bert.team-a": ("x", "bert.team-a"),
                                                 "bert": ("team-a", "bert")}  # fmt: skip
