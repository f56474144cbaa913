"""Drawing a cluster and a plan, like the Hulk paper's figures: servers grouped by region,
coloured by the job they train, each job's pipeline drawn as a path through its stages."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import networkx as nx

from hulk_planner.model import Cluster, Plan

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


NAMED_UP_TO = 100  # servers: up to this many, each is named on the plot


def _centres(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """Each region's centre: on a circle, in the cluster's order of regions."""
    regions = list(cluster.regions)
    out = {}
    for k, region in enumerate(regions):
        angle = 2 * math.pi * k / max(1, len(regions))
        out[region] = (10 * math.cos(angle), 10 * math.sin(angle))
    return out


def _positions(cluster: Cluster) -> dict[str, tuple[float, float]]:
    pos: dict[str, tuple[float, float]] = {}
    for region, (cx, cy) in _centres(cluster).items():
        members = [s.name for s in cluster.servers if s.region == region]
        radius = 0.4 + 0.25 * math.sqrt(len(members))
        for i, name in enumerate(members):
            a = 2 * math.pi * i / max(1, len(members))
            pos[name] = (cx + radius * math.cos(a), cy + radius * math.sin(a))
    return pos


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
    and, up to NAMED_UP_TO servers, each server's name beside it, away from its region's
    centre (before, a user saw a job's colour, not which server trains which stage: a
    trial)."""
    out = [
        (*pos[n], str(k), 5.5)
        for jp in plan.jobs
        for k, st in enumerate(jp.stages)
        for n in st.nodes
    ]
    if len(cluster.servers) <= NAMED_UP_TO:
        centre = _centres(cluster)
        for s in cluster.servers:
            (x, y), (cx, cy) = pos[s.name], centre[s.region]
            d = math.hypot(x - cx, y - cy) or 1.0
            out.append((x + 0.95 * (x - cx) / d, y + 0.75 * (y - cy) / d, s.name, 4.5))
    return out


def plot_plan(cluster: Cluster, plan: Plan, path: str | Path, title: str | None = None) -> Path:
    """Write a PNG of ``plan`` on ``cluster`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = cluster_graph(cluster)
    pos = _positions(cluster)
    owner = plan.assignment
    colours = {jp.name: PALETTE[i % len(PALETTE)] for i, jp in enumerate(plan.jobs)}
    fig, ax = plt.subplots(figsize=(11, 9), dpi=110)
    short = [(a, b) for a, b, d in g.edges(data=True) if d["latency_ms"] <= 20]
    nx.draw_networkx_edges(g, pos, edgelist=short, ax=ax, edge_color="#dddddd", width=0.5)
    for jp in plan.jobs:
        path_edges = []
        for k in range(len(jp.stages) - 1):
            for a, b in zip(jp.stages[k].nodes, jp.stages[k + 1].nodes, strict=False):
                path_edges.append((a, b))
        nx.draw_networkx_edges(
            nx.Graph(path_edges), pos, ax=ax, edge_color=colours[jp.name], width=2.2, alpha=0.8
        )
    node_colours = [colours.get(owner.get(n, ""), UNUSED) for n in g.nodes]
    sizes = [60 + 12 * g.nodes[n]["gpus"] for n in g.nodes]
    nx.draw_networkx_nodes(
        g,
        pos,
        ax=ax,
        node_color=node_colours,
        node_size=sizes,
        edgecolors="#333333",
        linewidths=0.6,
    )
    for x, y, text, size in server_texts(cluster, plan, pos):
        ax.text(x, y, text, ha="center", va="center", fontsize=size, color="#222222")
    for region, (cx, cy) in _centres(cluster).items():  # each name outside its region
        ax.text(
            1.26 * cx,
            1.26 * cy,
            region,
            ha="center",
            va="center",
            fontsize=9,
            color="#333333",
        )
    if plan.jobs:
        ax.text(14, -14, "number on a server: its stage in its job's pipeline", ha="right",
                va="bottom", fontsize=7, color="#555555")  # fmt: skip
    for label, colour in legend(plan, colours):  # a job not placed: a hollow marker
        ax.scatter([], [], facecolors=colour, edgecolors="#333333", linewidths=0.6, label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.0), fontsize=8, frameon=False)  # below
    ax.set_title(title or f"{plan.planner} plan on {cluster.name}")
    ax.set_axis_off()
    ax.set_xlim(-14, 14)
    ax.set_ylim(-14, 14)
    out = Path(path)
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
