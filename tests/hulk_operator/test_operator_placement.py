"""The Placer (``placement``), recovery and status logic without a cluster (the real planner,
in memory)."""

from __future__ import annotations

import asyncio
import copy
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from placement_helpers import entry, nodes, not_ready, snap, templated

from hulk_operator import GPU, recovery
from hulk_operator import status as st
from hulk_operator.decision import Decision
from hulk_operator.inventory import node_info
from hulk_operator.latencies import Latencies
from hulk_operator.placement import Placer
from hulk_operator.quotas import QUOTA_GPU, limit_bounds
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs
from hulk_planner.model import Job, ModelSpec, Plan
from hulk_sandbox.nodes import node_manifest

ROOT = Path(__file__).resolve().parents[2]


def counting_plan(calls: list[int]) -> Callable[..., Plan]:
    """``plan``, recording how many jobs each call planned."""

    def counting(*args: Any, **kw: Any) -> Plan:
        calls.append(len(args[1]))
        return plan(*args, **kw)

    return counting


def test_placer_batches_reserves_and_caches_failures() -> None:
    calls: list[int] = []
    counting = counting_plan(calls)

    jobs = [entry(j) for j in paper_jobs()]
    state = snap(jobs)

    async def snapshot() -> Snapshot:
        return Snapshot(state.nodes, state.latencies, state.jobs, dict(state.held))

    async def main() -> None:
        placer = Placer(counting, batch_window_s=0.01)
        got = await asyncio.gather(*(placer.decide(e.key, snapshot) for e in jobs))
        assert all(d is not None and d.job_plan for d in got)
        assert calls == [4]  # one round for the four jobs
        assert set(placer.reserved) == {e.key for e in jobs}
        held = placer.held({})
        assert len(held) == sum(len(d.nodes) for d in got if d)
        # Once the statuses show the plans, the reservations go.
        for e, d in zip(jobs, got, strict=True):
            assert d is not None
            state.jobs[e.key] = replace(e, plan_nodes=d.nodes)  # type: ignore[index]
        placer.prune(state.jobs)
        assert not placer.reserved
        # a second OPT-175B fits the cluster, not the one server others left free
        second = entry(replace(paper_jobs()[0], name="opt-2"))
        state.jobs[second.key] = second  # type: ignore[index]
        state.held = dict.fromkeys(sorted(state.nodes)[1:], ("other", "x"))
        first = await placer.decide(second.key, snapshot)
        again = await placer.decide(second.key, snapshot)
        assert first is again and first is not None and first.job_plan is None
        assert calls == [4, 1]  # nothing changed: no new round
        # one that fits no set of the cluster's servers is told so without a round
        huge = entry(Job("huge", ModelSpec(10**13, 96, 12288, 2048), 256, 1))
        state.jobs[huge.key] = huge  # type: ignore[index]
        told = await placer.decide(huge.key, snapshot)
        assert told is not None and told.reason.startswith("fits nowhere: needs "), told
        assert calls == [4, 1, 1]  # (the round planned opt-2 again, alone: not huge)

    asyncio.run(main())


def test_a_round_waits_while_jobs_applied_together_keep_coming() -> None:
    """Jobs of one apply that the operator sees one by one, each within the batch window of
    the last, are planned in one round (before, a fixed window split 30 jobs of one apply
    into 4 rounds, the later ones on leftover servers; a user trial on 400 nodes)."""
    calls: list[int] = []
    counting = counting_plan(calls)

    jobs = [entry(j) for j in paper_jobs()]
    state = snap(jobs)
    seen = [0]

    async def snapshot() -> Snapshot:  # one more job at each look
        seen[0] += 1
        shown = {e.key: e for e in jobs[: seen[0]]}
        return Snapshot(state.nodes, state.latencies, shown, dict(state.held))

    async def main() -> None:
        placer = Placer(counting, batch_window_s=0.01)
        got = await placer.decide(jobs[0].key, snapshot)
        assert got is not None and got.job_plan is not None
        assert calls == [4] and set(placer.reserved) == {e.key for e in jobs}

    asyncio.run(main())


