"""What reading every NodeLatency object costs the operator, by cluster size: the JSON of
one listing, and the seconds and memory to parse it and read its links (what
``hulk_operator.indexes.latencies_now`` does, at most every ``LATENCY_CACHE_S``, while a
job runs).

    python bench/latency_listing.py [--nodes 100,300,1000]

Each size runs in a child process: it builds the listing's body as the API server sends it
(every node's probe reporting on every other node, as ``hulk_probe.publisher`` writes it),
then times ``json.loads`` plus ``inventory.read_latencies`` on it and reports the peak
resident memory they added above the body's own. No API server: the listing's transfer is
not counted, only what the operator does with it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def listing(nodes: int) -> bytes:
    """A NodeLatencyList body: each node's status reports every other node, reachable."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    names = [f"node-{i}" for i in range(nodes)]
    items = []
    for i, name in enumerate(names):
        peers = [
            {"node": other, "reachable": True, "samples": 10,
             "latencyMs": round(1.0 + (i * 7 + j) % 90 / 3.0, 3), "lastUpdated": now}
            for j, other in enumerate(names) if other != name
        ]  # fmt: skip
        items.append({
            "apiVersion": "hulk.dev/v1alpha1", "kind": "NodeLatency",
            "metadata": {"name": name, "resourceVersion": str(1000 + i)},
            "status": {"intervalSeconds": 10.0, "lastPublished": now, "reachablePeers": len(peers),
                       "unreachablePeers": 0, "peers": peers},
        })  # fmt: skip
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "NodeLatencyList", "items": items}
    return json.dumps(body, separators=(",", ":")).encode()


def child(nodes: int) -> None:
    from hulk_operator.inventory import read_latencies

    body = listing(nodes)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    start = time.perf_counter()
    items = json.loads(body)["items"]
    latencies = read_latencies(items, max_age_s=600.0)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "nodes": nodes, "json_mb": len(body) / 1e6, "seconds": seconds,
        "added_mb": (peak - base) / 1024, "links": len(latencies.measured),
    }))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,300,1000", help="cluster sizes (comma-separated)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    print(
        f"{'nodes':>6} {'listing MB':>11} {'parse+read s':>13} {'memory added MB':>16} {'links':>8}"
    )
    for n in (int(x) for x in args.nodes.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        print(f"{n:>6} {r['json_mb']:>11.1f} {r['seconds']:>13.2f} {r['added_mb']:>16.0f} "
              f"{r['links']:>8}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
