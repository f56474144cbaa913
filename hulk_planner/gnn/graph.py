"""The cluster as a graph: built with networkx, converted once to arrays (and to PyG ``Data``).

Nodes are servers, in the cluster's order. Node features (``NODE_FEATURES``, scaled to
about [-1, 1], relative to the cluster where that matters, so that one model serves
clusters of 20 and of 5,000 servers):

- hardware: log GPU count, per-GPU TFLOPS and memory; the server's FLOP/s and memory
  relative to the cluster's mean server (log ratios) and as percentile ranks (FLOP/s also
  within its region); log usable memory of the server and of its region;
- place: the server's region as 3 coordinates, a classical multidimensional scaling (MDS)
  of the region-to-region latency matrix over the largest latency, each axis's sign fixed
  so the largest region has positive coordinates (MDS is defined up to rotation and
  reflection, so the model also gets rotation-free summaries): the region's share of the
  cluster's servers, FLOP/s (also as a log) and memory, its rank by FLOP/s, the mean
  latency to every other server, to the nearest other region and to the strongest region,
  and the intra-region latency, all over the largest region-to-region latency.

Region-to-region latencies are means over up to ``REGION_SAMPLE`` servers per region, so
nothing here reads the whole n x n matrices of ``topology.Network``.

Edges carry ``EDGE_FEATURES``: latency (``log1p(ms) / log1p(scale)`` and ``ms / scale``,
the scale being the largest region-to-region latency), log bandwidth, and a same-region
flag; ``edge_weight`` is the closeness ``exp(-ms / 50)`` used by the GCN layers. Pairs
without a direct link (server- or region-level) are absent; relayed paths are not edges.

Sparsity. A dense graph of 5,000 servers has 25 million edges, so every cluster, small or
large, gets the same sparse pattern: each server links to its ``k_intra`` lowest-latency
servers of its own region (ties, which region-level latencies make the rule, broken by a
fixed pseudo-random order) and to one server (pseudo-random, with a direct link) in each of
its ``k_cross`` nearest other regions; the union is made undirected. With the defaults (8
and 4) a server has 12 to about 40 neighbours (mean about 22) whatever the cluster's size,
so training on 20-500 servers transfers to 5,000 (fewer than 12 where its region has fewer
than 9 servers, the cluster fewer than 5 regions, or pairs no link).

Jobs become ``JOB_FEATURES`` rows: the model's size (log parameters, layers, hidden size,
sequence length, batch sizes), its memory need and compute demand relative to the cluster's
usable memory and FLOP/s, its share of the jobs' parameters (the paper sizes each job's
class by that ratio), memory needs and compute demand, and its rank by need.
``PAIR_FEATURES`` name the (node, job) feature pairs whose difference the network computes
for every (server, job) pair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from hulk_planner.cost import EFFICIENCY, MEMORY_USABLE, memory_need_bytes
from hulk_planner.model import GIB, Cluster, Job
from hulk_planner.planners.split import step_flops
from hulk_planner.topology import Network

if TYPE_CHECKING:
    from torch_geometric.data import Data

NODE_FEATURES = (
    "log_gpus",
    "log_gpu_tflops",
    "log_gpu_memory",
    "rel_flops",
    "rel_memory",
    "region_x",
    "region_y",
    "region_z",
    "region_servers",
    "region_flops",
    "region_memory",
    "mean_latency",
    "nearest_region_latency",
    "intra_latency",
    "flops_rank",
    "flops_rank_in_region",
    "memory_rank",
    "region_rank",
    "latency_to_top_region",
    "log_server_memory",
    "log_region_memory",
    "log_region_flops_share",
)
EDGE_FEATURES = ("log_latency", "latency", "log_bandwidth", "same_region")
JOB_FEATURES = (
    "log_parameters",
    "layers",
    "log_hidden",
    "log_sequence",
    "log_global_batch",
    "log_micro_batch",
    "memory_share",
    "compute_share",
    "parameter_share",
    "log_memory_need",
    "inverse_jobs",
    "demand_share",
    "need_share",
    "need_rank",
    "log_demand_share",
)
# (server, job) pair features: differences of a node and a job feature on the same scale,
# computed inside the network for every pair (does the server alone, or its region, hold
# the job's memory? does the region's share of FLOP/s match the job's share of demand?)
PAIR_FEATURES = (
    ("log_server_memory", "log_memory_need"),
    ("log_region_memory", "log_memory_need"),
    ("log_region_flops_share", "log_demand_share"),
)
K_INTRA = 8
K_CROSS = 4


@dataclass(frozen=True)
class GraphArrays:
    """A cluster graph as arrays: ``x`` [N, F], ``edge_index`` [2, E] (both directions),
    ``edge_attr`` [E, D], ``edge_weight`` [E] (closeness ``exp(-ms / 50)``, for the GCN
    layers), and the server names in node order."""

    names: tuple[str, ...]
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    edge_weight: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.names)


REGION_SAMPLE = 32


def _region_matrix(net: Network) -> tuple[np.ndarray, np.ndarray]:
    """Mean finite latency between regions [K, K] and servers per region [K].

    Each region is represented by up to ``REGION_SAMPLE`` of its servers (evenly spaced
    in cluster order), so a 5,000-server cluster costs K^2 small blocks, not n^2 reads;
    with region-level latencies the sample is exact, with server links it averages the
    sampled pairs. Same-server pairs are left out; regions that never meet get the
    largest known latency."""
    k = int(net.region.max()) + 1
    sizes = np.bincount(net.region, minlength=k).astype(float)
    sample = []
    for r in range(k):
        m = np.flatnonzero(net.region == r)
        step = max(1, len(m) // REGION_SAMPLE)
        sample.append(m[::step][:REGION_SAMPLE])
    mean = np.full((k, k), np.nan)
    for a in range(k):
        for b in range(a, k):
            block = net.latency_ms[np.ix_(sample[a], sample[b])]
            ok = np.isfinite(block)
            if a == b:
                np.fill_diagonal(ok, False)
                if len(sample[a]) < 2:
                    mean[a, a] = 0.0
                    continue
            if ok.any():
                mean[a, b] = mean[b, a] = float(block[ok].mean())
    fill = float(np.nanmax(mean)) if np.isfinite(mean).any() else 1.0
    mean = np.where(np.isnan(mean), fill, mean)
    return mean, sizes


def _mds(dist: np.ndarray, dims: int, sizes: np.ndarray) -> np.ndarray:
    """Classical MDS coordinates [K, dims], signs fixed by the largest region."""
    k = dist.shape[0]
    if k < 2:
        return np.zeros((k, dims))
    d2 = dist**2
    j = np.eye(k) - np.ones((k, k)) / k
    b = -0.5 * j @ d2 @ j
    vals, vecs = np.linalg.eigh(b)
    order = np.argsort(vals)[::-1][:dims]
    coords = vecs[:, order] * np.sqrt(np.maximum(vals[order], 0.0))
    anchor = int(np.argmax(sizes))
    signs = np.where(coords[anchor] < 0, -1.0, 1.0)
    coords = coords * signs
    if coords.shape[1] < dims:
        coords = np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))
    return coords


def _rank(values: np.ndarray) -> np.ndarray:
    """Percentile rank in [0, 1] (ties share their mean rank; a single value gets 0.5)."""
    n = len(values)
    if n <= 1:
        return np.full(n, 0.5)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n, dtype=float)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse] / (n - 1)


def _jitter(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random [len(rows), len(cols)] matrix in [0, 1), from server indices,
    to order equal latencies (region-level latencies make ties the rule)."""
    r = rows.astype(np.int64)[:, None]
    c = cols.astype(np.int64)[None, :]
    h = (r * 2654435761 + c * 40503 + (r ^ c) * 97) % 1_000_003
    return h.astype(np.float64) / 1_000_003.0


