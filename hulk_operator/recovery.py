"""Recovery: noticing that a running job lost servers, and working out which pods move.

A stage's server is lost when its Node is deleted, goes NotReady, is cordoned, or gets a
NoExecute taint the job does not tolerate, or when its stage pod cannot be scheduled
because the node has a NoSchedule taint the job does not tolerate (``Tainted``), lost
GPUs (``GPUsGone``), or other pods took GPUs there (``GPUsTaken``) or room its requests
need (``ResourcesTaken``); a re-plan also leaves the job's NoSchedule-tainted servers
(the pods it replaces there would wait for ever). The job is then re-planned (see
``Placer.replan``: healthy servers plus free ones, with the old plan as ``previous`` so
healthy stages stay put when the cost model allows) and only the pods whose manifest
changed are replaced: the pod name carries a hash of its manifest (``manifests``), so a
pod whose server, layers and neighbours are unchanged keeps its name and keeps running.
If no new plan exists, every pod of the job is removed (never leave a master running after
its workers died) and the job goes back to Pending.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hulk_operator.inventory import NodeInfo, Resources, fits
from hulk_operator.status import seconds_text
from hulk_planner.api import NOT_REPAIRED
from hulk_planner.cost import communicating_pairs
from hulk_planner.model import Cluster, JobPlan


def lost_servers(
    job_plan: JobPlan,
    nodes: Mapping[str, NodeInfo],
    tolerations: Sequence[Mapping[str, Any]] = (),
    *,
    now: float | None = None,
    not_ready_grace_s: float = 0.0,
    disrupted: bool = False,
    settled_at: float = 0.0,
    cordon_moves: bool = False,
) -> dict[str, str]:
    """Server -> why the job must leave it (``Deleted``, ``NotReady``, ``Cordoned``...).
    A cordoned server keeps its running stage, as Kubernetes keeps a cordoned node's pods
    (``kubectl drain`` evicts it: then ``barred_servers`` moves it), unless
    ``cordon_moves``: then the stage moves at once.
    A NotReady node counts once it has been NotReady for ``not_ready_grace_s`` (a kubelet
    restart, a short partition: its stages may come back), and not at all while the
    cluster is ``disrupted`` (see :func:`disrupted`); after a disruption the grace runs
    from its end (``settled_at``) at the earliest: nodes coming back one by one were all
    taken as lost the moment fewer than the threshold were down (a user trial)."""
    out: dict[str, str] = {}
    for name in job_plan.nodes:
        info = nodes.get(name)
        if info is None:
            out[name] = "Deleted"
            continue
        why = info.sick(tolerations)
        if why == "NotReady":
            since = info.not_ready_since
            if since is not None:
                since = max(since, settled_at)
            fresh = since is not None and now is not None and now - since < not_ready_grace_s
            if disrupted or fresh:
                continue
        if why == "Cordoned" and not cordon_moves:
            continue
        if why:
            out[name] = why
    return out


REMADE = "Deleted (and made again since its stage pod was bound)"


def forced(lost: Mapping[str, str]) -> set[str]:
    """The lost servers whose stage pods are deleted with grace period 0: those whose Node
    is gone (deleted, or made again: the pod was never on the new one). The others'
    (cordoned, tainted, NotReady, out of GPUs) are deleted with their grace, so a trainer
    still running there checkpoints, and a pod on a node that stopped answering stays
    Terminating, its hostname held, as Kubernetes' own evictions leave it (before, every
    lost server's pods were deleted with grace 0: a cordon killed healthy trainers at
    once; a review)."""
    return {n for n, why in lost.items() if why == "Deleted" or why == REMADE}


SAME_SECOND_S = 120.0  # how long after its making a node made in its pod's second is judged


def remade_servers(
    pods: Iterable[Any], nodes: Mapping[str, NodeInfo], now: float | None = None
) -> dict[str, str]:
    """Server -> ``REMADE`` where the Node a stage pod is bound to was created after the
    pod was bound: the node was deleted and one of its name made again (a machine replaced
    under the same name, a kubelet registering anew). Its pod was never on this node, and
    may not fit it (fewer GPUs); before, a re-creation faster than a reconciliation went
    unnoticed, its pod's GPUs counted on a node that had fewer (a user trial).

    Both times are whole seconds: a node made in the second its pod was bound may be the
    pod's or a new one. It is a new one where the job's pods bound there ask more GPUs than
    it has (the scheduler bound none so; before, such a pod's 16 GPUs counted on a node of
    1, the job Ready: a user trial); else the pod stays (a kubelet of that name runs it).
    Only within ``SAME_SECOND_S`` of its making (at ``now``), and while it is a server:
    later, fewer GPUs are a GPU failed or a device plugin restarting, which leave a running
    pod alone (a review)."""
    out: dict[str, str] = {}
    same_second: set[str] = set()
    gpus: dict[str, int] = {}
    for p in pods:
        info = nodes.get(p.node) if p.node else None
        if info is None or p.deleting:
            continue
        gpus[p.node] = gpus.get(p.node, 0) + (p.requests.gpus if p.requests else 0)
        if p.bound_at is None or info.created is None:
            continue
        if info.created > p.bound_at:
            out[p.node] = REMADE
        elif int(info.created) == int(p.bound_at):
            same_second.add(p.node)
    for n in same_second - set(out):
        info = nodes[n]
        young = now is None or (info.created is not None and now - info.created < SAME_SECOND_S)
        if young and info.server is not None and gpus[n] > info.server.gpus:
            out[n] = REMADE
    return out


def came_back(lost: Mapping[str, str], planned: Iterable[str]) -> dict[str, str]:
    """``lost`` with the servers lost as deleted that the re-plan placed again as ``REMADE``:
    the node was made again between the reconciliation's look at the nodes and the
    re-plan's (a node deleted and made again at once). Its pod was on the old node: it is
    made again, and the job told so (before, the pod was kept as if on the new node, and
    the next reconciliation re-planned the job a second time for it: a user trial)."""
    again = set(planned)
    return {n: REMADE if why == "Deleted" and n in again else why for n, why in lost.items()}


def disrupted(nodes: Mapping[str, NodeInfo], threshold: float) -> str | None:
    """Why NotReady nodes are not taken as lost now, or None: when at least ``threshold``
    of the GPU nodes (and more than two) are NotReady at once, the control plane has more
    likely lost contact with them than they all failed (the node lifecycle controller
    stops evicting pods then too: "FullDisruption"), and re-planning every job onto the
    few nodes left would tear down the whole cluster's training."""
    gpu = [i for i in nodes.values() if i.server is not None]
    down = sum(1 for i in gpu if not i.ready)
    if down > 2 and down >= threshold * len(gpu):
        return f"{down} of the {len(gpu)} GPU nodes are NotReady"
    return None


