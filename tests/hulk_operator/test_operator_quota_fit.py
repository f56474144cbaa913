"""Plans within the namespaces' ResourceQuotas (``quota_fit``), the real planner, in memory."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from placement_helpers import entry, snap, templated

from hulk_operator import GPU
from hulk_operator.entries import object_entry
from hulk_operator.manifests import desired_pods
from hulk_operator.quotas import QUOTA_GPU, limit_defaults, quota_usage, summed, with_defaults
from hulk_operator.rounds import plan_pending
from hulk_operator.snapshot import Snapshot
from hulk_planner.api import plan
from hulk_planner.datasets import paper_cluster, paper_jobs


def test_a_quota_no_plan_fits_is_named_even_when_the_smaller_plan_fails() -> None:
    """Before, when the job did not fit the servers the quota left, the message named only
    the planner's reason (GPU memory) and not the quota that cut the servers."""
    opt = entry(paper_jobs()[0])  # OPT-175B: many servers
    # (5 pods: as many as it takes at the least, on the servers with the most memory)
    view = replace(snap([opt]), quotas={"ml": [("five", {"pods": 5.0})]})
    d = plan_pending(view, plan)[opt.key]
    assert d.job_plan is None
    assert d.reason.startswith(
        "namespace ml's ResourceQuota five leaves 5 pod(s) (pods); the plan on the free "
        "servers needs "
    ), d.reason
    assert ", and none fits within it (" in d.reason


def test_a_quota_for_one_pod_finds_the_one_server_that_holds_the_model() -> None:
    """Before, the sets of servers tried within a quota were the plan's own and the ones
    with the most GPUs: T5-11B under a quota of one pod stayed Pending ("needs 166 GiB of
    GPU memory") while a server holding it was free (a user trial)."""
    t5 = entry(paper_jobs()[1])
    # as in the trial, most servers are taken: of the free ones, the one with the most GPUs
    # (paris-40: 11 TITAN Xp, 132 GiB) has too little memory for the model
    # (and Rome's five, over which the job runs a pipeline without the quota)
    free = {"paris-40", "neimeng-5"} | {s.name for s in paper_cluster().servers if s.gpus <= 4}
    free |= {s.name for s in paper_cluster().servers if s.region == "Rome"}
    held = {s.name: ("x", "y") for s in paper_cluster().servers if s.name not in free}
    view = replace(snap([t5], held), quotas={"ml": [("one", {"pods": 1.0})]})
    d = plan_pending(view, plan)[t5.key]
    assert d.job_plan is not None and len(d.job_plan.nodes) == 1, d.reason
    without = len(plan_pending(snap([t5], held), plan)[t5.key].nodes)
    assert without > 1
    assert (
        d.note
        == f"within namespace ml's ResourceQuota one (pods): 1 server(s), {without} without it"
    )


def test_a_job_a_quota_shrinks_never_takes_a_server_its_round_gave_another() -> None:
    """Before, the servers tried within a quota came from the whole group's cluster, those
    just given to the group's other jobs included: one round gave a server to two jobs."""
    jobs = [entry(j, ns="free") for j in paper_jobs()[2:4]]
    jobs.append(entry(paper_jobs()[1], ns="tight"))
    for quota in ({"pods": 8.0}, {QUOTA_GPU: 32.0}, {"pods": 3.0}):
        view = replace(snap(jobs), quotas={"tight": [("q", quota)]})
        placed = [d.nodes for d in plan_pending(view, plan).values() if d.job_plan]
        assert len(placed) == 3, quota
        assert sum(map(len, placed)) == len(frozenset().union(*placed)), (quota, placed)


