"""The kopf index functions, called as kopf calls them (kopf itself is not run here)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf
import pytest

from hulk_operator import GPU, LABEL_JOB, indexes

QUOTA = {"spec": {"hard": {"services": "10"}}}  # counts no pod
LIMITS: dict[str, Any] = {"spec": {"limits": [{"type": "PersistentVolumeClaim"}]}}

# each index function, and an object it does not index (or no longer does: a pod that
# finished, a quota edited to count no pod, a PriorityClass no longer the default)
UNINDEXED: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "hulk_pods": (
        indexes.hulk_pods,
        {"namespace": "ml", "name": "p", "meta": {"labels": {LABEL_JOB: "j"}}},
    ),
    "hulk_other_pods": (
        indexes.hulk_other_pods,
        {
            "meta": {},
            "spec": {"nodeName": "n", "containers": [{"resources": {"requests": {GPU: "4"}}}]},
            "status": {"phase": "Succeeded"},
        },
    ),
    "hulk_quotas": (indexes.hulk_quotas, {"namespace": "ml", "name": "q", "body": QUOTA}),
    "hulk_quotas, scoped": (  # (an unscoped quota made scoped: hulk_scoped_quotas has it)
        indexes.hulk_quotas,
        {
            "namespace": "ml",
            "name": "q",
            "body": {"spec": {"hard": {"pods": "2"}, "scopes": ["BestEffort"]}},
        },
    ),
    "hulk_scoped_quotas": (
        indexes.hulk_scoped_quotas,
        {"namespace": "ml", "name": "q", "body": {"spec": {"hard": {"pods": "2"}}}},
    ),
    "hulk_default_priority": (
        indexes.hulk_default_priority,
        {"name": "hi", "body": {"value": 10, "globalDefault": False}},
    ),
    "hulk_quota_specs": (indexes.hulk_quota_specs, {"namespace": None, "name": "q", "spec": {}}),
    "hulk_limit_specs": (indexes.hulk_limit_specs, {"namespace": None, "name": "l", "spec": {}}),
    "hulk_gpu_limits": (indexes.hulk_gpu_limits, {"namespace": "ml", "name": "l", "body": LIMITS}),
    "hulk_gpu_minimums": (
        indexes.hulk_gpu_minimums,
        {"namespace": "ml", "name": "l", "body": LIMITS},
    ),
    "hulk_limit_defaults": (
        indexes.hulk_limit_defaults,
        {"namespace": "ml", "name": "l", "body": LIMITS},
    ),
    "hulk_limit_bounds": (indexes.hulk_limit_bounds, {"namespace": "ml", "body": LIMITS}),
    "hulk_service_quotas": (  # a quota on services edited to count only pods
        indexes.hulk_service_quotas,
        {"namespace": "ml", "name": "q", "body": {"spec": {"hard": {"pods": "2"}}}},
    ),
    "hulk_services": (  # a Service labelled as a job's that no job owns
        indexes.hulk_services,
        {"namespace": "ml", "meta": {"labels": {LABEL_JOB: "j"}}},
    ),
}


@pytest.mark.parametrize("name", sorted(UNINDEXED))
def test_an_index_function_returns_an_empty_dict_for_an_object_it_does_not_index(
    name: str,
) -> None:
    """Not None: for None, kopf keeps the object's last value in the index. Before, a
    finished pod's GPUs stayed counted as held, a quota edited to count no pod kept its
    old figures, and a PriorityClass no longer the default stayed the default."""
    fn, kwargs = UNINDEXED[name]
    base = {"namespace": None, "name": "x", "body": {}, "meta": {}, "spec": {}, "status": {}}
    assert fn(**{**base, **kwargs}) == {}


def test_every_index_function_that_may_skip_an_object_is_checked() -> None:
    registered = {h.fn.__name__ for h in kopf.get_default_registry()._indexing.get_all_handlers()}
    always = {"hulk_nodes", "hulk_jobs"}  # they index every object they see
    assert registered - always == {fn.__name__ for fn, _ in UNINDEXED.values()}


def test_the_default_priorityclass_is_the_lowest_valued_global_default() -> None:
    """As the Priority admission plugin picks it when several are marked (a race)."""
    low = indexes.hulk_default_priority(name="b", body={"value": 10, "globalDefault": True})
    high = indexes.hulk_default_priority(name="a", body={"value": 1000, "globalDefault": True})
    assert min([low["default"], high["default"]])[1] == "b"


def test_the_services_a_quota_leaves_and_the_jobs_that_have_theirs() -> None:
    """The tighter of ``services`` and ``count/services``; a job's Service is one its job
    owns (the label alone is not enough)."""
    body = {
        "spec": {"hard": {"services": "10", "count/services": "4", "pods": "9"}},
        "status": {"used": {"services": "3", "count/services": "3"}},
    }
    assert indexes.hulk_service_quotas(namespace="ml", name="q", body=body) == {
        "ml": ("q", "count/services", 1.0)
    }
    owned = {
        "labels": {LABEL_JOB: "gpt"},
        "ownerReferences": [{"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob",
                             "name": "gpt", "uid": "u", "controller": True}],
    }  # fmt: skip
    assert indexes.hulk_services(namespace="ml", meta=owned) == {("ml", "gpt"): True}


def test_a_limitranges_gpu_minimum_is_its_largest_min_for_a_container_or_a_pod() -> None:
    body = {
        "spec": {
            "limits": [
                {"type": "Container", "min": {GPU: "2"}, "max": {GPU: "8"}},
                {"type": "Pod", "min": {GPU: "4"}},
                {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}},
            ]
        }
    }
    assert indexes.hulk_gpu_minimums(namespace="ml", name="l", body=body) == {"ml": ("l", 4.0)}
    assert indexes.hulk_gpu_limits(namespace="ml", name="l", body=body) == {"ml": ("l", 8.0)}


def test_a_gpu_node_left_out_for_its_labels_is_logged_once_a_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, a GPU node whose labels Hulk cannot read left planning with no word in the
    log (a user trial); a CPU node is no news."""
    from test_operator_inventory import node

    memo, log = kopf.Memo(), logging.getLogger("test-nodes")
    good, bad = node(), node()
    bad["metadata"]["labels"]["nvidia.com/gpu.memory"] = "lots"
    cpu = node(status__allocatable={"cpu": "8"})
    with caplog.at_level(logging.INFO, logger="test-nodes"):
        for body in (bad, bad, good, good, cpu, bad):
            (info,) = indexes.hulk_nodes(name="bj-0", body=body, memo=memo, logger=log).values()
            assert (info.server is None) == (body is not good)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    warning = (
        "WARNING",
        "node bj-0 is not offered to jobs: label nvidia.com/gpu.memory='lots' is not a finite "
        "number of MiB above zero",
    )
    assert said == [warning, ("INFO", "node bj-0 is offered to jobs again"), warning]


