"""Makes kubeconform's JSON schemas offline, from files already in the Go module cache.

kubeconform downloads its schemas from GitHub by default, which this project cannot reach.
The same schemas are a pure function of Kubernetes' OpenAPI document, which ships inside the
``k8s.io/kubernetes`` module (``api/openapi-spec/swagger.json``), the module the sandbox
builds its API server from. This script does what ``openapi2jsonschema`` does for
yannh/kubernetes-json-schema's ``*-standalone-strict`` folders:

- one file per group/version/kind, named as kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}``
  template expects (``deployment-apps-v1.json``, ``service-v1.json``, ...);
- "standalone": each file carries the definitions it references (``#/definitions/...``);
- "strict": objects with declared properties get ``additionalProperties: false``, so a typo
  such as ``securityContex`` fails instead of being ignored;
- Kubernetes' special string formats made YAML-friendly: ``int-or-string`` accepts both, a
  ``Quantity`` accepts a number (``cpu: 1``), and every optional field accepts ``null``.

``crd`` mode does the same for CustomResourceDefinitions (ours and kopf's peering CRDs), from
each served version's ``openAPIV3Schema``, honouring ``x-kubernetes-preserve-unknown-fields``
and ``x-kubernetes-int-or-string``.

Usage:
    python charts/k8s_schemas.py openapi SWAGGER_JSON OUT_DIR
    python charts/k8s_schemas.py crd OUT_DIR CRD_YAML [CRD_YAML ...]
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Schema = dict[str, Any]

REF_PREFIX = "#/definitions/"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING: Schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


def file_name(kind: str, group: str, version: str) -> str:
    """kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}.json`` (pkg/registry/registry.go)."""
    suffix = f"-{group.split('.')[0].lower()}-{version.lower()}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def _nullable(types: Any) -> Any:
    if isinstance(types, str):
        return [types, "null"]
    if isinstance(types, list) and "null" not in types:
        return [*types, "null"]
    return types


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            yield ref[len(REF_PREFIX) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strict(node: Any, required: bool = True) -> Any:
    """Strict and YAML-friendly copy of one OpenAPI v2 schema node."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        either = copy.deepcopy(INT_OR_STRING)
        if not required:
            either["oneOf"].append({"type": "null"})
        if "description" in node:
            either["description"] = node["description"]
        return either
    out: Schema = {}
    needed = set(node.get("required", []))
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _strict(sub, name in needed) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"):
            out[key] = _strict(value)
        elif key == "type" and not required:
            out[key] = _nullable(value)
        else:
            out[key] = value
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


def openapi(swagger_path: Path, out: Path) -> int:
    spec = json.loads(swagger_path.read_text())
    definitions: dict[str, Schema] = spec["definitions"]
    defs = {name: _strict(schema) for name, schema in definitions.items()}
    # A Quantity is a string in the API, but YAML writes `cpu: 1` and `memory: 1.5e9` too.
    defs[QUANTITY] = {
        "oneOf": [{"type": "string"}, {"type": "number"}],
        "description": definitions.get(QUANTITY, {}).get("description", ""),
    }
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            group, version, kind = gvk.get("group", ""), gvk["version"], gvk["kind"]
            api_version = f"{group}/{version}" if group else version
            root = copy.deepcopy(defs[name])
            props = root.setdefault("properties", {})
            props["apiVersion"] = {"type": ["string", "null"], "enum": [api_version, None]}
            props["kind"] = {"type": ["string", "null"], "enum": [kind, None]}
            closure: dict[str, Schema] = {}
            todo = list(_refs(root))
            while todo:
                ref = todo.pop()
                if ref in closure:
                    continue
                closure[ref] = defs[ref]
                todo.extend(_refs(defs[ref]))
            root["definitions"] = closure
            (out / file_name(kind, group, version)).write_text(json.dumps(root))
            written += 1
    print(f"[k8s_schemas] wrote {written} schemas from {swagger_path} to {out}")
    return 0


def crd(out: Path, paths: list[Path]) -> int:
    import yaml  # only this mode needs PyYAML (the project's venv has it)

    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for version in spec["versions"]:
                schema = (version.get("schema") or {}).get("openAPIV3Schema") or {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                }
                root = _strict(schema)
                props = root.setdefault("properties", {})
                api_version = f"{group}/{version['name']}"
                props["apiVersion"] = {"type": "string", "enum": [api_version]}
                props["kind"] = {"type": "string", "enum": [kind]}
                props["metadata"] = {"type": "object"}  # the API server checks ObjectMeta
                target = out / file_name(kind, group, version["name"])
                target.write_text(json.dumps(root))
                written += 1
    print(f"[k8s_schemas] wrote {written} CRD schemas to {out}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "openapi":
        return openapi(Path(argv[1]), Path(argv[2]))
    if len(argv) >= 2 and argv[0] == "crd":
        return crd(Path(argv[1]), [Path(p) for p in argv[2:]])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
