"""The twin: exact where it must be (no noise), the deployment's distribution where it has noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.models.logreg import Norm
from fedqr.planner import Scenario
from fedqr.planner.grids import b_grid, log_grid, q_grid, refine_b
from fedqr.planner.noise import NoiseBook
from fedqr.planner.twin import (
    TwinRun,
    make_proxy,
    proxy_rows,
    simulate_columns,
    simulate_stacked,
    stackable,
)
from fedqr.privacy import Accountant, Mechanism
from fedqr.sim.budget import client_noise
from fedqr.sim.config import Aggregation, LearningRate, PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate

from .twin_reference import reference_columns

DATA = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.DIRICHLET, alpha=0.5,
                num_clients=4, seed=2)


def _full_proxy(norm: Norm, products: str = "float32"):  # the twin on all of the clients' rows
    data = DATA.build()
    rows = tuple(np.asarray(i) for i in data.partition.indices)
    return data, make_proxy(data, rows=rows, test=data.dataset, real_sizes=data.partition.sizes,
                            norm=norm, device=torch.device("cpu"), products=products)


def _half_proxies(norm: Norm, draws: int, products: str = "float32"):
    """``draws`` proxies of half of each client's rows, each its own draw (equal sizes)."""
    data = DATA.build()
    return [make_proxy(data, rows=proxy_rows(data.partition, share=0.5,
                                             rng=np.random.default_rng([5, d])),
                       test=data.dataset, real_sizes=data.partition.sizes, norm=norm,
                       device=torch.device("cpu"), products=products) for d in range(draws)]


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_without_noise_the_twin_is_the_engine(aggregation: Aggregation) -> None:
    data, proxy = _full_proxy(Norm.L2)
    lr = LearningRate(eta0=0.3)
    run = TwinRun(mechanism=Mechanism.NONE, clients_per_round=3, sample_rate=1.0, clip=2.0,
                  lr=lr, weight_decay=0.01, aggregation=aggregation, repeats=2)
    horizons = np.array([0, 5, 2, 9])
    losses = simulate_columns(proxy, run, horizons=horizons, std=np.zeros((4, 4)),
                              generator=torch.Generator().manual_seed(0))
    for t, row in zip(horizons, losses, strict=True):
        cfg = SimConfig(num_clients=4, clients_per_round=3, rounds=int(t), lr=lr,
                        aggregation=aggregation, eval_every=max(1, int(t)),
                        privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=2.0, sample_rate=1))
        want = simulate(data.dataset, data.partition, cfg).runs[0]["rounds"][-1]["test_loss"]
        np.testing.assert_allclose(row, want, rtol=2e-5)


@pytest.mark.parametrize("mechanism", [Mechanism.LAPLACE, Mechanism.GAUSSIAN])
def test_with_noise_the_twin_has_the_engines_loss_distribution(mechanism: Mechanism) -> None:
    """On the clients' full data the twin's final loss and the engine's have one distribution
    (Welch t-test and a two-sample Kolmogorov-Smirnov test over 24 repeats each)."""
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    data, proxy = _full_proxy(norm)
    q = 1.0 if mechanism is Mechanism.LAPLACE else 0.3
    clip = 20.0 if mechanism is Mechanism.LAPLACE else 3.0
    sc = Scenario(data=DATA, mechanism=mechanism, eps=(3.0,), clip=clip, sample_rate=q,
                  lr=LearningRate(eta0=0.3))
    t, b, reps = 8, 2, 24
    std = NoiseBook(scenario=sc, sizes=data.partition.sizes).std(b=b, rounds=[t], sample_rate=q)
    run = TwinRun(mechanism=mechanism, clients_per_round=b, sample_rate=q, clip=clip,
                  lr=sc.lr, weight_decay=0.01, aggregation=Aggregation.PAPER, repeats=reps)
    twin = simulate_columns(proxy, run, horizons=np.array([t]), std=std,
                            generator=torch.Generator().manual_seed(11))[0]
    cfg = sc.sim_config(rounds=t, clients_per_round=b, sample_rate=q, repeats=reps, seed=5,
                        eval_every=t)
    engine = [r["rounds"][-1]["test_loss"] for r in simulate(data.dataset, data.partition,
                                                             cfg).runs]
    assert stats.ttest_ind(twin, engine, equal_var=False).pvalue > 1e-3
    assert stats.ks_2samp(twin, engine).pvalue > 1e-3


