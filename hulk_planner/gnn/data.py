"""Labelled examples for training: synthetic clusters, job mixes, and the search planner's
placement as the label.

An example is fully described by small numbers (cluster size, seed, region count, job
list), so the data set is a JSON-lines file of those plus the labels (server -> job), and
features are computed again at training time: changing a feature never needs new labels.

- Clusters: ``generate.random_cluster(n, seed, regions)`` with ``n`` log-uniform in
  ``[min_servers, max_servers]`` and half of them with a random region count (2 to 12)
  instead of the generator's default; clusters of 300 servers or fewer list server-level
  links, larger ones give region-level latencies (the generator's rule).
- Jobs: 1 to ``max_jobs`` distinct presets, each with its default global batch scaled by
  0.5, 1 or 2 and a micro-batch of 1-8; jobs are dropped, largest first, until their
  memory needs total at most ``MEMORY_FILL`` of the cluster's usable memory (a job that
  cannot fit teaches nothing).
- Labels: ``search_plan`` from its greedy start with ``iterations`` moves (an iteration
  budget, not a time budget, so the labels do not depend on the machine's speed or load);
  a server is labelled with the job whose final layout uses it, or idle.

Generation runs on ``workers`` processes; each example is independent and seeded, so the
result is the same for any worker count.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hulk_planner.cost import MEMORY_USABLE, CostModel, memory_need_bytes
from hulk_planner.errors import InvalidRequest
from hulk_planner.generate import random_cluster
from hulk_planner.model import Cluster, Job
from hulk_planner.planners.search import search_plan
from hulk_planner.presets import PRESETS, preset, preset_model

MEMORY_FILL = 0.8


@dataclass(frozen=True)
class GenerationSettings:
    """How a data set is generated; recorded next to the weights trained on it."""

    examples: int = 64
    min_servers: int = 20
    max_servers: int = 500
    max_jobs: int = 6
    iterations: int = 1500
    seed: int = 0
    presets: tuple[str, ...] = field(default_factory=lambda: tuple(sorted(PRESETS)))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["presets"] = list(self.presets)
        return d


@dataclass(frozen=True)
class JobRecipe:
    name: str
    preset: str
    global_batch_size: int
    micro_batch_size: int

    def job(self) -> Job:
        return Job(
            self.name, preset_model(self.preset), self.global_batch_size, self.micro_batch_size
        )


@dataclass(frozen=True)
class Example:
    """One labelled cluster: how to rebuild it, and the label of every server it uses
    (absent servers are idle)."""

    servers: int
    cluster_seed: int
    regions: int | None
    jobs: tuple[JobRecipe, ...]
    labels: dict[str, str]
    objective: float = math.nan

    def cluster(self) -> Cluster:
        return random_cluster(self.servers, self.cluster_seed, self.regions)

    def job_list(self) -> list[Job]:
        return [r.job() for r in self.jobs]

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Example:
        d = json.loads(text)
        d["jobs"] = tuple(JobRecipe(**j) for j in d["jobs"])
        return Example(**d)


def random_jobs(
    rng: random.Random, cluster: Cluster, max_jobs: int, presets: Sequence[str]
) -> list[JobRecipe]:
    """A random job mix that fits the cluster's memory (see the module docstring)."""
    count = rng.randint(1, min(max_jobs, len(presets)))
    chosen = rng.sample(list(presets), count)
    recipes = []
    for name in chosen:
        p = preset(name)
        gbs = max(1, int(p.global_batch_size * rng.choice((0.5, 1.0, 2.0))))
        mbs = min(gbs, rng.choice((1, 2, 4, 8)))
        recipes.append(JobRecipe(name, name, gbs, mbs))
    usable = sum(s.memory_bytes for s in cluster.servers) * MEMORY_USABLE
    recipes.sort(key=lambda r: -memory_need_bytes(r.job()))
    while (
        len(recipes) > 1 and sum(memory_need_bytes(r.job()) for r in recipes) > MEMORY_FILL * usable
    ):
        recipes.pop(0)
    rng.shuffle(recipes)
    return recipes


