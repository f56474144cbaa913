"""Latency and bandwidth between every pair of servers, on 4-server hand-built clusters.

Precedence: a server link, else a region link, else a relay over the shortest path of known
links (its bandwidth the narrowest hop), else unreachable (inf). Default bandwidth where
none is given: 10 Gb/s inside a region, 2 Gb/s across.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
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


def test_relay_takes_the_shortest_path_and_its_narrowest_hop() -> None:
    # a -10ms/4G- b -20ms/1G- c -5ms/(default 10G)- d; a-c, a-d and b-d have no link
    links: list[LinkTuple] = [("a", "b", 10.0, 4.0), ("b", "c", 20.0, 1.0), ("c", "d", 5.0)]
    net = Network(cluster(FOUR, links=links))
    assert lat(net, "a", "c") == 30.0 and bw(net, "a", "c") == 1.0
    assert lat(net, "a", "d") == 35.0 and bw(net, "a", "d") == 1.0
    assert lat(net, "b", "d") == 25.0 and bw(net, "b", "d") == 1.0
    assert lat(net, "a", "b") == 10.0 and bw(net, "a", "b") == 4.0  # direct pairs unchanged
    assert not net.direct[net.index["a"], net.index["c"]]
    assert net.reachable("a", "d")


def test_relay_follows_latency_not_bandwidth() -> None:
    # a-d: a-b-d is 10+10 = 20 ms with a 1 Gb/s hop; a-c-d is 15+16 = 31 ms at 8 Gb/s.
    # b-c: b-a-c is 10+15 = 25 ms (narrowest 1 Gb/s); b-d-c is 10+16 = 26 ms at 8 Gb/s.
    links = [
        ("a", "b", 10.0, 1.0),
        ("b", "d", 10.0, 8.0),
        ("a", "c", 15.0, 8.0),
        ("c", "d", 16.0, 8.0),
    ]
    net = Network(cluster(FOUR, links=links))
    assert lat(net, "a", "d") == 20.0 and bw(net, "a", "d") == 1.0
    assert lat(net, "b", "c") == 25.0 and bw(net, "b", "c") == 1.0


def test_a_given_link_keeps_its_latency_even_when_a_relay_is_shorter() -> None:
    # a-d is measured at 100 ms; a-b-c-d would be 35 ms. The measured link wins, and it does
    # so whether or not some other pair of the cluster lacks a link.
    chain = [("a", "b", 10.0), ("b", "c", 20.0), ("c", "d", 5.0), ("a", "d", 100.0)]
    sparse = Network(cluster(FOUR, links=chain))  # a-c and b-d are absent: relays run
    dense = Network(cluster(FOUR, links=[*chain, ("a", "c", 30.0), ("b", "d", 25.0)]))
    assert lat(sparse, "a", "d") == 100.0 == lat(dense, "a", "d")
    assert lat(sparse, "a", "c") == 30.0  # the missing pair is relayed


def test_disconnected_servers_are_unreachable() -> None:
    net = Network(cluster(FOUR, links=[("a", "b", 1.0), ("c", "d", 1.0)]))
    assert math.isinf(lat(net, "a", "c")) and math.isinf(lat(net, "b", "d"))
    assert not net.reachable("a", "c")
    assert net.reachable("c", "d")


def test_region_links_fill_servers_of_the_named_regions_only() -> None:
    three = [*FOUR, server("e", "r3")]
    net = Network(cluster(three, region_links=[RegionLink("r1", "r2", 40.0)]))
    assert lat(net, "b", "d") == 40.0
    # r1-r1 and r3 have no region link and no server link: a-b relays over r2 (80 ms)
    assert lat(net, "a", "b") == 80.0
    assert math.isinf(lat(net, "a", "e"))


def test_relaying_is_skipped_above_the_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topology, "RELAY_MAX_SERVERS", 3)
    net = Network(cluster(FOUR, links=[("a", "b", 10.0), ("b", "c", 20.0), ("c", "d", 5.0)]))
    assert math.isinf(lat(net, "a", "c"))


def test_region_path_visits_regions_along_a_line() -> None:
    servers = [server("x", "X"), server("y", "Y"), server("z", "Z")]
    net = Network(cluster(servers, links=[("x", "y", 10.0), ("y", "z", 10.0), ("x", "z", 20.0)]))
    path = net.region_path(frozenset(int(r) for r in net.region))
    names = [net.region_names[r] for r in path]
    assert names in (["X", "Y", "Z"], ["Z", "Y", "X"])
    assert net.region_path(frozenset({0})) == [0]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 25), seed=st.integers(0, 10**6), regions=st.integers(1, 5))
def test_network_is_symmetric_and_no_shorter_than_given_links(
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
    # a relayed pair is never shorter than going through any third server (triangle)
    lat_ = net.latency_ms
    relayed = ~net.direct
    for i, j in zip(*np.nonzero(relayed), strict=True):
        assert lat_[i, j] <= (lat_[i, :] + lat_[:, j]).min() + 1e-9
