"""When to probe each peer, spread in time so that N agents never fire all at once.

Every (source, target) pair gets a fixed *phase* in [0, 1) from a hash of the two names,
so the N·(N-1) probes of a cluster fall evenly over the interval, whatever the order in
which agents start. A peer seen for the first time is probed after ``phase · interval ·
FIRST_SPREAD`` (soon, but still spread), then every ``interval`` from that anchor, each
probe shifted by a fresh random ``±jitter · interval`` so that two pairs that share a
phase do not stay in lock-step. The anchors never drift: jitter does not accumulate.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

#: A new peer is first probed within this fraction of an interval.
FIRST_SPREAD = 0.5


def phase(source: str, target: str) -> float:
    """A stable, well-mixed number in [0, 1) for the ordered pair (source, target)."""
    digest = hashlib.blake2b(f"{source}\0{target}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass
class Slot:
    """The schedule of one peer: its current anchor and the (jittered) due time."""

    anchor: float
    due: float


def first_slot(now: float, interval: float, pair_phase: float) -> Slot:
    start = now + pair_phase * interval * FIRST_SPREAD
    return Slot(anchor=start, due=start)


def next_slot(slot: Slot, now: float, interval: float, jitter: float, rng: random.Random) -> Slot:
    """The slot after ``slot``; anchors already in the past are skipped, not caught up."""
    anchor = slot.anchor + interval
    while anchor + jitter * interval < now:
        anchor += interval
    due = anchor + rng.uniform(-jitter, jitter) * interval
    return Slot(anchor=anchor, due=max(due, now))
