"""``PlacementPlan`` documents: what a planner decided, written out and read back."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hulk_planner.cost import check_stages
from hulk_planner.errors import InvalidRequest, number_fix, shown
from hulk_planner.io.documents import (
    API_VERSION,
    check_kind,
    list_field,
    load_documents,
    number_field,
    reads_back,
    required,
    text_field,
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
        w = f"jobs[{i}]"  # (by index, as every error of the file: not jobs[<name>])
        name = _name(j, w, "give the job's name, its HulkTrainingJob's metadata.name")
        if any(jp.name == name for jp in jobs):
            raise InvalidRequest(f"{w}.name", f"{name!r} is listed twice", "keep one")
        raw = required(j, "stages", w)
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest(
                f"{w}.stages",
                f"must be a non-empty list of stages, got {_got(raw)}",
                "write each stage on a line of its own starting with '- ', e.g. "
                "- {layers: [0, 12], nodes: [bj-0], parallelism: data}",
            )
        stages = tuple(_stage(s, f"{w}.stages[{k}]") for k, s in enumerate(raw))
        micro = number_field(j, "microBatches", w)
        check_positive(f"{w}.microBatches", micro, integer=True)
        jobs.append(JobPlan(name, stages, int(micro), _seconds(j, w)))
    unplaced: list[Unplaced] = []
    for i, u in enumerate(list_field(doc, "unplaced", "")):
        w = f"unplaced[{i}]"
        name = _name(u, w, "give the name of the job that was not placed")
        placed = any(jp.name == name for jp in jobs)
        if placed or any(x.name == name for x in unplaced):
            said = "also placed (in jobs)" if placed else "listed twice"
            raise InvalidRequest(f"{w}.name", f"{name!r} is {said}", "keep one")
        reason = u.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidRequest(
                f"{w}.reason", f"must be text, got {shown(reason)}", "write why, as a string"
            )
        unplaced.append(Unplaced(name, reason or ""))
    notes = list_field(doc, "notes", "")
    for i, n in enumerate(notes):
        if not isinstance(n, str):
            raise InvalidRequest(
                f"notes[{i}]", f"must be text, got {shown(n)}", "write each note as a string"
            )
    planner = doc.get("planner")
    if planner is not None and not isinstance(planner, str):
        raise InvalidRequest(
            "planner",
            f"must be a string, got {shown(planner)}",
            "name the planner that made the plan, e.g. hulk",
        )
    plan = Plan(
        "unknown" if planner is None else planner, tuple(jobs), tuple(unplaced), tuple(notes)
    )
    check_stages(plan, lambda i, jp: f"jobs[{i}]")
    return plan


def _got(value: object) -> str:
    """A value an error names: a mapping shortly, anything else as written."""
    return "a mapping" if isinstance(value, Mapping) else shown(value)


def _name(doc: Mapping[str, Any], where: str, fix: str) -> str:
    """The ``name`` of a job or unplaced entry: a string, not blank (``name: 5`` is refused,
    as text_field refuses a number where a name belongs, not read as the job "5")."""
    name = text_field(doc, "name", where)
    if not name.strip():
        raise InvalidRequest(f"{where}.name", f"must be a non-empty name, got {name!r}", fix)
    return name


def _stage(s: Any, at: str) -> Stage:
    """One stage of a job: ``layers`` two whole numbers ``[start, end)``, ``nodes`` server
    names, ``parallelism`` data or tensor (the format has no default: required)."""
    layers = required(s, "layers", at)
    if not (
        isinstance(layers, list)
        and len(layers) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in layers)
    ):
        raise InvalidRequest(
            f"{at}.layers",
            f"must be [start, end], two whole numbers, got {shown(layers)}",
            "write the stage's first layer and the one after its last, e.g. [0, 12]",
        )
    nodes = required(s, "nodes", at)
    if not isinstance(nodes, list) or not nodes:
        raise InvalidRequest(
            f"{at}.nodes",
            f"must be a non-empty list of server names, got {_got(nodes)}",
            "list the stage's servers, e.g. [bj-0, bj-1]",
        )
    for n, node in enumerate(nodes):
        if not isinstance(node, str) or not node.strip():
            raise InvalidRequest(
                f"{at}.nodes[{n}]",
                f"must be a server name, got {shown(node)}",
                "write the name of a server of the cluster, as a string"
                + ("" if isinstance(node, str) else ", quoted where YAML reads it otherwise"),
            )
    parallelism = required(s, "parallelism", at)
    if not isinstance(parallelism, str) or parallelism not in ("data", "tensor"):
        raise InvalidRequest(
            f"{at}.parallelism",
            f"must be data or tensor, got {shown(parallelism)}",
            "write data (each node holds the stage's layers) or tensor (the nodes split "
            "each layer)",
        )
    try:
        return Stage((layers[0], layers[1]), tuple(nodes), parallelism)  # type: ignore[arg-type]
    except InvalidRequest as exc:
        raise InvalidRequest(f"{at}.{exc.field.split('.')[-1]}", exc.problem, exc.fix) from None


def _seconds(job: Mapping[str, Any], where: str) -> float:
    """A job's ``predictedIterationSeconds``: a finite number, zero or more; null or absent
    is not predicted (NaN), as ``plan_to_dict`` writes an unknown or infinite time."""
    key = "predictedIterationSeconds"
    fix = "write the predicted step time in seconds, e.g. 2.31, or null where it is not predicted"
    t = job.get(key)
    if t is None:
        return math.nan
    if isinstance(t, bool) or not isinstance(t, int | float):
        hint = number_fix(key, t)  # ('2.31' is unquoted; 'fast' is no number at all)
        raise InvalidRequest(
            f"{where}.{key}",
            f"must be a number, got {shown(t)}",
            hint if hint and hint != "write a number" else fix,
        )
    if not math.isfinite(t) or t < 0:
        raise InvalidRequest(
            f"{where}.{key}", f"must be a finite number zero or more, got {shown(t)}", fix
        )
    return float(t)


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
