"""Integrations: local BEIR folders (:mod:`.data`), where data lives (:mod:`.data_home`), BEIR (:mod:`.beir`), mteb
(:mod:`.mteb`), model loading and role checks (:mod:`.models`), and the ``st-magnitude evaluate`` /
``st-magnitude mteb run`` commands (:mod:`.cli`).

mteb is imported lazily (it needs Python >= 3.11 and is slow to import)."""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "BEIRData",
    "beir_evaluate",
    "evaluate_model",
    "load_beir",
    "load_model",
    "raw_model",
    "subsample",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".data": ("BEIRData", "load_beir", "subsample"),
        ".beir": ("beir_evaluate",),
        ".evaluate": ("evaluate_model",),
        ".models": ("load_model", "raw_model"),
    },
)
