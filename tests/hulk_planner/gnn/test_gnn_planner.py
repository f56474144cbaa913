"""The shipped GNN planner: weights, planning through the api, re-planning after change."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hulk_planner.api import PLANNERS, plan
from hulk_planner.cost import CostModel, validate_plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.errors import InvalidRequest
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.decode import assign
from hulk_planner.gnn.graph import EDGE_FEATURES, JOB_FEATURES, NODE_FEATURES
from hulk_planner.gnn.infer import load_weights
from hulk_planner.gnn.planner import (
    UNTRAINED,
    WEIGHTS_ENV,
    check_weights,
    default_weights,
    plan_gnn,
    resolve_device,
    scores,
    untrained,
)
from hulk_planner.model import Job, Server


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
    import torch_geometric  # noqa: F401

    cost = CostModel(paper_cluster())
    jobs = paper_jobs(6)
    a = scores(cost, jobs, device="numpy")
    b = scores(cost, jobs, device="cpu")
    assert np.allclose(a, b, atol=1e-4)


@pytest.fixture
def own_weights(tmp_path: Path) -> Path:
    """Weights as `hulk train` writes them, of a small untrained network."""
    import torch

    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.train import TrainSettings, save

    torch.manual_seed(1)
    path, _ = save(
        HulkGNN(hidden=8, gcn_layers=1),
        tmp_path / "mine.pt",
        generation={},
        training=TrainSettings(hidden=8, gcn_layers=1),
        logs=[],
    )
    return path


def test_weights_of_hulk_train_are_used_when_named(
    own_weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cost = CostModel(paper_cluster())
    jobs = paper_jobs()
    shipped = scores(cost, jobs)
    check_weights(own_weights, "--weights")  # passes
    monkeypatch.setenv(WEIGHTS_ENV, str(own_weights))
    assert default_weights() == own_weights
    mine = scores(cost, jobs)
    assert mine.shape == shipped.shape and not np.allclose(mine, shipped)
    monkeypatch.delenv(WEIGHTS_ENV)
    assert np.array_equal(scores(cost, jobs), shipped)


def test_a_file_that_is_not_weights_is_refused_naming_the_field(tmp_path: Path) -> None:
    import zipfile

    import torch

    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.train import TrainSettings, save

    diverged = HulkGNN(hidden=8, gcn_layers=1)  # what a training run gone to NaN leaves
    with torch.no_grad():
        for p in diverged.parameters():
            p.fill_(float("nan"))
    nan, _ = save(diverged, tmp_path / "nan.pt", generation={}, training=TrainSettings(), logs=[])
    with torch.no_grad():  # (1e30: numpy overflowed, its RuntimeWarning printed first: a trial)
        for p in diverged.parameters():
            p.fill_(1e30)
    huge, _ = save(diverged, tmp_path / "huge.pt", generation={}, training=TrainSettings(), logs=[])
    junk = tmp_path / "junk.pt"
    junk.write_text("not weights")
    broken = tmp_path / "broken.pt"
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("x/data.pkl", b"junk")
    for path, words in [
        (tmp_path / "none.pt", "is not a file"),
        (tmp_path, "is not a file"),
        (junk, "is not a weights file (not a zip, as torch.save writes)"),
        (broken, "is not Hulk GNN weights (UnpicklingError"),
        (nan, "is not Hulk GNN weights (ValueError: its scores are not finite"),
        (huge, "is not Hulk GNN weights (ValueError: its scores are not finite"),
    ]:
        with warnings.catch_warnings(), pytest.raises(InvalidRequest) as info:
            warnings.simplefilter("error")  # (a warning escaping is told instead)
            check_weights(path, "--weights")
        assert info.value.field == "--weights" and words in info.value.problem, info.value
        assert "\n" not in str(info.value)


def test_weights_whose_config_contradicts_their_tensors_are_refused(tmp_path: Path) -> None:
    """A config of 1 GCN layer beside the shipped 3 layers' tensors planned with one,
    silently, and the torch path raised a traceback; ``format: 99`` was taken (a trial)."""
    import torch

    shipped = torch.load(default_weights(), map_location="cpu", weights_only=True)
    config = shipped["config"]
    for k, (change, words) in enumerate([
        ({"config": {**config, "gcn_layers": 1}},
         "its config says 1 GCN layer(s), its tensors hold 3"),
        ({"config": {**config, "hidden": 32}}, "its config says hidden 32, its tensors hold 64"),
        ({"format": 99}, "format 99, where this version reads 1"),
    ]):  # fmt: skip
        path = tmp_path / f"w{k}.pt"
        torch.save({**shipped, **change}, path)
        with pytest.raises(InvalidRequest) as info:
            check_weights(path, "--weights")
        assert f"is not Hulk GNN weights (ValueError: {words})" in info.value.problem, info.value


def test_weights_that_call_every_server_idle_are_told_of(tmp_path: Path) -> None:
    """Weights trained on too little score every server idle; the decoding and refinement
    still plan, which hid them (a laptop trial): hulk plan and hulk train now say so."""
    import subprocess
    import sys

    import torch

    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.train import TrainSettings, save

    assert untrained(default_weights()) is None  # the shipped ones give servers jobs
    idle = HulkGNN(hidden=8, gcn_layers=1)
    with torch.no_grad():
        idle.idle.bias.fill_(1000.0)  # idle above every job on every server
    path, _ = save(idle, tmp_path / "idle.pt", generation={}, training=TrainSettings(), logs=[])
    check_weights(path, "--weights")  # weights the planner can run: not refused
    assert untrained(path) == UNTRAINED
    cmd = [sys.executable, "-m", "hulk", "plan", "--weights", str(path), "--moves", "200",
           "--no-compare"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "planned in " in out.stdout, out.stderr
    assert f"hulk plan: note: --weights {path}: {UNTRAINED}" in out.stderr.splitlines()
    with torch.no_grad():
        idle.idle.bias.fill_(-1000.0)  # every server given a job
    busy, _ = save(idle, tmp_path / "busy.pt", generation={}, training=TrainSettings(), logs=[])
    assert untrained(busy) is None


def test_cuda_devices_are_checked_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, anything starting with ``cuda`` passed the checks (``cudafoo``; ``cuda:9`` on
    a machine of one GPU) and failed as a traceback once ``hulk train`` had labelled for
    minutes (a review). Checked on this machine's torch, its CUDA counted as the test says."""
    import torch

    from hulk_planner.gnn.planner import cuda_problem
    from hulk_planner.gnn.train import TrainSettings

    assert cuda_problem("cudafoo") == "unknown device 'cudafoo'"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_problem("cuda:0") == "cuda:0: no CUDA device on this machine"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert cuda_problem("cuda") is None and cuda_problem("cuda:0") is None
    why = "cuda:9: this machine has 1 CUDA device(s), cuda:0 to cuda:0"
    assert cuda_problem("cuda:9") == why
    with pytest.raises(InvalidRequest, match=r"TrainSettings.device: cuda:9: this machine has"):
        TrainSettings(device="cuda:9")
    with pytest.raises(InvalidRequest, match=r"HULK_GNN_DEVICE: cuda:9: this machine has"):
        monkeypatch.setenv("HULK_GNN_DEVICE", "cuda:9")
        resolve_device(None)


