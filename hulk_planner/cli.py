"""``hulk plan``: preview where training jobs would run, and how fast.

With no arguments it plans the Hulk paper's four jobs on the paper's 47-server cluster and
compares the plan with baselines A, B and C. Bad input prints one line naming the field and
the fix, and exits with code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

from hulk_planner.errors import (
    HulkError,
    InvalidRequest,
    NoFeasiblePlan,
    NothingToPlan,
    each_error,
    one_or_all,
)
from hulk_planner.model import Cluster, Job, Plan, Unplaced, check_positive
from hulk_planner.regions import plan_in_regions, region_limits, tiered

BASELINES = ("baseline-a", "baseline-b", "baseline-c")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="ClusterTopology YAML/JSON, - for standard input (default: the Hulk paper's "
        "47-server cluster)",
    )
    parser.add_argument(
        "--jobs",
        metavar="FILE",
        nargs="+",
        action="extend",
        default=[],
        help="HulkTrainingJob manifests, - for standard input (default: the paper's four "
        "jobs); other APIs' objects in a bundle (a Namespace, a ConfigMap) are skipped, "
        "other hulk.dev kinds are an error",
    )
    parser.add_argument(
        "--planner",
        default="hulk",
        help="hulk (default; also called gnn), search, baseline-a, baseline-b, baseline-c",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (with the baselines A/B/C beside it), or the PlacementPlan as json or "
        "yaml (docs/formats.md); notes go to stderr",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw the cluster coloured by job")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the hulk and search planners' randomised search (default 0); their "
        "search stops after a wall-clock time, so add --moves for the same plan every run",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="search time for the hulk and search planners (default: hulk 1 s plus 1 s "
        "per 1,000 servers, at most 2 s, after its GNN; search 10 s)",
    )
    parser.add_argument(
        "--moves",
        type=int,
        metavar="N",
        help="bound the hulk and search planners' search by N moves (at most 10,000,000) "
        "instead of time: the same --seed and --moves give the same plan on any machine",
    )
    parser.add_argument(
        "--previous",
        metavar="FILE",
        help="the PlacementPlan now running: keep healthy servers where they are",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="plan a live cluster's pending jobs (or --jobs) as the operator would now: its "
        "constraints, free servers and measured links (read only)",
    )
    parser.add_argument("-n", "--namespace", help="with --kubeconfig: only this namespace's jobs")
    add_latency_arguments(parser, "with --kubeconfig: ")
    parser.add_argument(
        "--weights",
        metavar="FILE",
        help="GNN weights of `hulk train` for the hulk planner (default: $HULK_GNN_WEIGHTS, "
        "else the shipped ones)",
    )
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="table output: skip the comparison with baselines A/B/C",
    )


@dataclass
class _Inputs:
    cluster: Cluster
    jobs: list[Job]
    plan: Plan | None = None  # made already (--kubeconfig)
    limits: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job -> its regions
    baselines: dict[str, dict[str, float]] | None = None  # made already: job -> seconds
    why_not: dict[str, dict[str, str]] = field(default_factory=dict)  # baseline -> job -> why


def _in_file_order(errors: Sequence[InvalidRequest], paths: Sequence[str]) -> InvalidRequest:
    """What to raise for the errors of several files (one file's error hid the others'):
    in the files' order, each file's own (``FILE``, ``FILE:LINE:COLUMN``) before its
    documents' (``FILE (document N)``); an unreadable file given twice told once."""

    def order(e: InvalidRequest) -> int:
        head = e.field.partition(" (")[0]
        mine = (i for i, p in enumerate(paths) if head == p or head.startswith(p + ":"))
        return next(mine, -1)

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
    if errors:
        raise _in_file_order(errors, [str(path) for path in args.jobs])
    if args.jobs and not jobs and skipped:  # (one line: it was a note, then the error)
        raise InvalidRequest(
            "--jobs",
            f"no HulkTrainingJob in {', '.join(map(str, args.jobs))}: only "
            + ", ".join(sorted(kinds)),
            "give the files that hold the jobs",
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
        for why in [] if args.kubeconfig else _operator_notes(doc):  # (else the preview's)
            print(f"hulk plan: note: job {doc['metadata']['name']}: {why}", file=sys.stderr)
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
            pv.cluster, pv.jobs, pv.plan, baselines=pv.baselines, why_not=pv.baselines_why
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
            raise InvalidRequest("--jobs", "no training jobs to plan", "give HulkTrainingJob files")
        limits = region_limits(documents, cluster, notes)
    finally:
        _tell(notes)
    return _Inputs(cluster, jobs, limits=limits)


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


def _too_big(cluster: Cluster, jobs: Sequence[Job], planner: str) -> list[Unplaced]:
    """Jobs that need more GPU memory than the whole cluster has, or one of whose layers
    no server holds (but in baseline C's tensor-parallel stages), and why."""
    from hulk_planner.cost import too_big

    per_layer = planner != "baseline-c"
    why = {job.name: too_big(job, cluster.servers, per_layer=per_layer) for job in jobs}
    return [Unplaced(name, text) for name, text in why.items() if text is not None]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _regions(cluster: Cluster, nodes: Sequence[str]) -> str:
    counts = Counter(cluster.server(n).region for n in nodes)
    return ", ".join(f"{c} in {r}" for r, c in counts.most_common())


def _fmt(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    if math.isinf(seconds):
        return "inf"
    return f"{seconds:,.2f}s" if seconds < 1e5 else f"{seconds:.2e}s"


def render_table(
    cluster: Cluster,
    plan: Plan,
    compare: dict[str, dict[str, float] | str] | None,
    unlinked: int = 0,
    label: str | None = None,
    why_not: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """The plan as text; ``compare``: each baseline's predicted step time per job it
    places (or why it places none); ``unlinked``: server pairs that cannot communicate;
    ``label``: what the cluster shown is (its name by default)."""
    n = len(cluster.servers)
    shape = f"{_count(n, 'server')}, {_count(len(cluster.regions), 'region')}"
    if unlinked:
        verb = "has" if unlinked == 1 else "have"
        shape += f"; {unlinked:,} of its {n * (n - 1) // 2:,} server pairs {verb} no link"
    lines = [f"planner: {plan.planner}    cluster: {label or cluster.name} ({shape})", ""]
    for jp in plan.jobs:
        shape = f"{_count(len(jp.stages), 'stage')} x {_count(jp.replicas, 'replica')}"
        lines.append(
            f"{jp.name}: {shape}, {jp.micro_batches} micro-batches, "
            f"predicted step {_fmt(jp.predicted_iteration_seconds)}"
        )
        lines.append(f"  servers: {_regions(cluster, jp.nodes)}")
        for k, st in enumerate(jp.stages):
            where = ", ".join(st.nodes)
            lines.append(
                f"  stage {k:>2} layers [{st.layers[0]:>3},{st.layers[1]:>3})  "
                f"{st.parallelism:<6} {where}"
            )
    for u in plan.unplaced:
        lines.append(f"{u.name}: NOT PLACED: {u.reason}")
    if compare:
        lines += ["", "predicted step time per job (ratio = baseline / " + plan.planner + ")"]
        names = [jp.name for jp in plan.jobs] + [u.name for u in plan.unplaced]
        cols = [plan.planner, *compare]
        lines.append(f"{'job':<16}" + "".join(f"{c:>24}" for c in cols))
        ratios: dict[str, list[float]] = {c: [] for c in compare}
        for name in names:
            mine = plan.job(name)
            row = f"{name:<16}{_fmt(mine.predicted_iteration_seconds if mine else None):>24}"
            for c, other in compare.items():
                theirs = other.get(name) if isinstance(other, dict) else None
                if theirs is None:
                    row += f"{'not placed':>24}"
                    continue
                cell = _fmt(theirs)
                if mine and mine.predicted_iteration_seconds > 0:
                    r = theirs / mine.predicted_iteration_seconds
                    ratios[c].append(r)
                    cell += f" ({_ratio(r)})"
                row += f"{cell:>24}"
            lines.append(row)
        row = f"{'geometric mean':<16}{'1.00x' if plan.jobs else '-':>24}"  # (none placed)
        for c in compare:
            rs = ratios[c]
            g = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else math.nan
            cell = _ratio(g) if rs else "-"
            if rs and len(rs) < len(names):
                cell += f" ({len(rs)} of {len(names)} jobs)"
            row += f"{cell:>24}"
        lines.append(row)
        for c, other in compare.items():  # why a baseline placed nothing, or not a job
            if isinstance(other, str):
                lines.append(f"{c}: {other}")
                continue
            by_reason: dict[str, list[str]] = {}
            for job, reason in (why_not or {}).get(c, {}).items():
                by_reason.setdefault(reason, []).append(job)
            for reason, jobs in by_reason.items():
                lines.append(f"{c} does not place {', '.join(jobs)}: {reason}")
    return "\n".join(lines)


def _kept_notes(
    previous: Plan | None, result: Plan, present: set[str], afresh: Collection[str] = ()
) -> list[str]:
    """What each job keeps of its previous plan: servers kept, released and added, stages
    unchanged (before, a user compared the two plans by eye; a trial). Not for ``afresh``
    jobs, whose previous plan a re-plan does not keep (noted so already)."""
    out = []
    for jp in result.jobs:
        old = previous.job(jp.name) if previous else None
        if old is None or jp.name in afresh:
            continue
        kept = [n for n in old.nodes if n in jp.nodes]
        released = [n for n in old.nodes if n not in jp.nodes and n in present]
        lost = [n for n in old.nodes if n not in present]
        added = [n for n in jp.nodes if n not in old.nodes]
        same = sum(1 for st in jp.stages if st in old.stages)
        line = f"job {jp.name}: kept {len(kept)} of its {len(old.nodes)} server(s)"
        if lost:
            line += f", lost {_listed(lost)}"
        if released:
            line += f", released {_listed(released)}"
        if added:
            line += f", added {_listed(added)}"
        out.append(f"{line}; {same} of {len(jp.stages)} stage(s) as they were")
    return out


def _listed(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _ratio(r: float) -> str:
    """A step-time ratio: 2 decimals; 2 significant digits below 0.01, in exponent form
    below 0.001 and past 10,000 (before, a plan 700 times faster than --planner's read
    0.00x)."""
    if r >= 1e4 or r < 1e-3:
        return f"{r:.1e}x"
    return f"{r:,.2f}x" if r >= 0.01 else f"{r:.2g}x"


NOTHING_PLACED = 3  # exit code: valid input, but no job fits (2: bad input)
MAX_MOVES = 10**7  # --moves above this can only be a typo (hours of search)


def _print_plan(plan: Plan, fmt: str) -> None:
    """The plan on stdout as ``-o json`` or ``-o yaml`` writes it."""
    from hulk_planner import io

    print(io.dump_plan(plan, fmt), end="" if fmt == "yaml" else "\n")


def run(args: argparse.Namespace) -> int:
    # "gnn" is another name for hulk: every plan written says "hulk" (before, the plans of
    # jobs with allowedRegions or priorities, and empty ones, said "gnn": a review)
    args.planner = "hulk" if args.planner == "gnn" else args.planner
    try:
        return _run(args)
    except NoFeasiblePlan as exc:
        print(f"hulk plan: no job placed: {exc}", file=sys.stderr)
        if args.output in ("json", "yaml"):  # the plan still, every job under unplaced
            # (before: nothing, where no server was free at all)
            _print_plan(Plan(args.planner, (), exc.unplaced), args.output)
        else:  # the table's lines for them (before: no table at all)
            for u in exc.unplaced:
                print(f"{u.name}: NOT PLACED: {u.reason}")
        return NOTHING_PLACED
    except NothingToPlan as exc:  # (a live cluster whose jobs all run: no error)
        print(f"hulk plan: nothing to plan: {exc}", file=sys.stderr)
        if args.output in ("json", "yaml"):  # an empty plan, for a script that reads it
            _print_plan(Plan(args.planner), args.output)
        return 0
    except HulkError as exc:
        for each in each_error(exc):  # (a line per job of the files given that is wrong)
            print(f"hulk plan: error: {each}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from hulk_planner import io
    from hulk_planner.api import ADAPTS_TO_PREVIOUS, PLANNERS, plan, unkept
    from hulk_planner.cost import CostModel, batch_note
    from hulk_planner.topology import unlinked_pairs

    if args.planner not in PLANNERS:
        raise InvalidRequest(
            "--planner", f"unknown planner {args.planner!r}", f"use one of {', '.join(PLANNERS)}"
        )
    if args.planner.startswith("baseline-"):  # (they search nothing)
        given_flags = (("--time-budget", args.time_budget), ("--moves", args.moves),
                       ("--seed", args.seed))  # fmt: skip
        for flag, value in given_flags:
            if value is not None:
                raise InvalidRequest(
                    flag, f"applies to the hulk and search planners, not {args.planner}", "drop it"
                )
    if args.seed is not None and not 0 <= args.seed < 2**32:  # (as `hulk train`'s)
        raise InvalidRequest(
            "--seed", f"must be 0 to 2**32 - 1, got {args.seed}", "give a whole number in it"
        )
    args.seed = args.seed or 0
    if args.moves is not None:
        # (a move takes about 1 ms on a small cluster: 10**7 is hours; 10**20 ran for ever)
        check_positive("--moves", args.moves, integer=True, at_most=MAX_MOVES)
        if args.time_budget is not None:  # (it was ignored: the moves bound the search)
            raise InvalidRequest(
                "--time-budget",
                "does not apply with --moves (the search then stops after N moves, not a time)",
                "give one of them",
            )
    if args.cluster == "-" and "-" in args.jobs:  # (the jobs took it all: a review)
        raise InvalidRequest(
            "--cluster", "and --jobs both read standard input (-)", "give one of them a file"
        )
    if args.plot is not None:
        _check_plot_path(args.plot)
    _use_weights(args)
    given = _inputs(args)
    cluster, jobs, result, limits = given.cluster, given.jobs, given.plan, given.limits

    @cache  # built at the first plan on the whole cluster (none for a --kubeconfig preview)
    def whole_cluster_cost() -> CostModel:
        return CostModel(cluster)

    def planned(name: str, **options: Any) -> Plan:
        if tiered(jobs, limits):  # each group on its own servers, with its own cost model
            return plan_in_regions(cluster, jobs, limits, name, **options)
        return plan(cluster, jobs, name, cost=whole_cluster_cost(), **options)

    previous: Plan | None = None
    afresh: set[str] = set()  # previous jobs a re-plan does not keep (noted)
    if result is None:
        too_big = _too_big(cluster, jobs, args.planner)
        jobs = [j for j in jobs if j.name not in {u.name for u in too_big}]
        if args.previous:
            if args.planner not in ADAPTS_TO_PREVIOUS:
                raise InvalidRequest(
                    "--previous",
                    f"{args.planner} does not adapt to a previous plan (it plans afresh)",
                    f"use --planner {' or '.join(sorted(ADAPTS_TO_PREVIOUS - {'gnn'}))}",
                )
            previous = io.load_plan(args.previous, "--previous")
            asked = {j.name: j for j in jobs}
            nowhere = {u.name for u in too_big}
            for old in previous.jobs:
                lost = unkept(old, asked.get(old.name))
                if old.name in nowhere:  # (asked for: "not among the jobs planned" misled)
                    lost = "fits nowhere on this cluster: its servers are free for the others"
                if lost is not None:
                    print(f"hulk plan: note: --previous: job {old.name} {lost}", file=sys.stderr)
                    afresh.add(old.name)
            gone = sorted({n for jp in previous.jobs for n in jp.nodes} - set(cluster.index))
            if gone:
                print(
                    f"hulk plan: note: --previous: {len(gone)} server(s) of the previous plan "
                    f"are not in this cluster ({', '.join(gone[:3])}"
                    f"{', ...' if len(gone) > 3 else ''}): taken as lost and replaced",
                    file=sys.stderr,
                )
        try:
            result = (
                planned(
                    args.planner,
                    seed=args.seed,
                    time_budget_s=args.time_budget,
                    max_iterations=args.moves,
                    previous=previous,
                )
                if jobs
                else Plan(args.planner)
            )
        except NoFeasiblePlan as exc:  # listed below as unplaced, as beside placed jobs
            why = exc.unplaced or tuple(Unplaced(j.name, exc.reason) for j in jobs)
            result = Plan(args.planner, (), tuple(why))
        result = replace(result, unplaced=result.unplaced + tuple(too_big))
    for line in _kept_notes(previous, result, set(cluster.index), afresh):
        print(f"hulk plan: note: --previous: {line}", file=sys.stderr)
    by_name = {j.name: j for j in jobs}
    for jp in result.jobs:
        note = batch_note(by_name[jp.name], jp) if jp.name in by_name else None
        if note:
            print(f"hulk plan: note: job {jp.name}: {note}", file=sys.stderr)
    code = 0 if result.jobs else NOTHING_PLACED
    if not result.jobs:
        print(f"hulk plan: no job placed ({len(result.unplaced)} unplaced)", file=sys.stderr)
    if args.output in ("json", "yaml"):
        _print_plan(result, args.output)
        return _plot(args.plot, cluster, result) or code
    compare: dict[str, dict[str, float] | str] | None = None
    why_not: dict[str, dict[str, str]] = dict(given.why_not)
    if not args.no_compare:
        compare = {}
        for name in BASELINES:
            if name == args.planner:
                continue
            if given.baselines is not None:  # the operator's, per constraint group
                compare[name] = given.baselines.get(name, {})
                continue
            try:
                other = planned(name)
                compare[name] = {jp.name: jp.predicted_iteration_seconds for jp in other.jobs}
                why_not[name] = {u.name: u.reason for u in other.unplaced}
            except HulkError as exc:
                compare[name] = str(exc)
    # a live cluster is shown by the servers the jobs may get: free, or in their plans
    label = f"{cluster.name}: servers free or in these jobs' plans" if args.kubeconfig else None
    print(render_table(cluster, result, compare, unlinked_pairs(cluster), label, why_not))
    return _plot(args.plot, cluster, result) or code


def _plot(path: str | None, cluster: Cluster, result: Plan) -> int:
    """``--plot``, once the plan is out (before, a plot that failed to write lost the plan):
    0, or 1 where it could not be written."""
    if path is None:
        return 0
    from hulk_planner.plot import plot_plan

    sys.stdout.flush()
    try:
        plot_plan(cluster, result, path)
    except OSError as exc:
        print(
            f"hulk plan: error: --plot: cannot write {path}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    return 0


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
        from hulk_operator.manifests import replaced_env
    except ImportError:
        return []
    error = object_entry(doc).error
    replaced = replaced_env(template)  # (posted whether the spec is refused or not)
    notes = [] if replaced is None else [f"the operator would warn (EnvReplaced): {replaced}"]
    if error is not None:
        notes.append(f"the operator would refuse this manifest (InvalidSpec): {error}")
    return notes


LATENCY_FLAGS = ("latency_max_age_s", "same_region_latency_ms", "cross_region_latency_ms")
# The operator's defaults for those flags (``OperatorConfig``'s; a test keeps them equal),
# under the keys of the preview's keyword arguments.
LATENCY_DEFAULTS = {"max_age_s": 600.0, "same_region_ms": 1.0, "cross_region_ms": 100.0}


def _option(dest: str) -> str:
    """The command-line spelling of an argparse destination: ``--latency-max-age-s``."""
    return "--" + dest.replace("_", "-")


_LATENCY_HELP = (
    "how old a NodeLatency measurement may be",
    "the estimate for an unmeasured pair in a region",
    "the estimate for an unmeasured pair across regions",
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


def _use_weights(args: argparse.Namespace) -> None:
    """``--weights`` (or ``$HULK_GNN_WEIGHTS``) and ``$HULK_GNN_DEVICE`` checked before
    planning; the weights then used."""
    from hulk_planner.api import USES_GNN
    from hulk_planner.gnn.planner import WEIGHTS_ENV, check_weights, resolve_device

    if args.planner not in USES_GNN:
        if args.weights is not None:
            raise InvalidRequest(
                "--weights", f"applies to the hulk planner, not {args.planner}", "drop it"
            )
        return
    resolve_device(None)  # a bad HULK_GNN_DEVICE: one line now, not after the inputs
    path = args.weights if args.weights is not None else os.environ.get(WEIGHTS_ENV) or None
    if path is not None:
        check_weights(path, "--weights" if args.weights is not None else WEIGHTS_ENV)
        os.environ[WEIGHTS_ENV] = str(Path(path).resolve())


PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")


def _check_plot_path(path: str) -> None:
    """Before planning: a plot that cannot be written must not cost the plan."""
    target = Path(path)
    suffix = target.suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise InvalidRequest(
            "--plot", f"{path!r} has no image suffix", f"end it in .{', .'.join(PLOT_FORMATS)}"
        )
    if target.is_dir() or path.endswith(("/", os.sep)):  # (a trailing /: one, or to be)
        raise InvalidRequest("--plot", f"{path!r} is a folder", "name the image file in it")
    folder = target.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise InvalidRequest(
            "--plot",
            f"cannot write {path!r}: {folder} is not a writable folder",
            "create it or choose another path",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hulk plan", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
