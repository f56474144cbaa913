"""``hulk demo``: the operator on the sandbox with the Hulk paper's cluster.

Brings up the sandbox (47 kwok nodes named after the paper's servers), runs the operator in
this process, applies the paper's four jobs (``examples/paper-jobs.yaml``: created as
``kubectl apply`` creates them, its last-applied-configuration annotation and field manager
included, so ``kubectl apply -f`` of the edited file updates them), prints where
their stages landed, deletes a node that hosts a stage and shows the re-placement, writes a
PNG of the plan, and tears everything down (``--keep``: the operator serves on until
Ctrl-C, then the sandbox and its jobs stay).
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "paper-jobs.yaml"
TRAINER_CONFIGMAP = "hulk-train-stage"  # examples/paper-jobs.yaml mounts it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=".sandbox/demo", help="sandbox state directory")
    parser.add_argument("--jobs", default=str(EXAMPLES), help="HulkTrainingJob manifests")
    parser.add_argument("--png", default="hulk-demo-plan.png", help="where to write the plot")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="the operator serves on until Ctrl-C; the sandbox and jobs stay after it",
    )
    parser.add_argument(
        "--namespace",
        default="hulk-demo",
        help="where the jobs go and the operator serves (%(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the operator's Prometheus metrics on this port, e.g. 9090 (default: "
        "$HULK_OPERATOR_METRICS_PORT, else off)",
    )
    parser.add_argument(
        "--replay-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --keep: publish the paper's latencies again this often, 0 for never "
        "(default: 60; as probes would, else they age past the operator's "
        "--latency-max-age-s; NodeLatency objects you delete come back)",
    )


def job_documents(path: str | Path) -> list[dict[str, Any]]:
    """The HulkTrainingJobs of a manifest file, checked as the operator checks them (a
    ``HulkError`` if one is wrong), as the demo creates them (``applied.as_applied``): the
    jobs alone, another API's objects skipped, a List's items each (before, a List was
    created as a job: a review)."""
    from hulk_planner import io

    placed = [(str(path), io.without_other_apis(io.load_documents(path)))]
    io.jobs_from_documents(placed, operator=True)
    return [doc for _, doc in io.placed_documents(placed)]


def _wait(what: str, fn: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _table(custom: Any, ns: str) -> list[dict[str, Any]]:
    from hulk_operator import GROUP, PLURAL, VERSION

    return list(custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"])


def _show(jobs: list[dict[str, Any]]) -> None:
    for j in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        s = j.get("status") or {}
        print(
            f"  {j['metadata']['name']:<12} {s.get('phase', '-'):<8} "
            f"{s.get('numStages', 0):>2} stages on {s.get('numNodes', 0):>2} servers, "
            f"predicted {s.get('predictedIterationSeconds')} s/iteration, "
            f"replans {s.get('replans', 0)}"
        )
        for st in (s.get("plan") or {}).get("stages") or []:
            nodes = ", ".join(f"{n['name']}({n['region']})" for n in st["nodes"])
            print(
                f"      stage {st['index']:>2} layers [{st['layers']['start']:>3}, "
                f"{st['layers']['end']:>3}): {nodes}"
            )
        for b in s.get("baselines") or []:
            t = b.get("predictedIterationSeconds")
            print(f"      {b['planner']}: " + ("not placed" if t is None else f"{t} s/iteration"))


def _pods(core: Any, ns: str, job: str) -> dict[str, str]:
    """Node -> uid of the job's live stage pods."""
    pods = core.list_namespaced_pod(ns, label_selector=f"hulk.dev/job={job}").items
    return {p.spec.node_name: p.metadata.uid for p in pods if not p.metadata.deletion_timestamp}


