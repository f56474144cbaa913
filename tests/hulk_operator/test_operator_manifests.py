"""Pure tests of the stage pod and Service builders (no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hulk_operator import GANG_GATE, GPU, LABEL_JOB, LABEL_STAGE, manifests
from hulk_planner.model import JobPlan, Stage

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "train"}},
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "image": "train:1",
                "env": [{"name": "RANK", "value": "99"}, {"name": "KEEP", "value": "1"}],
            }
        ]
    },
}
PLAN = JobPlan(
    "gpt2-xl",
    (Stage((0, 20), ("bj-0", "bj-1")), Stage((20, 48), ("sh-0", "sh-1"))),
    micro_batches=64,
)
GPUS = {"bj-0": 8, "bj-1": 4, "sh-0": 8, "sh-1": 8}


def pods() -> dict[str, dict[str, Any]]:
    return manifests.desired_pods(
        job="gpt2-xl", namespace="ml", uid="u-1", template=TEMPLATE, job_plan=PLAN, gpus=GPUS
    )


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_one_pod_per_stage_server_in_pipeline_order() -> None:
    ps = list(pods().values())
    assert [p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in ps] == [
        "bj-0",
        "bj-1",
        "sh-0",
        "sh-1",
    ]
    assert [env(p)["RANK"] for p in ps] == ["0", "1", "2", "3"]
    assert all("nodeName" not in p["spec"] for p in ps)


def test_pod_pinning_labels_owner_gpus_toleration_gate() -> None:
    p = next(iter(pods().values()))
    assert p["metadata"]["labels"] == {
        "app": "train",
        LABEL_JOB: "gpt2-xl",
        LABEL_STAGE: "0",
        "hulk.dev/replica": "0",
    }
    owner = p["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "HulkTrainingJob" and owner["uid"] == "u-1" and owner["controller"]
    c = p["spec"]["containers"][0]
    assert c["resources"]["limits"][GPU] == "8" and c["resources"]["requests"][GPU] == "8"
    assert {"key": GPU, "operator": "Exists", "effect": "NoSchedule"} in p["spec"]["tolerations"]
    assert p["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert p["spec"]["hostname"] == "gpt2-xl-0-0" and p["spec"]["subdomain"] == "gpt2-xl"


def test_a_host_network_template_resolves_the_jobs_names() -> None:
    """On the node's network the default dnsPolicy (ClusterFirst) falls back to the node's
    resolver, where MASTER_ADDR (<hostname>.<service>) did not resolve (a review): such a
    pod gets ClusterFirstWithHostNet, unless the template chose its own policy."""
    assert all("dnsPolicy" not in p["spec"] for p in pods().values())

    def built(**spec: Any) -> dict[str, Any]:
        template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], **spec}}
        return next(iter(manifests.desired_pods(
            job="gpt2-xl", namespace="ml", uid="u-1", template=template, job_plan=PLAN, gpus=GPUS
        ).values()))["spec"]  # fmt: skip

    assert built(hostNetwork=True)["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert built(hostNetwork=True, dnsPolicy="Default")["dnsPolicy"] == "Default"
    assert "dnsPolicy" not in built(hostNetwork=False)


def test_a_node_whose_hostname_label_is_not_its_name_is_pinned_by_its_name() -> None:
    """Where a node's ``kubernetes.io/hostname`` label is not its name (or it has none), a
    selector on that label matched no node (a review): the pod is pinned by a required
    ``matchFields metadata.name``, added to each of the template's own terms (they are
    ORed); where the label is the name the pod is as before, name and all."""
    before = pods()
    hostnames = {"bj-0": "ip-10-0-0-1.internal", "bj-1": None, "sh-0": "sh-0"}
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    template = copy.deepcopy(TEMPLATE)
    terms = [{"matchExpressions": [zone]}, {"matchExpressions": [zone]}]
    template["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }

    def built(template: dict[str, Any]) -> list[dict[str, Any]]:
        return [p["spec"] for p in manifests.desired_pods(
            job="gpt2-xl", namespace="ml", uid="u-1", template=template, job_plan=PLAN,
            gpus=GPUS, hostnames=hostnames,
        ).values()]  # fmt: skip

    specs = built(TEMPLATE)
    name = {"key": "metadata.name", "operator": "In"}
    for spec, node in zip(specs[:2], ("bj-0", "bj-1"), strict=True):
        assert "nodeSelector" not in spec
        required = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert required["nodeSelectorTerms"] == [{"matchFields": [{**name, "values": [node]}]}]
        assert manifests.pinned_node(spec) == node
    assert [s["nodeSelector"] for s in specs[2:]] == [
        {"kubernetes.io/hostname": n} for n in ("sh-0", "sh-1")
    ]
    assert [manifests.pinned_node(s) for s in specs[2:]] == ["sh-0", "sh-1"]
    kept = [
        n
        for n, p in before.items()
        if p["spec"]["nodeSelector"]["kubernetes.io/hostname"] in ("sh-0", "sh-1")
    ]
    again = manifests.desired_pods(
        job="gpt2-xl", namespace="ml", uid="u-1", template=TEMPLATE, job_plan=PLAN, gpus=GPUS,
        hostnames=hostnames,
    )  # fmt: skip
    assert set(kept) <= set(again) and len(kept) == 2  # (the same pods: not replaced)
    first = built(template)[0]["affinity"]["nodeAffinity"]
    got = first["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert got == [{"matchExpressions": [zone], "matchFields": [{**name, "values": ["bj-0"]}]}] * 2
    assert terms[0] == {"matchExpressions": [zone]}  # (the template is not changed)
    assert manifests.pinned_node({"containers": []}) is None


def test_training_env() -> None:
    ps = list(pods().values())
    first, last = env(ps[1]), env(ps[3])
    assert first["MASTER_ADDR"] == "gpt2-xl-0-0.gpt2-xl" == first["PET_MASTER_ADDR"]
    assert first["MASTER_PORT"] == "29500" == first["PET_MASTER_PORT"]
    assert first["WORLD_SIZE"] == "4" == first["PET_NNODES"]
    assert first["PET_NPROC_PER_NODE"] == "4" and first["PET_NODE_RANK"] == "1"
    assert first["PYTHONUNBUFFERED"] == "1" and first["KEEP"] == "1"
    assert (first["HULK_STAGE_INDEX"], first["HULK_NUM_STAGES"]) == ("0", "2")
    assert (first["HULK_LAYER_START"], first["HULK_LAYER_END"]) == ("0", "20")
    assert first["HULK_PREV_STAGE_ADDR"] == ""
    assert first["HULK_NEXT_STAGE_ADDR"] == "gpt2-xl-1-1.gpt2-xl"  # same replica
    assert (
        last["HULK_PREV_STAGE_ADDR"] == "gpt2-xl-0-1.gpt2-xl" and last["HULK_NEXT_STAGE_ADDR"] == ""
    )
    assert (last["HULK_LAYER_START"], last["HULK_LAYER_END"]) == ("20", "48")
    names = [e["name"] for e in ps[1]["spec"]["containers"][0]["env"]]
    assert names.count("RANK") == 1  # the template's RANK is replaced, not duplicated


def test_a_template_setting_hulks_variables_is_told_which_are_replaced() -> None:
    """The template's RANK is replaced on every pod (above); a Warning says so, naming each
    container's, and the fix for the port. Every name Hulk sets counts, and no other."""
    assert manifests.replaced_env(TEMPLATE) == (
        "container trainer sets RANK: Hulk sets these on every stage pod, in place of the "
        "template's values"
    )
    ours = [e["name"] for e in next(iter(pods().values()))["spec"]["containers"][0]["env"]]
    sidecar = {"name": "log", "env": [{"name": n, "value": "x"} for n in ours]}
    template = {"spec": {"containers": [*TEMPLATE["spec"]["containers"], sidecar]}}
    said = manifests.replaced_env(template)
    assert said is not None and said.endswith("(set the port with spec.masterPort)")
    assert f"container log sets {', '.join(sorted(set(ours) - {'KEEP'}))}: " in said
    for quiet in (
        {"spec": {"containers": [{"name": "t", "env": [{"name": "KEEP", "value": "1"}]}]}},
        {"spec": {"containers": [{"name": "t", "env": "RANK"}]}},  # (the shape check's)
        {"spec": {"containers": [{"name": "t", "env": [{"name": ["RANK"]}, "RANK"]}]}},
        {"spec": {"containers": None}},
        "not a template",
        None,
    ):
        assert manifests.replaced_env(quiet) is None, quiet


