"""Inference without torch: the shipped weights read straight from their ``.pt`` file and
``HulkGNN``'s forward pass written again in numpy.

Why: ``import torch`` costs about 1.8 s and ``import torch_geometric`` 2 more on the
project's 2-core machines, while ``hulk plan`` on the paper's cluster should answer in
under 2 s. The network is small (a few matrix products per layer), so numpy runs it as
fast as torch on a CPU, also at 5,000 servers. ``tests/hulk_planner/gnn/test_gnn_infer.py``
checks that both give the same scores to 1e-4. Torch is used instead when the caller asks
for it (``device="cuda"`` or ``"torch"``).

The ``.pt`` reader handles what ``torch.save`` writes for a dict of plain values and
tensors (a zip with ``data.pkl`` and one raw file per storage; the pickle calls
``torch._utils._rebuild_tensor_v2``). Anything else in the pickle is refused, so reading a
weights file runs no code; if a future torch writes a different layout the reader raises
``WeightsFormatError`` and ``load_weights`` falls back to ``torch.load`` (not for an object
the reader refuses: ``RefusedObject``).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hulk_planner.gnn.graph import GraphArrays

_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class WeightsFormatError(ValueError):
    """The file is not a ``torch.save`` archive this reader understands."""


class RefusedObject(WeightsFormatError):
    """The pickle names an object weights never hold (code to run, say): refused, and not
    handed to ``torch.load`` either (whose safe mode would refuse it too, at length)."""


def _rebuild_tensor(
    storage: np.ndarray,
    offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool = False,
    hooks: Any = None,
    metadata: Any = None,
) -> np.ndarray:
    item = storage.itemsize
    if not size:
        return np.array(storage[offset])
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * item for s in stride)
    )
    return np.array(view)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, storage: Callable[[str, np.dtype], np.ndarray]) -> None:
        super().__init__(io.BytesIO(data))
        self._storage = storage

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return np.dtype(_DTYPES[name])
        raise RefusedObject(f"unexpected object {module}.{name} in the weights file")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise WeightsFormatError(f"unexpected persistent id {pid!r}")
        _tag, dtype, key, _location, _numel = pid
        return self._storage(str(key), dtype)


def read_pt(path: str | Path) -> Any:
    """The object a ``torch.save`` archive holds, tensors as numpy arrays (no torch)."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise WeightsFormatError(f"{path} is not a zip archive") from exc
    with archive:
        names = archive.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise WeightsFormatError(f"{path} has no data.pkl")
        prefix = pkl[: -len("data.pkl")]
        order = prefix + "byteorder"
        if order in names and archive.read(order).decode().strip() != "little":
            raise WeightsFormatError(f"{path} was written big-endian")

        def storage(key: str, dtype: np.dtype) -> np.ndarray:
            return np.frombuffer(archive.read(f"{prefix}data/{key}"), dtype=dtype)

        return _Unpickler(archive.read(pkl), storage).load()


# the layout of ``{"format", "config", "state_dict"}`` that ``train.save`` writes
WEIGHTS_FORMAT = 1


def load_weights(path: str | Path) -> dict[str, Any]:
    """``{"config": ..., "state_dict": {name: np.ndarray}, ...}`` from a weights file,
    checked against itself (``check_consistent``)."""
    try:
        out = dict(read_pt(path))
    except RefusedObject:
        raise
    except WeightsFormatError:
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
        obj["state_dict"] = {k: v.numpy() for k, v in obj["state_dict"].items()}
        out = dict(obj)
    check_consistent(out)
    return out


