"""Reading YAML or JSON documents, and the field readers every format shares: each
problem is an ``InvalidRequest`` naming the path inside the document."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from hulk_planner.errors import QUOTE_FIX, InvalidRequest, number_fix, shown

API_VERSION = "hulk.dev/v1alpha1"


# What to write where a server's field is missing (the fix its error names).
_SERVER_HINTS = {
    "gpuTFLOPS": "peak dense 16-bit TFLOPS of one GPU: 989 for an H100 SXM, 312 for an A100",
    "gpuMemoryGiB": "GiB of memory of one GPU: 80 for an H100 or A100-80GB",
    "gpus": "the number of GPUs in the server, e.g. 8",
}


def _not_mapping(where: str, value: object) -> InvalidRequest:
    """A field that must hold ``key: value`` pairs and holds something else."""
    fix = (
        "write its fields as key: value lines under it, not as a list ('- ...')"
        if isinstance(value, list)
        else "write its fields as key: value lines under it; docs/formats.md shows each"
    )
    return InvalidRequest(where, f"must be a mapping, got {type(value).__name__}", fix)


def required(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(doc, Mapping):
        raise _not_mapping(where, doc)
    if key not in doc or doc[key] is None:
        field = f"{where}.{key}" if where else key
        hint = _SERVER_HINTS.get(key) if where.startswith("spec.nodes[") else None
        fix = f"add it: {hint}" if hint else "add it; docs/formats.md lists each field"
        typo = _spelled_like(key, [k for k in doc if k != key])
        if typo is not None:  # (before: "missing" alone, beside the misspelled field)
            fix = f"the field is spelled {key}: rename {typo} to it"
        # a mapping field there but empty, its own fields written beside it rather than
        # indented under it (before: "missing" alone: a user trial)
        own, here = _fields(field), _fields(where)
        misplaced = [k for k in doc if k != key and k in own and k not in here]
        if key in doc and own and typo is None:
            fix = "write its fields under it, indented; docs/formats.md lists each"
        if misplaced:
            them = ", ".join(map(str, misplaced))
            fix = f"indent {them} under {key}" if key in doc else f"add {key}: with {them} under it"
            fix += (
                f"; {'it is' if len(misplaced) == 1 else 'they are'} {field}'s, written beside it"
            )
        what = "is empty" if key in doc and own else "is required but missing"
        raise InvalidRequest(field, what, fix)
    return doc[key]


def _fields(section: str) -> set[str]:
    """The fields of a mapping at ``section`` (``spec.model``) in a job or a topology."""
    from hulk_planner.io.jobs import JOB_FIELDS
    from hulk_planner.io.topology import TOPOLOGY_FIELDS

    return {*JOB_FIELDS.get(section, ()), *TOPOLOGY_FIELDS.get(section, ())}


def _spelled_like(key: str, given: list[Any]) -> str | None:
    """The field of ``given`` that is likely ``key`` misspelled (``gpuMemoryGib`` for
    ``gpuMemoryGiB``): the same but for case, or close to it; None if none is."""
    import difflib

    names = [str(g) for g in given]
    same = [n for n in names if n.lower() == key.lower()]
    close = same or difflib.get_close_matches(key, names, n=1, cutoff=0.7)
    return close[0] if close else None


def number_field(doc: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
    if default is not ... and doc.get(key) is None:
        return default
    value = required(doc, key, where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(
            f"{where}.{key}",
            f"must be a number, got {shown(value)}",  # (true, not Python's True: a review)
            number_fix(key, value) or "write a number",
        )
    return value


def text_field(doc: Mapping[str, Any], key: str, where: str) -> str:
    """A required string field: YAML reads ``on``, ``no``, ``true`` or ``123`` unquoted as
    booleans and numbers, which must not turn into server ``True`` or region ``{'a': 1}``."""
    value = required(doc, key, where)
    if isinstance(value, list | Mapping):
        raise InvalidRequest(
            f"{where}.{key}", f"must be a string, got {shown(value)}", "write one name"
        )
    if not isinstance(value, str):
        raise InvalidRequest(
            f"{where}.{key}",
            f"must be a string, got {shown(value)}",
            QUOTE_FIX,
        )
    return value


def check_kind(doc: Any, kind: str, source: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        fix = f"give a {kind} manifest (docs/formats.md)"
        if isinstance(doc, list) and kind in _LISTED:
            fix = (
                "start each document with a '---' line instead of '- ', or give them as a "
                "kind: List with items:"
            )
        elif isinstance(doc, list):  # (a List of them suggested: a review)
            fix = (
                f"a {kind} file holds one mapping of apiVersion, kind, "
                f"{_BODY.get(kind, 'spec')}, as docs/formats.md shows, not a list"
            )
        raise InvalidRequest(source, f"expected a {kind} document, got {type(doc).__name__}", fix)
    if doc.get("kind") != kind:
        flag = _FLAGS.get(str(doc.get("kind")))  # (one of ours, in the wrong place: a trial)
        fix = f"expected {kind!r}" + (
            f"; hulk plan reads a {doc['kind']} with {flag}" if flag else ""
        )
        raise InvalidRequest(f"{source}: kind", found_in(doc, "kind"), fix)
    if doc.get("apiVersion") != API_VERSION:
        raise InvalidRequest(
            f"{source}: apiVersion", found_in(doc, "apiVersion"), f"use {API_VERSION!r}"
        )
    return doc


_LISTED = ("HulkTrainingJob",)  # the kinds read from a kind: List too
_BODY = {"ClusterTopology": "metadata and spec", "PlacementPlan": "planner, jobs and unplaced"}

_FLAGS = {
    "ClusterTopology": "--cluster",
    "HulkTrainingJob": "--jobs",
    "PlacementPlan": "--previous",
    "NodeLatency": "--kubeconfig, from the cluster the probes publish it to",
}


def found_in(doc: Mapping[str, Any], key: str) -> str:
    return f"is {doc[key]!r}" if doc.get(key) is not None else "is missing"


class _Constructor(yaml.constructor.SafeConstructor):
    """YAML 1.1's safe constructor, with numbers as JSON and YAML 1.2 write them: YAML 1.1
    reads ``7e9``, ``1e-05`` or ``1.0e308`` (an exponent without a dot or a sign) as strings;
    and a key given twice in one mapping is an error, as in kubectl (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # ``<<: *anchor``: its keys may be overridden here
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key!r} twice in one mapping",
                        key_node.start_mark,
                    )  # fmt: skip
                if isinstance(key, Hashable):
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        """An integer, or ``LongInt`` where it has more digits than Python reads (it was
        told as "a date or number" with Python's advice on sys.set_int_max_str_digits)."""
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            digits = sum(c.isdigit() for c in str(node.value))
            if not 0 < sys.get_int_max_str_digits() < digits:
                raise
            return LongInt(digits)


