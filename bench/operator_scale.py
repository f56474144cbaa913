"""50 jobs on 1,000 sandbox nodes: time until all placed, and the operator's memory.

    python bench/operator_scale.py [--nodes 1000] [--jobs 50] [--spread SECONDS]
The operator runs as its own process (`hulk operator`, log in the sandbox's directory), so
its RSS is its own. With ``--spread`` the jobs arrive over several planning rounds (a round
must never hand out a server that an earlier round gave to a job whose status does not show
it yet; before that was fixed, pods pinned twice stayed Pending forever). Prints the time
to all placed and all Running, the planning rounds, the operator's CPU at rest once all
run (``--rest`` seconds: each job's 1 s timer, with nothing to do), and if not all Running,
why. Goal: all placed, operator memory under 600 MB."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from typing import Any

from operator_common import ROOT, Cluster, paper_jobs, sandbox, wait

PRESETS = ("bert-large", "roberta-large", "gpt2-xl", "gpt3-xl", "xlnet-large")
METRICS_PORT = 19391


def placement_spread(jobs: list[dict[str, Any]]) -> str:
    """Seconds from each job's creation to its Planned condition (1 s resolution)."""

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    waits = sorted(
        (at(c["lastTransitionTime"]) - at(j["metadata"]["creationTimestamp"])).total_seconds()
        for j in jobs
        for c in (j.get("status") or {}).get("conditions") or []
        if c["type"] == "Planned" and c["status"] == "True"
    )
    if not waits:
        return "no job planned"
    mid = waits[len(waits) // 2]
    return f"created -> Planned: min {waits[0]:.0f}s, median {mid:.0f}s, max {waits[-1]:.0f}s"


def planning_rounds() -> str:
    """The operator's own account: planning rounds and the seconds they took."""
    from urllib.request import urlopen

    text = urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).read().decode()
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith(("hulk_planning_seconds_count", "hulk_planning_seconds_sum"))
    }
    n, total = (
        values.get("hulk_planning_seconds_count", 0),
        values.get("hulk_planning_seconds_sum", 0),
    )
    return f"planning: {n:.0f} rounds, {total:.1f}s in the planner"


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process so far (/proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def diagnose(k: Cluster, ns: str) -> None:
    """Why pods are not Running: phases, scheduler messages, servers used twice."""
    pods = [p for p in k.pods(ns) if p.metadata.deletion_timestamp is None]
    print("pod phases:", dict(Counter(p.status.phase for p in pods)), flush=True)
    for p in pods:
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status != "True":
                print(f"  {p.metadata.name}: {c.reason}: {c.message}", flush=True)
    owners: dict[str, set[str]] = {}
    for p in pods:
        node = (p.spec.node_selector or {}).get("kubernetes.io/hostname") or "?"
        owners.setdefault(node, set()).add(p.metadata.labels["hulk.dev/job"])
    twice = {n: sorted(js) for n, js in owners.items() if len(js) > 1}
    print(f"servers planned for two jobs: {twice or 'none'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="apply the jobs over this many seconds (several planning rounds)",
    )
    ap.add_argument(
        "--rest", type=float, default=30.0, help="seconds to measure the operator's CPU at rest"
    )
    args = ap.parse_args()
    from hulk_operator import crd
    from hulk_sandbox.nodes import cluster_for

    box = sandbox(cluster_for(str(args.nodes)).servers)
    proc = None
    try:
        with box.api_client() as api:
            crd.install(api, peering=False)
            k = Cluster(api)
            ns = k.namespace()
            log = open(box.dir / "operator.log", "w")
            print(f"operator log: {log.name}", flush=True)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hulk",
                    "operator",
                    "--kubeconfig",
                    box.kubeconfig,
                    "-n",
                    ns,
                    "--standalone",
                    "--liveness",
                    "",
                    "--metrics-port",
                    str(METRICS_PORT),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            time.sleep(3)
            base = paper_jobs()[0]
            docs = []
            for i in range(args.jobs):
                d = {
                    **base,
                    "metadata": {"name": f"job-{i:03d}"},
                    "spec": {**base["spec"], "model": {"preset": PRESETS[i % len(PRESETS)]}},
                }
                docs.append(d)
            t0 = time.monotonic()
            for d in docs:
                k.apply(ns, [d])
                time.sleep(args.spread / args.jobs)

            def placed() -> int:
                return sum(1 for j in k.jobs(ns) if (j.get("status") or {}).get("plan"))

            marks: dict[str, float] = {}

            def done() -> bool:
                if "placed" not in marks and placed() == args.jobs:
                    marks["placed"] = time.monotonic() - t0
                return k.all_pods_running(ns, args.jobs)

            try:
                wait(done, 420, every=1.0)
            except TimeoutError:
                pass
            elapsed = time.monotonic() - t0
            rss, peak = rss_mb(proc.pid)
            ok = done()
            print(
                f"{placed()}/{args.jobs} jobs placed (all after {marks.get('placed', -1):.1f}s), "
                f"{len(k.pods(ns))} pods, all Running: {ok}, in {elapsed:.1f}s on "
                f"{args.nodes} nodes",
                flush=True,
            )
            print(f"operator RSS {rss:.0f} MB (peak {peak:.0f} MB)", flush=True)
            print(planning_rounds(), flush=True)
            print(placement_spread(k.jobs(ns)), flush=True)
            if ok and args.rest > 0:
                time.sleep(5)  # (the last status writes and Events)
                was, t = cpu_seconds(proc.pid), time.monotonic()
                time.sleep(args.rest)
                used = (cpu_seconds(proc.pid) - was) / (time.monotonic() - t)
                print(
                    f"operator CPU at rest: {100 * used:.1f}% of a core over {args.rest:g}s "
                    f"({args.jobs} jobs Running on {args.nodes} nodes)",
                    flush=True,
                )
            if not ok:
                diagnose(k, ns)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
            log.close()
        box.down()


if __name__ == "__main__":
    main()
