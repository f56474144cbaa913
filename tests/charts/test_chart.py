"""The Helm chart, rendered with helm (no cluster): CRD copies, RBAC, security, probes,
values plumbing and the Grafana dashboard. tests/charts/test_chart_install.py applies the
rendered chart to the sandbox's API server."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hulk"
Render = Callable[..., list[dict[str, Any]]]

CRD_FILES = ("hulktrainingjobs.hulk.dev.yaml", "nodelatencies.hulk.dev.yaml")
KOPF_CRDS = ROOT / "hulk_operator" / "kopf-peering.yaml"
# (source of truth, the chart's copy): charts/sync-crds.sh copies them.
COPIES = [
    (ROOT / "crds" / n, copy / n)
    for copy in (CHART / "files" / "crds", ROOT / "hulk_operator" / "crds")
    for n in CRD_FILES
] + [(KOPF_CRDS, CHART / "files" / "kopf" / "kopf-peering.yaml")]
EXAMPLE_VALUES = ROOT / "examples" / "values-three-regions.yaml"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))

# (apiGroups, resources, verbs) of each ClusterRole: widening one is a deliberate change here.
OPERATOR_RULES = {
    ("hulk.dev", "hulktrainingjobs"): {"get", "list", "watch", "patch"},
    ("hulk.dev", "hulktrainingjobs/status"): {"get", "patch"},
    ("hulk.dev", "hulktrainingjobs/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    # list/watch: which jobs have theirs (a quota on services); patch: an edited masterPort;
    # get: whose is the Service of the name, when a stage pod is made again
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    # list: a restarted operator reads a job's newest advice Event before telling it again
    ("", "events"): {"create", "list"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "resourcequotas"): {"list", "watch"},  # GPU quotas: planned within
    ("", "limitranges"): {"list", "watch"},  # GPU maximums per pod: planned within
    ("hulk.dev", "nodelatencies"): {"list"},  # (listed alone: indexes.latencies_now)
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},  # the global default's
    # kopf watches every peering object and heeds its own; create: crd.ensure_peering
    ("kopf.dev", "clusterkopfpeerings"): {"list", "watch", "create"},
    # its keep-alive written into its own peering object only (resourceNames): another
    # operator's, written with a higher priority, pauses that operator
    ("kopf.dev", "clusterkopfpeerings", "hulk"): {"get", "patch"},
    # the other scope's peering objects, read only: crd.overlapping_peers warns of a live
    # operator serving named namespaces (before, not granted: the read was refused, the
    # warning never came; a review)
    ("kopf.dev", "kopfpeerings"): {"get", "list"},
    ("", "namespaces"): {"list", "watch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
# operator.watchNamespaces: what it writes, a Role in each namespace it serves; what it reads
# cluster-wide, its ClusterRole (every namespace's pods listed: the GPUs they hold).
CLUSTER_READS = {
    "kopfpeerings",  # (the other scope's, listed in every namespace)
    "nodes",
    "nodelatencies",
    "priorityclasses",
    "namespaces",
    "customresourcedefinitions",
}
OPERATOR_NAMESPACED_RULES = {
    **{k: v for k, v in OPERATOR_RULES.items() if k[1] not in CLUSTER_READS},
    ("kopf.dev", "kopfpeerings"): {"list", "watch", "create"},
    ("kopf.dev", "kopfpeerings", "hulk"): {"get", "patch"},
}
del OPERATOR_NAMESPACED_RULES[("kopf.dev", "clusterkopfpeerings")]
del OPERATOR_NAMESPACED_RULES[("kopf.dev", "clusterkopfpeerings", "hulk")]
OPERATOR_CLUSTER_READS = {
    **{k: v for k, v in OPERATOR_RULES.items() if k[1] in CLUSTER_READS},
    ("", "pods"): {"list"},
    # the other scope's: the ClusterKopfPeering of an operator serving every namespace
    ("kopf.dev", "clusterkopfpeerings"): {"get", "list"},
}
del OPERATOR_CLUSTER_READS[("kopf.dev", "kopfpeerings")]
PROBE_RULES = {
    ("", "nodes"): {"get", "list", "watch", "patch"},
    # (before, also update and patch, and get and update on the status: never called; a review)
    ("hulk.dev", "nodelatencies"): {"get", "create"},
    ("hulk.dev", "nodelatencies/status"): {"patch"},
}


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in by_kind(objs, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
    return found[0]


def container(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec = named(objs, kind, name)["spec"]["template"]["spec"]
    assert len(spec["containers"]) == 1
    return dict(spec["containers"][0])


@pytest.fixture(scope="module")
def default(render: Render) -> list[dict[str, Any]]:
    return render()


# ---- CRD copies ---------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "copy"), COPIES, ids=[c.name for _, c in COPIES])
def test_crd_copy_is_byte_identical_to_source(source: Path, copy: Path) -> None:
    assert source.is_file(), f"{source} (the source of truth) is missing"
    assert copy.is_file(), f"{copy} is missing: run charts/sync-crds.sh"
    assert copy.read_bytes() == source.read_bytes(), f"{copy} is stale: run charts/sync-crds.sh"


def test_chart_carries_no_crd_without_source() -> None:
    sources = {p.name for p in (ROOT / "crds").glob("*.yaml")}
    for folder in (CHART / "files" / "crds", ROOT / "hulk_operator" / "crds"):
        copies = {p.name for p in folder.glob("*.yaml")}
        assert copies == sources, f"{folder}: run charts/sync-crds.sh"
    assert [p.name for p in (CHART / "files" / "kopf").glob("*.yaml")] == ["kopf-peering.yaml"]


def test_sync_script_restores_a_stale_copy(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "charts" / "hulk" / "files" / "crds").mkdir(parents=True)
    (tree / "crds").mkdir()
    (tree / "charts" / "sync-crds.sh").write_bytes((ROOT / "charts" / "sync-crds.sh").read_bytes())
    (tree / "crds" / "a.yaml").write_text("kind: A\n")
    (tree / "hulk_operator").mkdir()
    (tree / "hulk_operator" / "kopf-peering.yaml").write_text("kind: K\n")
    (tree / "charts" / "hulk" / "files" / "crds" / "a.yaml").write_text("stale\n")
    (tree / "charts" / "hulk" / "files" / "crds" / "gone.yaml").write_text("old\n")
    (tree / "hulk_operator" / "crds").mkdir()
    (tree / "hulk_operator" / "crds" / "gone.yaml").write_text("old\n")
    subprocess.run(["bash", str(tree / "charts" / "sync-crds.sh")], check=True, capture_output=True)
    for copies in (tree / "charts" / "hulk" / "files" / "crds", tree / "hulk_operator" / "crds"):
        assert (copies / "a.yaml").read_text() == "kind: A\n"
        assert not (copies / "gone.yaml").exists()
    kopf = tree / "charts" / "hulk" / "files" / "kopf" / "kopf-peering.yaml"
    assert kopf.read_text() == "kind: K\n"


def test_rendered_crds_equal_their_sources_but_for_labels(default: list[dict[str, Any]]) -> None:
    rendered = {c["metadata"]["name"]: c for c in by_kind(default, "CustomResourceDefinition")}
    files = dict.fromkeys(src for src, _ in COPIES)  # (crds/ has two copies each)
    sources = [d for src in files for d in yaml.safe_load_all(src.read_text()) if d]
    assert len(sources) == 4
    assert set(rendered) == {d["metadata"]["name"] for d in sources}
    for source in sources:
        crd = rendered[source["metadata"]["name"]]
        meta = crd["metadata"]
        assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert crd["spec"] == source["spec"], source["metadata"]["name"]
        assert {k: v for k, v in meta.items() if k not in ("labels", "annotations")} == {
            k: v for k, v in source["metadata"].items() if k not in ("labels", "annotations")
        }


def test_crds_can_be_left_out_and_unkept(render: Render) -> None:
    assert not by_kind(render(set_values=["crds.enabled=false"]), "CustomResourceDefinition")
    unkept = by_kind(render(set_values=["crds.keep=false"]), "CustomResourceDefinition")
    assert unkept and all("annotations" not in c["metadata"] for c in unkept)
    no_kopf = render(set_values=["crds.kopfPeering=false"])
    names = {c["metadata"]["name"] for c in by_kind(no_kopf, "CustomResourceDefinition")}
    assert names == {"hulktrainingjobs.hulk.dev", "nodelatencies.hulk.dev"}


# ---- RBAC ---------------------------------------------------------------------------------


def rules_of(role: dict[str, Any]) -> dict[tuple[str, ...], set[str]]:
    """(group, resource) -> verbs; a rule bound to one object: (group, resource, name)."""
    out: dict[tuple[str, ...], set[str]] = {}
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        names = rule.get("resourceNames") or [None]
        assert len(names) == 1, names
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource) if names[0] is None else (group, resource, names[0])
                assert key not in out, f"{key} listed twice"
                out[key] = set(rule["verbs"])
    return out


@pytest.mark.parametrize(
    ("component", "expected"), [("operator", OPERATOR_RULES), ("probe", PROBE_RULES)]
)
def test_rbac_is_exactly_what_each_component_needs(
    default: list[dict[str, Any]], component: str, expected: dict[tuple[str, ...], set[str]]
) -> None:
    role = named(default, "ClusterRole", f"hulk-{component}")
    assert rules_of(role) == expected
    text = json.dumps(role["rules"])
    assert "*" not in text and "secrets" not in text and "escalate" not in text
    binding = named(default, "ClusterRoleBinding", f"hulk-{component}")
    assert binding["roleRef"]["name"] == f"hulk-{component}"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"hulk-{component}", "namespace": "hulk-system"}
    ]
    assert named(default, "ServiceAccount", f"hulk-{component}")


def test_a_namespaced_operator_writes_only_in_its_namespaces(render: Render) -> None:
    objs = render(set_values=["operator.watchNamespaces={team-a,team-b}"])
    assert rules_of(named(objs, "ClusterRole", "hulk-operator")) == OPERATOR_CLUSTER_READS
    subject = {"kind": "ServiceAccount", "name": "hulk-operator", "namespace": "hulk-system"}
    assert named(objs, "ClusterRoleBinding", "hulk-operator")["subjects"] == [subject]
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(objs, "Role")}
    assert set(roles) == {
        ("team-a", "hulk-operator"),
        ("team-b", "hulk-operator"),
        ("hulk-system", "hulk-operator-events"),  # kopf's Events on Nodes go to its own
    }
    for (_, name), role in roles.items():
        events = {("", "events"): {"create"}}
        assert rules_of(role) == (events if name.endswith("-events") else OPERATOR_NAMESPACED_RULES)
    bindings = by_kind(objs, "RoleBinding")
    assert {(b["metadata"]["namespace"], b["metadata"]["name"]) for b in bindings} == set(roles)
    for b in bindings:
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": b["metadata"]["name"],
        }
        assert b["subjects"] == [subject]
    # serving its own namespace: no second Role there
    own = render(namespace="team-a", set_values=["operator.watchNamespaces={team-a}"])
    assert [r["metadata"]["name"] for r in by_kind(own, "Role")] == ["hulk-operator"]
    args = container(objs, "Deployment", "hulk-operator")["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args
    # kopf peers through a KopfPeering in each served namespace, not a ClusterKopfPeering
    assert not by_kind(objs, "ClusterKopfPeering")
    peerings = by_kind(objs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert {p["metadata"]["name"] for p in peerings} == {"hulk"}
    assert all(p["metadata"]["annotations"]["helm.sh/hook"] == "post-install" for p in peerings)
    assert not by_kind(render(), "Role") and not by_kind(render(), "KopfPeering")


def test_every_rbac_rule_is_commented() -> None:
    for name in ("operator-rbac.yaml", "probe-rbac.yaml"):
        lines = (CHART / "templates" / name).read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[i - 1].strip().startswith("#"), f"{name}:{i + 1} has no comment"


def test_probe_node_patch_policy(default: list[dict[str, Any]], render: Render) -> None:
    policy = named(default, "ValidatingAdmissionPolicy", "hulk-probe-node-patch")
    user = "system:serviceaccount:hulk-system:hulk-probe"
    assert user in policy["spec"]["matchConditions"][0]["expression"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["nodes"]
    binding = named(default, "ValidatingAdmissionPolicyBinding", "hulk-probe-node-patch")
    assert binding["spec"] == {"policyName": "hulk-probe-node-patch", "validationActions": ["Deny"]}
    off = render(set_values=["probe.nodePatchPolicy.enabled=false"])
    assert [o["metadata"]["name"] for o in by_kind(off, "ValidatingAdmissionPolicy")] == [
        "hulk-operator-writes",
        "hulk-job-namespaces",
    ]


def test_operator_write_policy(default: list[dict[str, Any]], render: Render) -> None:
    policy = named(default, "ValidatingAdmissionPolicy", "hulk-operator-writes")
    user = "system:serviceaccount:hulk-system:hulk-operator"
    assert user in policy["spec"]["matchConditions"][0]["expression"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods", "services"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    binding = named(default, "ValidatingAdmissionPolicyBinding", "hulk-operator-writes")
    assert binding["spec"] == {"policyName": "hulk-operator-writes", "validationActions": ["Deny"]}
    # no HulkTrainingJob in a kube-* namespace, where the operator writes no pods
    jobs = named(default, "ValidatingAdmissionPolicy", "hulk-job-namespaces")
    [rule] = jobs["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["hulktrainingjobs"], ["CREATE"])
    assert "startsWith('kube-')" in jobs["spec"]["validations"][0]["expression"]
    assert named(default, "ValidatingAdmissionPolicyBinding", "hulk-job-namespaces")
    off = render(set_values=["operator.writePolicy.enabled=false"])
    assert not {"hulk-operator-writes", "hulk-job-namespaces"} & {
        o["metadata"]["name"] for o in off
    }
    assert not [o for o in render(set_values=["operator.enabled=false"]) if "operator-writes"
                in o["metadata"]["name"]]  # fmt: skip


# ---- workloads ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [[], [EXAMPLE_VALUES], *[[p] for p in CI_VALUES]],
    ids=lambda v: v[0].name if v else "default",
)
def test_every_pod_is_locked_down(render: Render, values: list[Path]) -> None:
    objs = render(values=values)
    workloads = by_kind(objs, "Deployment") + by_kind(objs, "DaemonSet")
    assert workloads
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is True
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["privileged"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_operator_runs_hulk_operator_with_peering_and_kopf_liveness(
    default: list[dict[str, Any]],
) -> None:
    deploy = named(default, "Deployment", "hulk-operator")
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    c = container(default, "Deployment", "hulk-operator")
    assert c["command"] == ["hulk", "operator"]
    assert "--all-namespaces" in c["args"]
    assert "--peering=hulk" in c["args"]
    assert not any(a.startswith("--priority") for a in c["args"])  # random per replica
    assert "--liveness=http://0.0.0.0:8080/healthz" in c["args"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    peering = named(default, "ClusterKopfPeering", "hulk")
    hook = peering["metadata"]["annotations"]["helm.sh/hook"]
    assert hook == "post-install"  # an upgrade must not drop the replicas' keep-alives


@pytest.mark.parametrize(
    "values",
    [[], [EXAMPLE_VALUES], *[[p] for p in CI_VALUES]],
    ids=lambda v: v[0].name if v else "default",
)
def test_hulk_operator_reads_the_rendered_settings(
    render: Render, values: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hulk operator`'s own argument parser and config resolution, fed the rendered args
    and environment, yield exactly the settings in the values."""
    from hulk_operator import cli
    from hulk_operator.config import OperatorConfig

    objs = render(values=values)
    merged = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    for path in values:
        merged = _merge(merged, (yaml.safe_load(Path(path).read_text()) or {}).get("operator", {}))
    c = container(objs, "Deployment", "hulk-operator")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(c["args"])  # fails on a flag `hulk operator` does not know
    for name in list(os.environ):
        if name.startswith("HULK_OPERATOR_"):
            monkeypatch.delenv(name)
    for e in c["env"]:
        if e["name"].startswith("HULK_OPERATOR_"):
            assert (
                e["name"].removeprefix("HULK_OPERATOR_").lower()
                in OperatorConfig.__dataclass_fields__
            )
            monkeypatch.setenv(e["name"], e["value"])
    cfg = cli.config_from_args(args)
    assert cfg.metrics_port == merged["metricsPort"]
    assert cfg.metrics_address == merged["listenHost"]
    for key, value in merged["config"].items():
        if value is not None:
            assert getattr(cfg, key) == value, key
    assert args.namespace == merged["watchNamespaces"]
    assert args.all_namespaces == (not merged["watchNamespaces"])
    assert args.standalone != merged["peering"]["enabled"]
    assert args.liveness == f"http://0.0.0.0:{merged['health']['port']}{merged['health']['path']}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def test_peering_off_runs_standalone_without_peering_object(render: Render) -> None:
    objs = render(set_values=["operator.peering.enabled=false"])
    c = container(objs, "Deployment", "hulk-operator")
    assert "--standalone" in c["args"] and not any(a.startswith("--peering") for a in c["args"])
    assert not by_kind(objs, "ClusterKopfPeering")
    # no right to write peering objects, cluster-wide or namespaced; only to read both
    # kinds, cluster-wide: crd.live_peers warns of operators under its --peering name
    # (before, no right at all: the read was refused and the warning never came; a review)
    namespaced = render(
        set_values=["operator.peering.enabled=false", "operator.watchNamespaces={team-a}"]
    )
    for rendered in (objs, namespaced):
        roles = by_kind(rendered, "ClusterRole") + by_kind(rendered, "Role")
        kopf = [
            (r["kind"], r["metadata"]["name"], k, v)
            for r in roles
            for k, v in rules_of(r).items()
            if k[0] == "kopf.dev"
        ]
        assert sorted(kopf) == [
            ("ClusterRole", "hulk-operator", ("kopf.dev", "clusterkopfpeerings"), {"get", "list"}),
            ("ClusterRole", "hulk-operator", ("kopf.dev", "kopfpeerings"), {"get", "list"}),
        ]


