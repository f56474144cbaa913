"""Built-in data: the Hulk paper's cluster and jobs, the GPU table, the model presets and the
random cluster generator."""

from __future__ import annotations

import csv
import re
from importlib import resources

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hulk_planner import datasets
from hulk_planner.errors import InvalidRequest
from hulk_planner.generate import random_cluster
from hulk_planner.hardware import BY_CAPABILITY, normalize_capability, tflops_for
from hulk_planner.presets import PRESETS, preset, preset_model
from hulk_planner.topology import Network

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def raw(name: str) -> str:
    return (resources.files("hulk_planner") / "data" / "hulk-paper" / name).read_text()


def raw_edges() -> list[tuple[int, int, float]]:
    return [
        (int(a), int(b), float(ms))
        for a, b, ms in (ln.split() for ln in raw("edge.txt").splitlines() if ln.strip())
    ]


@pytest.fixture(scope="module")
def paper() -> datasets.Cluster:
    return datasets.paper_cluster()


def test_paper_cluster_has_47_servers_and_368_gpus(paper: datasets.Cluster) -> None:
    assert len(paper.servers) == 47
    assert sum(s.gpus for s in paper.servers) == 368  # the number the paper reports


def test_paper_server_names_regions_and_ids(paper: datasets.Cluster) -> None:
    names = [s.name for s in paper.servers]
    assert names == datasets.paper_server_names()
    assert all(DNS1123.match(n) for n in names)
    rows = list(csv.DictReader(raw("node_feature.csv").splitlines()))
    for i, (s, row) in enumerate(zip(paper.servers, rows, strict=True)):
        assert s.name.endswith(f"-{i}")
        assert s.region == row["City"].strip()  # "Neimeng " loses its trailing space
    assert "Neimeng" in paper.regions and "Neimeng " not in paper.regions
    assert len(paper.regions) == len({r["City"].strip() for r in rows})


def test_paper_gpus_follow_the_capability_table(paper: datasets.Cluster) -> None:
    rows = list(csv.DictReader(raw("node_feature.csv").splitlines()))
    for s, row in zip(paper.servers, rows, strict=True):
        cls = BY_CAPABILITY[normalize_capability(row["Capability"])]
        assert s.gpu_tflops == cls.tflops and s.gpu_memory_gib == cls.memory_gib
        assert s.gpus == max(1, round(float(row["Memory"]) / cls.memory_gib))
        # the GPU count rebuilds the server's total memory to within half a GPU
        assert abs(s.gpus * s.gpu_memory_gib - float(row["Memory"])) <= cls.memory_gib / 2


def test_paper_links_ignore_self_loops_and_are_undirected(paper: datasets.Cluster) -> None:
    edges = raw_edges()
    loops = [e for e in edges if e[0] == e[1]]
    assert loops, "the raw file has self-loops (e.g. 4 4 10)"
    pairs = {frozenset((a, b)) for a, b, _ in edges if a != b}
    assert len(paper.links) == len(pairs)
    assert all(lk.a != lk.b for lk in paper.links)
    names = datasets.paper_server_names()
    got = {frozenset((lk.a, lk.b)) for lk in paper.links}
    assert got == {frozenset((names[a], names[b])) for a, b in (tuple(p) for p in pairs)}
    net = Network(paper)
    assert np.array_equal(net.latency_ms, net.latency_ms.T)
    for a, b, ms in edges:  # each single measurement is found whichever way it is listed
        if a != b and sum(frozenset((x, y)) == frozenset((a, b)) for x, y, _ in edges) == 1:
            assert net.latency(names[b], names[a]) == ms


def test_paper_duplicate_pairs_keep_the_mean(paper: datasets.Cluster) -> None:
    names = datasets.paper_server_names()
    listed = [e for e in raw_edges() if {e[0], e[1]} == {11, 30}]
    assert sorted(ms for _, _, ms in listed) == [214.0, 265.0]
    link = {lk.key: lk for lk in paper.links}
    assert link[frozenset((names[11], names[30]))].latency_ms == 239.5
    assert link[frozenset((names[13], names[14]))].latency_ms == 7.0  # 10 and 4


def test_paper_pair_that_is_absent_has_no_link(paper: datasets.Cluster) -> None:
    pairs = {frozenset((a, b)) for a, b, _ in raw_edges() if a != b}
    absent = next(
        (a, b) for a in range(47) for b in range(a + 1, 47) if frozenset((a, b)) not in pairs
    )
    names = datasets.paper_server_names()
    keys = {lk.key for lk in paper.links}
    assert frozenset((names[absent[0]], names[absent[1]])) not in keys


def test_paper_pairs_without_a_link_cannot_communicate(paper: datasets.Cluster) -> None:
    """What the README says of the paper's data: no link inside Rome, Paris or New Delhi,
    and none between the four servers the paper's Table 2 gives BERT-large."""
    net = Network(paper)
    names = datasets.paper_server_names()
    for region in ("Rome", "Paris", "New Delhi"):
        inside = [s.name for s in paper.servers if s.region == region]
        assert len(inside) > 1
        assert not any(net.reachable(a, b) for a in inside for b in inside if a != b)
    bert = [names[i] for i in datasets.PAPER_TABLE2["bert-large"]]
    assert len(bert) == 4
    assert not any(net.reachable(a, b) for a in bert for b in bert if a != b)
    assert int((~net.direct).sum()) // 2 == 1081 - len(paper.links) == 468


