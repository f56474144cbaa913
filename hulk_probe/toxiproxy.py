"""Toxiproxy, the fault-injection TCP proxy, for tests and benchmarks (never the agent).

The binary is built from the Go module proxy once and cached::

    GOBIN=$HULK_CACHE/bin/toxiproxy-v2.5.0 GOMODCACHE=$HULK_CACHE/go/mod \\
    GOCACHE=$HULK_CACHE/go/build go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0

(``$HULK_CACHE`` defaults to ``~/.cache/hulk``; v2.5.0 is the newest version the module
proxy serves under that path.) :func:`ensure_binary` does exactly that when the binary is
missing. :class:`Toxiproxy` runs a server on loopback and drives its HTTP API.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
VERSION = "v2.5.0"


class ToxiproxyError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("HULK_CACHE") or Path.home() / ".cache" / "hulk")


def binary_path() -> Path:
    return cache_dir() / "bin" / f"toxiproxy-{VERSION}" / "server"


def ensure_binary() -> Path:
    """The cached toxiproxy server, built first if missing (about a minute, cold)."""
    path = binary_path()
    if path.exists():
        return path
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyError("toxiproxy is not built and `go` is not on PATH to build it")
    cache = cache_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent.parent / f"toxiproxy-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if not path.exists():
            env = {
                **os.environ,
                "GOBIN": str(path.parent),
                "GOMODCACHE": str(cache / "go/mod"),
                "GOCACHE": str(cache / "go/build"),
                "CGO_ENABLED": "0",
            }
            proc = subprocess.run(
                [go, "install", f"{MODULE}@{VERSION}"],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0 or not path.exists():
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise ToxiproxyError(f"building toxiproxy {VERSION} failed: {last}")
    return path


def die_with_parent() -> None:
    """For preexec_fn: the child gets SIGKILL when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(host, 1)[0]


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports free on ``host`` right now: bound together, so two are never
    the same (two calls of ``free_port`` may be: the kernel handed an agent's echo and
    metrics ports the same number once, and the agent could not listen; a CI run)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class Toxiproxy:
    """A toxiproxy server on loopback; use as a context manager."""

    def __init__(
        self, host: str = "127.0.0.1", port: int | None = None, log_path: Path | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Toxiproxy:
        binary = ensure_binary()
        with open(self.log_path or os.devnull, "ab") as log:
            self._proc = subprocess.Popen(
                [str(binary), "-host", self.host, "-port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with contextlib.suppress(OSError):
                    self._call("GET", "/proxies")
                    return self
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise ToxiproxyError(f"toxiproxy did not start on {self.host}:{self.port}")
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> Toxiproxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                text = resp.read()
        except urllib.error.HTTPError as err:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: {err.code} "
                f"{err.read().decode(errors='replace').strip()}"
            ) from None
        return json.loads(text) if text else None

    def proxy(
        self, name: str, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> tuple[str, int]:
        """Create a proxy to ``upstream``; returns the address it listens on."""
        created = self._call(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": f"{listen[0]}:{listen[1]}",
                "upstream": f"{upstream[0]}:{upstream[1]}",
                "enabled": True,
            },
        )
        host, _, port = created["listen"].rpartition(":")
        return host, int(port)

    def delay(
        self,
        name: str,
        latency_ms: float,
        jitter_ms: float = 0.0,
        streams: tuple[str, ...] = ("upstream", "downstream"),
    ) -> None:
        """Delay every chunk by ``latency_ms`` on each of ``streams``: on both (the default),
        a round trip through the proxy takes ``2 · latency_ms`` longer, so the one-way
        latency the agent reports grows by ``latency_ms``."""
        for stream in streams:
            self._call(
                "POST",
                f"/proxies/{name}/toxics",
                {
                    "name": f"latency_{stream}",
                    "type": "latency",
                    "stream": stream,
                    "toxicity": 1.0,
                    "attributes": {"latency": round(latency_ms), "jitter": round(jitter_ms)},
                },
            )

    def set_enabled(self, name: str, enabled: bool) -> None:
        """A disabled proxy refuses connections and cuts the open ones: a partition."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})
