"""The planner used as a Python library (a user trial): the package's names, ``plan``'s
arguments checked before planning, priorities and allowed regions honoured as ``hulk plan``
and the operator honour them, weights given by argument and read again when rewritten."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from planner_helpers import cluster, server, tiny_job

import hulk_planner
from hulk_planner.api import plan
from hulk_planner.cost import CostModel
from hulk_planner.errors import HulkError, InvalidRequest, InvalidRequests
from hulk_planner.gnn.planner import shipped_weights
from hulk_planner.io import dump_plan, load_plan
from hulk_planner.model import Job, ModelSpec, Plan


def test_the_package_exports_its_public_surface() -> None:
    assert set(hulk_planner.__all__) == set(hulk_planner._WHERE)
    for name in hulk_planner.__all__:
        assert getattr(hulk_planner, name) is not None, name
    assert hulk_planner.plan is plan
    with pytest.raises(AttributeError):
        _ = hulk_planner.no_such_name  # type: ignore[attr-defined]


def test_the_packages_are_marked_typed() -> None:
    """Without py.typed mypy skipped them in a user's project ("missing library stubs")."""
    root = Path(hulk_planner.__file__).parent.parent
    for pkg in ("hulk_planner", "hulk_operator", "hulk_probe"):
        assert (root / pkg / "py.typed").is_file(), pkg
    assert "py.typed" in (root / "pyproject.toml").read_text()


def _two_servers() -> object:
    return cluster([server("a", memory_gib=10.0), server("b", memory_gib=10.0)], [("a", "b", 1.0)])


def test_a_higher_priority_is_planned_first() -> None:
    """Before, ``plan`` ignored ``Job.priority`` (only ``hulk plan`` honoured it)."""
    c = cluster([server("a", memory_gib=10.0)])
    low = tiny_job("low")
    high = Job("high", low.model, low.global_batch_size, low.micro_batch_size, priority=5)
    for planner in ("hulk", "search"):
        result = plan(c, [low, high], planner, max_iterations=50)
        assert [jp.name for jp in result.jobs] == ["high"], planner
        assert [u.name for u in result.unplaced] == ["low"]
        assert "priority" in result.unplaced[0].reason


def test_allowed_regions_limit_a_job() -> None:
    c = cluster([server("a", "east"), server("b", "west")], [("a", "b", 1.0)])
    result = plan(c, [tiny_job("j")], "search", max_iterations=50, allowed_regions={"j": ["west"]})
    assert result.job("j") is not None and set(result.job("j").nodes) == {"b"}
    with pytest.raises(InvalidRequest) as exc:
        plan(c, [tiny_job("j")], allowed_regions={"j": ["wset"]})
    assert exc.value.field == "allowed_regions['j'][0]" and "did you mean west" in exc.value.problem
    with pytest.raises(InvalidRequest) as exc:
        plan(c, [tiny_job("j")], allowed_regions={"k": ["west"]})
    assert exc.value.field == "allowed_regions['k']"
    # every entry's errors at once, in order (before, the first entry's alone: a trial)
    with pytest.raises(InvalidRequests) as every:
        plan(c, [tiny_job("j"), tiny_job("m")],
             allowed_regions={"j": ["wset", "east"], "k": ["west"], "m": ["est"]})  # fmt: skip
    assert [e.field for e in every.value.errors] == [
        "allowed_regions['j'][0]", "allowed_regions['k']", "allowed_regions['m'][0]"
    ], str(every.value)  # fmt: skip


def test_jobs_given_as_a_generator_are_all_planned() -> None:
    """Before, the search planned a generator's jobs as none, without a word."""
    c = _two_servers()
    jobs = (tiny_job(n) for n in ("x", "y"))
    result = plan(c, jobs, "search", max_iterations=50)  # type: ignore[arg-type]
    assert sorted(jp.name for jp in result.jobs) == ["x", "y"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"jobs": "JOB"}, "jobs"),
        ({"jobs": None}, "jobs"),
        ({"jobs": ["bert"]}, "jobs[0]"),
        ({"cluster": None}, "cluster"),
        ({"previous": "plan.json"}, "previous"),
        ({"max_iterations": "100"}, "max_iterations"),
        ({"max_iterations": -5}, "max_iterations"),
        ({"max_iterations": 2.5}, "max_iterations"),
        ({"max_iterations": 10**30}, "max_iterations"),  # (searched for ever: a trial)
        ({"seed": -1}, "seed"),  # (taken, where hulk plan --seed refuses it: a trial)
        ({"seed": 10**30}, "seed"),
        ({"planner": "fast"}, "planner"),  # (was told as --planner: a trial)
        ({"jobs": ["TWICE"]}, "jobs[1].name"),  # (was metadata.name)
        ({"seed": "x"}, "seed"),
        ({"seed": None}, "seed"),
        ({"cost": "OTHER"}, "cost"),
        ({"planner": "search", "weights": "w.pt"}, "weights"),
        ({"weights": "/no/such/file.pt"}, "weights"),
        ({"weights": "/"}, "weights"),
    ],
)
def test_bad_arguments_are_invalid_requests_naming_them(kwargs: dict, field: str) -> None:
    """Before: TypeError, AttributeError or IndexError from deep inside, or accepted."""
    c = _two_servers()
    args: dict = {"cluster": c, "jobs": [tiny_job()], "max_iterations": 20} | kwargs
    if args["jobs"] == "JOB":
        args["jobs"] = tiny_job()
    if args["jobs"] == ["TWICE"]:
        args["jobs"] = [tiny_job(), tiny_job()]
    if args.get("cost") == "OTHER":
        args["cost"] = CostModel(cluster([server("z")]))
    with pytest.raises(InvalidRequest) as exc:
        plan(**args)
    assert exc.value.field == field


