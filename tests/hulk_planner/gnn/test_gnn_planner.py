"""The shipped GNN planner: weights, planning through the api, re-planning after change."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hulk_planner.api import PLANNERS, plan
from hulk_planner.cost import CostModel, validate_plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.decode import assign
from hulk_planner.gnn.graph import EDGE_FEATURES, JOB_FEATURES, NODE_FEATURES
from hulk_planner.gnn.infer import load_weights
from hulk_planner.gnn.planner import default_weights, plan_gnn, scores
from hulk_planner.model import Server


def test_shipped_weights_and_settings() -> None:
    path = default_weights()
    assert path.exists(), "hulk_planner/gnn/weights/hulk-gnn.pt must ship with the package"
    assert path.stat().st_size < 5 * 1024 * 1024
    w = load_weights(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["model"]["node_dim"] == len(NODE_FEATURES) == w["config"]["node_dim"]
    assert meta["model"]["edge_dim"] == len(EDGE_FEATURES)
    assert meta["model"]["job_dim"] == len(JOB_FEATURES)
    for key in ("examples", "iterations", "min_servers", "max_servers", "seed"):
        assert key in meta["generation"]
    for key in ("epochs", "lr", "batch_size", "seed"):
        assert key in meta["training"]
    assert meta["epochs"], "per-epoch metrics are recorded"


def test_hulk_is_the_gnn() -> None:
    assert PLANNERS["hulk"] is PLANNERS["gnn"]
    cluster, jobs = paper_cluster(), paper_jobs(4)
    p = plan(cluster, jobs, "hulk", max_iterations=50)
    assert p.planner == "hulk"
    validate_plan(p, cluster, jobs)
    assert {jp.name for jp in p.jobs} == {j.name for j in jobs}
    assert all(np.isfinite(jp.predicted_iteration_seconds) for jp in p.jobs)
    # seeded and bounded by moves: the same plan twice
    assert p == plan(cluster, jobs, "hulk", max_iterations=50)


def test_replan_after_failure_keeps_healthy_servers() -> None:
    cluster, jobs = paper_cluster(), paper_jobs(4)
    before = plan(cluster, jobs, "hulk", max_iterations=200)
    victim = before.jobs[0]
    lost = set(victim.nodes[:1])
    smaller = cluster.without(lost)
    after = plan(smaller, jobs, "hulk", previous=before, max_iterations=200)
    validate_plan(after, smaller, jobs)
    assert not lost & set(after.assignment)
    old, new = before.assignment, after.assignment
    kept = sum(new.get(n) == j for n, j in old.items() if n not in lost)
    assert kept >= 0.8 * (len(old) - len(lost))


def test_sticky_planning_and_new_servers() -> None:
    cluster = random_cluster(60, 3)
    jobs = paper_jobs(4)
    first = plan_gnn(CostModel(cluster), jobs, max_iterations=100)
    extra = [
        Server(f"new-{k}", cluster.servers[0].region, 8, 80, 989.0, "NVIDIA-H100-80GB-HBM3")
        for k in range(3)
    ]
    grown = cluster.with_servers(extra)
    # new servers: the graph is rebuilt and inference re-run on it
    assert scores(CostModel(grown), jobs).shape == (63, 5)
    grown_plan = plan_gnn(CostModel(grown), jobs, max_iterations=100, sticky=first.assignment)
    validate_plan(grown_plan, grown, jobs)
    # same cluster: the decoded start keeps the previous servers where they were
    start = assign(
        CostModel(cluster), jobs, scores(CostModel(cluster), jobs), sticky=first.assignment
    )
    kept = sum(start.get(n) == j for n, j in first.assignment.items())
    assert kept >= 0.9 * len(first.assignment)


def test_torch_inference_matches_numpy() -> None:
    pytest.importorskip("torch_geometric")
    cost = CostModel(paper_cluster())
    jobs = paper_jobs(6)
    a = scores(cost, jobs, device="numpy")
    b = scores(cost, jobs, device="cpu")
    assert np.allclose(a, b, atol=1e-4)
