"""Sentence-transformers modules carried by st-magnitude models."""

from __future__ import annotations

from st_magnitude.modules.dimension_projection import (
    DimensionProjection,
    ProjectionActivationWarning,
    add_dimension_projection,
    check_projection,
    dimension_grid,
    truncate_embeddings,
)
from st_magnitude.modules.nap_head import NAPHead, NAPInputTap
from st_magnitude.modules.role_normalize import ROLES, RoleNormalize

__all__ = [
    "ROLES",
    "DimensionProjection",
    "NAPHead",
    "NAPInputTap",
    "ProjectionActivationWarning",
    "RoleNormalize",
    "add_dimension_projection",
    "check_projection",
    "dimension_grid",
    "truncate_embeddings",
]
