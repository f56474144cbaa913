"""Node deleted -> replacement pods created, over 20 trials (the paper's 4 jobs running).

    python bench/operator_recovery.py [--trials 20]
Goal: p99 under 10 s."""

from __future__ import annotations

import argparse
import time

from operator_common import Cluster, paper_jobs, sandbox, summary, wait


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    from hulk_operator import crd
    from hulk_operator.runner import OperatorThread
    from hulk_planner.datasets import paper_cluster

    paper = paper_cluster()
    box = sandbox(paper.servers)
    try:
        with box.api_client() as api:
            crd.install(api, peering=False)
            k = Cluster(api)
            times = []
            with OperatorThread(box.kubeconfig):
                ns = k.namespace()
                k.apply(ns, paper_jobs())
                wait(lambda: k.all_pods_running(ns, 4), 120)
                for i in range(args.trials):
                    pods = {p.metadata.name: p.spec.node_name for p in k.pods(ns)}
                    nodes = sorted(set(pods.values()))
                    victim = nodes[(i * 7) % len(nodes)]
                    t0 = time.monotonic()
                    box.delete_node(victim)

                    def replacements(old: dict[str, str] = pods) -> set[str]:
                        return {p.metadata.name for p in k.pods(ns)} - set(old)

                    wait(replacements, 60, every=0.02)
                    times.append(time.monotonic() - t0)
                    print(
                        f"trial {i}: {victim} deleted, replacement after {times[-1]:.2f}s",
                        flush=True,
                    )
                    wait(lambda: k.all_pods_running(ns, 4), 120)
                    box.add_node(paper.server(victim))
                k.delete_all(ns)
            summary("node deleted -> replacement pods created", times)
    finally:
        box.down()


if __name__ == "__main__":
    main()
