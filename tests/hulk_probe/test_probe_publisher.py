"""The NodeLatency status the agent writes, and the CRD that validates it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from hulk_probe import GROUP, KIND, PLURAL, VERSION
from hulk_probe.estimator import Estimate
from hulk_probe.links import links_from_node_latencies
from hulk_probe.publisher import (
    MAX_BUDGET_SPACING_S,
    Pacer,
    body_bytes,
    publish_spacing,
    reachability,
    rfc3339,
    status_body,
)

CRD = Path(__file__).resolve().parents[2] / "crds" / "nodelatencies.hulk.dev.yaml"
T = 1_800_000_000.25


def test_rfc3339() -> None:
    assert rfc3339(T) == "2027-01-15T08:00:00.250Z"


def test_status_lists_measured_and_unreachable_peers_only() -> None:
    body = status_body(
        {
            "c": Estimate(None, 0, T - 60, False, 4),  # unreachable, answered a minute ago
            "a": Estimate(1.23456, 9, T - 1, True, 0),
            "b": Estimate(None, 0, None, None, 1),  # not decided yet: left out
        },
        now=T,
        interval_s=2.0,
    )
    status = body["status"]
    assert status["peers"] == [
        {
            "node": "a",
            "reachable": True,
            "samples": 9,
            "latencyMs": 1.235,
            "lastUpdated": rfc3339(T - 1),
        },
        {
            "node": "c",
            "reachable": False,
            "samples": 0,
            "lastUpdated": rfc3339(T - 60),
            "consecutiveFailures": 4,
        },
    ]
    assert (status["reachablePeers"], status["unreachablePeers"]) == (1, 1)
    assert status["intervalSeconds"] == 2.0 and status["lastPublished"] == rfc3339(T)


def test_published_status_feeds_links() -> None:
    body = status_body({"b": Estimate(5.0, 3, T, True, 0)}, now=T, interval_s=1.0)
    obj = {"metadata": {"name": "a"}, **body}
    now = datetime.fromtimestamp(T + 5, UTC)
    assert links_from_node_latencies([obj], now, max_age_s=10) == {frozenset({"a", "b"}): 5.0}
    assert links_from_node_latencies([obj], now, max_age_s=4) == {}


def test_crd_matches_the_code() -> None:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (GROUP, "Cluster", KIND)
    (version,) = spec["versions"]
    assert version["name"] == VERSION and version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    body = status_body({"b": Estimate(5.0, 3, T, True, 2)}, now=T, interval_s=1.0)["status"]
    assert set(body) <= set(schema)
    assert set(body["peers"][0]) <= set(schema["peers"]["items"]["properties"])
    columns = {c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert {".status.reachablePeers", ".status.lastPublished"} <= columns


def test_a_failed_write_is_one_line_on_healthz() -> None:
    """Before: /healthz's last_error carried the ApiException's multi-line text (headers)."""
    from kubernetes.client.exceptions import ApiException

    from hulk_probe.agent import one_line

    exc = ApiException(status=401, reason="Unauthorized")
    exc.headers = {"Audit-Id": "x", "Content-Type": "application/json"}
    exc.body = '{"kind":"Status","message":"Unauthorized"}'
    assert "\n" in str(exc)
    assert one_line(exc) == "ApiException: 401 Unauthorized"
    assert one_line(OSError("\nconnection refused\nmore")) == "OSError: connection refused"
    assert len(one_line(ValueError("x" * 500))) == 200


def test_publish_spacing_keeps_all_agents_within_the_budget() -> None:
    # 100 nodes of 15 KB within 1 MB/s: 1.5 s each, below the floor
    assert publish_spacing(15_000, 100, floor_s=10.0, budget_bytes_s=1e6) == 10.0
    # 1,000 nodes of 150 KB: 150 s each, 1 MB/s together
    assert publish_spacing(150_000, 1000, 10.0, 1e6) == pytest.approx(150.0)
    # 2,000 nodes of 300 KB would need 600 s: capped (a third of the operator's max age)
    assert publish_spacing(300_000, 2000, 10.0, 1e6) == MAX_BUDGET_SPACING_S
    # ...unless the user's own --publish-interval is longer still
    assert publish_spacing(300_000, 2000, 900.0, 1e6) == 900.0
    assert publish_spacing(300_000, 2000, 10.0, 0) == 10.0  # no budget


def ticks(
    pacer: Pacer,
    reach_at: Callable[[float], dict[str, bool]],
    *,
    size: int,
    nodes: int,
    until: float,
    fail_at: tuple[float, ...] = (),
) -> list[float]:
    """When ``pacer`` writes over ``until`` seconds of ticks every ``floor_s`` (the writes
    tried at ``fail_at`` fail)."""
    writes = []
    now = 0.0
    while now <= until:
        reach = reach_at(now)
        if pacer.due(now, reach):
            if now in fail_at:
                pacer.failed(now)
            else:
                pacer.wrote(now, reach, pacer.spacing_for(size, nodes))
                writes.append(now)
        now += pacer.floor_s
    return writes


STEADY = {"b": True, "c": True, "d": True, "e": True}


def cut(*peers: str) -> dict[str, bool]:
    return {**STEADY, **dict.fromkeys(peers, False)}


def pacer() -> Pacer:
    """Ticks every 10 s; probes every 10 s with a 2 s timeout (settles in 22 s); 1 MB/s."""
    return Pacer(floor_s=10.0, budget_bytes_s=1e6, settle_s=22.0)


def test_the_pacer_writes_every_spacing() -> None:
    writing = pacer()  # 1,000 nodes of 60 KB: every 60 s
    assert ticks(writing, lambda t: STEADY, size=60_000, nodes=1000, until=300) == [
        0.0, 60.0, 120.0, 180.0, 240.0, 300.0,
    ]  # fmt: skip
    assert writing.spacing_s == pytest.approx(60.0)
    # in whole ticks, as the writes come: 12.7 s is every other tick
    assert pacer().spacing_for(42_405, 300) == 20.0
    # ...but never past the cap: 166.7 s (a third of 500 s) is 160 s in 10 s ticks, and
    # 200 s in 30 s ticks is 180 s (before: 170 s and 210 s)
    assert Pacer(10.0, 1e6, cap_s=500 / 3).spacing_for(300_000, 2000) == 160.0
    assert Pacer(30.0, 1e6, cap_s=200.0).spacing_for(300_000, 2000) == 180.0
    # a small cluster: every tick, as before the budget
    assert ticks(pacer(), lambda t: STEADY, size=2_000, nodes=20, until=50) == [
        0.0, 10.0, 20.0, 30.0, 40.0, 50.0,
    ]  # fmt: skip


def test_a_partition_is_written_at_once_peer_by_peer() -> None:
    # c goes unreachable at 130 s: written at that tick, not at 180 s
    flip = ticks(pacer(), lambda t: cut("c") if t >= 130 else STEADY, size=60_000,
                 nodes=1000, until=300)  # fmt: skip
    assert flip == [0.0, 60.0, 120.0, 130.0, 190.0, 250.0]
    # a cut region's peers flip over about one probe interval, each at its own phase:
    # each tick of the episode writes those newly flipped (one early write named c alone,
    # and d and e waited a whole spacing)
    spread = {130: cut("c"), 140: cut("c", "d"), 150: cut("c", "d", "e")}
    writes = ticks(pacer(), lambda t: spread.get(min(int(t), 150), STEADY) if t >= 130
                   else STEADY, size=60_000, nodes=1000, until=300)  # fmt: skip
    assert writes == [0.0, 60.0, 120.0, 130.0, 140.0, 150.0, 210.0, 270.0]
    # ...and back: healed peers are written at once too
    healed = ticks(pacer(), lambda t: cut("c") if 130 <= t < 200 else STEADY, size=60_000,
                   nodes=1000, until=300)  # fmt: skip
    assert healed == [0.0, 60.0, 120.0, 130.0, 190.0, 200.0, 260.0]


def test_a_second_failure_after_the_first_episode_is_written_at_once_too() -> None:
    """Before, a flip after the first episode waited for the regular write, up to a
    spacing (200 s on a large cluster; a user trial killed a second node)."""
    second = {130: cut("c"), 170: cut("c", "d")}
    writes = ticks(pacer(), lambda t: second[170] if t >= 170 else second[130] if t >= 130
                   else STEADY, size=60_000, nodes=1000, until=300)  # fmt: skip
    assert writes == [0.0, 60.0, 120.0, 130.0, 170.0, 230.0, 290.0]


def test_flapping_passes_the_budget_only_so_far() -> None:
    flap = lambda t: cut("c") if int(t / 10) % 2 else STEADY  # noqa: E731
    writes = ticks(pacer(), flap, size=60_000, nodes=1000, until=6000)
    # per 60 s spacing in the long run: the regular write and one episode of at most
    # 22 / 10 + 1 ticks; the first three episodes at once (flipping every tick, an agent
    # would write every tick: 601 writes)
    assert 100 < len(writes) <= 100 * (1 + 3) + 3 * 3 + 1, len(writes)


def test_a_started_agent_writes_again_as_its_first_round_of_probes_ends() -> None:
    """Its first status lists the peers measured by its first tick and replaces its
    predecessor's whole (a rollout): the others came only a spacing later, 200 s on a
    large cluster (a review). Peers measured within its first settling are written at
    once; later ones wait for the regular write, as elsewhere."""
    round1 = {0: {"b": True}, 10: {"b": True, "c": True}, 20: {"b": True, "c": True, "d": True}}
    full = {**round1[20], "e": True}
    writes = ticks(pacer(), lambda t: round1.get(int(t), full), size=60_000, nodes=1000,
                   until=130)  # fmt: skip
    assert writes == [0.0, 10.0, 20.0, 80.0]


def test_a_new_or_gone_peer_waits_for_the_regular_write() -> None:
    grown = {**STEADY, "f": True}  # (its own agent's status holds its links)
    writes = ticks(pacer(), lambda t: grown if t >= 130 else STEADY, size=60_000,
                   nodes=1000, until=200)  # fmt: skip
    assert writes == [0.0, 60.0, 120.0, 180.0]


def test_a_failed_write_is_tried_again_sooner_and_carries_its_flip() -> None:
    writing = pacer()
    writes = ticks(writing, lambda t: cut("c") if t >= 55 else STEADY, size=60_000,
                   nodes=1000, until=200, fail_at=(60.0, 70.0))  # fmt: skip
    # tried at 60 (failed), the next tick 70 (failed), two ticks later 90: written
    assert writes == [0.0, 90.0, 150.0]
    assert writing.due(160.0, cut("c")) is False  # the flip went out with the 90 s write
    # failing on: at most a spacing apart
    writing = pacer()
    ticks(writing, lambda t: STEADY, size=60_000, nodes=1000, until=0)
    for now in (60.0, 70.0, 90.0, 130.0):  # 10, 20, 40 s apart
        assert writing.due(now, STEADY), now
        writing.failed(now)
    assert not writing.due(180.0, STEADY) and writing.due(190.0, STEADY)  # 60 s: the spacing
    # failing for days: still a spacing apart (2 ** 1024 s overflowed a float, and the
    # agent's publish loop ended)
    for _ in range(2000):
        writing.failed(writing._retry_at or 0.0)
    assert writing.due(writing._retry_at or 0.0, STEADY)


def test_the_status_says_how_often_it_is_written_and_the_crd_keeps_it() -> None:
    body = status_body(
        {"b": Estimate(5.0, 3, T, True, 0)}, now=T, interval_s=10.0, publish_interval_s=150.04
    )
    assert body["status"]["publishIntervalSeconds"] == 150.0
    assert body_bytes(body) == len(json.dumps(body, separators=(",", ":")))
    version = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "publishIntervalSeconds" in schema
    columns = {c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert ".status.publishIntervalSeconds" in columns
    assert reachability(
        {
            "a": Estimate(1.0, 1, T, True, 0),
            "b": Estimate(None, 0, None, None, 1),
            "c": Estimate(None, 0, T, False, 3),
        }
    ) == {"a": True, "c": False}
