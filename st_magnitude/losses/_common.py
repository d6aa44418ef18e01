"""Shared plumbing of the st-magnitude losses: which similarity to score with, query/document roles, gathering.

Two cases (decided in the issue, see ``docs/partial_norm_infonce.md``):

(a) *plain* model (``carried_similarity(model) is None``): the loss applies ``get_similarity(similarity)`` to the
    model outputs — the "swap the similarity" path.
(b) *converted* model (made by :func:`st_magnitude.apply_similarity`): its outputs are already φ_γq(q) / φ_γd(d)
    per role, so the loss scores them with a plain dot product and gives each column its role through
    ``features["task"]`` (column 0 → ``"query"``, the others → ``"document"``) unless the trainer's
    ``router_mapping`` already set one.

The similarity math itself lives only in :mod:`st_magnitude.similarity`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import tqdm
from sentence_transformers.base.losses import CachedLossMixin
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.util import all_gather_with_grad, get_rank, get_world_size
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from st_magnitude.model_info import carried_similarity, model_gammas
from st_magnitude.similarity import (
    LearnableSimilarity,
    PowerNormSimilarity,
    Similarity,
    get_similarity,
    name_of_gammas,
    similarity_names,
)

logger = logging.getLogger(__name__)

QUERY_ROLE, DOCUMENT_ROLE = "query", "document"


class LossSimilarityWarning(UserWarning):
    """A loss was asked for a similarity that the model cannot express or will not save (see the message)."""


def _name_of(sim: Similarity) -> str:
    if isinstance(sim, LearnableSimilarity) or not isinstance(sim, PowerNormSimilarity):
        return sim.name
    gammas = (sim.gamma_query, sim.gamma_document)
    return name_of_gammas(*gammas) or f"power_norm{gammas}"


def resolve_similarity(
    model: nn.Module, similarity: str | Similarity | None, loss_name: str
) -> tuple[Similarity, Similarity | None, str]:
    """Decide how a loss scores embeddings of ``model``.

    Returns ``(scoring_similarity, carried, name)``: ``carried`` is the similarity a converted model carries (then
    ``scoring_similarity`` is dot), or ``None`` for a plain model (then ``scoring_similarity`` is the requested one).
    ``name`` is the similarity the loss trains, for the config / model card.
    """
    carried = carried_similarity(model)
    if carried is not None:
        name = _name_of(carried)
        if similarity is not None:
            requested = get_similarity(similarity) if isinstance(similarity, str) else similarity
            both_learnable = isinstance(requested, LearnableSimilarity) and isinstance(carried, LearnableSimilarity)
            same_fixed = isinstance(requested, PowerNormSimilarity) and not isinstance(requested, LearnableSimilarity)
            same_fixed = same_fixed and not isinstance(carried, LearnableSimilarity)
            same_fixed = same_fixed and (requested.gamma_query, requested.gamma_document) == (
                carried.gamma_query,
                carried.gamma_document,
            )
            if not (both_learnable or same_fixed):
                raise ValueError(
                    f"{loss_name}: the model was converted with apply_similarity and carries the {name!r} similarity "
                    f"(gamma_query={carried.gamma_query:.3g}, gamma_document={carried.gamma_document:.3g}), but "
                    f"similarity={_name_of(requested)!r} was requested. Pass similarity=None (use what the model "
                    f"carries) or {name!r}, or convert the model with apply_similarity(model, "
                    f"{_name_of(requested)!r}) first."
                )
        return get_similarity("dot"), carried, name

    if similarity is None:
        fn_name = getattr(model, "similarity_fn_name", None)
        if fn_name not in ("cosine", "dot"):
            raise ValueError(
                f"{loss_name}: similarity=None means 'use what the model carries', but this model is not converted "
                f"and its similarity_fn_name is {fn_name!r}. Pass one of {list(similarity_names(power_norm=True))}."
            )
        similarity = fn_name
    sim = get_similarity(similarity) if isinstance(similarity, str) else similarity
    if not isinstance(sim, PowerNormSimilarity):  # tn and other non-power-norm similarities have no γ to train
        raise TypeError(
            f"{loss_name}: similarity must be one of {list(similarity_names(power_norm=True))}, got {sim!r}"
        )
    name = _name_of(sim)
    keeps_magnitude = isinstance(sim, LearnableSimilarity) or (sim.gamma_query, sim.gamma_document) != (1.0, 1.0)
    if keeps_magnitude and model_gammas(model) == (1.0, 1.0):
        warnings.warn(
            f"{loss_name}: similarity {name!r} keeps embedding magnitude, but the model ends in Normalize, so every "
            f"embedding has norm 1 and {name!r} trains exactly like cosine. Convert the model first with "
            f"st_magnitude.apply_similarity(model, {name!r}) (it removes the Normalize and makes the model serve "
            f"{name!r} at inference), then pass the converted model to the loss.",
            LossSimilarityWarning,
            stacklevel=3,
        )
    if isinstance(sim, LearnableSimilarity) and sim._source is None:
        warnings.warn(
            f"{loss_name}: the learnable similarity's gamma parameters live in the loss, which sentence-transformers "
            "optimises but never saves (not in model.safetensors, not in checkpoints) and does not use at inference. "
            "Use st_magnitude.apply_similarity(model, 'learnable') so the model carries (and saves) gamma.",
            LossSimilarityWarning,
            stacklevel=3,
        )
    return sim, None, name


def at_least_fp32(t: Tensor) -> Tensor:
    """Upcast half-precision scores (fp16/bf16 autocast) to float32; float32/float64 pass unchanged."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def set_roles(sentence_features: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give column 0 the query role and the others the document role, unless a role (``task``) is already set."""
    features = list(sentence_features)
    for idx, feats in enumerate(features):
        # a Router model's preprocess() stores "task": None, so a plain setdefault would not fill it
        if feats.get("task") is None:
            feats["task"] = QUERY_ROLE if idx == 0 else DOCUMENT_ROLE
    return features


