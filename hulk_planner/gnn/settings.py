"""``hulk train``'s training settings, apart from torch: ``hulk train --help`` reads their
defaults without importing it (it took about 5 s: a trial)."""

from __future__ import annotations

from dataclasses import dataclass

from hulk_planner.errors import InvalidRequest
from hulk_planner.gnn.planner import cuda_problem
from hulk_planner.model import check_positive


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 60
    batch_size: int = 4
    lr: float = 3e-3
    weight_decay: float = 1e-4
    hidden: int = 64
    gcn_layers: int = 3
    val_fraction: float = 0.1
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        """Checked as ``hulk train`` checks its flags (before, ``epochs=-1`` saved untrained
        weights and ``lr=nan`` or ``batch_size=0`` failed inside torch: a trial)."""
        for name, low in (("epochs", 1), ("batch_size", 1), ("hidden", 1), ("gcn_layers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidRequest(
                    f"TrainSettings.{name}",
                    f"must be a whole number, at least {low}, got {value!r}",
                )
        check_positive("TrainSettings.lr", self.lr)
        check_positive("TrainSettings.weight_decay", self.weight_decay, allow_zero=True)
        if not (isinstance(self.val_fraction, int | float) and 0 <= self.val_fraction < 1):
            raise InvalidRequest(
                "TrainSettings.val_fraction",
                f"must be from 0 up to (not including) 1, got {self.val_fraction!r}",
                "the share of examples held out for validation, e.g. 0.1",
            )
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**32
        ):
            raise InvalidRequest("TrainSettings.seed", f"must be 0 to 2**32 - 1, got {self.seed!r}")
        device = str(self.device)
        if device not in ("auto", "cpu") and not device.startswith("cuda"):
            raise InvalidRequest(
                "TrainSettings.device", f"unknown device {device!r}", "use auto, cpu or cuda"
            )
        if device.startswith("cuda") and (why := cuda_problem(device)) is not None:
            raise InvalidRequest("TrainSettings.device", why, "use auto or cpu")
