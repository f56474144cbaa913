"""The probe's NodeLatency measurements on the sandbox: ``hulk plan --kubeconfig`` and the
operator plan with them, fall back to region estimates where they are missing or stale
(and say so), and give a pair freshly reported unreachable no latency at all."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hjob_helpers import (
    ROOT,
    Kube,
    condition,
    hulk,
    manifest,
    paper_manifests,
    plan_nodes,
    token_kubeconfig,
    wait,
)
from kubernetes import client

from hulk_operator import GPU, GROUP, PLURAL, VERSION
from hulk_operator.latencies import Latencies, build_cluster
from hulk_operator.preview import cluster_from_kubeconfig
from hulk_planner.api import plan
from hulk_planner.cli import BASELINES
from hulk_planner.io import job_from_dict
from hulk_planner.topology import Network
from hulk_probe.replay import forget_latencies, publish_latencies

pytestmark = pytest.mark.sandbox
TOKYO = [f"tokyo-{i}" for i in range(25, 30)]
Publish = Callable[..., None]


@pytest.fixture
def latencies(sandbox: Any, crds: None) -> Iterator[Publish]:
    """``latencies(rows, at=None)`` publishes NodeLatency objects; they go after the test."""
    published: set[str] = set()
    with sandbox.api_client() as api:

        def publish(rows: dict[str, dict[str, float | None]], at: datetime | None = None) -> None:
            published.update(rows)
            publish_latencies(api, rows, at)

        try:
            yield publish
        finally:
            forget_latencies(api, published)


def test_the_preview_cluster_uses_measured_latencies(sandbox: Any, latencies: Publish) -> None:
    latencies({"tokyo-25": {"tokyo-26": 40.0}, "tokyo-26": {"tokyo-25": 44.0, "tokyo-27": None}})
    latencies({"tokyo-28": {"tokyo-29": 7.0}}, at=datetime.now(UTC) - timedelta(hours=1))
    cluster = cluster_from_kubeconfig(sandbox.kubeconfig)
    links = {lk.key: lk.latency_ms for lk in cluster.links}
    assert links[frozenset(("tokyo-25", "tokyo-26"))] == 42.0  # the mean of both directions
    net = Network(cluster)
    assert net.latency("tokyo-25", "tokyo-26") == 42.0
    # stale: estimated, by the median of Tokyo's measured links (not the 1 ms flag)
    assert net.latency("tokyo-28", "tokyo-29") == 42.0
    assert net.latency("tokyo-25", "beijing-0") == 100.0  # never measured: cross-region
    # Reported unreachable: no link and no estimate (the two cannot communicate).
    assert frozenset(("tokyo-26", "tokyo-27")) not in links
    assert cluster.cut == (("tokyo-26", "tokyo-27"),)  # (cut from Tokyo's region link)
    assert not net.direct[net.index["tokyo-26"], net.index["tokyo-27"]]


def preview_manifest(
    sandbox: Any, kube: Kube, path: Path, body: dict[str, Any], *flags: str
) -> subprocess.CompletedProcess[str]:
    """``hulk plan --kubeconfig --jobs path -o json`` of ``body`` in the test's namespace,
    which must succeed."""
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = kube.ns
    path.write_text(yaml.safe_dump(body))
    out = hulk(
        "plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(path), "-o", "json", *flags
    )
    assert out.returncode == 0, out.stderr
    return out


def test_the_operator_plans_with_measured_latencies(
    sandbox: Any, kube: Kube, operator: Any, latencies: Publish, tmp_path: Path
) -> None:
    far = "tokyo-25"
    latencies({a: {b: 300.0 if far in (a, b) else 0.5 for b in TOKYO if b != a} for a in TOKYO})
    near = manifest("near", allowedRegions=["tokyo"])
    # Without measurements, the planner uses every Tokyo server, the far one included.
    servers = [s for s in cluster_from_kubeconfig(sandbox.kubeconfig).servers if s.name in TOKYO]
    alone = build_cluster(servers, Latencies(), same_region_ms=1.0, cross_region_ms=100.0)
    assert far in plan(alone, [job_from_dict(near)]).jobs[0].nodes
    estimated = manifest("estimated", allowedRegions=["quanzhou"])

    def preview_notes(m: dict[str, Any]) -> list[str]:
        out = preview_manifest(sandbox, kube, tmp_path / f"{m['metadata']['name']}.yaml", m)
        return [line for line in out.stderr.splitlines() if "latency measurement" in line]

    # the preview tells an estimated step time, as the operator's condition does (before,
    # nothing did)
    (note,) = preview_notes(estimated)
    assert note.startswith("hulk plan: note: job estimated: "), note
    # ... with what it used (before, the rule alone: a user trial)
    assert note.endswith("server pair(s) of its plan had no fresh latency measurement; used "
                         "quanzhou 1 ms (the median measured latency between their regions "
                         "where a pair of them was measured, else 1 ms within a region and "
                         "100 ms across regions)"), note  # fmt: skip
    assert preview_notes(near) == []
    kube.apply(near)
    kube.apply(estimated)
    wait("both placed", lambda: all(plan_nodes(kube.job(n)) for n in ("near", "estimated")), 60)
    job = kube.job("near")
    assert far not in plan_nodes(job) and len(plan_nodes(job)) >= 2
    c = condition(job, "LatencyEstimated")
    assert (c["status"], c["reason"]) == ("False", "Measured"), c
    c = condition(kube.job("estimated"), "LatencyEstimated")
    assert (c["status"], c["reason"]) == ("True", "FallbackLatency"), c
    assert "no fresh latency measurement; used quanzhou 1 ms (" in c["message"], c


def test_hulk_plan_previews_pending_jobs_on_the_live_cluster(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    cmd = ["plan", "--kubeconfig", sandbox.kubeconfig]
    cmd += ["--namespace", kube.ns, "-o", "json"]
    out = hulk(*cmd)
    # no pending job is no error (before, exit code 2, that of bad input; a user trial):
    # it says so, and a script reading the plan gets an empty one
    assert out.returncode == 0 and out.stderr.strip() == (
        f"hulk plan: nothing to plan: namespace '{kube.ns}' has no pending HulkTrainingJob "
        "(to preview one, apply it or give its manifest with --jobs FILE)"
    )
    assert json.loads(out.stdout)["jobs"] == []
    # a namespace that does not exist is bad input, not an empty one (a user trial)
    typo = [*cmd[:-3], "no-such-namespace", "-o", "json"]
    out = hulk(*typo)
    assert out.returncode == 2 and out.stderr.strip() == (
        "hulk plan: error: --namespace: namespace 'no-such-namespace' does not exist (check "
        "its name: kubectl get namespaces)"
    ), out.stderr
    for m in paper_manifests():
        kube.apply(m)
    asleep = copy.deepcopy(paper_manifests()[3])
    asleep["metadata"]["name"] = "asleep"
    asleep["spec"]["suspend"] = True
    kube.apply(asleep)  # suspended: the operator would not plan it, nor does the preview
    out = hulk(*cmd)
    assert out.returncode == 0, out.stderr
    preview = json.loads(out.stdout)
    names = {m["metadata"]["name"] for m in paper_manifests()}
    assert {j["name"] for j in preview["jobs"]} == names
    used = [n for j in preview["jobs"] for s in j["stages"] for n in s["nodes"]]
    nodes: Any = kube.core.list_node()
    live = {n.metadata.name for n in nodes.items}
    assert set(used) <= live and len(used) == len(set(used))
    assert all(j["predictedIterationSeconds"] > 0 for j in preview["jobs"])
    # --moves gives the same preview at every run (before, refused with --kubeconfig)
    runs = [hulk(*cmd, "--moves", "300", "--seed", "5") for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert {j["name"] for j in json.loads(runs[0].stdout)["jobs"]} == names
    # the table says why a baseline leaves a job unplaced, as on a topology file (before,
    # "not placed" alone: status.baselines holds figures only; a user trial)
    table = [*cmd[:-2], "--time-budget", "0.5"]
    out = hulk(*table)
    assert out.returncode == 0, out.stderr
    assert "baseline-a does not place opt-175b: no server holds the whole model: " in out.stdout
    # how long the operator's round took to plan them, its baselines included (before, the
    # preview alone did not say: a review)
    took = [ln for ln in out.stdout.splitlines() if ln.startswith("planned in ")]
    assert took and took[0].endswith(" s (the baselines below included)"), out.stdout
    assert float(took[0].split()[2]) > 0, took
    # A preview writes nothing: no pod, no status.
    assert not kube.pods() and not any(j.get("status") for j in kube.jobs())
    # given as a manifest, a suspended job is previewed as if resumed
    path = tmp_path / "asleep.yaml"
    path.write_text(json.dumps(asleep))
    out = hulk(*cmd, "--jobs", str(path))
    assert out.returncode == 0, out.stderr
    assert [j["name"] for j in json.loads(out.stdout)["jobs"]] == ["asleep"]
    # a manifest's namespace as kubectl apply takes it (before, a namespace that does not
    # exist, or a mismatch with -n, was previewed as placed; and the namespace assumed,
    # whose quotas decide, went unsaid: a user trial)
    loose = copy.deepcopy(asleep)
    loose["metadata"] = {"name": "loose"}
    del loose["spec"]["suspend"]
    path.write_text(json.dumps(loose))
    typo = [*cmd[:-4], "--namespace", "no-such-namespace", "--jobs", str(path)]
    out = hulk(*typo)
    assert out.returncode == 2 and "namespace 'no-such-namespace' does not exist" in out.stderr
    loose["metadata"]["namespace"] = "elsewhere"
    path.write_text(json.dumps(loose))
    out = hulk(*cmd, "--jobs", str(path))
    assert out.returncode == 2 and out.stderr.strip() == (
        f"hulk plan: error: job loose: metadata.namespace: is 'elsewhere', and -n says "
        f"'{kube.ns}' (give one of them; kubectl apply refuses the mismatch too)"
    ), out.stderr
    del loose["metadata"]["namespace"]
    path.write_text(json.dumps(loose))
    bare = [*cmd[:-4], "-o", "json", "--jobs", str(path)]
    out = hulk(*bare)
    assert out.returncode == 0, out.stderr
    assert "1 job(s) name no namespace: previewed in namespace 'default'" in out.stderr


def test_hulk_plan_previews_only_the_servers_the_operator_would_offer(
    sandbox: Any, kube: Kube
) -> None:
    nodes: Any = kube.core.list_node()
    gpus = {n.metadata.name: int(n.status.allocatable["nvidia.com/gpu"]) for n in nodes.items}
    paris = sorted(n for n in gpus if n.startswith("paris") and gpus[n] >= 2)
    taken, part = paris[0], paris[1]
    for name, node, n in (("notebook", taken, gpus[taken]), ("small", part, 1)):
        kube.core.create_namespaced_pod(
            kube.ns,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {GPU: str(n)}}}
                    ],
                },
            },
        )
    cmd = ["plan", "--kubeconfig", sandbox.kubeconfig]
    cmd += ["--jobs", str(ROOT / "examples" / "paper-jobs.yaml"), "-o", "json"]
    try:
        out = hulk(*cmd)
        offered = {
            s.name: s.gpus
            for s in cluster_from_kubeconfig(sandbox.kubeconfig, free_only=True).servers
        }
    finally:
        for name in ("notebook", "small"):
            kube.core.delete_namespaced_pod(name, kube.ns, grace_period_seconds=0)
    assert out.returncode == 0, out.stderr
    used = {n for j in json.loads(out.stdout)["jobs"] for s in j["stages"] for n in s["nodes"]}
    assert taken not in used and taken not in offered
    assert offered[part] == gpus[part] - 1
    assert all(g == gpus[n] for n, g in offered.items() if n != part)


def test_hulk_plan_previews_the_jobs_constraints_as_the_operator_plans_them(
    sandbox: Any, kube: Kube
) -> None:
    paris = manifest("in-paris", model={"preset": "gpt2-xl"}, allowedRegions=["paris"])
    berlin = manifest("in-berlin", model={"preset": "gpt2-xl"})
    berlin["spec"]["template"]["spec"]["nodeSelector"] = {"topology.kubernetes.io/region": "berlin"}
    mars = manifest("on-mars", allowedRegions=["mars"])
    for m in (paris, berlin, mars):
        kube.apply(m)
    cmd = ["plan", "--kubeconfig", sandbox.kubeconfig]
    out = hulk(*cmd, "--namespace", kube.ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    preview = json.loads(out.stdout)
    nodes = {j["name"]: [n for s in j["stages"] for n in s["nodes"]] for j in preview["jobs"]}
    assert set(nodes) == {"in-paris", "in-berlin"}
    assert nodes["in-paris"] and all(n.startswith("paris-") for n in nodes["in-paris"])
    assert nodes["in-berlin"] and all(n.startswith("berlin-") for n in nodes["in-berlin"])
    (unplaced,) = preview["unplaced"]
    assert unplaced["name"] == "on-mars"
    assert unplaced["reason"].startswith("spec.allowedRegions ['mars'] names no region")
    table = hulk(*cmd, "--namespace", kube.ns, "--no-compare")
    assert table.returncode == 0, table.stderr
    assert "on-mars: NOT PLACED: spec.allowedRegions ['mars']" in table.stdout
    # what the cluster shown is (before, "cluster: kubernetes (N servers ...)" read as the
    # whole cluster: a user trial)
    assert "    cluster: kubernetes: servers free or in these jobs' plans (" in table.stdout
    # the baselines too are planned on the servers each job may use, as the operator plans
    # them for status.baselines (they used every server: GPipe over all 47 looked 10x
    # faster than hulk's plan inside paris)
    compared = hulk(*cmd, "--namespace", kube.ns)
    assert compared.returncode == 0, compared.stderr
    rows = {line.split()[0]: line for line in compared.stdout.splitlines() if line.strip()}
    full = cluster_from_kubeconfig(sandbox.kubeconfig, free_only=True)
    in_paris = full.without(s.name for s in full.servers if s.region != "paris")
    job = job_from_dict(paris)
    for base, shown in zip(BASELINES, re.findall(r"(\S+)s \(", rows["in-paris"]), strict=True):
        expected = plan(in_paris, [job], base).job("in-paris")
        assert expected is not None
        t = expected.predicted_iteration_seconds
        assert float(shown.replace(",", "")) == pytest.approx(t, rel=0.01), (base, shown, t)
    assert rows["on-mars"].split()[1:] == ["-"] + ["not", "placed"] * 3, rows["on-mars"]


@contextmanager
def service_account_kubeconfig(
    sandbox: Any, kube: Kube, path: Path, who: str, rules: list[dict[str, Any]]
) -> Iterator[Path]:
    """A kubeconfig of the sandbox at ``path`` that authenticates as ServiceAccount
    ``who`` of the test's namespace (a token from the TokenRequest API), bound to a
    ClusterRole of ``rules`` alone; the ClusterRole and its binding go after."""
    rbac = client.RbacAuthorizationV1Api(kube.api)
    role = f"{who}-{kube.ns}"
    subject = [{"kind": "ServiceAccount", "name": who, "namespace": kube.ns}]
    token_kubeconfig(sandbox, kube, who, path)
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
    try:
        rbac.create_cluster_role_binding({
            "metadata": {"name": role}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
        })  # fmt: skip
        yield path
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(role)
            except client.ApiException:
                pass


def test_hulk_plan_previews_within_the_namespaces_quotas_and_limitranges(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    """Before, the preview ignored them: it showed plans the operator would not make."""
    quota = {"metadata": {"name": "two-pods"}, "spec": {"hard": {"pods": "2"}}}
    kube.core.create_namespaced_resource_quota(kube.ns, quota)
    kube.apply(manifest("pods-quota", model={"preset": "t5-11b"}))  # 5 stages without it
    cmd = ["plan", "--kubeconfig", sandbox.kubeconfig]
    cmd += ["--namespace", kube.ns, "-o", "json"]

    def preview() -> subprocess.CompletedProcess[str]:
        return hulk(*cmd)

    try:
        out = preview()
        assert out.returncode == 0, out.stderr
        (job,) = json.loads(out.stdout)["jobs"]
        assert 1 <= len([n for s in job["stages"] for n in s["nodes"]]) <= 2, job
        assert (
            f"hulk plan: note: job pods-quota: within namespace {kube.ns}'s ResourceQuota "
            "two-pods (pods): "
        ) in out.stderr, out.stderr
        limits = {
            "metadata": {"name": "no-gpus"},
            "spec": {"limits": [{"type": "Container", "max": {GPU: "0"}}]},
        }
        kube.core.create_namespaced_limit_range(kube.ns, limits)
        try:
            out = preview()
            assert out.returncode == 3 and out.stderr.startswith(
                f"hulk plan: no job placed: pods-quota: namespace {kube.ns}'s LimitRange no-gpus "
                f"allows no {GPU}"
            ), out
            # the plan is still written, the job under unplaced with why (before: nothing)
            written = json.loads(out.stdout)
            assert written["jobs"] == [], written
            (unplaced,) = written["unplaced"]
            assert unplaced["name"] == "pods-quota" and "no-gpus" in unplaced["reason"], written
        finally:
            kube.core.delete_namespaced_limit_range("no-gpus", kube.ns)
        floor = {  # more GPUs per pod than any server has
            "metadata": {"name": "floor"},
            "spec": {"limits": [{"type": "Container", "min": {GPU: "17"}}]},
        }
        kube.core.create_namespaced_limit_range(kube.ns, floor)
        try:
            out = preview()
            assert out.returncode == 3 and "LimitRange floor asks at least" in out.stderr, out
        finally:
            kube.core.delete_namespaced_limit_range("floor", kube.ns)
        bounds = {
            "metadata": {"name": "pod-memory"},
            "spec": {"limits": [{"type": "Pod", "max": {"memory": "1Gi"}}]},
        }
        kube.core.create_namespaced_limit_range(kube.ns, bounds)
        try:
            out = preview()
            assert out.returncode == 3 and out.stderr.startswith(
                f"hulk plan: no job placed: pods-quota: namespace {kube.ns}'s LimitRange "
                "pod-memory (Pod max): the pod (its containers added up) sets no memory limit"
            ), out
        finally:
            kube.core.delete_namespaced_limit_range("pod-memory", kube.ns)
        # a quota scoped to the cluster's default PriorityClass counts the job's pods (its
        # template names none)
        sched = client.SchedulingV1Api(kube.api)
        cls = f"default-{kube.ns}"
        sched.create_priority_class({"metadata": {"name": cls}, "value": 10, "globalDefault": True})
        match = [{"scopeName": "PriorityClass", "operator": "In", "values": [cls]}]
        spec = {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": match}}
        scoped = {"metadata": {"name": "one-default"}, "spec": spec}
        kube.core.create_namespaced_resource_quota(kube.ns, scoped)
        try:
            out = preview()
            assert out.returncode == 0, out.stderr
            (job,) = json.loads(out.stdout)["jobs"]
            assert len([n for s in job["stages"] for n in s["nodes"]]) == 1, job
            assert "one-default" in out.stderr, out.stderr
            # a kubeconfig that may read all the preview reads but the PriorityClasses (a
            # tenant's: the API server answers 403) is told the preview may differ (before,
            # the quota was silently read as not counting it)
            from hulk_operator import preview as previews
            from hulk_planner.errors import InvalidRequest

            said = (
                "cannot list PriorityClasses with this kubeconfig: the quotas of "
                f"namespace(s) {kube.ns} scoped by PriorityClass"
            )

            def notes(path: str) -> tuple[list[str]] | None:
                try:
                    got = previews.preview_plan(path, namespace=kube.ns, plan_fn=plan)
                except InvalidRequest:  # (403: the binding not in force yet)
                    return None
                return (got.notes,)

            admin = notes(sandbox.kubeconfig)
            assert admin is not None and not any(n.startswith(said) for n in admin[0]), admin
            reads = [
                {"apiGroups": [""], "verbs": ["list"],
                 "resources": ["nodes", "pods", "services", "resourcequotas", "limitranges"]},
                {"apiGroups": [GROUP], "resources": [PLURAL, "nodelatencies"], "verbs": ["list"]},
            ]  # fmt: skip
            with service_account_kubeconfig(
                sandbox, kube, tmp_path / "no-classes", "no-classes", reads
            ) as path:
                with previews.kube.make_client(str(path)) as api:  # (the API server's 403)
                    with pytest.raises(client.ApiException) as refused:
                        client.SchedulingV1Api(api).list_priority_class()
                assert refused.value.status == 403
                (told,) = wait("the rights in force", lambda: notes(str(path)), 30)
            assert any(n.startswith(said) for n in told), told
        finally:
            kube.core.delete_namespaced_resource_quota("one-default", kube.ns)
            sched.delete_priority_class(cls)
        # a quota on Services: the job has none yet, and none is left
        no_svc = {"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}}
        kube.core.create_namespaced_resource_quota(kube.ns, no_svc)
        try:
            out = preview()
            assert out.returncode == 3, out
            (unplaced,) = json.loads(out.stdout)["unplaced"]
            assert unplaced["reason"].startswith(
                f"namespace {kube.ns}'s ResourceQuota no-services leaves 0 Service(s) (services)"
            ), unplaced
        finally:
            kube.core.delete_namespaced_resource_quota("no-services", kube.ns)
        kube.core.patch_namespaced_resource_quota(
            "two-pods", kube.ns, {"spec": {"hard": {"pods": "0"}}}
        )
        out = preview()
        assert out.returncode == 3, out
        (unplaced,) = json.loads(out.stdout)["unplaced"]
        assert unplaced["reason"].startswith(
            f"namespace {kube.ns}'s ResourceQuota two-pods leaves 0 pod(s) (pods); the job "
            "needs at least 1 pod(s) (pods): "
        ), unplaced
        assert unplaced["reason"].endswith(
            ": raise the quota, or free what the namespace's other pods hold"
        ), unplaced
        # a job the operator holds back after its pods were refused says so (a user trial:
        # the preview showed it placed, with no word of the pause)
        said = "the API server refuses the stage pods: ...; planned again in 120 s"
        status = {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "Planned",
                        "status": "False",
                        "reason": "PodsForbidden",
                        "message": said,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        }
        kube.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, kube.ns, PLURAL, "pods-quota", status
        )
        out = preview()
        assert (
            f"hulk plan: note: job pods-quota: the operator does not plan it now: {said}"
            in out.stderr
        ), out.stderr
    finally:
        kube.core.delete_namespaced_resource_quota("two-pods", kube.ns)


def test_the_preview_is_shown_against_every_server_a_pending_job_may_get(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    nodes: Any = kube.core.list_node()
    cpus = {n.metadata.name: int(n.status.allocatable["cpu"]) for n in nodes.items}
    most = max(cpus.values())
    hungry = manifest("hungry", model={"preset": "gpt2-xl"})  # fits the largest nodes only
    hungry["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": str(most)}
    }
    calm = manifest("calm", model={"preset": "gpt2-xl"})
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump_all([hungry, calm]))
    cmd = ["plan", "--kubeconfig", sandbox.kubeconfig]
    out = hulk(*cmd, "--jobs", str(jobs), "--no-compare")
    assert out.returncode == 0, out.stderr
    every = cluster_from_kubeconfig(sandbox.kubeconfig, free_only=True)
    assert len(every.servers) > sum(c == most for c in cpus.values())
    assert f"({len(every.servers)} servers, {len(every.regions)} regions)" in out.stdout


def test_hulk_plan_says_in_one_line_why_the_api_server_cannot_be_read(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    """Unreachable, unauthenticated (401) and unauthorised (403), against the real API
    server: one line each, naming what to change, never a traceback."""
    admin = yaml.safe_load(Path(sandbox.kubeconfig).read_text())

    def kubeconfig(name: str, user: dict[str, Any], server: str | None = None) -> Path:
        doc = json.loads(json.dumps(admin))
        doc["users"][0]["user"] = user
        if server:
            doc["clusters"][0]["cluster"]["server"] = server
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc))
        return path

    kube.core.create_namespaced_service_account(kube.ns, {"metadata": {"name": "nobody"}})
    token = kube.core.create_namespaced_service_account_token(
        "nobody", kube.ns, {"spec": {"expirationSeconds": 600}}
    ).status.token
    cases = {
        "down": (
            kubeconfig("down", admin["users"][0]["user"], "https://127.0.0.1:1"),
            "cannot reach the API server at https://127.0.0.1:1 (Failed to establish a new "
            "connection: [Errno 111] Connection refused)",
        ),
        "bogus": (kubeconfig("bogus", {"token": "not-a-token"}), "the API server answered 401"),
        "nobody": (
            kubeconfig("nobody", {"token": token}),
            f'the API server answered 403: nodes is forbidden: User "system:serviceaccount:'
            f'{kube.ns}:nobody" cannot list resource "nodes"',
        ),
    }
    for name, (path, said) in cases.items():
        out = hulk("plan", "--kubeconfig", str(path))
        assert out.returncode == 2 and "Traceback" not in out.stderr, (name, out.stderr)
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith(f"hulk plan: error: --kubeconfig: {said}"), (name, line)
    assert line.endswith("(the chart's operator ClusterRole))")  # the last case, 403


def test_a_tenants_kubeconfig_previews_its_namespace_and_says_what_it_cannot_see(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    """A tenant allowed to list the nodes, the latencies and its own namespace's objects,
    not every namespace's: the preview reads its namespace alone and says so. Before, the
    403 on listing every namespace's objects stopped it (the note of an earlier stop)."""
    rbac = client.RbacAuthorizationV1Api(kube.api)
    ns, who = kube.ns, "tenant"
    cluster_role = f"hulk-preview-{ns}"
    tenant = token_kubeconfig(sandbox, kube, who, tmp_path / "tenant", ns)
    subject = [{"kind": "ServiceAccount", "name": who, "namespace": ns}]
    rbac.create_namespaced_role(ns, {"metadata": {"name": who}, "rules": [
        {"apiGroups": [""], "resources": ["pods", "services", "resourcequotas", "limitranges"],
         "verbs": ["get", "list"]},
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list"]},
    ]})  # fmt: skip
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": who}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": who},
    })  # fmt: skip
    rbac.create_cluster_role({"metadata": {"name": cluster_role}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
        {"apiGroups": [GROUP], "resources": ["nodelatencies"], "verbs": ["list"]},
    ]})  # fmt: skip
    try:
        rbac.create_cluster_role_binding({
            "metadata": {"name": cluster_role}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_role},
        })  # fmt: skip
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(yaml.safe_dump(manifest("mine", model={"preset": "gpt2-xl"})))
        cmd = ["plan", "--kubeconfig", str(tenant), "-n", ns, "--jobs", str(jobs), "--no-compare"]
        out = wait("the tenant's rights in force", lambda: (o := hulk(*cmd)).returncode == 0 and o)
        assert "mine" in out.stdout and "Traceback" not in out.stderr, out.stdout
        assert (
            "hulk plan: note: this kubeconfig cannot list hulktrainingjobs in every namespace: "
            f"read in namespace(s) {ns} alone, so servers that other namespaces' jobs and pods "
            "hold are not seen, and the preview may place on them (the operator does not)"
        ) in out.stderr.splitlines(), out.stderr
        # without -n or a manifest naming its namespace, there is nothing to fall back on
        out = hulk("plan", "--kubeconfig", str(tenant))
        assert out.returncode == 2 and "answered 403" in out.stderr, out.stderr
        assert "or at least in the jobs' own (-n)" in out.stderr
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(cluster_role)
            except client.ApiException:
                pass


