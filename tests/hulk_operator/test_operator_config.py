"""The operator's settings: each is checked at start-up, and a bad one (or bad credentials)
stops ``hulk operator`` with an error that names the flag or variable, before kopf runs."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hulk_operator.config import OperatorConfig
from hulk_planner.errors import InvalidRequest


@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"reconcile_interval_s": 0.0}, "--reconcile-interval", "greater than zero"),
        ({"batch_window_s": -1.0}, "HULK_OPERATOR_BATCH_WINDOW_S", "zero or more"),
        ({"planning_budget_s": math.inf}, "HULK_OPERATOR_PLANNING_BUDGET_S", "finite"),
        ({"planning_budget_s": math.nan}, "HULK_OPERATOR_PLANNING_BUDGET_S", "finite"),
        ({"disruption_threshold": 5.0}, "HULK_OPERATOR_DISRUPTION_THRESHOLD", "at most 1"),
        # the planner refused it at the first plan (it bounds --time-budget so)
        ({"planning_budget_s": 1e6}, "HULK_OPERATOR_PLANNING_BUDGET_S", "at most 86400"),
        ({"cross_region_latency_ms": -5.0}, "--cross-region-latency-ms", "zero or more"),
        ({"forbidden_grace_s": 0.0}, "HULK_OPERATOR_FORBIDDEN_GRACE_S", "greater than zero"),
        ({"metrics_port": 70000}, "--metrics-port", "0-65535"),
        ({"metrics_address": "[::]"}, "--metrics-address", "or :: (IPv6"),
        ({"metrics_address": "localhost"}, "--metrics-address", "must be an IP address"),
        ({"planner": "nope"}, "--planner", "use one of hulk"),
        # (the planner's bound on a link: 2e7 had failed every round, a trial)
        ({"cross_region_latency_ms": 2e7}, "--cross-region-latency-ms", "at most 10,000,000"),
        ({"gnn_weights": "/nonexistent.pt"}, "--gnn-weights", "is not a file"),
        ({"gnn_weights": __file__}, "HULK_OPERATOR_GNN_WEIGHTS", "not a zip"),
        ({"advise_speedup": 0.8}, "HULK_OPERATOR_ADVISE_SPEEDUP", "above 1, or 0 to turn"),
        ({"advise_speedup": -2.0}, "HULK_OPERATOR_ADVISE_SPEEDUP", "zero or more"),
    ],
)
def test_a_bad_setting_names_its_flag_or_variable(
    settings: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidRequest) as exc:
        OperatorConfig(**settings)  # type: ignore[arg-type]
    assert field in exc.value.field and words in str(exc.value)


def test_defaults_and_an_unset_budget_are_valid() -> None:
    assert OperatorConfig().planning_budget_s is None
    assert OperatorConfig(planning_budget_s=2.5, batch_window_s=0.0).planning_budget_s == 2.5
    assert OperatorConfig(advise_speedup=0.0).advise_speedup == 0.0  # off


def test_a_cordon_keeps_running_stages_unless_told_otherwise() -> None:
    """As Kubernetes keeps a cordoned node's pods (two user trials expected it), a cordon
    moves no running stage by default; ``HULK_OPERATOR_CORDON_MOVES=true`` moves them."""
    assert OperatorConfig().cordon_moves is False
    assert OperatorConfig.from_env({}).cordon_moves is False
    assert OperatorConfig.from_env({"HULK_OPERATOR_CORDON_MOVES": "true"}).cordon_moves is True
    assert OperatorConfig.from_env({"HULK_OPERATOR_CORDON_MOVES": "false"}).cordon_moves is False


def test_the_cli_latency_flags_default_to_the_operators_settings() -> None:
    """``hulk plan --kubeconfig`` and ``hulk topology`` plan on the links the operator plans
    on when their latency flags are not given: one table of defaults, the operator's."""
    import argparse

    from hulk_planner.cli import LATENCY_FLAGS, add_latency_arguments, latency_settings

    parser = argparse.ArgumentParser()
    add_latency_arguments(parser)
    config = OperatorConfig()
    given = latency_settings(parser.parse_args([]))
    assert given == {
        "max_age_s": config.latency_max_age_s,
        "same_region_ms": config.same_region_latency_ms,
        "cross_region_ms": config.cross_region_latency_ms,
    }
    for flag in LATENCY_FLAGS:  # the help says the default, the operator's
        assert f"(default {getattr(config, flag):g}" in " ".join(parser.format_help().split())
    override = latency_settings(parser.parse_args(["--same-region-latency-ms", "2"]))
    assert override == {**given, "same_region_ms": 2.0}