def test_init_containers_get_the_variables_too_and_are_told_when_they_set_them() -> None:
    """An init container that waits for the master (as PyTorchJob's own "init-pytorch"
    does, ``until nslookup $MASTER_ADDR``) saw none of Hulk's variables (a review)."""
    template = copy.deepcopy(TEMPLATE)
    wait = {"name": "wait", "image": "busybox", "env": [{"name": "MASTER_ADDR", "value": "x"}]}
    template["spec"]["initContainers"] = [wait]
    pod = next(iter(manifests.desired_pods(
        job="gpt2-xl", namespace="ml", uid="u-1", template=template, job_plan=PLAN, gpus=GPUS
    ).values()))  # fmt: skip
    (init,) = pod["spec"]["initContainers"]
    given = {e["name"]: e["value"] for e in init["env"]}
    ours = {k: v for k, v in env(pod).items() if k != "KEEP"}  # (the trainer's own)
    assert given == ours, given  # the same variables, the template's MASTER_ADDR replaced
    assert "resources" not in init  # (the GPUs go to the trainer alone)
    assert template["spec"]["initContainers"][0]["env"] == [{"name": "MASTER_ADDR", "value": "x"}]
    assert manifests.replaced_env(template) == (
        "init container wait sets MASTER_ADDR; container trainer sets RANK: Hulk sets these "
        "on every stage pod, in place of the template's values"
    )