def column_name(index: int) -> str:
    """The role of input column ``index``: anchor, positive, negative_1, ..."""
    return ("anchor", "positive")[index] if index < 2 else f"negative_{index - 1}"


def feature_rows(features: dict[str, Any]) -> int:
    """Rows (inputs) in one tokenized column; 0 when it holds no batch tensor (an empty batch)."""
    if "cu_seq_lens_q" in features:
        return len(features["cu_seq_lens_q"]) - 1
    for key in ("input_ids", "attention_mask", "pixel_values", "sentence_embedding"):
        value = features.get(key)
        if isinstance(value, Tensor) and value.ndim > 0:
            return value.shape[0]
    return next((v.shape[0] for v in features.values() if isinstance(v, Tensor) and v.ndim > 0), 0)


def check_columns(rows: list[int], loss_name: str) -> None:
    """Raise a clear error for fewer than 2 columns, an empty batch, or columns whose row counts differ."""
    if len(rows) < 2:
        raise ValueError(
            f"{loss_name} needs at least 2 input columns (anchor, positive, negative_1, ...), got {len(rows)}."
        )
    if max(rows) == 0:
        raise ValueError(f"{loss_name}: the batch is empty (0 rows in every column); there is nothing to score.")
    if len(set(rows)) > 1:
        counts = ", ".join(f"{column_name(i)} {n}" for i, n in enumerate(rows))
        raise ValueError(
            f"{loss_name}: every input column must hold one row per anchor (row i of each column belongs to anchor "
            f"i), but the columns have {counts} rows."
        )


def check_finite(columns: list[Tensor], loss_name: str, what: str = "embeddings") -> None:
    """Raise when any embedding is NaN or infinite, naming the column, its rows and (when distributed) the process.

    A single non-finite embedding makes the loss and every gradient NaN; the check costs one device sync.
    """
    finite = [torch.isfinite(c.detach()) for c in columns]
    bad_rows = [~(f.flatten(1) if f.ndim > 1 else f.unsqueeze(1)).all(dim=1) for f in finite]
    if not bool(torch.stack([b.any() for b in bad_rows]).any()):
        return
    where = []
    for i, bad in enumerate(bad_rows):
        rows = bad.nonzero().flatten().tolist()
        if rows:
            shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
            where.append(f"column {i} ({column_name(i)}) rows [{shown}]")
    rank = f" on process {get_rank()}" if get_world_size() > 1 else ""
    raise ValueError(
        f"{loss_name}: {what} are NaN or infinite in {'; '.join(where)} of this batch{rank} (0-based rows of the "
        "batch). The loss and every gradient would be NaN. Usual causes: fp16 overflow in the model (train in bf16 "
        "or fp32), a diverged step (lower the learning rate, clip gradients), or NaN/inf inputs."
    )


