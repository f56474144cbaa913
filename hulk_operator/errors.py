"""The one place where errors become conditions and kopf's retry decisions.

- ``InvalidRequest`` (the job's spec is wrong): condition ``Failed=True`` with reason
  ``InvalidSpec`` and the planner's message (it names the field); permanent, never retried
  until the spec changes.
- ``NoFeasiblePlan`` / an unplaced job: ``Planned=False``, reason ``Unschedulable``; the job
  stays Pending and is planned again whenever the cluster changes.
- Kubernetes API errors: 409 Conflict is success for idempotent creates; 404 on delete is
  success; 400 or 422 on creating the stage pods means the job's pod template is invalid
  (``rejected_template``): ``Failed=True``, reason ``InvalidSpec``, with the API server's
  message, until the spec changes; 403 on creating them (a ResourceQuota, an admission
  policy: ``forbidden_pods``) keeps the plan and shows ``Ready=False``, reason
  ``PodsForbidden``, with the API's message, retried every 10 s; anything else is
  temporary and retried with a delay.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hulk_planner.errors import HulkError, InvalidRequest, NoFeasiblePlan

ENV_REPLACED = "EnvReplaced"  # a Warning: the template sets variables Hulk sets itself
LABELS_REPLACED = "LabelsReplaced"  # a Warning: the template sets labels Hulk sets itself
INVALID_SPEC = "InvalidSpec"
EDIT_REFUSED = "EditRefused"  # an edit the cluster does not allow now (checked again)
UNSCHEDULABLE = "Unschedulable"
# Planned's reason for a job no set of the servers it may use could hold, even all free:
# waiting does not help (``kubectl get hjob -o wide`` told it from one that waits: a trial)
NOWHERE = "FitsNowhere"
PLANNER_ERROR = "PlannerError"
PODS_FORBIDDEN = "PodsForbidden"

if TYPE_CHECKING:  # (kopf imported where it is used: `hulk plan`'s offline notes read this
    import kopf  # module, and kopf's import was 0.3 s of them)


@dataclass(frozen=True)
class Outcome:
    """How a failure shows in the job's status."""

    condition: str  # "Failed" or "Planned"
    failed: bool  # the condition's status: True for Failed, False for Planned
    reason: str
    message: str
    permanent: bool


def classify(exc: BaseException) -> Outcome:
    if isinstance(exc, InvalidRequest):
        return Outcome("Failed", True, INVALID_SPEC, str(exc), permanent=True)
    if isinstance(exc, NoFeasiblePlan):
        return Outcome("Planned", False, UNSCHEDULABLE, exc.reason, permanent=False)
    if isinstance(exc, HulkError):
        return Outcome("Planned", False, PLANNER_ERROR, str(exc), permanent=False)
    return Outcome("Planned", False, PLANNER_ERROR, f"{type(exc).__name__}: {exc}", False)


def unplaced(reason: str) -> Outcome:
    return Outcome("Planned", False, UNSCHEDULABLE, reason, permanent=False)


def to_kopf(exc: BaseException, delay: float = 5.0) -> kopf.PermanentError | kopf.TemporaryError:
    """The kopf error to raise for ``exc`` (PermanentError stops retries)."""
    import kopf

    out = classify(exc)
    if out.permanent:
        return kopf.PermanentError(out.message)
    return kopf.TemporaryError(out.message, delay=delay)


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a kubernetes-client ApiException (or of its subclasses, such as
    ``UnprocessableEntityException``), else None."""
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


def api_message(exc: BaseException) -> str:
    """The API server's own message (e.g. the schema error naming the field), else the
    body as sent, else the error's text."""
    from hulk_probe.kube import said

    return said(exc) or str(getattr(exc, "body", None) or exc)


def rejected_template(exc: BaseException) -> str | None:
    """The message for a stage pod the API server refused as invalid (400, 422), or that
    the Kubernetes client refused to send (a field of the wrong type: its models validate
    every request): the job's ``spec.template`` is at fault, so retrying cannot help. None
    for other errors."""
    client_side = client_rejection(exc)
    if client_side is not None:
        return client_side
    if api_status(exc) not in (400, 422):
        return None
    return f"spec.template: the API server rejects the stage pods: {api_message(exc)}"


