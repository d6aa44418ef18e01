"""Embeddings on disk: a ``.npy`` file read in fixed-size row blocks, and streaming (resumable) encoding into it.

* :class:`EmbeddingStore` opens a 2-D ``.npy`` file (float32 or float16, C order) and reads row blocks into a
  caller's buffer with plain file reads, so searching it (:func:`st_magnitude.evaluation.exact_search` accepts a store
  or a path) keeps the process's memory at one block whatever the corpus size: a corpus larger than RAM is
  searchable. The same file opens with ``numpy.load(path, mmap_mode="r")`` (:meth:`EmbeddingStore.memmap`).
* :func:`encode_to_store` encodes a large corpus block by block with ``encode_document`` (or ``encode_query``) into
  such a file, with a tqdm bar, and records its progress next to it (``<path>.progress.json``) after each block is
  flushed; an interrupted run resumes at the first unfinished block. A pool from ST's own
  ``model.start_multi_process_pool()`` can be passed to encode on several processes / GPUs.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from st_magnitude._trust import Fields, InputFileError, read_json
from st_magnitude._trust.write import write_json_atomic

logger = logging.getLogger(__name__)

__all__ = ["EmbeddingStore", "encode_to_store", "STORE_DTYPES"]

#: dtypes an embedding file may hold
STORE_DTYPES = ("float32", "float16")
_ROLES = ("document", "query", None)


class EmbeddingStore:
    """A 2-D float32/float16 ``.npy`` file of embeddings, read in row blocks without mapping it whole.

    Args:
        path: the ``.npy`` file (written by :func:`encode_to_store`, ``numpy.save`` or
            ``numpy.lib.format.open_memmap``).

    Example::

        store = EmbeddingStore("runs/corpus.npy")
        results = exact_search(query_embeddings, store, query_ids, corpus_ids, top_k=100)
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"Embedding file '{self.path}' does not exist.")
        try:
            with open(self.path, "rb") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                self.offset = f.tell()
        except (ValueError, EOFError) as exc:  # numpy's own refusal of a header it cannot parse
            raise InputFileError(self.path, f"is not a .npy file ({exc})") from None
        except OSError as exc:
            raise InputFileError(self.path, f"cannot be read ({exc.strerror or exc})") from None
        if len(shape) != 2 or fortran or min(shape) < 0:
            raise InputFileError(self.path, f"must hold a 2-D C-order array, got shape {shape} (fortran={fortran})")
        if dtype.name not in STORE_DTYPES or not dtype.isnative:
            raise InputFileError(self.path, f"holds {dtype}; an embedding file must be one of {list(STORE_DTYPES)}")
        expected = self.offset + shape[0] * shape[1] * dtype.itemsize
        actual = self.path.stat().st_size
        if actual < expected:
            raise InputFileError(self.path, f"is truncated: {actual} bytes, the header promises {expected}")
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[1]

    @property
    def row_bytes(self) -> int:
        return self.shape[1] * self.dtype.itemsize

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Rows ``start:stop`` read into the first ``stop - start`` rows of ``out`` (same dtype, C order)."""
        if not (0 <= start <= stop <= len(self)):
            raise IndexError(f"rows {start}:{stop} outside 0:{len(self)}")
        n = stop - start
        if out.dtype != self.dtype or out.ndim != 2 or out.shape[1] != self.dim or out.shape[0] < n:
            raise ValueError(f"out must be a [>= {n}, {self.dim}] {self.dtype} array, got {out.shape} {out.dtype}")
        view = out[:n]
        buf = memoryview(view).cast("B")
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset + start * self.row_bytes)
            done = 0
            while done < len(buf):
                got = f.readinto(buf[done:])
                if not got:
                    raise OSError(f"unexpected end of '{self.path}' at row {start + done // self.row_bytes}")
                done += got
        return view

    def read(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``start:stop`` as a new array."""
        stop = len(self) if stop is None else stop
        return self.read_into(start, stop, np.empty((stop - start, self.dim), dtype=self.dtype))

    def memmap(self) -> np.memmap:
        """The whole file as a read-only ``numpy.memmap``."""
        return np.load(self.path, mmap_mode="r")

    def __repr__(self) -> str:
        return f"EmbeddingStore('{self.path}', shape={self.shape}, dtype={self.dtype.name})"


def _progress_path(path: Path) -> Path:
    return path.with_name(path.name + ".progress.json")


