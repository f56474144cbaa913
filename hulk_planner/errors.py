"""The planner's exception tree: everything a caller must handle derives from ``HulkError``.

- ``InvalidRequest``: the input is wrong (a field is missing, negative, unknown...). The
  message names the field and says how to fix it. The operator maps it to a permanent
  failure; the CLI prints it on one line and exits with code 2. ``InvalidRequests`` is
  several at once (each wrong job of the files given): a line each.
- ``NoFeasiblePlan``: the input is valid but no placement exists (not enough GPU memory,
  no server can reach another). The operator keeps the job Pending and retries when the
  cluster changes.
- ``NothingToPlan``: the input is valid and holds no job to plan (a live cluster with no
  pending job). The CLI says so and exits with code 0, an empty plan on ``-o json``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar


class HulkError(Exception):
    """Base class of every error the planner raises on purpose."""


E = TypeVar("E", bound=HulkError)


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

    def __reduce__(self) -> tuple[Any, ...]:
        # (pickled as its arguments: an error raised in a process pool's worker reached the
        # caller as BrokenProcessPool, Exception's pickling passing the text alone; a trial)
        return type(self), (self.field, self.problem, self.fix)


class InvalidRequests(InvalidRequest):
    """Several pieces of bad input found at once (each job of the files given, as
    ``kubectl apply`` reports each object it refuses), in order: ``errors``. Its own
    ``field``, ``problem`` and ``fix`` are the first's; its text is one line per error."""

    def __init__(self, errors: Sequence[InvalidRequest]) -> None:
        if len(errors) < 2:
            raise ValueError("InvalidRequests holds two errors or more: raise the one alone")
        first = errors[0]
        super().__init__(first.field, first.problem, first.fix)
        self.errors = tuple(errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.errors,)


def one_or_all(errors: Sequence[InvalidRequest]) -> InvalidRequest:
    """What to raise for ``errors`` (at least one): the error alone, or ``InvalidRequests``."""
    return errors[0] if len(errors) == 1 else InvalidRequests(errors)


def each_error(exc: E) -> tuple[E, ...]:
    """The errors ``exc`` stands for: its ``errors`` (``InvalidRequests``), else itself."""
    return tuple(getattr(exc, "errors", (exc,)))


#: The fix for a boolean or number where a name goes (YAML reads them unquoted so)
QUOTE_FIX = "quote it: YAML reads on, off, yes, no, true, false and numbers unquoted as other types"


def shown(value: object) -> str:
    """A value in an error message as the YAML it came from writes it: ``true``, ``null``
    (not Python's ``True``, ``None``), a date or time as written (``2024-01-01``, which
    YAML reads as a date, not ``datetime.date(2024, 1, 1)``: a user trial); anything else
    as ``repr``."""
    import datetime

    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime.date):  # (a datetime too)
        return value.isoformat()
    return "null" if value is None else repr(value)


_WITH_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%µ]+)\s*$")
_NUMBER = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$")
_GROUPED = re.compile(r"^\s*\d{1,3}(?:[,_ ]\d{3})+(?:\.\d+)?\s*$")  # 1,557,611,200
# field name's end -> its unit, and what a unit written beside a number is in it
_UNITS: dict[str, tuple[str, dict[str, float]]] = {
    "GiB": ("GiB", {"gib": 1, "gi": 1, "gb": 1, "g": 1, "mib": 2**-10, "mi": 2**-10,
                    "mb": 2**-10, "tib": 2**10, "ti": 2**10, "tb": 2**10}),
    "Ms": ("ms", {"ms": 1, "s": 1e3, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}),
    # case matters here alone: GB/s are bytes (8 Gb/s each), Gb/s bits
    "Gbps": ("Gb/s", {"Gbps": 1, "Gb/s": 1, "Gbit/s": 1, "G": 1, "gbps": 1, "Mbps": 1e-3,
                      "Mb/s": 1e-3, "Mbit/s": 1e-3, "Tbps": 1e3, "Tb/s": 1e3, "GB/s": 8,
                      "GBps": 8, "MB/s": 8e-3, "MBps": 8e-3}),
    "TFLOPS": ("TFLOPS", {"tflops": 1, "tf": 1, "gflops": 1e-3, "pflops": 1e3}),
}  # fmt: skip
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _figure(x: float) -> str:
    """A number as YAML reads it back: 80, 0.089, 1.5e9 (no '+', no trailing zeros)."""
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    text = f"{x:.6g}"
    mantissa, _, exp = text.partition("e")
    return f"{mantissa}e{int(exp)}" if exp else text


def number_fix(field: str, value: object) -> str | None:
    """How to write a number the user wrote as text: ``'80GB'`` in ``gpuMemoryGiB`` is
    ``80``, ``'0.089s'`` in ``latencyMs`` is ``89`` (the field's unit), ``'3B'``
    parameters are ``3e9``, ``'80'`` is unquoted, ``'1,557,611,200'`` without commas."""
    if not isinstance(value, str):
        return None
    unit, known = _units(field)
    if _NUMBER.match(value):
        return f"write it unquoted: {value.strip()}"
    if _GROUPED.match(value):
        return f"write it without separators: {re.sub(r'[,_ ]', '', value.strip())}"
    m = _WITH_UNIT.match(value)
    if m is None:
        return "write a number" + (f" of {unit}" if unit else "")
    number, suffix = m.groups()
    if unit:  # (before: "write the number alone, 40960" of 40960MB in GiB: a trial)
        factor = known.get(suffix, known.get(suffix.lower()))
        if factor is None:
            return f"write a number of {unit}, without a unit"
        return f"write {_figure(float(number) * factor)}: the field is in {unit}"
    scale = _SCALE.get(suffix.lower())
    if "e" in number.lower():  # 1.5e9B: the figure is there already
        return f"write the number alone, {number}"
    if scale is not None and len(suffix) == 1:
        return f"write the number alone: {_figure(float(number) * scale)} for {value.strip()}"
    return f"write the number alone, {number}"


def unit_of(field: str) -> str:
    """The unit a field's name ends in (``GiB`` for ``gpuMemoryGiB``, ``ms`` for
    ``latencyMs``), or ''."""
    return _units(field)[0]


def _units(field: str) -> tuple[str, dict[str, float]]:
    """The field's unit and what units written beside a number are in it (``_UNITS``)."""
    key = field.rsplit(".", 1)[-1]
    return next((u for suffix, u in _UNITS.items() if key.endswith(suffix)), ("", {}))


def range_fix(field: str, bound: str) -> str:
    """What to write in a numeric field whose value is out of range: a number ``bound``
    (``greater than zero``), in the field's unit where its name gives one."""
    unit = unit_of(field)
    return f"write a number {bound}" + (f", in {unit}" if unit else "")


def scale_fix(field: str, value: float | None = None, at_most: float | None = None) -> str:
    """The fix for a value past any real one: most likely a unit mistaken (a GiB field's
    ``value`` in MiB, as GPU Feature Discovery's ``nvidia.com/gpu.memory`` gives it, where
    that many MiB are within ``at_most``)."""
    unit = unit_of(field)
    key = field.rsplit(".", 1)[-1]
    if not unit:
        return "check the value"
    fix = f"check its unit: {key} is in {unit}"
    if unit == "GiB" and value is not None and at_most is not None and value / 1024 <= at_most:
        fix += f"; {_figure(value)} MiB is {_figure(round(value / 1024, 1))} GiB"
    return fix


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
