"""The two graph layers of Hulk's network, in PyTorch Geometric's style.

``EdgeEmbedding`` is the paper's f(e_ij, x_i, x_j): every link gets a vector from its own
features and those of its two ends. ``EdgePoolConv`` is the edge-pooling layer that folds
each server's incident (embedded) links into its representation. It follows ``GINEConv``
(Hu et al., "Strategies for Pre-training Graph Neural Networks"), with two changes: the
pooled messages are concatenated to the node's own features instead of added, so the layer
keeps "what I am" apart from "whom I reach, and how fast", and the default aggregation is
the mean, so a server's representation does not grow with its degree (the sparse graphs of
``graph.py`` give a server 3 to about 45 neighbours, about 24 on average, whatever the
cluster's size: ``bench/gnn_device.py`` prints them).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.inits import reset


class EdgeEmbedding(torch.nn.Module):
    r"""The edge-embedding step :math:`f(\mathbf{e}_{ij}, \mathbf{x}_i, \mathbf{x}_j)`:

    .. math::
        \mathbf{e}^{\prime}_{j,i} = \mathrm{MLP}\left(\mathbf{e}_{j,i} \,\Vert\,
        \mathbf{x}_i \,\Vert\, \mathbf{x}_j\right)

    for every edge :math:`(j, i)`, with a two-layer MLP and ReLU.

    Args:
        in_channels (int): Node feature size :math:`F`.
        edge_dim (int): Edge feature size :math:`D`.
        out_channels (int): Size of the edge embedding.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, D)`
        - **output:** edge embeddings :math:`(|\mathcal{E}|, F_{out})`
    """

    def __init__(self, in_channels: int, edge_dim: int, out_channels: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.edge_dim = edge_dim
        self.out_channels = out_channels
        self.mlp = Sequential(
            Linear(edge_dim + 2 * in_channels, out_channels),
            ReLU(),
            Linear(out_channels, out_channels),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset(self.mlp)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        _check_shapes(self, x, edge_index, edge_attr, self.in_channels, self.edge_dim)
        src, dst = edge_index[0], edge_index[1]
        return self.mlp(torch.cat([edge_attr, x[dst], x[src]], dim=-1))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"edge_dim={self.edge_dim})"
        )


class EdgePoolConv(MessagePassing):
    r"""Edge pooling: each node folds its incident edges into its representation,

    .. math::
        \mathbf{x}^{\prime}_i = h_{\mathbf{\Theta}} \left( (1 + \epsilon) \cdot
        \mathbf{x}_i \,\Vert\, \bigoplus_{j \in \mathcal{N}(i)} \mathrm{ReLU}
        ( \mathbf{x}_j + \mathbf{W} \mathbf{e}_{j,i} ) \right)

    where :math:`\bigoplus` is the aggregation (mean by default), :math:`\Vert` is
    concatenation, :math:`\mathbf{W}` maps edge features to the node feature size and
    :math:`h_{\mathbf{\Theta}}` is a two-layer MLP from :math:`2F` to :math:`F_{out}`.
    A node without edges pools a zero vector.

    Args:
        in_channels (int): Node feature size :math:`F`.
        out_channels (int): Output size :math:`F_{out}`.
        edge_dim (int): Edge feature size :math:`D`.
        eps (float, optional): (Initial) :math:`\epsilon`. (default: :obj:`0.`)
        train_eps (bool, optional): Learn :math:`\epsilon`. (default: :obj:`False`)
        aggr (str, optional): ``"mean"``, ``"add"`` or ``"max"``. (default: ``"mean"``)
        **kwargs (optional): Additional arguments of
            :class:`torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, D)`
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        edge_dim: int,
        eps: float = 0.0,
        train_eps: bool = False,
        aggr: str = "mean",
        **kwargs: object,
    ) -> None:
        super().__init__(aggr=aggr, **kwargs)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.edge_dim = edge_dim
        self.initial_eps = eps
        self.lin = Linear(edge_dim, in_channels)
        self.nn = Sequential(
            Linear(2 * in_channels, out_channels), ReLU(), Linear(out_channels, out_channels)
        )
        self.eps: Tensor
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.lin.reset_parameters()
        reset(self.nn)
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        if not isinstance(edge_index, Tensor):  # (a SparseTensor: no per-edge features)
            raise ValueError(
                f"'{self.__class__.__name__}' expects edge_index as a [2, num_edges] index "
                f"tensor, got {type(edge_index).__name__}: pass the edges' index, with "
                "edge_attr in the same order"
            )
        _check_shapes(self, x, edge_index, edge_attr, self.in_channels, self.edge_dim)
        pooled = self.propagate(edge_index, x=x, edge_attr=edge_attr)
        return self.nn(torch.cat([(1 + self.eps) * x, pooled], dim=-1))

    def message(self, x_j: Tensor, edge_attr: Tensor) -> Tensor:
        return (x_j + self.lin(edge_attr)).relu()

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"edge_dim={self.edge_dim}, aggr={self.aggr!r})"
        )


def _check_shapes(
    layer: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    edge_attr: Tensor,
    in_channels: int,
    edge_dim: int,
) -> None:
    name = layer.__class__.__name__
    if x.dim() != 2 or x.size(-1) != in_channels:
        raise ValueError(
            f"'{name}' expects node features of shape [num_nodes, {in_channels}], got "
            f"{list(x.shape)}. Build it with in_channels={x.size(-1)} or fix the input."
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"'{name}' expects edge_index of shape [2, num_edges], got {list(edge_index.shape)}"
        )
    if edge_attr.dim() != 2 or edge_attr.size(-1) != edge_dim:
        raise ValueError(
            f"Edge feature dimensionality of '{name}' does not match: got "
            f"{list(edge_attr.shape)}, expected [num_edges, {edge_dim}]. Consider setting "
            f"the 'edge_dim' argument of '{name}' to {edge_attr.size(-1)}."
        )
    if edge_attr.size(0) != edge_index.size(1):
        raise ValueError(
            f"'{name}' got {edge_attr.size(0)} edge feature rows for {edge_index.size(1)} "
            "edges; give one row of edge_attr per column of edge_index"
        )
