"""The operator's settings, from command-line flags or ``HULK_OPERATOR_*`` environment
variables (flags win). Handlers read them from ``memo.config``."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, fields

from hulk_planner.errors import InvalidRequest
from hulk_planner.model import check_positive


@dataclass(frozen=True)
class OperatorConfig:
    # How often each job is reconciled (its kopf timer's interval), in seconds. Node loss is
    # noticed within one interval; every tick is in-memory unless something must change.
    reconcile_interval_s: float = 1.0
    # How long a planning round waits for sibling jobs applied at the same time, so that
    # jobs applied together are planned together (the paper's multi-task case).
    batch_window_s: float = 0.3
    # Planner of hulk_planner.api.plan(): "hulk" (default) or a baseline's name.
    planner: str = "hulk"
    # Time budget handed to the planner per round (None: the planner's default).
    planning_budget_s: float | None = None
    # Also plan each placed job with baseline-a/b/c and show their predicted step times.
    baselines: bool = True
    # Fallback latencies where the probe has no fresh measurement (one-way, ms).
    same_region_latency_ms: float = 1.0
    cross_region_latency_ms: float = 100.0
    # NodeLatency measurements older than this are ignored (seconds).
    latency_max_age_s: float = 600.0
    # Port of the Prometheus metrics endpoint (0: off).
    metrics_port: int = 0
    # Address it listens on: 0.0.0.0, every IPv4 address; "::" on an IPv6 or dual-stack
    # cluster, whose pod IPs (the address Prometheus scrapes) may be IPv6 ("::" takes IPv4
    # too where the node's net.ipv6.bindv6only is 0, Linux's default).
    metrics_address: str = "0.0.0.0"
    # A stage's node counts as lost once it has been NotReady this long (seconds; Kubernetes
    # has already waited its node-monitor-grace-period before calling it NotReady):
    # a kubelet restart or a short partition does not restart whole pipelines.
    not_ready_grace_s: float = 60.0
    # When at least this share of the GPU nodes is NotReady at once (and more than two), no
    # NotReady node counts as lost: the control plane has lost contact, not the nodes
    # failed (kube-controller-manager's --unhealthy-zone-threshold is 0.55 too).
    disruption_threshold: float = 0.55
    # A job whose stage pods the API server has refused this long (seconds: an admission
    # policy, a quota on objects) gives its servers back and waits Pending, instead of holding them
    # for good; it is planned again after a pause (this long, doubled at each refusal in a
    # row, at most 10 min) or at once when its spec or its namespace's quotas or
    # LimitRanges change.
    forbidden_grace_s: float = 120.0
    # Debugging/testing knob: pause between stage pod creations (seconds).
    create_delay_s: float = 0.0
    # GNN weights of `hulk train` for the hulk planner ("": the shipped ones).
    gnn_weights: str = ""
    # A running job without spec.regrow is told (Event FasterPlanAvailable) when a plan on
    # its servers plus the free ones would make its step this many times faster; it is
    # never moved (0: not looked at, which saves the planning that costs).
    advise_speedup: float = 1.25
    # A running stage on a node cordoned (kubectl cordon) runs on, as Kubernetes keeps a
    # cordoned node's pods, and moves once its pod is gone: kubectl drain evicts it
    # (false); or is moved at once, its pipeline restarted from its checkpoint (true).
    # Either way a cordoned node takes no new stage.
    cordon_moves: bool = False

    def __post_init__(self) -> None:
        """Every setting checked once, at start-up: a bad one names its flag and variable."""
        from hulk_planner.api import MAX_TIME_BUDGET_S, PLANNERS
        from hulk_planner.model import MAX_LATENCY_MS

        if self.planner not in PLANNERS:
            raise InvalidRequest(
                setting_field("planner"),
                f"unknown planner {self.planner!r}",
                f"use one of {', '.join(PLANNERS)}",
            )
        for name, zero_allowed in _NUMBERS.items():
            value = getattr(self, name)
            if value is None and name == "planning_budget_s":  # the planner's default
                continue
            most = {
                "disruption_threshold": 1.0,
                "planning_budget_s": MAX_TIME_BUDGET_S,
                "same_region_latency_ms": MAX_LATENCY_MS,
                "cross_region_latency_ms": MAX_LATENCY_MS,
            }
            # (a share of the nodes; the planner's bounds on its budget and on a link's
            # latency, refused at start rather than at the first plan: 2e7 ms had failed
            # every round, a trial)
            check_positive(
                setting_field(name), value, allow_zero=zero_allowed, at_most=most.get(name)
            )
        if self.gnn_weights:
            from hulk_planner.gnn.planner import check_weights

            check_weights(self.gnn_weights, setting_field("gnn_weights"))
        if self.advise_speedup != 0 and not self.advise_speedup > 1:
            raise InvalidRequest(
                setting_field("advise_speedup"),
                f"must be above 1, or 0 to turn it off, got {self.advise_speedup!r}",
                "give how many times faster a plan must be to be told of, e.g. 1.25",
            )
        if not 0 <= self.metrics_port <= 65535:
            raise InvalidRequest(
                setting_field("metrics_port"), f"must be a port 0-65535, got {self.metrics_port}"
            )
        try:  # (before, 0.0.0.0 alone: an IPv6-only cluster could not scrape it; a review)
            ipaddress.ip_address(self.metrics_address)
        except ValueError:
            raise InvalidRequest(
                setting_field("metrics_address"),
                f"must be an IP address, got {self.metrics_address!r}",
                "write 0.0.0.0 (every IPv4 address) or :: (IPv6, and IPv4 too on Linux by "
                "default), without brackets",
            ) from None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> OperatorConfig:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"HULK_OPERATOR_{f.name.upper()}")
            if raw is None:
                continue
            default = getattr(cls, f.name)
            try:
                if isinstance(default, bool):
                    word = raw.strip().lower()
                    if word not in (*TRUE_WORDS, *FALSE_WORDS):  # ("maybe" was false: a review)
                        raise InvalidRequest(
                            f"HULK_OPERATOR_{f.name.upper()}",
                            f"must be true or false, got {raw!r}",
                            "write true or false (1/0, yes/no, on/off)",
                        )
                    values[f.name] = word in TRUE_WORDS
                elif isinstance(default, int):
                    values[f.name] = int(raw)
                elif isinstance(default, float) or default is None:
                    values[f.name] = float(raw) if raw else None
                else:
                    values[f.name] = raw
            except InvalidRequest:
                raise
            except ValueError:
                kind = "an integer" if isinstance(default, int) else "a number"
                raise InvalidRequest(
                    f"HULK_OPERATOR_{f.name.upper()}",
                    f"must be {kind}, got {raw!r}",
                    f"write {kind}, e.g. {default if default is not None else 10}, or unset it",
                ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

# The numeric settings: whether zero is allowed (negatives never are).
_NUMBERS = {
    "reconcile_interval_s": False,
    "batch_window_s": True,
    "planning_budget_s": False,
    "same_region_latency_ms": True,
    "cross_region_latency_ms": True,
    "latency_max_age_s": False,
    "create_delay_s": True,
    "not_ready_grace_s": True,
    "disruption_threshold": False,
    "forbidden_grace_s": False,
    "advise_speedup": True,
}
# The settings `hulk operator` also takes as flags (hulk_operator/cli.py adds them).
FLAGS = {
    "planner": "--planner",
    "reconcile_interval_s": "--reconcile-interval",
    "same_region_latency_ms": "--same-region-latency-ms",
    "cross_region_latency_ms": "--cross-region-latency-ms",
    "latency_max_age_s": "--latency-max-age-s",
    "metrics_port": "--metrics-port",
    "metrics_address": "--metrics-address",
    "not_ready_grace_s": "--not-ready-grace-s",
    "gnn_weights": "--gnn-weights",
}


def setting_field(name: str) -> str:
    """A setting as its user set it: the flag (if it has one) or the environment variable."""
    env = f"HULK_OPERATOR_{name.upper()}"
    return f"{FLAGS[name]} / {env}" if name in FLAGS else env
