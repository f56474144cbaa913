"""Algorithm 1: from the network's (server, job) scores to a plan.

1. **Classes.** A softmax over each server's row gives p(server i trains job j) and
   p(i idle). With a previous plan, a server's old job gets ``STICKY_BONUS`` added to its
   logit, so healthy servers stay where they were unless the network is sure otherwise.
   A server is used when p(idle) < 0.5.
2. **Shares.** The paper sizes each job's class by its share of the jobs' parameters.
   Each job gets a memory quota: ``share="model"`` (default) the memory the network
   expects it to get (the sum of p(i, j) * memory of i), ``share="parameters"`` the
   paper's parameter ratio of the used servers' memory; never below ``MEMORY_MARGIN``
   times its need (``cost.memory_need_bytes``). The (server, job) pairs are taken most
   confident first, each job until its quota is met; used servers left over join their
   most likely job within ``SHARE_SLACK`` times its quota. Servers the network cannot
   tell apart (same region and hardware get the same scores) are thus split among jobs
   in proportion, where a per-server argmax would give them all to one job.
   ``share=None`` is that plain argmax. ``decode`` (``share="best"``, the default) builds
   the model's and the paper's starts and refines both (step 6; ``bench/gnn_quality.py``
   ablates each).
3. **Memory.** Jobs in order of need (largest first): a job whose servers hold less than
   its margin takes more, most likely first, from idle servers and from jobs that keep
   their own margin; a job that cannot get it is left to the refinement (and reported
   unplaced if it stays short).
4. **Feasible layouts.** A job whose servers hold its memory but admit no layout (the
   activations of in-flight micro-batches, a stage's smallest server) takes ~25% more
   memory a round, most likely servers first, from idle servers and from smaller jobs
   (which are checked after it), for up to ``FEASIBILITY_ROUNDS`` rounds.
5. **Layout.** Each job's servers are laid out by the core (``layout.layout_job``: stage
   ordering along low-latency paths, replicas, layer balancing to compute and memory).
6. **Refinement.** ``search_plan`` from both assignments (the model's and the paper's
   shares) for a short budget. Its coarse phase takes each start down through whole-job
   moves (every job to every region at three sizes or regrown where it is at ten, every two
   jobs trading regions) to a local optimum, for up to ``COARSE_SHARE`` of the budget (the
   search's own: 10%): on
   large clusters, where each job fits in one region and most servers are free, the
   network says only roughly where each job goes and how many servers it holds, and these
   moves settle it (on ``bench/gnn_speed.py``'s 1,000 servers: a plan the search from its
   greedy start reaches in about two minutes; on another cluster that start descends to
   the same plan), where the annealing's random proposals rarely hit them. Then
   annealing from the start whose descent ended best, and a polish of the best state seen
   (the search keeps it, so refinement never makes the start worse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from hulk_planner.cost import CostModel, memory_need_bytes
from hulk_planner.layout import layout_job
from hulk_planner.model import Job, Plan
from hulk_planner.planners import search
from hulk_planner.planners.search import search_plan

MEMORY_MARGIN = 1.25
FEASIBILITY_ROUNDS = 8
SHARE_SLACK = 1.5
STICKY_BONUS = 4.0
# of a refinement's budget of seconds, at most: the starts' descents (step 6); a budget of
# moves keeps the search's own share (a round of relocations on a crowded cluster would
# take most of a small one, cut short: bench/gnn_quality.py's ablation at 100-400 moves)
COARSE_SHARE = 0.4
Share = Literal["model", "parameters"] | None


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def assign(
    cost: CostModel,
    jobs: Sequence[Job],
    logits: np.ndarray,
    *,
    share: Share = "model",
    sticky: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Steps 1-4: server name -> job name for every server given a job (others idle).

    ``logits`` is [N, 1 + J] in the cluster's server order, column 0 idle."""
    n, classes = logits.shape
    if n != len(cost.cluster.servers) or classes != len(jobs) + 1:
        raise ValueError(
            f"logits have shape {logits.shape}, expected ({len(cost.cluster.servers)}, "
            f"{len(jobs) + 1}) for this cluster and these jobs"
        )
    names = [s.name for s in cost.cluster.servers]
    logits = np.array(logits, dtype=np.float64)
    if sticky:
        col = {j.name: k + 1 for k, j in enumerate(jobs)}
        for name, job in sticky.items():
            i = cost.net.index.get(name)
            if i is not None and job in col:
                logits[i, col[job]] += STICKY_BONUS
    p = softmax(logits)
    cap = np.asarray(cost.capacity, dtype=np.float64)
    jn = len(jobs)
    need = np.array([memory_need_bytes(j) * MEMORY_MARGIN for j in jobs])
    used = p[:, 0] < 0.5
    # 1. quotas: the memory each job should get
    if share == "parameters":
        params = np.array([j.model.parameters for j in jobs], dtype=np.float64)
        target = params / params.sum() * float(cap[used].sum())
    else:
        target = (p[:, 1:] * cap[:, None]).sum(axis=0)
    quota = np.maximum(target, need)
    if share is None:
        quota = np.full(jn, np.inf)
    limit = quota * SHARE_SLACK
    owner = np.zeros(n, dtype=np.int64)  # 0 idle, k + 1 job k
    held = np.zeros(jn)
    # most confident (server, job) pairs first, each job up to its quota
    ids = np.flatnonzero(used)
    flat = p[ids, 1:]
    order = np.argsort(-flat, axis=None, kind="stable")
    for pos in order.tolist():
        i, k = int(ids[pos // jn]), pos % jn
        if owner[i] == 0 and held[k] < quota[k]:
            owner[i] = k + 1
            held[k] += cap[i]
    # used servers left over: their most likely job, within its share limit
    for i in ids[owner[ids] == 0].tolist():
        for k in np.argsort(-p[i, 1:], kind="stable").tolist():
            if held[k] + cap[i] <= limit[k]:
                owner[i] = k + 1
                held[k] += cap[i]
                break
    # 2. memory: largest need first, from idle servers and jobs with memory to spare
    for k in sorted(range(jn), key=lambda k: -need[k]):
        if held[k] >= need[k]:
            continue
        for i in np.argsort(-p[:, k + 1], kind="stable").tolist():
            if held[k] >= need[k]:
                break
            cur = int(owner[i])
            if cur == k + 1 or (cur > 0 and held[cur - 1] - cap[i] < need[cur - 1]):
                continue
            if cur > 0:
                held[cur - 1] -= cap[i]
            owner[i] = k + 1
            held[k] += cap[i]
    # 4. layouts: a job whose servers hold its memory but admit no layout (activations of
    # in-flight micro-batches, the smallest server of a stage) grows by ~25% a round
    for k in sorted(range(jn), key=lambda k: -need[k]):
        for _ in range(FEASIBILITY_ROUNDS):
            mine = [names[i] for i in np.flatnonzero(owner == k + 1)]
            if layout_job(cost, jobs[k], mine) is not None:
                break
            goal = held[k] * 1.25 + 1.0
            later = {
                c + 1 for c in range(jn) if need[c] < need[k] or (need[c] == need[k] and c > k)
            }
            for i in np.argsort(-p[:, k + 1], kind="stable").tolist():
                if held[k] >= goal:
                    break
                cur = int(owner[i])
                # idle servers, and those of smaller jobs with memory to spare (as in 2.: a
                # job that has no layout yet must not leave a smaller one short of memory)
                if cur == 0 or (cur in later and held[cur - 1] - cap[i] >= need[cur - 1]):
                    if cur > 0:
                        held[cur - 1] -= cap[i]
                    owner[i] = k + 1
                    held[k] += cap[i]
            else:
                break
    return {names[i]: jobs[int(owner[i]) - 1].name for i in range(n) if owner[i] > 0}


def decode(
    cost: CostModel,
    jobs: Sequence[Job],
    logits: np.ndarray,
    *,
    refine_s: float = 0.5,
    refine_iterations: int | None = None,
    seed: int = 0,
    share: Share | Literal["best"] = "best",
    sticky: Mapping[str, str] | None = None,
    name: str = "hulk",
) -> Plan:
    """Steps 1-6: the plan (layouts by the core, refined by a short search).

    ``share="best"`` (default) decodes with both quotas, the model's and the paper's
    parameter ratio, and gives both to the refinement, which descends from each and
    anneals from the one whose descent ends with the better objective (the search
    planner's: sum of log step times, unplaced jobs worst)."""
    shares: tuple[Share, ...] = ("model", "parameters") if share == "best" else (share,)
    options = [assign(cost, jobs, logits, share=s, sticky=sticky) for s in shares]
    return refine(
        cost,
        jobs,
        options[0],
        alternatives=options[1:],
        refine_s=refine_s,
        refine_iterations=refine_iterations,
        seed=seed,
        sticky=sticky,
        name=name,
    )


def start_objective(cost: CostModel, jobs: Sequence[Job], start: Mapping[str, str]) -> float:
    """The search planner's objective of a start as laid out by the core: the sum of log
    step times, ``inf`` if a job has no layout."""
    total = 0.0
    for job in jobs:
        jp = layout_job(cost, job, [n for n, j in start.items() if j == job.name])
        if jp is None or not math.isfinite(jp.predicted_iteration_seconds):
            return math.inf
        total += math.log(jp.predicted_iteration_seconds)
    return total


def refine(
    cost: CostModel,
    jobs: Sequence[Job],
    start: Mapping[str, str],
    *,
    alternatives: Sequence[Mapping[str, str]] = (),
    refine_s: float = 0.5,
    refine_iterations: int | None = None,
    seed: int = 0,
    sticky: Mapping[str, str] | None = None,
    name: str = "hulk",
) -> Plan:
    """Steps 5-6 from any start (and ``alternatives``, other starts): ``search_plan`` lays
    out every job with the core's ``layout_job``, descends from each start for up to
    ``COARSE_SHARE`` of ``refine_s`` seconds and anneals for the rest (or, bounded by
    ``refine_iterations`` moves, the search's own shares; zero gives the best start's own
    layout)."""
    return search_plan(
        cost,
        jobs,
        seed=seed,
        time_budget_s=max(refine_s, 1e-9) if refine_iterations is None else math.inf,
        max_iterations=refine_iterations,
        initial_assignment=dict(start),
        alternatives=alternatives,
        coarse_share=COARSE_SHARE if refine_iterations is None else search.COARSE_SHARE,
        previous=sticky,
        settle=False,  # measured: in 1-2 s the settled rebuilds cost more than they find
        name=name,
    )
