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
    "SIMILARITY_NAMES",
    "AsymmetricSimilarityWarning",
    "MagnitudeCollapseWarning",
    "RoleNormalize",
    "Similarity",
    "ZeroRetrieverGradientWarning",
    "apply_similarity",
    "carried_similarity",
    "check_symmetric_use",
    "get_similarity",
    "install_symmetry_guard",
    "uninstall_symmetry_guard",
    "is_asymmetric",
    "model_gammas",
    "model_similarity",
    "phi",
    "strip_normalize",
    "check_truncation",
    "truncate_model",
    "update_model_card",
    "gammas_of",
    "is_carriable",
    "similarity_names",
    "__version__",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._warnings": ("AsymmetricSimilarityWarning", "MagnitudeCollapseWarning", "ZeroRetrieverGradientWarning"),
        ".convert": ("apply_similarity", "strip_normalize"),
        ".model_card": ("update_model_card",),
        ".model_info": (
            "carried_similarity",
            "check_symmetric_use",
            "is_asymmetric",
            "model_gammas",
            "model_similarity",
        ),
        ".truncation": ("check_truncation", "truncate_model"),
        ".guard": ("install_symmetry_guard", "uninstall_symmetry_guard"),
        ".modules": ("RoleNormalize",),
        ".similarity": (
            "SIMILARITY_NAMES",
            "Similarity",
            "gammas_of",
            "get_similarity",
            "is_carriable",
            "phi",
            "similarity_names",
        ),
    },
)