def test_missing_shipped_weights_are_an_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install whose shipped weights are gone (a wheel built without package data, a
    file deleted by hand): before, ``os.stat`` raised FileNotFoundError, and ``hulk plan``
    printed a traceback (a review)."""
    import hulk_planner.gnn.planner as gnn_planner

    monkeypatch.setattr(gnn_planner, "shipped_weights", lambda: tmp_path / "gone.pt")
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    cost = CostModel(paper_cluster())
    with pytest.raises(InvalidRequest) as exc:
        gnn_planner.scores(cost, paper_jobs()[:1])
    assert str(exc.value) == (
        f"weights: the shipped GNN weights {tmp_path / 'gone.pt'} are missing from this "
        "install (reinstall hulk, or give --weights FILE)"
    )
    monkeypatch.setenv(WEIGHTS_ENV, str(tmp_path / "mine.pt"))  # the variable's, named
    with pytest.raises(InvalidRequest) as exc:
        gnn_planner.scores(cost, paper_jobs()[:1])
    assert str(exc.value).startswith(f"HULK_GNN_WEIGHTS: {tmp_path / 'mine.pt'} is not a file")


def test_priority_groups_share_one_inference_on_the_whole_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Jobs of 3 priorities are planned one priority after another on the servers left;
    the network runs once, on the whole cluster with every job, and each group decodes its
    jobs' columns on its servers' rows (before: a graph and an inference per group, most
    of a plan of 10 priorities on 5,000 servers)."""
    import hulk_planner.gnn.planner as gnn_planner

    cluster = paper_cluster()
    jobs = [replace(j, priority=k % 3) for k, j in enumerate(paper_jobs(6))]
    real = gnn_planner.scores
    calls: list[tuple[int, list[str]]] = []

    def counted(cost: CostModel, some: list[Job], *args: Any, **kwargs: Any) -> np.ndarray:
        calls.append((len(cost.cluster.servers), [j.name for j in some]))
        return real(cost, some, *args, **kwargs)

    monkeypatch.setattr(gnn_planner, "scores", counted)
    result = plan(cluster, jobs, "hulk", max_iterations=50)
    assert calls == [(len(cluster.servers), [j.name for j in jobs])]
    assert len(result.jobs) + len(result.unplaced) == len(jobs) and result.jobs

    whole = real(CostModel(cluster), jobs)
    shared = gnn_planner.shared_scores(cluster, jobs)
    assert np.array_equal(shared.logits, whole)
    part = cluster.without([s.name for s in cluster.servers[::3]])
    rows = [k for k, s in enumerate(cluster.servers) if s.name in part.index]
    some = [jobs[4], jobs[1]]
    got = shared.of(CostModel(part), some)
    assert got is not None and np.array_equal(got, whole[np.ix_(rows, [0, 5, 2])])
    assert shared.of(CostModel(part), [replace(jobs[0], name="another")]) is None
    # the weights are checked before the one inference, naming the argument
    for bad in (tmp_path / "none.pt", ""):  # ("": not the shipped weights, a review)
        with pytest.raises(InvalidRequest) as info:
            plan(cluster, jobs, "hulk", weights=bad)
        assert info.value.field == "weights" and "is not a file" in info.value.problem
    with pytest.raises(InvalidRequest) as info:
        plan(cluster, jobs[:1], "hulk", shared={})  # type: ignore[arg-type]
    assert info.value.field == "shared" and "shared_scores" in str(info.value.fix)
