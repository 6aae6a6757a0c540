"""The paper's FEMNIST CNN: exact parameter count, shapes, seeded initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from fedqr.models.cnn import (
    FEMNIST_CNN_PARAMS,
    PaperCNN,
    femnist_cnn,
    init_parameters,
    num_parameters,
)


def test_femnist_cnn_has_exactly_110526_parameters() -> None:
    model = femnist_cnn()
    assert num_parameters(model) == FEMNIST_CNN_PARAMS == 110_526
    per_layer = {name: p.numel() for name, p in model.named_parameters()}
    assert per_layer == {"conv1.weight": 400, "conv1.bias": 16, "conv2.weight": 12_800,
                         "conv2.bias": 32, "fc.weight": 97_216, "fc.bias": 62}
    assert model.fc.in_features == 1568


def test_forward_shapes_accept_images_and_flat_rows() -> None:
    model = femnist_cnn(generator=torch.Generator().manual_seed(0))
    x = torch.rand(3, 1, 28, 28)
    out = model(x)
    assert out.shape == (3, 62)
    torch.testing.assert_close(model(x.view(3, 784)), out)
    small = PaperCNN(in_channels=1, image_size=8, num_classes=10)
    assert small(torch.rand(2, 64)).shape == (2, 10)


def test_seeded_initialisation_is_reproducible_and_bounded() -> None:
    a = femnist_cnn(generator=torch.Generator().manual_seed(3))
    b = femnist_cnn(generator=torch.Generator().manual_seed(3))
    c = femnist_cnn(generator=torch.Generator().manual_seed(4))
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb)
        assert not torch.equal(pa, pc)
    bound = 1 / math.sqrt(1568)
    assert float(a.fc.weight.detach().abs().max()) <= bound
    assert float(a.fc.weight.detach().abs().max()) > 0.9 * bound
    init_parameters(b, generator=torch.Generator().manual_seed(4))
    assert torch.equal(b.conv2.weight, c.conv2.weight)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image_size": 30}, "image_size must be a multiple of 4, got image_size=30"),
        ({"image_size": 2}, "image_size must be >= 4, got image_size=2"),
        ({"num_classes": 0}, "num_classes must be >= 1, got num_classes=0"),
        ({"in_channels": 0}, "in_channels must be >= 1, got in_channels=0"),
    ],
)
def test_bad_shapes_are_rejected(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PaperCNN(**kwargs)


def test_init_needs_a_generator() -> None:
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        init_parameters(femnist_cnn(), generator=0)  # type: ignore[arg-type]
