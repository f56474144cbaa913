"""What an edit of a running job's spec means for its plan (``hulk_operator.edits``)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hulk_operator.edits import changed_fields, plan_stands
from hulk_operator.entries import normalized, spec_hashes

SPEC: dict[str, Any] = {
    "model": {"preset": "gpt2-xl"},
    "training": {"globalBatchSize": 128, "microBatchSize": 1},
    "template": {"spec": {"containers": [{"name": "t", "image": "trainer:1"}]}},
    "allowedRegions": ["beijing", "rome"],
}


def edited(**fields: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec.update(fields)
    return {k: v for k, v in spec.items() if v is not None}


def stands(before: dict[str, Any], after: dict[str, Any], match: bool = True) -> str | None:
    return plan_stands(before, after, {"specHashes": spec_hashes(SPEC)}, lambda: match)


def test_defaults_filled_in_by_a_crd_upgrade_are_no_change() -> None:
    """Before: a CRD that gained ``suspend: false`` made every job plan again."""
    upgraded = edited(suspend=False, priority=0, masterPort=29500, backoffLimit=6)
    assert changed_fields(SPEC, upgraded) == set()
    assert changed_fields(SPEC, edited(nodeSelector={}, training={**SPEC["training"]})) == set()
    assert changed_fields(SPEC, edited(allowedRegions=["rome", "beijing", "rome"])) == set()
    assert changed_fields(SPEC, edited(suspend=True)) == {"suspend"}
    assert normalized(None)["masterPort"] == 29500


def test_bookkeeping_fields_leave_the_plan_standing() -> None:
    assert stands(SPEC, edited(priority=5)) == "priority changed: its plan stands"
    assert stands(SPEC, edited(backoffLimit=1, priority=2)) == (
        "backoffLimit, priority changed: its plan stands"
    )
    assert stands(SPEC, edited(regrow={"minSpeedup": 2})) == "regrow changed: its plan stands"


def test_a_presets_own_sizes_written_out_are_the_same_job() -> None:
    """Before: writing out gpt2-xl's own batch sizes planned the job again."""
    from hulk_planner.presets import preset

    p = preset("gpt2-xl")
    same = edited(training={"globalBatchSize": p.global_batch_size,
                            "microBatchSize": p.micro_batch_size})  # fmt: skip
    spec = edited(training=None)  # the preset's batch sizes
    assert plan_stands(spec, same, {"specHashes": spec_hashes(spec)}, lambda: True) == (
        "training changed: its plan stands"
    )
    other = edited(training={"globalBatchSize": p.global_batch_size * 2, "microBatchSize": 1})
    assert plan_stands(spec, other, {"specHashes": spec_hashes(spec)}, lambda: True) is None


def test_an_edit_undone_comes_back_to_the_running_plan() -> None:
    """Before: undoing a refused typo (``allowedRegions: [tokio]``) replaced every pod."""
    typo = edited(allowedRegions=["tokio"])
    assert stands(typo, SPEC) == "the spec is back to the one its pods run: its plan stands"
    assert stands(typo, SPEC, match=False) is not None  # the servers are the ones it runs on
    # undone together with a constraint its servers meet: still what the pods run
    cpu = copy.deepcopy(SPEC["template"])
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "5000"}}
    wider = edited(allowedRegions=["beijing", "rome", "tokyo"])
    assert stands(edited(template=cpu), wider) == (
        "allowedRegions changed and every server of its plan still matches: its plan stands"
    )


def test_constraints_its_servers_still_meet_leave_the_plan_standing() -> None:
    wider = edited(allowedRegions=["beijing", "rome", "tokyo"])
    assert stands(SPEC, wider) == (
        "allowedRegions changed and every server of its plan still matches: its plan stands"
    )
    assert stands(SPEC, wider, match=False) is None
    labelled = edited(nodeSelector={"nvidia.com/gpu.present": "true"})
    assert stands(SPEC, labelled) is not None
    # a constraint together with anything the pods are made from: planned again
    assert stands(SPEC, edited(nodeSelector={"a": "b"}, model={"preset": "bert-large"})) is None


def test_what_the_pods_are_made_from_needs_a_new_plan() -> None:
    image = copy.deepcopy(SPEC["template"])
    image["spec"]["containers"][0]["image"] = "trainer:2"
    for after in (
        edited(model={"preset": "bert-large"}),
        edited(training={"globalBatchSize": 256, "microBatchSize": 1}),
        edited(template=image),
        edited(masterPort=29600),
    ):
        assert stands(SPEC, after) is None, after


def test_a_plan_made_before_the_fingerprint_compares_with_the_spec_before() -> None:
    legacy: dict[str, Any] = {}  # status.plan without specHashes
    assert plan_stands(SPEC, edited(priority=3), legacy, lambda: True) is not None
    assert plan_stands(SPEC, edited(model={"preset": "t5-11b"}), legacy, lambda: True) is None


