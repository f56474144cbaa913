"""The API server's message of an error, as the operator, its preview, the sandbox and the
probe read it (``hulk_probe.kube.said``)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from hulk_probe.kube import said


def refusal(body: str | None) -> ApiException:
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = body
    return exc


def test_said_is_the_status_message_or_nothing() -> None:
    status = {"kind": "Status", "message": 'NodeLatency "a" is invalid: status.peers[0]'}
    assert said(refusal(json.dumps(status))) == 'NodeLatency "a" is invalid: status.peers[0]'
    assert said(refusal(json.dumps({"kind": "Status"}))) == ""  # no message
    assert said(refusal("<html>502 Bad Gateway</html>")) == ""  # a proxy's page
    assert said(refusal("[1, 2]")) == ""  # JSON, not an object
    assert said(refusal(None)) == ""
    assert said(ValueError("not an API error")) == ""
