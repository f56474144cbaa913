"""Laying a job over a set of servers (order, replicas, layer balance) and repairing a
running job after it loses a server."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import (
    LAYER_ACTIVATION_BYTES,
    LAYER_STATE_BYTES,
    cluster,
    server,
    tiny_job,
    usable_gib,
)

from hulk_planner import layout
from hulk_planner.api import plan
from hulk_planner.cost import CostModel, micro_batches
from hulk_planner.datasets import paper_cluster
from hulk_planner.generate import random_cluster
from hulk_planner.layout import (
    _balance,
    _candidates,
    _links_floor,
    _may_fit,
    _may_fit_servers,
    _step_floor,
    balance_layers,
    layout_job,
    linked_order,
    make_job_plan,
    order_servers,
    repair_job,
)
from hulk_planner.model import Cluster, Job, ModelSpec, Server
from hulk_planner.presets import preset, preset_jobs, preset_model


def _linked(names: str, links: list[tuple[str, str]]) -> CostModel:
    return CostModel(cluster([server(n) for n in names], [(a, b, 1.0) for a, b in links]))


def test_linked_order_keeps_the_order_where_links_allow_and_mends_it_where_not() -> None:
    cost = _linked("abcd", [("a", "b"), ("b", "c"), ("c", "d"), ("a", "c")])
    net = cost.net

    def order(names: str, **kw: bool) -> str:
        return "".join(net.names[i] for i in linked_order(net, net.ids(list(names)), **kw))

    assert order("abcd") == "abcd"  # every consecutive pair linked: unchanged
    # a-c-b-d needs b-d, which has no link: mended into a chain of links (d-c-a-b)
    mended = order("acbd")
    assert sorted(mended) == list("abcd")
    assert all(net.reachable(x, y) for x, y in itertools.pairwise(mended)), mended
    cycle = _linked("abcd", [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]).net
    ring = [cycle.names[i] for i in linked_order(cycle, cycle.ids(list("acbd")), ring=True)]
    assert sorted(ring) == list("abcd")
    assert all(cycle.reachable(x, y) for x, y in itertools.pairwise([*ring, ring[0]])), ring
    # a path exists only from d or from a's far end: a-b, a-d, b-c (d-a-b-c)
    star = _linked("abcd", [("a", "b"), ("a", "d"), ("b", "c")]).net
    found = [star.names[i] for i in linked_order(star, star.ids(list("abcd")))]
    assert "".join(found) in ("dabc", "cbad")
    full = CostModel(cluster([server(n) for n in "abc"], [("a", "b", 1.0), ("b", "c", 1.0),
                                                         ("a", "c", 1.0)]))  # fmt: skip
    assert linked_order(full.net, [2, 0, 1]) == [2, 0, 1]  # fully linked: as given


def test_layout_puts_adjacent_stages_on_linked_servers_only() -> None:
    """Four servers, each holding half the job, in a chain a-b-c-d (no other links):
    listed fastest first (a, c, b, d), consecutive stages a-c would be a pair that cannot
    communicate. Before, such pairs were relayed; now the layout follows the links."""
    job = tiny_job("j", layers=4)
    half = usable_gib(2 * LAYER_STATE_BYTES + 4 * LAYER_ACTIVATION_BYTES)
    servers = [
        server(n, memory_gib=half, tflops=t)
        for n, t in zip("acbd", (9.0, 8.0, 7.0, 6.0), strict=True)
    ]
    cost = CostModel(cluster(servers, [("a", "b", 1.0), ("b", "c", 1.0), ("c", "d", 1.0)]))
    jp = layout_job(cost, job, ["a", "b", "c", "d"])
    assert jp is not None and math.isfinite(jp.predicted_iteration_seconds)
    nodes = [st_.nodes[0] for st_ in jp.stages]
    assert len(nodes) > 1 and all(cost.net.reachable(x, y) for x, y in itertools.pairwise(nodes))


# 16 servers of the paper's cluster, 76 of their 120 pairs unlinked (a user trial's cluster)
SPARSE = (
    "berlin-32 london-33 nanjing-10 new-delhi-34 new-delhi-35 new-delhi-36 paris-37 paris-39 "
    "paris-40 quanzhou-15 quanzhou-16 quanzhou-17 rome-41 rome-43 rome-45 tokyo-26"
).split()


def test_a_job_no_chain_of_the_fastest_servers_holds_is_laid_along_the_links() -> None:
    """LLaMA-2 70B on SPARSE: every candidate of the fastest servers broke its chain (a
    stage next to one its server cannot reach), and the job was told "no pipeline over the
    2459 GiB usable on the 16 server(s) fits it", while 7-9 of them along the links hold it
    (the search found such a plan). Now the layout tries paths along the links."""
    paper = paper_cluster()
    sparse = paper.without([s.name for s in paper.servers if s.name not in SPARSE])
    job = preset_jobs(["llama2-70b"])[0]
    jp = layout_job(CostModel(sparse), job, SPARSE)
    assert jp is not None and math.isfinite(jp.predicted_iteration_seconds)
    net = CostModel(sparse).net
    nodes = [st_.nodes[0] for st_ in jp.stages]
    assert all(net.reachable(a, b) for a, b in itertools.pairwise(nodes)), nodes
    with mock.patch.object(layout, "PATH_MARGINS", ()):  # (without the paths: nothing)
        assert layout_job(CostModel(sparse), job, SPARSE) is None
    # and the default planner places it (it was left unplaced, and the operator removed a
    # running job's pods on a re-plan over these servers)
    result = plan(sparse, [job], max_iterations=200)
    assert [jp.name for jp in result.jobs] == ["llama2-70b"]


def test_linked_path_follows_the_links_to_the_room_asked() -> None:
    """A star a, b, c around h, and d beyond c: no path visits all five (a and b are both
    ends), a path of four does (a or b, h, c, d)."""
    servers = [server(n, f"R{n}") for n in "abhcd"]
    links = [("a", "h", 1.0), ("b", "h", 1.0), ("h", "c", 1.0), ("c", "d", 1.0)]
    net = CostModel(cluster(servers, links)).net
    ids = net.ids(list("abhcd"))
    room = [1.0] * 5
    path = layout.linked_path(net, ids, room, 4.0)
    assert path is not None and len(path) == 4 and len(set(path)) == 4
    names = [net.names[i] for i in path]
    assert all(net.reachable(a, b) for a, b in itertools.pairwise(names)), names
    assert layout.linked_path(net, ids, room, 5.0) is None  # (no path holds them all)
    assert layout.linked_path(net, ids, room, 1.0) is not None
    one = layout.linked_path(net, ids, [1.0, 1.0, 1.0, 1.0, 9.0], 9.0)
    assert one is not None and [net.names[i] for i in one] == ["d"]


def test_order_servers_follows_regions_fastest_first() -> None:
    servers = [
        server("x-slow", "X", tflops=2.5),
        server("z-0", "Z"),
        server("y-0", "Y"),
        server("x-fast", "X", tflops=10.0),
    ]
    c = cluster(
        servers,
        [
            ("x-slow", "x-fast", 1.0),
            ("x-slow", "y-0", 10.0),
            ("x-fast", "y-0", 10.0),
            ("y-0", "z-0", 10.0),
            ("x-slow", "z-0", 20.0),
            ("x-fast", "z-0", 20.0),
        ],
    )
    order = order_servers(CostModel(c), ["z-0", "x-slow", "y-0", "x-fast"])
    assert order in (["x-fast", "x-slow", "y-0", "z-0"], ["z-0", "y-0", "x-fast", "x-slow"])


def test_balance_gives_layers_in_proportion_to_speed() -> None:
    c = cluster([server("fast", tflops=7.5), server("slow")], [("fast", "slow", 1.0)])
    job = tiny_job(layers=8)
    # 3x faster: 6 and 2 layers finish at the same time
    assert balance_layers(CostModel(c), job, [["fast"], ["slow"]], 8) == [6, 2]


def test_balance_never_hands_out_more_layers_than_the_model_has() -> None:
    # Regression: the start below the ideal split floors every stage at one layer, which
    # overshot (3 + 1 + 1 + 1 + 1 = 7 layers of 5) when one stage was far faster.
    servers = [server("fast", gpus=8, tflops=312.0)] + [server(f"s{i}") for i in range(4)]
    c = cluster(servers)
    job = tiny_job(layers=5)
    counts = balance_layers(CostModel(c), job, [[s.name] for s in servers], 8)
    assert counts == [1, 1, 1, 1, 1]  # five stages, five layers: one each
    counts = balance_layers(CostModel(c), tiny_job(layers=6), [[s.name] for s in servers], 8)
    assert counts == [2, 1, 1, 1, 1]  # the spare layer goes to the fast server


def test_balance_respects_memory_and_reports_none_when_it_cannot_fit() -> None:
    job = tiny_job(layers=4)
    one_layer = LAYER_STATE_BYTES + 2 * LAYER_ACTIVATION_BYTES  # first stage: 2 in flight
    tight = usable_gib(one_layer * 1.5)  # holds one layer of the first stage
    c = cluster([server("fast", memory_gib=tight, tflops=25.0), server("slow")])
    counts = balance_layers(CostModel(c), job, [["fast"], ["slow"]], 8)
    assert counts == [1, 3]  # speed alone would give the fast server all but one
    tiny = cluster([server("a", memory_gib=tight), server("b", memory_gib=tight)])
    assert balance_layers(CostModel(tiny), job, [["a"], ["b"]], 8) is None
    assert balance_layers(CostModel(tiny), tiny_job(layers=1), [["a"], ["b"]], 8) is None


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_balance_is_the_best_split_within_memory(data: st.DataObject) -> None:
    # Brute force over every cut of L layers into p contiguous stages: the balance
    # minimises the slowest stage's compute time among the splits that fit in memory.
    p = data.draw(st.integers(1, 4))
    layers = data.draw(st.integers(p, 9))
    servers = [
        server(
            f"s{i}",
            gpus=data.draw(st.integers(1, 8)),
            memory_gib=data.draw(st.sampled_from([0.01, 0.02, 0.05, 1.0])),
            tflops=data.draw(st.sampled_from([2.5, 10.0, 100.0, 312.0])),
        )
        for i in range(p)
    ]
    c = cluster(servers)
    model = CostModel(c)
    job = tiny_job(layers=layers)
    stages = [[s.name] for s in servers]
    got = balance_layers(model, job, stages, 8)

    def slowest(counts: list[int]) -> float:
        return max(n / model.flops[i] for i, n in enumerate(counts))

    best = math.inf
    for cuts in itertools.combinations(range(1, layers), p - 1):
        bounds = [0, *cuts, layers]
        counts = [bounds[k + 1] - bounds[k] for k in range(p)]
        if model.breakdown(job, make_job_plan(job, stages, counts)).memory_ok:
            best = min(best, slowest(counts))
    if math.isinf(best):
        assert got is None
    else:
        assert got is not None and sum(got) == layers and min(got) >= 1
        assert model.breakdown(job, make_job_plan(job, stages, got)).memory_ok
        assert slowest(got) <= best * (1 + 1e-9)


def _check_layout(model: CostModel, job: Job, names: list[str]) -> None:
    jp = layout_job(model, job, names)
    if jp is None:
        return
    assert set(jp.nodes) <= set(names) and len(set(jp.nodes)) == len(jp.nodes)
    assert jp.stages[0].layers[0] == 0 and jp.stages[-1].layers[1] == job.model.layers
    for a, b in itertools.pairwise(jp.stages):
        assert a.layers[1] == b.layers[0]
    assert len({len(s.nodes) for s in jp.stages}) == 1
    assert jp.micro_batches == micro_batches(job, jp.replicas)
    seconds = model.job_seconds(job, jp)
    assert math.isfinite(seconds) and model.breakdown(job, jp).memory_ok
    assert jp.predicted_iteration_seconds == pytest.approx(seconds, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 14),
    seed=st.integers(0, 10**6),
    regions=st.integers(1, 4),
    name=st.sampled_from(["bert-large", "gpt2-xl", "t5-11b", "llama2-7b", "custom"]),
)
def test_layout_covers_layers_in_order_within_memory(
    n: int, seed: int, regions: int, name: str
) -> None:
    c = random_cluster(n, seed=seed, regions=regions)
    rng = random.Random(seed)
    if name == "custom":
        model_spec = ModelSpec(rng.randint(10**6, 10**9), rng.randint(1, 10), 512, 256)
        job = Job("j", model_spec, rng.randint(1, 32), 1)
    else:
        job = Job("j", preset_model(name), preset(name).global_batch_size, 1)
    names = [s.name for s in c.servers]
    model = CostModel(c)
    _check_layout(model, job, names)
    _check_layout(model, job, rng.sample(names, rng.randint(1, n)))


def test_layout_is_none_when_the_servers_cannot_hold_the_job() -> None:
    job = tiny_job()
    small = usable_gib(LAYER_STATE_BYTES)  # not even one layer with its activations
    c = cluster([server("a", memory_gib=small), server("b", memory_gib=small)])
    assert layout_job(CostModel(c), job, ["a", "b"]) is None
    assert layout_job(CostModel(c), job, []) is None


def test_layout_puts_the_largest_memory_last_when_speed_order_does_not_fit() -> None:
    # Under 1F1B stage 0 keeps 2 micro-batches in flight (1.08e7 B a layer), stage 1 one
    # (7.4e6 B). Fast "a" (2.9e7 B usable) first and small "b" (1.2e7 B) second hold 2 + 1
    # layers of 4; "b" first and "a" last hold 1 + 3. Regression: only speed order was tried.
    c = cluster(
        [
            server("a", memory_gib=usable_gib(2.9e7), tflops=25.0),
            server("b", memory_gib=usable_gib(1.2e7)),
        ],
        [("a", "b", 1.0)],
    )
    jp = layout_job(CostModel(c), tiny_job(), ["a", "b"])
    assert jp is not None
    assert [(st_.nodes, st_.layers) for st_ in jp.stages] == [(("b",), (0, 1)), (("a",), (1, 4))]


def test_layout_prefers_one_fast_server_over_a_pipeline_across_an_ocean() -> None:
    c = cluster([server("a", "r1"), server("b", "r2")], [("a", "b", 200.0)])
    jp = layout_job(CostModel(c), tiny_job(), ["a", "b"])
    assert jp is not None and len(jp.nodes) == 1


# ---- repair ----


def _four_identical() -> tuple[CostModel, Job]:
    links = [(x, y, 1.0) for x, y in itertools.combinations("abcd", 2)]
    c = cluster([server(n) for n in "abcd"], links)
    return CostModel(c), tiny_job()


def test_repair_keeps_healthy_stages_and_replaces_only_the_lost_server() -> None:
    model, job = _four_identical()
    before = make_job_plan(job, [["a"], ["b"]], [2, 2])
    after_loss = CostModel(model.cluster.without(["b"]))
    fixed = repair_job(after_loss, job, before, ["c", "d"])
    assert fixed is not None
    assert fixed.stages[0] == before.stages[0]  # a keeps stage 0 and its layers
    assert fixed.stages[1].layers == (2, 4) and fixed.stages[1].nodes[0] in ("c", "d")
    # identical servers and links: the repaired step takes as long as before
    assert fixed.predicted_iteration_seconds == pytest.approx(model.job_seconds(job, before))


def test_repair_replaces_several_servers_lost_at_once() -> None:
    """A region's outage takes several stages' servers together: each is replaced, and the
    repaired plan is scored only once every lost server has its replacement."""
    links = [(x, y, 1.0) for x, y in itertools.combinations("abcdef", 2)]
    model, job = CostModel(cluster([server(n) for n in "abcdef"], links)), tiny_job()
    before = make_job_plan(job, [["a", "b"], ["c", "d"]], [2, 2])
    after_loss = CostModel(model.cluster.without(["b", "c", "d"]))
    assert repair_job(after_loss, job, before, ["e"]) is None  # three lost, one free
    after_loss = CostModel(model.cluster.without(["c", "d"]))
    fixed = repair_job(after_loss, job, before, ["e", "f"])
    assert fixed is not None
    assert fixed.stages[0] == before.stages[0]
    assert sorted(fixed.stages[1].nodes) == ["e", "f"] and fixed.stages[1].layers == (2, 4)
    assert fixed.predicted_iteration_seconds == pytest.approx(model.job_seconds(job, before))


def test_repair_of_a_replica_keeps_the_other_replicas() -> None:
    model, job = _four_identical()
    before = make_job_plan(job, [["a", "b"]], [4])
    fixed = repair_job(CostModel(model.cluster.without(["a"])), job, before, ["c", "d"])
    assert fixed is not None
    assert fixed.stages[0].nodes[1] == "b" and fixed.stages[0].nodes[0] in ("c", "d")


def test_repair_with_nothing_lost_is_the_same_plan() -> None:
    model, job = _four_identical()
    before = make_job_plan(job, [["a"], ["b"]], [3, 1])
    fixed = repair_job(model, job, before, ["c", "d"])
    assert fixed is not None and fixed.stages == before.stages


def test_repair_fails_without_a_free_server() -> None:
    model, job = _four_identical()
    before = make_job_plan(job, [["a"], ["b"]], [2, 2])
    assert repair_job(CostModel(model.cluster.without(["b"])), job, before, []) is None
    # a server of another job is not free
    assert repair_job(CostModel(model.cluster.without(["b"])), job, before, ["a"]) is None


def test_repair_rebalances_layers_when_the_replacement_is_smaller() -> None:
    # Regression: when no replacement could hold the lost stage's layers, every candidate
    # scored inf and the repair gave up before its own rebalancing step.
    job = tiny_job()
    last_stage_one_layer = LAYER_STATE_BYTES + LAYER_ACTIVATION_BYTES
    spare = usable_gib(last_stage_one_layer * 1.3)  # one layer of the last stage, not two
    c = cluster(
        [server("a"), server("b"), server("c", memory_gib=spare)],
        [("a", "b", 1.0), ("a", "c", 1.0), ("b", "c", 1.0)],
    )
    before = make_job_plan(job, [["a"], ["b"]], [2, 2])
    fixed = repair_job(CostModel(c.without(["b"])), job, before, ["c"])
    assert fixed is not None
    assert [st_.nodes for st_ in fixed.stages] == [("a",), ("c",)]
    assert [st_.layers for st_ in fixed.stages] == [(0, 3), (3, 4)]
    assert math.isfinite(fixed.predicted_iteration_seconds)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60))
def test_layout_is_the_same_without_the_plain_python_path(seed: int, n: int) -> None:
    """Clusters above ``topology.ROWS_MAX_SERVERS`` are scored by numpy alone: the layout of
    any set must not depend on which path scored it."""
    rng = random.Random(seed)
    c = random_cluster(max(n, 2), seed=seed, regions=rng.randint(1, 5))
    name = rng.choice(("gpt2-xl", "bert-large", "t5-11b", "llama2-7b"))
    job = Job(name, preset_model(name), preset(name).global_batch_size, 1)
    names = rng.sample([s.name for s in c.servers], rng.randint(1, len(c.servers)))
    fast = CostModel(c)
    numpy_only = CostModel(c)
    numpy_only.net.rows = None
    a, b = layout_job(fast, job, names), layout_job(numpy_only, job, names)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a == b


def test_a_small_job_runs_on_its_fastest_server_alone() -> None:
    """Three servers behind slow links: a pipeline pays the transfers and replicas the
    gradient all-reduce, so the job runs fastest on the fast server alone (without that
    candidate a set of three could only use two or three of its servers)."""
    c = cluster(
        [server("fast", tflops=10.0), server("slow-1"), server("slow-2")],
        [
            ("fast", "slow-1", 80.0, 0.1),
            ("fast", "slow-2", 80.0, 0.1),
            ("slow-1", "slow-2", 80.0, 0.1),
        ],
    )
    cost = CostModel(c)
    job = tiny_job(layers=4)
    jp = layout_job(cost, job, ["slow-1", "fast", "slow-2"])
    assert jp is not None
    assert jp.nodes == ("fast",)
    assert [st.num_layers for st in jp.stages] == [4]
    alone = cost.job_seconds(job, make_job_plan(job, [["fast"]], [4]))
    assert jp.predicted_iteration_seconds == pytest.approx(alone)
    assert layout_job(cost, job, ["slow-1", "slow-2"]).predicted_iteration_seconds > alone


def _case(seed: int, n: int) -> tuple[CostModel, Job, list[str]]:
    rng = random.Random(seed)
    c = random_cluster(max(n, 2), seed=seed, regions=rng.randint(1, 5))
    name = rng.choice(("gpt2-xl", "bert-large", "t5-11b", "llama2-7b", "opt-175b"))
    batch = rng.choice((preset(name).global_batch_size, 64, 8))
    job = Job(name, preset_model(name), batch, rng.choice((1, 2, 4)))
    return CostModel(c), job, rng.sample([s.name for s in c.servers], rng.randint(1, n))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 80))
def test_step_floor_is_below_every_layout_the_model_scores(seed: int, n: int) -> None:
    """The layout skips a candidate whose ``_step_floor`` (or, its stages known,
    ``_links_floor``) is at or above the best step so far and one ``_may_fit`` (or
    ``_may_fit_servers``, of the servers it takes) refuses: the floors must be at or below
    the cost model's step of the candidate as laid out, and a refused candidate must be one
    whose layers do not fit. Every candidate of the set is laid out here as the layout
    does."""
    cost, job, names = _case(seed, n)
    ids = cost.net.ids(order_servers(cost, names))
    flops, capacity = cost.flops_list, cost.capacity_list
    by_speed = sorted(ids, key=lambda i: -flops[i])
    speeds = [flops[i] for i in by_speed]
    rooms = sorted([capacity[i] for i in ids], reverse=True)
    for r, p in _candidates(len(ids), job.model.layers):
        keep = set(by_speed[: r * p])
        chosen = linked_order(cost.net, [i for i in ids if i in keep])
        rows = [chosen[k * r : (k + 1) * r] for k in range(p)]
        m = micro_batches(job, r)
        counts = _balance(cost, job, rows, m)
        if not _may_fit(job, rooms, p, r):
            assert counts is None, (r, p)
        if not _may_fit_servers(job, [capacity[i] for i in chosen], p, r):
            assert counts is None, (r, p)
        if counts is not None:
            t = cost.data_seconds(job, rows, counts, m)
            assert _step_floor(job, cost.net, speeds, p, r) <= t, (r, p)
            if p > 1:  # the second bound, its links known (plain Python, numpy)
                assert _links_floor(job, cost.net, cost.net.rows, speeds, rows, m) <= t, (r, p)
                assert _links_floor(job, cost.net, None, speeds, rows, m) <= t, (r, p)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 80))
def test_the_bounds_change_no_layout(seed: int, n: int) -> None:
    """With the floor at zero and every candidate let through, the layout scores every
    candidate in turn: it must be the same as with the bounds."""
    cost, job, names = _case(seed, n)
    pruned = layout_job(cost, job, names)
    with (
        mock.patch.object(layout, "_step_floor", lambda *_: 0.0),
        mock.patch.object(layout, "_links_floor", lambda *_: 0.0),
        mock.patch.object(layout, "_may_fit", lambda *_: True),
        mock.patch.object(layout, "_may_fit_servers", lambda *_: True),
    ):
        every = layout_job(CostModel(cost.cluster), job, names)  # (no memo of the first)
    assert pruned == every


def _a_region_of_300() -> tuple[Cluster, Job, list[Server]]:
    """A generated 300-server cluster, GPT-2 XL, and the servers of the first's region."""
    c = random_cluster(300, seed=3)
    job = Job("gpt2-xl", preset_model("gpt2-xl"), preset("gpt2-xl").global_batch_size, 1)
    return c, job, [s for s in c.servers if s.region == c.servers[0].region]


