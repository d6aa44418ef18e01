"""Role-routed encoding to plain float lists / arrays, shared by the serving adapters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["encode_documents", "encode_queries"]


def encode_queries(model: Any, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``model.encode_query`` as a float32 ``[n, dim]`` array."""
    return np.asarray(model.encode_query(list(texts), batch_size=batch_size, convert_to_numpy=True), dtype=np.float32)


def encode_documents(model: Any, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``model.encode_document`` as a float32 ``[n, dim]`` array."""
    return np.asarray(
        model.encode_document(list(texts), batch_size=batch_size, convert_to_numpy=True), dtype=np.float32
    )
