"""Installing the CustomResourceDefinitions the operator needs: ``HulkTrainingJob``
(``crds/hulktrainingjobs.hulk.dev.yaml``), the probe's ``NodeLatency`` when its file is
there, and kopf's peering resources (for leader election) and peering object."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from hulk_operator.applied import FIELD_MANAGER, as_applied
from hulk_operator.inventory import named, served
from hulk_planner.errors import InvalidRequest

HERE = Path(__file__).resolve().parent
CRD_DIR = HERE / "crds"  # (copies of the repository's crds/: charts/sync-crds.sh)
JOB_CRD = CRD_DIR / "hulktrainingjobs.hulk.dev.yaml"
LATENCY_CRD = CRD_DIR / "nodelatencies.hulk.dev.yaml"
PEERING_CRDS = HERE / "kopf-peering.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def apply_crd(api: client.ApiClient, crd: dict[str, Any]) -> None:
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    # as `kubectl apply` makes it: a later `kubectl apply -f crds/` (examples/paper-jobs.yaml
    # says to) patches it from this base, without kubectl's warning (a review)
    crd = as_applied(crd)
    try:
        ext.create_custom_resource_definition(crd, field_manager=FIELD_MANAGER)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise
        live = ext.read_custom_resource_definition(name)
        assert live.metadata is not None
        crd = {
            **crd,
            "metadata": {**crd["metadata"], "resourceVersion": live.metadata.resource_version},
        }
        ext.replace_custom_resource_definition(name, crd)  # type: ignore[arg-type]


def wait_established(api: client.ApiClient, names: list[str], timeout: float = 60.0) -> None:
    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = (crd.status and crd.status.conditions) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)


def wait_served(api: client.ApiClient, crds: list[dict[str, Any]], timeout: float = 60.0) -> None:
    """Waits until the API server's watch cache serves each resource: right after a CRD is
    Established, lists from the cache (and so a watch, e.g. kopf's) answer 429 "storage is
    (re)initializing" for a moment, and kopf then retries with a backoff of seconds."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        plural = spec["names"]["plural"]
        listing = functools.partial(
            custom.list_cluster_custom_object, spec["group"], version, plural, limit=1,
            resource_version="0",
        )  # fmt: skip
        _until_listed(listing, (404, 429, 503), deadline)


def _until_listed(listing: Any, retry: tuple[int, ...], deadline: float) -> None:
    """Calls ``listing`` until it answers: an ``ApiException`` with a status in ``retry`` is
    tried again every 0.1 s until ``deadline`` (``time.monotonic``), then raised, as any
    other exception is at once."""
    while True:
        try:
            listing()
            return
        except ApiException as exc:
            if exc.status not in retry or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# a list answered from the API server's watch cache, once it is ready; (connect, read) limits
_CACHED: Any = {"limit": 1, "resource_version": "0", "_request_timeout": (5, 10)}


def wait_storage(
    api: client.ApiClient, namespaces: Sequence[str], timeout: float = 30.0
) -> tuple[float, bool]:
    """Waits, at most ``timeout`` s, until the API server serves HulkTrainingJobs (in the
    first namespace of ``namespaces`` that is a name, not a pattern, else in every one) and
    NodeLatency objects from its watch cache. CRDs applied a moment before the operator
    started (``helm install``, ``kubectl apply`` then ``hulk operator``) had kopf's first
    list, a consistent read, refused with 429 "storage is (re)initializing" while the cache
    filled, logged as an ERROR before it retried (a user trial); a list at resourceVersion
    0 is answered once the cache is ready, and a 429 or 503 here is tried again. Returns
    the seconds waited and whether both were served; any other answer (none installed,
    forbidden, no answer in 10 s) ends the wait: kopf's lists say it."""
    custom = client.CustomObjectsApi(api)
    names = [n for n in namespaces if named(n)]
    group, version = "hulk.dev", "v1alpha1"

    def jobs() -> Any:
        if names:
            return custom.list_namespaced_custom_object(
                group, version, names[0], "hulktrainingjobs", **_CACHED
            )
        return custom.list_cluster_custom_object(group, version, "hulktrainingjobs", **_CACHED)

    def latencies() -> Any:
        return custom.list_cluster_custom_object(group, version, "nodelatencies", **_CACHED)

    start, served = time.monotonic(), True
    for listing in (jobs, latencies):
        try:
            _until_listed(listing, (429, 503), start + timeout)
        except ApiException as exc:
            served = served and exc.status not in (429, 503)  # (out of time; else: not ours)
        except (HTTPError, OSError):  # (unreachable, say: kopf's watches retry, tell it)
            served = False
    return time.monotonic() - start, served


def install(api: client.ApiClient, *, peering: bool = True) -> list[str]:
    """Applies the CRDs and waits until they are served; returns their names."""
    paths = [JOB_CRD] + ([LATENCY_CRD] if LATENCY_CRD.exists() else [])
    paths += [PEERING_CRDS] if peering else []
    docs = [doc for path in paths for doc in documents(path)]
    for doc in docs:
        apply_crd(api, doc)
    names = [doc["metadata"]["name"] for doc in docs]
    wait_established(api, names)
    wait_served(api, docs)
    return names


PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
log = logging.getLogger(__name__)


def jobs_served(
    api: client.ApiClient, group: str = "hulk.dev", version: str = "v1alpha1"
) -> bool | None:
    """Whether the API server serves ``hulktrainingjobs`` (its CRD is installed); a missing
    CRD is logged as one warning with the ways to install it (kopf only says "unresolved
    resources"). None when discovery itself fails."""
    try:
        found = client.CustomObjectsApi(api).get_api_resources(group, version)
    except ApiException as exc:
        if exc.status != 404:
            return None
        found = None
    if found is not None and any(r.name == "hulktrainingjobs" for r in found.resources):
        return True
    log.warning(
        "the HulkTrainingJob CRD is not installed (%s/%s is not served): kubectl apply -f "
        "%s, helm install with crds.enabled=true, or hulk operator --install-crds; jobs are "
        "served once it exists",
        group, version, f"crds/{JOB_CRD.name}",
    )  # fmt: skip
    return False


def ensure_peering(
    api: client.ApiClient, name: str, *, namespaces: Sequence[str] = ()
) -> list[str]:
    """Creates kopf's peering object ``name`` where it is missing, so that an operator run
    with ``--peering NAME`` does not stay paused (kopf starts paused and waits, silently,
    until the object exists): a ``ClusterKopfPeering`` when the operator serves every
    namespace (no ``namespaces``), else a ``KopfPeering`` in each namespace named exactly
    and in each existing one a glob matches (one made later is not known yet: a warning
    says to make it there by hand). Idempotent; returns what
    it created. A missing peering CRD is an ``InvalidRequest`` naming the fixes: the
    operator would otherwise run paused for ever."""
    custom = client.CustomObjectsApi(api)
    made: list[str] = []
    if not namespaces:
        where: list[str | None] = [None]
    else:
        where = [ns for ns in namespaces if named(ns)]
        globs = sorted(set(namespaces) - {w for w in where if w})
        if globs:
            where += [ns for ns in _namespaces(api, globs, name) if ns not in where]
            log.warning(
                "kopf peering %r: a namespace made later that %s matches pauses this operator "
                "until its KopfPeering %r is made there too (kopf's peering; or run "
                "--standalone)",
                name,
                " or ".join(map(repr, globs)),
                name,
            )
    for ns in where:
        kind = "ClusterKopfPeering" if ns is None else "KopfPeering"
        plural = f"{kind.lower()}s"
        body = {
            "apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}",
            "kind": kind,
            "metadata": {"name": name, **({"namespace": ns} if ns else {})},
        }
        try:  # read first: with RBAC lacking ``create``, creating an existing one is a 403
            if ns is None:
                custom.get_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, plural, name)
            else:
                custom.get_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, ns, plural, name
                )
            continue  # it exists: kopf will use it
        except ApiException as exc:
            if exc.status != 404:
                raise
        try:
            if ns is None:
                custom.create_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, plural, body)
            else:
                custom.create_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, ns, plural, body
                )
        except ApiException as exc:
            if exc.status == 409:  # made meanwhile (another replica)
                continue
            if exc.status == 403:
                log.warning("kopf peering %r: not allowed to create its %s (RBAC: create on "
                            "%s): create it by hand", name, kind, plural)  # fmt: skip
                continue
            if exc.status == 404 and ns is not None and _missing_kind(exc) == "namespaces":
                log.warning("kopf peering %r: namespace %r not found", name, ns)
                continue
            if exc.status == 404:  # no such resource: the CRD is not installed
                raise InvalidRequest(
                    "--peering",
                    f"kopf peering {name!r} needs the {kind} CRD, which is not installed "
                    "(kopf would stay paused until it and the object exist)",
                    f"run with --install-crds, apply {PEERING_CRDS.name} "
                    "(kubectl apply --server-side -f hulk_operator/kopf-peering.yaml), or run "
                    "--standalone (a single replica)",
                ) from None
            raise
        made.append(f"{kind} {ns}/{name}" if ns else f"{kind} {name}")
        log.info("kopf peering: created %s %r%s", kind, name, f" in {ns}" if ns else "")
    return made


