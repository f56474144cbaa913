"""A live cluster as the planner sees it, for ``hulk plan --kubeconfig`` (read-only).

- :func:`cluster_from_kubeconfig`: Nodes that can take stage pods now (see
  ``inventory``; with ``free_only``, as the operator offers them: not held by a job's plan,
  less the GPUs that other pods request), fresh NodeLatency measurements as links, and
  region-level fallback latencies for every other pair (``same_region_ms`` /
  ``cross_region_ms``) except those freshly reported unreachable.
- :func:`jobs_from_kubeconfig`: the HulkTrainingJobs that have no plan yet (pending), as
  planner ``Job`` s. Jobs that already run keep their servers: ``hulk plan`` leaves those
  out of the cluster (``free_only=True``).
"""

from __future__ import annotations

from dataclasses import replace

from hulk_operator import GROUP, LABEL_JOB, PLURAL, VERSION, kube
from hulk_operator import status as st
from hulk_operator.inventory import build_cluster, gpu_requests, node_info, read_latencies
from hulk_planner.errors import InvalidRequest, NoFeasiblePlan
from hulk_planner.io import job_from_dict
from hulk_planner.model import Cluster, Job

DEFAULT_MAX_AGE_S = 600.0


def cluster_from_kubeconfig(
    path: str,
    *,
    same_region_ms: float = 1.0,
    cross_region_ms: float = 100.0,
    max_age_s: float = DEFAULT_MAX_AGE_S,
    free_only: bool = False,
) -> Cluster:
    """The cluster's usable GPU servers and links; raises ``NoFeasiblePlan`` if none."""
    with kube.make_client(path) as api:
        nodes = [node_info(n) for n in kube.list_nodes(api)]
        latencies = read_latencies(kube.list_objects(api, GROUP, VERSION, "nodelatencies"),
                                   max_age_s)  # fmt: skip
        held: set[str] = set()
        used: dict[str, int] = {}
        if free_only:
            for obj in kube.list_objects(api, GROUP, VERSION, PLURAL):
                if (obj.get("status") or {}).get("phase") == st.SUCCEEDED:
                    continue  # a finished job's plan stays in its status; its servers are free
                plan = st.job_plan_from_status(obj["metadata"]["name"], obj.get("status"))
                held |= set(plan.nodes) if plan else set()
            for pod in kube.list_running_pods(api):
                node = (pod.get("spec") or {}).get("nodeName")
                if node and LABEL_JOB not in (pod["metadata"].get("labels") or {}):
                    used[node] = used.get(node, 0) + gpu_requests(pod["spec"])
    servers = []
    for i in nodes:
        if i.server is None or not i.offers() or i.name in held:
            continue
        left = i.server.gpus - used.get(i.name, 0)  # other pods' GPUs are not offered
        if left > 0:
            servers.append(replace(i.server, gpus=left) if left < i.server.gpus else i.server)
    if not servers:
        skipped = "; ".join(f"{i.name}: {i.problem or i.sick() or 'held'}" for i in nodes[:5])
        raise NoFeasiblePlan(f"the cluster has no usable GPU server ({skipped or 'no nodes'})")
    return build_cluster(servers, latencies, same_region_ms=same_region_ms,
                         cross_region_ms=cross_region_ms, name="kubernetes")  # fmt: skip


def jobs_from_kubeconfig(path: str, namespace: str | None = None) -> list[Job]:
    """Pending HulkTrainingJobs (no plan in their status, not failed) as planner jobs."""
    with kube.make_client(path) as api:
        items = kube.list_objects(api, GROUP, VERSION, PLURAL, namespace)
    jobs = []
    for obj in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""),
                                            o["metadata"]["name"])):  # fmt: skip
        status = obj.get("status") or {}
        if status.get("plan") or status.get("phase") in (st.SUCCEEDED, st.PHASE_FAILED):
            continue
        try:
            jobs.append(job_from_dict(obj, f"{obj['metadata'].get('namespace')}/"
                                      f"{obj['metadata']['name']}"))  # fmt: skip
        except InvalidRequest:
            continue
    return jobs
