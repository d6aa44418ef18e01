"""Moved to :mod:`st_magnitude.modules.revela_attention` (an attention function, not a loss); this path is a shim."""

from __future__ import annotations

from st_magnitude._lazy import moved_exports

__getattr__, __dir__ = moved_exports(
    __name__,
    dict.fromkeys(
        (
            "REVELA_ATTENTION",
            "STATE_KWARG",
            "SUPPORTED_MODEL_TYPES",
            "RevelaAttentionState",
            "active_pairs",
            "enable_revela_attention",
            "in_batch_term",
            "register_revela_attention",
            "revela_attention_forward",
        ),
        "st_magnitude.modules.revela_attention",
    ),
)
