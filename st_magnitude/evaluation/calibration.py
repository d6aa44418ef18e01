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

import logging
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from st_magnitude._trust import Fields, read_json, write_json_atomic
from st_magnitude._warnings import UninformativeCalibrationWarning
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
    "check_held_out",
    "describe_calibration",
    "expected_calibration_error",
    "fit_calibration",
]

#: File, inside a model folder, that holds the fitted map.
CALIBRATION_FILENAME = "score_calibration.json"
CALIBRATION_METHODS = ("isotonic", "platt")
#: |a·score + b| beyond which σ is 0 or 1 in float64 (exp(709) is the largest finite exponential)
_SIGMOID_EDGE = 709.0


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


#: keys of ``score_calibration.json`` (what :meth:`ScoreCalibration.to_dict` writes)
_KEYS = ("method", "x", "y", "a", "b", "meta")
#: bound on the isotonic thresholds: differences of two of them stay finite in float64
_X_BOUND = 1e300


def _number(v: Any) -> bool:
    """A finite JSON number (not a boolean; an integer beyond float64's range is not finite)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _map_problem(method: str, x: Sequence[Any], y: Sequence[Any], a: Any, b: Any) -> tuple[str, str] | None:
    """``(key, problem)`` when the fields do not make a monotone map into [0, 1] that evaluates without overflow;
    ``None`` when they do. One check for maps built in code and maps read from a file."""
    if method not in CALIBRATION_METHODS:
        return "method", f"must be one of {list(CALIBRATION_METHODS)}, got {method!r}"
    for key, value in (("a", a), ("b", b)):
        if not _number(value):
            return key, f"must be a finite number, got {value!r}"
    if method == "platt":
        if len(x) or len(y):
            return ("x" if len(x) else "y"), "must be empty for a Platt map (sigma(a * score + b))"
        if a < 0:
            return "a", f"must be >= 0 (a < 0 maps higher scores to lower probabilities), got {a!r}"
        return None
    if len(x) == 0 or len(x) != len(y):
        return "x", f"an isotonic map needs thresholds x and y of one non-zero length, got {len(x)} and {len(y)}"
    for i, v in enumerate(x):
        if not (_number(v) and abs(v) <= _X_BOUND):
            return "x", f"item {i} must be a finite number within ±{_X_BOUND:g}, got {v!r}"
    for i, v in enumerate(y):
        if not (_number(v) and 0.0 <= v <= 1.0):
            return "y", f"item {i} must be a probability in [0, 1], got {v!r}"
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = np.diff(xs), np.diff(ys)
    if np.any(dx <= 0):
        i = int(np.flatnonzero(dx <= 0)[0])
        return "x", f"thresholds must increase strictly, but item {i + 1} ({x[i + 1]!r}) follows {x[i]!r}"
    if np.any(dy < 0):
        i = int(np.flatnonzero(dy < 0)[0])
        return "y", f"must not decrease (a monotone map), but item {i + 1} ({y[i + 1]!r}) follows {y[i]!r}"
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        slopes = dy / dx
    if not np.all(np.isfinite(slopes)):
        i = int(np.flatnonzero(~np.isfinite(slopes))[0])
        return "x", f"items {i} and {i + 1} ({x[i]!r}, {x[i + 1]!r}) are too close: the map's slope overflows"
    return None


@dataclass
class ScoreCalibration:
    """A fitted monotone map ``score → P(relevant)``.

    ``method="isotonic"``: piecewise-linear through ``(x, y)`` (scikit-learn's ``IsotonicRegression`` thresholds,
    clipped outside their range, exactly what its ``predict`` computes); ``method="platt"``: ``σ(a·score + b)``.
    ``meta`` records what it was fitted on (data, split, pools, the model's similarity).

    Built in code or read from a file, the fields must make a monotone map into [0, 1]: thresholds finite (within
    ±1e300) and strictly increasing, probabilities in [0, 1] and non-decreasing, Platt's ``a ≥ 0`` and ``b`` finite.
    """

    method: str
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    a: float = 0.0
    b: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _map_problem(self.method, self.x, self.y, self.a, self.b)
        if problem is not None:
            raise ValueError(f"{problem[0]}: {problem[1]}")

    def __call__(self, scores: Any) -> Any:
        """Probabilities for ``scores`` (a tensor gives a float32 tensor on its device, anything else numpy)."""
        if isinstance(scores, Tensor):
            out = self(scores.detach().double().cpu().numpy())
            return torch.as_tensor(out, dtype=torch.float32, device=scores.device)
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "isotonic":
            return np.clip(np.interp(s, self.x, self.y), 0.0, 1.0)
        with np.errstate(over="ignore"):
            z = np.clip(self.a * s + self.b, -_SIGMOID_EDGE, _SIGMOID_EDGE)  # beyond: 0 or 1 in float64
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "x": self.x, "y": self.y, "a": self.a, "b": self.b, "meta": self.meta}

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/score_calibration.json`` (a model folder: the map travels with the model) through a
        temporary file and one rename: a failed write (a full disk) leaves the previous file, or none, and no
        temporary file."""
        path = Path(folder) / CALIBRATION_FILENAME
        write_json_atomic(path, self.to_dict(), indent=1)
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike) -> ScoreCalibration:
        """Read the map saved by :meth:`save` (``folder`` may also name the JSON file itself), through the trust
        boundary: every key is checked (types, ranges, a monotone map into [0, 1]).

        Raises:
            FileNotFoundError: no ``score_calibration.json`` (run ``st-magnitude calibrate`` first).
            InputFileError: the file is not a valid map (the message names the file and the key).
        """
        path = Path(folder)
        path = path if path.suffix == ".json" else path / CALIBRATION_FILENAME
        if not path.is_file():
            raise FileNotFoundError(
                f"no score calibration at {path}: fit one with `st-magnitude calibrate MODEL --data BEIR_DIR`"
            )
        fields = Fields(read_json(path), path)
        fields.refuse_unknown(_KEYS)
        method = fields.get("method", str, choices=CALIBRATION_METHODS)
        platt = method == "platt"
        x, y = (fields.get(k, list, []) if platt else fields.get(k, list) for k in ("x", "y"))
        a, b = (fields.get(k, float) if platt else fields.get(k, float, 0.0) for k in ("a", "b"))
        meta = fields.get("meta", dict, {})
        Fields(meta, path, prefix="meta.").get("similarity_fn_name", (str, type(None)), None)
        problem = _map_problem(method, x, y, a, b)
        if problem is not None:
            raise fields.error(*problem)
        return cls(method, x, y, a, b, meta)


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
    a = float(lr.coef_[0, 0])
    if a < 0:
        raise ValueError(
            f"Platt scaling fitted a decreasing map (a = {a:.4g}): on these pools higher scores mean less relevant "
            "(pooled AUC below 0.5), so no monotone map calibrates them; check the model and the data"
        )
    return ScoreCalibration("platt", a=a, b=float(lr.intercept_[0]), meta=meta)


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
    pooled AUC and the mean per-query AUC of the same pools (a monotone map leaves the ranking as it is).

    Warns (:class:`~st_magnitude._warnings.UninformativeCalibrationWarning`) when the calibrated probability is one
    value for every pair (constant scores, or a map flat over them): ECE then only compares that value with the
    base rate — on the fitting split it is 0 by construction — and says nothing about calibration.
    """
    s = np.r_[pools.positives, pools.negatives]
    y = np.r_[np.ones(len(pools.positives)), np.zeros(len(pools.negatives))]
    raw, calibrated = np.clip(s, 0.0, 1.0), np.clip(calibration(s), 0.0, 1.0)
    if s.size and np.ptp(calibrated) == 0:
        why = (
            f"all {s.size} pooled scores are equal ({s[0]:.6g}): the model scores every pair alike"
            if np.ptp(s) == 0
            else "the map is flat over these scores"
        )
        warnings.warn(
            f"the calibrated probability is {calibrated[0]:.4f} for every pair ({why}). ECE then only compares that "
            "one value with the base rate (0 on the split the map was fitted on, by construction) and says nothing "
            "about how well scores are calibrated; check the model and the data",
            UninformativeCalibrationWarning,
            stacklevel=2,
        )
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


def check_held_out(fit_queries: Mapping[str, str], eval_queries: Mapping[str, str]) -> int:
    """How many evaluation queries (by text) are also fitting queries; warns
    (:class:`~st_magnitude._warnings.UninformativeCalibrationWarning`) when any is, since ECE on them is measured on
    the data the map was fitted to (identical splits give a perfect-looking in-sample ECE)."""
    fitted = set(fit_queries.values())
    shared = sum(text in fitted for text in eval_queries.values())
    if shared:
        warnings.warn(
            f"{shared} of the {len(eval_queries)} held-out queries are also queries the map was fitted on (same "
            "text): their ECE and Brier are in-sample and say nothing about calibration on new queries. Report on "
            "a split with different queries",
            UninformativeCalibrationWarning,
            stacklevel=2,
        )
    return shared


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
