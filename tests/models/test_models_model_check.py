"""fedqr.models.model_check: the per-sample method follows autograd row by row (tied weights,
a weight used outside its layer), state in forward, a factory repeating one module, and a loss
that is not per row are refused or routed, with messages naming the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fedqr.models.model_check import check_model
from fedqr.models.per_sample import Method, clipped_grad_sums
from fedqr.models.zoo import make_kernel


class _Tied(nn.Module):
    """Two Linear layers sharing one weight on the same input: the ghost method's norm
    sqrt(|G|^2 + |G|^2) is not the true 2 |G|."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, k, bias=False), nn.Linear(d, k, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


class _TiedT(nn.Module):
    """An autoencoder-style tie: the encoder's weight used transposed outside its layer."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.enc, self.head = nn.Linear(d, 6), nn.Linear(d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.enc(x))
        return self.head(F.linear(h, self.enc.weight.t()))


def _row_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for i in range(len(y)):
        g = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)
        rows.append(torch.cat([t.reshape(-1) for t in g]))
    return torch.stack(rows)


@pytest.mark.parametrize("cls", [_Tied, _TiedT])
def test_a_shared_or_outside_weight_takes_vmap_and_its_clip_bound_holds(cls: type) -> None:
    """The ghost method gave the tied pair's row 1.41 x the clip, and the outside use lost
    part of the gradient (9 to 19% off the clipped sums); vmap is exact, and chosen."""
    model = cls(5, 3)
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    y = torch.arange(6) % 3
    ref = _row_grads(model, x, y)
    expected = ref * (1e-3 / ref.norm(dim=1)).clamp(max=1.0)[:, None]
    ghost = clipped_grad_sums(model, x, y, clip=1e-3, norm="l2", method=Method.GHOST,
                              offsets=list(range(7))).grad
    assert float((ghost - expected).norm() / expected.norm()) > 0.01  # the bug guarded against
    assert check_model(lambda g: cls(5, 3), input_shape=(5,), num_classes=3,
                       label="tied") is Method.VMAP
    vmap = clipped_grad_sums(model, x, y, clip=1e-3, norm="l2", method=Method.VMAP,
                             offsets=list(range(7))).grad
    assert float(vmap.norm(dim=1).max()) <= 1e-3 * (1 + 1e-5)
    torch.testing.assert_close(vmap, expected, rtol=1e-4, atol=1e-9)


def test_plain_linear_models_keep_the_ghost_method() -> None:
    assert check_model(lambda g: nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3)),
                       input_shape=(5,), num_classes=3, label="mlp") is Method.GHOST
    cnn = make_kernel("cnn", input_shape=(1, 28, 28), num_classes=10)
    assert cnn.options.method is Method.GHOST  # type: ignore[attr-defined]


@pytest.mark.parametrize("norm", [lambda: nn.GroupNorm(4, 8), lambda: nn.LayerNorm(8),
                                  lambda: nn.RMSNorm(8)])
def test_norm_layer_models_take_the_ghost_method(norm: object) -> None:
    """The README's advice (GroupNorm instead of batch normalisation) gets the fast method:
    its per-row gradients agree with autograd's, so the probe keeps ghost, not vmap."""
    assert check_model(lambda g: nn.Sequential(nn.Linear(5, 8), norm(),  # type: ignore[operator]
                                               nn.Tanh(), nn.Linear(8, 3)),
                       input_shape=(5,), num_classes=3, label="gn") is Method.GHOST
    prelu = check_model(lambda g: nn.Sequential(nn.Linear(5, 8), nn.PReLU(), nn.Linear(8, 3)),
                        input_shape=(5,), num_classes=3, label="prelu")
    assert prelu is Method.VMAP  # a trainable parameter the ghost method does not take


