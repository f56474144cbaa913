"""What an edit of a running job's spec means for its plan (the update handler acts).

A job's plan keeps fingerprints of the spec parts it and its stage pods were made from
(``status.plan.specHashes``, :func:`hulk_operator.entries.spec_hashes`). An edit leaves the
running pods alone when, after it, the spec:

- differs only by defaults filled in (a CRD upgrade that adds a defaulted field);
- makes the same fingerprints (``priority`` or ``backoffLimit`` changed, a preset's own
  sizes written out, or a refused typo undone: the spec is back to what the pods run);
- differs from what the pods run only in ``allowedRegions`` or ``nodeSelector``, in a way
  every server of the plan still meets.

Anything else is planned again from scratch, unless :func:`refusal` refuses it: then the
pods of the last valid spec run on (a typo must not stop a training run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hulk_operator import kube, manifests
from hulk_operator.entries import CONSTRAINTS, JobEntry, normalized, spec_hashes
from hulk_operator.errors import rejected_template, template_forbidden
from hulk_operator.fit import matching_nodes, requests_fit_nowhere, too_big_for, unmatched
from hulk_operator.inventory import NodeInfo

BOOKKEEPING = frozenset({"priority", "backoffLimit", "suspend", "regrow"})  # Succeeded ignores


def changed_fields(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> set[str]:
    """The spec's top-level fields an edit changed, defaults filled in on both sides."""
    a, b = normalized(before), normalized(after)
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def plan_stands(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    plan: Mapping[str, Any],
    servers_still_match: Callable[[], bool],
) -> str | None:
    """Why a running job's plan stands after this edit (a line for the log and the
    ``Planned`` condition), or None when the edit needs a new plan."""
    was = spec_hashes(before)
    running = plan.get("specHashes") or was  # (plans made before them)
    now = spec_hashes(after)
    differ = {k for k, v in now.items() if running.get(k) != v}
    if not differ:
        if was != running:
            return "the spec is back to the one its pods run: its plan stands"
        changed = ", ".join(sorted(changed_fields(before, after))) or "nothing"
        return f"{changed} changed: its plan stands"
    if differ <= CONSTRAINTS and servers_still_match():
        return (
            f"{', '.join(sorted(differ))} changed and every server of its plan still matches: "
            "its plan stands"
        )
    return None


def servers_match(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> bool:
    """Whether every server of the job's plan meets its (new) constraints."""
    allowed = {i.name for i in matching_nodes(entry, nodes)}
    return bool(entry.plan_nodes) and entry.plan_nodes <= allowed


def refusal(
    api: Any,
    name: str,
    namespace: str | None,
    spec: Mapping[str, Any],
    entry: JobEntry,
    nodes: Mapping[str, NodeInfo],
) -> str | None:
    """Why an edit of a running job is refused (its pods run on), or None: a pod template
    the API server rejects or forbids (a server-side dry run of one stage pod: invalid, or
    out of a LimitRange's bounds, or refused by a policy), constraints no node
    matches, a model no set of the servers it may use could hold, stage pod requests no
    node could hold."""
    pod = manifests.template_check_pod(
        job=name, namespace=namespace or "", uid=entry.uid, template=spec.get("template") or {}
    )
    error = kube.dry_run_pod(api, pod)
    if error is not None and (why := rejected_template(error) or template_forbidden(error)):
        return why
    if not nodes:
        return None
    return (
        unmatched(entry, nodes) or too_big_for(entry, nodes) or requests_fit_nowhere(entry, nodes)
    )