def test_pods_cpu_and_memory_quotas_are_planned_within_across_a_namespaces_jobs() -> None:
    """Before, only a GPU quota was: a quota on pods or CPU refused the stage pods after
    the plan was made, and the job held its servers, PodsForbidden (a user trial)."""
    tmpl = {
        "spec": {
            "containers": [
                {"name": "t", "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}}}
            ]
        }
    }
    jobs = [
        templated(entry(j, allowed_regions=("berlin",)), tmpl["spec"]) for j in paper_jobs()[2:4]
    ]
    assert dict(jobs[0].pod_quota) == {
        "pods": 1,
        "count/pods": 1,
        "requests.cpu": 2,
        "cpu": 2,
        "requests.memory": 2**30,
        "memory": 2**30,
        "limits.memory": 2**30,
    }

    def decide(quota: dict[str, float]) -> dict[Any, Any]:
        view = replace(snap(jobs), quotas={"ml": [("q", quota)]})
        return plan_pending(view, plan)

    free = decide({})
    assert sum(len(d.job_plan.nodes) for d in free.values() if d.job_plan) > 2
    for quota, most in (({"pods": 2}, 2), ({"requests.cpu": 5}, 2), ({"memory": 2.5 * 2**30}, 2)):
        out = decide(quota)
        placed = [d for d in out.values() if d.job_plan]
        assert placed, quota
        assert sum(len(d.job_plan.nodes) for d in placed) <= most, quota


def test_a_limitranges_defaults_count_toward_the_quota_for_a_template_without_requests() -> None:
    """The usual multi-tenant namespace: a quota on requests.cpu, and a LimitRange that
    gives containers without requests a default. Before, a template that set none counted
    as asking no CPU, and the plan's extra pods were refused (PodsForbidden)."""
    lr = {
        "spec": {
            "limits": [
                {"type": "Container", "defaultRequest": {"cpu": "1"}, "default": {"cpu": "2"}},
                {"type": "Container", "max": {GPU: "8"}, "default": {GPU: "8"}},
            ]
        }
    }
    given = limit_defaults(lr)
    assert given == ({"cpu": "1"}, {"cpu": "2"})  # GPUs aside: Hulk sets a stage pod's
    assert limit_defaults({"spec": {"limits": [{"type": "Pod", "max": {"cpu": "4"}}]}}) is None
    spec = {
        "containers": [
            {"name": "bare"},
            {"name": "limited", "resources": {"limits": {"cpu": "3"}}},
            {"name": "asks", "resources": {"requests": {"cpu": "500m"}}},
        ]
    }
    filled = [c["resources"] for c in with_defaults(spec, [given])["containers"]]
    assert filled == [
        {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
        {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}},  # a limit is its own request
        {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}},
    ]
    tmpl = {"containers": [{"name": "t"}]}
    gpt = templated(entry(paper_jobs()[2], allowed_regions=("berlin",)), tmpl)
    quotas = {"ml": [("cpu", {"requests.cpu": 2.0})]}
    # without a default, Kubernetes refuses every pod: no servers held, the fix named
    bare = plan_pending(replace(snap([gpt]), quotas=quotas), plan)[gpt.key]
    assert bare.job_plan is None and "set resources.requests.cpu, and spec.template's t " in (
        bare.reason
    )
    view = replace(snap([gpt]), quotas=quotas, limit_defaults={"ml": [("lr", *given)]})
    assert dict(view.pod_quota(gpt))["requests.cpu"] == 1
    d = plan_pending(view, plan)[gpt.key]
    assert d.job_plan is not None and len(d.job_plan.nodes) <= 2


def test_a_plans_quota_need_is_what_its_stage_pods_count() -> None:
    """The planner's arithmetic (pods x the template's usage + each server's GPUs) against
    the usage of the very pods the operator would create, as Kubernetes counts it."""
    template = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
            "containers": [
                {
                    "name": "a",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "1Gi"},
                    },
                },
                {"name": "b", "resources": {"limits": {"cpu": "250m"}}},
            ],
        }
    }
    body = {
        "apiVersion": "hulk.dev/v1alpha1",
        "kind": "HulkTrainingJob",
        "metadata": {"name": "gpt2-xl"},
        "spec": {"model": {"preset": "gpt2-xl"}, "template": template},
    }
    e = replace(object_entry(body, "ml"), plan_nodes=frozenset())
    d = plan_pending(snap([e]), plan)[e.key]
    assert d.job_plan is not None and d.cluster is not None
    pods = desired_pods(
        job=e.key[1],
        namespace="ml",
        uid="u",
        template=template,
        job_plan=d.job_plan,
        gpus={n: d.cluster.server(n).gpus for n in d.job_plan.nodes},
    )
    counted = summed(quota_usage(p["spec"]) for p in pods.values())
    assert f"limits.{GPU}" not in counted  # Kubernetes counts no extended resource's limits
    assert snap([e]).quota_need(e, d) == pytest.approx(counted)
    n = len(pods)
    assert counted["requests.cpu"] == pytest.approx(4 * n)  # the init container's 4 > 0.75
    assert counted["limits.cpu"] == pytest.approx(1.25 * n)
    assert counted["limits.ephemeral-storage"] == 2**30 * n


