"""Reading and writing the public file formats (``docs/formats.md``).

``ClusterTopology`` and ``HulkTrainingJob`` documents come in (YAML or JSON, one or many per
file); ``PlacementPlan`` goes out. Every problem raises ``InvalidRequest`` whose field is the
path inside the document, e.g. ``spec.nodes[3].gpus``, so the CLI can print one line.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hulk_planner.cost import check_stages
from hulk_planner.errors import InvalidRequest, shown
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
    check_positive,
)
from hulk_planner.presets import preset, preset_model

API_VERSION = "hulk.dev/v1alpha1"
L = TypeVar("L", Link, RegionLink)


# What to write where a server's field is missing (the fix its error names).
_SERVER_HINTS = {
    "gpuTFLOPS": "peak dense 16-bit TFLOPS of one GPU: 989 for an H100 SXM, 312 for an A100",
    "gpuMemoryGiB": "GiB of memory of one GPU: 80 for an H100 or A100-80GB",
    "gpus": "the number of GPUs in the server, e.g. 8",
}


def _require(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(doc, Mapping):
        raise InvalidRequest(where, f"must be a mapping, got {type(doc).__name__}")
    if key not in doc or doc[key] is None:
        hint = _SERVER_HINTS.get(key) if where.startswith("spec.nodes[") else None
        fix = f"add it: {hint}" if hint else "add it; docs/formats.md lists each field"
        raise InvalidRequest(f"{where}.{key}" if where else key, "is required but missing", fix)
    return doc[key]


def _number(doc: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
    if default is not ... and doc.get(key) is None:
        return default
    value = _require(doc, key, where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{where}.{key}", f"must be a number, got {value!r}")
    return value


def _text(doc: Mapping[str, Any], key: str, where: str) -> str:
    """A required string field: YAML reads ``on``, ``no``, ``true`` or ``123`` unquoted as
    booleans and numbers, which must not turn into server ``True`` or region ``{'a': 1}``."""
    value = _require(doc, key, where)
    if not isinstance(value, str):
        raise InvalidRequest(
            f"{where}.{key}",
            f"must be a string, got {shown(value)}",
            "quote it: YAML reads on, off, yes, no, true, false and numbers unquoted as "
            "other types",
        )
    return value


def _check_kind(doc: Any, kind: str, source: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise InvalidRequest(source, f"expected a {kind} document, got {type(doc).__name__}")
    if doc.get("kind") != kind:
        raise InvalidRequest(f"{source}: kind", _found(doc, "kind"), f"expected {kind!r}")
    if doc.get("apiVersion") != API_VERSION:
        raise InvalidRequest(
            f"{source}: apiVersion", _found(doc, "apiVersion"), f"use {API_VERSION!r}"
        )
    return doc


def _found(doc: Mapping[str, Any], key: str) -> str:
    return f"is {doc[key]!r}" if doc.get(key) is not None else "is missing"


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader, with numbers as JSON and YAML 1.2 write them: YAML 1.1 reads
    ``7e9``, ``1e-05`` or ``1.0e308`` (an exponent without a dot or a sign) as strings; and a
    key given twice in one mapping is an error, as in kubectl (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # ``<<: *anchor``: its keys may be overridden here
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key!r} twice in one mapping",
                        key_node.start_mark,
                    )  # fmt: skip
                if isinstance(key, Hashable):
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_documents(path: str | Path) -> list[Any]:
    """All YAML/JSON documents of a file (JSON is YAML), skipping empty ones."""
    p = Path(path)
    try:
        text = sys.stdin.read() if str(path) == "-" else p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(str(p), f"cannot be read: {exc.strerror}", "check the path") from None
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            str(p),
            f"is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
            "save it as UTF-8",
        ) from None
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise InvalidRequest(where, "is not valid YAML or JSON", str(exc).splitlines()[0]) from None


def _list(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """An optional list field (absent or null is empty)."""
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        name = f"{where}.{key}" if where else key
        raise InvalidRequest(name, f"must be a list, got {type(value).__name__}")
    return value


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """An optional mapping field (absent or null is empty)."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        name = f"{where}.{key}" if where else key
        raise InvalidRequest(name, f"must be a mapping, got {type(value).__name__}")
    return value


