"""The GNN's layers on hand-built 4-node graphs, in the style of PyG's own layer tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch_geometric  # noqa: F401

from hulk_planner.gnn.layers import EdgeEmbedding, EdgePoolConv

# 0 - 1, 0 - 2, 0 - 3 (a star), both directions; node 3 also reaches 2
EDGE_INDEX = torch.tensor([[0, 0, 0, 1, 2, 3, 2, 3], [1, 2, 3, 0, 0, 0, 3, 2]])


def _inputs(in_channels: int = 16, edge_dim: int = 8) -> tuple:
    torch.manual_seed(0)
    x = torch.randn(4, in_channels)
    edge_attr = torch.randn(EDGE_INDEX.size(1), edge_dim)
    return x, EDGE_INDEX, edge_attr


def _permute(perm: Any, x: Any, edge_index: Any) -> tuple:
    """Node i of the new graph is node perm[i] of the old one."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(len(perm))
    return x[perm], inverse[edge_index]


def test_edge_pool_conv() -> None:
    x, edge_index, edge_attr = _inputs()
    conv = EdgePoolConv(16, 32, edge_dim=8)
    assert str(conv) == "EdgePoolConv(16, 32, edge_dim=8, aggr='mean')"
    out = conv(x, edge_index, edge_attr)
    assert out.size() == (4, 32)
    assert torch.isfinite(out).all()

    conv = EdgePoolConv(16, 32, edge_dim=8, aggr="add", train_eps=True)
    assert str(conv) == "EdgePoolConv(16, 32, edge_dim=8, aggr='add')"
    assert conv(x, edge_index, edge_attr).size() == (4, 32)
    assert any(p is conv.eps for p in conv.parameters())


def test_edge_pool_conv_reset_parameters() -> None:
    x, edge_index, edge_attr = _inputs()
    conv = EdgePoolConv(16, 32, edge_dim=8, eps=0.5)
    before = conv(x, edge_index, edge_attr)
    conv.reset_parameters()
    assert float(conv.eps) == 0.5
    assert not torch.allclose(before, conv(x, edge_index, edge_attr))


def test_edge_pool_conv_permutation_equivariant() -> None:
    x, edge_index, edge_attr = _inputs()
    conv = EdgePoolConv(16, 32, edge_dim=8)
    out = conv(x, edge_index, edge_attr)
    perm = torch.tensor([2, 0, 3, 1])
    px, pei = _permute(perm, x, edge_index)
    assert torch.allclose(conv(px, pei, edge_attr), out[perm], atol=1e-6)
    # the order in which edges are listed does not matter either
    order = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(conv(x, edge_index[:, order], edge_attr[order]), out, atol=1e-6)


def test_edge_pool_conv_by_hand() -> None:
    """Mean pooling of ReLU(x_j + W e_ji), concatenated to (1 + eps) x_i."""
    x, edge_index, edge_attr = _inputs(4, 2)
    conv = EdgePoolConv(4, 3, edge_dim=2, eps=0.25)
    msg = (x[edge_index[0]] + conv.lin(edge_attr)).relu()
    pooled = torch.stack([msg[edge_index[1] == i].mean(0) for i in range(4)])
    expected = conv.nn(torch.cat([1.25 * x, pooled], -1))
    assert torch.allclose(conv(x, edge_index, edge_attr), expected, atol=1e-6)


def test_edge_pool_conv_isolated_node() -> None:
    x, _, _ = _inputs()
    edge_index = torch.tensor([[0, 1], [1, 0]])  # nodes 2 and 3 have no edges
    edge_attr = torch.randn(2, 8)
    conv = EdgePoolConv(16, 32, edge_dim=8)
    out = conv(x, edge_index, edge_attr)
    alone = conv.nn(torch.cat([x[2:], torch.zeros(2, 16)], -1))
    assert torch.allclose(out[2:], alone, atol=1e-6)