def test_the_jobs_dict_of_nodes_is_built_again_only_when_a_node_changed() -> None:
    """Every job's tick reads one dict of the nodes, built again after ``node_event``
    (a node added or changed) or when the index lost a node; ``disrupted`` with it. Each
    tick built it afresh from every node before (the most of the CPU at rest)."""
    import asyncio
    import copy
    from dataclasses import replace

    from placement_helpers import nodes

    index = {n: [info] for n, info in list(nodes().items())[:4]}
    names = list(index)
    memo = kopf.Memo(node_view=indexes.NodeView())
    view = memo.node_view
    first = view.nodes(index)
    assert first == {n: s[0] for n, s in index.items()}
    assert view.nodes(index) is first and view.disrupted(index, 0.5) is None
    for n in names[:3]:
        index[n] = [replace(index[n][0], ready=False)]
    assert view.nodes(index) is first  # (no event yet: kopf calls the handler right after)
    assert view.disrupted(index, 0.5) is None
    asyncio.run(indexes.node_event(memo=copy.copy(memo)))  # (a job's copy of the memo)
    again = view.nodes(index)
    assert again is not first and not again[names[0]].ready
    assert view.disrupted(index, 0.5) == "3 of the 4 GPU nodes are NotReady"
    assert view.disrupted(index, 0.9) is None  # (by threshold)
    del index[names[0]]  # kopf discards a deleted node before the handler runs
    assert names[0] not in view.nodes(index)
    assert view.disrupted(index, 0.5) is None  # (more than two must be down)


