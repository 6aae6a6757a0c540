"""A plan run by ``fedqr.simulate(schedule=...)`` must be the plan of this run's model (its
identity: layers, initial weights, loss and code, not its name and size) and accountant
(:mod:`fedqr.api_schedule`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fedqr
from fedqr.api_schedule import model_identity, same_model
from fedqr.models.kernel import Kernel
from fedqr.models.zoo import make_kernel

SHAPE, CLASSES = (6,), 2


def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The layers of the built-in ``mlp`` with ``hidden=(8,)``."""
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 8), nn.ReLU(),
                         nn.Linear(8, num_classes))


def _kernel(model: Any, **kw: Any) -> Kernel:
    return make_kernel(model, input_shape=SHAPE, num_classes=CLASSES, **kw)


def _scenario(kernel: Kernel) -> dict[str, Any]:
    """The model fields of a plan document made for ``kernel``."""
    return {"model": kernel.describe(), "model_identity": model_identity(kernel)}


def _never() -> Kernel:
    raise AssertionError("the plan named its model")


def test_another_architecture_of_the_same_name_and_size_is_refused() -> None:
    planned = _scenario(_kernel(mlp))

    def mlp_tanh(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 8), nn.Tanh(),
                             nn.Linear(8, num_classes))

    mlp_tanh.__name__ = "mlp"
    tanh = _kernel(mlp_tanh)
    assert tanh.describe() == planned["model"]  # what the plan compared before
    with pytest.raises(ValueError, match=r"planned for model=\{'name': 'mlp'.* \(another "
                                         r"model of that name and size"):
        same_model(planned, kernel=tanh, planned_default=_never)


def test_the_same_model_under_another_wrapper_or_name_is_accepted() -> None:
    planned = _scenario(_kernel(mlp))
    same_model(planned, kernel=_kernel(mlp), planned_default=_never)
    same_model(planned, kernel=_kernel(lambda s, k: mlp(s, k)), planned_default=_never)
    # the built-in mlp of these widths is this very model: the same layers, initial
    # weights, loss and (torch's) code, so the same run
    same_model(planned, kernel=_kernel("mlp", hidden=(8,)), planned_default=_never)
    with pytest.raises(ValueError, match="planned for model="):
        same_model(planned, kernel=_kernel("mlp", hidden=(9,)), planned_default=_never)
    with pytest.raises(ValueError, match="planned for model="):
        same_model(planned, kernel=_kernel("linear"), planned_default=_never)


def test_a_plan_of_the_default_model_compares_its_identity() -> None:
    default = {"model": None}
    same_model(default, kernel=_kernel("linear"), planned_default=lambda: _kernel("linear"))
    with pytest.raises(ValueError, match=r"planned for model=\{'name': 'linear'"):
        same_model(default, kernel=_kernel("logreg"), planned_default=lambda: _kernel("linear"))


def test_a_plan_without_an_identity_compares_name_and_size() -> None:
    """A document written before plans recorded the model's identity."""
    legacy = {"model": _kernel(mlp).describe()}
    same_model(legacy, kernel=_kernel(mlp), planned_default=_never)
    with pytest.raises(ValueError, match="the run asks model=\\{'name': '<lambda>'"):
        same_model(legacy, kernel=_kernel(lambda s, k: mlp(s, k)), planned_default=_never)


def test_the_identity_covers_initial_weights_and_loss() -> None:
    base = model_identity(_kernel(mlp))

    def zeroed(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        net = mlp(input_shape, num_classes)
        last = list(net.modules())[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        return net

    def loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits, y, reduction="none") * 2

    assert model_identity(_kernel(zeroed)) != base
    assert model_identity(_kernel(mlp, loss_fn=loss)) != base
    assert model_identity(_kernel("logreg")) != model_identity(_kernel("linear"))


@pytest.fixture
def gaussian(data: fedqr.FederatedData, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    return {"data": data, "mechanism": "gaussian", "eps": 8.0, "clip": 5.0,
            "sample_rate": 0.5, "rounds": 6}


def _plan(budget: dict[str, Any], **kw: Any) -> fedqr.PlanResult:
    with pytest.warns(fedqr.PrivateDataWarning):
        plan = fedqr.plan(**budget, twin_repeats=2, **kw)
    assert plan.useful
    return plan


def _run(budget: dict[str, Any], plan: fedqr.PlanResult, **kw: Any) -> Any:
    run = {k: v for k, v in budget.items() if k not in ("rounds", "sample_rate")}
    return fedqr.simulate(**run, schedule=plan, **kw)


def test_a_plan_for_one_accountant_is_refused_for_another(gaussian: dict[str, Any]) -> None:
    plan = _plan(gaussian, model="logreg", accountant="rdp")
    assert _run(gaussian, plan, model="logreg", accountant="rdp").document["plan"]
    assert _run(gaussian, plan, model="logreg").document["plan"]  # RDP, the default
    with pytest.raises(ValueError, match="schedule was planned for accountant='rdp', the run "
                                         "asks accountant='pld': plan again for this run's "
                                         "accountant"):
        _run(gaussian, plan, model="logreg", accountant="pld")


def test_simulate_refuses_the_plan_of_another_architecture(gaussian: dict[str, Any]) -> None:
    """End to end: the plan document records the model's identity
    (``scenario.model_identity``, written by :func:`fedqr.api.plan_document`)."""
    plan = _plan(gaussian, model=mlp)
    assert plan.document["scenario"]["model_identity"] is not None
    wrapped: Callable[[tuple[int, ...], int], nn.Module] = lambda s, k: mlp(s, k)  # noqa: E731
    assert _run(gaussian, plan, model=wrapped).document["plan"]

    def other(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 8), nn.Tanh(),
                             nn.Linear(8, num_classes))

    other.__name__ = "mlp"
    with pytest.raises(ValueError, match=r"another model of that name and size: other "
                                         r"layers\), the run asks"):
        _run(gaussian, plan, model=other)
    def smoothed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # another loss
        return nn.functional.cross_entropy(out, y, reduction="none", label_smoothing=0.1)

    with pytest.raises(ValueError, match=r"another model of that name and size: other "
                                         r"loss\), the run asks"):
        _run(gaussian, plan, model=mlp, loss_fn=smoothed)