def test_a_preview_where_no_server_is_free_for_any_job_says_why(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    huge = manifest("huge", model={"preset": "gpt2-xl"})
    huge["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "9999"}}
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(huge))
    out = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(jobs))
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr  # valid, unplaced
    why = "fits nowhere: the stage pods' requests (cpu 9999) fit on none of the "
    # the preview's notes first: they may say why (before, none was told where no job
    # was placed)
    note, said = out.stderr.splitlines()[:2]
    assert note == (
        "hulk plan: note: 1 job(s) name no namespace: previewed in namespace 'default' (its "
        "ResourceQuotas and LimitRanges); give -n for the one you apply to"
    ), out.stderr
    assert said.startswith(f"hulk plan: no job placed: huge: {why}"), out.stderr
    # the table lists the job as not placed, as beside placed jobs (before: no table at all)
    (line,) = out.stdout.splitlines()
    assert line.startswith(f"huge: NOT PLACED: {why}"), out.stdout


def test_a_preview_warns_of_replaced_variables_only_where_applying_would(
    sandbox: Any, kube: Kube, operator: Any, tmp_path: Path
) -> None:
    """The operator warns (EnvReplaced) when a template's variables that Hulk sets change,
    not at every edit. Before, the preview of a running job's manifest, unchanged, said
    the operator would warn."""
    job = manifest("envy", model={"preset": "bert-large"})
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "RANK", "value": "3"}]
    path = tmp_path / "envy.yaml"
    warn = "hulk plan: note: job envy: the operator would warn (EnvReplaced): container "

    def warned(body: dict[str, Any]) -> list[str]:
        said = preview_manifest(sandbox, kube, path, body).stderr.splitlines()
        return [line for line in said if line.startswith(warn)]

    (told,) = warned(job)  # not applied yet
    assert "sets RANK: Hulk sets these on every stage pod" in told, told
    kube.apply(job)
    wait("Running", lambda: kube.phase("envy") == "Running", 60)
    wait("told", lambda: kube.events("EnvReplaced"), 20)
    assert warned(job) == []  # as applied: the operator says nothing again
    job["spec"]["priority"] = 3
    assert warned(job) == []  # another field
    container["env"].append({"name": "MASTER_PORT", "value": "29400"})
    (told,) = warned(job)  # another variable: told again
    assert "sets MASTER_PORT, RANK" in told and "spec.masterPort" in told, told


