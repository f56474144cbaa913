"""examples/: the kind config (labels a kubelet may set itself), the label script, and the
commands of the kind try-out and of the chart README that must agree with the chart."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
Render = Callable[..., list[dict[str, Any]]]

# k8s.io/kubelet/pkg/apis/well_known_labels.go (v0.35): what a kubelet may set on its Node.
KUBELET_LABELS = {
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
}
KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def kubelet_may_set(key: str) -> bool:
    """IsKubeletLabel, plus NodeRestriction's ban on node-restriction.kubernetes.io/."""
    namespace = key.split("/", 1)[0] if "/" in key else ""
    if namespace == "node-restriction.kubernetes.io" or namespace.endswith(
        ".node-restriction.kubernetes.io"
    ):
        return False
    reserved = any(
        namespace == ns or namespace.endswith("." + ns) for ns in ("kubernetes.io", "k8s.io")
    )
    if not reserved or key in KUBELET_LABELS:
        return True
    return any(namespace == ns or namespace.endswith("." + ns) for ns in KUBELET_NAMESPACES)


def test_kubelet_label_rules() -> None:
    assert kubelet_may_set("topology.kubernetes.io/region")
    assert kubelet_may_set("nvidia.com/gpu.product")
    assert not kubelet_may_set("node-role.kubernetes.io/worker")
    assert not kubelet_may_set("topology.kubernetes.io/rack")
    assert not kubelet_may_set("node-restriction.kubernetes.io/pool")


def test_kind_config_has_three_regions_of_labelled_gpu_workers() -> None:
    cfg = yaml.safe_load((EXAMPLES / "kind-multi-region.yaml").read_text())
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    workers = [n for n in cfg["nodes"] if n["role"] == "worker"]
    regions = {w["labels"]["topology.kubernetes.io/region"] for w in workers}
    assert len(regions) == 3
    for node in cfg["nodes"]:
        for key, value in node.get("labels", {}).items():
            assert kubelet_may_set(key), f"the kubelet refuses to start with label {key}"
            assert isinstance(value, str), f"{key}: label values must be strings"
    for w in workers:
        labels = w["labels"]
        assert labels["topology.kubernetes.io/zone"].startswith(
            labels["topology.kubernetes.io/region"]
        )
        for gfd in ("gpu.product", "gpu.count", "gpu.memory", "gpu.compute.major"):
            assert f"nvidia.com/{gfd}" in labels


def test_label_script_is_valid_bash() -> None:
    script = EXAMPLES / "kind-label-nodes.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--fake-gpus" in out.stdout


# ---- the kind try-out and the way to Grafana: commands that agree with the chart ----------

CHART_README = ROOT / "charts" / "hulk" / "README.md"


def commands(text: str, prefix: str = "") -> list[str]:
    """The shell commands of ``text``: lines after ``prefix`` (a comment's "#   "), joined
    where a line ends in a backslash, comments after the command dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if not raw.startswith(prefix):
            continue
        line = raw[len(prefix) :].strip()
        if not line or (line.startswith("#") and not pending):
            continue
        line = line.split("  #", 1)[0].strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def kind_header() -> list[str]:
    text = (EXAMPLES / "kind-multi-region.yaml").read_text()
    header = text.split("\nkind: Cluster", 1)[0]
    return [c for c in commands(header, "#   ") if c.split()[0] in COMMANDS]


COMMANDS = {"kind", "docker", "kubectl", "helm", "examples/kind-label-nodes.sh"}


def helm_args(cmd: str) -> tuple[list[str], str]:
    """The values files (-f, in order) and the namespace (-n) of a helm command."""
    words = cmd.split()
    files = [words[i + 1] for i, w in enumerate(words) if w == "-f"]
    ns = [words[i + 1] for i, w in enumerate(words) if w == "-n"]
    return files, ns[0] if ns else ""


def images(objs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Each workload's container image and pull policy."""
    out = {}
    for o in objs:
        if o["kind"] in ("Deployment", "DaemonSet"):
            (c,) = o["spec"]["template"]["spec"]["containers"]
            out[o["metadata"]["name"]] = (c["image"], c.get("imagePullPolicy", ""))
    return out


def built(cmds: list[str]) -> dict[str, str]:
    """target -> image of each `docker build --target T -t IMAGE .`."""
    out = {}
    for c in cmds:
        words = c.split()
        if words[:2] == ["docker", "build"]:
            out[words[words.index("--target") + 1]] = words[words.index("-t") + 1]
    return out


