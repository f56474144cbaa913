"""The torch-free path: reading ``.pt`` files and the numpy forward pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.graph import build_graph, graph_arrays, job_features
from hulk_planner.gnn.infer import NumpyHulkGNN, WeightsFormatError, read_pt


def test_read_pt_matches_torch_load(tmp_path: Path) -> None:
    obj: dict[str, Any] = {
        "format": 1,
        "config": {"hidden": 4, "name": "x", "ratio": 0.5},
        "state_dict": {
            "w": torch.randn(3, 2),
            "b": torch.arange(5, dtype=torch.float64),
            "i": torch.tensor([1, 2, 3]),
            "t": torch.randn(4, 3).t(),  # non-contiguous
            "s": torch.tensor(2.5),  # 0-d
            "view": torch.arange(10.0)[2:6],  # offset into a shared storage
        },
    }
    path = tmp_path / "w.pt"
    torch.save(obj, path)
    got = read_pt(path)
    assert got["config"] == obj["config"] and got["format"] == 1
    for k, v in obj["state_dict"].items():
        assert got["state_dict"][k].dtype == v.numpy().dtype
        assert np.array_equal(got["state_dict"][k], v.numpy()), k


def test_read_pt_refuses_code(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"f": print}, path)  # a reference to a builtin, not a tensor
    with pytest.raises(WeightsFormatError, match="unexpected object"):
        read_pt(path)
    # hulk plan --weights evil.pt: one line naming the object (before, torch.load was tried
    # too: its warning, and its message cut short; a docs trial)
    out = subprocess.run(
        [sys.executable, "-m", "hulk", "plan", "--weights", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"hulk plan: error: --weights: {str(path)!r} is not Hulk GNN weights (RefusedObject: "
        "unexpected object __builtin__.print in the weights file) (give a .pt file that `hulk "
        "train --output FILE` wrote)"
    ], out.stderr
    (tmp_path / "plain.pt").write_text("not a zip")
    with pytest.raises(WeightsFormatError, match="not a zip"):
        read_pt(tmp_path / "plain.pt")


@pytest.mark.parametrize(
    "cluster",
    [paper_cluster(), random_cluster(150, 2), random_cluster(700, 5)],
    ids=lambda c: c.name,
)
def test_numpy_forward_matches_torch(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import torch_geometric  # noqa: F401

    from hulk_planner.gnn.graph import to_data
    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.train import TrainSettings, save

    torch.manual_seed(0)
    model = HulkGNN(hidden=32, gcn_layers=2).eval()
    # non-trivial eps and biases, as after training
    with torch.no_grad():
        model.pool.eps.fill_(0.3)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path, meta = save(model, tmp_path / "m.pt", generation={}, training=TrainSettings(), logs=[])
    assert meta.exists()
    arrays = graph_arrays(build_graph(cluster))
    jx = job_features(paper_jobs(6), cluster)
    data = to_data(arrays, jx)
    with torch.no_grad():
        expected = model(
            data.x, data.edge_index, data.edge_attr, data.edge_weight, data.job_x
        ).numpy()
    w = read_pt(path)
    got = NumpyHulkGNN(w["state_dict"], w["config"]).scores(arrays, jx)
    assert got.shape == expected.shape == (len(cluster.servers), 7)
    assert np.allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_planning_with_the_gnn_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from hulk_planner.api import plan\n"
        "from hulk_planner.datasets import paper_cluster, paper_jobs\n"
        "p = plan(paper_cluster(), paper_jobs(4), 'hulk', time_budget_s=0.2)\n"
        "assert p.planner == 'hulk' and p.jobs, p\n"
        "bad = [m for m in ('torch', 'torch_geometric') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