def _links(spec: Mapping[str, Any], key: str, kind: type[L]) -> list[L]:
    """The entries of ``spec.links`` or ``spec.regionLinks`` (same four fields)."""
    out = []
    for i, lk in enumerate(_list(spec, key, "spec")):
        w = f"spec.{key}[{i}]"
        out.append(
            kind(
                _text(lk, "a", w),
                _text(lk, "b", w),
                _number(lk, "latencyMs", w),
                _number(lk, "bandwidthGbps", w, None),
            )
        )
    return out


def cluster_from_dict(doc: Mapping[str, Any], source: str = "ClusterTopology") -> Cluster:
    _check_kind(doc, "ClusterTopology", source)
    spec = _require(doc, "spec", "")
    nodes = _require(spec, "nodes", "spec")
    if not isinstance(nodes, list):
        raise InvalidRequest("spec.nodes", "must be a list of servers")
    servers = []
    for i, n in enumerate(nodes):
        w = f"spec.nodes[{i}]"
        if _text(n, "name", w) == "":  # (told as "name", no path: a user trial)
            raise InvalidRequest(
                f"{w}.name", "is empty", "give each server a name (on a cluster, its node name)"
            )
        servers.append(
            Server(
                name=_text(n, "name", w),
                region=_text(n, "region", w).strip(),
                gpus=_number(n, "gpus", w),
                gpu_memory_gib=_number(n, "gpuMemoryGiB", w),
                gpu_tflops=_number(n, "gpuTFLOPS", w),
                gpu_product=n.get("gpuProduct"),
                compute_capability=n.get("computeCapability"),
                zone=n.get("zone"),
            )
        )
    links = tuple(_links(spec, "links", Link))
    region_links = tuple(_links(spec, "regionLinks", RegionLink))
    regions = {s.region for s in servers}
    pairs: set[frozenset[str]] = set()
    for i, rl in enumerate(region_links):
        for end in (rl.a, rl.b):
            if end not in regions:
                raise InvalidRequest(
                    f"spec.regionLinks[{i}]",
                    f"names unknown region {end!r}",
                    f"use a region of spec.nodes: {', '.join(sorted(regions))}",
                )
        if frozenset((rl.a, rl.b)) in pairs:
            raise InvalidRequest(
                f"spec.regionLinks[{i}]", f"{rl.a}-{rl.b} is listed twice", "keep one"
            )
        pairs.add(frozenset((rl.a, rl.b)))
    name = _mapping(doc, "metadata", "").get("name") or "cluster"
    return Cluster(str(name), tuple(servers), links, region_links)


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    nodes = []
    for s in cluster.servers:
        node: dict[str, Any] = {
            "name": s.name,
            "region": s.region,
            "gpus": s.gpus,
            "gpuMemoryGiB": s.gpu_memory_gib,
            "gpuTFLOPS": s.gpu_tflops,
        }
        for key, value in (
            ("gpuProduct", s.gpu_product),
            ("computeCapability", s.compute_capability),
            ("zone", s.zone),
        ):
            if value is not None:
                node[key] = value
        nodes.append(node)

    def link(lk: Link | RegionLink) -> dict[str, Any]:
        out: dict[str, Any] = {"a": lk.a, "b": lk.b, "latencyMs": lk.latency_ms}
        if lk.bandwidth_gbps is not None:
            out["bandwidthGbps"] = lk.bandwidth_gbps
        return out

    spec: dict[str, Any] = {"nodes": nodes, "links": [link(lk) for lk in cluster.links]}
    if cluster.region_links:
        spec["regionLinks"] = [link(lk) for lk in cluster.region_links]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTopology",
        "metadata": {"name": cluster.name},
        "spec": spec,
    }


def load_cluster(path: str | Path, notes: list[str] | None = None) -> Cluster:
    """The one ClusterTopology of a file; ``notes`` gets a line for each field it does not
    know (ignored, as a typo of an optional field would be: ``regionlinks``)."""
    docs = load_documents(path)
    if len(docs) != 1:
        raise InvalidRequest(str(path), f"holds {len(docs)} documents", "give one ClusterTopology")
    try:
        cluster = cluster_from_dict(docs[0], str(path))
        if notes is not None:
            notes += [f"{path}: {text}" for text in unknown_topology_fields(docs[0])]
        return cluster
    except InvalidRequest as exc:
        if exc.field.startswith(str(path)):
            raise
        raise InvalidRequest(f"{path}: {exc.field}", exc.problem, exc.fix) from None