def test_an_edit_is_unhandled_while_kopfs_record_holds_another_spec() -> None:
    """The timer holds off while the update handler has an edit to take. It compares the
    spec kopf recorded with the job's own; kopf's ``build`` of the job, which deep-copied
    the whole job each tick, keeps the spec as it is (checked here, lest kopf change)."""
    import json

    import kopf

    from hulk_operator.lifecycle import DIFFBASE
    from hulk_operator.updates import edit_unhandled

    def job(spec: dict[str, Any], handled: dict[str, Any] | None, plan: bool) -> kopf.Body:
        notes = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}
        if handled is not None:
            record = {"spec": handled, "metadata": {"labels": {"x": "1"}}}
            notes["hulk.dev/last-handled-configuration"] = json.dumps(record)
        body = {
            "apiVersion": "hulk.dev/v1alpha1",
            "kind": "HulkTrainingJob",
            "metadata": {"name": "j", "labels": {"x": "1"}, "annotations": notes},
            "spec": spec,
            "status": {"plan": {"stages": []}} if plan else {},
        }
        return kopf.Body(body)

    for spec in (SPEC, edited(allowedRegions=None), {"model": {}, "template": {}}):
        assert DIFFBASE.build(body=job(spec, None, False)).get("spec") == spec
        assert not edit_unhandled(job(spec, copy.deepcopy(spec), True))
        assert edit_unhandled(job(spec, edited(model={"preset": "gpt3-xl"}), True))
        assert edit_unhandled(job(spec, None, True))  # replaced with its plan kept
        assert not edit_unhandled(job(spec, None, False))  # being created


def test_the_spec_a_plan_was_made_for_is_read_back_only_where_it_matches_the_plan() -> None:
    """``status.plan.podTemplate`` keeps the spec the stage pods are made from, whole; a
    refused job makes its missing pods from it, and is planned again from it when it loses
    a server (it kept the template and port alone), so it must be what the plan's
    fingerprints name."""
    from hulk_operator.entries import planned_pod_spec, pod_source

    plan = {"specHashes": spec_hashes(SPEC), "podTemplate": pod_source(SPEC)}
    assert planned_pod_spec(plan) == SPEC
    port = edited(masterPort=29600)
    assert planned_pod_spec({"specHashes": spec_hashes(port), "podTemplate": pod_source(port)}) == {
        **SPEC,
        "masterPort": 29600,
    }
    # an older operator's record: the template alone, still read
    parts = json.dumps({"template": SPEC["template"]})
    assert planned_pod_spec({**plan, "podTemplate": parts}) == {"template": SPEC["template"]}
    other = edited(template={"spec": {"containers": [{"name": "t", "image": "trainer:2"}]}})
    assert planned_pod_spec({**plan, "podTemplate": pod_source(other)}) is None
    assert planned_pod_spec({**plan, "podTemplate": pod_source(port)}) is None
    assert planned_pod_spec({"specHashes": plan["specHashes"]}) is None  # (an older plan)
    assert planned_pod_spec({**plan, "podTemplate": "{not json"}) is None
    assert planned_pod_spec({**plan, "podTemplate": "[]"}) is None
    assert planned_pod_spec(None) is None


