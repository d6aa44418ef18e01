"""A saved model in one room: loading with trust checks (:mod:`.load`, :mod:`.offline`), what it serves
(:mod:`.info`), the similarity it carries (:mod:`.convert`), store-aware export (:mod:`.stores`), Matryoshka
truncation (:mod:`.truncation`), its model card (:mod:`.card`) and the opt-in symmetry guard (:mod:`.guard`). They
share one description of a model's module list (:mod:`._layout`: read once, written once per conversion through
:func:`st_magnitude.modules._surgery.replace_modules`) and the file-level surgery (:mod:`._strip_plan`, :mod:`._swap`,
:mod:`._save`).
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = ["load_model", "raw_model"]

__getattr__, __dir__ = lazy_exports(__name__, {".load": ("load_model", "raw_model")})
