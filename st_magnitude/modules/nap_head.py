"""The Norm Alignment Projector (NAP) of L2Dir (paper 002 §3.3, App. F) and the tap that feeds it.

The NAP is "a simple randomly initialized FFN" mapping the backbone's *un-normalized* state to a vector PO that
is never L2-normalized and is used only by the InfoTN loss (paper §3.3). It is a training-time head: retrieval
keeps using the normalized embedding (cosine), so a model never needs it at inference (paper §5.4).

:class:`NAPHead` is the projection (default ``Linear(d, d)``; a bottleneck ``d → h → d`` as an option; one
projection per input modality when the towers differ in width, e.g. CLIP text 512 vs vision 768).

:class:`NAPInputTap` captures the NAP input while the model runs, with forward pre-hooks that exist only inside
:meth:`NAPInputTap.capturing` (so ``encode`` is never affected):

- ``"pre_final_norm"`` — the hidden state *entering* the backbone's final norm (the paper's reading, App. F
  "maps raw hidden states"): ``model.norm`` of Llama/Qwen/Mistral decoders, ``final_norm`` of ModernBERT,
  ``text_model.final_layer_norm`` and ``vision_model.post_layernorm`` of CLIP. Token states are pooled like the
  embedding itself (the model's ``Pooling`` module, or CLIP's EOS rule for CLIP text).
- ``"pre_normalize"`` — the pooled ``sentence_embedding`` as it enters the model's ``Normalize`` (for encoder
  models such as all-MiniLM-L6-v2, whose BERT has no final norm of the pre-LN kind); a model without
  ``Normalize`` already emits this.
- ``"output"`` — the final ``sentence_embedding`` (normalized if the model normalizes: the other reading of the
  paper's §3.3, kept as an ablation).
- ``"auto"`` — ``"pre_final_norm"`` when a final norm is recognised (CLIP, decoders, ModernBERT), else
  ``"pre_normalize"``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from sentence_transformers.base.modules import Normalize
from torch import Tensor, nn

from st_magnitude.modules._io import ConfigWeightsModule

logger = logging.getLogger(__name__)

__all__ = ["NAP_INPUTS", "NAP_ACTIVATIONS", "NAPHead", "NAPInputTap", "modality_key"]

#: Where the NAP reads its input (see the module docstring).
NAP_INPUTS: tuple[str, ...] = ("auto", "pre_final_norm", "pre_normalize", "output")

_ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}
#: Activations accepted between the two layers of a bottleneck NAP.
NAP_ACTIVATIONS: tuple[str, ...] = tuple(_ACTIVATIONS)

_DEFAULT_KEY = "default"

# Final-norm locations (dotted paths inside the Hugging Face model), tried in order.
_CLIP_TEXT_NORM = "text_model.final_layer_norm"
_CLIP_VISION_NORM = "vision_model.post_layernorm"
_DECODER_NORMS = (
    "norm",
    "model.norm",
    "language_model.norm",
    "model.language_model.norm",
    "language_model.model.norm",
    "final_norm",
    "model.final_norm",
)


def modality_key(modality: Any) -> str:
    """Key of a features' ``modality``: ``"text"``, ``"image"``, ``("image", "text")`` → ``"image+text"``."""
    if modality is None:
        return "text"
    if isinstance(modality, (tuple, list)):
        return "+".join(str(m) for m in modality)
    return str(modality)