def test_a_generation_nothing_stamps_is_taken_as_an_edit_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search-and-replace that rewrites kopf's record with the spec: no update handler
    runs, and nothing stamps the generation; after EDIT_UNSEEN_S it is taken, once."""
    import kopf

    from hulk_operator import updates

    clock = [100.0]
    monkeypatch.setattr(updates.time, "monotonic", lambda: clock[0])
    memo = kopf.Memo()
    body = kopf.Body({"metadata": {"generation": 3}})
    stale = {"observedGeneration": 2, "conditions": [{"type": "Failed", "observedGeneration": 2}]}
    key = ("ns", "j")
    assert not updates.edit_unseen(key, body, stale, memo)  # first seen now
    clock[0] += updates.EDIT_UNSEEN_S - 1
    assert not updates.edit_unseen(key, body, stale, memo)
    clock[0] += 2
    assert updates.edit_unseen(key, body, stale, memo)
    assert updates.edit_unseen(key, body, stale, memo)  # not yet taken (its taking failed)
    updates.edit_taken(key, 3, memo)
    clock[0] += 60
    assert not updates.edit_unseen(key, body, stale, memo)  # once
    stamped = {"observedGeneration": 3}
    assert not updates.edit_unseen(key, body, stamped, memo)
    by_condition = {"conditions": [{"type": "Planned", "observedGeneration": 3}]}
    assert not updates.edit_unseen(("ns", "k"), body, by_condition, memo)
    clock[0] += 60
    assert not updates.edit_unseen(("ns", "k"), body, by_condition, memo)


@pytest.mark.parametrize(
    ("phase", "edit"),
    [("Failed", {"suspend": True}), ("Failed", {"regrow": {}}), ("Succeeded", {"priority": 3})],
)
def test_an_edit_that_changes_nothing_is_stamped_all_the_same(
    phase: str, edit: dict[str, Any]
) -> None:
    """Before, the update handler's "nothing to do" left the generation unstamped: read as
    an edit kopf never handled, it was taken again 5 s later, and ran a failed job again
    (a review)."""
    import logging

    import kopf

    from hulk_operator import updates

    status = {"phase": phase, "observedGeneration": 4}
    body = kopf.Body({"metadata": {"name": "j", "generation": 5}, "spec": edited(**edit),
                      "status": status})  # fmt: skip
    patch = kopf.Patch()
    updates.hulktrainingjob_update(
        body, "j", "ns", body.status, patch, kopf.Memo(), logging.getLogger("t"),
        SPEC, edited(**edit),
    )  # fmt: skip
    assert dict(patch) == {"status": {"observedGeneration": 5}}
    assert not updates.edit_unseen(("ns", "j"), body, {**status, **patch["status"]}, kopf.Memo())


def recheck_context(snap: Any, nodes: dict[str, Any], told: list[tuple[str, ...]]) -> Any:
    """What ``edits.recheck`` reads of the operator's context: ``snap`` its snapshot, the
    Events it posts appended to ``told``."""
    from types import SimpleNamespace

    from hulk_operator.latencies import Latencies

    async def latencies() -> Latencies:
        return Latencies()

    async def snapshot() -> Any:
        return snap

    def ignore(*_: Any) -> None:
        return None

    placer = SimpleNamespace(
        edit_checked={},
        edit_tried={},
        forget=ignore,
        edit_allowed=ignore,
        held=dict,
        newly_told=lambda *a, **kw: True,
    )
    return SimpleNamespace(
        placer=placer,
        latencies=latencies,
        snapshot=snapshot,
        limit_defaults=(),
        api=None,
        nodes=nodes,
        pods={},
        event=lambda *ev: told.append(ev),
    )


def test_a_refused_edit_allowed_later_leaves_the_job_pending_and_not_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planned again once the cluster allows the edit: Pending, no plan, and Ready=False
    (before, Ready=True AllStagesRunning stood beside Pending until the new plan: a user
    trial), as for an edit allowed at once."""
    import asyncio
    from types import SimpleNamespace

    from placement_helpers import entry

    from hulk_operator import edits
    from hulk_operator import status as st
    from hulk_planner.datasets import paper_jobs

    monkeypatch.setattr(edits, "refusal", lambda *a, **kw: None)  # the cluster allows it now
    monkeypatch.setattr(edits, "unplannable", lambda *a, **kw: None)  # and a plan fits
    told: list[tuple[str, ...]] = []

    ctx = recheck_context(
        SimpleNamespace(held={}, free=lambda e, also=(): [], quotas_for=lambda e: []), {}, told
    )
    conds = st.set_condition([], st.READY, True, "AllStagesRunning", "4/4 stage pods running", 1)
    conds = st.set_condition(conds, st.PLANNED, False, "EditRefused", "refused", 2)
    new = asyncio.run(edits.recheck(ctx, entry(paper_jobs()[2]), {}, conds, 2))  # type: ignore[arg-type]
    assert new["phase"] == st.PENDING and new["plan"] is None
    # nothing of the old plan is shown beside Pending (kubectl get's columns; a user trial)
    assert (new["numStages"], new["numNodes"], new["regions"]) == (0, 0, "")
    assert new["predictedIterationSeconds"] is None
    ready = st.condition(new, st.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "NotPlanned")
    assert ready["observedGeneration"] == 2
    assert [e[1] for e in told] == ["SpecChanged"]


def test_a_refusal_says_what_would_let_the_edit_through() -> None:
    """An edit that fits nowhere is not told it is planned "once the cluster allows it"
    (a user trial read that as waiting would do); one that waits for room is; an invalid
    one is told to fix the spec."""
    from hulk_operator.edits import KEPT_NOWHERE, KEPT_RUNNING, KEPT_WAITING, Refusal

    nowhere = Refusal("fits nowhere: needs 9 TiB of GPU memory, ...", waits=True)
    assert nowhere.message.endswith(KEPT_NOWHERE) and "allows it" not in nowhere.message
    room = Refusal("the servers free now cannot hold the edited job: ...", waits=True)
    assert room.message.endswith(KEPT_WAITING)
    assert Refusal("spec.model.layers: ...", waits=False).message.endswith(KEPT_RUNNING)


