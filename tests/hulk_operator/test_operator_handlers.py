"""The job handlers' Warning Events (``hulk_operator.handlers``) where the operator meets a
job as user trials left it, on the sandbox: a real API server, the operator in a thread."""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

import pytest
from hjob_helpers import CONFIG, Kube, cleanup_jobs, condition, manifest, wait

from hulk_operator import GROUP, PLURAL, VERSION
from hulk_operator.entries import object_entry
from hulk_operator.runner import OperatorThread

pytestmark = pytest.mark.sandbox
RECORD = "hulk.dev/last-handled-configuration"  # kopf's record of the spec it handled


def _handled(kube: Kube, name: str) -> dict[str, Any] | None:
    """The job, once kopf's handlers took its spec as it is now (kopf writes its record
    when they all succeeded: a handler that raises is retried, and the record waits)."""
    body = kube.job(name)
    record = (body["metadata"].get("annotations") or {}).get(RECORD)
    return body if record and json.loads(record).get("spec") == body["spec"] else None


def _patch(kube: Kube, name: str, spec: dict[str, Any]) -> None:
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, kube.ns, PLURAL, name, {"spec": spec}
    )


def _env(body: dict[str, Any], env: list[dict[str, Any]]) -> dict[str, Any]:
    """``body``'s template with its container's variables ``env``."""
    template = copy.deepcopy(body["spec"]["template"])
    template["spec"]["containers"][0]["env"] = env
    return template