class _RunMean(nn.Module):
    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.register_buffer("mu", torch.zeros(d))
        self.a = nn.Linear(d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.mu.mul_(0.9).add_(0.1 * x.mean(0))
        return self.a(x - self.mu)


def test_a_forward_that_changes_its_buffers_is_refused() -> None:
    """It was called random ("dropout?") and its state was shared across repeats."""
    with pytest.raises(ValueError, match="'rm' changes its buffer 'mu' in forward"):
        check_model(lambda g: _RunMean(5, 2), input_shape=(5,), num_classes=2, label="rm")


def test_a_factory_returning_one_module_twice_is_refused() -> None:
    """A run trained the user's module in place: two runs of one seed differed."""
    net = nn.Linear(5, 2)
    with pytest.raises(ValueError, match=r"returned the same module .*copy\.deepcopy"):
        check_model(lambda g: net, input_shape=(5,), num_classes=2, label="pre")
    shared = nn.Linear(5, 2)
    with pytest.raises(ValueError, match="returned the same module"):
        check_model(lambda g: nn.Sequential(shared), input_shape=(5,), num_classes=2,
                    label="pre")


@pytest.mark.parametrize(("loss_fn", "message"), [
    (lambda lg, y: F.cross_entropy(lg, y, reduction="none") / len(y), "another loss in a batch"),
    (lambda lg, y: F.cross_entropy(lg, y, reduction="none") * float("nan"), "non-finite"),
    (lambda lg, y: F.cross_entropy(lg, y), r"one loss per row, shape \(n,\)"),
])
def test_a_loss_that_is_not_each_rows_own_is_refused(loss_fn: object, message: str) -> None:
    """A loss divided by the chunk's size stepped 0.0039 on the ghost path and 0.63 on vmap;
    an all-NaN loss was reported as a diverged run."""
    with pytest.raises(ValueError, match=message):
        make_kernel(lambda s, k: nn.Linear(s[0], k), input_shape=(5,), num_classes=2,
                    loss_fn=loss_fn)  # type: ignore[arg-type]


def test_integer_logits_are_named_before_the_loss_is_blamed() -> None:
    class _Int(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x).round().long()

    with pytest.raises(ValueError, match="must return floating-point logits"):
        make_kernel(lambda s, k: _Int(), input_shape=(5,), num_classes=2)


def test_a_model_neither_method_supports_is_named_with_both_reasons() -> None:
    class _Gru(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.out = nn.GRU(2, 4, batch_first=True), nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.rnn(x)[0][:, -1])

    with pytest.raises(ValueError, match=r"ghost: .*; vmap: .*nn\.GRU"):
        make_kernel(lambda s, k: _Gru(), input_shape=(3, 2), num_classes=3)


class _Branch(nn.Module):
    """A forward with a test branch: the logits halved when not training."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.a = nn.Linear(d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.a(x)
        return out if self.training else out * 0.5


def test_test_metrics_take_the_models_evaluation_mode_and_restore_it() -> None:
    """fedqr never called model.eval(): a forward's test branch was never taken."""
    from fedqr.models.torch_kernel import evaluate_model

    model = _Branch(5, 3)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))
    y = torch.arange(7) % 3
    loss, _ = evaluate_model(model, x, y, chunk_rows=4)
    assert model.training  # restored
    with torch.no_grad():
        half = float(F.cross_entropy(model.a(x) * 0.5, y, reduction="sum"))
        full = float(F.cross_entropy(model.a(x), y, reduction="sum"))
    assert loss == pytest.approx(half, rel=1e-6)
    assert abs(half - full) > 1e-3


def test_messages_name_what_the_user_gave(tmp_path: Path) -> None:
    """'str' object is not callable; "has no function" for a name that is there."""
    from fedqr.models.zoo import load_factory

    with pytest.raises(ValueError, match=r"loss_fn must be a callable .* got loss_fn='mse'"):
        make_kernel(lambda s, k: nn.Linear(s[0], k), input_shape=(5,), num_classes=2,
                    loss_fn="mse")  # type: ignore[arg-type]
    f = tmp_path / "m.py"
    f.write_text("three = 3\n")
    with pytest.raises(ValueError, match="'three' is a int, not a function"):
        load_factory(f"{f}:three")
    with pytest.raises(ValueError, match="has no function 'four'"):
        load_factory(f"{f}:four")


class _Embed(nn.Module):
    """Integer-coded features (codes 0..4 in each of 3 columns) through one Embedding."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(5, 4), nn.Linear(12, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x.long()).flatten(1))


def test_a_model_failing_on_the_datas_rows_is_named_with_the_standardisation() -> None:
    """An Embedding fed standardised codes stopped inside torch ('index out of range in
    self'), naming neither the model nor the standardisation."""
    import numpy as np

    import fedqr

    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(120, 3)).astype(np.float32)
    y, client = (x[:, 0] > 2).astype(np.int64), np.arange(120) % 4
    run = dict(model=lambda s, k: _Embed(k), mechanism="laplace", eps=4.0, clip=5.0,
               rounds=2, clients_per_round=2)
    scaled = fedqr.FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25)
    with pytest.raises(ValueError, match=r"model '<lambda>' fails on the data's training rows "
                                         r"\(IndexError: .*standardize=False"):
        fedqr.simulate(data=scaled, **run)
    raw = fedqr.FederatedData.from_arrays(x=x, y=y, client=client, test_share=0.25,
                                          standardize=False)
    assert fedqr.simulate(data=raw, **run).final_test_loss is not None
