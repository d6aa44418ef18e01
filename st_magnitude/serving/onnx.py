"""ONNX without optimum: one graph per role, with the role transform folded in, run by ONNX Runtime.

:func:`export_onnx` traces ``model(features, task=role)["sentence_embedding"]`` for ``role`` = query and document
with torch's TorchScript-based ONNX exporter (``torch.onnx.export(..., dynamo=False)``; it needs only the ``onnx``
package), so each graph emits exactly what ``encode_query`` / ``encode_document`` emit — the ``Router`` route, the
``Normalize`` / :class:`~st_magnitude.modules.RoleNormalize` rescaling and a
:class:`~st_magnitude.modules.MIPSAugment` coordinate included. The tokenizer is saved next to the graphs;
:class:`OnnxEncoder` tokenizes like the model and runs the graph of the requested role.

Not carried into the graph: the :class:`~st_magnitude.NormBoundWarning` of an augmented model (the graph still
clamps the extra coordinate at 0), and ``encode``'s ``normalize_embeddings`` / ``truncate_dim`` options (a converted
model carries its own rescaling).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from st_magnitude.serving.metric import import_stack

logger = logging.getLogger(__name__)

__all__ = ["ROLE_GRAPHS", "OnnxEncoder", "export_onnx"]

#: the graphs :func:`export_onnx` writes, by role
ROLE_GRAPHS = {"query": "query.onnx", "document": "document.onnx"}
_CONFIG = "st_magnitude_onnx.json"


class _RoleGraph(nn.Module):
    def __init__(self, model: Any, role: str, input_names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.role = role
        self.input_names = list(input_names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.input_names, inputs))
        return self.model(features, task=self.role)["sentence_embedding"]


def export_onnx(model: Any, folder: str | Path, opset: int = 17) -> Path:
    """Write ``query.onnx``, ``document.onnx``, the tokenizer and a small config to ``folder``; returns it.

    The graphs take the tokenizer's outputs (``input_ids``, ``attention_mask``, and ``token_type_ids`` when the
    tokenizer makes them) with dynamic batch and sequence axes, and output ``sentence_embedding`` ``[batch, dim]``.
    """
    import_stack("onnx", "onnx")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    tokenizer, max_len = _tokenizer(model)
    try:
        for role, file in ROLE_GRAPHS.items():
            example = model.preprocess(["an example sentence to trace", "and a second one"], task=role)
            names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in example]
            args = tuple(example[k] for k in names)
            axes = {k: {0: "batch", 1: "sequence"} for k in names}
            axes["sentence_embedding"] = {0: "batch"}
            with torch.no_grad():
                torch.onnx.export(
                    _RoleGraph(model, role, names),
                    args,
                    str(folder / file),
                    input_names=names,
                    output_names=["sentence_embedding"],
                    dynamic_axes=axes,
                    opset_version=opset,
                    dynamo=False,
                )
    finally:
        model.train(was_training)
    tokenizer.save_pretrained(str(folder))
    config = {"inputs": names, "max_seq_length": max_len, "dimension": model.get_embedding_dimension()}
    (folder / _CONFIG).write_text(json.dumps(config, indent=2), encoding="utf-8")
    logger.info("export_onnx: wrote %s to %s", sorted(ROLE_GRAPHS.values()), folder)
    return folder


def _tokenizer(model: Any) -> tuple[Any, int | None]:
    """The (shared) tokenizer of the model's Transformer module and its max_seq_length."""
    for m in model.modules():
        tok = getattr(m, "tokenizer", None)
        if tok is not None and hasattr(tok, "save_pretrained") and m is not model:
            return tok, getattr(m, "max_seq_length", None)
    raise ValueError("export_onnx: no tokenizer found in the model's modules")


class OnnxEncoder:
    """``encode_query`` / ``encode_document`` from the graphs of :func:`export_onnx`, with ONNX Runtime.

    Args:
        folder: what :func:`export_onnx` wrote.
        providers: ONNX Runtime execution providers (default CPU).
        session_options: an ``onnxruntime.SessionOptions`` (e.g. ``intra_op_num_threads``).
    """

    def __init__(self, folder: str | Path, providers: Sequence[str] = ("CPUExecutionProvider",), session_options=None):
        ort = import_stack("onnxruntime", "onnxruntime")
        from transformers import AutoTokenizer

        folder = Path(folder)
        config_path = folder / _CONFIG
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path} not found: export the model with st_magnitude.serving.export_onnx")
        self.config = json.loads(config_path.read_text(encoding="utf-8"))
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.sessions = {
            role: ort.InferenceSession(str(folder / file), sess_options=session_options, providers=list(providers))
            for role, file in ROLE_GRAPHS.items()
        }

    def _encode(self, role: str, texts: Sequence[str], batch_size: int) -> np.ndarray:
        if isinstance(texts, str):
            texts = [texts]
        out = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=self.config["max_seq_length"],
                return_tensors="np",
            )
            feeds = {k: batch[k].astype(np.int64) for k in self.config["inputs"]}
            out.append(self.sessions[role].run(["sentence_embedding"], feeds)[0])
        if not out:
            return np.zeros((0, self.config["dimension"]), dtype=np.float32)
        return np.concatenate(out).astype(np.float32, copy=False)

    def encode_query(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return self._encode("query", texts, batch_size)

    def encode_document(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return self._encode("document", texts, batch_size)
