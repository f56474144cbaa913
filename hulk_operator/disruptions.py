"""Events on a running job that tell of trouble it is not moved for: a disruption (so
many servers NotReady that none is taken as lost), server pairs its probes report cut
(``NodeLatency``) and servers relabelled out of its constraints. Only lost servers move a
job (``recovery``)."""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from hulk_operator import recovery
from hulk_operator.context import Context
from hulk_operator.entries import JobEntry
from hulk_operator.inventory import node_region, selected
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


def tell_unmet_constraints(ctx: Context, entry: JobEntry, plan: JobPlan) -> None:
    """A Warning Event, once per set of servers, on a running job whose servers no longer
    meet its constraints (``spec.allowedRegions``, the node selector, required affinity):
    a node relabelled into another region, say. Its stages stay, as Kubernetes' node
    affinity is IgnoredDuringExecution (before, nothing told of it: a trial); a Normal
    Event where those servers meet them again."""
    if not (entry.allowed_regions or entry.node_selector or entry.affinity):
        return
    selector = dict(entry.node_selector)
    unmet = {
        n: node_region(info)
        for n in plan.nodes
        if (info := ctx.nodes.get(n)) is not None
        and not selected(info, selector, entry.allowed_regions, entry.affinity)
    }
    told: dict[tuple[str, str], frozenset[str]] = ctx.disruption.setdefault("unmet", {})
    before = told.get(entry.key, frozenset())
    if frozenset(unmet) == before:
        return
    if unmet:
        told[entry.key] = frozenset(unmet)
        shown = listed_names([f"{n} (region {unmet[n]})" for n in sorted(unmet)], most=5)
        constraints = [
            *([f"spec.allowedRegions {list(entry.allowed_regions)}"] * bool(entry.allowed_regions)),
            *([entry.selector_from] * bool(entry.node_selector)),
            *(["the template's required node affinity"] * bool(entry.affinity)),
        ]
        ctx.event(
            "Warning",
            UNMET,
            f"its server(s) {shown} no longer meet {' or '.join(constraints)}: their "
            "stages stay (node affinity is IgnoredDuringExecution); to move them, drain "
            "those nodes (kubectl drain NODE), or relabel them back",
        )
        return
    told.pop(entry.key, None)
    if before <= set(plan.nodes):  # (moved off them: nothing to tell)
        ctx.event("Normal", MET_AGAIN, f"its server(s) {', '.join(sorted(before))} meet its "
                  "constraints again")  # fmt: skip
