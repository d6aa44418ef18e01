"""``MIPSAugment``: one extra coordinate that makes cosine and L2 stores rank like the inner product.

Maximum inner-product search reduces to nearest-neighbour search (Bachrach et al., RecSys 2014, "Speeding up the
Xbox recommender system using a Euclidean transformation for inner-product spaces", Sec. 4, Theorem 1; they put
the extra coordinate first, we append it): with M ≥ every document norm, a document becomes
``[d, sqrt(M² − ‖d‖²)]`` and a query ``[q, 0]``. Every document then has norm M, so for one query

- the cosine of the pair is ``q·d / (‖q‖ M)`` and
- the squared L2 distance is ``‖q‖² + M² − 2 q·d``,

both monotone in ``q·d`` with per-query constants: the top-k under cosine or L2 is the top-k of the trained
``φ_γq(q) · φ_γd(d)``. The *scores* differ from the trained ones by those per-query constants.

A document whose norm exceeds M gets 0 as its extra coordinate and keeps its norm ‖d‖ > M: under cosine it is
scored ``q·d / (‖q‖ ‖d‖)`` — below its trained rank when ``q·d > 0`` — and under L2 it is pushed away by
``‖d‖² − M²``. The module counts such documents (``n_over_bound``) and warns (:class:`NormBoundWarning`).

An input without a role is refused (``default_role=None``, what :func:`~st_magnitude.model.stores.prepare_for_store`
builds): a stack that calls plain ``encode()`` for queries and documents would give its queries the documents'
extra coordinate, and cosine / L2 would no longer rank as trained.

No sentence-transformers built-in module can append a norm-dependent coordinate, so a saved model that holds this
module loads in stock sentence-transformers only with st-magnitude installed and ``trust_remote_code=True``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from st_magnitude._warnings import NormBoundWarning
from st_magnitude.modules._io import ConfigWeightsModule
from st_magnitude.modules._store_limits import max_norm_problem
from st_magnitude.modules.role_normalize import ROLES, resolve_role

#: why a role-less input is refused, and what works instead
ROLELESS_REFUSAL = (
    "MIPSAugment: encode() without a query/document role. This export appends a coordinate that only documents get, "
    "so with queries and documents encoded alike a cosine or L2 store no longer ranks as trained. Encode queries "
    "with encode_query and documents with encode_document; a stack that cannot pass a role needs an inner-product "
    "store (convert ... --store dot --default-route document) or a dnorm / cosine model (any store)."
)


class MIPSAugment(ConfigWeightsModule):
    """Append ``sqrt(M² − ‖v‖²)`` to document embeddings and ``0`` to query embeddings.

    Args:
        max_norm: the bound M (> 0), at least the norm of every document the model will index.
        dimension: the input embedding dimension (the output has one more).
        default_role: the role of an ``encode()`` without a task; ``None`` (default) refuses such an input (see the
            module docstring).
    """

    config_keys: list[str] = ["max_norm", "dimension", "default_role"]
    forward_kwargs: set[str] = {"task"}

    def __init__(self, max_norm: float, dimension: int, default_role: str | None = None) -> None:
        super().__init__()
        problem = max_norm_problem(max_norm)
        if problem:
            raise ValueError(f"max_norm={max_norm!r}: {problem}")
        if not (isinstance(dimension, int) and dimension > 0):
            raise ValueError(f"dimension must be a positive integer, got {dimension!r}")
        if default_role is not None and default_role not in ROLES:
            raise ValueError(f"default_role must be one of {ROLES} or None, got {default_role!r}")
        self.max_norm = float(max_norm)
        self.dimension = int(dimension)
        self.default_role = default_role
        self.n_over_bound = 0

    def get_embedding_dimension(self) -> int:
        return self.dimension + 1

    def get_config_dict(self) -> dict[str, Any]:
        return {"max_norm": self.max_norm, "dimension": self.dimension, "default_role": self.default_role}

    def resolve_role(self, task: Any) -> str:
        if task is None and self.default_role is None:
            raise ValueError(ROLELESS_REFUSAL)
        return resolve_role("MIPSAugment", task, self.default_role, "Encode with encode_query / encode_document.")

    def augment(self, emb: Tensor, role: str) -> Tensor:
        """``[v, 0]`` for a query, ``[v, sqrt(max(M² − ‖v‖², 0))]`` for a document (computed in float64)."""
        if not torch.jit.is_tracing() and emb.shape[-1] != self.dimension:
            raise ValueError(f"MIPSAugment expects {self.dimension}-d embeddings, got {emb.shape[-1]}-d")
        if role == "query":
            return torch.cat([emb, emb.new_zeros(*emb.shape[:-1], 1)], dim=-1)
        sq = emb.detach().double().pow(2).sum(-1, keepdim=True)
        over = 0 if torch.jit.is_tracing() else int((sq > self.max_norm**2).sum())  # an ONNX graph only clamps
        if over:
            self.n_over_bound += over
            warnings.warn(
                f"{over} of {emb.shape[0] if emb.dim() > 1 else 1} document(s) have a norm above the bound "
                f"M={self.max_norm:.6g} of this nearest-neighbour export: their extra coordinate is 0 and their norm "
                "stays above M, so a cosine or L2 store ranks them lower than the trained similarity does (the "
                "inner product still ranks them exactly). Re-export with a larger M if this is not rare.",
                NormBoundWarning,
                stacklevel=2,
            )
        extra = (self.max_norm**2 - sq).clamp_min(0.0).sqrt().to(emb.dtype)
        return torch.cat([emb, extra], dim=-1)

    def forward(self, features: dict[str, Tensor], task: str | None = None, **kwargs) -> dict[str, Tensor]:
        if task is None:
            task = features.get("task")
        features["sentence_embedding"] = self.augment(features["sentence_embedding"], self.resolve_role(task))
        return features

    def __repr__(self) -> str:
        return f"MIPSAugment(max_norm={self.max_norm:.6g}, dimension={self.dimension})"
