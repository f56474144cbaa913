"""The rendered chart against the sandbox's real API server (RBAC authorization, admission,
Pod Security, CEL): every object is accepted; the RBAC grants what the components need and
denies what they do not; the probe's node-patch policy lets it set its own annotation and
nothing else; the operator's pod passes the "restricted" Pod Security level.

Objects are applied with server-side apply in Helm's order (CRDs first, waiting until they
are served; hooks last). Cluster-scoped objects the test created are deleted afterwards,
except the hulk.dev CRDs (identical to crds/, which other tests also install).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from hulk_sandbox.sandbox import Sandbox

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

Render = Callable[..., list[dict[str, Any]]]
MANAGER = "hulk-chart-test"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ANNOTATION = "hulk.dev/probe-address"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


class Applier:
    """Server-side apply through the dynamic client; remembers what it created."""

    def __init__(self, api: Any, cache: Path) -> None:
        from kubernetes.dynamic import DynamicClient

        self.api = api
        self.dyn = DynamicClient(api, cache_file=str(cache))
        self.created: list[tuple[Any, str, str | None]] = []

    def resource(self, obj: dict[str, Any]) -> Any:
        return self.dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])

    def exists(self, obj: dict[str, Any]) -> bool:
        from kubernetes.dynamic.exceptions import NotFoundError

        meta = obj["metadata"]
        try:
            self.resource(obj).get(name=meta["name"], namespace=meta.get("namespace"))
            return True
        except NotFoundError:
            return False

    def apply(self, obj: dict[str, Any]) -> Any:
        res = self.resource(obj)
        meta = obj["metadata"]
        namespace = meta.get("namespace") if res.namespaced else None
        existed = self.exists(obj)
        out = res.server_side_apply(
            body=obj,
            name=meta["name"],
            namespace=namespace,
            field_manager=MANAGER,
            force_conflicts=True,
        )
        assert out.metadata.uid, f"{obj['kind']}/{meta['name']} not stored"
        if not existed:
            self.created.append((res, meta["name"], namespace))
        return out

    def clean_up(self, namespace: str, keep_crds: set[str]) -> None:
        """Leave the shared sandbox as it was: the release's pods gone (the DaemonSet put
        one, with host ports, on every node), its cluster-scoped objects deleted, and the
        CRDs it created deleted and gone, except the hulk.dev ones (equal to crds/, which
        other tests install too). The namespace fixture deletes the namespace."""
        from kubernetes import client
        from kubernetes.dynamic.exceptions import NotFoundError

        gone: list[tuple[Any, str]] = []
        for res, name, ns in reversed(self.created):
            if res.kind == "CustomResourceDefinition" and (
                name in keep_crds or name.endswith(".hulk.dev")
            ):
                continue
            if ns is not None and res.kind not in ("Deployment", "DaemonSet"):
                continue
            try:
                res.delete(name=name, namespace=ns)
                gone.append((res, name))
            except NotFoundError:
                pass
        core = client.CoreV1Api(self.api)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        for res, name in gone:
            if res.kind != "CustomResourceDefinition":
                continue
            while time.monotonic() < deadline:
                try:
                    res.get(name=name)
                except NotFoundError:
                    break
                time.sleep(0.2)
        while core.list_namespaced_pod(namespace).items and time.monotonic() < deadline:
            time.sleep(0.2)

    def apply_crds(self, crds: list[dict[str, Any]]) -> None:
        """Applies the CRDs and waits until they are served."""
        for crd in crds:
            self.apply(crd)
        for crd in crds:
            self.wait_established(crd["metadata"]["name"])
        self.dyn.resources.invalidate_cache()

    def wait_established(self, name: str, timeout: float = 60.0) -> None:
        crds = self.dyn.resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
        )
        deadline = time.monotonic() + timeout
        while True:
            conditions = crds.get(name=name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.2)


# Keep the shared sandbox's load low (other tests time latencies on it): the DaemonSet on
# one region's 5 nodes instead of all 47, and one install for the module's tests. Each
# release's probes take host ports 7471-7472, so two releases need different regions.
FEW_NODES = "probe.nodeSelector.topology\\.kubernetes\\.io/region=beijing"
OTHER_FEW_NODES = "probe.nodeSelector.topology\\.kubernetes\\.io/region=tokyo"


@contextmanager
def own_namespace(api: Any, prefix: str) -> Iterator[str]:
    """A fresh namespace, deleted afterwards and waited for, pods and all."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(api)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                core.read_namespace(name)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def installed(
    sandbox: Sandbox, render: Render, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The chart (default values, the probe on a few nodes) applied as release
    hulk-<suffix> in a namespace of its own."""
    with sandbox.api_client() as api, own_namespace(api, "chart") as namespace:
        release = f"hulk-{namespace.removeprefix('chart-')}"
        objs = render(namespace=namespace, release=release, set_values=[FEW_NODES])
        applier = Applier(api, tmp_path_factory.mktemp("discovery") / "discovery.json")
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        preexisting = {c["metadata"]["name"] for c in crds if applier.exists(c)}
        try:
            applier.apply_crds(crds)
            rest = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
            accepted = [applier.apply(o) for o in rest if not _is_hook(o)]
            accepted += [applier.apply(o) for o in rest if _is_hook(o)]
            yield {
                "objs": objs,
                "release": release,
                "api": api,
                "accepted": accepted,
                "crds": crds,
                "namespace": namespace,
            }
        finally:
            applier.clean_up(namespace, keep_crds=preexisting)


def test_every_rendered_object_is_accepted(installed: dict[str, Any]) -> None:
    objs = installed["objs"]
    kinds = {o["kind"] for o in objs}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "DaemonSet",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "Service",
        "ConfigMap",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ClusterKopfPeering",
    } <= kinds
    assert len(installed["accepted"]) + len(installed["crds"]) == len(objs)


def _review(
    api: Any,
    user: str,
    verb: str,
    group: str,
    resource: str,
    sub: str = "",
    namespace: str | None = None,
    name: str | None = None,
) -> bool:
    from kubernetes import client

    if namespace is None and resource in ("pods", "services", "events"):
        namespace = "default"

    body = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                group=group,
                resource=resource,
                subresource=sub or None,
                namespace=namespace,
                name=name,
            ),
        )
    )
    review: Any = client.AuthorizationV1Api(api).create_subject_access_review(body)
    return bool(review.status.allowed)


# What each ServiceAccount must NOT be able to do (its ClusterRole's rules are checked as
# granted one by one, from the rendered chart).
SPARE: dict[str, list[tuple[str, str, str, str]]] = {
    "operator": [
        ("get", "", "secrets", ""),
        ("list", "", "configmaps", ""),
        ("patch", "", "nodes", ""),
        ("delete", "", "nodes", ""),
        ("create", "", "pods", "exec"),
        ("deletecollection", "", "pods", ""),
        ("delete", "hulk.dev", "hulktrainingjobs", ""),
        ("create", "hulk.dev", "hulktrainingjobs", ""),
        ("patch", "hulk.dev", "nodelatencies", ""),
        ("delete", "", "services", ""),
        ("create", "apps", "deployments", ""),
        ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ],
    "probe": [
        ("get", "", "secrets", ""),
        ("list", "", "pods", ""),
        ("update", "", "nodes", "status"),
        ("delete", "", "nodes", ""),
        ("create", "", "nodes", ""),
        ("delete", "hulk.dev", "nodelatencies", ""),
        ("list", "hulk.dev", "nodelatencies", ""),
        ("update", "hulk.dev", "nodelatencies", ""),  # (granted before, never called)
        ("patch", "hulk.dev", "nodelatencies", ""),
        ("update", "hulk.dev", "nodelatencies", "status"),
        ("get", "hulk.dev", "nodelatencies", "status"),
        ("list", "scheduling.k8s.io", "priorityclasses", ""),
        ("watch", "scheduling.k8s.io", "priorityclasses", ""),
        ("get", "hulk.dev", "hulktrainingjobs", ""),
        ("create", "", "events", ""),
    ],
}


def _needed(objs: list[dict[str, Any]], role: str) -> list[tuple[str, str, str, str, str]]:
    """(verb, group, resource, subresource, name) of each grant of the ClusterRole: name
    "" but in a rule bound to one object (resourceNames)."""
    [cluster_role] = [
        o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == role
    ]
    out = []
    for rule in cluster_role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                base, _, sub = resource.partition("/")
                for name in rule.get("resourceNames") or [""]:
                    out += [(verb, group, base, sub, name) for verb in rule["verbs"]]
    return out


def _peering_name(objs: list[dict[str, Any]]) -> str:
    """The operator's --peering name in the rendered chart."""
    [deployment] = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-operator")
    ]
    [arg] = [
        a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        if a.startswith("--peering=")
    ]  # fmt: skip
    return str(arg.removeprefix("--peering="))


