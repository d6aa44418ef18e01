"""st-magnitude: magnitude-aware dense retrieval for sentence-transformers.

Public API (everything else is internal)::

    from st_magnitude import apply_similarity, strip_normalize, get_similarity
"""

from __future__ import annotations

from st_magnitude._warnings import ZeroRetrieverGradientWarning
from st_magnitude.convert import (
    AsymmetricSimilarityWarning,
    MagnitudeCollapseWarning,
    apply_similarity,
    carried_similarity,
    check_symmetric_use,
    check_truncation,
    is_asymmetric,
    model_gammas,
    model_similarity,
    strip_normalize,
    truncate_model,
    update_model_card,
)
from st_magnitude.guard import install_symmetry_guard, uninstall_symmetry_guard
from st_magnitude.modules import RoleNormalize
from st_magnitude.similarity import (
    SIMILARITY_NAMES,
    Similarity,
    gammas_of,
    get_similarity,
    is_carriable,
    phi,
    similarity_names,
)

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
