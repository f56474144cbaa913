"""Objects made as ``kubectl apply`` makes them, for the ones a user is then told to
``kubectl apply`` again (the demo's jobs): with kubectl's
``kubectl.kubernetes.io/last-applied-configuration`` annotation and its field manager.

Without them kubectl warns that the annotation is missing, and a field removed from the file
is not removed from the object (its three-way merge has no base; a user trial).

What kubectl does (``k8s.io/kubectl/pkg/cmd/apply/apply.go``, ``pkg/util/apply.go``): the
object read from the file, its namespace set where it has none
(``cli-runtime``'s ``SetNamespace``), is encoded without that annotation, its
``metadata.annotations`` set to a map even where it had none (so the text holds
``"annotations":{}``), by ``unstructured.UnstructuredJSONScheme``: Go's
``json.NewEncoder(w).Encode``, so compact JSON, keys sorted, ``<``, ``>``, ``&``, U+2028 and
U+2029 escaped, and a trailing newline. That text is the annotation, and the object is
created with the field manager ``kubectl-client-side-apply``. Nothing is left out: a
``status`` in the file is in the annotation too, as kubectl writes it.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
FIELD_MANAGER = "kubectl-client-side-apply"  # kubectl's FieldManagerClientSideApply

# Go's encoding/json escapes these in strings (HTML-safe, and JavaScript's line ends);
# Python's json.dumps writes them as they are.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _go_float(x: float) -> str:
    """A float as kubectl's annotation writes it. YAML read by kubectl goes to JSON, and the
    JSON to ``int64`` where it has no fraction (``1.0`` is written ``1``), else ``float64``,
    which Go writes in its shortest form, positional from 1e-6 to 1e21 (``0.00001``), with an
    exponent outside (``1e-7``, ``1e+21``)."""
    if not math.isfinite(x):
        raise ValueError(f"{x!r} has no JSON form (kubectl refuses it too)")
    if x == 0:
        return "0"
    if 1e-6 <= abs(x) < 1e21:
        return format(Decimal(repr(x)).normalize(), "f")
    text = repr(x)  # shortest digits, an exponent of 2 digits at least, with a sign
    mantissa, exponent = text.split("e")
    if exponent.startswith("-0"):  # Go's json: e-07 becomes e-7 (e+21 stays)
        exponent = "-" + exponent[2:]
    return f"{mantissa}e{exponent}"


def go_json(value: Any) -> str:
    """``value`` as Go's ``json.NewEncoder(w).Encode`` writes a ``map[string]any`` that
    kubectl read from YAML: compact, keys sorted, ``<``, ``>``, ``&``, U+2028 and U+2029
    escaped, other characters as they are, floats as :func:`_go_float`, a newline at the
    end. Dates (YAML timestamps, which PyYAML reads as dates) are written as the client
    sends them, ISO 8601."""
    return _encode(value) + "\n"


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).translate(_GO_ESCAPES)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return _encode(value.isoformat())
    if isinstance(value, Mapping):
        items = sorted(((_key(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _key(key: Any) -> str:
    """A mapping's key as kubectl's YAML-to-JSON writes it (``true: x``: ``"true"``)."""
    if isinstance(key, bool) or key is None:
        return _encode(key)
    return str(key)


def as_applied(manifest: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """``manifest`` as ``kubectl apply`` creates it (``-n namespace``): a copy with its
    namespace set where it has none (for a namespaced kind: give ``namespace`` only for
    those) and the last-applied-configuration annotation, whose text is
    :func:`last_applied_configuration`. The manifest itself is not changed."""
    obj = copy.deepcopy(dict(manifest))
    metadata = dict(obj.get("metadata") or {})
    if namespace and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    annotations = metadata.get("annotations")
    # as kubectl reads them (unstructured's GetAnnotations: a map of strings, else none)
    annotations = (
        dict(annotations)
        if isinstance(annotations, Mapping)
        and all(isinstance(v, str) for v in annotations.values())
        else {}
    )
    annotations.pop(LAST_APPLIED, None)
    metadata["annotations"] = annotations
    obj["metadata"] = metadata
    text = go_json(obj)
    annotations[LAST_APPLIED] = text
    return obj


def last_applied_configuration(manifest: Mapping[str, Any], namespace: str | None = None) -> str:
    """The ``kubectl.kubernetes.io/last-applied-configuration`` text ``kubectl apply``
    writes for ``manifest`` (see :func:`as_applied`)."""
    return str(as_applied(manifest, namespace)["metadata"]["annotations"][LAST_APPLIED])


def create_applied(
    custom: Any,
    group: str,
    version: str,
    namespace: str,
    plural: str,
    manifest: Mapping[str, Any],
) -> Any:
    """Creates the namespaced custom object ``manifest`` (a ``CustomObjectsApi``'s call) as
    ``kubectl apply -n namespace`` would: :func:`as_applied`, with kubectl's field manager,
    so a later ``kubectl apply`` of the edited file patches it from that base."""
    return custom.create_namespaced_custom_object(
        group,
        version,
        namespace,
        plural,
        as_applied(manifest, namespace),
        field_manager=FIELD_MANAGER,
    )
