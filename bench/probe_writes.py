"""What the latency probes write into etcd, by cluster size: one NodeLatency status as the
agent sends it and as the API server stores it, and the whole cluster's write volume at a
fixed publish interval against within the probes' write budget (``--write-budget``).

    python bench/probe_writes.py [--nodes 100,300,1000,3000] [--kubeconfig PATH]
                                 [--peers-per-region K --regions R]

For each size N it writes, through the agent's own ``Publisher``, one NodeLatency object
whose status reports N-1 peers (names like an EKS node's, every peer reachable), reads it
back and measures it: custom resources are stored in etcd as the JSON the API server
returns, ``managedFields`` included. Without ``--kubeconfig`` it starts a sandbox (no
nodes) and stops it after. The volumes are computed from those sizes: N agents writing
every 10 s (the probe's default interval, the only cadence before the budget) against
the agent's own pacing (``publisher.Pacer.spacing_for``) with the default budget and the
chart's default longest spacing (200 s, a third of the operator's 600 s max age). The API
server compacts etcd every 5 minutes (``--etcd-compaction-interval``) to the revision it
saw at the compaction before, so etcd holds 5 to 10 minutes of history: the figures give
10 minutes (the worst), against etcd's default quota of 2 GiB (``--quota-backend-bytes``).
With ``--peers-per-region K`` the agents probe K peers of each of R regions (``hulk probe
--peers-per-region``): each status lists K x R peers (at most N-1), while all N agents
still write.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hulk_probe.estimator import Estimate  # noqa: E402
from hulk_probe.harness import install_crd  # noqa: E402
from hulk_probe.kube import NODE_LATENCIES, Kube  # noqa: E402
from hulk_probe.publisher import (  # noqa: E402
    DEFAULT_WRITE_BUDGET_KB_S,
    Pacer,
    Publisher,
    body_bytes,
    status_body,
)

FIXED_INTERVAL_S = 10.0
HISTORY_S = 600.0  # etcd's history at worst: two compaction intervals
QUOTA_BYTES = 2 * 1024**3


def node_name(i: int) -> str:
    """An EKS-like node name (41-43 characters)."""
    return f"ip-10-{i // 250}-{i % 250}-{7 + i % 3}.eu-west-1.compute.internal"


def body_for(peers: int) -> dict[str, Any]:
    now = time.time()
    estimates = {
        node_name(i): Estimate(0.2 + (i * 37 % 900) / 7.0, 10, now - i % 10, True, 0)
        for i in range(1, peers + 1)
    }
    return status_body(estimates, now, 10.0, FIXED_INTERVAL_S)


def stored_bytes(api: Any, nodes: int, peers: int) -> tuple[int, int, int]:
    """(status as sent, object as stored, of which managedFields) for one object of
    ``peers`` peers."""
    name = f"bench-writes-{nodes}"
    publisher = Publisher(api, name)
    publisher.ensure_object()
    body = body_for(peers)
    for _ in range(2):  # the second write as every later one: managedFields settled
        publisher.write_status(body)
    stored = Kube(api).request("GET", f"{NODE_LATENCIES}/{name}")
    Kube(api).request("DELETE", f"{NODE_LATENCIES}/{name}")
    managed = json.dumps(stored["metadata"].get("managedFields"), separators=(",", ":"))
    return body_bytes(body), len(json.dumps(stored, separators=(",", ":"))), len(managed)


def report(rows: list[tuple[int, int, int]]) -> None:
    pacer = Pacer(FIXED_INTERVAL_S, DEFAULT_WRITE_BUDGET_KB_S * 1000.0)
    print(
        f"\nfixed: every agent writes every {FIXED_INTERVAL_S:g} s; budget: "
        f"--write-budget {DEFAULT_WRITE_BUDGET_KB_S:g} KB/s (default), written at most "
        f"{pacer.cap_s:g} s apart; history: {HISTORY_S:.0f} s of writes against etcd's "
        f"default quota of {QUOTA_BYTES / 2**30:g} GiB\n"
    )
    head = (
        f"{'nodes':>6} {'sent KB':>8} {'stored KB':>9} {'stored/sent':>11} | "
        f"{'fixed MB/s':>10} {'history MB':>10} {'of quota':>8} | "
        f"{'spacing s':>9} {'MB/s':>6} {'history MB':>10} {'of quota':>8} | {'fixed/budget':>12} "
        f"{'budget needs s':>14}"
    )
    print(head)
    print("-" * len(head))
    for nodes, sent, stored in rows:
        fixed_rate = nodes * stored / FIXED_INTERVAL_S
        spacing = pacer.spacing_for(sent, nodes)
        budget_rate = nodes * stored / spacing
        print(
            f"{nodes:>6} {sent / 1000:>8.1f} {stored / 1000:>9.1f} {stored / sent:>11.2f} | "
            f"{fixed_rate / 1e6:>10.2f} {fixed_rate * HISTORY_S / 1e6:>10.0f} "
            f"{fixed_rate * HISTORY_S / QUOTA_BYTES:>8.0%} | "
            f"{spacing:>9.0f} {budget_rate / 1e6:>6.2f} {budget_rate * HISTORY_S / 1e6:>10.0f} "
            f"{budget_rate * HISTORY_S / QUOTA_BYTES:>8.0%} | {fixed_rate / budget_rate:>12.1f} "
            f"{nodes * sent / pacer.budget_bytes_s:>14.0f}"
        )


def run(api: Any, sizes: list[int], per_region: int = 0, regions: int = 20) -> None:
    install_crd(api)
    rows = []
    if per_region:
        print(f"sampling: {per_region} peers of each of {regions} regions (--peers-per-region)")
    for nodes in sizes:
        peers = nodes - 1 if not per_region else min(nodes - 1, per_region * regions)
        sent, stored, managed = stored_bytes(api, nodes, peers)
        rows.append((nodes, sent, stored))
        print(
            f"{nodes} nodes: status of {peers} peers {sent} B as sent, {stored} B stored, of "
            f"which {managed} B ({managed / stored:.0%}) managedFields",
            flush=True,
        )
    report(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="100,300,1000,3000", help="cluster sizes, comma-separated")
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting a sandbox")
    ap.add_argument(
        "--peers-per-region", type=int, default=0, help="the probes' sampling (0: every peer)"
    )
    ap.add_argument("--regions", type=int, default=20, help="regions, with --peers-per-region")
    args = ap.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    from kubernetes import config

    if args.kubeconfig:
        with config.new_client_from_config(config_file=args.kubeconfig) as api:
            run(api, sizes, args.peers_per_region, args.regions)
        return 0
    from hulk_sandbox.sandbox import Sandbox

    box = Sandbox(Path(tempfile.mkdtemp(prefix="hulk-probe-writes-")) / "sandbox")
    box.up([], die_with_parent=True, timeout=600)
    try:
        with box.api_client() as api:
            run(api, sizes, args.peers_per_region, args.regions)
    finally:
        box.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