def test_a_new_invalid_job_gets_its_warning_even_where_the_timer_wrote_its_condition_first(
    sandbox: Any, kube: Kube, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the create handler took the timer's ``Failed`` condition for its own Event
    said already, and a new invalid job got none (a user trial, once in four): here the
    condition is written before the operator starts, so its create handler finds it. A
    job refused when created is told of its replaced variables too (before, only an
    accepted one was: a review); an edit that leaves the same error posts nothing again,
    and a variable name that is no text is no crash (it stalled the update handler)."""
    caplog.set_level(logging.INFO)  # (the start-up line's too)
    body = manifest("bad", model={"preset": "no-such-model"})
    body["spec"]["template"] = _env(body, [{"name": "MASTER_PORT", "value": "1"}])
    kube.apply(body)
    entry = object_entry(kube.job("bad"))
    assert entry.job is None and entry.error
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "InvalidSpec",
        "message": entry.error,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, kube.ns, PLURAL, "bad", {"status": {"conditions": [failed]}}
    )
    assert condition(kube.job("bad"), "Failed")["message"] == entry.error
    op = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        with cleanup_jobs(kube):
            (told,) = wait("the Warning", lambda: kube.events("InvalidSpec") or None, 30)
            assert told.type == "Warning" and told.message == entry.error, told.message
            (env,) = wait("the variables told", lambda: kube.events("EnvReplaced") or None, 30)
            assert env.message.startswith("container trainer sets MASTER_PORT: "), env.message
            wait("the job handled", lambda: _handled(kube, "bad"), 30)
            _patch(kube, "bad", {"priority": 3})  # another field: the same error
            wait("the edit handled", lambda: _handled(kube, "bad"), 30)
            time.sleep(2 * CONFIG.reconcile_interval_s)  # (an Event would be posted by now)
            assert len(kube.events("InvalidSpec")) == 1
            odd = _env(kube.job("bad"), [{"name": ["RANK"], "value": "1"}])
            _patch(kube, "bad", {"template": odd})
            wait("the odd variable's edit handled", lambda: _handled(kube, "bad"), 30)
            errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert not errors, errors
            # the settings it runs with, latencies' too (a restart's were not to be seen)
            (started,) = [m for r in caplog.records if (m := r.getMessage()).startswith(
                "Hulk operator started")]  # fmt: skip
            assert (
                f"latency reports fresh for {CONFIG.latency_max_age_s:g} s" in started
                and f"else {CONFIG.same_region_latency_ms:g} / "
                f"{CONFIG.cross_region_latency_ms:g} ms within / across regions"
                in started
            ), started
    finally:
        op.stop()


def test_env_replaced_is_told_once_per_change_of_the_variables(
    sandbox: Any, kube: Kube, namespace: str
) -> None:
    """Told again only when the variables change: not for a ``kubectl replace`` (kopf
    takes it for a new job: it was told twice more, a user trial), nor for a container
    renamed; an operator with no record of what it told (a restart) compares a replaced
    job with the spec its pods were made from."""
    body = manifest("j")
    body["spec"]["template"] = _env(body, [{"name": "MASTER_PORT", "value": "1"}])
    first = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        kube.apply(body)
        wait("Running", lambda: kube.phase("j") == "Running", 60)
        (told,) = wait("told", lambda: kube.events("EnvReplaced") or None, 30)
        assert told.message.startswith("container trainer sets MASTER_PORT: "), told.message
    finally:
        first.stop()  # (what it told goes with it)
    again = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        with cleanup_jobs(kube):
            # kubectl replace of the manifest, its image retagged: kopf's record (an
            # annotation) goes, and kopf takes the job for a new one
            job = kube.job("j")
            spec = copy.deepcopy(job["spec"])
            spec["template"]["spec"]["containers"][0]["image"] = "retagged:2"
            meta = {k: job["metadata"][k] for k in ("name", "resourceVersion", "finalizers")}
            whole = {"apiVersion": job["apiVersion"], "kind": job["kind"], "metadata": meta}
            kube.custom.replace_namespaced_custom_object(
                GROUP, VERSION, kube.ns, PLURAL, "j", {**whole, "spec": spec}
            )
            wait("the replaced job handled", lambda: _handled(kube, "j"), 30)
            time.sleep(2 * CONFIG.reconcile_interval_s)  # (an Event would be posted by now)
            assert len(kube.events("EnvReplaced")) == 1
            renamed = copy.deepcopy(spec["template"])
            renamed["spec"]["containers"][0]["name"] = "main"
            _patch(kube, "j", {"template": renamed})
            wait("the rename handled", lambda: _handled(kube, "j"), 30)
            time.sleep(2 * CONFIG.reconcile_interval_s)
            assert len(kube.events("EnvReplaced")) == 1
            more = _env({"spec": {"template": renamed}}, [
                {"name": "MASTER_PORT", "value": "1"}, {"name": "RANK", "value": "0"},
            ])  # fmt: skip
            _patch(kube, "j", {"template": more})
            both = wait(
                "told again",
                lambda: kube.events("EnvReplaced")[1:] and kube.events("EnvReplaced"),
                30,
            )
            assert sorted(e.message.split(":")[0] for e in both) == [
                "container main sets MASTER_PORT, RANK",
                "container trainer sets MASTER_PORT",
            ]
    finally:
        again.stop()


def test_a_refused_edit_is_not_told_again_by_a_restarted_operator(
    sandbox: Any, kube: Kube, namespace: str
) -> None:
    """A running job's refused edit is told once (its pods run on); an operator started
    since resumes the job and finds it said already (before, it posted the Warning again,
    without "the pods of the last valid spec keep running": it read as a new failure; a
    user trial)."""
    first = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        kube.apply(manifest("steady"))
        wait("Running", lambda: kube.phase("steady") == "Running", 60)
        _patch(kube, "steady", {"model": {"preset": "bert-largee"}})
        (told,) = wait("told", lambda: kube.events("InvalidSpec") or None, 30)
        assert "keep running" in told.message, told.message
        wait("the edit handled", lambda: _handled(kube, "steady"), 30)
        wait(
            "its condition",
            lambda: condition(kube.job("steady"), "Planned").get("message") == told.message,
            30,
        )
    finally:
        first.stop()
    again = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        with cleanup_jobs(kube):
            time.sleep(3 * CONFIG.reconcile_interval_s)  # (resumed, an Event posted by now)
            assert kube.phase("steady") == "Running"
            said = [e.message for e in kube.events("InvalidSpec")]
            assert said == [told.message], said
    finally:
        again.stop()