def test_a_preview_of_a_running_jobs_manifest_shows_what_applying_it_would_do(
    sandbox: Any, kube: Kube, operator: Any, tmp_path: Path
) -> None:
    """Before: the manifest of a running job, unchanged, was previewed as a fresh plan on
    other servers, where applying it leaves the pods where they run."""
    job = manifest("steady", model={"preset": "gpt2-xl"})
    kube.apply(job)
    wait("Running", lambda: kube.phase("steady") == "Running", 60)
    running = plan_nodes(kube.job("steady"))
    path = tmp_path / "steady.yaml"

    def preview(body: dict[str, Any]) -> tuple[list[str], str]:
        out = preview_manifest(sandbox, kube, path, body)
        (shown,) = json.loads(out.stdout)["jobs"]
        return [n for s in shown["stages"] for n in s["nodes"]], out.stderr

    nodes, said = preview(job)  # as applied
    assert nodes == running, (nodes, running)
    assert said.strip() == (
        "hulk plan: note: job steady: runs; applying this manifest, nothing changed: its plan "
        "stands: shown as its pods run"
    )
    table = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(path))
    assert table.returncode == 0, table.stderr
    # the baselines as the operator compared them when it planned the job (status.baselines)
    then = {
        b["planner"]: b.get("predictedIterationSeconds")
        for b in kube.job("steady")["status"]["baselines"]
    }
    assert set(then) == set(BASELINES) and all(then.values()), then
    (row,) = [r for r in table.stdout.splitlines() if r.startswith("steady ")]
    assert "not placed" not in row and row.count("x)") == len(BASELINES), row
    # another planner asked for: the running plan is shown, and said not to be its (before,
    # the header's "planner: baseline-c" read as the plan's; a user trial)
    other = hulk(
        "plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(path), "--planner", "baseline-c"
    )
    assert other.returncode == 0, other.stderr
    assert (
        "hulk plan: note: job steady: its plan is planner hulk's, made when it was placed; "
        "--planner baseline-c is not used for it"
    ) in other.stderr.splitlines(), other.stderr
    job["spec"]["priority"] = 5  # a bookkeeping edit
    nodes, said = preview(job)
    assert nodes == running and "priority changed: its plan stands" in said, said
    # regrow: no re-plan in itself, but the operator may then grow it (a user trial read
    # "its plan stands" and saw the pods replaced seconds after applying)
    nodes, said = preview({**job, "spec": {**job["spec"], "regrow": {"afterSeconds": 0}}})
    assert nodes == running and "regrow changed: its plan stands" in said, said
    assert "spec.regrow: once it has run 0 s, the operator plans it afresh" in said, said
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "LR", "value": "0.0003"}]
    nodes, said = preview(job)  # asks nothing more of the servers: the plan stands
    assert (
        nodes == running
        and (
            "spec.template changed, and its stage pods ask the same of their servers: its plan "
            "stands, and its stage pods are made again from the new template"
        )
        in said
    ), said
    trainer["resources"] = {"requests": {"cpu": "2"}}
    _, said = preview(job)  # asks more of them: a plan from scratch (its servers free)
    first, *rest = said.strip().splitlines()
    assert first == (
        f"hulk plan: note: job steady: runs on {len(running)} server(s); applying this "
        "manifest plans it again from scratch: its pods are replaced"
    )
    # (a fresh plan, on the fallback latencies: the sandbox runs no probe)
    assert [r for r in rest if "no fresh latency measurement" not in r] == [], rest
    assert not kube.events("Replanned") and plan_nodes(kube.job("steady")) == running


