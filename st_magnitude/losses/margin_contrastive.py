"""Margin-MSE + contrastive loss, the base of paper 003's two training recipes (Killingback et al., "Scaling Laws
for Embedding Dimension in IR"); the recipes are ``bert_recipe.BertRecipeLoss`` and ``ettin_recipe.EttinRecipeLoss``.

BERT recipe (paper eqs. 1–3)::

    L_margin-mse  = mean_{b,j} ((s(q_b,p_b) − s(q_b,n_bj)) − (t(q_b,p_b) − t(q_b,n_bj)))²      (eq. 1)
    L_contrastive = −mean_b log softmax_c( s(q_b, p_c) )_b     c over the batch's positives     (eq. 2)
    L_total       = L_margin-mse + L_contrastive                                                (eq. 3)

with s the raw dot product (no normalisation, no temperature) and t the teacher's scores. The hard negatives are
*not* in the contrastive denominator ("the sampling strategy results in relevant passages in the hard negatives").

Ettin recipe (eq. 4): ``L_total = L_contrastive`` on L2-normalised embeddings with τ = 0.02 (logits = cos/τ =
50·cos) and the negatives = every in-batch passage except the own positive (other positives and all hard negatives).

All similarity math comes from :mod:`st_magnitude.similarity` (``dot`` / ``cosine`` / the magnitude-aware
variants), so the same recipes also train qnorm / dnorm / learnable models.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from st_magnitude.losses._batch import check_columns, check_finite, check_has_negatives, feature_rows
from st_magnitude.losses._checks import positive_finite
from st_magnitude.losses._common import set_roles
from st_magnitude.model._legacy_fit import refuse_fit_with_router
from st_magnitude.similarity import Similarity, get_similarity

logger = logging.getLogger(__name__)

__all__ = ["IN_BATCH_NEGATIVES", "SCALING_CITATION", "MarginContrastiveLoss", "teacher_scores"]

#: Which in-batch passages form the contrastive denominator.
IN_BATCH_NEGATIVES: tuple[str, ...] = ("positives", "all")

SCALING_CITATION = """
@inproceedings{killingback2026scaling,
    title={Scaling Laws for Embedding Dimension in Information Retrieval},
    author={Killingback, Julian and Rafiee, Mahta and Manas, Madine and Zamani, Hamed},
    booktitle={Proceedings of the 49th International ACM SIGIR Conference on Research and Development in
               Information Retrieval},
    year={2026},
    doi={10.1145/3805712.3809708}
}
@misc{hofstatter2021improving,
    title={Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation},
    author={Sebastian Hofst{\\"a}tter and Sophia Althammer and Michael Schr{\\"o}der and Mete Sertkan and
            Allan Hanbury},
    year={2021},
    eprint={2010.02666},
    archivePrefix={arXiv},
    primaryClass={cs.IR}
}
"""


class MarginContrastiveLoss(nn.Module):
    #: host reads per training step in this loss's own code (see ``FamilyLoss.host_reads_per_step``)
    host_reads_per_step: int = 0

    def __init__(
        self,
        model: nn.Module,
        similarity: str | Similarity = "dot",
        scale: float = 1.0,
        in_batch_negatives: str = "positives",
        margin_mse_weight: float = 1.0,
        contrastive_weight: float = 1.0,
        set_roles: bool = True,
    ) -> None:
        """
        Margin-MSE against teacher score margins plus an in-batch cross-entropy, computed from one forward pass
        (paper 003 eqs. 1–4). :class:`BertRecipeLoss` and :class:`EttinRecipeLoss` are this loss with the paper's
        two configurations; use this class directly for anything in between (e.g. a CL-only BERT ablation,
        paper §4.3, with ``margin_mse_weight=0``).

        Args:
            model: the SentenceTransformer to train.
            similarity: a similarity name from :mod:`st_magnitude.similarity` (``dot``, ``cosine``, ``qnorm``,
                ``dnorm``, ``learnable``) or a :class:`~st_magnitude.similarity.Similarity` instance. Used for both
                terms. For a model that already carries its similarity (``apply_similarity``) use ``dot``.
            scale: contrastive logits are ``scale · s(q, p)``, i.e. 1/τ (BERT: 1.0; Ettin: 50.0 = 1/0.02).
                Margin-MSE uses the unscaled similarity.
            in_batch_negatives: ``"positives"`` — the denominator holds only the batch's positives (BERT recipe);
                ``"all"`` — every in-batch passage, positives and hard negatives, except the own positive
                (Ettin recipe).
            margin_mse_weight: weight of the Margin-MSE term (paper: 1 for BERT, 0 for Ettin).
            contrastive_weight: weight of the cross-entropy term (paper: 1).
            set_roles: set ``features["task"]`` to ``"query"`` for the first column and ``"document"`` for the
                others when the batch carries no task (``router_mapping`` not given), so role-routed models
                (qnorm / dnorm exports) encode each side in its role.

        References:
            - Killingback et al., Scaling Laws for Embedding Dimension in Information Retrieval, SIGIR 2026
              (eqs. 1–4, §3.3).
            - Hofstätter et al., Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge
              Distillation, https://arxiv.org/abs/2010.02666 (Margin-MSE).
            - docs/dimension_scaling.md (choices where the paper is silent).

        Requirements:
            1. (query, positive, negative_1, ..., negative_k) rows; k ≥ 0 (k = 0 only without Margin-MSE).
            2. For Margin-MSE: teacher scores as the label column, e.g. from :func:`teacher_scores`.

        Inputs:
            +------------------------------------------------+--------------------------------------------------------+
            | Texts                                          | Labels                                                 |
            +================================================+========================================================+
            | (query, positive, negative_1, ..., negative_k) | [t(q, pos), t(q, neg_1), ..., t(q, neg_k)]  (raw)      |
            +------------------------------------------------+--------------------------------------------------------+
            | (query, positive, negative_1, ..., negative_k) | [t(q, pos) − t(q, neg_j) for j in 1..k]  (margins)     |
            +------------------------------------------------+--------------------------------------------------------+
            | (query, positive, negative_1, ..., negative_k) | none (only with ``margin_mse_weight=0``)               |
            +------------------------------------------------+--------------------------------------------------------+

            A 1-D label of length B is read as the margin of a single negative (k = 1).

        Recommendations:
            - Large batches: the contrastive term's negatives are in-batch.
            - Use ``BatchSamplers.NO_DUPLICATES`` so a passage is not another query's in-batch negative by accident.

        Relations:
            - ``margin_mse_weight=0, in_batch_negatives="all"`` equals ST's ``MultipleNegativesRankingLoss`` with
              the same similarity and scale.
            - ``contrastive_weight=0`` with one negative equals ST's ``MarginMSELoss`` (dot similarity).

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
                from st_magnitude.losses.margin_contrastive import MarginContrastiveLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train = Dataset.from_dict({
                    "query": ["what lowers blood sugar"], "positive": ["fiber slows glucose uptake"],
                    "negative": ["coffee and sleep"], "label": [[4.0, 1.0]],
                })
                loss = MarginContrastiveLoss(model, similarity="dot", in_batch_negatives="positives")
                SentenceTransformerTrainer(model=model, train_dataset=train, loss=loss).train()
        """
        super().__init__()
        self.model = model
        refuse_fit_with_router(model)  # ST's legacy fit cannot pass the router_mapping a Router model needs
        self.similarity = get_similarity(similarity)
        positive_finite("scale", scale, "1/temperature", learnable=False)
        self.scale = float(scale)
        if in_batch_negatives not in IN_BATCH_NEGATIVES:
            raise ValueError(
                f"Unknown in_batch_negatives {in_batch_negatives!r}. Valid values: {', '.join(IN_BATCH_NEGATIVES)}."
            )
        self.in_batch_negatives = in_batch_negatives
        for label, w in (("margin_mse_weight", margin_mse_weight), ("contrastive_weight", contrastive_weight)):
            if not (isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0):
                raise ValueError(f"{label} must be a non-negative number, got {w!r}")
        if margin_mse_weight == 0 and contrastive_weight == 0:
            raise ValueError("margin_mse_weight and contrastive_weight are both 0: the loss would be constant")
        self.margin_mse_weight = float(margin_mse_weight)
        self.contrastive_weight = float(contrastive_weight)
        self.set_roles = bool(set_roles)

    # ------------------------------------------------------------------------------------------------------------
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) < 2:
            raise ValueError(f"expected (query, positive, negative_1..k) columns, got {len(features)} column(s)")
        check_columns([feature_rows(f) for f in features], type(self).__name__)  # before the model sees an empty batch
        if self.set_roles:
            features = set_roles(features)
        embeddings = [self.model(f)["sentence_embedding"] for f in features]
        return self.compute_loss_from_embeddings(embeddings, labels)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None) -> dict[str, Tensor]:
        """Loss terms from column embeddings ``[q[B,m], p[B,m], n_1[B,m], ..., n_k[B,m]]``.

        Returns ``{"margin_mse": ..., "contrastive": ...}`` (weighted; terms with weight 0 are left out). The ST
        trainer sums the dict and logs each term.
        """
        if len(embeddings) < 2:
            raise ValueError(f"expected at least query and positive embeddings, got {len(embeddings)}")
        check_columns([e.shape[0] for e in embeddings], type(self).__name__)
        check_finite(list(embeddings), type(self).__name__, owner=self)
        q, pos, negs = embeddings[0], embeddings[1], list(embeddings[2:])
        if self.contrastive_weight > 0:  # the candidates are the batch's positives (and, with "all", its negatives)
            check_has_negatives(q.shape[0], 1 + len(negs), type(self).__name__)  # one pair, nothing to rank against
            if q.shape[0] <= 1 and self.in_batch_negatives == "positives" and self.margin_mse_weight == 0:
                raise ValueError(
                    f"{type(self).__name__}: a batch of one anchor has no negatives for the contrastive term (its "
                    "candidates are the batch's positives) and no Margin-MSE term, so the loss is constant. Use a "
                    "batch size of at least 2 or in_batch_negatives='all' to score the hard negatives too."
                )
        out: dict[str, Tensor] = {}
        if self.margin_mse_weight > 0:
            out["margin_mse"] = self.margin_mse_weight * self.margin_mse(q, pos, negs, labels)
        if self.contrastive_weight > 0:
            out["contrastive"] = self.contrastive_weight * self.contrastive(q, pos, negs)
        return out

    def margin_mse(self, q: Tensor, pos: Tensor, negs: Sequence[Tensor], labels: Tensor | None) -> Tensor:
        """Paper eq. 1: mean over the B·k (query, hard negative) pairs of (Δ_student − Δ_teacher)²."""
        if not negs:
            raise ValueError("Margin-MSE needs at least one hard-negative column (query, positive, negative, ...)")
        if labels is None:
            raise ValueError(
                "Margin-MSE needs teacher scores as labels ([B, 1+k] raw scores or [B, k] margins); pass a label "
                "column (see teacher_scores) or set margin_mse_weight=0"
            )
        teacher_margin = self._teacher_margins(labels, batch=q.shape[0], k=len(negs)).to(q.device, q.dtype)
        s_pos = self.similarity.pairwise(q, pos)  # [B]
        s_neg = torch.stack([self.similarity.pairwise(q, n) for n in negs], dim=1)  # [B, k]
        student_margin = s_pos.unsqueeze(1) - s_neg
        return (student_margin - teacher_margin).pow(2).mean()

    def contrastive(self, q: Tensor, pos: Tensor, negs: Sequence[Tensor]) -> Tensor:
        """Paper eq. 2: cross-entropy of the own positive against the in-batch candidates, logits = scale·s."""
        candidates = pos if self.in_batch_negatives == "positives" or not negs else torch.cat([pos, *negs], dim=0)
        logits = self.scale * self.similarity(q, candidates)  # [B, B] or [B, B(1+k)]
        target = torch.arange(q.shape[0], device=q.device)  # own positive sits at column b
        return F.cross_entropy(logits, target)

    @staticmethod
    def _teacher_margins(labels: Tensor, batch: int, k: int) -> Tensor:
        labels = torch.as_tensor(labels)
        if labels.dim() == 1 and k == 1 and labels.shape[0] == batch:
            return labels.float().unsqueeze(1)
        if labels.dim() == 2 and labels.shape[0] == batch:
            if labels.shape[1] == k + 1:  # raw scores: [t(q,pos), t(q,n_1), ..., t(q,n_k)]
                return (labels[:, :1] - labels[:, 1:]).float()
            if labels.shape[1] == k:  # already margins
                return labels.float()
        raise ValueError(
            f"labels of shape {tuple(labels.shape)} do not fit a batch of {batch} rows with {k} negative(s): expected "
            f"[{batch}, {k + 1}] raw teacher scores or [{batch}, {k}] margins"
        )

    # ------------------------------------------------------------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        return {
            "similarity": self.similarity.get_config_dict(),
            "scale": self.scale,
            "in_batch_negatives": self.in_batch_negatives,
            "margin_mse_weight": self.margin_mse_weight,
            "contrastive_weight": self.contrastive_weight,
        }

    @property
    def citation(self) -> str:
        return SCALING_CITATION


# ----------------------------------------------------------------------------------------------------------------
# teachers
# ----------------------------------------------------------------------------------------------------------------
def teacher_scores(
    teacher: Any,
    queries: Sequence[str],
    candidates: Sequence[Sequence[str]],
    batch_size: int = 64,
) -> Tensor:
    """Teacher scores ``[B, 1+k]`` for rows ``(query, [positive, negative_1, ..., negative_k])``.

    ``teacher`` may be:

    - a callable ``f(queries: list[str], passages: list[str]) -> scores`` scoring aligned pairs (e.g.
      :class:`st_magnitude.scaling.bm25.BM25Scorer`);
    - a ``CrossEncoder`` (anything with ``.predict(pairs)``; the paper's teacher is
      ``cross-encoder/ms-marco-MiniLM-L-12-v2`` logits);
    - a bi-encoder ``SentenceTransformer`` (``encode_query`` / ``encode_document`` + ``similarity_pairwise``).

    The result is the label column of :class:`MarginContrastiveLoss` (raw scores; margins are taken inside).
    """
    queries = list(queries)
    candidates = [list(c) for c in candidates]
    if len(queries) != len(candidates):
        raise ValueError(f"got {len(queries)} queries but {len(candidates)} candidate lists")
    if not queries:
        raise ValueError("no queries given")
    widths = {len(c) for c in candidates}
    if len(widths) != 1 or 0 in widths:
        raise ValueError(f"every row needs the same, non-zero number of candidates; got widths {sorted(widths)}")
    width = widths.pop()
    flat_q = [q for q, c in zip(queries, candidates) for _ in c]
    flat_p = [p for c in candidates for p in c]
    scorer = _as_pair_scorer(teacher, batch_size)
    scores = torch.as_tensor(scorer(flat_q, flat_p), dtype=torch.float32).reshape(-1)
    if scores.numel() != len(flat_q):
        raise ValueError(f"teacher returned {scores.numel()} scores for {len(flat_q)} pairs")
    if not torch.isfinite(scores).all():
        raise ValueError("teacher returned non-finite scores")
    return scores.reshape(len(queries), width)


def _as_pair_scorer(teacher: Any, batch_size: int) -> Callable[[list[str], list[str]], Any]:
    if hasattr(teacher, "predict") and callable(teacher.predict):  # CrossEncoder

        def score(qs: list[str], ps: list[str]) -> Any:
            return teacher.predict(list(zip(qs, ps)), batch_size=batch_size, convert_to_numpy=True)

        return score
    if hasattr(teacher, "encode_query") and hasattr(teacher, "similarity_pairwise"):  # bi-encoder

        def score(qs: list[str], ps: list[str]) -> Any:
            eq = teacher.encode_query(qs, batch_size=batch_size, convert_to_tensor=True)
            ed = teacher.encode_document(ps, batch_size=batch_size, convert_to_tensor=True)
            return teacher.similarity_pairwise(eq, ed).float().cpu()

        return score
    if callable(teacher):
        return teacher
    raise ValueError(
        f"teacher must be a callable f(queries, passages) -> scores, a CrossEncoder (.predict) or a "
        f"SentenceTransformer (.encode_query/.similarity_pairwise); got {type(teacher).__name__}"
    )