def stuck_servers(
    pods: Iterable[Any],
    used: Mapping[str, Resources],
    lost: Collection[str] = (),
    nodes: Mapping[str, NodeInfo] | None = None,
    need: Resources | None = None,
    planned: Mapping[str, int] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    init_gpus: int = 0,
) -> dict[str, str]:
    """Server -> why, where the job's stage pod waits unschedulable because the server can
    no longer take it: ``GPUsGone`` where the node now has fewer GPUs than the stage asks
    (a GPU failed, the device plugin stopped); ``GPUsTaken`` where other pods hold the GPUs
    it asks; ``ResourcesTaken`` where its template's requests (``need``: CPU, memory, other
    resources) no longer fit beside other pods'. Other pods can take room while a stage pod
    is gated or being created again. The re-plan sees the server with what is left, or not
    at all, so a stage pod that waits for another reason (a rule Hulk does not plan with)
    is not re-planned in a loop. ``planned``: server -> GPUs in the job's plan. A node
    with a NoSchedule taint the job does not tolerate (``tolerations``) gets ``Tainted
    key=value:NoSchedule``: its running stages stay, but a pod made again there (deleted,
    replaced by a re-plan or an edit) would wait for ever. ``init_gpus``: what its plain
    init container asks, which the node must have free while it runs."""
    need = need or Resources()
    out: dict[str, str] = {}
    for p in pods:
        if not p.node or not p.unschedulable or p.node in lost:
            continue
        taken = used.get(p.node, Resources())
        info = (nodes or {}).get(p.node)
        if info is None:
            continue  # a deleted node: lost_servers' case
        barred = info.barred(tolerations)
        if barred is not None:
            out[p.node] = barred
            continue
        have = info.server.gpus if info.server is not None else 0
        wants = max(need.gpus or (planned or {}).get(p.node, 0), init_gpus)
        if wants and have < wants:
            out[p.node] = "GPUsGone"
        elif (have - taken.gpus < wants) if wants else taken.gpus > 0:
            out[p.node] = "GPUsTaken"
        elif not fits(info.allocatable, taken, _own(p, need), have - taken.gpus):
            out[p.node] = "ResourcesTaken"
    return out


