"""Hulk's graph network: server embeddings from the cluster graph, then a score for every
(server, job) pair.

    x  --Linear+ReLU-->  h0                                   node encoder
    f(e_ij, h0_i, h0_j)  -> e'_ij                            EdgeEmbedding (the paper's f)
    EdgePoolConv(h0, e') -> h1                                edge pooling
    h_{l+1} = h_l + ReLU(GCNConv(h_l, closeness weights))    N GCN layers (residual)
    z = h_{N+1}

Output: the paper classifies each server into one of a fixed set of jobs (one output unit
per job). Ours must handle any number of jobs, so the output layer is replaced by a scorer
of (server, job) pairs: each job's features (``graph.JOB_FEATURES``) are embedded together
with the mean of all the jobs' features and the mean server embedding (so a job "knows"
the cluster it lands on and the jobs it competes with), and

    score(i, j) = MLP([z_i, g_j, z_i * g_j, d_ij])    for every job j
    score(i, idle) = w . z_i + b                     leave the server unused

where d_ij are the few pair features of ``graph.PAIR_FEATURES`` (the server's and its
region's memory against the job's need, the region's FLOP/s share against the job's share
of demand), differences that an MLP over separate embeddings learns only from many more
examples than the search planner can label. Softmax over a server's row gives the class
distribution that cross-entropy trains, as in the paper; a cluster with J jobs has J + 1
classes, column 0 being "idle". The scorer's weights are shared by all jobs, so the same
network serves 1 job or 10, and permuting the jobs permutes the columns.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.nn import GCNConv, global_mean_pool
from torch_geometric.utils import to_dense_batch

from hulk_planner.gnn.graph import EDGE_FEATURES, JOB_FEATURES, NODE_FEATURES, PAIR_FEATURES
from hulk_planner.gnn.layers import EdgeEmbedding, EdgePoolConv


class HulkGNN(torch.nn.Module):
    """Server embeddings and (server, job) scores; see the module docstring."""

    def __init__(
        self,
        hidden: int = 64,
        gcn_layers: int = 3,
        node_dim: int = len(NODE_FEATURES),
        edge_dim: int = len(EDGE_FEATURES),
        job_dim: int = len(JOB_FEATURES),
        pair_features: tuple[tuple[str, str], ...] = PAIR_FEATURES,
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {
            "hidden": hidden,
            "gcn_layers": gcn_layers,
            "node_dim": node_dim,
            "edge_dim": edge_dim,
            "job_dim": job_dim,
            "pair_node": [NODE_FEATURES.index(a) for a, _ in pair_features],
            "pair_job": [JOB_FEATURES.index(b) for _, b in pair_features],
        }
        self.pair_node: Tensor
        self.pair_job: Tensor
        self.register_buffer("pair_node", torch.tensor(self.config["pair_node"], dtype=torch.long))
        self.register_buffer("pair_job", torch.tensor(self.config["pair_job"], dtype=torch.long))
        pairs = len(pair_features)
        self.encoder = Linear(node_dim, hidden)
        self.edge_embedding = EdgeEmbedding(hidden, edge_dim, hidden)
        self.pool = EdgePoolConv(hidden, hidden, edge_dim=hidden)
        self.convs = torch.nn.ModuleList([GCNConv(hidden, hidden) for _ in range(gcn_layers)])
        self.job_encoder = Sequential(
            Linear(2 * job_dim + hidden, hidden), ReLU(), Linear(hidden, hidden)
        )
        self.pair = Sequential(Linear(3 * hidden + pairs, hidden), ReLU(), Linear(hidden, 1))
        self.idle = Linear(hidden, 1)

    def embed(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, edge_weight: Tensor
    ) -> Tensor:
        """Server embeddings [N, hidden]."""
        h = self.encoder(x).relu()
        e = self.edge_embedding(h, edge_index, edge_attr)
        h = self.pool(h, edge_index, e).relu()
        for conv in self.convs:
            h = h + conv(h, edge_index, edge_weight).relu()
        return h

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: Tensor,
        edge_weight: Tensor,
        job_x: Tensor,
        batch: Tensor | None = None,
        job_batch: Tensor | None = None,
    ) -> Tensor:
        """Logits [N, 1 + max jobs per graph]: column 0 is idle, column k + 1 is the graph's
        k-th job; columns past a graph's job count are ``-inf``."""
        if job_x.dim() != 2 or job_x.size(-1) != self.config["job_dim"]:
            raise ValueError(
                f"job_x must have shape [num_jobs, {self.config['job_dim']}], got "
                f"{list(job_x.shape)}; build it with graph.job_features()"
            )
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        if job_batch is None:
            job_batch = job_x.new_zeros(job_x.size(0), dtype=torch.long)
        z = self.embed(x, edge_index, edge_attr, edge_weight)
        num_graphs = int(batch.max()) + 1 if batch.numel() else 1
        context = global_mean_pool(z, batch, size=num_graphs)  # [B, H]
        job_mean = global_mean_pool(job_x, job_batch, size=num_graphs)  # [B, Fj]
        g = self.job_encoder(torch.cat([job_x, job_mean[job_batch], context[job_batch]], -1))
        g_pad, mask = to_dense_batch(g, job_batch, batch_size=num_graphs)  # [B, J, H]
        g_node = g_pad[batch]  # [N, J, H]
        z_rep = z.unsqueeze(1).expand(-1, g_node.size(1), -1)
        jp_pad, _ = to_dense_batch(job_x[:, self.pair_job], job_batch, batch_size=num_graphs)
        pair_x = x[:, self.pair_node].unsqueeze(1) - jp_pad[batch]  # [N, J, P]
        scores = self.pair(torch.cat([z_rep, g_node, z_rep * g_node, pair_x], -1)).squeeze(-1)
        scores = scores.masked_fill(~mask[batch], float("-inf"))
        return torch.cat([self.idle(z), scores], dim=-1)