# (the stubs take a loader's constructor alone: this is both loaders' own, by inheritance)
_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]


@dataclass(frozen=True)
class LongInt:
    """An integer written with more digits than Python reads (4,300: ``int`` refuses more,
    ``sys.get_int_max_str_digits``), kept as such until ``load_documents`` finds its place
    in the document and refuses it there."""

    digits: int


def _json_int(text: str) -> int | LongInt:
    """A JSON integer (as ``json.loads`` reads it), or ``LongInt`` where it is too long."""
    try:
        return int(text)
    except ValueError:
        return LongInt(len(text.lstrip("-")))


class _Loader(_Constructor, yaml.SafeLoader):
    """PyYAML's pure-Python safe loader with the constructor above: each YAML error is told
    in its words, lines and columns (libyaml's differ: its tab is "found character that
    cannot start any token", without the character)."""


def _fast_loader() -> type[Any] | None:
    """The loader above with libyaml's scanner and parser, where PyYAML has libyaml: a
    topology of 300 servers with every pair linked (44,850 links, as ``hulk topology``
    writes it) took 10 s to read, 2.5 s so (bench/yaml_load.py). PyYAML's composer makes
    the nodes, not libyaml's (as in ``yaml.CSafeLoader``): that one recurses in C, and
    200,000 nested lists ended the process (a segmentation fault) where Python's ends in
    a RecursionError, told as nesting too deep."""
    if not yaml.__with_libyaml__:
        return None
    from yaml._yaml import CParser
    from yaml.composer import Composer
    from yaml.resolver import Resolver

    class FastLoader(Composer, CParser, _Constructor, Resolver):  # (Composer's nodes first)
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)

    return FastLoader


_FastLoader = _fast_loader()

# ``1e3`` is a float here (YAML 1.2, JSON), not a string as PyYAML's YAML 1.1 reads it.
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
for _loader in (_Loader, _FastLoader):
    if _loader is not None:
        _loader.add_implicit_resolver(
            "tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789.")
        )


