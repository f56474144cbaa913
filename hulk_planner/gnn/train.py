"""Training ``HulkGNN`` on labelled examples (``data.py``) with cross-entropy, as the paper.

Each example becomes a PyG ``Data`` (``graph.to_data``) with ``y`` [N] (0 idle, k + 1 job
k) and ``job_x`` [J, F]; a ``DataLoader`` with ``follow_batch=["job_x"]`` batches graphs of
any size and job count. The last ``val_fraction`` of the examples is held out and its
accuracy (the share of servers whose most likely class is the label) is logged per epoch
with the loss. Everything is seeded (python, numpy, torch, the loader's shuffling); on CPU
two runs with the same settings give the same weights.

``save`` writes the weights (``.pt``: ``{"format", "config", "state_dict"}``, float32,
contiguous, readable without torch by ``infer.read_pt``) and next to them a ``.json`` with
the generation and training settings, the per-epoch metrics and the software versions.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch_geometric
from torch.nn import functional as F
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from hulk_planner.errors import InvalidRequest
from hulk_planner.gnn.data import Example
from hulk_planner.gnn.graph import build_graph, graph_arrays, job_features, to_data
from hulk_planner.gnn.infer import WEIGHTS_FORMAT
from hulk_planner.gnn.model import HulkGNN
from hulk_planner.gnn.planner import file_sha256
from hulk_planner.gnn.settings import TrainSettings


@dataclass
class EpochLog:
    epoch: int
    loss: float
    accuracy: float
    val_loss: float
    val_accuracy: float
    seconds: float


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def example_data(ex: Example) -> Data:
    """One example as PyG ``Data`` with labels ``y``."""
    cluster = ex.cluster()
    jobs = ex.job_list()
    arrays = graph_arrays(build_graph(cluster))
    col = {j.name: k + 1 for k, j in enumerate(jobs)}
    y = torch.tensor([col.get(ex.labels.get(n, ""), 0) for n in arrays.names], dtype=torch.long)
    return to_data(arrays, job_features(jobs, cluster), y=y)


def build_model(settings: TrainSettings) -> HulkGNN:
    return HulkGNN(hidden=settings.hidden, gcn_layers=settings.gcn_layers)


def _forward(model: HulkGNN, batch: Data) -> torch.Tensor:
    return model(
        batch.x,
        batch.edge_index,
        batch.edge_attr,
        batch.edge_weight,
        batch.job_x,
        batch.batch,
        batch.job_x_batch,
    )


def evaluate(model: HulkGNN, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """(mean cross-entropy per server, accuracy) over a loader."""
    model.eval()
    total = correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for batch in loader:
            batch = batch.to(device)
            logits = _forward(model, batch)
            loss_sum += float(F.cross_entropy(logits, batch.y, reduction="sum"))
            correct += int((logits.argmax(-1) == batch.y).sum())
            total += int(batch.y.numel())
    return loss_sum / max(total, 1), correct / max(total, 1)


def train(
    data: Sequence[Data],
    settings: TrainSettings,
    on_epoch: Callable[[EpochLog], None] | None = None,
    progress: bool = True,
) -> tuple[HulkGNN, list[EpochLog]]:
    """Train on ``data`` (the last ``val_fraction`` held out); returns the model (on CPU)
    and the per-epoch log."""
    seed_everything(settings.seed)
    device = pick_device(settings.device)
    n_val = round(len(data) * settings.val_fraction) if len(data) > 1 else 0
    train_set, val_set = list(data[: len(data) - n_val]), list(data[len(data) - n_val :])
    gen = torch.Generator().manual_seed(settings.seed)
    loader = DataLoader(
        train_set,
        batch_size=settings.batch_size,
        shuffle=True,
        generator=gen,
        follow_batch=["job_x"],
    )
    val_loader = DataLoader(val_set, batch_size=settings.batch_size, follow_batch=["job_x"])
    model = build_model(settings).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    steps = max(1, settings.epochs * len(loader))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr, total_steps=steps)
    logs: list[EpochLog] = []
    from tqdm.auto import tqdm

    # (counted as each epoch ends, before its log line: iterated over the epochs, the bar
    # counted an epoch when the next began and showed 0/3 beside epoch 1's line; a trial)
    bar = tqdm(total=settings.epochs, desc="train", unit="epoch", disable=not progress)
    for epoch in range(1, settings.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        loss_sum = 0.0
        correct = total = 0
        for batch in loader:
            batch = batch.to(device)
            opt.zero_grad()
            logits = _forward(model, batch)
            loss = F.cross_entropy(logits, batch.y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            loss_sum += loss.item() * int(batch.y.numel())
            correct += int((logits.argmax(-1) == batch.y).sum())
            total += int(batch.y.numel())
        val_loss, val_acc = evaluate(model, val_loader, device) if val_set else (math.nan, math.nan)
        log = EpochLog(
            epoch,
            loss_sum / max(total, 1),
            correct / max(total, 1),
            val_loss,
            val_acc,
            time.perf_counter() - t0,
        )
        if not math.isfinite(log.loss):
            bar.close()
            raise InvalidRequest(
                "--lr",
                f"training diverged at epoch {epoch} (loss {log.loss}); no weights written",
                f"lower the learning rate (it was {settings.lr:g})",
            )
        logs.append(log)
        shown = {"val_acc": f"{val_acc:.3f}"} if val_set else {}
        bar.set_postfix(loss=f"{log.loss:.3f}", acc=f"{log.accuracy:.3f}", **shown, refresh=False)
        bar.update(1)
        bar.refresh()
        if on_epoch:
            on_epoch(log)
    bar.close()
    return model.cpu().eval(), logs


def _finite(value: Any) -> Any:
    """A metric as JSON holds it: no NaN (e.g. held-out loss without held-out examples)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def save(
    model: HulkGNN,
    path: str | Path,
    *,
    generation: dict[str, Any],
    training: TrainSettings,
    logs: Sequence[EpochLog],
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``path`` (.pt) and the settings beside it (same name, .json)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        k: (v.float() if v.is_floating_point() else v).detach().cpu().contiguous().clone()
        for k, v in model.state_dict().items()
    }
    # Both files are written under temporary names and moved into place (weights last but
    # one, settings last): an interrupted or failed save leaves the previous pair whole.
    part = path.with_name(path.name + ".part")
    meta_path = path.with_suffix(".json")
    meta_part = meta_path.with_name(meta_path.name + ".part")
    try:
        torch.save(
            {"format": WEIGHTS_FORMAT, "config": dict(model.config), "state_dict": state}, part
        )
        meta = {
            "weights": path.name,
            "sha256": file_sha256(part),
            "format": WEIGHTS_FORMAT,
            "model": dict(model.config),
            "parameters": sum(int(v.numel()) for v in state.values()),
            "generation": generation,
            "training": asdict(training),
            "epochs": [{k: _finite(v) for k, v in asdict(e).items()} for e in logs],
            "software": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "torch_geometric": torch_geometric.__version__,
                "numpy": np.__version__,
            },
            **(extra or {}),
        }
        meta_part.write_text(json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n")
    except BaseException:  # (a failed write leaves no part behind either)
        part.unlink(missing_ok=True)
        meta_part.unlink(missing_ok=True)
        raise
    os.replace(part, path)
    os.replace(meta_part, meta_path)
    return path, meta_path
