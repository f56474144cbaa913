"""Latency and bandwidth between every pair of servers, on 4-server hand-built clusters.

Precedence: a server link, else a region link, else the pair cannot communicate (inf), as
the planning interface says of a pair with no link: nothing is relayed through a third
server. Default bandwidth where none is given: 10 Gb/s inside a region, 2 Gb/s across.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import LinkTuple, cluster, server

from hulk_planner import topology
from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.planner import plan_gnn
from hulk_planner.model import Cluster, RegionLink
from hulk_planner.planners.search import search_plan
from hulk_planner.topology import Network

# a, b in region r1; c, d in region r2
FOUR = [server("a", "r1"), server("b", "r1"), server("c", "r2"), server("d", "r2")]


def lat(net: Network, x: str, y: str) -> float:
    return net.latency(x, y)


def bw(net: Network, x: str, y: str) -> float:
    return float(net.bandwidth_gbps[net.index[x], net.index[y]])


def test_server_link_beats_region_link_which_beats_defaults() -> None:
    net = Network(
        cluster(
            FOUR,
            links=[("a", "c", 30.0, 5.0), ("a", "b", 9.0)],
            region_links=[
                RegionLink("r1", "r1", 2.0),
                RegionLink("r2", "r2", 3.0, 40.0),
                RegionLink("r1", "r2", 50.0, 1.0),
            ],
        )
    )
    assert lat(net, "a", "c") == 30.0 and bw(net, "a", "c") == 5.0  # the server link
    assert lat(net, "a", "b") == 9.0  # a slower server link still wins over r1-r1's 2 ms
    assert lat(net, "a", "d") == 50.0 and bw(net, "a", "d") == 1.0  # the region link
    assert lat(net, "b", "c") == 50.0
    assert lat(net, "c", "d") == 3.0 and bw(net, "c", "d") == 40.0
    assert bw(net, "a", "b") == topology.DEFAULT_INTRA_REGION_GBPS  # no bandwidth given
    assert net.direct.all()


def test_default_bandwidths() -> None:
    net = Network(cluster(FOUR, links=[("a", "b", 1.0), ("a", "c", 80.0), ("c", "d", 1.0)]))
    assert bw(net, "a", "b") == 10.0 == topology.DEFAULT_INTRA_REGION_GBPS
    assert bw(net, "a", "c") == 2.0 == topology.DEFAULT_CROSS_REGION_GBPS
    assert math.isinf(bw(net, "a", "a"))
    assert lat(net, "a", "a") == 0.0


def test_a_pair_with_no_link_cannot_communicate_even_through_a_third_server() -> None:
    """Before: a-c (no link) was relayed over b at 30 ms; the planning interface says a
    pair that is absent cannot communicate, and stage pods connect directly."""
    links: list[LinkTuple] = [("a", "b", 10.0, 4.0), ("b", "c", 20.0, 1.0), ("c", "d", 5.0)]
    net = Network(cluster(FOUR, links=links))
    for x, y in (("a", "c"), ("a", "d"), ("b", "d")):
        assert math.isinf(lat(net, x, y)) and not net.reachable(x, y)
    assert lat(net, "a", "b") == 10.0 and bw(net, "a", "b") == 4.0
    assert not net.fully_linked
    assert net.linked[net.index["b"]] == {net.index["a"], net.index["c"]}
    regions = [
        RegionLink("r1", "r1", 1.0),
        RegionLink("r2", "r2", 1.0),
        RegionLink("r1", "r2", 9.0),
    ]
    assert Network(cluster(FOUR, region_links=regions)).fully_linked


def test_disconnected_servers_are_unreachable() -> None:
    net = Network(cluster(FOUR, links=[("a", "b", 1.0), ("c", "d", 1.0)]))
    assert math.isinf(lat(net, "a", "c")) and math.isinf(lat(net, "b", "d"))
    assert not net.reachable("a", "c")
    assert net.reachable("c", "d")


def test_region_links_fill_servers_of_the_named_regions_only() -> None:
    three = [*FOUR, server("e", "r3")]
    net = Network(cluster(three, region_links=[RegionLink("r1", "r2", 40.0)]))
    assert lat(net, "b", "d") == 40.0
    # r1-r1 and r3 have no region link and no server link: a-b cannot communicate
    assert math.isinf(lat(net, "a", "b"))
    assert math.isinf(lat(net, "a", "e"))
    # counted without the matrices: of 10 pairs, r1-r2's 4 are linked; with r1-r1 and a
    # server link c-e, 6 of them
    assert topology.unlinked_pairs(cluster(three, region_links=[RegionLink("r1", "r2", 40.0)])) == 6
    both = cluster(three, [("c", "e", 5.0), ("a", "c", 5.0)],
                   [RegionLink("r1", "r2", 40.0), RegionLink("r1", "r1", 1.0)])  # fmt: skip
    assert topology.unlinked_pairs(both) == int((~Network(both).direct).sum()) // 2 == 4


def test_region_path_visits_regions_along_a_line() -> None:
    servers = [server("x", "X"), server("y", "Y"), server("z", "Z")]
    net = Network(cluster(servers, links=[("x", "y", 10.0), ("y", "z", 10.0), ("x", "z", 20.0)]))
    path = net.region_path(frozenset(int(r) for r in net.region))
    names = [net.region_names[r] for r in path]
    assert names in (["X", "Y", "Z"], ["Z", "Y", "X"])
    assert net.region_path(frozenset({0})) == [0]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 25), seed=st.integers(0, 10**6), regions=st.integers(1, 5))
def test_network_is_symmetric_and_holds_exactly_the_given_links(
    n: int, seed: int, regions: int
) -> None:
    c = random_cluster(n, seed=seed, regions=regions)
    net = Network(c)
    assert np.array_equal(net.latency_ms, net.latency_ms.T)
    assert np.array_equal(net.bandwidth_gbps, net.bandwidth_gbps.T)
    assert (np.diag(net.latency_ms) == 0).all()
    for lk in c.links:
        assert net.latency(lk.a, lk.b) == lk.latency_ms
    finite = net.latency_ms[np.isfinite(net.latency_ms)]
    assert (finite >= 0).all()
    # counted from the topology alone as the matrices count it
    assert topology.unlinked_pairs(c) == int((~net.direct).sum()) // 2
    # a pair is linked exactly when the topology lists it (no relays)
    listed = {frozenset((lk.a, lk.b)) for lk in c.links}
    if not c.region_links:
        for i, j in zip(*np.nonzero(~np.eye(len(c.servers), dtype=bool)), strict=True):
            pair = frozenset((net.names[i], net.names[j]))
            assert bool(net.direct[i, j]) == (pair in listed)


def test_a_link_without_bandwidth_takes_its_region_links_as_docs_formats_says() -> None:
    """docs/formats.md said such a link got 10 or 2 Gb/s; it gets its region link's where
    that gives one (a review): a-c and a-b name no bandwidth; r1-r2 gives 1 Gb/s, r1-r1
    none."""
    regions = [RegionLink("r1", "r1", 1.0), RegionLink("r1", "r2", 50.0, 1.0)]
    links: list[LinkTuple] = [("a", "c", 30.0), ("a", "b", 9.0), ("c", "d", 1.0)]
    net = Network(cluster(FOUR, links=links, region_links=regions))
    assert lat(net, "a", "c") == 30.0 and bw(net, "a", "c") == 1.0  # r1-r2's bandwidth
    assert lat(net, "b", "d") == 50.0 and bw(net, "b", "d") == 1.0  # (no link: the same)
    assert bw(net, "a", "b") == topology.DEFAULT_INTRA_REGION_GBPS  # r1-r1 gives none
    assert bw(net, "c", "d") == topology.DEFAULT_INTRA_REGION_GBPS  # no r2-r2 region link
    net = Network(cluster(FOUR, links=links, region_links=regions[1:2]))
    assert bw(net, "a", "c") == 1.0
    net = Network(cluster(FOUR, links=links))
    assert bw(net, "a", "c") == topology.DEFAULT_CROSS_REGION_GBPS
    text = " ".join((Path(__file__).parents[2] / "docs" / "formats.md").read_text().split())
    assert (
        "Where `bandwidthGbps` is absent, a pair's bandwidth is that of the `regionLinks` "
        "entry for its two servers' regions (the same region twice inside one), where that "
        "entry gives one: for a `links` entry without it as for a pair no link lists. Where "
        "neither gives one: 10 Gb/s inside a region, 2 Gb/s between regions." in text
    )


def _mixed(n: int, seed: int, regions: int) -> Cluster:
    """A random cluster with region links for some region pairs (some with a bandwidth)
    and server links for some pairs, others cut: every precedence rule at once."""
    base = random_cluster(n, seed=seed, regions=regions)
    rng = np.random.default_rng(seed)
    names = sorted(set(base.regions))
    region_links = [
        RegionLink(a, b, float(rng.uniform(1, 90)), float(rng.uniform(1, 20)) if k % 2 else None)
        for k, (a, b) in enumerate((a, b) for i, a in enumerate(names) for b in names[i:])
        if rng.random() < 0.6
    ]
    links = [lk for lk in base.links if rng.random() < 0.5]
    servers = [srv.name for srv in base.servers]
    cut = {  # pairs reported unreachable (``Cluster.cut``), some of them linked
        tuple(sorted(rng.choice(servers, 2, replace=False).tolist()))
        for _ in range(int(rng.integers(0, 4)))
        if len(servers) > 1
    }
    return replace(
        base, links=tuple(links), region_links=tuple(region_links), cut=tuple(sorted(cut))
    )


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 10**6), regions=st.integers(1, 5))
def test_cut_pairs_are_as_their_region_pair_written_out_as_links(
    n: int, seed: int, regions: int
) -> None:
    """The operator cuts pairs reported unreachable from their region link
    (``Cluster.cut``); before, it wrote such a region pair as a link for each of its other
    server pairs, n^2 of them where the probes sample their peers (a review). The network
    is the same as that file form's (``materialized``, what a topology file writes)."""
    c = _mixed(n, seed, regions)
    flat = c.materialized()
    assert not flat.cut
    for dense in (True, False):
        got, want = Network(c, dense=dense), Network(flat, dense=True)
        for name in ("latency_ms", "direct"):
            assert np.array_equal(np.asarray(getattr(got, name)), getattr(want, name)), name
        talk = want.direct  # (a pair that cannot communicate has no bandwidth to compare)
        assert np.array_equal(np.asarray(got.bandwidth_gbps)[talk], want.bandwidth_gbps[talk])
    assert topology.unlinked_pairs(c) == topology.unlinked_pairs(flat)
    assert all(not Network(c).reachable(a, b) for a, b in c.cut)
    gone = c.servers[0].name
    assert all(gone not in p for p in c.without([gone]).cut)
    assert c.with_servers([]).cut == c.cut


