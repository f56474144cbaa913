"""Reading YAML with libyaml (a topology of 300 servers, every pair linked, took 10 s to
read with PyYAML's pure-Python loader; bench/yaml_load.py times it), with every outcome of
that loader kept: what it reads, what it refuses and the words it refuses it with. And the
error of a .json file that is not JSON, told in JSON's terms."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hulk_planner import io
from hulk_planner.datasets import paper_cluster
from hulk_planner.errors import InvalidRequest
from hulk_planner.generate import random_cluster
from hulk_planner.io import documents

API = "hulk.dev/v1alpha1"
needs_libyaml = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")


def pure(text: str) -> list[Any]:
    """The documents as PyYAML's own loader (the one before libyaml) reads them."""
    return [d for d in yaml.load_all(text, Loader=documents._Loader) if d is not None]


def outcome(read: Any, text: str) -> tuple[Any, ...]:
    try:
        return ("read", repr(read(text)))
    except yaml.YAMLError as exc:
        return ("refused", str(exc))
    except RecursionError:
        return ("too deep",)
    except Exception as exc:  # (a timestamp with no such day: ValueError, as before)
        return ("raised", type(exc).__name__, str(exc))


class NoPurePyYAML(yaml.SafeLoader):
    def __init__(self, stream: Any) -> None:
        raise AssertionError("read with PyYAML's pure-Python loader")


def refused(path: Path, text: str) -> str:
    """``text`` written to ``path`` and read: the error it is refused with, as told."""
    path.write_text(text)
    with pytest.raises(InvalidRequest) as exc:
        io.load_documents(path)
    return str(exc.value)


@needs_libyaml
def test_a_topology_as_hulk_writes_it_is_read_with_libyaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: always PyYAML's pure-Python scanner and parser (10 s for 44,850 links)."""
    assert documents._FastLoader is not None
    assert issubclass(documents._FastLoader, yaml._yaml.CParser)
    # (libyaml's own composer recurses in C: 200,000 nested lists were a segfault)
    assert documents._FastLoader.compose_node is yaml.composer.Composer.compose_node
    monkeypatch.setattr(documents, "_Loader", NoPurePyYAML)
    for cluster in (paper_cluster(), random_cluster(12, seed=3, explicit_links=True)):
        path = tmp_path / "c.yaml"
        path.write_text(io.dump_cluster(cluster, "yaml"))
        assert io.load_cluster(path) == cluster


def test_without_libyaml_pure_pyyaml_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents, "_FastLoader", None)
    path = tmp_path / "c.yaml"
    path.write_text(io.dump_cluster(paper_cluster(), "yaml"))
    assert io.load_cluster(path) == paper_cluster()
    path.write_text("nodes:\n- {name: a,\n   name: b}\n")
    with pytest.raises(InvalidRequest, match="found the key 'name' twice in one mapping"):
        io.load_documents(path)


# What _Loader reads its own way (a key twice, merge keys, exponents, "!"), and texts
# libyaml reads where PyYAML refused them, or refuses in other words.
SAME_AS_BEFORE = [
    "nodes:\n- {name: a,\n   name: b}\n",
    "a: 1\nb: 2\na: 3\n",
    "1: a\n1.0: b\n",
    "base: &b {name: x, region: R}\nnodes:\n- {<<: *b, name: a}\n",
    "<<: [{a: 1}, {b: 2}]\nc: 3\nb: 4\n",
    "{a: 7e9, b: 1e-05, c: 1.0e308, d: -2.5E+3, e: .5e1, f: 1e, g: '7e9'}",
    "a: !\nb: ! 1\nc: ! '2'\n- !\n",
    "- !\n- x\n",
    "kind: x\nspec:\n\tnodes: []\n",
    "a:\tb\n",
    "a: b\t\n",
    "a: {b?}\n",
    "a: [b?, c]\n",
    "b: >#\n",
    "%YAML 1.1#\n--- a\n",
    "a:\r\ufeffb: 1\n",
    "{name: !, region: R}\n",
    "spec:\n  nodes: [a, b\n",
    'a: "x\\ud83d"\n',
    "a: [1, 2\nb: 3\n",
    "a: *nowhere\n",
    "a: 2020-13-45\n",
    "- !!int 2'\n- !.!x 3\n",
    "a: \x7f\n",
    "- " * 2_000 + "x",
]


