"""examples/train_stage.py, the reference stage trainer, run as the operator's stage pods
would run it: one ``torchrun`` per pod of a plan, with the environment
``hulk_operator.manifests.desired_pods`` gives each pod (only the master's address is
127.0.0.1 instead of a pod's DNS name), on CPU with gloo.

The pipelined, data- and tensor-parallel run must end on the same weights as one process
training the whole model on the whole batch, and a run resumed from its checkpoint under
another plan (other stage boundaries, other GPU counts, a tensor stage) must go on as if it
had never stopped."""

from __future__ import annotations

import graphlib
import importlib.util
import math
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
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


def master_port() -> str:
    """A free port for rank 0's rendezvous store, below the ephemeral range. A port that
    ``bind(0)`` gave, released for rank 0 to listen on, could be taken in the seconds
    before it does (torch's import) by another process's outgoing connection, which draws
    from the same range (CI: the sandbox tests of the other worker): rank 0 then exits
    at once (EADDRINUSE) and the others wait silently for its store up to --timeout-min,
    which read as a refusal test timing out at 90 s with no output."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100) if low > 11000 else ():
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return str(port)
    with socket.socket() as s:  # (no room below the range: any free port)
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def start_pods(
    plan: JobPlan,
    gpus: Mapping[str, int],
    extra: list[str],
    *,
    torchrun: bool = True,
    cwd: Callable[[int], Path | None] = lambda rank: None,
    env_of: Callable[[int, dict[str, str]], dict[str, str]] = lambda rank, env: env,
) -> list[subprocess.Popen[str]]:
    """One process per stage pod (``torchrun``, or the trainer alone): the operator's
    environment for that pod, as ``env_of(rank, env)`` leaves it, in ``cwd(rank)``."""
    port = master_port()
    procs = []
    for rank, pod in enumerate(pod_envs(plan, gpus)):
        env = {
            **os.environ,
            **pod,
            "MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "PET_MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        launch = [sys.executable, "-m", "torch.distributed.run"] if torchrun else [sys.executable]
        procs.append(
            subprocess.Popen(
                [*launch, str(TRAINER), *ARGS, *extra],
                env=env_of(rank, env),
                cwd=cwd(rank),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen[str]], timeout: float = 300) -> list[tuple[int, str]]:
    """Each process's (exit status, output). One still running after ``timeout`` (each in
    turn) fails the test with every process's exit status and output, all killed (before,
    the timeout named the command alone, the same for every rank: which one had exited,
    and how, was lost; a CI run)."""
    out: list[tuple[int, str]] = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=timeout)
            out.append((p.returncode, text))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        said = [f"rank {r}: exit {rc}: {text[-1500:]}" for r, (rc, text) in enumerate(out)]
        for r, p in enumerate(procs[len(out) :], start=len(out)):
            text, _ = p.communicate()
            said.append(f"rank {r}: still running, killed: {(text or '')[-1500:]}")
        raise AssertionError(f"past {timeout:g} s:\n" + "\n".join(said)) from None
    finally:
        for p in procs:
            p.kill()
    return out


def assert_refused(procs: list[subprocess.Popen[str]], line: str) -> None:
    """Every pod exits 2, its last line ``line`` (well before --timeout-min)."""
    for rc, out in finish(procs, 90):
        assert rc == 2, out[-2000:]
        assert out.strip().splitlines()[-1] == line


def run_pods(plan: JobPlan, gpus: Mapping[str, int], extra: list[str]) -> list[str]:
    """Runs every stage pod to the end; fails on any exit status but 0."""
    done = finish(start_pods(plan, gpus, extra))
    for rc, out in done:
        assert rc == 0, out[-3000:]
    return [out for _, out in done]


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
    assert ts.resume_point(root) == (step, root / f"step-{step:09d}", LAYERS)
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


def held_peaks(outs: list[str]) -> dict[int, tuple[int, int]]:
    """Each process's (stage, the most micro-batches' activations it held at once), from
    the line it prints when it ends, by rank."""
    found = {}
    for out in outs:
        for line in out.splitlines():
            if " held at most " in line:  # train_stage: rank R (stage K) held at most N ...
                words = line.split()
                found[int(words[2])] = (int(words[4].rstrip(")")), int(words[8]))
    return found


@pytest.mark.slow
def test_stage_k_holds_at_most_min_m_p_minus_k_micro_batches_and_trains_as_one_process(
    tmp_path: Path,
) -> None:
    """Hulk's cost model counts ``min(m, p - k)`` micro-batches' activations on stage k (1F1B,
    docs/cost-model.md, "Memory"). Each process counts the micro-batches whose saved
    activations autograd holds (``HeldActivations``). Before, the trainer ran GPipe: every
    stage held all m (here 3, 3, 3, 3 for the cost model's 3, 3, 2, 1). Stage 0 runs m
    forwards before its first backward (m < p - 0), the others fewer."""
    ckpt, m = tmp_path / "ckpt", 3
    bounds = ((0, 1), (1, 2), (2, 4), (4, LAYERS))
    stages = tuple(Stage(layers, (name,)) for layers, name in zip(bounds, "abcd", strict=True))
    plan = JobPlan("toy", stages, micro_batches=m)
    procs = start_pods(
        plan, dict.fromkeys("abcd", 1), ["--steps=2", f"--checkpoint-dir={ckpt}"], torchrun=False
    )
    done = finish(procs, 180)
    for rc, out in done:
        assert rc == 0, out[-3000:]
    outs = [out for _, out in done]
    peaks = held_peaks(outs)
    assert sorted(peaks) == [0, 1, 2, 3], outs[0][-1500:]
    for rank, (stage, peak) in peaks.items():
        assert peak <= min(m, 4 - stage), f"rank {rank}, stage {stage} held {peak} at once"
    assert [peaks[r] for r in range(4)] == [(0, 3), (1, 3), (2, 2), (3, 1)]  # and no fewer
    _, want_losses = reference(2)
    got = losses_of(outs)
    assert sorted(got) == [1, 2]
    for s, loss in got.items():
        assert loss == pytest.approx(want_losses[s - 1], rel=1e-4)
    assert_checkpoint(ckpt, 2)


@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 3), (2, 1), (3, 2), (4, 6), (5, 5)])
def test_schedule_is_1f1b(stages: int, micro_batches: int) -> None:
    """Stage k: min(p - k - 1, m) forwards, then one forward and one backward in turn, then
    the backwards left; every micro-batch once each way, in order."""
    for k in range(stages):
        order = ts.schedule(k, stages, micro_batches)
        warm = min(stages - k - 1, micro_batches)
        assert order[:warm] == [("F", j) for j in range(warm)]
        assert [j for op, j in order if op == "F"] == list(range(micro_batches))
        assert [j for op, j in order if op == "B"] == list(range(micro_batches))
        in_flight, most = 0, 0
        for op, _ in order:
            in_flight += 1 if op == "F" else -1
            most = max(most, in_flight)
        assert most == min(micro_batches, stages - k)
        steady = order[warm : warm + 2 * (micro_batches - warm)]
        assert [op for op, _ in steady] == ["F", "B"] * (micro_batches - warm)


def _hangs(stages: int, micro_batches: int, blocking: bool, crossing: bool = False) -> bool:
    """Whether the pipeline's messages can hang, modelled strictly: a message goes once both
    ends have posted it, after every message each end posted before it on that pair (as NCCL
    runs them); an end posts in order, a send once its tensor is computed; a stage computes
    in ``schedule`` order, a step once its input has come (and, ``blocking``, once its sends
    have gone). ``Link``: both ends of stages k, k+1 post in stage k's order; ``crossing``:
    stage k+1 posts in its own order of work instead."""
    deps: dict[tuple[object, ...], set[tuple[object, ...]]] = {}

    def need(event: tuple[object, ...], *before: tuple[object, ...]) -> None:
        deps.setdefault(event, set()).update(before)

    for k in range(stages):
        work = ts.schedule(k, stages, micro_batches)
        for i, op in enumerate(work):
            need(("compute", k, *op), *([("compute", k, *work[i - 1])] if i else []))
    for k in range(stages - 1):
        # message ("F", j): stage k's forward j sends it, stage k+1's forward j takes it;
        # ("B", j): stage k+1's backward j sends it, stage k's backward j takes it
        for end, sends in ((k, "F"), (k + 1, "B")):
            order = ts.schedule(end if crossing else k, stages, micro_batches)
            work = ts.schedule(end, stages, micro_batches)
            for i, msg in enumerate(order):
                post, done = ("post", end, k, *msg), ("done", k, *msg)
                need(done, post, *([("done", k, *order[i - 1])] if i else []))
                need(post, *([("post", end, k, *order[i - 1])] if i else []))
                if msg[0] == sends:
                    need(post, ("compute", end, *msg))
                    at = work.index(msg)
                    if blocking and at + 1 < len(work):
                        need(("compute", end, *work[at + 1]), done)
                    if blocking and i + 1 < len(order):
                        need(("post", end, k, *order[i + 1]), done)
                else:
                    need(("compute", end, *msg), done)
    try:
        tuple(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError:
        return True
    return False


def test_the_messages_between_stages_cannot_hang() -> None:
    """With non-blocking or blocking sends, and NCCL's one queue per pair of ranks. Posting
    each message when a stage computes with it (Megatron's send/receive pairs without
    their batching) would hang from 2 stages and 2 micro-batches."""
    for stages in range(1, 7):
        for micro_batches in range(1, 9):
            for blocking in (False, True):
                assert not _hangs(stages, micro_batches, blocking), (stages, micro_batches)
    assert _hangs(2, 2, blocking=False, crossing=True)


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
        (
            [member(0, 0, 1, 0)],
            "no pod reports HULK_STAGE_INDEX=1 of HULK_NUM_STAGES=2: a stage's pods are missing",
        ),
        (  # a pod of stage 1 that says it is stage 0: before, "stage 0's pods disagree"
            [member(0, 0, 1, 0), member(0, 0, 1, 1, layers=(2, 4))],
            "no pod reports HULK_STAGE_INDEX=1",
        ),
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


TWO = JobPlan("toy", (Stage((0, 2), ("a",)), Stage((2, LAYERS), ("b",))), micro_batches=2)
ONE_GPU = {"a": 1, "b": 1}


def test_a_pod_with_a_missing_variable_stops_every_pod_at_once() -> None:
    """Before, the pod said so and exited, and the others waited --timeout-min for it."""

    def drop(rank: int, env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if not (rank == 1 and k == "HULK_MICRO_BATCHES")}

    assert_refused(
        start_pods(TWO, ONE_GPU, ["--steps=2"], torchrun=False, env_of=drop),
        "train_stage: rank 1: HULK_MICRO_BATCHES is not set: run this in a Hulk stage pod, "
        "or set the HULK_* variables the operator sets (docs/operator.md, Env)",
    )


def test_pods_that_do_not_share_the_checkpoint_folder_are_stopped(tmp_path: Path) -> None:
    """``--checkpoint-dir ckpt`` in each pod's own folder: the same argument, two folders
    (per-pod storage instead of one ReadWriteMany volume). Before, each stage wrote its
    layers to its own folder and the run went on; resumed, the stages started from
    different steps."""
    for rank in (0, 1):
        (tmp_path / f"pod{rank}").mkdir()
    own = start_pods(
        TWO,
        ONE_GPU,
        ["--steps=3", "--checkpoint-dir=ckpt", "--checkpoint-every=2"],
        torchrun=False,
        cwd=lambda rank: tmp_path / f"pod{rank}",
    )
    assert_refused(
        own,
        "train_stage: after every stage saved step 2, ckpt/step-000000002 lacks "
        "layer-00002.pt, layer-00003.pt, layer-00004.pt: the stage pods do not share "
        "--checkpoint-dir (mount one ReadWriteMany volume at it in every stage pod)",
    )
    assert not (tmp_path / "pod0" / "ckpt" / "progress.json").exists()
    # a checkpoint that only one pod sees
    shared = tmp_path / "pod0" / "ckpt"
    shared.mkdir(exist_ok=True)
    (shared / "step-000000002").mkdir(exist_ok=True)
    (shared / "progress.json").write_text('{"step": 2, "layers": 5}')
    seen = start_pods(
        TWO,
        ONE_GPU,
        ["--steps=3", "--checkpoint-dir=ckpt"],
        torchrun=False,
        cwd=lambda rank: tmp_path / f"pod{rank}",
    )
    assert_refused(
        seen,
        "train_stage: ranks 0 and 1 see different checkpoints in --checkpoint-dir ckpt: the "
        "stage pods do not share it (mount one ReadWriteMany volume at it in every stage pod)",
    )


def test_sigterm_checkpoints_the_step_and_stops_every_pod(tmp_path: Path) -> None:
    """A re-plan deletes some stage pods (SIGTERM): every pod finishes its step, the
    checkpoint of that step is saved, the signalled pod exits 143 and the others 75, so that
    the kubelet restarts them (restartPolicy OnFailure) into the new plan."""
    ckpt = tmp_path / "ckpt"
    procs = start_pods(
        TWO,
        ONE_GPU,
        ["--steps=100000", f"--checkpoint-dir={ckpt}", "--checkpoint-every=1000"],
        torchrun=False,
    )
    last = procs[1]  # the last stage prints the losses
    assert last.stdout is not None
    for line in last.stdout:
        if line.startswith("step 3 "):
            break
    procs[0].send_signal(signal.SIGTERM)
    (rc0, out0), (rc1, out1) = finish(procs, 120)
    assert (rc0, rc1) == (128 + signal.SIGTERM, 75), (out0[-2000:], out1[-2000:])
    step = ts.resume_point(ckpt)[0]
    assert step >= 3
    assert f"stopped after step {step} (SIGTERM; checkpoint of step {step} saved)" in out0
    assert f"stopped after step {step} (a stage pod got SIGTERM; " in out1
    assert_checkpoint(ckpt, step)


def test_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "step-000000002").mkdir(parents=True)
    (ckpt / "progress.json").write_text('{"step": 2, "layers": 6}')
    assert_refused(
        start_pods(TWO, ONE_GPU, [f"--checkpoint-dir={ckpt}"], torchrun=False),
        f"train_stage: the checkpoint in {ckpt} holds a model of 6 layers, and this plan's "
        "has 5: give another model another --checkpoint-dir",
    )


def test_an_unreadable_progress_file_says_how_to_resume(tmp_path: Path) -> None:
    (tmp_path / "step-000000020").mkdir()
    for i in range(3):
        (tmp_path / "step-000000020" / f"layer-{i:05d}.pt").write_bytes(b"")
    for text in ("{", "[]", '{"step": true, "layers": 3}', '{"step": -1, "layers": 3}'):
        (tmp_path / "progress.json").write_text(text)
        with pytest.raises(ts.SetupError) as e:
            ts.resume_point(tmp_path)
        assert str(e.value).endswith(
            'to resume from the newest checkpoint, step-000000020, write {"step": 20, '
            '"layers": 3} into it; to start afresh, remove it (the first checkpoint then '
            "deletes the step-* folders)"
        ), text
    (tmp_path / "progress.json").write_text('{"step": 10, "layers": 3}')
    with pytest.raises(ts.SetupError, match=r"names step 10, but .*step-000000010 is missing"):
        ts.resume_point(tmp_path)


def test_a_loss_that_is_not_finite_stops_every_stage_unsaved(tmp_path: Path) -> None:
    """Before, a diverged run trained on with ``loss nan``, checkpointing NaN weights (a
    user trial: the paper's model sizes at the old default --lr 0.05). Now every process
    of the pipeline stops at the step whose loss is not finite, exit 3, that step unsaved."""
    ckpt = tmp_path / "ckpt"
    plan = JobPlan("toy", (Stage((0, 2), ("a",)), Stage((2, LAYERS), ("b",))), micro_batches=2)
    procs = start_pods(
        plan, {"a": 1, "b": 1}, ["--steps=50", "--lr=1e6", "--checkpoint-every=1",
                                 f"--checkpoint-dir={ckpt}"], torchrun=False,
    )  # fmt: skip
    done = finish(procs, 120)
    assert [rc for rc, _ in done] == [ts.DIVERGED, ts.DIVERGED], [o[-1500:] for _, o in done]
    (line,) = [ln for ln in done[0][1].splitlines() if "is not finite" in ln]
    bad = int(line.split("the loss at step ")[1].split()[0])
    assert bad < 50 and "lower --lr, now 1e+06" in line
    last = losses_of([done[1][1]])  # the last stage prints the losses
    assert not math.isfinite(last[bad]) and all(
        math.isfinite(v) for s, v in last.items() if s < bad
    )
    step, _, _ = ts.resume_point(ckpt)
    assert step == bad - 1  # the steps before it saved, not it
