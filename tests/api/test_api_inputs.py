"""What the Python API accepts and refuses: NumPy numbers, budgets that are not numbers, a
plan run as a schedule, a diverged run, the models it cannot train reproducibly."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fedqr
from fedqr._validate import float_tuple


@pytest.fixture
def budget(data: fedqr.FederatedData) -> dict[str, Any]:
    return {"data": data, "model": "logreg", "mechanism": "laplace", "eps": 4.0, "clip": 5.0}


def test_float_tuple_takes_numbers_and_sequences_never_strings() -> None:
    assert float_tuple("eps", np.float32(2)) == (2.0,)
    assert float_tuple("eps", np.array(3.0)) == (3.0,)
    assert float_tuple("eps", np.array([1, 2])) == (1.0, 2.0)
    assert float_tuple("eps", [1, np.int64(5)]) == (1.0, 5.0)
    for bad in ("25", b"2", None, True, [], ["1"], [None], {1: 0.1}, {0.5}, (e for e in [1.0]),
                np.ones((2, 2))):  # a dict gave its keys, a set an arbitrary order
        with pytest.raises(ValueError, match="eps"):
            float_tuple("eps", bad)


@pytest.mark.parametrize(("change", "message"), [
    ({"eps": "25"}, "eps must be a number or a sequence of numbers, got eps='25'"),
    ({"eps": None}, "eps must be a number"),
    ({"eps": {0: 0.1, 1: 0.1}}, "eps must be a number or a sequence of numbers (a list, tuple "
                                "or 1-D array, one per client), got eps={0: 0.1, 1: 0.1} (dict)"),
    ({"delta": 0.5}, "delta must be left out for mechanism='laplace' (pure eps-DP: delta is 0), "
                     "got delta=0.5"),
    ({"mechanism": "none", "eps": 0.1}, "eps must be left out for mechanism='none' (no noise, "
                                        "no privacy budget), got eps=0.1"),
    ({"mechanism": "none", "eps": 1.0, "delta": 1e-3}, "delta must be left out for "
                                                       "mechanism='none'"),
    ({"mechanism": "Laplace"}, "mechanism must be one of 'laplace'"),
    ({"accountant": "x"}, "accountant must be one of"),
    ({"accountant": "pld"}, "accountant must be left out or 'pure' for the laplace mechanism, "
                            "whose budgets the pure accountant composes, got accountant='pld'"),
    ({"mechanism": "none", "eps": 1.0, "accountant": "rdp"}, "which spends no budget"),
    ({"clip": "5"}, "clip must be a number, got clip='5'"),
    ({"clients_per_round": 1.5}, "clients_per_round must be an integer"),
    ({"clients_per_round": True}, "clients_per_round must be an integer"),
    ({"device": "gpu"}, "device must be auto, cpu or cuda"),
    ({"model": 42}, "model must be 'logreg'"),
    ({"model": torch.nn.Linear(6, 2)}, "not a module"),
    ({"model": "mlp", "hidden": 8}, "hidden must be a sequence of layer widths"),
    ({"on_round": 5}, "on_round must be a callable"),
    ({"mechanism": "gaussian", "sample_rate": "auto"},
     "sample_rate must be a number in (0, 1], got sample_rate='auto' ('auto' is fedqr.plan's"),
])
def test_simulate_refuses_bad_input_by_name(budget: dict[str, Any], change: dict[str, Any],
                                            message: str) -> None:
    args = {**budget, "rounds": 2, "clients_per_round": 2, **change}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fedqr.simulate(**args)


def test_the_mechanisms_own_accountant_or_none_is_accepted(budget: dict[str, Any]) -> None:
    for accountant in (None, "pure"):
        res = fedqr.simulate(**budget, rounds=2, clients_per_round=2, accountant=accountant)
        assert res.document["accounting"]["accountant"] == "pure"
    gauss = {**budget, "mechanism": "gaussian", "clip": 1.0, "sample_rate": 0.5}
    assert fedqr.simulate(**gauss, rounds=2, clients_per_round=2).document[
        "accounting"]["accountant"] == "rdp"
    assert fedqr.simulate(**gauss, rounds=2, clients_per_round=2, accountant="pld").document[
        "accounting"]["accountant"] == "pld"


def test_numpy_numbers_are_plain_numbers(budget: dict[str, Any]) -> None:
    a = fedqr.simulate(**{**budget, "eps": np.float32(4)}, rounds=np.int64(3),
                       clients_per_round=np.int64(2), seed=np.int64(1))
    b = fedqr.simulate(**budget, rounds=3, clients_per_round=2, seed=1)
    assert a.final_test_loss == b.final_test_loss
    assert a.document["config"]["rounds"] == 3 and type(a.document["config"]["rounds"]) is int


def test_dropout_is_refused_for_reproducibility(budget: dict[str, Any]) -> None:
    def net(shape: tuple[int, ...], k: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(shape[0], 8), torch.nn.Dropout(0.5),
                                   torch.nn.Linear(8, k))

    with pytest.raises(ValueError, match="dropout draws from torch's global random"):
        fedqr.simulate(**{**budget, "model": net}, rounds=2, clients_per_round=2)

    def no_drop(shape: tuple[int, ...], k: int) -> torch.nn.Module:  # p = 0 does nothing
        return torch.nn.Sequential(torch.nn.Linear(shape[0], 8), torch.nn.Dropout(0.0),
                                   torch.nn.Linear(8, k))

    runs = [fedqr.simulate(**{**budget, "model": no_drop}, rounds=2, clients_per_round=2)
            for _ in range(2)]
    assert runs[0].final_test_loss == runs[1].final_test_loss


def test_a_diverged_run_warns_and_reports_nan(data: fedqr.FederatedData) -> None:
    rng = np.random.default_rng(1)
    x = 1000 * rng.normal(size=(400, 4)).astype(np.float32)
    wild = fedqr.FederatedData.from_arrays(x=x, y=(x[:, 0] > 0).astype(np.int64),
                                           client=rng.integers(0, 4, 400), test_share=0.25,
                                           standardize=False)
    with pytest.warns(RuntimeWarning, match="diverged"):
        r = fedqr.simulate(data=wild, model="logreg", mechanism="none", lr=1e6, lr_decay=0.0,
                           rounds=20, clients_per_round=4)
    assert r.diverged and math.isnan(r.final_test_loss) and math.isnan(r.final_test_accuracy)


def test_a_schedule_is_the_plan_of_this_run(budget: dict[str, Any], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    plan = fedqr.plan(**budget)
    assert plan.useful
    ran = fedqr.simulate(**budget, schedule=plan)
    assert ran.document["config"]["rounds"] == plan.rounds
    # their reprs say the answer in a line, not the whole document (some 19 KB for a plan)
    assert repr(plan) == (f"PlanResult(rounds={plan.rounds}, clients_per_round="
                          f"{plan.clients_per_round}, sample_rate={plan.sample_rate:g}, "
                          f"predicted_test_loss={plan.predicted_test_loss:.4g}, useful=True)")
    assert repr(ran).startswith(f"SimulationResult(final_test_loss={ran.final_test_loss:.4g}")
    for change, message in [({"rounds": 7}, "give either schedule or rounds"),
                            ({"mechanism": "gaussian"}, "planned for mechanism='laplace'"),
                            ({"eps": 1.0}, "planned for eps=4.0, the run asks eps=1.0"),
                            ({"clip": 2.0}, "planned for clip=5.0"),
                            # the plan's data, model and training rule, not only its budgets
                            ({"model": "mlp"}, r"planned for model=\{'name': 'logreg'"),
                            ({"lr": 0.5}, r"planned for lr=\{.*'eta0': 0.05"),
                            ({"lr_decay": 0.0}, "planned for lr="),
                            ({"weight_decay": 0.0}, "planned for weight_decay=0.01"),
                            ({"aggregation": "normalized"}, "planned for aggregation='paper'"),
                            ({"selection": "random"}, "planned for selection='round-robin'")]:
        with pytest.raises(ValueError, match=message):
            fedqr.simulate(**{**budget, **change}, schedule=plan)
    # the plan's own T, b and q beside it (a budget dictionary shared with fedqr.plan) are
    # no conflict: the same run; another value is refused naming the plan's
    same = fedqr.simulate(**budget, schedule=plan, rounds=plan.rounds,
                          clients_per_round=plan.clients_per_round, sample_rate=plan.sample_rate)
    assert same.document["summary"] == ran.document["summary"]
    with pytest.raises(ValueError, match=rf"rounds={plan.rounds} in this plan\); give either "
                                         rf"schedule or rounds, got both \(rounds="
                                         rf"{plan.rounds + 1}\)"):
        fedqr.simulate(**budget, schedule=plan, rounds=plan.rounds + 1)
    rng = np.random.default_rng(1)  # another federation: 2 clients, fewer than the plan's b
    x = rng.normal(size=(200, 6)).astype(np.float32)
    other = fedqr.FederatedData.from_arrays(x=x, y=(x[:, 0] > 0).astype(np.int64),
                                            client=rng.integers(0, 2, 200), test_share=0.25)
    with pytest.raises(ValueError, match=r"planned for other data \(.*4 clients\), the run "
                                         r"asks data=\(.*2 clients; num_clients 4 -> 2"):
        fedqr.simulate(**{**budget, "data": other}, schedule=plan)
    rng = np.random.default_rng(0)  # the fixture's arrays, split with another seed
    x = rng.normal(size=(600, 6)).astype(np.float32)
    resplit = fedqr.FederatedData.from_arrays(
        x=x, y=(x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64), client=rng.integers(0, 4, 600),
        test_share=0.25, seed=1)
    with pytest.raises(ValueError, match=r"4 clients; the same shape, other rows, labels or "
                                         r"split \(another file digest\)\)"):
        fedqr.simulate(**{**budget, "data": resplit}, schedule=plan)
    unnamed = {k: v for k, v in budget.items() if k != "model"}  # planned with the default
    default = fedqr.plan(**unnamed)
    assert fedqr.simulate(**unnamed, model="linear", schedule=default).document["plan"]
    with pytest.raises(ValueError, match=r"planned for model=\{'name': 'linear'"):
        fedqr.simulate(**unnamed, model="logreg", schedule=default)
    with pytest.raises(ValueError, match="schedule must be a PlanResult"):
        fedqr.simulate(**budget, schedule={"rounds": 3})  # type: ignore[arg-type]


def test_a_plan_that_is_not_useful_is_not_run(budget: dict[str, Any], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    hopeless = {**budget, "eps": 0.01, "clip": 50.0}  # noise far above any signal
    plan = fedqr.plan(**hopeless)
    assert not plan.useful and plan.rounds == 0
    with pytest.raises(ValueError, match="useful=False"):
        fedqr.simulate(**hopeless, schedule=plan)


@pytest.mark.parametrize(("change", "message"), [
    ({"rounds": 2.5}, "rounds must be an integer"),
    ({"clients_per_round": 2.0}, "clients_per_round must be an integer"),
    ({"twin_repeats": 2.5}, "twin_repeats must be an integer"),
    ({"twin_budget": 0}, r"twin_budget must be > 0 and finite, got twin_budget=0"),
    ({"twin_budget": math.inf}, r"twin_budget must be > 0 and finite, got twin_budget=inf"),
    ({"twin_budget": "20"}, r"twin_budget must be a number, got twin_budget='20'"),
    ({"weight_decay": -1.0}, "weight_decay must be >= 0"),
    ({"weight_decay": math.nan}, "weight_decay must be >= 0"),
    ({"seed": -1}, "seed must be in"),
    ({"data_use": "private-pilot"}, "the Python API plans with 'clear-proxy'"),
    ({"data_use": "clear"}, "data_use must be 'clear-proxy' or 'public-proxy', got "
                              "data_use='clear'"),
    ({"accountant": "rdp"}, "accountant must be left out or 'pure' for the laplace mechanism"),
    ({"sample_rate": 0.5}, r"full local data \(q = 1\), got sample_rate=0.5"),
    ({"data_use": "public-proxy", "proxy": "pub.csv"},
     r"proxy must be an existing .npz, .csv or .parquet file, got proxy='pub.csv' \(no such"),
    ({"data_use": "public-proxy", "proxy": 3}, r"proxy must be a FederatedData or a DataSpec"),
    ({"proxy_classes": "0-1"}, "proxy_classes needs data_use='public-proxy', got "
                               "data_use='clear-proxy'"),
    ({"data": "clients.csv"}, "data must be a FederatedData or a DataSpec, got str"),
])
def test_plan_refuses_bad_input_by_name(budget: dict[str, Any], change: dict[str, Any],
                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fedqr.plan(**{**budget, **change}, use_cache=False)


@pytest.mark.parametrize(("change", "message"), [
    ({"standardize": "no"}, "standardize must be True or False, got standardize='no'"),
    ({"name": 5}, "name must be a string, got name=5"),
    ({"feature_names": ["a", "a"]}, "feature_names must not repeat a name"),
    ({"feature_names": [1, 2]}, "feature_names must be non-empty strings, got 1")])
def test_from_arrays_refuses_flags_and_names_of_another_type(change: dict[str, Any],
                                                              message: str) -> None:
    x = np.zeros((12, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        fedqr.FederatedData.from_arrays(x=x, y=np.arange(12) % 2, client=np.arange(12) % 3,
                                        test_share=0.25, **change)


def test_a_clear_proxy_plan_warns_that_it_read_private_data(budget: dict[str, Any],
                                                            tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    with pytest.warns(fedqr.PrivateDataWarning, match="WITHOUT differential privacy"):
        plan = fedqr.plan(**budget)
    assert plan.document["recommended"]["data_used"]["reads_private_data"]
    with pytest.warns(fedqr.PrivateDataWarning):  # from the cache too: made from the data
        fedqr.plan(**budget)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fedqr.PrivateDataWarning)
        public = fedqr.plan(**budget, data_use="public-proxy", proxy=budget["data"])
    assert not public.document["recommended"]["data_used"]["reads_private_data"]


def test_plan_takes_the_twin_budget_and_keeps_its_warnings(budget: dict[str, Any]) -> None:
    """``twin_budget`` is ``--twin-budget`` (the logistic twin ignores it and says so, in the
    API's words); what planning warned is in the document, as ``fedqr plan --json`` has it."""
    said = "twin_budget=1 is ignored: it sizes the twin of a model other than softmax"
    with pytest.warns(UserWarning, match=said):
        plan = fedqr.plan(**budget, twin_budget=1, use_cache=False)
    assert [w for w in plan.document["warnings"] if w.startswith(said)], plan.document
    assert not any("time_budget_s" in w for w in plan.document["warnings"])
    mlp = fedqr.plan(**{**budget, "model": "mlp"}, hidden=[4], twin_budget=0.5,
                     use_cache=False)
    assert mlp.plan.settings["simulated"]["time_budget_s"] == 0.5
    rng = np.random.default_rng(3)  # a public proxy with column names, the deployment none
    x = rng.normal(size=(300, 6)).astype(np.float32)
    named = fedqr.FederatedData.from_arrays(
        x=x, y=(x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64), client=np.arange(300) % 3,
        test_share=0.25, seed=0, feature_names=[f"f{i}" for i in range(6)])
    said = "proxy: the deployment's data has no column names (an .npz file without a " \
           "feature_names array, or arrays given without feature_names)"
    with pytest.warns(UserWarning, match=re.escape(said)):
        public = fedqr.plan(**budget, data_use="public-proxy", proxy=named, use_cache=False)
    assert [w for w in public.document["warnings"] if w.startswith(said)]


def test_a_public_proxy_of_other_classes_is_told_how_to_select_them_in_python(
        budget: dict[str, Any]) -> None:
    """The message named --proxy-classes, which fedqr.plan does not take."""
    from fedqr.data.public import select_proxy_classes

    data = budget["data"]
    three = fedqr.FederatedData.from_arrays(x=data.x, y=np.arange(data.num_train) % 3,
                                            client=data.client, test_share=0.25, seed=0)
    with pytest.raises(ValueError, match=re.escape(
            "got 6 features and 3 classes; select or map its classes with "
            "proxy_classes='0-9' (a range, a list '0,1,5' or a label map file), or "
            "fedqr.data.public.select_proxy_classes(proxy, '0-9')")):
        fedqr.plan(**budget, data_use="public-proxy", proxy=three, use_cache=False)
    assert select_proxy_classes(three, "0,1").num_classes == 2  # what the message offers
    selected = fedqr.plan(**budget, data_use="public-proxy", proxy=three, proxy_classes="0,1",
                          use_cache=False)
    assert selected.document["recommended"]["data_used"]["proxy"] == "arrays, classes 0,1"
    with pytest.raises(ValueError, match=r"proxy_classes must be a string"):
        fedqr.plan(**budget, data_use="public-proxy", proxy=three, proxy_classes=[0, 1])


def test_a_public_proxy_file_without_a_client_column_is_planned_as_the_cli_plans_it(
        budget: dict[str, Any], tmp_path: Path) -> None:
    """``proxy="FILE"`` reads the file as ``fedqr plan --proxy-data FILE`` does: a CSV without
    a client column, its rows pooled and dealt to the clients by their sizes."""
    data = budget["data"]
    rng = np.random.default_rng(5)
    names = [f"f{i}" for i in range(data.num_features)]
    rows = rng.normal(size=(400, data.num_features))
    table = "\n".join([",".join([*reversed(names), "label"])] + [  # columns by name, any order
        ",".join([*(f"{v:.6f}" for v in reversed(r)), str(int(r[0] > 0))]) for r in rows])
    path = tmp_path / "public.csv"
    path.write_text(table + "\n")
    named = fedqr.FederatedData.from_arrays(x=data.x, y=data.y, client=data.client,
                                            test_share=0.25, seed=0, feature_names=names)
    plan = fedqr.plan(**{**budget, "data": named}, data_use="public-proxy", proxy=path,
                      use_cache=False)
    used = plan.document["recommended"]["data_used"]
    assert (used["proxy"], used["reads_private_data"]) == ("public", False)
    assert plan.rounds >= 0 and math.isfinite(plan.predicted_test_loss)
    cli_like = fedqr.plan(**{**budget, "data": named}, data_use="public-proxy",
                          proxy=str(path), use_cache=False)
    assert (cli_like.rounds, cli_like.clients_per_round) == (plan.rounds, plan.clients_per_round)


@pytest.mark.parametrize(("change", "needle"), [
    ({"use_cache": "no"}, "use_cache must be True or False, got use_cache='no'"),
    ({"progress": 3}, "progress must be a callable"),
])
def test_plan_refuses_bad_switches(budget: dict[str, Any], change: dict[str, Any],
                                   needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        fedqr.plan(**budget, **change)


def test_options_of_the_run_that_do_not_apply_or_do_not_fit_are_refused(
        budget: dict[str, Any]) -> None:
    run = {**budget, "rounds": 2, "clients_per_round": 2}
    with pytest.raises(ValueError, match="mu and gamma set the theory schedule"):
        fedqr.simulate(**run, mu=0.1, gamma=3.0)
    with pytest.raises(ValueError, match=r"lr_decay must be >= 0 and finite, got lr_decay=-1"):
        fedqr.simulate(**run, lr_decay=-1.0)
    three = fedqr.make_kernel("mlp", input_shape=(3,), num_classes=2)
    with pytest.raises(ValueError, match=r"model must be a kernel made for the data's samples "
                                         r"\(input_shape=\(6,\)\) .* got a kernel made for "
                                         r"input_shape=\(3,\)"):
        fedqr.simulate(**{**run, "model": three})
    lin = lambda shape, k: torch.nn.Linear(shape[0], k)  # noqa: E731
    mean = lambda z, y: torch.nn.functional.cross_entropy(z, y)  # noqa: E731  (reduced)
    with pytest.raises(ValueError, match=r"loss_fn must return one loss per row, shape \(n,\)"):
        fedqr.simulate(**{**run, "model": lin}, loss_fn=mean)


def test_hidden_is_for_the_mlp_only(budget: dict[str, Any]) -> None:
    run = {**budget, "rounds": 2, "clients_per_round": 2}
    with pytest.raises(ValueError, match=r"hidden sets the widths of model='mlp'; leave it out "
                                         r"for model='logreg', got hidden=\(8,\)"):
        fedqr.simulate(**run, hidden=(8,))
    with pytest.raises(ValueError, match="leave it out for model=None"):
        fedqr.plan(**{**budget, "model": None}, hidden=(8,))

    def my_net(shape: tuple[int, ...], k: int) -> torch.nn.Module:
        return torch.nn.Linear(shape[0], k)

    with pytest.raises(ValueError, match="leave it out for model='my_net'"):  # was 'function'
        fedqr.simulate(**{**run, "model": my_net}, hidden=(8,))
    mlp = fedqr.simulate(**{**run, "model": "mlp"}, hidden=(8,))
    assert mlp.document["provenance"]["model"]["num_params"] == 6 * 8 + 8 + 8 * 2 + 2


def test_a_run_keeps_its_final_parameters(budget: dict[str, Any], tmp_path: Path) -> None:
    ran = fedqr.simulate(**budget, rounds=3, clients_per_round=2, repeats=2)
    assert ran.theta is not None and ran.theta.shape[0] == 2  # (R, k, p): logreg
    assert ran.theta.ndim == 3 and np.isfinite(ran.theta).all()
    again = fedqr.simulate(**budget, rounds=3, clients_per_round=2, repeats=2)
    np.testing.assert_array_equal(ran.theta, again.theta)  # from the seed
    ran.save_model(tmp_path / "model.npz")
    with np.load(tmp_path / "model.npz") as npz:
        np.testing.assert_array_equal(npz["theta"], ran.theta)
    with pytest.raises(ValueError, match="kept no parameters"):
        fedqr.SimulationResult(document=ran.document).save_model(tmp_path / "none.npz")
    with pytest.raises(ValueError, match=r"path must be a file path \(str or os.PathLike\), "
                                         r"got path=5"):
        ran.save_model(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"path must be a file path, got path=.* \(a folder\)"):
        ran.save(tmp_path)  # it raised IsADirectoryError naming fedqr's temporary file
    for method in (ran.save, ran.save_model):  # a folder not made yet: it wrote a file "out"
        with pytest.raises(ValueError, match=r"path must be a file path, got path='.*out/' "
                                             r"\(a folder's: it ends with '/'\)"):
            method(f"{tmp_path}/out/")
    assert not (tmp_path / "out").exists()
    ran.save(tmp_path / "result.json")
    assert json.loads((tmp_path / "result.json").read_text()) == json.loads(
        json.dumps(ran.document))


def test_a_model_of_another_float_format_is_refused_naming_the_parameter() -> None:
    from torch import nn

    def wide(shape: tuple[int, ...], k: int) -> nn.Module:
        return nn.Sequential(nn.Linear(shape[0], 4), nn.Tanh(), nn.Linear(4, k)).double()

    with pytest.raises(ValueError, match=r"model 'wide' must hold float32 parameters .* got "
                                         r"torch.float64 for '0.weight': leave out .double"):
        fedqr.make_kernel(wide, input_shape=(3,), num_classes=2)


@pytest.mark.parametrize("given", [{}, {"rounds": 2}, {"clients_per_round": 2}])
def test_rounds_and_clients_per_round_are_required_without_a_schedule(
        budget: dict[str, Any], given: dict[str, Any]) -> None:
    """There is no default T or b: the call says what to give, and the docstring and
    docs/api.md say so where they list the parameters (they showed ``rounds=None`` only)."""
    with pytest.raises(ValueError, match=r"give rounds and clients_per_round, or "
                                         r"schedule=a PlanResult, got rounds="):
        fedqr.simulate(**budget, **given)
    doc = " ".join((fedqr.simulate.__doc__ or "").split())
    assert "T and b: required (there is no default T or b) unless ``schedule`` is given" in doc
    api_md = Path(__file__).resolve().parents[2] / "docs" / "api.md"
    assert "rounds=None, clients_per_round=None,  # required unless schedule= is given" in (
        api_md.read_text())


def test_from_file_refuses_one_column_for_clients_and_labels(tmp_path: Path) -> None:
    """As the CLI does: the clients' ids would become the labels, the labels a feature."""
    path = tmp_path / "d.csv"
    path.write_text("client,f0,label\n" + "".join(f"{i % 3},{i / 10},{i % 2}\n"
                                                   for i in range(30)))
    with pytest.raises(ValueError, match=r"client_column .* and label_column .* must name "
                                         r"different columns, got both 'client'"):
        fedqr.FederatedData.from_file(path, label_column="client", test_share=0.2)