def told_of_a_cut_link(
    kube: Kube, latencies: Publish, job: str
) -> tuple[Any, tuple[str, str], dict[str, dict[str, float | None]], Any]:
    """Places ``job`` in tokyo, every pair measured, then reports the first pair its
    stages send over unreachable and waits for its LinkUnreachable Event. Returns (its plan,
    the pair, the rows measured before, the Event)."""
    from hulk_operator import status as st
    from hulk_planner.cost import communicating_pairs

    near: dict[str, dict[str, float | None]] = {a: {b: 0.5 for b in TOKYO if b != a} for a in TOKYO}
    latencies(near)
    kube.apply(manifest(job, allowedRegions=["tokyo"]))
    wait("placed", lambda: len(plan_nodes(kube.job(job))) >= 2, 60)
    jp = st.job_plan_from_status(job, kube.job(job)["status"])
    assert jp is not None
    a, b = communicating_pairs(jp)[0]
    cut = copy.deepcopy(near)
    cut[a][b] = cut[b][a] = None
    latencies(cut)
    (told,) = wait("told", lambda: kube.events("LinkUnreachable") or None, 40)
    return jp, (a, b), near, told


def test_a_running_job_is_told_when_its_stages_cannot_reach_each_other(
    kube: Kube, operator: Any, latencies: Publish
) -> None:
    """A pair a placed job sends over, reported unreachable: a Warning LinkUnreachable
    naming it, and LinksRestored once measured again; the pods stay (before, nothing told
    of such a partition: a user trial)."""
    jp, (a, b), near, told = told_of_a_cut_link(kube, latencies, "linked")
    assert told.type == "Warning" and f"{a} and {b}" in told.message, told.message
    assert "suspend and resume" in told.message
    assert plan_nodes(kube.job("linked")) == list(jp.nodes)  # not moved
    latencies(near)
    wait("restored", lambda: kube.events("LinksRestored"), 40)
    assert len(kube.events("LinkUnreachable")) == 1  # told once