def test_edge_pool_conv_shape_errors() -> None:
    x, edge_index, edge_attr = _inputs()
    conv = EdgePoolConv(16, 32, edge_dim=4)
    with pytest.raises(ValueError, match="setting the 'edge_dim' argument of 'EdgePoolConv' to 8"):
        conv(x, edge_index, edge_attr)
    conv = EdgePoolConv(12, 32, edge_dim=8)
    with pytest.raises(ValueError, match="in_channels=16"):
        conv(x, edge_index, edge_attr)
    conv = EdgePoolConv(16, 32, edge_dim=8)
    with pytest.raises(ValueError, match="one row of edge_attr per column"):
        conv(x, edge_index, edge_attr[:3])


def test_edge_embedding() -> None:
    x, edge_index, edge_attr = _inputs()
    emb = EdgeEmbedding(16, 8, 24)
    assert str(emb) == "EdgeEmbedding(16, 24, edge_dim=8)"
    out = emb(x, edge_index, edge_attr)
    assert out.size() == (edge_index.size(1), 24)
    # f(e_ij, x_i, x_j): the embedding of an edge depends on its two ends and its features
    expected = emb.mlp(torch.cat([edge_attr[0], x[1], x[0]]))
    assert torch.allclose(out[0], expected, atol=1e-6)
    perm = torch.tensor([3, 1, 0, 2])
    px, pei = _permute(perm, x, edge_index)
    assert torch.allclose(emb(px, pei, edge_attr), out, atol=1e-6)
    with pytest.raises(ValueError, match="edge_dim"):
        emb(x, edge_index, edge_attr[:, :5])


def test_model_equivariant_in_servers_and_jobs() -> None:
    from hulk_planner.gnn.graph import EDGE_FEATURES, JOB_FEATURES, NODE_FEATURES
    from hulk_planner.gnn.model import HulkGNN

    torch.manual_seed(0)
    model = HulkGNN(hidden=16, gcn_layers=2).eval()
    x = torch.randn(4, len(NODE_FEATURES))
    edge_attr = torch.randn(EDGE_INDEX.size(1), len(EDGE_FEATURES))
    weight = torch.rand(EDGE_INDEX.size(1))
    jobs = torch.randn(3, len(JOB_FEATURES))
    out = model(x, EDGE_INDEX, edge_attr, weight, jobs)
    assert out.shape == (4, 4)  # idle + 3 jobs
    perm = torch.tensor([1, 3, 0, 2])
    px, pei = _permute(perm, x, EDGE_INDEX)
    assert torch.allclose(model(px, pei, edge_attr, weight, jobs), out[perm], atol=1e-5)
    jperm = torch.tensor([2, 0, 1])
    out_j = model(x, EDGE_INDEX, edge_attr, weight, jobs[jperm])
    assert torch.allclose(out_j[:, 1:], out[:, 1:][:, jperm], atol=1e-5)
    assert torch.allclose(out_j[:, 0], out[:, 0], atol=1e-5)
    # one job or ten: the same network
    assert model(x, EDGE_INDEX, edge_attr, weight, jobs[:1]).shape == (4, 2)
    assert model(x, EDGE_INDEX, edge_attr, weight, torch.randn(10, len(JOB_FEATURES))).shape == (
        4,
        11,
    )
    with pytest.raises(ValueError, match="job_features"):
        model(x, EDGE_INDEX, edge_attr, weight, jobs[:, :3])


def test_edge_pool_conv_refuses_an_edge_index_that_is_no_tensor() -> None:
    """Before, a bare ``assert`` (a SparseTensor, or a list, gave an AssertionError with no
    word of the fix, and none at all under ``python -O``; a review)."""
    conv = EdgePoolConv(8, 16, edge_dim=3)
    with pytest.raises(ValueError, match=r"expects edge_index as a \[2, num_edges\] index"):
        conv(torch.randn(4, 8), [[0, 1], [1, 0]], torch.randn(2, 3))  # type: ignore[arg-type]
