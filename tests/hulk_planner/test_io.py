"""The public file formats (shared/spec/planning-interface.md): ClusterTopology and
HulkTrainingJob in, PlacementPlan out, with the spec's exact field names, round trips, and
errors that name the path of the bad field."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hulk_planner import io
from hulk_planner.datasets import paper_cluster
from hulk_planner.errors import InvalidRequest, InvalidRequests, each_error
from hulk_planner.generate import random_cluster
from hulk_planner.io.jobs import NO_PRESET_TRAINING_FIX
from hulk_planner.model import Job, JobPlan, ModelSpec, Plan, Stage, Unplaced
from hulk_planner.presets import PRESETS, preset_model

API = "hulk.dev/v1alpha1"

# The spec's examples, with every optional field the readers know.
CLUSTER_YAML = """
apiVersion: hulk.dev/v1alpha1
kind: ClusterTopology
metadata: {name: three-cities}
spec:
  nodes:
  - {name: bj-0, region: Beijing, gpus: 8, gpuMemoryGiB: 40, gpuTFLOPS: 312,
     gpuProduct: A100-SXM4-40GB}
  - {name: bj-1, region: Beijing, gpus: 4, gpuMemoryGiB: 24, gpuTFLOPS: 111.1,
     computeCapability: '8.6', zone: beijing-a}
  - {name: ca-0, region: California, gpus: 2, gpuMemoryGiB: 32, gpuTFLOPS: 125}
  links:
  - {a: bj-0, b: bj-1, latencyMs: 10.0, bandwidthGbps: 10}
  - {a: bj-0, b: ca-0, latencyMs: 89.1}
  regionLinks:
  - {a: Beijing, b: California, latencyMs: 95.0, bandwidthGbps: 1.5}
"""

JOB_YAML = """
apiVersion: hulk.dev/v1alpha1
kind: HulkTrainingJob
metadata: {name: gpt2-xl}
spec:
  model:
    preset: gpt2-xl
    parameters: 1557611200
    layers: 48
    hiddenSize: 1600
    sequenceLength: 1024
    attentionHeads: 25
  training:
    globalBatchSize: 512
    microBatchSize: 4
"""

PLAN_JSON = """
{
  "apiVersion": "hulk.dev/v1alpha1",
  "kind": "PlacementPlan",
  "planner": "hulk",
  "jobs": [
    {
      "name": "gpt2-xl",
      "stages": [
        {"layers": [0, 20],  "nodes": ["bj-0", "bj-1"], "parallelism": "data"},
        {"layers": [20, 48], "nodes": ["bj-2", "bj-3"], "parallelism": "data"}
      ],
      "microBatches": 64,
      "predictedIterationSeconds": 2.31
    },
    {
      "name": "t5",
      "stages": [{"layers": [0, 48], "nodes": ["ca-0", "ca-1"], "parallelism": "tensor"}],
      "microBatches": 64,
      "predictedIterationSeconds": null
    }
  ],
  "unplaced": [{"name": "opt-175b", "reason": "needs 2800 GiB of GPU memory, 1900 GiB free"}]
}
"""


def cluster_doc() -> dict[str, Any]:
    return dict(yaml.safe_load(CLUSTER_YAML))


def job_doc() -> dict[str, Any]:
    return dict(yaml.safe_load(JOB_YAML))


# ---- ClusterTopology ----


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_dumped_cluster_reads_back_the_same(fmt: str, tmp_path: Path) -> None:
    """``io.dump_cluster`` (``hulk topology``'s output): a node or link a line in YAML."""
    from hulk_planner.datasets import paper_cluster
    from hulk_planner.model import RegionLink

    cluster = paper_cluster()
    cluster = replace(cluster, region_links=(RegionLink("Beijing", "Rome", 90.0),))
    path = tmp_path / f"c.{fmt}"
    path.write_text(io.dump_cluster(cluster, fmt))
    assert io.load_cluster(path) == cluster
    if fmt == "yaml":
        lines = path.read_text().splitlines()
        assert len(lines) == 4 + 1 + 47 + 1 + len(cluster.links) + 1 + 1
        assert "  - {a: Beijing, b: Rome, latencyMs: 90.0}" in lines


def test_cluster_dict_object_dict_round_trip_keeps_the_spec_field_names() -> None:
    doc = cluster_doc()
    c = io.cluster_from_dict(doc)
    assert [s.name for s in c.servers] == ["bj-0", "bj-1", "ca-0"]
    bj1 = c.server("bj-1")
    assert (bj1.gpus, bj1.gpu_memory_gib, bj1.gpu_tflops) == (4, 24, 111.1)
    assert (bj1.compute_capability, bj1.zone) == ("8.6", "beijing-a")
    assert c.links[1].bandwidth_gbps is None
    assert c.region_links[0].bandwidth_gbps == 1.5
    assert io.cluster_to_dict(c) == doc


def test_cluster_from_file_and_object_dict_object_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_YAML)
    c = io.load_cluster(path)
    assert io.cluster_from_dict(io.cluster_to_dict(c)) == c
    paper = paper_cluster()
    assert io.cluster_from_dict(json.loads(json.dumps(io.cluster_to_dict(paper)))) == paper


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 10_000), explicit=st.booleans())
def test_generated_clusters_round_trip(n: int, seed: int, explicit: bool) -> None:
    c = random_cluster(n, seed=seed, explicit_links=explicit)
    doc = io.cluster_to_dict(c)
    again = io.cluster_from_dict(yaml.safe_load(yaml.safe_dump(doc)))
    assert again == c
    assert io.cluster_to_dict(again) == doc


def test_a_file_with_a_nul_byte_is_told_without_reading_it_all(tmp_path: Path) -> None:
    """``--cluster /dev/zero`` read until memory ran out and was told as a large
    cluster's out of memory (a user trial); a UTF-16 file is told as not UTF-8, with the
    offset of its first NUL."""
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster("/dev/zero")
    assert str(exc.value) == (
        "/dev/zero: is not UTF-8 text (a NUL byte at offset 0) (save it as UTF-8)"
    )
    utf16 = tmp_path / "cluster.yaml"
    utf16.write_text("kind: ClusterTopology\n", encoding="utf-16-le")
    with pytest.raises(InvalidRequest, match="a NUL byte at offset 1"):
        io.load_cluster(utf16)
    # one past a read's chunk: the offset counts the chunks before
    late = tmp_path / "late.yaml"
    late.write_bytes(b"#" * (1 << 20) + b"\n\0")
    with pytest.raises(InvalidRequest, match=f"offset {(1 << 20) + 1}"):
        io.load_cluster(late)


def test_a_missing_server_figure_says_what_to_write() -> None:
    """Before: 'spec.nodes[0].gpuTFLOPS: is required but missing', and no fix (a docs
    trial)."""
    doc = cluster_doc()
    doc["spec"]["nodes"][0].pop("gpuTFLOPS")
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert str(exc.value) == (
        "spec.nodes[0].gpuTFLOPS: is required but missing (add it: peak dense 16-bit TFLOPS "
        "of one GPU: 989 for an H100 SXM, 312 for an A100)"
    )
    doc["spec"]["links"][0].pop("latencyMs")
    doc["spec"]["nodes"][0]["gpuTFLOPS"] = 312
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert exc.value.fix == "add it; docs/formats.md lists each field"  # (not "(... (...))")


def test_a_required_field_spelled_otherwise_is_named_with_the_fix() -> None:
    """Before: 'spec.nodes[0].gpuMemoryGiB: is required but missing' beside a field
    ``gpuMemoryGib`` (a user trial)."""
    doc = cluster_doc()
    node = doc["spec"]["nodes"][0]
    node["gpuMemoryGib"] = node.pop("gpuMemoryGiB")
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert str(exc.value) == (
        "spec.nodes[0].gpuMemoryGiB: is required but missing (the field is spelled "
        "gpuMemoryGiB: rename gpuMemoryGib to it)"
    )
    doc["spec"]["links"][0]["latencyMS"] = doc["spec"]["links"][0].pop("latencyMs")
    node["gpuMemoryGiB"] = node.pop("gpuMemoryGib")
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert exc.value.fix == "the field is spelled latencyMs: rename latencyMS to it"


def test_a_date_yaml_reads_is_shown_as_written() -> None:
    """YAML reads ``2024-01-01`` unquoted as a date: told as ``datetime.date(2024, 1, 1)``
    (a user trial)."""
    doc = job_doc()
    doc["metadata"]["name"] = yaml.safe_load("2024-01-01")
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert "got 2024-01-01 (quote it" in str(exc.value), exc.value
    doc = cluster_doc()
    doc["spec"]["nodes"][0]["gpus"] = yaml.safe_load("2024-01-01 10:00:00")
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert "got 2024-01-01T10:00:00" in str(exc.value) and "datetime" not in str(exc.value)


