"""A loaded model whose ``encode_query`` / ``encode_document`` run its ONNX export (``evaluate --backend onnx``).

:func:`onnx_backed` exports the model with :func:`~st_magnitude.serving.onnx.export_onnx` into a new folder and
returns :class:`OnnxBacked`: everything else (``similarity``, the model card, the modules) is the torch model's, so an
evaluator scores the ONNX vectors with the model's own similarity.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from st_magnitude.serving.onnx import OnnxEncoder, export_onnx

__all__ = ["OnnxBacked", "onnx_backed"]


class OnnxBacked:
    """``model`` with ``encode_query`` / ``encode_document`` answered by ``encoder`` (other attributes: ``model``'s).

    The encode methods take sentence-transformers' keywords: ``batch_size``, ``convert_to_tensor`` /
    ``convert_to_numpy`` and ``show_progress_bar`` (ignored); any other keyword is refused, since the graph cannot
    honour it.
    """

    def __init__(self, model: Any, encoder: OnnxEncoder):
        self._model = model
        self.encoder = encoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __iter__(self):  # the module list (what describes the model's similarity)
        return iter(self._model)

    def __len__(self) -> int:
        return len(self._model)

    def __getitem__(self, index):
        return self._model[index]

    def _encode(self, role: str, texts: Sequence[str] | str, batch_size: int = 32, **kw: Any):
        to_tensor = kw.pop("convert_to_tensor", False)
        kw.pop("convert_to_numpy", None)
        kw.pop("show_progress_bar", None)
        if kw:
            raise ValueError(f"the ONNX backend encodes without {sorted(kw)} (the graph carries the model's own)")
        single = isinstance(texts, str)
        out = self.encoder._encode(role, [texts] if single else texts, batch_size)
        out = out[0] if single else out
        return torch.from_numpy(out) if to_tensor else out

    def encode_query(self, texts, batch_size: int = 32, **kw: Any):
        return self._encode("query", texts, batch_size, **kw)

    def encode_document(self, texts, batch_size: int = 32, **kw: Any):
        return self._encode("document", texts, batch_size, **kw)


def onnx_backed(model: Any, folder: str | Path, *, quantize: str = "none", threads: int | None = None) -> OnnxBacked:
    """Export ``model`` to ``folder`` (new or empty) and return it backed by the export."""
    export_onnx(model, folder, quantize=quantize)
    return OnnxBacked(model, OnnxEncoder(folder, threads=threads))


#: What encodes in ``st-magnitude evaluate --backend``: the torch model, or its ONNX export (f32 fused, or int8).
BACKENDS = ("torch", "onnx", "onnx-int8")


def onnx_encoder(backend: str, threads: int | None = None) -> Callable[[Any], AbstractContextManager] | None:
    """The ``encoder`` of :func:`~st_magnitude.evaluation.runner.evaluate_folders` for ``backend`` (one of
    :data:`BACKENDS`): ``None`` for torch; else the model exported to a temporary folder (``"onnx"``: f32 fused,
    ``"onnx-int8"``: int8 weights) and encoded by ONNX Runtime on ``threads`` threads."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "torch":
        return None

    @contextmanager
    def encoder(model: Any) -> Iterator[OnnxBacked]:
        with tempfile.TemporaryDirectory(prefix="st-magnitude-onnx-") as tmp:
            yield onnx_backed(
                model, Path(tmp) / "export", quantize="int8" if backend == "onnx-int8" else "none", threads=threads
            )

    return encoder