def _check_same_rows_across_processes(rows: int, device: torch.device, loss_name: str) -> None:
    """All-gather the per-process batch sizes first: gathering unequal tensors would abort the process (gloo)."""
    world = get_world_size()
    local = torch.tensor([rows], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(sizes, local)
    sizes_list = [int(t) for t in sizes]
    if len(set(sizes_list)) > 1:
        raise ValueError(
            f"{loss_name}: gather_across_devices=True needs the same per-device batch size on every process, got "
            f"{sizes_list} (process 0, 1, ...). Use dataloader_drop_last=True so no process gets a short last batch."
        )


def gather(
    queries: Tensor, docs: list[Tensor], enabled: bool, loss_name: str = "loss"
) -> tuple[Tensor, list[Tensor], int, int]:
    """All-gather (with gradients, like ST's MNRL) when ``enabled``; returns ``(queries, docs, offset, world)``.

    The per-process batch sizes are compared first (one small all-gather) and unequal sizes raise ``ValueError``.
    """
    gathered, offset, world = gather_columns([queries, *docs], enabled, loss_name)
    return gathered[0], gathered[1:], offset, world


def gather_columns(columns: list[Tensor], enabled: bool, loss_name: str = "loss") -> tuple[list[Tensor], int, int]:
    """All-gather every column (with gradients) when ``enabled``; returns ``(columns, offset, world)``, where this
    process's rows are ``offset:offset + rows`` of each gathered column. Unequal per-process sizes raise."""
    if not enabled or get_world_size() <= 1:
        return list(columns), 0, 1
    batch_size = columns[0].size(0)
    _check_same_rows_across_processes(batch_size, columns[0].device, loss_name)
    return [all_gather_with_grad(c) for c in columns], get_rank() * batch_size, get_world_size()


def check_has_negatives(world_batch_size: int, n_doc_columns: int, loss_name: str) -> None:
    if n_doc_columns < 1:
        raise ValueError(
            f"{loss_name} needs at least 2 input columns (anchor, positive[, negative_1, ...]), got "
            f"{n_doc_columns + 1}."
        )
    if world_batch_size <= 1 and n_doc_columns == 1:
        raise ValueError(
            f"{loss_name}: a batch of one (anchor, positive) pair has no negatives, so the loss is undefined. Use a "
            "batch size of at least 2 (in-batch negatives) or add hard-negative columns (anchor, positive, "
            "negative_1, ...)."
        )


def prepare_columns(columns: list[Tensor], enabled: bool, loss_name: str) -> tuple[Tensor, list[Tensor], int, int]:
    """Validate per-column embeddings (count, equal rows, finite), gather them when ``enabled``, check negatives.

    Returns ``(queries, docs, offset, world)`` like :func:`gather`.
    """
    check_columns([c.size(0) for c in columns], loss_name)
    check_finite(columns, loss_name)
    queries, docs, offset, world = gather(columns[0], list(columns[1:]), enabled, loss_name)
    check_has_negatives(queries.size(0), len(docs), loss_name)
    return queries, docs, offset, world


class DuplicateCheck:
    """Log (once) when two positives in a batch are identical: each is then a negative of the other's query."""

    def __init__(self) -> None:
        self._warned = False

    def __call__(self, positives: Tensor, loss_name: str) -> None:
        if self._warned or positives.size(0) < 2:
            return
        with torch.no_grad():
            n_unique = torch.unique(positives.detach(), dim=0).size(0)
        if n_unique < positives.size(0):
            logger.warning(
                "%s: %d of %d positives in this batch are exact duplicates; each duplicate is scored as a negative "
                "for the other query (as in MultipleNegativesRankingLoss). Use "
                "SentenceTransformerTrainingArguments(batch_sampler=BatchSamplers.NO_DUPLICATES) to avoid these false "
                "negatives.",
                loss_name,
                positives.size(0) - n_unique,
                positives.size(0),
            )
            self._warned = True


def similarity_config(sim_name: str, scoring: Similarity, carried: Similarity | None) -> dict[str, Any]:
    """The similarity part of a loss's ``get_config_dict`` (rendered in the model card)."""
    source = carried if carried is not None else scoring
    return {
        "similarity": sim_name,
        "carried_by_model": carried is not None,
        "gamma_query": round(source.gamma_query, 6),
        "gamma_document": round(source.gamma_document, 6),
    }


@dataclass
class GatheredBatch:
    """A validated (and, with ``gather_across_devices``, gathered) batch of per-column embeddings.

    This process's anchors are rows ``offset:offset + size`` of ``queries``; ``docs`` are the document columns
    (positives first), ``docs_all`` their concatenation; ``extra`` holds what a loss precomputes once per batch.
    """

    size: int
    queries: Tensor
    docs: list[Tensor]
    docs_all: Tensor
    offset: int
    world: int
    extra: dict[str, Any] = field(default_factory=dict)

    def local_rows(self, begin: int, end: int) -> Tensor:
        """Indices, in the gathered batch, of this process's anchors ``begin:end``."""
        return torch.arange(self.offset + begin, self.offset + end, device=self.queries.device)


class FamilyLoss(nn.Module):
    """Base of the losses scored with a member of the similarity family (InfoNCE, MW).

    Holds the shared set-up (model, similarity resolution, gathering, duplicate check) and the forward pass. A
    subclass computes its loss over a row range of a :class:`GatheredBatch` (:meth:`rows_loss`), which lets the
    cached twin (:class:`CachedLoss`) run the same code chunk by chunk on the cached embeddings.
    """

    def __init__(self, model: nn.Module, similarity: str | Similarity | None, gather_across_devices: bool) -> None:
        super().__init__()
        self.model = model
        self.gather_across_devices = bool(gather_across_devices)
        self.similarity_fct, self.carried, self.similarity_name = resolve_similarity(
            model, similarity, type(self).__name__
        )
        self._duplicates = DuplicateCheck()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        check_columns([feature_rows(f) for f in features], type(self).__name__)
        if self.carried is not None:
            features = set_roles(features)
        embeddings = embed_columns(self.model, features)
        sync_loss_held_gradients(self)
        return self.compute_loss_from_embeddings(embeddings, labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss from the per-column embeddings ``[anchor, positive, negative_1, ...]`` (each ``[B, n]``).

        Loss-held parameters (γ̂) get their gradient averaged over processes by :meth:`forward`, or by the wrapper
        that calls this (the cached twin, ``MagnitudeMatryoshkaLoss``)."""
        batch = self.prepare_batch(list(embeddings), rows_per_chunk=embeddings[0].size(0))
        return self.rows_loss(batch, 0, batch.size)

    def prepare_batch(self, columns: list[Tensor], rows_per_chunk: int, detach_shared: bool = False) -> GatheredBatch:
        """Validate and gather ``columns``; a subclass adds what it computes once per batch to ``extra``.

        ``rows_per_chunk`` is how many anchors :meth:`rows_loss` will get at a time; with ``detach_shared`` (the
        cached twin's chunked backward) a quantity shared by all chunks is held as a detached leaf, whose gradient
        :meth:`finish_batch` back-propagates once.
        """
        name = type(self).__name__
        queries, docs, offset, world = prepare_columns(columns, self.gather_across_devices, name)
        self._duplicates(docs[0], name)
        return GatheredBatch(columns[0].size(0), queries, docs, torch.cat(docs, dim=0), offset, world)

    def rows_loss(self, batch: GatheredBatch, begin: int, end: int) -> Tensor:
        """The part of the batch loss contributed by this process's anchors ``begin:end``."""
        raise NotImplementedError

    def finish_batch(self, batch: GatheredBatch) -> None:
        """Back-propagate what :meth:`prepare_batch` held detached (``detach_shared``); nothing by default."""

    def similarity_config(self) -> dict[str, Any]:
        """The similarity part of ``get_config_dict`` (rendered in the model card)."""
        return similarity_config(self.similarity_name, self.similarity_fct, self.carried)


class CachedLoss(CachedLossMixin, nn.Module):
    """A GradCache twin that wraps its plain loss, as ST's ``CachedMultipleNegativesRankingLoss`` wraps MNRL.

    The plain loss lives in ``self.loss`` and owns every hyper-parameter: the names in
    ``_delegated_to_wrapped_loss`` read from and assign to it, and ``get_config_dict`` / ``citation`` are its own
    plus the mini-batch settings. The loss itself is computed by the plain loss's code on the cached embeddings:
    by default :meth:`calculate_loss` runs ``FamilyLoss.rows_loss`` over ``mini_batch_size`` anchors at a time.
    Parameters held by the plain loss (γ̂, a NAP head) get their gradient scaled like the backbone's
    (:func:`forward_cached_scaled`).
    """

    #: Attributes of the wrapped loss exposed (read and assignment) on the cached loss.
    _delegated_to_wrapped_loss: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._delegated_to_wrapped_loss:
            if name not in cls.__dict__:
                setattr(cls, name, property(lambda self, _name=name: getattr(self.loss, _name)))

    def __init__(
        self,
        loss: nn.Module,
        mini_batch_size: int,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__()
        if not (isinstance(mini_batch_size, int) and mini_batch_size > 0):
            raise ValueError(f"mini_batch_size must be a positive int, got {mini_batch_size!r}")
        if mini_batch_num_tokens is not None and not (
            isinstance(mini_batch_num_tokens, int) and mini_batch_num_tokens > 0
        ):
            raise ValueError(f"mini_batch_num_tokens must be a positive int or None, got {mini_batch_num_tokens!r}")
        self.model = loss.model  # registered first: the backbone's parameters keep their names (model.*)
        self.loss = loss
        self.mini_batch_size = mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens
        self.show_progress_bar = show_progress_bar

    def __setattr__(self, name: str, value: Any) -> None:
        # ``loss.scale = 5`` must reach the wrapped loss (a property has no setter, and nn.Module would register a
        # module-valued attribute such as similarity_fct on the wrapper instead)
        if name in self._delegated_to_wrapped_loss and isinstance(
            self.__dict__.get("_modules", {}).get("loss"), nn.Module
        ):
            setattr(self.loss, name, value)
        else:
            super().__setattr__(name, value)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        check_columns([feature_rows(f) for f in features], type(self).__name__)
        if getattr(self.loss, "carried", None) is not None:
            features = set_roles(features)  # before the mixin embeds: _create_minibatch keeps "task"
        sync_loss_held_gradients(self)
        return forward_cached_scaled(self, features, labels)

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """The plain loss over the whole batch, ``mini_batch_size`` anchors at a time (backward per chunk)."""
        batch = self.loss.prepare_batch(
            [torch.cat(r) for r in reps], rows_per_chunk=self.mini_batch_size, detach_shared=with_backward
        )
        total: Tensor | float = 0.0
        for begin in tqdm.trange(
            0, batch.size, self.mini_batch_size, desc="Calculating loss", disable=not self.show_progress_bar
        ):
            chunk = self.loss.rows_loss(batch, begin, min(begin + self.mini_batch_size, batch.size))
            if with_backward:
                chunk.backward()
                chunk = chunk.detach()
            total = total + chunk
        if with_backward:
            self.loss.finish_batch(batch)
        return total

    def get_config_dict(self) -> dict[str, Any]:
        return {
            **self.loss.get_config_dict(),
            "mini_batch_size": self.mini_batch_size,
            "mini_batch_num_tokens": self.mini_batch_num_tokens,
        }

    @property
    def citation(self) -> str:
        return self.loss.citation

    def loss_state_dict(self) -> dict[str, Tensor]:
        """The wrapped loss's state, named as the plain loss names it (checkpoints move between the two)."""
        return loss_state_dict(self.loss)

    def load_loss_state_dict(self, state: dict[str, Tensor]) -> None:
        load_loss_state_dict(self.loss, state)


# --- parameters held by the loss (γ̂ of a learnable similarity on a plain model, the L2Dir NAP head, Revela's LM) ---


def loss_held_named_parameters(loss: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Trainable parameters of ``loss`` that are not the model's, by name (a NAP head, Revela's LM, a loss-held γ̂).

    The Trainer optimises them (it builds the optimizer from ``loss.named_parameters()``), but neither saves them with
    the model nor synchronises them under DDP; :func:`loss_state_dict` and :func:`sync_loss_held_gradients` do.
    """
    model = getattr(loss, "model", None)
    in_model = {id(p) for p in model.parameters()} if isinstance(model, nn.Module) else set()
    return [(name, p) for name, p in loss.named_parameters() if p.requires_grad and id(p) not in in_model]


def loss_held_parameters(loss: nn.Module) -> list[nn.Parameter]:
    """Trainable parameters of ``loss`` that are not the model's (see :func:`loss_held_named_parameters`)."""
    return [p for _, p in loss_held_named_parameters(loss)]


def loss_state_dict(loss: nn.Module) -> dict[str, Tensor]:
    """The trainable state ``loss`` holds outside the model, as CPU tensors by name.

    The protocol: a loss may define ``loss_state_dict()`` and ``load_loss_state_dict(state)`` itself; otherwise its
    loss-held parameters (:func:`loss_held_named_parameters`) are its state. Empty for a loss without any.
    """
    if callable(getattr(type(loss), "loss_state_dict", None)):
        return loss.loss_state_dict()
    return {name: p.detach().cpu().contiguous() for name, p in loss_held_named_parameters(loss)}


def load_loss_state_dict(loss: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` (from :func:`loss_state_dict`) into ``loss`` in place, so an optimizer holding the parameters
    keeps optimising the same tensors.

    Raises:
        ValueError: the names or shapes in ``state`` are not those of the loss's state.
    """
    if callable(getattr(type(loss), "load_loss_state_dict", None)):
        loss.load_loss_state_dict(state)
        return
    params = dict(loss_held_named_parameters(loss))
    missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
    reshaped = sorted(n for n in set(state) & set(params) if tuple(state[n].shape) != tuple(params[n].shape))
    if missing or unexpected or reshaped:
        raise ValueError(
            f"the saved state does not fit {type(loss).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}, "
            f"other shape {reshaped[:5]}; build the loss with the same settings (head shape, LM, similarity)"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))


class _CarryGradients(torch.autograd.Function):
    """Identity on the loss value; its backward hands each loss-held parameter ``grad_output × g``.

    ``g`` is the gradient the GradCache step (2) computed for that parameter at unit scale. Whatever the caller
    multiplies the returned loss by before ``backward`` (the Trainer's 1/gradient_accumulation_steps, the fp16
    GradScaler's S, DDP/accelerate scaling) therefore reaches these parameters exactly as it reaches the backbone,
    whose cached gradients ST's backward hook scales by the same ``grad_output``.
    """

    @staticmethod
    def forward(ctx, loss: Tensor, grads: tuple[Tensor, ...], *params: Tensor) -> Tensor:  # type: ignore[override]
        ctx.grads = grads
        return loss.clone()

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # type: ignore[override]
        return (grad_output, None, *(g * grad_output.to(g.dtype) for g in ctx.grads))


def forward_cached_scaled(loss: CachedLossMixin, features: list[dict[str, Any]], labels: Tensor | None) -> Tensor:
    """``loss.forward_cached`` whose returned loss also carries the gradient of the loss-held parameters.

    GradCache computes the loss and back-propagates it inside ``forward`` (step 2), so a parameter of the loss itself
    would receive its gradient there, at unit scale, bypassing the scale applied later to the returned loss
    (gradient accumulation, fp16 loss scaling). Here that step-2 gradient is taken out of ``.grad`` (earlier
    accumulated gradients are kept) and re-emitted through :class:`_CarryGradients` when the returned loss is
    back-propagated, scaled like everything else.
    """
    params = loss_held_parameters(loss) if torch.is_grad_enabled() else []
    if not params:
        return loss.forward_cached(features, labels)
    earlier = [p.grad for p in params]
    for p in params:
        p.grad = None
    loss.__dict__["_in_gradcache_step"] = True  # the step-2 backward is not the outer one: no process sync here
    try:
        value = loss.forward_cached(features, labels)
        step2 = [p.grad for p in params]
    finally:
        loss.__dict__["_in_gradcache_step"] = False
        for p, g in zip(params, earlier):
            p.grad = g
    carried = [(p, g) for p, g in zip(params, step2) if g is not None]
    if not carried:
        return value
    return _CarryGradients.apply(value, tuple(g for _, g in carried), *(p for p, _ in carried))


def _average_over_processes(loss: nn.Module, grad: Tensor) -> Tensor | None:
    if loss.__dict__.get("_in_gradcache_step", False) or not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    if world <= 1:
        return None
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad / world


def sync_loss_held_gradients(loss: nn.Module) -> None:
    """Average the gradients of the loss-held parameters over processes, as DDP does for the model's.

    DDP wraps only the model, so without this each process would step γ̂ / the NAP head with its own local gradient
    and the copies would drift apart. With ``gather_across_devices=True`` each process's loss is its share of the
    global-batch loss (their mean is the loss of the full batch), so the average is the full-batch gradient.
    Registered (once per parameter) only when a process group with more than one process is running and the loss
    gathers or the model is wrapped in DDP; every process must then back-propagate the loss (they do under DDP).
    """
    if not (torch.is_grad_enabled() and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    wrapped = isinstance(getattr(loss, "model", None), DistributedDataParallel)
    # a wrapper (MagnitudeMatryoshkaLoss) gathers when the loss it wraps does
    gathers = any(getattr(m, "gather_across_devices", False) for m in loss.modules())
    if not (gathers or wrapped):
        return
    hooked = loss.__dict__.setdefault("_synced_parameters", set())
    for p in loss_held_parameters(loss):
        if id(p) not in hooked:
            p.register_hook(lambda grad, _loss=loss: _average_over_processes(_loss, grad))
            hooked.add(id(p))