def test_a_mapping_left_empty_and_its_fields_beside_it_are_told_so() -> None:
    """``model:`` with ``preset:`` under it but not indented (YAML reads them as siblings),
    ``spec: {preset: ...}``, a topology's ``nodes:`` beside an empty ``spec:``: each was
    "is required but missing" with no word of the misplaced field (a user trial)."""

    def error(text: str, read: Any) -> str:
        with pytest.raises(InvalidRequest) as exc:
            read(yaml.safe_load(text))
        return str(exc.value)

    head = "apiVersion: hulk.dev/v1alpha1\nkind: HulkTrainingJob\nmetadata: {name: x}\n"
    assert error(head + "spec:\n  model:\n  preset: bert-large\n", io.job_from_dict) == (
        "spec.model: is empty (indent preset under model; it is spec.model's, written beside it)"
    )
    assert error(head + "spec: {preset: bert-large, layers: 4}\n", io.job_from_dict) == (
        "spec.model: is required but missing (add model: with preset, layers under it; they "
        "are spec.model's, written beside it)"
    )
    assert error(head + "spec: {model: }\n", io.job_from_dict) == (
        "spec.model: is empty (write its fields under it, indented; docs/formats.md lists each)"
    )
    topology = "apiVersion: hulk.dev/v1alpha1\nkind: ClusterTopology\nmetadata: {name: c}\n"
    nodes = "nodes: [{name: a, region: r, gpus: 8, gpuMemoryGiB: 80, gpuTFLOPS: 312}]\n"
    assert error(topology + "spec:\n" + nodes, io.cluster_from_dict) == (
        "spec: is empty (indent nodes under spec; it is spec's, written beside it)"
    )


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda d: d["spec"]["nodes"][1].pop("gpus"), "spec.nodes[1].gpus", "missing"),
        (lambda d: d["spec"]["nodes"][0].pop("name"), "spec.nodes[0].name", "missing"),
        (lambda d: d["spec"].pop("nodes"), "spec.nodes", "missing"),
        (lambda d: d.pop("spec"), "spec", "missing"),
        (lambda d: d["spec"]["nodes"][2].update(gpuTFLOPS="fast"), "spec.nodes[2].gpuTFLOPS", ""),
        (lambda d: d["spec"]["links"][0].pop("latencyMs"), "spec.links[0].latencyMs", "missing"),
        (lambda d: d["spec"]["links"][1].update(latencyMs=-1), "spec.links[1].latencyMs", ""),
        (lambda d: d["spec"]["links"][1].update(b="zz-9"), "spec.links[1] (bj-0 - zz-9)", "'zz-9'"),
        (lambda d: d["spec"]["nodes"][1].update(name="bj-0"), "spec.nodes[1].name", "twice"),
        (lambda d: d["spec"]["nodes"][0].update(gpus=-8), "spec.nodes[0].gpus", ""),
        (lambda d: d["spec"].update(links={"a": 1}), "spec.links", "list"),
        (lambda d: d.update(metadata="x"), "metadata", "mapping"),
        (lambda d: d["spec"]["regionLinks"][0].update(latencyMs=-2), "latencyMs", ""),
        (lambda d: d["spec"]["regionLinks"][0].update(b="Kalifornia"), "spec.regionLinks[0]",
         "unknown region 'Kalifornia'"),
        (lambda d: d["spec"]["regionLinks"].append(
            {"a": "California", "b": "Beijing", "latencyMs": 90}), "spec.regionLinks[1]",
         "California-Beijing is listed twice"),
        (lambda d: d["spec"]["nodes"][0].update(gpus=10**400), "spec.nodes[0].gpus",
         "is too large (401 digits)"),
        # before: 1e300 overflowed the cost model into a traceback; on, 123 or a mapping
        # became servers "True" and "123", a region "{'a': 1}"
        (lambda d: d["spec"]["nodes"][0].update(gpuTFLOPS=1e300), "spec.nodes[0].gpuTFLOPS",
         "must be at most 1,000,000, got 1e+300"),
        (lambda d: d["spec"]["nodes"][0].update(gpuMemoryGiB=1e200), "gpuMemoryGiB", "at most"),
        (lambda d: d["spec"]["links"][0].update(latencyMs=1e300), "latencyMs",
         "at most 10,000,000"),
        (lambda d: d["spec"]["nodes"][0].update(name=True), "spec.nodes[0].name",
         "must be a string, got true"),
        (lambda d: d["spec"]["nodes"][0].update(region={"a": 1}), "spec.nodes[0].region",
         "must be a string"),
        (lambda d: d["spec"]["links"][0].update(a=123), "spec.links[0].a", "got 123"),
    ],
)  # fmt: skip
def test_cluster_errors_name_the_field(mutate: Any, field: str, problem: str) -> None:
    doc = cluster_doc()
    mutate(doc)
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert field in exc.value.field
    assert problem in exc.value.problem
    assert exc.value.fix, exc.value  # each error says what to do (some did not: a trial)


def test_gpu_memory_in_mib_is_refused_with_the_gib_figure() -> None:
    """A MiB figure, as GPU Feature Discovery's ``nvidia.com/gpu.memory`` label gives it,
    was accepted as that many GiB a GPU (a trial): refused past 1 TiB, the operator's bound
    on the label, with the figure in GiB; a figure past any MiB one is told the unit alone."""
    doc = cluster_doc()
    doc["spec"]["nodes"][0]["gpuMemoryGiB"] = 81559
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert exc.value.field == "spec.nodes[0].gpuMemoryGiB"
    assert exc.value.problem == "must be at most 1024, got 81559"
    assert exc.value.fix == "check its unit: gpuMemoryGiB is in GiB; 81559 MiB is 79.6 GiB"
    doc["spec"]["nodes"][0]["gpuMemoryGiB"] = 1024  # the bound itself: 1 TiB
    assert io.cluster_from_dict(doc).servers[0].gpu_memory_gib == 1024
    doc["spec"]["nodes"][0]["gpuMemoryGiB"] = 1e200
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert exc.value.fix == "check its unit: gpuMemoryGiB is in GiB"


def test_kind_and_api_version_are_checked() -> None:
    doc = cluster_doc()
    doc["kind"] = "HulkTrainingJob"
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc, "c.yaml")
    assert exc.value.field == "c.yaml: kind"
    doc = cluster_doc()
    doc["apiVersion"] = "hulk.dev/v2"
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc, "c.yaml")
    assert exc.value.field == "c.yaml: apiVersion"
    assert exc.value.problem == "is 'hulk.dev/v2'"
    del doc["apiVersion"]
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc, "c.yaml")
    assert str(exc.value) == "c.yaml: apiVersion: is missing (use 'hulk.dev/v1alpha1')"
    with pytest.raises(InvalidRequest):
        io.cluster_from_dict(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_a_key_given_twice_in_one_mapping_is_refused(tmp_path: Path) -> None:
    """Before: ``{name: a, name: b}`` kept b silently; kubectl refuses it, so does hulk. A
    merge key's values may still be overridden."""
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {name: x, region: R}\nnodes:\n- {<<: *b, name: a}\n")
    assert io.load_documents(path)[0]["nodes"] == [{"name": "a", "region": "R"}]
    path.write_text("nodes:\n- {name: a,\n   name: b}\n")
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert exc.value.field == f"{path}:3:4" and exc.value.problem == "is not valid YAML or JSON"
    assert exc.value.fix == "found the key 'name' twice in one mapping"


def test_a_yaml_error_says_what_it_found_where(tmp_path: Path) -> None:
    """Before: a tab gave only PyYAML's context, "(while scanning for the next token)", not
    the tab it found nor the fix (a trial)."""
    path = tmp_path / "tabs.yaml"
    path.write_text("kind: ClusterTopology\nspec:\n\tnodes: []\n")
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert str(exc.value) == (
        f"{path}:3:1: is not valid YAML or JSON (found character '\\t' that cannot start any "
        "token: indent with spaces, YAML allows no tab there)"
    )
    path.write_text("spec:\n  nodes: [a, b\n")
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert exc.value.field == f"{path}:3:1"
    assert exc.value.fix == "expected ',' or ']', but got '<stream end>'"


def test_unknown_topology_fields_are_noted_with_what_they_look_like(tmp_path: Path) -> None:
    """Before: ``regionlinks`` or ``bandwithGbps`` were ignored in silence (a job's typos
    were noted)."""
    doc = cluster_doc()
    doc["spec"]["regionlinks"] = doc["spec"].pop("regionLinks")
    for lk in doc["spec"]["links"]:
        lk["bandwithGbps"] = 100
    doc["spec"]["nodes"][0]["owner"] = "ml-team"
    doc["spec"]["links"][-1]["bandwidthGBps"] = 10  # bytes, not bits: 8x (a trial)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    notes: list[str] = []
    io.load_cluster(path, notes)
    assert notes == [
        f"{path}: spec.regionlinks is not a ClusterTopology field: ignored (did you mean "
        "spec.regionLinks?)",
        f"{path}: spec.nodes[].owner is not a ClusterTopology field: ignored",
        f"{path}: spec.links[].bandwithGbps is not a ClusterTopology field: ignored (did you "
        "mean spec.links[].bandwidthGbps?)",
        f"{path}: spec.links[].bandwidthGBps is not a ClusterTopology field: ignored "
        "(did you mean spec.links[].bandwidthGbps? It is in gigabits per second: 8 "
        "times a figure in gigabytes, 80 for 10 GB/s)",
    ]  # one line per field, however many links repeat it
    ok = tmp_path / "ok.yaml"  # every field of the format: nothing to note
    ok.write_text(yaml.safe_dump(cluster_doc()))
    notes = []
    io.load_cluster(ok, notes)
    assert notes == []


def test_load_cluster_wants_exactly_one_document(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(CLUSTER_YAML + "\n---\n" + CLUSTER_YAML)
    with pytest.raises(InvalidRequest, match="2 documents"):
        io.load_cluster(path)


# ---- HulkTrainingJob ----


def test_job_dict_object_dict_round_trip() -> None:
    doc = job_doc()
    job = io.job_from_dict(doc)
    assert job.model == preset_model("gpt2-xl")
    assert (job.global_batch_size, job.micro_batch_size) == (512, 4)
    assert io.job_to_dict(job) == doc


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_job_round_trips(name: str) -> None:
    p = PRESETS[name]
    job = Job(name, preset_model(name), p.global_batch_size, p.micro_batch_size, priority=3)
    doc = io.job_to_dict(job)
    assert doc["spec"]["model"]["preset"] == name
    assert doc["spec"]["priority"] == 3
    assert io.job_from_dict(yaml.safe_load(yaml.safe_dump(doc))) == job


def test_custom_model_job_round_trips_without_a_preset() -> None:
    job = Job("custom", ModelSpec(123_456_789, 12, 768, 512), 64, 8)
    doc = io.job_to_dict(job)
    assert "preset" not in doc["spec"]["model"]
    assert "priority" not in doc["spec"]
    assert io.job_from_dict(doc) == job


def test_preset_only_job_takes_the_preset_sizes_and_default_batch() -> None:
    doc: dict[str, Any] = {
        "apiVersion": API,
        "kind": "HulkTrainingJob",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {"model": {"preset": "BERT-Large"}, "template": {"spec": {"containers": []}}},
    }
    job = io.job_from_dict(doc)
    p = PRESETS["bert-large"]
    assert job.model.parameters == p.parameters and job.model.layers == p.layers
    assert job.model.preset == "bert-large"
    assert (job.global_batch_size, job.micro_batch_size) == (
        p.global_batch_size,
        p.micro_batch_size,
    )
    doc["spec"]["model"]["layers"] = 12  # a preset with an override
    doc["spec"]["training"] = {"microBatchSize": 2}
    job = io.job_from_dict(doc)
    assert job.model.layers == 12 and job.model.hidden_size == p.hidden_size
    assert (job.global_batch_size, job.micro_batch_size) == (p.global_batch_size, 2)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["spec"]["model"].update(preset="gpt-5"), "spec.model.preset"),
        (lambda d: d["spec"]["model"].pop("preset") and d["spec"]["model"].pop("hiddenSize"),
         "spec.model.hiddenSize"),
        (lambda d: d["spec"]["model"].pop("preset") and d["spec"].pop("training"),
         "spec.training"),
        (lambda d: d["spec"]["training"].update(microBatchSize=1024),
         "spec.training.microBatchSize"),
        (lambda d: d["spec"]["training"].update(globalBatchSize=-4),
         "spec.training.globalBatchSize"),
        (lambda d: d["spec"].update(training="lots"), "spec.training"),
        (lambda d: d["spec"].pop("model"), "spec.model"),
        (lambda d: d["metadata"].update(name="Big_Job"), "metadata.name"),
        (lambda d: d["metadata"].update(name=5), "metadata.name"),  # (was the job "5")
        (lambda d: d.pop("metadata"), "metadata"),
        (lambda d: d["spec"].update(priority="high"), "spec.priority"),
        (lambda d: d["spec"].update(model="bert-large"), "spec.model"),
        (lambda d: d["spec"].update(model=["bert-large"]), "spec.model"),
        (lambda d: d["spec"]["training"].update(globalBatchSize=10**19),
         "spec.training.globalBatchSize"),
    ],
)  # fmt: skip
def test_job_errors_name_the_field(mutate: Any, field: str) -> None:
    doc = job_doc()
    mutate(doc)
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert exc.value.field == field
    assert exc.value.fix, exc.value  # each error says what to do (some did not: a trial)


