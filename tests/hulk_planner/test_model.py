"""The data model validates itself and names the offending field (``InvalidRequest.field``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from planner_helpers import cluster, server, tiny_job

from hulk_planner.errors import HulkError, InvalidRequest, NoFeasiblePlan
from hulk_planner.model import (
    GIB,
    Cluster,
    Job,
    JobPlan,
    Link,
    ModelSpec,
    Plan,
    RegionLink,
    Server,
    Stage,
    Unplaced,
)


def field_of(exc: pytest.ExceptionInfo[InvalidRequest]) -> str:
    return exc.value.field


@pytest.mark.parametrize(
    ("kwargs", "field", "problem"),
    [
        ({"gpus": -1}, "server 'bj-0'.gpus", "greater than zero"),
        ({"gpus": 0}, "server 'bj-0'.gpus", "is 0"),
        ({"gpus": 2.5}, "server 'bj-0'.gpus", "whole number"),
        ({"gpus": True}, "server 'bj-0'.gpus", "number"),
        ({"gpu_memory_gib": 0}, "server 'bj-0'.gpuMemoryGiB", "greater than zero"),
        ({"gpu_memory_gib": math.inf}, "server 'bj-0'.gpuMemoryGiB", "finite"),
        ({"gpu_tflops": math.nan}, "server 'bj-0'.gpuTFLOPS", "finite"),
        ({"gpu_tflops": "312"}, "server 'bj-0'.gpuTFLOPS", "number"),
        ({"region": "  "}, "server 'bj-0'.region", "non-empty"),
        ({"name": ""}, "name", "non-empty"),
        # 1e-300 TFLOPS made the step time infinite: told as too little memory (a trial)
        ({"gpu_tflops": 1e-300}, "server 'bj-0'.gpuTFLOPS", "at least 0.01"),
    ],
)
def test_server_rejects_bad_fields(kwargs: dict[str, Any], field: str, problem: str) -> None:
    args: dict[str, Any] = {
        "name": "bj-0",
        "region": "Beijing",
        "gpus": 8,
        "gpu_memory_gib": 40,
        "gpu_tflops": 312.0,
    }
    args.update(kwargs)
    with pytest.raises(InvalidRequest) as exc:
        Server(**args)
    assert field_of(exc) == field
    assert problem in exc.value.problem
    assert exc.value.fix, exc.value


def test_server_totals_are_per_gpu_times_gpus() -> None:
    s = Server("bj-0", "Beijing", 8, 40, 312.0)
    assert s.memory_bytes == 8 * 40 * 2**30
    assert s.flops == pytest.approx(8 * 312e12)


def test_link_latency_must_not_be_negative_and_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as exc:
        Link("a", "b", -0.5)
    assert field_of(exc) == "link a-b.latencyMs"
    assert "-0.5" in str(exc.value)


def test_link_zero_latency_is_allowed_but_bandwidth_must_be_positive() -> None:
    assert Link("a", "b", 0.0).latency_ms == 0.0
    with pytest.raises(InvalidRequest) as exc:
        Link("a", "b", 1.0, 0.0)
    assert field_of(exc) == "link a-b.bandwidthGbps"


def test_link_joins_two_different_servers_and_is_undirected() -> None:
    with pytest.raises(InvalidRequest) as exc:
        Link("a", "a", 1.0)
    assert field_of(exc) == "link a-a"
    assert Link("a", "b", 1.0).key == Link("b", "a", 9.0).key


def test_region_link_latency_must_not_be_negative() -> None:
    assert RegionLink("r1", "r1", 0.0).latency_ms == 0.0  # intra-region default may be zero
    with pytest.raises(InvalidRequest) as exc:
        RegionLink("r1", "r2", -3)
    assert field_of(exc) == "regionLink r1-r2.latencyMs"


def test_cluster_needs_servers() -> None:
    with pytest.raises(InvalidRequest) as exc:
        Cluster("empty", ())
    assert field_of(exc) == "spec.nodes"


def test_cluster_rejects_duplicate_server_names() -> None:
    with pytest.raises(InvalidRequest) as exc:
        cluster([server("a"), server("b"), server("a", "r2")])
    assert field_of(exc) == "server 'a'"
    assert "twice" in exc.value.problem


def test_cluster_rejects_a_link_to_an_unknown_server() -> None:
    with pytest.raises(InvalidRequest) as exc:
        cluster([server("a"), server("b")], [("a", "zz", 1.0)])
    assert field_of(exc) == "link a-zz"
    assert "'zz'" in exc.value.problem


def test_cluster_rejects_a_pair_listed_twice_in_either_direction() -> None:
    with pytest.raises(InvalidRequest) as exc:
        cluster([server("a"), server("b")], [("a", "b", 1.0), ("b", "a", 2.0)])
    assert "twice" in exc.value.problem


def test_cluster_without_and_with_servers() -> None:
    c = cluster(
        [server("a"), server("b"), server("c", "r2")],
        [("a", "b", 1.0), ("b", "c", 2.0), ("a", "c", 3.0)],
    )
    assert c.regions == ("r1", "r2")
    less = c.without(["b"])
    assert [s.name for s in less.servers] == ["a", "c"]
    assert [(lk.a, lk.b) for lk in less.links] == [("a", "c")]
    more = less.with_servers([server("d", "r3")], [Link("c", "d", 4.0)])
    assert [s.name for s in more.servers] == ["a", "c", "d"]
    assert more.index == {"a": 0, "c": 1, "d": 2}
    assert more.server("d").region == "r3"
    with pytest.raises(InvalidRequest):
        less.with_servers([], [Link("a", "b", 1.0)])  # b is gone


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("spec.model.parameters", {"parameters": 0}),
        ("spec.model.layers", {"layers": -2}),
        ("spec.model.hiddenSize", {"hidden_size": 1.5}),
        ("spec.model.sequenceLength", {"sequence_length": 0}),
        ("spec.model.attentionHeads", {"attention_heads": 0}),
    ],
)
def test_model_spec_rejects_bad_sizes(field: str, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "parameters": 1000,
        "layers": 2,
        "hidden_size": 64,
        "sequence_length": 16,
    }
    args.update(kwargs)
    with pytest.raises(InvalidRequest) as exc:
        ModelSpec(**args)
    assert field_of(exc) == field


def test_model_heads_default_to_hidden_over_128_at_least_one() -> None:
    assert ModelSpec(1000, 2, 1024, 16).heads == 8
    assert ModelSpec(1000, 2, 64, 16).heads == 1
    assert ModelSpec(1000, 2, 64, 16, attention_heads=4).heads == 4


@pytest.mark.parametrize("name", ["GPT2", "my_job", "-job", "job-", ""])
def test_job_name_must_be_a_kubernetes_name(name: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        Job(name, ModelSpec(1000, 2, 64, 16), 8, 1)
    assert field_of(exc) == "metadata.name"


def test_job_batch_sizes() -> None:
    with pytest.raises(InvalidRequest) as exc:
        Job("j", ModelSpec(1000, 2, 64, 16), 4, 8)
    assert field_of(exc) == "spec.training.microBatchSize"
    with pytest.raises(InvalidRequest) as exc:
        Job("j", ModelSpec(1000, 2, 64, 16), 0, 1)
    assert field_of(exc) == "spec.training.globalBatchSize"
    assert Job("j.v2", ModelSpec(1000, 2, 64, 16), 8, 8).micro_batch_size == 8
    # 10**19 sequences overflowed a C long in the cost model: a traceback (a trial)
    with pytest.raises(InvalidRequest) as exc:
        Job("j", ModelSpec(1000, 2, 64, 16), 10**19, 1)
    assert field_of(exc) == "spec.training.globalBatchSize"
    assert "at most 1,000,000,000" in exc.value.problem and exc.value.fix == "check the value"


@pytest.mark.parametrize(
    ("layers", "nodes", "parallelism", "field"),
    [
        ((3, 3), ("a",), "data", "stages[].layers"),
        ((-1, 2), ("a",), "data", "stages[].layers"),
        ((0, 2), (), "data", "stages[].nodes"),
        ((0, 2), ("a",), "pipeline", "stages[].parallelism"),
    ],
)
def test_stage_validation(
    layers: tuple[int, int], nodes: tuple[str, ...], parallelism: Any, field: str
) -> None:
    with pytest.raises(InvalidRequest) as exc:
        Stage(layers, nodes, parallelism)
    assert field_of(exc) == field


def test_job_plan_nodes_replicas_and_plan_assignment() -> None:
    data = JobPlan(
        "j",
        (Stage((0, 2), ("a", "b")), Stage((2, 4), ("c", "d"))),
        micro_batches=4,
    )
    tensor = JobPlan("k", (Stage((0, 4), ("e", "f", "g"), "tensor"),), micro_batches=8)
    assert data.nodes == ("a", "b", "c", "d")
    assert data.replicas == 2
    assert tensor.replicas == 1  # tensor nodes split one replica
    assert math.isnan(data.predicted_iteration_seconds)
    plan = Plan("hulk", (data, tensor), (Unplaced("x", "too big"),))
    assert plan.job("k") is tensor
    assert plan.job("x") is None
    assert plan.assignment == {n: "j" for n in "abcd"} | {n: "k" for n in "efg"}


def test_error_types_and_message() -> None:
    err = InvalidRequest("spec.nodes[3].gpus", "must be greater than zero", "give a count")
    assert str(err) == "spec.nodes[3].gpus: must be greater than zero (give a count)"
    assert isinstance(err, ValueError) and isinstance(err, HulkError)
    assert str(InvalidRequest("", "bad")) == "bad"
    nf = NoFeasiblePlan("not enough memory")
    assert nf.reason == "not enough memory" and isinstance(nf, HulkError)
    assert not isinstance(nf, ValueError)


def test_helpers_build_what_the_docstring_says() -> None:
    # The hand computations of the other tests rest on these numbers.
    s = server("a")
    assert s.flops * 0.4 == pytest.approx(1e12)
    job = tiny_job()
    assert job.model.parameters / job.model.layers == 250_000
    assert GIB == 2**30


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Server(" ", "r", 1, 1, 1), "name"),
        (lambda: Server("a", "r", 1, 1, 1, zone=5), "server 'a'.zone"),  # type: ignore[arg-type]
        (lambda: Server("a", "r", 1, 1, 1, gpu_product=5), "server 'a'.gpuProduct"),  # type: ignore[arg-type]
        (lambda: Link(None, "b", 1), "link None-b.a"),  # type: ignore[arg-type]
        (lambda: RegionLink(None, "x", 1), "regionLink None-x.a"),  # type: ignore[arg-type]
        (lambda: Cluster(None, (server("a"),)), "metadata.name"),  # type: ignore[arg-type]
        (lambda: Cluster("c", ({"name": "x"},)), "spec.nodes[0]"),  # type: ignore[arg-type]
        (lambda: Cluster("c", (server("a"),), None), "spec.links"),  # type: ignore[arg-type]
        (
            lambda: Cluster(
                "c", (server("a"),), (), (RegionLink("r1", "r2", 1), RegionLink("r2", "r1", 2))
            ),
            "regionLink r2-r1",
        ),
        (lambda: ModelSpec(1, 1, 1, 1, preset="nope"), "spec.model.preset"),
        (lambda: Job("j", "bert-large", 8, 1), "spec.model"),  # type: ignore[arg-type]
        (lambda: Job("j", tiny_job().model, 8, 1, priority="high"), "spec.priority"),  # type: ignore[arg-type]
        (lambda: Job("j", tiny_job().model, 8, 1, priority=math.nan), "spec.priority"),  # type: ignore[arg-type]
        (lambda: Stage(5, ("a",)), "stages[].layers"),  # type: ignore[arg-type]
        (lambda: Stage(("0", "5"), ("a",)), "stages[].layers"),  # type: ignore[arg-type]
        (lambda: Stage((0, 5), "abc"), "stages[].nodes"),  # type: ignore[arg-type]
        (lambda: Stage((0, 5), ("a", "a")), "stages[].nodes"),
        (lambda: JobPlan("j", (), 1), "jobs[j].stages"),
        (lambda: JobPlan("j", (Stage((0, 1), ("a",)),), -1), "jobs[j].microBatches"),
        (
            lambda: JobPlan("j", (Stage((0, 1), ("a",)),), 1, -1.0),
            "jobs[j].predictedIterationSeconds",
        ),
        (lambda: Plan("p", None), "jobs"),  # type: ignore[arg-type]
        (lambda: Unplaced("j", None), "unplaced[j].reason"),  # type: ignore[arg-type]
    ],
)
def test_every_class_refuses_what_the_file_readers_refuse(build: Any, field: str) -> None:
    """Before, these were accepted or failed as TypeError/AttributeError (a trial)."""
    with pytest.raises(InvalidRequest) as exc:
        build()
    assert exc.value.field == field


def test_whole_floats_and_iterables_are_kept_as_the_types_they_name() -> None:
    s = Server("a", "r", 8.0, 80, 312)  # type: ignore[arg-type]
    assert type(s.gpus) is int and s.gpus == 8
    m = ModelSpec(1.5e9, 24, 1024, 512)  # type: ignore[arg-type]
    assert type(m.parameters) is int
    c = Cluster("c", (x for x in (server("a"), server("b"))))  # type: ignore[arg-type]
    assert isinstance(c.servers, tuple) and len(c.servers) == 2 and len(c.servers) == 2
    st = Stage([0, 2], ["a"])  # type: ignore[arg-type]
    assert st.layers == (0, 2) and st.nodes == ("a",)
    assert Job("j", m, 8, 1, priority=3.0).priority == 3  # type: ignore[arg-type]


def test_numpy_integers_are_whole_numbers() -> None:
    """Before, ``Stage((np.int64(0), np.int64(4)), ...)`` was "must be a pair of whole
    numbers" (a review)."""
    import numpy as np

    st = Stage((np.int64(0), np.int64(4)), ("a",))  # type: ignore[arg-type]
    assert st.layers == (0, 4) and all(type(v) is int for v in st.layers)
    m = ModelSpec(1.5e9, 24, 1024, 512)
    job = Job("j", m, 8, 1, priority=np.int32(2))  # type: ignore[arg-type]
    assert job.priority == 2 and type(job.priority) is int
    with pytest.raises(InvalidRequest):
        Stage((np.int64(4), np.int64(4)), ("a",))  # type: ignore[arg-type]