def test_a_relabel_that_leaves_the_free_servers_as_they_were_is_planned_on() -> None:
    """A free server relabelled with more GPU memory: the job that did not fit is planned
    again, and on it (before, the round's failure stood, as the free servers' names had
    not changed: the job waited on it until something else did)."""
    calls: list[int] = []
    counting = counting_plan(calls)

    t5 = entry(paper_jobs()[1])
    state = snap([t5])
    state.held = dict.fromkeys(sorted(state.nodes)[1:], ("other", "x"))  # beijing-0 free

    async def snapshot() -> Snapshot:
        return Snapshot(state.nodes, state.latencies, state.jobs, dict(state.held))

    async def main() -> None:
        placer = Placer(counting, batch_window_s=0.01)
        first = await placer.decide(t5.key, snapshot)
        assert first is not None and first.job_plan is None, first
        assert await placer.decide(t5.key, snapshot) is first and calls == [1]
        body = node_manifest(paper_cluster().server("beijing-0"))
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        body["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81920"  # A100 80GB boards
        state.nodes["beijing-0"] = node_info(body)  # type: ignore[index]
        again = await placer.decide(t5.key, snapshot)
        assert calls == [1, 1]
        assert again is not None and again.nodes == {"beijing-0"}, again

    asyncio.run(main())


def test_a_job_whose_pods_are_refused_pauses_longer_each_time_until_its_spec_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job whose stage pods the API server refuses past the grace gives its servers back
    and is not planned for the grace, doubled at each refusal in a row (at most 10 min);
    nor does a round plan it then (its servers go to the others). Admitted pods end the
    run of refusals; an edited spec ends the pause at once."""
    from hulk_operator import decision, give_back

    now = [1000.0]
    monkeypatch.setattr(decision, "clock", lambda: now[0])
    a, b = (entry(j) for j in paper_jobs()[:2])
    state = snap([a, b])

    async def snapshot() -> Snapshot:
        return Snapshot(state.nodes, state.latencies, state.jobs, dict(state.held))

    here, there = {"berlin-30"}, {"paris-33"}

    async def main() -> None:
        placer = Placer(plan, batch_window_s=0.0)
        assert placer.refusals.pods_refused(a, here) == 0.0
        now[0] += 30
        assert placer.refusals.pods_refused(a, here) == 30.0
        # a re-plan's new servers, or refusals far apart (the job went and came back),
        # start the clock again
        now[0] += 10
        assert placer.refusals.pods_refused(a, there) == 0.0
        now[0] += give_back.REFUSALS_APART_S + 1
        assert placer.refusals.pods_refused(a, there) == 0.0
        now[0] += 30
        assert placer.refusals.pods_refused(a, there) == 30.0
        waits = []
        for _ in range(6):
            told = placer.give_back(a, "refused", grace_s=120.0)
            assert told.refused and told.job_plan is None and told.reason.startswith("refused")
            assert not placer.first_use(told)  # its Event is posted by the caller
            assert await placer.decide(a.key, snapshot) is told
            waits.append(int(told.reason.split(" in ")[1].split()[0]))
            now[0] += waits[-1] - 1
            assert await placer.decide(a.key, snapshot) is told  # still pausing
            now[0] += 1
            assert placer.refusals.waiting_out(a, state) is None  # the pause is over
            assert placer.refusals.pods_refused(a, here) == 0.0  # refused again
        assert waits == [120, 240, 480, 600, 600, 600]
        for _ in range(1100):  # refused for weeks: the pause stays at its cap
            told = placer.give_back(a, "refused", grace_s=120.0)
        assert "in 600 s" in told.reason
        now[0] += 600
        # while it pauses, a round plans the others and never it
        placer.give_back(a, "refused", grace_s=120.0)
        got = await placer.decide(b.key, snapshot)
        assert got is not None and got.job_plan is not None and a.key not in placer.reserved
        # its namespace's quotas or LimitRanges changed (one raised, or deleted): at once
        quota = ("ResourceQuota q", '{"hard": {"pods": "2"}}')
        placer.give_back(a, "refused", grace_s=120.0, policies=(quota,))
        assert placer.refusals.waiting_out(a, replace(state, policies={"ml": [quota]})) is not None
        raised = ("ResourceQuota q", '{"hard": {"pods": "9"}}')
        assert placer.refusals.waiting_out(a, replace(state, policies={"ml": [raised]})) is None
        assert placer.refusals.waiting_out(a, state) is None  # deleted
        assert placer.refusals.waiting_out(a, replace(state, policies={"other": [raised]})) is None
        placer.give_back(a, "refused", grace_s=120.0)
        # the job deleted and applied again (a new object, same name): planned at once
        assert placer.refusals.waiting_out(replace(a, uid="uid-again"), state) is None
        # an edit: planned at once
        edited = replace(a, generation=a.generation + 1)
        state.jobs[a.key] = edited  # type: ignore[index]
        assert placer.refusals.waiting_out(edited, state) is None
        got = await placer.decide(a.key, snapshot)
        assert got is not None and got.job_plan is not None and not got.refused
        # admitted pods end the run of refusals: the next pause is the grace again
        placer.refusals.pods_admitted(a.key)
        placer.refusals.pods_refused(edited, here)
        told = placer.give_back(edited, "refused", grace_s=120.0)
        assert "in 120 s" in told.reason

    asyncio.run(main())


def test_a_job_applied_again_under_its_name_gets_none_of_the_old_objects_decisions() -> None:
    """A job deleted while its round planned, and applied again (a new uid, generation 1
    again): before, the new object got the old spec's reservation, or its "no plan fits"
    until the cluster changed (a review)."""
    calls: list[int] = []
    old = entry(paper_jobs()[3])
    state = snap([old])

    async def snapshot() -> Snapshot:
        return Snapshot(state.nodes, state.latencies, state.jobs, dict(state.held))

    async def main() -> None:
        placer = Placer(counting_plan(calls), batch_window_s=0.01)
        got = await placer.decide(old.key, snapshot)
        assert got is not None and got.job_plan is not None
        assert placer.reserved[old.key].uid == old.uid
        placer.prune({old.key: old})  # (the same object: kept)
        assert old.key in placer.reserved
        again = replace(old, uid="uid-again")
        placer.prune({old.key: again})
        assert old.key not in placer.reserved
        # a failure is the object's own too: the new one is planned afresh
        state.held = dict.fromkeys(state.nodes, ("other", "x"))
        failed = await placer.decide(old.key, snapshot)
        assert failed is not None and failed.job_plan is None
        assert await placer.decide(old.key, snapshot) is failed  # (nothing changed)
        state.jobs[old.key] = again  # type: ignore[index]
        fresh = await placer.decide(old.key, snapshot)
        assert fresh is not None and fresh is not failed and fresh.uid == "uid-again"

    asyncio.run(main())


def test_a_cached_failure_is_planned_again_when_gpus_or_links_come_back() -> None:
    """A job's failure is kept until what its round saw changes; before, the free servers
    were compared by name: other pods' GPUs freed on them, or a pair the probes measure
    again, left the job on its old failure for good (a review)."""
    from hulk_operator.inventory import Resources

    opt = entry(paper_jobs()[0])  # OPT-175B: most of the cluster
    state = snap([opt])
    # a notebook's GPU on every server of two or more: the same servers free, fewer GPUs
    notebooks = {
        n: Resources(gpus=1) for n, i in state.nodes.items() if i.server and i.server.gpus > 1
    }
    busy = replace(state, used=notebooks)
    assert notebooks and [i.name for i in busy.free(opt)] == [i.name for i in state.free(opt)]
    assert Placer.fingerprint(busy, opt) != Placer.fingerprint(state, opt)
    a, b = sorted(state.nodes)[:2]
    cut = replace(state, latencies=Latencies(unreachable=frozenset({frozenset((a, b))})))
    assert Placer.fingerprint(cut, opt) != Placer.fingerprint(state, opt)
    assert Placer.fingerprint(replace(state), opt) == Placer.fingerprint(state, opt)


def test_an_edit_waiting_for_servers_joins_the_rounds_until_it_is_placed_or_changes() -> None:
    """``edits.unplannable``'s word on a running job's edit, at its generation, makes it a
    waiting edit the rounds plan (``Placer.edits_waiting``), unless it would fit nowhere;
    an edit allowed stays one until the job is seen pending (before, a round between the
    two gave its servers away: a review); records of another generation or of a pending
    job go. A job a waiting edit kept from servers is planned again once it goes."""
    # two copies fit the paper's cluster, three do not (8 micro-batches: with 256, one copy
    # planned alone spreads over 20 servers to hide the links' latency, test_operator_rounds)
    opt = replace(paper_jobs()[0], global_batch_size=8)
    own = frozenset(sorted(nodes())[:3])
    running = entry(
        replace(opt, name="w", priority=10), plan_nodes=own, phase="Running", generation=4
    )
    low = [entry(replace(opt, name=f"p{i}"), created=1000.0 + i) for i in range(2)]
    jobs = {e.key: e for e in (running, *low)}

    async def snapshot() -> Snapshot:
        return Snapshot(nodes(), Latencies(), dict(jobs), dict.fromkeys(own, running.key))

    state = asyncio.run(snapshot())
    # (a search bounded by moves, not time: two copies fit only narrowly, and a search
    # for a time on a loaded machine once left one unplaced)
    placer = Placer(partial(plan, max_iterations=1000), batch_window_s=0.0)
    assert placer.edits_waiting(state) == set()
    placer.edit_tried[running.key] = (("seen", 4), "fits nowhere: ...")
    assert placer.edits_waiting(state) == set() and running.key in placer.edit_tried
    placer.edit_tried[running.key] = (("seen", 3), "no room now")  # an older spec's
    assert placer.edits_waiting(state) == set() and running.key not in placer.edit_tried
    placer.edit_allowed(running.key, 4)  # allowed, not yet seen pending: still kept
    assert placer.edits_waiting(state) == {running.key}
    pending = replace(
        state, jobs={**state.jobs, running.key: replace(running, plan_nodes=frozenset())}
    )
    assert placer.edits_waiting(pending) == set() and not placer.edit_claimed
    placer.edit_tried[running.key] = (("seen", 4), "no room now")
    assert placer.edits_waiting(state) == {running.key}
    done = replace(state, jobs={**state.jobs, running.key: replace(running, phase="Succeeded")})
    assert placer.edits_waiting(done) == set()  # (finished: it kept servers for good; a review)
    assert running.key not in placer.edit_tried
    placer.edit_tried[running.key] = (("seen", 5), "no room now")  # a newer spec's
    assert placer.edits_waiting(state) == set() and running.key in placer.edit_tried
    placer.edit_tried[running.key] = (("seen", 4), "no room now")
    first = asyncio.run(placer.decide(low[0].key, snapshot))
    assert first is not None and first.job_plan is not None, first.reason
    second = asyncio.run(placer.decide(low[1].key, snapshot))
    assert second is not None and second.job_plan is None
    assert "kept for the edit of job ml/w" in second.reason, second.reason
    assert asyncio.run(placer.decide(low[1].key, snapshot)) is second  # (cached)
    placer.edit_tried.pop(running.key)  # its edit undone, say: planned again, and placed
    again = asyncio.run(placer.decide(low[1].key, snapshot))
    assert again is not None and again.job_plan is not None, again.reason
    assert not again.nodes & own


def test_limitrange_default_requests_count_where_a_stage_pod_fits() -> None:
    """A template that sets no CPU or memory gets the namespace's LimitRange defaults when
    the API server admits its pods; before, the nodes were offered as if it asked nothing,
    and the pods waited unschedulable where the defaults did not fit (a review)."""
    bare = templated(entry(paper_jobs()[3]), {"containers": [{"name": "t", "image": "x"}]})
    state = snap([bare])
    assert len(state.free(bare)) == len(state.nodes)
    defaults = {"ml": [("lr", {"cpu": "100000"}, {})]}  # more CPU than any node has
    limited = replace(state, limit_defaults=defaults)
    assert limited.stage_requests(bare).cpu == 100000 and limited.free(bare) == []
    assert limited.why_none_free(bare).startswith("the stage pods' requests (cpu 100000) fit")
    other = replace(state, limit_defaults={"other": defaults["ml"]})  # another namespace's
    assert len(other.free(bare)) == len(state.nodes)


def test_replan_keeps_healthy_stages() -> None:
    gpt = entry(paper_jobs()[2])
    state = snap([gpt])
    d = plan_pending(state, plan)[gpt.key]
    assert d.job_plan is not None
    current = d.job_plan
    lost = current.nodes[-1]
    left = {n: i for n, i in state.nodes.items() if n != lost}
    running = replace(gpt, plan_nodes=frozenset(current.nodes))

    async def snapshot() -> Snapshot:
        held = {n: gpt.key for n in current.nodes}
        return Snapshot(left, Latencies(), {gpt.key: running}, held)

    new = asyncio.run(Placer(plan).replan(running, current, snapshot))
    assert new.job_plan is not None and lost not in new.job_plan.nodes
    kept = set(current.nodes) - {lost}
    assert kept <= set(new.job_plan.nodes)
    assert recovery.lost_servers(current, left) == {lost: "Deleted"}
    msg = recovery.event_message({lost: "Deleted"}, current, new.job_plan, 1, len(kept))
    assert lost in msg and "1 pod(s) replaced" in msg


def test_a_running_jobs_replan_goes_before_a_round_in_progress() -> None:
    """One free server, wanted by a running job that lost its own (a re-plan) and by a new
    job whose round was planning when the re-plan came: the re-plan gets it, and the round,
    made again after it, says the new job waits (before, the round took it and the running
    job's re-plan found no room: all its pods removed)."""
    gpt, bert = entry(paper_jobs()[2]), entry(paper_jobs()[3])
    lost, spare, other = "brasilia-46", "california-20", ("ml", "other")
    alone = snap([gpt], held={n: other for n in nodes() if n != lost})
    first = plan_pending(alone, plan)[gpt.key].job_plan
    assert first is not None and first.nodes == (lost,), first
    left = {n: i for n, i in nodes().items() if n != lost}
    running = replace(gpt, plan_nodes=frozenset(first.nodes))
    held: dict[str, Any] = {n: other for n in left if n != spare}  # the others' servers

    async def snapshot() -> Snapshot:
        return Snapshot(left, Latencies(), {gpt.key: running, bert.key: bert}, dict(held))

    planning, go = threading.Event(), threading.Event()

    def slow(*args: Any, **kw: Any) -> Plan:  # the round plans until the re-plan is waiting
        if bert.job in args[1]:
            planning.set()
            assert go.wait(10)
        return plan(*args, **kw)

    async def main() -> tuple[Decision | None, Decision]:
        placer = Placer(slow, batch_window_s=0.0)
        pending = asyncio.create_task(placer.decide(bert.key, snapshot))
        while not planning.is_set():
            await asyncio.sleep(0.01)
        replanned = asyncio.create_task(placer.replan(running, first, snapshot))
        while not placer.replans_waiting:
            await asyncio.sleep(0.01)
        go.set()
        return await pending, await replanned

    waits, new = asyncio.run(main())
    assert new.job_plan is not None and new.job_plan.nodes == (spare,), new
    assert waits is not None and waits.job_plan is None, waits


def test_a_replan_after_a_lost_server_stays_within_the_namespaces_quota() -> None:
    """Before, a re-plan took free servers regardless of the quota: the lost server's
    replacement pods were refused and the job stayed Placing, PodsForbidden. The job's own
    pods count toward the quota already, so it may use what they hold, and no more."""
    gpt = entry(paper_jobs()[1])  # T5-11B: a pipeline of several servers
    state = snap([gpt])
    d = plan_pending(state, plan)[gpt.key]
    assert d.job_plan is not None and d.cluster is not None
    current = d.job_plan
    lost = current.nodes[-1]
    kept = [n for n in current.nodes if n != lost]
    left = {n: i for n, i in state.nodes.items() if n != lost}
    running = replace(gpt, plan_nodes=frozenset(current.nodes))
    held = {n: gpt.key for n in current.nodes}
    gpus = {n: d.cluster.server(n).gpus for n in current.nodes}

    def replan(quota: dict[str, float], counted: dict[str, float]) -> Any:
        async def snapshot() -> Snapshot:
            view = Snapshot(left, Latencies(), {gpt.key: running}, held)
            return replace(view, quotas={"ml": [("q", quota)]}, counted={gpt.key: counted})

        return asyncio.run(Placer(plan).replan(running, current, snapshot))

    free = replan({}, {})  # no limit: planned again without the lost server
    assert free.job_plan is not None and lost not in free.job_plan.nodes
    # the lost server's pod is gone; the quota leaves nothing: the kept pods' GPUs at most
    mine = float(sum(gpus[n] for n in kept))
    new = replan({QUOTA_GPU: 0.0}, {QUOTA_GPU: mine})
    assert new.job_plan is not None, new.reason
    assert sum(new.cluster.server(n).gpus for n in new.job_plan.nodes) <= mine
    # the same with a quota on pods: as many servers as the kept pods
    new = replan({"pods": 0.0}, {"pods": float(len(kept))})
    assert new.job_plan is not None and len(new.job_plan.nodes) <= len(kept)
    assert set(kept) <= set(new.job_plan.nodes)  # the servers it runs on come first
    # a quota lowered below what the job's pods use (the lost one still counted): a new
    # pod would be refused, so the job keeps fewer servers than before (before, the check
    # passed when the new plan needed no more than the old one held)
    new = replan({"pods": -2.0}, {"pods": float(len(current.nodes))})
    assert new.job_plan is not None and len(new.job_plan.nodes) <= len(current.nodes) - 2
    # nothing fits: no plan (the job goes Pending), saying which quota
    new = replan({"pods": 0.0}, {})
    assert new.job_plan is None
    assert new.reason.startswith("namespace ml's ResourceQuota q leaves 0 pod(s) (pods); ")
    new = replan({"pods": -5.0}, {"pods": 1.0})
    assert new.job_plan is None
    assert new.reason.startswith(
        "namespace ml's ResourceQuota q leaves 0 pod(s) (pods) beyond the 1 pod(s) (pods) its "
        "own pods hold; one stage pod needs 1 pod(s) (pods)"
    ), new.reason


def test_a_reservation_not_yet_counted_by_the_quota_is_not_handed_out_again() -> None:
    """A job planned a moment before another of its namespace, its pods not yet created:
    before, the second job's round saw the whole quota free, both were planned on it, and
    each gang got part of its pods admitted, waiting for good."""
    gpt, bert = (entry(j, allowed_regions=("berlin", "paris")) for j in paper_jobs()[2:4])
    alone = plan_pending(snap([gpt]), plan)[gpt.key]
    assert alone.job_plan is not None
    quotas = {"ml": [("q", {"pods": float(len(alone.nodes))})]}
    jobs = {gpt.key: gpt}

    async def snapshot() -> Snapshot:
        return replace(snap(list(jobs.values())), quotas=quotas)

    placer = Placer(plan, batch_window_s=0.0)
    first = asyncio.run(placer.decide(gpt.key, snapshot))
    assert first is not None and len(first.nodes) == len(alone.nodes)
    jobs[bert.key] = bert  # applied next: gpt's pods are not counted yet
    second = asyncio.run(placer.decide(bert.key, snapshot))
    assert second is not None and second.job_plan is None, second.nodes
    assert "after the namespace's jobs planned just now took " in second.reason


def test_an_unplaced_job_is_planned_again_at_most_every_10_s_for_quota_figures_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, every pod that came or went in a namespace with a quota moved its figures
    and started a new round for each of its unplaced jobs (at 5,000 servers, one round is
    seconds). Now the figures alone are looked at again after QUOTA_RECHECK_S; a raised
    quota is then planned within, and anything else that changes is looked at at once."""
    from hulk_operator import decision, placement

    now = [1000.0]  # (a decision's ``made`` is read from the same clock)
    monkeypatch.setattr(decision, "clock", lambda: now[0])
    rounds: list[int] = []

    def counting(*args: Any, **kw: Any) -> Plan:
        rounds.append(1)
        return plan(*args, **kw)

    opt = entry(paper_jobs()[0])
    # 5 pods: as many as OPT-175B takes at the least (it is planned), too few for its plans
    quota = {"pods": 5.0, "requests.memory": 2.0**40}
    state = {"held": {}}

    async def snapshot() -> Snapshot:
        return replace(snap([opt], dict(state["held"])), quotas={"ml": [("q", dict(quota))]})

    async def main() -> None:
        placer = Placer(counting, batch_window_s=0.0)
        first = await placer.decide(opt.key, snapshot)
        assert first is not None and first.job_plan is None
        assert "ResourceQuota q" in first.reason
        done = len(rounds)
        quota["requests.memory"] -= 2.0**30  # a pod of the namespace came: figures moved
        now[0] = first.made + placement.QUOTA_RECHECK_S - 1
        assert await placer.decide(opt.key, snapshot) is first and len(rounds) == done
        state["held"] = {"berlin-30": ("other", "x")}  # the free servers changed: at once
        again = await placer.decide(opt.key, snapshot)
        assert again is not None and again is not first and len(rounds) > done
        assert again.job_plan is None
        done = len(rounds)
        quota["pods"] = 100.0  # raised
        now[0] = again.made + placement.QUOTA_RECHECK_S - 1
        assert await placer.decide(opt.key, snapshot) is again and len(rounds) == done
        now[0] += 1
        placed = await placer.decide(opt.key, snapshot)
        assert placed is not None and placed.job_plan is not None

    asyncio.run(main())


def test_a_job_a_class_quota_held_back_is_planned_again_when_its_class_changes() -> None:
    """Its pods' PriorityClass is the cluster's default where the template names none:
    when that default changes, which quotas count them does too (before, the round's
    fingerprint did not see it and the job waited on a quota that no longer counted it)."""
    opt = entry(paper_jobs()[0])
    scopes = (("PriorityClass", "In", ("hi",)),)
    state = {"default": "hi"}

    async def snapshot() -> Snapshot:
        return replace(
            snap([opt]),
            scoped_quotas={"ml": [("hi-gpus", {QUOTA_GPU: 0.0}, scopes)]},
            default_priority_class=state["default"],
        )

    async def main() -> None:
        placer = Placer(plan, batch_window_s=0.0)
        first = await placer.decide(opt.key, snapshot)
        assert first is not None and first.job_plan is None and "hi-gpus" in first.reason
        assert await placer.decide(opt.key, snapshot) is first  # nothing changed
        state["default"] = "lo"
        again = await placer.decide(opt.key, snapshot)
        assert again is not None and again.job_plan is not None, again

    asyncio.run(main())


def test_a_quota_on_limits_that_the_template_does_not_set_refuses_every_pod() -> None:
    """Kubernetes refuses a pod unless each container sets what a quota on CPU or memory
    counts ("must specify limits.cpu"): before, the job was planned and held its servers."""
    tmpl = {
        "containers": [{"name": "trainer", "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [{"name": "fetch"}],
    }
    gpt = templated(entry(paper_jobs()[2]), tmpl)
    quotas = {"ml": [("q", {"limits.cpu": 100.0, "pods": 100.0})]}
    d = plan_pending(replace(snap([gpt]), quotas=quotas), plan)[gpt.key]
    assert d.job_plan is None
    assert d.reason == (
        "namespace ml's ResourceQuota q limits limits.cpu, so Kubernetes refuses pods whose "
        "containers do not all set resources.limits.cpu, and spec.template's trainer, fetch "
        "does not: set it there (or give the namespace a LimitRange default)"
    )
    defaults = {"ml": [("lr", {}, {"cpu": "2"})]}  # a LimitRange default limit: admitted
    view = replace(snap([gpt]), quotas=quotas, limit_defaults=defaults)
    assert plan_pending(view, plan)[gpt.key].job_plan is not None
    # the operator plans it again once the LimitRange appears (nothing else changed)
    placer = Placer(plan, batch_window_s=0.0)
    views = [replace(snap([gpt]), quotas=quotas), view]

    async def snapshot() -> Snapshot:
        return views[0]

    assert asyncio.run(placer.decide(gpt.key, snapshot)).job_plan is None  # type: ignore[union-attr]
    views.pop(0)
    assert asyncio.run(placer.decide(gpt.key, snapshot)).job_plan is not None  # type: ignore[union-attr]
    # so is a limit for the whole pod (spec.resources), which the containers then need not set
    pod_level = {**tmpl, "resources": {"limits": {"cpu": "4"}}}
    assert plan_pending(replace(snap([templated(gpt, pod_level)]), quotas=quotas), plan)[
        gpt.key
    ].job_plan
    # any pod-level CPU or memory skips the whole check (PodLevelResources: before, only the
    # resource set for the pod was exempt, and this job waited for good)
    memory_only = {**tmpl, "resources": {"requests": {"memory": "1Gi"}}}
    assert plan_pending(replace(snap([templated(gpt, memory_only)]), quotas=quotas), plan)[
        gpt.key
    ].job_plan


def test_a_template_out_of_a_limitranges_bounds_is_told_before_planning() -> None:
    """A LimitRange's CPU or memory bounds refuse every stage pod of such a template:
    before, the job was planned, its pods were refused and it held its servers. Now it
    holds none and is told which bound and container; once the LimitRange is gone it is
    planned (a sandbox test checks the rule against the API server's answers)."""
    body = {
        "metadata": {"name": "lr"},
        "spec": {
            "limits": [
                {"type": "Container", "max": {"cpu": "2", GPU: "8"}},
                {"type": "Pod", "min": {"memory": "1Gi"}},
                {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}},
            ]
        },
    }
    bounds = limit_bounds(body)
    assert bounds == (("lr", "Container", "max", "cpu", 2.0), ("lr", "Pod", "min", "memory", 2**30))
    assert limit_bounds({"spec": {"limits": [{"type": "Container", "max": {GPU: "8"}}]}}) is None
    tmpl = {
        "containers": [{"name": "trainer", "resources": {"limits": {"cpu": "4", "memory": "2Gi"}}}]
    }
    gpt = templated(entry(paper_jobs()[2]), tmpl)
    view = replace(snap([gpt]), limit_bounds={"ml": list(bounds)})
    assert view.free(gpt) == []
    d = plan_pending(view, plan)[gpt.key]
    assert d.job_plan is None
    assert d.reason == (
        "namespace ml's LimitRange lr (Container max): container trainer asks 4 cpu, over the "
        "maximum of 2 cpu: Kubernetes refuses such stage pods; change spec.template's "
        "resources, or the LimitRange"
    )
    # the pod's memory added up over its containers, under the Pod minimum
    small = {
        "containers": [{"name": "t", "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}]
    }
    view = replace(snap([templated(gpt, small)]), limit_bounds={"ml": list(bounds)})
    assert "the pod (its containers added up) asks 0.5Gi memory, under the minimum of 1Gi" in (
        plan_pending(view, plan)[gpt.key].reason
    )
    # beside a job with the same requests (one constraint group), in either name order: the
    # one out of bounds is told, the other placed (a user trial: before, the group's
    # servers followed its first member, so the good job waited, or the bad one was placed)
    fits = {"containers": [{"name": "t", "resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}]}
    for bad_name, good_name in (("a-bad", "b-good"), ("z-bad", "b-good")):
        bad = replace(templated(gpt, tmpl), key=("ml", bad_name))
        good = replace(templated(gpt, fits), key=("ml", good_name))
        assert bad.constraints == good.constraints
        view = replace(snap([bad, good]), limit_bounds={"ml": list(bounds)})
        got = plan_pending(view, plan)
        assert got[bad.key].job_plan is None and "LimitRange lr" in got[bad.key].reason
        assert got[good.key].job_plan is not None, got[good.key].reason
    # the LimitRange gone: planned at the next round (nothing else changed)
    placer = Placer(plan, batch_window_s=0.0)
    views = [replace(snap([gpt]), limit_bounds={"ml": list(bounds)}), snap([gpt])]

    async def snapshot() -> Snapshot:
        return views[0]

    assert asyncio.run(placer.decide(gpt.key, snapshot)).job_plan is None  # type: ignore[union-attr]
    views.pop(0)
    assert asyncio.run(placer.decide(gpt.key, snapshot)).job_plan is not None  # type: ignore[union-attr]


def test_a_decision_is_applied_once_even_where_python_reuses_its_id() -> None:
    """Before, a decision was known by ``id()``: a new decision at a freed one's address was
    taken as applied, and its Event (Unschedulable, Planned) was never posted."""
    placer = Placer(plan)
    ids = set()
    for _ in range(50):
        d = Decision(("ml", "x"), None, None, "why", "hulk")
        ids.add(id(d))
        assert placer.first_use(d) and not placer.first_use(d)
        del d
    assert len(ids) < 50  # (addresses were reused, as CPython does)


def test_a_waiting_jobs_cause_is_told_once_per_ten_minutes_however_often_it_comes_back() -> None:
    from hulk_operator.placement import TELL_AGAIN_S

    placer = Placer(plan)
    key, other = ("ml", "x"), ("ml", "y")
    assert placer.newly_told(key, "quota", 0.0)
    assert placer.newly_told(key, "servers held", 5.0)
    assert not placer.newly_told(key, "quota", 10.0)  # back again: not told twice
    assert placer.newly_told(other, "quota", 10.0)  # (each job its own)
    assert placer.newly_told(key, "quota", 10.0 + TELL_AGAIN_S + 1)
    # once placed (or gone), a later wait tells its causes afresh
    now = 20.0 + TELL_AGAIN_S
    assert placer.newly_told(key, "servers held", now)  # (told at 5: past the 10 minutes)
    waiting = entry(replace(paper_jobs()[3], name="x"))
    placer.prune({key: waiting})  # (still waiting: kept)
    assert not placer.newly_told(key, "servers held", now + 1)
    placer.prune({key: replace(waiting, plan_nodes=frozenset({"rome-44"}))})
    assert placer.newly_told(key, "servers held", now + 2) and other not in placer.told


def test_pod_diff() -> None:
    d = recovery.pod_diff(["a", "b", "old"], ["a", "b", "new"])
    assert (d.create, d.delete, d.keep) == (("new",), ("old",), ("a", "b"))


def test_conditions_keep_transition_time_until_status_flips() -> None:
    c = st.set_condition([], st.READY, False, "Starting", "0/2", 1, now="t1")
    c = st.set_condition(c, st.READY, False, "Starting", "1/2", 1, now="t2")
    assert c[0]["lastTransitionTime"] == "t1" and c[0]["message"] == "1/2"
    c = st.set_condition(c, st.READY, True, "Running", "2/2", 1, now="t3")
    c = st.set_condition(c, st.PLANNED, True, "Planned", "ok", 1, now="t3")
    assert [x["type"] for x in c] == [st.PLANNED, st.READY]
    assert c[1]["lastTransitionTime"] == "t3" and c[1]["observedGeneration"] == 1


def test_a_condition_keeps_within_the_crds_limits() -> None:
    """The CRD holds conditions to metav1.Condition's limits (a review): a reason outside
    its pattern, or a message over 32,768 characters, would have the whole status write
    refused; they are trimmed instead. The CRD's own pattern is the one checked."""
    crd = yaml.safe_load((ROOT / "crds" / "hulktrainingjobs.hulk.dev.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    fields = status["properties"]["conditions"]["items"]["properties"]
    pattern = re.compile(fields["reason"]["pattern"])
    for reason, shown in [
        ("Deleted", "Deleted"),
        ("Tainted key=v:NoSchedule", "Taintedkeyv:NoSchedule"),
        ("3 nodes", "nodes"),
        ("", "Unknown"),
        ("a.b-", "ab"),
        ("1:Foo", "Foo"),
        ("429,Throttled", "Throttled"),
        ("x" * 2000, "x" * 1024),
    ]:
        (c,) = st.set_condition([], st.READY, False, reason, "m", 1)
        assert c["reason"] == shown and pattern.fullmatch(c["reason"]), c
    (c,) = st.set_condition([], st.READY, False, "Long", "x" * 40_000, 1)
    assert len(c["message"]) == fields["message"]["maxLength"] and c["message"].endswith("...")


def test_conditions_are_brought_up_to_the_generation_reconciled() -> None:
    """Before, Failed=False kept the generation before an edit whose plan stood, and Ready,
    LatencyEstimated and Suspended one a priority edit left as they were (user trials); a
    Failed=True keeps its own (it tells of the run that failed), Planned its own (the spec a
    plan or a refusal was made for)."""
    c = st.set_condition([], st.FAILED, False, "NoFailure", "no stage failed", 4, now="t1")
    c = st.set_condition(c, st.PLANNED, True, "Planned", "ok", 4, now="t1")
    c = st.set_condition(c, st.READY, True, "AllStagesRunning", "4/4", 3, now="t1")
    c = st.set_condition(c, st.ESTIMATED, False, "Measured", "m", 3, now="t1")
    c = st.set_condition(c, st.SUSPENDED_COND, False, "Resumed", "r", 2, now="t1")
    new = st.conditions_seen({"phase": "Running"}, {"conditions": c}, 5)
    seen = {x["type"]: x["observedGeneration"] for x in new["conditions"]}
    assert seen == {st.FAILED: 5, st.PLANNED: 4, st.READY: 5, st.ESTIMATED: 5,
                    st.SUSPENDED_COND: 5}, seen  # fmt: skip
    assert all(x["lastTransitionTime"] == "t1" for x in new["conditions"])
    assert [(x["status"], x["reason"]) for x in new["conditions"]] == [
        (x["status"], x["reason"]) for x in c
    ]
    assert new["phase"] == "Running"
    same = {"conditions": new["conditions"]}
    assert st.conditions_seen(same, {}, 5) is same
    down = st.set_condition([], st.FAILED, True, "StageFailed", "x", 4)
    down = st.set_condition(down, st.PLANNED, False, "StageFailed", "x", 4)
    assert st.conditions_seen({}, {"conditions": down}, 5) == {}


def test_plan_status_round_trip() -> None:
    cluster = paper_cluster()
    jp = plan(cluster, paper_jobs()[2:3]).jobs[0]
    status: dict[str, Any] = {
        "plan": st.plan_status(jp, cluster, "hulk"),
        "predictedIterationSeconds": 1.5,
    }
    back = st.job_plan_from_status(jp.name, status)
    assert back is not None and back.stages == jp.stages
    assert set(st.plan_gpus(status)) == set(jp.nodes)
    first = status["plan"]["stages"][0]
    assert {"index", "layers", "parallelism", "nodes"} <= set(first)
    assert {"name", "region", "gpus"} <= set(first["nodes"][0])
    assert st.job_plan_from_status("x", {}) is None
    regions = len({cluster.server(n).region for n in jp.nodes})
    assert st.plan_line_from_status(status) == (
        f"{len(jp.stages)} stage(s) on {len(jp.nodes)} server(s) in {regions} region(s) by "
        "planner hulk; predicted 1.50 s per iteration"
    )
    assert st.plan_line_from_status({}) is None
    assert st.diff({"a": 1, "b": 2}, {"a": 1, "b": 3}) == {"b": 3}


def test_a_later_edit_the_plan_stands_for_drops_the_lifted_refusals_why() -> None:
    """A refused edit, one back to the spec the pods run (Planned: the plan's line, "(the
    spec is back to the one its pods run: its plan stands)"), then an edit of
    allowedRegions and priority that leaves the plan standing: Planned kept the earlier
    why at the new generation (a user trial). It says the plan alone now; a message that
    is not the plan's line and a why is kept as it was."""
    import kopf

    from hulk_operator.updates import _plan_stands

    cluster = paper_cluster()
    jp = plan(cluster, paper_jobs()[2:3]).jobs[0]
    status: dict[str, Any] = {"plan": st.plan_status(jp, cluster, "hulk")}
    line = st.plan_line_from_status(status)
    back = f"{line} (the spec is back to the one its pods run: its plan stands)"
    spec: dict[str, Any] = {"model": {"preset": jp.name}, "allowedRegions": ["paris"]}
    for message, kept in ((back, line), ("a plan said otherwise", "a plan said otherwise")):
        status["conditions"] = st.set_condition([], st.PLANNED, True, "Planned", message, 3)
        patch = kopf.Patch()
        assert (
            _plan_stands(patch, status, "allowedRegions changed: its plan stands", spec, 4) is False
        )
        (planned,) = [c for c in patch.status["conditions"] if c["type"] == st.PLANNED]
        assert (planned["message"], planned["observedGeneration"]) == (kept, 4)


@pytest.mark.parametrize("bad", [{"plan": {"stages": [{}]}}, {"plan": "x"}])
def test_unreadable_status_plan_is_none(bad: dict[str, Any]) -> None:
    assert st.job_plan_from_status("x", bad) is None


def test_a_reserved_job_is_not_planned_again_by_a_later_round() -> None:
    """A round started by another job must not re-plan a job whose decision is reserved
    but not yet in its status (that wrote a second, uncounted plan)."""
    gpt, bert = (entry(j) for j in paper_jobs()[2:4])
    state = snap([gpt])
    planned: list[list[str]] = []

    def recording(*args: Any, **kw: Any) -> Plan:
        planned.append([j.name for j in args[1]])
        return plan(*args, **kw)

    async def snapshot() -> Snapshot:
        return Snapshot(state.nodes, state.latencies, dict(state.jobs), dict(state.held))

    async def main() -> None:
        placer = Placer(recording, batch_window_s=0.0)
        first = await placer.decide(gpt.key, snapshot)
        assert first is not None and first.job_plan is not None
        state.jobs[bert.key] = bert  # type: ignore[index]
        other = await placer.decide(bert.key, snapshot)  # gpt's status is still empty
        assert other is not None and other.job_plan is not None
        assert planned == [["gpt2-xl"], ["bert-large"]]
        assert placer.reserved[gpt.key] is first
        assert not first.nodes & other.nodes
        assert await placer.decide(gpt.key, snapshot) is first

    asyncio.run(main())


def test_a_replan_waits_for_its_status_write_then_is_dropped() -> None:
    gpt = entry(paper_jobs()[2])
    state = snap([gpt])
    d = plan_pending(state, plan)[gpt.key]
    assert d.job_plan is not None
    current = d.job_plan
    left = {n: i for n, i in state.nodes.items() if n != current.nodes[0]}
    running = replace(gpt, plan_nodes=frozenset(current.nodes))

    async def snapshot() -> Snapshot:
        return Snapshot(left, Latencies(), {gpt.key: running}, {n: gpt.key for n in current.nodes})

    placer = Placer(plan)
    new = asyncio.run(placer.replan(running, current, snapshot))
    assert new.job_plan is not None and new.base == current
    # The status still shows the old plan: the re-plan is pending, nothing to redo.
    assert placer.pending_write(gpt.key, current) is new
    # Another plan in the status (a stale reservation): never reused.
    other = replace(current, micro_batches=current.micro_batches + 1)
    assert placer.pending_write(gpt.key, other) is None and gpt.key in placer.reserved
    # The status shows the re-plan: the reservation goes.
    assert placer.pending_write(gpt.key, new.job_plan) is None
    assert gpt.key not in placer.reserved


def test_event_names_stages_whose_layers_moved() -> None:
    from hulk_planner.model import JobPlan, Stage

    old = JobPlan("j", (Stage((0, 4), ("a",)), Stage((4, 8), ("b",)), Stage((8, 12), ("c",))), 4)
    new = JobPlan("j", (Stage((0, 5), ("a",)), Stage((5, 8), ("b",)), Stage((8, 12), ("d",))), 4)
    msg = recovery.event_message({"c": "Deleted"}, old, new, 3, 0)
    assert msg == (
        "c deleted; kept 2 of 2 healthy servers, added d; stage 2: c -> d; "
        "layers moved in stage(s) 0, 1; 3 pod(s) replaced, 0 left running"
    )
    # a stage on new servers whose layers moved is named in both (before, only stages on
    # the same servers were: a re-split of stages 0-9 read "layers moved in stage(s) 5",
    # a user trial); runs of three or more are told as ranges
    names = "abcdefg"
    old = JobPlan("j", tuple(Stage((2 * k, 2 * k + 2), (n,)) for k, n in enumerate(names)), 4)
    split = [(0, 1), (1, 3), (3, 5), (5, 8), (8, 10), (10, 13), (13, 14)]
    new = JobPlan("j", tuple(Stage(r, (n,)) for r, n in zip(split, "abcxefg", strict=True)), 4)
    msg = recovery.event_message({"d": "Deleted"}, old, new, 1, 6)
    assert msg == (
        "d deleted; kept 6 of 6 healthy servers, added x; stage 3: d -> x; "
        "layers moved in stage(s) 0-3, 5, 6; 1 pod(s) replaced, 6 left running"
    )


def test_step_times_keep_three_significant_digits() -> None:
    """A 1.0028 s step was told as "1 s" beside "0.446 s" in the same Event (a trial)."""
    from hulk_operator.status import seconds_text

    assert [seconds_text(x) for x in (1.0028, 0.4462, 136.2, 1.5, 1234.0)] == [
        "1.00", "0.446", "136", "1.50", "1.23e+03",
    ]  # fmt: skip


def test_a_much_slower_replan_of_a_job_without_regrow_says_what_would_move_it_back() -> None:
    """A user trial: jobs re-planned onto the few nodes left stayed on plans up to 4x slower
    once the others came back, with nothing saying that ``spec.regrow`` moves them."""
    from hulk_planner.model import JobPlan, Stage

    old = JobPlan("j", (Stage((0, 6), ("a",)), Stage((6, 12), ("b",))), 4, 1.0)
    hint = "; spec.regrow would plan it afresh on faster servers once they are free (it is not set)"
    for now, regrows, told in ((1.3, False, True), (1.2, False, False), (4.0, True, False)):
        new = JobPlan("j", (Stage((0, 12), ("c",)),), 4, now)
        msg = recovery.event_message({"b": "Deleted"}, old, new, 1, 0, regrows=regrows)
        assert msg.endswith(f"predicted step {now:#.3g} s (was 1.00 s)" + (hint if told else "")), (
            msg
        )


def test_a_released_server_with_no_link_to_the_new_plan_says_so() -> None:
    """Before: "released rome-41", as if the planner threw a good server away, where it
    reached none of the job's other servers (a user trial)."""
    from hulk_planner.model import Cluster, JobPlan, Link, Server, Stage

    servers = tuple(Server(n, "r", 1, 80.0, 100.0) for n in "abcde")
    links = (Link("a", "d", 1.0), Link("a", "e", 1.0), Link("d", "e", 1.0), Link("a", "b", 1.0))
    old = JobPlan("j", (Stage((0, 4), ("a",)), Stage((4, 8), ("b",)), Stage((8, 12), ("c",))), 4)
    new = JobPlan("j", (Stage((0, 6), ("d",)), Stage((6, 12), ("e",))), 4)
    lost = {"c": "NotReady"}
    msg = recovery.event_message(lost, old, new, 2, 0, cluster=Cluster("k", servers, links))
    # b's only link was to a, which the new plan does not use either
    assert "released a, b (b: no link to the new plan's servers);" in msg, msg
    # b linked to d: no note; no cluster: none either (as before)
    more = Cluster("k", servers, (*links, Link("b", "d", 1.0)))
    assert "released a, b;" in recovery.event_message(lost, old, new, 2, 0, cluster=more)
    assert "released a, b;" in recovery.event_message(lost, old, new, 2, 0)
    # one the re-plan could not use says why (before: a "healthy" server released without
    # a word, its GPU memory label gone bad; a user trial)
    bad = {"a": "label nvidia.com/gpu.memory='banana' is not a finite number of MiB above zero"}
    msg = recovery.event_message(lost, old, new, 2, 0, unoffered=bad)
    assert (
        "kept 0 of 1 healthy servers, added d, e, released b, left a (not offered: label "
        "nvidia.com/gpu.memory='banana' is not a finite number of MiB above zero);"
    ) in msg, msg


def test_event_counts_servers_when_the_pipeline_is_laid_out_again() -> None:
    """A re-plan to another number of stages shifts every stage index: the event says
    which servers stayed, came and went rather than pairing unrelated stages."""
    from hulk_planner.model import JobPlan, Stage

    old = JobPlan("j", (Stage((0, 6), ("a",)), Stage((6, 12), ("b",)), Stage((12, 18), ("c",))), 4)
    new = JobPlan(
        "j",
        (
            Stage((0, 4), ("d",)),
            Stage((4, 8), ("e",)),
            Stage((8, 12), ("a",)),
            Stage((12, 18), ("f",)),
        ),
        4,
    )
    msg = recovery.event_message({"c": "NotReady"}, old, new, 4, 0)
    assert msg == (
        "c NotReady; kept 1 of 2 healthy servers, added d, e, f, released b; "
        "3 -> 4 stages, every stage laid out again; 3 pod(s) removed, 4 created, 0 left running"
    )  # (before: "4 pod(s) replaced" where there had been 3)
    # a taint as it is (before: "maint:noexecute"); a one-server job keeps none
    one = JobPlan("j", (Stage((0, 18), ("c",)),), 4)
    msg = recovery.event_message({"c": "Tainted maint=true:NoExecute"}, one, new, 1, 0)
    assert msg.startswith("c tainted maint=true:NoExecute; no server kept, added d, e, a, f;"), msg
    # a lost server in the new plan, on what is left of it (before: not named at all)
    again = JobPlan("j", (Stage((0, 9), ("c",)), Stage((9, 18), ("d",))), 4)
    msg = recovery.event_message({"c": "GPUsTaken"}, one, again, 1, 0)
    assert msg.startswith(
        "c GPUs taken by other pods; no server kept, c planned again on what is left of it, "
        "added d;"
    ), msg


def test_a_template_node_name_is_an_invalid_spec() -> None:
    """Before: ``template.spec.nodeName`` was dropped without a word."""
    from hulk_operator.entries import job_entry

    spec: dict[str, Any] = {
        "model": {"preset": "bert-large"},
        "template": {"spec": {"nodeName": "london-33", "containers": [{"name": "t"}]}},
    }
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "spec": spec}
    e = job_entry("ml", "j", "u", body, {"generation": 1}, spec, {})
    assert e.job is None and e.error == (
        "spec.template.spec.nodeName: is set, but Hulk puts each stage pod on the server its "
        "plan picks (remove it; to limit the servers use spec.nodeSelector "
        "(kubernetes.io/hostname: NAME) or spec.allowedRegions)"
    )
    # with restartPolicy Always too: both at once (before, restartPolicy alone, then
    # nodeName once it was fixed, a round later: an operator trial)
    spec["template"]["spec"]["restartPolicy"] = "Always"
    e = job_entry("ml", "j", "u", body, {"generation": 2}, spec, {})
    assert e.error is not None and e.error.startswith("spec.template.spec.restartPolicy: is "), e
    assert "; spec.template.spec.nodeName: is set, but Hulk puts" in e.error, e.error


@pytest.mark.parametrize(
    ("selector", "restart", "error"),
    [
        ({"bad key!": "x"}, None, "spec.nodeSelector: 'bad key!' is not a label key (a key is "),
        ({"-a": "x"}, None, "spec.nodeSelector: '-a' is not a label key"),
        ({"Bad_Prefix/a": "x"}, None, "spec.nodeSelector: 'Bad_Prefix/a' is not a label key"),
        ({"a" * 64: "x"}, None, "is not a label key"),
        ({"gpu": "two words"}, None, "spec.nodeSelector.gpu: 'two words' is not a label value"),
        ({}, "Always", "spec.template.spec.restartPolicy: is Always: a stage that finishes "
         "would be started again, and the job would never end (use OnFailure (the default: a "
         "failed stage restarts in place) or Never)"),
        ({"hulk.dev/pool": "a-1.b_2", "tier": ""}, "Never", None),  # (valid: taken)
        ({"topology.kubernetes.io/region": "rome"}, "OnFailure", None),
    ],
)  # fmt: skip
def test_a_node_selector_no_label_can_match_and_restart_always_are_invalid_specs(
    selector: dict[str, Any], restart: str | None, error: str | None
) -> None:
    """Before: ``spec.nodeSelector {"bad key!": x}`` waited for a node that "matches";
    ``restartPolicy: Always`` was taken, and its job could never succeed (a user trial)."""
    from hulk_operator.entries import job_entry

    tmpl: dict[str, Any] = {"containers": [{"name": "t"}]}
    if restart:
        tmpl["restartPolicy"] = restart
    spec: dict[str, Any] = {
        "model": {"preset": "bert-large"},
        "template": {"spec": tmpl},
        "nodeSelector": selector,
    }
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "spec": spec}
    e = job_entry("ml", "j", "u", body, {"generation": 1}, spec, {})
    if error is None:
        assert e.job is not None and e.error is None, e.error
    else:
        assert e.job is None and e.error is not None and error in e.error, e.error


def test_a_request_or_limit_that_is_no_quantity_is_an_invalid_spec_naming_its_container() -> None:
    """Before, ``cpu: lots`` was taken, and the API server's refusal, naming neither the
    field nor the container, came only once the job was placed (a user trial)."""
    from hulk_operator.entries import job_entry

    def error(containers: list[dict[str, Any]], kind: str = "containers") -> str | None:
        spec = {"model": {"preset": "bert-large"}, "template": {"spec": {kind: containers}}}
        body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "spec": spec}
        return job_entry("ml", "j", "u", body, {"generation": 1}, spec, {}).error

    ok = {"requests": {"cpu": "500m", "memory": "4Gi", GPU: 1}, "limits": {"cpu": 2}}
    assert error([{"name": "t", "resources": ok}]) is None
    assert error([{"name": "t", "resources": {"requests": {"cpu": None}}}]) is None
    bad = {"requests": {"cpu": "lots"}}
    assert error([{"name": "ok"}, {"name": "T_bad", "resources": bad}]) == (
        "spec.template.spec.containers[1] (T_bad).resources.requests.cpu: 'lots' is not a "
        "quantity (write it as Kubernetes does: 500m or 2 (CPUs), 4Gi (bytes), 1 (GPUs))"
    )
    limits = {"limits": {"memory": "4 GB"}}
    why = error([{"name": "init", "resources": limits}], kind="initContainers")
    assert why is not None and why.startswith(
        "spec.template.spec.initContainers[0] (init).resources.limits.memory: '4 GB' is not"
    ), why


def test_a_slower_plan_after_a_loss_says_so() -> None:
    """Before: a job that shrank from 4 servers to 1 read "Recovered" with nothing about
    its now 4x slower steps."""
    from hulk_planner.model import JobPlan, Stage

    old = JobPlan("j", (Stage((0, 6), ("a",)), Stage((6, 12), ("b",))), 4, 7.12)
    new = JobPlan("j", (Stage((0, 12), ("a",)),), 4, 27.6)
    msg = recovery.event_message({"b": "NotReady"}, old, new, 1, 0)
    assert msg.endswith("; predicted step 27.6 s (was 7.12 s)"), msg


def test_a_node_not_ready_for_less_than_the_grace_keeps_its_stages() -> None:
    """Before: a node NotReady for a moment (a kubelet restart) restarted the whole
    pipeline at once; Kubernetes itself waits minutes before evicting its pods."""
    from datetime import UTC, datetime

    cluster = nodes()
    jp = plan(paper_cluster(), paper_jobs()[2:3], max_iterations=50).jobs[0]
    victim = jp.nodes[0]
    t = datetime(2026, 11, 23, 0, 33, 41, tzinfo=UTC).timestamp()
    cluster[victim] = not_ready(victim, "2026-11-23T00:33:41Z")
    assert cluster[victim].not_ready_since == t and not cluster[victim].ready
    lost = recovery.lost_servers
    assert lost(jp, cluster, now=t + 30, not_ready_grace_s=60) == {}
    assert lost(jp, cluster, now=t + 61, not_ready_grace_s=60) == {victim: "NotReady"}
    assert lost(jp, cluster, now=t + 30, not_ready_grace_s=0) == {victim: "NotReady"}
    # Ready again, the lifecycle controller's taint not yet lifted: NotReady since the
    # taint was added, not since the condition's old transition (kwok keeps the node's
    # start: before, a 20 s blip was a loss the moment the node came back; a user trial)
    back = node_manifest(next(s for s in paper_cluster().servers if s.name == victim))
    back["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-22T00:00:00Z"}
    ]
    back["spec"]["taints"] = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute",
         "timeAdded": "2026-11-23T00:33:41Z"},
    ]  # fmt: skip
    cluster[victim] = node_info(back)
    assert cluster[victim].not_ready_since == t and not cluster[victim].ready
    assert lost(jp, cluster, now=t + 20, not_ready_grace_s=60) == {}
    cluster[victim] = not_ready(victim, None)  # no transition time: lost at once
    assert lost(jp, cluster, now=t, not_ready_grace_s=60) == {victim: "NotReady"}
    # while the cluster is disrupted, NotReady is never a loss; a deleted node always is
    assert lost(jp, cluster, now=t, disrupted=True) == {}
    # after a disruption the grace runs from its end: nodes that come back one by one are
    # not all lost the moment fewer than the threshold are down (a user trial)
    cluster[victim] = not_ready(victim, "2026-11-23T00:33:41Z")
    assert lost(jp, cluster, now=t + 120, not_ready_grace_s=60, settled_at=t + 100) == {}
    assert lost(jp, cluster, now=t + 161, not_ready_grace_s=60, settled_at=t + 100) == {
        victim: "NotReady"
    }
    assert lost(jp, cluster, now=t + 120, not_ready_grace_s=60, settled_at=t - 5) == {
        victim: "NotReady"
    }  # a disruption that ended before it went NotReady changes nothing
    del cluster[victim]
    assert lost(jp, cluster, now=t, disrupted=True) == {victim: "Deleted"}


def test_a_node_with_no_ready_condition_yet_has_the_grace_from_its_making() -> None:
    """A node just made (its kubelet has not yet said a word): NotReady since it was made
    (before, since ever: a node made again under its name lost its stage at once)."""
    from datetime import UTC, datetime

    jp = plan(paper_cluster(), paper_jobs()[2:3], max_iterations=50).jobs[0]
    victim = jp.nodes[0]
    body = node_manifest(paper_cluster().server(victim))
    body["metadata"]["creationTimestamp"] = "2026-11-23T00:33:41Z"
    assert not body["status"].get("conditions")
    cluster = {**nodes(), victim: node_info(body)}
    t = datetime(2026, 11, 23, 0, 33, 41, tzinfo=UTC).timestamp()
    assert cluster[victim].not_ready_since == t and not cluster[victim].ready
    lost = recovery.lost_servers
    assert lost(jp, cluster, now=t + 30, not_ready_grace_s=60) == {}
    assert lost(jp, cluster, now=t + 61, not_ready_grace_s=60) == {victim: "NotReady"}


def test_most_nodes_not_ready_at_once_is_a_disruption_not_a_loss() -> None:
    """Before: pausing every kubelet for 90 s (a control-plane hiccup) removed every
    job's pods and re-planned them onto the few nodes left."""
    cluster = nodes()
    names = sorted(cluster)
    for n in names[:3]:
        cluster[n] = not_ready(n, None)
    assert recovery.disrupted(cluster, 0.55) is None  # three nodes down: real losses
    for n in names[:26]:
        cluster[n] = not_ready(n, None)
    assert recovery.disrupted(cluster, 0.55) == "26 of the 47 GPU nodes are NotReady"
    two = {n: cluster[n] for n in names[:2]}
    assert recovery.disrupted(two, 0.55) is None  # two nodes: never taken as a disruption


def test_each_job_is_told_of_a_disruption_once() -> None:
    said: dict[str, Any] = {}
    log = type("Log", (), {"warning": lambda self, t: None, "info": lambda self, t: None})()
    recovery.say_disruption(said, "26 of the 47 GPU nodes are NotReady", log, 1.0)
    assert not recovery.disruption_told(said, ("ns", "a"))
    assert recovery.disruption_told(said, ("ns", "a"))
    assert not recovery.disruption_told(said, ("ns", "b"))
    recovery.say_disruption(said, None, log, 2.0)  # over: the next one is told afresh
    recovery.say_disruption(said, "30 of the 47 GPU nodes are NotReady", log, 3.0)
    assert not recovery.disruption_told(said, ("ns", "a"))


def test_a_disruption_is_logged_once_whichever_jobs_timer_sees_it() -> None:
    """Every job's timer checks; the line is said once per change (before, once per job:
    each kept its own flag, in kopf's per-object copy of the memo)."""
    lines: list[tuple[str, str]] = []

    class Log:
        def warning(self, text: str) -> None:
            lines.append(("WARNING", text))

        def info(self, text: str) -> None:
            lines.append(("INFO", text))

    memo = kopf.Memo(disruption={})
    copies = [copy.copy(memo) for _ in range(3)]  # as kopf makes them, one per job
    for m in copies:
        assert recovery.say_disruption(m.disruption, "26 of the 47 GPU nodes are NotReady",
                                       Log(), 100.0) == 0.0  # fmt: skip
    for t, m in enumerate(copies):
        assert recovery.say_disruption(m.disruption, None, Log(), 200.0 + t) == 200.0
    assert lines == [
        ("WARNING", "26 of the 47 GPU nodes are NotReady: no NotReady node is taken as lost "
         "until fewer are"),
        ("INFO", "NotReady nodes are taken as lost again"),
    ]  # fmt: skip


def _unreachable(name: str, ago_s: float) -> Any:
    """The paper's server ``name`` as the node lifecycle controller leaves an unreachable
    Node ``ago_s`` seconds ago: Ready Unknown, tainted unreachable NoSchedule and NoExecute."""
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))
    body = node_manifest(paper_cluster().server(name))
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": stamp}
    ]
    body["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": e, "timeAdded": stamp}
        for e in ("NoSchedule", "NoExecute")
    ]
    return node_info(body)