def sparse_neighbours(
    net: Network,
    k_intra: int = K_INTRA,
    k_cross: int = K_CROSS,
    region_latency: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """Undirected edges (i < j) of the sparse pattern described in the module docstring.

    Intra-region neighbours come from each region's own latency block; cross-region ones
    go to the ``k_cross`` regions nearest by mean latency, one server each (a fixed
    pseudo-random member with a direct link). No n x n temporary is built, so 5,000
    servers take well under a second."""
    n = len(net.names)
    if n < 2:
        return []
    if region_latency is None:
        region_latency, _ = _region_matrix(net)
    regions = np.unique(net.region)
    members = {int(r): np.flatnonzero(net.region == r) for r in regions}
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for r in regions.tolist():
        rows = members[r]
        kk = min(k_intra, len(rows) - 1)
        if kk <= 0:
            continue
        sub = np.ix_(rows, rows)
        block = np.where(net.direct[sub], net.latency_ms[sub], np.inf)
        scale = max(float(np.max(block, initial=0.0, where=np.isfinite(block))), 1e-3)
        block = block + _jitter(rows, rows) * 1e-6 * scale
        np.fill_diagonal(block, np.inf)
        near = np.argpartition(block, kk - 1, axis=1)[:, :kk]
        ok = np.isfinite(np.take_along_axis(block, near, axis=1)).ravel()
        src.append(np.repeat(rows, kk)[ok])
        dst.append(rows[near].ravel()[ok])
    kc = min(k_cross, len(regions) - 1)
    if kc > 0:
        off = region_latency[np.ix_(regions, regions)].astype(float)
        np.fill_diagonal(off, np.inf)
        for a_pos, r in enumerate(regions.tolist()):
            rows = members[r]
            for b_pos in np.argsort(off[a_pos], kind="stable")[:kc].tolist():
                cols = members[int(regions[b_pos])]
                start = _jitter(rows, np.array([b_pos]))[:, 0] * len(cols)
                start = start.astype(np.int64)
                # up to 4 tries for a member with a direct link
                for t in range(min(4, len(cols))):
                    cand = cols[(start + t) % len(cols)]
                    ok = net.direct[rows, cand]
                    if ok.any():
                        src.append(rows[ok])
                        dst.append(cand[ok])
                    rows, start = rows[~ok], start[~ok]
                    if not len(rows):
                        break
                rows = members[r]
    if not src:
        return []
    a = np.concatenate(src)
    b = np.concatenate(dst)
    pairs = np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1), axis=0)
    return [(int(x), int(y)) for x, y in pairs.tolist() if x != y]