def test_layers_are_bounded_as_the_crd_bounds_them() -> None:
    """``hulk plan`` planned 200,000 layers that ``kubectl apply`` refuses (a trial)."""
    from pathlib import Path

    import yaml

    from hulk_planner.errors import InvalidRequest
    from hulk_planner.model import MAX_LAYERS, ModelSpec

    crd = Path(__file__).parents[2] / "crds" / "hulktrainingjobs.hulk.dev.yaml"
    schema = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]
    model = schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]
    assert model["properties"]["layers"]["maximum"] == MAX_LAYERS
    assert ModelSpec(10**9, MAX_LAYERS, 1024, 1024).layers == MAX_LAYERS
    with pytest.raises(InvalidRequest) as exc:
        ModelSpec(10**9, MAX_LAYERS * 2, 1024, 1024)
    assert exc.value.field == "spec.model.layers" and "at most 100,000" in str(exc.value)


@pytest.mark.parametrize(
    ("field", "index", "bound"),
    [("parameters", 0, 10**15), ("hiddenSize", 2, 10**6), ("sequenceLength", 3, 10**8)],
)
def test_every_model_size_is_bounded_as_the_crd_bounds_it(
    field: str, index: int, bound: int
) -> None:
    """1e154 for both hiddenSize and sequenceLength overflowed the activation memory into a
    traceback from ``hulk plan`` (a user trial); each size has a bound now, the CRD's."""
    from pathlib import Path

    import yaml

    from hulk_planner.errors import InvalidRequest
    from hulk_planner.model import ModelSpec

    crd = Path(__file__).parents[2] / "crds" / "hulktrainingjobs.hulk.dev.yaml"
    schema = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]
    model = schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]
    assert model["properties"][field]["maximum"] == bound
    sizes: list[Any] = [10**9, 24, 1024, 1024]
    sizes[index] = bound
    assert ModelSpec(*sizes) is not None
    sizes[index] = 1e154
    with pytest.raises(InvalidRequest) as exc:
        ModelSpec(*sizes)
    assert exc.value.field == f"spec.model.{field}" and f"at most {bound:,}" in str(exc.value)
    heads = model["properties"]["attentionHeads"]["maximum"]
    with pytest.raises(InvalidRequest, match="attentionHeads"):
        ModelSpec(10**9, 24, 1024, 1024, attention_heads=heads + 1)


