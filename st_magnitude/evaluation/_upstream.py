"""Every use of a third-party API that is not public, each behind exactly one function.

mteb 2.26 has no public way to add a task or a model that ``mteb run`` (its CLI) can find by name: ``mteb.get_task``
looks names up in the private dict ``mteb.get_tasks._TASKS_REGISTRY``, and models are looked up in
``mteb.models.model_implementations.MODEL_REGISTRY`` (not exported by ``mteb`` or ``mteb.models``). The functions
below are the only places that touch them; ``tests/evaluation/test_upstream_contract.py`` checks the contract
against the installed version and fails with a message naming the symbol when a new release changes it.

BEIR needs no entry here: :mod:`st_magnitude.data.beir` reads BEIR folders itself, and the test that checks
it reads exactly what BEIR reads uses the public ``GenericDataLoader.load``.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any

#: The upstream versions the private uses below were written against.
CHECKED_AGAINST = {"mteb": "2.26"}


class UpstreamChangedError(RuntimeError):
    """A private third-party symbol st-magnitude relies on is missing or has changed shape."""


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _registry(module: str, attribute: str, dist: str) -> MutableMapping[str, Any]:
    try:
        registry = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise UpstreamChangedError(
            f"{dist} {_version(dist)} has no `{module}.{attribute}` (st-magnitude uses it to register local "
            f"tasks/models; checked against {dist} {CHECKED_AGAINST[dist]}): {exc}"
        ) from exc
    if not isinstance(registry, MutableMapping):
        raise UpstreamChangedError(
            f"`{module}.{attribute}` in {dist} {_version(dist)} is a {type(registry).__name__}, not the "
            f"name -> class dict of {dist} {CHECKED_AGAINST[dist]}; st-magnitude cannot register local entries"
        )
    return registry


def mteb_task_registry() -> MutableMapping[str, Any]:
    """mteb's private task-name -> task-class dict ``mteb.get_tasks._TASKS_REGISTRY`` (read by ``mteb.get_task``).

    ``importlib`` is used because the attribute ``mteb.get_tasks`` is the function, not the module.
    """
    return _registry("mteb.get_tasks", "_TASKS_REGISTRY", "mteb")


def mteb_model_registry() -> MutableMapping[str, Any]:
    """mteb's model-name -> ``ModelMeta`` dict ``mteb.models.model_implementations.MODEL_REGISTRY``."""
    return _registry("mteb.models.model_implementations", "MODEL_REGISTRY", "mteb")


def register_mteb_task(cls: type) -> None:
    """Make ``mteb.get_task(cls.metadata.name)`` (and ``mteb run -t <name>``) return an instance of ``cls``."""
    mteb_task_registry()[cls.metadata.name] = cls


def register_mteb_model(name: str, meta: Any) -> None:
    """Make ``mteb.get_model_meta(name)`` (and ``mteb run -m <name>``) return ``meta``."""
    mteb_model_registry()[name] = meta