def test_cut_links_are_not_told_restored_when_their_reports_are_deleted(
    sandbox: Any, kube: Kube, operator: Any, latencies: Publish, caplog: pytest.LogCaptureFixture
) -> None:
    """The NodeLatency objects deleted (the probe uninstalled) while a job is told of cut
    links: the listing is empty, which measures nothing, so nothing is told restored
    (before, LinksRestored said its servers' probes reached each other; a review)."""
    import logging

    jp, _, _, _ = told_of_a_cut_link(kube, latencies, "unprobed")
    with caplog.at_level(logging.INFO, logger="hulk_operator.disruptions"):
        with sandbox.api_client() as api:
            forget_latencies(api, TOKYO)

        def unreported() -> bool:
            return any(
                "no longer report on the cut pairs" in r.getMessage() for r in caplog.records
            )

        wait("the reports gone", unreported, 40)
    time.sleep(2)  # (a few ticks)
    assert not kube.events("LinksRestored")
    assert len(kube.events("LinkUnreachable")) == 1
    assert plan_nodes(kube.job("unprobed")) == list(jp.nodes)


def test_a_partition_in_an_old_report_is_kept_until_measured_again(
    kube: Kube, operator: Any, latencies: Publish
) -> None:
    """A pair last reported unreachable in a report past latency_max_age_s stays apart
    (before, it aged into the 1 ms estimate and a job was planned across it: a trial)."""
    far = "tokyo-25"
    rows: dict[str, dict[str, float | None]] = {
        a: {b: None if far in (a, b) else 0.5 for b in TOKYO if b != a} for a in TOKYO
    }
    latencies(rows, datetime.now(UTC) - timedelta(hours=2))
    kube.apply(manifest("apart", allowedRegions=["tokyo"]))
    wait("placed", lambda: plan_nodes(kube.job("apart")), 60)
    nodes = plan_nodes(kube.job("apart"))
    assert far not in nodes and len(nodes) >= 2, nodes  # (with the estimate: all five)


