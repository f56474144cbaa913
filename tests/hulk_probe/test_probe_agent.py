"""The agent's start-up while the API server cannot be reached: it retries, and its
/healthz stays ok meanwhile (the kubelet would restart it otherwise)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hulk_probe.agent import Agent
from hulk_probe.config import ProbeConfig


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
