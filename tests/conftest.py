"""Fixtures shared by the whole suite.

``sandbox`` (session): a real control plane with the Hulk paper's 47 servers as kwok nodes,
brought up once (building the binaries first if needed, with progress on the terminal) and
torn down at the end, also on failures, Ctrl-C and SIGTERM; if pytest is killed outright the
kernel kills the components (``PR_SET_PDEATHSIG``). It yields a
:class:`hulk_sandbox.sandbox.Sandbox`: ``.kubeconfig``, ``.dir``, ``.api_client()``,
``.add_node(server)``, ``.delete_node(name)``.

``namespace`` (function): a fresh namespace whose ``default`` ServiceAccount exists; deleted
after the test.

Component logs go to ``$HULK_SANDBOX_LOGS`` or else ``<pytest basetemp>/sandbox-logs``; they
survive teardown, and the path is printed at the end of the run. Under pytest-xdist (CI runs
``-n 2``) each worker brings up a sandbox of its own, its logs in ``$HULK_SANDBOX_LOGS/gwN``.
Tests that use ``sandbox`` are marked ``sandbox`` automatically (mark them explicitly too).
"""

from __future__ import annotations

import atexit
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from hulk_sandbox.sandbox import Sandbox

_LOGS_KEY = pytest.StashKey[Path]()

# CI runs the property tests derandomized, so a run is reproducible; locally they explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sandbox)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    logs = config.stash.get(_LOGS_KEY, None)
    if logs is not None:
        terminalreporter.write_line(f"sandbox component logs: {logs}")
    elif config.getoption("numprocesses", None) and os.environ.get("HULK_SANDBOX_LOGS"):
        where = os.environ["HULK_SANDBOX_LOGS"]  # the workers' sandboxes (none if none ran)
        terminalreporter.write_line(f"sandbox component logs: {where}/<xdist worker>")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sandbox]:
    from hulk_sandbox import build
    from hulk_sandbox.nodes import cluster_for
    from hulk_sandbox.sandbox import Sandbox

    logs = Path(
        os.environ.get("HULK_SANDBOX_LOGS") or tmp_path_factory.getbasetemp() / "sandbox-logs"
    )
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("HULK_SANDBOX_LOGS"):  # a sandbox per pytest-xdist worker
        logs /= worker
    request.config.stash[_LOGS_KEY] = logs
    box = Sandbox(tmp_path_factory.mktemp("sandbox"), logs)
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def down() -> None:
        if box.state_file.exists():
            box.down()

    atexit.register(down)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_interrupt)  # so pytest tears down on SIGTERM
    try:
        with capman.global_and_fixture_disabled():
            build.build_all()
            seconds = box.up(cluster_for("paper").servers, die_with_parent=True)
            print(f"[sandbox] 47 nodes Ready in {seconds:.1f}s; logs in {logs}", flush=True)
        yield box
    finally:
        down()
        atexit.unregister(down)


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A valid kubeconfig whose API server never answers (https://127.0.0.1:1)."""
    path = tmp_path / "unreachable-kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.fixture
def namespace(sandbox: Sandbox) -> Iterator[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"test-{uuid.uuid4().hex[:10]}"
    with sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + 60
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                break
            except ApiException as err:
                if err.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            yield name
        finally:
            core.delete_namespace(name)
