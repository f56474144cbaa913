"""Drawing a cluster and a plan, like the Hulk paper's figures: servers grouped by region,
coloured by the job they train, each job's pipeline drawn as a path through its stages."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from hulk_planner.model import Cluster, Plan

# Fonts the plot falls back to, where installed, for names DejaVu Sans (matplotlib's own)
# has no glyphs for: regions and servers named in Chinese or Japanese were drawn as empty
# boxes, with a raw matplotlib warning per glyph (a user trial)
FALLBACK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR",
    "Source Han Sans", "WenQuanYi Zen Hei", "Droid Sans Fallback", "Arial Unicode MS",
    "Microsoft YaHei", "PingFang SC", "Hiragino Sans", "Noto Sans", "Noto Color Emoji",
)  # fmt: skip
UNUSED = "#bbbbbb"
PALETTE = (
    "#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45",
    "#469990", "#9a6324", "#800000", "#808000", "#000075", "#fabed4",
)  # fmt: skip


def cluster_graph(cluster: Cluster) -> nx.Graph:
    """The cluster as a networkx graph: servers with their attributes, links with latency."""
    g = nx.Graph(name=cluster.name)
    for s in cluster.servers:
        g.add_node(
            s.name,
            region=s.region,
            gpus=s.gpus,
            tflops=s.gpu_tflops,
            memory_gib=s.gpu_memory_gib * s.gpus,
        )
    for lk in cluster.links:
        g.add_edge(lk.a, lk.b, latency_ms=lk.latency_ms)
    return g


NAMED_UP_TO = 100  # servers: up to this many, each is named on the plot, on its region's ring
SPAN = 14.0  # the plot shows [-SPAN, SPAN] on both axes, regions' centres on a circle of 10
PT_PER_UNIT = 6.93 * 72 / (2 * SPAN)  # points per unit: the square axes of an 11 x 9 in figure
NUMBERED_FROM_PT = 7.5  # a server drawn narrower than this gets no stage number on it
GOLDEN = math.pi * (3 - math.sqrt(5))  # the sunflower's turn from one server to the next


def _centres(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """Each region's centre: on a circle, in the cluster's order of regions (one region:
    the middle)."""
    regions = list(cluster.regions)
    ring = 10.0 if len(regions) > 1 else 0.0
    out = {}
    for k, region in enumerate(regions):
        angle = 2 * math.pi * k / max(1, len(regions))
        out[region] = (ring * math.cos(angle), ring * math.sin(angle))
    return out


def _members(cluster: Cluster) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {r: [] for r in cluster.regions}
    for s in cluster.servers:
        out.setdefault(s.region, []).append(s.name)
    return out


def _radii(cluster: Cluster) -> dict[str, float]:
    """Each region's radius: a ring of its servers up to NAMED_UP_TO servers in all (their
    names beside them), a filled disc beyond; shrunk together so that neighbouring regions
    keep apart (before, the rings of 20 regions of a 1,000-server cluster overlapped one
    another: a trial)."""
    members = _members(cluster)
    k = len(members)
    ring = len(cluster.servers) <= NAMED_UP_TO
    radius = {  # (a ring: 0.8 apart, room for a marker and its stage number)
        r: max(0.4 + 0.25 * math.sqrt(len(m)), 0.8 * len(m) / (2 * math.pi))
        if ring
        else 0.25 * math.sqrt(len(m))
        for r, m in members.items()
    }
    room = 0.45 * 20 * math.sin(math.pi / k) if k > 1 else SPAN - 3.0
    scale = min(1.0, room / max([*radius.values(), 1e-9]))
    return {r: v * scale for r, v in radius.items()}


def _positions(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """Each server's place: on its region's ring (named clusters), or spread evenly over
    its region's disc (a sunflower: every server the same room)."""
    pos: dict[str, tuple[float, float]] = {}
    radii = _radii(cluster)
    by_region = _members(cluster)
    ring = len(cluster.servers) <= NAMED_UP_TO
    for region, (cx, cy) in _centres(cluster).items():
        members = by_region.get(region, [])
        radius = radii.get(region, 0.0)
        for i, name in enumerate(members):
            if ring:
                a, r = 2 * math.pi * i / max(1, len(members)), radius
            else:
                a, r = i * GOLDEN, radius * math.sqrt((i + 0.5) / len(members))
            pos[name] = (cx + r * math.cos(a), cy + r * math.sin(a))
    return pos


