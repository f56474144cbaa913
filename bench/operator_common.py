"""Shared helpers of the operator benchmarks (``bench/operator_*.py``)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def paper_jobs() -> list[dict[str, Any]]:
    text = (ROOT / "examples" / "paper-jobs.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def sandbox(servers: Sequence[Any]) -> Any:
    from hulk_sandbox.sandbox import Sandbox

    box = Sandbox(tempfile.mkdtemp(prefix="hulk-bench-"))
    secs = box.up(servers, die_with_parent=True, timeout=600)
    print(f"sandbox: {len(servers)} nodes Ready in {secs:.1f}s", flush=True)
    return box


def wait(fn: Callable[[], Any], timeout: float = 120.0, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(every)
    raise TimeoutError("timed out")


class Cluster:
    def __init__(self, api: Any) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def namespace(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        from kubernetes import client

        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        wait(lambda: self.core.list_namespaced_service_account(name).items, 60)
        return name

    def apply(self, ns: str, docs: Sequence[dict[str, Any]]) -> None:
        for d in docs:
            self.custom.create_namespaced_custom_object(
                "hulk.dev", "v1alpha1", ns, "hulktrainingjobs", d
            )

    def jobs(self, ns: str) -> list[dict[str, Any]]:
        found: Any = self.custom.list_namespaced_custom_object(
            "hulk.dev", "v1alpha1", ns, "hulktrainingjobs"
        )
        return list(found["items"])

    def pods(self, ns: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(ns, label_selector="hulk.dev/job").items)

    def planned(self, ns: str) -> int:
        return sum(s.get("numNodes", 0) for s in ((j.get("status") or {}) for j in self.jobs(ns)))

    def all_pods_running(self, ns: str, jobs: int) -> bool:
        js = self.jobs(ns)
        if len(js) != jobs or any(not (j.get("status") or {}).get("plan") for j in js):
            return False
        live = [p for p in self.pods(ns) if p.metadata.deletion_timestamp is None]
        want = sum(j["status"]["numNodes"] for j in js)
        return len(live) == want and all(p.status.phase == "Running" for p in live)

    def delete_all(self, ns: str) -> None:
        for j in self.jobs(ns):
            self.custom.delete_namespaced_custom_object(
                "hulk.dev", "v1alpha1", ns, "hulktrainingjobs", j["metadata"]["name"]
            )
        wait(
            lambda: (
                not self.jobs(ns) and not [p for p in self.pods(ns) if p.status.phase == "Running"]
            ),
            120,
        )


def summary(name: str, xs: Sequence[float]) -> None:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    print(
        f"{name}: n={len(xs)} median={statistics.median(xs):.2f}s p99={p99:.2f}s "
        f"min={xs[0]:.2f}s max={xs[-1]:.2f}s",
        flush=True,
    )
