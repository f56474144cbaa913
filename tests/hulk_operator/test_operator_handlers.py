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


def _env_job(env: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "trainer", "image": "t:1", "env": env}]}}
    return {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": "j", "namespace": "ml", "uid": "u", "generation": 1},
        "spec": {"model": {"preset": "bert-large"}, "template": template, **spec},
    }


def test_env_replaced_is_told_once_per_change_of_the_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job refused when created is told of its replaced variables then (before, only an
    accepted one was: a review). Told again only when the variables change: not for a
    ``kubectl replace`` (kopf takes it for a new job: it was told twice more, a user
    trial), nor a container renamed; with no record in the operator (a restart), an edit
    with no old spec (kopf never saw it) is compared with the spec its pods were made from.
    A variable name that is no text is no crash (it stalled the update handler: a
    review)."""
    import kopf

    from hulk_operator.entries import pod_source, spec_hashes

    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        handlers.kopf, "warn", lambda body, reason, message: posted.append((reason, message))
    )
    log = logging.getLogger("test")
    memo = kopf.Memo()
    body = _env_job([{"name": "MASTER_PORT", "value": "1"}], allowedRegions=[""])
    handlers.hulktrainingjob_create(
        body,
        "j",
        "ml",
        {},
        {},
        memo,
        log,
        reason="create",  # type: ignore[arg-type]
    )
    assert [r for r, _ in posted] == ["EnvReplaced", "InvalidSpec"]
    posted.clear()
    fixed = _env_job([{"name": "MASTER_PORT", "value": "1"}])
    handlers.hulktrainingjob_create(
        fixed,
        "j",
        "ml",
        {},
        {},
        memo,
        log,
        reason="create",  # type: ignore[arg-type]
    )
    renamed = _env_job([{"name": "MASTER_PORT", "value": "1"}])["spec"]
    renamed["template"]["spec"]["containers"][0]["name"] = "main"
    handlers._tell_replaced_env(fixed, log, memo, fixed["spec"], renamed)  # type: ignore[arg-type]
    assert posted == []
    # the operator restarted: against the spec the pods were made from
    spec = fixed["spec"]
    fixed["status"] = {"plan": {"specHashes": spec_hashes(spec), "podTemplate": pod_source(spec)}}
    retagged = _env_job([{"name": "MASTER_PORT", "value": "1"}])["spec"]
    retagged["template"]["spec"]["containers"][0]["image"] = "t:2"
    handlers._tell_replaced_env(fixed, log, kopf.Memo(), None, retagged)  # type: ignore[arg-type]
    assert posted == []
    more = _env_job([{"name": "MASTER_PORT", "value": "1"}, {"name": "RANK", "value": "0"}])
    handlers._tell_replaced_env(fixed, log, memo, None, more["spec"])  # type: ignore[arg-type]
    assert [m.split(":")[0] for _, m in posted] == ["container trainer sets MASTER_PORT, RANK"]
    posted.clear()
    odd = _env_job([{"name": ["RANK"], "value": "1"}])["spec"]
    handlers._tell_replaced_env(fixed, log, memo, spec, odd)  # type: ignore[arg-type]
    assert posted == []
