"""Calibrated scores: a monotone map from a model's similarity scores to P(relevant), fitted on labelled queries.

A retrieval score ranks the documents of *one* query; a threshold, or a fusion with another system, needs scores
that mean the same across queries. :func:`fit_calibration` learns one monotone map ``score → P(relevant)`` from the
*pooled* scores of many queries (the pools of the pooled-AUC protocol, paper 001 §5.1: every positive of each query
and its ``n_negatives`` highest-scoring non-positives), with scikit-learn's ``IsotonicRegression`` (default) or Platt
scaling (``LogisticRegression`` on the score, Platt 1999). :class:`ScoreCalibration` saves it next to the model
(``score_calibration.json``), and :func:`calibrated_similarity` turns ``model.similarity`` into probabilities.

What the probability means (our choice, docs/temperature.md): P(relevant | score) for a (query, document) pair drawn
from the pools, i.e. among each query's judged positives and its top non-positive candidates — the documents a user
actually sees and thresholds. One map for all queries cannot undo a per-query score shift, so how well it
calibrates held-out queries measures how comparable the model's scores are across queries (what pooled AUC measures
for ranking); MW-trained models (paper 001) are built for that.

Calibration error, reported before and after: the Brier score (mean squared error of the probabilities, equal to
``sklearn.metrics.brier_score_loss``) and the expected calibration error with equal-width bins,
``ECE = Σ_b |B_b|/N · |mean(y in B_b) − mean(p in B_b)|`` (Naeini et al. 2015; Guo et al. 2017, eq. 3). "Before"
reads the raw score itself as a probability (clipped to [0, 1]), what a user thresholding cosine scores does.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from st_magnitude.evaluation._retrieval import (
    AUCPools,
    encode_roles,
    per_query_auc,
    pooled_auc_pools,
    pooled_auc_score,
)
from st_magnitude.evaluation.ir import doc_texts

logger = logging.getLogger(__name__)

__all__ = [
    "CALIBRATION_FILENAME",
    "CALIBRATION_METHODS",
    "ScoreCalibration",
    "brier_score",
    "calibrated_similarity",
    "calibration_pools",
    "calibration_report",
    "describe_calibration",
    "expected_calibration_error",
    "fit_calibration",
]

#: File, inside a model folder, that holds the fitted map.
CALIBRATION_FILENAME = "score_calibration.json"
CALIBRATION_METHODS = ("isotonic", "platt")


def _labelled(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    if p.shape != y.shape or p.size == 0:
        raise ValueError(f"probabilities and labels must be non-empty and of one length, got {p.size} and {y.size}")
    if not np.all(np.isin(y, (0.0, 1.0))):
        raise ValueError("labels must be 0 (not relevant) or 1 (relevant)")
    if not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1:
        raise ValueError("probabilities must be finite and lie in [0, 1]")
    return p, y


def brier_score(probs: Any, labels: Any) -> float:
    """Mean of ``(p − y)²`` (Brier 1950)."""
    p, y = _labelled(probs, labels)
    return float(np.mean((p - y) ** 2))


def expected_calibration_error(probs: Any, labels: Any, n_bins: int = 15) -> float:
    """``Σ_b |B_b|/N · |mean(y in B_b) − mean(p in B_b)|`` over ``n_bins`` equal-width bins of [0, 1]; bin b holds
    ``(b/n, (b+1)/n]`` and the first bin also 0 (Guo et al. 2017, eq. 3)."""
    if not (isinstance(n_bins, int) and n_bins > 0):
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    p, y = _labelled(probs, labels)
    bins = np.clip(np.ceil(p * n_bins).astype(int) - 1, 0, n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        inside = bins == b
        total += inside.sum() / p.size * abs(y[inside].mean() - p[inside].mean())
    return float(total)


@dataclass
class ScoreCalibration:
    """A fitted monotone map ``score → P(relevant)``.

    ``method="isotonic"``: piecewise-linear through ``(x, y)`` (scikit-learn's ``IsotonicRegression`` thresholds,
    clipped outside their range, exactly what its ``predict`` computes); ``method="platt"``: ``σ(a·score + b)``.
    ``meta`` records what it was fitted on (data, split, pools, the model's similarity).
    """

    method: str
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    a: float = 0.0
    b: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in CALIBRATION_METHODS:
            raise ValueError(f"method must be one of {list(CALIBRATION_METHODS)}, got {self.method!r}")
        if self.method == "isotonic" and (len(self.x) == 0 or len(self.x) != len(self.y)):
            raise ValueError("an isotonic calibration needs thresholds x and y of one non-zero length")

    def __call__(self, scores: Any) -> Any:
        """Probabilities for ``scores`` (a tensor gives a float32 tensor on its device, anything else numpy)."""
        if isinstance(scores, Tensor):
            out = self(scores.detach().double().cpu().numpy())
            return torch.as_tensor(out, dtype=torch.float32, device=scores.device)
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(s, self.x, self.y)
        return 1.0 / (1.0 + np.exp(-(self.a * s + self.b)))

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "x": self.x, "y": self.y, "a": self.a, "b": self.b, "meta": self.meta}

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/score_calibration.json`` (a model folder: the map travels with the model)."""
        path = Path(folder) / CALIBRATION_FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike) -> ScoreCalibration:
        """Read the map saved by :meth:`save` (``folder`` may also name the JSON file itself).

        Raises:
            FileNotFoundError: no ``score_calibration.json`` (run ``st-magnitude calibrate`` first).
        """
        path = Path(folder)
        path = path if path.suffix == ".json" else path / CALIBRATION_FILENAME
        if not path.is_file():
            raise FileNotFoundError(
                f"no score calibration at {path}: fit one with `st-magnitude calibrate MODEL --data BEIR_DIR`"
            )
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            raw["method"], raw.get("x", []), raw.get("y", []), raw.get("a", 0.0), raw.get("b", 0.0), raw["meta"]
        )