def _own(pod: Any, need: Resources) -> Resources:
    """What the waiting pod itself requests besides GPUs, as the API server admitted it
    (its namespace's LimitRange defaults, as they were then), else ``need``: the defaults
    in force now may differ from its own (a LimitRange made or deleted since; a review)."""
    return need if pod.requests is None else pod.requests._replace(gpus=need.gpus)


def barred_servers(
    job_plan: JobPlan,
    nodes: Mapping[str, NodeInfo],
    tolerations: Sequence[Mapping[str, Any]] = (),
    lost: Collection[str] = (),
) -> dict[str, str]:
    """Server -> ``Tainted key=value:NoSchedule``: the job's servers (other than ``lost``)
    that take no new stage pod of it. A re-plan leaves them, as it may replace their pods."""
    out: dict[str, str] = {}
    for name in job_plan.nodes:
        info = nodes.get(name)
        why = info.barred(tolerations) if info is not None and name not in lost else None
        if why is not None:
            out[name] = why
    return out


@dataclass(frozen=True)
class PodDiff:
    create: tuple[str, ...]  # desired pods that do not exist
    delete: tuple[str, ...]  # existing pods that are not desired (moved, stale, orphaned)
    keep: tuple[str, ...]
    # of ``create``, those a pod of the name that is not the job's holds (``sync_pods``)
    taken: tuple[str, ...] = ()

    def recreated(self) -> list[str]:
        """The pods made again (or to be: one of the name may still be going)."""
        return [n for n in self.create if n not in self.taken]


def pod_diff(existing: Sequence[str], desired: Sequence[str]) -> PodDiff:
    have, want = set(existing), set(desired)
    return PodDiff(
        tuple(sorted(want - have)), tuple(sorted(have - want)), tuple(sorted(have & want))
    )


def unlinked(cluster: Cluster | None, servers: Collection[str], plan: JobPlan) -> set[str]:
    """Those of ``servers`` with no link (nor region link) in ``cluster`` to any server of
    ``plan``: no stage of it could use them."""
    if cluster is None:
        return set()
    keys = {lk.key for lk in cluster.links}
    regions = {frozenset((rl.a, rl.b)) for rl in cluster.region_links}
    where = {s.name: s.region for s in cluster.servers}
    cut = {frozenset(p) for p in cluster.cut}

    def linked(a: str, b: str) -> bool:
        pair = frozenset((a, b))
        return pair not in cut and (pair in keys or frozenset((where[a], where[b])) in regions)

    return {
        s for s in servers if s in where and not any(linked(s, n) for n in plan.nodes if n != s)
    }