def test_the_kind_header_builds_loads_and_installs_the_images_its_values_pull(
    render: Render,
) -> None:
    """Before, it installed examples/values-three-regions.yaml on kind: CRDs the cluster
    lacks, a namespace it lacks, a node label no node has, images never loaded (a trial)."""
    cmds = kind_header()
    images_built = built(cmds)
    assert set(images_built) == {"operator", "probe"}
    (load,) = [c for c in cmds if c.startswith("kind load docker-image")]
    words = load.split()
    assert (
        words[words.index("--name") + 1]
        == yaml.safe_load((EXAMPLES / "kind-multi-region.yaml").read_text())["name"]
    )
    assert set(images_built.values()) <= set(words[3:])
    (install,) = [c for c in cmds if c.startswith("helm install hulk ")]
    files, ns = helm_args(install)
    assert files == ["examples/values-kind.yaml"]
    assert f"kubectl create namespace {ns}" in cmds
    objs = render(values=[ROOT / f for f in files], namespace=ns)
    assert images(objs) == {
        "hulk-operator": (images_built["operator"], "Never"),
        "hulk-probe": (images_built["probe"], "Never"),
    }
    kinds = {o["kind"] for o in objs}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}  # no Prometheus Operator CRDs
    for o in objs:  # no namespace but the release's, which the header creates
        assert o["metadata"].get("namespace", ns) == ns, (o["kind"], o["metadata"])
    # every node selector is met by a worker of the kind config (or the label script's)
    cfg = yaml.safe_load((EXAMPLES / "kind-multi-region.yaml").read_text())
    workers = [n["labels"] for n in cfg["nodes"] if n["role"] == "worker"]
    for o in objs:
        if o["kind"] in ("Deployment", "DaemonSet"):
            selector = o["spec"]["template"]["spec"].get("nodeSelector") or {}
            assert any(selector.items() <= w.items() for w in workers), (o["kind"], selector)
    # the example jobs' ConfigMap, before the jobs
    create = [i for i, c in enumerate(cmds) if "create configmap hulk-train-stage" in c]
    apply = [i for i, c in enumerate(cmds) if "apply -f examples/paper-jobs.yaml" in c]
    assert create and apply and create[0] < apply[0]
    for c in cmds:  # every file named exists
        for f in helm_args(c)[0]:
            assert (ROOT / f).is_file(), f


def test_the_kind_header_turns_monitoring_on_for_its_kube_prometheus_stack(
    render: Render,
) -> None:
    cmds = kind_header()
    (kps,) = [c for c in cmds if "prometheus-community/kube-prometheus-stack" in c]
    release, (_, kps_ns) = kps.split()[2], helm_args(kps)
    (upgrade,) = [c for c in cmds if c.startswith("helm upgrade hulk ")]
    files, ns = helm_args(upgrade)
    assert files == ["examples/values-kind.yaml", "examples/values-monitoring.yaml"]
    objs = render(values=[ROOT / f for f in files], namespace=ns)
    monitors = [o for o in objs if o["kind"] in ("ServiceMonitor", "PrometheusRule")]
    assert len(monitors) == 3
    for m in monitors:  # kube-prometheus-stack selects release=<its release name>
        assert m["metadata"]["labels"]["release"] == release
    (board,) = [o for o in objs if o["metadata"]["name"] == "hulk-dashboard"]
    assert board["metadata"]["namespace"] == kps_ns
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"  # its sidecar's default


def test_the_chart_readme_builds_the_images_the_example_values_pull(render: Render) -> None:
    """Before, it built registry.example.com/hulk while the example values pulled
    registry.example.com/ml-platform/hulk (a trial)."""
    text = CHART_README.read_text()
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    cmds = commands(install.split("```sh", 1)[1].split("```", 1)[0])
    images_built = built(cmds)
    pushed = {c.split()[2] for c in cmds if c.startswith("docker push ")}
    assert pushed == set(images_built.values())
    (helm,) = [c for c in cmds if c.startswith("helm install ")]
    sets = dict(w.split("=", 1) for w in helm.split() if w.count("=") == 1 and "image" in w)
    objs = render(set_values=[f"{k}={v}" for k, v in sets.items()])
    example = render(values=[ROOT / "examples" / "values-three-regions.yaml"])
    for target, workload in (("operator", "hulk-operator"), ("probe", "hulk-probe")):
        assert images(objs)[workload][0] == images_built[target]
        assert images(example)[workload][0] == images_built[target]


def test_the_way_to_grafana_names_what_the_chart_renders(render: Render) -> None:
    """The chart README's "Prometheus and Grafana": its release and namespace are those
    examples/values-monitoring.yaml selects, its `up` queries name the metrics Services,
    its dashboard is the chart's (uid, title)."""
    text = CHART_README.read_text()
    guide = text.split("## Prometheus and Grafana", 1)[1].split("\n## ", 1)[0]
    cmds = commands(guide, "   ")
    (kps,) = [c for c in cmds if "prometheus-community/kube-prometheus-stack" in c]
    release, (_, kps_ns) = kps.split()[2], helm_args(kps)
    (hulk,) = [c for c in cmds if c.startswith("helm upgrade --install hulk ")]
    files, ns = helm_args(hulk)
    objs = render(values=[ROOT / f for f in files], namespace=ns)
    for o in objs:
        if o["kind"] in ("ServiceMonitor", "PrometheusRule"):
            assert o["metadata"]["labels"]["release"] == release
    services = {o["metadata"]["name"] for o in objs if o["kind"] == "Service"}
    queried = set(re.findall(r'up\{job="([^"]+)"\}', guide))
    assert queried == {"hulk-operator-metrics", "hulk-probe-metrics"} and queried <= services
    monitors = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceMonitor"}
    for m in monitors:  # prometheus-operator's scrape pool: serviceMonitor/NS/NAME/ENDPOINT
        assert f"serviceMonitor/{ns}/{m}/0" in guide
    assert all(f"{kps_ns} " in c or f"-n {kps_ns}" in c for c in cmds if "kps-grafana" in c)
    assert f"svc/{release}-grafana" in guide and f"secret {release}-grafana" in guide
    (board,) = [o for o in objs if o["metadata"]["name"] == "hulk-dashboard"]
    assert board["metadata"]["namespace"] == kps_ns
    dashboard = json.loads(board["data"]["hulk.json"])
    assert f"/d/{dashboard['uid']}" in guide and f'"{dashboard["title"]}"' in guide
