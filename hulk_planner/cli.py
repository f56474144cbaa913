"""``hulk plan``: preview where training jobs would run, and how fast.

With no arguments it plans the Hulk paper's four jobs on the paper's 47-server cluster and
compares the plan with baselines A, B and C. Bad input prints one line naming the field and
the fix, and exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from hulk_planner.cli_inputs import _inputs, _operator_notes
from hulk_planner.cli_latency import (
    LATENCY_DEFAULTS,
    LATENCY_FLAGS,
    add_latency_arguments,
    latency_settings,
)
from hulk_planner.cli_output import _kept_notes, _plot, _print_plan, _ratio, render_table
from hulk_planner.errors import HulkError, InvalidRequest, NoFeasiblePlan, NothingToPlan, each_error
from hulk_planner.model import Cluster, Job, Plan, Unplaced, check_positive, check_seed
from hulk_planner.regions import by_priority, plan_in_regions, tiered

# What other code imports from here (moved to cli_inputs, cli_latency, cli_output).
__all__ = [
    "BASELINES",
    "LATENCY_DEFAULTS",
    "LATENCY_FLAGS",
    "_inputs",
    "_kept_notes",
    "_operator_notes",
    "_ratio",
    "add_arguments",
    "add_latency_arguments",
    "latency_settings",
    "main",
    "render_table",
    "run",
]

BASELINES = ("baseline-a", "baseline-b", "baseline-c")


class _Once(argparse.Action):
    """A file option that takes one file: given twice, an error (a second ``--cluster``
    silently replaced the first, and the plan was made on the second alone: a trial)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None:
            fix = ONE_FILE_FIXES.get(self.dest, "give it once")
            parser.error(
                f"{option_string} takes one file and was given {before!r} and {values!r}: {fix}"
            )
        setattr(namespace, self.dest, values)


ONE_FILE_FIXES = {
    "cluster": "give it once (one ClusterTopology holds all the servers; "
    "several --jobs files are taken)",
    "previous": "give it once (one PlacementPlan holds every job's placement)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        action=_Once,
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
    parser.add_argument(
        "--plot", metavar="FILE.png", action=_Once, help="draw the cluster coloured by job"
    )
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
        "per 1,000 servers, at most 2 s, after its GNN; search 10 s), for the whole run: "
        "jobs of several priorities or allowedRegions share it",
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
        action=_Once,
        help="the PlacementPlan now running: keep healthy servers where they are",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        action=_Once,
        help="plan a live cluster's pending jobs (or --jobs) as the operator would now: its "
        "constraints, free servers and measured links (read only)",
    )
    parser.add_argument("-n", "--namespace", help="with --kubeconfig: only this namespace's jobs")
    add_latency_arguments(parser, "with --kubeconfig: ")
    parser.add_argument(
        "--weights",
        metavar="FILE",
        action=_Once,
        help="GNN weights of `hulk train` for the hulk planner (default: $HULK_GNN_WEIGHTS, "
        "else the shipped ones)",
    )
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="table output: skip the comparison with baselines A/B/C",
    )


def _too_big(cluster: Cluster, jobs: Sequence[Job], planner: str) -> list[Unplaced]:
    """Jobs that need more GPU memory than the whole cluster has, or one of whose layers
    no server holds (but in baseline C's tensor-parallel stages), and why."""
    from hulk_planner.cost import too_big

    per_layer = planner != "baseline-c"
    why = {job.name: too_big(job, cluster.servers, per_layer=per_layer) for job in jobs}
    return [Unplaced(name, text) for name, text in why.items() if text is not None]


NOTHING_PLACED = 3  # exit code: valid input, but no job fits (2: bad input)


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
        errors = each_error(exc)  # (a line per job of the files given that is wrong)
        for each in errors[:MAX_SHOWN]:
            print(f"hulk plan: error: {each}", file=sys.stderr)
        if len(errors) > MAX_SHOWN:  # (a region's servers deleted from a topology file
            # left 8,201 lines of links to them: a trial)
            print(f"hulk plan: error: and {len(errors) - MAX_SHOWN:,} more ({len(errors):,} in "
                  f"all; the first {MAX_SHOWN} shown)", file=sys.stderr)  # fmt: skip
        return 2
    except MemoryError:  # (100,000 servers: numpy's traceback, exit 1; a trial)
        from hulk_planner.topology import DENSE_MAX_SERVERS

        print(
            "hulk plan: error: out of memory (on a large cluster: the planner keeps a table "
            f"of every pair of servers up to {DENSE_MAX_SERVERS:,} servers, and of every listed "
            "link, which grow with the square of their number; plan fewer servers, e.g. the "
            "regions a job may use, give regionLinks in place of links, or plan on a machine "
            "with more memory)",
            file=sys.stderr,
        )
        return 1


MAX_SHOWN = 50  # error lines told at most; then how many more


