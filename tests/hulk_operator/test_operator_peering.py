"""kopf peering: ``hulk operator --peering NAME`` creates its peering object when missing.

With a named peering kopf starts paused and stays paused, silently, until its
ClusterKopfPeering (every namespace) or KopfPeering (per served namespace) exists; the
operator creates it at startup (``crd.ensure_peering``), and stops with one line naming the
fixes when the peering CRDs themselves are absent."""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import pytest
from hjob_helpers import ROOT, Kube, cleanup_jobs, condition, hulk, manifest, plan_nodes, wait
from kubernetes import client

from hulk_operator import crd
from hulk_operator.pauses import RESUMED
from hulk_planner.datasets import paper_cluster
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
    sandbox: Any, namespace: str, kube: Kube, caplog: pytest.LogCaptureFixture, tmp_path: Any
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
        out = hulk(
            "operator", "--kubeconfig", sandbox.kubeconfig, "--peering", name, "--liveness", ""
        )
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
            # a glob: one in each namespace it matches now (before, none: kopf sat paused
            # with no word after the start; a user trial)
            made = crd.ensure_peering(api, name, namespaces=[f"{namespace[:-1]}*"])
            assert made == [f"KopfPeering {namespace}/{name}"], made
            assert any("a namespace made later that" in r.getMessage() for r in caplog.records)
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "kopfpeerings", name)
            # `hulk operator -n NS --peering NAME` creates its KopfPeering and is not paused.
            log_path = tmp_path / "operator.log"
            log = log_path.open("w")
            proc = subprocess.Popen(
                [sys.executable, "-m", "hulk", "operator", "--kubeconfig", sandbox.kubeconfig,
                 "-n", namespace, "--peering", name, "--liveness", "", "--priority", "100"],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            log.close()  # (the child has its own copy)
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
                # SIGTERM (a pod deleted): a clean exit, on the signal (before, kopf waited on
                # its stop flag until its deadline killed it: exit code -9)
                proc.send_signal(signal.SIGTERM)
                said = log_path.read_text
                assert proc.wait(20) == 0, said()
                assert "Signal SIGTERM is received. Operator is stopping." in said(), said()
            finally:
                _stop(proc)
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _operator(
    sandbox: Any,
    namespace: str,
    peering: str,
    priority: int,
    log: Any,
    port: int,
    liveness: str = "",
) -> subprocess.Popen[Any]:
    return subprocess.Popen(
        [sys.executable, "-m", "hulk", "operator", "--kubeconfig", sandbox.kubeconfig,
         "-n", namespace, "--peering", peering, "--install-crds", "--liveness", liveness,
         "--priority", str(priority), "--metrics-port", str(port)],
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_a_replica_resumed_after_a_pause_sees_what_was_deleted_meanwhile(
    sandbox: Any, namespace: str, kube: Kube, tmp_path: Any
) -> None:
    """kopf keeps in its indexes the objects deleted while a replica is paused by a peer
    of higher priority. Before, the resumed replica planned on a deleted node, and took
    a deleted job's server as held (a user trial); a paused replica's metrics kept its
    last per-job figures (an alert on Pending jobs fired on)."""
    peering = f"hulk-test-{uuid.uuid4().hex[:6]}"
    rome = sorted(s.name for s in paper_cluster().servers if s.region == "Rome")
    held, lost = rome[:2]
    port = _free_port()
    log = (tmp_path / "low.log").open("w")
    healthz = f"http://127.0.0.1:{_free_port()}/healthz"
    low = _operator(sandbox, namespace, peering, 50, log, port, healthz)
    high: subprocess.Popen[Any] | None = None
    try:
        with cleanup_jobs(kube):
            kube.apply(manifest("first", nodeSelector={"kubernetes.io/hostname": held}))
            wait("first Running", lambda: kube.phase("first") == "Running", 60)
            url = f"http://127.0.0.1:{port}/metrics"
            wait("its figures", lambda: 'job="first"' in _get(url), 30)
            high = _operator(sandbox, namespace, peering, 2_000_000_000, subprocess.DEVNULL,
                             _free_port())  # fmt: skip
            text = lambda: (tmp_path / "low.log").read_text()  # noqa: E731
            wait("the low replica paused", lambda: "Pausing operations in favour of" in text(), 60)
            # paused: no per-job figure of its own (the peer's are the live ones), and
            # /healthz says so (before, it counted the jobs of its stale view; a user trial)
            assert 'job="first"' not in _get(url) and "hulk_jobs{" not in _get(url)
            health = lambda: json.loads(_get(healthz) or "{}")  # noqa: E731
            wait("healthz says paused", lambda: health().get("paused") is True, 30)
            assert health()["jobs"] == 0
            # a replica started beside a peer of higher priority: paused from the start,
            # which kopf does not log (before, "paused": false; a user trial)
            late_healthz = f"http://127.0.0.1:{_free_port()}/healthz"
            late = _operator(sandbox, namespace, peering, 10, subprocess.DEVNULL, _free_port(),
                             late_healthz)  # fmt: skip
            try:
                said = wait("its healthz", lambda: json.loads(_get(late_healthz) or "{}"), 60)
                time.sleep(3)  # (its peering record read: it stays paused)
                said = json.loads(_get(late_healthz))
                assert said["paused"] is True and said["jobs"] == 0, said
            finally:
                _stop(late)
            kube.delete_job("first")  # the high replica deletes it and its pods
            wait("first's pods gone", lambda: not kube.live_pods("first"), 60)
            sandbox.delete_node(lost)
            _stop(high)
            high = None
            wait("the low replica resumed", lambda: RESUMED in text(), 60)
            # the server first held is free, and the deleted node is gone
            kube.apply(manifest("second", nodeSelector={"kubernetes.io/hostname": held}))
            kube.apply(manifest("third", nodeSelector={"kubernetes.io/hostname": lost}))
            wait("second Running", lambda: kube.phase("second") == "Running", 60)
            assert plan_nodes(kube.job("second")) == [held]
            planned = wait("third told", lambda: condition(kube.job("third"), "Planned"), 60)
            assert planned["status"] == "False" and planned["reason"] == "Unschedulable"
            assert not kube.pods("third")
            assert "starting again, for a view of the cluster" in text()
            wait("its figures again", lambda: 'job="second"' in _get(url), 30)
            # served by the new run of kopf; "jobs" the jobs it serves (before, those planned
            # and not yet written: 0 with every job running; a user trial)
            wait("healthz", lambda: health().get("jobs") == 2, 30)
            assert health()["placing"] == 0 and health()["paused"] is False
            # kopf's INFO line per probe per call is not logged (a line every 10 s), nor
            # aiohttp's access line
            assert "kopf.activities.probe" not in text(), text()
            assert "GET /healthz" not in text(), text()
    finally:
        if high is not None:
            _stop(high)
        _stop(low)
        log.close()
        if lost not in {n.metadata.name for n in kube.core.list_node().items}:
            sandbox.add_node(paper_cluster().server(lost))
        with sandbox.api_client() as api:
            try:
                client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "kopfpeerings", peering
                )
            except client.ApiException:
                pass


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def test_operators_of_overlapping_scopes_are_told_of_each_other(
    sandbox: Any, namespace: str, tmp_path: Any
) -> None:
    """kopf keeps the peering of an operator serving every namespace apart from that of one
    serving named namespaces: neither pauses for the other, and both acted on the same
    jobs, with no word (a user trial). Now each is told of the other, when live."""
    name = f"hulk-test-{uuid.uuid4().hex[:6]}"
    now = datetime.datetime.now(datetime.UTC)
    live = {"priority": 5, "lifetime": 20, "lastseen": now.isoformat()}
    gone = {**live, "lastseen": (now - datetime.timedelta(minutes=5)).isoformat()}
    meta = {"apiVersion": f"{GROUP}/{VERSION}", "metadata": {"name": name}}
    with sandbox.api_client() as api:
        crd.install(api, peering=True)
        custom = client.CustomObjectsApi(api)
        wide = {**meta, "kind": "ClusterKopfPeering", "status": {"a@x/1": live, "b@x/2": gone}}
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", wide)
        narrow = {**meta, "kind": "KopfPeering", "status": {"c@y/3": live}}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "kopfpeerings", narrow)
        try:
            assert crd.overlapping_peers(api, name, namespaces=[namespace]) == [
                f"ClusterKopfPeering {name}: a@x/1"
            ]
            assert crd.overlapping_peers(api, name) == [f"KopfPeering {namespace}/{name}: c@y/3"]
            assert crd.overlapping_peers(api, "no-such-peering") == []
            log = tmp_path / "op.log"

            def started(flag: str, line: str) -> str:
                """The log of `hulk operator -n NS ... flag` once it has said ``line``."""
                with log.open("w") as out:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "hulk", "operator", "--kubeconfig",
                         sandbox.kubeconfig, "-n", namespace, "--peering", name,
                         "--liveness", "", *flag.split()],
                        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out,
                        stderr=subprocess.STDOUT,
                    )  # fmt: skip
                    try:
                        wait("the warning", lambda: line in log.read_text(), 60)
                    finally:
                        _stop(proc)
                return log.read_text()

            # `hulk operator -n NS` says so at start
            said = started("--priority 100", "an operator serving every")
            assert f"(ClusterKopfPeering {name}: a@x/1)" in said
            # a --standalone one is told of the live ones of either scope (before: not a
            # word, and both acted on the same jobs; a user trial)
            assert crd.live_peers(api, name, namespaces=[namespace]) == [
                f"ClusterKopfPeering {name}: a@x/1",
                f"KopfPeering {namespace}/{name}: c@y/3",
            ]
            assert crd.live_peers(api, name, namespaces=["elsewhere"]) == [
                f"ClusterKopfPeering {name}: a@x/1"
            ]
            assert (
                f"--standalone, while operators under peering '{name}' run (ClusterKopfPeering "
                f"{name}: a@x/1; KopfPeering {namespace}/{name}: c@y/3)"
            ) in started("--standalone", "--standalone, while")
        finally:
            custom.delete_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", name)
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "kopfpeerings", name)