class NAPHead(ConfigWeightsModule):
    """Norm Alignment Projector: PO = NAP(h), never normalized (L2Dir paper 002 §3.3).

    Args:
        in_features: width of the NAP input — an int (one projection for every input), or a dict
            ``{modality: width}`` (one projection per modality, e.g. ``{"text": 512, "image": 768}`` for CLIP,
            whose towers differ in width before their final norms).
        out_features: width of PO; defaults to ``in_features`` (the paper's d → d). Required when a dict gives
            different widths: use the model's embedding dimension.
        hidden_features: ``None`` (default) for a single ``Linear`` — the shape the paper's CLIP parameter counts
            imply (0.26M = 512² for CLIP-B) — or the width of a bottleneck ``Linear → act → Linear``
            (``16`` reproduces the paper's VLM counts).
        bias: whether the linear layers have a bias.
        activation: activation of the bottleneck, one of ``gelu``, ``relu``, ``tanh``, ``silu``.
        input_name / output_name: feature keys read and written by :meth:`forward` (module use).

    Weights use PyTorch's default initialisation ("randomly initialized", paper §3.3).
    """

    config_keys: list[str] = [
        "in_features",
        "out_features",
        "hidden_features",
        "bias",
        "activation",
        "input_name",
        "output_name",
    ]

    def __init__(
        self,
        in_features: int | dict[str, int],
        out_features: int | None = None,
        hidden_features: int | None = None,
        bias: bool = True,
        activation: str = "gelu",
        input_name: str = "nap_input",
        output_name: str = "nap_output",
    ) -> None:
        super().__init__()
        if isinstance(in_features, dict):
            if not in_features:
                raise ValueError("in_features must be a positive int or a non-empty {modality: width} dict")
            widths = {modality_key(k): int(v) for k, v in in_features.items()}
        else:
            widths = {_DEFAULT_KEY: int(in_features)} if _is_int(in_features) else {}
            if not widths:
                raise ValueError(
                    f"in_features must be a positive int or a {{modality: width}} dict, got {in_features!r}"
                )
        for key, width in widths.items():
            if width <= 0:
                raise ValueError(f"in_features[{key!r}] must be a positive int, got {width}")
        if out_features is None:
            if len(set(widths.values())) != 1:
                raise ValueError(
                    f"in_features has different widths per modality ({widths}); pass out_features (e.g. the model's "
                    "embedding dimension) so that every modality's PO lives in one space."
                )
            out_features = next(iter(widths.values()))
        if not _is_int(out_features) or int(out_features) <= 0:
            raise ValueError(f"out_features must be a positive int, got {out_features!r}")
        if hidden_features is not None and (not _is_int(hidden_features) or int(hidden_features) <= 0):
            raise ValueError(
                f"hidden_features must be None (single Linear) or a positive int, got {hidden_features!r}"
            )
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(NAP_ACTIVATIONS)}, got {activation!r}")
        self.in_features: int | dict[str, int] = (
            dict(widths) if isinstance(in_features, dict) else widths[_DEFAULT_KEY]
        )
        self.out_features = int(out_features)
        self.hidden_features = None if hidden_features is None else int(hidden_features)
        self.bias = bool(bias)
        self.activation = activation
        self.input_name = input_name
        self.output_name = output_name
        self.projections = nn.ModuleDict({key: self._build(width) for key, width in widths.items()})

    def _build(self, width: int) -> nn.Module:
        if self.hidden_features is None:
            return nn.Linear(width, self.out_features, bias=self.bias)
        return nn.Sequential(
            nn.Linear(width, self.hidden_features, bias=self.bias),
            _ACTIVATIONS[self.activation](),
            nn.Linear(self.hidden_features, self.out_features, bias=self.bias),
        )

    @property
    def per_modality(self) -> bool:
        return isinstance(self.in_features, dict)

    def project(self, x: Tensor, modality: Any = None) -> Tensor:
        """PO = NAP(x) for inputs of one ``modality`` (ignored for a single-projection head). Never normalized."""
        if not self.per_modality:
            proj = self.projections[_DEFAULT_KEY]
        else:
            key = modality_key(modality)
            if key not in self.projections:
                raise ValueError(
                    f"NAPHead has no projection for modality {key!r}; it has {sorted(self.projections)}. "
                    "Build it with in_features={modality: width} for every modality in the data."
                )
            proj = self.projections[key]
        weight = next(proj.parameters())
        return proj(x.to(weight.dtype))

    def forward(self, features: dict[str, Tensor], **kwargs) -> dict[str, Tensor]:
        features[self.output_name] = self.project(features[self.input_name], features.get("modality"))
        return features

    def __repr__(self) -> str:
        shape = "Linear" if self.hidden_features is None else f"bottleneck({self.hidden_features}, {self.activation})"
        return f"NAPHead(in_features={self.in_features}, out_features={self.out_features}, {shape}, bias={self.bias})"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _get_submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def _norm_width(module: nn.Module) -> int | None:
    shape = getattr(module, "normalized_shape", None)
    if shape is not None:
        return int(shape[-1]) if isinstance(shape, (tuple, list)) else int(shape)
    weight = getattr(module, "weight", None)
    if isinstance(weight, Tensor) and weight.dim() == 1:
        return int(weight.shape[0])
    hidden = getattr(module, "hidden_size", None)
    return int(hidden) if hidden is not None else None