# The ClusterTopology fields (docs/formats.md); "[]" marks each entry of a list.
TOPOLOGY_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("apiVersion", "kind", "metadata", "spec"),
    "spec": ("nodes", "links", "regionLinks"),
    "spec.nodes[]": (
        "name",
        "region",
        "gpus",
        "gpuMemoryGiB",
        "gpuTFLOPS",
        "gpuProduct",
        "computeCapability",
        "zone",
    ),
    "spec.links[]": ("a", "b", "latencyMs", "bandwidthGbps"),
    "spec.regionLinks[]": ("a", "b", "latencyMs", "bandwidthGbps"),
}


def unknown_topology_fields(doc: Mapping[str, Any]) -> list[str]:
    """A topology's fields that a ClusterTopology does not have, each with the field it is
    likely a typo of (one line per field name and place, however many entries repeat it)."""
    import difflib

    out: dict[str, str] = {}
    for section, known in TOPOLOGY_FIELDS.items():
        path = section.removesuffix("[]")
        node: Any = doc
        for part in filter(None, path.split(".")):
            node = node.get(part) if isinstance(node, Mapping) else None
        entries = node if section.endswith("[]") and isinstance(node, list) else [node]
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            for key in entry:
                where = f"{section}." if section else ""
                if key in known or f"{where}{key}" in out:
                    continue
                text = f"{where}{key} is not a ClusterTopology field: ignored"
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.7)
                if close:
                    text += f" (did you mean {where}{close[0]}?)"
                out[f"{where}{key}"] = text
    return list(out.values())


# The HulkTrainingJob fields (the CRD's schema, crds/hulktrainingjobs.hulk.dev.yaml; a test
# keeps the two alike): `hulk plan` reads the manifests kubectl would apply, where the API
# server refuses any other field.
JOB_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("apiVersion", "kind", "metadata", "spec", "status"),
    "spec": (
        "model",
        "training",
        "template",
        "allowedRegions",
        "nodeSelector",
        "priority",
        "backoffLimit",
        "masterPort",
        "suspend",
        "regrow",
    ),
    "spec.model": (
        "preset",
        "parameters",
        "layers",
        "hiddenSize",
        "sequenceLength",
        "attentionHeads",
    ),
    "spec.training": ("globalBatchSize", "microBatchSize"),
    "spec.regrow": ("minSpeedup", "afterSeconds"),
}
# spec.regrow's defaults (the CRD's): re-plan onto free servers for a 1.25x faster step,
# once every stage has run 300 s without a break
REGROW_MIN_SPEEDUP, REGROW_AFTER_S = 1.25, 300


def regrow_settings(spec: Mapping[str, Any]) -> tuple[float, float] | None:
    """``spec.regrow`` as (minSpeedup, afterSeconds), None where it is absent; checked as
    the CRD's schema checks it."""
    regrow = spec.get("regrow")
    if regrow is None:
        return None
    if not isinstance(regrow, Mapping):
        raise InvalidRequest(
            "spec.regrow", f"must be a mapping, got {regrow!r}", "e.g. regrow: {minSpeedup: 1.25}"
        )
    w = "spec.regrow"
    speedup = _number(regrow, "minSpeedup", w, REGROW_MIN_SPEEDUP)
    if not (speedup > 1 and math.isfinite(speedup)):
        raise InvalidRequest(
            f"{w}.minSpeedup",
            f"must be above 1, got {speedup!r}",
            "give how many times faster a new plan must be, e.g. 1.25",
        )
    after = _number(regrow, "afterSeconds", w, REGROW_AFTER_S)
    if not float(after).is_integer() or after < 0:  # (2.0 is the API server's 2)
        raise InvalidRequest(f"{w}.afterSeconds", f"must be a whole number >= 0, got {after!r}")
    return float(speedup), float(after)


def unknown_job_fields(doc: Mapping[str, Any]) -> list[str]:
    """A job manifest's fields that a HulkTrainingJob does not have, each with where it
    belongs or the field it is likely a typo of: the planner ignores them (the spec says
    so), and a user who put ``globalBatchSize`` beside ``model`` should hear it."""
    import difflib

    out: list[str] = []
    for section, known in JOB_FIELDS.items():
        node: Any = doc
        for part in filter(None, section.split(".")):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        for key in node:
            if key in known:
                continue
            where = f"{section}." if section else ""
            text = f"{where}{key} is not a HulkTrainingJob field: ignored"
            home = [s for s, fields in JOB_FIELDS.items() if key in fields]
            close = difflib.get_close_matches(str(key), known, n=1)
            if home:
                text += f" (it belongs under {home[0] or 'the top level'})"
            elif close:
                text += f" (did you mean {where}{close[0]}?)"
            out.append(text)
    return out


