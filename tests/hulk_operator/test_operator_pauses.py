"""Reading kopf's peering log (``hulk_operator.pauses``), without kopf running: a pause
clears the per-job figures; a resume after a pause stops kopf for a fresh run, and every
object's memo sees it (kopf hands each object a shallow copy of the memo)."""

from __future__ import annotations

import copy
import logging
import threading

import kopf
import pytest

from hulk_operator.metrics import Metrics
from hulk_operator.pauses import PAUSED_NOW, PEERING_LOGGER, RESTARTING, PauseWatch, identity


def test_a_resume_after_a_pause_stops_kopf_and_every_objects_memo_sees_it() -> None:
    metrics = Metrics()
    metrics.set_phases([(("ml", "gpt"), "Running"), (("ml", "bert"), "Pending")])
    metrics.set_predicted("ml", "gpt", 2.5)
    memo, stop = kopf.Memo(metrics=metrics), threading.Event()
    log = logging.getLogger(PEERING_LOGGER)
    with PauseWatch(memo, stop) as watch:
        per_object = copy.copy(memo)  # as kopf makes it when it first sees an object
        # kopf starts paused, silently (for ever, beside a peer of higher priority: before,
        # /healthz said "paused": false meanwhile; a user trial), and resumes: no view is
        # stale yet
        assert per_object[PAUSED_NOW].is_set()
        log.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert not stop.is_set() and not per_object[RESTARTING].is_set()
        assert 'job="gpt"' in metrics.text() and "hulk_jobs{" in metrics.text()
        assert 'hulk_job_waiting{job="bert",namespace="ml"} 1.0' in metrics.text()
        assert not per_object[PAUSED_NOW].is_set()
        log.info("Pausing operations in favour of [<Peer b: priority=9>].")
        assert 'job="gpt"' not in metrics.text() and "hulk_jobs{" not in metrics.text()
        assert "hulk_job_waiting{" not in metrics.text()
        assert not stop.is_set() and per_object[PAUSED_NOW].is_set()  # (for /healthz)
        # a reconciliation in flight when the pause came writes no figure (before, it did
        # after they were cleared, and the paused replica exported it: a sandbox test)
        metrics.paused = per_object[PAUSED_NOW]  # (as the operator's startup hands it)
        metrics.set_predicted("ml", "gpt", 2.5)
        metrics.set_phases([(("ml", "gpt"), "Running")])
        assert 'job="gpt"' not in metrics.text() and "hulk_jobs{" not in metrics.text()
        log.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert not per_object[PAUSED_NOW].is_set()
    assert stop.is_set() and watch.restart and per_object[RESTARTING].is_set()
    assert watch not in log.filters  # (taken off with the run)
    with PauseWatch(kopf.Memo(), threading.Event(), peering=False) as alone:
        assert not alone.paused_now.is_set()  # --standalone: kopf never pauses


def test_the_identity_is_the_pods_name_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_ID", "hulk-operator-7d9f-abcde")
    assert identity() == "hulk-operator-7d9f-abcde"
    monkeypatch.delenv("POD_ID")
    assert identity() != identity()  # (a random suffix: two processes on one host differ)