@pytest.mark.parametrize(("mechanism", "q", "aggregation"), [
    (Mechanism.GAUSSIAN, 0.3, Aggregation.PAPER), (Mechanism.LAPLACE, 1.0, Aggregation.PAPER),
    (Mechanism.LAPLACE, 0.3, Aggregation.NORMALIZED),
    (Mechanism.NONE, 1.0, Aggregation.NORMALIZED)])
def test_the_twin_is_its_plain_loop_bit_for_bit(mechanism: Mechanism, q: float,
                                                aggregation: Aggregation) -> None:
    """The twin's loop (weights once per selection, columns updated in place, Poisson batches
    read repeat by repeat) draws the same numbers in the same order and computes the same
    floats as the plain loop of ``tests/planner/twin_reference.py``: plans do not move."""
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    _, proxy = _full_proxy(norm)
    run = TwinRun(mechanism=mechanism, clients_per_round=3, sample_rate=q, clip=2.0,
                  lr=LearningRate(eta0=0.3), weight_decay=0.01, aggregation=aggregation,
                  repeats=3)
    horizons = np.array([0, 5, 2, 9, 5, 1])
    std = np.random.default_rng(3).uniform(0.0, 0.05, size=(len(horizons), 4))
    fast = simulate_columns(proxy, run, horizons=horizons, std=std,
                            generator=torch.Generator().manual_seed(7))
    plain = reference_columns(proxy, run, horizons=horizons, std=std,
                              generator=torch.Generator().manual_seed(7))
    np.testing.assert_array_equal(fast, plain)
    assert np.isfinite(fast).all() and len(np.unique(fast[1])) == 3  # repeats differ


def test_noise_book_matches_the_engines_calibration() -> None:
    data = DATA.build()
    sizes = data.partition.sizes
    for mech, clip, q in ((Mechanism.LAPLACE, 20.0, 1.0), (Mechanism.GAUSSIAN, 3.0, 0.2)):
        sc = Scenario(data=DATA, mechanism=mech, eps=(1.0, 2.0, 3.0, 4.0), clip=clip,
                      sample_rate=q)
        got = NoiseBook(scenario=sc, sizes=sizes).std(b=3, rounds=[5, 40], sample_rate=q)
        for row, t in zip(got, (5, 40), strict=True):
            cfg = sc.sim_config(rounds=t, clients_per_round=3, sample_rate=q)
            from fedqr.theory.calibration import round_robin_replies

            reps = round_robin_replies(N=4, b=3, T=t)
            some = range(4) if mech is Mechanism.LAPLACE else range(1)  # calibration: ~1 s each
            want = [client_noise(cfg, replies=int(reps[i]), size=int(sizes[i]),
                                 eps=sc.client_eps()[i], delta=1e-5)[1] for i in some]
            np.testing.assert_allclose(row[: len(want)], want,
                                       rtol=1e-12 if mech is Mechanism.LAPLACE else 0.01)


def test_noise_book_calibrates_pld_exactly_from_the_rdp_table_s_start() -> None:
    """With the PLD accountant every distinct reply count is calibrated exactly (started from
    the RDP table's multiplier): the engine's noise to dp-accounting's tolerance."""
    data = DATA.build()
    sizes = data.partition.sizes
    sc = Scenario(data=DATA, mechanism=Mechanism.GAUSSIAN, eps=(1.0, 1.0, 4.0, 4.0), clip=3.0,
                  sample_rate=0.3, accountant=Accountant.PLD)
    got = NoiseBook(scenario=sc, sizes=sizes).std(b=3, rounds=[6], sample_rate=0.3)[0]
    from fedqr.theory.calibration import round_robin_replies

    cfg = sc.sim_config(rounds=6, clients_per_round=3, sample_rate=0.3)
    reps = round_robin_replies(N=4, b=3, T=6)
    want = [client_noise(cfg, replies=int(reps[i]), size=int(sizes[i]),
                         eps=sc.client_eps()[i], delta=1e-5)[1] for i in (0, 3)]
    np.testing.assert_allclose(got[[0, 3]], want, rtol=1e-5)


