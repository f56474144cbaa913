"""Apply -> every stage pod Running, for the paper's 4 jobs on its 47 servers (sandbox).

    python bench/operator_apply.py [--trials 5]
Goal: median under 5 s."""

from __future__ import annotations

import argparse
import time
from functools import partial

from operator_common import Cluster, paper_jobs, sandbox, summary, wait


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    from hulk_operator import crd
    from hulk_operator.runner import OperatorThread
    from hulk_planner.datasets import paper_cluster

    box = sandbox(paper_cluster().servers)
    try:
        with box.api_client() as api:
            crd.install(api, peering=False)
            k = Cluster(api)
            times = []
            with OperatorThread(box.kubeconfig):
                for i in range(args.trials):
                    ns = k.namespace()
                    t0 = time.monotonic()
                    k.apply(ns, paper_jobs())
                    wait(partial(k.all_pods_running, ns, 4), 120)
                    times.append(time.monotonic() - t0)
                    print(f"trial {i}: {times[-1]:.2f}s, {k.planned(ns)} pods", flush=True)
                    k.delete_all(ns)
            summary("apply -> all stage pods Running (4 jobs, 47 nodes)", times)
    finally:
        box.down()


if __name__ == "__main__":
    main()
