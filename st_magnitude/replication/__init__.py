"""Paper-claim replication: ``st-magnitude replicate CLAIM`` runs a claim's protocol over seeds, compares arms with
paired bootstrap and seed t-intervals (:mod:`st_magnitude.evaluation.stats`), and writes a result JSON that
``docs/replication.md`` is generated from (:mod:`.report`).

The statistics (``compare_arms``, ``paired_bootstrap``, ``verdict``, ...) live in :mod:`st_magnitude.evaluation.stats`;
importing them from here still works for one release, with a ``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from st_magnitude._lazy import moved_exports

__all__: list[str] = []


class _PublicNamesOf(Mapping[str, str]):
    """``{name: module}`` for every name in ``module.__all__``, read on first use (the import stays light)."""

    def __init__(self, module: str) -> None:
        self._module = module

    def _names(self) -> list[str]:
        return importlib.import_module(self._module).__all__

    def __getitem__(self, name: str) -> str:
        if name not in self._names():
            raise KeyError(name)
        return self._module

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


__getattr__, __dir__ = moved_exports(__name__, _PublicNamesOf("st_magnitude.evaluation.stats"))
