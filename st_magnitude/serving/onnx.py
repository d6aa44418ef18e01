"""ONNX without optimum: one graph per role, with the role transform folded in, run by ONNX Runtime.

:func:`export_onnx` traces ``model(features, task=role)["sentence_embedding"]`` for ``role`` = query and document
with torch's TorchScript-based ONNX exporter (``torch.onnx.export(..., dynamo=False)``; it needs only the ``onnx``
package), so each graph emits exactly what ``encode_query`` / ``encode_document`` emit — the ``Router`` route, the
``Normalize`` / :class:`~st_magnitude.modules.RoleNormalize` rescaling and a
:class:`~st_magnitude.modules.MIPSAugment` coordinate included. By default the graphs are then fused by ONNX
Runtime's transformer optimizer (float32, :mod:`st_magnitude.serving.onnx_graphs`); ``quantize="int8"`` also
quantizes their weights. The tokenizer is saved next to the graphs; :class:`OnnxEncoder` tokenizes like the model,
batches texts sorted by length as sentence-transformers does, and runs the graph of the requested role.

The export writes only into a new or empty folder, through a staging folder renamed into place at the end, so an
interrupted export leaves nothing behind and never overwrites a model's files; the staging folder a *killed* export
leaves (``.OUT.XXXXXXXX.partial``) is removed by the next export to ``OUT`` (each export holds a ``flock`` on its own,
so one that nobody holds is stale); a model whose weights hold NaN or inf is refused before anything is written.
Both graphs carry one identity (a hash of the model's weights and the export settings), and the folder's
``st_magnitude_onnx.json`` records it with the sha256 of every file the export wrote
(:mod:`st_magnitude.serving.onnx_config`), and the backbone's position limit (the most tokens its position embeddings
take), also stamped in both graphs. :class:`OnnxEncoder` trusts the files, not the stamp: it refuses a file whose
digest differs (a changed tokenizer, another export's graph with the stamp copied over), a file the export did not
write, a link leading outside the folder, a graph ONNX Runtime cannot load (truncated, with its digest recorded
anew), a config that does not match the graphs (a ``max_seq_length`` beyond the recorded position limit, a limit
other than the graphs'), a provider ONNX Runtime does not have, and a vector with NaN or inf at encode, each naming
the file, key or text.

Not carried into the graph: the :class:`~st_magnitude.NormBoundWarning` of an augmented model (the graph still
clamps the extra coordinate at 0), and ``encode``'s ``normalize_embeddings`` / ``truncate_dim`` options (a converted
model carries its own rescaling).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from st_magnitude._trust import InputFileError, file_digests, write_json_atomic
from st_magnitude._trust.outputs import output_path
from st_magnitude._trust.owned import remove_tree
from st_magnitude._trust.stages import held_stage, unmark
from st_magnitude.model.seq_length import backbone_limit, check_model_max_seq_length
from st_magnitude.serving._encode import check_finite
from st_magnitude.serving.metric import import_stack
from st_magnitude.serving.onnx_config import (
    CONFIG,
    INPUTS,
    ROLE_GRAPHS,
    check_dimension,
    read_export_config,
    read_export_files,
)
from st_magnitude.serving.onnx_graphs import (
    KEEP_F32,
    OPSET_RANGE,
    QUANTIZATIONS,
    fuse,
    model_identity,
    quantize_int8,
    stamp,
    stamp_of,
)

logger = logging.getLogger(__name__)

__all__ = ["KEEP_F32", "QUANTIZATIONS", "ROLE_GRAPHS", "OnnxEncoder", "export_onnx", "read_export_config"]


class _RoleGraph(nn.Module):
    def __init__(self, model: Any, role: str, input_names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.role = role
        self.input_names = list(input_names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.input_names, inputs))
        return self.model(features, task=self.role)["sentence_embedding"]


def export_onnx(
    model: Any,
    folder: str | Path,
    opset: int = 17,
    *,
    optimize: bool = True,
    quantize: str = "none",
    keep_f32: str = KEEP_F32,
) -> Path:
    """Write ``query.onnx``, ``document.onnx``, the tokenizer and a small config to ``folder``; returns it.

    The graphs take the tokenizer's outputs (``input_ids``, ``attention_mask``, and ``token_type_ids`` when the
    tokenizer makes them) with dynamic batch and sequence axes, and output ``sentence_embedding`` ``[batch, dim]``.

    Args:
        model: the SentenceTransformer (converted or not).
        folder: a new or empty folder (anything else is refused: the export would overwrite its files).
        opset: ONNX opset of the traced graphs.
        optimize: fuse attention, LayerNorm and GELU with ONNX Runtime's transformer optimizer (float32; the vectors
            stay within 1e-5 of torch's).
        quantize: ``"none"`` or ``"int8"`` (weights per output channel; faster, and the ranking moves: see
            docs/deployment.md).
        keep_f32: with ``quantize="int8"``, a regular expression on ``MatMul`` node names to keep in float32
            (default :data:`~st_magnitude.serving.onnx_graphs.KEEP_F32`, the feed-forward output matrices; ``""``
            quantizes them all).
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")
    if isinstance(opset, bool) or not isinstance(opset, int) or not OPSET_RANGE[0] <= opset <= OPSET_RANGE[1]:
        raise ValueError(f"opset must be an integer from {OPSET_RANGE[0]} to {OPSET_RANGE[1]}, got {opset!r}")
    try:
        re.compile(keep_f32)
    except re.error as exc:
        raise ValueError(f"keep_f32 must be a regular expression: {exc}") from None
    keep_f32 = keep_f32 if quantize == "int8" else ""
    _refuse_non_finite(model)
    import_stack("onnx", "onnx")
    if optimize or quantize != "none":
        import_stack("onnxruntime", "onnxruntime")
    target = _new_or_empty(output_path(folder))  # OUT/sub/.. is OUT: the final rename names the folder itself
    tokenizer, max_len = _tokenizer(model)
    check_model_max_seq_length(model, max_len, "export_onnx: the model's max_seq_length")
    limit = backbone_limit(model)
    position_limit = None if limit is None else limit[0]  # recorded, so a load can refuse a longer max_seq_length
    settings = {
        "opset": opset,
        "optimize": bool(optimize),
        "quantize": quantize,
        "keep_f32": keep_f32,
        "max_seq_length": max_len,
        "position_limit": position_limit,
    }
    identity = model_identity(model, settings)
    with _staged(target) as stage:
        was_training = model.training
        model.eval()
        try:
            with _eager_attention(model, enabled=optimize):
                for role, file in ROLE_GRAPHS.items():
                    names = _trace(model, role, stage / file, opset)
        finally:
            model.train(was_training)
        for role, file in ROLE_GRAPHS.items():
            if optimize:
                fuse(stage / file, model)
            if quantize == "int8":
                quantize_int8(stage / file, keep_f32)
            stamp(stage / file, identity, role, position_limit)
        tokenizer.save_pretrained(str(stage))
        unmark(stage)  # it becomes the export: its marker is no file of the export (nor of its digests)
        config = {
            "inputs": names,
            "max_seq_length": max_len,
            "position_limit": position_limit,
            "dimension": model.get_embedding_dimension(),
            "similarity": getattr(model, "similarity_fn_name", None),
            "optimize": bool(optimize),
            "quantize": quantize,
            "keep_f32": keep_f32,
            "identity": identity,
            "files": file_digests(stage, skip=CONFIG),
        }
        write_json_atomic(stage / CONFIG, config)
    logger.info("export_onnx: wrote %s to %s (%s)", sorted(ROLE_GRAPHS.values()), target, settings)
    return target


