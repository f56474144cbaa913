"""A job's entry (``entries.job_entry``): a pod template of the wrong shape is the job's
InvalidSpec, named by field, never an error of the operator (a user trial)."""

from __future__ import annotations

from typing import Any

import pytest

from hulk_operator import GPU
from hulk_operator.entries import object_entry, template_shape_error

BASE: dict[str, Any] = {"spec": {"containers": [{"name": "trainer", "image": "busybox"}]}}


def with_(**pod: Any) -> dict[str, Any]:
    return {"spec": {**BASE["spec"], **pod}}


def with_container(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", "image": "busybox", **fields}]}}


@pytest.mark.parametrize(
    ("template", "said"),
    [
        (with_container(env={"S": "1"}), "spec.containers[0].env: Input should be a valid list, "
         "got {'S': '1'} (write it as a YAML list, each item on a line starting with '- ')"),
        (with_container(resources="4Gi"), "containers[0].resources: Input should be a valid "
         "dictionary, got '4Gi' (write it as a mapping, key: value)"),  # (no class name)
        (with_container(ports=[{"containerPort": "80"}]), "containerPort: Input should be a "
         "valid integer, got '80' (write a whole number, unquoted)"),
        (with_container(resources={"limits": {"cpu": True}}), "cpu: Input should be a valid "
         "string, got True (write text, in quotes)"),
        (with_container(resources={"requests": [1]}), "resources.requests: Input should be a"),
        (with_(affinity="x"), "spec.template.spec.affinity: Input should be a valid dictionary"),
        (with_(initContainers="x"), "spec.template.spec.initContainers: Input should be a"),
        (with_(overhead="x"), "spec.template.spec.overhead"),
        (with_container(comand=["x"]), "comand: Extra inputs are not permitted, got ['x'] (did "
                                       "you mean command?)"),
        (with_(nodeSelectr={"a": "b"}), "(did you mean nodeSelector?)"),
        ({"metadata": {"labels": {"team": 7}}, **BASE}, "spec.template.metadata.labels.team: "
                                                        "Input should be a valid string"),
        ("x", "not valid: spec.template: Input should be a valid dictionary"),
        (with_container(replicas=2), "spec.containers[0].replicas: Extra inputs are not "
                                     "permitted, got 2"),  # (no 'did you mean' of a Deployment)
        ({"containers": [{"name": "t"}]}, "spec.template.containers: Extra inputs are not "
         "permitted, got [{'name': 't'}] (containers belongs at another level: check its "
         "indentation)"),
    ],
)  # fmt: skip
def test_a_template_of_the_wrong_shape_is_named_by_field(template: Any, said: str) -> None:
    why = template_shape_error(template)
    assert why is not None and said in why, why
    body = {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"model": {"preset": "bert-large"}, "template": template},
    }
    entry = object_entry(body)  # (before: AttributeError / TypeError from inside)
    assert entry.job is None and entry.error == why
    assert entry.requests == object_entry({**body, "spec": {"model": {}}}).requests