# What `hulk operator` calls (hulk_operator/kube.py, kopf), whatever the chart's rules say:
# a call the ClusterRole forgets is refused (403) on a real cluster only, never in the
# sandbox tests, which run as admin.
OPERATOR_CALLS = [
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("create", "", "pods", ""),
    ("patch", "", "pods", ""),  # the gang gate lifted
    ("delete", "", "pods", ""),
    ("get", "", "services", ""),  # a stage pod made again: is the Service the job's?
    ("list", "", "services", ""),  # the jobs' own (a quota on services)
    ("watch", "", "services", ""),
    ("create", "", "services", ""),
    ("patch", "", "services", ""),  # an edited masterPort
    ("create", "", "events", ""),
    ("list", "", "events", ""),  # a job's newest advice Event (kube.last_event_message)
    ("list", "", "resourcequotas", ""),  # jobs planned within them
    ("list", "", "limitranges", ""),
    ("list", "", "namespaces", ""),  # -n 'team-*' globs
    ("list", "", "nodes", ""),
    ("watch", "", "nodes", ""),
    ("list", "hulk.dev", "nodelatencies", ""),
    ("list", "scheduling.k8s.io", "priorityclasses", ""),
    ("watch", "scheduling.k8s.io", "priorityclasses", ""),
    ("list", "hulk.dev", "hulktrainingjobs", ""),
    ("patch", "hulk.dev", "hulktrainingjobs", ""),
    ("patch", "hulk.dev", "hulktrainingjobs", "status"),
    # kopf peering, serving every namespace: its ClusterKopfPeering read and made when
    # missing (crd.ensure_peering), watched and its keep-alive patched (kopf; get and
    # patch of its own peering object alone, reviewed under its name) ...
    ("get", "kopf.dev", "clusterkopfpeerings", ""),
    ("create", "kopf.dev", "clusterkopfpeerings", ""),
    ("list", "kopf.dev", "clusterkopfpeerings", ""),
    ("watch", "kopf.dev", "clusterkopfpeerings", ""),
    ("patch", "kopf.dev", "clusterkopfpeerings", ""),
    # ... and the KopfPeerings of every namespace listed (crd.overlapping_peers: an operator
    # serving named namespaces does not pause for it; before, refused: no warning, a review)
    ("list", "kopf.dev", "kopfpeerings", ""),
]


# What `hulk probe` calls (hulk_probe/discovery.py, publisher.py through hulk_probe/kube.py),
# written by hand from the code: its ClusterRole must grant these and nothing more (before,
# the test took "needed" from the ClusterRole itself, and update/patch it never makes
# passed; a review).
PROBE_CALLS = [
    ("list", "", "nodes", ""),  # peers: their hulk.dev/probe-address annotation
    ("watch", "", "nodes", ""),
    ("get", "", "nodes", ""),  # its own Node: uid, current annotation
    ("patch", "", "nodes", ""),  # its own address published (probe-node-policy.yaml)
    ("get", "hulk.dev", "nodelatencies", ""),  # Publisher.ensure_object: is it there?
    ("create", "hulk.dev", "nodelatencies", ""),  # ... made when missing
    ("patch", "hulk.dev", "nodelatencies", "status"),  # Publisher.write_status: merge patch
]


# core API methods of the kubernetes client -> (verb, resource), for those the operator
# calls; custom objects (jobs, peering) are kopf's or listed above by hand
_CORE = {"pod": "pods", "service": "services", "node": "nodes", "namespace": "namespaces",
         "limit_range": "limitranges", "resource_quota": "resourcequotas",
         "priority_class": "priorityclasses"}  # fmt: skip