def check_consistent(weights: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless the file's format is ``WEIGHTS_FORMAT`` and its config
    says what its tensors hold: as many GCN layers, the same embedding size. Before, a
    config of 1 GCN layer beside 3 layers' tensors planned with one, silently (and the
    torch path raised a traceback); ``format: 99`` was taken (a trial)."""
    if weights.get("format") != WEIGHTS_FORMAT:
        raise ValueError(
            f"format {weights.get('format')!r}, where this version reads {WEIGHTS_FORMAT}"
        )
    config, state = weights["config"], weights["state_dict"]
    convs = {int(k.split(".")[1]) for k in state if k.startswith("convs.")}
    if convs != set(range(int(config["gcn_layers"]))):
        raise ValueError(
            f"its config says {config['gcn_layers']} GCN layer(s), its tensors hold {len(convs)}"
        )
    hidden = int(np.shape(state["encoder.weight"])[0])
    if hidden != int(config["hidden"]):
        raise ValueError(f"its config says hidden {config['hidden']}, its tensors hold {hidden}")


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0)


class _Segments:
    """Sums of per-edge rows into their target nodes, by one sort and ``np.add.reduceat``."""

    def __init__(self, target: np.ndarray, num_nodes: int) -> None:
        self.order = np.argsort(target, kind="stable")
        sorted_t = target[self.order]
        self.starts = (
            np.flatnonzero(np.r_[True, sorted_t[1:] != sorted_t[:-1]])
            if len(sorted_t)
            else np.zeros(0, dtype=np.int64)
        )
        self.nodes = sorted_t[self.starts] if len(sorted_t) else np.zeros(0, dtype=np.int64)
        self.num_nodes = num_nodes
        self.count = np.bincount(target, minlength=num_nodes).astype(np.float32)

    def sum(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((self.num_nodes, rows.shape[1]), dtype=rows.dtype)
        if len(self.order):
            out[self.nodes] = np.add.reduceat(rows[self.order], self.starts, axis=0)
        return out

    def mean(self, rows: np.ndarray) -> np.ndarray:
        return self.sum(rows) / np.maximum(self.count, 1.0)[:, None]


class NumpyHulkGNN:
    """``HulkGNN``'s forward pass for one graph, in numpy (float32)."""

    def __init__(self, state_dict: dict[str, np.ndarray], config: dict[str, Any]) -> None:
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in state_dict.items()}
        self.config = dict(config)
        self.gcn_layers = int(config["gcn_layers"])

    def _lin(self, name: str, a: np.ndarray, bias: bool = True) -> np.ndarray:
        out = a @ self.w[f"{name}.weight"].T
        if bias:
            out = out + self.w[f"{name}.bias"]
        return out

    def _mlp2(self, name: str, a: np.ndarray) -> np.ndarray:
        return self._lin(f"{name}.2", _relu(self._lin(f"{name}.0", a)))

    def embed(self, g: GraphArrays) -> np.ndarray:
        src, dst = g.edge_index[0], g.edge_index[1]
        n = g.num_nodes
        seg = _Segments(dst, n)
        h = _relu(self._lin("encoder", g.x))
        e = self._mlp2("edge_embedding.mlp", np.concatenate([g.edge_attr, h[dst], h[src]], 1))
        msg = _relu(h[src] + self._lin("pool.lin", e))
        pooled = seg.mean(msg)
        eps = float(self.w["pool.eps"].reshape(-1)[0])
        h = _relu(self._mlp2("pool.nn", np.concatenate([(1 + eps) * h, pooled], 1)))
        # GCN normalisation with a self loop of weight 1 per node (PyG's gcn_norm)
        w = g.edge_weight.astype(np.float32)
        deg = np.bincount(dst, weights=w, minlength=n).astype(np.float32) + 1.0
        dis = 1.0 / np.sqrt(deg)
        norm = (dis[src] * w * dis[dst])[:, None]
        self_norm = (dis * dis)[:, None]
        for k in range(self.gcn_layers):
            xw = self._lin(f"convs.{k}.lin", h, bias=False)
            out = seg.sum(norm * xw[src]) + self_norm * xw + self.w[f"convs.{k}.bias"]
            h = h + _relu(out)
        return h

    def scores(self, g: GraphArrays, job_x: np.ndarray) -> np.ndarray:
        """Logits [N, 1 + J]: column 0 idle, column k + 1 job k."""
        z = self.embed(g)
        job_x = np.asarray(job_x, dtype=np.float32)
        context = z.mean(axis=0, keepdims=True)
        jm = job_x.mean(axis=0, keepdims=True)
        jobs = len(job_x)
        gj = self._mlp2(
            "job_encoder",
            np.concatenate([job_x, np.repeat(jm, jobs, 0), np.repeat(context, jobs, 0)], 1),
        )
        hidden = z.shape[1]
        # pair MLP's first layer split over [z, g, z*g]: no [N, J, 3H] tensor is built
        w0 = self.w["pair.0.weight"]
        wz, wg = w0[:, :hidden], w0[:, hidden : 2 * hidden]
        wzg, wp = w0[:, 2 * hidden : 3 * hidden], w0[:, 3 * hidden :]
        node_p = g.x[:, self.config.get("pair_node", [])]  # [N, P]
        job_p = job_x[:, self.config.get("pair_job", [])]  # [J, P]
        zpart = z @ wz.T + self.w["pair.0.bias"]  # [N, H]
        gpart = gj @ wg.T  # [J, H]
        out = np.empty((len(z), jobs), dtype=np.float32)
        w2 = self.w["pair.2.weight"][0]
        b2 = float(self.w["pair.2.bias"][0])
        for k in range(jobs):
            pre = zpart + gpart[k] + (z * gj[k]) @ wzg.T + (node_p - job_p[k]) @ wp.T
            out[:, k] = _relu(pre) @ w2 + b2
        idle = self._lin("idle", z)
        return np.concatenate([idle, out], axis=1)
