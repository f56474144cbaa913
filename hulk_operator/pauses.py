"""A replica paused by kopf's peering, and resumed.

kopf pauses a replica while a peer of higher priority lives (``--priority``): it stops the
replica's watches, and when it resumes it lists every object again. It never drops from
its indexes the objects deleted in between, though (kopf 1.45): a resumed replica would
plan on deleted nodes and count the GPUs of deleted pods as taken (a user trial). So
``hulk operator`` runs kopf afresh when its replica resumes (new indexes, filled by the
startup listing before any handler runs), and a paused replica stops exporting per-job
figures (a standby's last ones would keep an alert firing) and says so on ``/healthz``.

kopf tells of a pause and a resume only in its log, so :class:`PauseWatch` reads those
lines; the sandbox test of the resume would fail if kopf reworded them."""

from __future__ import annotations

import datetime
import getpass
import logging
import os
import secrets
import socket
import threading
from collections.abc import MutableMapping
from typing import Any

PEERING_LOGGER = "kopf._core.engines.peering"
PAUSED = ("Pausing operations in favour of", "Pausing all operators")
RESUMED = "Resuming operations after the pause"
RESTARTING = "restarting"  # the memo's Event: handlers do nothing until kopf runs afresh
PAUSED_NOW = "paused"  # the memo's Event, set while a peer pauses this replica (/healthz)


class PauseWatch(logging.Filter):
    """Reads kopf's peering log: on a pause, clears the per-job metrics; on a resume,
    stops this run of kopf (``stop``), for ``hulk operator`` to start it again
    (``restart``), and has the handlers do nothing meanwhile (``memo[RESTARTING]`` set)."""

    def __init__(
        self, memo: MutableMapping[str, Any], stop: threading.Event, peering: bool = True
    ) -> None:
        super().__init__()
        self.memo = memo
        # an Event, not a flag of its own: kopf hands each object's handlers a shallow copy
        # of the memo made when it first saw the object, sharing its values only
        self.restarting = memo.setdefault(RESTARTING, threading.Event())
        self.paused_now = memo.setdefault(PAUSED_NOW, threading.Event())
        if peering:  # kopf starts paused, and says nothing until it resumes (a replica that
            self.paused_now.set()  # starts beside a peer of higher priority: never)
        self.stop = stop
        self.paused = False  # paused once active (kopf starts paused, and says nothing)

    @property
    def restart(self) -> bool:
        """Whether this run of kopf stopped for a fresh one."""
        return self.restarting.is_set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith(PAUSED):
            self.paused = True
            self.paused_now.set()
            metrics = self.memo.get("metrics")
            if metrics is not None:
                metrics.clear_jobs()
        elif text.startswith(RESUMED):
            self.paused_now.clear()
            if self.paused:  # (not the resume at the start)
                self.restarting.set()
                self.stop.set()
        return True

    def __enter__(self) -> PauseWatch:
        peering = logging.getLogger(PEERING_LOGGER)
        if peering.getEffectiveLevel() > logging.INFO:  # (its lines are at INFO)
            peering.setLevel(logging.INFO)
        peering.addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(PEERING_LOGGER).removeFilter(self)


def identity() -> str:
    """This process's peering identity, kept by each run of kopf (a new one would find the
    last run's record and take it for a peer of the same priority): the pod's name
    (``POD_ID``, as kopf reads it), else user@host with the time and a random suffix."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    return f"{getpass.getuser()}@{socket.gethostname()}/{now}/{secrets.token_hex(3)}"