def test_load_jobs_reads_multi_document_files_and_prefixes_errors(tmp_path: Path) -> None:
    both = tmp_path / "jobs.yaml"
    other = job_doc()
    other["metadata"]["name"] = "second"
    both.write_text(JOB_YAML + "\n---\n\n---\n" + yaml.safe_dump(other))
    jobs = io.load_jobs([both])
    assert [j.name for j in jobs] == ["gpt2-xl", "second"]
    again = tmp_path / "again.yaml"
    again.write_text(JOB_YAML)
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([both, again])
    assert exc.value.field == f"{again} (document 1): metadata.name"
    assert exc.value.problem == f"job 'gpt2-xl' is given twice (also {both} (document 1))"
    # the same file twice is said so (before: "job 'big' is given twice (also f#0)", the
    # job pointing at itself; a user trial)
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([again, again])
    assert str(exc.value) == f"--jobs: {again} is given twice (give each file once)"
    # a skipped document (None: another API's object) keeps the others' places
    broken = job_doc()
    broken["spec"]["model"] = {"preset": "gpt-5"}
    with pytest.raises(InvalidRequest) as exc:
        io.jobs_from_documents([("b.yaml", [None, broken])])
    assert exc.value.field.startswith("b.yaml (document 2): spec.model.preset"), exc.value.field
    # kubectl get -o yaml writes a List: its items are the jobs
    listed = {"apiVersion": "v1", "kind": "List", "items": [job_doc(), other]}
    assert [j.name for j in io.jobs_from_documents([("l", io.expand_lists([listed]))])] == [
        "gpt2-xl",
        "second",
    ]
    bad_item = job_doc()
    bad_item["metadata"]["name"] = "third"
    bad_item["spec"]["model"] = {"preset": "gpt-5"}
    listed["items"].append(bad_item)
    (tmp_path / "got.yaml").write_text("---\n" + yaml.safe_dump(listed))
    with pytest.raises(InvalidRequest) as exc:  # (the library's loader reads Lists too)
        io.load_jobs([tmp_path / "got.yaml"])
    where = f"{tmp_path / 'got.yaml'} (document 1, items[2]: third): spec.model.preset"
    assert exc.value.field.startswith(where), exc.value.field
    bad = job_doc()
    del bad["spec"]["training"]["globalBatchSize"]
    del bad["spec"]["model"]["preset"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(JOB_YAML + "\n---\n" + yaml.safe_dump(bad))
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([broken])
    assert exc.value.field == f"{broken} (document 2): spec.training.globalBatchSize"


def test_a_list_whose_items_are_no_list_is_refused_naming_it() -> None:
    """Before, such a List was skipped as another API's object: its jobs were left out with
    nothing said. ``items: null`` is no item, as kubectl reads it."""

    def jobs(*docs: Any) -> list[str]:
        return [j.name for j in io.jobs_from_documents([("l.yaml", io.without_other_apis(docs))])]

    def a_list(items: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "List", "items": items}

    for items, got in ((job_doc(), "a mapping"), ("gpt2-xl", "'gpt2-xl'")):
        for listed, where in (
            (a_list(items), "l.yaml (document 2): items"),
            (a_list([a_list(items)]), "l.yaml (document 2, items[0]): items"),
        ):
            with pytest.raises(InvalidRequest) as exc:
                jobs(job_doc(), listed)
            assert exc.value.field == where
            assert exc.value.problem == f"must be a list of objects, got {got}"
            assert exc.value.fix and "'---'" in exc.value.fix
    assert jobs(job_doc(), a_list(None)) == ["gpt2-xl"]
    assert jobs(job_doc(), {"apiVersion": "v1", "kind": "ConfigMapList", "items": 3}) == ["gpt2-xl"]


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(missing)
    assert exc.value.field == str(missing) and "cannot be read" in exc.value.problem
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec:\n  nodes: [\n")
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(bad)
    assert exc.value.field.startswith(f"{bad}:")  # with the line number
    assert "YAML" in exc.value.problem


def test_cluster_file_errors_name_the_file(tmp_path: Path) -> None:
    doc = cluster_doc()
    doc["spec"]["nodes"][0]["gpus"] = -8
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(f)
    assert exc.value.field == f"{f}: spec.nodes[0].gpus"


def test_a_job_name_longer_than_kubernetes_allows_is_refused() -> None:
    doc = job_doc()
    doc["metadata"]["name"] = "a" * 254
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert (exc.value.field, exc.value.problem) == ("metadata.name", "is 254 characters long")
    doc["metadata"]["name"] = "a" * 253
    assert io.job_from_dict(doc).name == "a" * 253


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("metadata: {name: k\u00f6ln}\n".encode("latin-1"))
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(latin)
    assert exc.value.field == str(latin)
    assert exc.value.problem == "is not UTF-8 text (byte 0xf6 at offset 18)"
    assert exc.value.fix == "save it as UTF-8"


def test_numbers_with_an_exponent_are_numbers_as_in_json(tmp_path: Path) -> None:
    """JSON (``json.dumps`` writes ``1e-05``) and YAML 1.2 read these as numbers; YAML 1.1,
    PyYAML's default, reads them as strings."""
    f = tmp_path / "n.json"
    f.write_text(
        json.dumps({"a": 7e9, "b": 1e-05, "c": 1e20})
        + "\n---\n{d: 1.0e308, e: -2.5E+3, f: .5e1, g: 7, h: 1.5, i: 1e, j: abc1e5, k: '7e9'}"
    )
    assert io.load_documents(f) == [
        {"a": 7e9, "b": 1e-05, "c": 1e20},
        {
            "d": 1e308,
            "e": -2500.0,
            "f": 5.0,
            "g": 7,
            "h": 1.5,
            "i": "1e",
            "j": "abc1e5",
            "k": "7e9",
        },
    ]


# ---- PlacementPlan ----


def test_plan_dict_object_dict_round_trip_with_the_spec_fields() -> None:
    doc = json.loads(PLAN_JSON)
    plan = io.plan_from_dict(doc)
    gpt = plan.jobs[0]
    assert gpt.stages[1] == Stage((20, 48), ("bj-2", "bj-3"), "data")
    assert gpt.micro_batches == 64 and gpt.predicted_iteration_seconds == 2.31
    assert math.isnan(plan.jobs[1].predicted_iteration_seconds)
    assert plan.jobs[1].stages[0].parallelism == "tensor"
    assert plan.unplaced == (Unplaced("opt-175b", "needs 2800 GiB of GPU memory, 1900 GiB free"),)
    assert io.plan_to_dict(plan) == doc
    assert json.loads(io.dump_plan(plan)) == doc
    assert yaml.safe_load(io.dump_plan(plan, "yaml")) == doc
    # a stage's layers and nodes on one line each, as the format's examples write them
    assert "  - layers: [20, 48]\n    nodes: [bj-2, bj-3]\n" in io.dump_plan(plan, "yaml")
    # names as written, not escaped (before: "\\u5317\\u4eac-0"; a user trial)
    named = replace(plan, unplaced=(Unplaced("z\u00fcrich-job", "\u5317\u4eac-0 is full"),))
    for fmt in ("json", "yaml"):
        text = io.dump_plan(named, fmt)
        assert "z\u00fcrich-job" in text and "\u5317\u4eac-0 is full" in text, text
        assert "\\u" not in text
        assert (json.loads(text) if fmt == "json" else yaml.safe_load(text))["unplaced"] == [
            {"name": "z\u00fcrich-job", "reason": "\u5317\u4eac-0 is full"}
        ]


def _stages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["jobs"][0]["stages"])


PLAN_ERRORS = [
    (lambda d: d.update(jobs="x"), "jobs", "must be a list, got str"),
    (lambda d: d["jobs"].append(copy.deepcopy(d["jobs"][0])), "jobs[2].name", "listed twice"),
    (lambda d: d["jobs"][0].update(stages=[]), "jobs[0].stages", "non-empty list"),
    (lambda d: _stages(d)[0].update(nodes="bj-0"), "jobs[0].stages[0].nodes", "server names"),
    (lambda d: _stages(d)[0].update(layers=[0.5, 20]), "jobs[0].stages[0].layers", "[start"),
    (lambda d: _stages(d)[1].update(layers=[21, 48]), "jobs[0].stages[1].layers", "layer 20"),
    (lambda d: _stages(d)[1].update(nodes=["bj-2"]), "jobs[0].stages[1].nodes",
     "has 1 node(s) where the stages before it have 2: data stages need equal replica counts"),
    (lambda d: _stages(d)[1].update(nodes=["bj-0", "bj-3"]), "jobs[0].stages[1].nodes", "bj-0"),
    (lambda d: d["jobs"][1]["stages"][0].update(nodes=["bj-1", "x"]), "jobs[1].stages[0].nodes",
     "bj-1 is also used by gpt2-xl (a server runs one stage of one job: give it to one of them)"),
    # the stage before runs past where this one starts: said (a review)
    (lambda d: _stages(d)[0].update(layers=[0, 99]), "jobs[0].stages[1].layers",
     "starts at layer 20, not at layer 99 where stages[0] ends"),
    (lambda d: _stages(d)[0].update(layers=[5, 0]), "jobs[0].stages[0].layers",
     "[5, 0] is not a range [start, end) (write the stage's first layer"),
    (lambda d: _stages(d)[0].update(nodes=[]), "jobs[0].stages[0].nodes",
     "got [] (list the stage's servers"),
    (lambda d: _stages(d)[0].update(parallelism="pipe"), "jobs[0].stages[0].parallelism", "pipe"),
    (lambda d: d["unplaced"][0].pop("name"), "unplaced[0].name", "missing"),
    # a job placed and unplaced at once, or unplaced twice (taken before: a library trial)
    (lambda d: d["unplaced"][0].update(name=d["jobs"][0]["name"]), "unplaced[0].name",
     "is also placed (in jobs) (keep one)"),
    (lambda d: d["unplaced"].append(copy.deepcopy(d["unplaced"][0])), "unplaced[1].name",
     "is listed twice (keep one)"),
    (lambda d: d["jobs"][0].update(microBatches=2.7), "jobs[0].microBatches", "whole number"),
    (lambda d: d["jobs"][0].update(microBatches=-3), "jobs[0].microBatches", "greater than zero"),
    # every field read, each wrong type or value: the field by index and a fix (a user trial)
    (lambda d: d["jobs"][0].update(microBatches="64"), "jobs[0].microBatches",
     "must be a number, got '64' (write it unquoted: 64)"),
    (lambda d: d["jobs"][0].update(microBatches=[1]), "jobs[0].microBatches", "got [1] (write"),
    (lambda d: d["jobs"][0].update(microBatches=math.inf), "jobs[0].microBatches", "finite"),
    (lambda d: d["jobs"][0].update(microBatches=None), "jobs[0].microBatches", "missing (add it"),
    (lambda d: d["jobs"][0].update(predictedIterationSeconds=math.nan),
     "jobs[0].predictedIterationSeconds", "got nan (write the predicted step time"),
    (lambda d: d["jobs"][0].update(predictedIterationSeconds=math.inf),
     "jobs[0].predictedIterationSeconds", "must be a finite number zero or more, got inf ("),
    (lambda d: d["jobs"][0].update(predictedIterationSeconds=True),
     "jobs[0].predictedIterationSeconds", "must be a number, got true (write the predicted"),
    (lambda d: d["jobs"][0].update(predictedIterationSeconds="2.31"),
     "jobs[0].predictedIterationSeconds", "got '2.31' (write it unquoted: 2.31)"),
    (lambda d: d["jobs"][1].update(name=""), "jobs[1].name",
     "must be a non-empty name, got '' (give the job's name"),
    (lambda d: d["jobs"][1].update(name=["t5"]), "jobs[1].name", "must be a string, got ['t5']"),
    (lambda d: d["jobs"][1].update(name=True), "jobs[1].name", "got true (quote it"),
    (lambda d: d["jobs"].__setitem__(1, "t5"), "jobs[1]", "must be a mapping, got str"),
    (lambda d: d["jobs"][0].update(stages={"layers": [0, 48]}), "jobs[0].stages",
     "non-empty list of stages, got a mapping (write each stage on a line of its own"),
    (lambda d: d["jobs"][0].update(stages="x"), "jobs[0].stages", "got 'x' (write each stage"),
    (lambda d: d["jobs"][0].pop("stages"), "jobs[0].stages", "is required but missing"),
    (lambda d: d["jobs"][0]["stages"].__setitem__(0, [0, 20]), "jobs[0].stages[0]",
     "must be a mapping, got list (write its fields as key: value lines"),
    (lambda d: _stages(d)[0].update(layers=[0, 10, 20]), "jobs[0].stages[0].layers",
     "must be [start, end], two whole numbers, got [0, 10, 20] (write the stage's first"),
    (lambda d: _stages(d)[0].update(layers="0-20"), "jobs[0].stages[0].layers", "got '0-20'"),
    (lambda d: _stages(d)[0].update(layers=[0, True]), "jobs[0].stages[0].layers",
     "two whole numbers, got [0, True]"),
    (lambda d: _stages(d)[0].update(layers={"start": 0}), "jobs[0].stages[0].layers", "[start"),
    (lambda d: _stages(d)[0].update(layers=[-1, 20]), "jobs[0].stages[0].layers",
     "[-1, 20] is not a range [start, end) (write the stage's first layer (0 or more)"),
    (lambda d: _stages(d)[0].pop("layers"), "jobs[0].stages[0].layers", "missing"),
    (lambda d: _stages(d)[0].update(nodes=["bj-0", 5]), "jobs[0].stages[0].nodes[1]",
     "must be a server name, got 5 (write the name of a server of the cluster, as a string"),
    (lambda d: _stages(d)[0].update(nodes=[""]), "jobs[0].stages[0].nodes[0]", "got '' (write"),
    (lambda d: _stages(d)[0].update(nodes=[None]), "jobs[0].stages[0].nodes[0]", "got null ("),
    (lambda d: _stages(d)[0].update(nodes={"bj-0": 1}), "jobs[0].stages[0].nodes",
     "got a mapping (list the stage's servers"),
    (lambda d: _stages(d)[0].update(nodes=["bj-0", "bj-0"]), "jobs[0].stages[0].nodes",
     "names a server twice"),
    (lambda d: _stages(d)[0].update(parallelism=5), "jobs[0].stages[0].parallelism",
     "must be data or tensor, got 5 (write data (each node holds the stage's layers) or "
     "tensor (the nodes split each layer))"),
    (lambda d: _stages(d)[0].update(parallelism=["data"]), "jobs[0].stages[0].parallelism",
     "got ['data'] (write data"),
    (lambda d: _stages(d)[0].update(parallelism=None), "jobs[0].stages[0].parallelism",
     "is required but missing"),
    (lambda d: d.update(planner=5), "planner", "must be a string, got 5 (name the planner"),
    (lambda d: d.update(planner=""), "planner", "must be a non-empty name"),
    (lambda d: d.update(unplaced={"name": "x"}), "unplaced", "must be a list, got dict"),
    (lambda d: d["unplaced"].append(5), "unplaced[1]", "must be a mapping, got int"),
    (lambda d: d["unplaced"][0].update(name=5), "unplaced[0].name", "got 5 (quote it"),
    (lambda d: d["unplaced"][0].update(name=" "), "unplaced[0].name",
     "must be a non-empty name, got ' ' (give the name of the job that was not placed)"),
    (lambda d: d["unplaced"][0].update(reason=["full"]), "unplaced[0].reason",
     "must be text, got ['full'] (write why, as a string)"),
    (lambda d: d.update(notes="replanned"), "notes", "must be a list, got str"),
    (lambda d: d.update(notes=["ok", 3]), "notes[1]", "must be text, got 3 (write each note"),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "field", "problem"), PLAN_ERRORS)
