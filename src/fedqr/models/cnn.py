"""The paper's FEMNIST CNN (Zhou et al., Section VII) and seeded parameter initialisation.

Architecture, for ``1 x 28 x 28`` images and 62 classes (110,526 parameters):

=====  ==============================================  ==========
layer  operation                                       parameters
=====  ==============================================  ==========
conv1  Conv2d(1 -> 16, 5x5, padding 2), ReLU, MaxPool 2      416
conv2  Conv2d(16 -> 32, 5x5, padding 2), ReLU, MaxPool 2  12,832
fc     Linear(32 * 7 * 7 = 1568 -> 62)                     97,278
=====  ==============================================  ==========

Only :class:`torch.nn.Conv2d` and :class:`torch.nn.Linear` hold parameters, so the fast
per-sample clipping of :mod:`fedqr.models.per_sample` applies.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

#: Number of parameters of :class:`PaperCNN` at the paper's FEMNIST shape (1x28x28, 62 classes).
FEMNIST_CNN_PARAMS = 110_526


def _check_positive_int(name: str, value: object, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {name}={value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {name}={value}")
    return value


class PaperCNN(nn.Module):
    """conv(5x5, 16) - ReLU - pool - conv(5x5, 32) - ReLU - pool - linear.

    Parameters
    ----------
    in_channels : int, optional
        Image channels (1 for FEMNIST).
    image_size : int, optional
        Height and width of the square input, a multiple of 4, ``>= 4`` (28 for FEMNIST).
    num_classes : int, optional
        Output classes (62 for FEMNIST).
    generator : torch.Generator or None, optional
        When given, parameters are drawn from it by :func:`init_parameters` (a CPU
        generator gives the same initial model on every device); otherwise PyTorch's
        default initialisation with the global generator is kept.
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 62,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        _check_positive_int("in_channels", in_channels)
        _check_positive_int("num_classes", num_classes)
        size = _check_positive_int("image_size", image_size, low=4)
        if size % 4 != 0:
            raise ValueError(f"image_size must be a multiple of 4, got image_size={size}")
        self.image_shape = (in_channels, size, size)
        self.conv1 = nn.Conv2d(in_channels, 16, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=5, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(32 * (size // 4) ** 2, num_classes)
        if generator is not None:
            init_parameters(self, generator=generator)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[n, num_classes]`` of images ``[n, C, H, W]`` (or flat ``[n, C H W]``)."""
        if x.dim() == 2:
            x = x.view(x.shape[0], *self.image_shape)
        h = self.pool(torch.relu(self.conv1(x)))
        h = self.pool(torch.relu(self.conv2(h)))
        logits: Tensor = self.fc(h.flatten(1))
        return logits


def femnist_cnn(*, generator: torch.Generator | None = None, num_classes: int = 62) -> PaperCNN:
    """The paper's FEMNIST CNN (1x28x28 input, 110,526 parameters at 62 classes)."""
    return PaperCNN(in_channels=1, image_size=28, num_classes=num_classes, generator=generator)


def num_parameters(model: nn.Module) -> int:
    """Total number of scalar parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def init_parameters(model: nn.Module, *, generator: torch.Generator) -> None:
    """Draw every Conv2d/Linear weight and bias from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    This is PyTorch's default initialisation of these layers (Kaiming-uniform with
    ``a = sqrt(5)`` for weights gives the same bound), but drawn from ``generator`` so
    that a seed fixes the initial model. Values are drawn on the generator's device and
    copied into the parameters.

    Parameters
    ----------
    model : torch.nn.Module
        Model whose Conv2d and Linear layers are re-initialised in ``modules()`` order.
    generator : torch.Generator
        Source of randomness.
    """
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got generator={generator!r}")
    for module in model.modules():
        if not isinstance(module, nn.Conv2d | nn.Linear):
            continue
        fan_in = module.weight[0].numel()
        bound = 1.0 / math.sqrt(fan_in)
        params = [module.weight] + ([module.bias] if module.bias is not None else [])
        for p in params:
            u = torch.rand(p.shape, generator=generator, dtype=torch.float64,
                           device=generator.device)
            p.copy_((2.0 * u - 1.0) * bound)
