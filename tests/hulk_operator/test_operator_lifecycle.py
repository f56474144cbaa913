"""The operator's start-up (``lifecycle.operator_startup``) on an API server of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hjob_helpers import ROOT, wait

from hulk_operator import crd
from hulk_planner.datasets import paper_cluster
from hulk_sandbox.sandbox import Sandbox


@pytest.mark.sandbox
def test_an_operator_started_just_after_its_crds_are_applied_logs_no_error(
    tmp_path: Path,
) -> None:
    """``helm install`` applies the CRDs and starts the operator together. On a new API
    server kopf's first list of HulkTrainingJobs was refused, 429 "storage is
    (re)initializing", logged as an ERROR before it retried (a user trial; three runs of
    three before the fix). The start-up now lists them first at resourceVersion 0, which
    the API server answers once its watch cache is ready (``crd.wait_storage``)."""
    box = Sandbox(tmp_path / "box", tmp_path / "logs")
    box.up(paper_cluster().servers[:2], die_with_parent=True)
    log_path = tmp_path / "operator.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        with box.api_client() as api:
            for path in (crd.JOB_CRD, crd.LATENCY_CRD, crd.PEERING_CRDS):
                for doc in crd.documents(path):
                    crd.apply_crd(api, doc)  # (not waited for: as kubectl apply does)
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hulk", "operator", "--kubeconfig", box.kubeconfig],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        said = log_path.read_text
        wait("its watches", lambda: "Resuming operations after the pause" in said(), 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, said()[-2000:]
        assert "storage is (re)initializing" not in said(), said()[-2000:]
        assert " ERROR " not in said(), said()[-2000:]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        box.down()


def test_the_start_up_wait_ends_at_once_on_an_api_server_that_does_not_answer(
    unreachable_kubeconfig: Path,
) -> None:
    """A connection refused is no reason to wait (kopf's watches retry and tell it); before
    the review it raised out of the start-up, which kopf retried a minute later."""
    from hulk_operator import kube

    with kube.make_client(str(unreachable_kubeconfig)) as api:
        waited, served = crd.wait_storage(api, ["ml"], timeout=30)
    assert not served and waited < 15