def test_a_previous_plan_is_checked_when_read_naming_the_file_and_field(
    mutate: Any, field: str, problem: str
) -> None:
    doc = json.loads(PLAN_JSON)
    mutate(doc)
    with pytest.raises(InvalidRequest) as exc:
        io.plan_from_dict(doc, "old.json")
    assert exc.value.field == f"old.json: {field}"
    assert problem in f"{exc.value.problem} ({exc.value.fix})"


# A user trial's plan files for `hulk plan --previous`: each error the whole line, the
# field by its index (jobs[0], as every other error of the file) and a fix.
PLAN_TRIAL_ERRORS = [
    ("fast", "jobs[0].predictedIterationSeconds: must be a number, got 'fast' (write the "
     "predicted step time in seconds, e.g. 2.31, or null where it is not predicted)"),
    ([1], "jobs[0].predictedIterationSeconds: must be a number, got [1] (write the predicted "
     "step time in seconds, e.g. 2.31, or null where it is not predicted)"),
    (-1, "jobs[0].predictedIterationSeconds: must be a finite number zero or more, got -1 "
     "(write the predicted step time in seconds, e.g. 2.31, or null where it is not "
     "predicted)"),
]  # fmt: skip


@pytest.mark.parametrize(("seconds", "line"), PLAN_TRIAL_ERRORS)
def test_a_bad_predicted_step_time_names_the_field_by_index_and_the_fix(
    seconds: Any, line: str
) -> None:
    """Before: ``is not a valid PlacementPlan (could not convert string to float: 'fast')``,
    no field and no fix; -1 named the job ``jobs[gpt2-xl]``, where the others name jobs[0]."""
    doc = json.loads(PLAN_JSON)
    doc["jobs"][0]["predictedIterationSeconds"] = seconds
    with pytest.raises(InvalidRequest) as exc:
        io.plan_from_dict(doc, "old.json")
    assert str(exc.value) == f"old.json: {line}"