def marker_sizes(cluster: Cluster) -> dict[str, float]:
    """Each server's marker area in points^2: larger with more GPUs, and all shrunk
    together where servers would overlap (the room of one server on its ring or disc)."""
    radii = _radii(cluster)
    ring = len(cluster.servers) <= NAMED_UP_TO
    room = math.inf  # the smallest distance between neighbours, in points
    for region, members in _members(cluster).items():
        n, r = len(members), radii.get(region, 0.0)
        if n > 1:
            gap = 2 * r * math.sin(math.pi / n) if ring else r * math.sqrt(math.pi / n)
            room = min(room, gap * PT_PER_UNIT)
    area = {s.name: 60.0 + 12.0 * s.gpus for s in cluster.servers}
    widest = max(area.values(), default=1.0)
    shrink = min(1.0, (0.85 * room) ** 2 / widest)
    return {n: a * shrink for n, a in area.items()}


def numbered(cluster: Cluster) -> bool:
    """Whether stage numbers fit on the servers (every marker at least NUMBERED_FROM_PT
    wide)."""
    sizes = marker_sizes(cluster).values()
    return not sizes or math.sqrt(min(sizes)) >= NUMBERED_FROM_PT


def _label_at(cluster: Cluster) -> dict[str, tuple[float, float, str]]:
    """Where each region's name goes, and its alignment: outside its ring (and the names on
    it), or beside its disc, away from the middle."""
    radii = _radii(cluster)
    ring = len(cluster.servers) <= NAMED_UP_TO
    out = {}
    for region, (cx, cy) in _centres(cluster).items():
        d = math.hypot(cx, cy)
        ux, uy = (cx / d, cy / d) if d else (0.0, 1.0)
        if ring:
            off, ha = max(2.6, radii.get(region, 0.0) + 1.6), "center"
        else:
            off, ha = radii.get(region, 0.0) + 0.5, "left" if ux > 0.3 else "center"
            ha = "right" if ux < -0.3 else ha
        out[region] = (cx + off * ux, cy + off * uy, ha)
    return out


def legend(plan: Plan, colours: Mapping[str, str]) -> list[tuple[str, str]]:
    """The legend's (label, colour) rows: each placed job, each job not placed (with why,
    cut short), then the servers no job uses."""
    rows = [
        (f"{jp.name}: {len(jp.nodes)} server{'s' if len(jp.nodes) != 1 else ''}, "
         f"{jp.predicted_iteration_seconds:.2f}s/step",
         colours[jp.name])
        for jp in plan.jobs
    ]  # fmt: skip
    for u in plan.unplaced:
        why = u.reason if len(u.reason) <= 60 else u.reason[:57] + "..."
        rows.append((f"{u.name}: not placed ({why})", "none"))
    return [*rows, ("unused", UNUSED)]


def server_texts(
    cluster: Cluster, plan: Plan, pos: Mapping[str, tuple[float, float]]
) -> list[tuple[float, float, str, float]]:
    """(x, y, text, font size) written on the plot: each used server's stage number on it,
    where the servers are drawn wide enough (``numbered``), and, up to NAMED_UP_TO servers,
    each server's name beside it, away from its region's centre (before, a user saw a
    job's colour, not which server trains which stage: a trial)."""
    out = (
        [(*pos[n], str(k), 5.5) for jp in plan.jobs for k, st in enumerate(jp.stages)
         for n in st.nodes]
        if numbered(cluster)  # (once: it sizes every server's marker)
        else []
    )  # fmt: skip
    if len(cluster.servers) <= NAMED_UP_TO:
        centre = _centres(cluster)
        for s in cluster.servers:
            (x, y), (cx, cy) = pos[s.name], centre[s.region]
            d = math.hypot(x - cx, y - cy) or 1.0
            out.append((x + 0.95 * (x - cx) / d, y + 0.75 * (y - cy) / d, s.name, 4.5))
    return out


