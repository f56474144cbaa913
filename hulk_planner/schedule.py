"""An event simulation of one pipeline step under a given schedule: the reference that the
cost model's closed form (``cost.window_wait`` and the fill, drain and pace around it) is
tested and benchmarked against.

Each stage runs its operations in the schedule's order, one at a time: micro-batch i's
forward (a third of the stage's compute, ``stage_t[k] / 3``) once its input has arrived, its
backward (the other two thirds) once the gradient has. A message crosses boundary k -> k+1
in ``link_latency[k] + link_transfer[k]``; messages one way over a boundary go one at a
time (that direction is busy for its transfer), while the two directions send at once.
Whether NCCL sends a pair of ranks' forward and backward messages at once or in one queue
is not measured here (it needs two GPUs); were it one queue, bandwidth-bound links would
be slower than this simulation. The step ends when the last operation ends. Nothing here
depends on the cost model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

Order = Callable[[int, int, int], list[tuple[str, int]]]
FORWARD_SHARE = 1 / 3  # a forward is a third of forward + backward (6 FLOP per parameter)


def simulate(
    stage_t: Sequence[float],
    link_latency: Sequence[float],
    link_transfer: Sequence[float],
    m: int,
    order: Order,
) -> float:
    """Seconds from the first forward to the last backward of one step of ``m``
    micro-batches, each stage running ``order(k, p, m)`` (a list of ("F" | "B", i))."""
    p = len(stage_t)
    if len(link_latency) != p - 1 or len(link_transfer) != p - 1:
        raise ValueError(
            f"a pipeline of {p} stage(s) has {p - 1} link(s): give {p - 1} latencies and "
            f"transfers, not {len(link_latency)} and {len(link_transfer)}"
        )
    orders = [order(k, p, m) for k in range(p)]
    arrived: dict[tuple[str, int, int], float] = {}  # (kind, micro-batch, stage) -> time
    done: dict[int, float] = {}  # micro-batch -> end of its forward on the last stage
    free = [0.0] * p
    link_free = {"F": [0.0] * max(p - 1, 0), "B": [0.0] * max(p - 1, 0)}
    at = [0] * p
    moved = True
    while moved:
        moved = False
        for k in range(p):
            while at[k] < len(orders[k]):
                kind, i = orders[k][at[k]]
                if kind == "F":
                    ready = 0.0 if k == 0 else arrived.get(("F", i, k))
                    seconds = stage_t[k] * FORWARD_SHARE
                else:
                    ready = done.get(i) if k == p - 1 else arrived.get(("B", i, k))
                    seconds = stage_t[k] * (1 - FORWARD_SHARE)
                if ready is None:
                    break  # waits for a message: the other stages move first
                end = max(ready, free[k]) + seconds
                free[k] = end
                at[k] += 1
                moved = True
                if kind == "F" and k == p - 1:
                    done[i] = end
                hop = k if kind == "F" else k - 1  # the boundary it sends over
                to = k + 1 if kind == "F" else k - 1
                if 0 <= to < p:
                    start = max(end, link_free[kind][hop])
                    link_free[kind][hop] = start + link_transfer[hop]
                    arrived[(kind, i, to)] = start + link_transfer[hop] + link_latency[hop]
    stuck = [k for k in range(p) if at[k] < len(orders[k])]
    if stuck:
        raise ValueError(f"the schedule deadlocks: stage {stuck[0]} waits for good")
    return max(free)


def random_pipeline(
    rng: random.Random, max_transfer: float = 0.5
) -> tuple[list[float], list[float], list[float], int]:
    """A pipeline to hold the cost model against the simulation: (stage times, link
    latencies, link transfers, micro-batches), 1-12 stages of 0.1-2 s, 1-40 micro-batches,
    links' latency from free to 50 s (a third of them without), transfers up to
    ``max_transfer`` seconds."""
    p, m = rng.randint(1, 12), rng.randint(1, 40)
    t = [rng.uniform(0.1, 2.0) for _ in range(p)]
    lat = [
        rng.uniform(0, 1) * rng.choice([0.001, 0.1, 1, 5]) * rng.choice([0, 1, 10])
        for _ in range(p - 1)
    ]
    xfer = [rng.uniform(0, max_transfer) * rng.choice([0.01, 1]) for _ in range(p - 1)]
    return t, lat, xfer, m
