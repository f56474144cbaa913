"""Plan quality: how much slower each baseline's plan is than hulk's, by the cost model.

    python bench/plan_quality.py [--quick] [--seed N]

Scenarios: the Hulk paper's cluster with its 4 jobs and with 6 (+ RoBERTa-large,
XLNet-large), and generated multi-region clusters of 100-300 servers with 4-6 preset jobs
(--quick: the paper's two and one generated cluster of 100). For each it prints, per job,
every baseline's predicted step time as a ratio to hulk's, their geometric mean over the
jobs both place, whether hulk places every job some baseline places, and how much the
search planner improves on hulk when given 10x the wall time hulk took (geometric mean over
the jobs; per seed of ``--seeds``, then the median: both are randomised searches, so one
seed's figure moves by a few percent). Then, to show where hulk's advantage comes from,
every baseline planned per job on exactly the servers hulk's plan gave that job (no split:
the parallelism alone compared, not the choice of servers), as ratios to hulk's step time
and their geometric mean with the jobs placed. Hulk runs with its default budget (a
wall-clock refinement), so its figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hulk_planner.api import plan
from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.errors import NoFeasiblePlan
from hulk_planner.generate import random_cluster
from hulk_planner.model import Cluster, Job, JobPlan, Plan
from hulk_planner.planners.baseline_a import data_over
from hulk_planner.planners.baseline_b import gpipe_over
from hulk_planner.planners.baseline_c import tensor_over
from hulk_planner.planners.split import region_grouped
from hulk_planner.presets import preset_jobs

BASELINES = ("baseline-a", "baseline-b", "baseline-c")
ONE_JOB: dict[str, Callable[[CostModel, Job, Sequence[str]], JobPlan | None]] = {
    "baseline-a": data_over,  # each baseline's plan of one job on given servers
    "baseline-b": gpipe_over,
    "baseline-c": tensor_over,
}


@dataclass
class Scenario:
    name: str
    cluster: Cluster
    jobs: list[Job]


@dataclass
class Outcome:
    scenario: str
    best_baseline: str
    best_ratio: float
    all_placed: bool
    search_gains: list[float]
    jobs: int
    same_servers: dict[str, list[float]]  # baseline -> its ratios on hulk's servers


def scenarios(quick: bool) -> list[Scenario]:
    paper = paper_cluster()
    out = [
        Scenario("paper, 4 jobs", paper, paper_jobs(4)),
        Scenario("paper, 6 jobs", paper, paper_jobs(6)),
    ]
    generated = [
        (100, 11, ("llama2-13b", "t5-11b", "gpt2-xl", "bert-large")),
        (200, 12, ("opt-175b", "llama2-7b", "gpt3-xl", "roberta-large", "xlnet-large")),
        (300, 13, ("llama2-70b", "t5-11b", "llama2-7b", "gpt2-xl", "bert-large", "xlnet-large")),
    ]
    for n, seed, names in generated[:1] if quick else generated:
        c = random_cluster(n, seed=seed)
        out.append(Scenario(f"generated {n}, {len(names)} jobs", c, preset_jobs(names)))
    return out


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def fmt_s(seconds: float) -> str:
    return f"{seconds:,.2f}s" if seconds < 1e5 else f"{seconds:.2e}s"


def fmt_x(ratio: float) -> str:
    return f"{ratio:,.2f}x" if ratio < 1e4 else f"{ratio:.1e}x"


def fmt_gm(ratios: Sequence[float], jobs: int) -> str:
    return f"{fmt_x(geomean(ratios))} ({len(ratios)} of {jobs})" if ratios else "-"


def planned(c: Cluster, jobs: Sequence[Job], planner: str, cost: CostModel, **kw: float) -> Plan:
    try:
        return plan(c, jobs, planner, cost=cost, **kw)  # type: ignore[arg-type]
    except NoFeasiblePlan as exc:
        return Plan(planner, notes=(f"no feasible plan: {exc.reason}",))


def run_scenario(sc: Scenario, seed: int, seeds: int) -> Outcome:
    c, jobs = sc.cluster, sc.jobs
    cost = CostModel(c)
    print(
        f"== {sc.name}: {c.name} ({len(c.servers)} servers, {len(c.regions)} regions, "
        f"{sum(s.gpus for s in c.servers)} GPUs)"
    )
    t0 = time.perf_counter()
    hulk = planned(c, jobs, "hulk", cost, seed=seed)
    hulk_s = time.perf_counter() - t0
    baselines = {b: planned(c, jobs, b, cost) for b in BASELINES}
    print(f"{'job':<16}{'hulk':>12}" + "".join(f"{b:>22}" for b in BASELINES))
    ratios: dict[str, list[float]] = {b: [] for b in BASELINES}
    all_placed = True
    for job in jobs:
        mine = hulk.job(job.name)
        row = (
            f"{job.name:<16}{fmt_s(mine.predicted_iteration_seconds) if mine else 'NOT PLACED':>12}"
        )
        for b, p in baselines.items():
            theirs = p.job(job.name)
            if theirs is None:
                row += f"{'not placed':>22}"
                continue
            if mine is None:
                all_placed = False
                row += f"{fmt_s(theirs.predicted_iteration_seconds):>22}"
                continue
            r = theirs.predicted_iteration_seconds / mine.predicted_iteration_seconds
            ratios[b].append(r)
            row += f"{fmt_s(theirs.predicted_iteration_seconds) + ' (' + fmt_x(r) + ')':>22}"
        print(row)
    gms = {b: geomean(ratios[b]) for b in BASELINES}
    print(
        f"{'geometric mean':<16}{'1.00x':>12}"
        + "".join(f"{fmt_x(g) if ratios[b] else '-':>22}" for b, g in gms.items())
    )
    best = min((b for b in BASELINES if ratios[b]), key=gms.__getitem__, default="-")
    best_ratio = gms.get(best, math.nan)
    print(
        f"best baseline: {best}, {fmt_x(best_ratio)} hulk's step time "
        f"(hulk {100 * (1 - 1 / best_ratio):.1f}% below it; goal: > 1.25x)"
    )
    print(f"every job placed by a baseline is placed by hulk: {'yes' if all_placed else 'NO'}")
    same = on_hulks_servers(cost, jobs, hulk)
    print("each baseline per job on the servers hulk's plan gave it (no split):")
    for job in jobs:
        cells = [fmt_x(same[b][job.name]) if job.name in same[b] else "not placed" for b in same]
        print(f"{job.name:<16}{'':>12}" + "".join(f"{c:>22}" for c in cells))
    same_ratios = {b: list(same[b].values()) for b in BASELINES}
    print(
        f"{'geometric mean':<16}{'1.00x':>12}"
        + "".join(f"{fmt_gm(same_ratios[b], len(jobs)):>22}" for b in BASELINES)
    )
    gains = []
    for s in range(seed, seed + seeds):
        if s == seed:
            mine, took = hulk, hulk_s
        else:
            t0 = time.perf_counter()
            mine = planned(c, jobs, "hulk", cost, seed=s)
            took = time.perf_counter() - t0
        gain, line = search_gain(c, jobs, cost, mine, took, s)
        gains.append(gain)
        print(line)
    print(
        f"search with 10x hulk's time, median gain over hulk: "
        f"{100 * statistics.median(gains):.1f}% (goal < 2%)"
    )
    print()
    return Outcome(sc.name, best, best_ratio, all_placed, gains, len(jobs), same_ratios)


def on_hulks_servers(
    cost: CostModel, jobs: Sequence[Job], hulk: Plan
) -> dict[str, dict[str, float]]:
    """Baseline -> job -> its step time / hulk's, for each job the baseline places when given
    exactly the servers hulk's plan gave that job, in the cluster's listed order (as its
    split hands them out)."""
    listed = {s.name: i for i, s in enumerate(region_grouped(cost.cluster.servers))}
    out: dict[str, dict[str, float]] = {b: {} for b in BASELINES}
    for job in jobs:
        mine = hulk.job(job.name)
        if mine is None:
            continue
        names = sorted(mine.nodes, key=listed.__getitem__)
        for b, one_job in ONE_JOB.items():
            theirs = one_job(cost, job, names)
            seconds = cost.job_seconds(job, theirs) if theirs else math.inf
            if math.isfinite(seconds):
                out[b][job.name] = seconds / mine.predicted_iteration_seconds
    return out


def search_gain(
    c: Cluster, jobs: Sequence[Job], cost: CostModel, hulk: Plan, hulk_s: float, seed: int
) -> tuple[float, str]:
    """How much the search planner, given 10x the seconds hulk took, improves on hulk."""
    budget = 10 * hulk_s
    search = planned(c, jobs, "search", cost, seed=seed, time_budget_s=budget)
    both = [j.name for j in jobs if hulk.job(j.name) and search.job(j.name)]
    h = geomean([hulk.job(n).predicted_iteration_seconds for n in both])  # type: ignore[union-attr]
    s = geomean([search.job(n).predicted_iteration_seconds for n in both])  # type: ignore[union-attr]
    gain = 1 - s / h
    extra = len(search.jobs) - len(hulk.jobs)
    more = f"; places {extra:+d} jobs" if extra else ""
    return gain, (
        f"seed {seed}: hulk {h:.4f}s in {hulk_s:.2f}s, search {s:.4f}s in {budget:.1f}s "
        f"(geometric means over {len(both)} jobs): search improves on hulk by "
        f"{100 * gain:.1f}%{more}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller scenarios")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds of the 10x search check (default 3)"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(
        f"plan quality ({'quick' if args.quick else 'full'}), seed {args.seed}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f}\n"
    )
    outcomes = [run_scenario(sc, args.seed, args.seeds) for sc in scenarios(args.quick)]
    print("== summary")
    print(
        f"{'scenario':<28}{'best baseline':>16}{'its ratio':>12}{'all placed':>12}"
        f"{'search 10x gain (median)':>26}"
    )
    for o in outcomes:
        gain = 100 * statistics.median(o.search_gains)
        print(
            f"{o.scenario:<28}{o.best_baseline:>16}{fmt_x(o.best_ratio):>12}"
            f"{'yes' if o.all_placed else 'NO':>12}{gain:>25.1f}%"
        )
    print("\n== summary: each baseline on hulk's servers (no split), geometric mean (jobs placed)")
    print(f"{'scenario':<28}" + "".join(f"{b:>18}" for b in BASELINES))
    for o in outcomes:
        cells = (fmt_gm(o.same_servers[b], o.jobs) for b in BASELINES)
        print(f"{o.scenario:<28}" + "".join(f"{c:>18}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
