"""examples/train_stage.py on CUDA against the same run on CPU: the same losses, the step time.

Runs the reference stage trainer as the operator's stage pods would (one process per pod,
the ``HULK_*`` variables of docs/operator.md, "Env", set by hand here so that this needs
only PyTorch) for each layout below, once with ``--device cpu`` (gloo) and once with
``--device cuda`` (NCCL), and prints per layout: each device's exit status, the median
step time of steps 2..n (the first holds the warm-up), CUDA's time over CPU's, and the
largest relative difference between the two runs' losses (the same model, data and
schedule: only float rounding differs).

Layouts: one stage in one process (the whole model on one GPU); two pipeline stages
(1F1B over NCCL's send/recv) and a stage of two data-parallel lanes (NCCL all-reduce),
each process on its own GPU (``LOCAL_RANK`` is a process's GPU). Where the machine has
fewer GPUs than a layout's processes, both stages run on GPU 0: NCCL refuses two ranks on
one GPU, and the row prints the error's last line.

    python bench/train_stage_device.py [--hidden 1024] [--layers 8] [--steps 12]

Without CUDA the CUDA columns read "no CUDA".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[1] / "examples" / "train_stage.py"


def pod_env(
    rank: int, world: int, stage: int, stages: int, replica: int, nodes: int, layers: tuple
) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0",
        "HULK_STAGE_INDEX": str(stage),
        "HULK_NUM_STAGES": str(stages),
        "HULK_STAGE_REPLICA": str(replica),
        "HULK_STAGE_NODES": str(nodes),
        "HULK_STAGE_PARALLELISM": "data",
        "HULK_LAYER_START": str(layers[0]),
        "HULK_LAYER_END": str(layers[1]),
    }


def layouts(n_layers: int) -> dict[str, list[dict[str, str]]]:
    half = n_layers // 2
    return {
        "1 stage, 1 process": [pod_env(0, 1, 0, 1, 0, 1, (0, n_layers))],
        "2 pipeline stages": [
            pod_env(0, 2, 0, 2, 0, 1, (0, half)),
            pod_env(1, 2, 1, 2, 0, 1, (half, n_layers)),
        ],
        "1 stage, 2 data lanes": [
            pod_env(0, 2, 0, 1, 0, 2, (0, n_layers)),
            pod_env(1, 2, 0, 1, 1, 2, (0, n_layers)),
        ],
    }


def run(pods: list[dict[str, str]], device: str, args: argparse.Namespace, gpus: int):
    """(the worst exit status, the losses by step, the step times, a failing process's last
    line)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for pod in pods:
            gpu = int(pod["RANK"]) if int(pod["RANK"]) < gpus else 0
            env = {
                **os.environ,
                **pod,
                "HULK_MICRO_BATCHES": str(args.micro_batches),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "CUDA_VISIBLE_DEVICES": str(gpu),
                "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // len(pods))),
            }
            cmd = [
                sys.executable,
                str(TRAINER),
                f"--hidden={args.hidden}",
                f"--global-batch={args.batch}",
                f"--steps={args.steps}",
                "--lr=0.01",
                f"--device={device}",
                "--timeout-min=1",
                f"--checkpoint-dir={tmp}",
                f"--checkpoint-every={args.steps}",
            ]
            procs.append(
                subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        outs = []
        for p in procs:
            try:
                text, _ = p.communicate(timeout=150)
            except subprocess.TimeoutExpired:
                p.kill()
                text = (p.communicate()[0] or "") + "\n(timed out)"
            outs.append((p.returncode, text))
    losses: dict[int, float] = {}
    times: list[float] = []
    for line in (ln for _, text in outs for ln in text.splitlines()):
        if line.startswith("step "):
            w = line.split()
            losses[int(w[1])] = float(w[3])
            times.append(float(w[5]))
    worst = max(outs, key=lambda o: o[0] != 0)
    lines = worst[1].strip().splitlines() or [""]
    at = next((i for i in range(len(lines) - 1, -1, -1) if "rror" in lines[i]), len(lines) - 1)
    last = " ".join(lines[at : at + 2])  # NCCL writes "Last error:" and the error below it
    return max(rc for rc, _ in outs), losses, times, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=512, help="rows per step")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if gpus else "no CUDA"
    print(
        f"torch {torch.__version__}, {gpus} GPU(s) ({name}), {os.cpu_count()} CPU cores; "
        f"hidden {args.hidden}, {args.layers} layers, batch {args.batch} in "
        f"{args.micro_batches} micro-batches, {args.steps} steps"
    )
    print("| layout | CPU s/step | CUDA s/step | CUDA / CPU | loss rel. diff | note |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, pods in layouts(args.layers).items():
        rc_c, loss_c, t_c, last_c = run(pods, "cpu", args, gpus)
        cpu = f"{statistics.median(t_c[1:]):.4f}" if rc_c == 0 and len(t_c) > 1 else f"rc {rc_c}"
        if not gpus:
            print(f"| {label} | {cpu} | no CUDA | | | {'' if rc_c == 0 else last_c} |")
            continue
        rc_g, loss_g, t_g, last_g = run(pods, "cuda", args, gpus)
        note = "" if rc_c == 0 else f"CPU: {last_c}"
        if rc_g != 0:
            print(f"| {label} | {cpu} | rc {rc_g} | | | {note} CUDA: {last_g[:200]} |")
            continue
        gpu = statistics.median(t_g[1:])
        ratio = f"{gpu / statistics.median(t_c[1:]):.3f}" if rc_c == 0 else ""
        diff = max(
            (abs(loss_g[s] - loss_c[s]) / max(abs(loss_c[s]), 1e-12) for s in loss_c),
            default=float("nan"),
        )
        shared = " (processes share GPU 0)" if len(pods) > gpus else ""
        print(f"| {label} | {cpu} | {gpu:.4f} | {ratio} | {diff:.1e} | {note}{shared} |")


if __name__ == "__main__":
    main()
