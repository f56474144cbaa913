"""Hand-built clusters and jobs shared by the planner tests, sized so that every figure of the
cost model comes out round and can be computed by hand:

- a server of ``tflops=2.5`` with one GPU runs ``2.5e12 * EFFICIENCY(0.4) = 1e12`` FLOP/s;
- ``tiny_job()``: 1e6 parameters in 4 layers (250,000 a layer), hidden 1000, sequence 100,
  micro-batch 1, global batch 8. A layer's forward + backward per micro-batch is
  ``6 * 250,000 * 1 * 100 = 1.5e8`` FLOP, i.e. 1.5e-4 s on such a server; an activation
  message is ``1 * 100 * 1000 * 2 = 2e5`` bytes; a layer's training state is
  ``250,000 * 16 = 4e6`` bytes and one micro-batch of its activations ``100 * 1000 * 34 =
  3.4e6`` bytes.
- ``bandwidth_gbps=8`` is 1e9 bytes/s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from hulk_planner.cost import MEMORY_USABLE, CostModel, validate_plan
from hulk_planner.model import GIB, Cluster, Job, Link, ModelSpec, Plan, RegionLink, Server

LinkTuple = tuple[str, str, float] | tuple[str, str, float, float]
LAYER_SECONDS = 1.5e-4  # one layer, one micro-batch, on a 1e12 FLOP/s server
MESSAGE_BYTES = 2e5
LAYER_STATE_BYTES = 4e6
LAYER_ACTIVATION_BYTES = 3.4e6


def server(
    name: str, region: str = "r1", *, gpus: int = 1, memory_gib: float = 1.0, tflops: float = 2.5
) -> Server:
    return Server(name, region, gpus, memory_gib, tflops)


def usable_gib(nbytes: float) -> float:
    """Per-GPU memory (GiB, one GPU) whose usable part is ``nbytes``."""
    return nbytes / MEMORY_USABLE / GIB


def cluster(
    servers: Iterable[Server],
    links: Iterable[LinkTuple] = (),
    region_links: Iterable[RegionLink] = (),
) -> Cluster:
    return Cluster(
        "hand-built",
        tuple(servers),
        tuple(Link(*lk) for lk in links),
        tuple(region_links),
    )


def tiny_job(
    name: str = "tiny",
    *,
    layers: int = 4,
    parameters: int = 1_000_000,
    global_batch: int = 8,
    micro_batch: int = 1,
) -> Job:
    return Job(name, ModelSpec(parameters, layers, 1000, 100), global_batch, micro_batch)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def assert_valid_plan(plan: Plan, cluster: Cluster, jobs: Sequence[Job]) -> None:
    """Everything a planner promises about its output."""
    validate_plan(plan, cluster, jobs)
    cost = CostModel(cluster)
    by_name = {j.name: j for j in jobs}
    placed = [jp.name for jp in plan.jobs]
    unplaced = [u.name for u in plan.unplaced]
    assert sorted(placed + unplaced) == sorted(by_name), "every job exactly once"
    used = [n for jp in plan.jobs for n in jp.nodes]
    assert len(used) == len(set(used)), "a server is used twice"
    assert set(used) <= set(cluster.index)
    for jp in plan.jobs:
        job = by_name[jp.name]
        starts = [st.layers[0] for st in jp.stages]
        ends = [st.layers[1] for st in jp.stages]
        assert starts[0] == 0 and ends[-1] == job.model.layers
        assert starts[1:] == ends[:-1], "stages are contiguous and in order"
        if all(st.parallelism == "data" for st in jp.stages):
            assert len({len(st.nodes) for st in jp.stages}) == 1, "equal replicas"
        seconds = cost.job_seconds(job, jp)
        assert cost.breakdown(job, jp).memory_ok
        assert math.isfinite(seconds) and seconds > 0
        assert math.isclose(jp.predicted_iteration_seconds, seconds, rel_tol=1e-9)
    for u in plan.unplaced:
        assert u.reason.strip(), f"{u.name} is unplaced without a reason"
