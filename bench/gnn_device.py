"""GNN training and inference on each device: numpy, torch on CPU, torch on CUDA if present.

1. Training: ``--examples`` clusters from the training generator (``--max-jobs`` jobs at
   most), labelled by the search with ``--iterations`` moves (the labels' quality does not
   matter for timing), the shipped network's size, ``--epochs`` epochs on each device.
   Prints seconds per epoch (median of epochs 2..n: the first holds CUDA's warm-up), the
   CUDA/CPU ratio, and each device's last accuracies (both must learn).
2. Inference: one forward pass of the shipped weights on clusters of ``--sizes`` servers
   with 10 jobs: numpy (what ``hulk plan`` uses, no torch), torch on CPU, torch on CUDA
   (with the copies to the GPU and back, as ``planner.scores`` pays them); median of
   ``--repeats`` after a warm-up, each device's time over numpy's, and the largest
   difference of its logits from numpy's (the same network on every device); up to 1,000
   servers, whether ``plan_gnn`` with 300 refinement moves gives the same plan from each
   device's logits as from numpy's. Each size's row also gives the graph's edges and each
   server's neighbours (fewest, most, mean).

    python bench/gnn_device.py [--epochs 10] [--sizes 47,1000,5000,10000]

Without CUDA the CUDA rows read "no CUDA". Torch on CPU uses ``torch.get_num_threads()``
threads (printed), numpy its BLAS threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster
from hulk_planner.generate import random_cluster
from hulk_planner.gnn.data import GenerationSettings, generate
from hulk_planner.gnn.graph import build_graph, graph_arrays, job_features, to_data
from hulk_planner.gnn.planner import _numpy_model, _stamp, _torch_model, default_weights, plan_gnn
from hulk_planner.model import Cluster, Job
from hulk_planner.presets import PRESETS, preset_jobs

# the inference rows also plan with each device's logits (a move budget, not a time budget,
# so the plans may be compared) on clusters up to this size
PLAN_UP_TO = 1000


def devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def training(examples: int, iterations: int, max_jobs: int, epochs: int, batch: int) -> None:
    from hulk_planner.gnn.train import TrainSettings, example_data, train

    gen = GenerationSettings(examples=examples, iterations=iterations, max_jobs=max_jobs)
    t = time.perf_counter()
    data = [example_data(ex) for ex in generate(gen, workers=os.cpu_count() or 1)]
    servers = sum(int(d.num_nodes) for d in data)
    print(
        f"== training: {examples} clusters ({servers:,} servers), labelled with {iterations} "
        f"moves in {time.perf_counter() - t:.1f} s; {epochs} epochs, batch {batch}, hidden 64"
    )
    per_epoch: dict[str, float] = {}
    for dev in devices():
        t = time.perf_counter()
        settings = TrainSettings(epochs=epochs, batch_size=batch, device=dev)
        _, logs = train(data, settings, progress=False)
        wall = time.perf_counter() - t
        per_epoch[dev] = statistics.median(log.seconds for log in logs[1:] or logs)
        last = logs[-1]
        print(
            f"{dev:>4}: {per_epoch[dev]:.3f} s/epoch (first {logs[0].seconds:.2f} s, all "
            f"{wall:.1f} s); last epoch loss {last.loss:.3f} accuracy {last.accuracy:.3f} "
            f"held-out {last.val_accuracy:.3f}"
        )
    if "cuda" in per_epoch:
        print(f"CUDA / CPU seconds per epoch: {per_epoch['cuda'] / per_epoch['cpu']:.3f}")
    else:
        print("cuda: no CUDA")
    print()


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: CUDA context, kernels, caches
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cluster(size: int) -> Cluster:
    return paper_cluster() if size == 47 else random_cluster(size, 1)


def inference(sizes: list[int], repeats: int) -> None:
    path = str(default_weights())
    jobs = preset_jobs(sorted(PRESETS))
    print(
        f"== inference, {len(jobs)} jobs, median of {repeats}; torch CPU threads "
        f"{torch.get_num_threads()}, {os.cpu_count()} CPUs"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
    )
    for size in sizes:
        print(_one_size(size, jobs, path, repeats), flush=True)


def _one_size(size: int, jobs: list[Job], path: str, repeats: int) -> str:
    cluster = _cluster(size)
    cost = CostModel(cluster)
    t = time.perf_counter()
    arrays = graph_arrays(build_graph(cluster, cost.net))
    graph_s = time.perf_counter() - t
    jx = job_features(jobs, cluster)
    numpy_model = _numpy_model(path, _stamp(path))
    reference = numpy_model.scores(arrays, jx)
    np_s = _median_seconds(lambda: numpy_model.scores(arrays, jx), repeats)
    edges = arrays.edge_index.shape[1]
    deg = np.bincount(arrays.edge_index[0], minlength=size)  # each edge is listed both ways
    row = [
        f"{size:>6,} servers ({edges:,} edges; neighbours {deg.min()}-{deg.max()}, "
        f"mean {deg.mean():.1f}): graph {graph_s:.2f} s"
    ]
    row.append(f"numpy {np_s * 1e3:.1f} ms")
    for dev in devices():
        model = _torch_model(path, _stamp(path), dev)

        def run(dev: str = dev, model: torch.nn.Module = model) -> np.ndarray:
            data = to_data(arrays, jx).to(dev)
            with torch.no_grad():
                out = model(data.x, data.edge_index, data.edge_attr, data.edge_weight, data.job_x)
            return out.cpu().numpy()  # waits for the GPU

        s = _median_seconds(run, repeats)
        diff = float(np.abs(run() - reference).max())
        row.append(f"torch-{dev} {s * 1e3:.1f} ms ({s / np_s:.3f}x numpy, max |diff| {diff:.0e})")
        if size <= PLAN_UP_TO:
            same = plan_gnn(cost, jobs, max_iterations=300, device=dev).assignment == (
                plan_gnn(cost, jobs, max_iterations=300, device="numpy").assignment
            )
            row.append(f"plan (300 moves) {'same as' if same else 'DIFFERS from'} numpy's")
    if not torch.cuda.is_available():
        row.append("cuda: no CUDA")
    return "; ".join(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--max-jobs", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=4, help="graphs per batch (as shipped)")
    ap.add_argument("--sizes", default="47,1000,5000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    # torch_geometric (imported by training) reports its own torch.jit use on every run
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")
    if not args.skip_training:
        training(args.examples, args.iterations, args.max_jobs, args.epochs, args.batch_size)
    inference([int(s) for s in args.sizes.split(",")], args.repeats)


if __name__ == "__main__":
    main()
