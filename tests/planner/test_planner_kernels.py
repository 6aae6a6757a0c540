"""make_plan for any model: an MLP is planned by its own twin, a model it cannot run is
refused by name, and the cache tells models apart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.models.zoo import make_kernel
from fedqr.planner import Scenario, SearchSettings, make_plan
from fedqr.planner.cache import cache_key
from fedqr.planner.kernels import kernel_identity, twin_kernel
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

SPEC = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS, num_clients=4)
FAST = SearchSettings(repeats=2, t_first=16, t_limit=64)


def _mlp(hidden: tuple[int, ...] = (16,)) -> Kernel:
    return make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=hidden)


def _scenario(kernel: Kernel | None, **kw: object) -> Scenario:
    base: dict[str, object] = dict(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(4.0,),
                                   clip=20.0, sample_rate=1.0, lr=LearningRate(eta0=0.3),
                                   kernel=kernel)
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def test_an_mlp_is_planned_by_its_twin_and_replanned_from_the_cache() -> None:
    plan = make_plan(_scenario(_mlp()), settings=FAST)
    means = [p.mean for p in plan.predictions]
    best = plan.predictions[0]  # the search's minimum, its loss re-simulated
    assert plan.recommended == replace(best, mean=plan.recommended.mean,
                                       stderr=plan.recommended.stderr)
    assert plan.proxy_shift["re_simulated"]["search_mean"] == min(means) and plan.useful
    assert plan.recommended.rounds > 0
    assert {p.clients_per_round for p in plan.predictions} == {1, 2, 3, 4}
    assert plan.data_used["model"] == "mlp" and plan.data_used["twin_engine"] == "stacked"
    ds = SPEC.build().dataset  # small: the whole data set is the proxy
    assert plan.data_used["rows"] == ds.num_train and plan.data_used["test_rows"] == len(
        ds.y_test)
    sim = plan.settings["simulated"]
    assert sim["rounds"] == plan.simulated_rounds > 0
    assert sim["columns"] > 0 and sim["column_rounds"] >= sim["rounds"]
    assert sim["row_gradients"] > sim["column_rounds"]  # each column-round reads rows
    assert 0 < sim["estimated_s"] <= sim["time_budget_s"] and sim["sim_time_s"] > 0
    # the untrained model is the MLP at its random start, not log k
    assert plan.untrained_loss != pytest.approx(2.302585, abs=1e-4)
    again = make_plan(_scenario(_mlp()), settings=FAST)
    assert again.from_cache and again.recommended == plan.recommended


def test_an_mlp_with_group_norm_is_planned_by_the_stacked_twin() -> None:
    """The README's advice (GroupNorm instead of batch normalisation) keeps the fast paths:
    the ghost method's per-sample gradients and every column of the twin in one pass."""
    kernel = make_kernel(lambda shape, k: nn.Sequential(
        nn.Linear(64, 16), nn.GroupNorm(4, 16), nn.Tanh(), nn.Linear(16, k)),
        input_shape=(64,), num_classes=10)
    assert isinstance(kernel, TorchKernel) and kernel.options.method.value == "ghost"
    plan = make_plan(_scenario(kernel), settings=SearchSettings(repeats=2, t_first=8,
                                                                t_limit=16))
    assert plan.data_used["twin_engine"] == "stacked" and plan.useful
    assert plan.recommended.mean < plan.untrained_loss


def test_a_model_that_takes_vmap_is_planned_with_a_warning_about_its_price() -> None:
    """A trainable layer the ghost method does not take (PReLU) runs column by column
    through vmap, which the cost model underprices: the plan says so."""
    kernel = make_kernel(lambda shape, k: nn.Sequential(nn.Linear(64, 8), nn.PReLU(),
                                                        nn.Linear(8, k)),
                         input_shape=(64,), num_classes=10)
    assert isinstance(kernel, TorchKernel) and kernel.options.method.value == "vmap"
    with pytest.warns(UserWarning, match=r"torch\.func\.vmap.*run past its time budget"):
        plan = make_plan(_scenario(kernel), settings=SearchSettings(
            repeats=2, t_first=8, t_limit=8, time_budget_s=0.5))
    assert plan.data_used["twin_engine"] == "loop"


def test_a_small_budget_cuts_the_search_and_replans_the_same_from_the_cache() -> None:
    full = make_plan(_scenario(_mlp()), settings=FAST)
    small = SearchSettings(repeats=2, t_first=16, t_limit=64, time_budget_s=0.02)
    plan = make_plan(_scenario(_mlp()), settings=small)
    sim = plan.settings["simulated"]
    assert sim["skipped_for_budget"] and not full.settings["simulated"]["skipped_for_budget"]
    assert sim["column_rounds"] < full.settings["simulated"]["column_rounds"]
    # only the first race (always run) may go over the budget
    assert sim["estimated_s"] == pytest.approx(sim["coarse_estimated_s"])
    assert sim["estimated_s"] > 0.02
    again = make_plan(_scenario(_mlp()), settings=small)  # the same path from the cache
    assert again.from_cache and again.recommended == plan.recommended
    assert again.settings["simulated"]["skipped_for_budget"] == sim["skipped_for_budget"]
    # a budget the smallest twin's first race exceeds is said to be exceeded, in the message
    # and in what the plan simulated; a budget kept says nothing
    assert sim["budget_kept"] is False and sim["budget_note"] in plan.message
    assert "the time budget of 0.02 s (estimated) could not be kept" in plan.message
    assert full.settings["simulated"]["budget_kept"] is True
    assert full.settings["simulated"]["budget_note"] is None
    assert "could not be kept" not in full.message