def _counted_balance(calls: list[int]) -> Any:
    """``layout._balance`` patched to append to ``calls`` on each call (each candidate
    balanced)."""
    real = layout._balance

    def counted(*args: object) -> list[int] | None:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    return mock.patch.object(layout, "_balance", counted)


def test_the_bounds_skip_candidates_on_a_region_of_a_large_cluster() -> None:
    """The point of the bounds: on a region of a generated 300-server cluster, fewer
    candidates are balanced than without them, and the layout is the same."""
    c, job, mine = _a_region_of_300()
    names = [s.name for s in mine]
    calls: list[int] = []
    with _counted_balance(calls):
        pruned = layout_job(CostModel(c), job, names)
        bounded = len(calls)
        with (
            mock.patch.object(layout, "_step_floor", lambda *_: 0.0),
            mock.patch.object(layout, "_may_fit", lambda *_: True),
            mock.patch.object(layout, "_may_fit_servers", lambda *_: True),
        ):
            every = layout_job(CostModel(c), job, names)
    assert pruned == every
    assert bounded < len(calls) - bounded, (bounded, len(calls) - bounded)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 60))
def test_the_memo_changes_no_layout(seed: int, n: int) -> None:
    """Sets laid out one after another on one cost model, as a search does (each a server
    or two from the last; the same job name at another micro-batch size among them), must
    get the layouts a fresh cost model gives each: the memo serves only candidates of the
    same job, servers, order and replicas."""
    cost, job, names = _case(seed, n)
    rng = random.Random(seed)
    every = [s.name for s in cost.cluster.servers]
    other = Job(job.name, job.model, job.global_batch_size, job.micro_batch_size * 2)
    current = set(names)
    for _ in range(12):
        outside = [x for x in every if x not in current]
        if outside and (len(current) < 2 or rng.random() < 0.5):
            current.add(rng.choice(outside))
        else:
            current.discard(rng.choice(sorted(current)))
        for j in (job, other):
            assert layout_job(cost, j, sorted(current)) == layout_job(
                CostModel(cost.cluster), j, sorted(current)
            )