def test_a_stage_pod_keeps_when_it_was_bound() -> None:
    from hulk_operator.indexes import hulk_pods

    owner = {"kind": "HulkTrainingJob", "apiVersion": "hulk.dev/v1alpha1", "name": "j"}
    meta = {"name": "j-0-0", "labels": {"hulk.dev/job": "j"}, "ownerReferences": [owner]}
    scheduled = {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": "2026-11-24T10:00:00Z"}  # fmt: skip
    bound = hulk_pods(namespace="ns", name="j-0-0", meta=meta, spec={"nodeName": "a"},
                      status={"conditions": [scheduled]})  # fmt: skip
    assert bound[("ns", "j")].bound_at == 1795514400.0
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "a"}}  # gated: not bound yet
    gated = hulk_pods(namespace="ns", name="j-0-0", meta=meta, spec=pinned, status={})
    assert gated[("ns", "j")].bound_at is None and gated[("ns", "j")].node == "a"


def test_a_terminating_stage_pod_counts_toward_quotas_until_its_grace_runs_out() -> None:
    """As Kubernetes' quota evaluator: a Terminating pod counts until its deletionTimestamp
    (the deletion's time plus the grace) plus the grace again; before, one stuck
    Terminating on a node that stopped answering was credited to its job for ever, while
    its quota's ``used`` had dropped (a review)."""
    from hulk_operator.indexes import hulk_pods

    owner = {"kind": "HulkTrainingJob", "apiVersion": "hulk.dev/v1alpha1", "name": "j"}
    meta = {"name": "j-0-0", "labels": {"hulk.dev/job": "j"}, "ownerReferences": [owner]}
    running = {"phase": "Running"}
    (live,) = hulk_pods(namespace="ns", name="j-0-0", meta=meta, spec={}, status=running).values()
    assert live.counted_until is None and live.counts(1e12)
    going = {**meta, "deletionTimestamp": "2026-11-24T10:00:30Z", "deletionGracePeriodSeconds": 30}
    (pod,) = hulk_pods(namespace="ns", name="j-0-0", meta=going, spec={}, status=running).values()
    at = 1795514430.0  # 2026-11-24T10:00:30Z
    assert pod.deleting and pod.counted_until == at + 30
    assert pod.counts(at + 29) and pod.counts(at + 30) and not pod.counts(at + 31)
    (done,) = hulk_pods(namespace="ns", name="j-0-0", meta=meta, spec={},
                        status={"phase": "Succeeded"}).values()  # fmt: skip
    assert not done.counts(0)


def test_a_costly_latency_listing_is_made_less_often() -> None:
    """Reading 1,000 probed nodes' NodeLatency objects took 6.8 s of a core
    (bench/latency_listing.py): every 10 s, most of the operator's time. A listing may now
    take at most 5% of the time between two."""
    assert indexes.listing_interval(0.01) == indexes.LATENCY_CACHE_S
    assert indexes.listing_interval(0.5) == indexes.LATENCY_CACHE_S
    assert indexes.listing_interval(6.8) == pytest.approx(136.0)
    assert 6.8 / indexes.listing_interval(6.8) <= indexes.LATENCY_LISTING_SHARE + 1e-12
    # never past half the reports' freshness: a listing kept longer would hold stale ones
    assert indexes.listing_interval(60.0, max_age_s=600.0) == 300.0


