"""The cost model: predicted seconds per optimizer step of any plan, independent of how the
plan was found. docs/cost-model.md gives every formula with its source; in short, for a job
with ``p`` stages, ``R`` data-parallel replicas and ``m`` micro-batches per replica:

- compute of stage k per micro-batch (forward + backward): ``6 * P/L * n_k * b * s / C_k``,
  ``C_k`` the slowest replica's FLOP/s times ``EFFICIENCY``;
- tensor-parallel stages add 4 ring all-reduces of ``b*s*h`` 16-bit values per layer;
- activations between stages: ``b*s*h`` 16-bit values each way per micro-batch, costing
  ``latency + bytes / bandwidth`` on the slowest replica's link;
- pipeline (1F1B): fill and drain through every stage and link, then ``m - 1`` more
  micro-batches at the pace of the slowest stage or link, plus the wait of 1F1B's window:
  stage k keeps at most ``min(m, p - k)`` micro-batches in flight, so a round trip over
  slow links that outlasts them stalls the pipeline (``window_wait``);
- data parallelism: a ring all-reduce of each stage's 16-bit gradients among its replicas,
  ``2(R-1) * latency + 2(R-1)/R * bytes / bandwidth`` on the ring's slowest hop;
- memory per server: 16 bytes per parameter it holds (mixed-precision Adam) plus
  ``s*b*h*34`` bytes per layer per micro-batch in flight (selective recomputation), with
  ``min(m, p - k)`` micro-batches in flight at stage k under 1F1B, within ``MEMORY_USABLE`` of its
  GPU memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from hulk_planner.errors import InvalidRequest
from hulk_planner.model import Cluster, Job, JobPlan, Plan, Server
from hulk_planner.topology import Network

EFFICIENCY = 0.40  # achieved fraction of peak FLOP/s (Megatron-LM reaches 0.52 on A100s)
FLOPS_PER_PARAM_TOKEN = 6.0  # forward + backward (Kaplan et al. 2020; Megatron Eq. 3)
BYTES_PER_PARAM = 16.0  # fp16 weights + grads, fp32 master, Adam m and v (ZeRO)
ACTIVATION_FACTOR = 34.0  # bytes per s*b*h per layer, selective recomputation (Korthikanti)
BYTES_PER_VALUE = 2.0  # 16-bit activations and gradients on the wire
MEMORY_USABLE = 0.90  # of GPU memory, the rest for the CUDA context and fragmentation
# Grids scored in plain Python rather than numpy (where that is faster, measured): up to
# SMALL_GRID servers, or SMALL_PIPELINE stages of one replica (no loops over replicas).
SMALL_GRID, SMALL_PIPELINE = 48, 64
WINDOW_PYTHON = 12  # window_wait's loops in plain Python up to this many stages (measured)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where the predicted step time goes (seconds)."""

    total: float
    compute: float
    pipeline_comm: float
    data_parallel: float
    bubble: float
    memory_ok: bool
    window: float = 0.0  # what 1F1B's window makes the micro-batches wait (part of bubble)


@dataclass(frozen=True, slots=True)
class StageTerms:
    """A pipeline's terms (seconds): ``stage_t[k]`` stage k's compute per micro-batch,
    ``link_t[k]`` a micro-batch's crossing of boundary k -> k+1 (latency and transfer),
    ``link_bw[k]`` its transfer alone (the boundary's pace), ``dp`` the gradient
    all-reduce; ``memory_ok`` whether every stage fits."""

    stage_t: list[float]
    link_t: list[float]
    link_bw: list[float]
    dp: float
    memory_ok: bool


