"""Sentence-transformers modules carried by st-magnitude models.

:mod:`st_magnitude.modules.revela_attention` (not re-exported here) is the attention function that
:class:`~st_magnitude.losses.RevelaLoss` registers in transformers' ``AttentionInterface``.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "ROLES",
    "DimensionProjection",
    "MIPSAugment",
    "NAPHead",
    "NAPInputTap",
    "ProjectionActivationWarning",
    "RoleNormalize",
    "add_dimension_projection",
    "check_projection",
    "dimension_grid",
    "is_dimension_projection",
    "truncate_embeddings",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".dimension_projection": (
            "DimensionProjection",
            "ProjectionActivationWarning",
            "add_dimension_projection",
            "check_projection",
            "dimension_grid",
            "is_dimension_projection",
            "truncate_embeddings",
        ),
        ".mips_augment": ("MIPSAugment",),
        ".nap_head": ("NAPHead", "NAPInputTap"),
        ".role_normalize": ("ROLES", "RoleNormalize"),
    },
)
