"""50 latency-probe agents on one machine against the sandbox: convergence, memory, API
write rate and accuracy against delays injected with toxiproxy.

    python bench/probe_scale.py [--agents 50] [--interval 5] [--kubeconfig PATH]

Without ``--kubeconfig`` it starts a sandbox with one node per agent (and stops it after).
Each agent is a real ``hulk probe`` process on its own loopback address (127.0.0.2, ...).
A few pairs talk through toxiproxy proxies that delay each direction by a known amount.

Figures and goals (the probe's cost on every node):
- convergence: time from "every agent ready" until every ordered pair is published with a
  sample, in probe intervals (goal <= 2); time from spawning the processes is printed too;
- agent resident memory (VmRSS), max over agents (goal < 60 MB);
- status writes per node per interval, over a steady window seen by an API watch (goal <= 1);
- accuracy: published one-way latency vs injected delay (goal within 10% + 0.5 ms).
Exit status 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hulk_probe import harness  # noqa: E402
from hulk_probe.kube import NODE_LATENCIES, Kube  # noqa: E402
from hulk_probe.toxiproxy import Toxiproxy  # noqa: E402

DELAYS_MS = (5.0, 10.0, 25.0, 50.0, 100.0)  # one-way, on pairs (0,1), (2,3), ...


def node_names(api: Any) -> list[str]:
    return sorted(n["metadata"]["name"] for n in Kube(api).request("GET", "/api/v1/nodes")["items"])


class Watcher(threading.Thread):
    """Follows the NodeLatency objects through one API watch (cheaper than polling lists of
    50 objects of 49 entries): when each ordered pair was first published with a sample,
    and when each object was written."""

    def __init__(self, api: Any, names: set[str]) -> None:
        super().__init__(daemon=True)
        self.kube, self.names = Kube(api), names
        self.first_seen: dict[tuple[str, str], float] = {}
        self.writes: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            self._follow()
        except Exception as exc:  # the sandbox going down at the end, typically
            print(f"(watcher stopped: {type(exc).__name__})", file=sys.stderr)

    def _follow(self) -> None:
        listing = self.kube.request("GET", NODE_LATENCIES)
        for obj in listing["items"]:
            self._see(obj, written=False)
        version = listing["metadata"]["resourceVersion"]
        while True:
            for event in self.kube.watch(NODE_LATENCIES, version, 60):
                obj = event.get("object") or {}
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._see(obj, written=event["type"] == "MODIFIED")

    def _see(self, obj: dict[str, Any], written: bool) -> None:
        now = time.monotonic()
        source = obj["metadata"]["name"]
        if source not in self.names:
            return
        with self.lock:
            if written:
                self.writes.setdefault(source, []).append(now)
            for entry in (obj.get("status") or {}).get("peers") or []:
                if entry.get("reachable") and entry.get("samples", 0) >= 1:
                    self.first_seen.setdefault((source, entry["node"]), now)

    def writes_between(self, start: float, end: float) -> dict[str, list[float]]:
        with self.lock:
            return {n: [t for t in ts if start <= t < end] for n, ts in self.writes.items()}


def measured_pairs(api: Any, nodes: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    objects = [o for o in harness.list_node_latencies(api) if o["metadata"]["name"] in nodes]
    return {
        pair: e
        for pair, e in harness.status_peers(objects).items()
        if e.get("reachable") and e.get("samples", 0) >= 1
    }


def verdict(good: bool) -> str:
    return "ok" if good else "MISSED"


class Bench:
    def __init__(self, api: Any, kubeconfig: str, args: argparse.Namespace, logs: Path):
        self.api, self.kubeconfig, self.args, self.logs = api, kubeconfig, args, logs
        self.interval = float(args.interval)
        self.goals: list[bool] = []
        self.watcher: Watcher  # started in run(), once the node names are known

    def goal(self, good: bool) -> str:
        self.goals.append(good)
        return verdict(good)

    def run(self) -> bool:
        names = node_names(self.api)
        nodes = names[: self.args.agents]
        if len(nodes) < self.args.agents:
            raise SystemExit(f"the cluster has {len(names)} nodes, fewer than --agents")
        harness.install_crd(self.api)
        harness.forget_nodes(self.api, nodes)
        slots = harness.reserve(len(nodes))
        delays = {
            (nodes[2 * i], nodes[2 * i + 1]): ms
            for i, ms in enumerate(DELAYS_MS)
            if 2 * i + 1 < len(nodes)
        }
        with Toxiproxy(log_path=self.logs / "toxiproxy.log") as proxy:
            per_node: dict[str, list[str]] = {n: [] for n in nodes}
            echo = {n: (s.host, s.port) for n, s in zip(nodes, slots, strict=True)}
            for (a, b), ms in delays.items():
                for src, dst in ((a, b), (b, a)):
                    listen = proxy.proxy(f"{src}-{dst}", echo[dst])
                    proxy.delay(f"{src}-{dst}", ms)
                    per_node[src] += ["--peer-address", f"{dst}={listen[0]}:{listen[1]}"]
            flags = [
                "--interval",
                str(self.interval),
                "--timeout",
                str(min(1.0, self.interval)),
                "--window",
                str(self.args.window),
                "--log-level",
                "WARNING",
            ]
            self.watcher = Watcher(self.api, set(nodes))
            self.watcher.start()
            spawned = time.monotonic()
            agents = harness.start_agents(
                nodes, self.kubeconfig, self.logs, slots=slots, args=flags, per_node_args=per_node
            )
            try:
                self.converge(nodes, agents, spawned)
                self.steady(nodes, agents)
                self.accuracy(nodes, delays)
            finally:
                harness.stop_agents(agents)
                harness.forget_nodes(self.api, nodes)
        return all(self.goals)

    def converge(
        self, nodes: list[str], agents: list[harness.AgentProcess], spawned: float
    ) -> None:
        harness.wait_ready(agents, timeout_s=600)
        ready = time.monotonic()
        print(f"{len(agents)} agents ready {ready - spawned:.1f}s after spawning", flush=True)
        want = len(nodes) * (len(nodes) - 1)
        reported = 0
        while len(self.watcher.first_seen) < want:
            elapsed = time.monotonic() - ready
            if elapsed > 20 * self.interval:
                break
            if elapsed >= (reported + 1) * self.interval / 2:
                reported += 1
                print(f"  {elapsed:5.1f}s: {len(self.watcher.first_seen)}/{want} pairs", flush=True)
            time.sleep(0.1)
        with self.watcher.lock:
            seen = [max(0.0, t - ready) for t in self.watcher.first_seen.values()]
        took = max(seen)
        good = len(seen) == want and took <= 2 * self.interval
        print(
            f"convergence: {len(seen)}/{want} ordered pairs published, the last "
            f"{took:.1f}s = {took / self.interval:.2f} intervals after all agents were "
            f"ready ({took + ready - spawned:.1f}s after spawning; median pair "
            f"{statistics.median(seen) / self.interval:.2f} intervals); goal <= 2 "
            f"intervals: {self.goal(good)}",
            flush=True,
        )

    def steady(self, nodes: list[str], agents: list[harness.AgentProcess]) -> None:
        seconds = self.args.steady * self.interval
        start = time.monotonic()
        cpu = sum(a.cpu_seconds() for a in agents)
        time.sleep(seconds / 2)
        rss = [a.rss_bytes() / 2**20 for a in agents]
        time.sleep(seconds / 2)
        cpu = sum(a.cpu_seconds() for a in agents) - cpu
        arrivals = self.watcher.writes_between(start, start + seconds)
        # the bound: in any window, at most one write per interval (+1 at its edge)
        counts = [len(arrivals.get(n, [])) for n in nodes]
        gaps = [(b - a) / self.interval for t in arrivals.values() for a, b in pairwise(t)]
        per_interval = statistics.mean(counts) * self.interval / seconds
        good = max(counts) <= seconds / self.interval + 1 and min(counts) > 0
        print(
            f"status writes in {seconds:g}s ({self.args.steady:g} intervals): "
            f"{sum(counts)}, per node per interval {per_interval:.3f} on average, at most "
            f"{max(counts)} for one node; shortest gap between two writes of a node "
            f"{min(gaps):.2f} intervals; goal <= 1 per interval: {self.goal(good)}"
        )
        print(
            f"agent RSS: median {statistics.median(rss):.1f} MB, max {max(rss):.1f} MB; "
            f"goal < 60 MB: {self.goal(max(rss) < 60)}"
        )
        probes = len(agents) * (len(agents) - 1) * seconds / self.interval
        print(
            f"agent CPU: {cpu / seconds:.2f} cores for all {len(agents)} together, "
            f"{cpu / probes * 1000:.2f} ms per probe (both ends, status writes included)",
            flush=True,
        )

    def accuracy(self, nodes: list[str], delays: dict[tuple[str, str], float]) -> None:
        pairs = measured_pairs(self.api, nodes)
        print("accuracy, one-way ms (goal: within 10% + 0.5 ms of the injected delay):")
        for (a, b), ms in delays.items():
            for src, dst in ((a, b), (b, a)):
                got = pairs.get((src, dst), {}).get("latencyMs")
                good = got is not None and abs(got - ms) <= 0.1 * ms + 0.5
                shown = f"{got:8.3f}" if got is not None else "     n/a"
                print(f"  {src} -> {dst}: injected {ms:6.1f}, measured {shown}: {self.goal(good)}")
        plain = sorted(
            e["latencyMs"]
            for p, e in pairs.items()
            if p not in delays and (p[1], p[0]) not in delays
        )
        print(
            f"  undelayed loopback pairs: median {statistics.median(plain):.3f} ms, "
            f"p99 {plain[int(0.99 * (len(plain) - 1))]:.3f} ms over {len(plain)} pairs"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--interval", type=float, default=5.0, help="probe interval, seconds")
    ap.add_argument("--window", type=int, default=10, help="samples per estimate (as the agent)")
    ap.add_argument("--steady", type=float, default=6, help="intervals of the write-rate window")
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting a sandbox")
    args = ap.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="hulk-probe-bench-"))
    print(f"agent logs in {logs}", flush=True)
    from kubernetes import config

    if args.kubeconfig:
        with config.new_client_from_config(config_file=args.kubeconfig) as api:
            return 0 if Bench(api, args.kubeconfig, args, logs).run() else 1
    from hulk_sandbox.nodes import cluster_for
    from hulk_sandbox.sandbox import Sandbox

    box = Sandbox(logs / "sandbox")
    secs = box.up(cluster_for(str(args.agents)).servers, die_with_parent=True, timeout=600)
    print(f"sandbox: {args.agents} nodes Ready in {secs:.1f}s", flush=True)
    try:
        with box.api_client() as api:
            return 0 if Bench(api, box.kubeconfig, args, logs).run() else 1
    finally:
        box.down()


if __name__ == "__main__":
    raise SystemExit(main())
