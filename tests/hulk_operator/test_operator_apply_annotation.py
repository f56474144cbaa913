"""``hulk demo`` creates its jobs as ``kubectl apply`` creates them (hulk_operator/applied.py):
with kubectl's last-applied-configuration annotation, byte for byte, and its field manager.
Before, a user who edited the file and ran ``kubectl apply -f`` got kubectl's warning that
the annotation was missing, and fields removed from the file stayed (a user trial).

The expected texts are kubectl's own: ``kubectl apply --dry-run=client -n kc1 -o json -f``
(kubectl v1.32.4, against a sandbox for its discovery; the HulkTrainingJob CRD installed).
CI has no kubectl (``.ci/run`` builds none, and the dry run needs a server), so they are
kept here; the sandbox end-to-end run of the demo is tests/hulk_operator/test_operator_demo.py
(``-m sandbox``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hulk_operator.applied import (
    FIELD_MANAGER,
    LAST_APPLIED,
    as_applied,
    create_applied,
    go_json,
    last_applied_configuration,
)
from hulk_operator.demo import EXAMPLES, job_documents
from hulk_planner import io

# Everything Go's encoder writes otherwise than Python's json: HTML characters, U+2028,
# controls, floats (integral ones as integers, Go's exponent and positional forms), sorted
# keys (bytes), non-ASCII as it is; a stale annotation replaced; a status kept; null kept.
TRICKY = r"""apiVersion: hulk.dev/v1alpha1
kind: HulkTrainingJob
metadata:
  name: tricky
  labels: {b: "2", a: "1"}
  annotations:
    note: "<a & b> ü \u2028 \t tab \x01 ctl \x7f del \b\f"
    kubectl.kubernetes.io/last-applied-configuration: "stale"
spec:
  zeta: null
  model: {preset: bert-large}
  floats: [1.0, 1.5, 0.00001, 0.0000001, 1.0e21, 1.5e300, -0.0, 100.0, 1.2345678901234567e20, 3.14159, 0.1, 123456789.125, 1e3, 2.5e-5]
  ints: [0, -3, 9007199254740993, 010, 0x1F]
  bools: [true, false, yes, on]
  nested: {"ä": 1, "a": {"z": [], "y": {}}, "A": "x", "1": one}
  quoted: "\" \\ / é 😀"
status:
  phase: Running
---
apiVersion: hulk.dev/v1alpha1
kind: HulkTrainingJob
metadata: {name: plain}
spec: {model: {preset: bert-large}}
"""  # noqa: E501

KUBECTL_TRICKY = (
    '{"apiVersion":"hulk.dev/v1alpha1","kind":"HulkTrainingJob","metadata":{"annotations":'
    '{"note":"\\u003ca \\u0026 b\\u003e ü \\u2028 \\t tab \\u0001 ctl \x7f del \\b\\f"},'
    '"labels":{"a":"1","b":"2"},"name":"tricky","namespace":"kc1"},"spec":{"bools":[true,'
    'false,true,true],"floats":[1,1.5,0.00001,1e-7,1e+21,1.5e+300,0,100,'
    '123456789012345670000,3.14159,0.1,123456789.125,1000,0.000025],"ints":[0,-3,'
    '9007199254740993,8,31],"model":{"preset":"bert-large"},"nested":{"1":"one","A":"x",'
    '"a":{"y":{},"z":[]},"ä":1},"quoted":"\\" \\\\ / é 😀","zeta":null},"status":'
    '{"phase":"Running"}}\n'
)
KUBECTL_PLAIN = (
    '{"apiVersion":"hulk.dev/v1alpha1","kind":"HulkTrainingJob","metadata":{"annotations":{},'
    '"name":"plain","namespace":"kc1"},"spec":{"model":{"preset":"bert-large"}}}\n'
)
# examples/paper-jobs.yaml's bert-large, as it was when kubectl wrote this
KUBECTL_BERT = (
    '{"apiVersion":"hulk.dev/v1alpha1","kind":"HulkTrainingJob","metadata":{"annotations":{},'
    '"name":"bert-large","namespace":"kc1"},"spec":{"model":{"preset":"bert-large"},'
    '"template":{"spec":{"containers":[{"args":["--hidden","256","--global-batch","256",'
    '"--steps","1000"],"command":["torchrun","/workspace/train_stage.py"],"image":'
    '"pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime","name":"trainer","volumeMounts":'
    '[{"mountPath":"/workspace","name":"trainer","readOnly":true}]}],"volumes":[{"configMap":'
    '{"name":"hulk-train-stage"},"name":"trainer"}]}}}}\n'
)


def _load(tmp_path: Path, text: str) -> list[Any]:
    path = tmp_path / "jobs.yaml"
    path.write_text(text, encoding="utf-8")
    return io.load_documents(path)


def test_the_annotation_is_kubectls_text_byte_for_byte(tmp_path: Path) -> None:
    tricky, plain = _load(tmp_path, TRICKY)
    assert last_applied_configuration(tricky, "kc1") == KUBECTL_TRICKY
    assert last_applied_configuration(plain, "kc1") == KUBECTL_PLAIN


def test_the_object_is_the_manifest_with_its_namespace_and_the_annotation(tmp_path: Path) -> None:
    tricky = _load(tmp_path, TRICKY)[0]
    before = copy.deepcopy(tricky)
    obj = as_applied(tricky, "kc1")
    assert tricky == before  # the manifest itself is left as it was
    annotations = obj["metadata"].pop("annotations")
    assert annotations == {"note": tricky["metadata"]["annotations"]["note"],
                           LAST_APPLIED: KUBECTL_TRICKY}  # fmt: skip
    del before["metadata"]["annotations"]
    assert obj == {**before, "metadata": {**before["metadata"], "namespace": "kc1"}}


def test_a_namespace_of_the_manifest_is_kept_and_none_for_a_cluster_object() -> None:
    """As kubectl's SetNamespace: only where the object has none (a different one is the
    server's to refuse, as before)."""
    job = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
           "metadata": {"name": "a", "namespace": "ml"}}  # fmt: skip
    assert as_applied(job, "other")["metadata"]["namespace"] == "ml"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    text = last_applied_configuration(node)
    assert text == '{"apiVersion":"v1","kind":"Node","metadata":{"annotations":{},"name":"n"}}\n'