def test_a_plan_job_name_must_be_text_as_a_server_name_is() -> None:
    """``"name": 5`` was read as the job "5": refused, with the fix text_field gives a
    ClusterTopology's names."""
    doc = json.loads(PLAN_JSON)
    doc["jobs"][0]["name"] = 5
    with pytest.raises(InvalidRequest) as exc:
        io.plan_from_dict(doc, "old.json")
    assert str(exc.value) == (
        "old.json: jobs[0].name: must be a string, got 5 (quote it: YAML reads on, off, yes, "
        "no, true, false and numbers unquoted as other types)"
    )


def test_a_stage_without_parallelism_is_refused_the_format_has_no_default() -> None:
    """The planning interface lists ``parallelism`` in every stage and gives it no default:
    a stage without it was taken as ``data`` with nothing said."""
    doc = json.loads(PLAN_JSON)
    del doc["jobs"][1]["stages"][0]["parallelism"]  # (a tensor stage, read as data before)
    with pytest.raises(InvalidRequest) as exc:
        io.plan_from_dict(doc, "old.json")
    assert str(exc.value) == (
        "old.json: jobs[1].stages[0].parallelism: is required but missing (add it; "
        "docs/formats.md lists each field)"
    )


def test_a_plan_without_optional_fields_reads() -> None:
    """What the format leaves optional stays so: a null or absent step time (not
    predicted), planner, unplaced reason and notes."""
    doc = json.loads(PLAN_JSON)
    del doc["jobs"][0]["predictedIterationSeconds"], doc["planner"]
    del doc["unplaced"][0]["reason"]
    doc["notes"] = None
    plan = io.plan_from_dict(doc)
    assert math.isnan(plan.jobs[0].predicted_iteration_seconds)
    assert plan.planner == "unknown" and plan.unplaced[0].reason == "" and plan.notes == ()
    doc["jobs"][0]["predictedIterationSeconds"] = 0
    assert io.plan_from_dict(doc).jobs[0].predicted_iteration_seconds == 0.0


def test_plan_object_dict_object_round_trip_keeps_notes() -> None:
    plan = Plan(
        "search",
        (JobPlan("j", (Stage((0, 3), ("a",)), Stage((3, 4), ("b",))), 8, 1.23456789),),
        (Unplaced("k", "no room"),),
        ("replanned after a failure",),
    )
    doc = io.plan_to_dict(plan)
    assert doc["jobs"][0]["predictedIterationSeconds"] == 1.2346  # five significant digits
    assert io.seconds(1.23456789e-5) == 1.2346e-5  # a tiny job's step is not 0
    assert io.seconds(12345.678) == 12346.0 and io.seconds(math.inf) is None
    back = io.plan_from_dict(doc)
    assert back.notes == plan.notes
    assert back.jobs[0].stages == plan.jobs[0].stages
    assert io.plan_to_dict(back) == doc


def test_infinite_prediction_is_written_as_null() -> None:
    plan = Plan("x", (JobPlan("j", (Stage((0, 1), ("a",)),), 1, math.inf),))
    assert json.loads(io.dump_plan(plan))["jobs"][0]["predictedIterationSeconds"] is None


# ---- every malformed value is an InvalidRequest, never a crash ----

ODD_VALUES = st.sampled_from(
    [None, "x", -1, 0, 1.5, True, [], {}, [1], {"a": 1}, math.nan, math.inf, 10**30]
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


CUSTOM_JOB = job_doc()
del CUSTOM_JOB["spec"]["model"]["preset"]
READERS = [
    (cluster_doc(), io.cluster_from_dict),
    (job_doc(), io.job_from_dict),
    (CUSTOM_JOB, io.job_from_dict),
    (json.loads(PLAN_JSON), io.plan_from_dict),
]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), which=st.integers(0, len(READERS) - 1))
def test_malformed_documents_raise_only_invalid_request(data: st.DataObject, which: int) -> None:
    base, read = READERS[which]
    doc = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from(_paths(doc)))
        _set(doc, path, copy.deepcopy(data.draw(ODD_VALUES)))
    try:
        read(doc)
    except InvalidRequest as exc:  # (several of a topology's: one line each)
        for each in each_error(exc):
            assert str(each).strip() and "\n" not in str(each)


def test_job_fields_are_the_crds() -> None:
    crd = yaml.safe_load(
        (Path(__file__).parents[2] / "crds/hulktrainingjobs.hulk.dev.yaml").read_text()
    )
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    top = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert sorted(io.JOB_FIELDS[""]) == sorted(top)
    assert sorted(io.JOB_FIELDS["spec"]) == sorted(spec["properties"])
    for part in ("model", "training"):
        assert sorted(io.JOB_FIELDS[f"spec.{part}"]) == sorted(
            spec["properties"][part]["properties"]
        )
    for key, (low, high, fix) in io.WHOLE_OPERATOR_FIELDS.items():  # as the CRD bounds them
        field = spec["properties"][key]
        assert (field["type"], field["minimum"], field.get("maximum")) == ("integer", low, high)
        assert fix.endswith(f"leave it out for {field['default']}")


@pytest.mark.parametrize(
    ("training", "field"),
    [
        (None, "spec.training"),
        ({}, "spec.training"),
        ({"globalBatchSize": 64}, "spec.training.microBatchSize"),
        ({"microBatchSize": 8}, "spec.training.globalBatchSize"),
    ],
)
def test_a_job_without_a_preset_needs_both_batch_sizes_as_the_crd_says(
    training: dict[str, int] | None, field: str
) -> None:
    """Before, the CRD took ``training: {}`` with no preset (its rule asked only for
    ``spec.training``), and the job failed at planning: ``hulk plan --jobs`` and the API
    server now refuse the same manifests, each saying both fields and the preset (a review)."""
    doc = job_doc()
    del doc["spec"]["model"]["preset"]
    doc["spec"].pop("training")
    if training is not None:
        doc["spec"]["training"] = training
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert exc.value.field == field
    assert "when spec.model names no preset" in exc.value.problem
    assert exc.value.fix == NO_PRESET_TRAINING_FIX
    for name in ("spec.training.globalBatchSize", "microBatchSize", "spec.model.preset"):
        assert name in exc.value.fix
    # a misspelled batch size is still named as one
    doc["spec"]["training"] = {"globalBatchSiz": 64, "microBatchSize": 8}
    with pytest.raises(InvalidRequest, match="rename globalBatchSiz to it"):
        io.job_from_dict(doc)
    # the CRD's rule on spec asks for the same two fields when no preset is named
    crd = yaml.safe_load((ROOT / "crds/hulktrainingjobs.hulk.dev.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    (rule,) = [
        r for r in schema["x-kubernetes-validations"] if "has(self.model.preset)" in r["rule"]
    ]
    for name in ("globalBatchSize", "microBatchSize"):
        assert f"has(self.training.{name})" in rule["rule"]
        assert f"spec.training.{name}" in rule["message"]
    assert "spec.model.preset" in rule["message"]


def test_unknown_job_fields_say_where_they_belong_or_what_they_look_like() -> None:
    doc = {
        "metadata": {"name": "x"},
        "metdata": {"labels": {}},
        "spec": {
            "model": {"preset": "gpt2-xl", "hidenSize": 10},
            "globalBatchSize": 10,
            "training": {"microBatchSize": 2, "epochs": 3},
            "template": {"spec": {"anything": 1}},
        },
    }
    assert io.unknown_job_fields(doc) == [
        "metdata is not a HulkTrainingJob field: ignored (did you mean metadata?)",
        "spec.globalBatchSize is not a HulkTrainingJob field: ignored (it belongs under "
        "spec.training)",
        "spec.model.hidenSize is not a HulkTrainingJob field: ignored (did you mean "
        "spec.model.hiddenSize?)",
        "spec.training.epochs is not a HulkTrainingJob field: ignored",
    ]
    assert io.unknown_job_fields({"metadata": {"name": "x"}, "spec": {"model": "odd"}}) == []


ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_in_docs_formats_are_valid_documents(tmp_path: Path) -> None:
    """docs/formats.md shows one document of each kind: each reads as what it shows, and
    the plan is what its command writes for the other two (before, a step time no command
    gave: a docs audit)."""
    text = (ROOT / "docs" / "formats.md").read_text()
    blocks = [b.split("\n", 1) for b in text.split("```")[1::2]]
    docs = [yaml.safe_load(body) for lang, body in blocks if lang in ("yaml", "json")]
    kinds = {d["kind"]: d for d in docs}
    assert sorted(kinds) == ["ClusterTopology", "HulkTrainingJob", "PlacementPlan"]
    cluster = io.cluster_from_dict(kinds["ClusterTopology"])
    assert [s.name for s in cluster.servers] == ["bj-0", "bj-1", "ca-0"]
    assert io.unknown_job_fields(kinds["HulkTrainingJob"]) == []
    assert io.job_from_dict(kinds["HulkTrainingJob"]).name == "gpt2-xl"
    plan = io.plan_from_dict(kinds["PlacementPlan"])
    assert plan.jobs[0].stages[-1].layers == (0, 48) and plan.unplaced[0].name == "opt-175b"
    (tmp_path / "two-cities.yaml").write_text(yaml.safe_dump(kinds["ClusterTopology"]))
    opt = {"apiVersion": API, "kind": "HulkTrainingJob", "metadata": {"name": "opt-175b"},
           "spec": {"model": {"preset": "opt-175b"}}}  # fmt: skip
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump_all([kinds["HulkTrainingJob"], opt]))
    cmd = [sys.executable, "-m", "hulk", "plan", "--cluster", "two-cities.yaml", "--jobs",
           "jobs.yaml", "-o", "json", "--moves", "2000", "--seed", "0"]  # fmt: skip
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == kinds["PlacementPlan"]
    # and the complete example it points to
    example = io.load_documents(str(ROOT / "examples" / "three-cities-topology.yaml"))
    assert len(io.cluster_from_dict(example[0]).servers) == 6