# What libyaml reads where PyYAML refused it, or reads otherwise (found comparing the two
# on 50,000 altered documents): a tab as a space ("a:\tb", a tab ending a line), "?" in a
# plain scalar within [] or {} ("{a?}"), tags ("!" alone, before "," or in "!.!x"), "#"
# right after a block scalar's ">" or "|" or in a directive, a byte-order mark after a
# lone "\r". A text holding one, or what looks like one, is read by PyYAML's own loader
# alone, as before; no file hulk topology writes holds one.
_PYYAML_ALONE = re.compile(r"[\t\ufeff?!]|[>|][-+0-9]*#|^%", re.MULTILINE)


def _yaml_documents(text: str) -> list[Any]:
    """The YAML documents of ``text`` but empty ones, read with libyaml where PyYAML has it
    and the text holds none of ``_PYYAML_ALONE``. A text libyaml does not read to the end
    (a YAML error, a RecursionError, a timestamp with no such day) is read again by
    PyYAML's own loader, whose outcome stands: its errors' words, lines and columns are
    the ones told before (libyaml's differ), and it reads what PyYAML reads and libyaml
    refuses (``"\\ud83d"``: told as an unpaired surrogate after, as before)."""
    if _FastLoader is not None and not _PYYAML_ALONE.search(text):
        try:
            return [d for d in yaml.load_all(text, Loader=_FastLoader) if d is not None]
        except Exception:  # (PyYAML's outcome, below, is the one that stands)
            pass
    return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]


# What other YAML readers take for no string where PyYAML's YAML 1.1 rules read a string:
# YAML 1.2's core schema (go-yaml v3, as the operator's Go tools use) and Go's own number
# syntax (0o17, 0O17, 08, +.5, underscores anywhere), and YAML 1.1's y and n (go-yaml v2).
_NOT_STRINGS = (
    ("int", r"^[-+]?(?:[0-9][0-9_]*|0[bBoOxX][0-9a-fA-F_]*)$", "-+0123456789"),
    ("float", r"^[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)$", "-+0123456789."),
    ("bool", r"^(?:y|Y|n|N)$", "yYnN"),
)


def reads_back(dumper: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    """``dumper`` quoting the strings this loader reads as numbers (a server named
    ``1e3`` was written bare, then read back as the float 1000.0: a review), and those a
    YAML 1.2 or Go reader does (``0o17`` was written bare, which go-yaml v3 reads as the
    integer 15: a review)."""
    dumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789."))
    for tag, pattern, first in _NOT_STRINGS:
        dumper.add_implicit_resolver(f"tag:yaml.org,2002:{tag}", re.compile(pattern), list(first))
    return dumper


class _NulByte(Exception):
    def __init__(self, offset: int) -> None:
        self.offset = offset


def _read_text_bytes(stream: BinaryIO, chunk: int = 1 << 20) -> bytes:
    """A stream's bytes, stopping at the first NUL byte (no YAML or JSON text has one):
    ``--cluster /dev/zero`` read until memory ran out and was told as a large cluster's
    out of memory (a user trial); a binary or UTF-16 file is told at once."""
    parts: list[bytes] = []
    offset = 0
    while part := stream.read(chunk):
        nul = part.find(b"\0")
        if nul >= 0:
            raise _NulByte(offset + nul)
        parts.append(part)
        offset += len(part)
    return b"".join(parts)


def load_documents(path: str | Path) -> list[Any]:
    """All YAML/JSON documents of a file (JSON is YAML), skipping empty ones."""
    p = Path(path)
    try:
        # (standard input's bytes too: decoded by the locale, a stray byte came out as an
        # escape, "unacceptable character #xdce9", not the byte it is: a review)
        if str(path) == "-":
            data = _read_text_bytes(sys.stdin.buffer)
        else:
            with p.open("rb") as stream:
                data = _read_text_bytes(stream)
        text = data.decode("utf-8")
    except IsADirectoryError as exc:  # (kubectl apply -f takes a folder: a user trial)
        raise InvalidRequest(
            str(p), f"cannot be read: {exc.strerror}", f"give the files in it: {p}/*.yaml"
        ) from None
    except OSError as exc:
        raise InvalidRequest(str(p), f"cannot be read: {exc.strerror}", "check the path") from None
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            str(p),
            f"is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
            "save it as UTF-8",
        ) from None
    except _NulByte as exc:
        raise InvalidRequest(
            str(p), f"is not UTF-8 text (a NUL byte at offset {exc.offset})", "save it as UTF-8"
        ) from None
    # a byte-order mark starts a document as well as the file where files were joined
    # (cat a.yaml b.yaml): YAML allows one only at the start of the stream
    text = re.sub("(?m)^\ufeff", "", text)
    try:
        docs: list[Any] | None = _documents(p, text)
    except RecursionError:  # (a traceback before: 2,000 nested lists; a user trial)
        docs = None
    sizes = [] if docs is None else [_survey(d) for d in docs]
    if docs is None or any(s.deep for s in sizes):
        raise InvalidRequest(
            str(p),
            f"nests more than {MAX_DEPTH} levels deep",
            "no cluster, job or plan nests so: check that it is the file meant",
        )
    for k, size in enumerate(sizes):
        if size.long_int is not None:
            where, digits = size.long_int
            doc = f"{p} (document {k + 1})" if len(docs) > 1 else str(p)
            raise InvalidRequest(
                f"{doc}: {where}" if where else doc,
                f"is a number too large to read ({digits:,} digits)",
                "no cluster, job or plan holds one so large: check the value, or quote it "
                "if it is text",
            )
    written, expanded = sum(s.written for s in sizes), sum(s.expanded for s in sizes)
    if expanded > max(MAX_EXPANDED, ALIAS_GROWTH * written):  # (a "billion laughs": a review)
        raise InvalidRequest(
            str(p),
            f"holds {expanded:,} values once its aliases (*name) are expanded, from "
            f"{written:,} written",
            "no cluster, job or plan grows so: write the values out, or check the file's "
            "anchors (&name) and aliases",
        )
    try:  # "\ud83d" alone, in JSON or a double-quoted YAML string: no character
        json.dumps(docs, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            str(p),
            f"holds an unpaired surrogate escape ({exc.object[exc.start : exc.end]!a})",
            "write the character itself, or both halves of its surrogate pair",
        ) from None
    return docs


