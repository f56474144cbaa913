"""``hulk train``: generate labelled clusters and train the GNN planner.

The default run (64 clusters of 20-500 servers labelled by the search planner with 1,500
moves each, 60 epochs) takes a few minutes on 2 CPU cores and writes
``out/gnn/hulk-gnn.pt`` and ``.json``; ``--output hulk_planner/gnn/weights/hulk-gnn.pt``
replaces the shipped weights (the settings they were made with are in
``hulk_planner/gnn/weights/hulk-gnn.json``). Labelled examples are cached as JSON lines
under ``$HULK_CACHE/gnn-data/`` (``--data`` to choose the file), keyed by the settings and
a digest of the search code (a changed search labels anew), and a run that stops is
resumed from the examples already written. A ``--data`` file that holds anything else
(another run's settings, or not examples at all) is refused, never replaced.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from hulk_planner.errors import HulkError, InvalidRequest
from hulk_planner.gnn.data import (
    Example,
    GenerationSettings,
    data_header,
    examples_sha256,
    generate_to_file,
)
from hulk_planner.gnn.planner import cuda_problem, untrained
from hulk_planner.model import check_positive, check_seed
from hulk_planner.presets import PRESETS

# upper bounds of hulk train's sizes (the labelling search plans clusters up to
# MAX_SERVERS; an embedding of MAX_HIDDEN makes weights of about 100 MB)
MAX_SERVERS = 20_000
MAX_HIDDEN = 2_048
MAX_GCN_LAYERS = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # first in the `hulk train` process, before torch_geometric is imported (below): it
    # scripts two classes as it loads, which torch >= 2.10 reports as deprecated on every
    # run (pyg-team/pytorch_geometric#10697), noise to a user and not ours to fix
    warnings.filterwarnings(
        "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
    )
    g = parser.add_argument_group("data generation")
    d = GenerationSettings()
    g.add_argument(
        "--examples",
        type=int,
        default=d.examples,
        help="labelled clusters, 2 or more (%(default)s)",
    )
    g.add_argument("--min-servers", type=int, default=d.min_servers,
                   help="servers of the smallest generated cluster (%(default)s)")  # fmt: skip
    g.add_argument("--max-servers", type=int, default=d.max_servers,
                   help="servers of the largest generated cluster (%(default)s)")  # fmt: skip
    g.add_argument(
        "--max-jobs", type=int, default=d.max_jobs, help="jobs per cluster, at most (%(default)s)"
    )
    g.add_argument(
        "--iterations",
        type=int,
        default=d.iterations,
        help="search moves per label (%(default)s); more is slower and better",
    )
    g.add_argument(
        "--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes (%(default)s)"
    )
    g.add_argument(
        "--data",
        type=Path,
        help="JSON-lines file of examples (default: $HULK_CACHE, else ~/.cache/hulk, "
        "gnn-data/examples-KEY.jsonl, KEY from these generation settings)",
    )
    t = parser.add_argument_group("training")
    from hulk_planner.gnn.settings import TrainSettings

    s = TrainSettings()
    t.add_argument("--epochs", type=int, default=s.epochs,
                   help="passes over the training examples (%(default)s)")  # fmt: skip
    t.add_argument(
        "--batch-size", type=int, default=s.batch_size, help="graphs per batch (%(default)s)"
    )
    t.add_argument("--lr", type=float, default=s.lr, help="peak learning rate (%(default)s)")
    t.add_argument(
        "--weight-decay",
        type=float,
        default=s.weight_decay,
        help="AdamW weight decay (%(default)s)",
    )
    t.add_argument("--hidden", type=int, default=s.hidden, help="embedding size (%(default)s)")
    t.add_argument("--gcn-layers", type=int, default=s.gcn_layers,
                   help="GCN layers after the edge pooling (%(default)s)")  # fmt: skip
    t.add_argument("--device", default=s.device, help="auto (CUDA when present), cpu or cuda")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds generation and training (%(default)s)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("out/gnn/hulk-gnn.pt"),
        help="weights file; settings go next to it as .json (%(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _cache_path(settings: GenerationSettings) -> Path:
    """Keyed by the data file's header: the settings but the count (a longer run extends
    the same file) and the labelling search's code digest (another search labels anew)."""
    key = hashlib.sha256(data_header(settings).encode()).hexdigest()[:12]
    root = Path(os.environ.get("HULK_CACHE", Path.home() / ".cache" / "hulk"))
    return root / "gnn-data" / f"examples-{key}.jsonl"


