"""One batch of per-column embeddings: its checks (rows, finiteness, negatives, duplicates) and its gathering.

Gathering across processes (``gather_across_devices``) keeps this process's rows differentiable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from sentence_transformers.util import all_gather_with_grad, get_rank, get_world_size
from torch import Tensor, nn

from st_magnitude._cpu_shortcuts import takes_cpu_shortcut

logger = logging.getLogger(__name__)


def column_name(index: int) -> str:
    """The role of input column ``index``: anchor, positive, negative_1, ..."""
    return ("anchor", "positive")[index] if index < 2 else f"negative_{index - 1}"


def feature_rows(features: dict[str, Any]) -> int:
    """Rows (inputs) in one tokenized column; 0 when it holds no batch tensor (an empty batch)."""
    if "cu_seq_lens_q" in features:
        return len(features["cu_seq_lens_q"]) - 1
    for key in ("input_ids", "attention_mask", "pixel_values", "sentence_embedding"):
        value = features.get(key)
        if isinstance(value, Tensor) and value.ndim > 0:
            return value.shape[0]
    return next((v.shape[0] for v in features.values() if isinstance(v, Tensor) and v.ndim > 0), 0)


def check_columns(rows: list[int], loss_name: str) -> None:
    """Raise a clear error for fewer than 2 columns, an empty batch, or columns whose row counts differ."""
    if len(rows) < 2:
        raise ValueError(
            f"{loss_name} needs at least 2 input columns (anchor, positive, negative_1, ...), got {len(rows)}."
        )
    if max(rows) == 0:
        raise ValueError(f"{loss_name}: the batch is empty (0 rows in every column); there is nothing to score.")
    if len(set(rows)) > 1:
        counts = ", ".join(f"{column_name(i)} {n}" for i, n in enumerate(rows))
        raise ValueError(
            f"{loss_name}: every input column must hold one row per anchor (row i of each column belongs to anchor "
            f"i), but the columns have {counts} rows."
        )


#: On an accelerator, how many calls a loss lets pass between two reads of its finiteness flag (each read is one
#: host sync), and of the flags counted by :class:`~st_magnitude.losses._device_count.DeviceCount` (RevelaLoss's
#: batch checks). Between reads the flag is accumulated on the device. On CPU every call is checked (no sync to save).
#: Set to 1 to stop at the first non-finite batch, with its rows, on an accelerator too.
FINITE_CHECK_INTERVAL = 50

#: The duplicate-positive check (a ``torch.unique`` and a host sync) runs on the first calls, then every this many.
#: ``DeviceCount`` reads its flag on the same first calls.
DUPLICATE_CHECK_FIRST, DUPLICATE_CHECK_INTERVAL = 8, 64


def check_finite(
    columns: list[Tensor], loss_name: str, what: str = "embeddings", *, owner: nn.Module | None = None
) -> None:
    """Raise when any embedding is NaN or infinite, naming the column, its rows and (when distributed) the process.

    A single non-finite embedding makes the loss and every gradient NaN. Without ``owner`` the check runs now (one
    device sync on an accelerator). With ``owner`` (the loss calling it) a tensor on an accelerator is checked
    without a host sync: :class:`FiniteCheck` accumulates a flag on the device and reads it every
    :data:`FINITE_CHECK_INTERVAL` calls; on CPU it still checks every call.
    """
    deferred = columns and not takes_cpu_shortcut(columns[0])  # on the CPU reading the flag waits for nothing
    if owner is not None and deferred and FINITE_CHECK_INTERVAL > 1:
        checks = owner.__dict__.setdefault("_finite_checks", {})
        checks.setdefault(what, FiniteCheck())(columns, loss_name, what)
        return
    finite = [torch.isfinite(c.detach()) for c in columns]
    bad_rows = [~(f.flatten(1) if f.ndim > 1 else f.unsqueeze(1)).all(dim=1) for f in finite]
    if not bool(torch.stack([b.any() for b in bad_rows]).any()):
        return
    where = []
    for i, bad in enumerate(bad_rows):
        rows = bad.nonzero().flatten().tolist()
        if rows:
            shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
            where.append(f"column {i} ({column_name(i)}) rows [{shown}]")
    rank = f" on process {get_rank()}" if get_world_size() > 1 else ""
    raise ValueError(
        f"{loss_name}: {what} are NaN or infinite in {'; '.join(where)} of this batch{rank} (0-based rows of the "
        f"batch). {_NAN_CAUSES}"
    )


_NAN_CAUSES = (
    "The loss and every gradient would be NaN. Usual causes: fp16 overflow in the model (train in bf16 or fp32), a "
    "diverged step (lower the learning rate, clip gradients), or NaN/inf inputs."
)


class FiniteCheck:
    """:func:`check_finite` on an accelerator without a host sync per call: a device flag, read every
    :data:`FINITE_CHECK_INTERVAL` calls (and then the current batch is checked row by row)."""

    def __init__(self) -> None:
        self._flag: Tensor | None = None
        self._calls = 0

    def __call__(self, columns: list[Tensor], loss_name: str, what: str) -> None:
        with torch.no_grad():
            bad = torch.stack([~torch.isfinite(c.detach()).all() for c in columns]).any()
        self._flag = bad if self._flag is None else self._flag | bad
        self._calls += 1
        if self._calls % FINITE_CHECK_INTERVAL:
            return
        flag, self._flag = bool(self._flag), None  # the one host sync of the interval
        if flag:
            check_finite(columns, loss_name, what)  # the current batch, with its rows, when it is one of them
            raise ValueError(
                f"{loss_name}: {what} were NaN or infinite in at least one of the last {FINITE_CHECK_INTERVAL} "
                f"batches (checked every {FINITE_CHECK_INTERVAL} calls on {columns[0].device} to avoid a host sync "
                "per step; set st_magnitude.losses._batch.FINITE_CHECK_INTERVAL = 1 to stop at the batch, with its "
                f"rows). {_NAN_CAUSES}"
            )


def _check_same_rows_across_processes(rows: int, device: torch.device, loss_name: str) -> None:
    """All-gather the per-process batch sizes first: gathering unequal tensors would abort the process (gloo)."""
    world = get_world_size()
    local = torch.tensor([rows], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(sizes, local)
    sizes_list = [int(t) for t in sizes]
    if len(set(sizes_list)) > 1:
        raise ValueError(
            f"{loss_name}: gather_across_devices=True needs the same per-device batch size on every process, got "
            f"{sizes_list} (process 0, 1, ...). Use dataloader_drop_last=True so no process gets a short last batch."
        )


def gather(
    queries: Tensor, docs: list[Tensor], enabled: bool, loss_name: str = "loss"
) -> tuple[Tensor, list[Tensor], int, int]:
    """All-gather (with gradients, like ST's MNRL) when ``enabled``; returns ``(queries, docs, offset, world)``.

    The per-process batch sizes are compared first (one small all-gather) and unequal sizes raise ``ValueError``.
    """
    gathered, offset, world = gather_columns([queries, *docs], enabled, loss_name)
    return gathered[0], gathered[1:], offset, world


def gather_columns(columns: list[Tensor], enabled: bool, loss_name: str = "loss") -> tuple[list[Tensor], int, int]:
    """All-gather every column (with gradients) when ``enabled``; returns ``(columns, offset, world)``, where this
    process's rows are ``offset:offset + rows`` of each gathered column. Unequal per-process sizes raise."""
    if not enabled or get_world_size() <= 1:
        return list(columns), 0, 1
    batch_size = columns[0].size(0)
    _check_same_rows_across_processes(batch_size, columns[0].device, loss_name)
    return [all_gather_with_grad(c) for c in columns], get_rank() * batch_size, get_world_size()


def check_has_negatives(world_batch_size: int, n_doc_columns: int, loss_name: str) -> None:
    if n_doc_columns < 1:
        raise ValueError(
            f"{loss_name} needs at least 2 input columns (anchor, positive[, negative_1, ...]), got "
            f"{n_doc_columns + 1}."
        )
    if world_batch_size <= 1 and n_doc_columns == 1:
        raise ValueError(
            f"{loss_name}: a batch of one (anchor, positive) pair has no negatives, so the loss is undefined. Use a "
            "batch size of at least 2 (in-batch negatives) or add hard-negative columns (anchor, positive, "
            "negative_1, ...)."
        )


def prepare_columns(
    columns: list[Tensor], enabled: bool, loss_name: str, owner: nn.Module | None = None
) -> tuple[Tensor, list[Tensor], int, int]:
    """Validate per-column embeddings (count, equal rows, finite), gather them when ``enabled``, check negatives.

    Returns ``(queries, docs, offset, world)`` like :func:`gather`.
    """
    check_columns([c.size(0) for c in columns], loss_name)
    check_finite(columns, loss_name, owner=owner)
    queries, docs, offset, world = gather(columns[0], list(columns[1:]), enabled, loss_name)
    check_has_negatives(queries.size(0), len(docs), loss_name)
    return queries, docs, offset, world


class DuplicateCheck:
    """Log (once) when two positives in a batch are identical: each is then a negative of the other's query.

    ``torch.unique`` and the host sync it needs run on the first :data:`DUPLICATE_CHECK_FIRST` calls, then every
    :data:`DUPLICATE_CHECK_INTERVAL` calls: a data set with duplicate positives shows them early, and a training run
    with the no-duplicates sampler does not pay for the check every step.
    """

    def __init__(self) -> None:
        self._warned = False
        self._calls = 0

    def __call__(self, positives: Tensor, loss_name: str) -> None:
        self._calls += 1
        if self._warned or positives.size(0) < 2:
            return
        if self._calls > DUPLICATE_CHECK_FIRST and self._calls % DUPLICATE_CHECK_INTERVAL:
            return
        with torch.no_grad():
            n_unique = torch.unique(positives.detach(), dim=0).size(0)
        if n_unique < positives.size(0):
            logger.warning(
                "%s: %d of %d positives in this batch are exact duplicates; each duplicate is scored as a negative "
                "for the other query (as in MultipleNegativesRankingLoss). Use "
                "SentenceTransformerTrainingArguments(batch_sampler=BatchSamplers.NO_DUPLICATES) to avoid these false "
                "negatives.",
                loss_name,
                positives.size(0) - n_unique,
                positives.size(0),
            )
            self._warned = True


@dataclass
class GatheredBatch:
    """A validated (and, with ``gather_across_devices``, gathered) batch of per-column embeddings.

    This process's anchors are rows ``offset:offset + size`` of ``queries``; ``docs`` are the document columns
    (positives first), ``docs_all`` their concatenation; ``extra`` holds what a loss precomputes once per batch.
    """

    size: int
    queries: Tensor
    docs: list[Tensor]
    docs_all: Tensor
    offset: int
    world: int
    extra: dict[str, Any] = field(default_factory=dict)

    def local_rows(self, begin: int, end: int) -> Tensor:
        """Indices, in the gathered batch, of this process's anchors ``begin:end``."""
        return torch.arange(self.offset + begin, self.offset + end, device=self.queries.device)