def _texts_fingerprint(texts: Sequence[str]) -> str:
    h = hashlib.sha256(str(len(texts)).encode())
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _model_fingerprint(model: Any) -> str:
    """A cheap identity of the model: its repr and the first values of its first parameter."""
    h = hashlib.sha256(type(model).__name__.encode())
    h.update(repr(getattr(model, "similarity_fn_name", "")).encode())
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            h.update(p.detach().flatten()[:256].float().cpu().numpy().tobytes())
            break
    return h.hexdigest()


def _read_progress(path: Path) -> dict[str, Any]:
    """The progress file written by :func:`encode_to_store`, read through the trust boundary: every key it holds is
    checked (kind, range) and unknown keys are refused; an :class:`InputFileError` naming the file and the key
    otherwise (with how to start over)."""
    try:
        fields = Fields(read_json(path), path, what="a progress file of encode_to_store")
        fields.refuse_unknown(_PROGRESS_KEYS)
        n = fields.get("n", int, lo=1)
        state = {
            "n": n,
            "dtype": fields.get("dtype", str, choices=STORE_DTYPES),
            "role": fields.get("role", (str, type(None)), choices=_ROLES),
            "texts_sha256": fields.get("texts_sha256", str, check=_sha256),
            "model_sha256": fields.get("model_sha256", str, check=_sha256),
            "encode_kwargs": fields.get("encode_kwargs", dict, check=_string_values),
            "dim": fields.get("dim", int, lo=1),
            "done": fields.get("done", int, lo=0, hi=n),
        }
    except InputFileError as exc:
        raise InputFileError(
            path,
            f"{exc.problem}; it is not a progress file of encode_to_store: pass resume=False to encode again",
            exc.where,
        ) from None
    return state


_PROGRESS_KEYS = ("n", "dtype", "role", "texts_sha256", "model_sha256", "encode_kwargs", "dim", "done")


def _sha256(value: str) -> str | None:
    if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return None
    return "must be a SHA-256 hex digest (64 characters 0-9a-f)"


def _string_values(value: dict) -> str | None:
    return None if all(isinstance(v, str) for v in value.values()) else "must map each argument to its repr (a string)"