def test_a_node_not_yet_probed_beside_a_cut_off_region_is_kept_apart(
    kube: Kube, operator: Any, latencies: Publish
) -> None:
    """Every measured Tokyo pair reported unreachable, tokyo-29 not measured at all: it is
    taken as cut off too, and a job within Tokyo gets one server, not tokyo-29 and another
    (before, tokyo-29 had the 1 ms estimate with each: a user trial saw a stage planned
    across a partition so). The job's condition says why."""
    rows: dict[str, dict[str, float | None]] = {
        a: {b: None for b in TOKYO[:-1] if b != a} for a in TOKYO[:-1]
    }
    latencies(rows)
    kube.apply(manifest("alone", allowedRegions=["tokyo"]))
    wait("placed", lambda: plan_nodes(kube.job("alone")), 60)
    assert len(plan_nodes(kube.job("alone"))) == 1, plan_nodes(kube.job("alone"))


def test_the_preview_takes_the_operators_latency_settings(
    sandbox: Any, kube: Kube, latencies: Publish, tmp_path: Path
) -> None:
    """Before, the preview used the operator's defaults whatever the operator ran with."""
    latencies(
        {a: {b: 0.5 for b in TOKYO if b != a} for a in TOKYO},
        datetime.now(UTC) - timedelta(seconds=120),
    )
    near = manifest("near", allowedRegions=["tokyo"])

    def notes(*flags: str) -> list[str]:
        out = preview_manifest(sandbox, kube, tmp_path / "near.yaml", near, *flags)
        return [line for line in out.stderr.splitlines() if "NodeLatency" in line
                or "latency measurement" in line]  # fmt: skip

    assert notes() == []  # two minutes old: fresh for the default 600 s
    stale, note = notes("--latency-max-age-s", "60", "--same-region-latency-ms", "2")
    assert note.endswith("else 2 ms within a region and 100 ms across regions)"), note
    assert "measurement; used tokyo 2 ms (the median" in note, note
    # every status past the max age: said, as the operator's log says it (a user trial)
    assert stale.startswith("hulk plan: note: no NodeLatency status was published in the "
                            "last 60 s (--latency-max-age-s): the newest, "), stale  # fmt: skip
    assert "are the probes running?" in stale, stale


