"""st-magnitude: magnitude-aware dense retrieval for sentence-transformers.

Public API (everything else is internal)::

    from st_magnitude import apply_similarity, strip_normalize, get_similarity

Names are imported from their submodule on first use (:mod:`st_magnitude._lazy`), so ``import st_magnitude`` and
``st-magnitude --help`` do not import torch or sentence-transformers.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "AsymmetricSimilarityWarning",
    "MagnitudeCollapseWarning",
    "NormBoundWarning",
    "Similarity",
    "apply_similarity",
    "check_symmetric_use",
    "convert_for_store",
    "get_similarity",
    "install_symmetry_guard",
    "is_asymmetric",
    "model_similarity",
    "similarity_names",
    "strip_normalize",
    "truncate_model",
    "uninstall_symmetry_guard",
    "__version__",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._warnings": ("AsymmetricSimilarityWarning", "MagnitudeCollapseWarning", "NormBoundWarning"),
        ".similarity": ("Similarity", "get_similarity", "similarity_names"),
        ".model.stores": ("convert_for_store",),
        ".model.convert": ("apply_similarity", "strip_normalize"),
        ".model.info": ("check_symmetric_use", "is_asymmetric", "model_similarity"),
        ".model.guard": ("install_symmetry_guard", "uninstall_symmetry_guard"),
        ".model.truncation": ("truncate_model",),
    },
)
