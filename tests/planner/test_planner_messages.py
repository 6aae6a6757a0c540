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


def test_a_replaced_first_choice_of_another_rate_names_both_rates() -> None:
    """The shift replaced (128, 3, q=0.164) by (64, 3, q=1): the message names both q, where
    'T=128, b=3' alone read as the recommended rate."""
    def said(first_rate: float) -> str:
        shift = {"confirmed": {"rounds": 64, "clients_per_round": 3, "sample_rate": 1.0,
                               "runs": 4,
                               "replaces": {"rounds": 128, "clients_per_round": 3,
                                            "sample_rate": first_rate, "search_loss": 0.56,
                                            "shift_loss": 0.59}}}
        return message(Prediction(64, 3, 1.0, 0.5642, 0.004), 0.6931, useful=True,
                       shift=shift, cut_short=())

    assert ("at T=64, b=3, q=1, re-simulated on the plan's proxy: it replaces the search's "
            "first choice T=128, b=3, q=0.164414 (predicted") in said(0.164414)
    assert "at T=64, b=3, re-simulated on the plan's proxy: it replaces the search's first " \
           "choice T=128, b=3 (predicted" in said(1.0)


def test_a_schedule_kept_though_it_lost_on_other_draws_says_why() -> None:
    """'stays the best of the candidates on 0 of 4' read as an overrule that did not
    happen; the rule (win on every run by 1% on average) is said, and only then."""
    def said(still: str) -> str:
        shift = {"proxy_std": 0.01, "alternatives": [{}] * 4, "recommended_still_best": still}
        return message(Prediction(77, 6, 1.0, 0.51, 0.004), 0.6931, useful=True, shift=shift,
                       cut_short=())

    assert ("over 4 other draws of the proxy, the schedule is the best of the candidates on "
            "0 of these 4 draws (the candidates that won elsewhere did not beat it on the plan's "
            "proxy and on every other draw by 1% on average, so the search's choice stands)"
            ) in said("0 of 4")
    assert "is the best of the candidates on 4 of these 4 draws;" in said("4 of 4") + ";"
    assert "won elsewhere" not in said("4 of 4")
    cut = message(Prediction(128, 4, 1.0, 0.83, 0.004), 0.6931, useful=True, shift={},
                  cut_short=[(4, 1.0, 128)])
    assert "ended the search of b=4 at T=128, where the loss still fell (the next, longer " \
           "schedule was estimated to cost more than the budget had left)" in cut
