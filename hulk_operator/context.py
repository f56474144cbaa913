"""What a reconciliation of one job works with: the operator's parts (``Context``, built by
the handlers) and its stage pods as the pod index keeps them (``PodEntry``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hulk_operator.config import OperatorConfig
from hulk_operator.inventory import NodeInfo, Resources, still_counted
from hulk_operator.latencies import Latencies
from hulk_operator.metrics import Metrics
from hulk_operator.placement import Placer
from hulk_operator.quotas import PodFacts
from hulk_operator.snapshot import LimitDefaults, Snapshot


async def _no_latencies() -> Latencies:
    return Latencies()


@dataclass(frozen=True)
class PodEntry:
    """What the operator keeps of a stage pod (the value of the ``pods`` index)."""

    name: str
    node: str | None
    phase: str
    gated: bool
    deleting: bool
    reason: str = ""  # status.reason of a pod the kubelet ended, e.g. Evicted
    unschedulable: str = ""  # the scheduler's message while it cannot place the pod
    quota: tuple[tuple[str, float], ...] = ()  # what it counts toward a ResourceQuota
    # when the scheduler bound it to its node (PodScheduled's lastTransitionTime), if bound
    bound_at: float | None = None
    # a Terminating pod: when quotas stop counting it (its deletionTimestamp plus its grace
    # period, as Kubernetes' quota evaluator has it), None where it is not going
    counted_until: float | None = None
    # what it requests of its node as the API server admitted it (LimitRange defaults in)
    requests: Resources | None = None
    uid: str = ""  # (two pods of a name: the one deleted and the one made again after it)
    facts: PodFacts = field(default_factory=PodFacts)  # what scoped quotas read of it

    def counts(self, now: float) -> bool:
        """Whether a ResourceQuota still counts the pod at ``now``."""
        return still_counted(self.phase, self.counted_until, now)


@dataclass
class Context:
    """What a reconciliation needs from the operator (built by the handlers)."""

    api: Any
    config: OperatorConfig
    placer: Placer
    metrics: Metrics
    nodes: Mapping[str, NodeInfo]
    pods: Mapping[tuple[str, str], list[PodEntry]]
    snapshot: Callable[[], Awaitable[Snapshot]]
    event: Callable[[str, str, str], None]  # (type, reason, message)
    recent: dict[str, float]  # pod name -> when this operator created it
    used: Mapping[str, Resources] = field(default_factory=dict)  # node -> other pods' requests
    # what the NodeLatency objects say: pairs measured, pairs reported unreachable
    # (``indexes.shared_latencies``)
    latencies: Callable[[], Awaitable[Latencies]] = _no_latencies
    has_service: bool = True  # whether the job's headless Service exists (its index)
    # the job's namespace's LimitRange defaults (name, requests, limits), from their index
    limit_defaults: LimitDefaults = ()
    disrupted: str | None = None  # why NotReady nodes are not taken as lost now (recovery)
    settled_at: float = 0.0  # when the last disruption ended (``recovery.say_disruption``)
    # the operator's record of disruptions, shared by every job (``recovery``)
    disruption: dict[str, Any] = field(default_factory=dict)
    # whether to stop (kopf's ``stopped``: the job deleted, the operator exiting; or the
    # job's spec edited since the reconciliation began): pods not yet created are not, and
    # nothing more is written
    stopped: Callable[[], bool] = lambda: False
    # job key -> (what they were built from, its stage pods as built): shared by the jobs'
    # ticks, as building every pod manifest each tick was most of a tick (``desired_pods``)
    built_pods: dict[tuple[str, str], tuple[Any, dict[str, dict[str, Any]]]] = field(
        default_factory=dict
    )
