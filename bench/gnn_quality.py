"""GNN planner quality on generated clusters never seen in training.

For each of ``--clusters`` unseen clusters (the training generator, another seed): the
search planner with ``--budget`` seconds (default 60) gives the labels and the reference
step time; a second search with another seed measures how far the labeller agrees with
itself (the ceiling of any agreement figure). Printed per cluster and summarised:

- agreement of the GNN's decoded assignment (before refinement) and of the final hulk plan
  with the search labels: per server, and up to twin servers (``gnn_common``); also on
  the clusters whose labels the second search reproduces (where the labels are well
  defined: elsewhere two plans a few percent apart can differ on most servers);
- hulk's step time (geometric mean over jobs) over search's: the goal is a median <= 1.05;
- ablation: the same refinement (each of ``--refine-iterations`` move budgets) from
  hulk's start, from each of its two share rules alone, from a random start (random
  scores through the same decoding) and from the search planner's greedy start.
- with ``--labeller-moves N``: the search bounded by N moves (how ``hulk train
  --iterations N`` labels its training clusters), seeds 0 and 1, against the labels and
  itself: what the GNN was trained to copy; and hulk's refinement started from those
  plans, as if the network had copied its labeller perfectly.

Search runs are cached under ``$HULK_CACHE/bench``; the first run takes about
clusters * budget * 2 / workers seconds.

    python bench/gnn_quality.py [--clusters 20] [--budget 60] [--workers 2] [--hulk-budget S]
        [--weights FILE] [--labeller-moves N]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time

import numpy as np
from gnn_common import (
    agreement,
    agreement_up_to_twins,
    cached_search,
    geo_mean,
    median,
    unseen,
)

from hulk_planner.cost import CostModel
from hulk_planner.gnn.decode import assign, decode, refine, start_objective
from hulk_planner.gnn.planner import plan_gnn, refine_budget, scores
from hulk_planner.planners.search import greedy_start

STEADY = 0.95  # seed-vs-seed agreement at which a cluster's labels count as reproducible


def _search_job(args: tuple[int, float | None, int, int | None]) -> tuple[int, int, dict]:
    index, budget, seed, moves = args
    cluster, jobs = unseen(index)
    return index, seed, cached_search(cluster, jobs, budget, seed, moves)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=60.0, help="search seconds (60)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--refine-iterations", default="0,100,400", help="ablation move budgets (0,100,400)"
    )
    ap.add_argument("--no-ceiling", action="store_true", help="skip the second search seed")
    ap.add_argument(
        "--hulk-budget",
        type=float,
        default=None,
        help="hulk's refinement seconds (default: its own, gnn.planner.refine_budget)",
    )
    ap.add_argument(
        "--weights", default=None, help="a weights file of `hulk train` (default: the shipped one)"
    )
    ap.add_argument(
        "--labeller-moves",
        type=int,
        default=0,
        help="also label with the search bounded by this many moves, seeds 0 and 1, as "
        "`hulk train --iterations` does (the shipped weights: 4000), and compare",
    )
    args = ap.parse_args()

    budgets = [int(b) for b in args.refine_iterations.split(",")]
    seeds = (0,) if args.no_ceiling else (0, 1)
    tasks: list[tuple[int, float | None, int, int | None]] = [
        (i, args.budget, s, None) for s in seeds for i in range(args.clusters)
    ]
    if args.labeller_moves:
        tasks += [(i, None, s, args.labeller_moves) for s in (0, 1) for i in range(args.clusters)]
    t0 = time.perf_counter()
    results: dict[tuple[int, int], dict] = {}
    trainer: dict[tuple[int, int], dict] = {}  # the training labeller's plans
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        for (i, budget, s, _), (_, _, r) in zip(tasks, pool.imap(_search_job, tasks), strict=True):
            (results if budget is not None else trainer)[(i, s)] = r
    print(f"search runs ready ({time.perf_counter() - t0:.0f} s, cached for next time)\n")

    head = (
        f"{'#':>2} {'servers':>7} {'jobs':>4} | {'agree':>6} {'twins':>6} {'final':>6} "
        f"{'s-vs-s':>6} {'s-twin':>6} | {'search':>7} {'hulk':>7} {'ratio':>6} {'hulk s':>6} "
        f"| @{budgets[-1]} moves: {'gnn':>6} {'random':>6} {'greedy':>6} {'model':>6} {'par.sh':>6}"
    )
    print(head)
    print("-" * len(head))
    rows = []
    clusters = []
    cases = []  # (jobs, cost) of each cluster, for the labeller's comparison below
    for i in range(args.clusters):
        cluster, jobs = unseen(i)
        clusters.append(cluster)
        cost = CostModel(cluster)
        cases.append((jobs, cost))
        ref = results[(i, 0)]
        labels = ref["assignment"]
        t = time.perf_counter()
        logits = scores(cost, jobs, weights=args.weights)
        by_model = assign(cost, jobs, logits, share="model")
        by_params = assign(cost, jobs, logits, share="parameters")
        start = min((by_model, by_params), key=lambda a: start_objective(cost, jobs, a))
        final = plan_gnn(cost, jobs, seed=0, time_budget_s=args.hulk_budget, weights=args.weights)
        hulk_s = time.perf_counter() - t
        hulk_geo = geo_mean(final, jobs)
        row = {
            "agree": agreement(start, labels, cluster),
            "twins": agreement_up_to_twins(start, labels, cluster),
            "final": agreement(final.assignment, labels, cluster),
            "ratio": hulk_geo / ref["geo"] if math.isfinite(ref["geo"]) else math.nan,
            "hulk_s": hulk_s,
        }
        if not args.no_ceiling:
            other = results[(i, 1)]["assignment"]
            row["ss"] = agreement(other, labels, cluster)
            row["ss_twin"] = agreement_up_to_twins(other, labels, cluster)
            g0, g1 = ref["geo"], results[(i, 1)]["geo"]
            row["ss_apart"] = max(g0 / g1, g1 / g0) - 1
        # ablation: same refinement (moves) from each start
        rng = np.random.default_rng(i)
        starts = {
            "random": assign(cost, jobs, rng.normal(size=logits.shape)),
            "greedy": greedy_start(cost, jobs),
            "model": by_model,
            "par.sh": by_params,
        }
        for it in budgets:
            # gnn: as hulk decodes (both shares' starts, refined together)
            p = decode(cost, jobs, logits, refine_iterations=it, seed=0)
            row[f"gnn@{it}"] = geo_mean(p, jobs) / ref["geo"]
            for name, st in starts.items():
                p = refine(cost, jobs, st, refine_iterations=it, seed=0)
                row[f"{name}@{it}"] = geo_mean(p, jobs) / ref["geo"]
        rows.append(row)
        print(
            f"{i:>2} {len(cluster.servers):>7} {len(jobs):>4} | {row['agree']:>6.3f} "
            f"{row['twins']:>6.3f} {row['final']:>6.3f} {row.get('ss', math.nan):>6.3f} "
            f"{row.get('ss_twin', math.nan):>6.3f} | {ref['geo']:>7.3f} {hulk_geo:>7.3f} "
            f"{row['ratio']:>6.3f} {hulk_s:>6.2f} | {'':>10}"
            + "".join(f" {row[f'{k}@{budgets[-1]}']:>6.3f}" for k in starts),
            flush=True,
        )

    def col(k: str) -> list[float]:
        """A column; ``inf`` (a job left unplaced that the search placed) is kept, so it
        counts against hulk in medians; means skip it."""
        return [r[k] for r in rows if k in r and not math.isnan(r[k])]

    def mean(values: list[float]) -> float:
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else math.nan

    print()
    hulk_budget = (
        f"{args.hulk_budget:.1f} s"
        if args.hulk_budget is not None
        else f"{refine_budget(20):.1f}-{refine_budget(500):.1f} s by size"
    )
    print(
        f"unseen clusters: {len(rows)}; search budget {args.budget:.0f} s; hulk refinement "
        f"{hulk_budget}"
    )
    print(
        f"agreement with search labels, GNN decoded (mean): {mean(col('agree')):.3f} "
        f"per server, {mean(col('twins')):.3f} up to twins   [goal >= 0.95]"
    )
    print(f"agreement, final hulk plan (mean): {mean(col('final')):.3f}")
    if not args.no_ceiling:
        print(
            f"search vs search (seed 0 vs 1, same budget): {mean(col('ss')):.3f} per "
            f"server, {mean(col('ss_twin')):.3f} up to twins   [the labeller's ceiling]"
        )
        apart = [r["ss_apart"] for r in rows if math.isfinite(r["ss_apart"])]
        print(
            f"  the two seeds' step times (geometric means) apart by at most {max(apart):.1%}, "
            f"median {median(apart):.1%}; they differ on more than 5% of the servers on "
            f"{sum(r['ss'] < STEADY for r in rows)} clusters"
        )
        steady = [r for r in rows if r["ss"] >= STEADY]
        print(
            f"  on the {len(steady)} clusters whose labels the labeller reproduces (seed vs seed "
            f">= {STEADY}): GNN decoded {mean([r['agree'] for r in steady]):.3f}, final hulk plan "
            f"{mean([r['final'] for r in steady]):.3f} per server"
        )
    if trainer:
        n = args.clusters
        vs = [
            agreement(trainer[(i, s)]["assignment"], results[(i, 0)]["assignment"], clusters[i])
            for i in range(n)
            for s in (0, 1)
        ]
        own = [
            agreement(trainer[(i, 0)]["assignment"], trainer[(i, 1)]["assignment"], clusters[i])
            for i in range(n)
        ]
        step = [trainer[(i, 0)]["geo"] / results[(i, 0)]["geo"] for i in range(n)]
        # a network that copied its labeller perfectly: hulk's refinement from its plans
        copied = []
        for i, (jobs, cost) in enumerate(cases):
            labels = results[(i, 0)]["assignment"]
            budget = (
                args.hulk_budget
                if args.hulk_budget is not None
                else refine_budget(len(clusters[i].servers))
            )
            for s in (0, 1):
                p = refine(cost, jobs, trainer[(i, s)]["assignment"], refine_s=budget, seed=0)
                copied.append(
                    (
                        agreement(p.assignment, labels, clusters[i]),
                        agreement_up_to_twins(p.assignment, labels, clusters[i]),
                        geo_mean(p, jobs) / results[(i, 0)]["geo"],
                    )
                )
        print(
            f"training labeller ({args.labeller_moves} moves, seeds 0 and 1) vs the search-"
            f"{args.budget:.0f}s labels: {mean(vs):.3f} per server; seed vs seed "
            f"{mean(own):.3f}; its step time / search-{args.budget:.0f}s: median "
            f"{median(step):.3f}, mean {mean(step):.3f}   [what the GNN was trained to copy]"
        )
        far = [f"{i} ({vs[2 * i]:.2f}, {step[i]:.3f})" for i in range(n) if vs[2 * i] < 0.75]
        print(
            "  clusters where its seed-0 plan shares under 75% of the servers with the labels "
            f"(agreement, step time / search): {', '.join(far) or 'none'}"
        )
        print(
            f"  hulk's refinement started from those plans (a network that copied its labeller "
            f"perfectly): final plan {mean([c[0] for c in copied]):.3f} per server, "
            f"{mean([c[1] for c in copied]):.3f} up to twins; step time / search-"
            f"{args.budget:.0f}s median {median([c[2] for c in copied]):.3f}"
        )
    ratios = col("ratio")
    print(
        f"step time hulk / search-{args.budget:.0f}s: median {median(ratios):.3f}, "
        f"mean {mean(ratios):.3f} (finite), worst {max(ratios):.3f}, "
        f"hulk better on {sum(r < 1 for r in ratios)}/{len(ratios)}, "
        f"hulk leaves a job unplaced that search placed on {sum(math.isinf(r) for r in ratios)}"
        "   [goal median <= 1.05]"
    )
    print(f"hulk wall per cluster: median {median(col('hulk_s')):.2f} s")
    for it in budgets:
        print(
            f"ablation, {it} refinement moves, step time / search (median; mean): "
            + ", ".join(
                f"{k} start {median(col(f'{k}@{it}')):.3f}; {mean(col(f'{k}@{it}')):.3f}"
                for k in ("gnn", "random", "greedy", "model", "par.sh")
            )
        )
    print("  (gnn: hulk's starts, model and par.sh, the search descending from both and")
    print("   annealing from the better; model: GNN scores with the model's shares; par.sh:")
    print("   with the paper's parameter-ratio shares; random: random scores, same decoding;")
    print("   greedy: the search planner's own start)")


if __name__ == "__main__":
    main()
