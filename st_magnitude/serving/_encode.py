"""Role-routed encoding to plain float arrays, shared by the serving adapters, with one check that every vector is
finite.

A vector with NaN or inf ranks arbitrarily in every store (Haystack's in-memory store ranks a NaN document first;
others drop or keep it silently), so the adapters never hand one over: the error names the text by its position, and
by its id where the stack has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_finite", "encode_documents", "encode_queries"]


def check_finite(vectors: np.ndarray, role: str, ids: Sequence[Any] | None = None) -> np.ndarray:
    """``vectors`` (``[n, dim]``) when every entry is finite, else a ValueError naming the first bad text's index
    (and id) and how many there are."""
    if vectors.size == 0 or np.isfinite(vectors).all():
        return vectors
    where = np.flatnonzero(~np.isfinite(vectors.reshape(len(vectors), -1)).all(axis=1))
    first = int(where[0])
    label = f"{role} at index {first}" + (f" (id {ids[first]!r})" if ids is not None else "")
    raise ValueError(
        f"the {label} encodes to a vector with NaN or inf ({len(where)} of {len(vectors)} {role}s do): a vector "
        "store would rank it arbitrarily. Check the model (a collapsed or diverged model, a too-large --max-norm) "
        "or leave the text out"
    )


def encode_queries(model: Any, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``model.encode_query`` as a float32 ``[n, dim]`` array of finite vectors."""
    vectors = model.encode_query(list(texts), batch_size=batch_size, convert_to_numpy=True)
    return check_finite(np.asarray(vectors, dtype=np.float32), "query")


def encode_documents(
    model: Any, texts: Sequence[str], batch_size: int = 32, ids: Sequence[Any] | None = None
) -> np.ndarray:
    """``model.encode_document`` as a float32 ``[n, dim]`` array of finite vectors; ``ids`` (one per text) name a
    bad document in the error."""
    vectors = model.encode_document(list(texts), batch_size=batch_size, convert_to_numpy=True)
    return check_finite(np.asarray(vectors, dtype=np.float32), "document", ids)
