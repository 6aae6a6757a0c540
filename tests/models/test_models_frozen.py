"""Frozen parameters (``requires_grad=False``) are neither trained, clipped nor noised."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import fedqr
from fedqr.models.per_sample import clipped_grad_sums
from fedqr.models.zoo import make_kernel

OFFSETS = [0, 3, 3, 7, 9]  # 4 segments, one empty; chunks of 4 straddle them


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _pattern(shape: tuple[int, ...]) -> torch.Tensor:
    """A fixed, non-zero value for a frozen weight (not what an initialiser would draw)."""
    n = int(np.prod(shape))
    return (torch.arange(n, dtype=torch.float32).reshape(shape) % 7 - 3) / 5


class FrozenNet(nn.Module):
    """A frozen conv (weight and bias), a Linear layer with a frozen weight and a trainable
    bias, a frozen LayerNorm (no ghost support needed: it takes no gradient) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.norm = nn.LayerNorm(48)
        self.mid = nn.Linear(48, 6)
        self.head = nn.Linear(6, 3)
        for p in (*self.conv.parameters(), *self.norm.parameters(), self.mid.weight):
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.tanh(self.conv(x)).flatten(1))
        return self.head(torch.tanh(self.mid(h)))


def naive(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, clip: float, norm: str
          ) -> tuple[torch.Tensor, list[int]]:
    """One autograd call per sample over the trainable parameters only."""
    params = _trainable(model)
    segs = len(OFFSETS) - 1
    grad = torch.zeros(segs, sum(p.numel() for p in params), dtype=x.dtype)
    clipped = [0] * segs
    for k in range(segs):
        for j in range(OFFSETS[k], OFFSETS[k + 1]):
            loss = F.cross_entropy(model(x[j:j + 1]), y[j:j + 1])
            g = torch.cat([t.flatten() for t in torch.autograd.grad(loss, params)])
            size = float(g.abs().sum() if norm == "l1" else g.norm())
            grad[k] += min(1.0, clip / size) * g
            clipped[k] += clip < size
    return grad, clipped


@pytest.mark.parametrize("method", ["ghost", "vmap"])
@pytest.mark.parametrize(("norm", "clip"), [("l2", 0.05), ("l1", 0.2), ("l2", float("inf"))])
def test_clipped_sums_take_only_the_trainable_parameters(method: str, norm: str,
                                                         clip: float) -> None:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = FrozenNet().double()
    x = torch.rand(9, 1, 4, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (9,), generator=gen)
    trainable = 6 + 6 * 3 + 3  # mid.bias, head.weight, head.bias
    got = clipped_grad_sums(model, x, y, clip=clip, norm=norm, offsets=OFFSETS, chunk_rows=4,
                            method=method)
    want, clipped = naive(model, x, y, clip=clip, norm=norm)
    assert got.grad.shape == (4, trainable)
    torch.testing.assert_close(got.grad, want, rtol=1e-9, atol=1e-12)
    assert got.clipped.tolist() == clipped


def frozen_linear(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The tester's model: one Linear layer whose weight is frozen at a fixed pattern."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))
    with torch.no_grad():
        model[1].weight.copy_(_pattern(tuple(model[1].weight.shape)))
    model[1].weight.requires_grad_(False)
    return model


def _data() -> fedqr.FederatedData:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1).astype(np.int64)
    return fedqr.FederatedData.from_arrays(x=x, y=y, client=rng.integers(0, 4, 240),
                                           test_share=0.25, num_classes=3)


def test_the_kernel_counts_and_flattens_the_trainable_parameters_only() -> None:
    kernel = make_kernel(frozen_linear, input_shape=(6,), num_classes=3)
    assert kernel.num_params == 3  # the bias; the frozen 3 x 6 weight is not a parameter
    assert kernel.describe() == {"name": "frozen_linear", "num_params": 3,
                                 "per_sample": "ghost", "frozen_params": 18}
    assert kernel.init(repeats=2, generator=torch.Generator().manual_seed(1)).shape == (2, 3)
    plain = make_kernel("mlp", input_shape=(6,), num_classes=3, hidden=(4,))
    assert "frozen_params" not in plain.describe()  # unchanged for a model without any


@pytest.mark.parametrize("mechanism", ["none", "gaussian"])
def test_a_frozen_weight_keeps_its_value_through_a_run(mechanism: str) -> None:
    built: list[nn.Module] = []

    def factory(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        built.append(frozen_linear(input_shape, num_classes))
        return built[-1]

    budget = {"eps": 4.0} if mechanism != "none" else {}  # none spends no budget
    res = fedqr.simulate(data=_data(), model=factory, mechanism=mechanism, clip=1.0,
                         rounds=20, clients_per_round=2, lr=0.5, repeats=2, **budget)
    assert res.theta is not None and res.theta.shape == (2, 3)  # the noise's dimension too
    assert res.document["provenance"]["model"]["num_params"] == 3
    final = torch.as_tensor(res.theta[-1])
    trained = [m for m in built
               if torch.equal(torch.cat([p.detach().flatten() for p in _trainable(m)]), final)]
    assert trained, "the working model holds the last repeat's final bias"
    for model in built:  # the working model and every other build: the weight never moved
        assert torch.equal(model[1].weight, _pattern((3, 6)))
    assert not torch.equal(trained[0][1].bias, built[0][1].bias)  # the bias did


def test_a_randomly_drawn_frozen_parameter_is_warned_of() -> None:
    def drawn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        model = nn.Sequential(nn.Flatten(), nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3))
        model[1].requires_grad_(False)  # random features, drawn by the factory
        return model

    kernel = make_kernel(drawn, input_shape=(6,), num_classes=3)
    with pytest.warns(RuntimeWarning, match=r"frozen parameters 1\.bias, 1\.weight differ"):
        kernel.init(repeats=2, generator=torch.Generator().manual_seed(3))
