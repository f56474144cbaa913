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

import re
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


_WITH_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%]+)\s*$")
_NUMBER = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$")
_UNITS = {"GiB": "GiB", "Ms": "ms", "Gbps": "Gb/s", "TFLOPS": "TFLOPS"}
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def number_fix(field: str, value: object) -> str | None:
    """How to write a number the user wrote as text: ``'80GB'`` in ``gpuMemoryGiB`` is
    ``80`` (the unit is the field's), ``'3B'`` parameters are ``3e9``, ``'80'`` unquoted."""
    if not isinstance(value, str):
        return None
    key = field.rsplit(".", 1)[-1]
    unit = next((u for suffix, u in _UNITS.items() if key.endswith(suffix)), None)
    if _NUMBER.match(value):
        return f"write it unquoted: {value.strip()}"
    m = _WITH_UNIT.match(value)
    if m is None:
        return "write a number" + (f" of {unit}" if unit else "")
    number, suffix = m.groups()
    if unit:
        return f"write the number alone, {number}: the field is in {unit}"
    scale = _SCALE.get(suffix.lower())
    if scale is not None and len(suffix) == 1:
        return f"write the number alone: {number}e{len(str(int(scale))) - 1} for {value.strip()}"
    return f"write the number alone, {number}"


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
