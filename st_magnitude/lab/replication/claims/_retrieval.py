"""One retrieval fine-tune + evaluation, shared by the retrieval claims (000 headline, 000 App. F, 001, 002, 003)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from st_magnitude import apply_similarity
from st_magnitude.lab.engine.evaluation import evaluate_retrieval
from st_magnitude.lab.engine.models import base_model
from st_magnitude.lab.engine.seeds import set_seed
from st_magnitude.lab.replication.common import Context, compact_pools, train
from st_magnitude.losses import PartialNormInfoNCELoss

__all__ = ["converted_infonce", "evaluate_all", "fine_tune", "fine_tune_and_eval"]

ROUTER = {"anchor": "query", "positive": "document"}


def converted_infonce(variant: str, scale: float) -> Callable[[Any], tuple[Any, dict[str, Any]]]:
    """A ``prepare`` for :func:`fine_tune`: convert the model with :func:`st_magnitude.apply_similarity` and train it
    with :class:`~st_magnitude.losses.PartialNormInfoNCELoss` at ``scale``, anchors routed as queries."""

    def prepare(model):
        apply_similarity(model, variant, warn_on_strip=False)
        return PartialNormInfoNCELoss(model, similarity=None, scale=scale), {"router_mapping": ROUTER}

    return prepare


def evaluate_all(
    model,
    sets,
    *,
    similarity: str | None = None,
    dual: bool = False,
    auc_negatives: int = 100,
    keep_pools: bool = False,
) -> dict:
    """:func:`~st_magnitude.lab.engine.evaluation.evaluate_retrieval` on every set. The pooled-AUC pools are kept (as
    pair counts, :func:`~st_magnitude.lab.replication.common.compact_pools`) only with ``keep_pools``: a claim that
    compares pooled AUC across arms needs them, the others report the metric alone."""
    out = {}
    for es in sets:
        res = evaluate_retrieval(model, es, similarity=similarity, dual=dual, auc_negatives=auc_negatives)
        pools = res.pop("auc_pools")
        if keep_pools:
            res["auc_pools"] = compact_pools(pools, len(es.query_ids))
        out[es.name] = res
    return out


def fine_tune(
    ctx: Context,
    *,
    prepare: Callable[[Any], tuple[Any, dict[str, Any]]],
    pairs: dict[str, list[str]],
    steps: int | None = None,
    callbacks_for: Callable[[Any], list] | None = None,
) -> tuple[Any, Any, dict[str, float]]:
    """Seed, load the base, ``prepare(model) -> (loss, extra training kwargs)``, train ``steps`` (default: the
    profile's ``steps``) on the first ``steps × batch_size`` pairs; returns ``(model, loss, training info)``."""
    s = ctx.settings
    set_seed(ctx.seed)
    model = base_model(ctx.model or s["model"], device=ctx.device, max_seq_length=s["max_seq_length"])
    loss, kwargs = prepare(model)
    steps = s["steps"] if steps is None else steps
    n = steps * s["batch_size"]
    info = train(
        model,
        loss,
        {column: texts[:n] for column, texts in pairs.items()},  # hard-negative columns too
        ctx=ctx,
        steps=steps,
        batch_size=s["batch_size"],
        learning_rate=s["learning_rate"],
        callbacks=callbacks_for(loss) if callbacks_for else None,
        **kwargs,
    )
    return model, loss, info


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
    """:func:`fine_tune`, then evaluate on every set (the training info joins each set's metrics)."""
    model, _, info = fine_tune(ctx, prepare=prepare, pairs=pairs, steps=steps, callbacks_for=callbacks_for)
    out = evaluate_all(
        model, sets, similarity=similarity, dual=dual, auc_negatives=ctx.settings.get("auc_negatives", 100)
    )
    for ds in out.values():
        ds["metrics"].update(info)
    return out