def job_from_dict(doc: Mapping[str, Any], source: str = "HulkTrainingJob") -> Job:
    """A job from a ``HulkTrainingJob`` manifest (fields the planner does not need are ignored)."""
    _check_kind(doc, "HulkTrainingJob", source)
    meta = _require(doc, "metadata", "")
    name = _require(meta, "name", "metadata")
    spec = _require(doc, "spec", "")
    model = _require(spec, "model", "spec")
    if not isinstance(model, Mapping):
        raise InvalidRequest("spec.model", "must be a mapping")
    training = _mapping(spec, "training", "spec")
    defaults: tuple[int, int] | None = None
    if model.get("preset"):
        base = preset_model(str(model["preset"]))
        p = preset(str(model["preset"]))
        defaults = (p.global_batch_size, p.micro_batch_size)
        overrides = {
            k: model[v]
            for k, v in (
                ("parameters", "parameters"),
                ("layers", "layers"),
                ("hidden_size", "hiddenSize"),
                ("sequence_length", "sequenceLength"),
                ("attention_heads", "attentionHeads"),
            )
            if model.get(v) is not None
        }
        spec_model = ModelSpec(
            overrides.get("parameters", base.parameters),
            overrides.get("layers", base.layers),
            overrides.get("hidden_size", base.hidden_size),
            overrides.get("sequence_length", base.sequence_length),
            overrides.get("attention_heads", base.attention_heads),
            base.preset,
        )
    else:
        w = "spec.model"
        try:
            spec_model = ModelSpec(
                _number(model, "parameters", w),
                _number(model, "layers", w),
                _number(model, "hiddenSize", w),
                _number(model, "sequenceLength", w),
                _number(model, "attentionHeads", w, None),
            )
        except InvalidRequest as exc:
            if "missing" in exc.problem:
                raise InvalidRequest(
                    exc.field, exc.problem, "give spec.model.preset or all four model sizes"
                ) from None
            raise
    if defaults is None and not training:
        raise InvalidRequest(
            "spec.training",
            "is required when no preset is named",
            "give globalBatchSize and microBatchSize",
        )
    w = "spec.training"
    gbs = _number(training, "globalBatchSize", w, defaults[0] if defaults else ...)
    mbs = _number(training, "microBatchSize", w, defaults[1] if defaults else ...)
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRequest("spec.priority", f"must be a whole number, got {priority!r}")
    if not isinstance(spec.get("suspend", False), bool):
        raise InvalidRequest("spec.suspend", f"must be true or false, got {spec['suspend']!r}")
    regrow_settings(spec)
    return Job(str(name), spec_model, gbs, mbs, priority)


def job_to_dict(job: Job) -> dict[str, Any]:
    m = job.model
    model: dict[str, Any] = {"preset": m.preset} if m.preset else {}
    model.update(
        {
            "parameters": m.parameters,
            "layers": m.layers,
            "hiddenSize": m.hidden_size,
            "sequenceLength": m.sequence_length,
        }
    )
    if m.attention_heads:
        model["attentionHeads"] = m.attention_heads
    spec: dict[str, Any] = {
        "model": model,
        "training": {
            "globalBatchSize": job.global_batch_size,
            "microBatchSize": job.micro_batch_size,
        },
    }
    if job.priority:
        spec["priority"] = job.priority
    return {
        "apiVersion": API_VERSION,
        "kind": "HulkTrainingJob",
        "metadata": {"name": job.name},
        "spec": spec,
    }


def load_jobs(paths: Iterable[str | Path]) -> list[Job]:
    return jobs_from_documents((str(path), load_documents(path)) for path in paths)


def doc_source(path: str, i: int) -> str:
    """How an error names the ``i``-th document (from 0) of a file: counted from 1, as an
    editor shows them (it was ``jobs.yaml#0``; a user trial)."""
    return f"{path} (document {i + 1})"


