"""``hulk plan --kubeconfig``'s notes that need no cluster (the preview itself runs on the
sandbox: test_operator_latency.py)."""

from __future__ import annotations

from typing import Any

from hulk_operator.preview import UNSERVED_AFTER_S, env_replaced, labels_replaced, unserved_note


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


def test_an_api_server_that_never_answers_is_told_not_waited_for(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """Before, a server that accepted the connection and never answered held ``hulk plan
    --kubeconfig`` for ever (a trial killed it after 250 s)."""
    import re
    import socket

    import pytest
    import yaml

    from hulk_operator import preview
    from hulk_planner.errors import InvalidRequest

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # accepts (the kernel does), answers nothing
    port = mute.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setattr(preview, "READ_TIMEOUT_S", 1.0)
    try:
        with pytest.raises(InvalidRequest) as exc:
            preview.read_cluster(str(path))
    finally:
        mute.close()
    assert str(exc.value).startswith(
        f"--kubeconfig: cannot reach the API server at http://127.0.0.1:{port} (Read timed out."
    ), exc.value
    # the request's own read timeout ended it, the preview's (urllib3 says what was left
    # of it), not the client's default of none or another
    timeout = re.search(r"\(read timeout=([0-9.]+)\)", str(exc.value))
    assert timeout is not None and 0 < float(timeout.group(1)) <= 1.0, exc.value


def test_a_kubeconfig_that_is_no_mapping_is_one_line(tmp_path: Any) -> None:
    """Before: ``TypeError: 'str' object does not support item assignment`` (a trial)."""
    import pytest

    from hulk_operator.kube import configuration
    from hulk_planner.errors import InvalidRequest

    for text in ("hello\n", "[1, 2]\n"):
        path = tmp_path / "kubeconfig"
        path.write_text(text)
        with pytest.raises(InvalidRequest) as exc:
            configuration(str(path))
        assert str(exc.value) == (
            f"--kubeconfig: {path}: is not a kubeconfig (point it at a kubeconfig: a YAML "
            "mapping with clusters, users and contexts)"
        )
    with pytest.raises(InvalidRequest, match="not a regular file"):
        configuration(str(tmp_path))


def test_a_kubeconfig_that_skips_tls_verification_is_taken_without_a_warning_a_request(
    tmp_path: Any,
) -> None:
    """``insecure-skip-tls-verify: true``: urllib3 warned (InsecureRequestWarning, with its
    source line) at every request, about nine times a ``hulk plan --kubeconfig``, where
    kubectl says nothing (a user trial). A verifying kubeconfig leaves the warning alone."""
    import warnings

    import urllib3

    from hulk_operator.kube import configuration

    def kubeconfig(insecure: bool) -> str:
        path = tmp_path / f"kc-{insecure}"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'"
            f"{', insecure-skip-tls-verify: true' if insecure else ''}}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        )
        return str(path)

    for insecure in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = configuration(kubeconfig(insecure))
            assert cfg.verify_ssl is not insecure
            warnings.warn("request", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)
        assert len(caught) == (0 if insecure else 1), caught


def test_replaced_variables_are_noted_only_where_applying_changes_them() -> None:
    """The operator's Warning EnvReplaced is told when the variables change, not at every
    edit (before, the preview of a running job's manifest said it would warn again)."""

    def job(*names: str) -> dict[str, Any]:
        env = [{"name": n, "value": "1"} for n in names]
        return {"spec": {"template": {"spec": {"containers": [{"name": "c", "env": env}]}}}}

    said = env_replaced(job("RANK", "LR"), None)  # not applied: told
    assert said is not None and said.startswith("container c sets RANK: Hulk sets these"), said
    assert env_replaced(job("RANK", "LR"), job("RANK")) is None  # the same variables
    assert env_replaced(job("RANK", "WORLD_SIZE"), job("RANK")) is not None  # one more
    assert env_replaced(job("RANK"), {"spec": {}}) is not None  # a template given now
    assert env_replaced(job("LR"), None) is None and env_replaced({"spec": {}}, None) is None


def test_replaced_labels_are_noted_by_the_live_preview_where_applying_changes_them() -> None:
    """``hulk plan --kubeconfig`` noted EnvReplaced and not LabelsReplaced, which the offline
    preview noted (a user trial)."""

    def job(labels: dict[str, str]) -> dict[str, Any]:
        template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c"}]}}
        return {"metadata": {"name": "j"}, "spec": {"template": template}}

    said = labels_replaced(job({"hulk.dev/job": "other"}), None)
    assert said is not None and said.startswith("spec.template.metadata.labels sets hulk.dev/job=")
    assert labels_replaced(job({"hulk.dev/job": "other"}), job({"hulk.dev/job": "other"})) is None
    assert labels_replaced(job({"hulk.dev/stage": "1"}), job({"hulk.dev/job": "other"}))
    assert labels_replaced(job({"hulk.dev/job": "j"}), None) is None  # the job's own: harmless


def test_the_preview_of_a_finishing_runs_template_edit_plans_it_again() -> None:
    """``hulk plan --kubeconfig`` of an image edit of a running job: its plan stands (its
    pods made again), but not once a stage pod of the run exited 0 (``status.
    succeededPods``): the operator plans such an edit again (``edits.plan_stands``,
    ``run_ended``), and the preview said the plan stood (a review)."""
    import copy
    from dataclasses import replace

    from placement_helpers import entry, nodes

    from hulk_operator import edits, preview
    from hulk_operator import status as st
    from hulk_operator.entries import pod_source, spec_hashes
    from hulk_operator.latencies import Latencies
    from hulk_operator.snapshot import Snapshot
    from hulk_planner.datasets import paper_cluster, paper_jobs
    from hulk_planner.model import JobPlan, Stage

    spec: dict[str, Any] = {
        "model": {"preset": "gpt2-xl"},
        "training": {"globalBatchSize": 128, "microBatchSize": 1},
        "template": {"spec": {"containers": [{"name": "t", "image": "trainer:1"}]}},
    }
    image = copy.deepcopy(spec)
    image["template"]["spec"]["containers"][0]["image"] = "trainer:2"
    own = frozenset(("beijing-0", "beijing-1"))
    e = entry(paper_jobs()[2], plan_nodes=own, phase=st.RUNNING)
    snap = Snapshot(nodes(), Latencies(), {e.key: e}, dict.fromkeys(own, e.key))
    stages = (Stage((0, 24), ("beijing-0",)), Stage((24, 48), ("beijing-1",)))
    made = {
        **st.plan_status(JobPlan(e.key[1], stages, 8), paper_cluster(), "hulk"),
        "specHashes": spec_hashes(spec),
        "podTemplate": pod_source(spec),
    }

    def stands(status: dict[str, Any]) -> str | None:
        obj = {"spec": spec, "status": {"phase": st.RUNNING, "plan": made, **status}}
        said = preview._stands(obj, e, {"spec": image}, replace(e, plan_nodes=frozenset()), snap)
        return None if said is None else said[0]

    assert stands({}) == edits.TEMPLATE_STANDS
    assert stands({st.SUCCEEDED_PODS: [f"{e.key[1]}-1-0"]}) is None
