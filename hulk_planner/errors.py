"""The planner's exception tree: everything a caller must handle derives from ``HulkError``.

- ``InvalidRequest``: the input is wrong (a field is missing, negative, unknown...). The
  message names the field and says how to fix it. The operator maps it to a permanent
  failure; the CLI prints it on one line and exits with code 2.
- ``NoFeasiblePlan``: the input is valid but no placement exists (not enough GPU memory,
  no server can reach another). The operator keeps the job Pending and retries when the
  cluster changes.
- ``NothingToPlan``: the input is valid and holds no job to plan (a live cluster with no
  pending job). The CLI says so and exits with code 0, an empty plan on ``-o json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class HulkError(Exception):
    """Base class of every error the planner raises on purpose."""


class InvalidRequest(HulkError, ValueError):
    """Bad input. ``field`` is a dotted path such as ``spec.nodes[3].gpus``."""

    def __init__(self, field: str, problem: str, fix: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" ({fix})"
        super().__init__(text)


def shown(value: object) -> str:
    """A value in an error message as the YAML it came from writes it: ``true``, ``null``
    (not Python's ``True``, ``None``); anything else as ``repr``."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else repr(value)


class NoFeasiblePlan(HulkError):
    """No valid placement exists; ``reason`` says which resource is short, and
    ``unplaced`` (``model.Unplaced``, where known) why each job got nothing."""

    def __init__(self, reason: str, unplaced: Sequence[Any] = ()) -> None:
        self.reason = reason
        self.unplaced = tuple(unplaced)
        super().__init__(reason)


class NothingToPlan(HulkError):
    """No job to plan, and rightly so (``hulk plan --kubeconfig`` on a cluster whose jobs
    all run): not bad input."""
