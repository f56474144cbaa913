"""Latency and bandwidth between every pair of servers, on 4-server hand-built clusters.

Precedence: a server link, else a region link, else the pair cannot communicate (inf), as
the planning interface says of a pair with no link: nothing is relayed through a third
server. Default bandwidth where none is given: 10 Gb/s inside a region, 2 Gb/s across.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import LinkTuple, cluster, server

from hulk_planner import topology
from hulk_planner.generate import random_cluster
from hulk_planner.model import RegionLink
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