def test_the_operator_writes_only_its_own_peering_object(render: Render) -> None:
    """Its keep-alive goes into the peering object of its --peering name, and RBAC binds
    get and patch to that name (before, any peering object: a keep-alive of a higher
    priority written into another kopf operator's would pause that operator; a security
    review), in either scope and under a name set in values."""
    for values, kind, where in [
        ([], "clusterkopfpeerings", "ClusterRole"),
        (["operator.watchNamespaces={team-a}"], "kopfpeerings", "Role"),
    ]:
        objs = render(set_values=[*values, "operator.peering.name=team-peers"])
        assert "--peering=team-peers" in container(objs, "Deployment", "hulk-operator")["args"]
        [role] = [r for r in by_kind(objs, where) if r["metadata"]["name"] == "hulk-operator"]
        rules = rules_of(role)
        assert rules[("kopf.dev", kind, "team-peers")] == {"get", "patch"}
        assert not {"get", "patch", "update"} & rules[("kopf.dev", kind)]


def test_the_probe_may_live_in_a_namespace_of_its_own(
    render: Render, default: list[dict[str, Any]]
) -> None:
    """probe.namespace moves the probe's DaemonSet, ServiceAccount and metrics Service, and
    the names its ClusterRoleBinding, node policies and ServiceMonitor give them; the
    operator's stay in the release's namespace (the default keeps both there)."""
    sm = ["metrics.serviceMonitor.enabled=true"]
    objs = render(set_values=[*sm, "probe.namespace=hulk-probe"])
    where = {(o["kind"], o["metadata"]["name"]): o["metadata"].get("namespace") for o in objs}
    for key in [("DaemonSet", "hulk-probe"), ("ServiceAccount", "hulk-probe"),
                ("Service", "hulk-probe-metrics")]:  # fmt: skip
        assert where[key] == "hulk-probe", key
    operators = [
        ("Deployment", "hulk-operator"),
        ("ServiceAccount", "hulk-operator"),
        ("Service", "hulk-operator-metrics"),
        ("ServiceMonitor", "hulk-probe"),
    ]
    for key in operators:
        assert where[key] == "hulk-system", key
    binding = named(objs, "ClusterRoleBinding", "hulk-probe")
    assert binding["subjects"][0]["namespace"] == "hulk-probe"
    text = json.dumps(by_kind(objs, "ValidatingAdmissionPolicy"))
    assert "system:serviceaccount:hulk-probe:hulk-probe" in text
    assert "system:serviceaccount:hulk-system:hulk-probe" not in text
    monitor = named(objs, "ServiceMonitor", "hulk-probe")["spec"]
    assert monitor["namespaceSelector"] == {"matchNames": ["hulk-probe"]}
    assert "namespaceSelector" not in named(objs, "ServiceMonitor", "hulk-operator")["spec"]
    # by default, the release's namespace for both
    assert named(default, "DaemonSet", "hulk-probe")["metadata"]["namespace"] == "hulk-system"
    plain = render(set_values=sm)
    assert "namespaceSelector" not in named(plain, "ServiceMonitor", "hulk-probe")["spec"]


