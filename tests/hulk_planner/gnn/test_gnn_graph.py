"""Graph construction: features, the sparse pattern, job features."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.graph import (
    EDGE_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    build_graph,
    graph_arrays,
    job_features,
    sparse_neighbours,
)
from hulk_planner.model import Cluster, Link, Server
from hulk_planner.topology import Network


def _tiny() -> Cluster:
    servers = (
        Server("a-0", "A", 8, 40, 312),
        Server("a-1", "A", 4, 40, 312),
        Server("b-0", "B", 2, 24, 111.1),
        Server("b-1", "B", 8, 80, 989),
    )
    links = (
        Link("a-0", "a-1", 1.0),
        Link("b-0", "b-1", 2.0),
        Link("a-0", "b-0", 80.0),
        Link("a-1", "b-1", 90.0, 5.0),
    )
    return Cluster("tiny", servers, links)


def test_tiny_graph_by_hand() -> None:
    g = build_graph(_tiny())
    assert g.number_of_nodes() == 4
    # a-0 - b-1 and a-1 - b-0 have no link: absent, not relayed
    assert {tuple(sorted(e)) for e in g.edges()} == {(0, 1), (2, 3), (0, 2), (1, 3)}
    arrays = graph_arrays(g)
    assert arrays.names == ("a-0", "a-1", "b-0", "b-1")
    assert arrays.x.shape == (4, len(NODE_FEATURES))
    assert arrays.edge_index.shape == (2, 8)
    assert arrays.edge_attr.shape == (8, len(EDGE_FEATURES))
    # both directions, same features
    assert np.array_equal(arrays.edge_attr[:4], arrays.edge_attr[4:])
    assert np.array_equal(arrays.edge_index[:, :4], arrays.edge_index[::-1, 4:])
    same_region = arrays.edge_attr[:, EDGE_FEATURES.index("same_region")]
    pairs = [tuple(sorted(p)) for p in arrays.edge_index.T.tolist()]
    assert all(
        (v == 1.0) == (p in {(0, 1), (2, 3)}) for p, v in zip(pairs, same_region, strict=True)
    )
    # latency feature is monotone in latency; bandwidth given on a-1 - b-1 only
    lat = dict(zip(pairs, arrays.edge_attr[:, EDGE_FEATURES.index("latency")], strict=True))
    assert lat[(0, 1)] < lat[(2, 3)] < lat[(0, 2)] < lat[(1, 3)]
    assert arrays.edge_weight.max() <= 1.0 and arrays.edge_weight.min() > 0.0
    # regions of two servers each: the region share is one half
    assert np.allclose(arrays.x[:, NODE_FEATURES.index("region_servers")], 0.5)


def test_features_are_normalised() -> None:
    for cluster in (paper_cluster(), random_cluster(120, 3), random_cluster(400, 4)):
        arrays = graph_arrays(build_graph(cluster))
        assert np.isfinite(arrays.x).all() and np.isfinite(arrays.edge_attr).all()
        assert np.abs(arrays.x).max() < 6.0
        assert np.abs(arrays.edge_attr).max() <= 2.0


@pytest.mark.parametrize("n,regions", [(30, 3), (200, 6), (600, 10)])
def test_sparse_pattern(n: int, regions: int) -> None:
    cluster = random_cluster(n, n, regions, explicit_links=n <= 300)
    net = Network(cluster)
    edges = sparse_neighbours(net, k_intra=8, k_cross=4)
    assert len(edges) == len(set(edges))
    assert all(a < b for a, b in edges)
    assert all(net.direct[a, b] for a, b in edges)
    deg = np.bincount(np.array(edges).ravel(), minlength=n)
    assert deg.min() >= 1
    # the pattern stays sparse: about k_intra + k_cross neighbours, whatever the size
    assert deg.mean() <= 2 * (8 + 4)
    cross = sum(net.region[a] != net.region[b] for a, b in edges)
    assert cross > 0
    # deterministic
    assert edges == sparse_neighbours(net, k_intra=8, k_cross=4)


def test_graph_is_invariant_to_server_order() -> None:
    cluster = random_cluster(40, 9)
    flipped = Cluster(cluster.name, tuple(reversed(cluster.servers)), cluster.links)
    a = graph_arrays(build_graph(cluster))
    b = graph_arrays(build_graph(flipped))
    idx = {n: i for i, n in enumerate(b.names)}
    perm = [idx[n] for n in a.names]
    assert np.allclose(a.x[:, :5], b.x[perm, :5])  # hardware features
    assert np.allclose(np.abs(a.x[:, 5:]), np.abs(b.x[perm, 5:]), atol=1e-5)


def test_job_features() -> None:
    jobs = paper_jobs(6)
    jx = job_features(jobs, paper_cluster())
    assert jx.shape == (6, len(JOB_FEATURES))
    assert np.isfinite(jx).all()
    share = jx[:, JOB_FEATURES.index("parameter_share")]
    assert share.sum() == pytest.approx(1.0)
    assert share.argmax() == 0  # OPT-175B
    assert np.allclose(jx[:, JOB_FEATURES.index("inverse_jobs")], 1 / 6)
