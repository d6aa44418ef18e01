"""Lazy re-exports for the package ``__init__`` modules (PEP 562), so importing a package costs nothing.

``import st_magnitude`` (and ``st-magnitude --help``) must not import torch or sentence-transformers; a public name
is imported from its submodule on first access instead::

    # st_magnitude/losses/__init__.py
    from st_magnitude._lazy import lazy_exports

    __all__ = ["MWLoss", ...]
    __getattr__, __dir__ = lazy_exports(__name__, {".mw": ("MWLoss", ...), ...})

``from st_magnitude.losses import MWLoss`` and ``st_magnitude.losses.MWLoss`` work as before; the resolved value is
cached in the package namespace, so each name is looked up once. ``tests/test_imports.py`` checks that every name in
each package's ``__all__`` is exported and resolves.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return the ``(__getattr__, __dir__)`` pair for ``package``.

    Args:
        package: the package's ``__name__``.
        exports: submodule -> names it provides; a submodule is relative to ``package`` (``".mw"``) or absolute.

    Raises:
        ValueError: a name is listed under two submodules.
    """
    module = sys.modules[package]
    targets: dict[str, str] = {}
    for submodule, names in exports.items():
        absolute = importlib.util.resolve_name(submodule, package) if submodule.startswith(".") else submodule
        for name in names:
            if name in targets:
                raise ValueError(f"{package}: {name!r} is exported from both {targets[name]} and {absolute}")
            targets[name] = absolute
    module._lazy_targets = targets

    def __getattr__(name: str) -> object:
        target = targets.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(target), name)
        setattr(module, name, value)  # cached: the next access does not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(targets))

    return __getattr__, __dir__
