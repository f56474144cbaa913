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


def test_env_replaced_is_told_for_a_refused_job_and_against_the_pods_spec_when_kopf_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job refused when created is told of its replaced variables then (before, only an
    accepted one was, and its fix, an edit of the template, said nothing: a review); an edit
    with no old spec (kopf never saw it) is compared with the spec its pods were made from
    (before, with nothing: the same Warning again for an image tag), and a variable name
    that is no text is no crash (it stalled the update handler: a review)."""
    from hulk_operator.entries import pod_source, spec_hashes

    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        handlers.kopf, "warn", lambda body, reason, message: posted.append((reason, message))
    )
    log = logging.getLogger("test")
    body = _env_job([{"name": "MASTER_PORT", "value": "1"}], allowedRegions=[""])
    handlers.hulktrainingjob_create(
        body,
        "j",
        "ml",
        {},
        {},
        None,
        log,
        reason="create",  # type: ignore[arg-type]
    )
    assert [r for r, _ in posted] == ["EnvReplaced", "InvalidSpec"]
    spec = body["spec"]
    made = {"specHashes": spec_hashes(spec), "podTemplate": pod_source(spec)}
    body["status"] = {"plan": made}
    posted.clear()
    retagged = _env_job([{"name": "MASTER_PORT", "value": "1"}])["spec"]
    retagged["template"]["spec"]["containers"][0]["image"] = "t:2"
    handlers._tell_replaced_env(body, log, None, retagged)  # type: ignore[arg-type]
    assert posted == []
    more = _env_job([{"name": "MASTER_PORT", "value": "1"}, {"name": "RANK", "value": "0"}])
    handlers._tell_replaced_env(body, log, None, more["spec"])  # type: ignore[arg-type]
    assert [m.split(":")[0] for _, m in posted] == ["container trainer sets MASTER_PORT, RANK"]
    posted.clear()
    odd = _env_job([{"name": ["RANK"], "value": "1"}])["spec"]
    handlers._tell_replaced_env(body, log, spec, odd)  # type: ignore[arg-type]
    assert posted == []