def test_paper_jobs() -> None:
    four = datasets.paper_jobs()
    assert [j.name for j in four] == ["opt-175b", "t5-11b", "gpt2-xl", "bert-large"]
    six = datasets.paper_jobs(6)
    assert [j.name for j in six] == [*datasets.PAPER_JOBS, "roberta-large", "xlnet-large"]
    for job in six:
        p = PRESETS[job.name]
        assert job.model == preset_model(job.name)
        assert (job.global_batch_size, job.micro_batch_size) == (
            p.global_batch_size,
            p.micro_batch_size,
        )
    with pytest.raises(ValueError):
        datasets.paper_jobs(5)


def test_paper_table2_split_is_disjoint_and_names_real_servers() -> None:
    ids = [i for servers in datasets.PAPER_TABLE2.values() for i in servers]
    assert len(ids) == len(set(ids)) and set(ids) <= set(range(47))
    assert set(datasets.PAPER_TABLE2) == set(datasets.PAPER_JOBS)


def test_slug() -> None:
    assert datasets.slug("New Delhi") == "new-delhi"
    assert datasets.slug(" Neimeng ") == "neimeng"
    assert datasets.slug("Sao Paulo!!") == "sao-paulo"
    # accents dropped, as a label value writes them (a label cannot hold them)
    assert datasets.slug("São Paulo") == "sao-paulo" and datasets.slug("Zürich") == "zurich"


# ---- GPU table and presets ----


@pytest.mark.parametrize(
    ("product", "capability", "tflops"),
    [
        ("NVIDIA-A100-SXM4-80GB", None, 312.0),
        ("NVIDIA-A10", None, 125.0),  # not mistaken for an A100
        ("NVIDIA A40", None, 149.7),
        ("Tesla-V100-SXM2-32GB", "8.0", 125.0),  # the product wins over the capability
        (None, "8", 312.0),  # "8" is "8.0"
        (None, 6.1, 12.1),
        ("Mystery GPU", "8.6", 111.1),
        ("Mystery GPU", None, None),
        (None, "1.0", None),
    ],
)
def test_tflops_for(
    product: str | None, capability: str | float | None, tflops: float | None
) -> None:
    cap = None if capability is None else str(capability)
    assert tflops_for(product, cap) == tflops


REQUIRED_PRESETS = (
    "gpt2-xl", "bert-large", "roberta-large", "xlnet-large", "t5-11b", "opt-175b", "gpt3-xl",
    "llama2-7b", "llama2-13b", "llama2-70b",
)  # fmt: skip


@pytest.mark.parametrize("name", REQUIRED_PRESETS)
def test_required_presets_exist_and_have_default_batches(name: str) -> None:
    p = preset(name.upper())
    assert p.micro_batch_size <= p.global_batch_size
    assert preset_model(name).preset == name


@pytest.mark.parametrize(
    "name", ["gpt2-xl", "bert-large", "gpt3-xl", "opt-175b", "llama2-7b", "llama2-13b"]
)
def test_decoder_and_encoder_presets_match_12_l_h_squared(name: str) -> None:
    # A transformer block of width h has about 12 h^2 parameters (4 h^2 attention, 8 h^2
    # MLP); embeddings and gated MLPs add a little. The published sizes are within 25%.
    p = PRESETS[name]
    estimate = 12 * p.layers * p.hidden_size**2
    assert 0.75 < estimate / p.parameters < 1.25


def test_unknown_preset_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as exc:
        preset("gpt-5")
    assert exc.value.field == "spec.model.preset"
    assert "gpt2-xl" in (exc.value.fix or "")


# ---- generated clusters ----


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 10**6), regions=st.none() | st.integers(1, 6))
def test_random_cluster_is_reproducible_and_well_formed(
    n: int, seed: int, regions: int | None
) -> None:
    c = random_cluster(n, seed=seed, regions=regions)
    assert c == random_cluster(n, seed=seed, regions=regions)
    assert len(c.servers) == n
    assert all(DNS1123.match(s.name) for s in c.servers)
    if regions is not None:
        assert len(c.regions) == min(regions, n)
    assert not c.region_links  # up to 300 servers every pair is listed...
    keys = {lk.key for lk in c.links}
    for i, a in enumerate(c.servers):
        for b in c.servers[i + 1 :]:
            if a.region == b.region:  # ...and only cross-region pairs are ever dropped
                assert frozenset((a.name, b.name)) in keys
    for s in c.servers:
        assert s.gpus in (2, 4, 8)
        assert s.compute_capability in BY_CAPABILITY


def test_large_random_clusters_use_region_links() -> None:
    c = random_cluster(400, seed=1)
    assert not c.links and c.region_links
    regions = len(c.regions)
    assert len(c.region_links) == regions * (regions + 1) // 2  # every pair and intra
    net = Network(c)
    assert np.isfinite(net.latency_ms).all()
    with pytest.raises(ValueError):
        random_cluster(0)