def test_a_model_the_twin_cannot_run_is_refused_by_name() -> None:
    kernel = TorchKernel(  # built by hand: make_kernel itself refuses batch normalisation
build=lambda g: nn.Sequential(nn.Linear(64, 8), nn.BatchNorm1d(8),
                                                       nn.Linear(8, 10)),
                         input_shape=(64,), num_classes=10, label="bn-net")
    with pytest.raises(ValueError, match=r"cannot simulate model 'bn-net'.*BatchNorm1d"):
        make_plan(_scenario(kernel), settings=FAST)
    wrong = make_kernel("mlp", input_shape=(32,), num_classes=10)
    with pytest.raises(ValueError, match=r"model 'mlp' takes inputs of shape \(32,\)"):
        make_plan(_scenario(wrong), settings=FAST)


def test_the_cache_key_differs_between_models() -> None:
    proxy = {"use": "clear-proxy", "share": None, "public": None}
    data = SPEC.build().dataset
    keys = set()
    for kernel in (None, LogRegKernel(num_features=64, num_classes=10),
                   LogRegKernel(num_features=64, num_classes=10, intercept=True), _mlp(),
                   _mlp((16,)), _mlp((32,)), _mlp((16, 16))):
        sc = _scenario(kernel)
        keys.add(cache_key(sc, proxy, FAST, kernel=twin_kernel(sc, data)))
    # no kernel and the logistic kernel plan the same model, but name it differently (as
    # before); two MLPs of the same shape are one model; linear is not logreg
    assert len(keys) == 6


def test_logreg_keeps_the_fused_twin() -> None:
    data = SPEC.build().dataset
    assert twin_kernel(_scenario(None), data) is None
    assert twin_kernel(_scenario(LogRegKernel(num_features=64, num_classes=10)), data) is None
    with pytest.raises(ValueError, match="model logreg has 32 features"):
        twin_kernel(_scenario(LogRegKernel(num_features=32, num_classes=10)), data)


def test_linear_is_planned_by_the_fused_twin_on_rows_with_a_one() -> None:
    import torch

    from fedqr.models.factory import ModelName
    from fedqr.planner.kernels import scenario_kernel
    from fedqr.planner.proxy import ProxyChoice, build_twin

    data = SPEC.build()
    linear = LogRegKernel(num_features=64, num_classes=10, intercept=True)
    sc = _scenario(linear)
    assert twin_kernel(sc, data.dataset) is None and scenario_kernel(sc, data.dataset) == linear
    # by name, no kernel: the zoo's linear; digits' own model is the paper's logreg
    assert scenario_kernel(_scenario(None, model=ModelName.LINEAR), data.dataset) == linear
    assert scenario_kernel(_scenario(None), data.dataset) == LogRegKernel(num_features=64,
                                                                          num_classes=10)
    twin = build_twin(sc, ProxyChoice(), data, data.partition.sizes, torch.device("cpu"), FAST)
    x, x_test = twin.proxy.layout.x, twin.proxy.x_test  # type: ignore[union-attr]
    assert x.shape[1] == x_test.shape[1] == 65 and bool((x[:, -1] == 1).all())
    assert twin.proxy.num_params == linear.num_params == 650
    plan = make_plan(sc, settings=FAST, use_cache=False)
    assert plan.useful and plan.recommended.mean < plan.untrained_loss


def test_a_private_pilot_runs_the_plans_model() -> None:
    import torch

    from fedqr.planner import DataUse, ProxyChoice
    from fedqr.planner.pilot import plan_with_pilot

    public = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4,
                      seed=9)
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public, public_label="digits")
    piloted = plan_with_pilot(_scenario(_mlp()), proxy=choice, settings=FAST,
                              device=torch.device("cpu"), use_cache=True, progress=None,
                              pilot_share=0.25)
    pilot = piloted.data_used["pilot"]
    assert piloted.data_used["model"] == "mlp"
    assert pilot["achieved_test_loss"] > 0 and pilot["rounds"] >= 1
    spent = piloted.privacy_cost["epsilon"]
    assert max(spent) <= 0.25 * 4.0 + 1e-12 and max(spent) > 0


_MODEL_FILE = """
import torch
from torch import nn


def squash(z):
    return torch.relu(z)


class Net(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.a, self.b = nn.Linear(d, 8), nn.Linear(8, k)

    def forward(self, x):
        return self.b(squash(self.a(x)))


def make(input_shape, num_classes):
    return Net(input_shape[0], num_classes)
"""


def test_a_model_file_whose_code_changed_is_another_model_for_the_cache(
        tmp_path: Path) -> None:
    path = tmp_path / "net.py"

    def identity(text: str) -> dict[str, Any]:
        path.write_text(text)
        return kernel_identity(make_kernel(f"{path}:make", input_shape=(5,), num_classes=2))

    first = identity(_MODEL_FILE)
    assert identity(_MODEL_FILE) == first  # the same code, loaded again: the same key
    # the same layers, parameters and initial weights, another forward or helper: not the same
    assert identity(_MODEL_FILE.replace("self.b(squash", "self.b(3 * squash")) != first
    assert identity(_MODEL_FILE.replace("torch.relu(z)", "torch.tanh(z)")) != first
    builtin = make_kernel("mlp", input_shape=(5,), num_classes=2)
    assert kernel_identity(builtin) == kernel_identity(
        make_kernel("mlp", input_shape=(5,), num_classes=2))