_VERB = {"read": "get", "create": "create", "patch": "patch", "delete": "delete",
         "list": "list", "replace": "update"}  # fmt: skip


def test_every_core_call_in_the_operators_code_is_in_operator_calls() -> None:
    """OPERATOR_CALLS is written by hand: it missed `get services` (read when a stage pod is
    made again), and the chart's Role with it; a job that lost one stage pod was torn down
    on a real install (a user trial). Every CoreV1Api/SchedulingV1Api call the running
    operator makes must be in it (demo.py and preview.py run with the user's kubeconfig;
    CRD calls only with --install-crds)."""
    import re

    root = Path(__file__).resolve().parents[2] / "hulk_operator"
    pattern = re.compile(
        r"\.(read|create|patch|delete|list|replace)_(?:namespaced_)?([a-z_]+?)"
        r"(?:_for_all_namespaces)?\("
    )
    calls = set()
    for path in sorted(root.glob("*.py")):
        if path.name in ("demo.py", "preview.py"):
            continue
        for verb, kind in pattern.findall(path.read_text()):
            if kind in _CORE:
                calls.add((_VERB[verb], "scheduling.k8s.io" if kind == "priority_class" else "",
                           _CORE[kind], ""))  # fmt: skip
    assert ("get", "", "services", "") in calls  # (the scan sees what it must)
    assert calls - set(OPERATOR_CALLS) == set()


def test_the_operators_role_allows_every_call_it_makes(installed: dict[str, Any]) -> None:
    name = f"{installed['release']}-operator"
    user = f"system:serviceaccount:{installed['namespace']}:{name}"
    peering = _peering_name(installed["objs"])
    refused = [
        c
        for c in OPERATOR_CALLS
        if not _review(
            installed["api"], user, *c,
            name=peering if c[2] == "clusterkopfpeerings" and c[0] in ("get", "patch") else None,
        )
    ]  # fmt: skip
    assert refused == []
    # another operator's peering object: neither read one by one nor written (a keep-alive
    # of a higher priority there would pause that operator; before, any was: a review)
    for verb in ("get", "patch", "update", "delete"):
        assert not _review(
            installed["api"], user, verb, "kopf.dev", "clusterkopfpeerings", name="other-operator"
        ), verb


def _peering(name: str, namespace: str | None, who: str) -> dict[str, Any]:
    """A kopf peering object of ``name`` (a KopfPeering in ``namespace``, else the
    ClusterKopfPeering) holding the live keep-alive of operator ``who``."""
    import datetime

    seen = datetime.datetime.now(datetime.UTC).isoformat()
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering" if namespace else "ClusterKopfPeering",
        "metadata": meta,
        "status": {who: {"priority": 1, "lastseen": seen, "lifetime": 600}},
    }


@pytest.mark.parametrize(
    ("values", "reads"),
    [
        ([], "overlapping"),  # serving every namespace: the KopfPeerings' operators
        (["operator.watchNamespaces={NS}"], "overlapping"),  # named: the ClusterKopfPeering's
        (["operator.peering.enabled=false"], "live"),  # --standalone: both
    ],
    ids=["all-namespaces", "named-namespaces", "standalone"],
)
def test_the_charts_operator_sees_the_operators_that_do_not_pause_for_it(
    sandbox: Sandbox, render: Render, tmp_path: Path, values: list[str], reads: str
) -> None:
    """An operator serving every namespace and one serving named ones keep apart peering
    objects (ClusterKopfPeering, KopfPeerings), so neither pauses for the other; each warns
    at start of the other's live records, read with the chart's RBAC alone. Before, the
    ClusterRole granted only the kind the operator keeps its own record in: the other's
    read was refused, crd.overlapping_peers (advisory) found nothing, and the warning
    docs/operator.md promises never came (a review). A --standalone one reads both."""
    from kubernetes import client

    from hulk_operator import crd

    with sandbox.api_client() as api, own_namespace(api, "peers") as home:
        release = f"hulk-{home.removeprefix('peers-')}"
        objs = render(
            namespace=home, release=release, set_values=[v.replace("NS", home) for v in values]
        )
        applier = Applier(api, tmp_path / "discovery.json")
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        crds += yaml_docs(Path(crd.PEERING_CRDS))  # (the chart's own, unless peering is off)
        crds = list({c["metadata"]["name"]: c for c in crds}.values())
        preexisting = {c["metadata"]["name"] for c in crds if applier.exists(c)}
        custom: Any = client.CustomObjectsApi(api)
        name = f"overlap-{uuid.uuid4().hex[:8]}"  # a peering name of this test's own
        try:
            applier.apply_crds(crds)
            rbac = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
            for obj in objs:
                if obj["kind"] in rbac and obj["metadata"]["name"].startswith(release):
                    applier.apply(obj)
            custom.create_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", _peering(name, None, "cluster-op")
            )
            custom.create_namespaced_custom_object(
                "kopf.dev", "v1", home, "kopfpeerings", _peering(name, home, "team-op")
            )
            cluster = f"ClusterKopfPeering {name}: cluster-op"
            team = f"KopfPeering {home}/{name}: team-op"
            named = any("watchNamespaces" in v for v in values)
            expected = {
                "overlapping": [cluster] if named else [team],
                "live": [cluster, team],
            }[reads]
            user = f"system:serviceaccount:{home}:{release}-operator"
            with sandbox.api_client() as op:
                op.set_default_header("Impersonate-User", user)

                def seen() -> list[str]:
                    if reads == "live":
                        return crd.live_peers(op, name)
                    return crd.overlapping_peers(op, name, namespaces=[home] if named else ())

                deadline = time.monotonic() + 15  # (RBAC takes effect within moments)
                while (found := seen()) != expected and time.monotonic() < deadline:
                    time.sleep(0.5)
                assert found == expected
                # read only: the ServiceAccount may not write the other scope's objects
                other = ("clusterkopfpeerings", "") if named else ("kopfpeerings", home)
                for verb in ("patch", "create", "delete"):
                    assert not _review(api, user, verb, "kopf.dev", other[0], "", other[1] or None)
        finally:
            try:
                custom.delete_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
            except client.exceptions.ApiException:
                pass
            applier.clean_up(home, keep_crds=preexisting)