@pytest.mark.parametrize(
    "template",
    [
        None,
        {},
        {"spec": {}},
        {"spec": {"containers": []}},
        {"spec": {"containers": None}},
        {"spec": {"initContainers": [{"name": "i"}]}},
    ],
)
def test_a_template_with_no_container_is_told_to_give_one(template: Any) -> None:
    assert template_shape_error(template) is None  # (the shape is right: a later check)
    spec = {"model": {"preset": "bert-large"}, "template": template}
    entry = object_entry({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
                          "metadata": {"name": "j"}, "spec": spec})  # fmt: skip
    assert entry.job is None and entry.error == (
        "spec.template.spec.containers: is required: the stage pods run the template's "
        "containers (give spec.template.spec.containers: [{name: trainer, image: IMAGE}])"
    ), entry.error


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ({"hulk.dev/job": "other"}, "spec.template.metadata.labels sets hulk.dev/job=other: "
         "Hulk sets hulk.dev/job=j, hulk.dev/stage and hulk.dev/replica on every stage pod, "
         "in place of the template's values (select the stage pods by hulk.dev/job=j, or "
         "give a label of your own)"),
        ({"hulk.dev/stage": "0", "hulk.dev/replica": "1"}, "spec.template.metadata.labels "
         "sets hulk.dev/stage=0, hulk.dev/replica=1: Hulk sets "),
        ({"hulk.dev/job": "j", "team": "ml"}, None),  # what the operator sets: harmless
    ],
)  # fmt: skip
def test_a_template_label_the_operator_sets_is_warned_of_not_refused(
    labels: dict[str, str], said: str | None
) -> None:
    """Before, the operator's value replaced the template's without a word (a user trial:
    a selector on the template's value matched no stage pod); a Warning, not a refusal,
    so that a job made before it was told is not failed (a review). ``hulk plan`` notes
    it."""
    from hulk_operator.manifests import replaced_labels
    from hulk_planner.cli_inputs import _operator_notes

    template = {"metadata": {"labels": labels}, **BASE}
    spec = {"model": {"preset": "bert-large"}, "template": template}
    doc = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
           "metadata": {"name": "j"}, "spec": spec}  # fmt: skip
    assert object_entry(doc).error is None  # (not refused)
    told = replaced_labels(template, "j")
    notes = _operator_notes(doc)
    if said is None:
        assert told is None and notes == []
    else:
        assert told is not None and told.startswith(said), told
        assert notes == [f"the operator would warn (LabelsReplaced): {told}"]


def test_a_valid_template_passes() -> None:
    assert template_shape_error(with_container(env=[{"name": "A", "value": "1"}])) is None


def test_numbers_are_quantities_wherever_kubernetes_takes_them() -> None:
    """The API server takes ``1`` for any quantity; the client's models only strings: a
    divisor, an ephemeral volume's claim, a null overhead were refused (a review)."""
    from hulk_operator.manifests import quantities_as_text

    env = [{"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                                "divisor": 1}}}]  # fmt: skip
    claim = {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": 10}}}}
    volumes = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": claim}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": 1}},
        {"name": "info", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {
            "containerName": "trainer", "resource": "limits.cpu", "divisor": 1}}]}},
    ]  # fmt: skip
    template = with_(overhead={"cpu": None, "memory": 2}, volumes=volumes)
    template["spec"]["containers"][0].update(env=env, resources={"limits": {"cpu": 2, "x": None}})
    assert template_shape_error(template) is None
    spec = template["spec"]
    quantities_as_text(spec)
    assert spec["overhead"] == {"memory": "2"}
    assert spec["containers"][0]["resources"] == {"limits": {"cpu": "2"}}
    assert spec["containers"][0]["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"] == "1"
    assert claim["spec"]["resources"]["requests"] == {"storage": "10"}
    assert spec["volumes"][1]["emptyDir"]["sizeLimit"] == "1"
    assert spec["volumes"][2]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"] == "1"


def test_a_request_larger_than_kubernetes_allows_is_named_not_a_crash() -> None:
    """``nvidia.com/gpu: 1e400`` read as infinite: ``int()`` of it crashed the job's index,
    and the job got no status at all (a review). The amount is capped where it is counted,
    and the job refused naming the field."""
    from hulk_operator.quotas import MAX_AMOUNT, parse_amount

    assert parse_amount("1e400") == MAX_AMOUNT and parse_amount("8") == 8.0
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "metadata": {"name": "j"}}
    template = with_container(resources={"limits": {GPU: "1e400"}})
    e = object_entry({**body, "spec": {"model": {"preset": "bert-large"}, "template": template}})
    assert e.job is None and e.error is not None
    assert e.error.startswith(
        f"spec.template.spec.containers[0] (trainer).resources.limits.{GPU}: '1e400' is larger "
        "than Kubernetes allows"
    ), e.error