def test_environment_values_that_are_not_numbers_name_the_variable() -> None:
    env = {"HULK_OPERATOR_PLANNING_BUDGET_S": "fast"}
    with pytest.raises(InvalidRequest, match="HULK_OPERATOR_PLANNING_BUDGET_S: must be a number"):
        OperatorConfig.from_env(env)
    with pytest.raises(InvalidRequest, match="HULK_OPERATOR_METRICS_PORT: must be an integer"):
        OperatorConfig.from_env({"HULK_OPERATOR_METRICS_PORT": "9o9o"})
    assert OperatorConfig.from_env({"HULK_OPERATOR_PLANNING_BUDGET_S": "3"}).planning_budget_s == 3
    # each with its fix; a yes/no setting that is neither is refused ("maybe" was false:
    # a review)
    with pytest.raises(InvalidRequest) as exc:
        OperatorConfig.from_env({"HULK_OPERATOR_RECONCILE_INTERVAL_S": "abc"})
    assert str(exc.value).startswith(
        "HULK_OPERATOR_RECONCILE_INTERVAL_S: must be a number, got 'abc' (write a number, e.g. "
    )
    with pytest.raises(InvalidRequest) as exc:
        OperatorConfig.from_env({"HULK_OPERATOR_BASELINES": "maybe"})
    assert str(exc.value) == (
        "HULK_OPERATOR_BASELINES: must be true or false, got 'maybe' (write true or false "
        "(1/0, yes/no, on/off))"
    )
    for word, value in (("Yes", True), ("off", False), ("", False)):
        assert OperatorConfig.from_env({"HULK_OPERATOR_BASELINES": word}).baselines is value


