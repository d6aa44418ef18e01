"""Output-dimension projection of paper 003 ("Scaling Laws for Embedding Dimension in IR", Killingback et al.).

The paper (§3.1) projects every token hidden state with one affine layer and mean-pools::

    h'_i = W h_i + b,   W ∈ R^{m×d}, b ∈ R^m            (no activation)
    e    = (1/n) Σ_i h'_i

Mean and affine maps commute (the pooling weights sum to one), so this equals masked mean pooling followed by
``Linear(d, m, bias=True)``: the projection sits *after* ``Pooling`` and costs one GEMV per text.

Portability: :func:`DimensionProjection` builds sentence-transformers' built-in
:class:`~sentence_transformers.base.modules.Dense` with the identity activation (a factory returning a plain
``Dense``), so ``modules.json`` records ``sentence_transformers.base.modules.dense.Dense`` and a saved model loads
in stock sentence-transformers with no plugin import and no ``trust_remote_code`` (ECOSYSTEM §2.4). ST's ``Dense``
defaults to ``Tanh`` — not the paper's layer; :func:`check_projection` warns about that.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import torch
from sentence_transformers.base.modules import Dense, Normalize, Router
from torch import Tensor, nn

from st_magnitude.modules._surgery import replace_modules

logger = logging.getLogger(__name__)

__all__ = [
    "DimensionProjection",
    "ProjectionActivationWarning",
    "PROJECTION_INITS",
    "add_dimension_projection",
    "check_projection",
    "dimension_grid",
    "is_dimension_projection",
    "truncate_embeddings",
]

#: Initialisations accepted by :func:`DimensionProjection` (paper 003 is silent).
PROJECTION_INITS: tuple[str, ...] = ("linear", "orthogonal", "identity")

#: The paper's multiples of the native hidden size (§3.2): {1/4, ..., 16}, plus {1/16, 1/8} for larger BERTs.
PAPER_MULTIPLES: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
PAPER_EXTRA_LOW_MULTIPLES: tuple[float, ...] = (1 / 16, 1 / 8)


class ProjectionActivationWarning(UserWarning):
    """A ``Dense`` with a non-identity activation (ST's default ``Tanh``) is used as the output projection."""


def is_dimension_projection(module: Any) -> bool:
    """Whether ``module`` is a :func:`DimensionProjection`: an ST ``Dense`` that is a pure affine map.

    True for any ``Dense`` with the identity activation and no residual, including one built by hand or reloaded
    by stock sentence-transformers; false for ST's default ``Dense`` (``Tanh``).
    """
    return (
        isinstance(module, Dense)
        and isinstance(module.activation_function, nn.Identity)
        and not getattr(module, "use_residual", False)
    )


def DimensionProjection(  # a factory named as the layer it builds: users call it like a class
    in_features: int,
    out_features: int,
    bias: bool = True,
    init: str = "linear",
    seed: int | None = None,
    module_input_name: str = "sentence_embedding",
    module_output_name: str | None = None,
) -> Dense:
    """The paper's single affine output layer ``e = W·mean_pool(h) + b`` (no activation), as an ST ``Dense``.

    A factory: ``DimensionProjection(in_features, out_features, ...)`` returns a
    :class:`sentence_transformers.base.modules.Dense` with ``activation_function=None`` (identity), so the saved
    model needs no plugin at load time. Test a module with :func:`is_dimension_projection` (true for any such
    ``Dense``: identity activation, no residual, including one reloaded by stock sentence-transformers).

    Args:
        in_features: input size, the pooled embedding dimension d (e.g. 384 for all-MiniLM-L6-v2).
        out_features: output embedding dimension m = φ·d (paper: φ ∈ {1/16, …, 16}, so m may exceed d).
        bias: include the bias b (paper: yes).
        init: ``"linear"`` — PyTorch's ``nn.Linear`` default (kaiming-uniform, W, b ~ U(±1/√d)); the paper does not
            state its init and this is what a plain HF linear layer gets.
            ``"orthogonal"`` — a (semi-)orthogonal W and zero bias: norms are preserved at start when m ≥ d.
            ``"identity"`` — W = [I; 0] (or the first m rows of I when m < d) and zero bias: the projected model
            starts out scoring exactly like the base model (a truncation when m < d, a zero-padding when m > d).
        seed: seed for the random initialisations (``None``: use the global torch RNG).
        module_input_name / module_output_name: feature keys (ST ``Dense`` semantics).

    Example::

        from sentence_transformers import SentenceTransformer
        from st_magnitude.modules.dimension_projection import DimensionProjection

        proj = DimensionProjection(384, 1536)            # an ST Dense(384, 1536, activation=Identity)
    """
    for label, value in (("in_features", in_features), ("out_features", out_features)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    if init not in PROJECTION_INITS:
        raise ValueError(f"Unknown init {init!r}. Valid inits: {', '.join(PROJECTION_INITS)}.")
    weight, bias_value = _init_weights(in_features, out_features, bias, init, seed)
    return Dense(
        in_features,
        out_features,
        bias=bias,
        activation_function=None,
        init_weight=weight,
        init_bias=bias_value,
        module_input_name=module_input_name,
        module_output_name=module_output_name,
    )


def _init_weights(
    in_features: int, out_features: int, bias: bool, init: str, seed: int | None
) -> tuple[Tensor, Tensor | None]:
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    if init == "linear":
        # nn.Linear.reset_parameters: kaiming_uniform_(a=√5) == U(-1/√fan_in, 1/√fan_in); bias the same bound.
        bound = 1.0 / math.sqrt(in_features)
        weight = (torch.rand(out_features, in_features, generator=generator) * 2 - 1) * bound
        bias_value = (torch.rand(out_features, generator=generator) * 2 - 1) * bound if bias else None
        return weight, bias_value
    if init == "orthogonal":
        gaussian = torch.randn(max(out_features, in_features), min(out_features, in_features), generator=generator)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # unique Haar-distributed Q
        weight = q if out_features >= in_features else q.T
        return weight.contiguous(), torch.zeros(out_features) if bias else None
    weight = torch.eye(out_features, in_features)  # "identity"
    return weight, torch.zeros(out_features) if bias else None


def dimension_grid(
    hidden_size: int,
    multiples: tuple[float, ...] = PAPER_MULTIPLES,
    extra_low: tuple[float, ...] = (),
) -> list[int]:
    """Output dimensions ``{φ·d}`` of the paper's sweep (§3.2): φ ∈ {1/4, 1/2, 1, 2, 4, 8, 16} (+ ``extra_low``).

    Example: ``dimension_grid(384)`` → ``[96, 192, 384, 768, 1536, 3072, 6144]``.
    """
    if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
        raise ValueError(f"hidden_size must be a positive int, got {hidden_size!r}")
    dims = set()
    for phi in tuple(extra_low) + tuple(multiples):
        if not (phi > 0 and math.isfinite(phi)):
            raise ValueError(f"multiples must be positive finite numbers, got {phi!r}")
        m = hidden_size * phi
        if abs(m - round(m)) > 1e-9 or round(m) < 1:
            raise ValueError(f"φ={phi} gives a non-integer dimension {m} for hidden size {hidden_size}")
        dims.add(int(round(m)))
    return sorted(dims)


def check_projection(model: nn.Module, warn: bool = True) -> list[str]:
    """Find ``Dense`` layers whose activation is not the identity (ST's default is ``Tanh``).

    Paper 003's projection is purely affine; a ``Tanh`` squashes every coordinate into (−1, 1),
    which bounds the norm by √m and changes the function class. Returns a description of each offending layer and,
    when ``warn``, emits one :class:`ProjectionActivationWarning` per layer.
    """
    problems = []
    for name, module in model.named_modules():
        if isinstance(module, Dense) and not isinstance(module.activation_function, nn.Identity):
            act = type(module.activation_function).__name__
            msg = (
                f"Dense layer {name or '<root>'!r} ({module.in_features}->{module.out_features}) uses activation "
                f"{act}; paper 003's output projection is affine (no activation). Build it with "
                f"DimensionProjection(...) or Dense(..., activation_function=None)."
            )
            problems.append(msg)
            if warn:
                warnings.warn(msg, ProjectionActivationWarning, stacklevel=2)
    return problems


def add_dimension_projection(
    model: nn.Module,
    out_features: int,
    bias: bool = True,
    init: str = "linear",
    seed: int | None = None,
) -> Dense:
    """Insert a :func:`DimensionProjection` into a SentenceTransformer, before any trailing ``Normalize``.

    The layer goes right after the last module that produces ``sentence_embedding`` (after ``Pooling`` and any
    existing ``Dense``), so ``[Transformer, Pooling, Normalize]`` becomes
    ``[Transformer, Pooling, Dense(d→m, Identity), Normalize]`` (the Ettin recipe) and
    ``[Transformer, Pooling]`` becomes ``[Transformer, Pooling, Dense]`` (the BERT recipe). The model is modified
    in place and the new module is returned. Models with a ``Router`` (e.g. after
    ``st_magnitude.apply_similarity(model, "qnorm")``) are rejected: add the projection first, then apply the
    similarity. Existing ``Tanh`` ``Dense`` layers trigger :func:`check_projection`'s warning.
    """
    children = list(model.children())
    if not children:
        raise ValueError("model has no modules; expected a SentenceTransformer such as [Transformer, Pooling]")
    if any(isinstance(m, Router) for m in children):
        raise ValueError(
            "model contains a Router (a per-role similarity was applied); add the dimension projection before "
            "st_magnitude.apply_similarity(...)"
        )
    check_projection(model)
    in_features = _embedding_dimension(model)
    insert_at = len(children)
    while insert_at > 0 and isinstance(children[insert_at - 1], Normalize):
        insert_at -= 1
    if insert_at == 0:
        raise ValueError("model consists only of Normalize layers; nothing produces an embedding to project")
    projection = DimensionProjection(in_features, out_features, bias=bias, init=init, seed=seed)
    first_param = next(model.parameters(), None)
    if first_param is not None:
        projection.to(device=first_param.device, dtype=first_param.dtype)
    replace_modules(model, children[:insert_at] + [projection] + children[insert_at:])
    logger.info("Added DimensionProjection %d -> %d at position %d", in_features, out_features, insert_at)
    return projection


def _embedding_dimension(model: nn.Module) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension")
    dim = getter()
    if dim is None:
        raise ValueError("cannot infer the model's embedding dimension; pass a model ending in Pooling or Dense")
    return int(dim)


def truncate_embeddings(embeddings: Tensor, dim: int) -> Tensor:
    """Matryoshka-style truncation that keeps magnitude: the first ``dim`` coordinates, **not** re-normalised.

    ST's ``MatryoshkaLoss`` L2-normalises after slicing (ECOSYSTEM §0.4), which discards the norm that
    magnitude-aware similarities use. This is the plain slice (also what ``SentenceTransformer(truncate_dim=...)``
    does at inference), with a clear error for an out-of-range ``dim``.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or not (1 <= dim <= embeddings.shape[-1]):
        raise ValueError(f"dim must be an int in [1, {embeddings.shape[-1]}], got {dim!r}")
    return embeddings[..., :dim]
