"""The ``hulk`` dispatcher: help, an unknown command, and a subcommand's own parser."""

from __future__ import annotations

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


def test_a_subcommand_gets_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hulk plan") and "--planner" in out
