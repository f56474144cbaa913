"""Events on a running job that tell of trouble it is not moved for: a disruption (so
many servers NotReady that none is taken as lost), server pairs its probes report cut
(``NodeLatency``) and servers relabelled out of its constraints. Only lost servers move a
job (``recovery``)."""

from __future__ import annotations

import asyncio
import logging

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from hulk_operator import kube, recovery
from hulk_operator.context import Context
from hulk_operator.entries import JobEntry
from hulk_operator.inventory import affinity_matches, node_region, selected
from hulk_operator.latencies import INFERRED_WORDS, Latencies
from hulk_planner.api import listed_names
from hulk_planner.model import JobPlan

DISRUPTED = "Disrupted"  # the Event of a job not moved off NotReady servers (a disruption)


def tell_disruption(ctx: Context, key: tuple[str, str], plan: JobPlan) -> None:
    """A Warning Event, once per disruption, on each job with a stage on a NotReady
    server: why it is not moved (before: the operator's log alone said it, and the job was
    torn down, unexplained, as the disruption cleared: a user trial)."""
    down = sorted(n for n in plan.nodes if (i := ctx.nodes.get(n)) is not None and not i.ready)
    if not down or recovery.disruption_told(ctx.disruption, key):
        return
    ctx.event(
        "Warning",
        DISRUPTED,
        f"{ctx.disrupted}: its server(s) {', '.join(down)} are not taken as lost while so "
        "many are (an API server or network outage is likelier than so many failures); "
        f"once fewer are, one still NotReady {ctx.config.not_ready_grace_s:g} s later is lost",
    )


LINK_UNREACHABLE, LINKS_RESTORED = "LinkUnreachable", "LinksRestored"
UNMET, MET_AGAIN = "ConstraintsUnmet", "ConstraintsMet"
log = logging.getLogger(__name__)


async def tell_cut_links(ctx: Context, key: tuple[str, str], plan: JobPlan) -> None:
    """A Warning Event, once per set of cut pairs, on a running job that sends over a
    server pair its probes now report unreachable (and a Normal one when they reach each
    other again). The job is not moved: only lost servers move a job (before, nothing told
    of a partition between two of its stages: a user trial)."""
    try:
        latencies = await ctx.latencies()
    except (ApiException, HTTPError, OSError) as exc:  # (it only tells: recovery goes on)
        log.debug(f"{key[1]}: NodeLatency not read ({exc}): cut links told later")
        return
    unreachable = latencies.unreachable
    cut = recovery.cut_links(plan, unreachable)
    told: dict[tuple[str, str], frozenset[tuple[str, str]]] = ctx.disruption.setdefault(
        "cut_links", {}
    )
    before = told.get(key, frozenset())
    if frozenset(cut) == before:
        return
    if not cut and any(frozenset(p) in unreachable for p in before):
        told.pop(key, None)  # moved off the pairs, which are still cut: nothing restored
        return
    guessed: dict[tuple[str, str], frozenset[tuple[str, str]]] = ctx.disruption.setdefault(
        "cut_links_inferred", {}
    )
    if cut:
        told[key] = frozenset(cut)
        guessed[key] = frozenset(p for p in cut if frozenset(p) in latencies.inferred_unreachable)
        shown = ", ".join(f"{a} and {b}" for a, b in cut[:5]) + (" ..." if len(cut) > 5 else "")
        # pairs no probe reported, taken as cut with their regions, said as such (before,
        # "the probes report" them too: a user trial)
        inferred = sum(1 for p in cut if frozenset(p) in latencies.inferred_unreachable)
        said = (
            f"{len(cut)} server pair(s) this job's stages send over are unreachable ("
            f"{len(cut) - inferred} reported by the probes, {inferred} {INFERRED_WORDS})"
            if inferred
            else f"the probes report {len(cut)} server pair(s) this job's stages send over "
            "unreachable"
        )
        ctx.event(
            "Warning",
            LINK_UNREACHABLE,
            f"{said}: {shown} (NodeLatency). Its pods are not moved (only lost servers "
            "move a job); if its training stalls, suspend and resume it (spec.suspend) to "
            "plan it again around them",
        )
    else:
        told.pop(key, None)
        # pairs taken as cut though no probe reported them (a node its peers lost, or a
        # region pair): estimated again, not measured, once it is back (before, its
        # recovery was logged as no report at all, and no LinksRestored told: a review);
        # back where both their servers are measured again and their region pair too (not
        # where the reports behind them merely aged out: a review)
        back = _measured_again(guessed.pop(key, frozenset()), latencies)
        if not back and not any(frozenset(p) in latencies.measured for p in before):
            # no report on them at all: the probes' objects deleted, or the probe
            # uninstalled (before, told as restored; a review)
            log.info(f"{key[1]}: the probes no longer report on the cut pairs it was told of")
            return
        ctx.event("Normal", LINKS_RESTORED, "its servers' probes reach each other again")