def test_the_crd_describes_every_field_a_user_writes_and_names_every_preset() -> None:
    """``kubectl explain hulktrainingjob.spec.model`` said ``<no description>`` for the
    model's sizes, the batch sizes and the template's parts (a user trial); the presets it
    names are the planner's."""
    from pathlib import Path

    import yaml

    from hulk_planner.presets import PRESETS

    crd = Path(__file__).parents[2] / "crds" / "hulktrainingjobs.hulk.dev.yaml"
    schema = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def undescribed(node: dict[str, Any], where: str) -> list[str]:
        out = [] if node.get("description") else [where]
        for name, child in (node.get("properties") or {}).items():
            if where.endswith("template.spec") or where.endswith("conditions"):
                continue  # (a PodSpec's fields are Kubernetes'; a condition's, metav1's)
            out += undescribed(child, f"{where}.{name}")
        return out

    spec = schema["properties"]["spec"]
    assert undescribed(spec, "spec") == []
    status = schema["properties"]["status"]["properties"]
    assert status["observedGeneration"].get("description")
    preset = spec["properties"]["model"]["properties"]["preset"]["description"]
    for name in PRESETS:
        assert name in preset, name
    conds = schema["properties"]["status"]["properties"]["conditions"]["description"]
    assert "Complete" in conds


def test_informational_text_of_another_type_is_told_how_the_file_writes_it() -> None:
    """``gpuProduct: true`` was told to be written 'True', Python's spelling (a review)."""
    with pytest.raises(InvalidRequest) as exc:
        Server("a", "r", 1, 1, 1, gpu_product=True)  # type: ignore[arg-type]
    assert str(exc.value) == (
        "server 'a'.gpuProduct: must be text, got true (write it as a string: 'true')"
    )
