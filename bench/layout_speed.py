"""Layouts per second: how fast ``layout.layout_job`` lays a job over a server set, the
search's inner loop, with the cost model's plain-Python scoring of small grids and with
numpy alone (``Network.rows`` off, as above ``topology.ROWS_MAX_SERVERS`` servers), and
with its lower bounds on a candidate's step and fit (``_step_floor``, ``_links_floor``,
``_may_fit``, ``_may_fit_servers``) against every candidate scored, and with its memo of
candidates scored before (``layout._MEMOS``: the same fastest servers, order and replicas,
for the same job on the same cost model) against none.

    python bench/layout_speed.py [--sets 1500] [--seed 0] [--repeats 3] [--against FILE]

Cases: random sets of 1-40 servers of the paper's cluster (47 servers) and of a generated
cluster of 300, each laying one of the paper's six jobs; and the sets a search lays out
(``search_plan``, seed 0: 1,500 moves on the paper's cluster with its six jobs, 300 on
``bench/gnn_speed.py``'s cluster of 1,000 with the paper's four), each once, as its layout
cache has them. Each way is timed ``--repeats`` times, interleaved, and its best kept.
Every way must give the same layouts (checked); the figures are speed ratios.

``--against FILE``: also an earlier ``hulk_planner/layout.py`` (``git show
REV:hulk_planner/layout.py > FILE``), loaded beside this one (the rest of the package this
checkout's), timed the same way, interleaved: this layout's speed over that one's, the
same layouts checked.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import time
from collections.abc import Callable
from functools import partial
from unittest import mock

from hulk_planner import layout
from hulk_planner.cost import CostModel
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.generate import random_cluster
from hulk_planner.layout import layout_job
from hulk_planner.model import Cluster, Job
from hulk_planner.planners import search

Case = tuple[Job, list[str]]


def rate(cost: CostModel, cases: list[Case], lay: Callable = layout_job) -> tuple[float, list]:
    t = time.perf_counter()
    out = [lay(cost, job, names) for job, names in cases]
    return len(cases) / (time.perf_counter() - t), out


def earlier(path: str) -> Callable:
    """``layout_job`` of an earlier ``layout.py`` at ``path``, as a module of its own."""
    spec = importlib.util.spec_from_file_location("hulk_planner.layout_earlier", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.layout_job


def unbounded(cluster: Cluster, cases: list[Case]) -> tuple[float, list]:
    """``rate`` with every candidate scored (the bounds off)."""
    with (
        mock.patch.object(layout, "_step_floor", lambda *_: 0.0),
        mock.patch.object(layout, "_links_floor", lambda *_: 0.0),
        mock.patch.object(layout, "_may_fit", lambda *_: True),
        mock.patch.object(layout, "_may_fit_servers", lambda *_: True),
    ):
        return rate(CostModel(cluster), cases)


class _Forgetful:
    """``layout._MEMOS`` that gives every layout an empty memo: nothing scored before."""

    def get(self, _cost: CostModel) -> None:
        return None

    def setdefault(self, _cost: CostModel, memo: layout._Memo) -> layout._Memo:
        return memo


def unmemoised(cost: CostModel, cases: list[Case]) -> tuple[float, list]:
    """``rate`` with no memo."""
    with mock.patch.object(layout, "_MEMOS", _Forgetful()):
        return rate(cost, cases)


def random_sets(c: Cluster, rng: random.Random, count: int) -> list[Case]:
    jobs = paper_jobs(6)
    names = [s.name for s in c.servers]
    return [
        (rng.choice(jobs), rng.sample(names, rng.randint(1, min(40, len(names)))))
        for _ in range(count)
    ]


def search_sets(c: Cluster, jobs: list[Job], moves: int) -> list[Case]:
    """The sets a search of ``moves`` moves (seed 0) lays out, each once, in its order."""
    seen: list[Case] = []

    def spy(cost: CostModel, job: Job, names: frozenset[str]) -> object:
        seen.append((job, sorted(names)))
        return layout_job(cost, job, names)

    with mock.patch.object(search, "layout_job", spy):
        search.search_plan(CostModel(c), jobs, max_iterations=moves, time_budget_s=math.inf)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=1500, help="server sets per cluster (1500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="timings of each way, best kept (3)")
    ap.add_argument("--against", metavar="FILE", help="an earlier layout.py to compare with")
    args = ap.parse_args()
    before = earlier(args.against) if args.against else None
    paper, c300, c1000 = paper_cluster(), random_cluster(300, seed=3), random_cluster(1000, seed=7)
    for c, what, cases in [
        (paper, "random sets", random_sets(paper, random.Random(args.seed), args.sets)),
        (c300, "random sets", random_sets(c300, random.Random(args.seed), args.sets)),
        (paper, "a search's sets, 6 jobs", search_sets(paper, list(paper_jobs(6)), 1500)),
        (c1000, "a search's sets, 4 jobs", search_sets(c1000, list(paper_jobs(4)), 300)),
    ]:
        best = {"fast": 0.0, "numpy": 0.0, "every": 0.0, "forgetful": 0.0, "earlier": 0.0}
        outs: dict[str, list] = {}
        for _ in range(args.repeats):  # interleaved, best of each: the machine's load drifts
            fast_cost, numpy_cost, forgetful_cost = CostModel(c), CostModel(c), CostModel(c)
            numpy_cost.net.rows = None
            for cost in (fast_cost, forgetful_cost):
                cost.net.rows  # noqa: B018 (built before timing, as the search has it)
            ways: dict[str, Callable[[], tuple[float, list]]] = {
                "numpy": partial(rate, numpy_cost, cases),
                "fast": partial(rate, fast_cost, cases),
                "every": partial(unbounded, c, cases),
                "forgetful": partial(unmemoised, forgetful_cost, cases),
            }
            if before is not None:
                earlier_cost = CostModel(c)
                earlier_cost.net.rows  # noqa: B018
                ways["earlier"] = partial(rate, earlier_cost, cases, before)
            for way, run in ways.items():
                got, out = run()
                best[way] = max(best[way], got)
                outs[way] = out
        fast_rate, numpy_rate, every_rate = best["fast"], best["numpy"], best["every"]
        assert outs["fast"] == outs["numpy"], "the two scoring paths gave different layouts"
        assert outs["fast"] == outs["every"], "the bounds changed a layout"
        assert outs["fast"] == outs["forgetful"], "the memo changed a layout"
        against = ""
        if before is not None:
            assert outs["fast"] == outs["earlier"], "the earlier layout.py gave other layouts"
            against = (
                f"; {args.against} {best['earlier']:,.0f} ({fast_rate / best['earlier']:.2f}x)"
            )
        print(
            f"{c.name} ({len(c.servers)} servers; {len(cases)} {what}): "
            f"{fast_rate:,.0f} layouts/s; numpy alone {numpy_rate:,.0f} "
            f"({fast_rate / numpy_rate:.2f}x); every candidate scored {every_rate:,.0f} "
            f"({fast_rate / every_rate:.2f}x); no memo {best['forgetful']:,.0f} "
            f"({fast_rate / best['forgetful']:.2f}x){against}"
        )


if __name__ == "__main__":
    main()