def window_wait(stage_t: Sequence[float], link_t: Sequence[float], m: int, pace: float) -> float:
    """Seconds 1F1B's window adds to a pipeline paced at ``pace`` (its slowest stage or
    link): where a round trip over slow links outlasts the micro-batches in flight.

    Stage k keeps at most ``w = p - k`` micro-batches in flight where that is below ``m``:
    it starts micro-batch ``i + w`` right after micro-batch i's backward, and stage ``k'``
    (after k) runs micro-batch ``j``'s backward right after ``j + p - k' - 1``'s forward. So
    micro-batch i's backward on ``k'`` waits for the loop over stages k..k' (their compute,
    each link between them twice) that began with micro-batch ``i - c``'s, ``c = k' - k + 1``
    micro-batches earlier: a chain of up to ``ceil((m - w) / c)`` loops (the window binds
    for the last ``m - w`` micro-batches), each taking ``loop - c * pace`` more than the
    steady phase allows. The wait is the longest such chain, 0.0 if no loop outlasts.
    Against an event simulation of the reference trainer's schedule
    (``examples/train_stage.schedule``; tests/hulk_planner/test_schedule.py) the step
    with it is within a few percent on Hulk's and the baselines' plans; on random
    pipelines with several links each far slower than any stage, it is 0.8x to 1.2x."""
    p = len(stage_t)
    first = max(p - m + 1, 0)  # the stages whose window binds: p - k < m
    if first >= p - 1:  # the last stage's loop is its own compute, within the pace
        return 0.0
    if p > WINDOW_PYTHON:
        return _window_wait_numpy(stage_t, link_t, m, pace, first)
    wait = 0.0
    for k in range(first, p - 1):
        loop = stage_t[k]
        for kk in range(k + 1, p):
            loop += stage_t[kk] + 2 * link_t[kk - 1]
            c = kk - k + 1
            if loop > c * pace:
                wait = max(wait, -((p - k - m) // c) * (loop - c * pace))
    return wait


def _window_wait_numpy(
    stage_t: Sequence[float], link_t: Sequence[float], m: int, pace: float, first: int
) -> float:
    """``window_wait`` for long pipelines: every loop (from k over k..kk) at once."""
    p = len(stage_t)
    if not all(math.isfinite(x) for x in link_t):
        return math.inf  # a missing link: the step is infinite anyway
    t_sum = np.concatenate(([0.0], np.cumsum(stage_t)))
    l_sum = np.concatenate(([0.0], np.cumsum(link_t)))
    k = np.arange(first, p - 1)[:, None]
    kk = np.arange(p)[None, :]
    c = kk - k + 1
    loop = t_sum[kk + 1] - t_sum[k] + 2 * (l_sum[kk] - l_sum[k])
    over = np.where(c >= 2, loop - c * pace, 0.0)
    chains = -((p - k - m) // np.maximum(c, 1))
    return float(max(0.0, (chains * over).max()))


def micro_batches(job: Job, replicas: int) -> int:
    """Micro-batches per pipeline replica per optimizer step."""
    return max(1, math.ceil(job.global_batch_size / (job.micro_batch_size * max(1, replicas))))


def batch_note(job: Job, plan: JobPlan) -> str | None:
    """Why a step of ``plan`` trains more sequences than the job's ``globalBatchSize``
    (micro-batches are whole: ``micro_batches`` rounds up), or None when it trains exactly
    that many."""
    trained = plan.micro_batches * job.micro_batch_size * plan.replicas
    if trained == job.global_batch_size:
        return None
    return (
        f"globalBatchSize {job.global_batch_size} is not a multiple of microBatchSize "
        f"{job.micro_batch_size} x {plan.replicas} pipeline replica(s): a step trains "
        f"{trained} sequences ({plan.micro_batches} micro-batches per replica)"
    )


def activation_bytes_per_layer(job: Job) -> float:
    m = job.model
    return m.sequence_length * job.micro_batch_size * m.hidden_size * ACTIVATION_FACTOR


def params_per_layer(job: Job) -> float:
    return job.model.parameters / job.model.layers


def memory_need_bytes(job: Job) -> float:
    """GPU memory a job needs at the least: its training state, plus one micro-batch of
    activations through every layer."""
    return job.model.parameters * BYTES_PER_PARAM + job.model.layers * activation_bytes_per_layer(
        job
    )


def gib_text(nbytes: float) -> str:
    """Bytes as GiB for a message: whole GiB from 10 up, else two figures (``0.0012 GiB``:
    a server of 0.001 GiB read "0 GiB" beside a layer of "0 GiB": a user trial)."""
    x = nbytes / 2**30
    if abs(x) < 1e-6:  # (a difference of equal float sums: 1.1e-13 GiB read as a leftover)
        x = 0.0
    return f"{x:.0f} GiB" if 10 <= x < 1e6 or x == 0 else f"{x:.2g} GiB"


def smaller(job: Job) -> str:
    """What to make smaller to need less GPU memory: the model, or its micro-batches while
    they hold more than one sequence ("lower microBatchSize" where it is 1 already sent
    users to a field with nothing left to give: a user trial)."""
    if job.micro_batch_size > 1:
        return "a smaller model or microBatchSize"
    return "a smaller model (microBatchSize is 1 already)"


def too_big(
    job: Job,
    servers: Sequence[Server],
    where: str = "the whole cluster has",
    fix: str | None = None,
    largest: str = "the largest server has",
    per_layer: bool = True,
) -> str | None:
    """Why ``job`` fits on no subset of ``servers``, naming the fix; None when their memory
    could hold it: it needs more GPU memory than they have in all, or no server can hold
    one of its layers (a pipeline stage holds whole layers on each of its servers; with
    ``per_layer``, as every planner's but Megatron baseline C's stages do). ``where``
    and ``largest`` say which servers these are; ``fix`` what to do when they have too
    little memory in all (by default: add servers, or ``smaller(job)``)."""
    if fix is None:
        fix = f"add servers, or use {smaller(job)}"
    need = memory_need_bytes(job)
    total = sum(s.memory_bytes for s in servers) * MEMORY_USABLE
    one = stage_memory(job, 1, 1)  # the last stage's in-flight micro-batches: one
    room = max((server_capacity(s) for s in servers), default=0.0)
    layer = (
        f"one layer needs {gib_text(one)} of GPU memory (its parameters, with one "
        f"micro-batch's activations) and {largest} {gib_text(room)} usable"
    )
    wide = bool(per_layer and servers) and one > room
    if need > total and wide:  # (a small cluster: more servers like these would not do)
        return (
            f"fits nowhere: needs {gib_text(need)} of GPU memory, {where} "
            f"{gib_text(total)} usable, and {layer}: more servers like these would not "
            "hold it (use a smaller model, or more layers, spec.model.layers, on servers with "
            "more GPU memory)"
        )
    if need > total:
        return (
            f"fits nowhere: needs {gib_text(need)} of GPU memory, {where} "
            f"{gib_text(total)} usable ({fix})"
        )
    if wide:
        lower = "microBatchSize or sequenceLength" if job.micro_batch_size > 1 else "sequenceLength"
        return (
            f"fits nowhere: {layer}; waiting does not help (split the model into more layers, "
            f"spec.model.layers; or lower {lower}; or add servers with more GPU memory)"
        )
    return None


def server_capacity(server: Server) -> float:
    return server.memory_bytes * MEMORY_USABLE


def stage_memory(job: Job, layers: int, in_flight: int, split: int = 1) -> float:
    """Bytes a server of a stage needs: ``layers`` layers, ``in_flight`` micro-batches of
    activations, its share of a tensor-parallel split."""
    per_layer = params_per_layer(job) * BYTES_PER_PARAM + in_flight * activation_bytes_per_layer(
        job
    )
    return layers * per_layer / split


def stage_need(job: Job, jp: JobPlan, k: int) -> float:
    """Bytes each server of ``jp``'s stage ``k`` needs (``stage_memory``): its layers, the
    micro-batches in flight there under 1F1B, its share of a tensor-parallel split."""
    st = jp.stages[k]
    in_flight = min(jp.micro_batches, len(jp.stages) - k)
    split = len(st.nodes) if st.parallelism == "tensor" else 1
    return stage_memory(job, st.num_layers, in_flight, split)


def link_terms(
    lat: Sequence[Sequence[float]],
    bw: Sequence[Sequence[float]],
    rows: Sequence[Sequence[int]],
    msg: float,
) -> tuple[list[float], list[float]]:
    """Each stage boundary's crossing of a pipeline of replicated stages (``rows``: server
    ids, stage by stage), in plain Python on ``Network.rows``' tables: its slowest
    replica's latency plus transfer of ``msg`` bytes, and its slowest transfer alone (the
    link terms of ``data_seconds_rows``; ``layout._links_floor`` bounds candidates with
    them)."""
    link_t: list[float] = []
    link_bw: list[float] = []
    for here, there in pairwise(rows):
        worst = worst_bw = 0.0
        for a, z in zip(here, there, strict=True):
            transfer = msg / (bw[a][z] * 1e9 / 8)
            worst = max(worst, lat[a][z] / 1e3 + transfer)
            worst_bw = max(worst_bw, transfer)
        link_t.append(worst)
        link_bw.append(worst_bw)
    return link_t, link_bw


def ring_time(net: Network, ids: Sequence[int], nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` among servers ``ids``, the ring going in the order the
    plan lists them (Thakur, Rabenseifner and Gropp 2005), paced by its slowest hop."""
    p = len(ids)
    if p < 2:
        return 0.0
    a = np.asarray(ids)
    b = np.roll(a, -1)
    lats, bws = net.pairs(a, b)
    lat = float(lats.max()) / 1e3
    bw = float(bws.min()) * 1e9 / 8
    return 2 * (p - 1) * lat + 2 * (p - 1) / p * nbytes / bw


class CostModel:
    """Scores plans on one cluster. ``job_seconds`` is ``inf`` for a plan that does not fit
    in memory or needs a pair of servers that cannot communicate."""

    def __init__(self, cluster: Cluster, network: Network | None = None) -> None:
        if not isinstance(cluster, Cluster):  # (a string raised AttributeError: a trial)
            raise InvalidRequest(
                "cluster",
                f"must be a Cluster, got {type(cluster).__name__}",
                "build one with Cluster(...), or read a topology file with "
                "hulk_planner.io.load_cluster",
            )
        if network is not None and not isinstance(network, Network):
            raise InvalidRequest(
                "network", f"must be a Network, got {type(network).__name__}", "drop it"
            )
        self.cluster = cluster
        self.net = network or Network(cluster)
        self.flops = np.array([s.flops * EFFICIENCY for s in cluster.servers])
        self.capacity = np.array([server_capacity(s) for s in cluster.servers])
        self.flops_list: list[float] = self.flops.tolist()
        self.capacity_list: list[float] = self.capacity.tolist()

    def breakdown(self, job: Job, jp: JobPlan) -> StepBreakdown:
        """The step time's parts (``total`` ``inf`` where a stage does not fit or a link is
        missing); a plan that is not one of ``job`` on this cluster raises
        ``InvalidRequest`` (``check_job_plan``; before, a plan of 10 of 24 layers was scored
        here as a fast one: a library trial)."""
        check_job_plan(jp, job, self.cluster)
        if all(st.parallelism == "data" for st in jp.stages):
            sizes = {len(st.nodes) for st in jp.stages}
            if len(sizes) == 1:
                grid = np.array([self.net.ids(st.nodes) for st in jp.stages])
                layers = np.array([st.num_layers for st in jp.stages], dtype=float)
                return self._data_breakdown(job, grid, layers, jp.micro_batches)
        return self._general_breakdown(job, jp)

    def data_seconds(
        self,
        job: Job,
        grid: np.ndarray | list[list[int]],
        layers: np.ndarray | list[int],
        m: int,
    ) -> float:
        """Step time of a data-parallel pipeline given as server ids ``grid[stage, replica]``
        and layers per stage (the planners' fast path; same numbers as ``job_seconds``).
        Small grids are scored in plain Python (``data_seconds_rows``), the rest by numpy."""
        p, r = len(grid), len(grid[0])
        if self.net.rows is not None and (p * r <= SMALL_GRID or (r == 1 and p <= SMALL_PIPELINE)):
            rows = grid.tolist() if isinstance(grid, np.ndarray) else grid
            counts = layers.tolist() if isinstance(layers, np.ndarray) else layers
            return self.data_seconds_rows(job, rows, counts, m)
        return self._data_breakdown(job, np.asarray(grid), np.asarray(layers, dtype=float), m).total

    def data_seconds_rows(
        self, job: Job, rows: list[list[int]], layers: list[int], m: int
    ) -> float:
        """``data_seconds`` in plain Python for small grids, where numpy's per-call overhead
        is most of the time (the search scores thousands of them a second): the same
        formulas as ``_data_breakdown``, term by term, and the same numbers (tested)."""
        lat, bw = self.net.rows  # type: ignore[misc]
        flops = self.flops_list
        p, r = len(rows), len(rows[0])
        b, s, h = job.micro_batch_size, job.model.sequence_length, job.model.hidden_size
        ppl = params_per_layer(job)
        flop_per_layer = FLOPS_PER_PARAM_TOKEN * ppl * b * s
        msg = b * s * h * BYTES_PER_VALUE
        link_t: list[float] = []
        link_bw: list[float] = []
        if r == 1:  # the common case, without the loops over replicas
            ids = [row[0] for row in rows]
            stage_t = [flop_per_layer * n / flops[i] for i, n in zip(ids, layers, strict=True)]
            for a, z in pairwise(ids):
                transfer = msg / (bw[a][z] * 1e9 / 8)
                link_t.append(lat[a][z] / 1e3 + transfer)
                link_bw.append(transfer)
        else:
            stage_t = [
                flop_per_layer * n / min([flops[i] for i in row])
                for row, n in zip(rows, layers, strict=True)
            ]
            link_t, link_bw = link_terms(lat, bw, rows, msg)
        dp = 0.0
        if r > 1:
            for row, n in zip(rows, layers, strict=True):
                hop_lat, hop_bw = 0.0, math.inf
                for c in range(r):
                    a, z = row[c], row[(c + 1) % r]
                    hop_lat = max(hop_lat, lat[a][z])
                    hop_bw = min(hop_bw, bw[a][z])
                grads = ppl * n * BYTES_PER_VALUE
                dp = max(
                    dp,
                    2 * (r - 1) * (hop_lat / 1e3) + 2 * (r - 1) / r * grads / (hop_bw * 1e9 / 8),
                )
        compute = sum(stage_t)
        pace = max(max(stage_t), max(link_bw, default=0.0))
        total = compute + 2 * sum(link_t) + (m - 1) * pace + window_wait(stage_t, link_t, m, pace)
        total += dp
        # Memory: the layout's balancing already keeps every stage within memory, but this
        # scores any grid, so check as _data_breakdown does.
        act = activation_bytes_per_layer(job)
        cap = self.capacity_list
        for k, (row, n) in enumerate(zip(rows, layers, strict=True)):
            if n * (ppl * BYTES_PER_PARAM + min(m, p - k) * act) > min([cap[i] for i in row]):
                return math.inf
        return total if math.isfinite(total) else math.inf

    def _data_breakdown(
        self, job: Job, grid: np.ndarray, layers: np.ndarray, m: int
    ) -> StepBreakdown:
        """Vectorised cost of a pure data-parallel pipeline: ``grid[k, r]`` is the server of
        stage k in replica r."""
        net = self.net
        p, r = grid.shape
        b, s, h = job.micro_batch_size, job.model.sequence_length, job.model.hidden_size
        flop_per_layer = FLOPS_PER_PARAM_TOKEN * params_per_layer(job) * b * s
        msg = b * s * h * BYTES_PER_VALUE
        stage_t = flop_per_layer * layers / self.flops[grid].min(axis=1)
        in_flight = np.minimum(m, p - np.arange(p))
        need = layers * (
            params_per_layer(job) * BYTES_PER_PARAM + in_flight * activation_bytes_per_layer(job)
        )
        memory_ok = bool((need <= self.capacity[grid].min(axis=1)).all())
        if p > 1:
            lats, bws = net.pairs(grid[:-1], grid[1:])
            lat = lats / 1e3
            transfer = msg / (bws * 1e9 / 8)
            link_t = (lat + transfer).max(axis=1)
            link_bw = transfer.max(axis=1)
        else:
            link_t = link_bw = np.zeros(0)
        dp = 0.0
        if r > 1:
            nxt = np.roll(grid, -1, axis=1)
            lats, bws = net.pairs(grid, nxt)
            hop_lat = lats.max(axis=1) / 1e3
            hop_bw = bws.min(axis=1) * 1e9 / 8
            grads = params_per_layer(job) * layers * BYTES_PER_VALUE
            dp = float((2 * (r - 1) * hop_lat + 2 * (r - 1) / r * grads / hop_bw).max())
        return self._combine(list(stage_t), list(link_t), list(link_bw), dp, m, memory_ok)

    @staticmethod
    def _combine(
        stage_t: list[float],
        link_t: list[float],
        link_bw: list[float],
        dp: float,
        m: int,
        memory_ok: bool,
    ) -> StepBreakdown:
        """Fill and drain through every stage and link (each way), then ``m - 1`` more
        micro-batches at the pace of the slowest stage or link, plus what 1F1B's window
        makes them wait (``window_wait``), then the gradient all-reduce."""
        compute = float(sum(stage_t))
        comm = 2 * float(sum(link_t))
        pace = float(max(max(stage_t), max(link_bw, default=0.0)))
        wait = window_wait(stage_t, link_t, m, pace)
        pipe = compute + comm + (m - 1) * pace + wait
        total = pipe + dp
        if not memory_ok or not math.isfinite(total):
            total = math.inf
        return StepBreakdown(
            total=total,
            compute=m * compute / len(stage_t),
            pipeline_comm=comm,
            data_parallel=dp,
            bubble=pipe - m * float(max(stage_t)),
            memory_ok=memory_ok,
            window=wait,
        )

    def _general_breakdown(self, job: Job, jp: JobPlan) -> StepBreakdown:
        """Any mix of data and tensor stages (stage by stage)."""
        t = self.stage_terms(job, jp)
        return self._combine(t.stage_t, t.link_t, t.link_bw, t.dp, jp.micro_batches, t.memory_ok)

    def stage_terms(self, job: Job, jp: JobPlan) -> StageTerms:
        """The terms the step time is made of (``breakdown`` combines them; for a plan of data
        stages alone it computes the same terms vectorised): each stage's compute a
        micro-batch, each boundary's crossing and pace, the gradient all-reduce."""
        net = self.net
        b, s, h = job.micro_batch_size, job.model.sequence_length, job.model.hidden_size
        p = len(jp.stages)
        flop_per_layer = FLOPS_PER_PARAM_TOKEN * params_per_layer(job) * b * s
        msg = b * s * h * BYTES_PER_VALUE
        stage_t: list[float] = []
        link_t: list[float] = []
        link_bw: list[float] = []
        dp = 0.0
        memory_ok = True
        ids_by_stage = [net.ids(st.nodes) for st in jp.stages]
        for k, st in enumerate(jp.stages):
            ids = ids_by_stage[k]
            if st.parallelism == "tensor":
                c = float(self.flops[ids].min()) * len(ids)
                comm = st.num_layers * 4 * ring_time(net, ids, msg)
                stage_t.append(flop_per_layer * st.num_layers / c + comm)
            else:
                c = float(self.flops[ids].min())
                stage_t.append(flop_per_layer * st.num_layers / c)
                grads = params_per_layer(job) * st.num_layers * BYTES_PER_VALUE
                dp = max(dp, ring_time(net, ids, grads))
            if stage_need(job, jp, k) > float(self.capacity[ids].min()):
                memory_ok = False
            if k + 1 < p:
                nxt = ids_by_stage[k + 1]
                if st.parallelism == "data" and jp.stages[k + 1].parallelism == "data":
                    lat, bw = net.pairs(ids, nxt)
                else:  # a tensor group's output is replicated: its best link carries it
                    sub = net.latency_ms[np.ix_(ids, nxt)]
                    i, j = divmod(int(np.argmin(sub)), len(nxt))
                    lat = np.array([sub[i, j]])
                    bw = np.array([net.bandwidth_gbps[ids[i], nxt[j]]])
                transfer = msg / (bw * 1e9 / 8)
                link_t.append(float((lat / 1e3 + transfer).max()))
                link_bw.append(float(transfer.max()))
        return StageTerms(stage_t, link_t, link_bw, dp, memory_ok)

    def job_seconds(self, job: Job, jp: JobPlan) -> float:
        """Predicted seconds per optimizer step; ``inf`` if infeasible. A plan that is not
        one of ``job`` on this cluster raises ``InvalidRequest`` (``check_job_plan``)."""
        return self.breakdown(job, jp).total

    def plan_seconds(self, plan: Plan, jobs: Sequence[Job]) -> dict[str, float]:
        """Per placed job, its predicted step time."""
        by_name = {j.name: j for j in jobs}
        for jp in plan.jobs:
            if jp.name not in by_name:
                raise InvalidRequest(
                    f"jobs[{jp.name}]", "names a job that was not given", "give its Job too"
                )
        return {jp.name: self.job_seconds(by_name[jp.name], jp) for jp in plan.jobs}

    def with_predictions(self, plan: Plan, jobs: Sequence[Job]) -> Plan:
        """The plan with every job's ``predicted_iteration_seconds`` filled in."""
        times = self.plan_seconds(plan, jobs)
        return replace(
            plan,
            jobs=tuple(replace(jp, predicted_iteration_seconds=times[jp.name]) for jp in plan.jobs),
        )


def communicating_pairs(jp: JobPlan) -> list[tuple[str, str]]:
    """The server pairs a plan sends over, as the cost model charges them: each replica's
    neighbouring stages (data stages pair replica r with replica r; a tensor stage, any
    server with the other stage's), and the ring of each stage's servers in listed order
    (data parallel all-reduce, or a tensor group's). In pipeline order, each pair once."""
    out: dict[frozenset[str], tuple[str, str]] = {}
    for k, st in enumerate(jp.stages):
        ring = st.nodes
        if len(ring) > 1:
            for i, a in enumerate(ring):
                out.setdefault(
                    frozenset((a, ring[(i + 1) % len(ring)])), (a, ring[(i + 1) % len(ring)])
                )
        if k + 1 == len(jp.stages):
            break
        nxt = jp.stages[k + 1]
        if st.parallelism == "data" and nxt.parallelism == "data":
            pairs = list(zip(st.nodes, nxt.nodes, strict=False))
        else:
            pairs = [(a, b) for a in st.nodes for b in nxt.nodes]
        for a, b in pairs:
            out.setdefault(frozenset((a, b)), (a, b))
    return [p for key, p in out.items() if len(key) == 2]


def check_stages(plan: Plan, label: Callable[[int, JobPlan], str] | None = None) -> None:
    """Raise ``InvalidRequest`` unless what holds whatever the cluster and jobs does: each
    job's stages cover layers from 0 in order, its data stages have equal replica counts
    (one each beside a tensor stage), and each server is in one stage of one job.
    ``label(i, job_plan)`` names a job in the error's field (default ``jobs[<name>]``)."""
    used: dict[str, str] = {}
    for i, jp in enumerate(plan.jobs):
        w = label(i, jp) if label else f"jobs[{jp.name}]"
        expect = 0
        replicas = None
        # A tensor stage is one group of servers, not a replica per pipeline: beside data
        # stages of several replicas it would serve all of them, which the cost model does
        # not charge (it scored two replicas feeding one tensor group faster than the
        # servers' whole work allows) and examples/train_stage.py refuses (a review)
        tensor = next((k for k, st in enumerate(jp.stages) if st.parallelism == "tensor"), None)
        for k, st in enumerate(jp.stages):
            where = f"{w}.stages[{k}]"
            if st.layers[0] != expect:
                ended = f" where stages[{k - 1}] ends" if k else ""  # (the one that may be wrong)
                raise InvalidRequest(
                    f"{where}.layers",
                    f"starts at layer {st.layers[0]}, not at layer {expect}{ended}",
                    "list the stages in order, each [start, end) going on from the last",
                )
            expect = st.layers[1]
            for n in st.nodes:
                if n in used:
                    raise InvalidRequest(
                        f"{where}.nodes",
                        f"{n} is also used by {used[n]}",
                        "a server runs one stage of one job: give it to one of them",
                    )
                used[n] = jp.name
            if st.parallelism == "data":
                if replicas is not None and len(st.nodes) != replicas:
                    raise InvalidRequest(
                        f"{where}.nodes",
                        f"has {len(st.nodes)} node(s) where the stages before it have "
                        f"{replicas}: data stages need equal replica counts",
                        "give every data stage of the job as many nodes; replica r is the "
                        "r-th node of each",
                    )
                replicas = len(st.nodes)
                if tensor is not None and replicas > 1:
                    raise InvalidRequest(
                        f"{where}.nodes",
                        f"has {replicas} nodes (data-parallel replicas) in a job with a tensor "
                        f"stage (stages[{tensor}]): a tensor stage runs in a pipeline of one "
                        "replica",
                        "give each data stage of the job one node, or make the tensor stage a "
                        f"data stage of {replicas} nodes",
                    )


def validate_plan(plan: Plan, cluster: Cluster, jobs: Sequence[Job]) -> None:
    """Raise ``InvalidRequest`` unless the plan is well formed and fits: ``check_stages``,
    known jobs, ``check_job_plan`` and ``check_memory`` for each."""
    # (arguments of other types raised TypeError or AttributeError inside: a trial)
    for name, value, kind, fix in (
        ("plan", plan, Plan, "read one with hulk_planner.io.load_plan"),
        ("cluster", cluster, Cluster, "give the Cluster the plan was made for"),
    ):
        if not isinstance(value, kind):
            raise InvalidRequest(
                name, f"must be a {kind.__name__}, got {type(value).__name__}", fix
            )
    bad = isinstance(jobs, Job | str | Mapping) or not isinstance(jobs, Iterable)
    listed = [] if bad else list(jobs)
    if bad or not all(isinstance(j, Job) for j in listed):
        raise InvalidRequest("jobs", "must be a list of Job", "give a list: [job, ...]")
    jobs = listed
    check_stages(plan)
    by_name = {j.name: j for j in jobs}
    for jp in plan.jobs:
        job = by_name.get(jp.name)
        if job is None:
            raise InvalidRequest(f"jobs[{jp.name}]", "names a job that was not requested")
        check_job_plan(jp, job, cluster)
        check_memory(jp, job, cluster)


def check_memory(jp: JobPlan, job: Job, cluster: Cluster) -> None:
    """Raise ``InvalidRequest`` naming the first stage a server of which cannot hold its
    share of ``job`` (its layers' training state and the micro-batches in flight there, as
    the cost model counts them; before, ``validate_plan`` passed such a plan, which the cost
    model scores ``inf``: a library trial)."""
    for k, st in enumerate(jp.stages):
        need = stage_need(job, jp, k)
        for n in st.nodes:
            has = server_capacity(cluster.servers[cluster.index[n]])
            if need > has:
                raise InvalidRequest(
                    f"jobs[{jp.name}].stages[{k}].nodes",
                    f"{n} holds {gib_text(has)} of GPU memory usable ({MEMORY_USABLE:.0%}); "
                    f"the stage's {st.num_layers} layer(s) need {gib_text(need)} there",
                    "give the stage fewer layers, or a server with more GPU memory",
                )


def check_job_plan(jp: JobPlan, job: Job, cluster: Cluster) -> None:
    """Raise ``InvalidRequest`` unless ``jp`` lays out ``job`` on ``cluster``: known servers,
    its layers ``[0, layers)`` covered in order, equal replica counts of data stages, the
    micro-batches its batch sizes give (before, the cost model scored a plan of 10 of 24
    layers, or of 0 micro-batches, as a fast one: a trial)."""
    for k, st in enumerate(jp.stages):
        for n in st.nodes:
            if n not in cluster.index:
                where = f"jobs[{jp.name}].stages[{k}].nodes"
                raise InvalidRequest(where, f"unknown server {n!r}", "use servers of the cluster")
    check_stages(Plan("check", (jp,)))
    expect = jp.stages[-1].layers[1]
    if expect != job.model.layers:
        raise InvalidRequest(
            f"jobs[{jp.name}].stages",
            f"cover layers up to {expect}, not {job.model.layers}",
            f"the last stage ends at layer {job.model.layers}, the model's count",
        )
    want = micro_batches(job, jp.replicas)
    if jp.micro_batches != want:
        raise InvalidRequest(
            f"jobs[{jp.name}].microBatches",
            f"is {jp.micro_batches}; its batch sizes over {jp.replicas} replica(s) give {want}",
            f"write {want}",
        )