@pytest.mark.parametrize("component", ["operator", "probe"])
def test_rbac_grants_what_is_needed_and_nothing_else(
    installed: dict[str, Any], component: str
) -> None:
    namespace = installed["namespace"]
    name = f"{installed['release']}-{component}"
    user = f"system:serviceaccount:{namespace}:{name}"
    api = installed["api"]
    needed = _needed(installed["objs"], name)
    assert needed
    if component == "probe":  # granted: exactly its calls, each allowed
        assert sorted({c[:4] for c in needed}) == sorted(PROBE_CALLS)
        assert {c[4] for c in needed} == {""}
        needed += [(*c, "") for c in PROBE_CALLS]
    for verb, group, resource, sub, one in needed:
        assert _review(api, user, verb, group, resource, sub, name=one or None), (verb, resource)
    for verb, group, resource, sub in SPARE[component]:
        assert not _review(api, user, verb, group, resource, sub), (verb, resource, sub)


def _node_patch(api: Any, name: str, patch: dict[str, Any]) -> int:
    """HTTP status of a merge patch of Node ``name`` (200, or the error's status)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    return _http_status(
        lambda: core.patch_node(name, patch, _content_type="application/merge-patch+json")
    )


def _http_status(call: Callable[[], Any]) -> int:
    """200 when ``call`` succeeds, else the status of the ApiException it raises."""
    from kubernetes.client.exceptions import ApiException

    try:
        call()
        return 200
    except ApiException as exc:
        return int(exc.status)


def test_probe_may_patch_only_its_own_address_annotation(
    installed: dict[str, Any], sandbox: Sandbox
) -> None:
    namespace = installed["namespace"]
    user = f"system:serviceaccount:{namespace}:{installed['release']}-probe"
    _probe_node_policy_holds(installed["api"], sandbox, user)


def _probe_node_policy_holds(admin: Any, sandbox: Sandbox, user: str) -> None:
    """As the probe's ServiceAccount ``user`` on a node (the node name in its token's
    extra), a Node patch may set or withdraw that node's hulk.dev/probe-address
    annotation and nothing else, and no other node's; without the node name, nothing."""
    from kubernetes import client

    nodes: Any = client.CoreV1Api(admin).list_node().items
    own, other = nodes[0].metadata, nodes[1].metadata
    own_name, other_name = str(own.name), str(other.name)
    saved = {str(m.name): (m.annotations or {}).get(ANNOTATION) for m in (own, other)}
    try:
        with sandbox.api_client() as probe, sandbox.api_client() as nodeless:
            for api in (probe, nodeless):
                api.set_default_header("Impersonate-User", user)
            probe.set_default_header(
                f"Impersonate-Extra-{NODE_NAME_EXTRA.replace('/', '%2F')}", own_name
            )
            label = {"metadata": {"labels": {"hulk-chart-test": "x"}}}
            # The policy takes effect once the API server has loaded it: wait for a denial.
            deadline = time.monotonic() + 30
            while (status := _node_patch(probe, own_name, label)) == 200:
                _node_patch(admin, own_name, {"metadata": {"labels": {"hulk-chart-test": None}}})
                assert time.monotonic() < deadline, "the node-patch policy never took effect"
                time.sleep(0.5)
            assert status in (403, 422)
            mine = {"metadata": {"annotations": {ANNOTATION: "10.9.9.9:7471"}}}
            assert _node_patch(probe, own_name, mine) == 200
            gone = {"metadata": {"annotations": {ANNOTATION: None}}}  # withdrawn at a stop
            assert _node_patch(probe, own_name, gone) == 200
            assert _node_patch(probe, own_name, mine) == 200
            assert _node_patch(probe, other_name, mine) in (403, 422)
            assert _node_patch(nodeless, own_name, mine) in (403, 422)
            foreign = {"metadata": {"annotations": {"example.com/x": "1"}}}
            assert _node_patch(probe, own_name, foreign) in (403, 422)
            taint = {"spec": {"unschedulable": True}}
            assert _node_patch(probe, own_name, taint) in (403, 422)
    finally:
        for name, value in saved.items():
            _node_patch(
                admin,
                name,
                {
                    "metadata": {
                        "annotations": {ANNOTATION: value},
                        "labels": {"hulk-chart-test": None},
                    }
                },
            )


def test_the_probe_runs_in_a_namespace_of_its_own(
    sandbox: Sandbox, render: Render, tmp_path: Path
) -> None:
    """probe.namespace: the DaemonSet, its ServiceAccount and metrics Service live there (a
    namespace at the "privileged" Pod Security level, which the operator's then need not
    be; before, both shared the release's, and the operator's pod sat in a privileged
    namespace: a security review), and its RBAC binding and node policies name that
    ServiceAccount: the DaemonSet's pods are made there under it, its token may publish
    its own node's address and nothing else, and the same name in the release's namespace
    gets none of its rights."""
    from kubernetes import client

    with (
        sandbox.api_client() as api,
        own_namespace(api, "chartp") as home,
        own_namespace(api, "probe") as probe_ns,
    ):
        release = f"hulk-{home.removeprefix('chartp-')}"
        objs = render(
            namespace=home,
            release=release,
            set_values=[OTHER_FEW_NODES, f"probe.namespace={probe_ns}", "operator.enabled=false"],
        )
        placed = {(o["kind"], o["metadata"].get("namespace")) for o in objs}
        for kind in ("DaemonSet", "ServiceAccount", "Service"):
            assert (kind, probe_ns) in placed and (kind, home) not in placed, kind
        applier = Applier(api, tmp_path / "discovery.json")
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        preexisting = {c["metadata"]["name"] for c in crds if applier.exists(c)}
        core: Any = client.CoreV1Api(api)
        try:
            applier.apply_crds(crds)
            for obj in objs:
                if obj["kind"] != "CustomResourceDefinition" and not _is_hook(obj):
                    applier.apply(obj)
            tokyo = core.list_node(label_selector="topology.kubernetes.io/region=tokyo").items
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pods = core.list_namespaced_pod(probe_ns).items
                if len(pods) == len(tokyo) and all(p.spec.node_name for p in pods):
                    break
                time.sleep(0.5)
            assert sorted(p.spec.node_name for p in pods) == sorted(n.metadata.name for n in tokyo)
            assert {p.spec.service_account_name for p in pods} == {f"{release}-probe"}
            user = f"system:serviceaccount:{probe_ns}:{release}-probe"
            stranger = f"system:serviceaccount:{home}:{release}-probe"
            for call in PROBE_CALLS:
                assert _review(api, user, *call), call
                assert not _review(api, stranger, *call), call
            _probe_node_policy_holds(api, sandbox, user)
        finally:
            applier.clean_up(home, keep_crds=preexisting)
            core.delete_collection_namespaced_pod(probe_ns, grace_period_seconds=0)