def test_a_waiting_edits_refusal_is_posted_once_per_cause_in_ten_minutes() -> None:
    """As other jobs came and went, a waiting edit's refusal flipped between two causes
    ("no plan fits" and "cannot hold") and each flip was a Warning Event (a user trial):
    each cause is posted once per ``TELL_AGAIN_S``, and afresh once the job is pending."""
    from dataclasses import replace

    from placement_helpers import entry, snap

    from hulk_operator.placement import TELL_AGAIN_S, Placer
    from hulk_planner.api import plan
    from hulk_planner.datasets import paper_jobs

    placer = Placer(plan)
    e = entry(paper_jobs()[2], plan_nodes=frozenset({"rome-41"}))
    key = e.key
    assert placer.newly_told(key, "no plan fits", 0.0, edit=True)
    assert placer.newly_told(key, "cannot hold", 2.0, edit=True)
    assert not placer.newly_told(key, "no plan fits", 5.0, edit=True)
    placer.prune(snap([e]).jobs)  # (running: kept)
    assert not placer.newly_told(key, "cannot hold", 10.0, edit=True)
    placer.prune(snap([replace(e, plan_nodes=frozenset())]).jobs)  # pending: told afresh
    assert placer.newly_told(key, "cannot hold", 11.0, edit=True)
    assert placer.newly_told(key, "no plan fits", 12.0, edit=True)
    assert not placer.newly_told(key, "no plan fits", 13.0, edit=True)
    assert placer.newly_told(key, "no plan fits", 13.0 + TELL_AGAIN_S, edit=True)


def test_a_waiting_edits_new_figures_alone_change_its_condition_and_post_no_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As other jobs come and go, the figures of a waiting edit's refusal move: its Planned
    condition says the new ones, and no Event is posted for them (a review: a first
    version posted the cause again at the first new figures); a new cause is."""
    import asyncio
    from types import SimpleNamespace

    from placement_helpers import entry

    from hulk_operator import edits
    from hulk_operator import status as st
    from hulk_operator.edits import Refusal
    from hulk_planner.datasets import paper_jobs

    said = "the servers free now cannot hold the edited job: it needs 2022 GiB, the 9 server(s)"
    now = {"why": said.replace("9 server", "8 server")}
    monkeypatch.setattr(edits, "refusal", lambda *a, **kw: None)
    monkeypatch.setattr(edits, "unplannable", lambda *a, **kw: Refusal(now["why"], True))
    told: list[tuple[str, ...]] = []
    ctx = recheck_context(
        SimpleNamespace(held={}, free=lambda e, also=(): [], quotas_for=lambda e: []), {}, told
    )
    e = entry(paper_jobs()[2], plan_nodes=frozenset({"rome-41"}))
    conds = st.set_condition([], st.PLANNED, False, "EditRefused", Refusal(said, True).message, 2)
    new = asyncio.run(edits.recheck(ctx, e, {}, conds, 2))
    planned = st.condition(new, st.PLANNED)
    assert planned is not None and "the 8 server(s)" in planned["message"]
    assert told == []  # (its figures alone)
    now["why"] = "no plan fits the edited job on the 16 server(s) free for it now: ..."
    ctx.placer.edit_checked.clear()
    asyncio.run(edits.recheck(ctx, e, {}, new["conditions"], 2))
    assert [t[1] for t in told] == ["EditRefused"]  # a new cause


def test_a_refused_template_edit_allowed_later_keeps_its_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A template edit that asks nothing more of the servers (an image), refused by the
    cluster (a policy) and allowed later, keeps its plan as one allowed at once does: the
    plan's record of its spec follows the edit, Planned says so, and no new plan is made.
    Before, it was planned from scratch (a review). Where a server of the plan would take
    no new pod (cordoned), it is planned again as before."""
    import asyncio
    from dataclasses import replace

    from placement_helpers import entry, nodes

    from hulk_operator import edits
    from hulk_operator import status as st
    from hulk_operator.entries import pod_source
    from hulk_operator.latencies import Latencies
    from hulk_operator.snapshot import Snapshot
    from hulk_planner.datasets import paper_jobs

    monkeypatch.setattr(edits, "refusal", lambda *a, **kw: None)  # the policy is gone
    monkeypatch.setattr(edits, "unplannable", lambda *a, **kw: None)
    cluster = nodes()
    own = frozenset(sorted(cluster)[:2])
    e = entry(paper_jobs()[2], plan_nodes=own)
    image = copy.deepcopy(SPEC)
    image["template"]["spec"]["containers"][0]["image"] = "trainer:2"
    status = {"plan": {"specHashes": spec_hashes(SPEC), "podTemplate": pod_source(SPEC)}}
    told: list[tuple[str, ...]] = []

    def run(nodes_now: dict[str, Any]) -> dict[str, Any]:
        snap = Snapshot(nodes_now, Latencies(), {e.key: e}, dict.fromkeys(own, e.key))
        ctx = recheck_context(snap, nodes_now, told)
        conds = st.set_condition([], st.PLANNED, False, "EditRefused", "refused", 2)
        return asyncio.run(edits.recheck(ctx, e, image, conds, 2, status))  # type: ignore[arg-type]

    new = run(cluster)
    assert new["plan"] == {"specHashes": spec_hashes(image), "podTemplate": pod_source(image)}
    assert "phase" not in new  # (no Pending: its pods are made again on the same servers)
    planned = st.condition(new, st.PLANNED)
    assert planned is not None and (planned["status"], planned["reason"]) == ("True", "Planned")
    assert edits.TEMPLATE_STANDS in planned["message"]
    assert [ev[1] for ev in told] == ["SpecChanged"]
    first = sorted(own)[0]
    cordoned = {**cluster, first: replace(cluster[first], unschedulable=True)}
    again = run(cordoned)  # a server of its plan takes no new pod: planned from scratch
    assert again["phase"] == st.PENDING and again["plan"] is None


