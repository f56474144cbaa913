"""Hulk's planner: which servers train which job, in which pipeline order.

The public surface, importable from here::

    from hulk_planner import Cluster, Job, Server, Link, plan, preset_model

- ``plan(cluster, jobs, planner="hulk")``: a ``Plan`` (see ``hulk_planner.api``).
- ``CostModel``: scores any plan, independently of how it was found.
- ``paper_cluster()``, ``paper_jobs()``: the Hulk paper's cluster and jobs.
- The data model (``hulk_planner.model``), presets (``preset_model``), the errors
  (``HulkError``: ``InvalidRequest``, ``NoFeasiblePlan``) and the file formats
  (``load_cluster``, ``load_jobs``, ``load_plan``, ``dump_plan``; more in ``hulk_planner.io``).

Names are imported on first use (PEP 562), so ``import hulk_planner.model`` alone stays
light. This package never imports kopf or the Kubernetes client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "plan": "hulk_planner.api",
    "PLANNERS": "hulk_planner.api",
    "CostModel": "hulk_planner.cost",
    "validate_plan": "hulk_planner.cost",
    "paper_cluster": "hulk_planner.datasets",
    "paper_jobs": "hulk_planner.datasets",
    "HulkError": "hulk_planner.errors",
    "InvalidRequest": "hulk_planner.errors",
    "NoFeasiblePlan": "hulk_planner.errors",
    "Cluster": "hulk_planner.model",
    "Job": "hulk_planner.model",
    "JobPlan": "hulk_planner.model",
    "Link": "hulk_planner.model",
    "ModelSpec": "hulk_planner.model",
    "Plan": "hulk_planner.model",
    "RegionLink": "hulk_planner.model",
    "Server": "hulk_planner.model",
    "Stage": "hulk_planner.model",
    "Unplaced": "hulk_planner.model",
    "preset_model": "hulk_planner.presets",
    "PRESETS": "hulk_planner.presets",
    "dump_plan": "hulk_planner.io",
    "load_cluster": "hulk_planner.io",
    "load_jobs": "hulk_planner.io",
    "load_plan": "hulk_planner.io",
}

__all__ = [
    "PLANNERS",
    "PRESETS",
    "Cluster",
    "CostModel",
    "HulkError",
    "InvalidRequest",
    "Job",
    "JobPlan",
    "Link",
    "ModelSpec",
    "NoFeasiblePlan",
    "Plan",
    "RegionLink",
    "Server",
    "Stage",
    "Unplaced",
    "dump_plan",
    "load_cluster",
    "load_jobs",
    "load_plan",
    "paper_cluster",
    "paper_jobs",
    "plan",
    "preset_model",
    "validate_plan",
]  # (the names of _WHERE)

if TYPE_CHECKING:
    from hulk_planner.api import PLANNERS, plan
    from hulk_planner.cost import CostModel, validate_plan
    from hulk_planner.datasets import paper_cluster, paper_jobs
    from hulk_planner.errors import HulkError, InvalidRequest, NoFeasiblePlan
    from hulk_planner.io import dump_plan, load_cluster, load_jobs, load_plan
    from hulk_planner.model import (
        Cluster,
        Job,
        JobPlan,
        Link,
        ModelSpec,
        Plan,
        RegionLink,
        Server,
        Stage,
        Unplaced,
    )
    from hulk_planner.presets import PRESETS, preset_model


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'hulk_planner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
