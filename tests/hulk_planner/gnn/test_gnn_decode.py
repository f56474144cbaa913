"""Algorithm 1's decoding: invariants that hold whatever the network says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hulk_planner.cost import CostModel, memory_need_bytes, validate_plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.decode import MEMORY_MARGIN, SHARE_SLACK, assign, decode, softmax
from hulk_planner.layout import layout_job
from hulk_planner.planners.search import greedy_start

CLUSTER = paper_cluster()
COST = CostModel(CLUSTER)
JOBS = paper_jobs(4)
N = len(CLUSTER.servers)


def _held(assignment: dict[str, str], job: str) -> float:
    return sum(COST.capacity[COST.net.index[n]] for n, j in assignment.items() if j == job)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.0, 20.0))
def test_every_job_gets_its_memory(seed: int, scale: float) -> None:
    logits = np.random.default_rng(seed).normal(size=(N, len(JOBS) + 1)) * scale
    for share in ("model", "parameters", None):
        a = assign(COST, JOBS, logits, share=share)  # type: ignore[arg-type]
        assert set(a) <= set(CLUSTER.index)
        assert set(a.values()) <= {j.name for j in JOBS}
        for job in JOBS:
            assert _held(a, job.name) >= memory_need_bytes(job) * MEMORY_MARGIN


@pytest.mark.parametrize("seed", range(5))
def test_every_job_gets_a_feasible_layout(seed: int) -> None:
    """Memory alone is not enough (activations, a stage's smallest server): the decoded
    servers of every job admit a layout."""
    logits = np.random.default_rng(seed).normal(size=(N, len(JOBS) + 1)) * 4
    logits[:, 0] += 3.0  # the network leans towards leaving servers idle
    a = assign(COST, JOBS, logits)
    for job in JOBS:
        servers = [n for n, j in a.items() if j == job.name]
        assert layout_job(COST, job, servers) is not None, job.name


def test_all_idle_logits_still_place_every_job() -> None:
    logits = np.zeros((N, len(JOBS) + 1))
    logits[:, 0] = 50.0
    a = assign(COST, JOBS, logits)
    assert {j.name for j in JOBS} == set(a.values())


def test_confident_logits_are_followed() -> None:
    rng = np.random.default_rng(0)
    want = rng.integers(0, len(JOBS) + 1, size=N)
    want[:16] = 1  # OPT-175B gets plenty
    logits = np.full((N, len(JOBS) + 1), -10.0)
    logits[np.arange(N), want] = 10.0
    a = assign(COST, JOBS, logits, share=None)
    names = [s.name for s in CLUSTER.servers]
    for i, n in enumerate(names):
        if want[i] == 0:
            continue
        job = JOBS[want[i] - 1].name
        # a server moves only to give a job its memory
        if a.get(n) != job:
            assert _held(a, job) >= memory_need_bytes(JOBS[want[i] - 1]) * MEMORY_MARGIN


def test_parameter_share_caps_small_jobs() -> None:
    logits = np.zeros((N, len(JOBS) + 1))
    logits[:, 4] = 10.0  # everyone wants BERT-large
    a = assign(COST, JOBS, logits, share="parameters")
    total = float(COST.capacity.sum())
    params = np.array([j.model.parameters for j in JOBS], dtype=float)
    bert = JOBS[3]
    cap = max(params[3] / params.sum() * total, memory_need_bytes(bert) * MEMORY_MARGIN)
    biggest = float(COST.capacity.max())
    assert _held(a, bert.name) <= SHARE_SLACK * cap + biggest


def test_sticky_servers_stay() -> None:
    """A previous assignment whose every job has a layout (the search's greedy start) is
    kept; one that has none (round robin over the paper's sparse links) is not."""
    logits = np.zeros((N, len(JOBS) + 1))
    previous = greedy_start(COST, JOBS)
    assert all(layout_job(COST, j, [n for n, x in previous.items() if x == j.name]) for j in JOBS)
    a = assign(COST, JOBS, logits, sticky=previous, share=None)
    kept = sum(a.get(n) == j for n, j in previous.items())
    assert kept >= 0.8 * len(previous)


def test_decode_gives_a_valid_plan() -> None:
    logits = np.random.default_rng(1).normal(size=(N, len(JOBS) + 1)) * 3
    start = assign(COST, JOBS, logits)
    plan = decode(COST, JOBS, logits, refine_iterations=0)
    validate_plan(plan, CLUSTER, JOBS)
    assert {jp.name for jp in plan.jobs} == {j.name for j in JOBS}
    for jp in plan.jobs:  # the core's layout keeps (a subset of) the job's servers
        assert all(start[n] == jp.name for n in jp.nodes)
    again = decode(COST, JOBS, logits, refine_iterations=200, seed=3)
    assert again == decode(COST, JOBS, logits, refine_iterations=200, seed=3)
    validate_plan(again, CLUSTER, JOBS)


def test_refinement_never_makes_the_start_worse() -> None:
    cluster = random_cluster(60, 4)
    cost = CostModel(cluster)
    jobs = paper_jobs(4)
    logits = np.random.default_rng(2).normal(size=(60, 5))

    def objective(plan) -> float:  # type: ignore[no-untyped-def]
        return float(np.sum(np.log([jp.predicted_iteration_seconds for jp in plan.jobs])))

    start = decode(cost, jobs, logits, refine_iterations=0)
    refined = decode(cost, jobs, logits, refine_iterations=300)
    assert len(refined.jobs) >= len(start.jobs)
    if len(refined.jobs) == len(start.jobs):
        assert objective(refined) <= objective(start) + 1e-9


def test_wrong_logits_shape() -> None:
    with pytest.raises(ValueError, match="expected"):
        assign(COST, JOBS, np.zeros((N, 3)))


def test_softmax_rows() -> None:
    p = softmax(np.array([[1000.0, 0.0], [1.0, 1.0]]))
    assert np.allclose(p.sum(1), 1.0) and np.allclose(p[1], 0.5)
