"""A robust latency estimate for one peer: the median round trip over a window of samples.

One-way latency is half the round trip (RTT/2): the Hulk paper's figure is the time to
send one 64-byte message, and a round trip on a symmetric path takes two of those. The
median ignores the odd slow sample (a scheduling hiccup, a retransmission) that a mean
would smear into the estimate.

A peer is *reachable* once it has answered, *unreachable* after ``max_failures``
consecutive failed probes (its old samples are then dropped, so a peer that comes back
is measured afresh), and *unknown* before either happened.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """What is published for one peer at one moment."""

    one_way_ms: float | None
    samples: int
    last_success: float | None  # wall-clock seconds since the epoch
    reachable: bool | None
    consecutive_failures: int


class PeerEstimator:
    def __init__(self, window: int = 10, max_failures: int = 3) -> None:
        if window < 1 or max_failures < 1:
            raise ValueError("window and max_failures must be at least 1")
        self._rtts: deque[float] = deque(maxlen=window)
        self.max_failures = max_failures
        self.last_success: float | None = None
        self.consecutive_failures = 0
        self.total_samples = 0
        self.total_failures = 0
        self._unreachable = False

    def add_sample(self, rtt_s: float, now: float) -> None:
        """Record a round trip of ``rtt_s`` seconds that completed at wall time ``now``."""
        if rtt_s < 0:
            raise ValueError(f"negative round trip {rtt_s}")
        self._rtts.append(rtt_s)
        self.total_samples += 1
        self.last_success = now
        self.consecutive_failures = 0
        self._unreachable = False

    def add_failure(self) -> bool:
        """Record a failed probe; True when this failure made the peer unreachable."""
        self.total_failures += 1
        self.consecutive_failures += 1
        if not self._unreachable and self.consecutive_failures >= self.max_failures:
            self._unreachable = True
            self._rtts.clear()
            return True
        return False

    @property
    def reachable(self) -> bool | None:
        if self._unreachable:
            return False
        return True if self._rtts else None

    @property
    def rtt_s(self) -> float | None:
        return statistics.median(self._rtts) if self._rtts else None

    @property
    def one_way_ms(self) -> float | None:
        rtt = self.rtt_s
        return None if rtt is None else rtt / 2 * 1000.0

    @property
    def samples(self) -> int:
        return len(self._rtts)

    def estimate(self) -> Estimate:
        return Estimate(
            self.one_way_ms,
            self.samples,
            self.last_success,
            self.reachable,
            self.consecutive_failures,
        )
