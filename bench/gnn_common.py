"""Shared helpers of the GNN benchmarks (``bench/gnn_*.py``): objectives, agreement
metrics, unseen clusters, and search runs cached under ``$HULK_CACHE/bench``."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hulk_planner.cost import CostModel
from hulk_planner.gnn.data import GenerationSettings, example_spec, search_code_digest
from hulk_planner.model import Cluster, Job, Plan
from hulk_planner.planners.search import search_plan

# unseen clusters: the training generator with another seed (training data uses seed 0)
UNSEEN_SEED = 12345


def cache_dir() -> Path:
    root = Path(os.environ.get("HULK_CACHE", Path.home() / ".cache" / "hulk"))
    path = root / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def geo_mean(plan: Plan, jobs: Sequence[Job]) -> float:
    """Geometric mean of the jobs' step times (the search planner's objective); ``inf`` if
    a job is unplaced."""
    times = {jp.name: jp.predicted_iteration_seconds for jp in plan.jobs}
    if any(j.name not in times or not math.isfinite(times[j.name]) for j in jobs):
        return math.inf
    return math.exp(sum(math.log(times[j.name]) for j in jobs) / len(jobs))


def agreement(a: Mapping[str, str], b: Mapping[str, str], cluster: Cluster) -> float:
    """Share of servers with the same job (or both idle)."""
    names = [s.name for s in cluster.servers]
    return sum(a.get(n) == b.get(n) for n in names) / len(names)


def agreement_up_to_twins(a: Mapping[str, str], b: Mapping[str, str], cluster: Cluster) -> float:
    """Agreement counting interchangeable servers as one pool: servers of one region with
    the same hardware are twins (the cost model tells them apart only by the latency
    jitter of explicit links), so per twin group the job counts are compared:
    sum over groups and jobs of min(count in a, count in b), over all servers."""
    groups: dict[tuple, list[str]] = {}
    for s in cluster.servers:
        key = (s.region, s.gpus, s.gpu_memory_gib, s.gpu_tflops)
        groups.setdefault(key, []).append(s.name)
    same = 0
    for members in groups.values():
        ca = Counter(a.get(n) for n in members)
        cb = Counter(b.get(n) for n in members)
        same += sum(min(ca[k], cb[k]) for k in ca)
    return same / len(cluster.servers)


def unseen(index: int) -> tuple[Cluster, list[Job]]:
    """Unseen cluster ``index``: same generator as training, other seed."""
    from hulk_planner.generate import random_cluster

    n, cseed, regions, recipes = example_spec(GenerationSettings(seed=UNSEEN_SEED), index)
    return random_cluster(n, cseed, regions), [r.job() for r in recipes]


def cached_search(
    cluster: Cluster,
    jobs: Sequence[Job],
    budget_s: float | None,
    seed: int = 0,
    moves: int | None = None,
) -> dict[str, Any]:
    """``search_plan`` with a time budget (or, with ``budget_s`` None, ``moves`` moves, as
    ``hulk train`` labels), cached on disk: {assignment, geo, seconds, times}."""
    key = json.dumps(
        [
            cluster.name,
            len(cluster.servers),
            len(cluster.regions),
            [j.name for j in jobs],
            budget_s,
            seed,
            search_code_digest(),
            *([] if moves is None else [moves]),
        ],
        sort_keys=True,
    )
    path = cache_dir() / f"search-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    cost = CostModel(cluster)
    t = time.perf_counter()
    budget = math.inf if budget_s is None else budget_s
    plan = search_plan(cost, jobs, seed=seed, time_budget_s=budget, max_iterations=moves)
    out = {
        "assignment": plan.assignment,
        "geo": geo_mean(plan, jobs),
        "seconds": time.perf_counter() - t,
        "times": {jp.name: jp.predicted_iteration_seconds for jp in plan.jobs},
    }
    path.write_text(json.dumps(out))
    return out


def median(values: Sequence[float]) -> float:
    v = sorted(values)
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