def _latency_write(api: Any, node: str, how: str) -> int:
    """HTTP status of writing the NodeLatency of ``node`` (``create``, ``patch`` of its
    status, ``delete``) as the client ``api`` (200, or the error's status)."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)
    args = ("hulk.dev", "v1alpha1", "nodelatencies")
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "NodeLatency", "metadata": {"name": node}}
    calls = {
        "create": lambda: custom.create_cluster_custom_object(*args, body),
        "patch": lambda: custom.patch_cluster_custom_object_status(
            *args, node, {"status": {"node": node, "peers": []}}
        ),
        "delete": lambda: custom.delete_cluster_custom_object(*args, node),
    }
    return _http_status(calls[how])


def test_probe_may_write_only_its_own_nodes_latency_record(
    installed: dict[str, Any], sandbox: Sandbox
) -> None:
    """Before, an agent's token could rewrite any node's NodeLatency and so forge the
    latencies the planner reads (a user trial patched berlin-31's from berlin-30's pod)."""
    from kubernetes import client

    admin = installed["api"]
    nodes: Any = client.CoreV1Api(admin).list_node().items
    own, other = f"{nodes[0].metadata.name}", f"{nodes[1].metadata.name}"
    user = f"system:serviceaccount:{installed['namespace']}:{installed['release']}-probe"
    custom: Any = client.CustomObjectsApi(admin)
    existed = {
        i["metadata"]["name"]
        for i in custom.list_cluster_custom_object("hulk.dev", "v1alpha1", "nodelatencies")["items"]
    }
    try:
        with sandbox.api_client() as probe:
            probe.set_default_header("Impersonate-User", user)
            probe.set_default_header(
                f"Impersonate-Extra-{NODE_NAME_EXTRA.replace('/', '%2F')}", own
            )
            for name in (own, other):
                if name not in existed:
                    assert _latency_write(admin, name, "create") == 200
            # the policy takes effect once the API server has loaded it: wait for a denial
            deadline = time.monotonic() + 30
            while (status := _latency_write(probe, other, "patch")) == 200:
                assert time.monotonic() < deadline, "the latency policy never took effect"
                time.sleep(0.5)
            assert status in (403, 422)
            assert _latency_write(probe, own, "patch") == 200
            assert _latency_write(probe, other, "delete") in (403, 422)
            _latency_write(admin, own, "delete")
            assert _latency_write(probe, own, "create") == 200
    finally:
        for name in (own, other):
            if name not in existed:
                _latency_write(admin, name, "delete")


def _owner(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
    }


def _pod_write(
    api: Any, admin: Any, namespace: str, how: str, owner: dict[str, Any] | None, name: str = ""
) -> int:
    """HTTP status of a pod write as the client ``api``: ``create`` (a gated pod, owned by
    ``owner`` or by nothing; deleted again as ``admin``), ``dry-run`` (the operator's
    template check), or ``patch`` / ``disown`` / ``adopt`` / ``delete`` of pod ``name``."""
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    pod = _gated_pod(name or f"w-{uuid.uuid4().hex[:8]}", owner)
    merge = "application/merge-patch+json"
    calls: dict[str, Callable[[], Any]] = {
        "create": lambda: core.create_namespaced_pod(namespace, pod),
        "dry-run": lambda: core.create_namespaced_pod(namespace, pod, dry_run="All"),
        "patch": lambda: core.patch_namespaced_pod(
            name, namespace, {"metadata": {"labels": {"x": "1"}}}, _content_type=merge
        ),
        "disown": lambda: core.patch_namespaced_pod(
            name, namespace, {"metadata": {"ownerReferences": None}}, _content_type=merge
        ),
        "adopt": lambda: core.patch_namespaced_pod(
            name, namespace, {"metadata": {"ownerReferences": [owner]}}, _content_type=merge
        ),
        "delete": lambda: core.delete_namespaced_pod(name, namespace, grace_period_seconds=0),
    }
    status = _http_status(calls[how])
    if how == "create" and status == 200:
        client.CoreV1Api(admin).delete_namespaced_pod(
            pod["metadata"]["name"], namespace, grace_period_seconds=0
        )
    return status


def _gated_pod(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """A pod that is never scheduled (a scheduling gate stays on it)."""
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulingGates": [{"name": "hulk.dev/chart-test"}],
            "containers": [{"name": "c", "image": "registry.invalid/none"}],
        },
    }


def _wait_denied(write: Callable[[], int], timeout: float = 30.0) -> None:
    """A policy takes effect once the API server has loaded it: waits for ``write`` to be
    refused by it."""
    deadline = time.monotonic() + timeout
    while (status := write()) == 200:
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)
    assert status in (403, 422), status


def test_operator_may_write_only_pods_and_services_its_jobs_own(
    installed: dict[str, Any], sandbox: Sandbox
) -> None:
    """operator.writePolicy: RBAC lets the operator write any pod in any namespace; the
    policy lets it write only those a HulkTrainingJob owns, and not take one over."""
    from kubernetes import client

    from hulk_operator import GROUP, PLURAL, VERSION

    namespace = installed["namespace"]
    admin = installed["api"]
    user = f"system:serviceaccount:{namespace}:{installed['release']}-operator"
    job = yaml_docs(EXAMPLES / "paper-jobs.yaml")[0]
    job["metadata"] = {"name": "owner"}
    job["spec"]["suspend"] = True  # no operator runs here; nothing would place it anyway
    custom: Any = client.CustomObjectsApi(admin)
    owner = _owner(custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job))
    core: Any = client.CoreV1Api(admin)
    with sandbox.api_client() as op:
        op.set_default_header("Impersonate-User", user)
        _wait_denied(lambda: _pod_write(op, admin, namespace, "create", owner=None))
        assert _pod_write(op, admin, namespace, "dry-run", owner) == 200
        assert _pod_write(op, admin, namespace, "create", owner) == 200
        # the operator may patch and delete a pod its job owns, not disown it; nor touch
        # or adopt another
        core.create_namespaced_pod(namespace, _gated_pod("stage", owner))
        core.create_namespaced_pod(namespace, _gated_pod("theirs", None))
        assert _pod_write(op, admin, namespace, "patch", owner, name="stage") == 200
        assert _pod_write(op, admin, namespace, "disown", owner, name="stage") == 403
        assert _pod_write(op, admin, namespace, "patch", owner, name="theirs") == 403
        assert _pod_write(op, admin, namespace, "adopt", owner, name="theirs") == 403
        assert _pod_write(op, admin, namespace, "delete", owner, name="theirs") == 403
        assert _pod_write(op, admin, namespace, "delete", owner, name="stage") == 200
        # Services alike
        ops: Any = client.CoreV1Api(op)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc"},
            "spec": {"clusterIP": "None", "ports": [{"port": 29500}]},
        }
        assert _http_status(lambda: ops.create_namespaced_service(namespace, service)) == 403
        service["metadata"]["ownerReferences"] = [owner]
        # owned, but exposed or not headless: refused (a security review: an owned NodePort,
        # LoadBalancer or externalIPs Service was let through)
        for name, spec in (
            ("nodeport", {"type": "NodePort", "ports": [{"port": 29500}]}),
            ("lb", {"type": "LoadBalancer", "ports": [{"port": 29500}]}),
            ("ext", {"clusterIP": "None", "externalIPs": ["10.9.9.9"], "ports": [{"port": 1}]}),
            ("vip", {"ports": [{"port": 29500}]}),
        ):
            exposed = {**service, "metadata": {**service["metadata"], "name": name}, "spec": spec}
            said = _http_status(lambda e=exposed: ops.create_namespaced_service(namespace, e))
            assert said == 403, (name, said)
        assert _http_status(lambda: ops.create_namespaced_service(namespace, service)) == 200
        # nothing in kube-system, owned or not, by the policy (RBAC would allow it); and no
        # job there, which would hold servers while its pods were refused (a security review)
        from kubernetes.client.exceptions import ApiException

        with pytest.raises(ApiException) as refused:
            ops.create_namespaced_pod("kube-system", _gated_pod("sys", owner))
        assert refused.value.status == 403, refused.value
        assert "writes no pods or Services in namespace 'kube-system'" in str(refused.value.body)
        with pytest.raises(ApiException) as refused:
            custom.create_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, job)
        assert refused.value.status == 403, refused.value
        assert "HulkTrainingJobs do not run in namespace 'kube-system'" in str(
            refused.value.body
        ), refused.value.body
        # ... but a job's headless Service orphaned by `kubectl delete --cascade=orphan`
        # (no ownerReferences at all) is adopted again, as kube.ensure_service does and
        # docs/operator.md promises (before, refused: a review); nothing that merely looks
        # like one is
        controller = {**owner, "controller": True, "blockOwnerDeletion": True}
        label = {"hulk.dev/job": owner["name"]}

        def orphan(name: str, **meta: Any) -> str:
            core.create_namespaced_service(namespace, {
                "metadata": {"name": name, "labels": label, **meta},
                "spec": {"clusterIP": "None", "selector": label,
                         "ports": [{"name": "master", "port": 29500}]},
            })  # fmt: skip
            return name

        def adopt(name: str, refs: list[dict[str, Any]], **more: Any) -> int:
            patch = {"metadata": {"ownerReferences": refs, **more},
                     "spec": {"ports": [{"name": "master", "port": 29501}]}}  # fmt: skip
            return _http_status(lambda: ops.patch_namespaced_service(
                name, namespace, patch, _content_type="application/merge-patch+json"))  # fmt: skip

        assert adopt(orphan("left"), [controller]) == 200
        left: Any = core.read_namespaced_service("left", namespace)
        assert [o.uid for o in left.metadata.owner_references] == [owner["uid"]]
        assert left.spec.ports[0].port == 29501
        other: Any = core.create_namespaced_config_map(namespace, {"metadata": {"name": "o"}})
        others = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                  "uid": other.metadata.uid}  # fmt: skip
        assert adopt(orphan("owned", ownerReferences=[others]), [controller]) == 403
        assert adopt(orphan("bare"), [owner]) == 403  # not as controller
        assert adopt("bare", [controller, others]) == 403  # nor beside another owner
        assert adopt("bare", [controller], labels={"hulk.dev/job": "else"}) == 403
        assert adopt("bare", [{**controller, "kind": "Deployment"}]) == 403
        core.create_namespaced_service(namespace, {
            "metadata": {"name": "unlabelled"},
            "spec": {"clusterIP": "None", "selector": label, "ports": [{"port": 1}]},
        })  # fmt: skip
        assert adopt("unlabelled", [controller]) == 403
        core.create_namespaced_service(namespace, {
            "metadata": {"name": "clusterip", "labels": label},
            "spec": {"selector": label, "ports": [{"port": 1}]},
        })  # fmt: skip
        assert adopt("clusterip", [controller]) == 403  # not headless: not as Hulk makes them
        assert (
            _pod_write(op, admin, namespace, "adopt", controller, name="theirs") == 403
        )  # pods: never
    core.delete_namespaced_pod("theirs", namespace, grace_period_seconds=0)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owner")


def test_operator_pod_passes_restricted_pod_security(
    installed: dict[str, Any], sandbox: Sandbox
) -> None:
    """The operator's pod is admitted where Pod Security enforces "restricted"; the probe's
    is not (hostNetwork, hostPort), which is why its namespace must allow "privileged"."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(installed["api"])
    ns = f"psa-{uuid.uuid4().hex[:8]}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels=labels)))
    try:
        templates = {
            o["kind"]: o["spec"]["template"]
            for o in installed["objs"]
            if o["kind"] in ("Deployment", "DaemonSet")
        }

        def pod(kind: str) -> dict[str, Any]:
            template = templates[kind]
            spec = dict(template["spec"], serviceAccountName="default")
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "spec": spec,
                "metadata": {"name": kind.lower(), "labels": template["metadata"]["labels"]},
            }

        deadline = time.monotonic() + 60
        while True:  # the ServiceAccount admission plugin needs "default" to exist
            try:
                core.read_namespaced_service_account("default", ns)
                break
            except ApiException:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        core.create_namespaced_pod(ns, pod("Deployment"), dry_run="All")
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(ns, pod("DaemonSet"), dry_run="All")
        assert err.value.status == 403 and "hostNetwork" in str(err.value.body)
    finally:
        core.delete_namespace(ns)


