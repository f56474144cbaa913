"""Running the components: spawn each in its own process group with its log file, record
what was started, wait for health endpoints, and stop process groups for good.

A recorded process is ``(pid, start time)``: the start time (field 22 of
``/proc/<pid>/stat``) tells our process from an unrelated one that reused the PID, so
``down`` never signals a stranger.
"""

from __future__ import annotations

import ctypes
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hulk_sandbox.errors import SandboxError

_PR_SET_PDEATHSIG = 1


@dataclass
class Proc:
    """A started component, as recorded in the state file."""

    name: str
    pid: int
    start_time: int
    argv: list[str]
    log: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_time": self.start_time,
            "argv": self.argv,
            "log": self.log,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Proc:
        return cls(data["name"], data["pid"], data["start_time"], data["argv"], data["log"])


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of ``pid``, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[19])


def alive(proc: Proc) -> bool:
    """True while the recorded process runs (a zombie counts as gone)."""
    if proc.popen is not None and proc.popen.poll() is not None:
        return False
    st = _stat(proc.pid)
    return st is not None and st[0] not in ("Z", "X") and st[1] == proc.start_time


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    name: str,
    argv: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> Proc:
    """Starts ``argv`` in a new session (its own process group), output to ``log``.

    ``die_with_parent`` asks the kernel to kill it if this Python process dies (used by the
    pytest fixture, so even a killed test run leaves nothing behind)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    st = _stat(popen.pid)
    return Proc(name, popen.pid, st[1] if st else 0, argv, str(log), popen)


def _reap(proc: Proc) -> None:
    if proc.popen is not None:
        proc.popen.poll()
        return
    try:
        os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: init reaps it


def _signal_and_wait(proc: Proc, sig: signal.Signals, timeout: float) -> bool:
    """Signals ``proc``'s process group; True once it is gone."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(proc)
        if not alive(proc):
            return True
        time.sleep(0.02)
    return False


def stop(procs: Sequence[Proc], timeout: float = 10.0) -> None:
    """Stops the process groups in reverse start order (clients before the API server,
    the API server before etcd, so none waits on a dead peer): SIGTERM, then SIGKILL after
    ``timeout`` seconds."""
    left = []
    for proc in reversed(procs):
        if not alive(proc):
            continue
        if not _signal_and_wait(proc, signal.SIGTERM, timeout):
            if not _signal_and_wait(proc, signal.SIGKILL, 5.0):
                left.append(proc)
    if left:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in left)
        raise SandboxError(f"could not stop {names}", "kill them by hand")


def log_tail(proc: Proc, lines: int = 3) -> str:
    try:
        text = Path(proc.log).read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return " | ".join(line.strip()[:300] for line in text[-lines:])


def _check_alive(proc: Proc) -> None:
    if not alive(proc):
        code = proc.popen.poll() if proc.popen is not None else None
        raise SandboxError(
            f"{proc.name} exited during start (code {code}): {log_tail(proc)}",
            f"see {proc.log}",
        )


def wait_http(
    url: str,
    proc: Proc,
    *,
    context: ssl.SSLContext | None = None,
    timeout: float = 60.0,
    ok: Callable[[int], bool] = lambda status: status == 200,
) -> None:
    """Polls ``url`` until it answers 200, failing fast if ``proc`` dies meanwhile."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        _check_alive(proc)
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as resp:
                if ok(resp.status):
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            last = str(getattr(err, "reason", err))
        time.sleep(0.1)
    raise SandboxError(
        f"{proc.name} not healthy after {timeout:g}s at {url} ({last})", f"see {proc.log}"
    )


def client_tls(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def insecure_tls() -> ssl.SSLContext:
    """For the self-signed serving certificates of the controller manager and scheduler."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
