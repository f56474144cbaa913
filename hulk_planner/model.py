"""The planner's data model: servers, links, clusters, training jobs and plans.

Every class validates itself in ``__post_init__`` and raises ``InvalidRequest`` naming the
offending field, so a bad value is caught where it enters, not deep inside a planner.
Field names are the Python spellings of the public file format
(``docs/formats.md``); ``hulk_planner.io`` maps between the two.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from hulk_planner.errors import InvalidRequest, number_fix, range_fix, scale_fix, shown

Parallelism = Literal["data", "tensor"]
GIB = 1024**3
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# Bounds far past any real hardware or network: a larger value is a typo (1e300 TFLOPS
# overflowed the cost model into NaN and a traceback).
MAX_GPUS = 100_000  # per server
# per GPU: 1 TiB, the operator's bound on its node label too (the largest GPUs hold under
# 300 GiB); a MiB figure (81559, as GPU Feature Discovery's label gives it) was accepted
MAX_GPU_MEMORY_GIB = 1024
MAX_GPU_TFLOPS = 1e6  # per GPU
# 10 GFLOPS: below any GPU; 1e-300 made the step time infinite, told as "no memory"
MIN_GPU_TFLOPS = 0.01
# The CRD's bound on spec.model.layers (crds/hulktrainingjobs.hulk.dev.yaml): `hulk plan`
# planned 200,000 layers that `kubectl apply` refuses (a user trial)
MAX_LAYERS = 100_000
# and on the model's other sizes, far past any real model (the largest have about 2e12
# parameters, a hidden size of 25,600 and 10^7-token contexts): 1e154 for both hiddenSize
# and sequenceLength overflowed the activation memory into a traceback (a user trial)
MAX_PARAMETERS = 10**15
MAX_HIDDEN_SIZE = 10**6
MAX_SEQUENCE_LENGTH = 10**8
MAX_ATTENTION_HEADS = 10**6
MAX_BATCH = 10**9  # sequences per step; 1e19 overflowed a C long in the cost model
MAX_LATENCY_MS = 1e7  # one-way, about three hours
MAX_GBPS = 1e7
# 1 Mbit/s: below any link training runs over; 1e-320 overflowed the transfer time (a review)
MIN_GBPS = 1e-3


def check_seed(where: str, seed: int) -> None:
    """Raise ``InvalidRequest`` naming ``where`` unless ``seed`` is 0 to 2**32 - 1 (numpy's
    range), as ``hulk plan``, ``hulk train`` and ``hulk topology --random`` take it."""
    if not 0 <= seed < 2**32:
        raise InvalidRequest(
            where, f"must be 0 to 2**32 - 1, got {seed}", "give a whole number in it"
        )


def check_positive(
    where: str,
    value: object,
    *,
    integer: bool = False,
    allow_zero: bool = False,
    at_most: float | None = None,
    at_least: float | None = None,
) -> None:
    """Raise ``InvalidRequest`` naming ``where`` and the fix unless ``value`` is a finite
    number above zero (or zero, with ``allow_zero``; from ``at_least`` to ``at_most``, where
    a value past them can only be a typo and would break the cost model); the one check
    behind every numeric field and flag."""
    bound = "zero or more" if allow_zero else "greater than zero"
    # (any real number: numpy's int64 was refused as "must be a number", a trial; the
    # fields keep it as Python's int or float: ``_whole``, ``_real``)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRequest(
            where,
            f"must be a number, got {shown(value)}",
            number_fix(where, value) or range_fix(where, bound),
        )
    if not isinstance(value, int | float):  # (numpy's, a Fraction: checked as Python's)
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        float(value)
    except OverflowError:
        raise InvalidRequest(
            where, f"is too large ({len(str(value))} digits)", scale_fix(where)
        ) from None
    if math.isnan(value) or math.isinf(value):
        raise InvalidRequest(
            where, f"must be a finite number {bound}, got {value!r}", range_fix(where, bound)
        )
    if integer and not float(value).is_integer():
        raise InvalidRequest(
            where,
            f"must be a whole number, got {value!r}",
            f"write a whole number, e.g. {max(1, round(value))}",
        )
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidRequest(where, f"must be {bound}, got {value!r}", range_fix(where, bound))
    if at_most is not None and value > at_most:
        raise InvalidRequest(
            where,
            f"must be at most {_bound(at_most)}, got {value!r}",
            scale_fix(where, value, at_most),
        )
    if at_least is not None and value < at_least:
        raise InvalidRequest(
            where, f"must be at least {_bound(at_least)}, got {value!r}", scale_fix(where)
        )


def _bound(value: float) -> str:
    """A range's bound as a reader writes it: ``10,000,000`` (was ``1e+07``), ``86400``,
    ``0.5``."""
    if not float(value).is_integer():
        return f"{value:g}"
    return f"{int(value):,}" if abs(value) >= 100_000 else str(int(value))


def check_name(where: str, value: object, fix: str) -> None:
    """Raise ``InvalidRequest`` unless ``value`` is a name: a string, not blank."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(where, f"must be a non-empty name, got {shown(value)}", fix)