def test_grids() -> None:
    g = log_grid(1, 1000, ratio=1.25)
    assert g[0] == 1 and g[-1] == 1000 and np.all(np.diff(g) >= 1)
    assert np.all(g[1:] / g[:-1] <= np.maximum(1.25, (g[:-1] + 1) / g[:-1]))
    assert list(b_grid(4)) == [1, 2, 3, 4]
    big = b_grid(100)
    assert big[0] == 1 and big[-1] == 100 and np.all(big[1:] / big[:-1] <= 2.0)
    assert refine_b(6, {1, 2, 3, 4, 6, 9, 13}, 100) == [5, 7, 8]
    q = q_grid(600)
    assert q[-1] == 1.0 and q[0] == pytest.approx(2 / 600, rel=1e-3)
    with pytest.raises(ValueError, match="ratio must be > 1"):
        log_grid(1, 5, ratio=1.0)


@pytest.mark.parametrize(("mechanism", "q"), [(Mechanism.GAUSSIAN, 0.3),
                                              (Mechanism.LAPLACE, 1.0)])
@pytest.mark.parametrize("products", ["float32", "bfloat16"])
def test_stacked_proxies_get_the_losses_each_gets_alone(mechanism: Mechanism, q: float,
                                                        products: str) -> None:
    """The proxy shift's batch: three proxies (other rows, equal sizes) in one run take the
    draws each takes alone from the same generator state, so their losses are the same."""
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    proxies = _half_proxies(norm, 3, products)
    assert stackable(proxies)
    run = TwinRun(mechanism=mechanism, clients_per_round=3, sample_rate=q, clip=2.0,
                  lr=LearningRate(eta0=0.3), weight_decay=0.01, aggregation=Aggregation.PAPER,
                  repeats=3)
    horizons = np.array([0, 6, 2, 9])
    std = np.random.default_rng(3).uniform(0.0, 0.05, size=(len(horizons), 4))
    together = simulate_stacked(proxies, run, horizons=horizons, std=std,
                                generator=torch.Generator().manual_seed(7))
    for proxy, got in zip(proxies, together, strict=True):
        alone = simulate_columns(proxy, run, horizons=horizons, std=std,
                                 generator=torch.Generator().manual_seed(7))
        np.testing.assert_allclose(got, alone, rtol=1e-5)
    assert np.abs(together[0] - together[1]).max() > 1e-4  # their rows differ


def test_proxies_of_other_sizes_are_not_stacked() -> None:
    data = DATA.build()
    half, all_rows = (make_proxy(data, rows=proxy_rows(data.partition, share=share,
                                                       rng=np.random.default_rng(1)),
                                 test=data.dataset, real_sizes=data.partition.sizes,
                                 norm=Norm.L2, device=torch.device("cpu"), products="float32")
                      for share in (0.5, 1.0))
    assert stackable([half, half]) and not stackable([half, all_rows])
    bf16 = make_proxy(data, rows=tuple(np.asarray(i) for i in data.partition.indices),
                      test=data.dataset, real_sizes=data.partition.sizes, norm=Norm.L2,
                      device=torch.device("cpu"), products="bfloat16")
    assert bf16.products == "bfloat16" and not stackable([all_rows, bf16])


@pytest.mark.parametrize(("mechanism", "q"), [(Mechanism.GAUSSIAN, 0.3),
                                              (Mechanism.LAPLACE, 1.0)])
def test_bfloat16_products_predict_the_float32_losses(mechanism: Mechanism, q: float) -> None:
    """The twin's bfloat16 products (8 significant bits in, float32 sums) move its losses
    by far less than their Monte Carlo spread: the same draws give losses within 0.2%."""
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    run = TwinRun(mechanism=mechanism, clients_per_round=3, sample_rate=q, clip=2.0,
                  lr=LearningRate(eta0=0.3), weight_decay=0.01, aggregation=Aggregation.PAPER,
                  repeats=6)
    horizons = np.array([3, 10, 30])
    std = np.full((len(horizons), 4), 0.01)
    losses = {products: simulate_columns(_full_proxy(norm, products)[1], run,
                                         horizons=horizons, std=std,
                                         generator=torch.Generator().manual_seed(4))
              for products in ("float32", "bfloat16")}
    rel = np.abs(losses["bfloat16"] / losses["float32"] - 1)
    assert rel.max() < 2e-3, rel
    assert rel.max() > 0  # the products did run in bfloat16
    spread = losses["float32"].std(axis=1, ddof=1) / losses["float32"].mean(axis=1)
    assert (rel.max(axis=1) < spread).all()


def test_a_bad_product_format_is_refused() -> None:
    with pytest.raises(ValueError, match="products must be one of auto, float32, bfloat16, got "
                                         "'fp8'"):
        _full_proxy(Norm.L2, "fp8")
