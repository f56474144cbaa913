"""``hulk plan --kubeconfig``'s notes that need no cluster (the preview itself runs on the
sandbox: test_operator_latency.py)."""

from __future__ import annotations

from hulk_operator.preview import UNSERVED_AFTER_S, unserved_note


def test_a_job_no_operator_has_seen_is_noted() -> None:
    """Before: a job applied to namespace default was previewed as placed, and never ran:
    the demo's operator serves hulk-demo (a trial)."""
    obj = {"metadata": {"name": "defns", "namespace": "default"}, "spec": {}}
    created = 1_000.0
    assert unserved_note(obj, created, created + 150) == (
        "no operator has written its status in the 2 min since it was created: is one "
        "running, and does it serve namespace default? (hulk operator --namespace default or "
        "--all-namespaces; the chart's operator.watchNamespaces)"
    )
    assert "in the 45 s since" in (unserved_note(obj, created, created + 45) or "")
    # just created: the operator has not had time yet
    assert unserved_note(obj, created, created + UNSERVED_AFTER_S - 1) is None
    # any status is an operator's: it serves the namespace
    seen = {**obj, "status": {"phase": "Pending"}}
    assert unserved_note(seen, created, created + 3_600) is None
    assert unserved_note(None, created, created + 3_600) is None
