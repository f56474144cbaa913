"""Hulk's graph neural network planner (the paper's contribution), on PyTorch Geometric.

- ``graph``: the cluster as a networkx graph, then arrays / PyG ``Data``.
- ``layers``: ``EdgeEmbedding`` (f(e_ij, x_i, x_j)) and ``EdgePoolConv`` (edge pooling).
- ``model``: ``HulkGNN``, server embeddings and (server, job) scores.
- ``infer``: the same forward pass in numpy, and a torch-free reader of the weights.
- ``decode``: Algorithm 1, from scores to a plan.
- ``planner``: ``plan_gnn``, the ``hulk`` planner of ``hulk_planner.api``.
- ``data``, ``train``, ``cli``: labelled examples, training, ``hulk train``.

Importing this package imports neither torch nor networkx; ``hulk plan`` with the GNN
imports networkx and numpy only (see ``infer``). docs/gnn.md has the design and figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hulk_planner.cost import CostModel
    from hulk_planner.model import Job, Plan


def gnn_planner(cost: CostModel, jobs: Sequence[Job], options: Any) -> Plan:
    """``api.PLANNERS`` entry for ``hulk`` / ``gnn`` (imports the planner on first use)."""
    from hulk_planner.gnn.planner import planner

    return planner(cost, jobs, options)


__all__ = ["gnn_planner"]