def test_a_number_written_with_its_unit_is_told_how_to_write_it() -> None:
    """Before: "must be a number, got '80GB'" named the field, not the fix (a trial)."""
    cases = [
        (("nodes", 0, "gpuMemoryGiB"), "80GB", "write 80: the field is in GiB"),
        (("links", 0, "latencyMs"), "45 ms", "write 45: the field is in ms"),
        (("nodes", 1, "gpuTFLOPS"), "111.1", "write it unquoted: 111.1"),
        (("regionLinks", 0, "bandwidthGbps"), "fast", "write a number of Gb/s"),
        # another unit is converted (before: "write the number alone, 40960" for 40960MB,
        # 1,000 times too much; a trial)
        (("nodes", 0, "gpuMemoryGiB"), "40960MB", "write 40: the field is in GiB"),
        (("links", 0, "latencyMs"), "0.089s", "write 89: the field is in ms"),
        (("links", 0, "latencyMs"), "300us", "write 0.3: the field is in ms"),
        (("regionLinks", 0, "bandwidthGbps"), "10GB/s", "write 80: the field is in Gb/s"),
        (("regionLinks", 0, "bandwidthGbps"), "1Tbps", "write 1000: the field is in Gb/s"),
        (("nodes", 0, "gpuMemoryGiB"), "80 furlongs", "write a number of GiB, without a unit"),
    ]
    for (section, i, key), value, fix in cases:
        doc = cluster_doc()
        doc["spec"][section][i][key] = value
        with pytest.raises(InvalidRequest) as exc:
            io.cluster_from_dict(doc)
        assert exc.value.field == f"spec.{section}[{i}].{key}"
        assert exc.value.fix == fix
    doc = job_doc()
    del doc["spec"]["model"]["preset"]
    for value, fix in [
        ("3B", "write the number alone: 3e9 for 3B"),
        ("340M", "3.4e8 for 340M"),
        ("1.5e9B", "write the number alone, 1.5e9"),  # (before: "1.5e9e9")
        ("1,557,611,200", "write it without separators: 1557611200"),
    ]:
        doc["spec"]["model"]["parameters"] = value
        with pytest.raises(InvalidRequest) as exc:
            io.job_from_dict(doc)
        assert exc.value.field == "spec.model.parameters" and (exc.value.fix or "").endswith(fix)


def test_a_misspelled_model_size_is_named_not_asked_for_again() -> None:
    """Before: seqLength for sequenceLength gave "is required but missing (give
    spec.model.preset or all four model sizes)" (a trial)."""
    doc = job_doc()
    del doc["spec"]["model"]["preset"]
    doc["spec"]["model"]["seqLength"] = doc["spec"]["model"].pop("sequenceLength")
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert str(exc.value) == (
        "spec.model.sequenceLength: is required but missing (the field is spelled "
        "sequenceLength: rename seqLength to it)"
    )
    del doc["spec"]["model"]["seqLength"]
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert exc.value.fix == "give spec.model.preset or all four model sizes"


def test_one_region_has_one_spelling() -> None:
    """Before: Tokyo and tokyo were two regions, unlinked, and allowedRegions [tokyo]
    matched one server of two (a trial); a regionLinks end spelled as a node label writes
    it was refused."""
    doc = cluster_doc()
    doc["spec"]["nodes"][1]["region"] = "beijing"
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert str(exc.value) == (
        "spec.nodes[1].region: 'beijing' and 'Beijing' (spec.nodes[0]) are one region as a "
        "node label writes it (beijing), and would be planned as two (write it 'Beijing' in "
        "both)"
    )
    doc = cluster_doc()
    doc["spec"]["regionLinks"][0].update(a="beijing", b="CALIFORNIA")
    c = io.cluster_from_dict(doc)
    assert (c.region_links[0].a, c.region_links[0].b) == ("Beijing", "California")
    doc["spec"]["regionLinks"][0]["b"] = "Kalifornia"
    with pytest.raises(InvalidRequest, match=r"names unknown region 'Kalifornia'"):
        io.cluster_from_dict(doc)


def test_job_files_a_trial_got_unhelpful_errors_for(tmp_path: Path) -> None:
    """A top-level YAML list of jobs, files joined with a byte-order mark inside, and one job
    name in two namespaces (before: no fix; a BOM 'could not find expected :'; 'rename one'
    for manifests kubectl applies as they are)."""
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump([job_doc(), job_doc()]))
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([listed])
    assert exc.value.fix and "'---'" in exc.value.fix and "kind: List" in exc.value.fix
    joined = tmp_path / "joined.yaml"
    second = job_doc()
    second["metadata"]["name"] = "second"
    joined.write_text("\ufeff" + yaml.safe_dump(job_doc()) + "\ufeff---\n" + yaml.safe_dump(second))
    assert [j.name for j in io.load_jobs([joined])] == ["gpt2-xl", "second"]
    a, b = job_doc(), job_doc()
    a["metadata"]["namespace"], b["metadata"]["namespace"] = "team-a", "team-b"
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([a, b]))
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([both])
    assert "in namespaces team-b and team-a" in exc.value.problem
    assert exc.value.fix == (
        "a plan names jobs without their namespace: plan one namespace's jobs at a time"
    )


def test_a_misspelled_preset_is_named_where_the_sizes_are_asked_for() -> None:
    """Before: presett gave only "parameters: is required but missing" (a trial)."""
    doc = job_doc()
    model = doc["spec"]["model"]
    doc["spec"]["model"] = {"presett": model.get("preset") or "bert-large"}
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert exc.value.fix == (
        "spec.model.presett is not a HulkTrainingJob field: did you mean spec.model.preset?"
    )
    # another misspelled field is no fix for a missing size (a review)
    doc["spec"]["model"] = {"parameters": 1e9, "attentionHeds": 16}
    with pytest.raises(InvalidRequest) as exc:
        io.job_from_dict(doc)
    assert exc.value.fix == "give spec.model.preset or all four model sizes", exc.value.fix


def test_the_library_raises_every_wrong_job_at_once(tmp_path: Path) -> None:
    """``io.load_jobs`` checks each job: ``InvalidRequests`` holds an error per wrong job,
    in order, and is an ``InvalidRequest`` (the first's field) for callers that catch one."""
    bad = job_doc()
    bad["metadata"]["name"] = "bad"
    bad["spec"]["model"] = {"preset": "gpt-5"}
    worse = job_doc()
    worse["metadata"]["name"] = "worse"
    worse["spec"]["priority"] = "high"
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([bad, job_doc(), worse]))
    with pytest.raises(InvalidRequests) as exc:
        io.load_jobs([path])
    fields = [e.field for e in exc.value.errors]
    assert fields == [
        f"{path} (document 1): spec.model.preset",
        f"{path} (document 3): spec.priority",
    ]
    assert isinstance(exc.value, InvalidRequest) and exc.value.field == fields[0]
    assert str(exc.value).splitlines() == [str(e) for e in exc.value.errors]
    path.write_text(yaml.safe_dump_all([job_doc(), worse]))
    with pytest.raises(InvalidRequest) as one:  # one wrong job: that error itself
        io.load_jobs([path])
    assert type(one.value) is InvalidRequest and one.value.field.endswith("spec.priority")