def test_a_probe_writing_less_often_than_reports_stay_fresh_is_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Within the probes' write budget a large cluster's agents write every few minutes
    (``status.publishIntervalSeconds``); where that, their probe interval and the
    operator's own listing interval pass ``--latency-max-age-s``, links fall back to
    estimates between writes: the log says which setting to change, once while it holds."""

    def obj(name: str, every: float | None) -> dict[str, Any]:
        status = {"intervalSeconds": 10.0}
        if every is not None:
            status["publishIntervalSeconds"] = every
        return {"metadata": {"name": name}, "status": status}

    cache = indexes.Listings(latency_every=136.0)
    with caplog.at_level(logging.WARNING, logger="hulk_operator"):
        indexes._warn_slow_publisher(cache, [obj("a", 10.0), obj("b", None)], 600.0)
        indexes._warn_slow_publisher(cache, [obj("a", 150.0), obj("b", 200.0)], 600.0)
        assert not caplog.records  # 200 + 10 + 136 s: within 600 s
        indexes._warn_slow_publisher(cache, [obj("a", 150.0), obj("b", 460.0)], 600.0)
        # the slowest node changes between listings: still the one warning
        indexes._warn_slow_publisher(cache, [obj("a", 470.0), obj("b", 460.0)], 600.0)
        (record,) = caplog.records
        indexes._warn_slow_publisher(cache, [obj("a", 150.0)], 600.0)  # it no longer holds
        indexes._warn_slow_publisher(cache, [obj("a", 470.0)], 600.0)  # ...and again
    assert len(caplog.records) == 2
    text = record.getMessage()
    assert "probe on b publishes measurements up to 470 s old" in text
    assert "--latency-max-age-s (600 s)" in text and "probe.maxPublishInterval" in text


def test_probes_that_stopped_publishing_are_warned_of_once_and_their_return_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every NodeLatency status older than ``--latency-max-age-s``: every pair's latency is
    an estimate, and nothing said so (a user trial: a re-plan put a stage on a 740 ms pair
    taken as 100 ms, the log silent)."""
    from datetime import UTC, datetime, timedelta

    def obj(name: str, age_s: float | None) -> dict[str, Any]:
        stamp = datetime.now(UTC) - timedelta(seconds=age_s or 0)
        status = {} if age_s is None else {"lastPublished": stamp.isoformat()}
        return {"metadata": {"name": name}, "status": status}

    from hulk_operator.latencies import read_latencies

    cache = indexes.Listings()

    def warn(items: list[dict[str, Any]]) -> None:  # as ``latencies`` calls it
        stale = read_latencies(items, 600.0).probes_stale
        indexes._warn_stale_probes(cache, items, 600.0, stale)

    with caplog.at_level(logging.INFO, logger="hulk_operator"):
        warn([])  # no probes: nothing to tell
        warn([obj("a", 700.0), obj("b", 30.0)])
        assert not caplog.records  # b's is fresh
        warn([obj("a", 900.0), obj("b", 700.0)])
        warn([obj("a", 910.0), obj("b", 710.0)])
        (record,) = caplog.records
        warn([obj("a", 900.0), obj("b", 5.0)])
        # the objects deleted after a warning: the probes are gone, not back (a review)
        warn([obj("a", 900.0)])
        warn([])
        assert len(caplog.records) == 3
    assert record.levelname == "WARNING"
    text = record.getMessage()
    assert "no NodeLatency status was published in the last 600 s" in text, text
    assert "the newest, b's, is 700 s old" in text and "are the probes running?" in text
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
    assert "published again" in caplog.records[1].getMessage()
    # a report from a clock ahead is not fresh either (``links.fresh``), nor one with no time
    from hulk_operator.latencies import stale_probes

    ahead = obj("c", -3600.0)  # (an hour in the future)
    said = stale_probes([ahead, obj("d", None)], 600.0)
    assert said is not None and "none has a lastPublished time that is not in the future" in said
    said = stale_probes([ahead, obj("a", 900.0)], 600.0)
    assert said is not None and "the newest, a's, is 900 s old" in said, said


def test_the_shared_latencies_are_read_with_every_servers_region() -> None:
    """What plans, edit checks and cut-link warnings read (``latencies_now``) has the
    regions' medians and inferred partitions (a review: edit checks read the raw reports
    and took an unprobed node for a bridge across a partition the planner saw)."""
    import time

    import kopf

    from hulk_operator.inventory import NodeInfo
    from hulk_operator.latencies import Latencies
    from hulk_planner.model import Server

    def node(name: str, region: str) -> NodeInfo:
        return NodeInfo(name, server=Server(name, region, 8, 80.0, 312.0))

    nodes = {n: node(n, r) for n, r in [("a1", "A"), ("a2", "A"), ("b1", "B"), ("b3", "B")]}
    pair = frozenset
    raw = Latencies(
        {pair(("a1", "a2")): 2.0},
        frozenset({pair(("a1", "b1")), pair(("a2", "b1"))}),
    )
    view = indexes.NodeView()
    view.built = (0, nodes, {})
    listings = indexes.Listings(latency=(time.monotonic(), raw), latency_every=1e9)
    memo = kopf.Memo(listings=listings, node_view=view)
    seen = indexes.latencies_now(memo)
    assert seen.inferred_unreachable == {pair(("a1", "b3")), pair(("a2", "b3"))}
    assert seen.region_medians == {pair(("A",)): 2.0}
    assert indexes.latencies_now(kopf.Memo(listings=listings)) is raw  # (no nodes seen yet)