def _plot(cluster: Any, jobs: list[dict[str, Any]], path: str, title: str) -> None:
    from hulk_operator import status as st
    from hulk_planner.model import Plan

    plans = [st.job_plan_from_status(j["metadata"]["name"], j.get("status")) for j in jobs]
    try:
        from hulk_planner.plot import plot_plan

        png = plot_plan(cluster, Plan("hulk", tuple(p for p in plans if p)), path, title=title)
        print(f"plot: {png}")
    except Exception as exc:  # plotting is a nicety; the demo goes on
        print(f"(no plot: {exc})")


class _Prefixed(logging.Formatter):
    """A log line with the object it is about, as ``hulk operator`` writes it (kopf puts
    the object in a record's ``k8s_ref``): ``kopf.objects: [ns/name] Planned: ...``."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict) and ref.get("name"):
            where = "/".join(str(ref[k]) for k in ("namespace", "name") if ref.get(k))
            head = f"{record.name}: "
            line = line.replace(head, f"{head}[{where}] ", 1)
        return line


def _log_to(log_path: Path) -> logging.Handler:
    """``--keep``: the operator's log (what it did to each job, kopf's lines) written to
    ``log_path`` from its start, the demo's own jobs included (before, from the end of the
    demo: the file stayed empty until a job was applied; a user trial)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(log_path)
    to_file.setFormatter(_Prefixed("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(to_file)
    root.setLevel(min(root.level or logging.INFO, logging.INFO))
    return to_file


def _serve(
    kubeconfig: str,
    namespace: str,
    log_path: Path,
    to_file: logging.Handler,
    replay: Callable[[], None],
    every_s: float,
    metrics_port: int = 0,
) -> None:
    """``--keep``: the operator (a thread of this process) serves on until Ctrl-C or
    SIGTERM, its log in ``log_path`` (``to_file``: closed at the end), the latencies
    published again every ``every_s`` (``replay``); the sandbox and its jobs stay after
    it."""
    root = logging.getLogger()
    print(
        f"\nthe operator keeps serving namespace {namespace}; in another shell:\n"
        f"  kubectl --kubeconfig {kubeconfig} -n {namespace} get hjob\n"
        f"  kubectl --kubeconfig {kubeconfig} -n {namespace} apply -f <your HulkTrainingJob>\n"
        f"  tail -f {log_path}   (the operator's log)\n"
        + (
            f"  curl -s localhost:{metrics_port}/metrics | grep ^hulk_   (its Prometheus metrics)\n"
            if metrics_port
            else "  (hulk demo --keep --metrics-port 9090 serves its Prometheus metrics)\n"
        )
        + (
            f"the paper's latencies are published again every {every_s:g} s, as probes would "
            "(--replay-every)\n"
            if every_s > 0
            else "the paper's latencies are not published again (--replay-every 0)\n"
        )
        + "Ctrl-C stops the operator (the sandbox and its jobs stay)",
        flush=True,
    )
    # The signal handler only records the signal, and the loop looks every 0.2 s. (It raised
    # KeyboardInterrupt wherever the main thread was: inside a finalizer of the replay's
    # HTTP objects, Python prints that exception and drops it, and the demo served on
    # after SIGTERM: a flaky CI run, reproduced in tests/hulk_operator/test_operator_demo.py.)
    # A second signal raises, for a replay stuck in an API call (each has a 10 s timeout),
    # while the loop runs (not in the clean-up after it: a traceback; a review).
    stopping: list[int] = []
    looping = [True]

    def stop(signum: int, frame: Any) -> None:
        if stopping and looping[0]:
            raise KeyboardInterrupt
        stopping.append(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        due = time.monotonic() + every_s
        try:
            while not stopping:
                time.sleep(0.2)
                if every_s <= 0 or time.monotonic() < due or stopping:
                    continue
                try:
                    replay()
                except Exception as exc:  # (the sandbox stopped under us, say): said, served on
                    print(f"latencies not published again: {exc}", flush=True)
                due = time.monotonic() + every_s
        except KeyboardInterrupt:
            pass
        looping[0] = False
        print("\noperator stopped", flush=True)
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for s, handler in old.items():
            signal.signal(s, handler)


def run(args: argparse.Namespace) -> int:
    from kubernetes import client

    from hulk_operator import crd
    from hulk_operator import status as st
    from hulk_operator.applied import create_applied
    from hulk_operator.cli import serve_metrics
    from hulk_operator.config import OperatorConfig
    from hulk_operator.runner import OperatorThread
    from hulk_planner.datasets import paper_cluster
    from hulk_planner.errors import HulkError, InvalidRequest, each_error
    from hulk_sandbox.errors import SandboxError
    from hulk_sandbox.latencies import publish_paper
    from hulk_sandbox.sandbox import Sandbox

    try:  # the manifests checked before anything starts: a bad file costs no sandbox
        docs = job_documents(args.jobs)
        config = OperatorConfig.from_env()
        if args.metrics_port is not None:
            config = replace(config, metrics_port=args.metrics_port)  # (checked by it)
        if not 0 <= args.replay_every < math.inf:  # (inf: never, said otherwise; a review)
            why = (
                "is below 0"
                if args.replay_every < 0
                else "is not finite"
                if args.replay_every == math.inf
                else "is not a number"
            )
            raise InvalidRequest(
                "--replay-every", f"{args.replay_every:g} {why}", "give seconds, or 0 for never"
            )
        served: dict[str, Any] = {}  # (before: no way to see the demo's metrics; a user trial)
        if config.metrics_port:  # (served from here: see serve_metrics)
            served["metrics"] = serve_metrics(  # (the address: from the environment alone)
                "--metrics-port",
                config.metrics_port,
                "or leave it out",
                config.metrics_address,
                "HULK_OPERATOR_METRICS_ADDRESS",
            )
    except HulkError as exc:
        for each in each_error(exc):
            print(f"hulk demo: error: {each}", file=sys.stderr)
        return 2
    names = [d["metadata"]["name"] for d in docs]
    paper = paper_cluster()
    try:  # its folder, before any process starts (a file, an unwritable path, an empty
        # one: tracebacks, or the current folder, before; a review)
        if not str(args.dir).strip():
            raise SandboxError("--dir: is empty", "give a folder, e.g. --dir .sandbox/demo")
        try:
            Path(args.dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(
                f"--dir {args.dir}: cannot create it ({exc.strerror or exc})",
                "choose a writable path",
            ) from None
        box = Sandbox(args.dir)
        seconds = box.up(paper.servers, die_with_parent=not args.keep)
    except SandboxError as exc:
        print(f"hulk demo: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"sandbox up with {len(paper.servers)} nodes in {seconds:.1f}s "
        f"(kubectl --kubeconfig {box.kubeconfig})"
    )
    try:
        with box.api_client() as api:
            crd.install(api, peering=False)

            # No probe agents here (every sandbox node is this machine): replay the paper's
            # measured latencies as NodeLatency objects, the shape the probe publishes, and
            # its pairs without a link (they cannot communicate) as unreachable reports.
            def replay() -> None:  # for the nodes there (a deleted one's goes with it)
                publish_paper(api)

            first = publish_paper(api)
            print(
                f"published the paper's {first.links} measured links, and its {first.cut} "
                "pairs without one as unreachable, as NodeLatency"
            )
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            core.create_namespace({"metadata": {"name": args.namespace}})  # type: ignore[arg-type]
            trainer = EXAMPLES.parent / "train_stage.py"
            if trainer.is_file():  # what the paper's jobs mount, as on a real cluster
                # (kwok runs no container, but a pod shown there needs it: a user trial)
                core.create_namespaced_config_map(
                    args.namespace,
                    {  # type: ignore[arg-type]
                        "metadata": {"name": TRAINER_CONFIGMAP},
                        "data": {trainer.name: trainer.read_text()},
                    },
                )
            _wait(
                "the default ServiceAccount",
                lambda: core.list_namespaced_service_account(args.namespace).items,
            )
            log_path = Path(args.dir) / "operator.log"
            to_file = _log_to(log_path) if args.keep else None
            try:
                op = OperatorThread(
                    box.kubeconfig, namespaces=[args.namespace], config=config, extra_memo=served
                ).start()
            except (RuntimeError, TimeoutError) as exc:  # (a traceback before)
                where = f" (its log: {log_path})" if to_file is not None else ""
                print(f"hulk demo: error: {exc}{where}", file=sys.stderr)
                return 1
            try:
                start = time.monotonic()
                for d in docs:  # as `kubectl apply` creates them, so that a later one
                    # patches them from the file (without kubectl's annotation it warned and
                    # kept fields removed from the file; a user trial)
                    create_applied(
                        custom, "hulk.dev", "v1alpha1", args.namespace, "hulktrainingjobs", d
                    )

                def phases() -> set[Any]:
                    return {
                        (j.get("status") or {}).get("phase") for j in _table(custom, args.namespace)
                    }

                _wait("every job Running", lambda: phases() == {"Running"})
                print(f"\n{len(names)} jobs Running {time.monotonic() - start:.1f}s after apply:")
                jobs = _table(custom, args.namespace)
                _show(jobs)
                _plot(paper, jobs, args.png, "Hulk operator: the paper's 4 jobs")
                victim_job = max(jobs, key=lambda j: j["status"].get("numNodes", 0))
                vplan = st.job_plan_from_status(
                    victim_job["metadata"]["name"], victim_job["status"]
                )
                assert vplan is not None
                victim = vplan.stages[-1].nodes[0]
                jname = victim_job["metadata"]["name"]
                print(f"\ndeleting node {victim} (a stage of {jname})")
                before = _pods(core, args.namespace, jname)
                t0 = time.monotonic()
                box.delete_node(victim)
                _wait(
                    "the re-plan",
                    lambda: any(
                        (j.get("status") or {}).get("replans")
                        for j in _table(custom, args.namespace)
                    ),
                )
                _wait("every job Running again", lambda: phases() == {"Running"})
                print(f"re-placed and Running again in {time.monotonic() - t0:.1f}s:")
                _show([j for j in _table(custom, args.namespace) if j["metadata"]["name"] == jname])
                after = Path(args.png).with_name(Path(args.png).stem + "-after.png")
                _plot(
                    paper.without([victim]),
                    _table(custom, args.namespace),
                    str(after),
                    f"after deleting {victim}",
                )
                for e in core.list_namespaced_event(args.namespace).items:
                    if e.reason == "Replanned":
                        print(f"  event Replanned: {e.message}")
                job: Any = custom.get_namespaced_custom_object(
                    "hulk.dev", "v1alpha1", args.namespace, "hulktrainingjobs", jname
                )
                now = _pods(core, args.namespace, jname)
                kept = set(before.values()) & set(now.values())
                planned = sorted(n["name"] for s in job["status"]["plan"]["stages"]
                                 for n in s["nodes"])  # fmt: skip
                same = planned == sorted(now)
                print(
                    f"  pods: {len(now) - len(kept)} replaced, {len(kept)} kept; "
                    f"status plan {'matches' if same else 'DOES NOT match'} the live pods"
                )
                if to_file is not None:
                    _serve(
                        box.kubeconfig,
                        args.namespace,
                        log_path,
                        to_file,
                        replay,
                        args.replay_every,
                        config.metrics_port,
                    )
            finally:
                try:
                    if not args.keep:
                        for n in names:
                            custom.delete_namespaced_custom_object(
                                "hulk.dev", "v1alpha1", args.namespace, "hulktrainingjobs", n
                            )
                        _wait("jobs deleted", lambda: not _table(custom, args.namespace), 60)
                finally:
                    op.stop()  # else its thread outlives the sandbox, retrying for minutes
    finally:
        if args.keep:
            print(
                f"\nsandbox kept: kubectl --kubeconfig {box.kubeconfig} get hjob -A; "
                f"stop it with: hulk sandbox down --dir {args.dir}"
            )
        else:
            box.down()
            print("\nsandbox torn down")
    return 0