def build_graph(
    cluster: Cluster,
    network: Network | None = None,
    *,
    k_intra: int = K_INTRA,
    k_cross: int = K_CROSS,
) -> nx.Graph:
    """The cluster as a networkx graph: node attribute ``x`` (features, ``NODE_FEATURES``),
    edge attributes ``attr`` (``EDGE_FEATURES``) and ``weight`` (closeness)."""
    net = network or Network(cluster)
    servers = cluster.servers
    n = len(servers)
    gpus = np.array([s.gpus for s in servers], dtype=float)
    tflops = np.array([s.gpu_tflops for s in servers], dtype=float)
    gmem = np.array([s.gpu_memory_gib for s in servers], dtype=float)
    flops = gpus * tflops
    mem = gpus * gmem
    region_lat, sizes = _region_matrix(net)
    lat_scale = max(float(region_lat.max()), 1.0)
    coords = _mds(region_lat / lat_scale, 3, sizes)
    k = len(sizes)
    reg = net.region
    region_flops = np.bincount(reg, weights=flops, minlength=k) / flops.sum()
    region_mem = np.bincount(reg, weights=mem, minlength=k) / mem.sum()
    off = region_lat + np.diag(np.full(k, np.inf))
    nearest_region = off.min(axis=1) if k > 1 else np.zeros(k)
    mean_lat = (region_lat @ sizes - np.diag(region_lat)) / max(n - 1, 1)
    in_region = np.zeros(n)
    for r in range(k):
        members = np.flatnonzero(reg == r)
        in_region[members] = _rank(flops[members])
    region_order = _rank(-region_flops) if k > 1 else np.zeros(k)
    top = int(np.argmax(region_flops))
    x = np.column_stack(
        [
            np.log2(gpus) / 3.0,
            np.log10(tflops) / 3.0,
            np.log10(gmem) / 2.0,
            np.log(flops / flops.mean()),
            np.log(mem / mem.mean()),
            coords[reg],
            (sizes / n)[reg],
            region_flops[reg],
            region_mem[reg],
            (mean_lat / lat_scale)[reg],
            (nearest_region / lat_scale)[reg],
            (np.diag(region_lat) / lat_scale)[reg],
            _rank(flops),
            in_region,
            _rank(mem),
            region_order[reg],
            (region_lat[top] / lat_scale)[reg],
            np.log10(mem * MEMORY_USABLE) / 4.0,
            np.log10(region_mem * mem.sum() * MEMORY_USABLE)[reg] / 4.0,
            np.log10(np.maximum(region_flops, 1e-6))[reg] / 2.0,
        ]
    ).astype(np.float32)
    g = nx.Graph(name=cluster.name, latency_scale=lat_scale)
    for i, s in enumerate(servers):
        g.add_node(i, name=s.name, region=s.region, x=x[i])
    max_ms = lat_scale
    log_max = math.log1p(max_ms)
    pairs = sparse_neighbours(net, k_intra, k_cross, region_lat)
    ends = np.array(pairs, dtype=np.int64).reshape(-1, 2).T  # (one lookup for all edges)
    lats, bws = net.pairs(ends[0], ends[1])
    latency = np.asarray(lats, dtype=float).tolist()
    bandwidth = np.asarray(bws, dtype=float).tolist()
    for (a, b), ms, bw in zip(pairs, latency, bandwidth, strict=True):
        attr = np.array(
            [
                math.log1p(ms) / log_max,
                ms / max(max_ms, 1e-3),
                math.log10(max(bw, 1e-3)) / 2.0,
                1.0 if reg[a] == reg[b] else 0.0,
            ],
            dtype=np.float32,
        )
        g.add_edge(a, b, attr=attr, weight=math.exp(-ms / 50.0))
    return g