def _run(args: argparse.Namespace) -> int:
    from hulk_planner import io
    from hulk_planner.api import (
        ADAPTS_TO_PREVIOUS,
        MAX_MOVES,
        MAX_TIME_BUDGET_S,
        PLANNERS,
        plan,
        unkept,
    )
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
    if args.time_budget is not None:
        check_positive("--time-budget", args.time_budget, at_most=MAX_TIME_BUDGET_S)
    if args.seed is not None:
        check_seed("--seed", args.seed)
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
    # (the first took it all, and the second was told it held nothing: a review, a trial)
    readers = [
        flag
        for flag, reads in (
            ("--cluster", args.cluster == "-"),
            ("--jobs", "-" in (args.jobs or ())),
            ("--previous", args.previous == "-"),
        )
        if reads
    ]
    if len(readers) > 1:
        raise InvalidRequest(
            readers[0],
            f"and {' and '.join(readers[1:])} {'both' if len(readers) == 2 else 'all'} read "
            "standard input (-)",
            f"give {'one of them' if len(readers) == 2 else 'all but one of them'} a file",
        )
    if args.plot is not None:
        _check_plot_path(args.plot)
    weights, chosen = _use_weights(args)
    given = _inputs(args)
    cluster, jobs, result, limits = given.cluster, given.jobs, given.plan, given.limits

    @cache  # built at the first plan on the whole cluster (none for a --kubeconfig preview)
    def whole_cluster_cost() -> CostModel:
        return CostModel(cluster)

    def planned(name: str, **options: Any) -> Plan:
        priorities = by_priority(name)
        if tiered(jobs, limits, priorities):  # each group on its own servers and cost model
            return plan_in_regions(cluster, jobs, limits, name, priorities=priorities, **options)
        return plan(cluster, jobs, name, cost=whole_cluster_cost(), **options)

    try:  # (the templates' notes told also where planning or its inputs fail)
        previous: Plan | None = None
        seconds = given.seconds  # planning time (a --kubeconfig preview's: its baselines too)
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
                used = {n for jp in previous.jobs for n in jp.nodes}
                gone = sorted(used - set(cluster.index))
                # sharing no job and no server: another cluster's plan, said once (before, a
                # note per job, then "91 server(s) ... taken as lost and replaced": a trial)
                unrelated = bool(previous.jobs) and len(gone) == len(used)
                unrelated = unrelated and not asked.keys() & {jp.name for jp in previous.jobs}
                if unrelated:
                    print(
                        f"hulk plan: note: --previous: {args.previous} shares no job and no "
                        "server with these jobs and this cluster (is it the plan meant?): "
                        "planned afresh",
                        file=sys.stderr,
                    )
                for old in previous.jobs:
                    lost = unkept(old, asked.get(old.name))
                    if old.name in nowhere:  # (asked for: "not among the jobs planned" misled)
                        lost = "fits nowhere on this cluster: its servers are free for the others"
                    if lost is not None:
                        if not unrelated:
                            print(f"hulk plan: note: --previous: job {old.name} {lost}",
                                  file=sys.stderr)  # fmt: skip
                        afresh.add(old.name)
                if gone and not unrelated:
                    print(
                        f"hulk plan: note: --previous: {len(gone)} server(s) of the previous plan "
                        f"are not in this cluster ({', '.join(gone[:3])}"
                        f"{', ...' if len(gone) > 3 else ''}): taken as lost and replaced",
                        file=sys.stderr,
                    )
            started = time.perf_counter()
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
            seconds = time.perf_counter() - started
    finally:
        for line in given.template_notes.lines() if given.template_notes else []:
            print(f"hulk plan: note: {line}", file=sys.stderr)
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
        if chosen:  # (the plan file has no place for them)
            print(f"hulk plan: note: {weights}", file=sys.stderr)
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
    print(
        render_table(
            cluster,
            result,
            compare,
            unlinked_pairs(cluster),
            label,
            why_not,
            weights=weights,
            seconds=seconds,
            baselines_timed=given.baselines is not None,
        )
    )
    return _plot(args.plot, cluster, result) or code


def _use_weights(args: argparse.Namespace) -> tuple[str | None, bool]:
    """``--weights`` (or ``$HULK_GNN_WEIGHTS``) and ``$HULK_GNN_DEVICE`` checked before
    planning; the weights then used. Returns which, as the table's header says it
    ("weights: shipped (sha256 ...)"; before, shipped and one's own looked the same: a user
    trial), None for a planner without weights; and whether they were given (not the
    shipped ones)."""
    from hulk_planner.api import USES_GNN
    from hulk_planner.gnn.planner import (
        WEIGHTS_ENV,
        check_weights,
        file_sha256,
        resolve_device,
        shipped_weights,
        untrained,
    )

    if args.planner not in USES_GNN:
        if args.weights is not None:
            raise InvalidRequest(
                "--weights", f"applies to the hulk planner, not {args.planner}", "drop it"
            )
        return None, False
    resolve_device(None)  # a bad HULK_GNN_DEVICE: one line now, not after the inputs
    path = args.weights if args.weights is not None else os.environ.get(WEIGHTS_ENV) or None
    if path is not None:
        field = "--weights" if args.weights is not None else WEIGHTS_ENV
        check_weights(path, field)
        os.environ[WEIGHTS_ENV] = str(Path(path).resolve())
        weak = untrained(path)
        if weak:
            print(f"hulk plan: note: {field} {path}: {weak}", file=sys.stderr)
    used = Path(path) if path is not None else shipped_weights()
    try:
        digest = f" (sha256 {file_sha256(used)[:12]})"
    except OSError:  # (the shipped weights missing: the planner says so)
        digest = ""
    return f"weights: {'shipped' if path is None else path}{digest}", path is not None


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
    try:  # (what the folder's mode allows root is not what /sys or /proc do: a write
        # failed after the plan was printed, exit 1; a user trial)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InvalidRequest(
            "--plot",
            f"cannot write {path!r}: {folder} takes no file ({exc.strerror or exc})",
            "choose another path",
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hulk plan", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