def test_the_operators_fields_are_checked_for_the_operator_alone(tmp_path: Path) -> None:
    """The planning interface: ``hulk plan`` "ignores fields it does not need"; it refused
    a job for ``suspend: "yes"`` or ``regrow: {minSpeedup: 1}``, which only the operator
    reads (a review). They are checked where the job goes to the operator."""
    for field, value, problem in [
        ("suspend", "yes", "spec.suspend: must be true or false, got 'yes'"),
        ("regrow", {"minSpeedup": 1}, "spec.regrow.minSpeedup: must be above 1, got 1"),
        # (kubectl apply refused these, and `hulk plan` said nothing: a trial)
        ("masterPort", 99999, "spec.masterPort: must be a whole number from 1 to 65535, got"),
        ("masterPort", 0, "spec.masterPort: must be a whole number from 1 to 65535, got 0"),
        ("masterPort", "29500", "spec.masterPort: must be a number, got '29500'"),
        ("backoffLimit", -1, "spec.backoffLimit: must be a whole number 0 or more, got -1"),
        ("backoffLimit", 2.5, "spec.backoffLimit: must be a whole number 0 or more, got 2.5"),
        ("backoffLimit", True, "spec.backoffLimit: must be a number, got true"),
    ]:
        doc = job_doc()
        doc["spec"][field] = value
        assert io.job_from_dict(doc).name == doc["metadata"]["name"]
        with pytest.raises(InvalidRequest) as exc:
            io.check_operator_fields(doc["spec"])
        assert str(exc.value).startswith(problem)
        assert len(io.jobs_from_documents([("j.yaml", [doc])])) == 1
        with pytest.raises(InvalidRequest) as exc:
            io.jobs_from_documents([("j.yaml", [doc])], operator=True)
        assert str(exc.value).startswith(f"j.yaml (document 1): {problem}")
    # a whole float is the API server's whole number (it takes 10.0 for an integer field)
    doc = job_doc()
    doc["spec"]["priority"] = 10.0
    job = io.job_from_dict(doc)
    assert job.priority == 10 and type(job.priority) is int
    for field, value in (("masterPort", 1), ("masterPort", 65535.0), ("backoffLimit", 0)):
        io.check_operator_fields({**doc["spec"], field: value})  # the CRD's bounds themselves
    doc["spec"]["priority"] = 10.5
    with pytest.raises(InvalidRequest, match=r"spec.priority: must be a whole number, got 10.5"):
        io.job_from_dict(doc)


def test_json_is_read_as_json(tmp_path: Path) -> None:
    """Before, PyYAML read JSON as far as it is YAML: ``jq --tab``'s tab-indented output was
    refused, and ``"\\ud83d\\uddfc"`` (Python's ``json.dump`` of a character past U+FFFF)
    became two halves of a character, and ``hulk plan`` ended in a traceback (a review)."""
    doc = yaml.safe_load(CLUSTER_YAML)
    doc["spec"]["nodes"][0]["region"] = "Tokyo \U0001f5fc"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc, indent="\t"))  # ensure_ascii: a surrogate pair
    assert "\t" in path.read_text() and "\\ud83d\\uddfc" in path.read_text()
    assert io.load_documents(path) == [doc]
    cluster = io.load_cluster(path)
    assert cluster.servers[0].region == "Tokyo \U0001f5fc"
    # a key twice in one JSON object is refused, as in YAML
    path.write_text('{"kind": "ClusterTopology",\n "kind": "ClusterTopology"}')
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert str(exc.value) == (
        f"{path}: is not valid YAML or JSON (found the key 'kind' twice in one object)"
    )
    # half of a pair alone is no character: said, not a traceback when it is printed
    path.write_text('{"kind": "ClusterTopology", "metadata": {"name": "a\\ud83d"}}')
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert "unpaired surrogate escape ('\\ud83d')" in str(exc.value)
    # flow-style YAML that is not JSON is still YAML
    path.write_text("{kind: ClusterTopology, spec: {nodes: []}}")
    assert io.load_documents(path) == [{"kind": "ClusterTopology", "spec": {"nodes": []}}]


def test_informational_text_written_as_a_number_is_that_text() -> None:
    """The spec calls ``gpuProduct`` informational; ``gpuProduct: 3090`` and
    ``computeCapability: 8.6`` were refused as "must be text" (a review). A list still is."""
    doc = yaml.safe_load(CLUSTER_YAML)
    doc["spec"]["nodes"][0].update(gpuProduct=3090, computeCapability=8.6, zone=1)
    server = io.cluster_from_dict(doc).servers[0]
    assert (server.gpu_product, server.compute_capability, server.zone) == ("3090", "8.6", "1")
    doc["spec"]["nodes"][0]["gpuProduct"] = ["A100"]
    with pytest.raises(InvalidRequest) as exc:
        io.cluster_from_dict(doc)
    assert exc.value.field == "spec.nodes[0].gpuProduct"


def test_a_document_nesting_64_levels_is_read_and_65_is_refused(tmp_path: Path) -> None:
    """The limit counts a document's own levels (a RecursionError traceback before, on
    2,000 nested lists; a user trial)."""
    from hulk_planner.io.documents import MAX_DEPTH, load_documents

    ok, deep = tmp_path / "ok.json", tmp_path / "deep.json"
    ok.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    deep.write_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert load_documents(ok)  # (64 levels: read)
    with pytest.raises(InvalidRequest) as exc:
        load_documents(deep)
    assert str(exc.value) == (
        f"{deep}: nests more than 64 levels deep (no cluster, job or plan nests so: check that "
        "it is the file meant)"
    )


def test_a_date_with_no_such_day_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """YAML reads ``2020-13-45`` unquoted as a date, and a ValueError ended ``hulk plan``
    in a traceback (found while making the YAML reading faster)."""
    path = tmp_path / "topology.yaml"
    path.write_text("apiVersion: hulk.dev/v1alpha1\nkind: ClusterTopology\nname: 2020-13-45\n")
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    assert exc.value.field == str(path)
    assert "YAML reads as a date or number but cannot (month must be in 1..12)" in str(exc.value)
    assert "quote it to keep it as text" in str(exc.value)
    path.write_text("apiVersion: hulk.dev/v1alpha1\nkind: ClusterTopology\nname: 0b_\n")
    with pytest.raises(InvalidRequest) as exc:  # (a number with no digit: not a date)
        io.load_cluster(path)
    assert "as a date or number but cannot" in str(exc.value)


def test_every_broken_server_and_link_of_a_topology_is_told_at_once(tmp_path: Path) -> None:
    """A file with two broken links told the first alone (a user trial); a jobs file tells
    each job's error, a line each, and so does a topology now."""
    doc = {"apiVersion": API, "kind": "ClusterTopology", "metadata": {"name": "bad"}, "spec": {
        "nodes": [
            {"name": "a", "region": "r1", "gpus": 8, "gpuMemoryGiB": 80, "gpuTFLOPS": 312},
            {"name": "b", "region": "r1", "gpus": -8, "gpuMemoryGiB": 80, "gpuTFLOPS": 312},
        ],
        "links": [{"a": "a", "b": "b", "latencyMs": "fast"}, {"a": "a", "b": "b", "latencyMs": -1}],
        "regionLinks": [{"a": "r1", "b": 7, "latencyMs": 5}],
    }}  # fmt: skip
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    fields = [e.field for e in each_error(exc.value)]
    assert fields == [
        f"{path}: spec.nodes[1].gpus",
        f"{path}: spec.links[0].latencyMs",
        f"{path}: spec.links[1].latencyMs",
        f"{path}: spec.links[1] (a - b)",  # (listed twice: told with the rest, a user trial)
        f"{path}: spec.regionLinks[0].b",
    ]
    path.write_text(yaml.safe_dump({**doc, "spec": {**doc["spec"], "links": "none"}}))
    with pytest.raises(InvalidRequest) as exc:  # (a list that is none: told with the rest)
        io.load_cluster(path)
    assert [e.field for e in each_error(exc.value)][1:] == [
        f"{path}: spec.links",
        f"{path}: spec.regionLinks[0].b",
    ]


def test_a_server_name_of_spaces_alone_is_named_where_it_is(tmp_path: Path) -> None:
    """An empty name was told at spec.nodes[2].name, one of spaces as "name" alone (a
    review)."""
    for name, problem in (("", "is empty"), (" ", "is blank, got ' '"), ("\t", "is blank")):
        doc = cluster_doc()
        doc["spec"]["nodes"][2]["name"] = name
        path = tmp_path / "c.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(InvalidRequest) as exc:
            io.load_cluster(path)
        assert exc.value.field == f"{path}: spec.nodes[2].name"
        assert exc.value.problem.startswith(problem)
        assert exc.value.fix == "give each server a name (on a cluster, its node name)"


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_a_number_too_long_to_read_is_named_where_it_is(tmp_path: Path, suffix: str) -> None:
    """5,000 digits were told with Python's advice ("use sys.set_int_max_str_digits()") and
    a fix about dates, naming no field (a review); digits in a text are text still."""
    doc = cluster_doc()
    doc["spec"]["nodes"][0]["gpuProduct"] = "A100-" + "1" * 5000
    doc["spec"]["nodes"][1]["gpus"] = 12345
    path = tmp_path / f"c.{suffix}"
    text = json.dumps(doc) if suffix == "json" else yaml.safe_dump(doc, width=10000)
    path.write_text(text.replace("12345", "1" * 5000))
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    assert str(exc.value) == (
        f"{path}: spec.nodes[1].gpus: is a number too large to read (5,000 digits) (no "
        "cluster, job or plan holds one so large: check the value, or quote it if it is text)"
    )
    path.write_text(f"a: 1\n---\nb: [1, -{'9' * 4301}]\n")  # (the second document's)
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    assert exc.value.field == f"{path} (document 2): b[1]"
    path.write_text("9" * 4300)  # (as many digits as Python reads: a number)
    assert io.load_documents(path) == [int("9" * 4300)]


