"""The build's bookkeeping (no Go run here: the sandbox tests exercise the real build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk_sandbox import build


def test_versions_come_from_go_mod() -> None:
    versions = build.versions()
    assert versions["kube"].startswith("v1.35.")
    assert versions["etcd"].startswith("v3.")
    assert versions["kwok"] == "v0.8.0"


def test_kube_ldflags_set_the_real_version() -> None:
    flags = build.COMPONENTS["kube"].ldflags()
    version = build.versions()["kube"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion={version}" in flags
        assert f"-X {pkg}.gitMinor=35" in flags


def test_cache_is_outside_the_clone_and_keyed_by_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HULK_CACHE", str(tmp_path))
    paths = build.binaries()
    for name, path in paths.items():
        assert path.is_relative_to(tmp_path / "bin")
        assert path.parent.name.startswith(f"{name}-{build.versions()[name]}-")
    assert build.binaries() == paths  # stable key
    assert set(build.missing()) == set(paths)


def test_go_env_uses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HULK_CACHE", str(tmp_path))
    env = build.go_env()
    assert env["GOMODCACHE"] == str(tmp_path / "go" / "mod")
    assert env["GOCACHE"] == str(tmp_path / "go" / "build")
    assert env["CGO_ENABLED"] == "0"
