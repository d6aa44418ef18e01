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
import types
import warnings
from collections.abc import Callable, Iterable, Mapping


class _LazyPackage(types.ModuleType):
    """A package module whose exported names win over same-named submodules.

    Importing submodule ``pkg.x`` sets the attribute ``pkg.x`` to the submodule. Where ``x`` is also an exported
    name bound to something else (``st_magnitude.evaluation.contrastive_entropy`` is a module *and* the exported
    function), that assignment is dropped, so ``from pkg import x`` keeps returning the export, as an eager
    ``from pkg.x import x`` in ``__init__`` did. The submodule itself stays importable through ``sys.modules``.
    """

    _lazy_targets: dict[str, str]

    def __setattr__(self, name: str, value: object) -> None:
        targets = self.__dict__.get("_lazy_targets", {})
        if name in targets and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            return
        super().__setattr__(name, value)


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]], moved: Mapping[str, str] | None = None
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return the ``(__getattr__, __dir__)`` pair for ``package``.

    Args:
        package: the package's ``__name__``.
        exports: submodule -> names it provides; a submodule is relative to ``package`` (``".mw"``) or absolute.
        moved: names the package exported before and that now live elsewhere (name -> absolute module): they still
            resolve, with the ``DeprecationWarning`` of :func:`moved_exports`, and are not part of ``__all__``.

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
    if type(module) is types.ModuleType:
        module.__class__ = _LazyPackage
    object.__setattr__(module, "_lazy_targets", targets)

    moved_getattr = moved_exports(package, moved)[0] if moved else None

    def __getattr__(name: str) -> object:
        target = targets.get(name)
        if target is None:
            if moved_getattr is not None and name in moved:
                return moved_getattr(name)  # warns on every access: not cached
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(target), name)
        object.__setattr__(module, name, value)  # cached: the next access does not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(targets))

    return __getattr__, __dir__


def moved_exports(
    module_name: str, moved: Mapping[str, str], *, removal: str = "0.3"
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for a module whose public names moved elsewhere (one release of grace).

    Each access to a moved name through the old path imports it from its new module and emits a
    ``DeprecationWarning`` naming the new import, so code written against the old layout keeps working::

        # st_magnitude/callbacks_l2dir.py (old path, kept as a shim)
        from st_magnitude._lazy import moved_exports

        __getattr__, __dir__ = moved_exports(__name__, {"NAPHeadCheckpointCallback": "st_magnitude.callbacks"})

    Args:
        module_name: the old module's ``__name__``.
        moved: moved name -> the absolute module that now provides it.
        removal: the release in which the old path goes away (named in the warning).
    """
    module = sys.modules[module_name]

    def __getattr__(name: str) -> object:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        warnings.warn(
            f"{module_name}.{name} moved: use `from {target} import {name}` "
            f"(the old path is removed in st-magnitude {removal})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(target), name)

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(moved))

    return __getattr__, __dir__
