"""examples/train_stage.py, the reference stage trainer, run as the operator's stage pods
would run it: one ``torchrun`` per pod of a plan, with the environment
``hulk_operator.manifests.desired_pods`` gives each pod (only the master's address is
127.0.0.1 instead of a pod's DNS name), on CPU with gloo.

The pipelined, data- and tensor-parallel run must end on the same weights as one process
training the whole model on the whole batch, and a run resumed from its checkpoint under
another plan (other stage boundaries, other GPU counts, a tensor stage) must go on as if it
had never stopped."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest
import torch

from hulk_operator.manifests import desired_pods
from hulk_planner.model import JobPlan, Stage

TRAINER = Path(__file__).resolve().parents[2] / "examples" / "train_stage.py"
HIDDEN, LAYERS, ROWS, SEED, LR, MOMENTUM = 8, 5, 12, 3, 0.1, 0.9
ARGS = [
    f"--hidden={HIDDEN}",
    f"--global-batch={ROWS}",
    f"--seed={SEED}",
    f"--lr={LR}",
    f"--momentum={MOMENTUM}",
    "--device=cpu",
    "--timeout-min=3",
]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_stage", TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_stage"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ts = _load()


def pod_envs(plan: JobPlan, gpus: Mapping[str, int]) -> list[dict[str, str]]:
    """Each stage pod's environment as the operator writes it, in rank order."""
    template = {"spec": {"containers": [{"name": "trainer", "image": "pytorch/pytorch"}]}}
    pods = desired_pods(
        job="toy", namespace="ns", uid="u", template=template, job_plan=plan, gpus=gpus
    )
    envs = [
        {e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in pods.values()
    ]
    return sorted(envs, key=lambda e: int(e["RANK"]))


def run_pods(plan: JobPlan, gpus: Mapping[str, int], extra: list[str]) -> list[str]:
    """Starts one torchrun per stage pod; returns each pod's output, failing on any exit
    status but 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for pod in pod_envs(plan, gpus):
        env = {
            **os.environ,
            **pod,
            "MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "PET_MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        cmd = [sys.executable, "-m", "torch.distributed.run", str(TRAINER), *ARGS, *extra]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=300)
            outs.append(out)
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    return outs


def reference(steps: int) -> tuple[list[dict[str, torch.Tensor]], list[float]]:
    """One process, the whole model, the whole batch: the weights after ``steps`` steps and
    each step's loss."""
    layers = [
        {n: t.requires_grad_() for n, t in ts.init_layer(i, HIDDEN, SEED).items()}
        for i in range(LAYERS)
    ]
    opt = torch.optim.SGD([t for p in layers for t in p.values()], lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(steps):
        x, y = ts.batch(s, SEED, ROWS, HIDDEN)
        for p in layers:
            x = ts.block_forward(p, x)
        loss = ts.loss_of(x, y, ROWS)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return [{n: t.detach() for n, t in p.items()} for p in layers], losses


def losses_of(outs: list[str]) -> dict[int, float]:
    found = {}
    for out in outs:
        for line in out.splitlines():
            if line.startswith("step "):
                words = line.split()
                found[int(words[1])] = float(words[3])
    return found


def assert_checkpoint(root: Path, step: int) -> None:
    want, _ = reference(step)
    assert ts.resume_point(root) == (step, root / f"step-{step:09d}")
    for i, layer in enumerate(want):
        saved = torch.load(root / f"step-{step:09d}" / f"layer-{i:05d}.pt", weights_only=True)
        for n, t in layer.items():
            torch.testing.assert_close(saved[n], t, rtol=1e-4, atol=1e-5, msg=f"layer {i} {n}")


@pytest.mark.slow
def test_pipeline_trains_as_one_process_and_resumes_under_another_plan(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    # two stages of two data-parallel lanes; server "a" has 2 GPUs (two processes that
    # split its layers), the others 1
    first = JobPlan(
        "toy", (Stage((0, 2), ("a", "b")), Stage((2, LAYERS), ("c", "d"))), micro_batches=3
    )
    outs = run_pods(
        first, {"a": 2, "b": 1, "c": 1, "d": 1}, ["--steps=2", f"--checkpoint-dir={ckpt}"]
    )
    assert_checkpoint(ckpt, 2)
    _, want_losses = reference(4)
    got = losses_of(outs)
    assert sorted(got) == [1, 2]
    for s, loss in got.items():
        assert loss == pytest.approx(want_losses[s - 1], rel=1e-4)
    assert "stage 0 layers 0-2 (data, 2 lane(s)" in outs[0]

    # re-planned: a tensor stage over two servers, then one server with 2 GPUs
    second = JobPlan(
        "toy",
        (Stage((0, 3), ("e", "f"), "tensor"), Stage((3, LAYERS), ("g",))),
        micro_batches=2,
    )
    outs = run_pods(second, {"e": 1, "f": 1, "g": 2}, ["--steps=4", f"--checkpoint-dir={ckpt}"])
    assert "from step 2" in outs[0]
    got = losses_of(outs)
    assert sorted(got) == [3, 4]
    for s, loss in got.items():
        assert loss == pytest.approx(want_losses[s - 1], rel=1e-4)
    assert_checkpoint(ckpt, 4)
    assert {p.name for p in ckpt.iterdir()} == {"progress.json", "step-000000004"}


def member(stage: int, replica: int, nodes: int, rank: int, kind: str = "data", **kw: object):
    layers = kw.pop("layers", ((0, 2), (2, 4))[stage])
    return ts.Member(
        rank=rank,
        stage=stage,
        num_stages=2,
        replica=replica,
        nodes=nodes,
        parallelism=kind,
        layers=layers,
        micro_batches=2,
        local_rank=int(kw.pop("local_rank", 0)),
    )


def test_layout_groups_lanes_and_tensor_slices() -> None:
    layout = ts.build_layout(
        [
            member(1, 1, 2, 4),
            member(0, 0, 2, 0),
            member(0, 0, 2, 1, local_rank=1),
            member(0, 1, 2, 2),
            member(1, 0, 2, 3),
        ]
    )
    assert layout.groups == (((0, 1), (2,)), ((3,), (4,)))
    assert layout.lanes == 2 and layout.place(4) == (1, 1)
    tensor = ts.build_layout(
        [member(0, 1, 2, 1, "tensor"), member(0, 0, 2, 0, "tensor"), member(1, 0, 1, 2)]
    )
    assert tensor.groups == (((0, 1),), ((2,),))


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([member(0, 0, 2, 0), member(1, 0, 1, 1)], "stage 0 has pods for replicas [0]"),
        ([member(0, 0, 1, 0)], "stage 1 has pods for replicas []"),
        (
            [member(0, 0, 1, 0), member(1, 0, 1, 1, layers=(3, 4))],
            "stage 1 starts at HULK_LAYER_START=3, not at layer 2",
        ),
        (
            [
                member(0, 0, 2, 0, "tensor"),
                member(0, 1, 2, 1, "tensor"),
                member(1, 0, 2, 2),
                member(1, 1, 2, 3),
            ],
            "tensor stages only in single-replica pipelines",
        ),
    ],
)
def test_layout_refuses_a_broken_pipeline_by_name(members: list, says: str) -> None:
    with pytest.raises(ts.SetupError, match=says.replace("[", r"\[").replace("]", r"\]")):
        ts.build_layout(members)


def test_shards_cover_the_layer_once() -> None:
    full = ts.init_layer(0, 6, 0)
    for parts in (1, 2, 5):
        pieces = [ts.take_shard(full["w1"], "w1", parts, i) for i in range(parts)]
        torch.testing.assert_close(torch.cat(pieces, dim=1), full["w1"])
        assert ts.take_shard(full["b2"], "b2", parts, parts - 1).shape == full["b2"].shape


def test_outside_a_stage_pod_it_says_which_variable_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HULK_", "RANK"))}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    r = subprocess.run(
        [sys.executable, str(TRAINER), "--device=cpu"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "train_stage: HULK_STAGE_PARALLELISM is not set: run this in a Hulk stage pod, or set "
        "the HULK_* variables the operator sets (docs/operator.md, Env)"
    ]
