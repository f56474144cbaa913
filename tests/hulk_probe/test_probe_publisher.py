"""The NodeLatency status the agent writes, and the CRD that validates it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from hulk_probe import GROUP, KIND, PLURAL, VERSION
from hulk_probe.estimator import Estimate
from hulk_probe.links import links_from_node_latencies
from hulk_probe.publisher import rfc3339, status_body

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
