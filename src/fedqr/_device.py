"""The compute device a user names: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``.

One resolver for the command line and the Python API, with the error both give. Imports torch
only when called (``fedqr --help`` must not import it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device"]


def resolve_device(device: object) -> torch.device:
    """``device`` (a name or a ``torch.device``) as a ``torch.device`` this machine has.

    Raises
    ------
    ValueError
        Naming ``device``, the allowed values and the value given (CUDA asked for where torch
        has none included).
    """
    import torch

    name = str(device) if isinstance(device, torch.device) else device
    if not isinstance(name, str):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got device={device!r}")
    name = name.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device must be one of auto, cpu (no CUDA here), got device={device!r}")
    if name != "cpu" and not name.startswith("cuda"):
        raise ValueError(f"device must be auto, cpu or cuda[:i], got device={device!r}")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be auto, cpu or cuda[:i], got device={device!r}") from None