def test_probe_daemonset_uses_host_network_and_tolerates_gpu_nodes(
    default: list[dict[str, Any]],
) -> None:
    pod = named(default, "DaemonSet", "hulk-probe")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    c = container(default, "DaemonSet", "hulk-probe")
    assert c["command"] == ["hulk", "probe"]
    ports = {p["name"]: (p["containerPort"], p.get("hostPort")) for p in c["ports"]}
    assert ports == {"echo": (7471, 7471), "metrics": (7472, 7472)}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # (Ready once started: a rollout waits for an agent that cannot reach the API)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_probe_settings_are_probe_flags(render: Render) -> None:
    from hulk_probe import config as probe_config

    known = {probe_config.env_name(flag) for flag, _, _ in probe_config.FLAGS}
    for values in ([], [CI_VALUES[0]]):
        c = container(render(values=values), "DaemonSet", "hulk-probe")
        env = {e["name"]: e for e in c["env"]}
        hulk_vars = {n for n in env if n.startswith("HULK_PROBE_")}
        assert hulk_vars <= known, hulk_vars - known
        assert env["HULK_PROBE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        # The agent accepts the rendered settings (the same resolution it does at start).
        plain = {n: e["value"] for n, e in env.items() if "value" in e}
        plain.update(HULK_PROBE_NODE_NAME="node-a", POD_IP="10.1.2.3")
        args = probe_config.argparse.Namespace(
            **{f.lstrip("-").replace("-", "_"): None for f, _, _ in probe_config.FLAGS}
        )
        cfg = probe_config.resolve(args, plain)
        assert cfg.listen == ("0.0.0.0", 7471) and cfg.advertise == ("10.1.2.3", 7471)
        assert cfg.metrics == ("0.0.0.0", 7472)
        assert cfg.write_budget_kb_s == 500.0 and cfg.max_publish_interval_s == 200.0
        assert cfg.peers_per_region == (3 if values else 0)  # (all-features: 3)


def test_the_probes_write_at_least_as_often_as_the_operators_reports_stay_fresh(
    render: Render,
) -> None:
    """Within the write budget, a probe writes at most every third of the operator's
    ``latency_max_age_s`` (a link measured just after one write is still fresh when the
    next one is read), never below the publish interval."""

    def probe_env(*sets: str, values: Sequence[Path] = ()) -> dict[str, Any]:
        c = container(render(set_values=list(sets), values=values), "DaemonSet", "hulk-probe")
        return {e["name"]: e.get("value") for e in c["env"]}

    def longest(*sets: str) -> str:
        return str(probe_env(*sets)["HULK_PROBE_MAX_PUBLISH_INTERVAL"])

    assert longest() == "200"  # 600 s / 3
    assert longest("operator.config.latency_max_age_s=1800") == "600"
    assert longest("probe.publishInterval=300") == "300"
    assert longest("probe.maxPublishInterval=450") == "450"
    # null means the programs' defaults: before, the probe got "<nil>" (and refused it at
    # start) for the budget, and the publish interval as its longest spacing (no budget)
    # for the operator's max age (a user trial)
    with tempfile.TemporaryDirectory() as tmp:
        nulls = Path(tmp) / "nulls.yaml"
        nulls.write_text(
            "probe: {writeBudget: null}\noperator: {config: {latency_max_age_s: null}}\n"
        )
        env = probe_env(values=[nulls])
    assert "HULK_PROBE_WRITE_BUDGET" not in env
    assert env["HULK_PROBE_MAX_PUBLISH_INTERVAL"] == "200"


def test_the_probe_listens_on_ipv6_where_told(render: Render, chart_tools: dict[str, str]) -> None:
    """An IPv6 or dual-stack cluster: pod IPs (peers' and the liveness probe's address) may
    be IPv6, where a probe on 0.0.0.0 answered none (before, not settable; a review)."""
    from hulk_probe import config as probe_config

    c = container(render(set_values=["probe.listenHost=::"]), "DaemonSet", "hulk-probe")
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["HULK_PROBE_LISTEN"], env["HULK_PROBE_METRICS"]) == ("[::]:7471", "[::]:7472")
    plain = {n: v for n, v in env.items() if v is not None}
    plain.update(HULK_PROBE_NODE_NAME="node-a", POD_IP="fd00::5")
    args = probe_config.argparse.Namespace(
        **{f.lstrip("-").replace("-", "_"): None for f, _, _ in probe_config.FLAGS}
    )
    cfg = probe_config.resolve(args, plain)
    assert cfg.listen == ("::", 7471) and cfg.metrics == ("::", 7472)
    assert cfg.advertise == ("fd00::5", 7471)
    # written with its brackets: refused (the template adds them: "[[::]]:7471")
    cmd = [chart_tools["HELM"], "template", "r", str(CHART), "--set", "probe.listenHost=[::]"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "/probe/listenHost" in out.stderr, out.stderr


def test_the_probe_listens_on_the_pods_address_alone_where_told(render: Render) -> None:
    """``probe.listenHost="$(POD_IP)"``: not every interface of the node (a security
    review). Kubernetes expands ``$(POD_IP)`` where the variable is defined before the one
    that names it, as it is here."""
    from hulk_probe import config as probe_config

    c = container(render(set_values=["probe.listenHost=$(POD_IP)"]), "DaemonSet", "hulk-probe")
    names = [e["name"] for e in c["env"]]
    assert names.index("POD_IP") < names.index("HULK_PROBE_LISTEN")
    plain = {e["name"]: e["value"] for e in c["env"] if e.get("value") is not None}
    plain = {n: v.replace("$(POD_IP)", "10.0.0.5") for n, v in plain.items()}
    plain.update(HULK_PROBE_NODE_NAME="node-a", POD_IP="10.0.0.5")
    args = probe_config.argparse.Namespace(
        **{f.lstrip("-").replace("-", "_"): None for f, _, _ in probe_config.FLAGS}
    )
    cfg = probe_config.resolve(args, plain)
    assert cfg.listen == ("10.0.0.5", 7471) and cfg.metrics == ("10.0.0.5", 7472)


def test_the_operator_listens_on_ipv6_where_told(
    render: Render, chart_tools: dict[str, str]
) -> None:
    """As the probe: on an IPv6-only cluster the kubelet's probes and Prometheus reach the
    pod on its IPv6 address, where an operator on 0.0.0.0 answered neither (before, not
    settable: its liveness probe would have restarted it for good; a review)."""
    from hulk_operator import cli

    c = container(render(set_values=["operator.listenHost=::"]), "Deployment", "hulk-operator")
    assert "--liveness=http://[::]:8080/healthz" in c["args"]
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(c["args"])
    assert urlsplit(args.liveness).hostname == "::"
    assert cli.config_from_args(args).metrics_address == "::"
    cmd = [chart_tools["HELM"], "template", "r", str(CHART), "--set", "operator.listenHost=[::]"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "/operator/listenHost" in out.stderr, out.stderr


def test_services_point_at_named_container_ports(default: list[dict[str, Any]]) -> None:
    for svc_name, kind, workload in (
        ("hulk-operator-metrics", "Deployment", "hulk-operator"),
        ("hulk-probe-metrics", "DaemonSet", "hulk-probe"),
    ):
        svc = named(default, "Service", svc_name)
        w = named(default, kind, workload)
        assert (
            svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        )
        names = {p["name"] for p in w["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names
    assert named(default, "Service", "hulk-probe-metrics")["spec"]["clusterIP"] == "None"


def test_service_monitors_only_when_enabled(default: list[dict[str, Any]], render: Render) -> None:
    assert not by_kind(default, "ServiceMonitor")
    objs = render(values=[EXAMPLE_VALUES])
    monitors = by_kind(objs, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"hulk-operator", "hulk-probe"}
    for m in monitors:
        assert m["metadata"]["labels"]["release"] == "kps"
        # The operator's job gauge carries its own `namespace` and `job` labels.
        honor = m["metadata"]["name"] == "hulk-operator"
        assert m["spec"]["endpoints"][0].get("honorLabels", False) is honor
        assert m["spec"]["endpoints"][0]["port"] == "metrics"
        svc = [
            s
            for s in by_kind(objs, "Service")
            if m["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(svc) == 1


def test_the_alert_rules_read_exported_metrics_of_the_charts_own_targets(
    default: list[dict[str, Any]], render: Render, chart_tools: dict[str, str]
) -> None:
    """Each alert's expression names metrics the operator or the probe exports (or ``up``),
    and selects the targets by the metrics Services' names, the job label their
    ServiceMonitors give; the rule needs those ServiceMonitors."""
    assert not by_kind(default, "PrometheusRule")
    objs = render(values=[EXAMPLE_VALUES])
    (rule,) = by_kind(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {
        "HulkOperatorDown", "HulkJobPending", "HulkJobSlowerThanFreeServers",
        "HulkJobReplannedOften", "HulkJobFailed", "HulkLinkUnreachable",
        "HulkProbePublishFailing",
    }  # fmt: skip
    services = {s["metadata"]["name"] for s in by_kind(objs, "Service")}
    known = exported_metrics() | {"up"}
    for r in rules:
        names = set(re.findall(r"\b(hulk_[a-z_]+|up)\b(?=[{\[ )]|$)", r["expr"]))
        assert names and names <= known, (r["alert"], names - known)
        for job in re.findall(r'job="([^"]+)"', r["expr"]):
            assert job in services, (r["alert"], job, services)
    alone = [CHART / "ci" / "minimal-values.yaml"]
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "-f", str(alone[0]),
           "--set", "metrics.prometheusRule.enabled=true"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "metrics.prometheusRule.enabled needs metrics.serviceMonitor.enabled" in proc.stderr


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _commented(lines: list[str], i: int) -> bool:
    """The line above key ``i`` is a comment, or that of one of its ancestors is."""
    while i >= 0:
        if i > 0 and lines[i - 1].strip().startswith("#"):
            return True
        j = i - 1
        while j >= 0 and (
            not lines[j].strip()
            or lines[j].strip().startswith("#")
            or _indent(lines[j]) >= _indent(lines[i])
        ):
            j -= 1
        i = j
    return False


def test_values_file_documents_every_field() -> None:
    """Every value in values.yaml has a comment above it or above an enclosing key."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.endswith(":"):
            continue  # blank, a comment, or a mapping whose leaves are checked
        assert _commented(lines, i), f"values.yaml:{i + 1} ({stripped}) is undocumented"


# ---- values schema -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("operator.replicas=abc", "at '/operator/replicas': got string, want integer"),
        ("operator.metricsPort=99999", "at '/operator/metricsPort': maximum"),
        ("probe.echoPort=70000", "at '/probe/echoPort': maximum"),
        ("probe.interval=-5", "at '/probe/interval': exclusiveMinimum"),
        ("operator.config.planner=foo", "at '/operator/config/planner': value must be one of"),
        ("operator.config.disruption_threshold=5", "/operator/config/disruption_threshold"),
        ("operator.confg.planner=hulk", "at '/operator': additional properties 'confg'"),
        ("metrics.service.type=Foo", "at '/metrics/service/type'"),
        ("operator.watchNamespaces={team-*}", "at '/operator/watchNamespaces/0'"),
        ("metrics.serviceMonitor.interval=30", "at '/metrics/serviceMonitor/interval'"),
        # units out of order: promtool and prometheus-operator refuse them, and with the rule
        # file every alert of the chart (they rendered: a review)
        ("metrics.prometheusRule.pendingFor=30m1h", "at '/metrics/prometheusRule/pendingFor'"),
        ("metrics.prometheusRule.slowerFor=5s1m", "at '/metrics/prometheusRule/slowerFor'"),
        ("metrics.serviceMonitor.scrapeTimeout=10s1m", "/metrics/serviceMonitor/scrapeTimeout"),
        ("metrics.serviceMonitor.probeInterval=s", "at '/metrics/serviceMonitor/probeInterval'"),
        ("probe.namespace=Hulk_Probe", "at '/probe/namespace'"),
    ],
)
def test_a_bad_value_is_refused_naming_it(
    chart_tools: dict[str, str], setting: str, said: str
) -> None:
    """Before values.schema.json, these rendered and failed at install (a Go unmarshal
    error) or only when the containers crash-looped."""
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "--set", setting]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr


def test_values_schema_knows_the_operators_planners_and_every_value() -> None:
    from hulk_planner.api import PLANNERS

    schema = json.loads((CHART / "values.schema.json").read_text())
    config = schema["properties"]["operator"]["properties"]["config"]["properties"]
    assert config["planner"]["enum"] == list(PLANNERS)
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(v: Any, s: dict[str, Any], at: str) -> None:
        if not isinstance(v, dict) or "properties" not in s:
            return  # a leaf, or a Kubernetes object passed through
        for k, sub in v.items():
            assert k in s["properties"], f"{at}.{k} is not in values.schema.json"
            walk(sub, s["properties"][k], f"{at}.{k}")

    walk(values, schema, "values")
    from hulk_operator.config import OperatorConfig

    assert set(config) <= {f for f in OperatorConfig.__dataclass_fields__}


# ---- Grafana dashboard --------------------------------------------------------------------


def exported_metrics() -> set[str]:
    from prometheus_client import CollectorRegistry

    from hulk_operator.metrics import Metrics
    from hulk_probe.metrics import ProbeMetrics

    names: set[str] = set()
    for registry in (
        Metrics(CollectorRegistry()).registry,
        ProbeMetrics("node-a", CollectorRegistry()).registry,
    ):
        for family in registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            for suffix in suffixes.get(family.type, [""]):
                names.add(family.name + suffix)
    return names


def dashboard() -> dict[str, Any]:
    return dict(json.loads((CHART / "files" / "dashboards" / "hulk.json").read_text()))


def test_dashboard_is_generated_by_make_dashboard() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "charts" / "make_dashboard.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


def test_dashboard_queries_only_exported_metrics() -> None:
    exported = exported_metrics()
    used: set[str] = set()
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bhulk_[a-z_]+\b", target["expr"]))
    assert used, "no Hulk metric queried"
    assert used <= exported, f"not exported by operator or probe: {sorted(used - exported)}"
    for name in (
        "hulk_plans_total",
        "hulk_planning_seconds_bucket",
        "hulk_replans_total",
        "hulk_jobs",
        "hulk_predicted_iteration_seconds",
        "hulk_probe_one_way_latency_seconds",
        # (before, the two alerts' own figures and the replicas had no panel: a user trial)
        "hulk_job_waiting",
        "hulk_job_free_speedup",
        "hulk_operator_active",
    ):
        assert name in used, name


def test_dashboard_has_the_panels_asked_for() -> None:
    board = dashboard()
    titles = [p["title"] for p in board["panels"]]
    for wanted in ("Plans made", "Planning time", "Predicted step time per job", "Replans"):
        assert wanted in titles
    kinds = {p["type"] for p in board["panels"] if "heat map" in p["title"].lower()}
    assert kinds == {"table"}  # the source x target matrix
    assert any(p["type"] == "heatmap" for p in board["panels"])
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24


def test_dashboard_filters_and_groups_links_by_region() -> None:
    """A region variable from the probes' source_region label, every panel of the links'
    series filtered by it, and a region x region table of the median latency."""
    board = dashboard()
    (region,) = [v for v in board["templating"]["list"] if v["name"] == "region"]
    query = "label_values(hulk_probe_one_way_latency_seconds, source_region)"
    assert region["query"]["query"] == region["definition"] == query
    assert region["multi"] and region["includeAll"]
    assert region["allValue"] == ".*"  # (joined values would drop the unlabelled nodes' links)
    per_pair = r"hulk_probe_(one_way_latency_seconds|samples|peer_reachable|errors_total)\b"
    link_exprs = [
        t["expr"] for p in board["panels"] for t in p["targets"] if re.search(per_pair, t["expr"])
    ]
    assert len(link_exprs) >= 5, link_exprs
    for expr in link_exprs:
        for selector in re.findall(per_pair + r"(\{[^}]*\})?", expr):
            assert 'source_region=~"$region"' in selector[1], expr
    (pairs,) = [p for p in board["panels"] if p["title"] == "Median one-way latency by region pair"]
    assert pairs["type"] == "table"
    (expr,) = [t["expr"] for t in pairs["targets"]]
    assert "by (source_region, target_region)" in expr and "0.5" in expr
    (grouping,) = pairs["transformations"]
    assert grouping["options"]["rowField"] == "source_region"
    assert grouping["options"]["columnField"] == "target_region"


def test_dashboard_configmap_carries_the_sidecar_label(default: list[dict[str, Any]]) -> None:
    cm = named(default, "ConfigMap", "hulk-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["hulk.json"]) == dashboard()


def test_trained_weights_come_from_a_configmap_mounted_read_only(render: Render) -> None:
    from hulk_operator import cli

    assert "--gnn-weights" not in str(container(render(), "Deployment", "hulk-operator"))
    objs = render(set_values=["operator.gnnWeights.configMap=hulk-gnn"])
    deployment = named(objs, "Deployment", "hulk-operator")
    c = container(objs, "Deployment", "hulk-operator")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    path = Path(parser.parse_args(c["args"]).gnn_weights)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "gnn-weights"]
    assert mount["readOnly"] and path.parent == Path(mount["mountPath"])
    (volume,) = [
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "gnn-weights"
    ]
    assert volume["configMap"] == {
        "name": "hulk-gnn",
        "items": [{"key": "hulk-gnn.pt", "path": path.name}],
    }


def test_more_than_one_standalone_operator_is_refused(chart_tools: dict[str, str]) -> None:
    out = subprocess.run(
        [chart_tools["HELM"], "template", "r", str(CHART),
         "--set", "operator.peering.enabled=false", "--set", "operator.replicas=2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert "operator.replicas > 1 needs operator.peering.enabled" in out.stderr


def test_peering_flags_in_extra_args_are_refused_naming_the_values(
    chart_tools: dict[str, str],
) -> None:
    """The RBAC rules bind the operator's writes to the peering name the chart gives it;
    a --peering in operator.extraArgs (parsed last, it wins) would start an operator the
    rules refuse (a review)."""
    for arg in ("--peering=other", "--standalone"):
        out = subprocess.run(
            [chart_tools["HELM"], "template", "hulk", str(CHART), "-n", "hulk-system",
             "--set", f"operator.extraArgs={{{arg}}}"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert out.returncode != 0
        assert f"operator.extraArgs: {arg}: set operator.peering.name" in out.stderr


def test_more_than_one_replica_of_one_fixed_peering_priority_is_refused(
    chart_tools: dict[str, str],
) -> None:
    """Before, it rendered, though values.yaml says replicas tie then (a user trial)."""

    def render(*sets: str) -> subprocess.CompletedProcess[str]:
        args = [chart_tools["HELM"], "template", "r", str(CHART)]
        for s in sets:
            args += ["--set", s]
        return subprocess.run(args, capture_output=True, text=True, timeout=60)

    out = render("operator.replicas=2", "operator.peering.priority=5")
    assert out.returncode != 0
    assert "operator.replicas > 1 needs operator.peering.priority null" in out.stderr
    assert render("operator.replicas=2").returncode == 0  # each draws its own
    assert render("operator.replicas=1", "operator.peering.priority=5").returncode == 0


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("probe.timeout=20", "probe.timeout (20) must be at most probe.interval (10)"),
        ("probe.publishInterval=5", "probe.publishInterval (5) must be at least probe.interval"),
        (
            "probe.maxPublishInterval=5",
            "probe.maxPublishInterval (5) must be at least the publish interval (10)",
        ),
        ("probe.metricsPort=7471", "probe.metricsPort and probe.echoPort are both 7471"),
        ("operator.health.port=9090", "operator.health.port and operator.metricsPort are both"),
    ],
)
def test_settings_the_programs_refuse_are_refused_at_render(
    chart_tools: dict[str, str], setting: str, said: str
) -> None:
    """Before, they rendered, and every node's probe crash-looped (or two servers took one
    port, or the install failed on a duplicate port name; a user trial)."""
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "--set", setting]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr


def test_a_long_release_name_still_gives_valid_names(render: Render) -> None:
    """Before, a release name of 44 characters made a 69-character Service name, and the
    install failed (a user trial): every name and label value fits in 63."""
    release = "ml-platform-training-cluster-eu-west-prod-01"
    objs = render(release=release, set_values=["metrics.serviceMonitor.enabled=true",
                                               "metrics.prometheusRule.enabled=true"])  # fmt: skip
    names = [o["metadata"]["name"] for o in objs if o["kind"] != "CustomResourceDefinition"]
    assert names and max(len(n) for n in names) <= 63, max(names, key=len)
    labels = [v for o in objs for v in (o["metadata"].get("labels") or {}).values()]
    assert max(len(str(v)) for v in labels) <= 63


# ---- monitoring settings, operator replicas, image tags, NOTES ---------------------------


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["scrapeTimeout=31s"], "scrapeTimeout (31s) is longer than {sm}.interval (30s)"),
        (["scrapeTimeout=45s", "interval=1m"],
         "scrapeTimeout (45s) is longer than {sm}.probeInterval (30s)"),
        (["scrapeTimeout=1500ms", "interval=1s"], "is longer than {sm}.interval (1s)"),
    ],
)  # fmt: skip
def test_a_scrape_timeout_longer_than_an_interval_is_refused(
    chart_tools: dict[str, str], sets: list[str], said: str
) -> None:
    """Before, one scrapeTimeout was given to both ServiceMonitors unchecked, and
    Prometheus refuses a scrape_timeout above the scrape_interval (a user trial)."""
    sm = "metrics.serviceMonitor"
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "--set", f"{sm}.enabled=true"]
    for s in sets:
        cmd += ["--set", f"{sm}.{s}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and said.format(sm=sm) in proc.stderr, proc.stderr


def test_a_scrape_timeout_up_to_each_interval_renders(render: Render) -> None:
    objs = render(set_values=["metrics.serviceMonitor.enabled=true",
                              "metrics.serviceMonitor.scrapeTimeout=1m",
                              "metrics.serviceMonitor.interval=1m30s",
                              "metrics.serviceMonitor.probeInterval=60s"])  # fmt: skip
    ends = {
        m["metadata"]["name"]: m["spec"]["endpoints"][0] for m in by_kind(objs, "ServiceMonitor")
    }
    assert ends["hulk-operator"]["interval"] == "1m30s"
    assert ends["hulk-probe"]["interval"] == "60s"
    assert {e["scrapeTimeout"] for e in ends.values()} == {"1m"}
    # a disabled component's interval is not checked
    objs = render(set_values=["metrics.serviceMonitor.enabled=true", "probe.enabled=false",
                              "metrics.serviceMonitor.scrapeTimeout=1m",
                              "metrics.serviceMonitor.interval=1m"])  # fmt: skip
    assert [m["metadata"]["name"] for m in by_kind(objs, "ServiceMonitor")] == ["hulk-operator"]


def test_no_prometheus_rule_without_operator_and_probe(render: Render) -> None:
    """Before, it rendered `groups: null` (a user trial)."""
    objs = render(set_values=["metrics.serviceMonitor.enabled=true",
                              "metrics.prometheusRule.enabled=true",
                              "operator.enabled=false", "probe.enabled=false"])  # fmt: skip
    assert not by_kind(objs, "PrometheusRule") and not by_kind(objs, "ServiceMonitor")
    for component, group in (("operator", "hulk.probe"), ("probe", "hulk.operator")):
        objs = render(set_values=["metrics.serviceMonitor.enabled=true",
                                  "metrics.prometheusRule.enabled=true",
                                  f"{component}.enabled=false"])  # fmt: skip
        (rule,) = by_kind(objs, "PrometheusRule")
        assert [g["name"] for g in rule["spec"]["groups"]] == [group]


def test_job_counts_add_up_operators_and_take_one_replica_each(
    render: Render,
) -> None:
    """HulkJobFailed and the dashboard's job counts: one figure per operator (its metrics
    Service: the target's namespace and job), the largest of its replicas', added up over
    the operators; before, max() over them all (charts/alerts-test.yaml and
    charts/dashboard-test.yaml check the values with promtool)."""
    objs = render(values=[EXAMPLE_VALUES])
    (rule,) = by_kind(objs, "PrometheusRule")
    (failed,) = [r for g in rule["spec"]["groups"] for r in g["rules"]
                 if r.get("alert") == "HulkJobFailed"]  # fmt: skip
    assert failed["expr"] == 'sum(max by (namespace, job) (hulk_jobs{phase="Failed"})) > 0'
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    counts = [e for e in exprs if "hulk_jobs" in e]
    assert len(counts) == 3
    for e in counts:
        assert e.startswith("sum") and "max by (namespace, job" in e, e
    cases = (ROOT / "charts" / "dashboard-test.yaml").read_text()
    tested = re.findall(r'^ *- expr: "panel: ([^"/]+)', cases, re.M)
    titles = {
        p["title"]
        for p in dashboard()["panels"]
        if any("hulk_jobs" in t["expr"] for t in p["targets"])
    }
    assert titles <= set(tested)  # (the link panels' cases are there too)


def test_replicas_are_spread_over_nodes_and_given_a_disruption_budget(
    render: Render, chart_tools: dict[str, str]
) -> None:
    one = render()
    assert not by_kind(one, "PodDisruptionBudget")
    assert "affinity" not in named(one, "Deployment", "hulk-operator")["spec"]["template"]["spec"]
    two = render(set_values=["operator.replicas=2"])
    deployment = named(two, "Deployment", "hulk-operator")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = named(two, "PodDisruptionBudget", "hulk-operator")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    assert "app.kubernetes.io/instance" in term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    # the user's affinity is kept; a podAntiAffinity of theirs replaces the chart's
    zone = "topology.kubernetes.io/zone"
    own = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"team": "ml"}}, "topologyKey": zone}]}  # fmt: skip
    node = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}}]}  # fmt: skip

    def affinity(given: dict[str, Any]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "values.yaml"
            path.write_text(yaml.safe_dump({"operator": {"replicas": 2, "affinity": given}}))
            deployment = named(render(values=[path]), "Deployment", "hulk-operator")
        return dict(deployment["spec"]["template"]["spec"]["affinity"])

    kept = affinity({"nodeAffinity": node})
    assert kept["nodeAffinity"] == node and kept["podAntiAffinity"] == anti
    assert affinity({"podAntiAffinity": own}) == {"podAntiAffinity": own}
    off = render(set_values=["operator.replicas=2", "operator.spreadReplicas=false",
                             "operator.podDisruptionBudget.enabled=false"])  # fmt: skip
    assert not by_kind(off, "PodDisruptionBudget")
    assert "affinity" not in named(off, "Deployment", "hulk-operator")["spec"]["template"]["spec"]
    pct = render(
        set_values=["operator.replicas=3", "operator.podDisruptionBudget.minAvailable=50%"]
    )
    assert named(pct, "PodDisruptionBudget", "hulk-operator")["spec"]["minAvailable"] == "50%"
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "--set", "operator.replicas=2",
           "--set", "operator.podDisruptionBudget.minAvailable=2"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "operator.podDisruptionBudget.minAvailable (2) must be below operator.replicas (2)" in (
        proc.stderr
    )


def test_a_numeric_image_tag_takes_set_string(render: Render, chart_tools: dict[str, str]) -> None:
    """What values.yaml and the chart README say of a tag of digits only."""
    cmd = [chart_tools["HELM"], "template", "hulk", str(CHART), "--set", "operator.image.tag=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (
        proc.returncode != 0 and "at '/operator/image/tag': got number, want string" in proc.stderr
    )
    assert "at '/operator/image/tag': got number, want string" in (CHART / "README.md").read_text()
    with tempfile.TemporaryDirectory() as d:
        # (the render fixture passes --set only: the same string from a values file)
        path = Path(d) / "v.yaml"
        path.write_text('operator:\n  image:\n    tag: "2"\n')
        assert container(render(values=[path]), "Deployment", "hulk-operator")["image"] == "hulk:2"
    cmd = [
        chart_tools["HELM"],
        "template",
        "hulk",
        str(CHART),
        "--set-string",
        "operator.image.tag=2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and 'image: "hulk:2"' in proc.stdout


def notes(helm: str, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template leaves it out: rendered here
    through `tpl` in a copy of the chart)."""
    import shutil

    with tempfile.TemporaryDirectory() as d:
        chart = Path(d) / "hulk"
        shutil.copytree(CHART, chart)
        shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
        (chart / "templates" / "notes-out.yaml").write_text(
            'notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}\n'
        )
        cmd = [helm, "template", "hulk", str(chart), "-n", "hulk-system",
               "--show-only", "templates/notes-out.yaml", *args]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return str(yaml.safe_load(proc.stdout)["notes"])


def test_notes_create_the_jobs_configmap_and_say_where_metrics_go(
    chart_tools: dict[str, str],
) -> None:
    """Before, they said `kubectl apply -f examples/paper-jobs.yaml` without the ConfigMap
    those jobs mount (a user trial)."""
    jobs = (ROOT / "examples" / "paper-jobs.yaml").read_text()
    assert "configMap: {name: hulk-train-stage}" in jobs
    text = notes(chart_tools["HELM"])
    create = text.index(
        "kubectl create configmap hulk-train-stage --from-file=examples/train_stage.py"
    )
    assert create < text.index("kubectl apply -f examples/paper-jobs.yaml")
    assert "no ServiceMonitor" in text
    board = dashboard()
    assert f'"{board["title"]}" (/d/{board["uid"]})' in " ".join(text.split())
    text = notes(chart_tools["HELM"], "-f", str(CHART / "ci" / "namespaced-values.yaml"))
    assert "kubectl create configmap hulk-train-stage -n team-a" in text
    assert "kubectl apply -n team-a -f examples/paper-jobs.yaml" in text
    text = " ".join(notes(chart_tools["HELM"], "-f", str(EXAMPLE_VALUES)).split())
    assert "ServiceMonitor(s) hulk-operator, hulk-probe in namespace hulk-system" in text
    assert "release=kps" in text
    assert 'up{job="hulk-operator-metrics"} and up{job="hulk-probe-metrics"}' in text
    assert "ConfigMap hulk-dashboard in namespace monitoring" in text