def _refuse_non_finite(model: Any) -> None:
    """A ValueError naming the first parameter or buffer that holds NaN or inf: every vector of its graphs would."""
    for name, tensor in model.state_dict().items():
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        values = tensor.detach().float() if tensor.is_floating_point() else tensor.detach()
        finite = torch.isfinite(values)
        if bool(finite.all()):
            continue
        n_nan = int(torch.isnan(values).sum())
        n_inf = int((~finite).sum()) - n_nan
        what = " and ".join(f"{n} {kind}" for n, kind in ((n_nan, "NaN"), (n_inf, "infinite")) if n)
        raise ValueError(
            f"export_onnx: the model's weight {name!r} holds {what} value(s) of {tensor.numel()}, so its graphs would "
            "encode texts to NaN; nothing was written. Export a model whose weights are finite (an earlier "
            "checkpoint)"
        )


def _new_or_empty(folder: Path) -> Path:
    if folder.exists() or folder.is_symlink():
        if not folder.is_dir() or folder.is_symlink():
            raise FileExistsError(f"{folder} exists and is not a folder: export_onnx writes a new or empty folder")
        if any(folder.iterdir()):
            raise FileExistsError(
                f"{folder} is not empty: export_onnx writes only into a new or empty folder (it would overwrite the "
                "files there, a model's tokenizer or an earlier export's graphs); choose another folder"
            )
    return folder


