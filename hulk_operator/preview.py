"""A live cluster as the operator sees it, for ``hulk plan --kubeconfig`` (read-only).

- :func:`read_cluster`: one read of Nodes, NodeLatency measurements, HulkTrainingJobs and
  pods, turned into the operator's own ``Snapshot``: servers (``inventory``), measured
  links, jobs as ``JobEntry`` (``entries``: their constraints included), the servers that
  jobs' plans and stage pods hold, and the GPUs other pods request.
- :func:`preview_plan`: the pending jobs (or the manifests given) planned by the operator's
  own ``plan_pending``: the same constraint groups, priorities, free servers and fallback
  latencies, so the preview is the plan the operator would make now. A manifest of a
  running job that would leave its plan standing (``edits.plan_stands``: the spec its pods
  run, or an edit of ``priority``...) shows the plan its pods run, as applying it would.
- :func:`cluster_from_kubeconfig`: the usable servers as a planner ``Cluster`` (with
  ``free_only``, as the operator offers them: not held, less other pods' GPUs).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from hulk_operator import GROUP, PLURAL, VERSION, edits, kube
from hulk_operator import status as st
from hulk_operator.entries import JobEntry, Key, object_entry
from hulk_operator.errors import PODS_FORBIDDEN
from hulk_operator.fit import fits_nowhere
from hulk_operator.inventory import Usage, counted_until, node_info, other_pods, still_counted
from hulk_operator.latencies import (
    build_cluster,
    node_regions,
    read_latencies,
    server_regions,
    stale_probes,
    used_words,
    with_regions,
)
from hulk_operator.manifests import (
    owner_job,
    replaced_env,
    replaced_labels,
    replaced_names,
    stage_job,
)
from hulk_operator.quotas import (
    Bound,
    PodFacts,
    Scope,
    gpu_limit,
    gpu_minimum,
    limit_bounds,
    limit_defaults,
    live_facts,
    quota_left,
    quota_scopes,
    quota_usage,
    scoped_counts,
    service_left,
    summed,
)
from hulk_operator.rounds import BASELINES, plan_pending, planner_names
from hulk_operator.snapshot import Snapshot, held_servers
from hulk_planner.cli import LATENCY_DEFAULTS
from hulk_planner.errors import InvalidRequest, NoFeasiblePlan, NothingToPlan, one_or_all
from hulk_planner.model import Cluster, Job, JobPlan, Plan, Server, Unplaced
from hulk_probe.kube import said as api_said

DEFAULT_MAX_AGE_S = LATENCY_DEFAULTS["max_age_s"]


@dataclass(frozen=True)
class Preview:
    cluster: Cluster  # every server offered to some pending job
    jobs: list[Job]  # the pending jobs, named as in ``plan``
    plan: Plan
    # baseline -> placed job -> its predicted step time, planned as the operator plans
    # them (each job's group on the servers it may use); empty unless asked for
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # for the user, a line each
    # baseline -> placed job it leaves unplaced -> why (as ``plan``'s own ``unplaced``)
    baselines_why: dict[str, dict[str, str]] = field(default_factory=dict)
    seconds: float | None = None  # how long planning took (the baselines included)


READ_TIMEOUT_S = 60.0  # each request of a preview: a server that never answers is told


def read_cluster(
    path: str, max_age_s: float = DEFAULT_MAX_AGE_S, notes: list[str] | None = None
) -> Snapshot:
    """The cluster now, as the operator's snapshot (every job, pending or not); ``notes``
    gets what the reader should know of it (probes that stopped publishing). An API
    server that cannot be reached or refuses a read raises ``InvalidRequest``."""
    return _read(path, max_age_s, notes=notes)[0]


def _read(
    path: str,
    max_age_s: float,
    namespaces: Sequence[str] = (),
    notes: list[str] | None = None,
) -> tuple[Snapshot, dict[Key, Mapping[str, Any]], bool]:
    """:func:`read_cluster`, the HulkTrainingJob objects by key, and whether the
    PriorityClasses could be listed (a tenant's kubeconfig may not). Where the namespaced
    objects (jobs, pods, quotas, LimitRanges, Services) cannot be listed in every namespace,
    those of ``namespaces`` are read instead, and ``notes`` says what that leaves unseen
    (before, a tenant's kubeconfig, allowed its own namespace, previewed nothing)."""
    with kube.make_client(path, timeout_s=READ_TIMEOUT_S) as api:
        try:
            nodes = {i.name: i for i in (node_info(n) for n in kube.list_nodes(api))}
            items = kube.list_objects(api, GROUP, VERSION, "nodelatencies", page=kube.LATENCY_PAGE)
            latencies = read_latencies(items, max_age_s)
            if notes is not None and (said := stale_probes(items, max_age_s)):
                notes.append(said)  # (as the operator's log says)
            del items
            try:
                objects, pods, quota_items, limit_items, services = _namespaced(api, None)
            except ApiException as exc:
                if exc.status != 403 or not namespaces:
                    raise
                read = [_namespaced(api, ns) for ns in namespaces]
                objects, pods, quota_items, limit_items, services = (
                    [item for r in read for item in r[k]] for k in range(5)
                )
                if notes is not None:
                    notes.append(
                        f"this kubeconfig cannot list {_kind_of(exc)} in every namespace: read "
                        f"in namespace(s) {', '.join(namespaces)} alone, so servers that other "
                        "namespaces' jobs and pods hold are not seen, and the preview may place "
                        "on them (the operator does not)"
                    )
            default_class = kube.default_priority_class(api)
        except ApiException as exc:
            raise _refused(exc, path) from None
        except (HTTPError, OSError) as exc:
            raise InvalidRequest(
                "--kubeconfig",
                f"cannot reach the API server at {api.configuration.host} ({kube.reason_of(exc)})",
                "check that the cluster is up and the kubeconfig's server and context",
            ) from None
    entries = [(object_entry(o), o) for o in objects]
    jobs = {e.key: e for e, _ in entries}
    by_key: dict[Key, Mapping[str, Any]] = {e.key: o for e, o in entries}
    stage_pods: list[tuple[Key, str]] = []
    counted: dict[Key, list[tuple[PodFacts, dict[str, float]]]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node, job = spec.get("nodeName"), stage_job(meta)
        if job:
            key = (meta.get("namespace", ""), job)
            # as the operator credits them (``PodEntry.counts``): not once Succeeded or
            # Failed, or Terminating past its grace (before, every one: a review)
            status = pod.get("status") or {}
            if still_counted(status.get("phase"), counted_until(meta), time.time()):
                counted.setdefault(key, []).append((live_facts(spec, status), quota_usage(spec)))
            if node:
                stage_pods.append((key, node))
    others = other_pods(pods)
    quotas: dict[str, list[tuple[str, dict[str, float]]]] = {}
    scoped: dict[str, list[tuple[str, dict[str, float], tuple[Scope, ...]]]] = {}
    service_quotas: dict[str, list[tuple[str, str, float]]] = {}
    for q in quota_items:
        left, scopes, meta = quota_left(q), quota_scopes(q), q["metadata"]
        if left is not None and scopes:
            scoped.setdefault(meta["namespace"], []).append((meta["name"], left, scopes))
        elif left is not None:
            quotas.setdefault(meta["namespace"], []).append((meta["name"], left))
        room = service_left(q)
        if room is not None:
            service_quotas.setdefault(meta["namespace"], []).append((meta["name"], *room))
    with_service = frozenset(
        (str(m.get("namespace")), job)
        for m in (svc.get("metadata") or {} for svc in services)
        if (job := owner_job(m))
    )
    limits: dict[str, list[tuple[str, float]]] = {}
    minimums: dict[str, list[tuple[str, float]]] = {}
    defaults: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
    bounds: dict[str, list[Bound]] = {}
    for lr in limit_items:
        meta = lr["metadata"]
        bounds.setdefault(meta["namespace"], []).extend(limit_bounds(lr) or ())
        most, least, given = gpu_limit(lr), gpu_minimum(lr), limit_defaults(lr)
        if most is not None:
            limits.setdefault(meta["namespace"], []).append((meta["name"], most))
        if least is not None:
            minimums.setdefault(meta["namespace"], []).append((meta["name"], least))
        if given is not None:
            defaults.setdefault(meta["namespace"], []).append((meta["name"], *given))
    snap = Snapshot(
        nodes=nodes,
        latencies=with_regions(latencies, server_regions(nodes), node_regions(nodes)),
        jobs=jobs,
        held=held_servers(jobs, stage_pods),
        used=Usage(others),
        quotas=quotas,
        counted={k: summed(use for _, use in v) for k, v in counted.items()},
        counted_scoped=scoped_counts(counted, scoped),
        gpu_limits=limits,
        gpu_minimums=minimums,
        limit_defaults=defaults,
        limit_bounds=bounds,
        scoped_quotas=scoped,
        default_priority_class=default_class or "",
        service_quotas=service_quotas,
        services=with_service,
    )
    return snap, by_key, default_class is not None


def _namespaced(api: Any, namespace: str | None) -> tuple[list[dict[str, Any]], ...]:
    """The HulkTrainingJobs, running pods, ResourceQuotas, LimitRanges and job Services of
    ``namespace`` (None: of every namespace)."""
    objects = kube.list_objects(api, GROUP, VERSION, PLURAL, namespace)
    pods = kube.list_running_pods(api, namespace=namespace)
    quota_items, limit_items = kube.list_policies(api, namespace)
    return objects, pods, quota_items, limit_items, kube.list_job_services(api, namespace)


def _kind_of(exc: ApiException) -> str:
    """What a 403 refused to list, from the API server's message ("pods is forbidden: ...")."""
    said = api_said(exc)
    kind = said.split(" is forbidden", 1)[0] if " is forbidden" in said else ""
    return kind.split(".", 1)[0] or "its objects"


def _refused(exc: ApiException, path: str) -> InvalidRequest:
    """An API error as one line: what the server said, and what to change."""
    said = api_said(exc) or str(exc.reason or "")
    if exc.status == 401:
        fix = f"the credentials in {path} are not accepted: renew them"
    elif exc.status == 403:
        fix = (
            "hulk plan --kubeconfig lists nodes and nodelatencies, and pods, services, "
            "resourcequotas, limitranges and hulktrainingjobs in every namespace or at least "
            "in the jobs' own (-n): use credentials allowed to list them (the chart's "
            "operator ClusterRole)"
        )
    else:
        fix = "check the cluster's API server"
    return InvalidRequest("--kubeconfig", f"the API server answered {exc.status}: {said}", fix)


def _template_refused(path: str, e: JobEntry, manifest: Mapping[str, Any]) -> str | None:
    """Why the API server refuses the manifest's stage pods, as the operator's dry run of one
    finds it before planning (no image, an invalid container name, a volume mount with no
    volume), or None; None too where the check cannot run (no right to create pods, say):
    the operator's own check tells then (before, the preview planned such a job and the
    operator failed it at once: a trial)."""
    from hulk_operator.errors import rejected_template
    from hulk_operator.manifests import template_check_pod

    template = (manifest.get("spec") or {}).get("template") or {}
    uid = e.uid or "00000000-0000-0000-0000-000000000000"  # (not applied: none of its own)
    pod = template_check_pod(job=e.key[1], namespace=e.key[0], uid=uid, template=template)
    with kube.make_client(path, timeout_s=READ_TIMEOUT_S) as api:
        error = kube.dry_run_pod(api, pod)
    return rejected_template(error) if error is not None else None


def env_replaced(manifest: Mapping[str, Any], applied: Mapping[str, Any] | None) -> str | None:
    """What the operator's Warning ``EnvReplaced`` would say on applying ``manifest``, or
    None: its template sets none of the variables Hulk sets, or the same ones as the job
    applied (the operator tells a change of them alone; before, the preview of a running
    job's manifest, unchanged, said it would warn)."""
    template = (manifest.get("spec") or {}).get("template")
    names = replaced_names(template)
    before = ((applied or {}).get("spec") or {}).get("template")
    if not names or (applied is not None and names == replaced_names(before)):
        return None
    return replaced_env(template)


def labels_replaced(manifest: Mapping[str, Any], applied: Mapping[str, Any] | None) -> str | None:
    """What the operator's Warning ``LabelsReplaced`` would say on applying ``manifest``, or
    None: none of the labels Hulk sets, or the same as the job applied (told on a change)
    (before, the offline preview noted it and the live one did not: a user trial)."""
    name = str((manifest.get("metadata") or {}).get("name") or "")
    said = replaced_labels((manifest.get("spec") or {}).get("template"), name)
    before = ((applied or {}).get("spec") or {}).get("template")
    if said is None or (applied is not None and said == replaced_labels(before, name)):
        return None
    return said


def preview_plan(
    path: str,
    manifests: Sequence[Mapping[str, Any]] | None = None,
    namespace: str | None = None,
    *,
    plan_fn: Any,
    planner: str = "hulk",
    seed: int = 0,
    time_budget_s: float | None = None,
    same_region_ms: float = LATENCY_DEFAULTS["same_region_ms"],
    cross_region_ms: float = LATENCY_DEFAULTS["cross_region_ms"],
    baselines: bool = False,
    max_age_s: float = DEFAULT_MAX_AGE_S,
    sources: Sequence[str] | None = None,
    notes: list[str] | None = None,
) -> Preview:
    """What the operator would do now with the pending jobs (``namespace``'s only), or
    with ``manifests`` (HulkTrainingJobs, not applied) in their place; ``sources`` name
    the manifests in errors (``FILE (document N)``), each refused one told (before, the
    first alone, by its name alone: a user trial). ``notes`` (the Preview's) gets them as
    they come: where no job is placed (``NoFeasiblePlan``) they are there to tell too."""
    _check_namespaces(path, manifests, namespace)
    notes = [] if notes is None else notes
    own = (  # the jobs' namespaces: read alone where every namespace cannot be (a tenant's)
        sorted({object_entry(m, namespace).key[0] for m in manifests})
        if manifests is not None
        else [namespace]
        if namespace
        else []
    )
    snap, objects, classes_read = _read(path, max_age_s, own, notes)
    jobs = {k: e for k, e in snap.jobs.items() if not e.pending}
    # running jobs a manifest leaves be: entry, plan, baselines' step times at planning
    # and why those that could not place it could not
    standing: dict[Key, tuple[JobEntry, JobPlan, dict[str, float], dict[str, str]]] = {}
    refusals: dict[Key, str] = {}  # running jobs whose manifest the operator would refuse
    if manifests is not None:
        unnamed = [m for m in manifests if not (m.get("metadata") or {}).get("namespace")]
        if unnamed and not namespace:  # (the namespace decides its quotas: a trial)
            notes.append(
                f"{len(unnamed)} job(s) name no namespace: previewed in namespace 'default' "
                "(its ResourceQuotas and LimitRanges); give -n for the one you apply to"
            )
        errors: list[InvalidRequest] = []
        for i, m in enumerate(manifests):
            e = replace(object_entry(m, namespace), suspended=False)  # previewed as if resumed
            field = f"{sources[i]}: job {e.key[1]}" if sources else f"job {e.key[1]}"
            if e.job is None:
                errors.append(InvalidRequest(field, e.error or "invalid spec"))
                continue
            if (why := _template_refused(path, e, m)) is not None:
                errors.append(InvalidRequest(field, why, "fix the template, then apply it"))
                continue
            if (env := env_replaced(m, objects.get(e.key))) is not None:
                notes.append(f"job {e.key[1]}: the operator would warn (EnvReplaced): {env}")
            if (labels := labels_replaced(m, objects.get(e.key))) is not None:
                notes.append(f"job {e.key[1]}: the operator would warn (LabelsReplaced): {labels}")
            running = snap.jobs.get(e.key)
            kept = _stands(objects.get(e.key), running, m, e, snap)
            if running is not None and kept is not None:
                why, jp, compared_then, why_then = kept
                standing[e.key] = (e, jp, compared_then, why_then)
                notes.append(f"job {e.key[1]}: runs; applying this manifest, {why}: shown as "
                             "its pods run")  # fmt: skip
                by = str((objects[e.key].get("status") or {}).get("plan", {}).get("planner") or "")
                if by and by != planner:  # (before, the header's planner read as its own)
                    notes.append(
                        f"job {e.key[1]}: its plan is planner {by}'s, made when it was placed; "
                        f"--planner {planner} is not used for it"
                    )
                if e.regrow is not None:
                    notes.append(
                        f"job {e.key[1]}: spec.regrow: once it has run {e.regrow[1]:g} s, the "
                        "operator plans it afresh on its servers and the free ones and replaces "
                        f"its pods if that is {e.regrow[0]:g}x faster (not previewed)"
                    )
                continue
            if running is not None and running.plan_nodes and not running.deleting:
                # (as edits.refusal; before, told "its pods are replaced": a trial)
                if fits_nowhere(e, snap.nodes, snap.latencies.unreachable):
                    refusals[e.key] = (
                        f"runs on {len(running.plan_nodes)} server(s), and the operator "
                        "refuses this manifest as an edit (EditRefused): its pods run on, on "
                        "the spec they were made for"
                    )
                else:
                    notes.append(
                        f"job {e.key[1]}: runs on {len(running.plan_nodes)} server(s); applying "
                        "this manifest plans it again from scratch: its pods are replaced"
                    )
            jobs[e.key] = e
        if errors:
            raise one_or_all(errors)
    else:
        here = {k: e for k, e in snap.jobs.items() if namespace is None or k[0] == namespace}
        jobs |= {k: e for k, e in here.items() if e.pending}
        for (_, name), e in sorted(here.items()):
            if e.job is None and not (e.plan_nodes or e.deleting or e.phase == "Failed"):
                # (not pending: the operator will fail it; before, left out with nothing
                # said, a user trial)
                notes.append(
                    f"job {name}: not previewed: the operator refuses it (InvalidSpec): "
                    f"{e.error or 'invalid spec'}"
                )
    pending = [e for e in jobs.values() if e.pending]
    if not pending and not standing:
        if namespace and not _namespace_exists(path, namespace):  # (a typo read as empty)
            raise InvalidRequest(
                "--namespace",
                f"namespace {namespace!r} does not exist",
                "check its name: kubectl get namespaces",
            )
        where = f"namespace {namespace!r}" if namespace else "the cluster"
        raise NothingToPlan(
            f"{where} has no pending HulkTrainingJob (to preview one, apply it or give its "
            "manifest with --jobs FILE)" + "".join(f"; {n}" for n in notes)
        )
    snap = replace(snap, jobs=jobs)
    started = time.perf_counter()
    decisions = plan_pending(
        snap,
        plan_fn,
        planner=planner,
        same_region_ms=same_region_ms,
        cross_region_ms=cross_region_ms,
        budget_s=time_budget_s,
        seed=seed,
        baselines=baselines,
    )
    # (none planned, where the jobs shown all run: no time to tell; a CI run said 0.00 s)
    seconds = time.perf_counter() - started if pending else None
    shown = pending + [e for e, _, _, _ in standing.values()]
    names = {k: n for n, k in planner_names(shown).items()}  # <name>.<ns> if needed
    compared: dict[str, dict[str, float]] = {b: {} for b in BASELINES} if baselines else {}
    why_not: dict[str, dict[str, str]] = {}
    for e in pending:
        d = decisions[e.key]
        for base, t in d.baselines.items():
            if t is not None and d.job_plan is not None:
                compared.setdefault(base, {})[names[e.key]] = t
        for base, why in d.baselines_why.items() if d.job_plan is not None else ():
            why_not.setdefault(base, {})[names[e.key]] = why
    for k, (_, _, then, why_then) in standing.items() if baselines else ():
        for base, t in then.items():
            compared.setdefault(base, {})[names[k]] = t
        for base, why in why_then.items():
            why_not.setdefault(base, {})[names[k]] = why
    placed, unplaced = [], []
    for e in sorted(shown, key=lambda e: e.key):
        if e.key in standing:
            placed.append(replace(standing[e.key][1], name=names[e.key]))
            continue
        d = decisions[e.key]
        if d.job_plan is not None:
            placed.append(replace(d.job_plan, name=names[e.key]))
            if d.note:  # e.g. a quota made it smaller: as the operator says in Planned
                notes.append(f"job {names[e.key]}: {d.note}")
            if d.estimated:  # as the operator's LatencyEstimated condition says (before,
                # the preview did not tell a measured step time from an estimated one)
                notes.append(
                    f"job {names[e.key]}: {d.estimated} server pair(s) of its plan had no "
                    "fresh latency measurement; used "
                    f"{used_words(d.estimates, same_region_ms, cross_region_ms)}"
                )
        else:
            reason = d.reason
            if e.key in refusals:  # (the edit is refused: the job is not left unplaced)
                reason = f"{refusals[e.key]}; its reason as a new job: {reason}"
            unplaced.append(Unplaced(names[e.key], reason))
        unserved = manifests is None and unserved_note(objects.get(e.key), e.created, time.time())
        if unserved:
            notes.append(f"job {names[e.key]}: {unserved}")
        said = st.condition((objects.get(e.key) or {}).get("status") or {}, st.PLANNED) or {}
        if manifests is None and said.get("reason") == PODS_FORBIDDEN:
            notes.append(  # the operator's pause after refused pods is its own, not previewed
                f"job {names[e.key]}: the operator does not plan it now: {said.get('message')}"
            )
    by_class = {
        e.key[0]
        for e in shown
        for _, _, scopes in snap.scoped_quotas.get(e.key[0], ())
        if not e.pod_facts[1] and any(name == "PriorityClass" for name, _, _ in scopes)
    }
    if not classes_read and by_class:
        notes.append(
            f"cannot list PriorityClasses with this kubeconfig: the quotas of namespace(s) "
            f"{', '.join(sorted(by_class))} scoped by PriorityClass are read as if a template "
            "without priorityClassName had none (the operator reads the cluster's "
            "globalDefault class): the preview may differ"
        )
    # the servers any pending job may get (with its tolerations and requests, wherever its
    # selectors allow), and those the plans use: the cluster the plan is shown against
    found: dict[str, Server] = {}
    for e in pending:
        anywhere = replace(e, node_selector=(), allowed_regions=(), affinity=())
        found |= {i.name: i.server for i in snap.free(anywhere) if i.server is not None}
    for d in decisions.values():
        if d.cluster is not None and d.job_plan is not None:
            found |= {n: d.cluster.server(n) for n in d.job_plan.nodes if n not in found}
    for _, jp, _, _ in standing.values():
        found |= {n: s for n in jp.nodes if (s := snap.nodes[n].server) is not None}
    servers = [found[n] for n in sorted(found)]
    if not servers:  # nothing to show a plan against: say why each job got nothing
        raise NoFeasiblePlan("; ".join(f"{u.name}: {u.reason}" for u in unplaced), unplaced)
    cluster = build_cluster(servers, snap.latencies, same_region_ms=same_region_ms,
                            cross_region_ms=cross_region_ms, name="kubernetes")  # fmt: skip
    jobs_out = [replace(e.job, name=names[e.key]) for e in shown if e.job is not None]
    out = Plan(planner, tuple(placed), tuple(unplaced))
    return Preview(cluster, jobs_out, out, compared, notes, why_not, seconds)


UNSERVED_AFTER_S = 30.0  # the operator writes a job's status within seconds of its creation


def unserved_note(obj: Mapping[str, Any] | None, created: float, now: float) -> str | None:
    """Why a pending job with no status at all, ``UNSERVED_AFTER_S`` after its creation,
    may never run: no operator serves its namespace (before, the preview placed a job in
    namespace default that the demo's operator, serving hulk-demo, never saw: a trial)."""
    if obj is None or obj.get("status") or now - created < UNSERVED_AFTER_S:
        return None
    ns = (obj.get("metadata") or {}).get("namespace", "")
    age = now - created
    since = f"{age / 60:.0f} min" if age >= 90 else f"{age:.0f} s"
    return (
        f"no operator has written its status in the {since} since it was created: is one "
        f"running, and does it serve namespace {ns}? (hulk operator --namespace {ns} or "
        "--all-namespaces; the chart's operator.watchNamespaces)"
    )


def _stands(
    obj: Mapping[str, Any] | None,
    running: JobEntry | None,
    manifest: Mapping[str, Any],
    entry: JobEntry,
    snap: Snapshot,
) -> tuple[str, JobPlan, dict[str, float], dict[str, str]] | None:
    """For a manifest of a running job: why applying it would leave the job's plan standing,
    that plan, the baselines' step times when it was made and why those that could not
    place it could not (as its status records them); None if it would be planned again."""
    if obj is None or running is None or not running.plan_nodes or running.deleting:
        return None
    status = obj.get("status") or {}
    plan = status.get("plan")
    if not plan or running.phase in (st.PHASE_FAILED, st.SUCCEEDED):
        return None
    if any((i := snap.nodes.get(n)) is None or i.server is None for n in running.plan_nodes):
        return None  # a server gone: the operator re-plans the job anyway
    mine = replace(entry, plan_nodes=running.plan_nodes)
    why = edits.plan_stands(
        obj.get("spec"),
        manifest.get("spec"),
        plan,
        lambda: edits.servers_match(mine, snap.nodes),
        bool(st.exited_0(status, ())),  # (the pods the operator saw exit 0, recorded)
    )
    if why == edits.TEMPLATE_STANDS and not edits.pods_fit_again(mine, snap):
        return None  # (a server of the plan takes no new pod: planned as any edit)
    jp = st.job_plan_from_status(entry.key[1], status)
    if why is None or jp is None:
        return None
    then = {
        str(b.get("planner")): float(b["predictedIterationSeconds"])
        for b in status.get("baselines") or []
        if isinstance(b, Mapping) and isinstance(b.get("predictedIterationSeconds"), int | float)
    }
    why_not = {
        str(b.get("planner")): b["reason"]
        for b in status.get("baselines") or []
        if isinstance(b, Mapping) and isinstance(b.get("reason"), str)
    }
    return why, jp, then, why_not


def cluster_from_kubeconfig(
    path: str,
    *,
    same_region_ms: float = LATENCY_DEFAULTS["same_region_ms"],
    cross_region_ms: float = LATENCY_DEFAULTS["cross_region_ms"],
    max_age_s: float = DEFAULT_MAX_AGE_S,
    free_only: bool = False,
    snapshot: Snapshot | None = None,
) -> Cluster:
    """The cluster's usable GPU servers and links (of ``snapshot``, a ``read_cluster`` made
    already, if given); raises ``NoFeasiblePlan`` if none."""
    snap = snapshot if snapshot is not None else read_cluster(path, max_age_s)
    if free_only:
        anyone = JobEntry(("", ""), "", 0, None, None, frozenset(), None, False)
        servers = [i.server for i in snap.free(anyone) if i.server is not None]
    else:
        servers = [i.server for i in snap.nodes.values() if i.server is not None and i.offers()]
    if not servers:
        nodes = list(snap.nodes.values())[:5]
        skipped = "; ".join(f"{i.name}: {i.problem or i.sick() or 'held'}" for i in nodes)
        raise NoFeasiblePlan(f"the cluster has no usable GPU server ({skipped or 'no nodes'})")
    return build_cluster(servers, snap.latencies, same_region_ms=same_region_ms,
                         cross_region_ms=cross_region_ms, name="kubernetes")  # fmt: skip


def _check_namespaces(
    path: str, manifests: Sequence[Mapping[str, Any]] | None, namespace: str | None
) -> None:
    """The manifests' namespaces, as ``kubectl apply`` takes them: a ``metadata.namespace``
    that differs from ``-n`` is refused (kubectl refuses it too), and one that does not
    exist is an error (before, both were previewed as placed; a user trial)."""
    if not manifests:
        return
    spaces = set()
    for m in manifests:
        own = (m.get("metadata") or {}).get("namespace")
        name = (m.get("metadata") or {}).get("name")
        if namespace and own and own != namespace:
            raise InvalidRequest(
                f"job {name}: metadata.namespace",
                f"is {own!r}, and -n says {namespace!r}",
                "give one of them; kubectl apply refuses the mismatch too",
            )
        spaces.add(namespace or own or "default")
    for ns in sorted(spaces):
        if not _namespace_exists(path, ns):
            raise InvalidRequest(
                "--namespace" if namespace else "metadata.namespace",
                f"namespace {ns!r} does not exist",
                "check its name: kubectl get namespaces",
            )


def _namespace_exists(path: str, namespace: str) -> bool:
    """Whether ``namespace`` exists (True where it cannot be told: a tenant's kubeconfig
    may not read namespaces)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    with kube.make_client(path, timeout_s=READ_TIMEOUT_S) as api:
        try:
            client.CoreV1Api(api).read_namespace(namespace)
        except ApiException as exc:
            return exc.status != 404
        except Exception:
            return True
    return True