def test_a_job_is_planned_within_its_namespaces_gpu_quota() -> None:
    """Before, the plan ignored the quota: the quota refused the stage pods and the job held
    its servers, which other namespaces' jobs needed (a multi-tenant user trial)."""
    gpt = entry(paper_jobs()[2], ns="team-a", allowed_regions=("berlin",))
    base = snap([gpt])
    free = plan_pending(base, plan)[gpt.key]
    assert free.job_plan is not None
    gpus = {n: free.cluster.server(n).gpus for n in free.job_plan.nodes}  # type: ignore[union-attr]
    need = sum(gpus.values())
    assert len(gpus) > 1, gpus  # the job takes several servers when it may

    def decide(left: float) -> Any:
        quotas = {"team-a": [("gpus", {QUOTA_GPU: left}), ("loose", {QUOTA_GPU: 10_000.0})]}
        view = Snapshot(base.nodes, base.latencies, base.jobs, {}, quotas=quotas)
        return plan_pending(view, plan)[gpt.key]

    roomy = decide(need)
    assert roomy.job_plan is not None
    # a quota below the plan: planned again on the first servers within it
    smaller = decide(need - 1)
    assert smaller.job_plan is not None, smaller.reason
    used = sum(smaller.cluster.server(n).gpus for n in smaller.job_plan.nodes)
    assert used <= need - 1
    # a quota no server fits: unplaced, saying which quota and how much, holding nothing
    tight = decide(min(gpus.values()) - 1)
    assert tight.job_plan is None
    assert tight.reason.startswith(
        f"namespace team-a's ResourceQuota gpus leaves {min(gpus.values()) - 1:g} "
        f"nvidia.com/gpu (requests.nvidia.com/gpu); one stage pod needs {min(gpus.values())} "
        "nvidia.com/gpu (requests.nvidia.com/gpu)"
    ), tight.reason
    assert tight.reason.endswith(": raise the quota, or free what the namespace's other pods hold")
    # another namespace is not limited by it
    other = entry(paper_jobs()[2], ns="team-b", allowed_regions=("berlin",))
    zero = {QUOTA_GPU: 0.0}
    view = Snapshot(
        base.nodes, base.latencies, {other.key: other}, {}, quotas={"team-a": [("gpus", zero)]}
    )
    assert plan_pending(view, plan)[other.key].job_plan is not None


def test_a_job_is_planned_within_the_scoped_quotas_that_count_its_pods() -> None:
    """Before, a scoped quota was not planned within: a PriorityClass quota on GPUs (a
    common multi-tenant rule) refused the stage pods after planning (PodsForbidden). A job
    of that class is planned within it now; a job of another class is not held to it."""
    selector = {"PriorityClass": ("In", ("hi",))}
    scopes = tuple((k, op, v) for k, (op, v) in selector.items())
    high = replace(entry(paper_jobs()[2]), pod_facts=(False, "hi", False))
    low = replace(high, key=("ml", "low"), pod_facts=(False, "lo", False))
    free = plan_pending(snap([high]), plan)[high.key]
    least = float(min(s.gpus for s in free.cluster.servers))  # the quota: too few for it
    assert free.job_plan is not None and free.cluster is not None
    assert sum(free.cluster.server(n).gpus for n in free.nodes) > least
    scoped = {"ml": [("hi-gpus", {QUOTA_GPU: least}, scopes)]}
    got = plan_pending(replace(snap([high]), scoped_quotas=scoped), plan)[high.key]
    assert got.job_plan is not None and len(got.nodes) == 1, got.reason
    assert "within namespace ml's ResourceQuota hi-gpus" in got.note
    other = plan_pending(replace(snap([low]), scoped_quotas=scoped), plan)[low.key]
    assert other.job_plan is not None and other.nodes == free.nodes and not other.note


