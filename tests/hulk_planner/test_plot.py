"""Drawing a plan: the cluster graph and the PNG."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from planner_helpers import cluster, server

from hulk_planner import plot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.model import Plan, Unplaced
from hulk_planner.plot import (
    NAMED_UP_TO,
    PT_PER_UNIT,
    UNUSED,
    _centres,
    _positions,
    cluster_graph,
    legend,
    marker_sizes,
    missing_glyphs,
    numbered,
    plot_plan,
    server_texts,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_cluster_graph_has_every_server_and_link() -> None:
    c = cluster(
        [server("a", gpus=2, memory_gib=40), server("b", "r2", tflops=312.0)],
        [("a", "b", 12.5)],
    )
    g = cluster_graph(c)
    assert set(g.nodes) == {"a", "b"}
    assert g.nodes["a"] == {"region": "r1", "gpus": 2, "tflops": 2.5, "memory_gib": 80}
    assert g.edges["a", "b"]["latency_ms"] == 12.5
    assert g.graph["name"] == "hand-built"


def test_paper_cluster_graph_matches_the_loader() -> None:
    c = paper_cluster()
    g = cluster_graph(c)
    assert g.number_of_nodes() == 47 and g.number_of_edges() == len(c.links)


def test_plot_plan_writes_a_png(tmp_path: Path) -> None:
    c = paper_cluster()
    result = plan(c, paper_jobs(), max_iterations=30)
    out = plot_plan(c, result, tmp_path / "paper.png", title="paper")
    data = out.read_bytes()
    assert out == tmp_path / "paper.png"
    assert data[:8] == PNG and len(data) > 10_000


def test_names_no_font_has_are_told_once_not_warned_per_glyph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regions named in Chinese and Japanese: matplotlib warned once per glyph, with its
    source line, on ``hulk plan --plot`` (a user trial). The plot warns of nothing now, and
    ``missing_glyphs`` names the characters (for the CLI's one note)."""
    import warnings

    monkeypatch.setattr(plot, "FALLBACK_FONTS", ())  # DejaVu Sans alone, as on CI
    c = cluster([server("bj-0", "北京"), server("tk-0", "東京"), server("x", "paris")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plot_plan(c, Plan("hulk"), tmp_path / "cjk.png")
    assert out.read_bytes()[:8] == PNG
    assert missing_glyphs(c, Plan("hulk")) == "".join(sorted("北京東"))
    assert missing_glyphs(paper_cluster(), Plan("hulk")) == ""
    assert missing_glyphs(c, Plan("hulk"), title="Zürich") == "".join(
        sorted("北京東")
    )  # (ü: DejaVu)


def test_plot_of_an_empty_plan_and_a_generated_cluster(tmp_path: Path) -> None:
    c = random_cluster(20, seed=4)
    out = plot_plan(c, Plan("hulk"), tmp_path / "empty.png")
    assert out.read_bytes()[:8] == PNG


def test_the_legend_names_every_job_placed_or_not(tmp_path: Path) -> None:
    c = paper_cluster()
    result = plan(c, paper_jobs()[2:], max_iterations=30)
    reason = "fits nowhere: needs 99999 GiB of GPU memory, the whole cluster has 3 GiB " * 2
    result = replace(result, unplaced=(*result.unplaced, Unplaced("huge", reason)))
    colours = {jp.name: f"C{k}" for k, jp in enumerate(result.jobs)}
    rows = legend(result, colours)
    assert [label.split(":")[0] for label, _ in rows] == [*colours, "huge", "unused"]
    assert rows[-2][1] == "none" and rows[-1] == ("unused", UNUSED)
    assert rows[-2][0].startswith("huge: not placed (fits nowhere: needs 99999 GiB")
    assert rows[-2][0].endswith("...)") and len(rows[-2][0]) < 90
    assert plot_plan(c, result, tmp_path / "p.png").read_bytes()[:8] == PNG


def test_each_server_is_named_and_each_stage_numbered() -> None:
    """Before: a job's colour alone; which server trains which stage was not on the plot
    (a trial)."""
    c = paper_cluster()
    result = plan(c, paper_jobs()[1:], max_iterations=30)
    pos = _positions(c)
    texts = server_texts(c, result, pos)
    numbers = {(x, y, t) for x, y, t, _ in texts if t.isdigit()}
    assert numbers == {
        (*pos[n], str(k)) for jp in result.jobs for k, st in enumerate(jp.stages) for n in st.nodes
    }
    assert sorted(t for _, _, t, _ in texts if not t.isdigit()) == sorted(c.index)
    big = random_cluster(NAMED_UP_TO + 1, seed=1)  # too many to name
    assert server_texts(big, Plan("hulk"), _positions(big)) == []


@pytest.mark.parametrize("n, seed", [(47, 0), (NAMED_UP_TO, 3), (1000, 1), (3000, 2)])
def test_regions_and_servers_do_not_overlap(n: int, seed: int) -> None:
    """A 1,000-server cluster's 20 regions drew as rings that overlapped one another, with a
    stage number on each of its servers (a trial): every region keeps apart from the
    others, every server's marker from its neighbours', and numbers only where they fit."""
    c = paper_cluster() if n == 47 else random_cluster(n, seed=seed)
    pos, area, centres = _positions(c), marker_sizes(c), _centres(c)
    names = [s.name for s in c.servers]
    xy = np.array([pos[m] for m in names]) * PT_PER_UNIT
    width = np.sqrt([area[m] for m in names])  # (a marker's area: its width squared)
    gap = np.hypot(*(xy[:, None, :] - xy[None, :, :]).transpose(2, 0, 1))
    np.fill_diagonal(gap, np.inf)
    assert (gap >= (width[:, None] + width[None, :]) / 2).all()
    reach = {  # each region's servers lie within this of its centre
        r: max(math.dist(pos[s.name], centres[r]) for s in c.servers if s.region == r)
        for r in {s.region for s in c.servers}
    }
    for a in reach:
        for b in reach:
            if a < b:
                assert math.dist(centres[a], centres[b]) > reach[a] + reach[b] + 0.3, (a, b)
    assert len(set(pos.values())) == len(names)
    assert numbered(c) == (n <= NAMED_UP_TO)  # (the random ones: 8-GPU servers among them)
    result = plan(c, paper_jobs()[3:], max_iterations=1)
    digits = [t for _, _, t, _ in server_texts(c, result, pos) if t.isdigit()]
    assert bool(digits) == numbered(c)