def test_an_edit_no_plan_fits_on_the_free_servers_waits_and_is_tried_once_a_change() -> None:
    """The edited job is planned on its own servers and the free ones before its pods go:
    where their links make no pipeline (here, every pair reported unreachable), the edit
    waits (a Refusal of the cluster's) though their GPU memory would hold it. Before, only
    the memory was counted, and such an edit removed the running job's pods (a user
    trial). It is planned again only when what it was tried on changed."""
    from dataclasses import replace
    from itertools import combinations

    from placement_helpers import entry, nodes

    from hulk_operator.edits import unplannable
    from hulk_operator.fit import no_room_now
    from hulk_operator.latencies import Latencies
    from hulk_operator.placement import Placer
    from hulk_operator.snapshot import Snapshot
    from hulk_planner.api import plan
    from hulk_planner.cost import BYTES_PER_PARAM, MEMORY_USABLE, memory_need_bytes
    from hulk_planner.model import Job, ModelSpec

    cluster = nodes()
    rome = sorted(n for n, i in cluster.items() if i.server and i.server.region == "rome")
    memory = [cluster[n].server.memory_bytes * MEMORY_USABLE for n in rome]  # type: ignore[union-attr]
    parameters = int((max(memory) + sum(memory)) / 2 / BYTES_PER_PARAM)  # several servers'
    big = Job("big", ModelSpec(parameters, 96, 12288, 2048), 256, 1)
    assert max(memory) < memory_need_bytes(big) < sum(memory)
    e = entry(big, allowed_regions=("rome",), plan_nodes=frozenset(rome[:2]))
    held = {n: e.key for n in rome[:2]}
    assert no_room_now(e, cluster, held) is None  # the memory alone would let it through
    calls: list[int] = []

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return plan(*args, **kw)

    placer = Placer(counting, batch_window_s=0.0)
    cut = frozenset(frozenset(p) for p in combinations(rome, 2))
    apart = Snapshot(cluster, Latencies(unreachable=cut), {e.key: e}, held)
    refused = unplannable(placer, e, apart)  # no pipeline, were every server free: said so
    assert refused is not None and refused.waits, refused
    assert refused.why.startswith(
        f"fits nowhere: no plan fits the edited job on the {len(rome)} server(s) it may use, "
        "even were all of them free: "
    ), refused.why
    assert refused.why.endswith("waiting for other jobs to end does not help (fix the spec, or "
                                "add servers)")  # fmt: skip
    assert len(calls) == 2  # (on the free servers, then on all)
    assert unplannable(placer, e, apart) == refused and len(calls) == 2  # (not tried again)
    assert placer.edits_waiting(apart) == set()  # (no round keeps servers for it)
    # linked, but another job holds the rest: it waits for room (a plan on all would fit)
    taken = replace(apart, latencies=Latencies(), held=held | {n: ("ml", "x") for n in rome[2:]})
    refused = unplannable(placer, e, taken)
    assert refused is not None and refused.why.startswith(
        "the servers free now cannot hold the edited job: it needs "
    ), refused.why
    assert placer.edits_waiting(taken) == {e.key}  # the rounds keep its servers from others
    linked = replace(apart, latencies=Latencies())  # the links back, the servers free: it fits
    assert unplannable(placer, e, linked) is None


def test_a_template_edit_that_asks_the_same_of_the_servers_leaves_the_plan_standing() -> None:
    """An image, command or variable edit: the plan stands and the stage pods are made
    again from the new template on the same servers, as a Deployment's rollout keeps its
    pods' shape (before, planned afresh: a trial's image edit took 24 stages and 74.6 s a
    step to 16 and 79.4 s, nothing lost). What the template asks of the servers changed:
    planned again."""
    from hulk_operator.edits import TEMPLATE_STANDS
    from hulk_operator.entries import pod_source

    plan = {"specHashes": spec_hashes(SPEC), "podTemplate": pod_source(SPEC)}

    def with_container(**fields: Any) -> dict[str, Any]:
        spec = copy.deepcopy(SPEC)
        spec["template"]["spec"]["containers"][0].update(fields)
        return spec

    def with_pod(**fields: Any) -> dict[str, Any]:
        spec = copy.deepcopy(SPEC)
        spec["template"]["spec"].update(fields)
        return spec

    for alike in (
        with_container(image="trainer:2"),
        with_container(env=[{"name": "LR", "value": "0.1"}], command=["python", "t.py"]),
    ):
        assert plan_stands(SPEC, alike, plan, lambda: True) == TEMPLATE_STANDS
    for asks_more in (
        with_container(resources={"requests": {"cpu": "4"}}),
        with_container(resources={"limits": {"nvidia.com/gpu": "2"}}),
        with_pod(tolerations=[{"key": "spot", "operator": "Exists"}]),
        with_pod(nodeSelector={"disk": "ssd"}),
    ):
        assert plan_stands(SPEC, asks_more, plan, lambda: True) is None, asks_more
    # the model changed too: planned again
    both = with_container(image="trainer:2") | {"model": {"preset": "bert-large"}}
    assert plan_stands(SPEC, both, plan, lambda: True) is None
    # a plan that keeps no record of its spec (an older operator's): planned again
    assert plan_stands(SPEC, with_container(image="x"), {"specHashes": plan["specHashes"]},
                       lambda: True) is None  # fmt: skip


