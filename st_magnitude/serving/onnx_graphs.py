"""What :func:`~st_magnitude.serving.onnx.export_onnx` does to a traced graph: fuse, quantize, stamp its identity.

* :func:`fuse` runs ONNX Runtime's transformer optimizer (``onnxruntime.transformers.optimizer``, model type
  ``bert``): one ``Attention`` node per layer, ``SkipLayerNormalization``, ``BiasGelu`` and
  ``EmbedLayerNormalization``, at float32. The patterns it knows are those of eager attention, so the export traces
  the model with ``attn_implementation="eager"``.
* :func:`quantize_int8` quantizes the weights of the ``MatMul`` and ``Attention`` nodes per output channel to int8
  (``onnxruntime.quantization.quantize_dynamic``; activations are quantized per tensor at run time), leaving the
  nodes :data:`KEEP_F32` names in float32.
* :func:`stamp` / :func:`stamp_of` write and read the identity, role and position limit a graph carries in its
  metadata, which :class:`~st_magnitude.serving.onnx.OnnxEncoder` checks against those the export's config records.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: the quantizations :func:`~st_magnitude.serving.onnx.export_onnx` offers
QUANTIZATIONS = ("none", "int8")
#: The opsets an export can use: attention exports from 14 on, torch's TorchScript exporter goes up to 20.
OPSET_RANGE = (14, 20)
#: metadata keys every exported graph carries
IDENTITY_KEY = "st_magnitude.identity"
ROLE_KEY = "st_magnitude.role"
POSITION_LIMIT_KEY = "st_magnitude.position_limit"
#: nodes ``quantize_int8`` leaves in float32 (a regular expression on node names): the second feed-forward matrix of
#: every layer, whose input (after GELU) has the outliers that per-tensor int8 activations lose most to
KEEP_F32 = r"/layer\.\d+/output/dense/MatMul$"


def model_identity(model: Any, settings: dict[str, Any]) -> str:
    """sha256 of the model's module structure, every parameter and buffer (name, dtype, shape, bytes) and the export
    ``settings``: two exports share it only when they came from the same weights with the same settings."""
    import torch

    h = hashlib.sha256()
    h.update(repr(model).encode("utf-8"))
    h.update(json.dumps(settings, sort_keys=True).encode("utf-8"))
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _attention_shape(model: Any) -> tuple[int, int]:
    """(num_heads, hidden_size) of the model's transformer, 0 where unknown (the optimizer then reads the graph)."""
    for m in model.modules():
        config = getattr(m, "config", None)
        if config is not None and hasattr(config, "num_attention_heads") and hasattr(config, "hidden_size"):
            return int(config.num_attention_heads), int(config.hidden_size)
    return 0, 0


def fuse(path: Path, model: Any) -> dict[str, int]:
    """Fuse the graph at ``path`` in place (float32); returns the fused operator counts (logged)."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    heads, hidden = _attention_shape(model)
    optimized = optimizer.optimize_model(
        str(path),
        model_type="bert",
        num_heads=heads,
        hidden_size=hidden,
        optimization_options=FusionOptions("bert"),
        opt_level=0,
        use_gpu=False,
    )
    counts = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    optimized.save_model_to_file(str(path))
    logger.info("fused %s: %s", path.name, counts)
    return counts


def quantize_int8(path: Path, keep_f32: str = KEEP_F32) -> list[str]:
    """Quantize the graph at ``path`` in place (int8 weights per output channel); returns the nodes kept in f32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(path), load_external_data=False).graph
    pattern = re.compile(keep_f32) if keep_f32 else None
    kept = [n.name for n in graph.node if n.op_type == "MatMul" and pattern is not None and pattern.search(n.name)]
    tmp = path.with_name(path.stem + ".int8.onnx")
    quantize_dynamic(
        str(path),
        str(tmp),
        per_channel=True,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Attention"],
        nodes_to_exclude=kept,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    tmp.replace(path)
    logger.info("quantized %s to int8, %d MatMul node(s) kept in float32", path.name, len(kept))
    return kept


def stamp(path: Path, identity: str, role: str, position_limit: int | None = None) -> None:
    """Write ``identity``, ``role`` and the backbone's ``position_limit`` (``"none"`` for ``None``) into the metadata
    of the graph at ``path``."""
    import onnx

    keys = (IDENTITY_KEY, ROLE_KEY, POSITION_LIMIT_KEY)
    graph = onnx.load(str(path))
    kept = [p for p in graph.metadata_props if p.key not in keys]
    del graph.metadata_props[:]
    graph.metadata_props.extend(kept)
    for key, value in zip(keys, (identity, role, "none" if position_limit is None else str(position_limit))):
        entry = graph.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(graph, str(path))


def stamp_of(session: Any) -> tuple[str | None, str | None, str | None]:
    """(identity, role, position limit as written) an ONNX Runtime session's graph carries, ``None`` where
    missing."""
    meta = session.get_modelmeta().custom_metadata_map
    return meta.get(IDENTITY_KEY), meta.get(ROLE_KEY), meta.get(POSITION_LIMIT_KEY)
