"""Running the operator in a thread of this process (``hulk demo``, tests): a start-up
that cannot finish fails at once with its reason, and leaves no thread behind."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from hulk_operator.config import OperatorConfig
from hulk_operator.runner import OperatorThread


# (kopf's: a start-up that failed never starts its credentials task)
@pytest.mark.filterwarnings("ignore:coroutine 'authenticator' was never awaited")
def test_a_metrics_port_taken_by_the_start_fails_the_start_at_once(
    unreachable_kubeconfig: Path,
) -> None:
    """Before: kopf retried the start-up handler a minute later, so ``start()`` gave up
    with "the operator did not start" and its thread went on (a CI run: the port was
    free at the demo's check and taken while its sandbox came up)."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        op = OperatorThread(  # (the API never reached: the start-up fails first)
            str(unreachable_kubeconfig),
            namespaces=["runner"],
            config=OperatorConfig(metrics_port=port),
        )
        began = time.monotonic()
        with pytest.raises(RuntimeError) as caught:
            op.start(timeout=45)
    took = time.monotonic() - began
    assert str(caught.value) == (
        f"the operator failed to start: metrics port {port}: cannot listen on it "
        "(Address already in use): pick another port, or 0 to turn it off"
    )
    assert took < 20  # (the retry came 60 s later)
    op._thread.join(10)
    assert not op.alive
