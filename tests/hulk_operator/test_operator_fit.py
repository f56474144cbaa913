"""The checks behind refused edits (``hulk_operator.fit``), without a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from placement_helpers import applied, entry, nodes, snap

from hulk_operator import GPU
from hulk_operator.fit import (
    no_room_now,
    reachable_groups,
    requests_fit_nowhere,
    too_big_for,
    unmatched,
)
from hulk_operator.inventory import Resources
from hulk_operator.latencies import Latencies
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.cost import (
    BYTES_PER_PARAM,
    MEMORY_USABLE,
    memory_need_bytes,
    server_capacity,
    stage_memory,
)
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.errors import NoFeasiblePlan
from hulk_planner.model import Job, ModelSpec


def test_a_job_no_allowed_servers_could_hold_even_all_free_is_told_so() -> None:
    """What an edit of a running job is refused for (its pods run on): no set of the
    servers its constraints allow holds it, whatever other jobs hold."""
    cluster = paper_cluster()
    usable = sum(s.memory_bytes for s in cluster.servers) * MEMORY_USABLE
    huge = entry(Job("huge", ModelSpec(10**13, 96, 12288, 2048), 256, 1))
    why = too_big_for(huge, nodes())
    largest = max(server_capacity(s) for s in cluster.servers)
    one = stage_memory(huge.job, 1, 1)  # type: ignore[arg-type]
    assert why == (  # (a layer no server holds either: more servers alone would not do)
        f"fits nowhere: needs {memory_need_bytes(huge.job) / 2**30:.0f} GiB of GPU memory, "  # type: ignore[arg-type]
        f"the whole cluster has {usable / 2**30:.0f} GiB usable, and one layer needs "
        f"{one / 2**30:.0f} GiB of GPU memory (its parameters, with one micro-batch's "
        f"activations) and the largest server has {largest / 2**30:.0f} GiB usable: more "
        "servers like these would not hold it (use a smaller model, or more layers, "
        "spec.model.layers, on servers with more GPU memory)"
    )
    # in layers the largest server holds: more servers would
    thin = entry(Job("thin", ModelSpec(10**13, 4096, 12288, 2048), 256, 1))
    assert too_big_for(thin, nodes()) == (
        f"fits nowhere: needs {memory_need_bytes(thin.job) / 2**30:.0f} GiB of GPU memory, "  # type: ignore[arg-type]
        f"the whole cluster has {usable / 2**30:.0f} GiB usable (add servers, or use a "
        "smaller model (microBatchSize is 1 already))"
    )  # (before, "or microBatchSize" where it was 1: a user trial)
    wider = entry(Job("wider", ModelSpec(10**13, 4096, 12288, 2048), 256, 4))
    assert str(too_big_for(wider, nodes())).endswith(
        "(add servers, or use a smaller model or microBatchSize)"
    )
    # a job the cluster could hold, every server held by others or cordoned: not refused
    opt = paper_jobs()[0]
    cordoned = {n: replace(i, unschedulable=True) for n, i in nodes().items()}
    assert too_big_for(entry(opt), cordoned) is None
    # limited to one region, the same job does not fit: the servers it may use are named
    paris = [n for n, i in nodes().items() if i.server and i.server.region == "paris"]
    why = too_big_for(entry(opt, allowed_regions=("paris",)), nodes())
    assert why is not None and f"the {len(paris)} server(s) it may use have " in why, why
    assert why.endswith(
        "GiB usable (allow more servers (spec.allowedRegions ['paris']), add servers, or use a "
        "smaller model (microBatchSize is 1 already))"
    ), why
    # a GPU node it matches whose labels are unreadable: named (before, "the 0 server(s) it
    # may use have 0 GiB" for a job matching that node alone; a user trial)
    bad = "label nvidia.com/gpu.memory='lots' is not a finite number of MiB above zero"
    broken = dict(nodes())
    broken[paris[0]] = replace(broken[paris[0]], server=None, problem=bad)
    why = too_big_for(entry(opt, allowed_regions=("paris",)), broken)
    assert why is not None and why.endswith(f"; not counted, 1 matching node(s) with "
                                            f"{paris[0]}: {bad}"), why  # fmt: skip
    alone = entry(opt, node_selector=(("kubernetes.io/hostname", paris[0]),))
    assert too_big_for(alone, broken) is None  # the snapshot says why it takes no stage:
    d = plan_pending(Snapshot(broken, Latencies(), {alone.key: alone}, {}), plan)[alone.key]
    assert d.reason == f"the 1 node(s) matching the job take no new stage: 1 not offered ({bad})"
    invalid = replace(entry(opt, allowed_regions=("paris",)), job=None, error="bad spec")
    assert too_big_for(invalid, nodes()) is None  # an invalid spec is refused for that


def test_reachable_groups_are_split_by_the_unreachable_pairs_only() -> None:
    """Four servers: every pair is linked but those reported unreachable (their fallback)."""
    names = ["a", "b", "c", "d"]
    assert reachable_groups(names, []) == [names]
    one = [frozenset(p) for p in ("ab", "cd")]  # a-c-b, d-a: still one group
    assert reachable_groups(names, one) == [names]
    two = [frozenset(p) for p in ("ac", "ad", "bc", "bd")]
    assert reachable_groups(names, two) == [["a", "b"], ["c", "d"]]
    alone = [frozenset(("d", x)) for x in "abc"] + [frozenset(("e", "f"))]  # (e, f: not ours)
    assert reachable_groups(names, alone) == [["a", "b", "c"], ["d"]]
    assert reachable_groups([], two) == []


def test_a_job_only_servers_that_cannot_reach_each_other_could_hold_is_told_so() -> None:
    """Regions whose servers have no link to one another hold a job in all, but no group of
    them that can reach each other does: an edit to them is refused, as a too-big one (it
    was accepted, and the plan failing removed the running job's pods; a user trial)."""
    cluster = paper_cluster()
    linked = {frozenset((link.a, link.b)) for link in cluster.links}
    names = [s.name for s in cluster.servers]
    cut = frozenset(frozenset((a, b)) for i, a in enumerate(names) for b in names[i + 1 :]) - linked
    t5 = entry(paper_jobs()[1], allowed_regions=("london", "new-delhi"))
    assert too_big_for(t5, nodes()) is None  # their memory in all would hold it
    why = too_big_for(t5, nodes(), cut)
    assert why is not None and why.startswith("fits nowhere: needs "), why
    told = (
        "the 4 server(s) it may use have 4 groups that cannot reach each other (NodeLatency "
        "reports their pairs unreachable), and the largest, 1 server(s), has 130 GiB usable "
    )  # (the figure docs/operator.md quotes)
    assert told in why, why
    assert why.endswith("(allow more servers (spec.allowedRegions ['london', 'new-delhi']), "
                        "add servers, or use a smaller model or microBatchSize)"), why  # fmt: skip
    # the round says the same of a pending job (before: the planner's "no pipeline ... fits")
    d = plan_pending(Snapshot(nodes(), Latencies(unreachable=cut), {t5.key: t5}, {}), plan)
    assert d[t5.key].job_plan is None and d[t5.key].reason == why
    assert too_big_for(entry(paper_jobs()[1]), nodes(), cut) is None  # the whole cluster can


def test_a_job_left_unplaced_while_no_probe_publishes_is_told_so() -> None:
    """Before, only the operator's log said no NodeLatency status was fresh; a job that
    waited on pairs only old reports cut said "no pipeline ... fits it" and nothing more (an
    operator trial). The same words every round (no age): the condition stands."""
    from datetime import UTC, datetime, timedelta

    from hulk_operator.latencies import read_latencies

    cluster = paper_cluster()
    linked = {frozenset((link.a, link.b)) for link in cluster.links}
    names = [s.name for s in cluster.servers]
    cut = frozenset(frozenset((a, b)) for i, a in enumerate(names) for b in names[i + 1 :]) - linked
    t5 = entry(paper_jobs()[1], allowed_regions=("london", "new-delhi"))
    old = (datetime.now(UTC) - timedelta(seconds=900)).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = {"metadata": {"name": names[0]}, "status": {"lastPublished": old, "peers": []}}
    stale = replace(Latencies(unreachable=cut), probes_stale=True)
    assert read_latencies([report], 600.0).probes_stale  # (900 s old, 600 s allowed)
    assert not read_latencies([report], 1200.0).probes_stale
    d = plan_pending(Snapshot(nodes(), stale, {t5.key: t5}, {}), plan)[t5.key]
    assert d.job_plan is None
    assert d.reason.endswith(
        "; no NodeLatency status is fresh (--latency-max-age-s): every link's latency is an "
        "estimate; are the probes running? (kubectl get daemonset -A -l "
        "app.kubernetes.io/component=probe)"
    ), d.reason
    fresh = plan_pending(Snapshot(nodes(), Latencies(unreachable=cut), {t5.key: t5}, {}), plan)
    assert "fresh" not in fresh[t5.key].reason
    kept = replace(stale, stale_unreachable=frozenset(list(cut)[:3]))
    d = plan_pending(Snapshot(nodes(), kept, {t5.key: t5}, {}), plan)[t5.key]
    assert "estimate, and 3 pair(s) last reported unreachable stay cut; are the" in d.reason


def test_stage_pod_requests_no_node_could_hold_are_told_so() -> None:
    """What an edit of a running job is refused for: ``cpu: 5000`` for ``5``."""
    bert = paper_jobs()[3]
    cpus = {n: i.allocatable.cpu for n, i in nodes().items()}
    assert requests_fit_nowhere(entry(bert), nodes()) is None  # nothing requested
    huge = entry(bert, requests=Resources(cpu=5000))
    assert requests_fit_nowhere(huge, nodes()) == (
        "spec.template: the stage pods' requests (cpu 5000) fit on none of the 47 node(s) "
        "matching the job, even with nothing else on them; lower the template's requests"
    )
    typo = entry(bert, requests=Resources(extra=(("nvidia.com/gpus", 1.0),)))
    assert requests_fit_nowhere(typo, nodes()) == (
        "spec.template: none of the 47 node(s) matching the job has nvidia.com/gpus, which "
        "the stage pods request: check the resource's name, or advertise it on the nodes"
    )
    most = max(cpus.values())
    assert requests_fit_nowhere(entry(bert, requests=Resources(cpu=most)), nodes()) is None
    # an init container asking more GPUs than any matching node has (an edit refused so)
    most_gpus = max(i.server.gpus for i in nodes().values() if i.server)
    warm = entry(bert, init_gpus=("warm", most_gpus + 1))
    assert requests_fit_nowhere(warm, nodes()) == (
        f"spec.template: init container warm asks {most_gpus + 1} nvidia.com/gpu, more than any "
        f"of the {len(nodes())} node(s) matching the job has (it holds them before the trainer "
        "starts); lower its ask"
    )
    assert requests_fit_nowhere(entry(bert, init_gpus=("warm", most_gpus)), nodes()) is None
    by_region: dict[str, list[float]] = {}
    for n, i in nodes().items():
        by_region.setdefault(i.server.region, []).append(cpus[n])  # type: ignore[union-attr]
    region = next(r for r, c in sorted(by_region.items()) if max(c) < most)
    limited = entry(bert, requests=Resources(cpu=most), allowed_regions=(region,))
    assert requests_fit_nowhere(limited, nodes()) == (
        f"spec.template: the stage pods' requests (cpu {most:g}) fit on none of the "
        f"{len(by_region[region])} node(s) matching the job, even with nothing else on them; "
        "lower the template's requests"
    )


def test_servers_too_small_for_the_stage_pods_requests_are_not_counted() -> None:
    """An edit of a running job's template to ``cpu: 150`` (for 15) left the few servers
    with 150 CPUs, which could not hold its model: the edit was taken, the plan failed, and
    the running job's pods were removed (a user trial). It is refused now, naming the
    requests as what limits the servers."""
    opt = paper_jobs()[0]
    cpus = sorted({i.allocatable.cpu for i in nodes().values()})
    assert too_big_for(entry(opt), nodes()) is None  # on all servers, it fits
    most = cpus[-1]
    few = [n for n, i in nodes().items() if i.allocatable.cpu >= most]
    why = too_big_for(entry(opt, requests=Resources(cpu=most)), nodes())
    assert why is not None and f"the {len(few)} server(s) it may use have " in why, why
    assert why.endswith(
        f"(lower the template's requests, allow more servers (the stage pods' requests (cpu "
        f"{most:g})), add servers, or use a smaller model (microBatchSize is 1 already))"
    ), why
    # requests every server holds limit nothing; those none holds are requests_fit_nowhere's
    assert too_big_for(entry(opt, requests=Resources(cpu=cpus[0])), nodes()) is None
    assert too_big_for(entry(opt, requests=Resources(cpu=10 * most)), nodes()) is None


def test_a_job_one_of_whose_layers_no_server_holds_is_told_so() -> None:
    """Before, its reason blamed other jobs holding servers (a user trial): it waited
    for ever, where one layer of it (its parameters, one micro-batch's activations) fits
    on no server however many are free."""
    one_layer = Job("one-layer", ModelSpec(200 * 10**9, 1, 8192, 2048), 8, 1)
    assert memory_need_bytes(one_layer) < sum(
        server_capacity(s) for s in paper_cluster().servers
    )  # the cluster holds it in all
    room = max(server_capacity(s) for s in paper_cluster().servers)
    why = too_big_for(entry(one_layer), nodes())
    assert why == (
        f"fits nowhere: one layer needs {stage_memory(one_layer, 1, 1) / 2**30:.0f} GiB of GPU "
        f"memory (its parameters, with one micro-batch's activations) and the largest server "
        f"has {room / 2**30:.0f} GiB usable; waiting does not help (split the model into more "
        "layers, spec.model.layers; or lower sequenceLength; or add servers with more GPU "
        "memory)"
    )  # (microBatchSize is 1: not named)
    four = replace(one_layer, micro_batch_size=4)
    assert "; or lower microBatchSize or sequenceLength; " in str(too_big_for(entry(four), nodes()))
    # split into 16 layers, it fits (the same parameters)
    split = replace(one_layer, model=replace(one_layer.model, layers=16))
    assert too_big_for(entry(split), nodes()) is None
    # one layer a fifth larger than the largest server: too big for the region it may use
    mid = Job("mid", ModelSpec(int(1.2 * room / BYTES_PER_PARAM), 1, 1024, 128), 8, 1)
    why = too_big_for(entry(mid, allowed_regions=("paris",)), nodes())
    assert why is not None and "and the largest server it may use has " in why, why
    # planned on servers too small for one layer (the large ones held): the planner says so
    whole = paper_cluster()
    cluster = whole.without(s.name for s in whole.servers if server_capacity(s) >= room)
    small = cluster.servers
    with pytest.raises(NoFeasiblePlan) as told:
        plan(cluster, [mid], "search", max_iterations=50)
    (u,) = told.value.unplaced
    assert u.reason.startswith("one layer needs "), u.reason
    assert f"the largest of the {len(small)} server(s) planned on has " in u.reason, u.reason


def test_an_allowed_region_no_node_has_is_told_with_the_plan_or_the_reason() -> None:
    """Before, ``[tokyo, narnia]`` planned on Tokyo without a word of ``narnia`` on a live
    cluster (a user trial); ``hulk plan`` on a topology file refuses it."""
    from hulk_operator.fit import unknown_regions

    bert = paper_jobs()[3]
    typo = entry(bert, allowed_regions=("Tokyo", "narnia", "Pariss"))
    why = unknown_regions(typo, nodes())
    assert why is not None and why.startswith(
        "spec.allowedRegions 'narnia', 'Pariss' match no node's region yet (regions: beijing, "
        "berlin, "
    ), why
    assert why.endswith(", tokyo); did you mean paris for 'Pariss'?: planned on the others"), why
    # every entry a typo: the job is refused, with the same hint (before: none)
    refused = unmatched(entry(bert, allowed_regions=("Pariss",)), nodes())
    assert refused is not None and refused.endswith(", tokyo); did you mean paris for 'Pariss'?")
    assert unknown_regions(entry(bert, allowed_regions=("tokyo", "New Delhi")), nodes()) is None
    assert unknown_regions(entry(bert, allowed_regions=("narnia",)), nodes()) is None  # unmatched
    assert unknown_regions(entry(bert), nodes()) is None
    # said with the plan, or with why there is none
    d = plan_pending(Snapshot(nodes(), Latencies(), {typo.key: typo}, {}), plan)[typo.key]
    assert d.job_plan is not None and d.note == why, d
    held = {
        n: ("other", "job") for n, i in nodes().items() if i.server and i.server.region == "tokyo"
    }
    d = plan_pending(Snapshot(nodes(), Latencies(), {typo.key: typo}, held), plan)[typo.key]
    assert d.job_plan is None and d.reason.endswith(f"; {why}"), d.reason


def test_an_edit_the_servers_free_now_cannot_hold_waits_for_room() -> None:
    """An edit of a running job that the cluster could hold, but not on its own servers
    plus the ones no other job holds: refused for now (its pods run on, as a Deployment's
    old pods do while its new ones cannot be placed), and allowed once the room is there.
    Before, it was taken: the running job's pods were removed and it waited Pending."""
    cluster = nodes()
    region = "rome"
    mine = sorted(n for n, i in cluster.items() if i.server and i.server.region == region)
    own, others = frozenset(mine[:2]), mine[2:]
    have = sum(cluster[n].server.memory_bytes for n in own) * MEMORY_USABLE  # type: ignore[union-attr]
    total = sum(cluster[n].server.memory_bytes for n in mine) * MEMORY_USABLE  # type: ignore[union-attr]
    parameters = int((have + total) / 2 / BYTES_PER_PARAM)  # more than its own, less than all
    big = Job("big", ModelSpec(parameters, 96, 12288, 2048), 256, 1)
    assert have < memory_need_bytes(big) < total
    e = entry(big, allowed_regions=(region,), plan_nodes=own)
    held = {n: e.key for n in own} | {n: ("ml", "other") for n in others}
    assert too_big_for(e, cluster) is None  # the cluster could hold it: not refused for good
    why = no_room_now(e, cluster, held)
    assert why is not None and why.startswith(
        "the servers free now cannot hold the edited job: it needs "
    ), why
    assert f"the 2 server(s) free for it (2 its own) have {have / 2**30:.0f} GiB usable" in why
    assert why.endswith(f"(of the servers it may use, {len(others)} held by other jobs)"), why
    # the other job gone: room for it
    assert no_room_now(e, cluster, {n: e.key for n in own}) is None
    # the others free but cordoned: no room, and said so
    cordoned = {n: replace(i, unschedulable=True) if n in others else i for n, i in cluster.items()}
    why = no_room_now(e, cordoned, {n: e.key for n in own})
    assert why is not None and why.endswith(f"{len(others)} cordoned, tainted or not Ready)")
    # a job its own servers hold already: never refused here
    small = entry(paper_jobs()[3], allowed_regions=(region,), plan_nodes=own)
    assert no_room_now(small, cluster, held | {n: small.key for n in own}) is None


def test_a_cluster_with_no_node_is_told_so() -> None:
    """Before: "no node matches the job's constraints together ()", of a job with none
    (a review)."""
    bert = paper_jobs()[3]
    assert unmatched(entry(bert), {}) == (
        "the cluster has no node, or none could be read (add GPU nodes, or let the reader "
        "list nodes)"
    )
    assert unmatched(entry(bert), nodes()) is None


def test_a_job_that_fits_only_counting_a_sidecars_gpus_fits_nowhere() -> None:
    """OPT-175B whose stage pods ask 8 GPUs, 7 of them a sidecar's: the stages train on the
    trainer's 1 GPU a server, and all of the cluster's servers with 8 free hold 569 GiB of
    the 2,684 it needs there. Before, the pod's 8 were counted: it was taken to fit, and
    planned as if the stages trained on them (a review). The trainer asking the 8 itself
    fits."""
    from hulk_operator.plan_step import unplaced_reason

    def asks(name: str, gpus: int) -> dict[str, Any]:
        return {"name": name, "image": "x", "resources": {"limits": {GPU: str(gpus)}}}

    split = applied("opt", "opt-175b", {"containers": [asks("trainer", 1), asks("side", 7)]})
    why = too_big_for(split, nodes())
    assert why is not None and why.startswith("fits nowhere: needs 2684 GiB of GPU memory, ")
    assert (
        ", at the GPUs their stage pods get (the template gives its trainer container 1 of the "
        "8 nvidia.com/gpu a stage pod asks), 569 GiB usable (give the trainer container more "
        "GPUs, "
    ) in why, why
    d = plan_pending(snap([split]), plan)[split.key]
    assert d.job_plan is None and unplaced_reason(d.reason) == "FitsNowhere", d.reason
    whole = applied("opt", "opt-175b", {"containers": [asks("trainer", 8)]})
    assert too_big_for(whole, nodes()) is None
