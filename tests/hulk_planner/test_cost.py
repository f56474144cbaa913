"""The cost model on tiny hand-built clusters, every expected value worked out by hand from
docs/cost-model.md (numbers in ``planner_helpers``: 1e12 FLOP/s servers, a 4-layer job whose
layer takes 1.5e-4 s per micro-batch, 2e5-byte activations, 8 Gb/s = 1e9 B/s links)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import (
    LAYER_ACTIVATION_BYTES,
    LAYER_SECONDS,
    LAYER_STATE_BYTES,
    MESSAGE_BYTES,
    cluster,
    server,
    tiny_job,
    usable_gib,
)

from hulk_planner import cost as cm
from hulk_planner.cost import CostModel, micro_batches, ring_time, validate_plan
from hulk_planner.errors import InvalidRequest
from hulk_planner.generate import random_cluster
from hulk_planner.layout import make_job_plan
from hulk_planner.model import Cluster, Job, JobPlan, Link, ModelSpec, Plan, Server, Stage
from hulk_planner.topology import Network

REL = 1e-9


def data_plan(job: Job, stages: list[list[str]], counts: list[int]) -> JobPlan:
    return make_job_plan(job, stages, counts)


def two_servers(latency_ms: float = 10.0, gbps: float = 8.0) -> Cluster:
    return cluster([server("a"), server("b")], [("a", "b", latency_ms, gbps)])


def test_constants_are_the_documented_ones() -> None:
    assert cm.EFFICIENCY == 0.40
    assert cm.FLOPS_PER_PARAM_TOKEN == 6.0
    assert cm.BYTES_PER_PARAM == 16.0
    assert cm.ACTIVATION_FACTOR == 34.0
    assert cm.BYTES_PER_VALUE == 2.0
    assert cm.MEMORY_USABLE == 0.90


def test_micro_batches_per_replica() -> None:
    job = tiny_job(global_batch=8, micro_batch=1)
    assert [micro_batches(job, r) for r in (1, 2, 3, 8, 9)] == [8, 4, 3, 1, 1]
    assert micro_batches(tiny_job(global_batch=10, micro_batch=4), 1) == 3  # ceil(10 / 4)


def test_single_server_step_is_m_times_the_compute() -> None:
    c = cluster([server("a")])
    job = tiny_job()
    seconds = CostModel(c).job_seconds(job, data_plan(job, [["a"]], [4]))
    # fill: 4 layers * 1.5e-4; then 7 more micro-batches at the same pace
    assert seconds == pytest.approx(8 * 4 * LAYER_SECONDS, rel=REL)


def test_compute_scales_with_gpus_and_tflops() -> None:
    job = tiny_job()
    for gpus, tflops in [(2, 2.5), (1, 10.0), (4, 5.0)]:
        c = cluster([server("a", gpus=gpus, tflops=tflops)])
        speed = gpus * tflops / 2.5  # in units of 1e12 FLOP/s
        seconds = CostModel(c).job_seconds(job, data_plan(job, [["a"]], [4]))
        assert seconds == pytest.approx(8 * 4 * LAYER_SECONDS / speed, rel=REL)


def test_two_stage_pipeline_fill_drain_then_pace_of_slowest_stage() -> None:
    c = two_servers(latency_ms=10.0, gbps=8.0)
    job = tiny_job()
    bd = CostModel(c).breakdown(job, data_plan(job, [["a"], ["b"]], [2, 2]))
    stage = 2 * LAYER_SECONDS  # 3e-4
    transfer = MESSAGE_BYTES / 1e9  # 2e-4 < stage: the stages set the pace
    link = 10e-3 + transfer
    # 1F1B: stage 0 keeps 2 micro-batches in flight, so the last 8 - 2 wait for their round
    # trip: ceil(6 / 2) loops of both stages and the link twice, each 2 * link over the pace
    wait = 3 * ((2 * stage + 2 * link) - 2 * stage)
    expected = 2 * stage + 2 * link + (8 - 1) * stage + wait
    assert bd.total == pytest.approx(expected, rel=REL)
    assert bd.pipeline_comm == pytest.approx(2 * link, rel=REL)
    assert bd.data_parallel == 0.0 and bd.memory_ok


def test_a_slow_link_sets_the_pipeline_pace() -> None:
    c = two_servers(latency_ms=10.0, gbps=0.8)  # 1e8 B/s: 2e-3 s a message
    job = tiny_job()
    seconds = CostModel(c).job_seconds(job, data_plan(job, [["a"], ["b"]], [2, 2]))
    transfer = MESSAGE_BYTES / 1e8
    loop = 2 * (2 * LAYER_SECONDS) + 2 * (10e-3 + transfer)  # the round trip of stage 0
    wait = 3 * (loop - 2 * transfer)  # ceil((8 - 2) / 2) loops, each beyond 2 paces
    expected = 2 * (2 * LAYER_SECONDS) + 2 * (10e-3 + transfer) + 7 * transfer + wait
    assert seconds == pytest.approx(expected, rel=REL)


def test_the_1f1b_window_waits_only_where_a_round_trip_outlasts_the_micro_batches() -> None:
    """Stage k holds ``p - k`` micro-batches in flight: on a 3-stage pipeline the loops
    from stage 1 (over 1..2, 2 micro-batches) and from stage 0 (over 0..1, 2; over 0..2, 3)
    may each bind; the longest chain counts."""
    t, link = [1.0, 1.0, 1.0], [0.5, 4.0]
    # from 1: ceil((8 - 2) / 2) = 3 loops of (1 + 1 + 2 * 4) - 2 * 1 = 8 -> 24
    # from 0: over 0..2 ceil((8 - 3) / 3) = 2 loops of (3 + 2 * 4.5) - 3 = 9 -> 18; over 0..1
    # ceil(5 / 2) = 3 loops of (1 + 1 + 2 * 0.5) - 2 = 1 -> 3
    assert cm.window_wait(t, link, 8, 1.0) == pytest.approx(24.0)
    # the slow link first: from 0 over 0..1, 3 loops of (1 + 1 + 2 * 9) - 2 = 18 -> 54 (over
    # 0..2: 2 of 19 -> 38; from 1: 3 of 1 -> 3)
    assert cm.window_wait(t, [9.0, 0.5], 8, 1.0) == pytest.approx(54.0)
    # enough room: fast links, or m within the window (every micro-batch in flight at once)
    assert cm.window_wait(t, [0.0, 0.0], 8, 1.0) == 0.0
    assert cm.window_wait(t, link, 3, 1.0) == pytest.approx(8.0)  # from 1 only: 1 loop of 8
    assert cm.window_wait(t, link, 2, 1.0) == 0.0
    assert cm.window_wait([2.0], [], 8, 2.0) == 0.0


def test_unequal_stages_pace_is_the_slowest_stage() -> None:
    c = two_servers(latency_ms=0.0, gbps=8000.0)  # a nearly free link
    job = tiny_job()
    seconds = CostModel(c).job_seconds(job, data_plan(job, [["a"], ["b"]], [3, 1]))
    transfer = MESSAGE_BYTES / 1e12
    expected = 4 * LAYER_SECONDS + 2 * transfer + 7 * 3 * LAYER_SECONDS
    assert seconds == pytest.approx(expected, rel=REL)


def test_data_parallel_ring_all_reduce() -> None:
    c = two_servers(latency_ms=10.0, gbps=8.0)
    job = tiny_job()
    bd = CostModel(c).breakdown(job, data_plan(job, [["a", "b"]], [4]))
    m = 4  # ceil(8 / (1 * 2))
    grads = 1e6 * 2  # all 4 layers' 16-bit gradients
    ring = 2 * (2 - 1) * 10e-3 + 2 * (2 - 1) / 2 * grads / 1e9
    assert bd.data_parallel == pytest.approx(ring, rel=REL)
    assert bd.total == pytest.approx(m * 4 * LAYER_SECONDS + ring, rel=REL)


def test_ring_is_paced_by_its_slowest_hop_in_listed_order() -> None:
    # ring a -> b -> c -> a: hops of 1, 2 and 7 ms; the slowest bandwidth 2 Gb/s (b-c)
    c = cluster(
        [server("a"), server("b"), server("c")],
        [("a", "b", 1.0, 8.0), ("b", "c", 2.0, 2.0), ("a", "c", 7.0, 8.0)],
    )
    net = Network(c)
    nbytes = 3e6
    expected = 2 * 2 * 7e-3 + 2 * 2 / 3 * nbytes / (2e9 / 8)
    assert ring_time(net, net.ids(["a", "b", "c"]), nbytes) == pytest.approx(expected, rel=REL)
    assert ring_time(net, net.ids(["a"]), nbytes) == 0.0
    job = tiny_job(global_batch=3)
    seconds = CostModel(c).breakdown(job, data_plan(job, [["a", "b", "c"]], [4]))
    assert seconds.data_parallel == pytest.approx(ring_time(net, net.ids(["a", "b", "c"]), 2e6))


def test_tensor_parallel_stage() -> None:
    c = two_servers(latency_ms=10.0, gbps=8.0)
    job = tiny_job()
    jp = JobPlan("tiny", (Stage((0, 4), ("a", "b"), "tensor"),), micro_batches(job, 1))
    compute = 4 * LAYER_SECONDS / 2  # two servers split each layer
    allreduce = 2 * 1 * 10e-3 + 2 * 1 / 2 * MESSAGE_BYTES / 1e9
    stage = compute + 4 * 4 * allreduce  # four all-reduces per layer
    assert CostModel(c).job_seconds(job, jp) == pytest.approx(8 * stage, rel=REL)


def test_memory_need_and_infeasible_plans_cost_inf() -> None:
    job = tiny_job()
    need = 4 * (LAYER_STATE_BYTES + LAYER_ACTIVATION_BYTES)  # one stage, one micro-batch
    assert cm.memory_need_bytes(job) == pytest.approx(need)
    assert cm.stage_memory(job, 4, 1) == pytest.approx(need)
    assert cm.stage_memory(job, 4, 1, split=2) == pytest.approx(need / 2)
    enough = cluster([server("a", memory_gib=usable_gib(need * 1.001))])
    short = cluster([server("a", memory_gib=usable_gib(need * 0.999))])
    jp = data_plan(job, [["a"]], [4])
    assert math.isfinite(CostModel(enough).job_seconds(job, jp))
    bd = CostModel(short).breakdown(job, jp)
    assert not bd.memory_ok and math.isinf(bd.total)


def test_1f1b_keeps_more_micro_batches_in_flight_in_early_stages() -> None:
    job = tiny_job()
    first = 2 * (LAYER_STATE_BYTES + 2 * LAYER_ACTIVATION_BYTES)  # min(m, p - 0) = 2
    last = 2 * (LAYER_STATE_BYTES + 1 * LAYER_ACTIVATION_BYTES)  # min(m, p - 1) = 1
    small = usable_gib((first + last) / 2)  # holds the last stage, not the first
    c = cluster([server("big"), server("small", memory_gib=small)], [("big", "small", 1.0)])
    model = CostModel(c)
    assert math.isfinite(model.job_seconds(job, data_plan(job, [["big"], ["small"]], [2, 2])))
    assert math.isinf(model.job_seconds(job, data_plan(job, [["small"], ["big"]], [2, 2])))


def test_tensor_split_divides_the_memory_need() -> None:
    job = tiny_job()
    need = cm.stage_memory(job, 4, 1)
    half = usable_gib(need * 0.6)  # one server is too small, two share it
    c = cluster([server("a", memory_gib=half), server("b", memory_gib=half)], [("a", "b", 1.0)])
    tensor = JobPlan("tiny", (Stage((0, 4), ("a", "b"), "tensor"),), 8)
    alone = data_plan(job, [["a"]], [4])
    assert math.isfinite(CostModel(c).job_seconds(job, tensor))
    assert math.isinf(CostModel(c).job_seconds(job, alone))


def test_unreachable_servers_make_a_plan_infeasible() -> None:
    c = cluster([server("a"), server("b", "r2")])  # no link at all
    job = tiny_job()
    assert math.isinf(CostModel(c).job_seconds(job, data_plan(job, [["a"], ["b"]], [2, 2])))
    assert math.isinf(CostModel(c).job_seconds(job, data_plan(job, [["a", "b"]], [4])))
    assert math.isfinite(CostModel(c).job_seconds(job, data_plan(job, [["a"]], [4])))


def test_plan_seconds_and_with_predictions() -> None:
    c = two_servers()
    job, other = tiny_job(), tiny_job("other", layers=2, parameters=500_000)
    plan = Plan("x", (data_plan(job, [["a"]], [4]), data_plan(other, [["b"]], [2])), notes=("n",))
    model = CostModel(c)
    times = model.plan_seconds(plan, [job, other])
    assert times == {
        "tiny": pytest.approx(32 * LAYER_SECONDS),
        "other": pytest.approx(16 * LAYER_SECONDS),
    }
    filled = model.with_predictions(plan, [job, other])
    assert [jp.predicted_iteration_seconds for jp in filled.jobs] == list(times.values())
    assert filled.notes == ("n",) and filled.jobs[0].stages == plan.jobs[0].stages


# ---- validate_plan ----


def _bad(plan_jobs: tuple[JobPlan, ...], c: Cluster, jobs: list[Job], field_part: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_plan(Plan("x", plan_jobs), c, jobs)
    assert field_part in exc.value.field


def test_validate_plan_catches_every_kind_of_mistake() -> None:
    c = cluster([server(n) for n in "abcd"])
    job = tiny_job()
    ok = data_plan(job, [["a", "b"], ["c", "d"]], [2, 2])
    validate_plan(Plan("x", (ok,)), c, [job])
    gap = JobPlan("tiny", (Stage((0, 2), ("a",)), Stage((3, 4), ("b",))), 8)
    _bad((gap,), c, [job], "stages[1].layers")
    short = JobPlan("tiny", (Stage((0, 3), ("a",)),), 8)
    _bad((short,), c, [job], "jobs[tiny].stages")
    twice = JobPlan("tiny", (Stage((0, 2), ("a",)), Stage((2, 4), ("a",))), 8)
    _bad((twice,), c, [job], "stages[1].nodes")
    unknown = JobPlan("tiny", (Stage((0, 4), ("zz",)),), 8)
    _bad((unknown,), c, [job], "stages[0].nodes")
    uneven = JobPlan("tiny", (Stage((0, 2), ("a", "b")), Stage((2, 4), ("c",))), 4)
    _bad((uneven,), c, [job], "stages[1].nodes")
    wrong_m = JobPlan("tiny", (Stage((0, 4), ("a", "b")),), 8)  # 2 replicas: 4 micro-batches
    _bad((wrong_m,), c, [job], "microBatches")
    _bad((data_plan(tiny_job("ghost"), [["a"]], [4]),), c, [job], "jobs[ghost]")
    other = data_plan(tiny_job("other"), [["a"]], [4])
    _bad((data_plan(job, [["a"]], [4]), other), c, [job, tiny_job("other")], "nodes")


# ---- properties ----


def _random_plan(rng: random.Random, c: Cluster, job: Job) -> JobPlan:
    names = [s.name for s in c.servers]
    rng.shuffle(names)
    p = rng.randint(1, min(len(names), job.model.layers))
    r = rng.randint(1, len(names) // p)
    cuts = sorted(rng.sample(range(1, job.model.layers), p - 1))
    bounds = [0, *cuts, job.model.layers]
    stages = [names[k * r : (k + 1) * r] for k in range(p)]
    return data_plan(job, stages, [bounds[k + 1] - bounds[k] for k in range(p)])


def _random_job(rng: random.Random) -> Job:
    model = ModelSpec(rng.randint(10**6, 10**9), rng.randint(1, 12), rng.choice([256, 1024]), 128)
    return Job("j", model, rng.randint(1, 64), 1)


def _scaled(c: Cluster, rng: random.Random, latency: bool) -> Cluster:
    if latency:
        links = tuple(
            Link(lk.a, lk.b, lk.latency_ms * rng.choice([1.0, 1.0, 1.5, 10.0])) for lk in c.links
        )
        return Cluster(c.name, c.servers, links, c.region_links)
    servers = tuple(
        Server(s.name, s.region, s.gpus, s.gpu_memory_gib, s.gpu_tflops * rng.choice([1, 1, 2, 8]))
        for s in c.servers
    )
    return Cluster(c.name, servers, c.links, c.region_links)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 9),
    seed=st.integers(0, 10**6),
    regions=st.integers(1, 3),
    latency=st.booleans(),
)
def test_higher_latency_or_faster_gpus_never_hurt_the_same_plan(
    n: int, seed: int, regions: int, latency: bool
) -> None:
    # Bandwidths are the defaults (random_cluster gives none), so a longer relay cannot
    # bring a wider pipe: raising latency must never lower the step time, and raising
    # TFLOPS must never raise it.
    rng = random.Random(seed)
    c = random_cluster(n, seed=seed, regions=regions)
    job = _random_job(rng)
    jp = _random_plan(rng, c, job)
    before = CostModel(c).job_seconds(job, jp)
    after = CostModel(_scaled(c, rng, latency)).job_seconds(job, jp)
    if latency:
        assert after >= before * (1 - 1e-12) or (math.isinf(before) and math.isinf(after))
    else:
        assert after <= before * (1 + 1e-12) or (math.isinf(before) and math.isinf(after))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 10**6), regions=st.integers(1, 3))
def test_vectorised_data_path_agrees_with_the_general_path(n: int, seed: int, regions: int) -> None:
    rng = random.Random(seed)
    c = random_cluster(n, seed=seed, regions=regions)
    job = _random_job(rng)
    jp = _random_plan(rng, c, job)
    model = CostModel(c)
    fast = model.breakdown(job, jp)
    slow = model._general_breakdown(job, jp)
    assert fast.memory_ok == slow.memory_ok
    if math.isinf(fast.total):
        assert math.isinf(slow.total)
    else:
        assert fast.total == pytest.approx(slow.total, rel=1e-9)
        assert fast.data_parallel == pytest.approx(slow.data_parallel, rel=1e-9)
    grid = np.array([model.net.ids(st_.nodes) for st_ in jp.stages])
    layers = np.array([st_.num_layers for st_ in jp.stages])
    assert model.data_seconds(job, grid, layers, jp.micro_batches) == fast.total


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    p=st.integers(1, 6),
    r=st.integers(1, 5),
    m=st.integers(1, 12),
)
def test_plain_python_path_gives_the_vectorised_paths_numbers(
    seed: int, p: int, r: int, m: int
) -> None:
    """``data_seconds_rows`` (the search's small-grid path) repeats ``_data_breakdown``'s
    formulas in plain Python: the same step time to the last bit, infeasible memory too."""
    rng = random.Random(seed)
    c = random_cluster(p * r + rng.randint(0, 4), seed=seed, regions=rng.randint(1, 4))
    job = _random_job(rng)
    model = CostModel(c)
    ids = rng.sample(range(len(c.servers)), p * r)
    rows = [ids[k * r : (k + 1) * r] for k in range(p)]
    layers = [rng.randint(1, 40) for _ in range(p)]
    vectorised = model._data_breakdown(job, np.array(rows), np.array(layers, dtype=float), m)
    assert model.data_seconds_rows(job, rows, layers, m) == vectorised.total


@pytest.mark.parametrize(
    ("stages", "micro", "field", "said"),
    [
        ([((0, 2), ("a",))], None, "jobs[tiny].stages", "cover layers up to 2, not 4"),
        ([((0, 2), ("a",)), ((3, 4), ("b",))], None, "jobs[tiny].stages[1].layers", "starts at 3"),
        ([((0, 9), ("a",))], None, "jobs[tiny].stages", "up to 9, not 4"),
        ([((0, 4), ("zz",))], None, "jobs[tiny].stages[0].nodes", "unknown server 'zz'"),
        ([((0, 4), ("a",))], 3, "jobs[tiny].microBatches", "give 8"),
    ],
)
def test_scoring_a_plan_that_is_not_the_jobs_raises(
    stages: list, micro: int | None, field: str, said: str
) -> None:
    """Before, the cost model scored 2 of 4 layers as a fast plan, and an unknown server
    was a KeyError."""
    job = tiny_job()
    built = tuple(Stage(layers, nodes) for layers, nodes in stages)
    jp = JobPlan(job.name, built, micro if micro is not None else micro_batches(job, 1))
    with pytest.raises(InvalidRequest) as exc:
        CostModel(two_servers()).job_seconds(job, jp)
    assert exc.value.field == field
    assert said.replace("starts at 3", "starts at layer 3") in str(exc.value)


def test_plan_seconds_names_a_job_not_given() -> None:
    job = tiny_job()
    jp = data_plan(job, [["a"]], [job.model.layers])
    with pytest.raises(InvalidRequest) as exc:
        CostModel(two_servers()).plan_seconds(Plan("p", (jp,)), [])
    assert exc.value.field == "jobs[tiny]" and "give its Job" in str(exc.value)


def test_communicating_pairs_are_the_pipeline_neighbours_and_the_rings() -> None:
    jp = JobPlan("j", (Stage((0, 2), ("a", "b", "e")), Stage((2, 4), ("c", "d", "f"))), 1)
    assert cm.communicating_pairs(jp) == [
        ("a", "b"), ("b", "e"), ("e", "a"),  # stage 0's ring
        ("a", "c"), ("b", "d"), ("e", "f"),  # replica r to replica r
        ("c", "d"), ("d", "f"), ("f", "c"),  # stage 1's ring
    ]  # fmt: skip
    tensor = JobPlan("j", (Stage((0, 2), ("a", "b"), "tensor"), Stage((2, 4), ("c",))), 1)
    assert set(cm.communicating_pairs(tensor)) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert cm.communicating_pairs(JobPlan("j", (Stage((0, 4), ("a",)),), 1)) == []


def test_too_big_writes_small_memories_with_two_figures_not_as_zero() -> None:
    """A server of 0.001 GiB beside bert-large read "one layer needs 0 GiB ... and the
    largest server has 0 GiB usable" (a user trial)."""
    from dataclasses import replace

    from hulk_planner.cost import gib_text, too_big
    from hulk_planner.datasets import paper_cluster, paper_jobs

    bert = next(j for j in paper_jobs() if j.name == "bert-large")
    tiny = replace(paper_cluster().servers[0], gpu_memory_gib=0.001)
    why = too_big(bert, [tiny])
    assert why is not None and " 0 GiB" not in why, why
    assert gib_text(0.0012 * 2**30) == "0.0012 GiB" and gib_text(2684.4 * 2**30) == "2684 GiB"
    assert gib_text(1e-12) == "0 GiB"  # (a difference of equal float sums)


def test_a_tensor_stage_beside_data_stages_of_several_replicas_is_refused() -> None:
    """Two data replicas feeding one tensor group (or one tensor group feeding two): the
    tensor group serves every replica, which the cost model did not charge: on four
    1e12 FLOP/s servers with free links it scored 64 micro-batches of 4 layers (1.5e-4 s a
    layer, 0.0096 s of work per server at best) at 0.0074 s, and examples/train_stage.py
    refuses such a pipeline (a review). A tensor stage with single-node data stages stands."""
    links = [(x, y, 0.0, 1e6) for i, x in enumerate("abcd") for y in "abcd"[i + 1 :]]
    c = cluster([server(n) for n in "abcd"], links)
    cost = cm.CostModel(c)
    job = tiny_job(global_batch=64)
    m = cm.micro_batches(job, 2)
    fed = JobPlan("tiny", (Stage((0, 1), ("a", "b")), Stage((1, 4), ("c", "d"), "tensor")), m)
    feeds = JobPlan("tiny", (Stage((0, 1), ("a", "b"), "tensor"), Stage((1, 4), ("c", "d"))), m)
    for jp, bad in ((fed, 0), (feeds, 1)):
        with pytest.raises(InvalidRequest) as told:
            cost.job_seconds(job, jp)
        assert told.value.field == f"jobs[tiny].stages[{bad}].nodes", told.value
        assert "in a job with a tensor stage" in str(told.value)
        with pytest.raises(InvalidRequest):
            cm.validate_plan(Plan("p", (jp,)), c, [job])
    one = JobPlan(
        "tiny",
        (Stage((0, 1), ("a",)), Stage((1, 4), ("c", "d"), "tensor")),
        cm.micro_batches(job, 1),
    )
    assert math.isfinite(cost.job_seconds(job, one))
