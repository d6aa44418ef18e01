"""RevelaLoss: self-supervised retriever learning through a causal LM's in-batch attention (paper 004, Revela).

The math lives in :mod:`st_magnitude.modules.revela_attention` (eqs. 5-8) and here (eq. 2 objective, eq. 7's Sim).
See docs/revela.md for the faithful / our-choice table.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude._warnings import ZeroRetrieverGradientWarning
from st_magnitude.losses import _batch
from st_magnitude.losses._checks import positive_finite, positive_float32
from st_magnitude.losses._device_count import DeviceCount
from st_magnitude.losses._loss_state import sync_loss_held_gradients
from st_magnitude.modules.revela_attention import (
    REVELA_ATTENTION,
    STATE_KWARG,
    RevelaAttentionState,
    enable_revela_attention,
)
from st_magnitude.similarity import get_similarity

logger = logging.getLogger(__name__)

__all__ = ["RevelaLoss", "ZeroRetrieverGradientWarning"]


_B2_MESSAGE = (
    "RevelaLoss needs at least 3 chunks per in-batch set; got {b}. Sim excludes the diagonal and each row sums to "
    "1, so with B = 2 every row has a single candidate and Sim is the constant [[0, 1], [1, 0]] whatever the "
    "retriever computes: the retriever's gradient is exactly zero (and with B = 1 there is no candidate at all). "
    "Use groups of >= 3 related chunks (paper: 16), e.g. build_revela_dataset(group_size=16)."
)

#: Sim's off-diagonal entries are at least exp(−2/τ)/(B − 1): cosines lie in [−1, 1] and a row's softmax denominator,
#: relative to its maximum, is at most B − 1. While 2/τ + ln(B − 1) stays below this (fp32's smallest normal number is
#: e^−87.3; the margin covers rounding and an exp that flushes subnormals to zero), no pair has Sim = 0 exactly, so the
#: in-batch term computes every pair without looking for zero-weight ones (a ``nonzero``: a host read).
ZERO_FREE_EXPONENT = 80.0

#: The largest group for which :attr:`RevelaLoss.host_reads_per_step` answers (the rule above depends on B).
DECLARED_GROUP_LIMIT = 1 << 16


class RevelaLoss(nn.Module):
    def __init__(
        self,
        model,
        lm: nn.Module,
        temperature: float = 1e-4,
        v_norm: bool = True,
        eps: float = 1e-6,
        train_lm: bool = True,
        in_batch: bool = True,
        cache_grad: bool = True,
        checkpoint_in_batch: bool = False,
    ) -> None:
        """Revela (Cai et al., 2025): train a retriever through a causal LM whose next-token prediction for each
        chunk also attends to the other chunks of its in-batch set, weighted by the retriever's similarities.

        For a set of B related chunks the retriever embeds each chunk's query view q_i (its first half) and
        passage view p_j (the full chunk) and forms ``Sim[i, j] = softmax_{j≠i}(cos(q_i, p_j)/τ)`` (paper eq. 7
        and §3.3, diagonal excluded, rows sum to 1). The LM runs twice over the chunks: pass 1 is a plain causal
        forward that records every layer's post-RoPE keys/values; in pass 2 every decoder layer adds to its own
        causal attention output the in-batch term ``Σ_{j≠i} Sim[i, j] · b̃_ij``, where ``b_ij`` lets chunk i's
        queries attend over all (non-padding) tokens of chunk j and ``b̃_ij`` divides it by the attention-weighted
        value norms (V-normalization, eq. 6). The loss is the LM's next-token cross-entropy of pass 2 (eq. 2),
        token mean over all chunks; the retriever learns only through Sim, the LM through both passes.

        The LM lives in the loss as ``self.lm`` (not ``model``, so the trainer never swaps it); its attention is
        switched to the registered Revela attention function (a stock SDPA forward when no Revela state is
        passed). ST checkpoints do not contain loss parameters: add ``st_magnitude.callbacks.LossStateCallback(loss)``
        (part of ``revela_callbacks(loss)``) to the trainer so the LM's trainable tensors (full weights or ``peft``
        adapters) are saved into each checkpoint and restored on resume.

        Args:
            model: the retriever, any SentenceTransformer (cosine is used whatever it ends in, paper §3.3).
            lm: a causal LM of a Llama/Qwen2/Mistral architecture (``transformers`` ``*ForCausalLM``), or a
                ``peft`` wrapper of one (LoRA, paper: rank 256 on both models).
            temperature: τ of Sim (paper and official code: 1e-4, nearly one-hot; larger values such as 0.05 give
                a smoother signal on small models).
            v_norm: apply V-normalization (paper eq. 6; ``False`` is the "w/o V-norm" ablation of Fig. 4).
            eps: ε of eq. 6 (official code 1e-6).
            train_lm: if False the LM is frozen (official ``freeze_reference``) and pass 1 runs without gradient.
            in_batch: if False the in-batch term is switched off and the loss is the plain LM loss (for checks).
            cache_grad: if True (official code) the gradient also flows through pass 1's keys/values into the LM;
                False runs pass 1 without gradient (our speed option: saves pass 1's backward; the retriever's
                gradient is unchanged in form, the LM then learns only through pass 2).
            checkpoint_in_batch: recompute the in-batch attention in backward (``torch.utils.checkpoint``) instead
                of storing its intermediates for every computed chunk pair (those with Sim > 0; all B·(B-1) of
                them when τ is large) and layer: same gradients, less memory.

        References:
            - Revela: Dense Retriever Learning via Language Modeling, Cai et al., 2025: https://arxiv.org/abs/2506.16552
            - Official code (needs a forked transformers; not used here): https://github.com/TRUMANCFY/Revela

        Requirements:
            1. Sets of B ≥ 3 related chunks per batch (same/neighbouring documents or BM25 neighbours); random
               batches collapse (paper "Revela-random"). Build them with
               :func:`st_magnitude.data.revela.build_revela_dataset`.
            2. The batch sampler :class:`~st_magnitude.data.revela.RevelaGroupBatchSampler` (one group per batch)
               and the collator :class:`~st_magnitude.data.revela.RevelaDataCollator` (adds the LM's tokens).
            3. An LM with ``model_type`` in llama, qwen2, mistral, qwen3.

        Inputs:
            +-------------------------------------------+-------------------------+
            | Texts                                     | Labels                  |
            +===========================================+=========================+
            | (query = first half of chunk, passage =   | group id (one per batch |
            | chunk) + LM tokens of the chunk           | set; checked, not used) |
            +-------------------------------------------+-------------------------+

        Recommendations:
            - Train the retriever and the LM with one optimizer (the trainer takes the LM's parameters from the
              loss); ``learning_rate_mapping={r"lm\\.": 1e-5}`` gives the LM its own learning rate.
            - Keep B ≥ 8 and the groups topical; watch ``temperature``: with τ = 1e-4 the retriever's gradient
              concentrates on near-ties, and is exactly zero for a batch whose Sim rows are all one-hot (warned with
              :class:`~st_magnitude.losses.revela.ZeroRetrieverGradientWarning`; counted in ``loss.one_hot_steps``).
              With all-MiniLM-L6-v2 on SciFact groups that is most batches: use τ ≈ 0.01–0.05 for such encoders.

        Relations:
            - Unlike :class:`~sentence_transformers.sentence_transformer.losses.MultipleNegativesRankingLoss` there
              is no positive label: the supervision is the LM's next-token likelihood.
            - REPLUG-style distillation (a frozen LM scoring D_i given D_j) is the paper's baseline; Revela trains
              the LM jointly and needs no per-pair LM forward.

        Example:
            ::

                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from sentence_transformers import SentenceTransformerTrainingArguments
                from transformers import AutoModelForCausalLM, AutoTokenizer

                from st_magnitude.callbacks import revela_callbacks
                from st_magnitude.losses.revela import RevelaLoss
                from st_magnitude.data.revela import RevelaDataCollator, RevelaGroupBatchSampler, build_revela_dataset

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                lm = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
                lm_tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
                corpus = {"d1": {"title": "", "text": "..."}, ...}  # any unlabeled corpus
                train_dataset = build_revela_dataset(corpus, group_size=8, grouping="bm25")

                loss = RevelaLoss(model, lm, temperature=0.05)
                args = SentenceTransformerTrainingArguments(
                    output_dir="runs/revela",
                    per_device_train_batch_size=8,  # = group size
                    batch_sampler=RevelaGroupBatchSampler,
                    learning_rate=1e-5,
                )
                trainer = SentenceTransformerTrainer(
                    model=model,
                    args=args,
                    train_dataset=train_dataset,
                    loss=loss,
                    data_collator=RevelaDataCollator(preprocess_fn=model.preprocess, lm_tokenizer=lm_tokenizer),
                    callbacks=revela_callbacks(loss),  # LM checkpoints (LossStateCallback) and LM gradient clipping
                )
                trainer.train()
        """
        super().__init__()
        positive_finite("temperature", temperature, "attention logits are divided by it", learnable=False)
        positive_float32("eps", eps, "keeps the norms away from 0", hi=1.0)
        self.model = model
        self.lm = lm
        self.temperature = float(temperature)
        self.v_norm = bool(v_norm)
        self.eps = float(eps)
        self.train_lm = bool(train_lm)
        self.in_batch = bool(in_batch)
        self.cache_grad = bool(cache_grad)
        self.checkpoint_in_batch = bool(checkpoint_in_batch)
        self.similarity = get_similarity("cosine")  # paper §3.3: S_ij = cos(h_i, h_j)
        enable_revela_attention(lm)
        if not self.train_lm:
            for param in self.lm.parameters():
                param.requires_grad_(False)
        self.last_sim: Tensor | None = None
        self._one_hot_steps = 0  # batches whose Sim was one-hot in every row (no retriever gradient), read so far
        # the per-step checks, counted on the device and read on the first calls and every FINITE_CHECK_INTERVAL
        self._mixed_groups, self._empty_chunks, self._one_hot = DeviceCount(), DeviceCount(), DeviceCount()
        # relevance diagnostics (see relevance_diagnostics / RevelaDiagnosticsCallback)
        self.diagnose_next_batch = False
        self.diagnostics_step: int | None = None
        self.diagnostics: list[dict[str, float]] = []
        self.diagnostics_generator = torch.Generator().manual_seed(0)
        self.diagnostics_shuffles = 1

    @property
    def host_reads_per_step(self) -> int:
        """Host reads per training step in this loss's own code (see ``FamilyLoss.host_reads_per_step``).

        0 when Sim cannot hold an exact zero (:data:`ZERO_FREE_EXPONENT`, for groups of up to
        :data:`DECLARED_GROUP_LIMIT` chunks: τ ≥ 0.0291); otherwise 1, the ``nonzero`` that finds the in-batch
        pairs with Sim > 0 (at τ = 1e-4 most pairs are skipped, which is worth the read). The batch checks (one
        group, an LM token in every chunk) and the one-hot warning are counted on the device and read on the first
        calls and every ``FINITE_CHECK_INTERVAL`` calls (:class:`~st_magnitude.losses._device_count.DeviceCount`).
        """
        return int(self._sim_may_hold_zeros(DECLARED_GROUP_LIMIT))

    def _sim_may_hold_zeros(self, bsz: int) -> bool:
        """Whether some Sim[i, j], j ≠ i, can be exactly 0 in fp32 for a group of ``bsz`` chunks."""
        return 2.0 / self.temperature + math.log(max(bsz - 1, 1)) > ZERO_FREE_EXPONENT

    @property
    def one_hot_steps(self) -> int:
        """Batches whose Sim was one-hot in every row (no retriever gradient) so far (a host read when some are
        still counted on the device)."""
        return self._one_hot_steps + self._one_hot.peek()

    # ------------------------------------------------------------------------------------------------- Sim
    def similarity_matrix(self, query_embeddings: Tensor, passage_embeddings: Tensor) -> Tensor:
        """``Sim[i, j] = exp(S_ij/τ) / Σ_{k≠i} exp(S_ik/τ)`` for j ≠ i, ``Sim[i, i] = 0`` (paper §3.3 and eq. 7).

        ``S = cos(query view i, passage view j)`` ([B, B], not symmetric: row = first half of chunk i).
        """
        bsz = query_embeddings.shape[0]
        if bsz < 3:
            raise ValueError(_B2_MESSAGE.format(b=bsz))
        if passage_embeddings.shape[0] != bsz:
            raise ValueError(
                f"query and passage views must have the same number of chunks; got {bsz} and "
                f"{passage_embeddings.shape[0]}"
            )
        scores = self.similarity(query_embeddings.float(), passage_embeddings.float()) / self.temperature
        eye = torch.eye(bsz, dtype=torch.bool, device=scores.device)
        return torch.softmax(scores.masked_fill(eye, float("-inf")), dim=-1)

    # ------------------------------------------------------------------------------------------------- LM
    def lm_loss(self, input_ids: Tensor, attention_mask: Tensor, sim: Tensor | None) -> Tensor:
        """Pass 1 (record K^e, V^e) + pass 2 (in-batch term in every layer); the HF shifted CE of pass 2.

        ``sim=None`` runs a single plain causal-LM forward (the in-batch term off).
        """
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        if sim is None:
            return self.lm(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        empty = self._empty_chunks.add((attention_mask.sum(dim=1) == 0).any())
        if empty:
            found = _deferred(self._empty_chunks, empty)
            suffix = f" ({found})" if found else ""
            raise ValueError(f"every chunk must have at least one non-padding LM token{suffix}")
        _check_lm_checkpointing(self.lm)
        # Two state objects, one per pass: with gradient checkpointing of the LM's decoder layers the layers of BOTH
        # passes are re-run in backward with the keyword arguments of their forward. A single mutable state would
        # then replay pass 1 in "in_batch" mode (a different graph, so torch's recompute check fails).
        record_state = RevelaAttentionState(
            mode="record",
            key_mask=attention_mask.bool(),
            v_norm=self.v_norm,
            eps=self.eps,
            checkpoint=self.checkpoint_in_batch,
        )
        record_grad = self.train_lm and self.cache_grad and torch.is_grad_enabled()
        grad_ctx = torch.enable_grad() if record_grad else torch.no_grad()
        with grad_ctx:
            # pass 1 (e-stream): only the K/V matter, so only one position goes through the LM head
            self.lm(
                input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1, **{STATE_KWARG: record_state}
            )
        if len(record_state.kv) == 0:
            raise RuntimeError(
                f"the LM's attention did not go through {REVELA_ATTENTION!r}; is config._attn_implementation set?"
            )
        return self._in_batch_ce(input_ids, attention_mask, labels, sim, record_state, training=True)

    def _in_batch_ce(
        self, input_ids: Tensor, attention_mask: Tensor, labels: Tensor, sim: Tensor, record, training: bool = False
    ) -> Tensor:
        """Pass 2 (paper eq. 5): the LM's cross-entropy when each chunk also attends to the others' pass-1 keys and
        values (``record``), weighted by ``sim``. ``training``: the loss's pass 2, which may be checkpointed
        (``checkpoint_in_batch``) and reads a copy of the K/V (a replayed pass 1 must not touch what it reads);
        the diagnostics' forwards without gradient read them as they are."""
        state = RevelaAttentionState(
            mode="in_batch",
            sim=sim,
            skip_zero_pairs=self._sim_may_hold_zeros(sim.shape[0]),
            key_mask=record.key_mask,
            v_norm=self.v_norm,
            eps=self.eps,
            checkpoint=self.checkpoint_in_batch and training,
            kv=dict(record.kv) if training else record.kv,
        )
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **{STATE_KWARG: state}).loss

    def compute_loss_from_embeddings(
        self,
        query_embeddings: Tensor,
        passage_embeddings: Tensor,
        lm_input_ids: Tensor,
        lm_attention_mask: Tensor,
    ) -> Tensor:
        """Sim from the two retriever views, then the Revela LM loss (paper eq. 2).

        Args:
            query_embeddings: ``[B, n]`` embeddings of the query views (first halves).
            passage_embeddings: ``[B, n]`` embeddings of the passage views (full chunks).
            lm_input_ids: ``[B, L]`` LM tokens of the chunks (right padded).
            lm_attention_mask: ``[B, L]`` 1 for real tokens.
        """
        if lm_input_ids.shape[0] != query_embeddings.shape[0]:
            raise ValueError(
                f"the LM batch ({lm_input_ids.shape[0]} chunks) must match the retriever batch "
                f"({query_embeddings.shape[0]} chunks)"
            )
        sim = self.similarity_matrix(query_embeddings, passage_embeddings)
        self.last_sim = sim.detach()
        one_hot = self._one_hot.add((self.last_sim.max(dim=1).values == 1.0).all()) if sim.requires_grad else None
        if one_hot:
            self._one_hot_steps += one_hot
            warnings.warn(
                "RevelaLoss: every row of Sim is one-hot (row maximum 1.0 in fp32)"
                + (f" in {one_hot} of the last {self._one_hot.span} batches" if self._one_hot.span > 1 else "")
                + " at "
                f"temperature={self.temperature:g}, so the retriever gets no gradient from this batch, zero up to "
                "fp32 rounding (the softmax Jacobian Sim·(δ − Sim) vanishes; "
                "fp32 exp underflows once a cosine is about 100·τ below its row's best). The paper's τ = 1e-4 was "
                "used with decoder (EOS-pooled LLM) retrievers; for encoders whose cosines are spread out, such as "
                "all-MiniLM-L6-v2, use a larger temperature (e.g. 0.01-0.05). Count so far: loss.one_hot_steps.",
                ZeroRetrieverGradientWarning,
                stacklevel=2,
            )
        lm_device = next(self.lm.parameters()).device
        lm_input_ids, lm_attention_mask = lm_input_ids.to(lm_device), lm_attention_mask.to(lm_device)
        value = self.lm_loss(lm_input_ids, lm_attention_mask, sim.to(lm_device) if self.in_batch else None)
        if self.diagnose_next_batch:
            self.diagnose_next_batch = False
            record = self.relevance_diagnostics(
                sim.detach().to(lm_device), lm_input_ids, lm_attention_mask, shuffles=self.diagnostics_shuffles
            )
            record["step"] = self.diagnostics_step
            self.diagnostics.append(record)
            logger.info("Revela diagnostics: %s", record)
        return value

    # ------------------------------------------------------------------------------------------------- diagnostics
    def shuffled_sim(self, sim: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Sim with the off-diagonal entries of each row permuted at random (the diagonal stays 0).

        Every row keeps its weights (row sum 1, same sharpness), but which chunk gets which weight is random: the
        control for "does the retriever's choice of chunks matter to the LM?".
        """
        generator = self.diagnostics_generator if generator is None else generator
        bsz = sim.shape[0]
        shuffled = torch.zeros_like(sim)
        for i in range(bsz):
            others = torch.tensor([j for j in range(bsz) if j != i], device=sim.device)
            perm = torch.randperm(bsz - 1, generator=generator).to(sim.device)
            shuffled[i, others] = sim[i, others[perm]]
        return shuffled

    @torch.no_grad()
    def relevance_diagnostics(
        self, sim: Tensor, input_ids: Tensor, attention_mask: Tensor, shuffles: int = 1
    ) -> dict[str, float]:
        """LM cross-entropies that show whether relevance matters yet (paper 004's claim), without gradient.

        On one batch, with the LM in eval mode (no dropout, so the three numbers differ only by their Sim):

        * ``ce_revela``: next-token CE with the in-batch term weighted by ``sim`` (the training objective);
        * ``ce_shuffled_sim``: the same with :meth:`shuffled_sim` (each row's weights given to random chunks),
          averaged over ``shuffles`` independent permutations (one permutation is noisy: on SciFact groups of 8
          with a raw SmolLM2 retriever the gap of single permutations ranged over ±0.4 nats);
        * ``ce_plain_lm``: the plain causal LM, no in-batch term (pass 1's own logits).

        ``ce_gap_shuffled = ce_revela − ce_shuffled_sim`` is negative once the retriever's choice of chunks helps
        the LM; ``ce_gap_plain = ce_revela − ce_plain_lm`` is negative once the in-batch context helps at all.
        ``sim_row_max`` is the mean row maximum of Sim (1 = one-hot). Costs 2 + ``shuffles`` LM forwards without
        gradient.
        """
        if int(shuffles) < 1:
            raise ValueError(f"shuffles must be >= 1; got {shuffles}")
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        was_training = self.lm.training
        self.lm.eval()
        try:
            record = RevelaAttentionState(
                mode="record", key_mask=attention_mask.bool(), v_norm=self.v_norm, eps=self.eps
            )
            ce_plain = self.lm(
                input_ids=input_ids, attention_mask=attention_mask, labels=labels, **{STATE_KWARG: record}
            ).loss

            def in_batch_ce(weights: Tensor) -> Tensor:
                return self._in_batch_ce(input_ids, attention_mask, labels, weights, record)

            ce_real = in_batch_ce(sim)
            ce_shuffled = sum(in_batch_ce(self.shuffled_sim(sim)) for _ in range(int(shuffles))) / int(shuffles)
        finally:
            self.lm.train(was_training)
        ce_real, ce_shuffled, ce_plain = float(ce_real), float(ce_shuffled), float(ce_plain)
        return {
            "ce_revela": ce_real,
            "ce_shuffled_sim": ce_shuffled,
            "ce_plain_lm": ce_plain,
            "ce_gap_shuffled": ce_real - ce_shuffled,
            "ce_gap_plain": ce_real - ce_plain,
            "sim_row_max": float(sim.max(dim=1).values.mean()),
        }

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        if len(features) != 3 or "input_ids" not in features[2]:
            raise ValueError(
                "RevelaLoss expects three feature dicts: the query view, the passage view and the LM tokens "
                "(lm_input_ids / lm_attention_mask). Use st_magnitude.data.revela.RevelaDataCollator as the "
                f"trainer's data_collator and a dataset with columns (query, passage, label); got {len(features)} "
                f"feature dicts"
            )
        mixed = None
        if labels is not None and labels.numel() > 0:
            flat = labels.view(-1)
            mixed = self._mixed_groups.add((flat != flat[0]).any())
        if mixed:
            found = _deferred(self._mixed_groups, mixed) or f"labels {sorted(set(labels.view(-1).tolist()))}"
            raise ValueError(
                f"a batch mixes chunks of different groups ({found}); unrelated chunks must not share one Sim matrix "
                "(paper: random batches collapse). Use RevelaGroupBatchSampler with per_device_train_batch_size "
                "equal to the group size"
            )
        query_features, passage_features, lm_features = features
        bsz = query_features["input_ids"].shape[0]
        if bsz < 3:
            raise ValueError(_B2_MESSAGE.format(b=bsz))
        query_embeddings = self.model(query_features)["sentence_embedding"]
        passage_embeddings = self.model(passage_features)["sentence_embedding"]
        # a trainable LM lives in the loss, outside DDP: under DDP its gradients are averaged here like the model's
        # (one all_reduce per LM tensor: correct, not bucketed)
        sync_loss_held_gradients(self)
        return self.compute_loss_from_embeddings(
            query_embeddings, passage_embeddings, lm_features["input_ids"], lm_features["attention_mask"]
        )

    def get_config_dict(self) -> dict[str, Any]:
        lm_config = getattr(self.lm, "config", None)
        return {
            "temperature": self.temperature,
            "v_norm": self.v_norm,
            "eps": self.eps,
            "train_lm": self.train_lm,
            "in_batch": self.in_batch,
            "cache_grad": self.cache_grad,
            "checkpoint_in_batch": self.checkpoint_in_batch,
            "lm": getattr(lm_config, "_name_or_path", None) or getattr(lm_config, "model_type", None),
        }

    @property
    def citation(self) -> str:
        return """
@article{cai2025revela,
    title={Revela: Dense Retriever Learning via Language Modeling},
    author={Cai, Fengyu and Chen, Tong and Zhao, Xinran and Chen, Sihao and Zhang, Hongming and Wu, Sherry Tongshuang
        and Gurevych, Iryna and Koeppl, Heinz},
    journal={arXiv preprint arXiv:2506.16552},
    year={2025}
}
"""


def _deferred(check: DeviceCount, count: int) -> str:
    """What an error says when its check was counted over several calls ("" when it was read at this batch)."""
    if check.span <= 1:
        return ""
    return (
        f"found in {count} of the last {check.span} batches: on an accelerator this check is read every "
        f"{_batch.FINITE_CHECK_INTERVAL} calls to avoid a host sync per step; set "
        "st_magnitude.losses._batch.FINITE_CHECK_INTERVAL = 1 to stop at the batch"
    )


def _check_lm_checkpointing(lm: nn.Module) -> None:
    """Reject reentrant gradient checkpointing of the LM's layers (see :meth:`RevelaLoss.lm_loss`).

    Reentrant checkpointing (``use_reentrant=True``) tracks gradients only through a layer's positional tensor
    inputs. Sim and pass 1's keys/values reach each layer inside the ``revela_state`` keyword, so the retriever and
    pass 1 would silently get no gradient. Non-reentrant checkpointing (transformers' default) tracks every tensor.
    """
    for module in lm.modules():
        if not getattr(module, "gradient_checkpointing", False):
            continue
        func = getattr(module, "_gradient_checkpointing_func", None)
        if getattr(func, "keywords", {}).get("use_reentrant", False):
            raise ValueError(
                "RevelaLoss needs non-reentrant gradient checkpointing of the LM: Sim and pass 1's keys/values reach "
                "the decoder layers through a keyword argument, which reentrant checkpointing does not track (the "
                "retriever would get no gradient). Call lm.activation_checkpointing_enable() (or the older "
                "gradient_checkpointing_enable()) without kwargs, or with {'use_reentrant': False}"
            )
