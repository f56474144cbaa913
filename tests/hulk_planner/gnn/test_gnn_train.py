"""A tiny end-to-end run: label clusters, train, save, plan with the result (CPU, seconds)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_geometric  # noqa: F401

from hulk_planner.cost import CostModel, validate_plan
from hulk_planner.errors import InvalidRequest
from hulk_planner.gnn import cli
from hulk_planner.gnn import data as gnn_data
from hulk_planner.gnn.data import (
    Example,
    GenerationSettings,
    data_header,
    generate,
    generate_to_file,
    load_examples,
)
from hulk_planner.gnn.infer import read_pt
from hulk_planner.gnn.planner import plan_gnn
from hulk_planner.gnn.train import TrainSettings, example_data, save, train

TINY = GenerationSettings(examples=4, min_servers=20, max_servers=30, max_jobs=3, iterations=40)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    path = tmp_path_factory.mktemp("data") / "ex.jsonl"
    out = generate_to_file(TINY, path, workers=1)
    assert len(out) == 4 and load_examples(path) == out
    # resuming reads the file instead of labelling again; a prefix is a shorter data set
    again = generate_to_file(TINY, path, workers=1)
    assert [e.to_json() for e in again] == [e.to_json() for e in out]
    short = GenerationSettings(**{**TINY.as_dict(), "examples": 2, "presets": TINY.presets})
    assert [e.to_json() for e in generate_to_file(short, path)] == [e.to_json() for e in out[:2]]
    return out


def test_the_recorded_data_hash_names_the_examples_trained_on(tmp_path: Path) -> None:
    """Before, the whole file's sha256: a run with fewer --examples than the file holds,
    or one whose file a later run extended, recorded a hash of no data it trained on (a
    trial). Now the header's and the first N examples', as ``head -n N+1`` gives them."""
    import hashlib

    from hulk_planner.gnn.data import examples_sha256

    path = tmp_path / "d.jsonl"
    lines = ['{"settings": {}}\n', *(f'{{"example": {k}}}\n' for k in range(12))]
    path.write_text("".join(lines[:5]))
    four = examples_sha256(path, 4)
    assert four == hashlib.sha256(path.read_bytes()).hexdigest()  # the file as it was
    path.write_text("".join(lines))  # extended to 12
    assert examples_sha256(path, 4) == four
    assert examples_sha256(path, 12) == hashlib.sha256(path.read_bytes()).hexdigest() != four


def test_labels_of_another_search_are_made_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = GenerationSettings(**{**TINY.as_dict(), "examples": 1, "presets": TINY.presets})
    path = tmp_path / "ex.jsonl"
    (fresh,) = generate_to_file(one, path, workers=1)
    assert fresh.labels
    header, line = path.read_text().splitlines()
    assert gnn_data.search_code_digest() in header
    blanked = json.loads(line)
    blanked["labels"] = {}
    path.write_text(header + "\n" + json.dumps(blanked) + "\n")
    (reused,) = generate_to_file(one, path, workers=1)  # same search: the file is read
    assert reused.labels == {}
    cached = cli._cache_path(one)
    assert cached == cli._cache_path(TINY)  # the count aside, the settings key the file
    monkeypatch.setattr(gnn_data, "search_code_digest", lambda: "another-search")
    assert cli._cache_path(one) != cached
    (relabelled,) = generate_to_file(one, path, workers=1)
    assert relabelled.labels == fresh.labels
    assert "another-search" in path.read_text().splitlines()[0]


def test_examples_are_labelled(examples: list[Example]) -> None:
    for ex in examples:
        cluster = ex.cluster()
        assert 20 <= len(cluster.servers) <= 30
        jobs = {j.name for j in ex.jobs}
        assert set(ex.labels) <= set(cluster.index)
        assert set(ex.labels.values()) <= jobs
        data = example_data(ex)
        assert data.y.shape == (len(cluster.servers),)
        assert int(data.y.max()) <= len(ex.jobs)
        assert data.job_x.shape[0] == len(ex.jobs)


def test_train_save_and_plan(examples: list[Example], tmp_path: Path) -> None:
    data = [example_data(ex) for ex in examples]
    settings = TrainSettings(epochs=3, batch_size=2, hidden=16, gcn_layers=1, device="cpu")
    model, logs = train(data, settings, progress=False)
    assert [e.epoch for e in logs] == [1, 2, 3]
    assert all(0.0 <= e.accuracy <= 1.0 and e.loss > 0 for e in logs)
    # seeded: the same settings give the same weights
    model2, _ = train(data, settings, progress=False)
    for (k, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    weights, meta = save(
        model, tmp_path / "w.pt", generation=TINY.as_dict(), training=settings, logs=logs
    )
    info = json.loads(meta.read_text())
    assert info["generation"]["iterations"] == 40 and info["training"]["epochs"] == 3
    assert len(info["epochs"]) == 3 and info["model"]["hidden"] == 16
    assert read_pt(weights)["config"]["gcn_layers"] == 1
    ex = examples[0]
    cluster, jobs = ex.cluster(), ex.job_list()
    plan = plan_gnn(CostModel(cluster), jobs, weights=weights, max_iterations=20)
    validate_plan(plan, cluster, jobs)
    assert plan.planner == "hulk" and plan.jobs


def test_the_bar_counts_each_epoch_before_its_log_line(
    examples: list[Example], capsys: pytest.CaptureFixture[str]
) -> None:
    """Iterated over the epochs, the bar counted an epoch once the next began: it showed
    0/3 beside epoch 1's log line, and 3/3 only at the end (a trial)."""
    data = [example_data(ex) for ex in examples]
    settings = TrainSettings(epochs=3, batch_size=2, hidden=8, gcn_layers=1, device="cpu")
    shown: list[str] = []

    def on_epoch(log: Any) -> None:  # what the terminal shows as the log line is written
        err = capsys.readouterr().err
        shown.append(err.rsplit("\r", 1)[-1])

    train(data, settings, on_epoch=on_epoch, progress=True)
    assert len(shown) == 3 and all(
        f" {k}/3 " in s for k, s in zip((1, 2, 3), shown, strict=True)
    ), shown