def _generation(args: argparse.Namespace) -> GenerationSettings:
    return GenerationSettings(
        examples=args.examples,
        min_servers=args.min_servers,
        max_servers=args.max_servers,
        max_jobs=args.max_jobs,
        iterations=args.iterations,
        seed=args.seed,
    )


def check_data_file(path: Path, header: str) -> None:
    """An existing ``--data`` file must hold examples of these settings: ``hulk train``
    extends it, and must not replace a file it did not write or labels made otherwise."""
    if not path.is_file() or path.is_symlink():
        raise InvalidRequest(
            "--data",
            f"{path} is not a regular file (hulk train writes its examples there)",
            "name a new file, or an examples file hulk train wrote",
        )
    try:
        with open(path) as f:
            first = f.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest("--data", f"{path} cannot be read: {exc}", "choose a file") from exc
    if path.stat().st_size == 0 or first == header:
        return
    try:
        theirs = json.loads(first).get("settings")
    except (ValueError, AttributeError):
        theirs = None
    if not isinstance(theirs, dict):
        raise InvalidRequest(
            "--data",
            f"{path} is not a file of `hulk train` examples (its first line is no settings header)",
            "name a new file, which hulk train writes, or an examples file it wrote",
        )
    ours = json.loads(header)["settings"]
    flags = {k: "--" + k.replace("_", "-") for k in ("iterations", "max_jobs", "max_servers")}
    flags.update({"min_servers": "--min-servers", "seed": "--seed"})
    flags["search_code"] = "the labelling search's code"
    diff = [
        f"{flags.get(k, k)} {theirs.get(k)!r} there, {ours.get(k)!r} now"
        for k in sorted(set(ours) | set(theirs))
        if theirs.get(k) != ours.get(k)
    ]
    raise InvalidRequest(
        "--data",
        f"{path} holds examples made otherwise ({'; '.join(diff)})",
        "give the same settings, another --data file, or delete it to label again",
    )


def check(args: argparse.Namespace) -> None:
    """Every flag checked before any labelling or training, so a bad one costs nothing and
    no run ends, after minutes of work, without writing its weights."""
    at_least = {
        "--examples": (args.examples, 2),
        "--min-servers": (args.min_servers, 2),
        "--max-jobs": (args.max_jobs, 1),
        "--iterations": (args.iterations, 1),
        "--workers": (args.workers, 1),
        "--epochs": (args.epochs, 1),
        "--batch-size": (args.batch_size, 1),
        "--hidden": (args.hidden, 1),
        "--gcn-layers": (args.gcn_layers, 0),
    }
    for flag, (value, low) in at_least.items():
        if value < low:
            # (each with its fix, as every error: a review)
            raise InvalidRequest(
                flag, f"must be at least {low}, got {value}", f"give {low} or more"
            )
    at_most = {  # (a trial: --hidden 100000 asked 80 GB of memory, a traceback;
        # --max-servers 100000000 grew for ever; --max-jobs 1000 was taken as the presets')
        "--max-servers": (args.max_servers, MAX_SERVERS, "the labelling search's clusters"),
        "--max-jobs": (args.max_jobs, len(PRESETS), "distinct presets a cluster's jobs use"),
        "--hidden": (args.hidden, MAX_HIDDEN, "the shipped weights use 64"),
        "--gcn-layers": (args.gcn_layers, MAX_GCN_LAYERS, "the shipped weights use 3"),
    }
    for flag, (value, high, what) in at_most.items():
        if value > high:
            raise InvalidRequest(
                flag, f"must be at most {high:,}, got {value:,}", f"give {high:,} or less ({what})"
            )
    if args.max_servers < args.min_servers:
        raise InvalidRequest(
            "--max-servers",
            f"{args.max_servers} is below --min-servers {args.min_servers}",
            f"give {args.min_servers} or more, or lower --min-servers",
        )
    check_seed("--seed", args.seed)
    check_positive("--lr", args.lr)
    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        raise InvalidRequest(
            "--weight-decay", f"must be a finite number, zero or more, got {args.weight_decay}"
        )
    device = str(args.device)
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise InvalidRequest("--device", f"unknown device {device!r}", "use auto, cpu or cuda")
    if device.startswith("cuda") and (why := cuda_problem(device)) is not None:
        raise InvalidRequest("--device", why, "use --device auto or cpu")
    if args.data is not None and (Path(args.data).exists() or Path(args.data).is_symlink()):
        check_data_file(Path(args.data), data_header(_generation(args)))
    elif args.data is not None:
        _writable_dir("--data", Path(args.data).parent)
    if Path(args.output).is_dir():  # ("" parses as ".")
        raise InvalidRequest(
            "--output",
            f"{str(args.output)!r} is a directory",
            "give a file path, e.g. out/gnn/hulk-gnn.pt",
        )
    if Path(args.output).suffix == ".json":
        raise InvalidRequest(
            "--output",
            f"{str(args.output)!r} ends in .json, the name of the settings file written beside "
            "the weights (it would overwrite them)",
            "give a .pt path, e.g. out/gnn/hulk-gnn.pt",
        )
    _writable_dir("--output", Path(args.output).parent)


