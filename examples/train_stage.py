#!/usr/bin/env python3
"""A reference training program for Hulk's stage pods: 1F1B over the plan's stages.

Each stage pod runs this file (``torchrun train_stage.py``, or ``python train_stage.py``
for one process per pod). It reads what the operator puts in the pod's environment
(docs/operator.md, "Env") and trains a toy model of the job's layers with the plan's
layout:

- pipeline: stage k holds layers ``[HULK_LAYER_START, HULK_LAYER_END)``; every step runs
  ``HULK_MICRO_BATCHES`` micro-batches through the stages in the 1F1B order (below);
- data parallelism: a ``data`` stage's r-th server is lane r of the pipeline (its
  neighbours are the adjacent stages' r-th servers, as ``HULK_PREV/NEXT_STAGE_ADDR`` say);
  each lane takes its share of the global batch, and a stage's lanes sum their gradients
  in one all-reduce per step;
- tensor parallelism: the processes of one server (torchrun's ``PET_NPROC_PER_NODE``, one
  per GPU) split every layer Megatron-style, and so do all the servers of a ``tensor``
  stage (baseline C's plans);
- checkpoints: one file per layer under ``--checkpoint-dir`` (a volume every stage pod
  mounts), so a job that Hulk re-plans onto other servers, with other stage boundaries or
  other GPU counts, resumes where it stopped; on SIGTERM (a re-plan deletes the pods) every
  process finishes its step and that step is saved;
- the processes agree before they train: a pod with a bad variable, other arguments, or
  another view of the checkpoint folder stops all of them at once, each with the same line.

The schedule is 1F1B (PipeDream-Flush; Megatron-LM's non-interleaved schedule): with p
stages and m micro-batches, stage k runs ``min(p - k - 1, m)`` forwards to fill the pipeline,
then alternates one forward and one backward, then runs the backwards left (``schedule``).
Stage k thereby keeps the saved activations of at most ``min(m, p - k)`` micro-batches at
once, where GPipe (every forward, then every backward) keeps all m: Hulk's cost model
assumes 1F1B when it checks that a plan's stages fit in GPU memory (docs/cost-model.md,
"Memory"), so under GPipe a plan it calls feasible may not fit (OPT-175B's by up to 7.2x).
The optimizer steps once a step, after all m micro-batches, as under GPipe: the same
result, up to the order in which the micro-batches' gradients are summed. Each process
prints the most micro-batches it held at once when it ends.

The model is a stack of residual MLP blocks ``x + W2 gelu(W1 x + b1) + b2`` learning a
fixed random teacher; layer i's initial weights depend only on ``--seed`` and i, and the
data of step s only on ``--seed`` and s, so any plan trains the same model: the same
result as one process training it alone, up to float rounding. Replace ``init_layer``,
``block_forward``, ``batch`` and ``loss_of`` with your model's; the rest is the plumbing.

Needs only PyTorch (2.1 or later): NCCL on GPUs, gloo on CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import shutil
import signal
import sys
import time
import weakref
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

FFN = 4  # a block's inner width, in multiples of --hidden
SPLIT_DIM = {"w1": 1, "b1": 0, "w2": 0}  # how a tensor group splits each weight; b2 is whole


class SetupError(ValueError):
    """A variable or argument this program cannot run with; the message says which."""


# -- the model: replace these four with your own ---------------------------------------------


INIT_SCALE = 0.05


def _generator(*key: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def init_layer(layer: int, hidden: int, seed: int) -> dict[str, torch.Tensor]:
    """Layer ``layer``'s initial weights, whole (depends on ``seed`` and ``layer`` only)."""
    g = _generator("layer", seed, layer)
    inner = FFN * hidden
    return {
        "w1": torch.randn(hidden, inner, generator=g) / hidden**0.5,
        "b1": torch.zeros(inner),
        "w2": torch.randn(inner, hidden, generator=g) * (INIT_SCALE / inner**0.5),
        "b2": torch.zeros(hidden),
    }


