"""Your own data file and model on Flower, without Flower processes: the client and server logic
of a ``--data`` run (any model: the run's kernel) reproduce the simulator's round loop bit for
bit, and a SuperNode reads every data format alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedqr.data import FederatedData
from fedqr.data.tabular import write_csv, write_parquet
from fedqr.flower.client_data import input_shape, run_kernel
from fedqr.flower.client_logic import answer_round
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.node_data import read_node_rows
from fedqr.flower.server_logic import ClientReply, ServerRun
from fedqr.privacy import Mechanism
from fedqr.sim.loop import run_rounds
from fedqr.sim.provenance import model_record


def _own(tmp_path: Path, *, clients: int = 3, seed: int = 0) -> FederatedData:
    """A small three-class problem of 6 features, written as tmp_path/own.npz."""
    rng = np.random.default_rng(seed)
    n = 150
    y = rng.integers(0, 3, size=n)
    x = rng.normal(size=(n, 6)) + y[:, None] * np.array([1.0, -0.5, 0.0, 0.3, 0.0, 2.0])
    own = FederatedData.from_arrays(x=x * 3 + 10, y=y, client=rng.integers(0, clients, size=n),
                                    test_share=0.2, standardize=False, seed=seed)
    own.to_npz(tmp_path / "own.npz")
    return own


@pytest.mark.parametrize(("model", "mechanism", "q", "clip", "exact"), [
    ("logreg", Mechanism.LAPLACE, 1.0, 4.0, True),
    ("logreg", Mechanism.GAUSSIAN, 0.4, 2.0, True),
    ("linear", Mechanism.LAPLACE, 1.0, 4.0, True),  # the intercept's column on both sides
    # the loop's Poisson product takes all replies' batches at once, a client its own: at
    # some widths BLAS rounds the two in another order (logreg's own 8 features differ in
    # the last bit too; its 6 here do not), so linear's 7 columns agree to float32 rounding
    ("linear", Mechanism.GAUSSIAN, 0.4, 2.0, False),
    # a torch model: the loop runs the per-sample pass on a slice of all clients' rows (a
    # round's Poisson batches in one pass), a Flower client on its own rows alone; BLAS may
    # round differently for another batch or alignment, in the last bit (a reply from the
    # same rows is bit-identical: tests/sim/test_reply_paths.py)
    ("mlp", Mechanism.LAPLACE, 1.0, 4.0, False),
    ("mlp", Mechanism.GAUSSIAN, 0.4, 2.0, False),
])
def test_own_data_replies_and_rounds_equal_the_round_loop(
        tmp_path: Path, model: str, mechanism: Mechanism, q: float, clip: float,
        exact: bool) -> None:
    _own(tmp_path)
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=2, rounds=3,
                          data_file=str(tmp_path / "own.npz"), model=model, hidden="8,4",
                          mechanism=mechanism, eps=(2.0, 4.0, 3.0), clip=clip, sample_rate=q,
                          lr=0.3, seed=2)
    ds, part = cfg.load_data()  # standardised by the training rows (fedqr run --data)
    assert abs(float(ds.x_train.mean())) < 1e-5
    kernel = run_kernel(model, input_shape=input_shape(ds), num_classes=3, hidden=(8, 4))
    loop = run_rounds(ds, part, cfg.sim_config(), kernel)
    run = ServerRun.start(cfg)
    assert run.kernel is kernel and run.theta.shape == (1, *kernel.param_shape)
    for t in range(cfg.rounds):
        run.record(t)
        got = {}
        for c in run.selected(t):
            rep = answer_round(cfg, client=c, round=t, theta=run.theta_numpy(), run_key="r",
                               state_dir=tmp_path / f"client-{c}")
            got[c] = ClientReply(client=c, theta=rep.theta, rows=rep.rows,
                                 clipped_fraction=rep.clipped_fraction, grad_norm=rep.grad_norm,
                                 epsilon_spent=rep.epsilon_spent)
        run.apply_round(t, replies=got, lost={})
    run.record(cfg.rounds)
    theta = run.theta.numpy().reshape(1, -1)
    doc, ref = run.result(), loop.to_json()
    if exact:
        np.testing.assert_array_equal(theta, loop.final_theta)
        assert doc["summary"]["final_test_loss_mean"] == ref["summary"]["final_test_loss_mean"]
    else:
        np.testing.assert_allclose(theta, loop.final_theta, rtol=0, atol=1e-6)
        assert doc["summary"]["final_test_loss_mean"] == pytest.approx(
            ref["summary"]["final_test_loss_mean"], rel=1e-6)
    mine, theirs = doc["runs"][0]["rounds"][-1], ref["runs"][0]["rounds"][-1]
    assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-6)
    spent = [c["epsilon_spent"] for c in doc["clients"]]
    assert spent == pytest.approx([c["epsilon_spent"] for c in ref["clients"]], rel=1e-9)
    assert spent == pytest.approx([2.0, 4.0, 3.0], rel=1e-5)
    assert all(s <= e * (1 + 1e-12) for s, e in zip(spent, (2.0, 4.0, 3.0), strict=True))
    assert doc["provenance"]["model"] == model_record(kernel)
    assert doc["data"]["sha256"] == cfg.federated().digest  # as fedqr run --data records it


def test_a_node_reads_npz_csv_and_parquet_alike(tmp_path: Path) -> None:
    own = _own(tmp_path, clients=1)
    write_csv(tmp_path / "own.csv", own, test_path=tmp_path / "own_test.csv")
    write_parquet(tmp_path / "own.parquet", own, test_path=tmp_path / "own_test.parquet")
    np.savez(tmp_path / "xy.npz", x=own.x, y=own.y)  # the first format: x and y only
    rows = [read_node_rows(tmp_path / name) for name in ("own.npz", "own.csv", "own.parquet",
                                                         "xy.npz")]
    for r in rows:
        np.testing.assert_array_equal(r.x, own.x)
        np.testing.assert_array_equal(r.y, own.y)
    local = read_node_rows(tmp_path / "own.csv", standardize=True)
    np.testing.assert_allclose(local.x.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(local.x.std(axis=0), 1, atol=1e-4)
    test = read_node_rows(tmp_path / "own_test.csv", option="--test-data", one_client=False)
    np.testing.assert_array_equal(test.x, own.x_test)


def test_a_node_refuses_a_file_of_several_clients(tmp_path: Path) -> None:
    _own(tmp_path, clients=3)
    with pytest.raises(ValueError, match=r"--data: .*own.npz holds the rows of 3 clients"):
        read_node_rows(tmp_path / "own.npz")
    with pytest.raises(ValueError, match=r"--data must end in .npz, .csv, .parquet"):
        (tmp_path / "own.txt").write_text("x")
        read_node_rows(tmp_path / "own.txt")
