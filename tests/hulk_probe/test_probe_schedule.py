"""Probe scheduling: stable per-pair phases spread evenly, bounded jitter, no drift."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hulk_probe.schedule import FIRST_SPREAD, Slot, first_slot, next_slot, phase

NODES = [f"city{i // 4}-{i % 4}" for i in range(50)]


def test_phase_is_stable_and_directional() -> None:
    assert phase("a", "b") == phase("a", "b")
    assert phase("a", "b") != phase("b", "a")
    assert 0.0 <= phase("a", "b") < 1.0


def test_phases_of_fifty_agents_spread_over_the_interval() -> None:
    """2450 directed pairs in 20 buckets: none may hold more than 1.5x its share."""
    pairs = [(s, t) for s in NODES for t in NODES if s != t]
    buckets = Counter(int(phase(s, t) * 20) for s, t in pairs)
    share = len(pairs) / 20
    assert len(buckets) == 20
    assert max(buckets.values()) < 1.5 * share
    assert min(buckets.values()) > 0.5 * share


def test_every_agent_spreads_its_own_probes() -> None:
    """One agent's 49 first probes are not bunched: no tenth of the spread holds a quarter."""
    for source in NODES[:10]:
        firsts = [first_slot(0.0, 10.0, phase(source, t)).due for t in NODES if t != source]
        assert all(0.0 <= due < 10.0 * FIRST_SPREAD for due in firsts)
        counts = Counter(int(due / 0.5) for due in firsts)
        assert len(counts) >= 8 and max(counts.values()) <= 12


def test_jitter_is_bounded_and_anchors_do_not_drift() -> None:
    rng = random.Random(7)
    slot = first_slot(0.0, 2.0, 0.25)
    assert slot == Slot(anchor=0.25, due=0.25)
    dues = []
    for k in range(1, 200):
        slot = next_slot(slot, now=slot.due, interval=2.0, jitter=0.1, rng=rng)
        assert slot.anchor == pytest.approx(0.25 + 2.0 * k)
        assert abs(slot.due - slot.anchor) <= 0.2 + 1e-9
        dues.append(slot.due - slot.anchor)
    assert max(dues) > 0.1 and min(dues) < -0.1  # it does jitter, both ways


def test_missed_slots_are_skipped_not_burst() -> None:
    slot = Slot(anchor=0.0, due=0.0)
    later = next_slot(slot, now=7.3, interval=1.0, jitter=0.0, rng=random.Random(1))
    assert later.anchor == pytest.approx(8.0)
    assert later.due >= 7.3


def test_no_jitter_means_exact_period() -> None:
    slot = first_slot(5.0, 3.0, 0.0)
    slot = next_slot(slot, now=5.0, interval=3.0, jitter=0.0, rng=random.Random(1))
    assert slot.due == pytest.approx(8.0)