def graph_arrays(g: nx.Graph) -> GraphArrays:
    """The one conversion of a graph from ``build_graph`` to arrays, both edge directions."""
    n = g.number_of_nodes()
    names = tuple(str(g.nodes[i]["name"]) for i in range(n))
    x = np.stack([g.nodes[i]["x"] for i in range(n)]).astype(np.float32)
    m = g.number_of_edges()
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    attr = np.empty((m, len(EDGE_FEATURES)), dtype=np.float32)
    weight = np.empty(m, dtype=np.float32)
    for e, (a, b, d) in enumerate(g.edges(data=True)):
        src[e], dst[e] = a, b
        attr[e] = d["attr"]
        weight[e] = d["weight"]
    edge_index = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    return GraphArrays(
        names=names,
        x=x,
        edge_index=edge_index,
        edge_attr=np.concatenate([attr, attr]),
        edge_weight=np.concatenate([weight, weight]),
    )


def job_features(jobs: Sequence[Job], cluster: Cluster) -> np.ndarray:
    """[J, len(JOB_FEATURES)] features of the jobs on this cluster."""
    usable = sum(s.memory_bytes for s in cluster.servers) * MEMORY_USABLE
    flops = sum(s.flops for s in cluster.servers) * EFFICIENCY
    total_params = sum(j.model.parameters for j in jobs) or 1
    needs = np.array([memory_need_bytes(j) for j in jobs], dtype=float)
    demands = np.array([step_flops(j) for j in jobs], dtype=float)
    need_rank = _rank(-needs) if len(jobs) > 1 else np.zeros(len(jobs))
    rows = []
    for k, j in enumerate(jobs):
        m = j.model
        need = memory_need_bytes(j)
        rows.append(
            [
                math.log10(m.parameters) / 12.0,
                m.layers / 100.0,
                math.log10(m.hidden_size) / 4.0,
                math.log10(m.sequence_length) / 4.0,
                math.log10(j.global_batch_size) / 3.0,
                math.log10(j.micro_batch_size) / 2.0,
                need / usable,
                math.log10(demands[k] / flops) / 3.0,
                m.parameters / total_params,
                math.log10(need / GIB) / 4.0,
                1.0 / len(jobs),
                demands[k] / demands.sum(),
                needs[k] / needs.sum(),
                need_rank[k],
                math.log10(max(demands[k] / demands.sum(), 1e-6)) / 2.0,
            ]
        )
    return np.asarray(rows, dtype=np.float32).reshape(len(jobs), len(JOB_FEATURES))


def to_data(arrays: GraphArrays, jobs: np.ndarray | None = None, **extra: Any) -> Data:
    """PyG ``Data`` from ``graph_arrays`` (imports torch and PyG: training and CUDA use)."""
    import torch
    from torch_geometric.data import Data

    data = Data(
        x=torch.from_numpy(arrays.x),
        edge_index=torch.from_numpy(arrays.edge_index),
        edge_attr=torch.from_numpy(arrays.edge_attr),
        edge_weight=torch.from_numpy(arrays.edge_weight),
        **extra,
    )
    if jobs is not None:
        data.job_x = torch.from_numpy(jobs)
    return data
