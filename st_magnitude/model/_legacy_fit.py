"""ST's legacy ``model.fit`` on a model with a query/document ``Router``: one line naming the Trainer, before any work.

``SentenceTransformer.fit`` builds its own ``SentenceTransformerTrainingArguments`` and has no way to pass the
``router_mapping`` that a model with a ``Router`` needs (qnorm / dnorm in their portable form, a two-tower model), so
sentence-transformers refuses such a model there with a message asking for that mapping. There is no supported way
to hand ``fit`` a mapping, so the package refuses earlier, in terms a ``fit`` user can act on: every model it
converts (:func:`~st_magnitude.apply_similarity`) or loads (:func:`~st_magnitude.model.load_model`), and every model
given to one of its losses, gets an instance attribute ``fit`` that checks, when it is called, the condition ST's
Trainer checks (a ``Router`` among the model's modules) and raises :data:`FIT_REFUSAL`; otherwise it is ST's own
``fit``. Nothing of sentence-transformers is patched; the class's ``fit`` is untouched.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Router

__all__ = ["FIT_REFUSAL", "has_top_router", "refuse_fit_with_router"]

#: The one line ``model.fit`` raises on a model with a ``Router``.
FIT_REFUSAL = (
    "model.fit cannot pass the router_mapping that this model's query/document Router needs in training (ST refuses "
    "the model without it): train with SentenceTransformerTrainer and SentenceTransformerTrainingArguments("
    "router_mapping={{'anchor': 'query', 'positive': 'document', 'negative': 'document'}}) (docs/losses.md){other}"
)


def has_top_router(model: Any) -> bool:
    """The test ST's Trainer applies before it trains: a ``Router`` (that class itself) among the model's modules."""
    return any(type(module) is Router for module in model.children())


def _refusal(model: SentenceTransformer) -> str:
    from st_magnitude.model.info import carried_similarity
    from st_magnitude.similarity import name_of_gammas

    carried = carried_similarity(model)
    name = None if carried is None else name_of_gammas(carried.gamma_query, carried.gamma_document)
    if name in ("qnorm", "dnorm"):
        other = (
            f", or make the model fit-trainable with apply_similarity(model, {name!r}, portable=False) and call "
            f"apply_similarity(model, {name!r}) again before saving"
        )
    else:
        other = ""
    return FIT_REFUSAL.format(other=other)


class _Fit:
    """``model.fit`` of a model with a ``Router``: refuses while the model has one, else ST's ``fit``. A plain object
    holding its model, so ``copy.deepcopy`` and ``pickle`` carry it to the copy."""

    def __init__(self, model: SentenceTransformer) -> None:
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if has_top_router(self.model):
            raise ValueError(_refusal(self.model))
        return type(self.model).fit(self.model, *args, **kwargs)


def refuse_fit_with_router(model: Any) -> None:
    """Give ``model`` (a SentenceTransformer with a ``Router``) a ``fit`` that raises :data:`FIT_REFUSAL` while the
    model has a ``Router`` and is ST's ``fit`` otherwise; anything else is left as it is."""
    if isinstance(model, SentenceTransformer) and has_top_router(model) and "fit" not in vars(model):
        model.fit = _Fit(model)  # an instance attribute (not a module, not a parameter)
