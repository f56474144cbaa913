"""The operator's settings, from command-line flags or ``HULK_OPERATOR_*`` environment
variables (flags win). Handlers read them from ``memo.config``."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields


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
    # Debugging/testing knob: pause between stage pod creations (seconds).
    create_delay_s: float = 0.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> OperatorConfig:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"HULK_OPERATOR_{f.name.upper()}")
            if raw is None:
                continue
            default = getattr(cls, f.name)
            if isinstance(default, bool):
                values[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                values[f.name] = int(raw)
            elif isinstance(default, float) or default is None:
                values[f.name] = float(raw) if raw else None
            else:
                values[f.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