def example_spec(
    settings: GenerationSettings, index: int
) -> tuple[int, int, int | None, list[JobRecipe]]:
    """(servers, cluster seed, regions, jobs) of example ``index``: seeded, so any worker
    computes the same."""
    rng = random.Random(f"hulk-gnn-{settings.seed}-{index}")
    lo, hi = math.log(settings.min_servers), math.log(settings.max_servers)
    n = round(math.exp(rng.uniform(lo, hi)))
    cluster_seed = rng.randrange(2**31)
    regions = rng.randint(2, min(12, max(2, n // 3))) if rng.random() < 0.5 else None
    cluster = random_cluster(n, cluster_seed, regions)
    return n, cluster_seed, regions, random_jobs(rng, cluster, settings.max_jobs, settings.presets)


@cache
def search_code_digest() -> str:
    """A digest of the code a search result depends on (search and its moves, layout, cost model,
    topology), so labels made by another version of the search are not reused."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in (
        "planners/search.py",
        "planners/moves.py",
        "layout.py",
        "cost.py",
        "topology.py",
    ):
        h.update((root / rel).read_bytes())
    return h.hexdigest()[:12]


def label(
    cluster: Cluster, jobs: Sequence[Job], iterations: int, seed: int = 0
) -> tuple[dict[str, str], float]:
    """The search planner's assignment (server -> job) and its objective (the geometric
    mean of the placed jobs' step times)."""
    cost = CostModel(cluster)
    plan = search_plan(cost, jobs, seed=seed, time_budget_s=1e9, max_iterations=iterations)
    times = [jp.predicted_iteration_seconds for jp in plan.jobs]
    geo = math.exp(sum(math.log(t) for t in times) / len(times)) if times else math.inf
    return plan.assignment, geo


def make_example(args: tuple[GenerationSettings, int]) -> Example:
    settings, index = args
    n, cseed, regions, recipes = example_spec(settings, index)
    cluster = random_cluster(n, cseed, regions)
    labels, objective = label(cluster, [r.job() for r in recipes], settings.iterations, seed=index)
    return Example(n, cseed, regions, tuple(recipes), labels, objective)


def _ignore_interrupts() -> None:
    """In a labelling worker: Ctrl-C is the parent's to handle (it stops the pool)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def generate(
    settings: GenerationSettings,
    workers: int = 2,
    start: int = 0,
    progress: Callable[[Iterator[Example], int], Iterator[Example]] | None = None,
) -> Iterator[Example]:
    """Examples ``start`` .. ``settings.examples - 1``, in order."""
    tasks = [(settings, i) for i in range(start, settings.examples)]
    if workers <= 1:
        it: Iterator[Example] = map(make_example, tasks)
        yield from progress(it, len(tasks)) if progress else it
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_ignore_interrupts) as pool:
        it = pool.imap(make_example, tasks)
        yield from progress(it, len(tasks)) if progress else it


def load_examples(path: str | Path) -> list[Example]:
    """Examples of a file from ``generate_to_file`` (the settings line is skipped)."""
    with open(path) as f:
        return [
            Example.from_json(line)
            for line in f
            if line.strip() and not line.startswith('{"settings"')
        ]


def data_header(settings: GenerationSettings) -> str:
    """The first line of a data file: the settings that fix each example (not their
    count, so a longer run extends a shorter one and a shorter one reads a prefix) and
    the labelling search's code digest (another search makes other labels)."""
    d = settings.as_dict()
    d.pop("examples")
    d["search_code"] = search_code_digest()
    return json.dumps({"settings": d}, sort_keys=True)


def examples_sha256(path: str | Path, count: int) -> str:
    """The sha256 of the file's settings header and its first ``count`` examples, as the
    file was when it held just those (``head -n COUNT+1 FILE | sha256sum``): what weights
    trained on them record. Before, the whole file's, which named neither the examples of
    a run with fewer ``--examples`` nor, once a later run extended the file, its own (a
    trial)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as stream:
        for n, line in enumerate(stream):
            if n > count:
                break
            digest.update(line)
    return digest.hexdigest()


def generate_to_file(
    settings: GenerationSettings,
    path: str | Path,
    workers: int = 2,
    progress: Callable[[Iterator[Example], int], Iterator[Example]] | None = None,
) -> list[Example]:
    """The first ``settings.examples`` examples, from a JSON-lines file: those already
    there are read (a file of another run's settings is overwritten; a file hulk train did
    not write is refused, never touched), the rest generated and appended, so an
    interrupted run resumes where it stopped (a last line cut short by a crash is dropped)."""
    path = Path(path)
    header = data_header(settings)
    fix = "name a new file, or delete this one to label again"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise InvalidRequest(str(path), "is not a regular file: not written to", fix)
    done: list[Example] = []
    if path.exists() and path.stat().st_size:
        text = path.read_text()
        lines = text.splitlines()
        if lines[0] == header:
            keep = len(lines)
            for n, line in enumerate(lines[1:], start=2):
                if not line.strip():
                    continue
                try:
                    done.append(Example.from_json(line))
                except (ValueError, KeyError, TypeError) as exc:
                    if n == len(lines) and not text.endswith("\n"):
                        keep = n - 1  # cut short mid-write: label it again
                        break
                    raise InvalidRequest(
                        f"{path}:{n}", f"is not an example ({type(exc).__name__}: {exc})", fix
                    ) from None
            if keep < len(lines):
                path.write_text("\n".join(lines[:keep]) + "\n")
        elif lines[0].startswith('{"settings"'):
            path.write_text("")  # another run's examples (a cache file): labelled anew
        else:
            raise InvalidRequest(
                str(path), "is not a file of hulk train examples: not overwritten", fix
            )
    if len(done) >= settings.examples:
        return done[: settings.examples]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or not path.stat().st_size:
        path.write_text(header + "\n")
    with open(path, "a") as f:
        for ex in generate(settings, workers, start=len(done), progress=progress):
            f.write(ex.to_json() + "\n")
            f.flush()
            done.append(ex)
    return done