@needs_libyaml
@pytest.mark.parametrize("text", SAME_AS_BEFORE)
def test_what_pure_pyyaml_read_or_refused_is_read_or_refused_alike(text: str) -> None:
    assert outcome(documents._yaml_documents, text) == outcome(pure, text)


@needs_libyaml
def test_the_libyaml_loader_itself_refuses_a_key_twice_and_reads_exponents() -> None:
    """Only what libyaml refuses goes back to PyYAML: what _Loader refuses must be refused
    by the libyaml loader too, or it would be read (the last key kept, as PyYAML's)."""
    loader = documents._FastLoader
    with pytest.raises(yaml.constructor.ConstructorError) as exc:
        yaml.load("nodes:\n- {name: a,\n   name: b}\n", Loader=loader)
    assert exc.value.problem == "found the key 'name' twice in one mapping"
    assert exc.value.problem_mark is not None
    assert (exc.value.problem_mark.line, exc.value.problem_mark.column) == (2, 3)
    assert yaml.load("{a: 7e9, b: 1e-05, c: '1e3'}", Loader=loader) == {
        "a": 7e9,
        "b": 1e-05,
        "c": "1e3",
    }
    merged = "base: &b {name: x, region: R}\nnodes:\n- {<<: *b, name: a}\n"
    assert yaml.load(merged, Loader=loader)["nodes"] == [{"name": "a", "region": "R"}]


def test_a_refusal_is_told_in_pyyaml_words_where_and_as_before(tmp_path: Path) -> None:
    """libyaml says "found character that cannot start any token" and "did not find
    expected ',' or ']'"; the errors told stay PyYAML's, with its lines and columns."""
    path = tmp_path / "c.yaml"
    assert refused(path, "nodes:\n- {name: a,\n   name: b}\n") == (
        f"{path}:3:4: is not valid YAML or JSON (found the key 'name' twice in one mapping)"
    )
    assert refused(path, "spec:\n  nodes: [a, b\n") == (
        f"{path}:3:1: is not valid YAML or JSON (expected ',' or ']', but got '<stream end>')"
    )
    # (libyaml reads it)
    assert refused(path, "kind: ClusterTopology\nspec:\n  nodes: {a?}\n") == (
        f"{path}:3:12: is not valid YAML or JSON (expected ',' or '}}', but got '?')"
    )


@pytest.mark.parametrize(
    "text",
    ["- " * 200_000 + "x\n", "a: " + "[" * 200_000 + "x" + "]" * 200_000 + "\n"],
    ids=["block", "flow"],
)
def test_200000_nested_yaml_lists_are_told_too_deep_not_a_crash(tmp_path: Path, text: str) -> None:
    """libyaml's own composer (yaml.CSafeLoader) recurses in C: these ended the process
    with a segmentation fault."""
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(InvalidRequest, match=r"nests more than 64 levels deep"):
        io.load_documents(path)


# Texts of YAML's own characters, altered: libyaml and PyYAML read some differently.
YAML_TEXT = st.text(alphabet=" \n\t:-[]{},#&*!|>'\"?%@.<=0a1e\r\ufeff", max_size=40)
SEEDS = [
    "a: [b, c]\n",
    "- {name: a, region: R, gpus: 8}\n",
    "a:\n  b: 1\n- c\n",
    "x: &y {p: q}\nz: *y\n",
    "k: |\n  t\n",
]


@needs_libyaml
@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(st.sampled_from(SEEDS), YAML_TEXT, st.integers(0, 40))
def test_altered_yaml_is_read_or_refused_as_pure_pyyaml_does(
    seed: str, insert: str, at: int
) -> None:
    text = re.sub("(?m)^\ufeff", "", seed[:at] + insert + seed[at:])  # (as load_documents)
    assert outcome(documents._yaml_documents, text) == outcome(pure, text)