def test_helm_install_upgrade_uninstall(sandbox: Sandbox, chart_tools: dict[str, str]) -> None:
    """The real Helm flow on the sandbox: install (CRDs templated, the peering hook after
    them), upgrade, uninstall (CRDs kept). CRDs that other tests already created are first
    marked for adoption by the release, as charts/hulk/README.md tells users to do."""
    import subprocess

    from kubernetes import client

    chart = str(Path(__file__).resolve().parents[2] / "charts" / "hulk")
    with sandbox.api_client() as api, own_namespace(api, "helm") as namespace:
        release = f"hulk-{namespace.removeprefix('helm-')}"
        helm = [chart_tools["HELM"], "--kubeconfig", str(sandbox.kubeconfig), "-n", namespace]

        def run(*args: str) -> str:
            few = ["--set", OTHER_FEW_NODES] if args[0] in ("install", "upgrade") else []
            proc = subprocess.run([*helm, *args, *few], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:  # say what Helm was waiting for
                pods: Any = client.CoreV1Api(api).list_namespaced_pod(namespace).items
                states = [(p.metadata.name, p.spec.node_name, p.status.phase) for p in pods]
                pytest.fail(f"helm {args[0]}: {proc.stderr}\npods: {states}")
            return proc.stdout

        ext: Any = client.ApiextensionsV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        present = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        crds = [
            "hulktrainingjobs.hulk.dev",
            "nodelatencies.hulk.dev",
            "clusterkopfpeerings.kopf.dev",
            "kopfpeerings.kopf.dev",
        ]
        adopt = {
            "metadata": {
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {
                    "meta.helm.sh/release-name": release,
                    "meta.helm.sh/release-namespace": namespace,
                },
            }
        }
        for name in crds:
            if name in present:
                ext.patch_custom_resource_definition(name, adopt)
        try:
            run("install", release, chart, "--wait", "--timeout", "180s")
            peering = custom.get_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", release
            )
            assert peering["metadata"]["name"] == release
            peering["status"] = {"a-replica": {"priority": 1, "lastseen": "x"}}  # keep-alives
            custom.patch_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", release, peering
            )
            run(
                "upgrade",
                release,
                chart,
                "--set",
                "probe.interval=20",
                "--wait",
                "--timeout",
                "180s",
            )
            ds: Any = client.AppsV1Api(api).read_namespaced_daemon_set(
                f"{release}-probe", namespace
            )
            env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env}
            assert env["HULK_PROBE_INTERVAL"] == "20"
            # the peering object and its keep-alives outlive the upgrade (before, a hook
            # recreated it, and a standby replica woke beside the leader)
            after = custom.get_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", release
            )
            assert after["metadata"]["uid"] == peering["metadata"]["uid"]
            assert "a-replica" in (after.get("status") or {})
            assert "deployed" in run("status", release)
            run("uninstall", release, "--wait", "--timeout", "180s")
            left = {c.metadata.name for c in ext.list_custom_resource_definition().items}
            assert set(crds) <= left  # helm.sh/resource-policy: keep
            roles: Any = client.RbacAuthorizationV1Api(api).list_cluster_role().items
            assert not [r for r in roles if r.metadata.name.startswith(release)]
        finally:
            subprocess.run([*helm, "uninstall", release], capture_output=True, timeout=300)
            try:
                custom.delete_cluster_custom_object(
                    "kopf.dev", "v1", "clusterkopfpeerings", release
                )
            except client.exceptions.ApiException:
                pass
            for name in crds:
                if name.endswith(".kopf.dev") and name not in present:
                    ext.delete_custom_resource_definition(name)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                c.metadata.name.endswith(".kopf.dev") and c.metadata.name not in present
                for c in ext.list_custom_resource_definition().items
            ):
                time.sleep(0.2)