def fonts() -> list[str]:
    """The plot's font families: DejaVu Sans, then those of ``FALLBACK_FONTS`` installed."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *(f for f in FALLBACK_FONTS if f in installed)]


def missing_glyphs(cluster: Cluster, plan: Plan, title: str | None = None) -> str:
    """The characters of the names ``plot_plan`` writes (regions, servers where named, jobs,
    the title) that none of its ``fonts`` has: drawn as boxes. Empty where all are there."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    texts: Iterable[str] = [*cluster.regions, *(jp.name for jp in plan.jobs), title or ""]
    if len(cluster.servers) <= NAMED_UP_TO:
        texts = [*texts, *(s.name for s in cluster.servers)]
    wanted = {c for text in texts for c in text if not c.isspace()}
    if all(c.isascii() for c in wanted):
        return ""
    covered: set[int] = set()
    for family in fonts():
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        covered.update(FT2Font(path).get_charmap())
    return "".join(sorted(c for c in wanted if ord(c) not in covered))


def plot_plan(cluster: Cluster, plan: Plan, path: str | Path, title: str | None = None) -> Path:
    """Write a PNG of ``plan`` on ``cluster`` to ``path`` (names no font has are drawn as
    boxes, with no warning: ``missing_glyphs`` tells which)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with (
        matplotlib.rc_context({"font.family": fonts()}),
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        return _draw(plt, cluster, plan, Path(path), title)


def _draw(plt: Any, cluster: Cluster, plan: Plan, out: Path, title: str | None) -> Path:
    g = cluster_graph(cluster)
    pos = _positions(cluster)
    owner = plan.assignment
    colours = {jp.name: PALETTE[i % len(PALETTE)] for i, jp in enumerate(plan.jobs)}
    fig, ax = plt.subplots(figsize=(11, 9), dpi=110)
    small = len(cluster.servers) <= NAMED_UP_TO
    if small:  # (on a large cluster's discs they would hide the servers)
        short = [(a, b) for a, b, d in g.edges(data=True) if d["latency_ms"] <= 20]
        nx.draw_networkx_edges(g, pos, edgelist=short, ax=ax, edge_color="#dddddd", width=0.5)
    numbers = numbered(cluster)
    for jp in plan.jobs:
        path_edges = []
        for k in range(len(jp.stages) - 1):
            for a, b in zip(jp.stages[k].nodes, jp.stages[k + 1].nodes, strict=False):
                path_edges.append((a, b))
        nx.draw_networkx_edges(
            nx.Graph(path_edges), pos, ax=ax, edge_color=colours[jp.name],
            width=2.2 if numbers else 0.8, alpha=0.8,
        )  # fmt: skip
    node_colours = [colours.get(owner.get(n, ""), UNUSED) for n in g.nodes]
    area = marker_sizes(cluster)
    sizes = [area[n] for n in g.nodes]
    nx.draw_networkx_nodes(
        g,
        pos,
        ax=ax,
        node_color=node_colours,
        node_size=sizes,
        edgecolors="#333333",
        linewidths=0.6 if numbers else 0.3 if min(sizes, default=0.0) >= 12 else 0.0,
    )
    for x, y, text, size in server_texts(cluster, plan, pos):
        ax.text(x, y, text, ha="center", va="center", fontsize=size, color="#222222")
    for region, (x, y, ha) in _label_at(cluster).items():  # each name outside its region
        ax.text(x, y, region, ha=ha, va="center", fontsize=9 if small else 7, color="#333333")
    if plan.jobs and numbers:
        ax.text(SPAN, -SPAN, "number on a server: its stage in its job's pipeline", ha="right",
                va="bottom", fontsize=7, color="#555555")  # fmt: skip
    for label, colour in legend(plan, colours):  # a job not placed: a hollow marker
        ax.scatter([], [], facecolors=colour, edgecolors="#333333", linewidths=0.6, label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.0), fontsize=8, frameon=False)  # below
    ax.set_title(title or f"{plan.planner} plan on {cluster.name}")
    ax.set_axis_off()
    ax.set_xlim(-SPAN, SPAN)
    ax.set_ylim(-SPAN, SPAN)
    ax.set_aspect("equal")  # (round regions: PT_PER_UNIT)
    # written beside it, then renamed: a full disk leaves no half image (a user trial);
    # through a link or into a device as given
    plain = not out.is_symlink() and (out.is_file() or not out.exists())
    part = out.with_name(f".{out.stem}.{os.getpid()}.part{out.suffix}") if plain else out
    try:
        fig.savefig(part, bbox_inches="tight", format=out.suffix.lstrip(".").lower() or None)
        if plain:
            os.replace(part, out)
    finally:
        plt.close(fig)
        if plain:
            part.unlink(missing_ok=True)
    return out
