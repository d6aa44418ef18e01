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
from typing import Any

import torch
import tqdm
from sentence_transformers.base.losses import CachedLossMixin
from sentence_transformers.base.losses.merged_forward import embed_columns
from torch import Tensor, nn

from st_magnitude.losses._batch import DuplicateCheck, GatheredBatch, check_columns, feature_rows, prepare_columns
from st_magnitude.losses._loss_state import (
    forward_cached_scaled,
    load_loss_state_dict,
    loss_state_dict,
    sync_loss_held_gradients,
)
from st_magnitude.model._legacy_fit import refuse_fit_with_router
from st_magnitude.model.info import carried_similarity, model_gammas
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
        # dot on a model that ends in Normalize (what apply_similarity(model, "cosine") leaves) is its cosine: name the
        # similarity that really trains, so the config and model card say "cosine" and no magnitude warning is raised
        similarity = "cosine" if fn_name == "dot" and model_gammas(model) == (1.0, 1.0) else fn_name
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


def similarity_config(sim_name: str, scoring: Similarity, carried: Similarity | None) -> dict[str, Any]:
    """The similarity part of a loss's ``get_config_dict`` (rendered in the model card)."""
    source = carried if carried is not None else scoring
    return {
        "similarity": sim_name,
        "carried_by_model": carried is not None,
        "gamma_query": round(source.gamma_query, 6),
        "gamma_document": round(source.gamma_document, 6),
    }


class FamilyLoss(nn.Module):
    """The one base of the magnitude-family losses (PartialNormInfoNCE, MW, InfoTN, L2Dir): their contract.

    - ``__init__``: the model and ``gather_across_devices``; a loss scored with a member of the similarity family
      (``resolves_similarity``, the default) also resolves ``similarity`` (:func:`resolve_similarity`: the scoring
      similarity, the one a converted model carries, the name for the config).
    - :meth:`forward` = :meth:`check_features` → :meth:`embed` → average loss-held gradients over processes →
      :meth:`compute_loss_from_embeddings` with what :meth:`embed` returned. A loss changes one step only (the
      NAP-tapped losses embed through :class:`~st_magnitude.modules.nap_head.NAPInputTap`).
    - :meth:`prepare_batch` / :meth:`rows_loss` / :meth:`finish_batch`: the loss over a row range of a
      :class:`GatheredBatch`, which lets the cached twin (:class:`CachedLoss`) run the same code chunk by chunk on
      the cached embeddings.
    - ``get_config_dict()`` and ``citation``: the subclass's own.

    Its cached twin is a :class:`CachedLoss` in the same module, built from the same arguments plus
    ``mini_batch_size``, ``mini_batch_num_tokens`` and ``show_progress_bar``.
    """

    #: scored with a member of the similarity family (``similarity=`` argument, converted models detected); the
    #: NAP-tapped losses score with the similarities their paper fixes (cosine, sim_TN) and set it False
    resolves_similarity: bool = True
    #: host reads (``.item()``, ``float(t)``, ``bool(t)``, a ``nonzero``: each a device sync on an accelerator) one
    #: training step of this loss makes in its own code, forward and backward, once past the checks of the first
    #: calls (the duplicate-positive check runs on the first calls, the finiteness flag is read every
    #: ``FINITE_CHECK_INTERVAL`` calls); statistics stay on the device until they are logged.
    #: ``tests/losses/test_host_reads.py`` counts them on the CPU for every registered loss and fails above this.
    host_reads_per_step: int = 0

    def __init__(
        self, model: nn.Module, similarity: str | Similarity | None = None, gather_across_devices: bool = False
    ) -> None:
        super().__init__()
        self.model = model
        refuse_fit_with_router(model)  # ST's legacy fit cannot pass the router_mapping a Router model needs
        self.gather_across_devices = bool(gather_across_devices)
        if self.resolves_similarity:
            self.similarity_fct, self.carried, self.similarity_name = resolve_similarity(
                model, similarity, type(self).__name__
            )
        else:
            self.carried = None
        self._duplicates = DuplicateCheck()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Any:
        features = self.check_features(sentence_features)
        inputs = self.embed(features)
        sync_loss_held_gradients(self)
        return self.compute_loss_from_embeddings(**inputs, labels=labels)

    def check_features(
        self, sentence_features: Iterable[dict[str, Any]], loss_name: str | None = None
    ) -> list[dict[str, Any]]:
        """The input columns as a list, checked (same row counts, not empty), with query/document roles on a
        converted model. The cached twin calls it too, before it embeds, under its own name (``loss_name``)."""
        features = list(sentence_features)
        check_columns([feature_rows(f) for f in features], loss_name or type(self).__name__)
        return set_roles(features) if self.carried is not None else features

    def embed(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of :meth:`compute_loss_from_embeddings` (besides ``labels``) for checked columns:
        by default the model's per-column embeddings."""
        return {"embeddings": embed_columns(self.model, features)}

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Any:
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
        queries, docs, offset, world = prepare_columns(columns, self.gather_across_devices, name, owner=self)
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
        features = self.loss.check_features(sentence_features, type(self).__name__)  # roles before the mixin embeds
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

    @property
    def host_reads_per_step(self) -> int:
        """The wrapped loss's (:attr:`FamilyLoss.host_reads_per_step`): the twin adds none of its own."""
        return self.loss.host_reads_per_step

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