def test_a_notready_nodes_own_taints_wait_for_its_grace() -> None:
    """Before, the lifecycle controller's NoSchedule taint was taken as a user's: a stage
    pod waiting there, or made again there, was re-planned 10 s into a 60 s grace, and in
    a disruption too (a review)."""
    import time

    from hulk_operator.context import PodEntry
    from hulk_operator.inventory import Resources

    jp = plan(paper_cluster(), paper_jobs()[2:3], max_iterations=50).jobs[0]
    victim = jp.nodes[0]
    cluster = {**nodes(), victim: _unreachable(victim, 10)}
    now = time.time()
    assert recovery.lost_servers(jp, cluster, now=now, not_ready_grace_s=60) == {}
    waiting = PodEntry(
        "p0", victim, "Pending", False, False, requests=Resources(gpus=8),
        unschedulable="0/47 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/unreachable: }",
    )  # fmt: skip
    assert recovery.stuck_servers([waiting], {}, set(), cluster, Resources(), {victim: 8}) == {}
    assert recovery.barred_servers(jp, cluster) == {}
    assert not cluster[victim].offers()  # no new stage goes there meanwhile
    lost = recovery.lost_servers(jp, cluster, now=now + 60, not_ready_grace_s=60)
    assert lost == {victim: "NotReady"}  # the grace past: lost, as NotReady