MAX_DEPTH = 64  # lists and mappings within one another (a pod template: about 12)
# Values a file may hold once its aliases (``*name``) are expanded: ALIAS_GROWTH times the
# values it writes, or MAX_EXPANDED where that is more. A file without aliases holds what
# it writes, however large (a topology of 5,000 servers with every pair linked: over 100
# million values); with aliases, 500 bytes held a billion values (a "billion laughs"), and
# reading them took hours (go-yaml refuses "excessive aliasing" so).
MAX_EXPANDED = 1_000_000
ALIAS_GROWTH = 10


@dataclass
class _Size:
    """What ``_survey`` finds of a document: ``deep`` where lists and mappings nest more
    than ``MAX_DEPTH`` (or hold themselves); the values it writes (``written``: an alias
    one) and holds once its aliases are expanded (``expanded``), each list, mapping, key and
    scalar counted; the place (``spec.nodes[1].gpus``) and digits of its first ``LongInt``."""

    deep: bool = False
    written: int = 1
    expanded: int = 1
    long_int: tuple[str, int] | None = None


def _survey(doc: Any) -> _Size:
    """``doc``'s ``_Size``, without recursion (what reads the documents after this
    recurses), and walking each list or mapping once however many aliases name it: its
    expanded size is counted once and added at each place (walking each place took hours
    for a billion values)."""
    size = _Size()
    done: dict[int, tuple[int, int]] = {}  # id of a list or mapping -> (expanded, height)
    # the lists and mappings being walked, outermost first: each [itself, its entries, its
    # key or index in the one before, expanded size so far, height (1: it holds no list or
    # mapping)], under one holding ``doc``
    top: list[Any] = [None, iter([("", doc)]), "", 0, 0]
    frames = [top]
    while frames:
        frame = frames[-1]
        entry = next(frame[1], None)
        if entry is None:
            frames.pop()
            if frames:
                done[id(frame[0])] = (frame[3], frame[4])
                frames[-1][3] += frame[3]
                frames[-1][4] = max(frames[-1][4], frame[4] + 1)
            continue
        key, value = entry
        if isinstance(value, dict | list):
            known = done.get(id(value))
            if known is not None:  # (an alias of one walked)
                if len(frames) - 1 + known[1] > MAX_DEPTH:
                    size.deep = True
                    return size
                frame[3] += known[0]
                frame[4] = max(frame[4], known[1] + 1)
                continue
            if len(frames) > MAX_DEPTH:  # (or one within itself, ``&a [*a]``)
                size.deep = True
                return size
            many = len(value) * (2 if isinstance(value, dict) else 1)
            size.written += many
            entries = iter(value.items()) if isinstance(value, dict) else enumerate(value)
            frames.append([value, entries, key, 1 + many - len(value), 1])
        else:
            frame[3] += 1
            if isinstance(value, LongInt) and size.long_int is None:
                keys = [f[2] for f in frames[2:]] + [key]
                place = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)
                size.long_int = (place.removeprefix("."), value.digits)
    size.expanded = top[3]
    return size


