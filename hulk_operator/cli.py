"""``hulk operator``: run the HulkTrainingJob operator (kopf) against a cluster.

    hulk operator --all-namespaces --metrics-port 9090
    hulk operator --namespace team-a --namespace team-b --install-crds

Leader election: kopf peering (``--peering``, default ``hulk``) pauses every replica but the
one with the highest ``--priority`` (random by default, so two replicas never tie); the
peering CRDs come with ``--install-crds`` (or ``--standalone`` to run without), and the
peering object itself is created at startup when missing (``crd.ensure_peering``: kopf
would otherwise wait for it, paused and silent).
Liveness: ``--liveness`` serves kopf's probe endpoint (``/healthz``).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hulk_operator.config import FLAGS, OperatorConfig, setting_field
from hulk_operator.pauses import PauseWatch, identity

if TYPE_CHECKING:
    from hulk_operator.metrics import Metrics
    from hulk_planner.errors import InvalidRequest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = OperatorConfig()
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                        "~/.kube/config, else in-cluster)")  # fmt: skip
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="serve this namespace (repeat for more; globs allowed)",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="serve every namespace (the default)"
    )
    parser.add_argument(
        FLAGS["metrics_port"],
        dest="metrics_port",
        metavar="PORT",
        type=int,
        help=f"serve Prometheus metrics on this port (0: off; default {d.metrics_port})",
    )
    parser.add_argument(
        FLAGS["metrics_address"],
        dest="metrics_address",
        metavar="IP",
        help=f"the address the metrics listen on (default {d.metrics_address}; :: for IPv6)",
    )
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="liveness endpoint URL (default %(default)s; '' to turn off)",
    )
    parser.add_argument("--peering", default="hulk", help="kopf peering name (%(default)s)")
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: the only operator (it neither pauses for others nor they for it)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority: the highest works, the others pause; equal highest ones all "
        "pause (default: random)",
    )
    parser.add_argument(
        "--install-crds",
        action="store_true",
        help="apply the CRDs first (HulkTrainingJob, NodeLatency, and kopf peering but with "
        "--standalone)",
    )
    # Settings: a flag wins over its HULK_OPERATOR_<NAME> variable, which wins over the
    # default (so no argparse defaults here: an unset flag leaves the variable in force).
    parser.add_argument(
        FLAGS["planner"], dest="planner", metavar="NAME", help=f"planner (default: {d.planner})"
    )
    numbers = [  # (setting, metavar, help before its default)
        ("reconcile_interval_s", "SECONDS", "seconds between reconciliations of a job"),
        (
            "same_region_latency_ms",
            "MS",
            "estimate for unmeasured pairs in a region with no measured pair",
        ),
        (
            "cross_region_latency_ms",
            "MS",
            "estimate for unmeasured pairs across two regions with no measured pair between",
        ),
        ("latency_max_age_s", "SECONDS", "ignore NodeLatency measurements older than this"),
        ("not_ready_grace_s", "SECONDS", "a stage's node counts as lost once NotReady this long"),
    ]
    for name, metavar, text in numbers:
        parser.add_argument(
            FLAGS[name],
            dest=name,
            metavar=metavar,
            type=float,
            help=f"{text} (default {getattr(d, name):g})",
        )
    parser.add_argument(
        FLAGS["gnn_weights"],
        dest="gnn_weights",
        metavar="FILE",
        help="GNN weights of `hulk train` for the hulk planner (default: "
        "HULK_OPERATOR_GNN_WEIGHTS, else HULK_GNN_WEIGHTS, else the shipped ones)",
    )
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="do not compute the baselines' predicted step times",
    )
    parser.add_argument("-v", "--verbose", action="store_true")


def config_from_args(args: argparse.Namespace) -> OperatorConfig:
    """Flags over ``HULK_OPERATOR_<NAME>`` variables over defaults."""
    return OperatorConfig.from_env(
        **{name: getattr(args, name) for name in FLAGS},
        baselines=False if args.no_baselines else None,
    )


def _check_inherited_weights(cfg: OperatorConfig) -> None:
    """``HULK_GNN_WEIGHTS`` (what ``hulk plan`` reads too), when ``--gnn-weights`` is not
    given, is checked like it: a bad file must stop the start, not fail every round."""
    from hulk_planner.api import USES_GNN
    from hulk_planner.gnn.planner import WEIGHTS_ENV, check_weights

    inherited = os.environ.get(WEIGHTS_ENV)
    if inherited and not cfg.gnn_weights and cfg.planner in USES_GNN:
        check_weights(inherited, WEIGHTS_ENV)


def check_port(flag: str, host: str, port: int, off: str) -> None:
    """A port the operator is to serve on must be free now (else kopf fails later, with a
    traceback)."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise port_taken(flag, host, port, off, exc) from None