def test_a_template_edit_keeps_its_plan_only_where_every_server_takes_a_new_pod() -> None:
    """Its pods are all made again: a server of the plan that is cordoned (its stage runs
    on: the default) or too full takes none, and the new pod would wait, be taken as stuck
    and the job re-planned after all (a review): such an edit is planned as any other."""
    from dataclasses import replace

    from placement_helpers import entry, nodes

    from hulk_operator.edits import pods_fit_again
    from hulk_operator.latencies import Latencies
    from hulk_operator.snapshot import Snapshot
    from hulk_planner.datasets import paper_jobs

    cluster = nodes()
    own = frozenset(sorted(cluster)[:2])
    e = entry(paper_jobs()[2], plan_nodes=own)
    held = dict.fromkeys(own, e.key)
    assert pods_fit_again(e, Snapshot(cluster, Latencies(), {e.key: e}, held))
    first = sorted(own)[0]
    cordoned = {**cluster, first: replace(cluster[first], unschedulable=True)}
    assert not pods_fit_again(e, Snapshot(cordoned, Latencies(), {e.key: e}, held))
    assert not pods_fit_again(replace(e, plan_nodes=frozenset()), Snapshot(cluster, Latencies(),
                              {e.key: e}, held))  # fmt: skip
    # a CPU quota lowered to 15 under its two pods' 16 (8 CPUs each): it holds a plan of
    # one server, not a new pod on each of its two; made again only where it holds both
    cpu = replace(e, pod_quota=(("requests.cpu", 8.0),))
    counted = {e.key: {"requests.cpu": 16.0}}
    lowered = Snapshot(cluster, Latencies(), {e.key: cpu}, held, counted=counted,
                       quotas={e.key[0]: [("cpu", {"requests.cpu": -1.0})]})  # fmt: skip
    assert not pods_fit_again(cpu, lowered)
    assert pods_fit_again(
        cpu, replace(lowered, quotas={e.key[0]: [("cpu", {"requests.cpu": 0.0})]})
    )


def test_a_suspended_job_says_so_at_once_and_a_resumed_one_says_it_waits() -> None:
    """Suspending a running job showed phase Pending beside Ready AllStagesRunning for a
    moment (a waiting blip in hulk_job_waiting), and a resumed job Pending beside Planned
    and Ready "Suspended" (a trial): Suspended at once; Resumed until planned."""
    import asyncio
    import logging
    from dataclasses import replace
    from types import SimpleNamespace

    import kopf
    from placement_helpers import entry

    from hulk_operator import status as st
    from hulk_operator import updates
    from hulk_operator.reconcile import reconcile
    from hulk_planner.datasets import paper_jobs

    conds = st.set_condition([], st.READY, True, "AllStagesRunning", "4/4 stage pods running", 4)
    conds = st.set_condition(conds, st.PLANNED, True, "Planned", "4 stage(s)", 4)
    status = {"phase": "Running", "observedGeneration": 4, "conditions": conds,
              "plan": {"specHashes": spec_hashes(SPEC)}}  # fmt: skip
    body = kopf.Body({"metadata": {"name": "j", "namespace": "ns", "generation": 5},
                      "spec": edited(suspend=True), "status": status})  # fmt: skip
    patch = kopf.Patch()
    memo = kopf.Memo(placer=SimpleNamespace(forget=lambda *_: None))
    updates.hulktrainingjob_update(
        body, "j", "ns", body.status, patch, memo, logging.getLogger("t"), SPEC,
        edited(suspend=True),
    )  # fmt: skip
    new = patch["status"]
    assert new["phase"] == st.SUSPENDED and new["plan"] is None and new["numStages"] == 0
    for kind in (st.READY, st.PLANNED):
        c = st.condition(new, kind)
        assert c is not None and (c["status"], c["reason"], c["observedGeneration"]) == (
            "False", "Suspended", 5
        ), c  # fmt: skip
    # Suspended True beside that phase at once (it read False until the timer ran: a trial)
    c = st.condition(new, st.SUSPENDED_COND)
    assert c is not None and (c["status"], c["reason"]) == ("True", "JobSuspended"), c
    assert c["message"].endswith("its stage pods are being removed"), c
    # the timer then removes them: its Event, and how many it removed, said once
    told: list[tuple[str, ...]] = []
    gone: list[str] = []
    ctx = SimpleNamespace(
        event=lambda *ev: told.append(ev), pods={}, placer=SimpleNamespace(forget=gone.append),
        metrics=SimpleNamespace(set_predicted=lambda *_: None),
    )  # fmt: skip
    asleep = replace(entry(paper_jobs()[2]), suspended=True)
    timer = asyncio.run(reconcile(ctx, asleep, {"spec": {}}, new))  # type: ignore[arg-type]
    assert [e[1] for e in told] == ["Suspended"] and gone == [asleep.key]
    c = st.condition(timer, st.SUSPENDED_COND)
    assert c is not None and c["status"] == "True" and "being removed" not in c["message"], c
    assert c["lastTransitionTime"] == st.condition(new, st.SUSPENDED_COND)["lastTransitionTime"]
    again = asyncio.run(reconcile(ctx, asleep, {"spec": {}}, timer))  # type: ignore[arg-type]
    assert len(told) == 1 and st.condition(again, st.SUSPENDED_COND) == c  # said once
    # resumed: Pending, and Planned and Ready say it waits for the round
    told.clear()
    suspended = st.set_condition(new["conditions"], st.SUSPENDED_COND, True, "JobSuspended",
                                 "spec.suspend is true", 5)  # fmt: skip
    resumed = {"phase": st.SUSPENDED, "conditions": suspended}
    job = entry(paper_jobs()[2])
    out = asyncio.run(reconcile(ctx, job, {"spec": {}}, resumed))  # type: ignore[arg-type]
    assert out["phase"] == st.PENDING and [e[1] for e in told] == ["Resumed"]
    for kind in (st.READY, st.PLANNED, st.SUSPENDED_COND):
        c = st.condition(out, kind)
        assert c is not None and (c["status"], c["reason"]) == ("False", "Resumed"), c
    # resumed before the timer saw it suspended: the update handler's phase alone says it
    # (as an older operator's update handler wrote it: no Suspended condition)
    bare = [c for c in new["conditions"] if c["type"] != st.SUSPENDED_COND]
    quick = {"phase": st.SUSPENDED, "conditions": bare}
    again = asyncio.run(reconcile(ctx, job, {"spec": {}}, quick))  # type: ignore[arg-type]
    assert again["phase"] == st.PENDING and [e[1] for e in told] == ["Resumed", "Resumed"]
    assert (st.condition(again, st.PLANNED) or {}).get("reason") == "Resumed"


