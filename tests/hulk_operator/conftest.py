"""Fixtures of the operator's end-to-end tests (on the session's ``sandbox``).

``crds`` (module): the HulkTrainingJob and NodeLatency CRDs installed. ``kube``: a
:class:`hjob_helpers.Kube` on the test's namespace. ``operator``: the operator running in a
thread of this process, watching that namespace; the namespace's jobs are deleted before it
stops (kopf's finalizer needs it).
"""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture
def operator(sandbox: Any, namespace: str, kube: Kube) -> Iterator[OperatorThread]:
    op = OperatorThread(sandbox.kubeconfig, namespaces=[namespace], config=CONFIG).start()
    try:
        with cleanup_jobs(kube):
            yield op
    finally:
        op.stop()
