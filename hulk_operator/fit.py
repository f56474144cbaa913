"""Whether a job can be placed on the cluster at all, and how to say why not.

These checks look at the job's constraints (allowed regions, node selector, the template's
required affinity and requests) against every node, whatever other jobs hold: only an edit
of the job or new nodes change their answer. The operator refuses an edit that fails one of
them (the job keeps running on its last valid spec) and quotes them when a job waits.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from hulk_operator import GPU
from hulk_operator.entries import JobEntry, Key
from hulk_operator.inventory import NO_GPUS, NodeInfo, Resources, fits, node_region, selected
from hulk_operator.latencies import Pair
from hulk_planner.cost import (
    MEMORY_USABLE,
    gib_text,
    memory_need_bytes,
    server_capacity,
    smaller,
    stage_memory,
    too_big,
)
from hulk_planner.datasets import slug
from hulk_planner.model import Server
from hulk_planner.topology import components

AFFINITY = "the template's required node affinity"
NO_NODE = (
    "the cluster has no node, or none could be read (add GPU nodes, or let the reader list nodes)"
)


def unmatched(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> str | None:
    """Why no node of the cluster matches the job's constraints (its regions, selectors,
    required affinity), naming the constraint to change; None if some node does. Unlike
    what other jobs hold, only an edit (or new nodes) changes this."""
    if matching_nodes(entry, nodes):
        return None
    if not nodes:  # (before: "no node matches the job's constraints together ()": a review)
        return NO_NODE
    sel = dict(entry.node_selector)
    parts = []
    regions = entry.allowed_regions
    if regions and not any(selected(i, None, regions) for i in nodes.values()):
        known = sorted({i.server.region for i in nodes.values() if i.server})
        hints = _close_regions(regions, {slug(k): k for k in known})
        parts.append(
            f"spec.allowedRegions {list(regions)} names no region with GPU servers "
            f"(regions: {', '.join(known) or 'none'}){hints}"
        )  # (a name the label has in other case or spacing matches: ``inventory.selected``)
    if sel and not any(selected(i, sel, None) for i in nodes.values()):
        parts.append(
            f"{entry.selector_from} {selector_pairs(entry)} matches no node"
            + label_values(sel, nodes)
        )
    if entry.affinity and not any(selected(i, None, None, entry.affinity) for i in nodes.values()):
        parts.append(f"{AFFINITY} matches no node")
    return "; ".join(parts) or (
        "no node matches the job's constraints together ("
        + ", ".join(constraint_names(entry))
        + ")"
    )


def unknown_regions(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> str | None:
    """A note naming the ``allowedRegions`` entries that match no node's region, where
    others do (where none does, :func:`unmatched` refuses the job); None if every one
    matches. Not an error, as a region's nodes may join later; but a typo (``narnia``)
    was dropped without a word on a live cluster, where ``hulk plan`` on a topology file
    refuses it (a user trial)."""
    if not entry.allowed_regions:
        return None
    have = {slug(node_region(i)): node_region(i) for i in nodes.values()}
    missing = [r for r in entry.allowed_regions if slug(r) not in have]
    if not missing or len(missing) == len(entry.allowed_regions):
        return None
    return (
        f"spec.allowedRegions {', '.join(repr(r) for r in missing)} "
        f"{'matches' if len(missing) == 1 else 'match'} no node's region yet (regions: "
        f"{', '.join(sorted(set(have.values())))}){_close_regions(missing, have)}: planned "
        "on the others"
    )


def _close_regions(names: Sequence[str], have: Mapping[str, str]) -> str:
    """``; did you mean paris for 'Pariss'?`` for those of ``names`` close to a region of
    ``have`` (slug -> region), else nothing."""
    hints = []
    for r in names:
        close = difflib.get_close_matches(slug(r), list(have), n=1, cutoff=0.75)
        if close and slug(r) not in have:
            hints.append(f"{have[close[0]]} for {r!r}")
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def stage_gpu_cap(asked: int, gpu_max: tuple[str, float] | None) -> int | None:
    """The most GPUs a job's stage pod gets on any server: the template's ask (``asked``;
    0 where it asks none), within its namespace's LimitRange maximum ``gpu_max`` (name,
    GPUs); None where neither bounds it."""
    caps = [c for c in (asked or None, int(gpu_max[1]) if gpu_max else None) if c is not None]
    return min(caps, default=None)


def stage_server(server: Server, entry: JobEntry) -> Server:
    """``server``, at the GPUs the job's stage pod gets there, as the planner counts it for
    the job: where the template asks GPUs itself, at its trainer container's alone
    (``JobEntry.trainer_gpus``), which the stage computes on and holds its layers in; a
    sidecar's GPUs are the pod's, counted where the pod must fit (free GPUs, quotas,
    LimitRanges), not the stage's. Before, all the pod's: a 1-GPU sidecar beside a 2-GPU
    trainer made the predicted step time and memory too generous, and a stage could get
    more layers than its trainer holds (a review)."""
    gpus = entry.trainer_gpus
    return replace(server, gpus=gpus) if 0 < gpus < server.gpus else server


def too_big_for(
    entry: JobEntry,
    nodes: Mapping[str, NodeInfo],
    unreachable: Collection[Pair] = (),
    gpu_max: tuple[str, float] | None = None,
) -> str | None:
    """Why the job fits on no set of the cluster's servers that its constraints allow, even
    with every one of them free (an edit's ``parameters: 1e13`` for ``1e10``); None when
    their GPU memory could hold it. With the pairs the probe reports ``unreachable``, the
    memory counted is that of the largest group of them that can reach each other (a
    pipeline's servers are linked one to the next): an edit of ``allowedRegions`` to
    regions with no link between them was accepted, and its plan failing removed the
    running job's pods (a user trial). Like :func:`unmatched`, only an edit or new nodes
    change this; what other jobs hold does not count here. A server's memory counted is
    that of the GPUs its stage pod gets: the template's ask, within the namespace's
    LimitRange ``gpu_max`` (name, GPUs) (before, all of its GPUs: a job whose pods ask 1
    GPU each was told to wait for servers that could never hold it; a review), of them
    the trainer's alone (``stage_server``), as the planner counts them."""
    if entry.job is None:
        return None
    matching = matching_nodes(entry, nodes)
    usable = [i for i in matching if i.server is not None]
    # a server too small for one stage pod's requests holds no stage: not counted (before,
    # an edit's cpu: 150 for 15 left 3 servers, and its failed plan removed the running
    # job's pods; a user trial)
    wanted = entry.init_gpus[1]
    roomy = [i.server for i in usable if i.server is not None and holds(i, entry.requests, wanted)]
    if not roomy:  # (no usable GPUs, or requests none holds: the snapshot or
        return None  # requests_fit_nowhere says why)
    if gpu_max is not None and gpu_max[1] < 1:  # (one that allows none refuses the job)
        gpu_max = None
    cap = stage_gpu_cap(entry.requests.gpus, gpu_max)
    servers = [stage_server(replace(s, gpus=min(s.gpus, cap)) if cap else s, entry) for s in roomy]
    limits = constraint_names(entry)
    small = len(roomy) < len(usable)
    if small:
        limits.append(
            f"the stage pods' requests ({describe(entry.requests)}"
            + (f"; init container {entry.init_gpus[0]}: {wanted} {GPU}" if wanted else "")
            + ")"
        )
    where = f"the {len(servers)} server(s) it may use have" if limits else "the whole cluster has"
    fix = (
        f"allow more servers ({', '.join(limits)}), add servers, or use {smaller(entry.job)}"
        if limits
        else f"add servers, or use {smaller(entry.job)}"
    )
    if small:
        fix = f"lower the template's requests, {fix}"
    if any(c.gpus < s.gpus for c, s in zip(servers, roomy, strict=True)):
        bound, more = _gpu_bound(entry, cap, gpu_max)
        where += f", at the GPUs their stage pods get ({bound}),"
        fix = f"{more}, {fix}"
    largest = "the largest server it may use has" if limits else "the largest server has"
    why = too_big(entry.job, servers, where, fix, largest)
    if why is None and unreachable:
        groups = reachable_groups([s.name for s in servers], unreachable)
        if len(groups) > 1:
            by_name = {s.name: s for s in servers}
            best = max(groups, key=lambda g: sum(by_name[n].memory_bytes for n in g))
            why = too_big(
                entry.job,
                [by_name[n] for n in best],
                f"{where} {len(groups)} groups that cannot reach each other (NodeLatency "
                f"reports their pairs unreachable), and the largest, {len(best)} server(s), has",
                fix,
                "the largest server in that group has",
            )
    unread = [i for i in matching if i.server is None and i.problem and i.problem != NO_GPUS]
    if why is not None and unread:  # GPU nodes left out: their labels may be the fix
        why += (
            f"; not counted, {len(unread)} matching node(s) with "
            + ", ".join(f"{i.name}: {i.problem}" for i in unread[:3])
            + (", ..." if len(unread) > 3 else "")
        )
    return why


def _gpu_bound(
    entry: JobEntry, cap: int | None, gpu_max: tuple[str, float] | None
) -> tuple[str, str]:
    """What bounds the GPUs a server's stage counts for the job (``too_big_for``), and
    the fix: its trainer's share of the template's ask (a sidecar holds the rest), the
    LimitRange's maximum (named where both bound it alike), or the template's ask."""
    asked, trainer = entry.requests.gpus, entry.trainer_gpus
    more = "give each stage pod more GPUs"
    if 0 < trainer < asked:
        return (
            f"the template gives its trainer container {trainer} of the {asked} {GPU} a "
            "stage pod asks",
            "give the trainer container more GPUs",
        )
    if gpu_max is not None and int(gpu_max[1]) == cap:
        return f"LimitRange {gpu_max[0]} allows at most {gpu_max[1]:g} {GPU} a pod", more
    return f"the template asks {asked} {GPU} a stage pod", more


def reachable_groups(names: Sequence[str], unreachable: Collection[Pair]) -> list[list[str]]:
    """``names`` split into the groups whose servers can reach each other, one to the next:
    every pair is linked but those reported unreachable (their fallback latency; as
    ``latencies.build_cluster`` builds the cluster). A walk over the complement of the cut
    pairs, so a cluster of 1,000 servers with a few cuts costs no 500,000 pairs."""
    cut: dict[str, set[str]] = {}
    for pair in unreachable:
        if len(pair) == 2:
            a, b = sorted(pair)
            cut.setdefault(a, set()).add(b)
            cut.setdefault(b, set()).add(a)
    if not any(n in cut for n in names):
        return [sorted(set(names))] if names else []
    return components(names, lambda n, left: left - cut.get(n, set()))


def requests_fit_nowhere(
    entry: JobEntry, nodes: Mapping[str, NodeInfo], *, absent_too: bool = True
) -> str | None:
    """Why one stage pod of the job fits on no node its constraints allow even with
    nothing else on it (``cpu: 5000`` for ``5``), naming the fix; None if one could hold
    it (or, ``absent_too`` False, if none has a resource requested). Like
    :func:`unmatched`, only an edit or new nodes change this."""
    need = entry.requests
    init, wanted = entry.init_gpus
    if need == Resources() and not wanted:
        return None
    matching = [i for i in matching_nodes(entry, nodes) if i.server is not None]
    if not matching or any(holds(i, need, wanted) for i in matching):
        return None
    if all(holds(i, need) for i in matching):
        return (
            f"spec.template: init container {init} asks {wanted} {GPU}, more than any of the "
            f"{len(matching)} node(s) matching the job has (it holds them before the trainer "
            "starts); lower its ask"
        )
    absent = missing_resources(need, matching)
    if absent:
        if not absent_too:  # (a device plugin installed later advertises it: it may wait)
            return None
        return (
            f"spec.template: none of the {len(matching)} node(s) matching the job has "
            f"{', '.join(absent)}, which the stage pods request: check the resource's name, "
            "or advertise it on the nodes"
        )
    return (
        f"spec.template: the stage pods' requests ({describe(need)}) fit on none of the "
        f"{len(matching)} node(s) matching the job, even with nothing else on them; lower "
        "the template's requests"
    )


def holds(info: NodeInfo, need: Resources, init_gpus: int = 0) -> bool:
    """Whether the node could hold one stage pod requesting ``need``, whose init container
    asks ``init_gpus``, with nothing else on it (a node with no usable GPUs holds none)."""
    if info.server is None:
        return False
    gpus = info.allocatable.gpus or info.server.gpus
    return gpus >= init_gpus and fits(info.allocatable, Resources(), need, gpus)


FITS_NOWHERE = "fits nowhere"  # how a reason starts where no set of servers could hold it


def says_fits_nowhere(reason: str) -> bool:
    """Whether ``reason`` says no set of the servers the job may use could hold it, even
    all free (``hulk_planner.cost``'s words, and ``edits.unplannable``'s): waiting for
    other jobs does not help."""
    return reason.startswith(FITS_NOWHERE)


def fits_nowhere(
    entry: JobEntry, nodes: Mapping[str, NodeInfo], unreachable: Collection[Pair] = ()
) -> str | None:
    """Why no node or set of the nodes the job may use could hold it, whatever other jobs
    hold (what refuses an edit of a running job), or None."""
    return (
        unmatched(entry, nodes)
        or too_big_for(entry, nodes, unreachable)
        or requests_fit_nowhere(entry, nodes)
    )


def no_room_now(
    entry: JobEntry, nodes: Mapping[str, NodeInfo], held: Mapping[str, Key]
) -> str | None:
    """Why an edit of a running job cannot be planned now, though the cluster could hold
    it (:func:`fits_nowhere` said None): the GPU memory of the servers free for it (its
    own and those no other job holds, ``held``, that match its constraints, take new
    stages, and hold one stage pod's requests) is less than its model needs. None when it
    is not (a plan may still fail for other reasons: then it is told as before). Counted
    with each server's whole memory, as no other pod's GPUs are taken off, so this never
    refuses an edit the planner could place. Before, such an edit removed the running
    job's pods and left it Pending, where a Deployment keeps its old pods while the new
    ones cannot be placed."""
    if entry.job is None:
        return None
    want = entry.init_gpus[1]
    usable = [i for i in matching_nodes(entry, nodes) if holds(i, entry.requests, want)]
    mine = [i for i in usable if held.get(i.name, entry.key) == entry.key]
    free = [i.server for i in mine if i.server is not None and i.offers(entry.tolerations)]
    need = memory_need_bytes(entry.job)
    have = sum(s.memory_bytes for s in free) * MEMORY_USABLE
    layer, room = stage_memory(entry.job, 1, 1), max(map(server_capacity, free), default=0.0)
    if need <= have and layer <= room:
        return None
    own = sum(1 for s in free if held.get(s.name) == entry.key)
    taken = len(usable) - len(mine)
    barred = len(mine) - len(free)
    others = ", ".join(
        part
        for part in (
            f"{taken} held by other jobs" if taken else "",
            f"{barred} cordoned, tainted or not Ready" if barred else "",
        )
        if part
    )
    short = (
        f"it needs {gib_text(need)} of GPU memory, the {len(free)} server(s) free for it "
        f"({own} its own) have {gib_text(have)} usable"
        if need > have
        else f"one layer needs {gib_text(layer)} of GPU memory, the largest of the "
        f"{len(free)} server(s) free for it ({own} its own) has {gib_text(room)} usable"
    )
    rest = f" (of the servers it may use, {others})" if others else ""
    return f"the servers free now cannot hold the edited job: {short}{rest}"


def matching_nodes(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> list[NodeInfo]:
    """The nodes the job's constraints allow (healthy or not)."""
    sel = dict(entry.node_selector)
    return [i for i in nodes.values() if selected(i, sel, entry.allowed_regions, entry.affinity)]


def missing_resources(need: Resources, infos: Sequence[NodeInfo]) -> list[str]:
    """Resources the pods request that none of ``infos`` has (a node reporting no
    allocatable is not checked)."""
    return [
        k
        for k, _ in need.extra
        if not any(i.allocatable == Resources() or i.allocatable.amount(k) for i in infos)
    ]


def label_values(sel: Mapping[str, str], nodes: Mapping[str, NodeInfo], most: int = 6) -> str:
    """The values the GPU nodes carry for each key of a selector that matches none, as
    ``" (gpu: a100, h100; no node has team)"``; empty when there is nothing to say."""
    said = []
    for key in sorted(sel):
        values = sorted({str(i.labels[key]) for i in nodes.values() if key in i.labels})
        if not values:
            said.append(f"no node has {key}")
        elif sel[key] not in values:
            more = f" and {len(values) - most} more" if len(values) > most else ""
            said.append(f"{key}: {', '.join(values[:most])}{more}")
    return f" ({'; '.join(said)})" if said else ""


def selector_pairs(entry: JobEntry) -> str:
    """The job's node selector as ``key=value, ...``."""
    return ", ".join(f"{k}={v}" for k, v in sorted(entry.node_selector))


def describe(r: Resources) -> str:
    parts = [f"{r.gpus} GPU(s)"] if r.gpus else []
    if r.cpu:
        parts.append(f"cpu {r.cpu:g}")
    if r.memory:
        parts.append(f"memory {r.memory / 2**30:.3g} GiB")
    for k, v in r.extra:
        bytes_ = k == "ephemeral-storage" or k.startswith("hugepages-")
        parts.append(f"{k} {v / 2**30:.3g} GiB" if bytes_ else f"{k} {v:g}")
    return ", ".join(parts)


def constraint_names(entry: JobEntry) -> list[str]:
    """The job's placement constraints, as the manifest writes them."""
    limits = []
    if entry.allowed_regions:
        limits.append(f"spec.allowedRegions {list(entry.allowed_regions)}")
    if entry.node_selector:
        limits.append(f"{entry.selector_from} {selector_pairs(entry)}")
    if entry.affinity:
        limits.append(AFFINITY)
    return limits


def planned_within(entry: JobEntry, servers: int, total: int | None = None) -> str:
    """Which servers the job's plan was limited to: those its placement constraints allow,
    or, of the cluster's ``total``, the free ones (before, "the 1 server(s) planned on"
    did not say that other jobs held the rest: a user trial resumed a job whose servers a
    lower-priority job had taken meanwhile, and read it as the cluster's size)."""
    limits = constraint_names(entry)
    if limits:
        return f" (planned on the {servers} free server(s) that {' and '.join(limits)} allow)"
    if total is not None and servers < total:
        small = (
            f", or they cannot hold one stage pod's requests ({describe(entry.requests)})"
            if entry.requests != Resources()
            else ""
        )  # (before: "other jobs hold the rest" of servers free but too small; a trial)
        return (
            f" (planned on the {servers} free server(s) of the cluster's {total} usable: "
            f"other jobs or pods hold the rest{small}; spec.priority does not preempt them)"
        )
    return ""


def requests_refused(entry: JobEntry, nodes: Mapping[str, NodeInfo]) -> str | None:
    """:func:`requests_fit_nowhere` as a reason the planning round refuses a job with, one
    that says it fits nowhere (Planned's ``FitsNowhere``: change the job), or None. A
    resource no node advertises is left to the snapshot's reason (the job waits for it)."""
    why = requests_fit_nowhere(entry, nodes, absent_too=False)
    if why is None:
        return None
    if limits := constraint_names(entry):  # (other servers may hold it)
        why += f", or allow more servers ({', '.join(limits)})"
    return f"{FITS_NOWHERE}: {why.removeprefix('spec.template: ')}"