def test_names_are_deterministic_and_change_only_with_the_pod() -> None:
    a, b = pods(), pods()
    assert list(a) == list(b)
    moved = JobPlan(
        "gpt2-xl", (Stage((0, 20), ("bj-0", "bj-1")), Stage((20, 48), ("sh-0", "xa-9"))), 64
    )
    c = manifests.desired_pods(
        job="gpt2-xl",
        namespace="ml",
        uid="u-1",
        template=TEMPLATE,
        job_plan=moved,
        gpus={**GPUS, "xa-9": 8},
    )
    assert set(a) & set(c) == set(list(a)[:3])  # only the moved slot gets a new pod


def _first_pod(tmpl: dict[str, Any], gpus: int = 8) -> dict[str, Any]:
    return manifests.stage_pod(
        job="j",
        namespace="n",
        uid="u",
        template=tmpl,
        job_plan=PLAN,
        slot=manifests.slots(PLAN)[0],
        gpus=gpus,
    )


def test_template_gpu_request_wins() -> None:
    tmpl = {"spec": {"containers": [{"name": "t", "resources": {"limits": {GPU: 2}}}]}}
    p = _first_pod(tmpl)
    assert p["spec"]["containers"][0]["resources"] == {"limits": {GPU: "2"}}
    # a sidecar's GPUs set to 0 (to keep a LimitRange's default off it) asks for none:
    # before, the trainer was then given no GPUs at all
    side = {"name": "log", "resources": {"limits": {GPU: 0}}}
    p = _first_pod({"spec": {"containers": [{"name": "t"}, side]}})
    trainer, log = (c["resources"] for c in p["spec"]["containers"])
    assert trainer == {"limits": {GPU: "8"}, "requests": {GPU: "8"}}
    assert log == {"limits": {GPU: "0"}}


def test_an_init_containers_gpus_are_not_the_templates_ask_and_a_sidecars_are() -> None:
    """A plain init container runs before the trainer: its GPU does not make the template
    ask for GPUs, the trainer gets its server's, and the plan offers whole servers (before:
    the trainer got 1 of 8). A sidecar (``restartPolicy: Always``) runs beside it: its GPU
    is the template's ask, and Hulk adds none (before: asked twice; a review)."""
    from hulk_operator.entries import stage_requests

    gpu = {"resources": {"limits": {GPU: 1}}}
    init = {"spec": {"containers": [{"name": "t"}], "initContainers": [{"name": "w", **gpu}]}}
    p = _first_pod(init)
    assert p["spec"]["containers"][0]["resources"] == {"limits": {GPU: "8"}, "requests": {GPU: "8"}}
    assert not manifests.asks_gpus(init["spec"]) and stage_requests(init["spec"]).gpus == 0
    side = {"name": "s", "restartPolicy": "Always", **gpu}
    sidecar = {"spec": {"containers": [{"name": "t"}], "initContainers": [side]}}
    p = _first_pod(sidecar)
    assert "resources" not in p["spec"]["containers"][0]
    assert manifests.asks_gpus(sidecar["spec"]) and stage_requests(sidecar["spec"]).gpus == 1
    # the trainer's 2 are the ask, not the init container's 4 it holds before it starts
    both = {"containers": [{"name": "t", "resources": {"limits": {GPU: 2}}}],
            "initContainers": [{"name": "w", "resources": {"limits": {GPU: 4}}}]}  # fmt: skip
    assert stage_requests(both).gpus == 2


