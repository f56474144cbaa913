"""``HulkTrainingJob`` manifests: the jobs to plan, as kubectl would apply them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hulk_planner.errors import InvalidRequest, one_or_all, shown
from hulk_planner.io.documents import (
    API_VERSION,
    check_kind,
    load_documents,
    mapping_field,
    number_field,
    required,
    text_field,
)
from hulk_planner.model import (
    Job,
    ModelSpec,
)
from hulk_planner.presets import preset, preset_model

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
# what to do where spec.model names no preset and spec.training lacks a batch size (the
# CRD's rule on spec says the same at kubectl apply)
NO_PRESET_TRAINING_FIX = (
    "give both spec.training.globalBatchSize and microBatchSize, or name a preset in "
    "spec.model.preset, whose batch sizes are then the defaults"
)
# spec.regrow's defaults (the CRD's): re-plan onto free servers for a 1.25x faster step,
# once every stage has run 300 s without a break
REGROW_MIN_SPEEDUP, REGROW_AFTER_S = 1.25, 300
# the operator's whole-number fields as the CRD bounds them: (least, most or None, fix)
WHOLE_OPERATOR_FIELDS: dict[str, tuple[int, int | None, str]] = {
    "masterPort": (1, 65535, "give a free TCP port for the rendezvous, or leave it out for 29500"),
    "backoffLimit": (
        0,
        None,
        "give how many failed stage pods are made again before the job fails, or leave it "
        "out for 6",
    ),
}
# the spec's fields the operator alone reads (``check_operator_fields``)
OPERATOR_FIELDS = ("suspend", "regrow", *WHOLE_OPERATOR_FIELDS)


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
    speedup = number_field(regrow, "minSpeedup", w, REGROW_MIN_SPEEDUP)
    if not (speedup > 1 and math.isfinite(speedup)):
        raise InvalidRequest(
            f"{w}.minSpeedup",
            f"must be above 1, got {speedup!r}",
            "give how many times faster a new plan must be, e.g. 1.25",
        )
    after = number_field(regrow, "afterSeconds", w, REGROW_AFTER_S)
    if not float(after).is_integer() or after < 0:  # (2.0 is the API server's 2)
        raise InvalidRequest(f"{w}.afterSeconds", f"must be a whole number >= 0, got {after!r}")
    return float(speedup), float(after)


def unknown_job_fields(doc: Mapping[str, Any], outcome: str = "ignored") -> list[str]:
    """A job manifest's fields that a HulkTrainingJob does not have, each with where it
    belongs or the field it is likely a typo of: the planner ignores them (the spec says
    so), and a user who put ``globalBatchSize`` beside ``model`` should hear it; each
    says ``outcome`` of the field."""
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
            text = f"{where}{key} is not a HulkTrainingJob field: {outcome}"
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
    check_kind(doc, "HulkTrainingJob", source)
    meta = required(doc, "metadata", "")
    # (a number was taken as the name "5", which kubectl refuses: a user trial)
    name = text_field(meta, "name", "metadata")
    spec = required(doc, "spec", "")
    model = required(spec, "model", "spec")
    if isinstance(model, str):  # (model: bert-large; a trial)
        raise InvalidRequest(
            "spec.model",
            f"must be a mapping, got the string {model!r}",
            f"write model: {{preset: {model}}} for a preset, or give the model's sizes",
        )
    if not isinstance(model, Mapping):
        raise InvalidRequest(
            "spec.model",
            f"must be a mapping, got {type(model).__name__}",
            "give model: {preset: NAME} or the model's sizes (docs/formats.md)",
        )
    training = mapping_field(spec, "training", "spec")
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
                number_field(model, "parameters", w),
                number_field(model, "layers", w),
                number_field(model, "hiddenSize", w),
                number_field(model, "sequenceLength", w),
                number_field(model, "attentionHeads", w, None),
            )
        except InvalidRequest as exc:
            if "missing" in exc.problem and not (exc.fix or "").startswith("the field is"):
                # (a misspelled size keeps the fix that names it: seqLength, a trial)
                typo = next(
                    (
                        t
                        for t in unknown_job_fields({"spec": {"model": model}})
                        if "did you mean spec.model.preset?" in t
                    ),
                    None,
                )  # (presett: before, only "parameters is required" was said, a trial; only
                # that one: another misspelled field is no fix for a missing size, a review)
                fix = (
                    typo.replace(": ignored (", ": ").rstrip(")")
                    if typo
                    else "give spec.model.preset or all four model sizes"
                )
                raise InvalidRequest(exc.field, exc.problem, fix) from None
            raise
    # The CRD's rule, said alike: with no preset, both batch sizes (before, `training: {}`
    # passed the schema and failed the job at planning; a review)
    if defaults is None and not training:
        raise InvalidRequest(
            "spec.training",
            "globalBatchSize and microBatchSize are required when spec.model names no preset",
            NO_PRESET_TRAINING_FIX,
        )
    w = "spec.training"
    try:
        gbs = number_field(training, "globalBatchSize", w, defaults[0] if defaults else ...)
        mbs = number_field(training, "microBatchSize", w, defaults[1] if defaults else ...)
    except InvalidRequest as exc:
        if (
            defaults is None
            and exc.problem.endswith("missing")
            and not (exc.fix or "").startswith("the field is")
        ):
            # (a misspelled field keeps the fix that names it)
            raise InvalidRequest(
                exc.field, "is required when spec.model names no preset", NO_PRESET_TRAINING_FIX
            ) from None
        raise
    priority = spec.get("priority", 0)
    # (10.0 is the API server's 10, as the batch sizes' whole floats are: a review)
    if isinstance(priority, float) and priority.is_integer() and abs(priority) < 2**63:
        priority = int(priority)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRequest(
            "spec.priority",
            f"must be a whole number, got {priority!r}",
            "higher plans first; e.g. priority: 10 (default 0)",
        )
    return Job(str(name), spec_model, gbs, mbs, priority)


def check_operator_fields(spec: Mapping[str, Any]) -> None:
    """The fields only the operator reads (``OPERATOR_FIELDS``: ``spec.suspend``,
    ``spec.regrow``, ``spec.masterPort``, ``spec.backoffLimit``), checked as the CRD's
    schema checks them. ``job_from_dict`` leaves them alone: ``hulk plan`` ignores
    the fields it does not need (the planning interface says so; it refused a job for them:
    a review) and notes what is wrong with them; the operator and the demo refuse them."""
    if not isinstance(spec.get("suspend", False), bool):
        raise InvalidRequest(
            "spec.suspend",
            f"must be true or false, got {spec['suspend']!r}",
            "write suspend: true or suspend: false, unquoted",
        )
    regrow_settings(spec)
    for key, (low, high, fix) in WHOLE_OPERATOR_FIELDS.items():
        value = number_field(spec, key, "spec", low)
        if not float(value).is_integer() or not low <= value <= (high or math.inf):
            within = f"from {low} to {high}" if high else f"{low} or more"
            # (before, `hulk plan` planned masterPort 99999 and backoffLimit -1 without a
            # word, and kubectl apply refused them: a trial)
            raise InvalidRequest(
                f"spec.{key}", f"must be a whole number {within}, got {shown(value)}", fix
            )


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


def load_jobs(paths: str | Path | Iterable[str | Path]) -> list[Job]:
    """The jobs of one file or of several. (A single path given as a string was read as
    the characters of its name: ``load_jobs("./k.yaml")`` said ".: cannot be read: Is a
    directory"; a trial.)"""
    files = [paths] if isinstance(paths, str | Path) else list(paths)
    return jobs_from_documents((str(path), load_documents(path)) for path in files)


def doc_source(path: str, i: int) -> str:
    """How an error names the ``i``-th document (from 0) of a file: counted from 1, as an
    editor shows them (it was ``jobs.yaml#0``; a user trial)."""
    return f"{path} (document {i + 1})"


def placed_documents(files: Iterable[tuple[str, Sequence[Any]]]) -> Iterator[tuple[str, Any]]:
    """Each document of loaded files, (file name, its documents) in order, with the name an
    error gives it: ``jobs.yaml (document 2)``; each item of a ``kind: List`` (what
    ``kubectl get -o yaml`` writes) as ``jobs.yaml (document 1, items[3])`` (before, the
    items were counted as documents: an error named a document the file did not have, a
    trial), followed by the item's name where it has one: ``items[3]: bert-large`` (a
    ``kubectl get`` of many jobs is searched by name, not counted). A None (a document or
    item skipped: another API's object) is left out, the others keeping their places.
    A List whose ``items`` is no list is refused, naming it (it was skipped as another
    API's object: its jobs were left out with nothing said); ``items: null`` is no item, as
    kubectl reads it."""
    for path, docs in files:
        for i, doc in enumerate(docs):
            if is_list(doc):
                yield from _listed(f"{path} (document {i + 1}", doc)
            elif doc is not None:
                yield doc_source(path, i), doc


def _listed(where: str, doc: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The items of a List, a List among them read as its items (as kubectl flattens
    them: ``items[2].items[0]``), named after ``where`` (``jobs.yaml (document 1``)."""
    items = doc.get("items")
    if items is not None and not isinstance(items, list):
        raise InvalidRequest(
            f"{where}): items",
            "must be a list of objects, got "
            + ("a mapping" if isinstance(items, Mapping) else shown(items)),
            "write each object as an entry of the list ('- apiVersion: ...'), or give the "
            "objects as documents separated by '---'",
        )
    for k, item in enumerate(items or []):
        if is_list(item):
            yield from _listed(f"{where}, items[{k}]", item)
        elif item is not None:
            yield f"{where}, items[{k}]{_named(item)})", item


def _named(item: Any) -> str:
    """``: NAME`` for a List item whose ``metadata.name`` is text, else nothing."""
    meta = item.get("metadata") if isinstance(item, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f": {name}" if isinstance(name, str) and name.strip() else ""


def jobs_from_documents(
    files: Iterable[tuple[str, Sequence[Any]]], *, operator: bool = False
) -> list[Job]:
    """Jobs of loaded manifests, (file name, its documents) in order (``placed_documents``):
    each error names the file and the document. ``operator``: the operator's fields are
    checked too (``check_operator_fields``), for manifests that go to the operator."""
    files = list(files)
    # (the same file however spelt: ./jobs.yaml and jobs.yaml; a user trial)
    paths = [path if path == "-" else str(Path(path).resolve()) for path, _ in files]
    twice = next((files[i][0] for i, p in enumerate(paths) if p in paths[:i]), None)
    if twice is not None:  # (before its errors: each would be told twice, a review)
        raise InvalidRequest("--jobs", f"{twice} is given twice", "give each file once")
    jobs: list[Job] = []
    errors: list[InvalidRequest] = []  # one per document, all told at once (as kubectl's)
    where: dict[str, tuple[str, Any]] = {}  # job -> (its document, its namespace)
    for source, doc in placed_documents(files):
        try:
            jobs.append(_placed_job(source, doc, where, operator))
        except InvalidRequest as exc:
            errors.append(exc)
    if errors:
        raise one_or_all(errors)
    return jobs


def _placed_job(
    source: str, doc: Any, where: dict[str, tuple[str, Any]], operator: bool = False
) -> Job:
    """The job of ``doc`` (named ``source`` in its errors), its name noted in ``where``
    once taken: a name given twice is refused."""
    try:
        job = job_from_dict(doc, source)
        if operator:
            check_operator_fields(doc["spec"])
    except InvalidRequest as exc:
        if exc.field.startswith(source):
            raise
        raise InvalidRequest(f"{source}: {exc.field}", exc.problem, exc.fix) from None
    namespace = (doc.get("metadata") or {}).get("namespace")
    if job.name in where:
        first, first_namespace = where[job.name]
        if namespace != first_namespace:  # (valid for kubectl apply: a trial)
            raise InvalidRequest(
                f"{source}: metadata.name",
                f"job {job.name!r} is given twice (also {first}), in namespaces "
                f"{namespace or '(none)'} and {first_namespace or '(none)'}",
                "a plan names jobs without their namespace: plan one namespace's jobs at a time",
            )
        raise InvalidRequest(
            f"{source}: metadata.name",
            f"job {job.name!r} is given twice (also {first})",
            "rename one: a plan names each job once",
        )
    where[job.name] = (source, namespace)
    return job


def other_api(doc: Any) -> bool:
    """Whether a document is another API's object (``apiVersion: v1``, ``apps/v1``...), as
    a bundle for ``kubectl apply -f`` holds beside its jobs; ``hulk.dev`` documents of a
    wrong kind are not (they are refused, naming the kind)."""
    version = doc.get("apiVersion") if isinstance(doc, Mapping) else None
    if isinstance(doc, Mapping) and doc.get("kind") in HULK_KINDS:
        return False  # ours with a wrong apiVersion: refused, naming it (before, skipped as
        # another API's object, the rest planned without it: a review)
    return isinstance(version, str) and bool(version) and not version.startswith("hulk.dev/")


# the kinds of hulk.dev: one of them under another apiVersion is a typo, not another API's
HULK_KINDS = frozenset(
    {"HulkTrainingJob", "HulkTrainingJobList", "ClusterTopology", "PlacementPlan", "NodeLatency"}
)


def is_list(doc: Any) -> bool:
    """Whether a document is a ``kind: List`` of objects (``kubectl get -o yaml``), or a
    ``HulkTrainingJobList`` (the API's own, ``kubectl get --raw``: it was refused as a
    wrong kind, a user trial)."""
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    return isinstance(kind, str) and (
        kind == "List" or (kind.endswith("List") and not other_api(doc))
    )


def expand_lists(docs: Sequence[Any]) -> list[Any]:
    """Documents with each ``kind: List`` replaced by its items."""
    return [d for _, d in placed_documents([("", docs)])]


def without_other_apis(docs: Sequence[Any]) -> list[Any]:
    """The documents with another API's objects, a List's items too, as None: skipped, the
    others keeping their places (``placed_documents``)."""
    return [
        {**d, "items": without_other_apis(d["items"])}
        if is_list(d) and isinstance(d.get("items"), list)
        else (None if other_api(d) and not is_list(d) else d)
        for d in docs
    ]