def test_a_json_file_that_is_not_json_is_told_in_json_terms(tmp_path: Path) -> None:
    """Before: "expected the node content, but found '}'", the YAML parser's words for a
    .json file (a user trial). YAML reads it still where it can (docs/formats.md)."""
    path = tmp_path / "c.json"
    for text, told in [
        ('{"nodes": [}', "1:12: is not valid YAML or JSON (expected value, but found '}')"),
        (
            '{\n  "a": 1\n  "b": 2\n}\n',
            "3:3: is not valid YAML or JSON (expected ',' delimiter, but found '\"')",
        ),
        ('{"a": "x', "1:7: is not valid YAML or JSON (found a string with no closing '\"')"),
        (
            '{"a": 1}\n{"b": 2}\n',
            "2:1: is not valid YAML or JSON (found '{' after the end of the JSON value)",
        ),
        (
            "[1, 2",
            "1:6: is not valid YAML or JSON (expected ',' delimiter, but found the end of "
            "the file)",
        ),
    ]:
        assert refused(path, text) == f"{path}:{told}"
    # the same text in a .yaml file: YAML's words, as before
    yaml_path = tmp_path / "c.yaml"
    assert refused(yaml_path, '{"nodes": [}') == (
        f"{yaml_path}:1:12: is not valid YAML or JSON (expected the node content, but found '}}')"
    )
    # a .json file YAML reads is still read, as before: a trailing comma, a bare word
    path.write_text('{"a": [1, 2,], b: c}')
    assert io.load_documents(path) == [{"a": [1, 2], "b": "c"}]


def billion_laughs(levels: int) -> str:
    """A topology with ``levels`` lists of ten aliases of the one before (10**levels x's)."""
    lines = ["a0: &a0 [" + ",".join("x" * 10) + "]"]
    lines += [f"a{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 10) + "]" for k in range(1, levels)]
    return (
        "apiVersion: hulk.dev/v1alpha1\nkind: ClusterTopology\nmetadata: {name: x}\n"
        + "\n".join(lines)
        + "\nspec: {nodes: [{name: a, region: R, gpus: 8, gpuMemoryGiB: 80, gpuTFLOPS: 312}]}\n"
    )


@pytest.mark.parametrize("levels", [7, 9])
def test_a_billion_laughs_is_refused_at_once(tmp_path: Path, levels: int) -> None:
    """583 bytes standing for a billion values (aliases of aliases) ran at 100% CPU for
    hours, walking each (a review): refused, as go-yaml refuses "excessive aliasing"."""
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(levels))
    start = time.perf_counter()
    with pytest.raises(InvalidRequest) as exc:
        io.load_cluster(path)
    assert time.perf_counter() - start < 0.5
    told = re.match(rf"{re.escape(str(path))}: holds ([0-9,]+) values once its aliases "
                    r"\(\*name\) are expanded, from ([0-9,]+) written", str(exc.value))  # fmt: skip
    assert told is not None, str(exc.value)
    assert int(told[1].replace(",", "")) > 10**levels and int(told[2]) < 200
    assert str(exc.value).endswith(
        "(no cluster, job or plan grows so: write the values out, or check the file's "
        "anchors (&name) and aliases)"
    )


def test_aliases_of_a_real_file_and_a_big_topology_are_read(tmp_path: Path) -> None:
    """The limit is far from any real file: one without aliases is read however large (a
    topology of 5,000 servers, each linked to its 20 next ones: 110,000 links), and one
    whose aliases repeat its servers' figures (``<<: *a100``) or a list is read too."""
    servers = [
        {"name": f"s{i}", "region": f"r{i % 7}", "gpus": 8, "gpuMemoryGiB": 80, "gpuTFLOPS": 312}
        for i in range(5000)
    ]
    links = [
        {"a": f"s{i}", "b": f"s{(i + k) % 5000}", "latencyMs": 1.0 + k, "bandwidthGbps": 10}
        for i in range(5000)
        for k in range(1, 23)
    ]
    doc = {"apiVersion": API, "kind": "ClusterTopology", "metadata": {"name": "big"},
           "spec": {"nodes": servers, "links": links}}  # fmt: skip
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    assert len(io.load_cluster(path).links) == 110_000
    nodes = "\n".join(
        f"  - {{<<: *a100, name: s{i}, region: r{i % 3}, zones: *zones}}" for i in range(5000)
    )
    path = tmp_path / "aliased.yaml"
    path.write_text(
        "apiVersion: hulk.dev/v1alpha1\nkind: ClusterTopology\nmetadata: {name: a}\n"
        "x-a100: &a100 {gpus: 8, gpuMemoryGiB: 80, gpuTFLOPS: 312}\n"
        f"x-zones: &zones [{', '.join(f'z{k}' for k in range(50))}]\n"
        f"spec:\n  nodes:\n{nodes}\n"
    )
    assert len(io.load_cluster(path).servers) == 5000