def check_optional_text(where: str, value: object) -> None:
    """Raise ``InvalidRequest`` unless ``value`` is None or a string."""
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(
            # ('true' as the file writes it, not Python's 'True': a review)
            where,
            f"must be text, got {shown(value)}",
            f"write it as a string: {shown(value)!r}",
        )


def _whole(obj: object, attr: str) -> None:
    """A whole float (``8.0``, ``1.5e9``) or numpy integer as the int its field holds (once
    checked)."""
    value = getattr(obj, attr)
    if value is not None and type(value) is not int:
        object.__setattr__(obj, attr, int(value))


def _real(obj: object, *attrs: str) -> None:
    """Numbers of other types (numpy's float64, int64) as Python's float, once checked: a
    server's ``np.float64`` memory was kept, and dumping its cluster as YAML failed (a
    trial)."""
    for attr in attrs:
        value = getattr(obj, attr)
        if value is not None and type(value) not in (int, float):
            object.__setattr__(obj, attr, float(value))


def _as_tuple(obj: object, attr: str, where: str, kind: type, fix: str) -> None:
    """The field as a tuple of ``kind`` (a list or generator given for it is kept as a
    tuple: a generator was consumed once and then empty, a trial); anything else, or an
    element of another type, is an ``InvalidRequest`` naming the field."""
    value = getattr(obj, attr)
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise InvalidRequest(where, f"must be a list of {kind.__name__}, got {shown(value)}", fix)
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidRequest(
                f"{where}[{i}]", f"must be a {kind.__name__}, got {shown(item)}", fix
            )
    if not isinstance(value, tuple):
        object.__setattr__(obj, attr, items)


@dataclass(frozen=True, slots=True)
class Server:
    """One GPU server: a node of the cluster graph.

    ``gpu_memory_gib`` and ``gpu_tflops`` are per GPU; ``gpu_tflops`` is the peak dense
    16-bit tensor throughput. The planner treats a server as one pipeline worker whose GPUs
    split each layer over the server's own interconnect.
    """

    name: str
    region: str
    gpus: int
    gpu_memory_gib: float
    gpu_tflops: float
    gpu_product: str | None = None
    compute_capability: str | None = None
    zone: str | None = None

    def __post_init__(self) -> None:
        where = f"server {self.name!r}" if isinstance(self.name, str) and self.name else "server"
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidRequest(
                "name",
                f"every server needs a non-empty name, got {shown(self.name)}",
                "give it its node's name",
            )
        if not isinstance(self.region, str) or not self.region.strip():
            raise InvalidRequest(
                f"{where}.region",
                "must be a non-empty string",
                "name the server's region, as its topology.kubernetes.io/region label does",
            )
        if self.gpus == 0:
            raise InvalidRequest(
                f"{where}.gpus", "is 0", "a server with no GPU trains nothing: leave it out"
            )
        check_positive(f"{where}.gpus", self.gpus, integer=True, at_most=MAX_GPUS)
        _whole(self, "gpus")
        check_positive(f"{where}.gpuMemoryGiB", self.gpu_memory_gib, at_most=MAX_GPU_MEMORY_GIB)
        check_positive(
            f"{where}.gpuTFLOPS", self.gpu_tflops, at_most=MAX_GPU_TFLOPS, at_least=MIN_GPU_TFLOPS
        )
        _real(self, "gpu_memory_gib", "gpu_tflops")
        check_optional_text(f"{where}.gpuProduct", self.gpu_product)
        check_optional_text(f"{where}.computeCapability", self.compute_capability)
        check_optional_text(f"{where}.zone", self.zone)

    @property
    def memory_bytes(self) -> float:
        """All GPU memory of the server, in bytes."""
        return self.gpus * self.gpu_memory_gib * GIB

    @property
    def flops(self) -> float:
        """Peak 16-bit FLOP/s of all the server's GPUs."""
        return self.gpus * self.gpu_tflops * 1e12


