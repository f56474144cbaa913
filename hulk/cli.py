"""The ``hulk`` command: a thin dispatcher.

Each subcommand lives with its package and is imported only when used, so ``hulk plan``
never pays for kopf or the Kubernetes client, and ``hulk probe`` never imports torch.
A subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import importlib
import io
import os
import sys
from typing import NoReturn

DESCRIPTION = (
    "Hulk places the training of large models on GPU servers spread over regions: it "
    "plans which servers train which job in which pipeline order, and runs the plan on "
    "Kubernetes. `hulk COMMAND --help` for a command's options."
)

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("hulk_planner.cli", "preview a placement plan for training jobs on a cluster"),
    "train": (
        "hulk_planner.gnn.cli",
        "generate labelled clusters and train the GNN planner (needs torch and PyG, as "
        "the venv has)",
    ),
    "sandbox": ("hulk_sandbox.cli", "run a local Kubernetes control plane with kwok GPU nodes"),
    "topology": (
        "hulk_operator.export",
        "write a live cluster's GPU servers and links as a ClusterTopology (for hulk plan "
        "--cluster); or the paper's cluster, or a random one",
    ),
    "operator": ("hulk_operator.cli", "run the HulkTrainingJob operator"),
    "probe": ("hulk_probe.cli", "run the latency probe agent"),
    "demo": ("hulk_operator.demo", "the operator on the sandbox with the paper's cluster"),
}


# a missing third-party module -> the extra that installs it
EXTRAS = {
    "torch": "gnn",
    "torch_geometric": "gnn",
    "kopf": "operator",
    "kubernetes": "operator",
    "prometheus_client": "operator",
    "cryptography": "sandbox",
}


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    """``pip install 'hulk[...]'`` for a module one of the extras installs; None otherwise
    (a bug, shown as such)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    return None if extra is None else f"pip install 'hulk[{extra}]'"


class _Parser(argparse.ArgumentParser):
    """A flag's error in one line, as every other error (argparse prints its usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="hulk", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.print_help() if not argv or argv[0] in ("-h", "--help") else parser.parse_args(argv)
        return 0 if argv else 2
    name = argv[0]
    if sys.stdout is None:  # started with it closed (`>&-`): a write fails, told below
        sys.stdout = _Closed()
    try:
        module = importlib.import_module(SUBCOMMANDS[name][0])
        sub_parser = _Parser(prog=f"hulk {name}", description=SUBCOMMANDS[name][1])
        module.add_arguments(sub_parser)
        args = sub_parser.parse_args(argv[1:])
        if name in DOCUMENT_OUTPUT:
            _stdout_for(getattr(args, "output", None))
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return code
    except ModuleNotFoundError as exc:
        fix = _missing_extra(exc)
        if fix is None:
            raise
        print(f"hulk {name}: error: needs the {exc.name} module ({fix})", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `hulk plan -o json | head`: the reader left, as in any CLI
        _drop_stdout()
        return 141
    except OSError as exc:  # `> plan.json` on a full disk: one line, not a traceback
        if exc.errno not in _WRITE_ERRORS:
            raise
        _drop_stdout()  # (the rest unflushed)
        print(f"hulk {name}: error: cannot write its output: {exc.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, as `hulk train` and `hulk sandbox` say it
        _drop_stdout()
        print(f"hulk {name}: interrupted", file=sys.stderr)
        return 130


# The commands whose -o json / -o yaml is a document of docs/formats.md, read back with
# --previous or --cluster: as UTF-8 always, whatever the locale (with PYTHONIOENCODING=ascii
# a server named 北京-0 ended hulk plan in a traceback; with latin-1 its plan was written so
# that --previous refused it: a review).
DOCUMENT_OUTPUT = ("plan", "topology")


def _stdout_for(output: str | None) -> None:
    """Standard output as UTF-8 for a document (``output`` json or yaml); for text (a
    table), in the locale's encoding still, a character it lacks written as an escape
    (``\\u5317``), not a traceback."""
    stream = sys.stdout
    if not isinstance(stream, io.TextIOWrapper) or codecs.lookup(stream.encoding).name == "utf-8":
        return
    if output in ("json", "yaml"):
        stream.reconfigure(encoding="utf-8", errors="strict")
    else:
        stream.reconfigure(errors="backslashreplace")


class _Closed(io.TextIOBase):
    """Standard output when the process started without one: writing fails (EBADF)."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _drop_stdout() -> None:
    """What is left unflushed goes nowhere (else it is written, or fails, at exit)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # (no descriptor: closed from the start)
        sys.stdout = open(os.devnull, "w")


# what failing to write the output raises (a full disk or quota, a read-only or broken one)
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EBADF}
