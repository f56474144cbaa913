"""kopf peering: ``hulk operator --peering NAME`` creates its peering object when missing.

With a named peering kopf starts paused and stays paused, silently, until its
ClusterKopfPeering (every namespace) or KopfPeering (per served namespace) exists; the
operator creates it at startup (``crd.ensure_peering``), and stops with one line naming the
fixes when the peering CRDs themselves are absent."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from hjob_helpers import ROOT, Kube, cleanup_jobs, manifest, wait
from kubernetes import client

from hulk_operator import crd
from hulk_planner.errors import InvalidRequest

pytestmark = pytest.mark.sandbox
GROUP, VERSION = crd.PEERING_GROUP, crd.PEERING_VERSION


def _crd_names() -> list[str]:
    return [d["metadata"]["name"] for d in crd.documents(crd.PEERING_CRDS)]


def _present(api: client.ApiClient) -> set[str]:
    ext = client.ApiextensionsV1Api(api)
    items: Any = ext.list_custom_resource_definition().items
    return {c.metadata.name for c in items} & set(_crd_names())


def test_peering_objects_are_created_at_startup(
    sandbox: Any, namespace: str, kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"hulk-test-{uuid.uuid4().hex[:6]}"
    with sandbox.api_client() as api:
        custom = client.CustomObjectsApi(api)
        ext = client.ApiextensionsV1Api(api)
        had = _present(api)  # (restored at the end)
        for gone in had:  # without the peering CRDs (other tests installed them)
            ext.delete_custom_resource_definition(gone)
        wait("peering CRDs gone", lambda: not _present(api), 60)
        # no peering CRD: kopf would stay paused for ever; before, that was one warning
        with pytest.raises(InvalidRequest) as err:
            crd.ensure_peering(api, name)
        assert err.value.field == "--peering" and "--install-crds" in str(err.value)
        # a namespaced operator too (before, the API server's "404 page not found" was read
        # as the namespace missing: a warning, and the operator sat paused: a user trial)
        with pytest.raises(InvalidRequest) as err:
            crd.ensure_peering(api, name, namespaces=[namespace])
        assert "needs the KopfPeering CRD, which is not installed" in str(err.value)
        assert not [r for r in caplog.records if r.name == crd.log.name]
        out = subprocess.run(
            [sys.executable, "-m", "hulk", "operator", "--kubeconfig", sandbox.kubeconfig,
             "--peering", name, "--liveness", ""],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        said = out.stderr.strip().splitlines()[-1]
        assert said.startswith(
            f"hulk operator: error: --peering: kopf peering '{name}' needs the "
            "ClusterKopfPeering CRD, which is not installed"
        ), out.stderr
        docs = crd.documents(crd.PEERING_CRDS)
        for doc in docs:
            crd.apply_crd(api, doc)
        crd.wait_established(api, _crd_names())
        crd.wait_served(api, docs)
        try:
            # Every namespace: a ClusterKopfPeering, created once.
            assert crd.ensure_peering(api, name) == [f"ClusterKopfPeering {name}"]
            assert crd.ensure_peering(api, name) == []
            # a namespace that does not exist: told, and nothing made there
            assert crd.ensure_peering(api, name, namespaces=["no-such-namespace"]) == []
            assert any("namespace 'no-such-namespace' not found" in r.getMessage()
                       for r in caplog.records if r.name == crd.log.name)  # fmt: skip
            custom.get_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", name)
            # `hulk operator -n NS --peering NAME` creates its KopfPeering and is not paused.
            proc = subprocess.Popen(
                [sys.executable, "-m", "hulk", "operator", "--kubeconfig", sandbox.kubeconfig,
                 "-n", namespace, "--peering", name, "--liveness", "", "--priority", "100"],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                with cleanup_jobs(kube):
                    kube.apply(manifest("peered"))
                    wait("the job Running", lambda: kube.phase("peered") == "Running", 45)
                    obj: Any = custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, "kopfpeerings", name
                    )
                    assert obj["metadata"]["name"] == name
                    # its record lasts 20 s, not kopf's 60: a replica killed with -9 holds
                    # back its successor that long at most
                    (peer,) = (obj.get("status") or {}).values()
                    assert (peer["priority"], peer["lifetime"]) == (100, 20), peer
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        finally:
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            for crd_name in set(_crd_names()) - had:  # leave the sandbox as it was
                ext.delete_custom_resource_definition(crd_name)
            deadline = time.monotonic() + 30
            while _present(api) - had and time.monotonic() < deadline:
                time.sleep(0.2)


def test_a_missing_job_crd_is_one_warning_naming_the_ways_to_install_it(
    sandbox: Any, kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    """kopf alone says only "unresolved resources" when the HulkTrainingJob CRD is absent."""
    with sandbox.api_client() as api:
        assert crd.jobs_served(api) is True  # installed by the ``kube`` fixture
        with caplog.at_level(logging.WARNING, logger=crd.log.name):
            assert crd.jobs_served(api, group="absent.hulk.dev") is False
    (record,) = [r for r in caplog.records if r.name == crd.log.name]
    text = record.getMessage()
    assert text.startswith("the HulkTrainingJob CRD is not installed (absent.hulk.dev/v1alpha1")
    assert "kubectl apply -f crds/hulktrainingjobs.hulk.dev.yaml" in text
    assert "--install-crds" in text and "crds.enabled=true" in text
