"""The event simulation of a pipeline step (``hulk_planner.schedule``) under the reference
trainer's own 1F1B order (``examples/train_stage.schedule``): the reference that
bench/schedule_latency.py holds the cost model's step time against."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from hulk_planner.schedule import simulate

TRAINER = Path(__file__).resolve().parents[2] / "examples" / "train_stage.py"


def _trainer_schedule():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("train_stage_for_schedule", TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.schedule


one_f_one_b = _trainer_schedule()


def gpipe(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def test_one_stage_runs_its_micro_batches_back_to_back() -> None:
    assert simulate([0.3], [], [], 5, one_f_one_b) == pytest.approx(1.5)


@pytest.mark.parametrize(("p", "m"), [(2, 1), (3, 3), (4, 8), (5, 12)])
def test_equal_stages_and_free_links_take_m_plus_p_minus_1_steps(p: int, m: int) -> None:
    # (m + p - 1)(t_f + t_b) for 1F1B and GPipe alike (Narayanan et al. SC'21)
    for order in (one_f_one_b, gpipe):
        assert simulate([1.0] * p, [0.0] * (p - 1), [0.0] * (p - 1), m, order) == pytest.approx(
            m + p - 1
        )


def test_a_slow_link_stalls_1f1b_but_not_gpipe() -> None:
    """Two stages, a link of 10 s, 20 micro-batches: under 1F1B stage 0 holds 2 micro-batches,
    so every second one waits a round trip (about 10 s a micro-batch); GPipe streams them."""
    one_f = simulate([1.0, 1.0], [10.0], [0.0], 20, one_f_one_b)
    streamed = simulate([1.0, 1.0], [10.0], [0.0], 20, gpipe)
    assert streamed == pytest.approx(20 + 1 + 20)  # fill, m at the pace, the round trip
    assert one_f > 9 * 20


def test_the_simulation_refuses_a_pipeline_whose_links_are_miscounted() -> None:
    with pytest.raises(ValueError, match="give 1 latencies and transfers, not 2 and 1"):
        simulate([1.0, 1.0], [0.0, 0.0], [0.0], 4, one_f_one_b)


def test_an_order_that_waits_for_itself_is_reported() -> None:
    def backward_first(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
        return [("B", i) for i in range(m)] + [("F", i) for i in range(m)]

    with pytest.raises(ValueError, match="deadlocks: stage 0 waits for good"):
        simulate([1.0, 1.0], [0.0], [0.0], 2, backward_first)
