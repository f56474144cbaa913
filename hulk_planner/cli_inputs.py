"""``hulk plan``'s inputs: the cluster and jobs to plan, read from files (or a live
cluster with ``--kubeconfig``), and the notes on stderr of what the plan does not apply."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from hulk_planner.cli_latency import LATENCY_FLAGS, _option, latency_settings
from hulk_planner.errors import InvalidRequest, NoFeasiblePlan, each_error, one_or_all
from hulk_planner.model import Cluster, Job, Plan
from hulk_planner.regions import region_limits


@dataclass
class _Inputs:
    cluster: Cluster
    jobs: list[Job]
    plan: Plan | None = None  # made already (--kubeconfig)
    limits: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job -> its regions
    baselines: dict[str, dict[str, float]] | None = None  # made already: job -> seconds
    why_not: dict[str, dict[str, str]] = field(default_factory=dict)  # baseline -> job -> why
    seconds: float | None = None  # how long the plan made already took (its baselines too)
    template_notes: TemplateNotes | None = None  # told once the plan is made


def _in_file_order(errors: Sequence[InvalidRequest], paths: Sequence[str]) -> InvalidRequest:
    """What to raise for the errors of several files (one file's error hid the others'):
    in the files' order, each file's own (``FILE``, ``FILE:LINE:COLUMN``) before its
    documents' (``FILE (document N)``); an unreadable file given twice told once."""

    def order(e: InvalidRequest) -> tuple[int, int, int]:
        head, _, rest = e.field.partition(" (")
        mine = (i for i, p in enumerate(paths) if head == p or head.startswith(p + ":"))
        # then by document and List item: a job's own errors and its allowedRegions' meet
        found = re.match(r"document (\d+)(?:, items\[(\d+)\])?", rest)
        at = (int(found[1]), int(found[2] or -1)) if found else (-1, -1)
        return next(mine, -1), *at

    return one_or_all(sorted({str(e): e for e in errors}.values(), key=order))


