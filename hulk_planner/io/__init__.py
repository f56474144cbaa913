"""Reading and writing the public file formats (``docs/formats.md``).

``ClusterTopology`` and ``HulkTrainingJob`` documents come in (YAML or JSON, one or many per
file); ``PlacementPlan`` goes out. Every problem raises ``InvalidRequest`` whose field is the
path inside the document, e.g. ``spec.nodes[3].gpus``, so the CLI can print one line.

One module per format (``topology``, ``jobs``, ``plans``) over the readers they share
(``documents``); everything is imported from here.
"""

from __future__ import annotations

from hulk_planner.io.documents import (
    API_VERSION,
    load_documents,
)
from hulk_planner.io.jobs import (
    JOB_FIELDS,
    WHOLE_OPERATOR_FIELDS,
    check_operator_fields,
    doc_source,
    expand_lists,
    job_from_dict,
    job_to_dict,
    jobs_from_documents,
    load_jobs,
    other_api,
    placed_documents,
    regrow_settings,
    unknown_job_fields,
    without_other_apis,
)
from hulk_planner.io.plans import (
    PLAN_FORMATS,
    dump_plan,
    load_plan,
    plan_from_dict,
    plan_to_dict,
    seconds,
)
from hulk_planner.io.topology import (
    TOPOLOGY_FIELDS,
    cluster_from_dict,
    cluster_to_dict,
    dump_cluster,
    load_cluster,
    unknown_topology_fields,
)

__all__ = [
    "API_VERSION",
    "JOB_FIELDS",
    "PLAN_FORMATS",
    "TOPOLOGY_FIELDS",
    "WHOLE_OPERATOR_FIELDS",
    "check_operator_fields",
    "cluster_from_dict",
    "cluster_to_dict",
    "doc_source",
    "dump_cluster",
    "dump_plan",
    "expand_lists",
    "job_from_dict",
    "job_to_dict",
    "jobs_from_documents",
    "load_cluster",
    "load_documents",
    "load_jobs",
    "load_plan",
    "other_api",
    "placed_documents",
    "plan_from_dict",
    "plan_to_dict",
    "regrow_settings",
    "seconds",
    "unknown_job_fields",
    "unknown_topology_fields",
    "without_other_apis",
]
