"""Hulk's planner: which servers train which job, in which pipeline order.

The public surface:

- ``plan(cluster, jobs, planner="hulk")``: a ``Plan`` (see ``hulk_planner.api``).
- ``CostModel``: scores any plan, independently of how it was found.
- ``paper_cluster()``, ``paper_jobs()``: the Hulk paper's cluster and jobs.
- The data model in ``hulk_planner.model`` and the file formats in ``hulk_planner.io``.

This package never imports kopf or the Kubernetes client.
"""
