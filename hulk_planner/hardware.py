"""GPU facts: peak dense 16-bit tensor TFLOPS and memory per GPU, by product and by CUDA
compute capability.

Figures are the vendors' datasheet values (dense, no sparsity). Pascal GPUs (6.x) have no
tensor cores and run mixed-precision training at their FP32 rate, so their FP32 peak is used.
Used for the Hulk paper's cluster (which gives only compute capability and total memory) and
for nodes whose GPU Feature Discovery labels name a product or capability.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuClass:
    product: str
    memory_gib: float
    tflops: float


# Representative GPU of each compute capability. For the Hulk paper's cluster this table
# turns (capability, total server memory) into (GPU count, memory per GPU, TFLOPS): the count
# is round(total / memory_gib). With these five classes the paper's 47 servers hold exactly
# 368 GPUs, the number the paper reports, which is how the memory sizes were chosen
# (see docs/cost-model.md, "The paper's cluster").
BY_CAPABILITY: dict[str, GpuClass] = {
    "8.0": GpuClass("A100-SXM4-40GB", 40, 312.0),  # A100 datasheet: 312 TFLOPS BF16/FP16
    "8.6": GpuClass("NVIDIA-RTX-A5000", 24, 111.1),  # RTX A5000 datasheet, FP16 tensor dense
    "7.0": GpuClass("Tesla-V100-SXM2-32GB", 32, 125.0),  # V100 datasheet: 125 tensor TFLOPS
    "7.5": GpuClass("NVIDIA-TITAN-RTX", 24, 130.5),  # TITAN RTX: 130 FP16 tensor TFLOPS
    "6.1": GpuClass("NVIDIA-TITAN-Xp", 12, 12.1),  # Pascal: no tensor cores, FP32 12.1
    "8.9": GpuClass("NVIDIA-L40S", 48, 362.0),  # L40S datasheet, FP16 dense
    "9.0": GpuClass("NVIDIA-H100-80GB-HBM3", 80, 989.0),  # H100 SXM: 989 TFLOPS dense BF16
}

# Products as GPU Feature Discovery names them (nvidia.com/gpu.product), upper-cased
# substrings matched in order, so "NVIDIA-A100-SXM4-80GB" finds "A100".
BY_PRODUCT: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A40", 149.7),
    ("A10", 125.0),
    ("A5000", 111.1),
    ("3090", 71.0),
    ("V100", 125.0),
    ("T4", 65.0),
    ("TITAN-RTX", 130.5),
    ("TITAN-XP", 12.1),
    ("1080", 11.3),
)


def normalize_capability(capability: str | float) -> str:
    """'8' -> '8.0', 8.6 -> '8.6'."""
    text = str(capability).strip()
    return text if "." in text else f"{text}.0"


def known_class(product: str) -> tuple[str, GpuClass] | None:
    """(compute capability, class) of a product this table names exactly (``BY_CAPABILITY``,
    case and spaces aside), or None: its memory per GPU and capability where the name
    says neither (``NVIDIA-RTX-A5000``: 24 GiB, 8.6)."""

    def bare(name: str) -> str:  # ("RTX A5000" is NVIDIA-RTX-A5000, as GFD may name it)
        return name.upper().replace(" ", "-").removeprefix("NVIDIA-")

    for capability, cls in BY_CAPABILITY.items():
        if bare(cls.product) == bare(product):
            return capability, cls
    return None


def tflops_for(product: str | None, capability: str | None) -> float | None:
    """Peak dense 16-bit TFLOPS per GPU from the product name, else the capability."""
    if product:
        upper = product.upper().replace(" ", "-")
        for key, tflops in BY_PRODUCT:
            if key in upper:
                return tflops
    if capability:
        cls = BY_CAPABILITY.get(normalize_capability(capability))
        if cls:
            return cls.tflops
    return None
