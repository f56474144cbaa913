"""Synthetic multi-region clusters, for tests, benchmarks and GNN training data.

Regions get random points on a globe; one-way latency between regions is the great-circle
distance at two thirds of light speed in fibre (about 100 km/ms), times a route-inflation
factor of 1.5-2.5 (measured Internet paths are that much longer than great circles), plus
1 ms; inside a region it is 0.5-3 ms. Servers draw a GPU class from a per-region mix, with
2-8 GPUs each. Small clusters (``explicit_links``) list every server pair, dropping a
fraction of cross-region pairs as the paper's cluster does; large ones give region-level
latencies (``regionLinks``) so a 5,000-server cluster stays small.
"""

from __future__ import annotations

import math
import random

from hulk_planner.datasets import slug
from hulk_planner.hardware import BY_CAPABILITY
from hulk_planner.model import Cluster, Link, RegionLink, Server

CITY_NAMES = (
    "Beijing", "Tokyo", "Singapore", "Mumbai", "Frankfurt", "London", "Paris", "Virginia",
    "Oregon", "Sao Paulo", "Sydney", "Seoul", "Stockholm", "Toronto", "Johannesburg", "Dubai",
    "Madrid", "Milan", "Jakarta", "Osaka", "Santiago", "Warsaw", "Zurich", "Ohio",
)  # fmt: skip
_CAPS = tuple(BY_CAPABILITY)


def _region_latency(p: tuple[float, float], q: tuple[float, float], rng: random.Random) -> float:
    (la1, lo1), (la2, lo2) = p, q
    cos = math.sin(la1) * math.sin(la2) + math.cos(la1) * math.cos(la2) * math.cos(lo1 - lo2)
    km = 6371.0 * math.acos(max(-1.0, min(1.0, cos)))
    return round(1.0 + km / 100.0 * rng.uniform(1.5, 2.5), 2)


def random_cluster(
    n_servers: int,
    seed: int = 0,
    regions: int | None = None,
    explicit_links: bool | None = None,
    drop_fraction: float = 0.1,
) -> Cluster:
    """A reproducible random cluster of ``n_servers`` servers over ``regions`` regions."""
    if n_servers < 1:
        raise ValueError("n_servers must be at least 1")
    rng = random.Random(seed)
    k = regions or max(2, min(len(CITY_NAMES), round(math.sqrt(n_servers) / 1.5)))
    k = min(k, len(CITY_NAMES), n_servers)
    cities = rng.sample(CITY_NAMES, k)
    points = {
        c: (math.asin(rng.uniform(-0.9, 0.9)), rng.uniform(-math.pi, math.pi)) for c in cities
    }
    intra = {c: round(rng.uniform(0.5, 3.0), 2) for c in cities}
    mixes = {c: rng.sample(_CAPS, rng.randint(1, 3)) for c in cities}
    weights = [rng.uniform(0.5, 2.0) for _ in cities]
    servers = []
    for i in range(n_servers):
        city = cities[i] if i < k else rng.choices(cities, weights)[0]
        cap = rng.choice(mixes[city])
        cls = BY_CAPABILITY[cap]
        servers.append(
            Server(
                name=f"{slug(city)}-{i}",
                region=city,
                gpus=rng.choice((2, 4, 4, 8, 8, 8)),
                gpu_memory_gib=cls.memory_gib,
                gpu_tflops=cls.tflops,
                gpu_product=cls.product,
                compute_capability=cap,
                zone=f"{slug(city)}-a",
            )
        )
    pair_latency: dict[tuple[str, str], float] = {}
    for i, a in enumerate(cities):
        pair_latency[(a, a)] = intra[a]
        for b in cities[i + 1 :]:
            pair_latency[(a, b)] = _region_latency(points[a], points[b], rng)
    if explicit_links is None:
        explicit_links = n_servers <= 300
    if not explicit_links:
        region_links = tuple(RegionLink(a, b, ms) for (a, b), ms in pair_latency.items())
        return Cluster(f"random-{n_servers}-{seed}", tuple(servers), (), region_links)
    links = []
    for i, s in enumerate(servers):
        for t in servers[i + 1 :]:
            key = (
                (s.region, t.region)
                if (s.region, t.region) in pair_latency
                else (t.region, s.region)
            )
            if s.region != t.region and rng.random() < drop_fraction:
                continue
            jitter = rng.uniform(0.95, 1.05)
            links.append(Link(s.name, t.name, round(pair_latency[key] * jitter, 3)))
    return Cluster(f"random-{n_servers}-{seed}", tuple(servers), tuple(links))