class NAPInputTap:
    """Capture the NAP input of a SentenceTransformer while it runs (forward pre-hooks, only inside a context).

    Args:
        model: the SentenceTransformer being trained.
        nap_input: one of ``auto``, ``pre_final_norm``, ``pre_normalize``, ``output`` (module docstring).
        final_norm: for ``pre_final_norm``: dotted path(s) of the final norm inside the Hugging Face model — a str
            (text models) or ``{modality: path}`` (e.g. ``{"text": "text_model.final_layer_norm", "image":
            "vision_model.post_layernorm"}``). ``None`` looks the usual names up.
    """

    def __init__(self, model: nn.Module, nap_input: str = "auto", final_norm: str | dict[str, str] | None = None):
        if nap_input not in NAP_INPUTS:
            raise ValueError(f"nap_input must be one of {list(NAP_INPUTS)}, got {nap_input!r}")
        self.model = model
        self.hf_model = self._find_hf_model(model)
        self.final_norm_paths: dict[str, str] = {}
        if nap_input in ("auto", "pre_final_norm"):
            self.final_norm_paths = self._resolve_final_norm(final_norm)
            if not self.final_norm_paths:
                if nap_input == "pre_final_norm":
                    raise ValueError(
                        "nap_input='pre_final_norm' but no final norm was found in the backbone (looked for "
                        f"{[_CLIP_TEXT_NORM, _CLIP_VISION_NORM, *_DECODER_NORMS]}). Pass final_norm='<dotted path "
                        "inside the Hugging Face model>' or use nap_input='pre_normalize'."
                    )
                nap_input = "pre_normalize"
            else:
                nap_input = "pre_final_norm"
        elif final_norm is not None:
            raise ValueError(f"final_norm is only used with nap_input='pre_final_norm' or 'auto', not {nap_input!r}")
        self.nap_input = nap_input
        self._normalizers = [m for m in model.modules() if isinstance(m, Normalize) or _is_role_normalize(m)]
        self._poolers = [m for m in model.modules() if type(m).__name__ == "Pooling" and hasattr(m, "pooling_mode")]
        self._captured: list[tuple[str, Tensor]] = []
        self._last_output: Any = None

    # --- construction helpers ------------------------------------------------------------------------------
    @staticmethod
    def _find_hf_model(model: nn.Module) -> nn.Module | None:
        from sentence_transformers.base.modules import Transformer

        backbones = {id(m): m for m in model.modules() if isinstance(m, Transformer)}
        if len(backbones) != 1:
            return None
        backbone = next(iter(backbones.values()))
        hf = getattr(backbone, "model", None)
        return hf if hf is not None else getattr(backbone, "auto_model", None)

    def _resolve_final_norm(self, final_norm: str | dict[str, str] | None) -> dict[str, str]:
        hf = self.hf_model
        if final_norm is not None:
            if hf is None:
                raise ValueError(
                    "final_norm needs a model with exactly one Hugging Face backbone (Transformer module)"
                )
            paths = {"text": final_norm} if isinstance(final_norm, str) else dict(final_norm)
            out = {}
            for modality, path in paths.items():
                if _get_submodule(hf, path) is None:
                    raise ValueError(f"final_norm path {path!r} not found in {type(hf).__name__}")
                out[modality_key(modality)] = path
            return out
        if hf is None:
            return {}
        if _get_submodule(hf, _CLIP_TEXT_NORM) is not None:
            out = {"text": _CLIP_TEXT_NORM}
            if _get_submodule(hf, _CLIP_VISION_NORM) is not None:
                out["image"] = _CLIP_VISION_NORM
            return out
        for path in _DECODER_NORMS:
            if _get_submodule(hf, path) is not None:
                return {"text": path}
        return {}

    # --- widths ---------------------------------------------------------------------------------------------
    def in_features(self) -> int | dict[str, int]:
        """The NAP input width: an int, or ``{modality: width}`` when the tapped norms differ in width."""
        if self.nap_input == "pre_final_norm":
            widths = {}
            for modality, path in self.final_norm_paths.items():
                width = _norm_width(self.hf_model.get_submodule(path))
                if width is None:
                    raise ValueError(f"cannot read the width of {path!r}; pass nap_head=NAPHead(...) explicitly")
                widths[modality] = width
            if len(widths) == 1:
                return next(iter(widths.values()))
            return widths
        dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else None
        if dim is None:
            dim = self.model.get_sentence_embedding_dimension()
        return int(dim)

    # --- capture ------------------------------------------------------------------------------------------
    @contextmanager
    def capturing(self) -> Iterator[NAPInputTap]:
        """Register the hooks for the duration of the block; then :meth:`collect` reads the last forward."""
        handles = [self.model.register_forward_hook(self._output_hook)]
        self._captured = []
        self._last_output = None
        if self.nap_input == "pre_final_norm":
            for modality, path in self.final_norm_paths.items():
                module = self.hf_model.get_submodule(path)
                handles.append(module.register_forward_pre_hook(self._make_tensor_hook(modality)))
        elif self.nap_input == "pre_normalize":
            for module in self._normalizers:
                handles.append(module.register_forward_pre_hook(self._make_features_hook(module)))
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _output_hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        self._last_output = output

    def _make_tensor_hook(self, modality: str):
        def hook(module: nn.Module, args: tuple) -> None:
            self._captured.append((modality, args[0]))

        return hook

    def _make_features_hook(self, module: nn.Module):
        key = getattr(module, "module_input_name", "sentence_embedding")

        def hook(mod: nn.Module, args: tuple) -> None:
            features = args[0]
            if isinstance(features, dict) and key in features:
                self._captured.append(("any", features[key]))

        return hook

    def embed(self, features: dict[str, Any], model: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        """Run ``model`` (default: the tapped model) on ``features``; return ``(sentence_embedding, nap_input)``.

        Pass the loss's current ``model`` when the trainer has wrapped it (DDP, compile): the hooks sit on the
        shared submodules, so they fire either way.
        """
        with self.capturing():
            (model if model is not None else self.model)(features)
            return self.collect()

    def collect(self) -> tuple[Tensor, Tensor]:
        """``(sentence_embedding, nap_input)`` of the last model forward run inside :meth:`capturing`."""
        out = self._last_output
        if not isinstance(out, Mapping) or "sentence_embedding" not in out:  # dict or BatchEncoding
            raise RuntimeError("NAPInputTap.collect() needs a model forward inside `with tap.capturing():` first")
        captured = list(self._captured)
        embedding = out["sentence_embedding"]
        if self.nap_input == "output":
            return embedding, embedding
        if self.nap_input == "pre_normalize":
            # no Normalize ran for these inputs (e.g. a model without one): the output is the un-normalized state
            return embedding, (captured[-1][1] if captured else embedding)
        key = modality_key(out.get("modality"))
        hits = [t for m, t in captured if m == key]
        if not hits:
            raise ValueError(
                f"nap_input='pre_final_norm' captured nothing for modality {key!r}; the tapped norms are "
                f"{self.final_norm_paths}. Pass final_norm={{modality: path}} for every modality in the data."
            )
        return embedding, self._pool(hits[-1], out)

    def _pool(self, hidden: Tensor, features: dict[str, Any]) -> Tensor:
        if hidden.dim() == 2:  # already pooled (e.g. CLIP vision: post_layernorm sees the CLS state)
            return hidden
        if hidden.dim() != 3:
            raise ValueError(f"cannot pool a tapped state of shape {tuple(hidden.shape)}")
        hf = self.hf_model
        text_model = getattr(hf, "text_model", None)
        if self._poolers:
            pooling = self._poolers[0]
            pooled = pooling(
                {**{k: v for k, v in features.items() if k != "sentence_embedding"}, "token_embeddings": hidden}
            )
            return pooled["sentence_embedding"]
        if text_model is not None and "input_ids" in features:
            return _clip_eos_pool(hidden, features["input_ids"], getattr(text_model, "eos_token_id", None))
        mask = features.get("attention_mask")
        if mask is None:
            return hidden.mean(1)
        mask = mask[:, : hidden.shape[1]].to(hidden.dtype).unsqueeze(-1)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def _clip_eos_pool(hidden: Tensor, input_ids: Tensor, eos_token_id: int | None) -> Tensor:
    """CLIP text pooling (HF ``CLIPTextTransformer``): the EOS token's state (argmax id when eos_token_id == 2)."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if eos_token_id is None or eos_token_id == 2:
        index = input_ids.to(torch.int).argmax(dim=-1)
    else:
        index = (input_ids == eos_token_id).int().argmax(dim=-1)
    return hidden[rows, index.to(hidden.device)]


def _is_role_normalize(module: nn.Module) -> bool:
    from st_magnitude.modules.role_normalize import RoleNormalize

    return isinstance(module, RoleNormalize)
