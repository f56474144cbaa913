"""``PlacementPlan`` documents: what a planner decided, written out and read back."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hulk_planner.cost import check_stages
from hulk_planner.errors import InvalidRequest, shown
from hulk_planner.io.documents import (
    API_VERSION,
    check_kind,
    list_field,
    load_documents,
    number_field,
    reads_back,
    required,
)
from hulk_planner.model import (
    JobPlan,
    Plan,
    Stage,
    Unplaced,
    check_positive,
)


def seconds(x: float | None) -> float | None:
    """A predicted time as written out: five significant digits (a tiny job's step is not
    rounded to 0); null where unknown or infinite."""
    return None if x is None or math.isnan(x) or math.isinf(x) else float(f"{x:.5g}")


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "PlacementPlan",
        "planner": plan.planner,
        "jobs": [
            {
                "name": j.name,
                "stages": [
                    {"layers": list(s.layers), "nodes": list(s.nodes), "parallelism": s.parallelism}
                    for s in j.stages
                ],
                "microBatches": j.micro_batches,
                "predictedIterationSeconds": seconds(j.predicted_iteration_seconds),
            }
            for j in plan.jobs
        ],
        "unplaced": [{"name": u.name, "reason": u.reason} for u in plan.unplaced],
    }
    if plan.notes:
        out["notes"] = list(plan.notes)
    return out


def plan_from_dict(doc: Mapping[str, Any], source: str = "PlacementPlan") -> Plan:
    """A ``PlacementPlan`` document, checked for what holds whatever the cluster: each job
    named once, its stages covering layers ``[0, n)`` in order with equal replica counts,
    each server in one stage of one job. Errors name ``source`` and the field."""
    check_kind(doc, "PlacementPlan", source)
    try:
        return _plan_from_dict(doc)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{source}: {exc.field}", exc.problem, exc.fix) from None
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise InvalidRequest(source, "is not a valid PlacementPlan", str(exc)) from None


def _plan_from_dict(doc: Mapping[str, Any]) -> Plan:
    jobs: list[JobPlan] = []
    for i, j in enumerate(list_field(doc, "jobs", "")):
        w = f"jobs[{i}]"
        name = str(required(j, "name", w))
        if any(jp.name == name for jp in jobs):
            raise InvalidRequest(f"{w}.name", f"{name!r} is listed twice", "keep one")
        raw = required(j, "stages", w)
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest(f"{w}.stages", "must be a non-empty list of stages")
        stages: list[Stage] = []
        for k, s in enumerate(raw):
            at = f"{w}.stages[{k}]"
            layers = required(s, "layers", at)
            if not (
                isinstance(layers, list)
                and len(layers) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in layers)
            ):
                raise InvalidRequest(
                    f"{at}.layers",
                    f"must be [start, end], got {shown(layers)}",
                    "write the stage's first layer and the one after its last, e.g. [0, 12]",
                )
            nodes = required(s, "nodes", at)
            if (
                not isinstance(nodes, list)
                or not nodes
                or not all(isinstance(n, str) for n in nodes)
            ):
                raise InvalidRequest(
                    f"{at}.nodes",
                    f"must be a non-empty list of server names, got {shown(nodes)}",
                    "list the stage's servers, e.g. [bj-0, bj-1]",
                )
            try:
                stages.append(Stage(tuple(layers), tuple(nodes), s.get("parallelism", "data")))  # type: ignore[arg-type]
            except InvalidRequest as exc:
                raise InvalidRequest(
                    f"{at}.{exc.field.split('.')[-1]}", exc.problem, exc.fix
                ) from None
        t = j.get("predictedIterationSeconds")
        micro = number_field(j, "microBatches", w)
        check_positive(f"{w}.microBatches", micro, integer=True)
        jobs.append(
            JobPlan(
                name,
                tuple(stages),
                int(micro),
                float(t) if t is not None else math.nan,
            )
        )
    unplaced = tuple(
        Unplaced(str(required(u, "name", f"unplaced[{i}]")), str(u.get("reason") or ""))
        for i, u in enumerate(list_field(doc, "unplaced", ""))
    )
    notes = tuple(str(n) for n in doc.get("notes") or ())
    plan = Plan(str(doc.get("planner", "unknown")), tuple(jobs), unplaced, notes)
    check_stages(plan, lambda i, jp: f"jobs[{i}]")
    return plan


@reads_back
class _PlanDumper(yaml.SafeDumper):
    """Short lists of scalars (a stage's ``layers`` and ``nodes``) on one line, as the
    formats' examples write them."""

    def represent_list(self, data: Any) -> Any:  # type: ignore[override]
        flow = all(isinstance(x, str | int | float) for x in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_PlanDumper.add_representer(list, _PlanDumper.represent_list)


def load_plan(path: str | Path, field: str = "previous") -> Plan:
    """The one ``PlacementPlan`` a file holds (``hulk plan -o json`` or ``-o yaml`` wrote it);
    errors name ``field``, the file and the field inside it."""
    docs = load_documents(path)
    if len(docs) != 1:
        raise InvalidRequest(
            field,
            f"{path} holds {len(docs)} documents: it must hold one PlacementPlan",
            "give the file hulk plan -o json or -o yaml wrote",
        )
    return plan_from_dict(docs[0], str(path))


PLAN_FORMATS = ("json", "yaml")


def dump_plan(plan: Plan, fmt: str = "json") -> str:
    """The plan as a ``PlacementPlan`` document; ``fmt`` is ``json`` or ``yaml``.
    (``predictedIterationSeconds`` keeps five significant digits, ``seconds``: a plan read
    back equals the one written but for those digits.)"""
    if fmt not in PLAN_FORMATS:
        raise InvalidRequest(
            "fmt", f"unknown format {fmt!r}", f"use one of {', '.join(PLAN_FORMATS)}"
        )
    data = plan_to_dict(plan)
    if fmt == "yaml":
        return yaml.dump(data, Dumper=_PlanDumper, sort_keys=False, width=100, allow_unicode=True)
    return json.dumps(data, indent=2, ensure_ascii=False)  # (names as written: not \\uXXXX)