def _inputs(args: argparse.Namespace) -> _Inputs:
    """The cluster and jobs to plan, and the regions jobs are limited to (their
    ``spec.allowedRegions``); with ``--kubeconfig`` also the plan itself and the baselines'
    step times, made as the operator would make them now (its constraint groups, free
    servers, latencies)."""
    from hulk_planner import datasets, io

    documents = []
    skipped: list[str] = []  # (notes: printed once there are jobs, else the error says it)
    kinds: set[str] = set()
    errors: list[InvalidRequest] = []  # (all told at once: one file's hid the others')
    for path in args.jobs or []:
        try:
            loaded = io.load_documents(path)
            placed = list(io.placed_documents([(str(path), loaded)]))
        except InvalidRequest as exc:
            errors.extend(each_error(exc))
            continue
        for source, doc in placed:
            if not io.other_api(doc):
                continue
            policy = doc.get("kind") in ("ResourceQuota", "LimitRange")
            kinds.add(str(doc.get("kind")))
            skipped.append(  # a bundle for kubectl apply: a Namespace, a ConfigMap
                f"{source}: {doc.get('kind')} ({doc.get('apiVersion')}) "
                "is not a HulkTrainingJob: skipped"
                + (
                    " (with --kubeconfig the preview plans within the cluster's own quotas "
                    "and LimitRanges: apply it first to preview with it)"
                    if policy
                    else ""
                )
            )
        # (the others keep their places: errors count them all)
        documents.append((str(path), io.without_other_apis(loaded)))
    jobs: list[Job] = []
    try:
        jobs = io.jobs_from_documents(documents) if documents else []
    except InvalidRequest as exc:
        errors.extend(each_error(exc))
    if errors:  # (the cluster's came in a second run, once these were fixed)
        errors.extend(_cluster_errors(args, documents))
        raise _in_file_order(errors, [str(path) for path in args.jobs])
    if args.jobs and not jobs and skipped:  # (one line: it was a note, then the error)
        raise InvalidRequest(
            "--jobs",
            f"no HulkTrainingJob in {', '.join(map(str, args.jobs))}: only "
            + ", ".join(sorted(kinds)),
            "give the files that hold the jobs",
        )
    if args.kubeconfig:  # a preview of applying them: kubectl apply refuses unknown fields
        # (strict field validation; before, a note and a plan without the field, exit 0,
        # where the apply failed: a user trial)
        unknown = [
            f"{source}: job {doc['metadata']['name']}: {text}"
            for source, doc in io.placed_documents(documents)
            for text in io.unknown_job_fields(doc, "kubectl apply refuses it")
        ]
        if unknown:
            raise InvalidRequest(
                "--jobs",
                "; ".join(unknown),
                "fix the field's name or place (with kubectl apply --validate=false the API "
                "server drops it, and the job is planned without it)",
            )
    for text in skipped:
        print(f"hulk plan: note: {text}", file=sys.stderr)
    for _, doc in io.placed_documents(documents):
        for text in io.unknown_job_fields(doc):
            print(f"hulk plan: note: job {doc['metadata']['name']}: {text}", file=sys.stderr)
        if (doc.get("spec") or {}).get("regrow") is not None and args.previous:
            print(
                f"hulk plan: note: job {doc['metadata']['name']}: spec.regrow is the "
                "operator's (it grows a running job onto free servers); --previous keeps "
                "its healthy servers here",
                file=sys.stderr,
            )
        try:  # (the operator refuses them; the planner does not need them: a review)
            io.check_operator_fields(doc["spec"])
        except InvalidRequest as exc:
            print(
                f"hulk plan: note: job {doc['metadata']['name']}: {exc}: the operator "
                "refuses the job until this is fixed; planned here without it",
                file=sys.stderr,
            )
        if (doc.get("spec") or {}).get("suspend") is True:
            print(
                f"hulk plan: note: job {doc['metadata']['name']}: spec.suspend is true: the "
                "operator places it only once it is false; planned here as if it were",
                file=sys.stderr,
            )
    if args.kubeconfig:
        try:
            from hulk_operator.preview import preview_plan
        except ImportError as exc:
            raise InvalidRequest(
                "--kubeconfig",
                f"needs the operator extras ({exc.name})",
                "pip install 'hulk[operator]'",
            ) from None
        from hulk_planner.api import plan

        if args.previous:
            raise InvalidRequest(
                "--previous",
                "does not apply with --kubeconfig (the operator keeps running jobs' servers)",
                "give the cluster with --cluster FILE to re-plan a PlacementPlan",
            )
        if args.cluster:
            raise InvalidRequest(
                "--cluster",
                "does not apply with --kubeconfig (the live cluster is read)",
                "give one of them",
            )
        placed = list(io.placed_documents(documents)) if args.jobs else []
        told: list[str] = []
        try:
            pv = preview_plan(
                args.kubeconfig,
                [d for _, d in placed] if args.jobs else None,
                args.namespace,
                sources=[source for source, _ in placed],
                # (--moves: the same preview at every run, where the operator plans for a time)
                plan_fn=plan if args.moves is None else partial(plan, max_iterations=args.moves),
                planner=args.planner,
                seed=args.seed,
                time_budget_s=args.time_budget,
                baselines=args.output == "table" and not args.no_compare,
                notes=told,
                **latency_settings(args),
            )
        except NoFeasiblePlan:  # (valid input that places nothing: they may say why)
            _tell(told)
            raise
        _tell(pv.notes)
        return _Inputs(
            pv.cluster,
            pv.jobs,
            pv.plan,
            baselines=pv.baselines,
            why_not=pv.baselines_why,
            seconds=pv.seconds,
        )
    for flag in ("namespace", *LATENCY_FLAGS):
        if getattr(args, flag) is not None:
            raise InvalidRequest(
                _option(flag),
                "applies only with --kubeconfig",
                "add --kubeconfig FILE or drop it",
            )
    for _, doc in io.placed_documents(documents):
        name = (doc.get("metadata") or {}).get("name")
        for where in _cluster_only_fields(doc):
            print(
                f"hulk plan: note: job {name}: {where} is applied by the operator, not to a "
                "topology file: this plan ignores it (preview with --kubeconfig to apply it)",
                file=sys.stderr,
            )
    notes: list[str] = []
    try:  # (the notes before an error too: a field the topology file ignored may explain it)
        cluster = io.load_cluster(args.cluster, notes) if args.cluster else datasets.paper_cluster()
        if not jobs and not args.jobs:
            jobs = datasets.paper_jobs()
        if not jobs:
            raise InvalidRequest(
                "--jobs",
                f"no training jobs to plan ({', '.join(map(str, args.jobs))}: no documents)",
                "give the files that hold the HulkTrainingJobs",
            )
        limits = region_limits(documents, cluster, notes)
    finally:
        _tell(notes)
    templates = TemplateNotes([doc for _, doc in io.placed_documents(documents)])
    return _Inputs(cluster, jobs, limits=limits, template_notes=templates)


def _cluster_errors(
    args: argparse.Namespace, documents: Sequence[tuple[str, Any]]
) -> list[InvalidRequest]:
    """Beside jobs' own errors, those the cluster tells: its file's, else the jobs'
    ``spec.allowedRegions`` entries it has no region for (before, told in a second run,
    once the jobs were fixed: a laptop trial). None with ``--kubeconfig`` (the preview
    reads the cluster once the jobs are valid)."""
    from hulk_planner import datasets, io

    if args.kubeconfig:
        return []
    try:
        cluster = io.load_cluster(args.cluster, []) if args.cluster else datasets.paper_cluster()
        region_limits(documents, cluster, [])
    except InvalidRequest as exc:
        return list(each_error(exc))
    return []


