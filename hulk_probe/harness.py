"""Run real agents as local processes against a cluster: for tests and benchmarks.

Agent ``i`` impersonates a node and listens on its own loopback address (127.0.0.2,
127.0.0.3, ...), echo on ``port`` and metrics on ``port + 1``, so the agents measure one
another over real sockets exactly as they would across machines. Nothing here is used by
the agent itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hulk_probe import ADDRESS_ANNOTATION, MERGE_PATCH
from hulk_probe.kube import NODE_LATENCIES, Kube
from hulk_probe.toxiproxy import die_with_parent, free_ports

CRD_PATH = Path(__file__).resolve().parents[1] / "crds" / "nodelatencies.hulk.dev.yaml"


def loopback(index: int) -> str:
    """127.0.0.2 for index 0, then upwards (all of 127.0.0.0/8 is local on Linux)."""
    n = index + 2
    return f"127.0.{n // 256}.{n % 256}"


def install_crd(api_client: Any, timeout_s: float = 60.0) -> None:
    """Create (or update) the NodeLatency CRD and wait until it is served."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = yaml.safe_load(CRD_PATH.read_text())
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        ext.patch_custom_resource_definition(
            body["metadata"]["name"], body, _content_type=MERGE_PATCH
        )
    kube = Kube(api_client)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            kube.request("GET", NODE_LATENCIES, query=[("limit", "1")])
            return
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def list_node_latencies(api_client: Any) -> list[dict[str, Any]]:
    return list(Kube(api_client).request("GET", NODE_LATENCIES)["items"])


def forget_nodes(api_client: Any, nodes: Iterable[str]) -> None:
    """Remove what agents for ``nodes`` published: their objects and annotations."""
    from kubernetes.client.exceptions import ApiException

    kube = Kube(api_client)
    for node in nodes:
        with contextlib.suppress(ApiException):
            kube.request("DELETE", f"{NODE_LATENCIES}/{node}")
        with contextlib.suppress(ApiException):
            kube.merge_patch(
                f"/api/v1/nodes/{node}", {"metadata": {"annotations": {ADDRESS_ANNOTATION: None}}}
            )


@dataclass(frozen=True)
class Slot:
    """Where one agent listens: its own loopback host, an echo port, a metrics port."""

    host: str
    port: int
    metrics_port: int


def reserve(count: int) -> list[Slot]:
    """Addresses for ``count`` agents: 127.0.0.2, .3, ... with ports free right now (other
    test runs on this machine may use the same hosts)."""
    return [Slot(h, *free_ports(h, 2)) for h in map(loopback, range(count))]


@dataclass
class AgentProcess:
    node: str
    host: str
    port: int
    metrics_port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def echo(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}"

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=timeout_s) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """User + system CPU time the agent has used so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_agents(
    nodes: Sequence[str],
    kubeconfig: str,
    log_dir: Path,
    *,
    slots: Sequence[Slot] | None = None,
    args: Sequence[str] = (),
    per_node_args: dict[str, list[str]] | None = None,
) -> list[AgentProcess]:
    """One ``hulk probe`` process per node, each on its own loopback address."""
    log_dir.mkdir(parents=True, exist_ok=True)
    slots = slots or reserve(len(nodes))
    root = str(CRD_PATH.parents[1])  # the checkout these agents come from
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    for env_var in [k for k in env if k.startswith("HULK_PROBE_")]:
        del env[env_var]  # only the flags below count
    agents = []
    for node, slot in zip(nodes, slots, strict=True):
        agent = AgentProcess(
            node, slot.host, slot.port, slot.metrics_port, log_dir / f"probe-{node}.log"
        )
        argv = [
            sys.executable,
            "-m",
            "hulk",
            "probe",
            "--node-name",
            node,
            "--listen",
            f"{slot.host}:{slot.port}",
            "--metrics",
            f"{slot.host}:{slot.metrics_port}",
            "--kubeconfig",
            kubeconfig,
            *args,
            *(per_node_args or {}).get(node, []),
        ]
        with open(agent.log_path, "wb") as log:
            agent.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
            )
        agents.append(agent)
    return agents


def wait_ready(agents: Sequence[AgentProcess], timeout_s: float = 60.0) -> float:
    """Wait until every agent's /healthz says ready; returns the seconds it took."""
    start = time.monotonic()
    pending = list(agents)
    while pending:
        for agent in list(pending):
            if not agent.alive():
                raise RuntimeError(f"agent {agent.node} exited: {agent.log()[-2000:]}")
            with contextlib.suppress(OSError):
                code, text = agent.get("/healthz", timeout_s=2.0)
                if code == 200 and "ready=true" in text:
                    pending.remove(agent)
        if pending and time.monotonic() - start > timeout_s:
            names = ", ".join(a.node for a in pending)
            raise TimeoutError(f"agents not ready after {timeout_s:.0f}s: {names}")
        if pending:
            time.sleep(0.1)
    return time.monotonic() - start


def stop_agents(agents: Iterable[AgentProcess], timeout_s: float = 20.0) -> None:
    """SIGTERM to all at once (once: a second one would kill an agent mid-shutdown), then
    wait; SIGKILL whatever is still there after ``timeout_s``."""
    agents = [a for a in agents if a.alive()]
    for agent in agents:
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for agent in agents:
        assert agent.proc is not None
        try:
            agent.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()


def status_peers(objects: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(source, target): peer entry}`` over all objects' status."""
    pairs = {}
    for obj in objects:
        source = obj["metadata"]["name"]
        for entry in (obj.get("status") or {}).get("peers") or []:
            pairs[(source, entry["node"])] = entry
    return pairs


def dump(objects: Any) -> str:
    return json.dumps(objects, indent=1, sort_keys=True)[:4000]