def test_a_file_that_is_not_weights_is_an_invalid_request(tmp_path: Path) -> None:
    """Before: torch's UnpicklingError advising weights_only=False."""
    bad = tmp_path / "w.pt"
    bad.write_text("not weights")
    with pytest.raises(InvalidRequest) as exc:
        plan(_two_servers(), [tiny_job()], weights=bad, max_iterations=20)
    assert exc.value.field == "weights" and "not a weights file" in exc.value.problem


def test_weights_rewritten_at_the_same_path_are_read_again(tmp_path: Path) -> None:
    """Before, the first weights read at a path stayed cached for the process."""
    from hulk_planner.gnn import planner as gnn

    path = tmp_path / "w.pt"
    shutil.copy(shipped_weights(), path)
    first = gnn._numpy_model(str(path), gnn._stamp(str(path)))
    path.write_bytes(path.read_bytes())  # the same bytes, written again: a new version
    import os

    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    again = gnn._numpy_model(str(path), gnn._stamp(str(path)))
    assert again is not first
    result = plan(_two_servers(), [tiny_job()], weights=path, max_iterations=20)
    assert result.planner == "hulk" and result.jobs


def test_a_plan_round_trips_through_a_file(tmp_path: Path) -> None:
    result = plan(_two_servers(), [tiny_job()], "search", max_iterations=20)
    path = tmp_path / "plan.yaml"
    path.write_text(dump_plan(result, "yaml"))
    back = load_plan(path)
    assert [(jp.name, jp.stages, jp.micro_batches) for jp in back.jobs] == [
        (jp.name, jp.stages, jp.micro_batches) for jp in result.jobs
    ]
    replanned = plan(_two_servers(), [tiny_job()], "search", max_iterations=20, previous=back)
    assert replanned.job("tiny") is not None
    with pytest.raises(InvalidRequest) as exc:
        dump_plan(result, "toml")
    assert exc.value.field == "fmt"


def test_every_error_of_the_library_is_a_hulk_error() -> None:
    """A caller catches one base class."""
    assert issubclass(InvalidRequest, HulkError)
    with pytest.raises(HulkError):
        Plan("p", None)  # type: ignore[arg-type]


