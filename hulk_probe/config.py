"""The agent's settings: flags, their environment variables, and validation.

Every flag ``--some-flag`` can also come from ``HULK_PROBE_SOME_FLAG``; a flag given on
the command line wins. Validation raises :class:`ConfigError` with a one-line message
that names the flag (or variable) at fault.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from hulk_probe.publisher import DEFAULT_WRITE_BUDGET_KB_S, MAX_BUDGET_SPACING_S

ENV_PREFIX = "HULK_PROBE_"
DEFAULT_ECHO_PORT = 7471
DEFAULT_METRICS_PORT = 7472


class ConfigError(ValueError):
    """A bad setting; its message is one line meant for the user."""


@dataclass(frozen=True)
class ProbeSettings:
    """How the measurer probes (the part of the configuration that tests vary most)."""

    interval_s: float = 10.0
    timeout_s: float = 2.0
    window: int = 10
    failures: int = 3
    jitter: float = 0.1


@dataclass(frozen=True)
class ProbeConfig:
    node_name: str
    listen: tuple[str, int]
    advertise: tuple[str, int]
    metrics: tuple[str, int] | None
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    publish_interval_s: float = 10.0
    write_budget_kb_s: float = DEFAULT_WRITE_BUDGET_KB_S
    max_publish_interval_s: float = MAX_BUDGET_SPACING_S
    peers_per_region: int = 0  # 0: every peer
    kubeconfig: str | None = None
    peer_addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    log_level: str = "INFO"


# (flag, metavar, help); the environment variable is derived from the flag.
FLAGS: list[tuple[str, str, str]] = [
    (
        "--node-name",
        "NAME",
        "this node's Kubernetes name (in a DaemonSet: spec.nodeName; also $NODE_NAME)",
    ),
    (
        "--listen",
        "HOST:PORT",
        f"where the echo server listens (default 0.0.0.0:{DEFAULT_ECHO_PORT})",
    ),
    (
        "--advertise",
        "HOST:PORT",
        "address peers use to reach this echo server, published "
        "on the Node as hulk.dev/probe-address (default: --listen, or $POD_IP with its port)",
    ),
    (
        "--metrics",
        "HOST:PORT",
        f"where /metrics and /healthz are served "
        f"(default 0.0.0.0:{DEFAULT_METRICS_PORT}; 'off' disables)",
    ),
    ("--interval", "SECONDS", "time between two probes of the same peer (default 10)"),
    ("--timeout", "SECONDS", "a probe that takes longer fails (default 2; at most --interval)"),
    ("--window", "N", "samples kept per peer; the estimate is their median (default 10)"),
    ("--failures", "N", "consecutive failed probes that mark a peer unreachable (default 3)"),
    (
        "--jitter",
        "FRACTION",
        "random shift of each probe, as a fraction of the interval (default 0.1, below 0.5)",
    ),
    (
        "--publish-interval",
        "SECONDS",
        "time between two writes of this node's NodeLatency "
        "status (default: --interval; never shorter)",
    ),
    (
        "--write-budget",
        "KB_PER_S",
        "status kilobytes per second all agents together may write: each writes less "
        "often than --publish-interval where N nodes' statuses would pass it, up to "
        f"--max-publish-interval (default {DEFAULT_WRITE_BUDGET_KB_S:g}; 0: no budget)",
    ),
    (
        "--max-publish-interval",
        "SECONDS",
        "the longest time between two status writes the budget may set; keep it under a "
        f"third of the operator's --latency-max-age-s (default {MAX_BUDGET_SPACING_S:g}, "
        "or --publish-interval if longer)",
    ),
    (
        "--peers-per-region",
        "N",
        "probe only N peers of each region, this node's own included, chosen by a hash of "
        "the pair (the operator estimates the other pairs from their regions' measured "
        "median): for thousands of nodes, where every pair is too many (default 0: every "
        "peer)",
    ),
    (
        "--kubeconfig",
        "PATH",
        "kubeconfig file (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)",
    ),
    (
        "--peer-address",
        "NODE=HOST:PORT",
        "reach NODE at this address instead of the one it "
        "publishes (repeatable; in the environment, comma-separated)",
    ),
    ("--log-level", "LEVEL", "DEBUG, INFO, WARNING or ERROR (default INFO)"),
]


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, metavar, help_text in FLAGS:
        kwargs: dict[str, object] = {
            "metavar": metavar,
            "default": None,
            "help": f"{help_text} [${env_name(flag)}]",
        }
        if flag == "--peer-address":
            kwargs["action"] = "append"
        parser.add_argument(flag, **kwargs)  # type: ignore[arg-type]


def parse_hostport(text: str, what: str, default_port: int | None = None) -> tuple[str, int]:
    """``"127.0.0.2:7471"``, ``"[::1]:7471"`` or ``"node-a:7471"`` as (host, port)."""
    text = text.strip()
    port_text: str | None = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ConfigError(f"{what}: expected [HOST]:PORT, got {text!r}")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ConfigError(f"{what}: write IPv6 addresses in brackets, like [::1]:7471")
    else:
        host = text
    if not host:
        raise ConfigError(f"{what}: missing host in {text!r}")
    if port_text is None:
        if default_port is None:
            raise ConfigError(f"{what}: expected HOST:PORT, got {text!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{what}: port must be a number from 0 to 65535, got {port_text!r}")
    return host, int(port_text)


def _number(text: str, what: str, *, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"{what}: expected {kind}, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{what}: expected a finite number, got {text!r}")
    return value


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ProbeConfig:
    """Merge flags over environment variables over defaults, and validate."""
    env = os.environ if environ is None else environ

    def raw(flag: str) -> tuple[str | None, str]:
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is not None:
            return value, flag
        name = env_name(flag)
        return env.get(name) or None, f"${name}"

    node_name, _ = raw("--node-name")
    if not node_name:
        node_name = env.get("NODE_NAME") or None
    if not node_name:
        raise ConfigError("--node-name is required (or $HULK_PROBE_NODE_NAME / $NODE_NAME)")

    text, what = raw("--listen")
    listen = parse_hostport(text or f"0.0.0.0:{DEFAULT_ECHO_PORT}", what, DEFAULT_ECHO_PORT)

    listen_what = what

    text, what = raw("--metrics")
    metrics: tuple[str, int] | None
    if text and text.strip().lower() in ("off", "none", "no"):
        metrics = None
    else:
        metrics = parse_hostport(
            text or f"0.0.0.0:{DEFAULT_METRICS_PORT}", what, DEFAULT_METRICS_PORT
        )

    given: dict[str, str] = {}  # flag -> what set it: the flag, or its variable

    def number(flag: str, default: float, *, integer: bool = False) -> float:
        text, what = raw(flag)
        given[flag] = what
        return default if text is None else _number(text, what, integer=integer)

    def by(flag: str) -> str:  # (a DaemonSet sets them all as variables: name the one at fault)
        return given.get(flag, flag)

    interval = number("--interval", 10.0)
    if interval <= 0:
        raise ConfigError(f"{by('--interval')} must be above 0 seconds, got {interval:g}")
    timeout = number("--timeout", min(2.0, interval))
    if not 0 < timeout <= interval:
        raise ConfigError(
            f"{by('--timeout')} must be above 0 and at most --interval ({interval:g}), "
            f"got {timeout:g}"
        )
    window = int(number("--window", 10, integer=True))
    if window < 1:
        raise ConfigError(f"{by('--window')} must be at least 1, got {window}")
    failures = int(number("--failures", 3, integer=True))
    if failures < 1:
        raise ConfigError(f"{by('--failures')} must be at least 1, got {failures}")
    jitter = number("--jitter", 0.1)
    if not 0 <= jitter < 0.5:
        raise ConfigError(f"{by('--jitter')} must be at least 0 and below 0.5, got {jitter:g}")
    publish = number("--publish-interval", interval)
    if publish < interval:
        raise ConfigError(
            f"{by('--publish-interval')} must be at least --interval ({interval:g}), "
            f"got {publish:g}"
        )
    budget = number("--write-budget", DEFAULT_WRITE_BUDGET_KB_S)
    if budget < 0:
        raise ConfigError(
            f"{by('--write-budget')} must be at least 0 KB/s (0: no budget), got {budget:g}"
        )
    longest = number("--max-publish-interval", max(MAX_BUDGET_SPACING_S, publish))
    if longest < publish:
        raise ConfigError(
            f"{by('--max-publish-interval')} must be at least --publish-interval ({publish:g}), "
            f"got {longest:g}"
        )

    per_region = int(number("--peers-per-region", 0, integer=True))
    if per_region < 0:
        raise ConfigError(
            f"{by('--peers-per-region')} must be at least 0 (0: every peer), got {per_region}"
        )

    kubeconfig, _ = raw("--kubeconfig")
    peer_addresses = _peer_addresses(args, env)

    level, what = raw("--log-level")
    level = (level or "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"{what}: expected DEBUG, INFO, WARNING or ERROR, got {level!r}")

    # (last: the other flags' mistakes are told first, where a missing --advertise hid them)
    text, what = raw("--advertise")
    if text:
        advertise = parse_hostport(text, what, listen[1])
    elif not _is_unspecified(listen[0]):
        advertise, what = listen, f"{listen_what} (advertised, as no --advertise is given)"
    elif env.get("POD_IP"):
        advertise = (env["POD_IP"], listen[1])
    else:
        raise ConfigError(
            "--advertise is required when --listen binds every address (or set $POD_IP)"
        )
    if _is_unspecified(advertise[0]) or advertise[1] == 0:
        raise ConfigError(f"{what}: peers cannot reach {advertise[0]}:{advertise[1]}")

    return ProbeConfig(
        node_name=node_name,
        listen=listen,
        advertise=advertise,
        metrics=metrics,
        probe=ProbeSettings(
            interval_s=interval, timeout_s=timeout, window=window, failures=failures, jitter=jitter
        ),
        publish_interval_s=publish,
        write_budget_kb_s=budget,
        max_publish_interval_s=longest,
        peers_per_region=per_region,
        kubeconfig=kubeconfig,
        peer_addresses=peer_addresses,
        log_level=level,
    )


def _peer_addresses(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    items: list[tuple[str, str]] = [(i, "--peer-address") for i in args.peer_address or []]
    if not items:
        name = env_name("--peer-address")
        items = [(i, f"${name}") for i in env.get(name, "").split(",") if i.strip()]
    result: dict[str, tuple[str, int]] = {}
    for item, what in items:
        node, sep, address = item.partition("=")
        if not sep or not node.strip():
            raise ConfigError(f"{what}: expected NODE=HOST:PORT, got {item!r}")
        result[node.strip()] = parse_hostport(address, f"{what} {node.strip()}")
    return result


def format_hostport(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
