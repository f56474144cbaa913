"""Pure helpers of the reconcile loop (its handlers run end to end in test_operator_e2e)."""

from __future__ import annotations

from hulk_operator.reconcile import same_cause

LEFT = (
    "namespace ml's ResourceQuota {q} leaves {n} nvidia.com/gpu (requests.nvidia.com/gpu); "
    "one stage pod needs 4 nvidia.com/gpu (requests.nvidia.com/gpu): raise the quota"
)


def test_a_reason_whose_figures_alone_moved_is_the_same_cause() -> None:
    assert same_cause(LEFT.format(q="gpus", n=3), LEFT.format(q="gpus", n=1.5))
    assert not same_cause(LEFT.format(q="be-pods", n=0), LEFT.format(q="high-gpus", n=0))
    assert not same_cause("", LEFT.format(q="gpus", n=3))
    # digits within a name are not figures; amounts with units are
    assert not same_cause(LEFT.format(q="gpu-q1", n=3), LEFT.format(q="gpu-q2", n=3))
    assert same_cause("leaves 1.5Gi (limits.memory)", "leaves -0.5Gi (limits.memory)")
    assert not same_cause("held by rome-44", "held by rome-45")