def test_a_topology_or_plan_file_holding_a_list_says_what_it_must_hold(tmp_path: Path) -> None:
    """A topology file that was a list was told to be "a kind: List with items:", which no
    topology can be (a review); a jobs file can."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps([cluster_doc()]))
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    assert str(exc.value) == (
        f"{path}: expected a ClusterTopology document, got list (a ClusterTopology file "
        "holds one mapping of apiVersion, kind, metadata and spec, as docs/formats.md shows, "
        "not a list)"
    )
    with pytest.raises(InvalidRequest) as exc:
        io.load_plan(path)
    assert "holds one mapping of apiVersion, kind, planner, jobs and unplaced" in str(exc.value)
    with pytest.raises(InvalidRequest) as exc:
        io.load_jobs([path])
    assert "or give them as a kind: List with items:" in str(exc.value)


# Strings YAML 1.1 (PyYAML, go-yaml v2) or 1.2's core schema (go-yaml v3) reads as no string.
NUMBER_LIKE_NAMES = [
    "0o17", "0O17", "-0o17", "0x1F", "0X1f", "+0x1F", "0x_1F", "0b101", "017", "08", "0009",
    "+08", "-8", "1_000", "0o1_7", "1_0.5", "1:20", "-1:20", "190:20:30.15", "1e3", "1E3",
    "5e-3", "1.", ".5", "-.5", "+.5", ".inf", "-.inf", "+.Inf", ".INF", ".nan", ".NaN",
    ".NAN", "~", "null", "Null", "NULL", "", "true", "True", "TRUE", "false", "FALSE", "yes",
    "No", "on", "OFF", "y", "Y", "n", "N", "2001-12-14", "=", "<<",
]  # fmt: skip


def test_yaml_output_quotes_every_name_a_yaml_reader_takes_for_no_string() -> None:
    """A node named 0o17 (a valid Kubernetes node name) was written bare, which go-yaml v3
    reads as the integer 15 (a review)."""
    stage = Stage((0, 1), tuple(n for n in NUMBER_LIKE_NAMES if n), "data")
    text = io.dump_plan(Plan("hulk", (JobPlan("j", (stage,), 1, 1.0),)), "yaml")
    assert quoted(text) == set(stage.nodes)  # each quoted
    assert yaml.safe_load(text)["jobs"][0]["stages"][0]["nodes"] == list(stage.nodes)
    servers = tuple(
        replace(paper_cluster().servers[0], name=n, region=f"r{n}") for n in stage.nodes
    )
    written = io.dump_cluster(replace(paper_cluster(), servers=servers, links=()), "yaml")
    assert set(stage.nodes) <= quoted(written)
    read = yaml.safe_load(written)["spec"]["nodes"]
    assert [s["name"] for s in read] == list(stage.nodes)
    assert [type(s["gpus"]) for s in read] == [int] * len(servers)  # numbers are numbers still


def quoted(text: str) -> set[str]:
    """The scalars of a YAML text written in quotes."""
    return {
        t.value
        for t in yaml.scan(text)
        if isinstance(t, yaml.ScalarToken) and t.style in ("'", '"')
    }


def _topology(nodes: list[Any], links: list[Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ClusterTopology", "metadata": {"name": "bad"},
            "spec": {"nodes": nodes, "links": links, **spec}}  # fmt: skip


def _node(name: Any, region: Any = "A", **fields: Any) -> dict[str, Any]:
    return {"name": name, "region": region, "gpus": 4, "gpuMemoryGiB": 24, "gpuTFLOPS": 125,
            **fields}  # fmt: skip


def _told(path: Path, doc: dict[str, Any]) -> list[str]:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    return [str(e).removeprefix(f"{path}: ") for e in each_error(exc.value)]


def test_a_topology_s_names_used_twice_and_unknown_ends_are_told_with_its_fields(
    tmp_path: Path,
) -> None:
    """A negative gpus, a misspelled gpuMemoryGiB, a quoted "8", a negative latency were told
    first, and a name used twice and a link to an unknown server only once they were fixed:
    the checks across entries ran when the Cluster was built (a user trial). All are told
    at once, each on its own line, in file order."""
    gpu_memory = _node("a-1")
    gpu_memory["gpuMemory"] = gpu_memory.pop("gpuMemoryGiB")
    doc = _topology(
        [_node("a-0", gpus=-4), gpu_memory, _node("a-2", gpus="8"), _node("a-0"), _node("a-3")],
        [
            {"a": "a-0", "b": "a-1", "latencyMs": -1},
            {"a": "a-2", "b": "a-3", "latencyMs": 1},
            {"a": "a-1", "b": "a-2", "latencyMs": 1},
            {"a": "a-2", "b": "a-3", "latencyMs": 2},
        ],
    )
    assert _told(tmp_path / "bad.yaml", doc) == [
        "spec.nodes[0].gpus: must be greater than zero, got -4 (write a number greater than zero)",
        "spec.nodes[1].gpuMemoryGiB: is required but missing (the field is spelled "
        "gpuMemoryGiB: rename gpuMemory to it)",
        "spec.nodes[2].gpus: must be a number, got '8' (write it unquoted: 8)",
        "spec.nodes[3].name: name 'a-0' is used twice (make names unique)",
        "spec.links[0].latencyMs: must be zero or more, got -1 (write a number zero or more, "
        "in ms)",
        "spec.links[3] (a-2 - a-3): is listed twice (keep one)",
    ]
    doc["spec"]["nodes"][3]["name"] = "a-4"
    doc["spec"]["links"][2]["b"] = "zz"
    doc["spec"]["links"].append({"a": "yy", "b": "a-0", "latencyMs": 1})
    assert _told(tmp_path / "bad.yaml", doc)[3:] == [
        "spec.links[0].latencyMs: must be zero or more, got -1 (write a number zero or more, "
        "in ms)",
        "spec.links[2] (a-1 - zz): names unknown server 'zz' (every link end must be listed "
        "in spec.nodes)",
        "spec.links[3] (a-2 - a-3): is listed twice (keep one)",
        "spec.links[4] (yy - a-0): names unknown server 'yy' (every link end must be listed "
        "in spec.nodes)",
    ]
    # a server taken out of spec.nodes, its links left: each says they go with it (a trial)
    doc["spec"]["links"].append({"a": "a-1", "b": "yy", "latencyMs": 1})
    assert _told(tmp_path / "bad.yaml", doc)[-1] == (
        "spec.links[5] (a-1 - yy): names unknown server 'yy' (every link end must be listed "
        "in spec.nodes: list it, or remove its 2 links with it)"
    )


def test_a_topology_s_regions_are_checked_with_its_fields(tmp_path: Path) -> None:
    """A region spelt two ways and a regionLink to an unknown region or listed twice are told
    with the entries' own errors (each came alone, once the rest was right)."""
    doc = _topology(
        [_node("a-0", "Tokyo", gpus=0), _node("a-1", "tokyo"), _node("b-0", "Rome")],
        [],
        regionLinks=[
            {"a": "Tokyo", "b": "Mars", "latencyMs": 5},
            {"a": "Tokyo", "b": "Rome", "latencyMs": 90},
            {"a": "rome", "b": "Tokyo", "latencyMs": 90},
            {"a": "Gone", "b": "Gone", "latencyMs": 0.5},  # (a region's own: told once)
        ],
    )
    assert _told(tmp_path / "bad.yaml", doc) == [
        "spec.nodes[0].gpus: is 0 (a server with no GPU trains nothing: leave it out)",
        "spec.nodes[1].region: 'tokyo' and 'Tokyo' (spec.nodes[0]) are one region as a node "
        "label writes it (tokyo), and would be planned as two (write it 'Tokyo' in both)",
        "spec.regionLinks[0]: names unknown region 'Mars' (use a region of spec.nodes: Rome, "
        "Tokyo)",
        "spec.regionLinks[2]: Rome-Tokyo is listed twice (keep one)",
        "spec.regionLinks[3]: names unknown region 'Gone' (use a region of spec.nodes: Rome, "
        "Tokyo)",
    ]


def test_an_entry_that_failed_its_own_checks_is_left_out_of_those_across_entries(
    tmp_path: Path,
) -> None:
    """Where a server's name failed (or is used twice), a link to a server not listed may
    name it: not told as unknown until the names are right; a link that failed on its ends
    (empty, a server linked to itself) is not checked for them either."""
    doc = _topology(
        [_node("a-0"), _node(""), _node("a-2")],
        [
            {"a": "a-0", "b": "a-1", "latencyMs": 1},
            {"a": "a-0", "b": "", "latencyMs": 1},
            {"a": "a-2", "b": "a-2", "latencyMs": 1},
        ],
    )
    assert [line.partition(":")[0] for line in _told(tmp_path / "bad.yaml", doc)] == [
        "spec.nodes[1].name",
        "spec.links[1].b",
        "spec.links[2]",
    ]
    doc["spec"]["nodes"][1]["name"] = "a-0"  # (used twice: the link to a-1 still waits)
    assert [line.partition(":")[0] for line in _told(tmp_path / "bad.yaml", doc)] == [
        "spec.nodes[1].name",
        "spec.links[1].b",
        "spec.links[2]",
    ]
    doc["spec"]["nodes"][1]["name"] = "a-1"
    assert [line.partition(":")[0] for line in _told(tmp_path / "bad.yaml", doc)] == [
        "spec.links[1].b",
        "spec.links[2]",
    ]
