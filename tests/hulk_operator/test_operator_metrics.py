"""The operator's Prometheus metrics (prometheus-client), without a cluster."""

from __future__ import annotations

from hulk_operator.inventory import NodeInfo, Taint
from hulk_operator.metrics import PLAN_RESULTS, STAGE_FAILURE_ACTIONS, Metrics
from hulk_operator.recovery import LOSS_REASONS


def test_every_counter_label_is_exported_at_zero_from_the_start() -> None:
    """A series first scraped at 1 has no earlier sample, so increase() misses its first
    increment: the first re-plan since the operator started would not count towards
    HulkJobReplannedOften (charts/alerts-test.yaml tests the rules on series that start at 0)."""
    text = Metrics().text()
    assert 'hulk_stage_failures_total{action="job_failed"} 0.0' in text
    assert 'hulk_replans_total{reason="NotReady"} 0.0' in text
    for action in STAGE_FAILURE_ACTIONS:
        assert f'hulk_stage_failures_total{{action="{action}"}} 0.0' in text
    for reason in (*LOSS_REASONS, "Regrown"):
        assert f'hulk_replans_total{{reason="{reason}"}} 0.0' in text
    for result in PLAN_RESULTS:
        assert f'hulk_plans_total{{result="{result}"}} 0.0' in text
    assert "_created" not in text  # (undocumented series nothing reads: a review)


def test_the_reasons_a_node_is_left_for_are_all_labels_of_the_replans_counter() -> None:
    """``reconcile`` labels a re-plan with the first word of the cause: each must be one of
    the label values exported from the start."""
    taint = Taint("maintenance", "now", "NoExecute")
    for node in (
        NodeInfo("a", ready=False),
        NodeInfo("a", unschedulable=True),
        NodeInfo("a", taints=(taint,)),
    ):
        why = node.sick()
        assert why is not None and why.split()[0] in LOSS_REASONS, why


def test_a_job_is_marked_waiting_while_pending_or_placing_and_no_longer() -> None:
    """hulk_jobs counts jobs; HulkJobPending read it, and fired whenever the queue was never
    empty, whichever jobs were in it (a review). hulk_job_waiting has a series per
    waiting job, gone once it runs or goes, so the alert's ``for`` is one job's wait."""
    m = Metrics()
    m.set_phases([(("ml", "a"), "Pending"), (("ml", "b"), "Placing"), (("ml", "c"), "Running")])
    text = m.text()
    assert 'hulk_job_waiting{job="a",namespace="ml"} 1.0' in text
    assert 'hulk_job_waiting{job="b",namespace="ml"} 1.0' in text
    assert 'job="c"' not in text
    assert 'hulk_jobs{phase="Pending"} 1.0' in text and 'hulk_jobs{phase="Running"} 1.0' in text
    m.set_phases([(("ml", "b"), "Running"), (("ml", "d"), "Pending")])  # a ran, b runs
    text = m.text()
    assert 'job="a"' not in text and 'job="b"' not in text
    assert 'hulk_job_waiting{job="d",namespace="ml"} 1.0' in text


def test_a_jobs_free_speedup_is_a_series_while_faster_and_goes_with_its_plan() -> None:
    """``hulk_job_free_speedup`` lets an alert say a job runs slower than the free servers
    allow; it is measured against the job's plan, so a new plan (a new predicted figure)
    ends it, as no faster plan (1 or less) or no plan does."""
    m = Metrics()
    m.set_predicted("ml", "a", 13.2)
    m.set_free_speedup("ml", "a", 2.03)
    assert 'hulk_job_free_speedup{job="a",namespace="ml"} 2.03' in m.text()
    m.set_predicted("ml", "a", 13.2)  # the same plan's figure again: kept
    assert "hulk_job_free_speedup{" in m.text()
    m.set_predicted("ml", "a", 6.5)  # re-planned
    assert "hulk_job_free_speedup{" not in m.text()
    m.set_free_speedup("ml", "a", 1.4)
    m.set_free_speedup("ml", "a", 0.97)  # not faster: no series
    assert "hulk_job_free_speedup{" not in m.text()
    m.set_free_speedup("ml", "a", 1.4)
    m.set_predicted("ml", "a", None)  # deleted, suspended, unplaced
    assert "hulk_job_free_speedup{" not in m.text()
    m.set_free_speedup("ml", "b", 3.0)
    m.clear_jobs()
    assert "hulk_job_free_speedup{" not in m.text()
    # a restarted operator's first figure of a job is the plan the speedup was measured
    # against: kept (before, the look's figure was dropped at once: a review)
    m.set_free_speedup("ml", "c", 1.5)
    m.set_predicted("ml", "c", 9.0)
    assert 'hulk_job_free_speedup{job="c",namespace="ml"} 1.5' in m.text()


def test_the_acting_replica_and_its_process_are_exported() -> None:
    """Which replica acts (its standby, paused by a peer, says 0), its own memory and CPU
    (before, the operator exported no process_* series, though the chart asks to raise its
    memory limit at scale: a user trial), and planning rounds of minutes in their buckets."""
    import threading

    m = Metrics()
    text = m.text()
    assert "hulk_operator_active 1.0" in text
    assert "process_resident_memory_bytes " in text
    assert 'hulk_planning_seconds_bucket{le="600.0"} 0.0' in text
    m.paused = threading.Event()  # (as lifecycle hands it the peering's Event)
    m.paused.set()
    assert "hulk_operator_active 0.0" in m.text()
