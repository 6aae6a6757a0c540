"""A package's public names imported on first use (PEP 562), so that importing the package
(``fedqr``, ``fedqr.data``) imports none of its heavy modules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_names(package: str, exports: Mapping[str, str],
               namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The package's module ``__getattr__``: ``name`` imported from its module in
    ``exports`` on first use and kept in the package's ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
