"""A HulkTrainingJob as the operator keeps it (``JobEntry``), from its manifest and status.

Kopf-free, so that ``hulk plan --kubeconfig`` reads jobs exactly as the operator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hulk_operator import status as st
from hulk_operator.inventory import pod_requests
from hulk_operator.placement import JobEntry
from hulk_planner.errors import InvalidRequest
from hulk_planner.io import job_from_dict


def job_entry(
    namespace: str,
    name: str,
    uid: str,
    body: Mapping[str, Any],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> JobEntry:
    raw = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": name},
        "spec": dict(spec),
    }
    job, error = None, None
    try:
        job = job_from_dict(raw)
    except InvalidRequest as exc:
        error = str(exc)
    plan = st.job_plan_from_status(name, status)
    finished = status.get("phase") == st.SUCCEEDED
    tmpl_spec = _at(spec, "template", "spec")
    # the stage pods keep the template's node selector: it constrains the plan as
    # spec.nodeSelector does (and as the template's tolerations do)
    # (a hostname pin there too: Hulk sets the hostname per stage pod, on the servers the
    # pin allows)
    ours, theirs = dict(spec.get("nodeSelector") or {}), dict(tmpl_spec.get("nodeSelector") or {})
    clash = sorted(k for k in ours.keys() & theirs.keys() if ours[k] != theirs[k])
    if clash and error is None:
        k = clash[0]
        job, error = (
            None,
            str(
                InvalidRequest(
                    "spec.template.spec.nodeSelector",
                    f"{k}={theirs[k]} contradicts spec.nodeSelector {k}={ours[k]}",
                    "no node can match both: keep one",
                )
            ),
        )
    where = [
        w
        for w, d in (("spec.nodeSelector", ours), ("spec.template.spec.nodeSelector", theirs))
        if d
    ]
    return JobEntry(
        key=(namespace, name),
        uid=uid,
        generation=int(meta.get("generation") or 0),
        job=job,
        error=error,
        # a finished job's plan stays in its status for the record; its servers are free
        plan_nodes=frozenset(plan.nodes) if plan and not finished else frozenset(),
        phase=status.get("phase"),
        deleting=bool(meta.get("deletionTimestamp")),
        tolerations=tuple(tmpl_spec.get("tolerations") or ()),
        node_selector=tuple(sorted({**theirs, **ours}.items())),
        allowed_regions=tuple(spec.get("allowedRegions") or ()),
        selector_from=" and ".join(where) if theirs else "spec.nodeSelector",
        requests=pod_requests(tmpl_spec),
        suspended=spec.get("suspend") is True,
        affinity=tuple(
            _at(
                tmpl_spec,
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ).get("nodeSelectorTerms")
            or ()
        ),
    )


def _at(obj: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """``obj[k1][k2]...``, an empty mapping where a level is missing or null."""
    for k in keys:
        obj = obj.get(k) or {}
    return obj
