"""Flags, environment variables, validation, and one-line errors without tracebacks."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hulk_probe import cli
from hulk_probe.config import ConfigError, ProbeConfig, parse_hostport, resolve


def parse(*argv: str, env: dict[str, str] | None = None) -> ProbeConfig:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return resolve(parser.parse_args(list(argv)), env or {})


def test_defaults_and_flags() -> None:
    cfg = parse("--node-name", "n1", "--listen", "127.0.0.2:7000")
    assert cfg.advertise == ("127.0.0.2", 7000)  # a specific listen address is advertised
    assert cfg.metrics == ("0.0.0.0", 7472)
    assert (cfg.probe.interval_s, cfg.probe.timeout_s, cfg.probe.window) == (10.0, 2.0, 10)
    assert cfg.publish_interval_s == 10.0
    assert cfg.write_budget_kb_s == 500.0 and cfg.max_publish_interval_s == 200.0
    assert cfg.peers_per_region == 0  # every peer
    sampled = parse("--node-name", "n", "--peers-per-region", "3", "--listen", "127.0.0.2:7")
    assert sampled.peers_per_region == 3
    assert (
        parse(
            "--node-name", "n", "--write-budget", "0", "--listen", "127.0.0.2:7"
        ).write_budget_kb_s
        == 0
    )


def test_environment_with_flags_winning() -> None:
    env = {
        "HULK_PROBE_NODE_NAME": "env-node",
        "HULK_PROBE_INTERVAL": "3",
        "HULK_PROBE_TIMEOUT": "0.5",
        "HULK_PROBE_METRICS": "off",
        "POD_IP": "10.1.2.3",
        "HULK_PROBE_PEER_ADDRESS": "b=127.0.0.9:1, c=[::1]:2",
        "HULK_PROBE_WRITE_BUDGET": "250",
        "HULK_PROBE_PEERS_PER_REGION": "5",
    }
    cfg = parse("--interval", "4", env=env)
    assert cfg.node_name == "env-node"
    assert cfg.probe.interval_s == 4.0 and cfg.probe.timeout_s == 0.5
    assert cfg.metrics is None
    assert cfg.advertise == ("10.1.2.3", 7471)  # from $POD_IP when listening everywhere
    assert cfg.peer_addresses == {"b": ("127.0.0.9", 1), "c": ("::1", 2)}
    assert cfg.publish_interval_s == 4.0  # follows the interval
    assert cfg.max_publish_interval_s == 200.0
    assert parse("--publish-interval", "300", env=env).max_publish_interval_s == 300.0
    assert cfg.write_budget_kb_s == 250.0
    assert cfg.peers_per_region == 5


def test_a_value_out_of_range_names_the_variable_that_set_it() -> None:
    """In the DaemonSet every setting comes as a variable: the message named the flag, which
    the user never wrote (a user trial)."""
    env = {"HULK_PROBE_NODE_NAME": "n", "HULK_PROBE_WRITE_BUDGET": "-1"}
    with pytest.raises(ConfigError, match=r"^\$HULK_PROBE_WRITE_BUDGET must be at least 0"):
        parse(env=env)
    env = {"HULK_PROBE_NODE_NAME": "n", "HULK_PROBE_MAX_PUBLISH_INTERVAL": "1"}
    with pytest.raises(ConfigError, match=r"^\$HULK_PROBE_MAX_PUBLISH_INTERVAL must be"):
        parse(env=env)
    with pytest.raises(ConfigError, match=r"^--interval must be above 0"):  # the flag's own
        parse("--interval", "0", env={"HULK_PROBE_NODE_NAME": "n", "HULK_PROBE_INTERVAL": "5"})


def test_node_name_from_downward_api_variable() -> None:
    assert parse("--listen", "127.0.0.1:1", env={"NODE_NAME": "k"}).node_name == "k"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--node-name is required"),
        (["--node-name", "n", "--interval", "abc"], "--interval: expected a number"),
        (["--node-name", "n", "--interval", "0"], "--interval must be above 0"),
        (["--node-name", "n", "--interval", "1", "--timeout", "2"], "--timeout must be"),
        (["--node-name", "n", "--window", "1.5"], "--window: expected a whole number"),
        (["--node-name", "n", "--jitter", "0.5"], "--jitter must be"),
        (
            ["--node-name", "n", "--interval", "5", "--publish-interval", "1"],
            "--publish-interval must be at least",
        ),
        (["--node-name", "n", "--write-budget", "-1"], "--write-budget must be at least 0"),
        (
            ["--node-name", "n", "--publish-interval", "30", "--max-publish-interval", "20"],
            "--max-publish-interval must be at least --publish-interval",
        ),
        (
            ["--node-name", "n", "--write-budget", "lots"],
            "--write-budget: expected a number",
        ),
        (["--node-name", "n", "--listen", "0.0.0.0:1"], "--advertise is required"),
        # the default --listen needs --advertise, but a bad flag is told first (before, the
        # missing --advertise hid it: a docs trial)
        (["--node-name", "n", "--listen", "0.0.0.0:1", "--interval", "0"], "--interval must"),
        (["--node-name", "n", "--listen", "127.0.0.1:99999"], "port must be a number"),
        (["--node-name", "n", "--listen", "::1:5"], "IPv6 addresses in brackets"),
        (["--node-name", "n", "--peer-address", "b"], "expected NODE=HOST:PORT"),
        (["--node-name", "n", "--listen", "127.0.0.1:0"], "peers cannot reach"),
        (["--node-name", "n", "--log-level", "loud"], "--log-level"),
        (["--node-name", "n", "--peers-per-region", "-1"], "--peers-per-region must be at least"),
        (["--node-name", "n", "--peers-per-region", "2.5"], "--peers-per-region: expected a whole"),
    ],
)
def test_bad_settings_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        parse("--listen", "127.0.0.1:5", *argv)  # a later --listen in argv wins
    assert "\n" not in str(info.value)


def test_bad_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"\$HULK_PROBE_WINDOW"):
        parse("--node-name", "n", "--listen", "127.0.0.1:5", env={"HULK_PROBE_WINDOW": "x"})


def test_parse_hostport() -> None:
    assert parse_hostport("h:1", "x") == ("h", 1)
    assert parse_hostport("[fe80::1]:80", "x") == ("fe80::1", 80)
    assert parse_hostport("h", "x", default_port=9) == ("h", 9)
    with pytest.raises(ConfigError):
        parse_hostport("h", "x")


def test_command_line_error_has_no_traceback() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hulk",
            "probe",
            "--node-name",
            "n",
            "--listen",
            "127.0.0.1:5",
            "--timeout",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "hulk probe: error: --timeout must be above 0 and at most --interval (10), got -1"
    ]


@pytest.mark.parametrize("content", [None, "root:x:0:0:root:/root:/bin/bash\n"])
def test_unusable_kubeconfig_is_a_one_line_error(tmp_path: Path, content: str | None) -> None:
    """A missing file, and one that is YAML but no kubeconfig (before: a traceback)."""
    if content is not None:
        (tmp_path / "missing").write_text(content)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hulk",
            "probe",
            "--node-name",
            "n",
            "--listen",
            "127.0.0.1:0",
            "--advertise",
            "127.0.0.1:7",
            "--metrics",
            "off",
            "--kubeconfig",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("hulk probe: error: cannot load Kubernetes config")
    assert "Traceback" not in proc.stderr


def test_an_address_it_cannot_listen_on_names_the_flag() -> None:
    """Before: "hulk probe: error: [Errno -2] Name or service not known", no flag named."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for flag, value, why in (
            ("--listen", "no-such-host.invalid:7471", "cannot listen there"),
            ("--listen", f"127.0.0.1:{port}", "Address already in use"),
        ):
            proc = subprocess.run(
                [sys.executable, "-m", "hulk", "probe", "--node-name", "n", "--metrics", "off",
                 "--advertise", "127.0.0.1:7", flag, value],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert proc.returncode == 1, proc.stderr
            last = proc.stderr.strip().splitlines()[-1]
            assert last.startswith(f"hulk probe: error: {flag} {value}: ") and why in last