def jobs_from_documents(files: Iterable[tuple[str, Sequence[Any]]]) -> list[Job]:
    """Jobs of loaded manifests, (file name, its documents) in order: each error names the
    file and the document (a None stands for one skipped: the others keep their places)."""
    jobs: list[Job] = []
    where: dict[str, str] = {}
    for path, docs in files:
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            source = doc_source(path, i)
            try:
                job = job_from_dict(doc, source)
            except InvalidRequest as exc:
                if exc.field.startswith(source):
                    raise
                raise InvalidRequest(f"{source}: {exc.field}", exc.problem, exc.fix) from None
            if job.name in where:
                first = where[job.name]
                if first == doc_source(path, i):  # (the same file given twice)
                    raise InvalidRequest("--jobs", f"{path} is given twice", "give each file once")
                raise InvalidRequest(
                    f"{source}: metadata.name",
                    f"job {job.name!r} is given twice (also {first})",
                    "rename one: a plan names each job once",
                )
            where[job.name] = source
            jobs.append(job)
    return jobs


def other_api(doc: Any) -> bool:
    """Whether a document is another API's object (``apiVersion: v1``, ``apps/v1``...), as
    a bundle for ``kubectl apply -f`` holds beside its jobs; ``hulk.dev`` documents of a
    wrong kind are not (they are refused, naming the kind)."""
    version = doc.get("apiVersion") if isinstance(doc, Mapping) else None
    return isinstance(version, str) and bool(version) and not version.startswith("hulk.dev/")


def expand_lists(docs: Sequence[Any]) -> list[Any]:
    """Documents with each ``kind: List`` (what ``kubectl get -o yaml`` writes) replaced by
    its items."""
    out: list[Any] = []
    for d in docs:
        if isinstance(d, Mapping) and d.get("kind") == "List" and isinstance(d.get("items"), list):
            out.extend(d["items"])
        else:
            out.append(d)
    return out


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
    _check_kind(doc, "PlacementPlan", source)
    try:
        return _plan_from_dict(doc)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{source}: {exc.field}", exc.problem, exc.fix) from None
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise InvalidRequest(source, "is not a valid PlacementPlan", str(exc)) from None


def _plan_from_dict(doc: Mapping[str, Any]) -> Plan:
    jobs: list[JobPlan] = []
    for i, j in enumerate(_list(doc, "jobs", "")):
        w = f"jobs[{i}]"
        name = str(_require(j, "name", w))
        if any(jp.name == name for jp in jobs):
            raise InvalidRequest(f"{w}.name", f"{name!r} is listed twice", "keep one")
        raw = _require(j, "stages", w)
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest(f"{w}.stages", "must be a non-empty list of stages")
        stages: list[Stage] = []
        for k, s in enumerate(raw):
            at = f"{w}.stages[{k}]"
            layers = _require(s, "layers", at)
            if not (
                isinstance(layers, list)
                and len(layers) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in layers)
            ):
                raise InvalidRequest(f"{at}.layers", f"must be [start, end], got {layers!r}")
            nodes = _require(s, "nodes", at)
            if (
                not isinstance(nodes, list)
                or not nodes
                or not all(isinstance(n, str) for n in nodes)
            ):
                raise InvalidRequest(
                    f"{at}.nodes", f"must be a non-empty list of server names, got {nodes!r}"
                )
            try:
                stages.append(Stage(tuple(layers), tuple(nodes), s.get("parallelism", "data")))  # type: ignore[arg-type]
            except InvalidRequest as exc:
                raise InvalidRequest(
                    f"{at}.{exc.field.split('.')[-1]}", exc.problem, exc.fix
                ) from None
        t = j.get("predictedIterationSeconds")
        micro = _number(j, "microBatches", w)
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
        Unplaced(str(_require(u, "name", f"unplaced[{i}]")), str(u.get("reason") or ""))
        for i, u in enumerate(_list(doc, "unplaced", ""))
    )
    notes = tuple(str(n) for n in doc.get("notes") or ())
    plan = Plan(str(doc.get("planner", "unknown")), tuple(jobs), unplaced, notes)
    check_stages(plan, lambda i, jp: f"jobs[{i}]")
    return plan


class _PlanDumper(yaml.SafeDumper):
    """Short lists of scalars (a stage's ``layers`` and ``nodes``) on one line, as the
    formats' examples write them."""

    def represent_list(self, data: Any) -> Any:  # type: ignore[override]
        flow = all(isinstance(x, str | int | float) for x in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_PlanDumper.add_representer(list, _PlanDumper.represent_list)


def dump_plan(plan: Plan, fmt: str = "json") -> str:
    data = plan_to_dict(plan)
    if fmt == "yaml":
        return yaml.dump(data, Dumper=_PlanDumper, sort_keys=False, width=100, allow_unicode=True)
    return json.dumps(data, indent=2, ensure_ascii=False)  # (names as written: not \\uXXXX)