def _whole_file(path: Path, n: int, dtype: str, dim: Any) -> bool:
    """Whether ``path`` is a complete ``.npy`` file of ``n`` rows of ``dim`` ``dtype`` values (header and size)."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, file_dtype = read(f)
            offset = f.tell()
    except (OSError, ValueError):
        return False
    if shape != (n, dim) or fortran or file_dtype != np.dtype(dtype):
        return False
    return path.stat().st_size >= offset + n * int(dim) * np.dtype(dtype).itemsize


def encode_to_store(
    model: Any,
    texts: Sequence[str],
    path: str | os.PathLike,
    *,
    role: Literal["document", "query"] | None = "document",
    dtype: Literal["float32", "float16"] = "float32",
    batch_size: int = 32,
    block_size: int = 8192,
    pool: dict[str, Any] | None = None,
    resume: bool = True,
    show_progress_bar: bool = True,
    **encode_kwargs: Any,
) -> EmbeddingStore:
    """Encode ``texts`` into the ``.npy`` file ``path``, ``block_size`` texts at a time, resumably.

    Each block is encoded with ``model.encode_document`` (``role="document"``), ``model.encode_query``
    (``role="query"``) or ``model.encode`` (``None``), written into the file, flushed to disk, and only then recorded
    in ``<path>.progress.json``. Run the same call again after an interruption and it continues at the first
    unfinished block (the progress file also records a fingerprint of the texts, the model, the role and the dtype;
    a mismatch is an error, never a silent mix; ``resume=False`` starts over). A finished file is returned at once.

    Args:
        model: a SentenceTransformer (converted models keep their roles: use the role you will search with).
        texts: the corpus texts, in id order (see :func:`~st_magnitude.evaluation.ir.doc_texts`).
        path: the ``.npy`` file to write.
        role: ``"document"``, ``"query"`` or ``None``.
        dtype: ``"float32"`` or ``"float16"`` (half the disk; search converts blocks to float32).
        batch_size: encoding batch size.
        block_size: texts per written block (the unit of resumption).
        pool: a pool from ``model.start_multi_process_pool()``: each block is encoded on its processes
            (ST's own multi-process / multi-GPU encoding); you stop it with ``model.stop_multi_process_pool(pool)``.
        resume: continue a matching unfinished file (default) instead of starting over.
        show_progress_bar: a tqdm bar over documents.
        **encode_kwargs: passed to the encode call (e.g. ``chunk_size`` for the pool, ``truncate_dim``).

    Returns:
        The :class:`EmbeddingStore` of the finished file.
    """
    if role not in _ROLES:
        raise ValueError(f"role must be one of {list(_ROLES)}, got {role!r}")
    if dtype not in STORE_DTYPES:
        raise ValueError(f"dtype must be one of {list(STORE_DTYPES)}, got {dtype!r}")
    if not (isinstance(block_size, int) and block_size > 0):
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    if len(texts) == 0:
        raise ValueError("No texts to encode.")
    for bad in ("convert_to_tensor", "convert_to_numpy", "output_value", "precision"):
        if bad in encode_kwargs:
            raise ValueError(f"{bad!r} is set by encode_to_store (float numpy rows); do not pass it")
    path = Path(path)
    progress_file = _progress_path(path)
    n = len(texts)
    identity = {
        "n": n,
        "dtype": dtype,
        "role": role,
        "texts_sha256": _texts_fingerprint(texts),
        "model_sha256": _model_fingerprint(model),
        "encode_kwargs": {k: repr(v) for k, v in sorted(encode_kwargs.items())},
    }
    done = 0
    mm = None
    if resume and progress_file.is_file() and path.is_file():
        state = _read_progress(progress_file)
        diff = sorted(k for k in identity if state.get(k) != identity[k])
        if diff:
            raise ValueError(
                f"'{path}' was started for other inputs (they differ in {diff}); pass resume=False to overwrite it "
                "or choose another path."
            )
        done = int(state["done"])
        if done >= n:
            logger.info("encode_to_store: '%s' is complete (%d rows)", path, n)
            return EmbeddingStore(path)
        if _whole_file(path, n, dtype, state.get("dim")):
            mm = np.lib.format.open_memmap(path, mode="r+")
            logger.info("encode_to_store: resuming '%s' at row %d of %d", path, done, n)
        elif done == 0:  # killed while the file was being created: nothing was recorded, start it again
            logger.warning("encode_to_store: '%s' was interrupted while it was created; starting it again", path)
        else:
            raise ValueError(
                f"'{path}' is shorter than {n} rows of {dtype} although {progress_file.name} records {done} done: "
                "it was changed outside encode_to_store. Pass resume=False to encode it again."
            )
    elif path.exists() and not resume:
        logger.info("encode_to_store: overwriting '%s'", path)
    elif path.exists():
        raise FileExistsError(
            f"'{path}' exists without a progress file from encode_to_store; pass resume=False to overwrite it."
        )

    method = "encode" if role is None else f"encode_{role}"
    encode = getattr(model, method, None)
    if encode is None:
        hint = "" if role is None else " (use role=None)"
        raise ValueError(f"role={role!r} needs model.{method}; this model has none{hint}")
    kwargs = {"batch_size": batch_size, "convert_to_numpy": True, "show_progress_bar": False, **encode_kwargs}
    if pool is not None:
        kwargs["pool"] = pool
    bar = tqdm(total=n, initial=done, desc="encoding", unit="doc", disable=not show_progress_bar)
    try:
        while done < n:
            stop = min(done + block_size, n)
            emb = np.asarray(encode(list(texts[done:stop]), **kwargs))
            if emb.ndim != 2 or emb.shape[0] != stop - done:
                raise ValueError(f"the encoder returned shape {emb.shape} for {stop - done} texts")
            if mm is None:  # the progress file first: a kill before the file is whole leaves "done": 0 behind it
                path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(progress_file, {**identity, "dim": emb.shape[1], "done": 0}, indent=1)
                mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=(n, emb.shape[1]))
            if emb.shape[1] != mm.shape[1]:
                raise ValueError(f"the encoder returned dimension {emb.shape[1]}, the file holds {mm.shape[1]}")
            if not np.isfinite(emb).all():
                logger.warning("encode_to_store: non-finite embeddings in rows %d:%d", done, stop)
            elif dtype == "float16" and np.abs(emb).max() > np.finfo(np.float16).max:
                raise ValueError(
                    f"rows {done}:{stop} exceed the float16 range ({np.abs(emb).max():.3g}); use dtype='float32'"
                )
            mm[done:stop] = emb
            mm.flush()
            done = stop
            write_json_atomic(progress_file, {**identity, "dim": int(mm.shape[1]), "done": done}, indent=1)
            bar.update(emb.shape[0])
    finally:
        bar.close()
        del mm
    return EmbeddingStore(path)
