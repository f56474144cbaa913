"""``hulk plan``'s output: the plan as a table (with the baselines' step times beside
it), as json or yaml, the notes of what a re-plan keeps, and the ``--plot`` image."""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from hulk_planner.api import NOT_REPAIRED, listed_names, repair_declined
from hulk_planner.model import Cluster, JobPlan, Plan


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _regions(cluster: Cluster, nodes: Sequence[str]) -> str:
    counts = Counter(cluster.server(n).region for n in nodes)
    return ", ".join(f"{c} in {r}" for r, c in counts.most_common())


def _fmt(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    if math.isinf(seconds):
        return "inf"
    return f"{seconds:,.2f}s" if seconds < 1e5 else f"{seconds:.2e}s"


def render_table(
    cluster: Cluster,
    plan: Plan,
    compare: dict[str, dict[str, float] | str] | None,
    unlinked: int = 0,
    label: str | None = None,
    why_not: Mapping[str, Mapping[str, str]] | None = None,
    weights: str | None = None,
    seconds: float | None = None,
    baselines_timed: bool = False,
) -> str:
    """The plan as text; ``compare``: each baseline's predicted step time per job it
    places (or why it places none); ``unlinked``: server pairs that cannot communicate;
    ``label``: what the cluster shown is (its name by default); ``seconds``: how long the
    planner took (before, the table did not say: a laptop trial), ``baselines_timed``
    where that includes the baselines (the operator's round plans them with its jobs)."""
    n = len(cluster.servers)
    shape = f"{_count(n, 'server')}, {_count(len(cluster.regions), 'region')}"
    if unlinked:
        verb = "has" if unlinked == 1 else "have"
        shape += f"; {unlinked:,} of its {n * (n - 1) // 2:,} server pairs {verb} no link"
    used = f"    {weights}" if weights else ""  # (which GNN weights planned it)
    lines = [f"planner: {plan.planner}{used}    cluster: {label or cluster.name} ({shape})", ""]
    for jp in plan.jobs:
        shape = f"{_count(len(jp.stages), 'stage')} x {_count(jp.replicas, 'replica')}"
        lines.append(
            f"{jp.name}: {shape}, {jp.micro_batches} micro-batches, "
            f"predicted step {_fmt(jp.predicted_iteration_seconds)}"
        )
        lines.append(f"  servers: {_regions(cluster, jp.nodes)}")
        for k, st in enumerate(jp.stages):
            where = ", ".join(st.nodes)
            lines.append(
                f"  stage {k:>2} layers [{st.layers[0]:>3},{st.layers[1]:>3})  "
                f"{st.parallelism:<6} {where}"
            )
    for u in plan.unplaced:
        lines.append(f"{u.name}: NOT PLACED: {u.reason}")
    if seconds is not None:
        counted = "included" if baselines_timed else "not counted"
        lines.append(f"planned in {seconds:.2f} s (the baselines below {counted})"
                     if compare else f"planned in {seconds:.2f} s")  # fmt: skip
    if compare:
        lines += ["", "predicted step time per job (ratio = baseline / " + plan.planner + ")"]
        names = [jp.name for jp in plan.jobs] + [u.name for u in plan.unplaced]
        cols = [plan.planner, *compare]
        lines.append(f"{'job':<16}" + "".join(f"{c:>24}" for c in cols))
        ratios: dict[str, list[float]] = {c: [] for c in compare}
        for name in names:
            mine = plan.job(name)
            row = f"{name:<16}{_fmt(mine.predicted_iteration_seconds if mine else None):>24}"
            for c, other in compare.items():
                theirs = other.get(name) if isinstance(other, dict) else None
                if theirs is None:
                    row += f"{'not placed':>24}"
                    continue
                cell = _fmt(theirs)
                if mine and mine.predicted_iteration_seconds > 0:
                    r = theirs / mine.predicted_iteration_seconds
                    ratios[c].append(r)
                    cell += f" ({_ratio(r)})"
                row += f"{cell:>24}"
            lines.append(row)
        row = f"{'geometric mean':<16}{'1.00x' if plan.jobs else '-':>24}"  # (none placed)
        for c in compare:
            rs = ratios[c]
            g = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else math.nan
            cell = _ratio(g) if rs else "-"
            if rs and len(rs) < len(names):
                cell += f" ({len(rs)} of {len(names)} jobs)"
            row += f"{cell:>24}"
        lines.append(row)
        for c, other in compare.items():  # why a baseline placed nothing, or not a job
            if isinstance(other, str):
                lines.append(f"{c}: {other}")
                continue
            by_reason: dict[str, list[str]] = {}
            for job, reason in (why_not or {}).get(c, {}).items():
                by_reason.setdefault(reason, []).append(job)
            for reason, jobs in by_reason.items():
                lines.append(f"{c} does not place {', '.join(jobs)}: {reason}")
    return "\n".join(lines)


def _kept_notes(
    previous: Plan | None, result: Plan, present: set[str], afresh: Collection[str] = ()
) -> list[str]:
    """What each job keeps of its previous plan: servers kept, released and added, stages
    unchanged (before, a user compared the two plans by eye; a trial). Not for ``afresh``
    jobs, whose previous plan a re-plan does not keep (noted so already)."""
    out = []
    holder = result.assignment
    for jp in result.jobs:
        old = previous.job(jp.name) if previous else None
        if old is None or jp.name in afresh:
            continue
        kept = [n for n in old.nodes if n in jp.nodes]
        released = [n for n in old.nodes if n not in jp.nodes and n in present]
        lost = [n for n in old.nodes if n not in present]
        added = [n for n in jp.nodes if n not in old.nodes]
        line = f"job {jp.name}: kept {len(kept)} of its {len(old.nodes)} server(s)"
        if lost:
            line += f", lost {listed_names(lost)}"
        if released:
            # (which job took them: a trial read "released berlin-30" of a healthy server
            # as lost, where another job's re-plan had taken it)
            shown = [f"{n} (to {holder[n]})" if n in holder else n for n in released]
            line += f", released {listed_names(shown)}"
        if added:
            line += f", added {listed_names(added)}"
        line += "; " + _stages_kept(old, jp)
        why = repair_declined(result, jp.name)
        out.append(f"{line} ({NOT_REPAIRED}: {why})" if why else line)
    for u in result.unplaced:  # (its repair's words, beside the reason it is not placed)
        why = repair_declined(result, u.name)
        if why and u.name not in afresh:
            out.append(f"job {u.name}: not placed again ({NOT_REPAIRED}: {why})")
    return out


def _stages_kept(old: JobPlan, new: JobPlan) -> str:
    """``7 of 8 stage(s) on the same server(s), layers moved in 3``, or ``8 -> 10 stages,
    every stage laid out again`` (the operator's words; before, "0 of 8 stage(s) as they
    were" for a repair that swapped one server and moved layers: a user trial)."""
    if len(old.stages) != len(new.stages):
        return f"{len(old.stages)} -> {len(new.stages)} stages, every stage laid out again"
    pairs = list(zip(old.stages, new.stages, strict=True))
    same = [b for a, b in pairs if a.nodes == b.nodes]
    moved = sum(1 for a, b in pairs if a.nodes == b.nodes and a.layers != b.layers)
    words = f"{len(same)} of {len(pairs)} stage(s) on the same server(s)"
    return words + (f", layers moved in {moved}" if moved else "")


def _ratio(r: float) -> str:
    """A step-time ratio: 2 decimals; whole numbers from 1,000 (before, 4,285.14x beside
    2.2e+04x in one column: a trial); 2 significant digits below 0.01; in exponent form
    below 0.001 and from a million (before, a plan 700 times faster than --planner's read
    0.00x)."""
    if r >= 1e6 or r < 1e-3:
        return f"{r:.1e}x"
    if r >= 1e3:
        return f"{r:,.0f}x"
    return f"{r:,.2f}x" if r >= 0.01 else f"{r:.2g}x"


def _print_plan(plan: Plan, fmt: str) -> None:
    """The plan on stdout as ``-o json`` or ``-o yaml`` writes it."""
    from hulk_planner import io

    print(io.dump_plan(plan, fmt), end="" if fmt == "yaml" else "\n")


def _plot(path: str | None, cluster: Cluster, result: Plan) -> int:
    """``--plot``, once the plan is out (before, a plot that failed to write lost the plan):
    0, or 1 where it could not be written."""
    if path is None:
        return 0
    from hulk_planner.plot import fonts, missing_glyphs, plot_plan

    sys.stdout.flush()
    if missing := missing_glyphs(cluster, result):
        print(
            f"hulk plan: note: --plot: no font here has {missing}: names with them are drawn "
            f"as boxes (the plot uses {', '.join(fonts())}; install a font that has them, "
            "e.g. Noto Sans CJK, and it uses that)",
            file=sys.stderr,
        )
    try:
        plot_plan(cluster, result, path)
    except OSError as exc:
        print(
            f"hulk plan: error: --plot: cannot write {path}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    # (said nowhere before: a user trial looked for the file)
    print(f"hulk plan: note: --plot: wrote {path}", file=sys.stderr)
    return 0
