"""The cluster as a graph: built with networkx, converted once to arrays (and to PyG ``Data``).

Nodes are servers, in the cluster's order. Node features (``NODE_FEATURES``, all scaled to
about [-1, 1] so that one model serves clusters of 20 and of 5,000 servers):

- hardware: log GPU count, log per-GPU TFLOPS, log per-GPU memory, and the server's FLOP/s
  and memory relative to the cluster's mean server (log ratios);
- place: the server's region as 3 coordinates, a classical multidimensional scaling (MDS)
  of the region-to-region latency matrix divided by the largest latency, each axis's sign
  fixed so the largest region has positive coordinates (MDS is defined up to rotation and
  reflection, so the model also gets rotation-free summaries): the region's share of the
  cluster's servers, FLOP/s and memory, the server's mean latency to every other server and
  to the nearest other region (both divided by the largest latency), its intra-region
  latency.

Edges carry ``EDGE_FEATURES``: latency (``log1p(ms) / log1p(max ms)`` and ``ms / max ms``),
log bandwidth, and a same-region flag. Pairs without a link (and no region link) are absent;
relayed pairs are not edges.

Sparsity. A dense graph of 5,000 servers has 25 million edges, so every cluster, small or
large, gets the same sparse pattern: each server links to its ``k_intra`` lowest-latency
servers of its own region (ties, which region-level latencies make common, broken by a
fixed pseudo-random order) and to one server in each of its ``k_cross`` nearest other
regions; the union is made undirected. With the defaults (8 and 4) a server has 12 to
about 24 neighbours whatever the cluster's size, so training on 20-500 servers transfers to
5,000. Only pairs with a direct (server- or region-level) link are eligible.

Jobs become ``JOB_FEATURES`` rows: size of the model (log parameters, layers, hidden size,
sequence length, batch sizes), its memory need and compute demand relative to the cluster's
usable memory and FLOP/s, and its share of the jobs' parameters (the paper sizes each job's
class by that ratio).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from hulk_planner.cost import (
    EFFICIENCY,
    FLOPS_PER_PARAM_TOKEN,
    MEMORY_USABLE,
    memory_need_bytes,
)
from hulk_planner.model import GIB, Cluster, Job
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


def _region_matrix(net: Network) -> tuple[np.ndarray, np.ndarray]:
    """Mean finite latency between regions [K, K] and servers per region [K]."""
    k = int(net.region.max()) + 1
    onehot = np.zeros((len(net.region), k))
    onehot[np.arange(len(net.region)), net.region] = 1.0
    finite = np.isfinite(net.latency_ms)
    lat = np.where(finite, net.latency_ms, 0.0)
    total = onehot.T @ lat @ onehot
    count = onehot.T @ finite.astype(float) @ onehot
    sizes = onehot.sum(axis=0)
    # the diagonal counts each server with itself (latency 0); leave those pairs out
    diag_pairs = sizes * (sizes - 1)
    count[np.diag_indices(k)] -= sizes
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    for r in range(k):
        if diag_pairs[r] == 0:
            mean[r, r] = 0.0
    # regions that never meet: the largest known latency stands in
    fill = np.nanmax(mean) if np.isfinite(np.nanmax(mean)) else 1.0
    mean = np.where(np.isnan(mean), fill, mean)
    return (mean + mean.T) / 2, sizes


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


def _tie_break(n: int) -> np.ndarray:
    """A fixed pseudo-random [n, n] matrix in [0, 1) to order equal latencies."""
    i = np.arange(n, dtype=np.uint64)[:, None]
    j = np.arange(n, dtype=np.uint64)[None, :]
    h = (i * np.uint64(0x9E3779B1) + j * np.uint64(0x85EBCA77)) % np.uint64(1_000_003)
    h = (h + (i ^ j) * np.uint64(2654435761)) % np.uint64(1_000_003)
    return h.astype(np.float64) / 1_000_003.0


def sparse_neighbours(
    net: Network, k_intra: int = K_INTRA, k_cross: int = K_CROSS
) -> list[tuple[int, int]]:
    """Undirected edges (i < j) of the sparse pattern described in the module docstring."""
    n = len(net.names)
    if n < 2:
        return []
    lat = np.where(net.direct, net.latency_ms, np.inf)
    np.fill_diagonal(lat, np.inf)
    finite = np.isfinite(lat)
    scale = float(lat[finite].max()) if finite.any() else 1.0
    # equal latencies are ordered by a fixed pseudo-random jitter, far below any real gap
    key = lat + _tie_break(n) * 1e-6 * max(scale, 1e-3)
    same = net.region[:, None] == net.region[None, :]
    edges: set[tuple[int, int]] = set()
    intra = np.where(same, key, np.inf)
    kk = min(k_intra, n - 1)
    if kk > 0:
        nearest = np.argpartition(intra, kk - 1, axis=1)[:, :kk] if kk < n else None
        if nearest is not None:
            rows = np.repeat(np.arange(n), kk)
            cols = nearest.ravel()
            ok = np.isfinite(intra[rows, cols])
            for a, b in zip(rows[ok].tolist(), cols[ok].tolist(), strict=True):
                edges.add((min(a, b), max(a, b)))
    regions = np.unique(net.region)
    if len(regions) > 1 and k_cross > 0:
        cross = np.where(same, np.inf, key)
        # per region: the best server of that region for every server (min over its columns)
        best_in = np.full((n, len(regions)), np.inf)
        arg_in = np.zeros((n, len(regions)), dtype=np.int64)
        for r_pos, r in enumerate(regions):
            cols = np.flatnonzero(net.region == r)
            sub = cross[:, cols]
            pick = np.argmin(sub, axis=1)
            best_in[:, r_pos] = sub[np.arange(n), pick]
            arg_in[:, r_pos] = cols[pick]
        kc = min(k_cross, len(regions) - 1)
        order = np.argsort(best_in, axis=1)[:, :kc]
        for a in range(n):
            for r_pos in order[a].tolist():
                if math.isfinite(best_in[a, r_pos]):
                    b = int(arg_in[a, r_pos])
                    edges.add((min(a, b), max(a, b)))
    return sorted(edges)


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
        ]
    ).astype(np.float32)
    g = nx.Graph(name=cluster.name, latency_scale=lat_scale)
    for i, s in enumerate(servers):
        g.add_node(i, name=s.name, region=s.region, x=x[i])
    max_ms = float(np.max(net.latency_ms[np.isfinite(net.latency_ms)], initial=1.0))
    log_max = math.log1p(max(max_ms, 1e-3))
    for a, b in sparse_neighbours(net, k_intra, k_cross):
        ms = float(net.latency_ms[a, b])
        bw = float(net.bandwidth_gbps[a, b])
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
    rows = []
    for j in jobs:
        m = j.model
        need = memory_need_bytes(j)
        step_flops = FLOPS_PER_PARAM_TOKEN * m.parameters * j.global_batch_size * m.sequence_length
        rows.append(
            [
                math.log10(m.parameters) / 12.0,
                m.layers / 100.0,
                math.log10(m.hidden_size) / 4.0,
                math.log10(m.sequence_length) / 4.0,
                math.log10(j.global_batch_size) / 3.0,
                math.log10(j.micro_batch_size) / 2.0,
                need / usable,
                math.log10(step_flops / flops) / 3.0,
                m.parameters / total_params,
                math.log10(need / GIB) / 4.0,
                1.0 / len(jobs),
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