def test_a_template_edit_that_names_another_trainer_container_plans_again() -> None:
    """A template of a 2-GPU container and a 1-GPU one, edited to name the other trainer
    (kubectl's default-container annotation): each stage pod asks the same 3 GPUs of its
    server, but its stage now trains on 1 (``PET_NPROC_PER_NODE``), as the plan counts
    it: planned again. Before, the plan stood, its stages' layers laid out for 2 GPUs (a
    review). Edits that move GPUs between containers change what the containers ask, and
    were planned again already."""
    from hulk_operator.edits import TEMPLATE_STANDS
    from hulk_operator.entries import pod_source
    from hulk_operator.manifests import DEFAULT_CONTAINER

    def asks(name: str, gpus: int) -> dict[str, Any]:
        return {"name": name, "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}

    def trained_by(name: str, image: str = "x") -> dict[str, Any]:
        spec = copy.deepcopy(SPEC)
        spec["template"] = {
            "metadata": {"annotations": {DEFAULT_CONTAINER: name}},
            "spec": {"containers": [{**asks("a", 2), "image": image}, asks("b", 1)]},
        }
        return spec

    before = trained_by("a")
    plan = {"specHashes": spec_hashes(before), "podTemplate": pod_source(before)}
    assert plan_stands(before, trained_by("b"), plan, lambda: True) is None
    assert plan_stands(before, trained_by("a", image="y"), plan, lambda: True) == TEMPLATE_STANDS
    split = copy.deepcopy(before)
    split["template"]["spec"]["containers"][0] = asks("a", 1)  # (the pod asks 2 now)
    assert plan_stands(before, split, plan, lambda: True) is None


def test_a_template_edit_keeps_the_plan_only_while_the_run_goes_on() -> None:
    """``plan_stands``, which the update handler, ``edits.recheck`` and the ``--kubeconfig``
    preview all ask: a template edit that asks nothing more of the servers keeps the plan,
    but not once a stage pod of the run exited 0 (no pod of it is made again). The preview
    judged it on its own before, and said the plan stood where the operator planned again."""
    from hulk_operator import status as st
    from hulk_operator.edits import TEMPLATE_STANDS
    from hulk_operator.entries import pod_source

    image = copy.deepcopy(SPEC)
    image["template"]["spec"]["containers"][0]["image"] = "trainer:2"
    plan = {"specHashes": spec_hashes(SPEC), "podTemplate": pod_source(SPEC)}
    assert plan_stands(SPEC, image, plan, lambda: True) == TEMPLATE_STANDS
    assert plan_stands(SPEC, image, plan, lambda: True, run_ended=True) is None
    # other edits that keep the plan keep it all the same
    assert plan_stands(SPEC, edited(priority=5), plan, lambda: True, run_ended=True) == (
        "priority changed: its plan stands"
    )
    # a pod gone since it exited 0 counts by the status's record (what the preview reads)
    assert st.exited_0({st.SUCCEEDED_PODS: ["j-0-0-abcde"]}, ()) == ["j-0-0-abcde"]


def test_a_template_edit_of_a_run_a_stage_pod_of_which_exited_0_plans_the_job_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A template edit that asks nothing more of the servers (an image) on a job a stage
    pod of which exited 0: its run has ended, and no pod of it is made again
    (``pod_step``), so keeping the plan to make its pods again from the new template
    made none: the SpecChanged Event said they were made again, the old run finished as
    Succeeded and the edit was never run (a review). It is planned again instead, as a
    finished job's edit is, at once (the update handler) and once a refusal is lifted
    (``edits.recheck``)."""
    import asyncio
    import logging
    from types import SimpleNamespace

    import kopf
    from placement_helpers import entry, nodes

    from hulk_operator import edits, updates
    from hulk_operator import status as st
    from hulk_operator.context import PodEntry
    from hulk_operator.entries import pod_source
    from hulk_operator.latencies import Latencies
    from hulk_operator.snapshot import Snapshot
    from hulk_planner.datasets import paper_cluster, paper_jobs
    from hulk_planner.model import JobPlan, Stage

    monkeypatch.setattr(edits, "refusal", lambda *a, **kw: None)
    monkeypatch.setattr(edits, "unplannable", lambda *a, **kw: None)
    cluster = nodes()
    first, second = "beijing-0", "beijing-1"
    own = frozenset((first, second))
    e = entry(paper_jobs()[2], plan_nodes=own)
    snap = Snapshot(cluster, Latencies(), {e.key: e}, dict.fromkeys(own, e.key))
    monkeypatch.setattr(updates, "snapshot_now", lambda *a: snap)
    monkeypatch.setattr(updates, "latencies_now", lambda *a: Latencies())
    said: list[str] = []
    claimed: list[str] = []  # the placer's calls
    monkeypatch.setattr(kopf, "info", lambda body, reason, message: said.append(message))
    image = copy.deepcopy(SPEC)
    image["template"]["spec"]["containers"][0]["image"] = "trainer:2"
    plan = JobPlan(e.key[1], (Stage((0, 24), (first,)), Stage((24, 48), (second,))), 8)
    made = {
        **st.plan_status(plan, paper_cluster(), "hulk"),
        "specHashes": spec_hashes(SPEC),
        "podTemplate": pod_source(SPEC),
    }
    pods = [PodEntry("p-0", first, "Running", False, False),
            PodEntry("p-1", second, "Succeeded", False, False)]  # fmt: skip

    def update(pods: list[PodEntry], status: dict[str, Any]) -> dict[str, Any]:
        status = {"phase": "Running", "plan": made, **status}
        meta = {"name": e.key[1], "namespace": e.key[0], "generation": 2}
        kind = {"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob"}
        body = kopf.Body({**kind, "metadata": meta, "spec": image, "status": status})
        patch = kopf.Patch()
        placer = SimpleNamespace(forget=lambda *_: claimed.append("forget"),
                                 edit_allowed=lambda *_: claimed.append("edit_allowed"),
                                 held=dict)  # fmt: skip
        updates.hulktrainingjob_update(
            body, e.key[1], e.key[0], body.status, patch, kopf.Memo(placer=placer, api=None),
            logging.getLogger("t"), SPEC, image, hulk_pods={e.key: pods},
            hulk_nodes={n: [i] for n, i in cluster.items()},
        )  # fmt: skip
        return dict(patch["status"])

    assert update(pods[:1], {})["plan"] == {  # no pod exited 0: the plan stands
        "specHashes": spec_hashes(image), "podTemplate": pod_source(image)
    }  # fmt: skip
    assert said == [edits.TEMPLATE_STANDS]
    for seen, status in ((pods, {}), (pods[:1], {st.SUCCEEDED_PODS: ["p-9"]})):
        claimed.clear()
        again = update(seen, status)  # exited 0: seen now, or recorded and gone since
        assert again["phase"] == st.PENDING and again["plan"] is None, again
        assert again[st.SUCCEEDED_PODS] is None and again["stageRestarts"] == 0
        # a running job's edit: its servers claimed for the rounds until it is seen pending
        # (before, the run's end read as a finished job's, and nothing was claimed)
        assert claimed == ["edit_allowed"], claimed
    told: list[tuple[str, ...]] = []
    ctx = recheck_context(snap, cluster, told)
    ctx.pods = {e.key: pods}
    conds = st.set_condition([], st.PLANNED, False, "EditRefused", "refused", 2)
    lifted = asyncio.run(edits.recheck(ctx, e, image, conds, 2, {"plan": made}))
    assert lifted["phase"] == st.PENDING and lifted["plan"] is None, lifted