def test_a_cut_pair_names_two_servers() -> None:
    from hulk_planner.errors import InvalidRequest

    c = cluster([server("a"), server("b")], [])
    with pytest.raises(InvalidRequest, match="cut pair a-x: must name two listed servers"):
        replace(c, cut=(("a", "x"),))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 10**6), regions=st.integers(1, 5))
def test_pair_tables_hold_the_dense_matrices_numbers(n: int, seed: int, regions: int) -> None:
    """Above DENSE_MAX_SERVERS the network keeps region tables plus the server links
    (``PairTable``); every way the planner indexes them gives the dense arrays' numbers."""
    c = _mixed(n, seed, regions)
    dense, lazy = Network(c, dense=True), Network(c, dense=False)
    assert isinstance(lazy.latency_ms, topology.PairTable) and not lazy.dense
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, n, 60), rng.integers(0, n, 60)
    grid = rng.integers(0, n, (4, 3))
    for name in ("latency_ms", "bandwidth_gbps", "direct"):
        full, table = getattr(dense, name), getattr(lazy, name)
        assert np.array_equal(full, np.asarray(table))
        assert np.array_equal(full[i, j], table[i, j])  # pairs, the diagonal among them
        assert np.array_equal(full[np.ix_(i[:7], j[:5])], table[np.ix_(i[:7], j[:5])])
        assert np.array_equal(full[grid[:-1], grid[1:]], table[grid[:-1], grid[1:]])
        for a, b in [(0, n - 1), (n - 1, n - 1), (int(i[0]), int(j[0]))]:
            assert full[a, b] == table[a, b] and np.ndim(table[a, b]) == 0
        assert table[[], []].shape == (0,)
    for x, y in [(i, j), (grid[:-1], grid[1:]), (i.astype(np.int32), j)]:  # both at once
        for got, want in zip(lazy.pairs(x, y), dense.pairs(x, y), strict=True):
            assert np.array_equal(got, want)
        assert np.array_equal(dense.pairs(x, y)[1], dense.bandwidth_gbps[x, y])
    assert dense.fully_linked == lazy.fully_linked
    assert dense.groups == lazy.groups
    assert [dense.linked[k] for k in range(n)] == [lazy.linked[k] for k in range(n)]
    assert dense.linked[-1] == lazy.linked[-1] == lazy.linked[n - 1]
    assert list(lazy.linked) == list(dense.linked)  # (iteration ends: IndexError past n)
    assert dense.rows == lazy.rows