def port_taken(
    flag: str, host: str, port: int, off: str, exc: OSError, host_flag: str | None = None
) -> InvalidRequest:
    """Why the operator cannot listen on ``host``:``port``, and the fix, naming ``flag``:
    the port is held; or, naming ``host_flag`` where the host has one of its own, the
    address is none of this machine's or IPv6 is off here."""
    import errno

    from hulk_planner.errors import InvalidRequest

    fix = {
        errno.EADDRNOTAVAIL: f"{host} is no address of this machine: listen on 0.0.0.0 or ::",
        errno.EAFNOSUPPORT: "IPv6 is off on this machine: listen on 0.0.0.0",
    }.get(exc.errno or 0)
    shown = f"[{host}]" if ":" in host else host
    return InvalidRequest(
        (host_flag or flag) if fix else flag,
        f"cannot listen on {shown}:{port} ({exc.strerror or exc})",
        fix or f"another process holds it: pick another port, {off}",
    )


def serve_metrics(
    flag: str,
    port: int,
    off: str,
    address: str,
    address_flag: str = setting_field("metrics_address"),
) -> Metrics:
    """The operator's metrics, served on ``port`` from now on: the port is taken at the
    check, not when kopf starts (a port free at a check and taken by the start, e.g. by an
    outgoing connection while the demo's sandbox came up, failed kopf's start-up, which
    retried it a minute later: a CI run)."""
    from hulk_operator.metrics import Metrics

    metrics = Metrics()
    try:
        metrics.serve(port, address)
    except OSError as exc:
        raise port_taken(flag, address, port, off, exc, address_flag) from None
    return metrics


