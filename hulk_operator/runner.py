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
        self._stop = threading.Event()  # (stop(): the loop's own event is set from it)
        self._stop_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="hulk-operator", daemon=True)

    def _main(self) -> None:
        try:
            if not self.standalone and self.peering_name:
                from hulk_operator import crd, kube

                with kube.make_client(self.memo.kubeconfig) as api:
                    crd.ensure_peering(api, self.peering_name, namespaces=self.namespaces)
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ended.set()
            self._ready.set()

    async def _serve(self) -> None:
        # kopf's stop flag is an event of its own loop: a threading.Event is waited for in
        # a thread of the loop's executor, which the loop's end waits for. A start-up that
        # failed (before the flag was set) then held the loop past kopf's exit deadline,
        # which SIGKILLs the thread, i.e. this whole process (the demo's included).
        self._stop_event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop.is_set():  # (stop() before the loop ran)
            self._stop_event.set()
        await kopf.operator(
            clusterwide=not self.namespaces,
            namespaces=self.namespaces,
            standalone=self.standalone,
            peering_name=self.peering_name,
            liveness_endpoint=self.liveness_endpoint,
            memo=self.memo,
            stop_flag=self._stop_event,
            ready_flag=self._ready,
        )

    def start(self, timeout: float = 60.0) -> OperatorThread:
        """Runs the operator; returns once its start-up handlers have run. A start-up that
        failed (e.g. its metrics port taken) raises RuntimeError with kopf's reason; one
        that did not finish in ``timeout`` s is stopped and raises TimeoutError (before,
        its thread went on, and held its process's exit)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            try:
                self.stop(10)
            except TimeoutError:
                pass  # (the start's timeout is what to tell)
            raise TimeoutError(f"the operator did not start within {timeout:g} s")
        if self._error is not None:
            why = self._error.__cause__ or self._error  # (kopf's ActivityError: its handler's)
            raise RuntimeError(f"the operator failed to start: {why}") from self._error
        if self._ended.is_set():
            raise RuntimeError("the operator stopped during its start")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # (its loop has closed: the operator ended)
                pass
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