@dataclass(frozen=True, slots=True)
class Link:
    """An undirected link between two servers; ``latency_ms`` is one-way for 64 bytes."""

    a: str
    b: str
    latency_ms: float
    bandwidth_gbps: float | None = None

    def __post_init__(self) -> None:
        a, b, ms = self.a, self.b, self.latency_ms
        if (  # the usual link, passed without building the messages below (a live cluster
            # of 1,000 measured nodes has 500,000 links: they were half its build time)
            type(a) is str
            and type(b) is str
            and a != b
            and a.strip()
            and b.strip()
            and type(ms) in (int, float)
            and 0 <= ms <= MAX_LATENCY_MS
            and self.bandwidth_gbps is None
        ):
            return
        where = f"link {self.a}-{self.b}"
        for end, value in (("a", self.a), ("b", self.b)):
            check_name(f"{where}.{end}", value, "name a server of spec.nodes")
        if self.a == self.b:
            raise InvalidRequest(
                where,
                f"links server {self.a} to itself",
                "drop it: a server needs no link to itself",
            )
        check_positive(
            f"{where}.latencyMs", self.latency_ms, allow_zero=True, at_most=MAX_LATENCY_MS
        )
        if self.bandwidth_gbps is not None:
            check_positive(
                f"{where}.bandwidthGbps", self.bandwidth_gbps, at_most=MAX_GBPS, at_least=MIN_GBPS
            )
        _real(self, "latency_ms", "bandwidth_gbps")

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


@dataclass(frozen=True, slots=True)
class RegionLink:
    """Latency between any server of region ``a`` and any of region ``b`` (optional field
    ``regionLinks`` of a topology; ``a == b`` gives the intra-region default). Used where no
    server-level link is given, so large clusters need not list every server pair."""

    a: str
    b: str
    latency_ms: float
    bandwidth_gbps: float | None = None

    def __post_init__(self) -> None:
        for end, value in (("a", self.a), ("b", self.b)):
            check_name(f"regionLink {self.a}-{self.b}.{end}", value, "name a region of the servers")
        check_positive(
            f"regionLink {self.a}-{self.b}.latencyMs",
            self.latency_ms,
            allow_zero=True,
            at_most=MAX_LATENCY_MS,
        )
        if self.bandwidth_gbps is not None:
            check_positive(
                f"regionLink {self.a}-{self.b}.bandwidthGbps",
                self.bandwidth_gbps,
                at_most=MAX_GBPS,
                at_least=MIN_GBPS,
            )
        _real(self, "latency_ms", "bandwidth_gbps")


def _links_valid(links: Sequence[Link], servers: set[str]) -> bool:
    """Whether every link names two listed servers and no pair is listed twice (the fast
    path of :class:`Cluster`'s check; :func:`_check_links` says what is wrong)."""
    if not all(lk.a in servers and lk.b in servers for lk in links):
        return False
    return len({(lk.a, lk.b) if lk.a < lk.b else (lk.b, lk.a) for lk in links}) == len(links)


def _check_links(links: Sequence[Link], seen: set[str]) -> None:
    """Raises on the first link naming an unknown server or listed twice."""
    pairs: set[frozenset[str]] = set()
    for link in links:
        for end in (link.a, link.b):
            if end not in seen:
                raise InvalidRequest(
                    f"link {link.a}-{link.b}",
                    f"names unknown server {end!r}",
                    "every link end must be listed in spec.nodes",
                )
        key = frozenset((link.a, link.b))
        if key in pairs:
            raise InvalidRequest(f"link {link.a}-{link.b}", "is listed twice", "keep one")
        pairs.add(key)