def _token_kubeconfig(api: Any, sandbox: Sandbox, sa: str, namespace: str, path: Path) -> str:
    """A kubeconfig of the sandbox that authenticates as ServiceAccount ``sa`` (a token from
    the TokenRequest API, as a pod's projected token), not as the admin."""
    import yaml
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = client.CoreV1Api(api).create_namespaced_service_account_token(sa, namespace, request)
    config = yaml.safe_load(Path(sandbox.kubeconfig).read_text())
    config["users"] = [{"name": "admin", "user": {"token": token.status.token}}]
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_a_namespaced_operator_runs_a_job_with_the_charts_rbac_alone(
    sandbox: Sandbox,
    render: Render,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """operator.watchNamespaces: the chart's ClusterRole, Role and bindings, applied to the
    sandbox, are all `hulk operator -n NS` needs: run under the ServiceAccount's own token
    (not as admin, as the operator's other tests run), with peering, it creates its
    KopfPeering, plans a job and creates its stage pods, makes one again after it was
    deleted, deletes them when the job is suspended, and nothing it calls is refused, with
    the chart's operator.writePolicy in force. The ServiceAccount may not write in a
    namespace it does not serve."""
    import logging

    from kubernetes import client

    from hulk_operator import GROUP, PLURAL, VERSION
    from hulk_operator.config import OperatorConfig
    from hulk_operator.runner import OperatorThread

    caplog.set_level(logging.WARNING)
    with (
        sandbox.api_client() as api,
        own_namespace(api, "chartns") as home,
        own_namespace(api, "team") as team,
    ):
        release = f"hulk-{home.removeprefix('chartns-')}"
        objs = render(
            namespace=home, release=release, set_values=[f"operator.watchNamespaces={{{team}}}"]
        )
        applier = Applier(api, tmp_path / "discovery.json")
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        preexisting = {c["metadata"]["name"] for c in crds if applier.exists(c)}
        custom: Any = client.CustomObjectsApi(api)
        core: Any = client.CoreV1Api(api)
        try:
            applier.apply_crds(crds)
            rbac = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
            rbac += ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for obj in objs:
                if obj["kind"] in rbac and obj["metadata"]["name"].startswith(release):
                    applier.apply(obj)
            sa = f"{release}-operator"
            user = f"system:serviceaccount:{home}:{sa}"
            assert not _review(api, user, "create", "", "pods", "", namespace=home)
            assert _review(api, user, "create", "", "pods", "", namespace=team)
            assert _review(api, user, "create", "", "events", "", namespace=home)  # on Nodes
            kubeconfig = _token_kubeconfig(api, sandbox, sa, home, tmp_path / "kubeconfig")
            with sandbox.api_client() as as_operator:
                as_operator.set_default_header("Impersonate-User", user)
                _wait_denied(lambda: _pod_write(as_operator, api, team, "create", owner=None))
            # the paper's first job, shrunk to a model that fits on a few servers
            job = yaml_docs(EXAMPLES / "paper-jobs.yaml")[0]
            job["metadata"] = {"name": "bert"}
            job["spec"]["model"] = {"preset": "bert-large"}
            # made in a namespace it does not watch: created, with a warning that says so
            # (operator.unwatchedWarning; before, such a job got no word at all: a trial)
            said = f"plans HulkTrainingJobs only in namespace(s) {team} (operator.watchNamespaces)"
            _warned_unwatched(custom, home, job, said)
            op = OperatorThread(
                kubeconfig,
                namespaces=[team],
                config=OperatorConfig(batch_window_s=0.3),
                standalone=False,
                peering_name=release,
            ).start()
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, team, PLURAL, job)
                deadline = time.monotonic() + 90
                phase = None
                while time.monotonic() < deadline and phase != "Running":
                    got = custom.get_namespaced_custom_object(GROUP, VERSION, team, PLURAL, "bert")
                    phase = (got.get("status") or {}).get("phase")
                    time.sleep(0.5)
                assert phase == "Running", got.get("status")
                pods = core.list_namespaced_pod(team, label_selector="hulk.dev/job=bert").items
                assert pods and all(p.spec.node_name for p in pods)
                # a stage pod deleted by hand is made again (create, the Service read) ...
                lost = pods[0].metadata
                core.delete_namespaced_pod(lost.name, team, grace_period_seconds=0)
                until = time.monotonic() + 60
                while time.monotonic() < until:
                    again = [
                        p
                        for p in core.list_namespaced_pod(team).items
                        if p.metadata.name == lost.name and p.metadata.uid != lost.uid
                    ]
                    if again and again[0].spec.node_name:
                        break
                    time.sleep(0.5)
                assert again and again[0].spec.node_name, "the deleted stage pod was not remade"
                # ... and suspending the job deletes its pods (the operator's delete)
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, team, PLURAL, "bert", {"spec": {"suspend": True}}
                )
                until = time.monotonic() + 60
                while (
                    time.monotonic() < until
                    and core.list_namespaced_pod(team, label_selector="hulk.dev/job=bert").items
                ):
                    time.sleep(0.5)
                assert not core.list_namespaced_pod(team, label_selector="hulk.dev/job=bert").items
                peering = custom.get_namespaced_custom_object(
                    "kopf.dev", "v1", team, "kopfpeerings", release
                )  # created by the operator itself: the Role's create, and its keep-alive
                # written there: the Role's patch, bound to that name (resourceNames)
                assert peering.get("status"), peering
                custom.delete_namespaced_custom_object(GROUP, VERSION, team, PLURAL, "bert")
                until = time.monotonic() + 60
                while (
                    time.monotonic() < until
                    and custom.list_namespaced_custom_object(GROUP, VERSION, team, PLURAL)["items"]
                ):
                    time.sleep(0.5)
            finally:
                op.stop()
            refused = [
                r.getMessage()
                for r in caplog.records
                if any(w in r.getMessage() for w in ("403", "orbidden", "Not enough permissions"))
            ]
            assert refused == []
        finally:
            applier.clean_up(home, keep_crds=preexisting)