def test_cli_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out = tmp_path / "gnn" / "hulk-gnn.pt"
    args = parser.parse_args(
        [
            "--examples", "3", "--min-servers", "20", "--max-servers", "24",
            "--max-jobs", "2", "--iterations", "20", "--workers", "1",
            "--epochs", "2", "--hidden", "8", "--gcn-layers", "1", "--device", "cpu",
            "--weight-decay", "0.05",
            "--data", str(tmp_path / "d.jsonl"), "--output", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert cli.run(args) == 0
    text = capsys.readouterr().out
    # three examples hold none out (val_fraction 0.1): the log says so, not "val_loss nan"
    assert "epoch   1" in text and "wrote" in text and "nan" not in text
    assert "val - (too few examples to hold some out)" in text
    assert out.exists() and out.with_suffix(".json").exists()
    assert json.loads(out.with_suffix(".json").read_text())["training"]["weight_decay"] == 0.05
    bad = parser.parse_args(["--examples", "1", "--data", str(tmp_path / "x.jsonl")])
    assert cli.run(bad) == 2


def test_cli_train_output_has_no_dependency_warnings(tmp_path: Path) -> None:
    """A fresh ``hulk train`` (torch and torch_geometric imported anew) prints its progress
    and results, not torch_geometric's import-time deprecation warning."""
    run = subprocess.run(
        [
            sys.executable, "-m", "hulk", "train", "--examples", "2", "--min-servers", "20",
            "--max-servers", "22", "--max-jobs", "1", "--iterations", "10", "--workers", "1",
            "--epochs", "1", "--hidden", "8", "--gcn-layers", "1", "--device", "cpu",
            "--data", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "w.pt"), "--quiet",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "wrote" in run.stdout
    assert "Warning" not in run.stderr, run.stderr
    # weights that call every server idle are told of (before, not at all: a laptop trial)
    from hulk_planner.gnn.planner import UNTRAINED, untrained

    weak = untrained(tmp_path / "w.pt") is not None
    assert (f"hulk train: note: {UNTRAINED}" in run.stderr.splitlines()) == weak, run.stderr


def test_hulk_train_help_imports_no_torch() -> None:
    """``hulk train --help`` took about 5 s: its defaults were read from ``train.py``,
    which imports torch and PyG (a trial)."""
    code = (
        "import argparse, sys; from hulk_planner.gnn import cli; "
        "cli.add_arguments(argparse.ArgumentParser()); "
        "print(sorted(m for m in ('torch', 'torch_geometric') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr)


def test_an_interruption_says_what_the_same_command_does_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted while training, it said "run the same command again to resume", and the
    next run trained from epoch 1 (a trial): labelling resumes, training starts anew."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        ["--data", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "w.pt")]
    )

    def interrupted(labelled: bool) -> Callable[[argparse.Namespace], int]:
        def run(a: argparse.Namespace) -> int:
            if labelled:
                a.labelled = True
            raise KeyboardInterrupt

        return run

    monkeypatch.setattr(cli, "_run", interrupted(False))
    assert cli.run(args) == 130
    assert (
        "labelled so far are kept: run the same command again to resume" in capsys.readouterr().err
    )
    monkeypatch.setattr(cli, "_run", interrupted(True))
    assert cli.run(args) == 130
    assert (
        "the same command again trains anew on them, without labelling" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--epochs", "-1"], "--epochs: must be at least 1, got -1 (give 1 or more)"),
        (["--examples", "0"], "--examples: must be at least 2, got 0 (give 2 or more)"),
        (["--iterations", "0"], "--iterations: must be at least 1"),
        (["--max-jobs", "0"], "--max-jobs: must be at least 1"),
        # upper bounds (a trial: --hidden 100000 asked 80 GB, a traceback; --max-servers
        # 100000000 grew for ever; --max-jobs 1000 was taken)
        (["--hidden", "100000"], "--hidden: must be at most 2,048, got 100,000 (give 2,048"),
        (["--max-servers", "100000000"], "--max-servers: must be at most 20,000, got 100,000,000"),
        (["--max-jobs", "11"], "--max-jobs: must be at most 10, got 11 (give 10 or less (distinct"),
        (["--gcn-layers", "33"], "--gcn-layers: must be at most 32, got 33"),
        (
            ["--min-servers", "50", "--max-servers", "20"],
            "--max-servers: 20 is below --min-servers 50 (give 50 or more, or lower --min-servers)",
        ),
        (["--lr", "nan"], "--lr: must be a finite number greater than zero"),
        (["--weight-decay", "-0.1"], "--weight-decay: must be a finite number, zero or more"),
        (["--device", "tpu"], "--device: unknown device 'tpu'"),
        (["--seed", "-1"], "--seed: must be 0 to 2**32 - 1, got -1 (give a whole number in it)"),
        (["--seed", str(2**32)], "--seed: must be 0 to 2**32 - 1"),
        (["--output", "/proc/no/such/dir/w.pt"], "--output: cannot write in '/proc/no/such/dir'"),
        (["--output", "out/w.json"], "--output: 'out/w.json' ends in .json, the name of the"),
        (
            ["--data", "/proc/d.jsonl"],
            "--data: cannot write in '/proc' (it takes no new files: a virtual file system",
        ),
        (["--output", "/tmp"], "--output: '/tmp' is a directory (give a file path"),
        (["--output", ""], "--output: '.' is a directory (give a file path"),
    ],
)
def test_cli_refuses_bad_flags_before_any_work(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: --epochs -1 wrote untrained weights, --max-jobs 0 and an unwritable --output
    raised tracebacks (the latter after labelling and training); an --output ending in .json
    was overwritten by the settings file (the weights lost); an unwritable --data was a
    traceback."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    data = tmp_path / "d.jsonl"
    args = parser.parse_args(["--data", str(data), "--output", str(tmp_path / "w.pt"), *flags])
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("hulk train: error: ") and message in err
    assert not data.exists() and not (tmp_path / "w.pt").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"run": 7, "loss": 0.3}\n', "is not a file of `hulk train` examples"),
        ("\nmy notes\n", "is not a file of `hulk train` examples"),  # an empty first line
        (
            data_header(GenerationSettings(iterations=99, seed=3)) + "\n{}\n",
            "holds examples made otherwise (--iterations 99 there, 1500 now; --seed 3 "
            "there, 0 now)",
        ),
    ],
)
def test_cli_keeps_a_data_file_it_cannot_extend(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a --data file that was not this run's examples was deleted and replaced."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    data = tmp_path / "mine.jsonl"
    data.write_text(content)
    args = parser.parse_args(["--data", str(data), "--output", str(tmp_path / "w.pt")])
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("hulk train: error: --data: ") and message in err
    assert data.read_text() == content and not (tmp_path / "w.pt").exists()


def test_cli_never_writes_to_a_data_path_that_is_no_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``--data /dev/null`` (as root) deleted the device and wrote a file there."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    target = tmp_path / "target.txt"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    for path in (link, tmp_path, Path(os.devnull)):
        args = parser.parse_args(["--data", str(path), "--output", str(tmp_path / "w.pt")])
        assert cli.run(args) == 2
        assert "is not a regular file" in capsys.readouterr().err
    assert link.is_symlink() and target.read_text() == ""
    assert Path(os.devnull).is_char_device()


def test_a_data_file_cut_short_resumes_and_a_bad_line_is_named(tmp_path: Path) -> None:
    settings = GenerationSettings(
        examples=2, min_servers=20, max_servers=22, max_jobs=1, iterations=5
    )
    path = tmp_path / "d.jsonl"
    first = generate_to_file(settings, path, workers=1)
    whole = path.read_text()
    path.write_text(whole[:-40])  # a crash mid-write: the last example cut short
    again = generate_to_file(settings, path, workers=1)
    assert [e.labels for e in again] == [e.labels for e in first]
    assert path.read_text() == whole
    lines = whole.splitlines()
    path.write_text("\n".join([lines[0], '{"garbage": true}', lines[2]]) + "\n")
    with pytest.raises(InvalidRequest, match=rf"{path}:2: is not an example \(KeyError"):
        generate_to_file(settings, path, workers=1)


def test_training_that_diverges_writes_no_weights(tmp_path: Path) -> None:
    settings = GenerationSettings(
        examples=3, min_servers=20, max_servers=22, max_jobs=2, iterations=5
    )
    data = [example_data(ex) for ex in generate(settings, workers=1)]
    with pytest.raises(InvalidRequest, match=r"--lr: training diverged at epoch \d+ \(loss nan\)"):
        train(
            data,
            TrainSettings(epochs=3, lr=1e9, hidden=8, gcn_layers=1, device="cpu"),
            progress=False,
        )


def test_cli_names_a_file_in_the_way_of_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "File exists" about the parent, or a FileExistsError traceback for --data."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for flag in ("--data", "--output"):
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        paths = {"--data": str(tmp_path / "d.jsonl"), "--output": str(tmp_path / "w.pt")}
        paths[flag] = str(blocker / "sub" / "x")
        args = parser.parse_args([a for k, v in paths.items() for a in (k, v)])
        assert cli.run(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"hulk train: error: {flag}: '{blocker}' is a file, not a directory")


def test_a_failed_save_leaves_the_previous_pair_whole(tmp_path: Path) -> None:
    """Before: the weights were written in place, then the settings: a save that failed
    (or was interrupted) between the two left new weights beside old settings."""
    from hulk_planner.gnn.model import HulkGNN
    from hulk_planner.gnn.train import TrainSettings, file_sha256, save

    torch.manual_seed(0)
    args: dict[str, Any] = {"generation": {}, "training": TrainSettings(), "logs": []}
    path, meta = save(HulkGNN(hidden=8, gcn_layers=1), tmp_path / "w.pt", **args)
    before = (path.read_bytes(), meta.read_text())
    assert json.loads(before[1])["sha256"] == file_sha256(path)
    with pytest.raises(ValueError):  # NaN is no JSON: the settings cannot be written
        save(HulkGNN(hidden=16, gcn_layers=1), path, **args, extra={"bad": float("nan")})
    assert (path.read_bytes(), meta.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.json", "w.pt"]  # no part left


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"epochs": -1}, "TrainSettings.epochs"),
        ({"batch_size": 0}, "TrainSettings.batch_size"),
        ({"lr": float("nan")}, "TrainSettings.lr"),
        ({"weight_decay": -1.0}, "TrainSettings.weight_decay"),
        ({"val_fraction": 1.0}, "TrainSettings.val_fraction"),
        ({"device": "tpu"}, "TrainSettings.device"),
        ({"seed": -1}, "TrainSettings.seed"),
    ],
)
def test_train_settings_refuse_what_hulk_train_refuses(kwargs: dict[str, Any], field: str) -> None:
    """Before: epochs=-1 saved untrained weights, the others failed inside torch (a trial)."""
    with pytest.raises(InvalidRequest) as exc:
        TrainSettings(**kwargs)
    assert exc.value.field == field