def test_the_gpus_go_to_the_default_container() -> None:
    """A logging sidecar listed first got the server's GPUs, the trainer none (a user
    trial): kubectl's default-container annotation names the trainer."""
    containers = [{"name": "logger"}, {"name": "trainer"}]
    named = {
        "metadata": {"annotations": {manifests.DEFAULT_CONTAINER: "trainer"}},
        "spec": {"containers": containers},
    }
    logger, trainer = _first_pod(named)["spec"]["containers"]
    assert trainer["resources"] == {"limits": {GPU: "8"}, "requests": {GPU: "8"}}
    assert "resources" not in logger
    # unannotated, or naming no container: the first, as kubectl takes it
    for meta in ({}, {"annotations": {manifests.DEFAULT_CONTAINER: "nope"}}):
        first, _ = _first_pod({"metadata": meta, "spec": {"containers": containers}})["spec"][
            "containers"
        ]
        assert first["resources"] == {"limits": {GPU: "8"}, "requests": {GPU: "8"}}


def test_template_without_containers_is_refused() -> None:
    with pytest.raises(ValueError, match="containers"):
        manifests.stage_pod(
            job="j",
            namespace="n",
            uid="u",
            template={"spec": {}},
            job_plan=PLAN,
            slot=manifests.slots(PLAN)[0],
            gpus=1,
        )


def test_headless_service() -> None:
    svc = manifests.headless_service(job="gpt2-xl", namespace="ml", uid="u-1")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {LABEL_JOB: "gpt2-xl"}
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["metadata"]["ownerReferences"][0]["name"] == "gpt2-xl"


def test_long_and_odd_names_become_valid_labels() -> None:
    long = "x" * 80
    assert len(manifests.service_name(long)) <= 63
    assert manifests.service_name("1job")[0].isalpha()
    assert manifests.service_name("a.b") != "a.b"
    assert len(manifests.job_label(long)) <= 63
    assert manifests.dns_label(long) == manifests.dns_label(long)
    # the names docs/operator.md gives for these
    assert manifests.service_name("my.job") == "my-job-bc373230"
    assert manifests.service_name("9lives") == "h-9lives-bc867356"
    assert manifests.hostname("my.job", 0, 0) == "my-job-0-0-25556061"
    assert manifests.hostname("gpt2-xl", 1, 0) == "gpt2-xl-1-0"


def test_tensor_stage_neighbour_is_its_first_server() -> None:
    plan = JobPlan("j", (Stage((0, 4), ("a", "b")), Stage((4, 8), ("c", "d"), "tensor")), 4)
    p = manifests.stage_pod(
        job="j",
        namespace="n",
        uid="u",
        template=TEMPLATE,
        job_plan=plan,
        slot=manifests.slots(plan)[1],
        gpus=1,
    )
    assert env(p)["HULK_NEXT_STAGE_ADDR"] == "j-1-0.j"


def test_template_check_pod_is_a_stage_pod_on_a_placeholder_server() -> None:
    pod = manifests.template_check_pod(job="gpt2-xl", namespace="ml", uid="u-1", template=TEMPLATE)
    assert pod["metadata"]["namespace"] == "ml" and pod["metadata"]["labels"]["app"] == "train"
    selector = pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    assert selector == manifests.TEMPLATE_CHECK_NODE
    c = pod["spec"]["containers"][0]
    assert c["image"] == "train:1" and c["resources"]["limits"][GPU] == "1"
    assert env(pod)["KEEP"] == "1" and env(pod)["RANK"] == "0"  # the operator's env wins