def _tell(notes: Sequence[str]) -> None:
    """Notes on stderr, a line each."""
    for note in notes:
        print(f"hulk plan: note: {note}", file=sys.stderr)


def _cluster_only_fields(doc: Any) -> list[str]:
    """A job's placement constraints that only a live cluster can apply (node labels; a
    topology file has regions, so ``spec.allowedRegions`` applies to it)."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if not isinstance(spec, dict):
        return []
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    pod = pod if isinstance(pod, dict) else {}  # (no mapping: the operator's note says why)
    found = ["spec.nodeSelector"] if spec.get("nodeSelector") else []
    if pod.get("nodeSelector"):
        found.append("spec.template.spec.nodeSelector")
    affinity = pod.get("affinity")
    if isinstance(affinity, dict) and affinity.get("nodeAffinity"):
        found.append("spec.template.spec.affinity.nodeAffinity")
    return found


class TemplateNotes:
    """The operator's notes on the jobs' pod templates (``_operator_notes``), made in a
    forked process while the plan is made, then told: importing the Kubernetes client's
    pod models they check templates against made ``hulk plan --jobs
    examples/paper-jobs.yaml`` take 2.36 s, 1.53 s with the fork (``bench/plan_time.py``,
    the built-in jobs: 1.43 s). Off Linux (macOS's system libraries are
    not safe to use in a forked child), or where the child gives no answer, they are made
    here when asked."""

    def __init__(self, docs: Sequence[Mapping[str, Any]]) -> None:
        self._docs = [d for d in docs if (d.get("spec") or {}).get("template") is not None]
        self._pid: int | None = None
        self._read: int | None = None
        if self._docs and sys.platform == "linux" and hasattr(os, "fork"):
            sys.stdout.flush()
            sys.stderr.flush()
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: the notes as JSON, then out without Python's exit
                try:
                    os.close(read)
                    text = json.dumps([_operator_notes(d) for d in self._docs])
                    with os.fdopen(write, "w") as out:
                        out.write(text)
                finally:
                    os._exit(0)
            os.close(write)
            self._pid, self._read = pid, read

    def lines(self) -> list[str]:
        """The notes, a line each, in the jobs' order."""
        made: list[list[str]] | None = None
        if self._read is not None and self._pid is not None:
            with os.fdopen(self._read) as answer:
                text = answer.read()
            os.waitpid(self._pid, 0)
            self._pid = self._read = None
            try:
                made = json.loads(text)
            except ValueError:  # (the child failed: made here instead)
                made = None
        if made is None or len(made) != len(self._docs):
            made = [_operator_notes(d) for d in self._docs]
        return [
            f"job {(doc.get('metadata') or {}).get('name')}: {why}"
            for doc, whys in zip(self._docs, made, strict=True)
            for why in whys
        ]


def _operator_notes(doc: Mapping[str, Any]) -> list[str]:
    """Offline, what the operator would say of this job's pod template, which the planner
    does not read: where the template's containers set variables Hulk sets on every stage
    pod (a Warning, ``EnvReplaced``), and why it would fail the job (``InvalidSpec``: a
    string where a mapping goes, no container, a node selector that clashes with
    ``spec.nodeSelector``); the ``--kubeconfig`` preview says both itself, against the
    job applied. Only for a job that gives a template, and where the operator's extras are
    installed: the template is the operator's alone (the planning interface), so these
    are notes and the plan is still made (before, nothing said them: a user trial)."""
    template = (doc.get("spec") or {}).get("template")
    if template is None:
        return []
    try:
        from hulk_operator.entries import object_entry
        from hulk_operator.manifests import replaced_env, replaced_labels
    except ImportError:
        return []
    from hulk_planner.io.jobs import OPERATOR_FIELDS, check_operator_fields

    spec = dict(doc.get("spec") or {})
    try:
        check_operator_fields(spec)
    except InvalidRequest:  # noted apart: the template's own refusal told beside it (before,
        # the same note twice, and a bad template told only once that was fixed: a trial)
        for key in OPERATOR_FIELDS:
            spec.pop(key, None)
    error = object_entry({**doc, "spec": spec}).error
    replaced = replaced_env(template)  # (posted whether the spec is refused or not)
    notes = [] if replaced is None else [f"the operator would warn (EnvReplaced): {replaced}"]
    name = str((doc.get("metadata") or {}).get("name") or "")
    if (labels := replaced_labels(template, name)) is not None:
        notes.append(f"the operator would warn (LabelsReplaced): {labels}")
    if error is not None:
        notes.append(f"the operator would refuse this manifest (InvalidSpec): {error}")
    return notes
