"""The ``hulk`` planner: the trained GNN's scores, Algorithm 1's decoding, a short search.

``plan_gnn(cost, jobs, ...)`` is what ``hulk_planner.api`` calls (as ``hulk`` and ``gnn``).
The shipped weights (``weights/hulk-gnn.pt``, settings in ``weights/hulk-gnn.json``) are
read once per process, without torch (``infer.py``); inference runs in numpy unless
``HULK_GNN_DEVICE`` (or ``device=``) says ``torch``, ``cuda`` or ``cpu`` (torch on that
device). Re-planning after servers come or go is just planning again on the new cluster:
the graph is rebuilt and inference re-run; ``sticky`` (server -> its previous job) makes
the decoding and the refinement prefer to keep servers where they were.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hulk_planner.cost import CostModel
from hulk_planner.errors import InvalidRequest
from hulk_planner.gnn.decode import Share, decode
from hulk_planner.gnn.graph import build_graph, graph_arrays, job_features
from hulk_planner.gnn.infer import NumpyHulkGNN, load_weights
from hulk_planner.model import Cluster, Job, Plan

WEIGHTS_NAME = "hulk-gnn.pt"
# A weights file of `hulk train` to plan with instead of the shipped one (`hulk plan
# --weights`, `hulk operator --gnn-weights` set it).
WEIGHTS_ENV = "HULK_GNN_WEIGHTS"


def shipped_weights() -> Path:
    return Path(str(resources.files("hulk_planner.gnn") / "weights" / WEIGHTS_NAME))


def file_sha256(path: str | Path) -> str:
    """A weights (or data) file's sha256, as ``hulk train`` records it and ``hulk plan``
    names the weights it plans with (here, beside the weights: no torch to import)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def default_weights() -> Path:
    """The weights the GNN planner loads: ``$HULK_GNN_WEIGHTS`` if set, else the shipped."""
    return Path(os.environ.get(WEIGHTS_ENV) or shipped_weights())


def check_weights(path: str | Path, field: str) -> None:
    """Raise ``InvalidRequest`` naming ``field`` unless ``path`` holds weights the planner
    can run (read, and a forward pass on the paper's cluster with its jobs)."""
    from hulk_planner.datasets import paper_cluster, paper_jobs

    fix = "give a .pt file that `hulk train --output FILE` wrote"
    if not Path(path).is_file():
        raise InvalidRequest(field, f"{str(path)!r} is not a file", fix)
    if not zipfile.is_zipfile(path):
        raise InvalidRequest(
            field, f"{str(path)!r} is not a weights file (not a zip, as torch.save writes)", fix
        )
    try:
        # (weights of 1e30 overflowed in numpy with a RuntimeWarning line before this
        # one-line error: a trial; the scores' check below tells it)
        with np.errstate(all="ignore"):
            out = _paper_scores(str(path), _stamp(str(path)))
        if out.shape != (len(paper_cluster().servers), 1 + len(paper_jobs())):
            raise ValueError(f"scores of shape {out.shape}")
        if not np.isfinite(out).all():
            raise ValueError("its scores are not finite (NaN or infinite weights)")
    except Exception as exc:  # anything that is not such a file: one line, not a traceback
        if isinstance(exc, KeyError):
            why = f"it holds no {exc.args[0]!r}"
        else:
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
            why = f"{type(exc).__name__}: {text.splitlines()[0][:160] if text else ''}"
        raise InvalidRequest(field, f"{str(path)!r} is not Hulk GNN weights ({why})", fix) from None


UNTRAINED = (
    "the network calls every server of the paper's cluster idle for the paper's four jobs, "
    "as weights trained on too little do: plans with them rest on the decoding's shares and "
    "the refinement alone (train with more --examples and --epochs, docs/gnn.md; or plan "
    "with the shipped weights)"
)


def untrained(path: str | Path) -> str | None:
    """``UNTRAINED`` where weights (checked by ``check_weights``) score no server of the
    paper's cluster above idle for any of its four jobs, else None (before, such weights
    planned without a word, the refinement hiding them: a laptop trial)."""
    out = _paper_scores(str(path), _stamp(str(path)))
    return UNTRAINED if not (out.argmax(axis=1) > 0).any() else None


DEVICES = ("numpy", "torch", "cpu", "cuda")


