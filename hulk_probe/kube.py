"""The few Kubernetes API calls the agent makes, sent through the kubernetes client's
``ApiClient`` (its configuration, authentication, TLS and errors) but not through its
generated per-group classes: merely creating a ``CoreV1Api`` builds validators for some
700 methods, which costs about 20 MB of memory and 3 s of CPU, a third of the agent's
memory budget. Bodies are plain JSON dicts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from hulk_probe import API_TIMEOUT, GROUP, MERGE_PATCH, PLURAL, VERSION

NODE_LATENCIES = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


def said(exc: BaseException) -> str:
    """The API server's own message of an error (an ``ApiException``'s JSON ``Status``
    body: "pods is forbidden: User ...", a schema error naming the field, an admission
    policy's reason), or "" where the body holds none. The operator, its preview, the
    sandbox and the probe all read it here."""
    body = getattr(exc, "body", None)
    try:
        return str(json.loads(body or "{}").get("message") or "")
    except (ValueError, AttributeError, TypeError):
        return ""


def load_api_client(kubeconfig: str | None) -> Any:
    """An ApiClient from ``kubeconfig``, else in-cluster config, else the default kubeconfig.

    Raises ``kubernetes.config.ConfigException`` or ``OSError`` when none works."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(cfg)


class Kube:
    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: Any = API_TIMEOUT,
        accept: str = "application/json",
    ) -> Any:
        """JSON in, JSON out; raises ``kubernetes.client.exceptions.ApiException`` on a
        non-2xx answer. With ``stream`` it returns the open urllib3 response instead."""
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= resp.status <= 299:
            resp.read()
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        if stream:
            return resp.response
        resp.read()
        return json.loads(resp.data) if resp.data else None

    def watch(
        self, path: str, resource_version: str, timeout_s: int, accept: str = "application/json"
    ) -> Iterator[dict[str, Any]]:
        """The events of one watch call, from ``resource_version``, for ``timeout_s``."""
        from kubernetes.watch.watch import iter_resp_lines

        resp = self.request(
            "GET",
            path,
            stream=True,
            accept=accept,
            timeout=(API_TIMEOUT[0], timeout_s + 30),
            query=[
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", str(timeout_s)),
            ],
        )
        try:
            for line in iter_resp_lines(resp):
                if line:
                    yield json.loads(line)
        finally:
            resp.release_conn()

    def merge_patch(self, path: str, body: Any, query: Sequence[tuple[str, str]] = ()) -> Any:
        return self.request("PATCH", path, body=body, content_type=MERGE_PATCH, query=query)
