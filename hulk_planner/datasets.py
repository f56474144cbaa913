"""Built-in data: the Hulk paper's 47-server cluster and its training jobs.

The raw files (``data/hulk-paper/``, as published with the paper) are read as follows:

- ``node_feature.csv`` gives city, CUDA compute capability and *total* GPU memory per server.
  ``hardware.BY_CAPABILITY`` maps the capability to a representative GPU; the GPU count is
  ``round(total / memory per GPU)`` (368 GPUs in all, as the paper says). City names are
  stripped (the file has ``"Neimeng "`` with a trailing space).
- ``edge.txt`` lists ``src dst ms``. Links are undirected. Self-loops (``4 4 10``) are
  ignored. A pair listed in both directions keeps the *mean* of its measurements: each line
  is itself an average of 10 sends, so neither direction is more trustworthy, and the mean
  is the estimate of the one-way time. (In the published file: 11-30 is 214 and 265 ms ->
  239.5 ms; 13-14 is 10 and 4 ms -> 7 ms.)
- Pairs that are absent cannot communicate directly (network policy between countries).

Server names are ``<city>-<id>`` in DNS-1123 form (``beijing-0``, ``new-delhi-34``), so
they are valid Kubernetes node names.
"""

from __future__ import annotations

import csv
import unicodedata
from importlib import resources

from hulk_planner.hardware import BY_CAPABILITY, normalize_capability
from hulk_planner.model import Cluster, Job, Link, Server
from hulk_planner.presets import preset_jobs

PAPER_JOBS = ("opt-175b", "t5-11b", "gpt2-xl", "bert-large")
PAPER_JOBS_6 = (*PAPER_JOBS, "roberta-large", "xlnet-large")

# Table 2 of the paper: its planner's split of the servers (by id) among the four jobs.
PAPER_TABLE2: dict[str, tuple[int, ...]] = {
    "opt-175b": (0, 1, 2, 3, 4, 20, 21, 22, 23, 24, 27, 28, 29, 30, 31),
    "t5-11b": tuple(range(5, 15)),
    "gpt2-xl": (15, 16, 17, 18, 19, 25, 26, 32, 33, 34),
    "bert-large": (35, 36, 37, 38),
}


def slug(text: str) -> str:
    """``text`` as a label value would write it: lower case, accents dropped (a label
    cannot hold "ã": "São Paulo" is ``sao-paulo``, as a user writes it in allowedRegions;
    a user trial), each run of other characters one ``-``."""
    plain = "".join(
        c
        for c in unicodedata.normalize("NFKD", text.strip().lower())
        if not unicodedata.combining(c)
    )
    out = "".join(c if c.isalnum() else "-" for c in plain)
    return "-".join(p for p in out.split("-") if p)


def _read(name: str) -> str:
    return (resources.files("hulk_planner") / "data" / "hulk-paper" / name).read_text()


def paper_server_names() -> list[str]:
    """Server names by paper id (index i is server i)."""
    rows = list(csv.DictReader(_read("node_feature.csv").splitlines()))
    return [f"{slug(r['City'])}-{int(r['node'])}" for r in rows]


def paper_cluster() -> Cluster:
    """The Hulk paper's 47 servers in 12 cities (13 spellings in ``node_feature.csv``:
    ``Neimeng`` and ``Neimeng `` are one) with their measured latencies."""
    servers = []
    for row in csv.DictReader(_read("node_feature.csv").splitlines()):
        cap = normalize_capability(row["Capability"])
        cls = BY_CAPABILITY[cap]
        total = float(row["Memory"])
        city = row["City"].strip()
        servers.append(
            Server(
                name=f"{slug(city)}-{int(row['node'])}",
                region=city,
                gpus=max(1, round(total / cls.memory_gib)),
                gpu_memory_gib=cls.memory_gib,
                gpu_tflops=cls.tflops,
                gpu_product=cls.product,
                compute_capability=cap,
                zone=f"{slug(city)}-a",
            )
        )
    names = [s.name for s in servers]
    measured: dict[tuple[int, int], list[float]] = {}
    for line in _read("edge.txt").splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        a, b, ms = int(parts[0]), int(parts[1]), float(parts[2])
        if a == b:
            continue
        measured.setdefault((min(a, b), max(a, b)), []).append(ms)
    links = tuple(
        Link(names[a], names[b], sum(v) / len(v)) for (a, b), v in sorted(measured.items())
    )
    return Cluster("hulk-paper", tuple(servers), links)


def paper_jobs(count: int = 4) -> list[Job]:
    """The paper's four jobs (OPT-175B, T5-11B, GPT-2 XL, BERT-large); six adds RoBERTa-large
    and XLNet-large. Batch sizes are the presets' defaults."""
    names = PAPER_JOBS if count == 4 else PAPER_JOBS_6
    if count not in (4, 6):
        raise ValueError("the paper's scenarios have 4 or 6 jobs")
    return preset_jobs(names)
