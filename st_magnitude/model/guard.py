"""Symmetry guard (paper 000 Prop. 2.1, "Task Symmetry Principle").

qnorm, dnorm and learnable with γq ≠ γd are only valid when inputs have distinct query/document roles. Stock
sentence-transformers cannot know that a model is asymmetric, so the guard adds the check at the places where roles
get lost:

- ``SentenceTransformer.encode(...)`` called *without* a task on an asymmetric model (what STS evaluators,
  clustering, paraphrase mining and BEIR's ``models.SentenceBERT`` do): every input silently takes the document
  route, so ``model.similarity(a, b)`` is s(φ_d(a), φ_d(b)) — not the trained similarity. Warned once per model.
- ST's symmetric evaluators (``EmbeddingSimilarityEvaluator``, ``BinaryClassificationEvaluator``,
  ``ParaphraseMiningEvaluator``, ``TripletEvaluator``) run on an asymmetric model: warned (or raised in strict mode).

Opt-in. Without it, a converted model already refuses or flags role-less use without any patching: qnorm/dnorm
models carry ST's ``Router`` with no default route, which raises on ``encode()`` without a task, and ``RoleNormalize``
(learnable/fractional γ) warns with :class:`~st_magnitude.AsymmetricSimilarityWarning` from its own ``forward``.
What only the guard adds is the check on ST's symmetric *evaluators*, and strict mode.

Its cost: :func:`install_symmetry_guard` replaces ``SentenceTransformer.encode`` and the four evaluators'
``__call__`` process-wide (a monkeypatch), inspects the caller's frame on each role-less ``encode``, and may break
with a sentence-transformers upgrade or with another library that patches the same methods. Call
:func:`uninstall_symmetry_guard` to restore the originals. It only ever warns/raises; it never changes a result.
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
import weakref
from typing import Any

from sentence_transformers import SentenceTransformer

from st_magnitude._warnings import AsymmetricSimilarityWarning
from st_magnitude.model.info import is_asymmetric

logger = logging.getLogger(__name__)

__all__ = ["install_symmetry_guard", "uninstall_symmetry_guard", "symmetry_guard_installed"]

_STATE: dict[str, Any] = {"installed": False, "strict": False, "originals": {}}
_WARNED: weakref.WeakSet = weakref.WeakSet()


def _symmetric_evaluator_classes() -> list[type]:
    from sentence_transformers.sentence_transformer import evaluation as ev

    names = (
        "EmbeddingSimilarityEvaluator",
        "BinaryClassificationEvaluator",
        "ParaphraseMiningEvaluator",
        "TripletEvaluator",
    )
    return [getattr(ev, n) for n in names if hasattr(ev, n)]


def _warn(msg: str) -> None:
    if _STATE["strict"]:
        raise ValueError(msg)
    warnings.warn(msg, AsymmetricSimilarityWarning, stacklevel=3)


def _called_from_model_card() -> bool:
    # ST's model card encodes widget examples without a role when saving: not a user mistake
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return caller.startswith("sentence_transformers") and caller.endswith("model_card")


def _guarded_encode(original):
    @functools.wraps(original)
    def encode(self, *args, **kwargs):
        if (
            kwargs.get("task") is None
            and self not in _WARNED
            and not _called_from_model_card()
            and is_asymmetric(self)
        ):
            _WARNED.add(self)
            _warn(
                "encode() was called without a query/document role on a model with an asymmetric similarity "
                "(qnorm, dnorm or learnable with γq ≠ γd): every input takes the document route, so scores between "
                "these embeddings are not the trained similarity. Use encode_query / encode_document for retrieval; "
                "asymmetric similarities are not valid for symmetric tasks such as STS or clustering "
                "(paper 000 Prop. 2.1)."
            )
        return original(self, *args, **kwargs)

    encode._st_magnitude_guard = True  # type: ignore[attr-defined]
    return encode


def _guarded_call(original, cls_name: str):
    @functools.wraps(original)
    def __call__(self, model, *args, **kwargs):
        if isinstance(model, SentenceTransformer) and is_asymmetric(model):
            _warn(
                f"{cls_name} is a symmetric evaluation (s(a, b) must equal s(b, a)), but this model serves an "
                "asymmetric similarity (qnorm, dnorm or learnable with γq ≠ γd). Its scores here are not the trained "
                "similarity; paper 000 Table 5 shows a 37–44 point Spearman drop for such variants on STS-B. "
                "Evaluate STS/paraphrase/clustering with a cosine or dot model."
            )
        return original(self, model, *args, **kwargs)

    __call__._st_magnitude_guard = True  # type: ignore[attr-defined]
    return __call__


def install_symmetry_guard(strict: bool | None = None) -> None:
    """Install the guard (idempotent). ``strict=True`` raises ``ValueError`` instead of warning; ``None`` keeps the
    current mode (warn by default)."""
    if strict is not None:
        _STATE["strict"] = bool(strict)
    if _STATE["installed"]:
        return
    originals = _STATE["originals"]
    originals[(SentenceTransformer, "encode")] = SentenceTransformer.encode
    SentenceTransformer.encode = _guarded_encode(SentenceTransformer.encode)
    for cls in _symmetric_evaluator_classes():
        originals[(cls, "__call__")] = cls.__call__
        cls.__call__ = _guarded_call(cls.__call__, cls.__name__)
    _STATE["installed"] = True
    logger.debug("symmetry guard installed (strict=%s)", strict)


def uninstall_symmetry_guard() -> None:
    """Restore the original sentence-transformers methods."""
    for (cls, attr), original in _STATE["originals"].items():
        setattr(cls, attr, original)
    _STATE["originals"] = {}
    _STATE["installed"] = False
    _STATE["strict"] = False
    _WARNED.clear()


def symmetry_guard_installed() -> bool:
    return bool(_STATE["installed"])
