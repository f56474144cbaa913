"""``ClusterTopology`` documents: the cluster's servers, regions and links."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hulk_planner.datasets import slug
from hulk_planner.errors import InvalidRequest, each_error, one_or_all
from hulk_planner.io.documents import (
    API_VERSION,
    check_kind,
    list_field,
    load_documents,
    mapping_field,
    number_field,
    reads_back,
    required,
    text_field,
)
from hulk_planner.model import (
    Cluster,
    Link,
    RegionLink,
    Server,
    check_name,
)

L = TypeVar("L", Link, RegionLink)


def _name(n: Any, w: str) -> str:
    """The name of server ``spec.nodes[i]`` (``w``)."""
    name = text_field(n, "name", w)
    if not name.strip():  # (told as "name", no path: a user trial; spaces alone too, a review)
        raise InvalidRequest(
            f"{w}.name",
            "is empty" if name == "" else f"is blank, got {name!r}",
            "give each server a name (on a cluster, its node name)",
        )
    return name


def _server(n: Any, w: str) -> Server:
    """The server of ``spec.nodes[i]`` (``w``)."""
    name = _name(n, w)
    with _at(f"server {name!r}", w):
        return Server(
            name=name,
            region=_region_text(n, w),
            gpus=number_field(n, "gpus", w),
            gpu_memory_gib=number_field(n, "gpuMemoryGiB", w),
            gpu_tflops=number_field(n, "gpuTFLOPS", w),
            gpu_product=_informational(n.get("gpuProduct")),
            compute_capability=_informational(n.get("computeCapability")),
            zone=_informational(n.get("zone")),
        )


def _region_text(n: Any, w: str) -> str:
    """The region of server ``spec.nodes[i]`` (``w``), as its ``Server`` takes it."""
    return text_field(n, "region", w).strip()


def _read(read: Callable[[Any, str], str], n: Any, w: str) -> str | None:
    """What ``read`` reads of entry ``n`` (at ``w``), None where it fails its checks (the
    error is told by the entry's own)."""
    try:
        return read(n, w)
    except InvalidRequest:
        return None


def _links(
    spec: Mapping[str, Any], key: str, kind: type[L], errors: list[_Told]
) -> list[tuple[int, str, str, L | None]]:
    """The entries of ``spec.links`` or ``spec.regionLinks`` (same four fields), as (its
    index, its ends, the link): a wrong entry's error goes to ``errors`` and the others
    are read on; a wrong entry whose ends read is kept, as None, for the checks that
    need only its ends (a name listed twice, an unknown server), its ends as none (an
    empty name, a server linked to itself) left out of them."""
    out: list[tuple[int, str, str, L | None]] = []
    section = _SECTIONS[key]
    try:
        listed = list_field(spec, key, "spec")
    except InvalidRequest as exc:  # (not a list: nothing more to tell of it)
        errors.append(((section, -1), exc))
        return out
    for i, lk in enumerate(listed):
        w = f"spec.{key}[{i}]"
        ends: tuple[str, str] | None = None
        try:
            a, b = text_field(lk, "a", w), text_field(lk, "b", w)
            if a.strip() and b.strip() and (a != b or kind is RegionLink):
                ends = (a, b)
            with _at(f"{'regionLink' if kind is RegionLink else 'link'} {a}-{b}", w):
                link = kind(
                    a,
                    b,
                    number_field(lk, "latencyMs", w),
                    number_field(lk, "bandwidthGbps", w, None),
                )
            out.append((i, a, b, link))
        except InvalidRequest as exc:
            errors.append(((section, i), exc))
            if ends is not None:
                out.append((i, ends[0], ends[1], None))
    return out


@contextmanager
def _at(named: str, path: str) -> Iterator[None]:
    """The model names a server or link as ``server 'a'`` or ``link a-b``; in a file its
    path says where it is (``spec.nodes[3].gpus``, as for a field of the wrong type;
    before, both were used, and ``link a-b-a`` was unreadable with hyphenated names)."""
    try:
        yield
    except InvalidRequest as exc:
        if not exc.field.startswith(named):
            raise
        raise InvalidRequest(path + exc.field.removeprefix(named), exc.problem, exc.fix) from None


def _region(name: str, spelled: Mapping[str, tuple[str, int]]) -> str:
    """A regionLinks end as spec.nodes spells its region (``virginia``, ``sao-paulo`` for
    ``Virginia``, ``Sao Paulo``: as spec.allowedRegions and node labels write them)."""
    return spelled.get(slug(name), (name, 0))[0]


def _informational(value: Any) -> Any:
    """An informational text field written as a bare number (``gpuProduct: 3090``,
    ``computeCapability: 8.6``) is that text: the spec calls them informational, and they
    were refused as "must be text" (a review). Lists and mappings are still refused."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


# (where an error is in the file, to tell them in its order: metadata, spec.nodes, spec.links,
# spec.regionLinks, by entry; -1 for the section itself)
_Told = tuple[tuple[int, int], InvalidRequest]
_SECTIONS = {"metadata": 0, "nodes": 1, "links": 2, "regionLinks": 3}


def cluster_from_dict(doc: Mapping[str, Any], source: str = "ClusterTopology") -> Cluster:
    check_kind(doc, "ClusterTopology", source)
    spec = required(doc, "spec", "")
    nodes = required(spec, "nodes", "spec")
    if not isinstance(nodes, list):
        raise InvalidRequest(
            "spec.nodes",
            f"must be a list of servers, got {type(nodes).__name__}",
            "write each server on a line of its own starting with '- '",
        )
    # every server's and link's error told at once, a line each, in file order, as a jobs
    # file's are (before, the first alone: a file with two broken links told one; then the
    # checks across entries, a name used twice or a link to an unknown server, came only
    # once every entry was right: a user trial). An entry that failed its own checks is
    # left out of those it cannot be checked by (a link to a server whose name failed).
    errors: list[_Told] = []
    name = "cluster"
    try:
        name = str(mapping_field(doc, "metadata", "").get("name") or name)
        check_name("metadata.name", name, "name the cluster")
    except InvalidRequest as exc:
        errors.append(((_SECTIONS["metadata"], 0), exc))
    servers = []
    names: list[str | None] = []  # each node's, None where it failed (also regions)
    regions: list[str | None] = []
    for i, n in enumerate(nodes):
        w = f"spec.nodes[{i}]"
        try:
            servers.append(_server(n, w))
        except InvalidRequest as exc:
            errors.append(((_SECTIONS["nodes"], i), exc))
        names.append(_read(_name, n, w))
        regions.append(_read(_region_text, n, w) or None)
    links = _links(spec, "links", Link, errors)
    region_links = _links(spec, "regionLinks", RegionLink, errors)
    seen: dict[str, int] = {}
    for i, srv_name in enumerate(names):
        if srv_name is None:
            continue
        if srv_name in seen:  # (at its second place, as kubectl names the duplicate)
            errors.append(
                (
                    (_SECTIONS["nodes"], i),
                    InvalidRequest(
                        f"spec.nodes[{i}].name",
                        f"name {srv_name!r} is used twice",
                        "make names unique",
                    ),
                )
            )
        seen.setdefault(srv_name, i)
    # one region, one spelling: node labels write Tokyo and tokyo alike (tokyo), and
    # spec.allowedRegions matches either (before, they were two regions, unlinked: a trial)
    spelled: dict[str, tuple[str, int]] = {}
    for i, region in enumerate(regions):
        if region is None:
            continue
        first, j = spelled.setdefault(slug(region), (region, i))
        if first != region:
            errors.append(
                (
                    (_SECTIONS["nodes"], i),
                    InvalidRequest(
                        f"spec.nodes[{i}].region",
                        f"{region!r} and {first!r} (spec.nodes[{j}]) are one region as a "
                        f"node label writes it ({slug(first)}), and would be planned as two",
                        f"write it {first!r} in both",
                    ),
                )
            )
    # (a name that failed, or is used twice, may be the one a link names: its links to
    # servers not listed are told once the names are right, not before)
    every_name = None not in names and len(seen) == len(names)
    pairs: set[frozenset[str]] = set()
    # (a server deleted from spec.nodes, its links left: a line per link, none saying
    # they go with it; a trial)
    stray = Counter(end for _, a, b, _ in links for end in {a, b} if end not in seen)
    for i, a, b, _ in links:
        where = f"spec.links[{i}] ({a} - {b})"
        unknown = [end for end in (a, b) if end not in seen] if every_name else []
        for end in unknown:
            fix = "every link end must be listed in spec.nodes"
            if stray[end] > 1:
                fix += f": list it, or remove its {stray[end]} links with it"
            errors.append(
                (
                    (_SECTIONS["links"], i),
                    InvalidRequest(where, f"names unknown server {end!r}", fix),
                )
            )
        if not unknown and frozenset((a, b)) in pairs:
            errors.append(
                ((_SECTIONS["links"], i), InvalidRequest(where, "is listed twice", "keep one"))
            )
        pairs.add(frozenset((a, b)))
    every_region = None not in regions
    known = {first for first, _ in spelled.values()}  # (one spelling each)
    region_pairs: set[frozenset[str]] = set()
    for i, a, b, _ in region_links:
        a, b = _region(a, spelled), _region(b, spelled)
        # (a region's own link, a == b, told once: it was told twice, a trial)
        unknown = [end for end in dict.fromkeys((a, b)) if end not in known] if every_region else []
        for end in unknown:
            errors.append(
                (
                    (_SECTIONS["regionLinks"], i),
                    InvalidRequest(
                        f"spec.regionLinks[{i}]",
                        f"names unknown region {end!r}",
                        f"use a region of spec.nodes: {', '.join(sorted(known))}",
                    ),
                )
            )
        if not unknown and frozenset((a, b)) in region_pairs:
            errors.append(
                (
                    (_SECTIONS["regionLinks"], i),
                    InvalidRequest(
                        f"spec.regionLinks[{i}]", f"{a}-{b} is listed twice", "keep one"
                    ),
                )
            )
        region_pairs.add(frozenset((a, b)))
    if errors:  # (sorted is stable: an entry's own error before the checks across entries)
        raise one_or_all([exc for _, exc in sorted(errors, key=lambda told: told[0])])
    return Cluster(
        name,
        tuple(servers),
        tuple(lk for _, _, _, lk in links if lk is not None),
        tuple(
            replace(rl, a=_region(rl.a, spelled), b=_region(rl.b, spelled))
            for _, _, _, rl in region_links
            if rl is not None
        ),
    )


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    cluster = cluster.materialized()  # (the format has no cut pairs: written as links)
    nodes = []
    for s in cluster.servers:
        node: dict[str, Any] = {
            "name": s.name,
            "region": s.region,
            "gpus": s.gpus,
            "gpuMemoryGiB": s.gpu_memory_gib,
            "gpuTFLOPS": s.gpu_tflops,
        }
        for key, value in (
            ("gpuProduct", s.gpu_product),
            ("computeCapability", s.compute_capability),
            ("zone", s.zone),
        ):
            if value is not None:
                node[key] = value
        nodes.append(node)

    def link(lk: Link | RegionLink) -> dict[str, Any]:
        out: dict[str, Any] = {"a": lk.a, "b": lk.b, "latencyMs": lk.latency_ms}
        if lk.bandwidth_gbps is not None:
            out["bandwidthGbps"] = lk.bandwidth_gbps
        return out

    spec: dict[str, Any] = {"nodes": nodes, "links": [link(lk) for lk in cluster.links]}
    if cluster.region_links:
        spec["regionLinks"] = [link(lk) for lk in cluster.region_links]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTopology",
        "metadata": {"name": cluster.name},
        "spec": spec,
    }


@reads_back
class _TopologyDumper(yaml.SafeDumper):
    """A node or a link (a mapping of scalars) on one line, as the formats' examples write
    them: a cluster of hundreds of servers stays readable."""

    def represent_dict(self, data: Any) -> Any:  # type: ignore[override]
        flow = all(isinstance(v, str | int | float) for v in data.values())
        return self.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_TopologyDumper.add_representer(dict, _TopologyDumper.represent_dict)


def dump_cluster(cluster: Cluster, fmt: str = "yaml") -> str:
    """The cluster as a ``ClusterTopology`` document (``load_cluster`` reads it back);
    ``fmt`` is ``json`` or ``yaml``."""
    data = cluster_to_dict(cluster)
    if fmt == "yaml":
        return yaml.dump(data, Dumper=_TopologyDumper, sort_keys=False, width=4096,
                         allow_unicode=True)  # fmt: skip
    if fmt != "json":
        raise InvalidRequest("fmt", f"unknown format {fmt!r}", "use json or yaml")
    return json.dumps(data, indent=2, ensure_ascii=False)


def load_cluster(path: str | Path, notes: list[str] | None = None) -> Cluster:
    """The one ClusterTopology of a file; ``notes`` gets a line for each field it does not
    know (ignored, as a typo of an optional field would be: ``regionlinks``)."""
    docs = load_documents(path)
    if len(docs) != 1:
        raise InvalidRequest(str(path), f"holds {len(docs)} documents", "give one ClusterTopology")
    try:
        cluster = cluster_from_dict(docs[0], str(path))
        if notes is not None:
            notes += [f"{path}: {text}" for text in unknown_topology_fields(docs[0])]
        return cluster
    except InvalidRequest as exc:
        if exc.field.startswith(str(path)):
            raise
        raise one_or_all(
            [InvalidRequest(f"{path}: {e.field}", e.problem, e.fix) for e in each_error(exc)]
        ) from None


# The ClusterTopology fields (docs/formats.md); "[]" marks each entry of a list.
TOPOLOGY_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("apiVersion", "kind", "metadata", "spec"),
    "spec": ("nodes", "links", "regionLinks"),
    "spec.nodes[]": (
        "name",
        "region",
        "gpus",
        "gpuMemoryGiB",
        "gpuTFLOPS",
        "gpuProduct",
        "computeCapability",
        "zone",
    ),
    "spec.links[]": ("a", "b", "latencyMs", "bandwidthGbps"),
    "spec.regionLinks[]": ("a", "b", "latencyMs", "bandwidthGbps"),
}


def _bytes_not_bits(key: str, close: str) -> str:
    """The end of a "did you mean" note: where ``key`` is in bytes (``bandwidthGBps``) and
    ``close`` in bits, the factor, else ``)`` (before, the note read as a typo to retype
    and 10 GB/s became 10 Gbit/s: a trial)."""
    if close.endswith("Gbps") and "GB" in key:
        return " It is in gigabits per second: 8 times a figure in gigabytes, 80 for 10 GB/s)"
    return ")"


def unknown_topology_fields(doc: Mapping[str, Any]) -> list[str]:
    """A topology's fields that a ClusterTopology does not have, each with the field it is
    likely a typo of (one line per field name and place, however many entries repeat it)."""
    import difflib

    out: dict[str, str] = {}
    for section, known in TOPOLOGY_FIELDS.items():
        path = section.removesuffix("[]")
        node: Any = doc
        for part in filter(None, path.split(".")):
            node = node.get(part) if isinstance(node, Mapping) else None
        entries = node if section.endswith("[]") and isinstance(node, list) else [node]
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            for key in entry:
                where = f"{section}." if section else ""
                if key in known or f"{where}{key}" in out:
                    continue
                text = f"{where}{key} is not a ClusterTopology field: ignored"
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.7)
                if close:
                    text += f" (did you mean {where}{close[0]}?" + _bytes_not_bits(
                        str(key), close[0]
                    )
                out[f"{where}{key}"] = text
    return list(out.values())