def test_the_readmes_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = (Path(hulk_planner.__file__).parent.parent / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("('tokyo-") and "'llama':" in out, out


def test_errors_pickle_with_their_fields() -> None:
    """An InvalidRequest raised in a process pool's worker reached its caller as
    BrokenProcessPool: Exception's pickling passed its text alone to an __init__ that takes
    three arguments (a trial)."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    one = InvalidRequest("spec.nodes[0].gpus", "is 0", "leave it out")
    two = InvalidRequests([one, InvalidRequest("jobs[1]", "must be a Job")])
    for error in (one, two):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert (back.field, back.problem, back.fix) == (error.field, error.problem, error.fix)
    assert pickle.loads(pickle.dumps(two)).errors[1].field == "jobs[1]"
    with ProcessPoolExecutor(1) as pool, pytest.raises(InvalidRequest) as told:
        pool.submit(ModelSpec, 10, 2, 0, 8).result()  # raised in the worker
    assert told.value.field == "spec.model.hiddenSize"


def test_numpy_numbers_are_taken_as_python_numbers(tmp_path: Path) -> None:
    """numpy's int64 was refused as "must be a number"; its float64 was kept, and dumping
    the cluster as YAML failed (a trial). Required model sizes given None are refused where
    they are given (before, plan() failed with a TypeError in the cost model)."""
    import numpy as np

    from hulk_planner.io import dump_cluster, load_cluster, load_jobs
    from hulk_planner.model import Cluster, Link, Server

    a = Server("a", "r", np.int64(8), np.float64(80.5), np.float32(312))
    c = Cluster("c", (a, Server("b", "r", 8, 80, 312)), (Link("a", "b", np.float32(1.5)),))
    assert [type(v) for v in (a.gpus, a.gpu_memory_gib, a.gpu_tflops)] == [int, float, float]
    assert type(c.links[0].latency_ms) is float
    path = tmp_path / "c.yaml"
    path.write_text(dump_cluster(c, "yaml"))
    assert load_cluster(path) == c
    model = ModelSpec(np.int64(10**9), np.int32(24), 2048, 1024)
    assert type(model.parameters) is int and type(model.layers) is int
    for k in range(4):
        sizes: list = [10**9, 24, 2048, 1024]
        sizes[k] = None
        with pytest.raises(InvalidRequest, match="must be a number, got null"):
            ModelSpec(*sizes)
    # one path given as a string is one file (its characters were read as paths: a trial)
    jobs = tmp_path / "j.yaml"
    jobs.write_text(
        "apiVersion: hulk.dev/v1alpha1\nkind: HulkTrainingJob\nmetadata: {name: j}\n"
        "spec: {model: {preset: gpt2-xl}}\n"
    )
    assert [j.name for j in load_jobs(str(jobs))] == [j.name for j in load_jobs(jobs)] == ["j"]


def test_validate_plan_names_an_argument_of_another_type() -> None:
    """``validate_plan(p, "c", jobs)``, ``(p, c, job)``, ``({}, c, jobs)``: TypeError or
    AttributeError from inside (a trial). A plan's step time given as numpy's float is kept
    as Python's."""
    import numpy as np

    from hulk_planner.cost import validate_plan
    from hulk_planner.model import JobPlan

    c, job = _two_servers(), tiny_job()
    p = plan(c, [job], "search", max_iterations=20)
    validate_plan(p, c, iter([job]))  # (any iterable of jobs)
    for args, field in (
        ((p, "c", [job]), "cluster"),
        ((p, c, job), "jobs"),
        (({}, c, [job]), "plan"),
        ((p, c, ["j"]), "jobs"),
    ):
        with pytest.raises(InvalidRequest) as told:
            validate_plan(*args)  # type: ignore[arg-type]
        assert told.value.field == field, told.value
    jp = p.jobs[0]
    again = JobPlan(jp.name, jp.stages, jp.micro_batches, np.float64(1.5))
    assert type(again.predicted_iteration_seconds) is float


def test_what_a_library_trial_found_taken_is_refused() -> None:
    """A plan of a stage no server of which holds it passed ``validate_plan`` (the cost
    model scores it ``inf``); ``CostModel.breakdown`` scored a plan of 2 of 4 layers; a
    ``Plan`` took a job twice, or placed and unplaced at once; ``preset_model(None)`` and
    ``CostModel("c")`` raised AttributeError (a trial)."""
    from hulk_planner.cost import validate_plan
    from hulk_planner.model import JobPlan, Stage, Unplaced
    from hulk_planner.presets import preset_model

    job = tiny_job()  # 16 MB of training state in all
    c = cluster([server("big", memory_gib=1.0), server("small", memory_gib=0.005)])
    fits = JobPlan(job.name, (Stage((0, 4), ("big",)),), 8)
    validate_plan(Plan("hand", (fits,)), c, [job])
    over = JobPlan(job.name, (Stage((0, 4), ("small",)),), 8)
    assert CostModel(c).job_seconds(job, over) == float("inf")
    with pytest.raises(InvalidRequest) as told:
        validate_plan(Plan("hand", (over,)), c, [job])
    assert told.value.field == "jobs[tiny].stages[0].nodes", told.value
    assert told.value.problem.startswith("small holds 0.0045 GiB of GPU memory usable (90%)")
    assert "the stage's 4 layer(s) need" in told.value.problem and "fewer layers" in str(told.value)
    half = JobPlan(job.name, (Stage((0, 2), ("big",)),), 8)
    with pytest.raises(InvalidRequest) as told:
        CostModel(c).breakdown(job, half)
    assert told.value.field == "jobs[tiny].stages", told.value
    for jobs, unplaced, field, problem in (
        ((fits, fits), (), "jobs[tiny]", "job 'tiny' is listed twice"),
        ((fits,), (Unplaced("tiny", "why"),), "unplaced[tiny]", "job 'tiny' is also in jobs"),
    ):
        with pytest.raises(InvalidRequest) as told:
            Plan("hand", jobs, unplaced)
        assert (told.value.field, told.value.problem) == (field, problem), told.value
    with pytest.raises(InvalidRequest) as told:
        preset_model(None)  # type: ignore[arg-type]
    assert told.value.field == "spec.model.preset" and "got None" in told.value.problem
    with pytest.raises(InvalidRequest) as told:
        CostModel("c")  # type: ignore[arg-type]
    assert told.value.field == "cluster" and "got str" in told.value.problem
