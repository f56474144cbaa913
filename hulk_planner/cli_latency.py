"""``hulk plan``'s latency flags: the operator's settings for a live cluster's links,
which the ``--kubeconfig`` preview (and ``hulk topology``) take as the operator does."""

from __future__ import annotations

import argparse

from hulk_planner.model import check_positive

LATENCY_FLAGS = ("latency_max_age_s", "same_region_latency_ms", "cross_region_latency_ms")
# The operator's defaults for those flags (``OperatorConfig``'s; a test keeps them equal),
# under the keys of the preview's keyword arguments.
LATENCY_DEFAULTS = {"max_age_s": 600.0, "same_region_ms": 1.0, "cross_region_ms": 100.0}


def _option(dest: str) -> str:
    """The command-line spelling of an argparse destination: ``--latency-max-age-s``."""
    return "--" + dest.replace("_", "-")


_LATENCY_HELP = (
    "how old a NodeLatency measurement may be",
    "the estimate for an unmeasured pair in a region where no pair is measured (else "
    "the median of those measured)",
    "the estimate for an unmeasured pair across two regions where no pair between them "
    "is measured (else the median of those measured)",
)


def add_latency_arguments(parser: argparse.ArgumentParser, when: str = "") -> None:
    """The operator's latency flags, for the commands that read a live cluster's links."""
    for flag, default, what in zip(
        LATENCY_FLAGS, LATENCY_DEFAULTS.values(), _LATENCY_HELP, strict=True
    ):
        parser.add_argument(
            _option(flag),
            type=float,
            default=None,
            metavar="N",
            help=f"{when}{what}, as the operator's flag of that name sets it "
            f"(default {default:g}, the operator's default)",
        )


def latency_settings(args: argparse.Namespace) -> dict[str, float]:
    """The preview's latency settings, as the operator's flags of the same names (before,
    fixed at the operator's defaults: a preview of an operator run with other values
    planned on other links; a trial), each flag not given at the operator's default
    (``LATENCY_DEFAULTS``). Checked as the operator checks them."""
    from hulk_planner.model import MAX_LATENCY_MS

    out = dict(LATENCY_DEFAULTS)
    for flag, key in zip(LATENCY_FLAGS, LATENCY_DEFAULTS, strict=True):
        value = getattr(args, flag)
        if value is None:
            continue
        name = _option(flag)
        if flag == "latency_max_age_s":
            check_positive(name, value)
        else:
            check_positive(name, value, allow_zero=True, at_most=MAX_LATENCY_MS)
        out[key] = value
    return out