def resolve_device(name: str | None) -> str:
    """The device to run the network on: ``name``, else ``$HULK_GNN_DEVICE``, else numpy
    (``torch``: CUDA when present, else CPU). An unknown one, or CUDA where there is none,
    is an ``InvalidRequest`` naming the variable."""
    field = "device" if name else "HULK_GNN_DEVICE"
    device = name or os.environ.get("HULK_GNN_DEVICE") or "numpy"
    if device not in DEVICES and not re.fullmatch(r"cuda:\d+", device):
        raise InvalidRequest(
            field, f"unknown device {device!r}", f"use one of {', '.join(DEVICES)}"
        )
    if device == "numpy":
        return device
    try:
        import torch
    except ImportError:
        raise InvalidRequest(
            field, f"{device} needs torch, which is not installed", "pip install 'hulk[gnn]'"
        ) from None
    if device == "torch":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and (why := cuda_problem(device)) is not None:
        raise InvalidRequest(field, why, "use numpy or cpu")
    return device


def cuda_problem(device: str) -> str | None:
    """Why the CUDA device ``device`` (``cuda`` or ``cuda:N``) cannot run here, or None:
    checked before any work (before, ``cuda:9`` on a machine of one GPU, or ``cudafoo``,
    passed the checks and failed as a traceback after ``hulk train`` had labelled for
    minutes; a review)."""
    import torch

    if not re.fullmatch(r"cuda(:\d+)?", device):
        return f"unknown device {device!r}"
    if not torch.cuda.is_available():
        return f"{device}: no CUDA device on this machine"
    count = torch.cuda.device_count()
    if ":" in device and int(device.split(":")[1]) >= count:
        return f"{device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    return None


def refine_budget(servers: int) -> float:
    """Default refinement seconds: 1 s plus 1 s per 1,000 servers, at most 2 s."""
    return min(2.0, 1.0 + servers / 1000.0)


@dataclass
class Timings:
    graph_s: float = 0.0
    inference_s: float = 0.0
    decode_s: float = 0.0


def _stamp(path: str) -> tuple[int, int]:
    """The file's version for the caches below: weights written again at the same path (a
    notebook's train, plan, retrain, plan) are read again (before, the first stayed: a
    trial)."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=8)
def _checked(path: str, stamp: tuple[int, int], field: str) -> None:
    check_weights(path, field)


@lru_cache(maxsize=4)
def _numpy_model(path: str, stamp: tuple[int, int]) -> NumpyHulkGNN:
    w = load_weights(path)
    return NumpyHulkGNN(w["state_dict"], w["config"])


@lru_cache(maxsize=4)
def _paper_scores(path: str, stamp: tuple[int, int]) -> np.ndarray:
    """The network's scores on the paper's cluster for its four jobs, once per file version:
    ``check_weights`` checks them, ``untrained`` reads them (each ran the network anew,
    and ``hulk plan --weights`` ran both)."""
    from hulk_planner.datasets import paper_cluster, paper_jobs

    cluster = paper_cluster()
    arrays, jobs = graph_arrays(build_graph(cluster)), job_features(paper_jobs(), cluster)
    out = _numpy_model(path, stamp).scores(arrays, jobs)
    out.setflags(write=False)  # (shared by the callers)
    return out


@lru_cache(maxsize=4)
def _torch_model(path: str, stamp: tuple[int, int], device: str) -> Any:
    import torch

    from hulk_planner.gnn.model import HulkGNN

    w = load_weights(path)
    # (the feature sizes too: weights of another feature set fail as check_weights says)
    dims = ("hidden", "gcn_layers", "node_dim", "edge_dim", "job_dim")
    model = HulkGNN(**{k: w["config"][k] for k in dims if k in w["config"]})
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in w["state_dict"].items()})
    return model.to(device).eval()


def scores(
    cost: CostModel,
    jobs: Sequence[Job],
    weights: str | Path | None = None,
    device: str | None = None,
    timings: Timings | None = None,
) -> np.ndarray:
    """The network's logits [servers, 1 + jobs] (column 0 idle) for this cluster."""
    path = str(weights or default_weights())
    if weights is None and not Path(path).is_file():  # (a given file is checked by its caller;
        # before, os.stat's FileNotFoundError: a traceback, a review)
        if os.environ.get(WEIGHTS_ENV):
            raise InvalidRequest(
                WEIGHTS_ENV, f"{path} is not a file", "give a hulk train weights file, or unset it"
            )
        raise InvalidRequest(
            "weights",
            f"the shipped GNN weights {path} are missing from this install",
            "reinstall hulk, or give --weights FILE",
        )
    device = resolve_device(device)
    t0 = time.perf_counter()
    arrays = graph_arrays(build_graph(cost.cluster, cost.net))
    jx = job_features(jobs, cost.cluster)
    t1 = time.perf_counter()
    if device == "numpy":
        out = _numpy_model(path, _stamp(path)).scores(arrays, jx)
    else:
        import warnings

        import torch

        # torch_geometric scripts two classes as it loads, which torch >= 2.10 reports as
        # deprecated on every run (pyg-team/pytorch_geometric#10697): not the user's concern
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
        )
        from hulk_planner.gnn.graph import to_data

        data = to_data(arrays, jx).to(device)
        with torch.no_grad():
            logits = _torch_model(path, _stamp(path), device)(
                data.x, data.edge_index, data.edge_attr, data.edge_weight, data.job_x
            )
        out = logits.cpu().numpy()
    if timings is not None:
        timings.graph_s += t1 - t0
        timings.inference_s += time.perf_counter() - t1
    return out


