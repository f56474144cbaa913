"""``hulk sandbox build|up|down|status|add-node|latencies``: a local Kubernetes control
plane with kwok GPU nodes.

Errors are one line on stderr (``hulk sandbox: <problem> (<fix>)``) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hulk_sandbox.errors import SandboxError

if TYPE_CHECKING:
    from hulk_sandbox.sandbox import Sandbox

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

    add = sub.add_parser(
        "add-node",
        help="add a GPU node to the running sandbox (a new region's, say); remove one with "
        "kubectl delete node",
    )
    _add_dir(add)
    add.add_argument("name", help="the node's name")
    add.add_argument("--region", required=True, help="its region, as in a topology file")
    add.add_argument("--gpus", type=int, default=8, help="GPUs (default 8)")
    add.add_argument(
        "--gpu-product",
        default="A100-SXM4-80GB",
        help="GPU product label (default %(default)s): its TFLOPS follow from it where Hulk "
        "knows it, its memory from a name ending in <N>GB or a GPU Hulk knows "
        "(NVIDIA-RTX-A5000: 24)",
    )
    add.add_argument("--gpu-memory-gib", type=float, default=None, help="GiB per GPU "
                     "(default: from the product, else 80)")  # fmt: skip
    add.add_argument("--gpu-tflops", type=float, default=None, help="TFLOPS per GPU "
                     "(default: from the product)")  # fmt: skip

    lat = sub.add_parser(
        "latencies",
        help="publish the Hulk paper's measured link latencies for its nodes in the running "
        "sandbox (NodeLatency objects, as the probe writes them; a sandbox runs no probe)",
    )
    _add_dir(lat)
    lat.add_argument(
        "--every",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="publish them again this often until Ctrl-C (default 0: once; the operator "
        "uses reports younger than its --latency-max-age-s, 600 s by default)",
    )

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


def _running(folder: str) -> Sandbox:
    """The sandbox running in ``folder``, or a SandboxError that says how to start one."""
    from hulk_sandbox.sandbox import Sandbox

    box = Sandbox(folder)
    if not box.load() or box.status()["state"] != "running":
        raise SandboxError(f"no running sandbox in {box.dir} (start one: hulk sandbox up "
                           f"--dir {folder}, or hulk demo --keep)")  # fmt: skip
    return box


def _add_node(args: argparse.Namespace) -> int:
    """Creates a kwok GPU node in the running sandbox and waits until it is Ready (before, a
    user found no command for it, only the Python API; a trial)."""
    from kubernetes.client.exceptions import ApiException

    from hulk_planner.errors import InvalidRequest
    from hulk_planner.hardware import known_class, tflops_for
    from hulk_planner.model import Server
    from hulk_probe.kube import said as api_said

    box = _running(args.dir)
    product = args.gpu_product
    # (0 given is refused below, not taken for "not given": a review)
    tflops = args.gpu_tflops if args.gpu_tflops is not None else tflops_for(product, None)
    if tflops is None:
        raise SandboxError(f"--gpu-product {product}: its TFLOPS are unknown (give --gpu-tflops)")
    sized = re.search(r"(\d+)GB", product.upper())  # A100-SXM4-80GB: 80
    known = known_class(product)  # (NVIDIA-RTX-A5000: 24 GiB, 8.6; before, 80 GiB: a trial)
    memory = args.gpu_memory_gib
    if memory is None:
        memory = float(sized.group(1)) if sized else known[1].memory_gib if known else 80.0
    try:
        server = Server(
            args.name, args.region, args.gpus, memory, tflops, gpu_product=product,
            compute_capability=known[0] if known else None,
        )  # fmt: skip
    except InvalidRequest as exc:
        flag = {
            "name": "name",
            "region": "--region",
            "gpus": "--gpus",
            "gpuMemoryGiB": "--gpu-memory-gib",
            "gpuTFLOPS": "--gpu-tflops",
        }.get(exc.field.rsplit(".", 1)[-1], exc.field)
        raise SandboxError(
            f"{flag}: {exc.problem}" + (f" ({exc.fix})" if exc.fix else "")
        ) from None
    try:
        box.add_node(server)
    except ApiException as exc:
        if exc.status == 409:
            raise SandboxError(f"node {args.name} exists (choose another name, or kubectl "
                               f"delete node {args.name} first)") from None  # fmt: skip
        said = api_said(exc) or str(exc.reason)  # (its reason alone told nothing: a review)
        raise SandboxError(f"the API server refused node {args.name}: {said}") from None
    print(f"node {args.name} Ready: {args.gpus} x {product} ({memory:g} GiB, {tflops:g} "
          f"TFLOPS) in region {args.region}")  # fmt: skip
    return 0


def _latencies(args: argparse.Namespace) -> int:
    """Publishes the paper's latencies into the running sandbox (before, a sandbox started
    by hand had none, and only ``hulk demo`` replayed them: a user trial)."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    from hulk_operator import crd
    from hulk_probe.kube import said as api_said
    from hulk_sandbox.latencies import publish_paper

    if not 0 <= args.every < math.inf:
        raise SandboxError(f"--every: must be 0 (once) or seconds above 0, got {args.every:g}")
    box = _running(args.dir)
    try:
        with box.api_client() as api:
            crd.install(api, peering=False)  # (what the operator installs at its start)
            while True:
                try:
                    done = publish_paper(api)
                except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
                    if not args.every:
                        raise
                    # (kept publishing: a refresher in the background that died on one
                    # refused write left the operator's reports to age out; a review)
                    said = api_said(exc) if isinstance(exc, ApiException) else None
                    print(f"hulk sandbox: not published now ({said or exc}); again in "
                          f"{args.every:g} s", file=sys.stderr, flush=True)  # fmt: skip
                    time.sleep(args.every)
                    continue
                if not done.nodes:
                    raise SandboxError(
                        "none of the sandbox's nodes is one of the paper's servers, so there "
                        "is no measurement to publish (start it with hulk sandbox up --nodes "
                        "paper; the operator estimates the links of other nodes)"
                    )
                others = (
                    f"; {len(done.others)} node(s) not the paper's ({', '.join(done.others[:3])}"
                    + (", ..." if len(done.others) > 3 else "")
                    + "): no measurement, the operator estimates their links"
                    if done.others
                    else ""
                )
                print(
                    f"published the paper's latencies for its {done.nodes} node(s) here: "
                    f"{done.links} measured link(s), {done.cut} pair(s) without one as "
                    f"unreachable{others}",
                    flush=True,
                )
                if not args.every:
                    return 0
                time.sleep(args.every)
    except ApiException as exc:
        said = api_said(exc) or str(exc.reason)
        raise SandboxError(f"the API server refused the latencies: {said}") from None


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
    actions = {
        "build": _build,
        "up": _up,
        "down": _down,
        "status": _status,
        "add-node": _add_node,
        "latencies": _latencies,
    }
    try:
        if getattr(args, "dir", None) is not None and not str(args.dir).strip():
            # (an empty --dir or HULK_SANDBOX_DIR was the current folder: a review)
            raise SandboxError("--dir: is empty", "give a folder, e.g. --dir .sandbox")
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