def test_the_memo_serves_a_set_grown_by_a_slow_server() -> None:
    """The point of the memo: a set and the same set with one more server, slower than all
    of its own, share most candidates (the fastest servers, in the same order), so the
    second layout balances fewer candidates than on a cost model that never saw the first."""
    c, job, mine = _a_region_of_300()
    mine.sort(key=lambda s: -s.flops)
    cost = CostModel(c)
    calls: list[int] = []
    with _counted_balance(calls):
        cold = layout_job(CostModel(c), job, [s.name for s in mine])
        alone = len(calls)
        layout_job(cost, job, [s.name for s in mine[:-1]])
        first = len(calls)
        warm = layout_job(cost, job, [s.name for s in mine])
    assert len(calls) - first < alone, (alone, len(calls) - first)
    assert warm == cold


def test_the_memo_stays_within_its_bound() -> None:
    """The memo holds at most ``MEMO_WORDS`` words (each entry its server ids, its layer
    counts and ``ENTRY_WORDS``), all jobs of a cost model together (it empties when full),
    and layouts stay right across the emptying."""
    c = random_cluster(60, seed=4)
    cost = CostModel(c)
    rng = random.Random(4)
    names = [s.name for s in c.servers]
    jobs = [Job(n, preset_model(n), preset(n).global_batch_size, 1) for n in ("gpt2-xl", "t5-11b")]
    emptied, last = 0, 0
    with mock.patch.object(layout, "MEMO_WORDS", 1000):
        for _ in range(40):
            job, chosen = rng.choice(jobs), rng.sample(names, rng.randint(1, 30))
            assert layout_job(cost, job, chosen) == layout_job(CostModel(c), job, chosen)
            memo = layout._MEMOS[cost]
            held = sum(
                len(key) + (0 if value is None else len(value[1])) + layout.ENTRY_WORDS
                for scored in memo.jobs.values()
                for (key, _), value in scored.items()
            )
            assert held <= 1000
            assert held == 1000 - memo.room
            emptied, last = emptied + (held < last), held
    assert emptied >= 2  # (the bound was reached, and layouts went on right)
