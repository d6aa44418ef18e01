"""Sentence-transformers modules carried by st-magnitude models.

:mod:`st_magnitude.modules.revela_attention` (not re-exported here) is the attention function that
:class:`~st_magnitude.losses.RevelaLoss` registers in transformers' ``AttentionInterface``.
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "DimensionProjection",
    "MIPSAugment",
    "NAPHead",
    "RoleNormalize",
    "add_dimension_projection",
]

#: The sentence-transformers module classes this package saves into model folders, by the dotted path a folder's
#: ``modules.json`` (or a Router's ``types``) names them with. A loader imports a class a folder names in the
#: ``st_magnitude.*`` namespace only when it is listed here, so a folder cannot make it import any other module of
#: this package (and run that module's import-time code). ``tests/test_hostile_models.py`` checks the list.
MODULE_CLASSES: frozenset[str] = frozenset(
    {
        "st_magnitude.modules.role_normalize.RoleNormalize",
        "st_magnitude.modules.nap_head.NAPHead",
        "st_magnitude.modules.mips_augment.MIPSAugment",
    }
)

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".dimension_projection": ("DimensionProjection", "add_dimension_projection"),
        ".mips_augment": ("MIPSAugment",),
        ".nap_head": ("NAPHead",),
        ".role_normalize": ("RoleNormalize",),
    },
)
