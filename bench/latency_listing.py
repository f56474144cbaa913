"""What reading every NodeLatency object costs the operator, by cluster size: the JSON of
one listing, and the seconds and memory to parse it and read its links (what
``hulk_operator.indexes.latencies_now`` does, at most every ``LATENCY_CACHE_S``, while a
job runs).

    python bench/latency_listing.py [--nodes 100,300,1000] [--peers-per-region K]
                                    [--lost-per-region L]

Each size runs in a child process: it builds the listing's body as the API server sends it
(every node's probe reporting on every other node, as ``hulk_probe.publisher`` writes it),
then times ``json.loads`` plus ``latencies.read_latencies`` on it and reports the peak
resident memory they added above the body's own. No API server: the listing's transfer is
not counted, only what the operator does with it.

It also reports the longest stall of an asyncio event loop (a 10 ms ticker) while a thread
does that work, as the operator does it (``indexes.latencies_now`` in a thread beside
kopf's loop): ``json.loads`` holds the GIL for a whole response, so the loop stalls for
the parse of the largest one; once with the listing whole, once in pages of
``kube.LATENCY_PAGE`` objects (``limit``/``continue``, what the operator reads now).

With ``--peers-per-region K`` each node reports the K peers of each of the 10 regions its
probe would sample (``hulk_probe.discovery.sample_peers``, ``hulk probe
--peers-per-region``), not every other node. With ``--lost-per-region L``, L nodes of each
region are lost: they publish nothing, and the probes that probe them report them
unreachable (the operator takes them for cut off from every peer).

Then the seconds of ``latencies.with_regions`` (the regions' medians and the pairs taken
as cut: once per reading), and last, the seconds of ``latencies.build_cluster`` on those
latencies and the nodes as servers of 10 regions: what a planning round does with them
before it plans; the first round on a reading builds every measured pair's ``Link``
(``latencies.measured_links``), a later round on the same reading (one node fewer: a
round on the free servers) reuses them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


REGIONS = 10


def region_of(i: int) -> str:
    return f"region-{i % REGIONS}"


def listing(nodes: int, per_region: int = 0, lost: int = 0) -> bytes:
    """A NodeLatencyList body: each node's status reports every other node (or those its
    probe samples, ``per_region`` of each region), reachable, but the ``lost`` first nodes
    of each region, which publish nothing and are reported unreachable."""
    from hulk_probe.discovery import sample_peers

    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    names = [f"node-{i}" for i in range(nodes)]
    region = {n: region_of(i) for i, n in enumerate(names)}
    index = {n: j for j, n in enumerate(names)}
    gone = set(names[: lost * REGIONS])  # (node i is of region i % REGIONS)
    items = []
    for i, name in enumerate(names):
        if name in gone:
            continue
        everyone = {other: ("10.0.0.1", 7471) for other in names if other != name}
        probed = sample_peers(everyone, region, name, per_region)
        peers = [
            {"node": other, "reachable": False, "samples": 0, "consecutiveFailures": 3}
            if other in gone
            else {"node": other, "reachable": True, "samples": 10,
                  "latencyMs": round(1.0 + (i * 7 + index[other]) % 90 / 3.0, 3),
                  "lastUpdated": now}
            for other in names if other in probed
        ]  # fmt: skip
        reachable = sum(1 for p in peers if p["reachable"])
        items.append({
            "apiVersion": "hulk.dev/v1alpha1", "kind": "NodeLatency",
            "metadata": {"name": name, "resourceVersion": str(1000 + i)},
            "status": {"intervalSeconds": 10.0, "lastPublished": now, "reachablePeers": reachable,
                       "unreachablePeers": len(peers) - reachable, "peers": peers},
        })  # fmt: skip
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "NodeLatencyList", "items": items}
    return json.dumps(body, separators=(",", ":")).encode()


def longest_stall(work: Callable[[], Any]) -> float:
    """Seconds an event loop's 10 ms ticker waited past its time, at worst, while ``work``
    ran in a thread."""

    async def watch() -> float:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(asyncio.to_thread(work))
        worst = 0.0
        while not task.done():
            start = loop.time()
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - start - 0.01)
        await task
        return worst

    return asyncio.run(watch())


def child(nodes: int, per_region: int, lost: int = 0) -> None:
    from hulk_operator.kube import LATENCY_PAGE
    from hulk_operator.latencies import build_cluster, read_latencies, with_regions
    from hulk_planner.model import Server

    body = listing(nodes, per_region, lost)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    start = time.perf_counter()
    items = json.loads(body)["items"]
    latencies = read_latencies(items, max_age_s=600.0)
    seconds = time.perf_counter() - start
    measured = latencies.measured
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del items, latencies
    whole = longest_stall(lambda: read_latencies(json.loads(body)["items"], 600.0))
    every = json.loads(body)["items"]
    pages = [
        json.dumps({"items": every[i : i + LATENCY_PAGE]}, separators=(",", ":")).encode()
        for i in range(0, len(every), LATENCY_PAGE)
    ]
    del every

    def paged() -> Any:
        items: list[Any] = []
        for page in pages:
            items.extend(json.loads(page)["items"])
        return read_latencies(items, 600.0)

    in_pages = longest_stall(paged)
    latencies = paged()
    servers = [Server(f"node-{i}", region_of(i), 8, 80.0, 312.0) for i in range(nodes)]
    start = time.perf_counter()
    latencies = with_regions(latencies, {s.name: s.region for s in servers})
    regions = time.perf_counter() - start
    start = time.perf_counter()
    cluster = build_cluster(servers, latencies, same_region_ms=1.0, cross_region_ms=100.0)
    build = time.perf_counter() - start
    start = time.perf_counter()
    build_cluster(servers[:-1], latencies, same_region_ms=1.0, cross_region_ms=100.0)
    again = time.perf_counter() - start
    print(json.dumps({
        "nodes": nodes, "json_mb": len(body) / 1e6, "seconds": seconds,
        "added_mb": (peak - base) / 1024, "links": len(measured),
        "stall_whole": whole, "stall_pages": in_pages, "regions": regions, "build": build,
        "again": again, "cluster_links": len(cluster.links), "cut": len(cluster.cut),
    }))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,300,1000", help="cluster sizes (comma-separated)")
    parser.add_argument(
        "--peers-per-region", type=int, default=0, help="the probes' sampling (0: every peer)"
    )
    parser.add_argument(
        "--lost-per-region", type=int, default=0, help="nodes lost in each of the 10 regions"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.peers_per_region, args.lost_per_region)
        return 0
    print(
        f"{'nodes':>6} {'listing MB':>11} {'parse+read s':>13} {'memory added MB':>16} "
        f"{'links':>8} {'loop stall s, whole':>20} {'in pages':>9} {'whole/pages':>11} "
        f"{'regions s':>9} {'cluster build s, first round':>28} {'a later round':>13} "
        f"{'its links':>9} {'cut pairs':>9}"
    )
    for n in (int(x) for x in args.nodes.split(",")):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(n),
                "--peers-per-region",
                str(args.peers_per_region),
                "--lost-per-region",
                str(args.lost_per_region),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        print(f"{n:>6} {r['json_mb']:>11.1f} {r['seconds']:>13.2f} {r['added_mb']:>16.0f} "
              f"{r['links']:>8} {r['stall_whole']:>20.2f} {r['stall_pages']:>9.2f} "
              f"{r['stall_whole'] / max(r['stall_pages'], 1e-3):>11.1f} "
              f"{r['regions']:>9.2f} {r['build']:>28.2f} {r['again']:>13.2f} "
              f"{r['cluster_links']:>9} {r['cut']:>9}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