def _warned_unwatched(custom: Any, namespace: str, job: dict[str, Any], said: str) -> None:
    """Creates ``job`` in ``namespace`` until the API server's answer warns ``said`` (the
    policy is in force a moment after it is made), deleting it each time."""
    from hulk_operator import GROUP, PLURAL, VERSION

    deadline = time.monotonic() + 30
    warnings = ""
    while time.monotonic() < deadline:
        _, _, headers = custom.create_namespaced_custom_object_with_http_info(
            GROUP, VERSION, namespace, PLURAL, job
        )
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"]
        )
        warnings = str(headers.get("Warning") or "")
        if said in warnings:
            return
        time.sleep(0.5)
    raise AssertionError(f"no warning {said!r}: {warnings!r}")


def test_a_teams_edit_and_view_roles_reach_its_jobs(installed: dict[str, Any]) -> None:
    """Before, a user with Kubernetes' own `edit` role in a namespace could neither create
    nor read HulkTrainingJobs there: the admin wrote RBAC by hand (a user trial)."""
    from kubernetes import client

    api, namespace = installed["api"], installed["namespace"]
    rbac = client.RbacAuthorizationV1Api(api)
    for user, role in (("alice", "edit"), ("bob", "view")):
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "User", "name": user,
                          "apiGroup": "rbac.authorization.k8s.io"}],
        })  # fmt: skip

    def may(user: str, verb: str, resource: str = "hulktrainingjobs") -> bool:
        attrs = client.V1ResourceAttributes(
            verb=verb, group="hulk.dev", resource=resource, namespace=namespace
        )
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attrs)
        )
        out: Any = client.AuthorizationV1Api(api).create_subject_access_review(review)
        return bool(out.status.allowed)

    # the controller manager aggregates the rules into edit and view within seconds
    deadline = time.monotonic() + 30
    while not (may("alice", "create") and may("bob", "list")):
        assert time.monotonic() < deadline, "edit and view never got the rules"
        time.sleep(0.5)
    assert may("alice", "delete") and may("alice", "patch")
    assert may("bob", "get") and not may("bob", "create") and not may("bob", "delete")
    assert not may("carol", "get")  # no binding: nothing
