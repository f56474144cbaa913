"""Hulk's Kubernetes operator: the ``HulkTrainingJob`` custom resource, run with kopf.

Modules, one concern each:

- ``manifests``: pure builders of the stage pods and the headless Service (dicts out).
- ``inventory``: Node objects -> planner ``Server`` s, health, and the latency links.
  ``quotas``: what a pod counts toward ResourceQuotas, and how LimitRanges bound it.
  ``entries``: a job as the index keeps it.
- ``snapshot``: what a planning round sees; ``fit``: whether a job can be placed at all,
  and how to say why not.
- ``rounds``: plans pending jobs together on the servers no job holds (gang semantics);
  ``quota_fit``: within their namespaces' quotas; ``decision``: a round's result per job.
- ``placement``: the operator's planning rounds around them (one at a time, reservations,
  refused pods). ``regrow``: a running job's faster plan on servers freed since.
- ``reconcile``: one reconciliation of one job (plan, pods, status), given a ``context``:
  ``plan_step`` (the plan it goes on with: placed, kept or re-planned), ``pod_step`` (its
  pods made to match the plan, and the status fields that follow), ``refused`` (a job
  whose latest spec is refused runs on), ``suspension`` (``spec.suspend``),
  ``disruptions`` (what a job is told of NotReady nodes and cut links);
  ``stage_pods``: its pods made to match its plan, and its phase read from them.
- ``recovery``: re-plans a running job that lost a server, keeping healthy stages;
  ``edits``: what a spec edit means for a running job's plan.
- ``status``: the job's status fields and metav1-style conditions.
- ``errors``: the one place where planner errors become conditions and kopf errors.
- ``metrics``: Prometheus metrics. ``kube``: the few API calls the operator makes.
  ``crd``: installs the CRDs. ``config``: the operator's settings.
- ``indexes``: the kopf indexes that keep the cluster in memory, and the round's
  ``Snapshot`` built from them. ``handlers``: the kopf handlers; ``updates``: the update
  handler (edits of a job's spec).
- ``cli``: ``hulk operator``; ``runner``: the operator in a background thread (tests, the
  demo). ``demo``: ``hulk demo``.
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
