"""The run's configuration (fedqr.sim.config): what ``config`` in ``result.json`` records."""

from __future__ import annotations

import pytest

from fedqr.privacy import Mechanism
from fedqr.sim.config import PrivacyConfig, SimConfig


@pytest.mark.parametrize("mechanism", [Mechanism.LAPLACE, Mechanism.NONE])
def test_a_pure_dp_run_records_delta_zero(mechanism: Mechanism) -> None:
    """Laplace (pure DP) and no noise spend no delta: the run's config says 0, as its clients'
    ``delta_budget`` do (it said the unused default 1e-5), in the form given: one value, or
    one per client."""
    assert PrivacyConfig(mechanism=mechanism, clip=5.0, delta=1e-5,
                         sample_rate=1.0).delta == 0.0
    assert PrivacyConfig(mechanism=mechanism, clip=5.0, delta=(1e-5,),
                         sample_rate=1.0).delta == (0.0,)
    cfg = SimConfig(num_clients=3, clients_per_round=1, rounds=1,
                    privacy=PrivacyConfig(mechanism=mechanism, clip=5.0, delta=(1e-5, 0.0, 0.1),
                                          sample_rate=1.0))
    assert cfg.privacy.delta == (0.0, 0.0, 0.0) == cfg.privacy.client_delta(3)


def test_a_pure_dp_delta_list_still_has_one_or_n_values() -> None:
    with pytest.raises(ValueError, match="delta"):
        SimConfig(num_clients=3, clients_per_round=1, rounds=1,
                  privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE, clip=5.0,
                                        delta=(1e-5, 1e-5), sample_rate=1.0))


def test_the_gaussian_mechanism_records_the_delta_given() -> None:
    assert PrivacyConfig(mechanism=Mechanism.GAUSSIAN, clip=5.0, delta=1e-5).delta == 1e-5
    assert PrivacyConfig(mechanism=Mechanism.GAUSSIAN, clip=5.0,
                         delta=(1e-5, 1e-6)).delta == (1e-5, 1e-6)
