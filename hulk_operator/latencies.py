"""What the probes' NodeLatency objects say about server pairs, and the cluster the planner
sees from them and the servers.

Fresh probe measurements (``hulk_probe.links``) give server links; every pair without one
is estimated: the median measured latency between the two regions where a pair of them was
measured, else ``same_region_latency_ms`` within a region and ``cross_region_latency_ms``
across regions; the job's status says so. A pair with a fresh "unreachable" report gets
neither a link nor an estimate: for the planner, as for any pair without a link, the two
cannot communicate. So does an unmeasured pair of two regions whose every measured pair is
freshly reported unreachable, or of a server that its peers report unreachable and none
measures (:func:`with_regions`).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from hulk_operator.inventory import NodeInfo
from hulk_planner.errors import HulkError
from hulk_planner.model import Cluster, Link, RegionLink, Server

Pair = frozenset[str]


@dataclass(frozen=True)
class Latencies:
    """What the probe's NodeLatency objects say about server pairs: fresh one-way
    latencies (``hulk_probe.links``), and pairs reported unreachable. ``unreachable``
    holds the pairs of fresh reports and, of ``stale_unreachable``, those last reported
    unreachable in a report past ``latency_max_age_s`` that nothing fresher measured: a
    partition is kept until a probe measures the pair again (before, such a report aged
    into the fallback estimate, and a job was planned across a known partition while the
    probes were down: a user trial)."""

    measured: Mapping[Pair, float] = field(default_factory=dict)
    unreachable: frozenset[Pair] = frozenset()
    stale_unreachable: frozenset[Pair] = frozenset()
    # of ``unreachable``, pairs taken as unreachable though no report says so: every
    # measured pair of their two regions is reported unreachable, or one end is ``cut_off``
    # (``with_regions``)
    inferred_unreachable: frozenset[Pair] = frozenset()
    # of the nodes two fresh reports or more call unreachable (``cut_off``'s candidates):
    # who reports each so, and whose fresh reports measure it (a node's own last report,
    # written before it was lost, neither; nor its own reports of others: directed)
    reported_by: Mapping[str, frozenset[str]] = field(default_factory=dict, compare=False)
    heard_by: Mapping[str, frozenset[str]] = field(default_factory=dict, compare=False)
    # the nodes whose fresh reports call some peer unreachable (alive and seeing a loss; a
    # node lost at once wrote its last report before: it calls none so)
    complaining: frozenset[str] = field(default=frozenset(), compare=False)
    # the nodes whose fresh reports measure some peer reachable
    measuring: frozenset[str] = field(default=frozenset(), compare=False)
    # region pair -> the median of its measured links, over every server (``with_regions``;
    # None: not applied, ``build_cluster`` takes those of the servers it is given)
    region_medians: Mapping[Pair, float] | None = field(default=None, compare=False)
    regions: tuple[tuple[str, str], ...] | None = field(default=None, compare=False)
    source: Latencies | None = field(default=None, compare=False, repr=False)
    # ``measured_links``' one build, shared with the copies ``with_regions`` makes (it goes
    # with the reading: a cache beside it kept the last reading's alive after the next);
    # not an argument: a copy made with ``replace`` gets its own
    built: dict[str, _Built] = field(default_factory=dict, init=False, compare=False, repr=False)
    # there are NodeLatency objects and none is fresh (``stale_probes``): every latency is
    # an estimate, and the pairs of ``stale_unreachable`` stay cut
    probes_stale: bool = field(default=False, compare=False)


def unreachable_reports(
    latency_objects: Iterable[Mapping[str, Any]], max_age_s: float, now: datetime
) -> tuple[dict[str, set[str]], frozenset[Pair], frozenset[Pair]]:
    """What reports mark ``reachable: false``: (of fresh reports, their object's
    ``status.lastPublished`` at most ``max_age_s`` old, each peer so marked with the nodes
    that mark it, and those pairs; the pairs of older ones that no fresh report marks).
    The fresh ones are the veto ``hulk_probe.links`` applies, which drops the link; here
    they also rule out a fallback for the pair, and tell ``cut_off`` who reports whom."""
    from hulk_probe.links import fresh

    by: dict[str, set[str]] = {}
    old: set[Pair] = set()
    for obj in latency_objects:
        source = (obj.get("metadata") or {}).get("name")
        status = obj.get("status") or {}
        if not source:
            continue
        now_fresh = fresh(status.get("lastPublished"), now, max_age_s)
        for entry in status.get("peers") or []:
            peer = entry.get("node")
            if entry.get("reachable") is False and isinstance(peer, str) and peer != source:
                if now_fresh:
                    by.setdefault(peer, set()).add(source)
                else:
                    old.add(frozenset((source, peer)))
    cut = frozenset(frozenset((s, t)) for t, sources in by.items() for s in sources)
    return by, cut, frozenset(old - cut)


def slowest_publisher(latency_objects: Iterable[Mapping[str, Any]]) -> tuple[float, str] | None:
    """How old a probe's measurements may be when it writes them, at most: the longest
    ``status.publishIntervalSeconds`` plus ``intervalSeconds`` (the probe's own) among
    the probes' objects, with the node's name (None where none says: older probes)."""
    slowest: tuple[float, str] | None = None
    for obj in latency_objects:
        status = obj.get("status") or {}
        spacing, interval = status.get("publishIntervalSeconds"), status.get("intervalSeconds")
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(spacing, int | float) and isinstance(name, str):
            age = float(spacing) + (float(interval) if isinstance(interval, int | float) else 0)
            if slowest is None or age > slowest[0]:
                slowest = (age, name)
    return slowest


def stale_probes(
    latency_objects: Iterable[Mapping[str, Any]], max_age_s: float, now: datetime | None = None
) -> str | None:
    """Where there are NodeLatency objects and none is fresh (``hulk_probe.links.fresh``:
    published within ``max_age_s``, and not ahead of this clock past its skew), what to
    tell: every pair's latency is then an estimate, and nothing else said so (a user trial:
    a re-plan put a stage on a 740 ms pair taken as 100 ms). None otherwise."""
    from hulk_probe.links import fresh, parse_time

    when = now or datetime.now(UTC)
    objects = list(latency_objects)
    published = [(o.get("status") or {}).get("lastPublished") for o in objects]
    if not objects or any(fresh(t, when, max_age_s) for t in published):
        return None
    stamps = [
        (t, str((o.get("metadata") or {}).get("name")))
        for o, text in zip(objects, published, strict=True)
        if (t := parse_time(text)) is not None and t <= when
    ]
    if stamps:
        newest, node = max(stamps)
        said = f"the newest, {node}'s, is {(when - newest).total_seconds():.0f} s old"
    else:  # (none has a time, or only times ahead of this clock: a node's clock is wrong)
        said = "none has a lastPublished time that is not in the future"
    return (
        f"no NodeLatency status was published in the last {max_age_s:g} s "
        f"(--latency-max-age-s): {said}, so every pair's latency is an estimate; are the "
        "probes running? (kubectl get daemonset -A -l app.kubernetes.io/component=probe)"
    )


def read_latencies(
    latency_objects: Iterable[Mapping[str, Any]], max_age_s: float, now: datetime | None = None
) -> Latencies:
    """NodeLatency objects -> :class:`Latencies` (links by the probe's pure function)."""
    from hulk_probe.links import directed_latencies, links_from_directed

    items = list(latency_objects)
    when = now or datetime.now(UTC)
    directed, vetoed = directed_latencies(items, when, max_age_s)
    measured = links_from_directed(directed, vetoed)
    by, cut, old = unreachable_reports(items, max_age_s, when)
    stale = frozenset(p for p in old if p not in measured)
    # (``cut_off``'s candidates: the nodes two fresh reports or more mark unreachable)
    reported = {t: frozenset(sources) for t, sources in by.items() if len(sources) >= 2}
    heard: dict[str, set[str]] = {}
    for source, target in directed if reported else ():
        if target in reported:
            heard.setdefault(target, set()).add(source)
    return Latencies(
        measured,
        cut | stale,
        stale,
        reported_by=reported,
        heard_by={t: frozenset(s) for t, s in heard.items()},
        complaining=frozenset(s for sources in by.values() for s in sources),
        measuring=frozenset(source for source, _ in directed),
        probes_stale=stale_probes(items, max_age_s, when) is not None,
    )


def stale_note(latencies: Latencies) -> str | None:
    """What a job left unplaced is told while no probe publishes (``probes_stale``): its
    links are estimates, and pairs last reported unreachable stay cut (before, only the
    operator's log said so, and a job waited on "no pipeline ... fits it": a trial). The
    same words every round (no age in seconds), so its condition and Event stand."""
    if not latencies.probes_stale:
        return None
    cut = len(latencies.stale_unreachable)
    kept = f", and {cut} pair(s) last reported unreachable stay cut" if cut else ""
    return (
        "no NodeLatency status is fresh (--latency-max-age-s): every link's latency is an "
        f"estimate{kept}; are the probes running? (kubectl get daemonset -A -l "
        "app.kubernetes.io/component=probe)"
    )


def server_regions(nodes: Mapping[str, NodeInfo]) -> dict[str, str]:
    """Each planner server's region, by node name."""
    return {n: i.server.region for n, i in nodes.items() if i.server is not None}


def node_regions(nodes: Mapping[str, NodeInfo]) -> dict[str, str]:
    """Every node's region, servers or not (``inventory.node_region``): a probe on a node
    that is no planner server (CPU nodes, MIG slices) is one of its region's probers."""
    from hulk_operator.inventory import node_region

    return {n: node_region(i) for n, i in nodes.items()}


_REGIONS_CACHE: list[tuple[Latencies, tuple[tuple[str, str], ...], Latencies]] = []


def with_regions(
    latencies: Latencies, region: Mapping[str, str], everyone: Mapping[str, str] | None = None
) -> Latencies:
    """``latencies`` read with every server's region (``region``: node -> region):

    - ``region_medians``: the median measured latency of each region pair, over every
      server's links (before, over those of the servers a round planned on: a region pair
      measured between busy servers alone was given the flags' estimate, and the job's
      status, the preview and ``hulk topology`` disagreed; a review);
    - every unmeasured, unreported pair taken as unreachable where every measured pair of
      its two regions is freshly reported unreachable (``inferred_unreachable``): a node
      not yet probed beside a region cut off from its own is most likely cut off too
      (before, it had the region-level estimate, and a job was planned across the
      partition; a user trial). Reports past the max age alone do not count: where the
      probes stopped, every measurement ages out and only their old partitions stay;
    - every pair of a server ``cut_off`` from its peers (``everyone``: every node's region,
      servers or not, as the probes' own region is any node's; default ``region``).

    Applied to the latencies as read (an already applied one is read again from its
    source); the last result is kept: the listing is shared by every job."""
    base = latencies.source or latencies
    key = tuple(sorted(region.items()))
    if everyone is not None and everyone != region:
        key += (("", ""), *sorted(everyone.items()))  # (a mark, then every node's)
    if latencies.regions == key:
        return latencies
    for seen, seen_key, out in _REGIONS_CACHE:
        if seen is base and seen_key == key:
            return out

    medians = region_medians(base.measured.items(), region)
    reported = base.unreachable - base.stale_unreachable
    broken = {k for a, b in reported if (k := _region_pair(region, a, b))}
    by_region = _by_region(region)
    known = base.measured.keys() | base.unreachable
    dark = {
        p
        for x, y in broken
        if frozenset((x, y)) not in medians
        for a in by_region[x]
        for b in by_region[y]
        if a != b and (p := frozenset((a, b))) not in known
    }
    lost = cut_off(base, region if everyone is None else everyone)
    dark |= {  # (its own last report's links too: written before it was lost)
        p
        for a in lost
        if a in region
        for b in region
        if a != b and (p := frozenset((a, b))) not in base.unreachable
    }
    out = replace(
        base,
        unreachable=base.unreachable | dark,
        inferred_unreachable=frozenset(dark),
        region_medians=medians,
        regions=key,
        source=base,
    )
    object.__setattr__(out, "built", base.built)  # (the same links: built once for both)
    _REGIONS_CACHE[:] = [(base, key, out)]
    return out


def cut_off(latencies: Latencies, region: Mapping[str, str]) -> set[str]:
    """The nodes cut off from every peer: those that two peers or more freshly report
    unreachable, one of their own region (``region``: node -> region) among them, and that
    no other node's fresh report measures, but those of nodes so reported themselves that
    report no peer unreachable (a rack lost at once, whose last reports, written before,
    measured one another); not a node that itself reports some peers unreachable while it
    measures others (alive, and partitioned from some).

    With probes that sample their peers (``--peers-per-region``) most pairs of a node are
    never probed, and they had the region pair's estimate: a job could be planned onto a
    node its probes had lost. A reporter of its own region: where only other regions report
    it, a partition between the regions explains the reports, which ``with_regions``
    handles by region pair. Reports by it of others do not count (a review: a new node
    reporting two dead ones was cut off), and the two sides of a split, both alive, keep
    each other's measurements (a review: a one-region cluster split in two was cut off
    whole)."""
    suspects = {
        x
        for x, by in latencies.reported_by.items()
        if len(by) >= 2 and x in region and any(region.get(s) == region[x] for s in by)
    }
    silent = suspects - latencies.complaining  # (lost nodes' last words: written before)
    return {
        x
        for x in suspects
        if not (latencies.heard_by.get(x, frozenset()) - silent - {x})
        and (x in silent or x not in latencies.measuring)
    }


def build_cluster(
    servers: Sequence[Server],
    latencies: Latencies,
    *,
    same_region_ms: float,
    cross_region_ms: float,
    name: str = "kubernetes",
) -> Cluster:
    """Servers, their measured links, and region-level fallbacks for every other pair
    except the unreachable ones, which the cluster lists as cut (``Cluster.cut``: no
    latency, whatever their region link says; a topology file writes their region pair as
    a link for each of its other server pairs, ``Cluster.materialized``). A fallback is
    the median of the measured links between the two regions (within the
    region, for a pair in one), else ``same_region_ms`` / ``cross_region_ms``: a node not
    yet probed is placed by what its region's links measure (before, the flags' 1 and
    100 ms stood for every unmeasured pair, a measured 20 ms region pair's among them).
    Servers are sorted by name: a plan must not depend on the order the nodes were seen in
    (the planner draws its moves from the server list)."""
    servers = sorted(servers, key=lambda s: s.name)
    names = {s.name for s in servers}
    cut = {p for p in latencies.unreachable if p <= names and len(p) == 2}
    cut_ends = {(min(p), max(p)) for p in cut}
    built = measured_links(latencies)
    for pair, exc in built.invalid.items():
        if pair <= names and pair not in cut:
            raise exc
    measured = [
        lk
        for lk in built.links
        if lk.a in names and lk.b in names and (not cut_ends or (lk.a, lk.b) not in cut_ends)
    ]
    region = {s.name: s.region for s in servers}
    between = latencies.region_medians
    if between is None:  # (not read with every server's region: those given)
        between = region_medians((((lk.a, lk.b), lk.latency_ms) for lk in measured), region)
    regions = sorted(set(region.values()))
    region_links = [
        RegionLink(
            a, b, between.get(frozenset((a, b)), same_region_ms if a == b else cross_region_ms)
        )
        for i, a in enumerate(regions)
        for b in regions[i:]
    ]
    # every region pair its link, the unreachable pairs cut from it (before, a region pair
    # holding one was written as a link for each of its other server pairs: n^2 links where
    # the probes sample their peers, 4.4 million and 157 s at 3,000 nodes; a review)
    return Cluster(
        name, tuple(servers), tuple(measured), tuple(region_links), tuple(sorted(cut_ends))
    )


def _by_region(region: Mapping[str, str]) -> dict[str, list[str]]:
    """Region -> its servers, in ``region``'s order (``region``: server -> region)."""
    out: dict[str, list[str]] = {}
    for name, r in region.items():
        out.setdefault(r, []).append(name)
    return out


class _Built(NamedTuple):
    """:func:`measured_links`' build for a reading's ``measured`` links."""

    links: tuple[Link, ...]  # the valid ones, sorted by their ends
    invalid: dict[Pair, HulkError]  # pairs no Link takes (a blank name, a latency too large)


def measured_links(latencies: Latencies) -> _Built:
    """Every measured pair as a planner ``Link`` (its ends in name order), sorted, and the
    pairs that make no valid link with why: built once per reading of the NodeLatency
    objects, which every planning round until the next listing shares (at 1,000 measured
    nodes, building 500,000 links took 2.9 s of each round's 4.4 s cluster build,
    ``bench/latency_listing.py``; they hold 36 MB). An invalid pair fails only the rounds
    that plan on both its servers, as before the links were shared (a review: a peer named
    " " in one report stopped every round)."""
    seen = latencies.built.get("measured")  # (a copy with other links has a ``built`` of its own)
    if seen is not None:
        return seen
    rows = sorted((min(p), max(p), ms) for p, ms in latencies.measured.items() if len(p) == 2)
    links: list[Link] = []
    invalid: dict[Pair, HulkError] = {}
    for a, b, ms in rows:
        try:
            links.append(Link(a, b, ms))
        except HulkError as exc:
            invalid[frozenset((a, b))] = exc
    built = latencies.built["measured"] = _Built(tuple(links), invalid)
    return built


def fallback_words(same_region_ms: float, cross_region_ms: float) -> str:
    """How :func:`build_cluster` estimates an unmeasured pair, for status and preview."""
    return (
        "the median measured latency between their regions where a pair of them was "
        f"measured, else {same_region_ms:g} ms within a region and {cross_region_ms:g} ms "
        "across regions"
    )


def used_words(
    used: Sequence[tuple[str, str, float]], same_region_ms: float, cross_region_ms: float
) -> str:
    """What a plan's unmeasured pairs were given (:func:`estimates_used`), then the rule:
    ``seoul 1 ms (the median ...)``; the rule alone where none is known."""
    rule = fallback_words(same_region_ms, cross_region_ms)
    return f"{estimates_words(used)} ({rule})" if used else rule


# (a pair ``with_regions`` took as unreachable, among those counted as reported)
INFERRED_WORDS = (
    "not reported themselves: of a server its peers report unreachable, or of a region pair "
    "whose every measured pair is reported so"
)


def _region_pair(region: Mapping[str, str], a: str, b: str) -> tuple[str, str] | None:
    """The regions of servers ``a`` and ``b``, in order (None where one has none)."""
    ra, rb = region.get(a), region.get(b)
    if ra is None or rb is None:
        return None
    return (ra, rb) if ra <= rb else (rb, ra)


def region_medians(
    links: Iterable[tuple[Collection[str], float]], region: Mapping[str, str]
) -> dict[Pair, float]:
    """The median measured latency of each region pair (a one-region pair for links within
    a region) of ``links`` (``(pair, ms)``: a mapping's items), by the regions ``region``
    gives their servers (a link of a server it does not name is left out)."""
    seen: dict[tuple[str, str], list[float]] = {}
    for (a, b), ms in links:  # (pairs of two; tuples: 500,000 of them at 1,000 nodes)
        if (k := _region_pair(region, a, b)) is not None:
            seen.setdefault(k, []).append(ms)
    return {frozenset(k): statistics.median(v) for k, v in seen.items()}


def _pairs(nodes: Sequence[str]) -> list[Pair]:
    ns = sorted(set(nodes))
    return [frozenset((a, b)) for i, a in enumerate(ns) for b in ns[i + 1 :]]


def estimated_pairs(nodes: Sequence[str], latencies: Latencies) -> int:
    """How many pairs of ``nodes`` have no measurement (their latency is an estimate)."""
    return sum(
        1 for p in _pairs(nodes) if p not in latencies.measured and p not in latencies.unreachable
    )


def estimates_used(
    nodes: Sequence[str], latencies: Latencies, cluster: Cluster
) -> tuple[tuple[str, str, float], ...]:
    """The estimate ``cluster`` gives the unmeasured pairs of ``nodes``, by region pair:
    ``(region, region, ms)`` sorted (a user trial: the message named the rule, not what
    it gave each region pair)."""
    region = {s.name: s.region for s in cluster.servers}
    wanted: dict[tuple[str, str], Pair] = {}
    for p in _pairs(nodes):
        if p in latencies.measured or p in latencies.unreachable or not p <= region.keys():
            continue
        ra, rb = sorted(region[n] for n in p)
        wanted.setdefault((ra, rb), p)
    by_region = {(min(r.a, r.b), max(r.a, r.b)): r.latency_ms for r in cluster.region_links}
    out = {k: by_region[k] for k in wanted if k in by_region}
    rest = {wanted[k]: k for k in wanted if k not in by_region}  # (a broken region pair's)
    for link in cluster.links if rest else ():
        k = rest.get(frozenset((link.a, link.b)))
        if k is not None:
            out[k] = link.latency_ms
    return tuple(sorted((a, b, ms) for (a, b), ms in out.items()))


def estimates_words(used: Sequence[tuple[str, str, float]], most: int = 6) -> str:
    """``berlin-seoul 100 ms, seoul 1 ms``: :func:`estimates_used` for a message."""
    words = [f"{a if a == b else f'{a}-{b}'} {ms:g} ms" for a, b, ms in used[:most]]
    more = f" and {len(used) - most} more region pair(s)" if len(used) > most else ""
    return ", ".join(words) + more


def cut_pairs(nodes: Sequence[str], latencies: Latencies) -> tuple[int, int, int]:
    """How many pairs of ``nodes`` are unreachable (no link, no fallback), how many of
    those only by reports past ``latency_max_age_s``, and how many by no report, taken as
    unreachable with their regions (``with_regions``)."""
    cut = [p for p in _pairs(nodes) if p in latencies.unreachable]
    stale = sum(1 for p in cut if p in latencies.stale_unreachable)
    return len(cut), stale, sum(1 for p in cut if p in latencies.inferred_unreachable)