def _namespaces(api: client.ApiClient, globs: Sequence[str], peering: str) -> list[str]:
    """The namespaces that exist now and that ``globs`` serve (as kopf matches them; before,
    none got its KopfPeering, and kopf sat paused with no word after the start)."""
    try:
        found = client.CoreV1Api(api).list_namespace().items
    except ApiException as exc:
        log.warning("kopf peering %r: cannot list the namespaces (%s %s): create its "
                    "KopfPeering in those of %s by hand", peering, exc.status, exc.reason,
                    " or ".join(map(repr, globs)))  # fmt: skip
        return []
    names = [str(n.metadata.name) for n in found if n.metadata is not None]
    return sorted(n for n in names if served(n, globs))


def overlapping_peers(
    api: client.ApiClient, name: str, *, namespaces: Sequence[str] = (), now: float | None = None
) -> list[str]:
    """Live operators of the other scope under peering ``name``: kopf keeps the peering of
    an operator serving every namespace (``ClusterKopfPeering``) apart from that of one
    serving named namespaces (``KopfPeering``), so neither pauses for the other, and both
    act on the same jobs. Each as ``"<kind> [<namespace>/]<name>: <identity>"``; advisory:
    a read that fails or is refused (RBAC) finds nothing."""
    custom = client.CustomObjectsApi(api)
    found: list[Any]
    try:
        if namespaces:
            found = [custom.get_cluster_custom_object(
                PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings", name)]  # fmt: skip
        else:
            listed: Any = custom.list_cluster_custom_object(
                PEERING_GROUP, PEERING_VERSION, "kopfpeerings"
            )
            found = [o for o in listed.get("items", []) if o["metadata"]["name"] == name]
    except Exception:  # (advisory)
        return []
    return _live(found, name, now)


def live_peers(
    api: client.ApiClient, name: str, *, namespaces: Sequence[str] = (), now: float | None = None
) -> list[str]:
    """Live operators under peering ``name`` of either scope (the ``ClusterKopfPeering``,
    the ``KopfPeering`` of ``namespaces``, or of every namespace): for a ``--standalone``
    operator, which none of them pauses for, nor it for them. Advisory, as
    :func:`overlapping_peers`."""
    custom = client.CustomObjectsApi(api)
    found: list[Any] = []
    try:
        found.append(custom.get_cluster_custom_object(
            PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings", name))  # fmt: skip
    except Exception:  # (none, or not readable: advisory)
        pass
    try:
        listed: Any = custom.list_cluster_custom_object(
            PEERING_GROUP, PEERING_VERSION, "kopfpeerings"
        )
        found += [
            o
            for o in listed.get("items", [])
            if o["metadata"]["name"] == name
            and (not namespaces or o["metadata"].get("namespace") in namespaces)
        ]
    except Exception:
        pass
    return _live(found, name, now)


def _live(found: Sequence[Any], name: str, now: float | None) -> list[str]:
    now = time.time() if now is None else now
    out = []
    for obj in found:
        ns = obj["metadata"].get("namespace")
        where = f"KopfPeering {ns}/{name}" if ns else f"ClusterKopfPeering {name}"
        for who, peer in sorted((obj.get("status") or {}).items()):
            if isinstance(peer, dict) and _alive(peer, now):
                out.append(f"{where}: {who}")
    return out


def _alive(peer: dict[str, Any], now: float) -> bool:
    """Whether a kopf peering record (``lastseen``, ``lifetime`` seconds) is still live."""
    import datetime

    try:
        seen = datetime.datetime.fromisoformat(str(peer["lastseen"]))
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=datetime.UTC)
        return seen.timestamp() + float(peer.get("lifetime", 60)) > now
    except (KeyError, TypeError, ValueError):
        return False


def _missing_kind(exc: ApiException) -> str:
    """What a 404 says is missing: the Status body's ``details.kind`` ("namespaces" for a
    namespace that does not exist); "" where there is no Status (a resource the API server
    does not serve answers "404 page not found": its CRD is not installed)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return ""
    details = body.get("details") if isinstance(body, dict) else None
    return str(details.get("kind") or "") if isinstance(details, dict) else ""
