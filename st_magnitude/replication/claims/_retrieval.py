"""One retrieval fine-tune + evaluation, shared by the retrieval claims (000 headline, 000 App. F, 001, 002)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from st_magnitude.replication.common import Context, base_model, evaluate_retrieval, set_seed, train

__all__ = ["fine_tune_and_eval", "evaluate_all"]

ROUTER = {"anchor": "query", "positive": "document"}


def evaluate_all(model, sets, *, similarity: str | None = None, dual: bool = False, auc_negatives: int = 100) -> dict:
    return {
        es.name: evaluate_retrieval(model, es, similarity=similarity, dual=dual, auc_negatives=auc_negatives)
        for es in sets
    }


def fine_tune_and_eval(
    ctx: Context,
    *,
    prepare: Callable[[Any], tuple[Any, dict[str, Any]]],
    pairs: dict[str, list[str]],
    sets: list,
    similarity: str | None = None,
    dual: bool = False,
    steps: int | None = None,
    callbacks_for: Callable[[Any], list] | None = None,
) -> dict[str, Any]:
    """Load the base, ``prepare(model) -> (loss, extra training kwargs)``, train, evaluate on every set."""
    s = ctx.settings
    set_seed(ctx.seed)
    model = base_model(ctx.model or s["model"], device=ctx.device, max_seq_length=s["max_seq_length"])
    loss, kwargs = prepare(model)
    steps = steps or s["steps"]
    n = steps * s["batch_size"]
    info = train(
        model,
        loss,
        {"anchor": pairs["anchor"][:n], "positive": pairs["positive"][:n]},
        ctx=ctx,
        steps=steps,
        batch_size=s["batch_size"],
        learning_rate=s["learning_rate"],
        callbacks=callbacks_for(loss) if callbacks_for else None,
        **kwargs,
    )
    out = evaluate_all(model, sets, similarity=similarity, dual=dual, auc_negatives=s.get("auc_negatives", 100))
    for ds in out.values():
        ds["metrics"].update(info)
    return out
