"""Fixtures of the operator's end-to-end tests (on the session's ``sandbox``).

``crds`` (module): the HulkTrainingJob and NodeLatency CRDs installed. ``kube``: a
:class:`hjob_helpers.Kube` on the test's namespace. ``operator``: the operator running in a
thread of this process, watching that namespace; the namespace's jobs are deleted before it
stops (kopf's finalizer needs it). ``cordon_operator``: the same with ``cordon_moves`` on
(a cordon moves a running stage at once), for tests that cordon a node to move its stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from hjob_helpers import CONFIG, Kube, cleanup_jobs

from hulk_operator import crd
from hulk_operator.runner import OperatorThread


@pytest.fixture(scope="module")
def crds(sandbox: Any) -> None:
    with sandbox.api_client() as api:
        crd.install(api, peering=False)


@pytest.fixture
def kube(sandbox: Any, namespace: str, crds: None) -> Iterator[Kube]:
    with sandbox.api_client() as api:
        yield Kube(api, namespace)


def _running(sandbox: Any, namespace: str, kube: Kube, **config: Any) -> Iterator[OperatorThread]:
    op = OperatorThread(
        sandbox.kubeconfig, namespaces=[namespace], config=replace(CONFIG, **config)
    ).start()
    try:
        with cleanup_jobs(kube):
            yield op
    finally:
        op.stop()


@pytest.fixture
def operator(sandbox: Any, namespace: str, kube: Kube) -> Iterator[OperatorThread]:
    yield from _running(sandbox, namespace, kube)


@pytest.fixture
def cordon_operator(sandbox: Any, namespace: str, kube: Kube) -> Iterator[OperatorThread]:
    yield from _running(sandbox, namespace, kube, cordon_moves=True)