def test_the_demos_jobs_are_created_as_kubectl_apply_creates_them() -> None:
    """Every job of examples/paper-jobs.yaml: the annotation is the job as the file has it,
    in the demo's namespace, compact, sorted, a newline after it; and what kubectl wrote
    for bert-large."""
    docs = job_documents(EXAMPLES)
    assert [d["metadata"]["name"] for d in docs] == ["opt-175b", "t5-11b", "gpt2-xl", "bert-large"]
    for doc in docs:
        obj = as_applied(doc, "hulk-demo")
        text = obj["metadata"]["annotations"][LAST_APPLIED]
        assert text.endswith("}\n") and "\n" not in text[:-1] and ": " not in text
        assert json.loads(text) == {**doc, "metadata": {**doc["metadata"], "annotations": {},
                                                        "namespace": "hulk-demo"}}  # fmt: skip
        assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) + "\n"
    # bert-large as the file held it when kubectl wrote KUBECTL_BERT (it may change since)
    bert = json.loads(KUBECTL_BERT) | {"metadata": {"name": "bert-large"}}
    assert last_applied_configuration(bert, "kc1") == KUBECTL_BERT


def test_a_lists_jobs_are_annotated_each_and_other_apis_skipped(tmp_path: Path) -> None:
    """A ``kind: List`` (``kubectl get -o yaml``): kubectl applies its items, an annotation
    each; the demo skips the Namespace beside the jobs, as it did."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: Namespace, metadata: {name: ml}}\n"
        "- {apiVersion: hulk.dev/v1alpha1, kind: HulkTrainingJob, metadata: {name: plain},"
        " spec: {model: {preset: bert-large}}}\n"
    )
    docs = job_documents(path)
    assert [last_applied_configuration(d, "kc1") for d in docs] == [KUBECTL_PLAIN]


class _Custom:
    """What ``create_applied`` asks of a ``CustomObjectsApi``: the call, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((args, kwargs))
        return dict(args[4])


def test_create_applied_sends_the_annotated_object_as_kubectls_field_manager(
    tmp_path: Path,
) -> None:
    """The field manager too, as kubectl's: a later ``kubectl apply --server-side`` takes
    over client-side apply's fields (kubectl's migration), not another manager's."""
    plain = _load(tmp_path, TRICKY)[1]
    custom = _Custom()
    create_applied(custom, "hulk.dev", "v1alpha1", "kc1", "hulktrainingjobs", plain)
    [(args, kwargs)] = custom.calls
    assert args[:4] == ("hulk.dev", "v1alpha1", "kc1", "hulktrainingjobs")
    assert args[4]["metadata"] == {"name": "plain", "namespace": "kc1",
                                   "annotations": {LAST_APPLIED: KUBECTL_PLAIN}}  # fmt: skip
    assert kwargs == {"field_manager": FIELD_MANAGER} and FIELD_MANAGER == (
        "kubectl-client-side-apply"
    )
    assert "namespace" not in plain["metadata"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (1e-6, "0.000001"),
        (9.99e-7, "9.99e-7"),
        (1e-10, "1e-10"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (-2.5e-300, "-2.5e-300"),
        ("</script>&\u2029", '"\\u003c/script\\u003e\\u0026\\u2029"'),
        ({True: 1, None: 2, 3: [None]}, '{"3":[null],"null":2,"true":1}'),
    ],
)
def test_values_are_written_as_go_writes_them(value: Any, text: str) -> None:
    assert go_json(value) == text + "\n"


def test_what_json_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError):
        go_json(float("inf"))
    with pytest.raises(TypeError):
        go_json({1, 2})
