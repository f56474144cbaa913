"""Running the operator in a background thread of this process (tests, ``hulk demo``,
benchmarks): ``with OperatorThread(kubeconfig, namespaces=[ns]): ...``."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any

import kopf

from hulk_operator.config import OperatorConfig


class _NoSignalNote(logging.Filter):
    """Drops kopf's warning that a thread ignores OS signals: this thread is stopped by
    ``stop()``, and its process handles the signals (``hulk demo --keep``: Ctrl-C)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("OS signals are ignored: running not in")


logging.getLogger("kopf._core.reactor.running").addFilter(_NoSignalNote())


class OperatorThread:
    def __init__(
        self,
        kubeconfig: str,
        *,
        namespaces: Sequence[str] = (),
        config: OperatorConfig | None = None,
        standalone: bool = True,
        peering_name: str | None = None,
        liveness_endpoint: str | None = None,
        extra_memo: dict[str, Any] | None = None,
    ) -> None:
        import hulk_operator.handlers  # noqa: F401  (registers the handlers)

        self.memo = kopf.Memo(kubeconfig=kubeconfig, config=config or OperatorConfig.from_env(),
                              namespaces=list(namespaces), **(extra_memo or {}))  # fmt: skip
        self.namespaces = list(namespaces)
        self.standalone = standalone
        self.peering_name = peering_name
        self.liveness_endpoint = liveness_endpoint
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="hulk-operator", daemon=True)

    def _main(self) -> None:
        try:
            if not self.standalone and self.peering_name:
                from hulk_operator import crd, kube

                with kube.make_client(self.memo.kubeconfig) as api:
                    crd.ensure_peering(api, self.peering_name, namespaces=self.namespaces)
            asyncio.run(
                kopf.operator(
                    clusterwide=not self.namespaces,
                    namespaces=self.namespaces,
                    standalone=self.standalone,
                    peering_name=self.peering_name,
                    liveness_endpoint=self.liveness_endpoint,
                    memo=self.memo,
                    stop_flag=self._stop,
                    ready_flag=self._ready,
                )
            )
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def start(self, timeout: float = 60.0) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the operator did not start")
        if self._error is not None:
            raise RuntimeError(f"the operator failed: {self._error!r}") from self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the operator did not stop")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> OperatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