def test_a_divisor_or_size_limit_that_is_no_quantity_is_named() -> None:
    """Before, only the API server's "quantities must match the regular expression", naming
    neither the field nor the fix (a trial)."""
    ref = {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "lots"}}
    template = with_container(env=[{"name": "CPUS", "valueFrom": ref}])
    spec = {"model": {"preset": "bert-large"}, "template": template}
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "metadata": {"name": "j"}}
    assert object_entry({**body, "spec": spec}).error == (
        "spec.template.spec.containers[0].env[0].valueFrom.resourceFieldRef.divisor: 'lots' is "
        "not a quantity (write it as Kubernetes does: 1, 500m, 4Gi)"
    )
    template = with_(volumes=[{"name": "shm", "emptyDir": {"sizeLimit": "big"}}])
    error = object_entry({**body, "spec": {**spec, "template": template}}).error
    assert error is not None and error.startswith(
        "spec.template.spec.volumes[0].emptyDir.sizeLimit: 'big' is not a quantity"
    ), error
    template = with_(volumes=[{"name": "shm", "emptyDir": {"sizeLimit": "1Gi"}}])
    assert object_entry({**body, "spec": {**spec, "template": template}}).error is None


def test_a_template_of_the_wrong_shape_tells_its_bad_quantities_too() -> None:
    """Before, ``cpu: lots`` was told only once the template's shape was fixed: a second
    round of fixes (a user trial)."""
    template = with_container(
        comand=["train"], resources={"requests": {"cpu": "lots"}}
    )  # (a typo and a bad quantity in one container)
    spec = {"model": {"preset": "bert-large"}, "template": template}
    entry = object_entry({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
                          "metadata": {"name": "j"}, "spec": spec})  # fmt: skip
    assert entry.error is not None and entry.job is None
    assert "comand: Extra inputs are not permitted" in entry.error
    assert entry.error.endswith(
        "spec.template.spec.containers[0] (trainer).resources.requests.cpu: 'lots' is not a "
        "quantity (write it as Kubernetes does: 500m or 2 (CPUs), 4Gi (bytes), 1 (GPUs))"
    ), entry.error


def _sidecar_job(template: dict[str, Any]) -> Any:
    spec = {"model": {"preset": "bert-large"}, "template": template}
    return object_entry({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
                         "metadata": {"name": "j"}, "spec": spec})  # fmt: skip


def test_a_template_whose_gpus_go_to_a_sidecar_alone_is_told_to_give_the_trainer_its_own() -> None:
    """Hulk gives the trainer its server's GPUs only where the template asks none: with a
    sidecar asking one and the trainer none, the trainer trained without a GPU while the
    plan counted one for it, and nothing said so (a review)."""
    gpu = {"resources": {"limits": {GPU: 1}}}
    sidecar = {"name": "monitor", "image": "busybox", **gpu}
    trainer = {"name": "trainer", "image": "busybox"}
    entry = _sidecar_job({"spec": {"containers": [trainer, sidecar]}})
    assert entry.job is None and entry.error == (
        "spec.template.spec.containers[0].resources: asks no nvidia.com/gpu for the trainer "
        "container trainer, while other containers of the template ask some: Hulk gives the "
        "trainer its server's GPUs only where the template asks none, so it would train "
        "without a GPU (give container trainer its nvidia.com/gpu (requests and limits), or "
        "name the container that trains in the template's annotation "
        "kubectl.kubernetes.io/default-container)"
    ), entry.error
    # the trainer named where it asks its own GPUs, a sidecar beside it, or none asking any
    named = {"annotations": {"kubectl.kubernetes.io/default-container": "monitor"}}
    for fine in (
        {"metadata": named, "spec": {"containers": [trainer, sidecar]}},
        {"spec": {"containers": [{**trainer, **gpu}, sidecar]}},
        {"spec": {"containers": [trainer]}},
    ):
        assert _sidecar_job(fine).error is None, fine