def _operator(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HULK_OPERATOR_")}
    return subprocess.run(
        [sys.executable, "-m", "hulk", "operator", "--standalone", *args],
        env={**base, "KUBECONFIG": "", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {"HULK_OPERATOR_PLANNING_BUDGET_S": "inf"}, "HULK_OPERATOR_PLANNING_BUDGET_S: must"),
        (("--reconcile-interval", "-1"), {}, "--reconcile-interval / HULK_OPERATOR_"),
        (("--kubeconfig", "/nonexistent/kubeconfig"), {}, "no such file (check the path)"),
        (("--kubeconfig", "{bad}"), {}, "point it at a valid kubeconfig"),
        # what `hulk plan` reads too: checked as --gnn-weights is, not failing every round
        ((), {"HULK_GNN_WEIGHTS": __file__}, f"HULK_GNN_WEIGHTS: '{__file__}' is not a weights"),
        (("--gnn-weights", "/etc"), {}, "--gnn-weights / HULK_OPERATOR_GNN_WEIGHTS: '/etc'"),
    ],
)
def test_hulk_operator_stops_with_a_clear_error_before_kopf_starts(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: [\n")
    args = tuple(str(bad) if a == "{bad}" else a for a in args)
    if "--kubeconfig" not in args:
        args = (*args, "--kubeconfig", str(bad))  # never reached: the setting fails first
    out = _operator(*args, **env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("hulk operator: error: ") and message in out.stderr
    assert "Traceback" not in out.stderr


def test_ports_in_use_or_a_bad_liveness_url_are_one_line_errors(
    unreachable_kubeconfig: Path,
) -> None:
    """Before: a second operator on the host died with a traceback (the liveness endpoint
    was already bound), and a metrics port in use failed kopf's start-up, retried every
    60 s, with a traceback each time."""
    import socket

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        # (valid, never used: the check fails first)
        kubeconfig = ("--kubeconfig", str(unreachable_kubeconfig))
        for args, flag, off in (
            # (the variable too: a port set there was not named; a review)
            (
                ("--metrics-port", str(port)),
                "--metrics-port / HULK_OPERATOR_METRICS_PORT",
                "or 0 to turn it off",
            ),
            (("--liveness", f"http://0.0.0.0:{port}/healthz"), "--liveness", "or ''"),
        ):
            out = _operator(*args, *kubeconfig)
            assert out.returncode == 2, out.stderr
            assert out.stderr.startswith(
                f"hulk operator: error: {flag}: cannot listen on 0.0.0.0:{port} ("
            ), out.stderr
            assert off in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = _operator("--liveness", "localhost:8080", *kubeconfig)
    assert out.returncode == 2 and "is not an http://HOST:PORT/PATH URL" in out.stderr


def test_a_flag_wins_over_its_variable_and_an_unset_flag_leaves_the_variable_in_force(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from hulk_operator import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    for name in list(os.environ):
        if name.startswith("HULK_OPERATOR_"):
            monkeypatch.delenv(name)
    defaults = cli.config_from_args(parser.parse_args([]))
    assert defaults == OperatorConfig()
    monkeypatch.setenv("HULK_OPERATOR_RECONCILE_INTERVAL_S", "7")
    monkeypatch.setenv("HULK_OPERATOR_METRICS_PORT", "9100")
    monkeypatch.setenv("HULK_OPERATOR_PLANNER", "search")
    monkeypatch.setenv("HULK_OPERATOR_METRICS_ADDRESS", "::")
    from_env = cli.config_from_args(parser.parse_args([]))
    assert (from_env.reconcile_interval_s, from_env.metrics_port) == (7.0, 9100)
    assert from_env.metrics_address == "::"
    assert (
        cli.config_from_args(parser.parse_args(["--metrics-address", "::1"])).metrics_address
        == "::1"
    )
    assert from_env.planner == "search"
    flagged = cli.config_from_args(
        parser.parse_args(["--reconcile-interval", "3", "--planner", "hulk"])
    )
    assert (flagged.reconcile_interval_s, flagged.metrics_port) == (3.0, 9100)
    assert flagged.planner == "hulk"


def test_an_api_server_that_cannot_be_reached_at_start_is_one_line(tmp_path: Path) -> None:
    """Before, a traceback ending in urllib3's MaxRetryError (a review); then urllib3's
    three warnings of its retries before the line, which did not name the server (a user
    trial)."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    out = _operator("--kubeconfig", str(config), "--liveness", "", "--metrics-port", "0")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "hulk operator: error: --kubeconfig: cannot reach the API server at "
        "http://127.0.0.1:1 (Failed to establish a new connection: [Errno 111] Connection "
        "refused) (check that the cluster is up and the kubeconfig's server and context)"
    ]


def test_the_metrics_port_is_held_from_the_check_on() -> None:
    """``hulk operator`` and ``hulk demo`` serve their metrics at the check, before kopf
    starts: before, the port was only tried there, and taken later, so another process
    could take it in between (a CI run: kopf's start-up then failed, and retried a
    minute later)."""
    import urllib.request

    from hulk_operator.cli import check_port, serve_metrics

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
    metrics = serve_metrics("--metrics-port", port, "or 0 to turn it off", "0.0.0.0")
    try:
        with pytest.raises(InvalidRequest) as caught:
            check_port("--metrics-port", "0.0.0.0", port, "or 0 to turn it off")
        assert str(caught.value).startswith(f"--metrics-port: cannot listen on 0.0.0.0:{port} (")
        with pytest.raises(InvalidRequest) as again:
            serve_metrics("--metrics-port", port, "or leave it out", "0.0.0.0")
        assert str(again.value) == (
            f"--metrics-port: cannot listen on 0.0.0.0:{port} (Address already in use) "
            "(another process holds it: pick another port, or leave it out)"
        )
        metrics.jobs.labels(phase="Running").set(2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        assert 'hulk_jobs{phase="Running"} 2.0' in body
    finally:
        metrics.close()
    check_port("--metrics-port", "0.0.0.0", port, "or 0 to turn it off")  # (free again)


def test_the_metrics_listen_on_ipv6_when_told() -> None:
    """Before, 0.0.0.0 alone: on an IPv6-only cluster Prometheus could not scrape the
    operator (a review). ``--metrics-address ::`` listens on IPv6 (and IPv4 where Linux's
    bindv6only is 0); an address no interface has is told as such, not as a port held."""
    import urllib.request

    from hulk_operator.cli import serve_metrics

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::", 0))
        port = s.getsockname()[1]
    metrics = serve_metrics("--metrics-port", port, "or 0 to turn it off", "::")
    try:
        metrics.jobs.labels(phase="Pending").set(3)
        with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=10) as answer:
            assert 'hulk_jobs{phase="Pending"} 3.0' in answer.read().decode()
    finally:
        metrics.close()
    with pytest.raises(InvalidRequest) as exc:  # (TEST-NET-1: on no machine)
        serve_metrics("--metrics-port", port, "or 0 to turn it off", "192.0.2.7")
    assert str(exc.value) == (  # (the address's flag named, not the port's: a review)
        f"--metrics-address / HULK_OPERATOR_METRICS_ADDRESS: cannot listen on 192.0.2.7:{port} "
        "(Cannot assign requested address) (192.0.2.7 is no address of this machine: listen "
        "on 0.0.0.0 or ::)"
    )
    with pytest.raises(InvalidRequest) as exc:
        serve_metrics("--metrics-port", port, "or 0 to turn it off", "fd00::7", "ADDRESS")
    assert str(exc.value).startswith(f"ADDRESS: cannot listen on [fd00::7]:{port} (")


def started(caplog: pytest.LogCaptureFixture, cfg: OperatorConfig) -> list[tuple[str, str]]:
    """What ``lifecycle.operator_startup`` logs with ``cfg``: (level, message) pairs."""
    import asyncio
    import logging

    import kopf

    from hulk_operator import lifecycle

    caplog.clear()
    memo = kopf.Memo(config=cfg, api=object(), plan_fn=lambda *a, **k: None)
    log = logging.getLogger("test-start")
    with caplog.at_level(logging.INFO, logger="test-start"):
        asyncio.run(
            lifecycle.operator_startup(settings=kopf.OperatorSettings(), memo=memo, logger=log)
        )
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "test-start"]


def test_the_start_says_its_latency_settings_and_warns_of_swapped_estimates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator started with --same-region-latency-ms above --cross-region-latency-ms
    (taken silently before: a user trial) warns; its start-up line names the settings."""
    from dataclasses import replace

    def start(cfg: OperatorConfig) -> list[tuple[str, str]]:
        return started(caplog, cfg)

    base = replace(OperatorConfig(), metrics_port=0)
    said = start(replace(base, same_region_latency_ms=500.0, cross_region_latency_ms=5.0))
    assert said[0] == (
        "WARNING",
        "--same-region-latency-ms (500) is above --cross-region-latency-ms (5): unmeasured "
        "pairs within a region are estimated as slower than across regions; swapped?",
    )
    assert said[-1][1].endswith(
        "latency reports fresh for 600 s; unmeasured pairs estimated by their regions' "
        "measured median, else 500 / 5 ms within / across regions)"
    ), said
    assert [level for level, _ in start(base)] == ["INFO"]  # (the defaults: no warning)


def test_the_start_warns_of_weights_that_call_every_server_idle(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GNN weights trained on too little plan without a word, the refinement hiding them
    (a laptop trial of hulk plan): the operator's start warns of them."""
    from dataclasses import replace

    import torch

    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.planner import UNTRAINED, WEIGHTS_ENV, shipped_weights
    from hulk_planner.gnn.train import TrainSettings, save

    idle = HulkGNN(hidden=8, gcn_layers=1)
    with torch.no_grad():
        idle.idle.bias.fill_(1000.0)  # idle above every job on every server
    path, _ = save(idle, tmp_path / "idle.pt", generation={}, training=TrainSettings(), logs=[])
    monkeypatch.setenv(WEIGHTS_ENV, "")  # (the start sets it: restored after)

    def start(cfg: OperatorConfig) -> list[tuple[str, str]]:
        return started(caplog, cfg)

    base = replace(OperatorConfig(), metrics_port=0)
    said = start(replace(base, gnn_weights=str(path)))
    assert said[0] == ("WARNING", f"GNN weights {path.resolve()}: {UNTRAINED}"), said
    monkeypatch.setenv(WEIGHTS_ENV, str(shipped_weights()))  # (checked, as given)
    assert [level for level, _ in start(base)] == ["INFO"]  # the shipped weights: no warning
    monkeypatch.setenv(WEIGHTS_ENV, "")
    quiet = start(replace(base, planner="search", gnn_weights=str(path)))  # (no GNN)
    assert [level for level, _ in quiet] == ["INFO"], quiet