def test_a_job_a_scoped_quota_holds_back_is_told_what_the_scopes_read() -> None:
    """Its template decides whether the quota counts its pods at all: before, the message
    said only "raise the quota, or free what the namespace's other pods hold", and nothing
    was held where a quota of 0 forbids the template's class or affinity (a user trial)."""
    scopes = (("PriorityClass", "In", ("hi",)), ("CrossNamespacePodAffinity", "Exists", ()))
    high = replace(entry(paper_jobs()[2]), pod_facts=(False, "hi", True))
    view = replace(snap([high]), scoped_quotas={"ml": [("hi-xns", {"pods": 0.0}, scopes)]})
    got = plan_pending(view, plan)[high.key]
    assert got.job_plan is None
    assert got.reason.startswith("namespace ml's ResourceQuota hi-xns leaves 0 pod(s) (pods)")
    assert got.reason.endswith(
        ": raise the quota, free what the namespace's other pods hold, or change what its "
        "scopes (PriorityClass In [hi], CrossNamespacePodAffinity) read of spec.template "
        "(priorityClassName, affinity terms naming namespaces)"
    ), got.reason


def test_what_a_round_took_counts_only_toward_the_quotas_that_count_those_pods() -> None:
    """Before, what the namespace's other jobs took in the round (or reserved) was summed by
    resource over all its quotas: a job of another PriorityClass, counted by an unscoped
    quota, shrank the room a PriorityClass quota left for the jobs of its class."""
    from hulk_operator.quota_fit import add_use

    scopes = (("PriorityClass", "In", ("hi",)),)
    high = replace(entry(paper_jobs()[2]), pod_facts=(False, "hi", False))
    low = replace(high, key=("ml", "low"), pod_facts=(False, "lo", False))
    free = plan_pending(snap([high]), plan)[high.key]
    assert free.job_plan is not None
    gpus = float(sum(s.gpus for s in free.cluster.servers if s.name in free.nodes))
    view = replace(
        snap([high, low]),
        quotas={"ml": [("pods", {"pods": 100.0})]},
        scoped_quotas={"ml": [("hi-gpus", {QUOTA_GPU: gpus}, scopes)]},
    )
    taken: dict[tuple[str, str], float] = {}
    add_use(taken, view, low, replace(free, key=low.key))
    assert taken and {q for q, _ in taken} == {"pods"}  # not the class quota's
    assert taken[("pods", QUOTA_GPU)] == gpus
    got = plan_pending(replace(view, jobs={high.key: high}), plan, taken={"ml": taken})
    assert got[high.key].nodes == free.nodes, got[high.key].reason
    add_use(taken, view, high, free)
    assert taken[("hi-gpus", QUOTA_GPU)] == gpus
    got = plan_pending(replace(view, jobs={high.key: high}), plan, taken={"ml": taken})
    assert got[high.key].job_plan is None and "hi-gpus" in got[high.key].reason


def test_jobs_of_a_namespace_planned_together_share_its_quota() -> None:
    """Before, the first kept its fastest plan if it fitted the quota and the next got what
    was left: with 16 GPUs, bert-large took a 16-GPU server and gpt2-xl waited (a user
    trial). Now the first is planned again leaving the next room, where both then fit."""
    bert = replace(entry(paper_jobs()[3]), key=("ml", "a-bert"))
    gpt = replace(entry(paper_jobs()[2]), key=("ml", "b-gpt"))
    quota = {"ml": [("gpus", {QUOTA_GPU: 16.0})]}
    got = plan_pending(replace(snap([bert, gpt]), quotas=quota), plan)
    assert all(d.job_plan is not None for d in got.values()), {k: d.reason for k, d in got.items()}
    assert not got[bert.key].nodes & got[gpt.key].nodes
    cluster = paper_cluster()
    used = sum(cluster.server(n).gpus for d in got.values() for n in d.nodes)
    assert used <= 16
    # a job of another namespace is not made room for
    other = replace(gpt, key=("other", "b-gpt"))
    quotas = {**quota, "other": [("gpus", {QUOTA_GPU: 0.0})]}
    got = plan_pending(replace(snap([bert, other]), quotas=quotas), plan)
    assert got[other.key].job_plan is None and len(got[bert.key].nodes) >= 1