def moves(
    old: JobPlan,
    new: JobPlan,
    lost: Collection[str] = (),
    cluster: Cluster | None = None,
    unoffered: Mapping[str, str] | None = None,
) -> list[str]:
    """Human-readable changes: first the servers (``kept 19 of 19 healthy servers, added
    xian-40``), then the stages. With the same number of stages every changed stage is
    named (``stage 2: beijing-3 -> xian-40``, ``layers moved in stage(s) 3, 4``); when the
    count changes every stage is laid out again and only the counts are given, as a
    stage-by-stage list would pair unrelated stages."""
    unoffered = unoffered or {}
    left = [n for n in old.nodes if n not in lost and n in unoffered and n not in new.nodes]
    healthy = [n for n in old.nodes if n not in lost and n not in left]
    kept = [n for n in healthy if n in new.nodes]
    servers = f"kept {len(kept)} of {len(healthy)} healthy servers" if healthy else "no server kept"
    # a lost server in the new plan: what is left of it fits (GPUs others took: before, it
    # was neither kept nor added in the Event; a user trial)
    again = [n for n in old.nodes if n in lost and n in new.nodes]
    if again:
        servers += f", {', '.join(again)} planned again on what is left of it"
    added = [n for n in new.nodes if n not in old.nodes]
    released = [n for n in healthy if n not in new.nodes]
    if added:
        servers += f", added {', '.join(added)}"
    if released:  # (one that reaches none of the new plan's servers says so: a user trial)
        servers += f", released {', '.join(released)}"
        cut = unlinked(cluster, released, new)  # (``cluster``: the re-plan's, its links)
        apart = [n for n in released if n in cut]
        if apart and len(new.nodes) > 1:  # (a plan of one server uses no link: before,
            # a job regrown onto one faster server was told its old one had no link)
            servers += f" ({', '.join(apart)}: no link to the new plan's servers)"
    # one the re-plan could not use, and why (a label gone bad; before, a "healthy" server
    # released without a word: a user trial)
    for n in left:
        servers += f", left {n} (not offered: {unoffered[n]})"
    out = [servers]
    if len(new.stages) != len(old.stages):
        out.append(f"{len(old.stages)} -> {len(new.stages)} stages, every stage laid out again")
        return out
    shifted = []
    for i, (before, st) in enumerate(zip(old.stages, new.stages, strict=True)):
        if tuple(st.nodes) != tuple(before.nodes):
            gone = [n for n in before.nodes if n not in st.nodes]
            came = [n for n in st.nodes if n not in before.nodes]
            if gone or came:
                out.append(f"stage {i}: {','.join(gone) or '-'} -> {','.join(came) or '-'}")
            else:
                out.append(f"stage {i}: reordered")
        if before.layers != st.layers:  # (those with new servers too: before, a re-plan
            # that re-split stages 0-9 read "layers moved in stage(s) 5"; a user trial)
            shifted.append(i)
    if shifted:
        out.append(f"layers moved in stage(s) {_runs(shifted)}")
    return out


