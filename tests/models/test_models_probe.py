"""fedqr.models._probe and model_check: a model whose rows mix, whose forward is random or
changes its buffers, whose factory repeats one module, whose per-sample gradients a method
would get wrong, or whose loss is not per row, is caught."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fedqr.models._probe import check_rows_independent
from fedqr.models.per_sample import Method, clipped_grad_sums
from fedqr.models.zoo import check_model, load_factory, make_kernel


class _Mix(nn.Module):
    """An MLP that centres its hidden layer over the batch (batch norm by hand)."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 16), nn.Linear(16, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x.flatten(1)))
        return self.b(h - h.mean(0, keepdim=True))


class _Drop(_Mix):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.dropout(torch.relu(self.a(x.flatten(1))), 0.5, training=True))


class _Squeeze(nn.Module):
    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.a = nn.Linear(d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x).squeeze()  # (k,) for a batch of one row


def _sensitivity(model: nn.Module) -> float:
    """Largest change of the clipped gradient sum (clip 1, l2) when one row is removed."""
    x = torch.randn(16, 5, generator=torch.Generator().manual_seed(0))
    y = torch.arange(16) % 2
    full = clipped_grad_sums(model, x, y, clip=1.0, norm="l2", method=Method.GHOST).grad[0]
    return max(float((full - clipped_grad_sums(model, torch.cat([x[:i], x[i + 1:]]),
                                               torch.cat([y[:i], y[i + 1:]]), clip=1.0,
                                               norm="l2", method=Method.GHOST).grad[0]).norm())
               for i in range(16))


def test_mixing_rows_breaks_the_clip_bound_and_is_refused() -> None:
    """The check is needed: removing one row moves the mixing model's clipped sum by more
    than the clip (1), the plain MLP's by at most 1; check_model refuses the first only."""
    torch.manual_seed(0)
    mix = _Mix(5, 2)
    plain = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
    assert _sensitivity(mix) > 1.0 + 1e-3 >= _sensitivity(plain)
    with pytest.raises(ValueError, match="mixes the rows of a batch"):
        check_model(lambda g: _Mix(5, 2), input_shape=(5,), num_classes=2, label="mix")
    assert check_model(lambda g: copy.deepcopy(plain), input_shape=(5,), num_classes=2,
                       label="plain") in (Method.GHOST, Method.VMAP)


def test_per_row_normalisation_and_a_cnn_pass() -> None:
    check_rows_independent(nn.Sequential(nn.Linear(5, 8), nn.LayerNorm(8), nn.Linear(8, 3)),
                           input_shape=(5,), label="ln")
    cnn = make_kernel("cnn", input_shape=(1, 28, 28), num_classes=10)  # the check runs inside
    assert cnn.num_params > 0


def test_a_batch_of_one_row_must_keep_its_batch_dimension() -> None:
    with pytest.raises(ValueError, match=r"got \(2,\) for n=1"):
        check_model(lambda g: _Squeeze(5, 2), input_shape=(5,), num_classes=2, label="sq")


def test_a_random_forward_is_refused_and_torch_generator_left_alone() -> None:
    """It was a warning: the run's seed did not fix it, the rows were not compared (a forward
    centring its rows plus a little noise passed), and `fedqr estimate` crashed in vmap."""
    drop = _Drop(5, 2)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    with pytest.raises(ValueError, match=r"draws random numbers .* cannot be checked"):
        check_rows_independent(drop, input_shape=(5,), label="drop")
    assert torch.equal(torch.random.get_rng_state(), before)
    with pytest.raises(ValueError, match="'drop' gives two different outputs"):
        check_model(lambda g: _Drop(5, 2), input_shape=(5,), num_classes=2, label="drop")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deterministic model: no warning
        check_rows_independent(_Mix(5, 2).a, input_shape=(5,), label="lin")


class _Lin(nn.Module):
    def __init__(self, d: int, k: int, out: object) -> None:
        super().__init__()
        self.a, self.out = nn.Linear(d, k), out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.a(x))  # type: ignore[operator]


def test_integer_or_non_finite_logits_are_named_not_called_random() -> None:
    with pytest.raises(ValueError, match=r"must return floating-point logits .* dtype=torch"
                                         r".int64"):
        check_rows_independent(_Lin(5, 2, lambda z: z.round().long()), input_shape=(5,),
                               label="int")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN != NaN: it was reported as a random forward
        with pytest.raises(ValueError, match=r"non-finite logits \(NaN or inf\)"):
            check_rows_independent(_Lin(5, 2, lambda z: z / 0 * 0), input_shape=(5,),
                                   label="nan")


def test_mixing_only_in_batches_above_four_rows_is_seen() -> None:
    class _Big(_Mix):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.a(x.flatten(1)))
            return self.b(h - h.mean(0, keepdim=True) if x.shape[0] > 4 else h)

    with pytest.raises(ValueError, match="mixes the rows of a batch"):
        check_rows_independent(_Big(5, 2), input_shape=(5,), label="big")


def test_a_module_instance_in_a_model_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch\nnet = torch.nn.Linear(3, 2)\n")
    with pytest.raises(ValueError, match="'net' is a Linear instance; it must be a factory"):
        load_factory(f"{f}:net")


@pytest.mark.parametrize(("shape", "classes", "message"), [
    ((5,), 0, "num_classes must be >= 1, got num_classes=0"),
    ((5,), 2.0, "num_classes must be an integer, got num_classes=2.0"),
    ("5", 2, "input_shape must be one sample's shape, a tuple of integers >= 1"),
    ((5, 0), 2, r"got input_shape=\(5, 0\)"),
])
def test_make_kernel_names_a_bad_shape_or_class_count(shape: object, classes: object,
                                                      message: str) -> None:
    """They failed inside the factory or inside training (IndexError: Target 0 is out of
    bounds), naming neither parameter."""
    with pytest.raises(ValueError, match=message):
        make_kernel("mlp", input_shape=shape, num_classes=classes)  # type: ignore[arg-type]
    assert make_kernel("mlp", input_shape=5, num_classes=2).num_params == 5 * 64 + 64 + 64 * 2 + 2
