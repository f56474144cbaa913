"""``hulk sandbox build|up|down|status``: a local Kubernetes control plane with kwok GPU nodes.

Errors are one line on stderr (``hulk sandbox: <problem> (<fix>)``) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from hulk_sandbox.errors import SandboxError

DEFAULT_DIR = ".sandbox"


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        default=os.environ.get("HULK_SANDBOX_DIR", DEFAULT_DIR),
        help=f"state directory (default: $HULK_SANDBOX_DIR or ./{DEFAULT_DIR})",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build and cache the Go binaries (fast when cached)")
    build.add_argument("--print-paths", action="store_true", help="print the binaries' paths")

    up = sub.add_parser("up", help="start the control plane and create the nodes")
    _add_dir(up)
    up.add_argument(
        "--nodes",
        default="paper",
        metavar="paper|N",
        help="'paper': the Hulk paper's 47 servers (default); N: N generated servers",
    )
    up.add_argument(
        "--logs",
        default=os.environ.get("HULK_SANDBOX_LOGS"),
        help="folder for the component logs (default: $HULK_SANDBOX_LOGS or DIR/logs)",
    )
    up.add_argument(
        "--taint",
        action="store_true",
        help="also put kwok's kwok.x-k8s.io/node=fake:NoSchedule taint on the nodes",
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait (default 180)")

    _add_dir(sub.add_parser("down", help="stop every process of the sandbox, remove its state"))
    status = sub.add_parser("status", help="say what runs (exit code 0 only if all of it runs)")
    _add_dir(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _build(args: argparse.Namespace) -> int:
    from hulk_sandbox import build

    paths = build.build_all()
    if args.print_paths:
        for name, path in paths.items():
            print(f"{name}\t{path}")
    else:
        versions = build.versions()
        print("sandbox binaries ready: " + ", ".join(f"{n} {versions[n]}" for n in paths))
    return 0


def _up(args: argparse.Namespace) -> int:
    from hulk_sandbox.nodes import cluster_for
    from hulk_sandbox.sandbox import Sandbox

    if not 0 < args.timeout < math.inf:
        raise SandboxError(f"--timeout must be a number of seconds above 0, got {args.timeout:g}")
    cluster = cluster_for(args.nodes)
    for flag, folder in (("--dir", args.dir), ("--logs", args.logs)):
        try:  # before any process starts
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(
                f"{flag} {folder}: cannot create it ({exc.strerror or exc}); choose a writable path"
            ) from exc
    box = Sandbox(args.dir, args.logs)
    seconds = box.up(cluster.servers, taint=args.taint, timeout=args.timeout)
    print(f"sandbox up in {seconds:.1f}s: {len(cluster.servers)} nodes Ready ({box.server})")
    print(f"  kubectl --kubeconfig {box.kubeconfig} get nodes")
    print(f"  hulk sandbox down --dir {args.dir}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from hulk_sandbox.sandbox import Sandbox

    box = Sandbox(args.dir)
    if not box.state_file.exists():
        print(f"no sandbox in {box.dir}")
        return 0
    stopped = box.down()
    print(f"sandbox in {box.dir} stopped ({', '.join(stopped) or 'nothing was running'})")
    return 0


def _status(args: argparse.Namespace) -> int:
    from hulk_sandbox.sandbox import Sandbox

    info = Sandbox(args.dir).status()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if info["state"] == "running" else 1
    if info["state"] == "absent":
        print(f"no sandbox in {info['dir']}")
        return 1
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    print(f"sandbox in {info['dir']}: {info['state']} ({info['nodes']} nodes; {versions})")
    print(f"  server      {info['server']}")
    print(f"  kubeconfig  {info['kubeconfig']}")
    print(f"  logs        {info['logs']}")
    for p in info["processes"]:
        print(f"  {p['name']:<24} pid {p['pid']:<8} {'running' if p['running'] else 'STOPPED'}")
    return 0 if info["state"] == "running" else 1


def run(args: argparse.Namespace) -> int:
    actions = {"build": _build, "up": _up, "down": _down, "status": _status}
    try:
        return actions[args.action](args)
    except SandboxError as err:
        print(f"hulk sandbox: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hulk sandbox: interrupted", file=sys.stderr)
        return 130
    except ImportError as err:
        print(
            f"hulk sandbox: {err.name or err} is not installed (pip install 'hulk[sandbox]')",
            file=sys.stderr,
        )
        return 2
    except Exception as err:  # a bug or an unforeseen system error: still one line
        if os.environ.get("HULK_DEBUG"):
            raise
        print(
            f"hulk sandbox: unexpected {type(err).__name__}: {err} "
            "(run again with HULK_DEBUG=1 for a traceback, and report it)",
            file=sys.stderr,
        )
        return 2