def fit_calibration(
    positives: Any, negatives: Any, method: str = "isotonic", meta: Mapping[str, Any] | None = None
) -> ScoreCalibration:
    """Fit ``score → P(relevant)`` on labelled scores (positives → 1, negatives → 0).

    Raises:
        ValueError: an unknown ``method``, or no positive or no negative score.
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {list(CALIBRATION_METHODS)}, got {method!r}")
    pos, neg = np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        raise ValueError(f"calibration needs positive and negative scores, got {pos.size} and {neg.size}")
    s = np.r_[pos, neg]
    y = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    if not np.all(np.isfinite(s)):
        raise ValueError("the scores contain NaN or inf (a collapsed or diverged model?)")
    meta = {"n_positives": int(pos.size), "n_negatives": int(neg.size), **(meta or {})}
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(s, y)
        return ScoreCalibration(
            "isotonic", iso.X_thresholds_.tolist(), iso.y_thresholds_.tolist(), meta=meta
        )  # fmt: skip
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1e6, max_iter=1000).fit(s.reshape(-1, 1), y)  # almost unregularised (Platt 1999)
    return ScoreCalibration("platt", a=float(lr.coef_[0, 0]), b=float(lr.intercept_[0]), meta=meta)


def calibration_pools(
    model,
    queries: Mapping[str, str],
    corpus: Mapping[str, Any],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    n_negatives: int = 500,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> AUCPools:
    """The labelled scores of judged queries: encode with the model's roles, score with ``model.similarity``, keep
    every positive and the top ``n_negatives`` non-positives per query (the pooled-AUC pools, paper 001 §5.1)."""
    qids = sorted(q for q in qrels if q in queries)
    if not qids:
        raise ValueError("none of the judged queries is in the queries file")
    cids = sorted(corpus)
    q, d = encode_roles(
        model, [queries[i] for i in qids], doc_texts(corpus, cids), batch_size=batch_size,
        show_progress_bar=show_progress_bar,
    )  # fmt: skip
    qrels_int = {i: {d_: int(g) for d_, g in qrels[i].items()} for i in qids}
    return pooled_auc_pools(q, d, qids, cids, qrels_int, model.similarity, n_negatives=n_negatives)


def calibration_report(calibration: ScoreCalibration, pools: AUCPools, n_bins: int = 15) -> dict[str, float]:
    """ECE and Brier of the raw score read as a probability (clipped to [0, 1]) and of the calibrated one, with the
    pooled AUC and the mean per-query AUC of the same pools (a monotone map leaves the ranking as it is)."""
    s = np.r_[pools.positives, pools.negatives]
    y = np.r_[np.ones(len(pools.positives)), np.zeros(len(pools.negatives))]
    raw, calibrated = np.clip(s, 0.0, 1.0), np.clip(calibration(s), 0.0, 1.0)
    return {
        "pooled_auc": pooled_auc_score(pools.positives, pools.negatives),
        "per_query_auc": per_query_auc(pools),
        "ece_raw": expected_calibration_error(raw, y, n_bins),
        "ece_calibrated": expected_calibration_error(calibrated, y, n_bins),
        "brier_raw": brier_score(raw, y),
        "brier_calibrated": brier_score(calibrated, y),
        "positives": int(len(pools.positives)),
        "negatives": int(len(pools.negatives)),
        "base_rate": float(y.mean()),
    }


def calibrated_similarity(
    model, query_embeddings: Tensor, document_embeddings: Tensor, calibration: ScoreCalibration | str | os.PathLike
) -> Tensor:
    """``P(relevant)`` for every (query, document) pair: ``calibration(model.similarity(q, d))``, ``[Q, D]``.

    ``calibration`` is a :class:`ScoreCalibration` or the model folder that ``st-magnitude calibrate`` wrote it to.
    Embed with ``model.encode_query`` / ``model.encode_document`` as for retrieval.

    Raises:
        ValueError: the map was fitted on a model serving another similarity.
    """
    if not isinstance(calibration, ScoreCalibration):
        calibration = ScoreCalibration.load(calibration)
    fitted_on = calibration.meta.get("similarity_fn_name")
    serves = getattr(model, "similarity_fn_name", None)
    if fitted_on is not None and serves is not None and fitted_on != serves:
        raise ValueError(
            f"the calibration was fitted on scores of similarity {fitted_on!r}, but the model serves {serves!r}; "
            "fit it again for this model with `st-magnitude calibrate`"
        )
    with torch.no_grad():
        scores = model.similarity(query_embeddings, document_embeddings)
    return calibration(scores)


def describe_calibration(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of :func:`calibration_report` rows (one per split)."""
    head = f"{'split':<8} {'queries':>7} {'pooled AUC':>10} {'ECE raw':>8} {'ECE cal':>8} "
    head += f"{'Brier raw':>9} {'Brier cal':>9}"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['split']:<8} {r['queries']:>7} {r['pooled_auc']:>10.4f} {r['ece_raw']:>8.4f} "
            f"{r['ece_calibrated']:>8.4f} {r['brier_raw']:>9.4f} {r['brier_calibrated']:>9.4f}"
        )
    return "\n".join(lines)