def _writable_dir(flag: str, folder: Path) -> None:
    """``folder`` exists (made if missing) and takes a new file, or one line naming ``flag``:
    a file written and removed, as permissions alone do not tell (root, /sys, /proc)."""
    above = next((p for p in [folder, *folder.parents] if p.exists()), folder)
    if not above.is_dir():
        raise InvalidRequest(
            flag, f"{str(above)!r} is a file, not a directory", "choose a writable path"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOENT and folder.is_dir():  # (/proc: "No such file or
            # directory" of a directory that exists; a trial)
            reason = "it takes no new files: a virtual file system such as /proc or /sys"
        why = f"cannot write in {str(folder)!r} ({reason})"
        raise InvalidRequest(flag, why, "choose a writable path") from exc


def run(args: argparse.Namespace) -> int:
    # (torch first: without it, "needs the torch module" is the one thing to say, before
    # any flag; --help reads the settings without it)
    import torch  # noqa: F401

    try:
        check(args)
        return _run(args)
    except HulkError as exc:
        print(f"hulk train: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # (in training, "resume" read as if the epochs went on: they start again; a trial)
        said = (
            "every example is labelled and kept: the same command again trains anew on "
            "them, without labelling"
            if getattr(args, "labelled", False)
            else "the examples labelled so far are kept: run the same command again to resume"
        )
        print(f"hulk train: interrupted ({said})", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    gen = _generation(args)
    path = args.data or _cache_path(gen)
    t0 = time.perf_counter()

    now = 0  # clusters labelled by this run (a resumed run reads the others from the file)

    def bar(it: Iterator[Example], total: int) -> Iterator[Example]:
        nonlocal now
        for ex in tqdm(it, total=total, desc="label", unit="cluster", disable=args.quiet):
            now += 1
            yield ex

    examples = generate_to_file(gen, path, workers=args.workers, progress=bar)
    args.labelled = True  # (what an interruption from here on says)
    t_gen = time.perf_counter() - t0
    print(f"{len(examples)} labelled clusters in {path} ({now} labelled now, {t_gen:.0f} s)")

    import torch

    from hulk_planner.gnn.train import (
        TrainSettings,
        example_data,
        pick_device,
        save,
        train,
    )

    # (threads past the cores slowed training 2.5x: --workers 64 on 2 cores, a trial)
    torch.set_num_threads(max(1, min(args.workers, os.cpu_count() or 1)))
    settings = TrainSettings(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        hidden=args.hidden,
        gcn_layers=args.gcn_layers,
        seed=args.seed,
        device=args.device,
    )
    t1 = time.perf_counter()
    data = [example_data(ex) for ex in tqdm(examples, desc="graphs", disable=args.quiet)]

    def log(e: object) -> None:
        from hulk_planner.gnn.train import EpochLog

        assert isinstance(e, EpochLog)
        held_out = (
            f"val_loss {e.val_loss:.4f}  val_acc {e.val_accuracy:.4f}"
            if not math.isnan(e.val_accuracy)
            else "val - (too few examples to hold some out)"
        )
        msg = f"epoch {e.epoch:3d}  loss {e.loss:.4f}  acc {e.accuracy:.4f}  {held_out}  "
        msg += f"{e.seconds:.1f}s"
        tqdm.write(msg) if not args.quiet else print(msg)

    model, logs = train(data, settings, on_epoch=log, progress=not args.quiet)
    t_train = time.perf_counter() - t1
    weights, meta = save(
        model,
        args.output,
        generation={
            **gen.as_dict(),
            "data_file": path.name,
            "data_sha256": examples_sha256(path, len(examples)),
        },
        training=settings,
        logs=logs,
        extra={
            "wall_seconds": {"generation": round(t_gen, 1), "training": round(t_train, 1)},
            "device_used": str(pick_device(args.device)),
        },
    )
    size = weights.stat().st_size
    print(f"wrote {weights} ({size / 1024:.0f} KiB) and {meta}")
    weak = untrained(weights)
    if weak:
        print(f"hulk train: note: {weak}", file=sys.stderr)
    return 0
