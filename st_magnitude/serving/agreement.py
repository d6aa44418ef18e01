"""Top-k through each serving stack's own path, against the package's exact search: the check behind
docs/deployment.md's table (tests/serving/test_adapters.py, benchmarks/bench_deploy.py).

:func:`reference_ranking` is what ``st-magnitude evaluate`` ranks by: ``encode_query`` / ``encode_document`` and the
exact top-k of ``model.similarity`` (:func:`st_magnitude.evaluation.exact_search`). :func:`stack_ranking` indexes the
documents and searches the queries through one registered stack (:mod:`st_magnitude.serving._stacks`), with the
path its adapter module defines (``index_and_search``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from st_magnitude.serving._stacks import stack_spec

__all__ = ["memoise_encodings", "reference_ranking", "stack_ranking", "top_k_agreement"]


def reference_ranking(model: Any, queries: Sequence[str], documents: Sequence[str], k: int = 10) -> list[list[int]]:
    """Per query, the indices of the top ``k`` documents by the model's own similarity (exact search)."""
    from st_magnitude.evaluation._retrieval import encode_roles
    from st_magnitude.evaluation.ir import exact_search

    q, d = encode_roles(model, queries, documents)
    ids = [str(i) for i in range(len(documents))]
    qids = [f"q{i}" for i in range(len(queries))]
    res = exact_search(q, d, qids, ids, top_k=k, score_fn=model.similarity, ignore_identical_ids=False)
    return [[int(i) for i, _ in sorted(res[qid].items(), key=lambda kv: (-kv[1], int(kv[0])))] for qid in qids]


def memoise_encodings(model: Any) -> Any:
    """Cache ``encode_query`` / ``encode_document`` per text on this instance (the vectors are unchanged).

    For measurements that send one corpus through several stacks: each text is encoded once per role. Only this
    instance's two methods are replaced; sentence-transformers itself is not patched.
    """
    for role in ("query", "document"):
        original = getattr(model, f"encode_{role}")
        cache: dict[str, np.ndarray] = {}

        def cached(texts, _orig=original, _cache=cache, convert_to_tensor=False, convert_to_numpy=True, **kw):
            import torch

            single = isinstance(texts, str)
            texts = [texts] if single else list(texts)
            todo = [t for t in dict.fromkeys(texts) if t not in _cache]
            if todo:
                for t, v in zip(todo, _orig(todo, convert_to_numpy=True, **kw)):
                    _cache[t] = v
            out = np.stack([_cache[t] for t in texts])
            out = out[0] if single else out
            return torch.from_numpy(out) if convert_to_tensor else out

        setattr(model, f"encode_{role}", cached)
    return model


def top_k_agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(mean |top-k(a) ∩ top-k(b)| / k, fraction of queries whose ordered top-k lists are identical)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"rankings of {len(a)} and {len(b)} queries: need the same, non-zero number")
    overlap = [len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b)]
    same = [list(x) == list(y) for x, y in zip(a, b)]
    return float(np.mean(overlap)), float(np.mean(same))


def stack_ranking(
    stack: str, model: Any, queries: Sequence[str], documents: Sequence[str], k: int = 10, metric: str | None = None
) -> list[list[int]]:
    """Index ``documents`` and search ``queries`` in ``stack`` (one of the registry's
    :data:`~st_magnitude.serving._stacks.STACK_NAMES`) through its adapter's ``index_and_search``.

    ``metric``: the store metric to ask for (a stack-neutral name: dot, cosine, l2); ``None`` lets the adapter pick
    (the only one of a stack whose store scores with one metric: cosine for LangChain and LlamaIndex).
    """
    adapter = importlib.import_module(stack_spec(stack).module)
    return adapter.index_and_search(model, list(queries), list(documents), k, metric)
