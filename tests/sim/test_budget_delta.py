"""A delta of at least 1/d_i is warned of: (eps, delta)-DP that weak allows publishing one of
the client's d_i records outright. Below it, and for pure-DP mechanisms, nothing is said."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedqr.sim.budget import warn_large_delta


def test_a_delta_of_one_over_d_or_more_is_warned_of_naming_the_clients() -> None:
    with pytest.warns(RuntimeWarning, match=r"delta is at least 1/d for 2 client\(s\) "
                                            r"\(client 1: delta=0.1, d=10, client 2: "
                                            r"delta=0.5, d=2\)"):
        warn_large_delta((0.01, 0.1, 0.5), np.array([50, 10, 2]))


def test_below_one_over_d_nothing_is_said() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_large_delta((0.01, 0.099), np.array([99, 10]))


def test_many_clients_are_counted_not_all_listed() -> None:
    with pytest.warns(RuntimeWarning, match=r"for 8 client\(s\) .*client 4: .* and 3 more"):
        warn_large_delta((1e-3,) * 8, np.full(8, 1000))

