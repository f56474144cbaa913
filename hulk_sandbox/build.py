"""Builds the sandbox's binaries from the Go modules under ``sandbox/`` and caches them.

Three modules of ours, each pinned by its committed ``go.mod``/``go.sum``:

- ``sandbox/kube``: one multi-call binary (``kube kube-apiserver|kube-controller-manager|
  kube-scheduler``) from ``k8s.io/kubernetes``;
- ``sandbox/etcd``: etcd's server (``go.etcd.io/etcd/server/v3/etcdmain``);
- ``sandbox/kwok``: ``sigs.k8s.io/kwok/cmd/kwok`` (a ``tool`` line of the module).

Binaries land in ``$HULK_CACHE/bin/<name>-<version>-<hash>/<name>`` (``HULK_CACHE``
defaults to ``~/.cache/hulk``), where the hash covers the module's files and the build flags,
so a warm cache costs no Go call at all. Go's own caches go to ``$HULK_CACHE/go/mod`` and
``$HULK_CACHE/go/build``. A file lock keeps two builds from running at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hulk_sandbox.errors import SandboxError

Progress = Callable[[str], None]

TAGS = "selinux,notest"


@dataclass(frozen=True)
class Component:
    """One binary: the Go module that builds it and how."""

    name: str
    module_dir: str  # under sandbox/
    version_of: str  # the required module whose version names the binary
    package: str = "."  # what `go build` builds, from inside the module

    def source(self) -> Path:
        return source_root() / self.module_dir

    def version(self) -> str:
        gomod = (self.source() / "go.mod").read_text()
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(self.version_of)}\s+(v\S+)", gomod, re.M)
        if not m:
            raise SandboxError(
                f"{self.source() / 'go.mod'} does not require {self.version_of}",
                "restore the file from git",
            )
        return m.group(1)

    def ldflags(self) -> str:
        flags = ["-s", "-w"]
        version = self.version()
        if self.name == "kube":
            major, minor = version.lstrip("v").split(".")[:2]
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [
                    f"-X {pkg}.gitVersion={version}",
                    f"-X {pkg}.gitMajor={major}",
                    f"-X {pkg}.gitMinor={minor}",
                    f"-X {pkg}.gitTreeState=clean",
                ]
        elif self.name == "etcd":
            flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA={version}")
        return " ".join(flags)

    def build_args(self, output: Path) -> list[str]:
        return [
            "go", "build", "-v", "-trimpath", "-buildvcs=false", "-mod=readonly",
            f"-tags={TAGS}", f"-ldflags={self.ldflags()}", "-o", str(output), self.package,
        ]  # fmt: skip

    def key(self) -> str:
        """``<version>-<hash>``: changes whenever the module's files or the flags change."""
        digest = hashlib.sha256()
        for path in sorted(self.source().iterdir()):
            if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(" ".join(self.build_args(Path("-"))).encode())
        return f"{self.version()}-{digest.hexdigest()[:10]}"

    def binary(self) -> Path:
        return cache_root() / "bin" / f"{self.name}-{self.key()}" / self.name


COMPONENTS: dict[str, Component] = {
    "etcd": Component("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    "kwok": Component("kwok", "kwok", "sigs.k8s.io/kwok", package="sigs.k8s.io/kwok/cmd/kwok"),
    "kube": Component("kube", "kube", "k8s.io/kubernetes"),
}


def cache_root() -> Path:
    return Path(os.environ.get("HULK_CACHE") or Path.home() / ".cache" / "hulk").expanduser()


def source_root() -> Path:
    """The ``sandbox/`` folder holding the Go modules (``HULK_SANDBOX_SRC`` overrides)."""
    env = os.environ.get("HULK_SANDBOX_SRC")
    root = Path(env) if env else Path(__file__).resolve().parent.parent / "sandbox"
    if not (root / "kube" / "go.mod").is_file():
        raise SandboxError(
            f"the sandbox's Go modules are not at {root}",
            "run from a clone of the Hulk repository or set HULK_SANDBOX_SRC to its sandbox/",
        )
    return root


def binaries() -> dict[str, Path]:
    """Where each binary is (or will be) cached."""
    return {name: comp.binary() for name, comp in COMPONENTS.items()}


def missing() -> list[str]:
    return [name for name, path in binaries().items() if not path.is_file()]


def versions() -> dict[str, str]:
    return {name: comp.version() for name, comp in COMPONENTS.items()}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _lock() -> Iterator[None]:
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / "bin.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _stderr("[sandbox build] another build holds the cache lock; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(cache_root() / "go" / "mod"),
        GOCACHE=str(cache_root() / "go" / "build"),
        CGO_ENABLED="0",
        GOFLAGS="",
    )
    return env


def _run_go(args: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise SandboxError(
            f"{what} failed: {tail}", "check Go >= 1.26 and access to the Go module proxy"
        )
    return proc


def build(name: str, progress: Progress = _stderr) -> Path:
    """Builds one binary unless cached; returns its path."""
    comp = COMPONENTS[name]
    target = comp.binary()
    if target.is_file():
        return target
    if shutil.which("go") is None:
        raise SandboxError(
            f"the {name} binary is not built and `go` is not on PATH",
            "install Go 1.26 or later (https://go.dev/dl), then run `hulk sandbox build`",
        )
    src = comp.source()
    start = time.monotonic()
    progress(f"[sandbox build] {name} {comp.version()}: resolving and downloading modules")
    listed = _run_go(
        ["go", "list", "-mod=readonly", f"-tags={TAGS}", "-deps", comp.package], src, "go list"
    )
    total = len(listed.stdout.split())
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{name}.partial-{os.getpid()}")
    progress(f"[sandbox build] {name} {comp.version()}: compiling up to {total} packages")
    proc = subprocess.Popen(
        comp.build_args(partial), cwd=src, env=go_env(), text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    done, last, errors = 0, 0.0, []
    for line in proc.stderr:
        line = line.rstrip()
        if " " in line or line.startswith("#") or not line:
            errors.append(line)  # `go build -v` prints bare import paths; the rest is errors
            continue
        done += 1
        now = time.monotonic()
        if now - last >= 10:
            last = now
            elapsed = now - start
            progress(f"[sandbox build] {name}: {done}/{total} packages compiled, {elapsed:.0f}s")
    if proc.wait() != 0:
        partial.unlink(missing_ok=True)
        for line in errors[-20:]:
            progress(line)
        raise SandboxError(f"building {name} failed", "see the Go errors above")
    partial.replace(target)
    progress(f"[sandbox build] {name} {comp.version()}: done in {time.monotonic() - start:.0f}s")
    return target


def build_all(progress: Progress = _stderr) -> dict[str, Path]:
    """Builds whatever is missing (one Go build at a time); a no-op when warm."""
    if not missing():
        return binaries()
    with _lock():
        return {name: build(name, progress) for name in COMPONENTS}
