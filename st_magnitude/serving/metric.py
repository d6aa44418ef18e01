"""Which store metric keeps a model's ranking: the one check every serving adapter makes.

The top-k of the power-norm family depends only on the document transform (docs/deployment.md): a store metric
keeps the trained ranking when it is one of :func:`st_magnitude.model.stores.preserved_metrics`. Stacks spell the
metrics differently (``ip``, ``dot_product``, ``DOT``, ``euclidean``, ...: :data:`METRIC_ALIASES`, gathered from the
stack registry :mod:`st_magnitude.serving._stacks`); :func:`store_metric` maps a stack's spelling to ``dot`` /
``cosine`` / ``l2`` and refuses one that would rank differently from the trained similarity.
"""

from __future__ import annotations

import importlib
from typing import Any

from st_magnitude._warnings import StoreMetricWarning
from st_magnitude.model.stores import STORES, preserved_metrics
from st_magnitude.serving._stacks import METRIC_ALIASES

__all__ = ["METRIC_ALIASES", "StoreMetricWarning", "best_metric", "import_stack", "store_metric"]


def import_stack(module: str, stack: str) -> Any:
    """Import a serving stack's module, or raise ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{stack} is not installed ({e}); install the serving stacks: pip install 'st-magnitude[deploy]'"
        ) from e


def store_metric(model: Any, metric: str, stack: str = "the vector store") -> str:
    """``metric`` as ``dot`` / ``cosine`` / ``l2`` if ``model`` ranks as trained under it, else ValueError.

    The error names the metrics that do keep the ranking and the conversion that makes the refused one work.
    """
    canonical = METRIC_ALIASES.get(str(metric).lower())
    if canonical is None:
        raise ValueError(f"unknown store metric {metric!r} for {stack}; known: {sorted(METRIC_ALIASES)}")
    kept = preserved_metrics(model)
    if canonical not in kept:
        raise ValueError(
            f"{stack} with metric {metric!r} ranks this model's documents differently from its trained similarity: "
            f"the model keeps document magnitude, which {canonical} divides out or penalises. Use "
            f"{' or '.join(kept) or 'no store metric'}, or re-export the model for a {canonical} store: "
            f"st-magnitude convert MODEL VARIANT --store {canonical} --norm-texts CORPUS -o OUT "
            "(Python: st_magnitude.model.stores.prepare_for_store)."
        )
    return canonical


def best_metric(model: Any, prefer: tuple[str, ...] = STORES) -> str:
    """The first metric of ``prefer`` (default dot, cosine, l2) under which ``model`` ranks as trained."""
    kept = preserved_metrics(model)
    for m in prefer:
        if m in kept:
            return m
    raise ValueError(f"no metric of {prefer} keeps this model's ranking (it ranks exactly under {kept or 'none'})")