def batch(step: int, seed: int, rows: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s global batch: inputs and the teacher's targets."""
    teacher = torch.randn(hidden, hidden, generator=_generator("teacher", seed)) / hidden**0.5
    x = torch.randn(rows, hidden, generator=_generator("batch", seed, step))
    return x, torch.tanh(x @ teacher)


def block_forward(
    p: Mapping[str, torch.Tensor], x: torch.Tensor, group: Any = None
) -> torch.Tensor:
    """One residual MLP block; with a tensor ``group``, ``p`` holds this rank's slice of the
    inner width and the partial outputs are summed over the group (Megatron's f and g)."""
    inner = _CopyToGroup.apply(x, group) if group is not None else x
    part = F.gelu(inner @ p["w1"] + p["b1"]) @ p["w2"]
    out = _ReduceFromGroup.apply(part, group) if group is not None else part
    return x + out + p["b2"]


def loss_of(y: torch.Tensor, target: torch.Tensor, global_rows: int) -> torch.Tensor:
    """A micro-batch's share of the global batch's mean squared error."""
    return ((y - target) ** 2).sum() / (global_rows * y.shape[1])


class _CopyToGroup(torch.autograd.Function):
    """Identity forward; backward sums the input's gradient over the tensor group."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromGroup(torch.autograd.Function):
    """Sums the partial outputs over the tensor group; backward passes the gradient on."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


# -- the plan's layout ---------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """What one process reports of itself (from its pod's HULK_* variables)."""

    rank: int
    stage: int
    num_stages: int
    replica: int
    nodes: int
    parallelism: str
    layers: tuple[int, int]
    micro_batches: int
    local_rank: int


@dataclass(frozen=True)
class Layout:
    """``groups[k][lane]``: the ranks that hold stage k for that lane, leader first."""

    groups: tuple[tuple[tuple[int, ...], ...], ...]
    layers: tuple[tuple[int, int], ...]
    parallelism: tuple[str, ...]
    micro_batches: int

    @property
    def lanes(self) -> int:
        return len(self.groups[0])

    def place(self, rank: int) -> tuple[int, int]:
        """(stage, lane) of ``rank``."""
        for k, lanes in enumerate(self.groups):
            for r, ranks in enumerate(lanes):
                if rank in ranks:
                    return k, r
        raise KeyError(rank)


def member_from_env(env: Mapping[str, str], rank: int) -> Member:
    def get(name: str) -> str:
        if name not in env:
            raise SetupError(
                f"{name} is not set: run this in a Hulk stage pod, or set the HULK_* variables "
                "the operator sets (docs/operator.md, Env)"
            )
        return env[name]

    def integer(name: str, low: int) -> int:
        try:
            value = int(get(name))
        except ValueError:
            raise SetupError(f"{name}={get(name)!r} is not a whole number") from None
        if value < low:
            raise SetupError(f"{name}={value} must be at least {low}")
        return value

    parallelism = get("HULK_STAGE_PARALLELISM")
    if parallelism not in ("data", "tensor"):
        raise SetupError(f"HULK_STAGE_PARALLELISM={parallelism!r} must be 'data' or 'tensor'")
    start, end = integer("HULK_LAYER_START", 0), integer("HULK_LAYER_END", 1)
    if end <= start:
        raise SetupError(f"HULK_LAYER_END={end} must be above HULK_LAYER_START={start}")
    return Member(
        rank=rank,
        stage=integer("HULK_STAGE_INDEX", 0),
        num_stages=integer("HULK_NUM_STAGES", 1),
        replica=integer("HULK_STAGE_REPLICA", 0),
        nodes=integer("HULK_STAGE_NODES", 1),
        parallelism=parallelism,
        layers=(start, end),
        micro_batches=integer("HULK_MICRO_BATCHES", 1),
        local_rank=int(env.get("LOCAL_RANK", "0")),
    )


def build_layout(members: Sequence[Member]) -> Layout:
    """The pipeline that every process's report describes; ``SetupError`` if they disagree
    or describe a layout this program does not run."""
    num_stages = {m.num_stages for m in members}
    micro = {m.micro_batches for m in members}
    if len(num_stages) > 1 or len(micro) > 1:
        raise SetupError(
            "the processes disagree on HULK_NUM_STAGES or HULK_MICRO_BATCHES: they come from "
            "different plans (recreate the job's pods)"
        )
    stages: list[list[Member]] = [[] for _ in range(num_stages.pop())]
    for m in members:
        if m.stage >= len(stages):
            raise SetupError(f"HULK_STAGE_INDEX={m.stage} is not below HULK_NUM_STAGES")
        stages[m.stage].append(m)
    groups: list[tuple[tuple[int, ...], ...]] = []
    layers: list[tuple[int, int]] = []
    kinds: list[str] = []
    empty = [k for k, ms in enumerate(stages) if not ms]
    if empty:
        raise SetupError(
            f"no pod reports HULK_STAGE_INDEX={empty[0]} of HULK_NUM_STAGES={len(stages)}: a "
            "stage's pods are missing from WORLD_SIZE, or report another stage"
        )
    for k, ms in enumerate(stages):
        replicas = sorted({m.replica for m in ms})
        if not ms or replicas != list(range(ms[0].nodes)):
            raise SetupError(
                f"stage {k} has pods for replicas {replicas} of HULK_STAGE_NODES="
                f"{ms[0].nodes if ms else '?'}: a stage pod is missing from WORLD_SIZE "
                "(every pod of the job must run)"
            )
        if len({(m.layers, m.parallelism, m.nodes) for m in ms}) > 1:
            raise SetupError(f"stage {k}'s pods disagree on its layers: recreate the job's pods")
        expect = layers[-1][1] if layers else 0
        if ms[0].layers[0] != expect:
            raise SetupError(
                f"stage {k} starts at HULK_LAYER_START={ms[0].layers[0]}, not at layer {expect}"
            )
        layers.append(ms[0].layers)
        kinds.append(ms[0].parallelism)
        order = sorted(ms, key=lambda m: (m.replica, m.local_rank, m.rank))
        if ms[0].parallelism == "tensor":
            groups.append((tuple(m.rank for m in order),))
        else:
            groups.append(tuple(tuple(m.rank for m in order if m.replica == r) for r in replicas))
    lanes = {len(g) for g in groups}
    if len(lanes) > 1:
        raise SetupError(
            "a tensor stage in a pipeline of several data-parallel replicas: this program runs "
            "tensor stages only in single-replica pipelines (plan the job with the hulk planner)"
            if "tensor" in kinds
            else "data stages with different replica counts (HULK_STAGE_NODES)"
        )
    return Layout(tuple(groups), tuple(layers), tuple(kinds), micro.pop())


def shard_bounds(size: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` near-equal slices of ``range(size)``."""
    base, extra = divmod(size, parts)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def take_shard(full: torch.Tensor, name: str, parts: int, index: int) -> torch.Tensor:
    if name not in SPLIT_DIM or parts == 1:
        return full.clone()
    dim = SPLIT_DIM[name]
    lo, hi = shard_bounds(full.shape[dim], parts, index)
    return full.narrow(dim, lo, hi - lo).clone()


# -- the schedule ----------------------------------------------------------------------------


def schedule(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s work in one step, in order: ``("F", j)`` is micro-batch j's forward,
    ``("B", j)`` its backward. 1F1B: ``min(p - k - 1, m)`` forwards, then one forward and one
    backward in turn, then the backwards left; so at most ``min(m, p - k)`` micro-batches
    have run forward and not yet backward."""
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", j) for j in range(warm)]
    for j in range(micro_batches - warm):
        order += [("F", warm + j), ("B", j)]
    return order + [("B", j) for j in range(micro_batches - warm, micro_batches)]


class Link:
    """The messages between stage k and stage k+1 of one lane, at one end (the stage's
    leader). Both ends post them in one order, stage k's schedule: its ``("F", j)`` sends
    micro-batch j's activations, its ``("B", j)`` takes j's gradient back. An end posts a
    send when its tensor is ready and every receive as soon as the messages before it are
    posted: a receive is waiting before its message comes (transfers overlap the compute),
    and neither end waits on a message that the other sends only after a message it waits
    for (NCCL runs one pair's messages in the order they are posted: a crossing order there
    would hang)."""

    def __init__(self, peer: int, order: list[tuple[str, int]], sends: str, buffer: Any) -> None:
        self.peer, self.order, self.sends, self.buffer = peer, order, sends, buffer
        self.next = 0  # the first message of ``order`` not yet posted
        self.receiving: dict[tuple[str, int], tuple[int, torch.Tensor, Any]] = {}
        self.sending: list[tuple[int, torch.Tensor, Any]] = []  # (place in order, tensor, work)
        self._post_receives()

    def _post_receives(self) -> None:
        while self.next < len(self.order) and self.order[self.next][0] != self.sends:
            key, buf = self.order[self.next], self.buffer(self.order[self.next][1])
            self.receiving[key] = (self.next, buf, dist.irecv(buf, src=self.peer))
            self.next += 1

    def send(self, key: tuple[str, int], tensor: torch.Tensor) -> None:
        assert self.order[self.next] == key, (self.order[self.next], key)
        self.sending.append((self.next, tensor, dist.isend(tensor, dst=self.peer)))
        self.next += 1
        self._post_receives()

    def take(self, key: tuple[str, int]) -> torch.Tensor:
        at, buf, work = self.receiving.pop(key)
        work.wait()
        # the peer has posted every message before this one, so our sends among them go
        # through: waiting for them here frees their tensors now, not at the step's end
        while self.sending and self.sending[0][0] < at:
            self.sending.pop(0)[2].wait()
        return buf

    def finish(self) -> None:
        """Waits for the step's last sends."""
        assert self.next == len(self.order) and not self.receiving
        for _, _, work in self.sending:
            work.wait()
        self.sending = []


class HeldActivations:
    """Counts the micro-batches whose saved activations (the tensors autograd keeps for the
    backward) this process holds, and records the most at once in ``peak``: it tags what
    each forward saves, and a tag's count falls as autograd frees those tensors."""

    class _Saved:
        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor

    def __init__(self) -> None:
        self.live: dict[int, int] = {}  # micro-batch -> its saved tensors still held
        self.peak = 0

    @contextlib.contextmanager
    def forward_of(self, micro_batch: int) -> Iterator[None]:
        def pack(tensor: torch.Tensor) -> HeldActivations._Saved:
            saved = HeldActivations._Saved(tensor)
            self.live[micro_batch] = self.live.get(micro_batch, 0) + 1
            self.peak = max(self.peak, len(self.live))
            weakref.finalize(saved, self._freed, micro_batch)
            return saved

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor):
            yield

    def _freed(self, micro_batch: int) -> None:
        self.live[micro_batch] -= 1
        if not self.live[micro_batch]:
            del self.live[micro_batch]


# -- training ------------------------------------------------------------------------------


class StageTrainer:
    """This process's part of the pipeline: its stage's layers (or its slice of them)."""

    def __init__(self, layout: Layout, rank: int, args: argparse.Namespace, device: torch.device):
        self.layout, self.rank, self.args, self.device = layout, rank, args, device
        # every process creates every group, in the same order, as torch.distributed requires
        self.tp_groups = {
            (k, r): dist.new_group(list(ranks)) if len(ranks) > 1 else None
            for k, lanes in enumerate(layout.groups)
            for r, ranks in enumerate(lanes)
        }
        self.dp_groups = {
            k: dist.new_group([g[0] for g in lanes]) if len(lanes) > 1 else None
            for k, lanes in enumerate(layout.groups)
        }
        self.stage, self.lane = layout.place(rank)
        self.ranks = layout.groups[self.stage][self.lane]
        self.leader = self.ranks[0]
        self.tp = self.tp_groups[(self.stage, self.lane)]
        self.tp_index = self.ranks.index(rank)
        self.last = len(layout.groups) - 1
        self.params: dict[int, dict[str, torch.Tensor]] = {}
        self.optimizer: torch.optim.SGD | None = None
        self.held = HeldActivations()
        if args.global_batch is None:
            args.global_batch = layout.lanes * layout.micro_batches
        rows = args.global_batch // layout.lanes
        if rows < layout.micro_batches:
            raise SetupError(
                f"--global-batch {args.global_batch} leaves each of {layout.lanes} replicas "
                f"fewer rows than HULK_MICRO_BATCHES={layout.micro_batches}: set --global-batch "
                f"to at least {layout.lanes * layout.micro_batches}"
            )

    # which rows of the global batch each micro-batch of this lane takes
    def micro_rows(self) -> list[tuple[int, int]]:
        lo, hi = shard_bounds(self.args.global_batch, self.layout.lanes, self.lane)
        m = self.layout.micro_batches
        return [(lo + a, lo + b) for a, b in (shard_bounds(hi - lo, m, j) for j in range(m))]

    def load(self, step_dir: Path | None) -> None:
        a, parts = self.args, len(self.ranks)
        start, end = self.layout.layers[self.stage]
        momentum: dict[int, dict[str, torch.Tensor]] = {}
        for i in range(start, end):
            if step_dir is None:
                full, moms = init_layer(i, a.hidden, a.seed), {}
            else:
                path = step_dir / f"layer-{i:05d}.pt"
                if not path.is_file():
                    raise SetupError(f"{path} is missing: the checkpoint is incomplete")
                try:
                    saved = torch.load(path, map_location="cpu", weights_only=True)
                    full = {n: saved[n] for n in ("w1", "b1", "w2", "b2")}
                except Exception as e:  # a torn or foreign file: torch raises many kinds
                    raise SetupError(f"{path} is unreadable ({type(e).__name__}: {e})") from None
                moms = {n: saved[f"momentum.{n}"] for n in full if f"momentum.{n}" in saved}
                if full["b2"].shape[0] != a.hidden:
                    raise SetupError(
                        f"{path} was written with --hidden {full['b2'].shape[0]}, not {a.hidden}"
                    )
            self.params[i] = {
                n: take_shard(t, n, parts, self.tp_index).to(self.device).requires_grad_()
                for n, t in full.items()
            }
            momentum[i] = {n: take_shard(t, n, parts, self.tp_index) for n, t in moms.items()}
        flat = [t for i in sorted(self.params) for t in self.params[i].values()]
        self.optimizer = torch.optim.SGD(flat, lr=a.lr, momentum=a.momentum)
        for i, moms in momentum.items():
            for n, t in moms.items():
                self.optimizer.state[self.params[i][n]] = {"momentum_buffer": t.to(self.device)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in sorted(self.params):
            x = block_forward(self.params[i], x, self.tp)
        return x

    def _buffer(self, micro_batch: int) -> torch.Tensor:
        lo, hi = self.micro_rows()[micro_batch]
        return torch.empty(hi - lo, self.args.hidden, device=self.device)

    def _take(self, link: Link | None, key: tuple[str, int]) -> torch.Tensor:
        """A message once it has arrived (``link`` on the leader, which receives it), on every
        rank of the tensor group."""
        buf = link.take(key) if link is not None else self._buffer(key[1])
        if self.tp is not None:
            dist.broadcast(buf, src=self.leader, group=self.tp)
        return buf

    def step(self, step: int) -> float | None:
        """One optimizer step (1F1B: ``schedule``); the global batch's loss on the last
        stage's leaders."""
        assert self.optimizer is not None
        k, lay, lane = self.stage, self.layout, self.lane
        stages, leads = len(lay.groups), self.rank == self.leader
        prev = lay.groups[k - 1][lane][0] if k else None
        nxt = lay.groups[k + 1][lane][0] if k < self.last else None
        x_all = y_all = None
        if k == 0 or k == self.last:
            x_all, y_all = batch(step, self.args.seed, self.args.global_batch, self.args.hidden)
        # the leader's links: with prev (in prev's order of work) it receives activations and
        # sends their gradients; with nxt (in this stage's) the other way round
        m = lay.micro_batches
        to_prev = to_next = None
        if prev is not None and leads:
            to_prev = Link(prev, schedule(k - 1, stages, m), "B", self._buffer)
        if nxt is not None and leads:
            to_next = Link(nxt, schedule(k, stages, m), "F", self._buffer)
        rows = self.micro_rows()
        held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # forward run, backward not
        losses: dict[int, torch.Tensor] = {}
        for op, j in schedule(k, stages, m):
            lo, hi = rows[j]
            if op == "F":
                if prev is None:
                    assert x_all is not None
                    x = x_all[lo:hi].to(self.device)
                else:
                    x = self._take(to_prev, ("F", j)).requires_grad_()
                with self.held.forward_of(j):
                    y = self.forward(x)
                    if nxt is None:
                        assert y_all is not None
                        y = loss_of(y, y_all[lo:hi].to(self.device), self.args.global_batch)
                        losses[j] = y.detach()
                if to_next is not None:
                    to_next.send(("F", j), y.detach().contiguous())
                held[j] = (x, y)
            else:
                x, y = held.pop(j)
                if nxt is None:
                    y.backward()
                else:
                    y.backward(self._take(to_next, ("B", j)))
                if to_prev is not None:
                    to_prev.send(("B", j), x.grad.contiguous())
        for link in (to_prev, to_next):
            if link is not None:
                link.finish()
        self._sum_lanes()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if nxt is not None or self.rank != self.leader:
            return None
        loss = torch.stack([losses[j] for j in range(m)]).sum().reshape(1)
        if self.dp_groups[k] is not None:
            dist.all_reduce(loss, group=self.dp_groups[k])
        return float(loss.item())

    def _whole(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The whole of each tensor of a layer, from this rank's slices (on every rank of the
        tensor group); replicated ones (b2) are already whole."""
        if self.tp is None:
            return dict(tensors)
        out = {}
        for n, t in tensors.items():
            if n not in SPLIT_DIM:
                out[n] = t
                continue
            shape = list(t.shape)
            dim = SPLIT_DIM[n]
            shape[dim] = self.params_size(n)
            whole = torch.zeros(shape, device=t.device)
            lo, hi = shard_bounds(shape[dim], len(self.ranks), self.tp_index)
            whole.narrow(dim, lo, hi - lo).copy_(t)
            dist.all_reduce(whole, group=self.tp)
            out[n] = whole
        return out

    def params_size(self, name: str) -> int:
        return FFN * self.args.hidden if name in SPLIT_DIM else self.args.hidden

    def _sum_lanes(self) -> None:
        """Sums each gradient over the stage's lanes: one all-reduce of every layer's whole
        gradients among the lanes' leaders, sliced back to each rank."""
        dp = self.dp_groups[self.stage]
        if dp is None:
            return
        names = [(i, n) for i in sorted(self.params) for n in self.params[i]]
        grads: dict[tuple[int, int | str], torch.Tensor] = {}
        for i in sorted(self.params):
            whole = self._whole({n: p.grad for n, p in self.params[i].items()})
            grads.update({(i, n): t for n, t in whole.items()})
        flat = torch.cat([grads[key].flatten() for key in names])
        if self.rank == self.leader:
            dist.all_reduce(flat, group=dp)
        if self.tp is not None:
            dist.broadcast(flat, src=self.leader, group=self.tp)
        at = 0
        for i, n in names:
            whole = grads[(i, n)]
            piece = flat[at : at + whole.numel()].view_as(whole)
            at += whole.numel()
            self.params[i][n].grad.copy_(take_shard(piece, n, len(self.ranks), self.tp_index))

    def save(self, root: Path, step: int) -> None:
        """Writes ``step-<step>/layer-<i>.pt`` for this stage (lane 0's group) and, once every
        stage has, ``progress.json``, the only file a resume trusts."""
        assert self.optimizer is not None
        step_dir = root / f"step-{step:09d}"
        if self.lane == 0:
            for i in sorted(self.params):
                p = self.params[i]
                state = {n: self.optimizer.state.get(t, {}) for n, t in p.items()}
                moms = {
                    n: s.get("momentum_buffer", torch.zeros_like(p[n])) for n, s in state.items()
                }
                whole = self._whole({n: t.detach() for n, t in p.items()})
                whole_m = self._whole(moms)
                if self.rank == self.leader:
                    step_dir.mkdir(parents=True, exist_ok=True)
                    data = {n: t.cpu() for n, t in whole.items()}
                    data.update({f"momentum.{n}": t.cpu() for n, t in whole_m.items()})
                    part = step_dir / f"layer-{i:05d}.pt.part"
                    torch.save(data, part)
                    os.replace(part, step_dir / f"layer-{i:05d}.pt")
        dist.barrier()
        missing = [
            f"layer-{i:05d}.pt"
            for i in range(self.layout.layers[-1][1])
            if self.rank == 0 and not (step_dir / f"layer-{i:05d}.pt").is_file()
        ]
        said: list[Any] = [missing]
        dist.broadcast_object_list(said, src=0)
        if said[0]:
            raise SetupError(
                f"after every stage saved step {step}, {step_dir} lacks {', '.join(said[0][:3])}"
                f"{' ...' if len(said[0]) > 3 else ''}: the stage pods do not share "
                "--checkpoint-dir (mount one ReadWriteMany volume at it in every stage pod)"
            )
        if self.rank == 0:
            part = root / "progress.json.part"
            part.write_text(json.dumps({"step": step, "layers": self.layout.layers[-1][1]}))
            os.replace(part, root / "progress.json")
            for old in root.glob("step-*"):
                if old != step_dir:
                    shutil.rmtree(old, ignore_errors=True)


def resume_point(root: Path | None) -> tuple[int, Path | None, int | None]:
    """(the step to start from, the checkpoint folder to load or None, the number of
    layers the checkpoint holds or None), from ``progress.json``."""
    if root is None or not (root / "progress.json").is_file():
        return 0, None, None
    progress = root / "progress.json"
    folders = sorted(root.glob("step-*"))
    try:
        data = json.loads(progress.read_text())
        step, layers = data["step"], data["layers"]
        if not all(type(v) is int and v >= 0 for v in (step, layers)):
            raise ValueError("step and layers must be whole numbers, at least 0")
    except (OSError, ValueError, KeyError, TypeError) as e:
        newest = folders[-1].name if folders else None
        fix = ""
        if newest and newest.split("-")[1].isdigit():
            files = len(list((root / newest).glob("layer-*.pt")))
            fix = (
                f'to resume from the newest checkpoint, {newest}, write {{"step": '
                f'{int(newest.split("-")[1])}, "layers": {files}}} into it; '
            )
        raise SetupError(
            f"{progress} is unreadable ({e}): {fix}to start afresh, remove it (the first "
            "checkpoint then deletes the step-* folders)"
        ) from None
    folder = root / f"step-{step:09d}"
    if not folder.is_dir():
        raise SetupError(f"{progress} names step {step}, but {folder} is missing")
    return step, folder, layers


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=256, help="the toy model's width")
    ap.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="rows per optimizer step: your job's spec.training.globalBatchSize, so that it "
        "stays the same when a re-plan changes the replicas (default: one row per "
        "micro-batch of every replica)",
    )
    ap.add_argument("--steps", type=int, default=100, help="train until this step")
    ap.add_argument(
        "--lr", type=float, default=0.01, help="SGD learning rate (0.05 diverged at 96 layers)"
    )
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="a folder every stage pod mounts (ReadWriteMany); resumes from it",
    )
    ap.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument(
        "--timeout-min",
        type=float,
        default=10,
        help="how long a collective waits for the other stage pods (torchrun's own rendezvous "
        "waits 600 s for them first: torchrun --rdzv-conf timeout=SECONDS)",
    )
    args = ap.parse_args(argv)
    for name in ("hidden", "global_batch", "checkpoint_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps < 0 or args.lr <= 0 or not 0 <= args.momentum < 1 or args.timeout_min <= 0:
        ap.error("--steps must be >= 0, --lr and --timeout-min > 0, --momentum in [0, 1)")
    return args


def pick_device(choice: str, local_rank: int) -> tuple[torch.device, str, str | None]:
    """(this process's device, the process group's backend, what is wrong or None)."""
    cpu = torch.device("cpu")
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return cpu, "gloo", None
    if not torch.cuda.is_available():
        return cpu, "gloo", "--device cuda, but this process sees no GPU"
    n = torch.cuda.device_count()
    if local_rank >= n:
        return (
            cpu,
            "cpu:gloo,cuda:nccl",
            (
                f"LOCAL_RANK={local_rank}, but the pod sees {n} GPU(s): torchrun starts "
                "PET_NPROC_PER_NODE processes, the trainer container's GPUs; give them to "
                f"this container (nvidia.com/gpu), or run torchrun --nproc-per-node={n}"
            ),
        )
    return torch.device(f"cuda:{local_rank}"), "cpu:gloo,cuda:nccl", None


def agree(rank: int, mine: dict[str, Any]) -> list[dict[str, Any]]:
    """Every process's report; ``SetupError`` (the same on every process) if any has a
    problem, so that a bad pod stops all of them at once instead of leaving the others
    waiting for it."""
    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, mine)
    bad = [(r, f["problem"]) for r, f in enumerate(found) if f.get("problem")]
    if bad:
        r, problem = bad[0]
        more = f" (and {len(bad) - 1} more process(es))" if len(bad) > 1 else ""
        raise SetupError(f"rank {r}: {problem}{more}")
    return found


def setup(
    args: argparse.Namespace, rank: int, me: Member | None, problem: str | None, device: Any
) -> tuple[StageTrainer, int]:
    """The layout, the arguments and the checkpoint every process agrees on, loaded."""
    settings = {k: str(v) for k, v in sorted(vars(args).items())}
    view: Any = None
    if problem is None:
        try:
            view = resume_point(args.checkpoint_dir)
        except SetupError as e:
            problem = str(e)
    found = agree(rank, {"problem": problem, "member": me, "args": settings, "resume": view})
    layout = build_layout([f["member"] for f in found])
    for r, f in enumerate(found):
        if f["args"] != settings:
            diff = sorted(k for k in settings if f["args"].get(k) != settings[k])
            raise SetupError(
                f"ranks {min(r, rank)} and {max(r, rank)} run with different arguments "
                f"({', '.join('--' + k.replace('_', '-') for k in diff)}): give every stage "
                "pod the same"
            )
        if f["resume"] != view:
            raise SetupError(
                f"ranks {min(r, rank)} and {max(r, rank)} see different checkpoints in "
                f"--checkpoint-dir {args.checkpoint_dir}: the stage pods do not share it "
                "(mount one ReadWriteMany volume at it in every stage pod)"
            )
    start, folder, layers = view
    if layers is not None and layers != layout.layers[-1][1]:
        raise SetupError(
            f"the checkpoint in {args.checkpoint_dir} holds a model of {layers} layers, and "
            f"this plan's has {layout.layers[-1][1]}: give another model another "
            "--checkpoint-dir"
        )
    trainer = StageTrainer(layout, rank, args, device)
    try:
        trainer.load(folder)
        problem = None
    except SetupError as e:
        problem = str(e)
    agree(rank, {"problem": problem})
    return trainer, start


class Stop:
    """SIGTERM (a re-plan or a deletion of the pod): finish the step, checkpoint, exit."""

    def __init__(self) -> None:
        self.signalled = False
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: object) -> None:
        self.signalled = True

    def agreed(self, device: torch.device, diverged: bool = False) -> tuple[bool, bool]:
        """Whether any process was signalled, and whether any saw a loss that is not finite
        (one small all-reduce per step: every process stops at the same step)."""
        flags = torch.tensor([float(self.signalled), float(diverged)], device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0].item()), bool(flags[1].item())


STOPPED_BY_PEER = 75  # a peer was stopped: exit non-zero, so the kubelet restarts this pod
DIVERGED = 3  # the loss is not finite: a failure (restarting would only diverge again)


def leave(code: int) -> int:
    """Ends the process without tearing the process group down: a peer that has already
    exited (rank 0 holds the rendezvous store) can make gloo abort in teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if name not in env:
            print(
                f"train_stage: {name} is not set: run this in a Hulk stage pod or torchrun",
                file=sys.stderr,
            )
            return 2
    rank = int(env["RANK"])
    me, problem = None, None
    try:
        me = member_from_env(env, rank)
    except SetupError as e:
        problem = str(e)
    device, backend, gpu_problem = pick_device(args.device, int(env.get("LOCAL_RANK", "0")))
    problem = problem or gpu_problem
    if device.type == "cuda":
        torch.cuda.set_device(device)
    stop = Stop()
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=args.timeout_min))
    try:
        trainer, start = setup(args, rank, me, problem, device)
        layout = trainer.layout
        if rank == 0:
            where = ", ".join(
                f"stage {k} layers {lo}-{hi} ({kind}, {len(g)} lane(s) of "
                f"{'/'.join(str(len(lane)) for lane in g)} process(es))"
                for k, ((lo, hi), kind, g) in enumerate(
                    zip(layout.layers, layout.parallelism, layout.groups, strict=True)
                )
            )
            print(f"train_stage: from step {start}: {where}", flush=True)
            if start >= args.steps:
                print(
                    f"train_stage: the checkpoint is at step {start}: nothing to do for "
                    f"--steps {args.steps}",
                    flush=True,
                )
        for s in range(start, args.steps):
            t0 = time.perf_counter()
            loss = trainer.step(s)
            if loss is not None and trainer.lane == 0:
                print(
                    f"step {s + 1} loss {loss:.6f} time {time.perf_counter() - t0:.3f} s",
                    flush=True,
                )
            stopping, diverged = stop.agreed(device, loss is not None and not math.isfinite(loss))
            if diverged:  # (it trained on, saving checkpoints of NaN weights; a user trial)
                if rank == 0:
                    print(
                        f"train_stage: the loss at step {s + 1} is not finite: stopping, this "
                        f"step not saved (lower --lr, now {args.lr:g}, or resume from an "
                        "earlier checkpoint)",
                        file=sys.stderr,
                        flush=True,
                    )
                return leave(DIVERGED)
            if args.checkpoint_dir is not None and (
                stopping or (s + 1) % args.checkpoint_every == 0 or s + 1 == args.steps
            ):
                trainer.save(args.checkpoint_dir, s + 1)
            if stopping:
                saved = (
                    f"checkpoint of step {s + 1} saved"
                    if args.checkpoint_dir
                    else "no --checkpoint-dir"
                )
                why = "SIGTERM" if stop.signalled else "a stage pod got SIGTERM"
                print(f"train_stage: stopped after step {s + 1} ({why}; {saved})", flush=True)
                return leave(128 + signal.SIGTERM if stop.signalled else STOPPED_BY_PEER)
        k, m = trainer.stage, layout.micro_batches
        print(
            f"train_stage: rank {rank} (stage {k}) held at most {trainer.held.peak} "
            f"micro-batch(es) of activations at once (1F1B: min(m, p - k) = "
            f"{min(m, len(layout.groups) - k)})",
            flush=True,
        )
    except SetupError as e:
        print(f"train_stage: {e}", file=sys.stderr, flush=True)
        return leave(2)
    return leave(0)


if __name__ == "__main__":
    sys.exit(main())