def test_large_clusters_keep_pair_tables_and_plan_as_with_dense_matrices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 2,001-server cluster is not held as dense n x n arrays (a 5,000-server one took
    2.4 s and 200 MB a table, once per priority group: a trial); on the paper's cluster
    the search and hulk plan the same with either."""
    big = Network(random_cluster(topology.DENSE_MAX_SERVERS + 1, seed=1))
    assert isinstance(big.latency_ms, topology.PairTable) and big.fully_linked
    assert isinstance(Network(random_cluster(50, seed=1)).latency_ms, np.ndarray)
    # above it too where the links listed are an eighth of n^2 or more (a measured
    # cluster: dense lookups are faster there, and a link costs more memory than a pair)
    with monkeypatch.context() as m:
        m.setattr(topology, "DENSE_MAX_SERVERS", 10)
        listed = random_cluster(40, seed=2)  # a link per server pair but a tenth across
        assert len(listed.links) >= 40 * 40 // 8 and Network(listed).dense
        assert not Network(replace(listed, links=listed.links[:100])).dense
    paper, jobs = paper_cluster(), paper_jobs(4)
    plans = []
    for dense in (True, False):
        cost = CostModel(paper, network=Network(paper, dense=dense))
        plans.append(
            (
                search_plan(cost, jobs, seed=3, max_iterations=400, time_budget_s=math.inf),
                plan_gnn(cost, jobs, seed=3, max_iterations=200),
            )
        )
    assert plans[0] == plans[1]
    assert plans[0][0].jobs and plans[0][1].jobs


def test_a_link_without_bandwidth_takes_its_region_links_as_docs_cost_model_says() -> None:
    """docs/cost-model.md gave 2 Gb/s across regions to every link without bandwidthGbps,
    where the planner (and docs/formats.md) takes its region link's first (a review)."""
    c = cluster(
        [server("a", "A"), server("b", "B"), server("c", "B")],
        [("a", "b", 10.0)],
        [RegionLink("A", "B", 50.0, 5.0), RegionLink("B", "B", 1.0)],
    )
    net = Network(c)
    assert net.bandwidth_gbps[0, 1] == net.bandwidth_gbps[0, 2] == 5.0  # the region link's
    assert net.bandwidth_gbps[1, 2] == topology.DEFAULT_INTRA_REGION_GBPS  # none given there
    doc = (Path(__file__).parents[2] / "docs" / "cost-model.md").read_text()
    paragraph = doc[doc.index("**Default bandwidth**") :].split("\n\n")[0]
    assert "its region link's (`spec.regionLinks`" in paragraph, paragraph


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 10**6), regions=st.integers(1, 5))
def test_fastest_link_and_shortest_latency_bound_every_pair(
    n: int, seed: int, regions: int
) -> None:
    """``fastest_gbps`` and ``nearest_ms`` bound every pair of two servers (the layout's
    lower bounds on a step rest on them); on a hand-built cluster they are the values its
    fastest and shortest links give."""
    c = _mixed(n, seed, regions)
    net = Network(c, dense=True)
    apart = ~np.eye(n, dtype=bool)
    talk = net.direct & apart
    assert (net.bandwidth_gbps[apart] <= net.fastest_gbps).all()
    assert (net.latency_ms[apart] >= net.nearest_ms).all()
    assert net.nearest_ms >= 0.0
    if talk.any():
        assert net.nearest_ms <= net.latency_ms[talk].min()
    hand = Network(cluster(FOUR, links=[("a", "b", 0.25, 40.0), ("c", "d", 70.0, 1.0)]))
    assert hand.fastest_gbps == 40.0 and hand.nearest_ms == 0.25
