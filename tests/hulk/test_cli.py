"""The ``hulk`` dispatcher: help, an unknown command, and a subcommand's own parser."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hulk.cli import SUBCOMMANDS, main


def test_help_says_what_hulk_is_and_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "GPU servers spread over regions" in out and "``" not in out
    for name in SUBCOMMANDS:
        assert name in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_an_unknown_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pln"])
    assert exc.value.code == 2
    assert "invalid choice: 'pln'" in capsys.readouterr().err


def test_a_missing_extra_is_named_with_its_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: ``hulk train`` without torch printed a traceback."""
    import builtins

    real = builtins.__import__

    def no_torch(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_torch)
    gone = ("torch", "torch_geometric", "hulk_planner.gnn")  # and what imported them
    for mod in [m for m in sys.modules if m.startswith(gone)]:
        monkeypatch.delitem(sys.modules, mod)
    # (importing them again binds the new hulk_planner.gnn to its parent package: given back
    # too, or ``import hulk_planner.gnn.planner as p`` in a later test of this process got a
    # module the planners do not use, and its monkeypatch did nothing)
    import hulk_planner

    if "gnn" in vars(hulk_planner):
        monkeypatch.setattr(hulk_planner, "gnn", hulk_planner.gnn)
    out = tmp_path / "w.pt"
    assert main(["train", "--examples", "1", "--epochs", "1", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hulk train: error: needs the torch module (pip install 'hulk[gnn]')")


def test_a_subcommand_gets_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hulk plan") and "--planner" in out


def test_the_commands_writing_documents_write_utf8_whatever_the_locale() -> None:
    """``hulk plan`` and ``hulk topology`` -o json/yaml write what --previous and --cluster
    read back: UTF-8, not the locale's encoding (a UnicodeEncodeError traceback with
    PYTHONIOENCODING=ascii, latin-1 bytes with latin-1: a review)."""
    import subprocess

    code = (
        "import sys, hulk.cli, importlib\n"
        "module = importlib.import_module(hulk.cli.SUBCOMMANDS[sys.argv[1]][0])\n"
        "module.run = lambda args: print('北京-0', args.output) or 0\n"
        "sys.exit(hulk.cli.main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    runs = (("topology", "--paper", "-o", "yaml"), ("topology", "--paper", "-o", "json"),
            ("plan", "-o", "json"), ("plan", "-o", "yaml"))  # fmt: skip
    for args in runs:
        out = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, env=env, timeout=60
        )
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout.decode("utf-8") == f"北京-0 {args[-1]}\n"
    out = subprocess.run(
        [sys.executable, "-c", code, "plan", "-o", "table"], capture_output=True, env=env
    )
    assert out.stdout == b"\\u5317\\u4eac-0 table\n"  # (text: the locale's, escaped)
