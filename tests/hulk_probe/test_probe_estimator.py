"""The per-peer estimator: median over a window, RTT/2, reachability after failures."""

from __future__ import annotations

import pytest

from hulk_probe.estimator import PeerEstimator


def test_one_way_is_half_the_median_round_trip() -> None:
    est = PeerEstimator(window=5)
    for rtt in (0.010, 0.012, 0.011, 0.500, 0.013):  # one outlier
        est.add_sample(rtt, now=100.0)
    assert est.rtt_s == pytest.approx(0.012)
    assert est.one_way_ms == pytest.approx(6.0)
    assert est.samples == 5
    assert est.last_success == 100.0


def test_window_forgets_old_samples() -> None:
    est = PeerEstimator(window=3)
    for rtt in (1.0, 1.0, 1.0, 0.002, 0.002, 0.002):
        est.add_sample(rtt, now=0.0)
    assert est.samples == 3
    assert est.one_way_ms == pytest.approx(1.0)


def test_unknown_until_first_answer_or_enough_failures() -> None:
    est = PeerEstimator(window=4, max_failures=3)
    assert est.reachable is None and est.one_way_ms is None
    assert est.add_failure() is False
    assert est.add_failure() is False
    assert est.reachable is None
    assert est.add_failure() is True  # the third consecutive failure flips it
    assert est.reachable is False
    assert est.add_failure() is False  # already unreachable: reported once


def test_unreachable_drops_samples_and_recovers_afresh() -> None:
    est = PeerEstimator(window=4, max_failures=2)
    est.add_sample(0.100, now=1.0)
    est.add_failure()
    assert est.reachable is True and est.consecutive_failures == 1  # one failure is tolerated
    assert est.one_way_ms == pytest.approx(50.0)
    est.add_failure()
    assert est.reachable is False and est.samples == 0 and est.one_way_ms is None
    assert est.last_success == 1.0  # kept: when it last answered
    est.add_sample(0.004, now=9.0)
    assert est.reachable is True and est.consecutive_failures == 0
    assert est.one_way_ms == pytest.approx(2.0)
    snap = est.estimate()
    assert (snap.samples, snap.last_success, snap.reachable) == (1, 9.0, True)


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        PeerEstimator(window=0)
    with pytest.raises(ValueError):
        PeerEstimator().add_sample(-1.0, now=0.0)
