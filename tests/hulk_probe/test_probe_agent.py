"""The agent's start-up while the API server cannot be reached: it retries, and its
/healthz stays ok meanwhile (the kubelet would restart it otherwise)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from hulk_probe.agent import Agent
from hulk_probe.config import ProbeConfig
from hulk_probe.estimator import Estimate
from hulk_probe.publisher import Pacer, body_bytes, reachability


def test_health_stays_ok_while_the_start_up_waits_for_the_api(
    unreachable_kubeconfig: Path,
) -> None:
    """Before: /healthz went stale 3 publish intervals + 5 s into a start-up waiting for
    the API (only the publish loop kept it fresh), and the kubelet restarted the pod over
    and over while a region's control plane was away (a review)."""
    config = ProbeConfig(
        node_name="n1",
        listen=("127.0.0.1", 0),
        advertise=("127.0.0.1", 1),
        metrics=None,
        publish_interval_s=0.5,  # stale after 6.5 s
        kubeconfig=str(unreachable_kubeconfig),
    )
    agent = Agent(config)
    seen: list[tuple[bool, str]] = []
    ready: list[bool] = []

    async def main() -> None:
        stop = asyncio.Event()
        run = asyncio.create_task(agent.run(stop))
        for _ in range(16):  # 8 s: past the 6.5 s
            await asyncio.sleep(0.5)
            seen.append(agent.health())
            ready.append(agent.readiness()[0])
        stop.set()
        await asyncio.wait_for(run, 10)

    asyncio.run(main())
    assert not agent.ready
    assert all(ok for ok, _ in seen), seen[-1]
    assert not any(ready)  # (/readyz: a rollout waits for it)
    assert "ready=false" in seen[-1][1] and 'last_error="start-up: ' in seen[-1][1], seen[-1]


class Written:
    """Takes the agent's status writes (the Publisher's part; no API server here)."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def write_status(self, body: Any) -> bool:
        self.bodies.append(body)
        return True


def publishing(**settings: Any) -> ProbeConfig:
    """An agent's settings for its publishing alone (no sockets are opened)."""
    return ProbeConfig(
        node_name="n0",
        listen=("127.0.0.1", 0),
        advertise=("127.0.0.1", 1),
        metrics=None,
        publish_interval_s=1.0,
        **settings,
    )


def test_a_growing_cluster_is_told_when_the_longest_spacing_passes_the_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cluster grown a node at a time raises the spacing a tick at a time, each step
    under the 20% the log waits for: the step past --max-publish-interval, where the
    budget is passed, was never told (a review). It is, once; and so is the spacing."""
    # 1 KB/s: 200 s is too short from about 38 nodes on
    agent = Agent(publishing(write_budget_kb_s=1.0, max_publish_interval_s=200.0))
    pacer = Pacer(1.0, 1000.0, cap_s=200.0)
    written = Written()

    async def grow() -> None:
        for nodes in range(2, 80):
            estimates = {f"n{i}": Estimate(1.0, 3, 1.8e9, True, 0) for i in range(1, nodes)}
            reach = reachability(estimates)
            await agent._publish(written, pacer, estimates, reach, float(nodes))  # type: ignore[arg-type]

    with caplog.at_level(logging.INFO, logger="hulk_probe.agent"):
        asyncio.run(grow())
    said = [r.getMessage() for r in caplog.records]
    passed = [m for m in said if "above the --write-budget" in m]
    assert len(passed) == 1 and "publishing every 200s" in passed[0], said
    assert 3 <= len(said) <= 20, said  # the spacing as it grew, not at every write
    assert written.bodies[-1]["status"]["publishIntervalSeconds"] == 200.0
    # the bytes written, for dashboards (hulk_probe_status_write_bytes_total)
    sent = sum(body_bytes(b) for b in written.bodies)
    counted = agent.metrics.registry.get_sample_value(
        "hulk_probe_status_write_bytes_total", {"source": "n0"}
    )
    assert counted == pytest.approx(sent, rel=0.01)


def test_a_sampling_agent_spaces_its_writes_for_every_agent_not_its_sample() -> None:
    """With --peers-per-region an agent measures a few peers of a large cluster: its share
    of the write budget is of all the agents (it counted the peers it measured, and wrote
    as often as if the cluster were that small)."""
    from types import SimpleNamespace

    config = publishing(write_budget_kb_s=10.0, max_publish_interval_s=1000.0, peers_per_region=2)
    estimates = {f"n{i}": Estimate(1.0, 3, 1.8e9, True, 0) for i in range(1, 7)}
    spacing = {}
    for agents in (1, 7, 700):
        agent = Agent(config)
        agent._directory = SimpleNamespace(agents=agents)  # type: ignore[assignment]
        written = Written()
        pacer = Pacer(1.0, 10_000.0, cap_s=1000.0)
        reach = reachability(estimates)
        asyncio.run(agent._publish(written, pacer, estimates, reach, 0.0))  # type: ignore[arg-type]
        spacing[agents] = written.bodies[-1]["status"]["publishIntervalSeconds"]
    size = body_bytes(written.bodies[-1])
    assert spacing[1] == spacing[7] == 1.0  # (7 statuses of this size: within 10 KB/s)
    assert spacing[700] == pytest.approx(700 * size / 10_000, abs=1.0) and spacing[700] > 10
