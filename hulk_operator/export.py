"""``hulk topology``: a live cluster's GPU servers and links as a ``ClusterTopology``.

The servers the operator would offer a job (Ready, schedulable, labelled with GPU details;
with ``--free`` only those no job holds, less the GPUs other pods request), and their
links as the operator plans with them: each fresh NodeLatency measurement as a server
link, the operator's fallback estimates for the other pairs as region links, and no link
for a pair reported unreachable. ``hulk plan --cluster FILE`` then plans on what the
cluster is now: offline, on a laptop with no access to it, as often as wanted, or
attached to a report. Read only; it needs the rights ``hulk plan --kubeconfig`` needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection
from dataclasses import replace

from hulk_operator.inventory import COUNT, GPU, NO_GPUS
from hulk_operator.latencies import INFERRED_WORDS, cut_pairs, estimated_pairs, fallback_words
from hulk_operator.preview import cluster_from_kubeconfig, read_cluster
from hulk_operator.snapshot import Snapshot
from hulk_planner.cli import add_latency_arguments, latency_settings
from hulk_planner.cli_latency import LATENCY_FLAGS, _option
from hulk_planner.datasets import paper_cluster
from hulk_planner.errors import HulkError, InvalidRequest, NoFeasiblePlan
from hulk_planner.generate import CITY_NAMES, random_cluster
from hulk_planner.model import Cluster, check_positive, check_seed

NOTHING_USABLE = 3  # exit code: the cluster was read, but no server is usable
# --random's most servers (a trial: 100,000 written in 3 s, then hulk plan out of memory, as
# its tables then grew with the square of the servers; with ``topology.PairTable`` hulk plan
# took 19 s and 1 GB on 20,000, and more is no laptop's preview)
MAX_RANDOM = 20_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", metavar="FILE", help="the cluster to read (read only)")
    source.add_argument(
        "--paper",
        action="store_true",
        help="the Hulk paper's 47-server cluster, the built-in example hulk plan uses without "
        "--cluster, as a file to edit and plan with",
    )
    source.add_argument(
        "--random",
        type=int,
        metavar="SERVERS",
        help="a reproducible random multi-region cluster of SERVERS servers (mixed GPUs, "
        "latencies from the regions' distances), as hulk train generates: to try the "
        "planner at a scale of one's own",
    )
    parser.add_argument("--seed", type=int, help="with --random: which random cluster (default 0)")
    parser.add_argument(
        "--regions",
        type=int,
        help=f"with --random: how many regions, 1 to {len(CITY_NAMES)} (default: about "
        "sqrt(SERVERS) / 1.5)",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("yaml", "json"),
        default="yaml",
        help="the ClusterTopology as yaml (default) or json (docs/formats.md); notes go to stderr",
    )
    parser.add_argument(
        "--free",
        action="store_true",
        help="only the servers no job holds, each with the GPUs other pods leave (what a "
        "pending job may get now)",
    )
    add_latency_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from hulk_planner import io

    if args.random is None:  # (they would be ignored)
        for flag in ("seed", "regions"):
            if getattr(args, flag) is not None:
                print(f"hulk topology: error: --{flag}: applies to --random alone: drop it",
                      file=sys.stderr)  # fmt: skip
                return 2
    if args.paper or args.random is not None:
        source = "--paper" if args.paper else "--random"
        if args.free:
            print("hulk topology: error: --free reads a live cluster's use: drop it with "
                  f"{source}", file=sys.stderr)  # fmt: skip
            return 2
        # (they were ignored: the paper's links are its own measurements; a user trial)
        for flag in (f for f in LATENCY_FLAGS if getattr(args, f) is not None):
            said = "sets a live cluster's estimates, not the " + (
                "paper's measured links" if args.paper else "random cluster's latencies"
            )
            print(f"hulk topology: error: {_option(flag)}: {said}: drop it with {source}",
                  file=sys.stderr)  # fmt: skip
            return 2
        try:
            cluster = _random(args) if args.random is not None else paper_cluster()
        except InvalidRequest as exc:
            print(f"hulk topology: error: {exc}", file=sys.stderr)
            return 2
        print(io.dump_cluster(cluster, args.output), end="" if args.output == "yaml" else "\n")
        return 0
    try:
        settings = latency_settings(args)
        told: list[str] = []
        snap = read_cluster(args.kubeconfig, settings["max_age_s"], told)
        same, cross = settings["same_region_ms"], settings["cross_region_ms"]
        cluster = cluster_from_kubeconfig(
            args.kubeconfig, same_region_ms=same, cross_region_ms=cross, free_only=args.free,
            snapshot=snap,
        )  # fmt: skip
    except NoFeasiblePlan as exc:
        print(f"hulk topology: error: {exc.reason}", file=sys.stderr)
        return NOTHING_USABLE
    except HulkError as exc:
        print(f"hulk topology: error: {exc}", file=sys.stderr)
        return 2
    for note in [*told, *notes(snap, [s.name for s in cluster.servers], same, cross)]:
        print(f"hulk topology: note: {note}", file=sys.stderr)
    print(io.dump_cluster(cluster, args.output), end="" if args.output == "yaml" else "\n")
    return 0


def _random(args: argparse.Namespace) -> Cluster:
    """``--random SERVERS`` with its ``--seed`` and ``--regions``, checked (before, a
    generated cluster came only from Python: a laptop trial)."""
    check_positive("--random", args.random, integer=True, at_most=MAX_RANDOM)
    seed = 0 if args.seed is None else args.seed
    check_seed("--seed", seed)  # (as hulk plan's and hulk train's)
    most = min(len(CITY_NAMES), args.random)
    if args.regions is not None and not 1 <= args.regions <= most:
        raise InvalidRequest(
            "--regions",
            f"must be 1 to {most} for {args.random} server(s), got {args.regions}",
            f"give 1 to {most} (no more regions than servers; the generator names regions "
            f"after {len(CITY_NAMES)} cities)",
        )
    cluster = random_cluster(args.random, seed, args.regions)
    if args.regions is None:
        return cluster
    # (the generator's name says servers and seed: another --regions is another cluster)
    return replace(cluster, name=f"{cluster.name}-{args.regions}-regions")


def notes(snap: Snapshot, names: Collection[str], same_ms: float, cross_ms: float) -> list[str]:
    """What the file leaves out or estimates, a line each: nodes with GPUs it leaves out and
    why, the server pairs given estimates, those with no link."""
    out = []
    why = {n: w for n in snap.nodes if n not in names and (w := _left_out(snap, n)) is not None}
    # (the unhealthy first, then the held: a trial saw five held ones and "18 more")
    left = [f"{n} ({why[n]})" for n in sorted(why, key=lambda n: (why[n].startswith("held"), n))]
    if left:
        more = f"; and {len(left) - 5} more" if len(left) > 5 else ""
        out.append(f"left out {len(left)} node(s) with GPUs: {'; '.join(left[:5])}{more}")
    counted = sorted(
        f"{n} ({info.labels[COUNT]} by its label, {info.server.gpus} allocatable)"
        for n in names
        if (info := snap.nodes.get(n)) is not None
        and info.server is not None
        and info.labels.get(COUNT, str(info.server.gpus)).strip() != str(info.server.gpus)
    )
    if counted:  # (before, a relabel to 2 GPUs went without a word: a user trial)
        more = f"; and {len(counted) - 5} more" if len(counted) > 5 else ""
        out.append(
            f"{len(counted)} node(s) have another GPU count in label {COUNT} than their "
            f"allocatable {GPU}, which the file gives (as the operator plans and the "
            f"scheduler places): {'; '.join(counted[:5])}{more}"
        )
    ordered = sorted(names)
    guessed = estimated_pairs(ordered, snap.latencies)
    if guessed:
        pairs = len(ordered) * (len(ordered) - 1) // 2
        out.append(
            f"{guessed} of {pairs} server pair(s) have no fresh latency measurement: the "
            f"regionLinks give them the operator's estimates ({fallback_words(same_ms, cross_ms)}"
            "), as it plans with them"
        )
    cut, _, inferred = cut_pairs(ordered, snap.latencies)
    if cut:
        unsaid = f" ({inferred} of them {INFERRED_WORDS})" if inferred else ""
        out.append(f"{cut} server pair(s) are reported unreachable{unsaid}: no link, as the "
                   "operator plans them (they cannot communicate)")  # fmt: skip
    return out


def _left_out(snap: Snapshot, name: str) -> str | None:
    """Why a node is no server of the file; None for a node with no GPUs (a CPU node:
    nothing to tell)."""
    info = snap.nodes[name]
    if info.problem == NO_GPUS:
        return None
    if info.problem is not None:
        return info.problem
    if (why := info.sick() or info.barred()) is not None:
        return why
    holder = snap.held.get(name)
    if holder is not None:
        return f"held by job {holder[0]}/{holder[1]}"
    return "its GPUs are requested by other pods"
