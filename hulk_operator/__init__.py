"""Hulk's Kubernetes operator: the ``HulkTrainingJob`` custom resource, run with kopf.

Modules, one concern each:

- ``manifests``: pure builders of the stage pods and the headless Service (dicts out).
- ``inventory``: Node objects -> planner ``Server`` s, health, and the latency links.
- ``status``: the job's status fields and metav1-style conditions.
- ``placement``: plans pending jobs together on the servers no job holds (gang semantics).
- ``recovery``: re-plans a running job that lost a server, keeping healthy stages.
- ``errors``: the one place where planner errors become conditions and kopf errors.
- ``metrics``: Prometheus metrics. ``kube``: the few API calls the operator makes.
- ``handlers``: the kopf handlers. ``cli``: ``hulk operator``. ``demo``: ``hulk demo``.
- ``preview``: the live cluster as a planner ``Cluster`` for ``hulk plan --kubeconfig``.
"""

from __future__ import annotations

GROUP = "hulk.dev"
VERSION = "v1alpha1"
PLURAL = "hulktrainingjobs"
KIND = "HulkTrainingJob"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_JOB = "hulk.dev/job"
LABEL_STAGE = "hulk.dev/stage"
LABEL_REPLICA = "hulk.dev/replica"
ANNOTATION_SPEC_HASH = "hulk.dev/spec-hash"
GANG_GATE = "hulk.dev/gang"
GPU = "nvidia.com/gpu"