@contextlib.contextmanager
def _staged(target: Path) -> Iterator[Path]:
    """A staging folder beside ``target``, renamed to it when the block ends without error, removed otherwise.

    The export holds a ``flock`` on its staging folder while it runs, so the kernel lets go of it however the export
    ends (SIGKILL included): a staging folder of ``target`` that nobody holds was left by a killed export, and is
    removed here (:func:`~st_magnitude._trust.stages.held_stage`, the rule convert and strip follow too)."""
    with held_stage(target, suffix=".partial", run="export") as stage:
        try:
            yield stage
            _new_or_empty(target)  # nothing appeared there while exporting
            os.replace(stage, target)  # onto a missing or empty folder: one rename
        except BaseException:
            remove_tree(stage)  # this run's own stage, nothing else
            raise


def _trace(model: Any, role: str, path: Path, opset: int) -> list[str]:
    example = model.preprocess(["an example sentence to trace", "and a second one"], task=role)
    names = [k for k in INPUTS if k in example]
    axes: dict[str, dict[int, str]] = {k: {0: "batch", 1: "sequence"} for k in names}
    axes["sentence_embedding"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(
            _RoleGraph(model, role, names),
            tuple(example[k] for k in names),
            str(path),
            input_names=names,
            output_names=["sentence_embedding"],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    return names


@contextlib.contextmanager
def _eager_attention(model: Any, enabled: bool) -> Iterator[None]:
    """Trace with eager attention (the pattern the optimizer fuses); the model's own setting is restored after."""
    changed = []
    if enabled:
        for m in model.modules():
            setter = getattr(m, "set_attn_implementation", None)
            config = getattr(m, "config", None)
            current = getattr(config, "_attn_implementation", None)
            if setter is not None and current not in (None, "eager"):
                setter("eager")
                changed.append((setter, current))
    try:
        yield
    finally:
        for setter, previous in changed:
            setter(previous)


def _tokenizer(model: Any) -> tuple[Any, int | None]:
    """The (shared) tokenizer of the model's Transformer module and its max_seq_length."""
    for m in model.modules():
        tok = getattr(m, "tokenizer", None)
        if tok is not None and hasattr(tok, "save_pretrained") and m is not model:
            return tok, getattr(m, "max_seq_length", None)
    raise ValueError("export_onnx: no tokenizer found in the model's modules")


class OnnxEncoder:
    """``encode_query`` / ``encode_document`` from the graphs of :func:`export_onnx`, with ONNX Runtime.

    Texts are encoded in batches of texts sorted by length (longest first, as sentence-transformers does), so a batch
    pads little; the output keeps the input order.

    Args:
        folder: what :func:`export_onnx` wrote.
        providers: ONNX Runtime execution providers (default CPU); each must be one this ONNX Runtime has
            (``onnxruntime.get_available_providers()``), and the first must start.
        session_options: an ``onnxruntime.SessionOptions``; when ``None``, one with ``threads`` intra-op threads and
            spinning threads off (a waiting thread sleeps instead of burning CPU time).
        threads: intra-op threads when ``session_options`` is ``None`` (``None``: ONNX Runtime's default).

    Raises:
        InputFileError: the config is malformed or does not match the graphs (a ``max_seq_length`` beyond its
            ``position_limit``, a ``position_limit`` other than the graphs'); a file's sha256 is not the one the
            config records, a file is missing, added or linked outside the folder; a graph ONNX Runtime cannot load;
            a graph's identity or role is not the one the config records (a graph from another export or model).
        ValueError: a provider this ONNX Runtime does not have (the message lists those it has); at encode, a text
            whose vector holds NaN or inf.
    """

    def __init__(
        self,
        folder: str | Path,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        session_options=None,
        threads: int | None = None,
    ):
        ort = import_stack("onnxruntime", "onnxruntime")
        from transformers import AutoTokenizer

        folder = Path(folder)
        self.config = read_export_config(folder)
        providers = _check_providers(ort, providers)
        if session_options is None:
            session_options = ort.SessionOptions()
            if threads is not None:
                if threads < 1:
                    raise ValueError(f"threads must be >= 1, got {threads}")
                session_options.intra_op_num_threads = threads
            session_options.inter_op_num_threads = 1
            session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        blobs = read_export_files(folder, self.config)  # every file by its digest; the tokenizer's JSON parsed
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.sessions = {}
        for role, file in ROLE_GRAPHS.items():
            session = _session(ort, folder / file, blobs[file], session_options, providers)
            started = session.get_providers()
            if _provider_name(providers[0]) not in started:
                raise ValueError(
                    f"ONNX Runtime could not start {_provider_name(providers[0])!r} for {file} (the session would run "
                    f"on {started}); check its installation, or pass providers={started!r}"
                )
            self._check(session, folder, file, role)
            self.sessions[role] = session

    def _check(self, session: Any, folder: Path, file: str, role: str) -> None:
        path = folder / file
        identity, graph_role, graph_limit = stamp_of(session)
        expected = self.config["identity"]
        if identity != expected:
            found = "no identity" if identity is None else f"identity {identity[:12]}…"
            raise InputFileError(
                path,
                f"carries {found}, not the {expected[:12]}… that {CONFIG} records: this graph comes from another "
                "model or export; re-export the model into a new folder",
            )
        if graph_role != role:
            raise InputFileError(path, f"is the {graph_role!r} graph, not the {role!r} one")
        limit = self.config["position_limit"]
        if graph_limit != ("none" if limit is None else str(limit)):
            raise InputFileError(
                folder / CONFIG,
                f"key 'position_limit': is {limit}, but {file} was exported for a backbone of position limit "
                f"{graph_limit}; re-export the model",
            )
        names = [i.name for i in session.get_inputs()]
        if sorted(names) != sorted(self.config["inputs"]):
            raise InputFileError(path, f"takes inputs {names}, not the {self.config['inputs']} {CONFIG} records")
        outputs = {o.name: list(o.shape) for o in session.get_outputs()}
        if "sentence_embedding" not in outputs:
            raise InputFileError(path, f"has no output 'sentence_embedding' (outputs: {sorted(outputs)})")
        shape = outputs["sentence_embedding"]
        if len(shape) == 2 and not isinstance(shape[1], int):  # a width the graph computes (a concatenation)
            feeds = {k: v.astype(np.int64) for k, v in self.tokenizer(["a"], return_tensors="np").items()}
            shape = [shape[0], session.run(["sentence_embedding"], {k: feeds[k] for k in names})[0].shape[1]]
        check_dimension(self.config, folder, file, shape)

    def _encode(self, role: str, texts: Sequence[str], batch_size: int) -> np.ndarray:
        if isinstance(texts, str):
            texts = [texts]
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"the {role} at index {i} is {_kind(text)}, not a string: encode only texts")
        out = np.zeros((len(texts), self.config["dimension"]), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            batch = self.tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=self.config["max_seq_length"] or self.config["position_limit"],
                return_tensors="np",
            )
            feeds = {k: batch[k].astype(np.int64) for k in self.config["inputs"]}
            out[idx] = self.sessions[role].run(["sentence_embedding"], feeds)[0]
        return check_finite(out, role)

    def encode_query(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return self._encode("query", texts, batch_size)

    def encode_document(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return self._encode("document", texts, batch_size)


#: what ONNX Runtime raises for a graph it cannot read or check (a truncated or corrupt file); a provider that fails
#: to start raises another class and is not taken for a broken file
_BROKEN_GRAPH = ("InvalidProtobuf", "InvalidGraph", "InvalidArgument", "Fail", "NotImplemented", "NoModel")


def _session(ort: Any, path: Path, blob: bytes, session_options: Any, providers: list[Any]) -> Any:
    """An ONNX Runtime session of the graph ``blob`` read from ``path``; :class:`InputFileError` naming ``path``, in
    one line, when ONNX Runtime cannot load it (its digest matched: the file was truncated or corrupted and the digest
    recorded anew)."""
    state = ort.capi.onnxruntime_pybind11_state
    broken = tuple(getattr(state, name) for name in _BROKEN_GRAPH if isinstance(getattr(state, name, None), type))
    try:
        return ort.InferenceSession(blob, sess_options=session_options, providers=providers)
    except broken as exc:
        detail = " ".join(str(exc).split())[:300]
        raise InputFileError(
            path, f"is not a graph ONNX Runtime can load ({detail}); a truncated or corrupt file: re-export the model"
        ) from None


def _kind(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r:.40}"


def _provider_name(provider: Any) -> Any:
    """A provider is a name or a ``(name, options)`` pair."""
    return provider[0] if isinstance(provider, (tuple, list)) and provider else provider


def _check_providers(ort: Any, providers: Sequence[Any]) -> list[Any]:
    """``providers`` as a list, each one this ONNX Runtime has (ONNX Runtime itself falls back to the CPU silently)."""
    providers = [providers] if isinstance(providers, str) else list(providers)
    available = ort.get_available_providers()
    if not providers:
        raise ValueError(f"providers is empty; this ONNX Runtime has {', '.join(available)}")
    for provider in providers:
        if _provider_name(provider) not in available:
            raise ValueError(
                f"provider {_provider_name(provider)!r} is not available in this ONNX Runtime (available: "
                f"{', '.join(available)}); pass one of those, or install the build that has it"
            )
    return providers