def _runs(numbers: Sequence[int]) -> str:
    """Ascending numbers as runs: ``0-3, 5, 7-8``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


# Every cause a running job's server can be lost for (the first word of ``lost_servers``'
# and ``stuck_servers``' values): the ``reason`` labels of ``hulk_replans_total``.
LOSS_REASONS = (
    "Deleted",
    "NotReady",
    "Cordoned",
    "Tainted",
    "GPUsGone",
    "GPUsTaken",
    "ResourcesTaken",
)


SLOWER_HINT = 1.25  # a re-plan this much slower tells a job without spec.regrow of it


_SAID = {
    "GPUsGone": "has fewer GPUs than its stage asks",
    "GPUsTaken": "GPUs taken by other pods",
    "ResourcesTaken": "stage pod's requests no longer fit beside other pods",
}


def lost_words(lost: Mapping[str, str]) -> str:
    """``rome-44 deleted, rome-45 tainted maint=true:NoExecute``: each lost server and why,
    the taint as it is, the cause as kubectl shows it."""

    def told(why: str) -> str:
        first, _, rest = why.partition(" ")
        word = first if first == "NotReady" else first.lower()
        return _SAID.get(why) or f"{word}{' ' + rest if rest else ''}"

    return ", ".join(f"{n} {told(why)}" for n, why in sorted(lost.items()))


REPLAN_WAITS = "ReplanWaits"


def waits_message(lost: Mapping[str, str], doubt: Collection[str], disrupted: bool) -> str:
    """Why a job that lost servers is not re-planned yet: others of its servers are
    NotReady and not lost (``doubt``), and a re-plan now would move their stages too."""
    down = f"{', '.join(sorted(doubt))} {'is' if len(doubt) == 1 else 'are'}"
    until = "the disruption ends and they are" if disrupted else "each is"
    return (
        f"{lost_words(lost)}; the re-plan waits while {down} NotReady but not lost: a re-plan "
        f"now would move their stages too, which may come back (re-planned once {until} "
        "Ready again, or lost)"
    )


def event_message(
    lost: Mapping[str, str],
    old: JobPlan,
    new: JobPlan | None,
    replaced: int,
    kept: int,
    cause: str | None = None,
    cluster: Cluster | None = None,
    unoffered: Mapping[str, str] | None = None,
    declined: str = "",
    regrows: bool = True,
) -> str:
    """A re-plan's Event: why (``lost`` servers, or ``cause``), what moved, the pods and the
    step times; ``declined``: why a repair keeping the other stages was not kept (before,
    a re-plan that laid every stage out again did not say why: a user trial). A job without
    ``spec.regrow`` (``regrows`` False) whose new plan is ``SLOWER_HINT`` times slower or
    more is told that ``spec.regrow`` would move it back (a trial: jobs stayed on plans up
    to 4x slower once the nodes came back, with nothing saying so)."""
    causes = cause or lost_words(lost)
    if new is None:
        return f"{causes}; no new plan fits, all pods removed and the job is Pending again"
    changed = "; ".join(moves(old, new, lost, cluster, unoffered))
    if declined:
        changed += f" ({NOT_REPAIRED}: {declined})"
    gone = len(old.nodes) - kept  # one pod per server of the old plan
    if gone == replaced:
        pods = f"{replaced} pod(s) replaced, {kept} left running"
    else:
        pods = f"{gone} pod(s) removed, {replaced} created, {kept} left running"
    was, now = old.predicted_iteration_seconds, new.predicted_iteration_seconds
    step = ""
    if math.isfinite(was) and math.isfinite(now) and was > 0:  # a slower plan says so
        step = f"; predicted step {seconds_text(now)} s (was {seconds_text(was)} s)"
        if not regrows and now >= SLOWER_HINT * was:
            step += (
                "; spec.regrow would plan it afresh on faster servers once they are free "
                "(it is not set)"
            )
    return f"{causes}; {changed}; {pods}{step}"


def say_disruption(said: dict[str, Any], disrupted: str | None, logger: Any, now: float) -> float:
    """Logs a disruption (most GPU nodes NotReady) and its end once per change, whichever
    job's timer sees it first: ``said`` is shared by them all (before, the memo's own
    attribute, which kopf's per-object copies of the memo do not share: once per job).
    Returns when the last disruption ended (0 if none has): NotReady nodes' grace runs
    from then at the earliest (``lost_servers``)."""
    if bool(disrupted) != bool(said.get("now")):
        said["now"] = disrupted
        if disrupted:
            logger.warning(f"{disrupted}: no NotReady node is taken as lost until fewer are")
        else:
            said["ended"] = now
            said["told"] = set()
            logger.info("NotReady nodes are taken as lost again")
    return float(said.get("ended") or 0.0)


def disruption_told(said: dict[str, Any], key: tuple[str, str]) -> bool:
    """Whether the job ``key`` was told of the disruption now on (noting it is now)."""
    told: set[tuple[str, str]] = said.setdefault("told", set())
    if key in told:
        return True
    told.add(key)
    return False


def cut_links(plan: JobPlan, unreachable: frozenset[frozenset[str]]) -> list[tuple[str, str]]:
    """The server pairs ``plan`` sends over (``cost.communicating_pairs``) that the probes
    report unreachable, in pipeline order."""
    if not unreachable:
        return []
    return [p for p in communicating_pairs(plan) if frozenset(p) in unreachable]