def test_resource_quantities_written_as_numbers_are_sent_as_strings() -> None:
    """Kubernetes takes `nvidia.com/gpu: 8` and `"8"` alike; the Python client refused the
    number, so the job's pods were never created (a user trial)."""
    template = {
        "spec": {
            "overhead": {"cpu": 0.25},
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": 1024}}}],
            "containers": [
                {"name": "t", "resources": {"limits": {GPU: 8}, "requests": {"cpu": 4, "x": True}}}
            ],
        }
    }
    pod = manifests.template_check_pod(job="j", namespace="ns", uid="u", template=template)
    spec = pod["spec"]
    assert spec["containers"][0]["resources"] == {
        "limits": {GPU: "8"},
        "requests": {"cpu": "4", "x": True},  # not a number: left for the API to refuse
    }
    assert spec["initContainers"][0]["resources"]["requests"] == {"memory": "1024"}
    assert spec["overhead"] == {"cpu": "0.25"}
    assert template["spec"]["containers"][0]["resources"]["limits"][GPU] == 8  # not mutated


def test_a_pod_the_kubernetes_client_refuses_names_the_template_field() -> None:
    """The client's models validate a request before it is sent (no server is contacted):
    that refusal is the template's fault, as the API server's 422 is."""
    from kubernetes import client

    from hulk_operator.errors import rejected_template

    template = {"spec": {"containers": [{"name": "t", "env": [{"name": "N", "value": 5}]}]}}
    pod = manifests.template_check_pod(job="j", namespace="ns", uid="u", template=template)
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    with pytest.raises(Exception) as refused:
        api.create_namespaced_pod("ns", pod)  # type: ignore[arg-type]
    assert rejected_template(refused.value) == (
        "spec.template: the stage pods are not valid: spec.template.spec.containers[0].env[0]"
        ".value: Input should be a valid string, got 5 (quote it)"
    )
    assert rejected_template(ValueError("other")) is None


@pytest.mark.parametrize(
    ("trainer", "sidecar", "nproc"),
    [
        ({"limits": {GPU: "2"}}, {"limits": {GPU: "1"}}, "2"),  # (was 3)
        ({"requests": {GPU: 4}, "limits": {GPU: 4}}, {"limits": {GPU: "1"}}, "4"),  # (was 5)
        ({}, {"limits": {GPU: "1"}}, "1"),  # the trainer holds none: one process (was 1)
        ({"limits": {GPU: "3"}}, {}, "3"),
    ],
)
def test_torchrun_is_told_the_gpus_of_the_trainer_alone(
    trainer: dict[str, Any], sidecar: dict[str, Any], nproc: str
) -> None:
    """Where the template asks GPUs itself, the pod's GPUs are those of all its containers,
    but torchrun (in the trainer) starts a worker per GPU ``PET_NPROC_PER_NODE`` says:
    before, a GPU sidecar beside a 2-GPU trainer made it 3, and the third worker found no
    GPU (a review). It is the trainer's own GPUs now, at least 1."""
    template = {
        "spec": {
            "containers": [
                {"name": "trainer", "image": "t", "resources": trainer},
                {"name": "side", "image": "s", "resources": sidecar},
            ]
        }
    }
    assert manifests.trainer_gpus({}, template["spec"]) == int(nproc)  # (what the plan counts)
    gpus = {n: 8 for n in GPUS}  # (the server's, capped to the pod's ask by the caller)
    built = manifests.desired_pods(
        job="j", namespace="ml", uid="u", template=template, job_plan=PLAN, gpus=gpus
    )
    for p in built.values():
        for c in p["spec"]["containers"]:
            assert {e["name"]: e["value"] for e in c["env"]}["PET_NPROC_PER_NODE"] == nproc
        asked = p["spec"]["containers"][0]["resources"]  # (left as asked; numbers as text)
        assert asked == {k: {r: str(v) for r, v in m.items()} for k, m in trainer.items()}
    # a template that asks for none: the server's GPUs, the trainer's alone
    plain = {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}
    (first, *_) = manifests.desired_pods(
        job="j", namespace="ml", uid="u", template=plain, job_plan=PLAN, gpus=gpus
    ).values()
    assert env(first)["PET_NPROC_PER_NODE"] == "8"
    assert manifests.trainer_gpus({}, plain["spec"]) == 0  # (the server's, as planned)
