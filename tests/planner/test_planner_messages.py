"""What a plan that helps nothing says: the causes that fit what the twin saw."""

from __future__ import annotations

from fedqr.planner.messages import message
from fedqr.planner.search import Prediction


def _not_useful(mean: float, *, rose: bool) -> str:
    return message(Prediction(0 if rose else 64, 4, 1.0, mean, 0.001), 0.6931, useful=False,
                   shift={}, cut_short=(), rose=rose, hint=", or sample more rows")


def test_a_loss_that_never_fell_names_noise_and_step_size_not_only_the_budget() -> None:
    flat = _not_useful(0.6900, rose=False)
    assert "no schedule is predicted to help" in flat
    assert "raise eps, use more data per client, or sample more rows" in flat
    assert "raise the learning rate, or the clip" in flat and "rose" not in flat


def test_a_loss_that_rose_everywhere_names_a_learning_rate_too_large() -> None:
    rose = _not_useful(0.6931, rose=True)
    assert "the loss rose above it at every schedule simulated" in rose
    assert "lower the clip or the learning rate" in rose