@dataclass(frozen=True)
class Cluster:
    """Servers plus the links between them. Server names are unique; links name servers."""

    name: str
    servers: tuple[Server, ...]
    links: tuple[Link, ...] = ()
    region_links: tuple[RegionLink, ...] = ()
    # server pairs that cannot communicate whatever a region link says of their regions
    # (the operator's pairs reported unreachable: before, their region pair was written as
    # a link for each of its other pairs, n^2 of them where the probes sample their peers;
    # a review). A topology file has no such field: ``materialized`` writes them so.
    cut: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_name("metadata.name", self.name, "name the cluster")
        _as_tuple(self, "servers", "spec.nodes", Server, "give Server(...) objects")
        _as_tuple(self, "links", "spec.links", Link, "give Link(...) objects, or () for none")
        _as_tuple(
            self, "region_links", "spec.regionLinks", RegionLink, "give RegionLink(...) objects"
        )
        if not self.servers:
            raise InvalidRequest("spec.nodes", "the cluster has no servers", "list at least one")
        seen: set[str] = set()
        for s in self.servers:
            if s.name in seen:
                raise InvalidRequest(
                    f"server {s.name!r}", f"name {s.name!r} is used twice", "make names unique"
                )
            seen.add(s.name)
        # (a fast check first: 500,000 links at 1,000 measured nodes, and the loop that
        # says what is wrong, a frozenset per link, took 1.9 s of a cluster's 4.4 s build)
        if not _links_valid(self.links, seen):
            _check_links(self.links, seen)
        if self.cut:
            object.__setattr__(self, "cut", tuple(tuple(p) for p in self.cut))
            for pair in self.cut:
                if (
                    len(pair) != 2
                    or pair[0] not in seen
                    or pair[1] not in seen
                    or len(set(pair)) < 2
                ):
                    raise InvalidRequest(
                        f"cut pair {'-'.join(map(str, pair))}",
                        "must name two listed servers",
                        "drop it",
                    )
        region_pairs: set[frozenset[str]] = set()
        for rl in self.region_links:
            if frozenset((rl.a, rl.b)) in region_pairs:
                raise InvalidRequest(f"regionLink {rl.a}-{rl.b}", "is listed twice", "keep one")
            region_pairs.add(frozenset((rl.a, rl.b)))

    @cached_property
    def index(self) -> dict[str, int]:
        return {s.name: i for i, s in enumerate(self.servers)}

    def server(self, name: str) -> Server:
        return self.servers[self.index[name]]

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.region for s in self.servers))

    def without(self, names: Iterable[str]) -> Cluster:
        """The cluster less the named servers and their links."""
        gone = set(names)
        return Cluster(
            self.name,
            tuple(s for s in self.servers if s.name not in gone),
            tuple(lk for lk in self.links if lk.a not in gone and lk.b not in gone),
            self.region_links,
            tuple((a, b) for a, b in self.cut if a not in gone and b not in gone),
        )

    def with_servers(self, servers: Sequence[Server], links: Sequence[Link] = ()) -> Cluster:
        """The cluster plus new servers and links."""
        return Cluster(
            self.name,
            self.servers + tuple(servers),
            self.links + tuple(links),
            self.region_links,
            self.cut,
        )

    def materialized(self) -> Cluster:
        """The same network without ``cut``, as a topology file writes it: each region pair
        holding a cut pair given as a link for each of its other server pairs (its region
        link's latency and bandwidth) in place of its region link."""
        if not self.cut:
            return self
        region = {s.name: s.region for s in self.servers}
        cut = {frozenset(p) for p in self.cut}
        broken = {frozenset(region[n] for n in p) for p in cut}
        by_region: dict[str, list[str]] = {}
        for s in self.servers:
            by_region.setdefault(s.region, []).append(s.name)
        listed = {lk.key for lk in self.links}
        kept, links = [], [lk for lk in self.links if lk.key not in cut]
        dropped = {frozenset((rl.a, rl.b)): rl for rl in self.region_links}
        for k, lk in enumerate(links):  # (a link's bandwidth came from its region link)
            rl = dropped.get(frozenset((region[lk.a], region[lk.b])))
            if lk.bandwidth_gbps is None and rl is not None and frozenset((rl.a, rl.b)) in broken:
                links[k] = Link(lk.a, lk.b, lk.latency_ms, rl.bandwidth_gbps)
        for rl in self.region_links:
            if frozenset((rl.a, rl.b)) not in broken:
                kept.append(rl)
                continue
            for x in by_region.get(rl.a, []):
                for y in by_region.get(rl.b, []):
                    pair = frozenset((x, y))
                    if x == y or (rl.a == rl.b and x > y) or pair in cut or pair in listed:
                        continue
                    a, b = min(x, y), max(x, y)
                    links.append(Link(a, b, rl.latency_ms, rl.bandwidth_gbps))
        links.sort(key=lambda lk: (lk.a, lk.b))
        return Cluster(self.name, self.servers, tuple(links), tuple(kept))


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A transformer's size: what the cost model needs to know of it."""

    parameters: int
    layers: int
    hidden_size: int
    sequence_length: int
    attention_heads: int | None = None
    preset: str | None = None

    def __post_init__(self) -> None:
        for where, value, at_most in (
            ("parameters", self.parameters, MAX_PARAMETERS),
            ("layers", self.layers, MAX_LAYERS),
            ("hiddenSize", self.hidden_size, MAX_HIDDEN_SIZE),
            ("sequenceLength", self.sequence_length, MAX_SEQUENCE_LENGTH),
            ("attentionHeads", self.attention_heads, MAX_ATTENTION_HEADS),
        ):
            if value is not None or where != "attentionHeads":  # (the others are required:
                # None was taken, and the cost model's TypeError came at planning; a trial)
                check_positive(f"spec.model.{where}", value, integer=True, at_most=at_most)
        for attr in ("parameters", "layers", "hidden_size", "sequence_length", "attention_heads"):
            _whole(self, attr)
        if self.preset is not None:
            from hulk_planner.presets import PRESETS

            if self.preset not in PRESETS:
                raise InvalidRequest(
                    "spec.model.preset",
                    f"unknown preset {shown(self.preset)}",
                    f"use one of {', '.join(sorted(PRESETS))}, or None for a model of your own",
                )

    @property
    def heads(self) -> int:
        return self.attention_heads or max(1, self.hidden_size // 128)


@dataclass(frozen=True, slots=True)
class Job:
    """A training job: one model trained with a global batch split into micro-batches."""

    name: str
    model: ModelSpec
    global_batch_size: int
    micro_batch_size: int
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _DNS1123.match(self.name):
            raise InvalidRequest(
                "metadata.name",
                f"{self.name!r} is not a valid job name",
                "use lowercase letters, digits and '-', as Kubernetes names do",
            )
        if len(self.name) > 253:
            raise InvalidRequest(
                "metadata.name",
                f"is {len(self.name)} characters long",
                "Kubernetes names hold at most 253: shorten it",
            )
        if not isinstance(self.model, ModelSpec):
            raise InvalidRequest(
                "spec.model",
                f"must be a ModelSpec, got {shown(self.model)}",
                "give ModelSpec(...), or preset_model(NAME) for a preset (hulk_planner.presets)",
            )
        for field_name, size in (
            ("globalBatchSize", self.global_batch_size),
            ("microBatchSize", self.micro_batch_size),
        ):
            check_positive(f"spec.training.{field_name}", size, integer=True, at_most=MAX_BATCH)
        _whole(self, "global_batch_size")
        _whole(self, "micro_batch_size")
        priority: object = self.priority
        if isinstance(priority, numbers.Integral) and not isinstance(priority, bool | int):
            priority = int(priority)  # (numpy's integers: a review)
            object.__setattr__(self, "priority", priority)
        if isinstance(priority, bool) or not isinstance(priority, int):
            if not (isinstance(priority, float) and priority.is_integer()):
                raise InvalidRequest(
                    "spec.priority",
                    f"must be a whole number, got {shown(priority)}",
                    "higher numbers are planned first; 0 is the default",
                )
            object.__setattr__(self, "priority", int(priority))
        if self.micro_batch_size > self.global_batch_size:
            raise InvalidRequest(
                "spec.training.microBatchSize",
                f"{self.micro_batch_size} is larger than globalBatchSize {self.global_batch_size}",
                "make microBatchSize at most globalBatchSize",
            )


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: layers ``[start, end)`` held by ``nodes``.

    With ``parallelism == "data"`` every node holds the whole stage (replica r of the
    pipeline is the r-th node of each stage); with ``"tensor"`` the nodes split each layer.
    """

    layers: tuple[int, int]
    nodes: tuple[str, ...]
    parallelism: Parallelism = "data"

    def __post_init__(self) -> None:
        layers = self.layers
        if (
            not isinstance(layers, tuple | list)
            or len(layers) != 2
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in layers)
        ):
            raise InvalidRequest(
                "stages[].layers",
                f"must be a pair of whole numbers [start, end), got {shown(layers)}",
                "write the stage's first layer and the one after its last, e.g. [0, 12]",
            )
        start, end = int(layers[0]), int(layers[1])  # (numpy's integers too: a review)
        if not 0 <= start < end:
            raise InvalidRequest(
                "stages[].layers",
                f"{[start, end]} is not a range [start, end)",
                "write the stage's first layer (0 or more) and then the one after its last, "
                "e.g. [0, 12]",
            )
        if layers != (start, end) or not all(type(v) is int for v in layers):
            object.__setattr__(self, "layers", (start, end))
        if isinstance(self.nodes, str) or not isinstance(self.nodes, tuple | list):
            raise InvalidRequest(
                "stages[].nodes",
                f"must be a list of server names, got {shown(self.nodes)}",
                "give a tuple of names, e.g. ('a',)",
            )
        if not self.nodes:
            raise InvalidRequest(
                "stages[].nodes", "a stage needs at least one node", "list its servers"
            )
        for n in self.nodes:
            if not isinstance(n, str) or not n:
                raise InvalidRequest("stages[].nodes", f"must hold server names, got {shown(n)}")
        if len(set(self.nodes)) != len(self.nodes):
            raise InvalidRequest(
                "stages[].nodes",
                f"names a server twice: {list(self.nodes)}",
                "a server holds one replica of a stage: list it once",
            )
        if not isinstance(self.nodes, tuple):
            object.__setattr__(self, "nodes", tuple(self.nodes))
        if self.parallelism not in ("data", "tensor"):
            raise InvalidRequest(
                "stages[].parallelism", f"{self.parallelism!r} is unknown", "use 'data' or 'tensor'"
            )

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


@dataclass(frozen=True, slots=True)
class JobPlan:
    """Where one job runs: its stages in pipeline order."""

    name: str
    stages: tuple[Stage, ...]
    micro_batches: int
    predicted_iteration_seconds: float = math.nan

    def __post_init__(self) -> None:
        where = f"jobs[{self.name}]" if isinstance(self.name, str) else "jobs[]"
        if not isinstance(self.name, str):  # ("" is the operator's: a plan read from status)
            raise InvalidRequest(f"{where}.name", f"must be text, got {shown(self.name)}")
        _as_tuple(self, "stages", f"{where}.stages", Stage, "give Stage(...) objects")
        if not self.stages:
            raise InvalidRequest(f"{where}.stages", "is empty", "a placed job has a stage or more")
        check_positive(f"{where}.microBatches", self.micro_batches, integer=True)
        _whole(self, "micro_batches")
        t = self.predicted_iteration_seconds
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or t < 0:
            raise InvalidRequest(
                f"{where}.predictedIterationSeconds",
                f"must be a number zero or more (or NaN: not predicted), got {shown(t)}",
            )
        _real(self, "predicted_iteration_seconds")  # (np.float64 from some planners: a trial)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for st in self.stages for n in st.nodes)

    @property
    def replicas(self) -> int:
        st = self.stages[0]
        return len(st.nodes) if st.parallelism == "data" else 1


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A job that got no servers, and why."""

    name: str
    reason: str

    def __post_init__(self) -> None:
        check_name("unplaced[].name", self.name, "give the job's name")
        if not isinstance(self.reason, str):
            raise InvalidRequest(
                f"unplaced[{self.name}].reason", f"must be text, got {shown(self.reason)}"
            )


@dataclass(frozen=True)
class Plan:
    """The result of planning: placed jobs and the jobs that could not be placed."""

    planner: str
    jobs: tuple[JobPlan, ...] = ()
    unplaced: tuple[Unplaced, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        check_name("planner", self.planner, "name the planner that made it")
        _as_tuple(self, "jobs", "jobs", JobPlan, "give JobPlan(...) objects")
        _as_tuple(self, "unplaced", "unplaced", Unplaced, "give Unplaced(...) objects")
        _as_tuple(self, "notes", "notes", str, "give notes as strings")
        # (a job listed twice, or placed and unplaced at once, was taken: the assignment
        # kept one of its placements, the cost model scored both; a library trial)
        seen: dict[str, str] = {}
        for part, name in [("jobs", jp.name) for jp in self.jobs] + [
            ("unplaced", u.name) for u in self.unplaced
        ]:
            if name in seen:
                also = "listed twice" if seen[name] == part else f"also in {seen[name]}"
                raise InvalidRequest(
                    f"{part}[{name}]",
                    f"job {name!r} is {also}",
                    "a plan places a job once, or lists it once as unplaced: keep one",
                )
            seen[name] = part

    def job(self, name: str) -> JobPlan | None:
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def assignment(self) -> dict[str, str]:
        """Server name -> job name, for every server the plan uses."""
        return {n: j.name for j in self.jobs for n in j.nodes}