def run(args: argparse.Namespace) -> int:
    from hulk_operator import kube
    from hulk_planner.errors import HulkError, InvalidRequest

    try:  # settings and credentials checked before kopf starts: a clear error, no traceback
        cfg = config_from_args(args)
        _check_inherited_weights(cfg)
        kube.configuration(args.kubeconfig)
        kept: dict[str, Any] = {}  # what each run of kopf takes over: the metrics it serves
        if cfg.metrics_port:
            kept["metrics"] = serve_metrics(
                setting_field("metrics_port"),
                cfg.metrics_port,
                "or 0 to turn it off",
                cfg.metrics_address,
            )
        if args.liveness:
            url = urlsplit(args.liveness)
            try:
                port = url.port or 80
            except ValueError:
                port = -1
            if url.scheme != "http" or not url.hostname or port < 0:
                raise InvalidRequest(
                    "--liveness", f"{args.liveness!r} is not an http://HOST:PORT/PATH URL",
                    "e.g. http://0.0.0.0:8080/healthz, or '' to turn it off",
                )  # fmt: skip
            check_port("--liveness", url.hostname, port, "or '' to turn it off")
    except HulkError as exc:
        print(f"hulk operator: error: {exc}", file=sys.stderr)
        return 2
    import kopf

    # The timer's interval is read when the handlers are imported.
    os.environ["HULK_OPERATOR_RECONCILE_INTERVAL_S"] = str(cfg.reconcile_interval_s)
    import hulk_operator.handlers  # noqa: F401

    # kopf's formatter: a line about an object starts with it ("[team-a/gpt2] Planned: ...")
    kopf.configure(
        debug=args.verbose,  # (asyncio's warnings too)
        verbose=args.verbose,
        log_format="%(asctime)s %(levelname)s %(name)s: %(message)s",  # type: ignore[arg-type]
        log_prefix=True,
    )
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from hulk_operator import crd, kube

    server = ""
    # (urllib3 logged each of its retries against a server that is down, three warnings
    # before the one-line error: a user trial)
    pool_log = logging.getLogger("urllib3.connectionpool")
    pool_level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    try:  # (before, an API server down or refusing was a traceback: a review)
        with kube.make_client(args.kubeconfig) as api:
            server = str(api.configuration.host or "")
            if args.install_crds:
                names = crd.install(api, peering=not args.standalone)
                logging.info("CRDs installed: %s", ", ".join(names))
            crd.jobs_served(api)
            peers = (
                crd.live_peers(api, args.peering, namespaces=args.namespace or ())
                if args.standalone
                else []
            )
            if peers:  # (before, both acted on the same jobs, with no word
                # but a StagePodTaken telling a user to delete healthy pods: a user trial)
                logging.warning(
                    "--standalone, while operators under peering %r run (%s): none pauses for "
                    "this one, nor it for them, and both act on the jobs they share; run one "
                    "operator, or drop --standalone",
                    args.peering,
                    "; ".join(peers),
                )
            if not args.standalone:
                # kopf starts paused and stays paused, silently, until its peering object exists.
                try:
                    crd.ensure_peering(api, args.peering, namespaces=args.namespace)
                except HulkError as exc:
                    print(f"hulk operator: error: {exc}", file=sys.stderr)
                    return 2
                other = crd.overlapping_peers(api, args.peering, namespaces=args.namespace or ())
                if other:  # (before, both acted, with no word: a user trial)
                    logging.warning(
                        "an operator serving %s runs (%s): neither pauses for the other, and both "
                        "act on the jobs they share; run one operator (-A, or -n for each "
                        "namespace), or stop that one",
                        "named namespaces" if not args.namespace else "every namespace",
                        "; ".join(other),
                    )
    except (HTTPError, OSError) as exc:
        at = f" at {server}" if server else ""
        print(
            f"hulk operator: error: --kubeconfig: cannot reach the API server{at} "
            f"({kube.reason_of(exc)}) (check that the cluster is up and the kubeconfig's "
            "server and context)",
            file=sys.stderr,
        )
        return 2
    except ApiException as exc:
        fix = (
            "give the operator the chart's ClusterRole (charts/hulk), or credentials that may"
            if exc.status in (401, 403)
            else "check the cluster's API server"
        )
        print(
            f"hulk operator: error: the API server answered {exc.status} "
            f"{exc.reason or ''} at start ({fix})",
            file=sys.stderr,
        )
        return 2
    finally:
        pool_log.setLevel(pool_level)
    priority = args.priority if args.priority is not None else random.randint(1, 2**30)
    me = identity()  # (the same for each run of kopf)
    while True:
        stop = threading.Event()  # (set by ``operator_cleanup`` too: kopf waits on it)
        memo = kopf.Memo(
            kubeconfig=args.kubeconfig,
            config=cfg,
            namespaces=args.namespace or [],
            stop_flag=stop,
            **kept,
        )
        with PauseWatch(memo, stop, peering=not args.standalone) as watch:
            kopf.run(
                clusterwide=not args.namespace,
                namespaces=args.namespace,
                standalone=args.standalone,
                peering_name=None if args.standalone else args.peering,
                priority=priority,
                identity=me,  # type: ignore[arg-type]  # (kopf's Identity: a NewType of str)
                liveness_endpoint=args.liveness or None,
                memo=memo,
                stop_flag=stop,
            )
        if not watch.restart:
            return 0
        kept = {"metrics": memo["metrics"]} if "metrics" in memo else {}
        logging.info(
            "resumed after a pause by a peer: starting again, for a view of the cluster "
            "without the objects deleted during the pause"
        )