def test_the_preview_refuses_a_template_the_api_server_refuses(
    sandbox: Any, kube: Kube, tmp_path: Path
) -> None:
    """As the operator's dry run of one stage pod (before, the preview planned a job
    whose container had no image, and the operator failed it at once: a trial)."""
    body = manifest("noimage")
    body["metadata"]["namespace"] = kube.ns
    del body["spec"]["template"]["spec"]["containers"][0]["image"]
    path = tmp_path / "noimage.yaml"
    path.write_text(yaml.safe_dump(body))
    out = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(path), "-o", "json")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    where = f"{path} (document 1): job noimage"
    assert line.startswith(f"hulk plan: error: {where}: spec.template: the API server "), line
    assert "image" in line and line.endswith("(fix the template, then apply it)"), line
    # every refused manifest is told, each where it is (before, the first alone, by its
    # name alone: a user trial)
    empty = manifest("empty")
    empty["spec"]["template"]["spec"]["containers"] = []
    path.write_text(yaml.safe_dump_all([body, manifest("fine"), empty]))
    out = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "--jobs", str(path), "-o", "json")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert [x.split(": spec.")[0] for x in lines] == [
        f"hulk plan: error: {where}",
        f"hulk plan: error: {path} (document 3): job empty",
    ], out.stderr
    # a job applied that the operator will refuse is said not previewed (it was left out
    # with nothing said: a user trial)
    pinned = manifest("pinned")
    pinned["metadata"]["namespace"] = kube.ns
    pinned["spec"]["template"]["spec"]["nodeName"] = "rome-44"
    kube.apply(pinned)
    out = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "-n", kube.ns, "-o", "json")
    assert out.returncode == 0 and out.stderr.strip() == (
        f"hulk plan: nothing to plan: namespace '{kube.ns}' has no pending HulkTrainingJob (to "
        "preview one, apply it or give its manifest with --jobs FILE); job pinned: not "
        "previewed: the operator refuses it (InvalidSpec): spec.template.spec.nodeName: is "
        "set, but Hulk puts each stage pod on the server its plan picks (remove it; to limit "
        "the servers use spec.nodeSelector (kubernetes.io/hostname: NAME) or "
        "spec.allowedRegions)"
    ), out.stderr
    kube.apply({**manifest("other"), "metadata": {"name": "other", "namespace": kube.ns}})
    out = hulk("plan", "--kubeconfig", sandbox.kubeconfig, "-n", kube.ns, "-o", "json")
    assert out.returncode == 0 and "hulk plan: note: job pinned: not previewed: " in out.stderr
    assert [j["name"] for j in json.loads(out.stdout)["jobs"]] == ["other"]


