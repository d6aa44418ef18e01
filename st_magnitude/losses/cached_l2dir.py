"""CachedL2DirLoss: L2Dir (paper 002 eq. 8) under GradCache, with the NAP-side gradient the authors' release drops."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude.losses._common import CachedLoss
from st_magnitude.losses._loss_state import forward_cached_scaled, sync_loss_held_gradients
from st_magnitude.losses.l2dir import L2DirLoss
from st_magnitude.modules.nap_head import NAPHead, modality_key

logger = logging.getLogger(__name__)

__all__ = ["CachedL2DirLoss"]


class CachedL2DirLoss(CachedLoss):
    _delegated_to_wrapped_loss = (
        "lambda_",
        "temperature",
        "tn_temperature",
        "eps",
        "gather_across_devices",
        "tap",
        "nap_head",
        "callback_attached",
        "scale",
        "last_stats",
        "pop_stats",
        "stats_prefix",
    )

    def __init__(
        self,
        model: nn.Module,
        lambda_: float = 0.5,
        temperature: float = 0.02,
        tn_temperature: float = 0.01,
        nap_head: NAPHead | None = None,
        nap_input: str = "auto",
        final_norm: str | dict[str, str] | None = None,
        nap_hidden_features: int | None = None,
        eps: float = 1e-8,
        mini_batch_size: int = 32,
        show_progress_bar: bool = False,
        gather_across_devices: bool = False,
    ) -> None:
        """GradCache version of :class:`L2DirLoss`: large batches in bounded memory, same loss and gradients.

        Each mini-batch is embedded once without gradients; the cached quantity per input is the concatenation
        ``[embedding, NAP input]``, so step (2) computes eq. 8 over the whole batch and caches the gradient of
        *both* the normalized embedding (InfoNCE) and the NAP input (InfoTN), and step (3) back-propagates both
        into the backbone. (The authors' release builds the NAP-side surrogate but never back-propagates it;
        here the two parts provably match :class:`L2DirLoss` — see the gradient-equality test.)
        The NAP head's own gradient is computed in step (2) and handed back through the returned loss, so the
        Trainer's gradient-accumulation divisor and the fp16 loss scale reach it exactly as they reach the backbone.
        The loss over the batch is computed in one piece (``B × B`` logits), so ``mini_batch_size`` bounds the
        backbone's activations only. Like ST's cached losses it wraps an :class:`L2DirLoss` built from the same
        arguments (``self.loss``; ``lambda_``, ``nap_head``, ... read and assign through to it), whose
        ``compute_loss_from_embeddings`` computes eq. 8 on the cached embeddings.

        Args:
            model, lambda_, temperature, tn_temperature, nap_head, nap_input, final_norm, nap_hidden_features, eps,
                gather_across_devices: as in :class:`L2DirLoss`.
            mini_batch_size: inputs embedded per forward pass (memory knob; the result does not depend on it).
            show_progress_bar: show a progress bar over the mini-batches.

        References:
            - L2Dir (Zong et al., ACL 2026), eq. 8; GradCache: Scaling Deep Contrastive Learning Batch Size under
              Memory Limited Setup (Gao et al., 2021).

        Requirements:
            1. (anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples.
            2. ``LossStateCallback(loss)`` in the trainer's callbacks (NAP head checkpointing).
            3. Dropout randomness is replayed exactly (ST's ``RandContext``).

        Inputs:
            +-------------------------------------------------+--------+
            | Inputs                                          | Labels |
            +=================================================+========+
            | (anchor, positive) pairs                        | none   |
            +-------------------------------------------------+--------+
            | (anchor, positive, negative_1, ..., negative_n) | none   |
            +-------------------------------------------------+--------+

        Recommendations:
            - Use it when the batch does not fit in memory with :class:`L2DirLoss` (the paper trains its 2B
              models with GradCache at batch 1024).

        Relations:
            - Equal loss and gradients to :class:`L2DirLoss` (up to float rounding).

        Example:
            ::

                from sentence_transformers import SentenceTransformer
                from st_magnitude.callbacks import LossStateCallback
                from st_magnitude.losses.cached_l2dir import CachedL2DirLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                loss = CachedL2DirLoss(model, mini_batch_size=16)
                callbacks = [LossStateCallback(loss)]  # pass to SentenceTransformerTrainer(..., callbacks=callbacks)
        """
        super().__init__(
            L2DirLoss(
                model,
                lambda_=lambda_,
                temperature=temperature,
                tn_temperature=tn_temperature,
                nap_head=nap_head,
                nap_input=nap_input,
                final_norm=final_norm,
                nap_hidden_features=nap_hidden_features,
                eps=eps,
                gather_across_devices=gather_across_devices,
            ),
            mini_batch_size,
            show_progress_bar=show_progress_bar,
        )
        self._call: _CachedCall | None = None

    def embed_minibatch(self, sentence_feature, begin, end, with_grad, copy_random_state, random_state=None):
        """Embed one mini-batch; return ``[embedding, NAP input]`` concatenated, so both get a cached gradient."""
        with self.loss.tap.capturing():
            reps, random_state = super().embed_minibatch(
                sentence_feature, begin, end, with_grad, copy_random_state, random_state
            )
            _, state = self.loss.tap.collect()
        if self._call is not None:  # step (1); step (3) re-embeds during backward, after forward has returned
            self._call.embedding_width = reps.shape[-1]
        return torch.cat([reps, state.to(reps.dtype)], dim=-1), random_state

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """Eq. 8 over the whole batch by :meth:`L2DirLoss.compute_loss_from_embeddings` on the cached ``[embedding,
        NAP input]``."""
        call = self._call
        d = call.embedding_width
        columns = [torch.cat(r) for r in reps]
        parts = self.loss.compute_loss_from_embeddings(
            [c[:, :d] for c in columns], [c[:, d:] for c in columns], labels, modalities=call.modalities
        )
        nce, tn = parts["infonce"], parts["infotn"]
        loss = nce + tn
        if with_backward:
            loss.backward()
            loss, nce, tn = loss.detach(), nce.detach(), tn.detach()
        call.parts = (nce, tn)
        return loss

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        sentence_features = list(sentence_features)
        self.loss._check_columns(sentence_features)
        self._call = _CachedCall(modalities=[modality_key(f.get("modality")) for f in sentence_features])
        try:
            sync_loss_held_gradients(self)
            loss = forward_cached_scaled(self, sentence_features, labels)
            nce, tn = self._call.parts
        finally:
            self._call = None
        # Split the hooked total into its two parts for logging; their sum is `loss` and both gradients reach
        # its hook (weights w and 1 − w add up to 1).
        total = (nce + tn).detach()
        w = (nce.detach() / total) if float(total) != 0.0 else torch.tensor(0.5, device=loss.device)
        return {"infonce": loss * w, "infotn": loss * (1.0 - w)}

    def get_config_dict(self) -> dict[str, Any]:
        return {**self.loss.get_config_dict(), "mini_batch_size": self.mini_batch_size}


@dataclass
class _CachedCall:
    """What one :meth:`CachedL2DirLoss.forward` call hands from its steps to the next (dropped when it returns)."""

    modalities: list[str]
    embedding_width: int | None = None
    parts: tuple[Tensor, Tensor] | None = None