def test_servers_a_quota_refused_one_tenants_job_go_to_another_tenants() -> None:
    """Room for one Llama-2-13B on the three free servers: the joint plan gave them to the
    older job, whose namespace's quota (4 GPUs) then refused its plan. Before, the other
    tenant's job had been left out of the joint plan and stayed Pending beside the three
    free servers ("other jobs planned with it hold 270 GiB of the 270 GiB usable": a user
    trial)."""
    from hulk_planner.io import job_from_dict

    def llama(name: str) -> Any:
        body = {"metadata": {"name": name}, "spec": {"model": {"preset": "llama2-13b"}}}
        return job_from_dict({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", **body})

    free = {"nanjing-11", "paris-40", "tokyo-29"}
    held = {s.name: ("x", "y") for s in paper_cluster().servers if s.name not in free}
    capped = entry(llama("a-capped"), ns="team-a", created=1.0)
    other = entry(llama("z-other"), ns="team-b", created=2.0)
    view = replace(snap([capped, other], held), quotas={"team-a": [("tiny", {QUOTA_GPU: 4.0})]})
    d = plan_pending(view, plan)
    assert d[capped.key].job_plan is None
    assert d[capped.key].reason.startswith("namespace team-a's ResourceQuota tiny leaves 4 ")
    assert d[other.key].nodes == free, d[other.key].reason


@pytest.mark.parametrize(
    ("quota", "told"),
    [
        (
            {QUOTA_GPU: 6.0},
            "namespace team-a's ResourceQuota q leaves 6 nvidia.com/gpu (requests.nvidia.com/gpu)"
            "; the job needs at least 7 nvidia.com/gpu (requests.nvidia.com/gpu): 221 GiB of GPU "
            "memory, and a GPU of the servers it may use has at most 36 GiB usable: raise the "
            "quota, or free what the namespace's other pods hold",
        ),
        (
            {"count/pods": 0.0},
            "namespace team-a's ResourceQuota q leaves 0 pod(s) (count/pods); the job needs at "
            "least 1 pod(s) (count/pods): 221 GiB of GPU memory, and a server it may use has at "
            "most 576 GiB usable: raise the quota, or free what the namespace's other pods hold",
        ),
    ],
)
def test_a_job_its_quota_leaves_too_little_for_is_told_so_before_planning(
    quota: dict[str, float], told: str
) -> None:
    """Before, it was planned with the other jobs and its reason switched between the quota
    and the free servers as those came and went, an Event each time (a user trial). The
    least it needs: its GPU memory on the GPUs, or the servers, with the most of it."""
    from hulk_planner.io import job_from_dict

    body = {"metadata": {"name": "capped"}, "spec": {"model": {"preset": "llama2-13b"}}}
    capped = entry(
        job_from_dict({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", **body}),
        ns="team-a",
    )
    calls: list[int] = []

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return plan(*args, **kw)

    view = replace(snap([capped]), quotas={"team-a": [("q", quota)]})
    d = plan_pending(view, counting)[capped.key]
    assert d.job_plan is None and d.reason == told
    assert not calls  # (no round)
    more = {k: v + 7 for k, v in quota.items()}
    assert plan_pending(replace(view, quotas={"team-a": [("q", more)]}), plan)[capped.key].job_plan


def test_a_running_jobs_quota_shortfall_counts_its_own_pods_as_going() -> None:
    """A quota lowered to 4 GPUs under a running job's 12, then the job edited: before, the
    reason said the quota left 0 (its own pods' use counted against it; a user trial)."""
    from hulk_planner.io import job_from_dict

    body = {"metadata": {"name": "t5"}, "spec": {"model": {"preset": "t5-11b"}}}
    job = job_from_dict({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", **body})
    e = entry(job, ns="tf")
    view = replace(
        snap([e]),
        quotas={"tf": [("gpus", {QUOTA_GPU: 4.0 - 12.0})]},  # hard 4, its pods use 12
        counted={e.key: {QUOTA_GPU: 12.0}},
    )
    d = plan_pending(view, plan)[e.key]
    assert d.job_plan is None
    assert d.reason.startswith(
        "namespace tf's ResourceQuota gpus leaves 4 nvidia.com/gpu (requests.nvidia.com/gpu) "
        "once the job's own pods are gone (they hold 12 nvidia.com/gpu "
        "(requests.nvidia.com/gpu)); the job needs at least 5 nvidia.com/gpu"
    ), d.reason


def test_an_edit_a_lowered_quota_leaves_too_little_for_is_refused_its_pods_kept() -> None:
    """The same quota (hard 4 GPUs under the job's 12), then a spec edit that makes new
    pods (``masterPort``, an image): the edit's trial plan ignored quotas, so the edit was
    taken, the running pods removed and the new ones refused, the job Pending (a user
    trial). It is refused now (``EditRefused``, checked again), its pods kept; a quota that
    holds it refuses nothing."""
    from hulk_operator import edits
    from hulk_planner.io import job_from_dict

    body = {"metadata": {"name": "t5"}, "spec": {"model": {"preset": "t5-11b"}}}
    job = job_from_dict({"apiVersion": "hulk.dev/v1alpha1", "kind": "HulkTrainingJob", **body})
    e = entry(job, ns="tf")

    def view(hard: float) -> Any:
        return replace(
            snap([e]),
            quotas={"tf": [("gpus", {QUOTA_GPU: hard - 12.0})]},  # its pods use 12
            counted={e.key: {QUOTA_GPU: 12.0}},
        )

    refused = edits.quota_refusal(e, view(4.0))
    assert refused is not None and refused.waits and refused.reason == "EditRefused"
    assert refused.message.startswith("namespace tf's ResourceQuota gpus leaves 4 nvidia.com/gpu")
    assert edits.quota_refusal(e, view(12.0)) is None  # (its own 12 back: room for a plan)


def test_a_scoped_quota_credits_only_the_jobs_own_pods_it_counts() -> None:
    """A running job's pods of PriorityClass ``lo``, its template edited to ``hi``, and a
    quota on ``hi`` pods leaving 4 GPUs: before, the job's 12 GPUs of ``lo`` pods were
    credited to that quota too (they go when the new pods come), so a plan of 16 GPUs
    fitted on paper and the quota refused its pods (a review). Only pods a quota's scopes
    match are credited to it now; an unscoped quota still credits them all."""
    from hulk_operator import indexes
    from hulk_operator.latencies import Latencies

    owner = {"kind": "HulkTrainingJob", "apiVersion": "hulk.dev/v1alpha1", "name": "gpt"}

    def pod(i: int, priority_class: str) -> dict[Any, Any]:
        meta = {"name": f"gpt-{i}", "labels": {"hulk.dev/job": "gpt"}, "ownerReferences": [owner]}
        spec = {
            "priorityClassName": priority_class,
            "containers": [{"resources": {"requests": {GPU: "4", "cpu": "1"}}}],
        }
        status = {"phase": "Running", "qosClass": "Burstable"}
        return indexes.hulk_pods(namespace="ml", name=meta["name"], meta=meta, spec=spec,
                                 status=status)  # fmt: skip

    pods: dict[Any, list[Any]] = {}
    for i, pc in enumerate(("lo", "lo", "hi")):
        for k, v in pod(i, pc).items():
            pods.setdefault(k, []).append(v)
    scoped = {
        "ml": [
            indexes.hulk_scoped_quotas(namespace="ml", name=name, body=body)["ml"]
            for name, body in (
                ("hi-gpus", {"spec": {"hard": {QUOTA_GPU: "8"}, "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                          "values": ["hi"]}]}}}),
                ("burstable", {"spec": {"hard": {"pods": "10"}, "scopes": ["NotBestEffort"]}}),
            )
        ]
    }  # fmt: skip
    view = indexes.snapshot_with(
        Latencies(), {}, {}, pods, hulk_quotas={"ml": [("all", {"pods": 10.0})]},
        hulk_scoped_quotas=scoped,
    )  # fmt: skip
    gpt = replace(entry(paper_jobs()[2]), key=("ml", "gpt"), pod_facts=(False, "hi", False))
    assert view.counted[gpt.key][QUOTA_GPU] == 12.0 and view.counted[gpt.key]["pods"] == 3.0
    assert view.own_use(gpt, "hi-gpus")[QUOTA_GPU] == 4.0  # the one hi pod alone
    assert view.own_use(gpt, "burstable")["pods"] == 3.0  # all three
    assert view.own_use(gpt, "all")["pods"] == 3.0  # unscoped: all three
    # a plan of 16 GPUs needs 12 beyond the 4 its hi pod holds: not within 8 (before:
    # 16 - 12 = 4, within)
    need = {QUOTA_GPU: 16.0}
    short = view.quota_short(gpt, need, quotas=[("hi-gpus", {QUOTA_GPU: 8.0 - 4.0})])
    assert short is not None and short.quota == "hi-gpus" and short.more == 12.0, short
    assert view.quota_short(gpt, {QUOTA_GPU: 8.0}, quotas=[("hi-gpus", {QUOTA_GPU: 4.0})]) is None
