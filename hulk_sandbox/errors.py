"""The one exception the sandbox raises on purpose: a problem the user can fix.

The CLI prints it on one line (``hulk sandbox: <problem> (<fix>)``) and exits with code 2.
"""

from __future__ import annotations


class SandboxError(Exception):
    """A sandbox operation failed; ``problem`` says what, ``fix`` says what to do about it."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} ({fix})" if fix else problem)
