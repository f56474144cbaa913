"""How the baselines divide a cluster among several jobs.

The paper's baselines are single-job systems; to run several jobs at once they need the
servers divided. The division below is a plain one an operator of such a system could make
by hand, knowing the jobs' sizes and the cluster's listed order but not which servers suit
which job:

- the largest job (by memory need, ``cost.memory_need_bytes``; equal needs by name) chooses
  first, so the order the jobs are given in does not matter;
- every job first takes servers until it has the GPU memory it needs (baseline A: one server
  that holds the whole model), so that a job is left out only when the memory is really not
  there;
- then each takes more until its compute reaches its share of the cluster's, in proportion
  to its compute demand per optimizer step (``6 * parameters * tokens``); the last job
  takes what is left;
- servers are handed out in blocks, in the cluster's listed order grouped by region, so a
  job's servers stay in as few regions as possible, whatever their speed.

The shares follow the listed order, not the servers' speed or links, and their step times
end far apart. On the paper's cluster with its 4 jobs OPT-175B's memory need takes the
first 16 servers listed and the other jobs' the next 5 (GPT-2 XL one server of six TITAN
RTX, already more than its compute share); OPT-175B, 98% of the jobs' compute demand, then
takes all 26 left (42 of the 47). Most of Hulk's advantage over the best baseline comes
from this choice of servers, not from each job's parallelism: ``bench/plan_quality.py``
also plans each baseline on exactly the servers Hulk's plan gave each job (README, "What
it achieves").

A job whose memory need cannot be met from what is left is reported as unplaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hulk_planner.cost import MEMORY_USABLE, CostModel, gib_text, memory_need_bytes
from hulk_planner.model import Job, Server


def step_flops(job: Job) -> float:
    return 6.0 * job.model.parameters * job.global_batch_size * job.model.sequence_length


def region_grouped(servers: Sequence[Server]) -> list[Server]:
    first: dict[str, int] = {}
    for i, s in enumerate(servers):
        first.setdefault(s.region, i)
    order = sorted(range(len(servers)), key=lambda i: (first[servers[i].region], i))
    return [servers[i] for i in order]  # (keyed by position: servers.index was O(n^2))


def split_servers(
    cost: CostModel,
    jobs: Sequence[Job],
    eligible: Callable[[Job, Server], bool] = lambda job, server: True,
    need: Callable[[Job], float] = memory_need_bytes,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(job name -> its servers, job name -> reason it got none).

    First every job, largest memory need first (``cost.memory_need_bytes``, whatever
    ``need`` is; equal needs by name), takes the next eligible servers until it has
    ``need(job)`` of memory (at least one server); then each takes more until its compute
    reaches its share of the cluster by demand; the last job takes what is left.
    """
    pool = region_grouped(cost.cluster.servers)
    usable = {s.name: s.memory_bytes * MEMORY_USABLE for s in pool}
    order = sorted(jobs, key=lambda j: (-memory_need_bytes(j), j.name))
    taken: dict[str, list[Server]] = {j.name: [] for j in order}
    reasons: dict[str, str] = {}
    for job in order:
        memory = 0.0
        for s in list(pool):
            if taken[job.name] and memory >= need(job):
                break
            if eligible(job, s):
                taken[job.name].append(s)
                memory += usable[s.name]
                pool.remove(s)
        if not taken[job.name] or memory < need(job):
            have = memory + sum(usable[s.name] for s in pool if eligible(job, s))
            reasons[job.name] = (
                "every server it could use is taken by other jobs (the largest choose first)"
                if not have
                else f"needs {gib_text(need(job))} of GPU memory, {gib_text(have)} left for it"
            )
            pool.extend(taken.pop(job.name))
            pool = region_grouped(pool)
    placed = [j for j in order if j.name in taken]
    total_flops = sum(s.flops for s in cost.cluster.servers)
    demand = sum(step_flops(j) for j in placed) or 1.0
    for idx, job in enumerate(placed):
        last = idx == len(placed) - 1
        target = total_flops * step_flops(job) / demand
        flops = sum(s.flops for s in taken[job.name])
        for s in list(pool):
            if not last and flops >= target:
                break
            if eligible(job, s):
                taken[job.name].append(s)
                flops += s.flops
                pool.remove(s)
    return {k: [s.name for s in v] for k, v in taken.items()}, reasons
