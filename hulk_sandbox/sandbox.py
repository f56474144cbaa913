"""One sandbox: a state directory, the processes it runs and the cluster they serve.

Layout of ``<dir>``: ``state.json`` (ports, PIDs, versions), ``kubeconfig`` (admin),
``pki/``, ``etcd/`` (data), ``kwok/`` (kwok's config and a private HOME, so a
``~/.kwok/kwok.yaml`` of the user's is never read) and ``logs/`` (one file per component,
unless ``logs`` points elsewhere, e.g. ``$HULK_SANDBOX_LOGS``; logs outside ``<dir>``
survive ``down``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hulk_sandbox import build, certs, components, nodes, processes
from hulk_sandbox.errors import SandboxError
from hulk_sandbox.processes import Proc

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from hulk_planner.model import Server

STATE = "state.json"
_OWNED = ("state.json", "kubeconfig", "pki", "etcd", "kwok", "logs")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Sandbox:
    """Start with :meth:`up`, stop with :meth:`down`; :meth:`status` reads the state file."""

    def __init__(self, dir: str | os.PathLike[str], logs: str | os.PathLike[str] | None = None):
        self.dir = Path(dir).absolute()
        self.logs = Path(logs).absolute() if logs else self.dir / "logs"
        self.procs: list[Proc] = []
        self.state: dict[str, Any] = {}

    @property
    def kubeconfig(self) -> str:
        return str(self.dir / "kubeconfig")

    @property
    def state_file(self) -> Path:
        return self.dir / STATE

    @property
    def server(self) -> str:
        return str(self.state.get("server", ""))

    def load(self) -> bool:
        """Reads the state file; False if there is none."""
        if self.dir.exists() and not self.dir.is_dir():  # (a NotADirectoryError before)
            raise SandboxError(f"--dir {self.dir}: is a file, not a folder", "give a folder")
        try:
            self.state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return False
        except json.JSONDecodeError as err:
            raise SandboxError(f"{self.state_file} is corrupt ({err})", "delete it") from err
        try:  # (JSON of another shape: an "unexpected" AttributeError or KeyError before)
            if not isinstance(self.state, dict):
                raise TypeError(f"a {type(self.state).__name__}, not an object")
            self.procs = [Proc.from_json(p) for p in self.state.get("processes", [])]
        except (TypeError, KeyError, AttributeError, ValueError) as err:
            raise SandboxError(
                f"{self.state_file} is corrupt ({type(err).__name__}: {err})", "delete it"
            ) from err
        if self.state.get("logs"):
            self.logs = Path(self.state["logs"])
        return True

    def _save(self) -> None:
        self.state["processes"] = [p.to_json() for p in self.procs]
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.state_file)

    def running(self) -> list[Proc]:
        return [p for p in self.procs if processes.alive(p)]

    # -- up ---------------------------------------------------------------------------------

    def up(
        self,
        servers: Sequence[Server],
        *,
        progress: Callable[[str], None] = _stderr,
        die_with_parent: bool = False,
        taint: bool = False,
        timeout: float = 180.0,
    ) -> float:
        """Starts everything and creates the nodes; returns once they are all Ready.

        Returns the seconds it took (binaries already built). On failure, stops whatever it
        started, keeps the logs and raises :class:`SandboxError`."""
        if self.load():
            if self.running():
                raise SandboxError(
                    f"a sandbox already runs in {self.dir}",
                    f"use it, or stop it first: hulk sandbox down --dir {self.dir}",
                )
            self._remove_state()
        bins = build.build_all(progress)
        start = time.monotonic()
        try:
            self._start(bins, servers, progress, die_with_parent, taint, timeout)
        except BaseException:
            processes.stop(self.procs)
            if self.state_file.exists():
                self._save()
            raise
        return time.monotonic() - start

    def _start(
        self,
        bins: dict[str, Path],
        servers: Sequence[Server],
        progress: Callable[[str], None],
        die_with_parent: bool,
        taint: bool,
        timeout: float,
    ) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._save()  # from here on, `down` can clean up whatever happens
        pki = certs.generate(self.dir / "pki")
        ports = components.Ports.free()
        self.state = {
            "version": 1,
            "server": f"https://{components.HOST}:{ports.apiserver}",
            "ports": ports.as_dict(),
            "versions": build.versions(),
            "logs": str(self.logs),
            "nodes": len(servers),
            "started": time.time(),
        }
        kubeconfig = Path(self.kubeconfig)
        certs.write_kubeconfig(kubeconfig, self.server, pki)
        kwok_dir = self.dir / "kwok"
        kwok_dir.mkdir(exist_ok=True)
        components.write_kwok_config(kwok_dir / "stages.yaml")
        self._save()

        def spawn(name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
            proc = processes.spawn(
                name, argv, self.logs / f"{name}.log", env=env, die_with_parent=die_with_parent
            )
            self.procs.append(proc)
            self._save()
            return proc

        progress(f"[sandbox] starting etcd and kube-apiserver in {self.dir}")
        etcd = spawn("etcd", components.etcd(bins["etcd"], self.dir / "etcd", ports))
        api = spawn("kube-apiserver", components.apiserver(bins["kube"], pki, ports))
        processes.wait_http(f"http://{components.HOST}:{ports.etcd_client}/health", etcd)
        tls = processes.client_tls(pki.ca_cert, pki.admin_cert, pki.admin_key)
        processes.wait_http(f"{self.server}/readyz", api, context=tls, timeout=timeout)

        progress("[sandbox] starting kube-controller-manager, kube-scheduler and kwok")
        kcm = spawn(
            "kube-controller-manager",
            components.controller_manager(bins["kube"], pki, kubeconfig, ports),
        )
        sched = spawn("kube-scheduler", components.scheduler(bins["kube"], kubeconfig, ports))
        kwok_env = {**os.environ, "HOME": str(kwok_dir)}
        spawn(
            "kwok",
            components.kwok(bins["kwok"], kubeconfig, kwok_dir / "stages.yaml", ports),
            env=kwok_env,
        )
        progress(f"[sandbox] creating {len(servers)} nodes")
        api_client = self.api_client()
        try:
            nodes.create_nodes(api_client, servers, taint=taint)
            insecure = processes.insecure_tls()
            for proc, port in ((kcm, ports.controller_manager), (sched, ports.scheduler)):
                url = f"https://{components.HOST}:{port}/healthz"
                processes.wait_http(url, proc, context=insecure, timeout=timeout)
            self._wait_nodes(api_client, [s.name for s in servers], timeout)
        finally:
            api_client.close()
        progress(f"[sandbox] ready: {len(servers)} nodes; kubectl --kubeconfig {self.kubeconfig}")

    def _wait_nodes(self, api: ApiClient, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for proc in self.procs:
                if not processes.alive(proc):
                    raise SandboxError(
                        f"{proc.name} exited during start: {processes.log_tail(proc)}",
                        f"see {proc.log}",
                    )
            try:
                left = deadline - time.monotonic()
                nodes.wait_ready(api, names, timeout=min(5.0, max(0.1, left)))
                return
            except SandboxError:
                if time.monotonic() >= deadline:
                    raise

    # -- using it ---------------------------------------------------------------------------

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` for the admin user; close it when done."""
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)

    def _live_nodes(self) -> int | None:
        """How many nodes the API server lists now; None where it does not answer."""
        from kubernetes import client

        try:
            with self.api_client() as api:
                return len(client.CoreV1Api(api).list_node(_request_timeout=5).items)
        except Exception:  # (a status must print whatever the API server does)
            return None

    def add_node(self, server: Server, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Creates the node of ``server`` and (by default) waits until it is Ready."""
        with self.api_client() as api:
            nodes.create_nodes(api, [server])
            if wait:
                nodes.wait_ready(api, [server.name], timeout=timeout)

    def delete_node(self, name: str) -> None:
        with self.api_client() as api:
            nodes.delete_node(api, name)

    # -- down / status ----------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stops every recorded process (whole process groups) and removes the state.

        Returns the names of the processes that were still running."""
        if not self.load():
            return []
        was_running = [p.name for p in self.running()]
        processes.stop(self.procs)
        self._remove_state()
        return was_running

    def _remove_state(self) -> None:
        for name in _OWNED:
            path = self.dir / name
            if name == "logs" and path != self.logs:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for leftover in (self.state_file.with_suffix(".tmp"),):
            leftover.unlink(missing_ok=True)
        try:
            self.dir.rmdir()  # only when empty: never delete files we did not write
        except OSError:
            pass
        self.procs = []
        self.state = {}

    def status(self) -> dict[str, Any]:
        """What the state file records and what of it runs now."""
        if not self.load():
            return {"dir": str(self.dir), "state": "absent", "processes": []}
        procs = [
            {"name": p.name, "pid": p.pid, "running": processes.alive(p), "log": p.log}
            for p in self.procs
        ]
        running = sum(1 for p in procs if p["running"])
        state = "degraded" if running < len(procs) else "running"
        state = state if running else "stopped"
        nodes = self.state.get("nodes")
        if state == "running":  # (the count at ``up`` stayed after nodes were added or
            # deleted: 47 said where 44 or 48 were, a user trial)
            live = self._live_nodes()
            nodes = live if live is not None else nodes
        return {
            "dir": str(self.dir),
            "state": state,
            "server": self.server,
            "kubeconfig": self.kubeconfig,
            "versions": self.state.get("versions", {}),
            "ports": self.state.get("ports", {}),
            "nodes": nodes,
            "logs": str(self.logs),
            "processes": procs,
        }
