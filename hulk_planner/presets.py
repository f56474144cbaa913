"""Built-in model presets with their published sizes.

Each entry: parameters, layers, hidden size, attention heads, sequence length, and a default
batch (global, micro) used when a job manifest names the preset without ``training``.
Sources are the models' papers and their released configurations.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hulk_planner.errors import InvalidRequest
from hulk_planner.model import Job, ModelSpec


@dataclass(frozen=True, slots=True)
class Preset:
    parameters: int
    layers: int
    hidden_size: int
    attention_heads: int
    sequence_length: int
    global_batch_size: int
    micro_batch_size: int
    source: str


PRESETS: dict[str, Preset] = {
    # GPT-2 XL: 1.5B, 48 layers, d=1600, 25 heads, context 1024 (Radford et al. 2019).
    "gpt2-xl": Preset(1_557_611_200, 48, 1600, 25, 1024, 512, 4, "GPT-2 paper, HF config"),
    # BERT-large: 340M, 24 layers, d=1024, 16 heads, 512 tokens (Devlin et al. 2019).
    "bert-large": Preset(340_000_000, 24, 1024, 16, 512, 256, 8, "BERT paper, Table 1"),
    # RoBERTa-large: 355M, same shape as BERT-large (Liu et al. 2019).
    "roberta-large": Preset(355_000_000, 24, 1024, 16, 512, 256, 8, "RoBERTa paper, HF config"),
    # XLNet-large: 340M, 24 layers, d=1024, 16 heads, 512 tokens (Yang et al. 2019).
    "xlnet-large": Preset(340_000_000, 24, 1024, 16, 512, 256, 8, "XLNet paper, Section 3.1"),
    # T5-11B: 11B, 24+24 blocks, d_model=1024, 128 heads, 512 tokens (Raffel et al. 2020).
    "t5-11b": Preset(11_000_000_000, 48, 1024, 128, 512, 128, 2, "T5 paper, Section 3.7"),
    # OPT-175B: 175B, 96 layers, d=12288, 96 heads, 2048 tokens (Zhang et al. 2022, Table 1).
    "opt-175b": Preset(175_000_000_000, 96, 12288, 96, 2048, 256, 1, "OPT paper, Table 1"),
    # GPT-3 XL: 1.3B, 24 layers, d=2048, 24 heads, 2048 tokens (Brown et al. 2020, Table 2.1).
    "gpt3-xl": Preset(1_300_000_000, 24, 2048, 24, 2048, 256, 2, "GPT-3 paper, Table 2.1"),
    # Llama 2: 7B/13B/70B, 32/40/80 layers, d=4096/5120/8192, 4096 tokens (Touvron et al. 2023).
    "llama2-7b": Preset(6_738_415_616, 32, 4096, 32, 4096, 256, 1, "Llama 2 paper, HF config"),
    "llama2-13b": Preset(13_015_864_320, 40, 5120, 40, 4096, 256, 1, "Llama 2 paper, HF config"),
    "llama2-70b": Preset(68_976_648_192, 80, 8192, 64, 4096, 256, 1, "Llama 2 paper, HF config"),
}


def preset(name: str) -> Preset:
    if not isinstance(name, str):  # (None raised AttributeError: a library trial)
        raise InvalidRequest(
            "spec.model.preset",
            f"must be a preset's name, got {name!r}",
            f"use one of {', '.join(sorted(PRESETS))}",
        )
    key = name.strip().lower()
    if key not in PRESETS:
        # (gpt2xl, llama-2-7b: the name without its punctuation; a user trial)
        bare = {re.sub(r"[^a-z0-9]", "", k): k for k in PRESETS}
        close = bare.get(re.sub(r"[^a-z0-9]", "", key)) or next(
            iter(difflib.get_close_matches(key, list(PRESETS), n=1, cutoff=0.8)), None
        )
        # (the guess in the fix: "(did you mean t5-11b?) (use one of ...)" read as two
        # asides; a user trial)
        raise InvalidRequest(
            "spec.model.preset",
            f"unknown preset {name!r}",
            (f"did you mean {close}? Else use" if close else "use")
            + f" one of {', '.join(sorted(PRESETS))}, or give parameters, layers, "
            "hiddenSize and sequenceLength",
        )
    return PRESETS[key]


def preset_model(name: str) -> ModelSpec:
    p = preset(name)
    return ModelSpec(
        p.parameters, p.layers, p.hidden_size, p.sequence_length, p.attention_heads, name.lower()
    )


def preset_jobs(names: Sequence[str]) -> list[Job]:
    """A job per preset name, named after it, at the preset's batch sizes (the paper's
    scenarios and the benchmarks' job mixes)."""
    return [
        Job(n, preset_model(n), preset(n).global_batch_size, preset(n).micro_batch_size)
        for n in names
    ]