def test_a_noexecute_taint_moves_the_stage_unless_tolerated_for_good() -> None:
    """Kubernetes evicts a pod from a NoExecute taint at once, NotReady or not, and one
    that tolerates it for ``tolerationSeconds`` then. Before, a toleration of 30 s counted
    as for good (the pod was evicted and made again there every 30 s, for ever), and a
    NotReady node's taint waited out the NotReady grace, or a disruption (a review)."""
    from hulk_operator.inventory import Taint
    from hulk_operator.snapshot import refusals

    jp = plan(paper_cluster(), paper_jobs()[2:3], max_iterations=50).jobs[0]
    victim = jp.nodes[0]
    cluster = nodes()
    cluster[victim] = replace(cluster[victim], taints=(Taint("maint", "yes", "NoExecute"),))
    tol = [{"key": "maint", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    lost = recovery.lost_servers(jp, cluster, tol, now=1e10)
    assert lost == {victim: "Tainted maint=yes:NoExecute (tolerated for 30 s only)"}
    assert not cluster[victim].offers(tol)
    forever = [{k: v for k, v in tol[0].items() if k != "tolerationSeconds"}]
    assert recovery.lost_servers(jp, cluster, forever, now=1e10) == {}
    assert cluster[victim].offers(forever)
    # as the taint eviction controller: the least tolerationSeconds of those that match,
    # whatever others match without one (a review)
    both = [*forever, tol[0], {**tol[0], "tolerationSeconds": 60}]
    lost = recovery.lost_servers(jp, cluster, both, now=1e10)
    assert lost == {victim: "Tainted maint=yes:NoExecute (tolerated for 30 s only)"}
    assert refusals([cluster[victim]], both) == (
        "1 tainted; the taint(s) maint=yes:NoExecute (tolerated for 30 s only) need a "
        "toleration in spec.template.spec.tolerations (for good: no tolerationSeconds)"
    )
    down = replace(not_ready(victim, "2026-11-23T00:33:41Z"), taints=cluster[victim].taints)
    cluster[victim] = down  # NotReady a moment ago, tainted too: moved at once
    for disrupted in (False, True):
        lost = recovery.lost_servers(
            jp, cluster, now=1.8e9, not_ready_grace_s=1e9, disrupted=disrupted
        )
        assert lost == {victim: "Tainted maint=yes:NoExecute"}


def test_a_replan_for_a_lost_server_waits_for_those_notready_but_not_lost() -> None:
    """A disruption (most nodes NotReady) while one of a job's servers is deleted: the
    re-plan waits until the others are Ready again (or lost), then replaces the deleted
    one alone. Before, it planned on the free servers only and moved the whole job off
    them (a review); a re-plan that kept them re-split their layers and made pods there
    that could not start (another)."""
    from hulk_operator.config import OperatorConfig
    from hulk_operator.context import Context, PodEntry
    from hulk_operator.inventory import Resources
    from hulk_operator.metrics import Metrics
    from hulk_operator.plan_fields import placed_fields
    from hulk_operator.plan_step import check_plan

    gpt = entry(paper_jobs()[1])  # T5-11B: a pipeline of several servers
    d = plan_pending(snap([gpt]), plan)[gpt.key]
    cur = d.job_plan
    assert cur is not None and len(cur.nodes) >= 4
    status = {"phase": "Running", **placed_fields(d, {})}
    running = replace(gpt, plan_nodes=frozenset(cur.nodes), phase="Running")
    cluster = dict(nodes())
    others = [m for m in sorted(cluster) if m not in cur.nodes][:30]
    for n in [*cur.nodes[:3], *others]:
        cluster[n] = _unreachable(n, 600)
    del cluster[cur.nodes[3]]
    events: list[tuple[str, ...]] = []

    async def snapshot() -> Snapshot:
        return Snapshot(cluster, Latencies(), {gpt.key: running}, {n: gpt.key for n in cur.nodes})

    def check(disrupted: str | None) -> tuple[Any, dict[str, Any]]:
        ctx = Context(
            api=None, config=OperatorConfig(), placer=placer, metrics=Metrics(),
            nodes=cluster, pods={gpt.key: [
                PodEntry(f"p{i}", n, "Running", False, False, requests=Resources(gpus=8))
                for i, n in enumerate(cur.nodes)
            ]}, snapshot=snapshot, event=lambda *a: events.append(a), recent={},
            disrupted=disrupted,
        )  # fmt: skip
        new: dict[str, Any] = {}
        return asyncio.run(check_plan(ctx, running, {}, status, cur, [], new)), new

    placer = Placer(plan)
    disrupted = recovery.disrupted(cluster, 0.55)
    assert disrupted is not None
    step, new = check(disrupted)
    assert step is None and not placer.reserved  # no re-plan, no pod made
    down = ", ".join(sorted(cur.nodes[:3]))
    words = (
        f"{cur.nodes[3]} deleted; the re-plan waits while {down} are NotReady but not lost: a "
        "re-plan now would move their stages too, which may come back (re-planned once the "
        "disruption ends and they are Ready again, or lost)"
    )
    assert ("Normal", "ReplanWaits", words) in events
    ready = st.condition(new, st.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ReplanWaits")
    step, _ = check(disrupted)  # told once
    assert step is None and sum(e[1] == "ReplanWaits" for e in events) == 1
    for n in cur.nodes[:3]:  # back: the deleted server alone is replaced
        cluster[n] = nodes()[n]
    step, _ = check(None)
    assert step is not None and step.plan is not None
    assert set(cur.nodes[:3]) <= set(step.plan.nodes) and cur.nodes[3] not in step.plan.nodes


def _regions_entry(regions: list[str]) -> Any:
    from hulk_operator.entries import job_entry

    spec: dict[str, Any] = {
        "model": {"preset": "bert-large"},
        "template": {"spec": {"containers": [{"name": "t"}]}},
        "allowedRegions": regions,
    }
    body = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", "spec": spec}
    return job_entry("ml", "j", "u", body, {"generation": 1}, spec, {})


def test_allowed_regions_as_matched_make_one_group_and_a_blank_one_is_invalid() -> None:
    """A user trial: ``[Berlin, Rome]`` and ``[rome, berlin]`` were two groups, planned one
    after the other, though they match the same servers; ``[" "]`` waited for ever."""
    a, b = _regions_entry(["Berlin", "Rome"]), _regions_entry(["rome", " berlin"])
    assert a.constraints == b.constraints
    assert a.constraints != _regions_entry(["rome"]).constraints
    blank = _regions_entry(["london", " "])
    assert blank.job is None and blank.error == (
        "spec.allowedRegions[1]: ' ' names no region (give a region as the nodes' label "
        "topology.kubernetes.io/region writes it, e.g. london (case, spaces and punctuation "
        "aside))"
    ), blank.error


def test_a_node_made_after_its_stage_pod_was_bound_is_lost() -> None:
    """A node of the same name made again after the pod was bound: the pod was never on
    it (a user trial: missed where the re-creation was faster than a reconciliation)."""
    from datetime import UTC, datetime

    from hulk_operator.context import PodEntry

    body = node_manifest(paper_cluster().servers[0])
    body["metadata"]["creationTimestamp"] = "2026-11-24T10:00:05Z"
    info = node_info(body)
    t = datetime(2026, 11, 24, 10, 0, 5, tzinfo=UTC).timestamp()
    assert info.created == t
    pod = PodEntry("p", info.name, "Running", False, False, bound_at=t - 60)
    assert recovery.remade_servers([pod], {info.name: info}) == {info.name: recovery.REMADE}
    # bound to this node (the same second: not after), not bound, or going: nothing
    for p in (replace(pod, bound_at=t), replace(pod, bound_at=None), replace(pod, deleting=True)):
        assert recovery.remade_servers([p], {info.name: info}) == {}
    assert recovery.remade_servers([pod], {}) == {}  # deleted: lost_servers' case


def test_a_node_made_in_the_second_its_pod_was_bound_is_lost_where_the_pod_cannot_fit() -> None:
    """Made in the second the pod was bound (timestamps are whole seconds): the same node
    or a new one. A new one where the job's pods there ask more GPUs than it has (before,
    kept: a 16-GPU pod counted on a node of 1, the job Ready; a user trial); else kept."""
    from datetime import UTC, datetime

    from hulk_operator.context import PodEntry
    from hulk_operator.inventory import Resources

    server = paper_cluster().servers[0]
    body = node_manifest(replace(server, gpus=1))
    body["metadata"]["creationTimestamp"] = "2026-11-24T10:00:05Z"
    info = node_info(body)
    assert info.server is not None and info.server.gpus == 1
    t = datetime(2026, 11, 24, 10, 0, 5, tzinfo=UTC).timestamp()
    ask = Resources(gpus=8, cpu=1.0, memory=1e9)
    pod = PodEntry("p", info.name, "Running", False, False, bound_at=t + 0.0, requests=ask)
    assert recovery.remade_servers([pod], {info.name: info}) == {info.name: recovery.REMADE}
    # it fits: kept (bound to this node, or its kubelet runs it)
    small = replace(pod, requests=Resources(gpus=1))
    assert recovery.remade_servers([small], {info.name: info}) == {}
    # two pods of the job there, each fitting alone, not together
    assert recovery.remade_servers([small, replace(small, name="q")], {info.name: info}) == {
        info.name: recovery.REMADE
    }
    # bound a second later: the node was there first, whatever it has now (a device
    # plugin's count falling under a running pod is no re-creation)
    assert recovery.remade_servers([replace(pod, bound_at=t + 1)], {info.name: info}) == {}
    # judged within SAME_SECOND_S of the node's making, while it is a server: later, or
    # with no GPUs offered (a device plugin restarting), fewer GPUs are no re-creation (a
    # review: a stage bound in its node's second was lost at a GPU failure, at any time)
    late = t + recovery.SAME_SECOND_S
    remade = recovery.remade_servers
    assert remade([pod], {info.name: info}, t + 5) == {info.name: recovery.REMADE}
    assert remade([pod], {info.name: info}, late) == {}
    assert remade([pod], {info.name: replace(info, server=None)}, t + 5) == {}


def test_a_server_lost_as_deleted_that_the_replan_places_again_was_made_again() -> None:
    """Deleted at the reconciliation's look, back at the re-plan's (made again at once): its
    pod is made again (before, kept as if on the new node, and the job re-planned a second
    time for it: a user trial)."""
    lost = {"a": "Deleted", "b": "Deleted", "c": "NotReady", "d": recovery.REMADE}
    assert recovery.came_back(lost, ["a", "c", "e"]) == {
        "a": recovery.REMADE,
        "b": "Deleted",
        "c": "NotReady",
        "d": recovery.REMADE,
    }
    assert recovery.forced(recovery.came_back(lost, ["a"])) == {"a", "b", "d"}


def test_a_cordoned_server_keeps_its_stage_until_drained() -> None:
    """Kubernetes keeps a cordoned node's pods (a user trial expected that of Hulk's stages
    too): by default (``cordon_moves`` off) the stage runs on, and once its pod is gone (``kubectl
    drain`` evicts it) the server bars a new one, so the stage moves."""
    from dataclasses import replace as with_

    cluster = nodes()
    jp = plan(paper_cluster(), paper_jobs()[2:3], max_iterations=50).jobs[0]
    victim = jp.nodes[0]
    cluster[victim] = with_(cluster[victim], unschedulable=True)
    assert recovery.lost_servers(jp, cluster, cordon_moves=True) == {victim: "Cordoned"}
    assert recovery.lost_servers(jp, cluster) == {}  # the default: it runs on
    assert recovery.barred_servers(jp, cluster) == {victim: "Cordoned"}  # no new pod there
    assert not cluster[victim].offers()
