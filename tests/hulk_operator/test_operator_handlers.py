"""The job handlers' own decisions (``hulk_operator.handlers``), without a cluster."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hulk_operator import handlers
from hulk_operator.entries import object_entry


def test_a_new_invalid_job_gets_its_warning_even_where_the_timer_wrote_its_condition_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the create handler took the timer's ``Failed`` condition for its own Event
    said already, and a new invalid job got none (a user trial, once in four)."""
    posted: list[str] = []
    monkeypatch.setattr(handlers.kopf, "warn", lambda body, reason, message: posted.append(message))
    body: dict[str, Any] = {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": "bad", "namespace": "ml", "uid": "u", "generation": 1},
        "spec": {"model": {"preset": "no-such-model"}, "template": {"spec": {}}},
    }
    entry = object_entry(body)
    assert entry.job is None and entry.error
    body["status"] = {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "InvalidSpec", "message": entry.error}
        ]
    }
    log = logging.getLogger("test")
    assert handlers._refused(body, log, entry, new=True)  # type: ignore[arg-type]
    assert posted == [entry.error]
    # an edit (or a restart's resume) that leaves the same error: not posted again
    assert handlers._refused(body, log, entry)  # type: ignore[arg-type]
    assert posted == [entry.error]
