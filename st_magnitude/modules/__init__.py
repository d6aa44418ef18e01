"""Sentence-transformers modules carried by st-magnitude models.

:mod:`st_magnitude.modules.revela_attention` (not re-exported here) is the attention function that
:class:`~st_magnitude.losses.RevelaLoss` registers in transformers' ``AttentionInterface``.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "DimensionProjection",
    "NAPHead",
    "RoleNormalize",
    "add_dimension_projection",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".dimension_projection": ("DimensionProjection", "add_dimension_projection"),
        ".nap_head": ("NAPHead",),
        ".role_normalize": ("RoleNormalize",),
    },
)
