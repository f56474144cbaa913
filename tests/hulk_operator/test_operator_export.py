"""``hulk topology``'s notes (``export.notes``) on a snapshot made by hand; the command
itself runs on the sandbox in test_operator_latency."""

from __future__ import annotations

import json
from pathlib import Path

from placement_helpers import nodes, not_ready

from hulk_operator.export import notes
from hulk_operator.inventory import COUNT
from hulk_operator.latencies import Latencies
from hulk_operator.snapshot import Snapshot


def test_the_unhealthy_nodes_left_out_are_named_before_the_held_ones() -> None:
    """Before, the first five in name order were all held by a job and the NotReady one was
    among "18 more" (a trial)."""
    view = nodes()
    view["tokyo-29"] = not_ready("tokyo-29", None)
    held = {name: ("ml", "big") for name in sorted(view)[:7]}
    kept = [n for n in view if n not in held and n != "tokyo-29"]
    (left, guessed) = notes(Snapshot(view, Latencies(), {}, held), kept, 1.0, 100.0)
    assert left.startswith(
        "left out 8 node(s) with GPUs: tokyo-29 (NotReady); beijing-0 (held by job ml/big); "
    ), left
    assert left.endswith("; and 3 more"), left
    assert guessed.startswith(f"{len(kept) * (len(kept) - 1) // 2} of ")


def test_the_paper_cluster_is_written_as_a_topology_file_that_reads_back_the_same(
    tmp_path: Path,
) -> None:
    """Before, the built-in cluster could be written out only from Python (a user trial)."""
    import subprocess
    import sys

    from hulk_planner.datasets import paper_cluster
    from hulk_planner.io import load_cluster

    cmd = [sys.executable, "-m", "hulk", "topology", "--paper"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "paper.yaml"
    path.write_text(done.stdout)
    assert load_cluster(path) == paper_cluster()
    free = subprocess.run([*cmd, "--free"], capture_output=True, text=True, timeout=60)
    assert free.returncode == 2 and "--free" in free.stderr and not free.stdout
    # the operator's estimates for a live cluster's links: they were ignored (a user trial)
    flag = "--cross-region-latency-ms"
    est = subprocess.run([*cmd, flag, "1"], capture_output=True, text=True, timeout=60)
    assert est.returncode == 2 and not est.stdout
    assert est.stderr.strip() == (
        f"hulk topology: error: {flag}: sets a live cluster's estimates, not the paper's "
        "measured links: drop it with --paper"
    ), est.stderr


def test_a_random_cluster_is_written_as_a_topology_file_to_plan_on(tmp_path: Path) -> None:
    """``hulk topology --random N``: the generator hulk train uses, from the command line
    (before, from Python alone: a laptop trial); checked flags, a file hulk plan reads."""
    import subprocess
    import sys

    from hulk_planner.generate import random_cluster
    from hulk_planner.io import load_cluster

    def topology(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "hulk", "topology", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    done = topology("--random", "30", "--seed", "5")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    path = tmp_path / "random.yaml"
    path.write_text(done.stdout)
    assert load_cluster(path) == random_cluster(30, 5)
    assert load_cluster(path) != random_cluster(30, 6)
    three = topology("--random", "30", "--regions", "3", "-o", "json")
    assert three.returncode == 0, three.stderr
    (tmp_path / "three.json").write_text(three.stdout)
    cluster = load_cluster(tmp_path / "three.json")
    assert len(cluster.regions) == 3 and len(cluster.servers) == 30
    assert cluster.name == "random-30-0-3-regions"  # (not the default's random-30-0)
    cmd = [sys.executable, "-m", "hulk", "plan", "--cluster", str(path), "--moves", "200",
           "--no-compare", "-o", "json"]  # fmt: skip
    planned = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["jobs"], planned.stdout
    for args, said in (
        (("--random", "0"), "--random: must be greater than zero, got 0"),
        (("--random", "4", "--regions", "5"), "--regions: must be 1 to 4 for 4 server(s), got 5"),
        (("--random", "4", "--seed", "-1"), "--seed: must be 0 to 2**32 - 1, got -1"),
        (("--paper", "--seed", "1"), "--seed: applies to --random alone: drop it"),
        (("--random", "4", "--free"), "--free reads a live cluster's use: drop it with --random"),
    ):
        bad = topology(*args)
        assert bad.returncode == 2 and not bad.stdout, args
        assert bad.stderr.startswith(f"hulk topology: error: {said}"), bad.stderr


def test_nodes_whose_gpu_count_label_is_not_their_allocatable_are_noted() -> None:
    """The file gives allocatable GPUs, as the operator plans; a node relabelled to 2 GPUs
    with 8 allocatable went without a word (a user trial)."""
    from dataclasses import replace

    view = nodes()
    names = sorted(view)
    view[names[0]] = replace(view[names[0]], labels={**view[names[0]].labels, COUNT: "2"})
    view[names[1]] = replace(view[names[1]], labels={**view[names[1]].labels, COUNT: "x"})
    view[names[2]] = replace(
        view[names[2]], labels={k: v for k, v in view[names[2]].labels.items() if k != COUNT}
    )
    told = notes(Snapshot(view, Latencies(), {}, {}), names, 1.0, 100.0)
    (counted,) = [n for n in told if COUNT in n]
    a, b = (view[names[0]].server, view[names[1]].server)
    assert a is not None and b is not None
    assert counted == (
        f"2 node(s) have another GPU count in label {COUNT} than their allocatable "
        f"nvidia.com/gpu, which the file gives (as the operator plans and the scheduler "
        f"places): {names[0]} (2 by its label, {a.gpus} allocatable); {names[1]} (x by its "
        f"label, {b.gpus} allocatable)"
    ), counted
    assert not [
        n for n in notes(Snapshot(nodes(), Latencies(), {}, {}), names, 1.0, 100.0) if COUNT in n
    ]