def test_hulk_topology_writes_the_cluster_the_operator_plans_on(
    sandbox: Any, kube: Kube, latencies: Publish, tmp_path: Path
) -> None:
    """``hulk topology``: the live cluster as a ClusterTopology file that ``hulk plan
    --cluster`` plans on offline, with the operator's links (measured, estimated, none)."""
    from hulk_planner import io

    latencies({"tokyo-25": {"tokyo-26": 40.0}, "tokyo-26": {"tokyo-25": 44.0, "tokyo-27": None}})
    kube.core.patch_node("rome-45", {"spec": {"unschedulable": True}})
    try:
        out = hulk(
            "topology", "--kubeconfig", sandbox.kubeconfig, "--cross-region-latency-ms", "150"
        )
        live = cluster_from_kubeconfig(sandbox.kubeconfig, cross_region_ms=150.0)
    finally:
        kube.core.patch_node("rome-45", {"spec": {"unschedulable": None}})
    assert out.returncode == 0, out.stderr
    path = tmp_path / "cluster.yaml"
    path.write_text(out.stdout)
    cluster = io.load_cluster(path)
    # (the file's form of the cut pair: its region pair as links, ``Cluster.materialized``)
    assert cluster == live.materialized() and len(cluster.servers) == 46  # (cordoned: out)
    links = {lk.key: lk.latency_ms for lk in cluster.links}
    assert links[frozenset(("tokyo-25", "tokyo-26"))] == 42.0
    assert frozenset(("tokyo-26", "tokyo-27")) not in links  # reported unreachable
    # an unmeasured Tokyo pair: the median of Tokyo's measured links, not the 1 ms flag
    assert links[frozenset(("tokyo-25", "tokyo-27"))] == 42.0
    assert Network(cluster).latency("tokyo-25", "beijing-0") == 150.0
    assert out.stderr.splitlines() == [
        "hulk topology: note: left out 1 node(s) with GPUs: rome-45 (Cordoned)",
        "hulk topology: note: 1033 of 1035 server pair(s) have no fresh latency measurement: "
        "the regionLinks give them the operator's estimates (the median measured latency "
        "between their regions where a pair of them was measured, else 1 ms within a region "
        "and 150 ms across regions), as it plans with them",
        "hulk topology: note: 1 server pair(s) are reported unreachable: no link, as the "
        "operator plans them (they cannot communicate)",
    ]
    planned = hulk("plan", "--cluster", str(path), "--moves", "100", "-o", "json")
    assert planned.returncode == 0, planned.stderr
    used = {n for j in json.loads(planned.stdout)["jobs"] for s in j["stages"] for n in s["nodes"]}
    assert used and "rome-45" not in used