def client_rejection(exc: BaseException, prefix: str | None = None) -> str | None:
    """The message for a pod the Kubernetes client's models refuse (a pydantic
    ValidationError): each field as a path of the job's template (``prefix`` before every
    path; by default ``spec.template.`` before a pod's ``spec.``), what is wrong and the
    value found, and the field an unknown one looks like. None for other errors."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    parts = []
    for err in exc.errors()[:3]:
        loc = list(err.get("loc", ()))
        while loc and isinstance(loc[0], int):  # the API method's argument position
            loc = loc[1:]
        path = ""
        for p in loc:
            path += f"[{p}]" if isinstance(p, int) else (f".{p}" if path else str(p))
        if prefix is not None:
            path = prefix + path if path else prefix.rstrip(".")
        elif path.startswith("spec."):
            path = "spec.template." + path
        msg, hint = _said(err)
        if err.get("type") == "extra_forbidden" and loc and isinstance(loc[-1], str):
            close = difflib.get_close_matches(loc[-1], _pod_field_names(), n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]}?)" if close else ""
            if close and close[0] == loc[-1]:
                hint = f" ({loc[-1]} belongs at another level: check its indentation)"
        parts.append(f"{path}: {msg}, got {err.get('input')!r}{hint}")
    more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return f"spec.template: the stage pods are not valid: {'; '.join(parts)}{more}"


# a pydantic error type -> what to write instead (every error names the fix: a trial found
# "Input should be a valid list" with none, and a Python class name in the message)
_FIXES = {
    "list_type": "write it as a YAML list, each item on a line starting with '- '",
    "dict_type": "write it as a mapping, key: value",
    "model_type": "write it as a mapping, key: value",
    "model_attributes_type": "write it as a mapping, key: value",
    "int_type": "write a whole number, unquoted",
    "int_parsing": "write a whole number, unquoted",
    "bool_type": "write true or false, unquoted",
    "missing": "give it",
}


def _said(err: Mapping[str, Any]) -> tuple[str, str]:
    """A pydantic error's message, without the client's class names, and its fix."""
    msg = str(err.get("msg"))
    msg = re.sub(r" or instance of V1\w+", "", msg)
    kind = str(err.get("type"))
    if kind == "string_type":
        got = err.get("input")
        if isinstance(got, bool | dict | list):
            return msg, " (write text, in quotes)"
        return msg, " (quote it)"
    fix = _FIXES.get(kind)
    return msg, f" ({fix})" if fix else ""


@functools.cache
def _pod_field_names() -> tuple[str, ...]:
    """Every field name (as YAML writes it) of a pod template: of the Kubernetes client's
    models that ``V1PodTemplateSpec`` holds, nested (before, of every V1 model: a
    ``replicas`` in a container was told to belong at another level; a review)."""
    import typing

    from kubernetes.client import models
    from pydantic import BaseModel

    names: set[str] = set()
    seen: set[type] = set()

    def visit(annotation: object) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.add(annotation)
            for n, f in annotation.model_fields.items():
                names.add(f.serialization_alias or f.alias or n)
                visit(f.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(models.V1PodTemplateSpec)
    return tuple(sorted(names))


def namespace_terminating(exc: BaseException) -> bool:
    """A 403 because the namespace is being deleted: its jobs go with it, so nothing is
    created again and nothing is reported (before: each job fought the namespace
    controller, set PodsForbidden and posted Events the namespace refused)."""
    return api_status(exc) == 403 and "because it is being terminated" in api_message(exc)


def template_forbidden(exc: BaseException) -> str | None:
    """The message for a stage pod the API server forbids for what its template asks (a
    LimitRange's bounds, a quota's rule that every container sets a value, an admission
    policy), not for the namespace's room (an exceeded quota), the operator's rights or a
    namespace going away; None for other errors."""
    if api_status(exc) != 403:
        return None
    said = api_message(exc)
    if any(w in said for w in ("exceeded quota", "cannot create resource", "being terminated")):
        return None
    return f"spec.template: the API server refuses its stage pods: {said}"


def policy_refusal(exc: BaseException) -> str | None:
    """The message for a stage pod that a rule of the cluster refuses for what its template
    asks (``template_forbidden``, or an admission policy's or webhook's denial whatever its
    code): a rule that may change, not the template's own validity. None for other errors."""
    if (why := template_forbidden(exc)) is not None:
        return why
    if admission_denied(exc):
        return f"spec.template: the API server refuses its stage pods: {api_message(exc)}"
    return None


SERVICE_MARK = "hulk_service"  # set on an error creating the job's headless Service
AFTER_DELETES = "hulk_after_deletes"  # set on an error creating stage pods just after the
# same reconciliation deleted some of the job's own


def quota_lag(exc: BaseException) -> bool:
    """A ResourceQuota refused stage pods that were made just after the job's own pods were
    deleted: the quota still counts those (Terminating, or not yet seen gone by its
    controller), so the pods are tried again (after the 10 s pause of any refused pod)
    before the refusal is told; the next try deletes nothing, and a refusal then is told
    (before, an image edit re-planned within a lowered pods quota posted PodsForbidden for
    the moment its old pods still counted: a flaky CI run)."""
    return (
        bool(getattr(exc, AFTER_DELETES, False))
        and api_status(exc) == 403
        and "exceeded quota" in api_message(exc)
    )


class ServiceTaken(Exception):
    """A Service of the job's name exists that Hulk did not make for a job of that name:
    it is left alone (before, it was taken over, its ports replaced, and deleted with the
    job; a user trial). ``uid`` is that Service's: a job that gave its servers back for it
    is planned again as soon as it is gone, not at the end of its pause."""

    def __init__(self, message: str, name: str = "", uid: str = "") -> None:
        super().__init__(message)
        self.name, self.uid = name, uid


def admission_denied(exc: BaseException) -> bool:
    """An admission policy or webhook denied the request with another code than 403: a
    ValidatingAdmissionPolicy whose validation sets no ``reason`` answers 422 Invalid (413
    with ``RequestEntityTooLarge``), a webhook the code it chooses. A policy, as a 403's:
    not the template's own validity."""
    said, code = api_message(exc), api_status(exc)
    return (
        code is not None
        and 400 <= code < 500
        and (
            ("ValidatingAdmissionPolicy" in said and "denied request" in said)
            or ("admission webhook" in said and "denied the request" in said)
        )
    )


def forbidden_pods(exc: BaseException) -> str | None:
    """The message for stage pods the API server forbids (403: a ResourceQuota, an admission
    policy; an admission policy's or webhook's denial whatever its code), or the headless
    Service created before them (a quota on services): the plan is fine, the namespace has
    no room yet. None for other errors."""
    if isinstance(exc, ServiceTaken):
        return f"the job's headless Service cannot be made: {exc}"
    if api_status(exc) != 403 and not admission_denied(exc):
        return None
    if getattr(exc, SERVICE_MARK, False):
        return (
            "the API server refuses the job's headless Service (the stage pods' hostnames "
            f"need it: they are created after it): {api_message(exc)}"
        )
    return f"the API server refuses the stage pods: {api_message(exc)}"