def plan_gnn(
    cost: CostModel,
    jobs: Sequence[Job],
    *,
    seed: int = 0,
    time_budget_s: float | None = None,
    max_iterations: int | None = None,
    sticky: Mapping[str, str] | None = None,
    share: Share | Literal["best"] = "best",
    weights: str | Path | None = None,
    device: str | None = None,
    timings: Timings | None = None,
    name: str = "hulk",
    shared: SharedScores | None = None,
) -> Plan:
    """Plan with the GNN: scores, decoding, ``time_budget_s`` of refinement (default
    ``refine_budget``; ``max_iterations`` instead bounds the refinement by moves).
    ``shared``: scores of a cluster these servers belong to, with these jobs among its
    (``shared_scores``), used instead of inference on this cluster."""
    if not jobs:
        return Plan(name)
    logits = shared.of(cost, jobs) if shared is not None else None
    if logits is None:
        logits = scores(cost, jobs, _weights(weights), device, timings)
    t = time.perf_counter()
    if time_budget_s is not None:
        budget = time_budget_s
    elif max_iterations is not None:  # bounded by moves alone: the same plan on any machine
        budget = math.inf
    else:
        budget = refine_budget(len(cost.cluster.servers))
    result = decode(
        cost,
        jobs,
        logits,
        refine_s=budget,
        refine_iterations=max_iterations,
        seed=seed,
        share=share,
        sticky=sticky,
        name=name,
    )
    if timings is not None:
        timings.decode_s += time.perf_counter() - t
    return replace(result, planner=name)


def _weights(weights: str | Path | None) -> Path:
    """The weights file to plan with, checked once per file version where it is not the
    shipped one (``InvalidRequest`` naming ``weights`` or ``$HULK_GNN_WEIGHTS``)."""
    # ("" is given, and refused: not the default, a review)
    path = Path(weights) if weights is not None else default_weights()
    if weights is not None or os.environ.get(WEIGHTS_ENV):  # (the shipped: the package's)
        field = "weights" if weights is not None else WEIGHTS_ENV
        if not path.is_file():  # (checked each time: the file may go)
            check_weights(path, field)
        _checked(str(path), _stamp(str(path)), field)  # once per file version
    return path


@dataclass(frozen=True)
class SharedScores:
    """The network's logits on a whole cluster with all the jobs of a request, for planning
    groups of them (priorities, ``allowedRegions``) on parts of it: each group decodes its
    jobs' columns on its servers' rows (``of``) instead of a graph and an inference of its
    own (10 priorities on 5,000 servers: a graph and inference each, 12 s of a 13 s plan;
    ``bench/priority_groups.py``)."""

    rows: Mapping[str, int]  # server name -> row
    columns: Mapping[str, int]  # job name -> column (0 is idle)
    logits: np.ndarray

    def of(self, cost: CostModel, jobs: Sequence[Job]) -> np.ndarray | None:
        """The logits [servers, 1 + jobs] of ``cost``'s servers and ``jobs``; None where
        one of them is not among those scored."""
        try:
            rows = [self.rows[s.name] for s in cost.cluster.servers]
            columns = [0] + [self.columns[j.name] for j in jobs]
        except KeyError:
            return None
        return self.logits[np.ix_(rows, columns)]


def shared_scores(
    cluster: Cluster, jobs: Sequence[Job], weights: str | Path | None = None
) -> SharedScores:
    """One inference on ``cluster`` with all ``jobs``, for ``plan_gnn(shared=...)``."""
    logits = scores(CostModel(cluster), jobs, _weights(weights))
    return SharedScores(
        {s.name: k for k, s in enumerate(cluster.servers)},
        {j.name: 1 + k for k, j in enumerate(jobs)},
        logits,
    )


def planner(cost: CostModel, jobs: Sequence[Job], options: Any) -> Plan:
    """The ``api.PLANNERS`` entry: ``options`` is ``api.Options``."""
    return plan_gnn(
        cost,
        jobs,
        seed=options.seed,
        time_budget_s=options.time_budget_s,
        max_iterations=options.max_iterations,
        sticky=options.sticky,
        weights=options.weights,
        shared=options.shared,
    )
