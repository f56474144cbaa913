"""Fixtures for the probe's sandbox tests: the CRD, toxiproxy, and meshes of real agents."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hulk_probe import harness
from hulk_probe.toxiproxy import Toxiproxy

if TYPE_CHECKING:
    from hulk_sandbox.sandbox import Sandbox


@pytest.fixture(scope="module")
def probe_api(sandbox: Sandbox) -> Iterator[Any]:
    """An admin ApiClient on the sandbox, with the NodeLatency CRD installed."""
    with sandbox.api_client() as api:
        harness.install_crd(api)
        yield api


@pytest.fixture(scope="module")
def node_names(probe_api: Any) -> list[str]:
    from kubernetes import client

    raw: Any = client.CoreV1Api(probe_api).list_node(_preload_content=False)
    names = sorted(n["metadata"]["name"] for n in json.loads(raw.data)["items"])
    assert len(names) >= 4, names
    return names


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    log = tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log"
    with Toxiproxy(log_path=log) as proxy:
        yield proxy


class Mesh:
    """Agents for some nodes, possibly reaching some peers through toxiproxy."""

    def __init__(self, api: Any, sandbox: Sandbox, proxy: Toxiproxy, log_dir: Path) -> None:
        self.api, self.sandbox, self.proxy, self.log_dir = api, sandbox, proxy, log_dir
        self.agents: list[harness.AgentProcess] = []
        self.nodes: list[str] = []
        self.proxies: dict[tuple[str, str], str] = {}  # (source, target) -> proxy name

    def start(
        self,
        nodes: list[str],
        *,
        delays: dict[tuple[str, str], float] | None = None,
        args: tuple[str, ...] = (
            "--interval",
            "1",
            "--timeout",
            "0.5",
            "--window",
            "5",
            "--failures",
            "3",
        ),
        extra: tuple[str, ...] = (),
    ) -> list[harness.AgentProcess]:
        """Start agents; for each pair in ``delays`` both directions go through a proxy
        that adds that many milliseconds each way (0: a proxy without delay)."""
        harness.forget_nodes(self.api, nodes)
        self.nodes = list(nodes)
        slots = harness.reserve(len(nodes))
        echo = {node: (slot.host, slot.port) for node, slot in zip(nodes, slots, strict=True)}
        per_node: dict[str, list[str]] = {node: [] for node in nodes}
        for (a, b), ms in (delays or {}).items():
            for src, dst in ((a, b), (b, a)):
                name = f"{src}-to-{dst}-{time.monotonic_ns()}"
                listen = self.proxy.proxy(name, echo[dst])
                if ms:
                    self.proxy.delay(name, ms)
                per_node[src] += ["--peer-address", f"{dst}={listen[0]}:{listen[1]}"]
                self.proxies[(src, dst)] = name
        self.agents = harness.start_agents(
            nodes,
            self.sandbox.kubeconfig,
            self.log_dir,
            slots=slots,
            args=(*args, *extra),
            per_node_args=per_node,
        )
        harness.wait_ready(self.agents, timeout_s=60)
        return self.agents

    def objects(self) -> list[dict[str, Any]]:
        return [
            o for o in harness.list_node_latencies(self.api) if o["metadata"]["name"] in self.nodes
        ]

    def wait_for(
        self, what: str, check: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 60.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            objects = self.objects()
            if check(objects):
                return objects
            if time.monotonic() > deadline:
                logs = "\n".join(a.log()[-1500:] for a in self.agents)
                raise AssertionError(
                    f"timed out waiting for {what}:\n{harness.dump(objects)}\n{logs}"
                )
            time.sleep(0.5)

    def close(self) -> None:
        harness.stop_agents(self.agents)
        harness.forget_nodes(self.api, self.nodes)


@pytest.fixture
def mesh(probe_api: Any, sandbox: Sandbox, toxiproxy: Toxiproxy, tmp_path: Path) -> Iterator[Mesh]:
    m = Mesh(probe_api, sandbox, toxiproxy, tmp_path)
    try:
        yield m
    finally:
        with contextlib.suppress(Exception):
            m.close()