def _measured_again(pairs: frozenset[tuple[str, str]], latencies: Latencies) -> bool:
    """Whether some of ``pairs`` (taken as cut, not reported) has both servers measured
    with some peer and its two regions measured with each other."""
    if not pairs:
        return False
    region = dict(latencies.regions or ())
    medians = latencies.region_medians or {}
    heard = {n for p in latencies.measured for n in p}
    return any(
        a in heard and b in heard and frozenset((region.get(a), region.get(b))) in medians
        for a, b in pairs
    )


async def tell_unmet_constraints(ctx: Context, entry: JobEntry, plan: JobPlan) -> None:
    """A Warning Event on a running job whose servers no longer meet its constraints
    (``spec.allowedRegions``, the node selector, required affinity), naming those they do
    not meet: a node relabelled into another region, say. Its stages stay, as Kubernetes'
    node affinity is IgnoredDuringExecution (before, nothing told of it: a trial). Told
    when a server joins the set (not again by a restarted operator whose last such Event
    says the same), and a Normal Event for those that meet them again."""
    if not (entry.allowed_regions or entry.node_selector or entry.affinity):
        return
    selector = dict(entry.node_selector)
    regions = f"spec.allowedRegions {list(entry.allowed_regions)}"
    failing: dict[str, list[str]] = {}
    for n in plan.nodes:
        if (info := ctx.nodes.get(n)) is None:
            continue  # (lost: moved, not told)
        checks = (
            (regions, selected(info, None, entry.allowed_regions)),
            (entry.selector_from, selected(info, selector, None)),
            ("the template's required node affinity", affinity_matches(info, entry.affinity)),
        )
        if fails := [what for what, ok in checks if not ok]:
            failing[n] = fails
    told: dict[tuple[str, str], frozenset[str]] = ctx.disruption.setdefault("unmet", {})
    before = told.get(entry.key, frozenset())
    now = frozenset(failing)
    if now:
        told[entry.key] = now
    else:
        told.pop(entry.key, None)
    back = sorted(n for n in before - now if n in plan.nodes)
    if back:  # (those the job moved off: nothing to tell)
        ctx.event(
            "Normal", MET_AGAIN, f"its server(s) {listed_names(back)} meet its constraints again"
        )
    if not now - before:
        return
    shown = listed_names(
        [
            f"{n} (region {node_region(ctx.nodes[n])})" if regions in failing[n] else n
            for n in sorted(now)
        ],
        most=5,
    )
    constraints = list(dict.fromkeys(what for n in sorted(now) for what in failing[n]))
    words = (
        f"its server(s) {shown} no longer meet {' or '.join(constraints)}: their stages stay "
        "(node affinity is IgnoredDuringExecution); to move them, drain those nodes (kubectl "
        "drain NODE), or relabel them back"
    )
    if not before and await told_before(ctx, entry, UNMET, words):
        return  # (an operator restarted since it told: its memory starts empty)
    ctx.event("Warning", UNMET, words)


async def told_before(ctx: Context, entry: JobEntry, reason: str, words: str) -> bool:
    """Whether the job's newest Event of ``reason`` says ``words`` already: asked of the API
    server once per job and operator (its memory of what it told starts empty: a restarted
    operator told every RegrowDeclined again, a user trial); later, its memory answers."""
    key = (*entry.key, reason)
    if key in ctx.placer.events_read:
        return False  # (told in this process: its own memory kept it from coming here)
    ctx.placer.events_read.add(key)
    try:
        last = await asyncio.to_thread(
            kube.last_event_message, ctx.api, entry.key[0], entry.uid, reason
        )
    except Exception:  # (it only spares a repeat: told, as before, when it cannot read)
        return False
    return last == words