def _documents(p: Path, text: str) -> list[Any]:
    """The documents of ``text``: one JSON value is read as JSON, any other text as YAML
    (docs/formats.md). Where YAML refuses a ``.json`` file that JSON refused too, JSON's
    error is told, not YAML's: ``{"nodes": [}`` was "expected the node content, but found
    '}'", the YAML parser's words for a file written as JSON (a user trial)."""
    try:
        docs, not_json = _json(p, text), None
    except json.JSONDecodeError as exc:
        docs, not_json = None, exc
    if docs is not None:
        return docs
    try:
        return _yaml_documents(text)
    except yaml.YAMLError as exc:
        if not_json is not None and p.suffix.lower() == ".json":
            raise InvalidRequest(*_json_error(p, not_json)) from None
        raise InvalidRequest(*_yaml_error(p, exc)) from None
    except (ValueError, OverflowError) as exc:  # "2020-13-45": a date with no such day
        # ("0b_": a number with no digit; before, both a traceback)
        raise InvalidRequest(
            str(p),
            f"holds an unquoted value YAML reads as a date or number but cannot ({exc})",
            "quote it to keep it as text, e.g. name: '2020-13-45'",
        ) from None


def _json(p: Path, text: str) -> list[Any] | None:
    """The document of a JSON file, read as JSON: PyYAML reads JSON only as far as it is
    YAML, and refused a tab-indented file (``jq --tab``) and read ``"\ud83d\uddfc"`` as two
    halves of a character, not one (a review). None where the text does not start as JSON
    does, or holds NaN or Infinity; JSONDecodeError where it does and is not one JSON value
    (YAML then, or JSON that YAML reads with its line numbers in errors)."""
    if not text.lstrip().startswith(("{", "[")):
        return None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:  # as the YAML loader: kubectl refuses a key given twice
                raise InvalidRequest(
                    str(p),
                    "is not valid YAML or JSON",
                    f"found the key {key!r} twice in one object",
                )
            seen[key] = value
        return seen

    try:
        doc = json.loads(
            text, object_pairs_hook=pairs, parse_constant=_no_constant, parse_int=_json_int
        )
    except (InvalidRequest, json.JSONDecodeError):
        raise
    except ValueError:  # (from _no_constant)
        return None
    return [] if doc is None else [doc]


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON: read the text as YAML instead, as before."""
    raise ValueError(name)


def _json_error(p: Path, exc: json.JSONDecodeError) -> tuple[str, str, str]:
    """Where (file:line:column), what and what JSON expected there, and what it found."""
    at = exc.doc[exc.pos] if exc.pos < len(exc.doc) else None
    found = "the end of the file" if at is None else repr(at)
    if exc.msg.startswith("Expecting "):  # "Expecting value", "Expecting ',' delimiter"
        what = f"expected {exc.msg.removeprefix('Expecting ')}, but found {found}"
    elif exc.msg.startswith("Unterminated string"):
        what = "found a string with no closing '\"'"
    elif exc.msg == "Extra data":
        what = f"found {found} after the end of the JSON value"
    else:  # "Invalid control character at", "Invalid \\escape"
        what = f"found {found}: {exc.msg.removesuffix(' at').lower()}"
    return f"{p}:{exc.lineno}:{exc.colno}", "is not valid YAML or JSON", what


def _yaml_error(p: Path, exc: yaml.YAMLError) -> tuple[str, str, str]:
    """Where (file:line:column), what and PyYAML's own problem, which says what it found
    (before: its context alone, "while scanning for the next token", hid a tab)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
    found = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "'\\t'" in found:
        found += ": indent with spaces, YAML allows no tab there"
    return where, "is not valid YAML or JSON", found


def list_field(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """An optional list field (absent or null is empty)."""
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        name = f"{where}.{key}" if where else key
        raise InvalidRequest(
            name,
            f"must be a list, got {type(value).__name__}",
            "write each entry on a line of its own starting with '- '",
        )
    return value


def mapping_field(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """An optional mapping field (absent or null is empty)."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _not_mapping(f"{where}.{key}" if where else key, value)
    return value
