"""Statistics a loss keeps about its batches, on the device until they are logged, and the pair-order count MW logs.

:class:`BatchStats` is the recording part (``last_stats``, ``pop_stats``, ``stats_prefix``) shared by the losses
that :class:`~st_magnitude.callbacks.LossStatsCallback` logs; :func:`correctly_ordered_pairs` is the Mann–Whitney
U statistic of one score block against the batch's positives (MW's in-batch AUC).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = ["BatchStats", "correctly_ordered_pairs", "read_stats"]


def read_stats(stats: dict[str, Tensor]) -> dict[str, float]:
    """``{name: 0-d tensor}`` as Python floats, in one host read (one device sync on an accelerator)."""
    if not stats:
        return {}
    values = list(stats.values())
    device = values[0].device
    numbers = torch.stack([v.detach().float().to(device).reshape(()) for v in values]).tolist()
    return dict(zip(stats, numbers))


class BatchStats:
    """Mixin of a loss that keeps per-batch statistics: the latest batch's in :attr:`last_stats`, their average
    since the last read in :meth:`pop_stats` (what :class:`~st_magnitude.callbacks.LossStatsCallback` logs, under
    ``stats_prefix``). Everything stays on the device until it is read."""

    stats_prefix = ""
    #: whether the loss computes its statistics; a loss whose statistics cost a pass of their own (MW's sort) keeps
    #: it False until a :class:`~st_magnitude.callbacks.LossStatsCallback` (or the user) sets it
    record_stats: bool = True

    def _record_stats(self, stats: dict[str, Tensor | float]) -> None:
        """Keep one batch's statistics, and their running sums since the last :meth:`pop_stats`, on the device: a
        training step reads nothing on the host for them (they are read when logged)."""
        values = {
            key: value.detach().float() if isinstance(value, Tensor) else torch.tensor(float(value))
            for key, value in stats.items()
        }
        self.__dict__["_last_stats"] = values
        accum = self.__dict__.setdefault("_stats_accum", {})
        for key, value in values.items():
            total, count = accum.get(key, (None, 0))
            accum[key] = (value if total is None else total + value, count + 1)
        if logger.isEnabledFor(logging.DEBUG):  # a host read, only when asked for
            logger.debug("%s batch stats: %s", type(self).__name__, read_stats(values))

    @property
    def last_stats(self) -> dict[str, float]:
        """The statistics of the latest batch (read on the host now)."""
        return read_stats(self.__dict__.get("_last_stats", {}))

    def pop_stats(self) -> dict[str, float]:
        """Average of the statistics recorded since the last call (and reset): one host read for all of them."""
        accum = self.__dict__.get("_stats_accum", {})
        out = read_stats({key: total / count for key, (total, count) in accum.items() if count})
        self.__dict__["_stats_accum"] = {}
        return out


def correctly_ordered_pairs(positives: Tensor, block: Tensor, own_columns: Tensor) -> Tensor:
    """Twice the Mann–Whitney U of ``positives`` against the entries of ``block`` (``[rows, M]``) except row r's
    own positive (column ``own_columns[r]``): ``2·Σ_i Σ_k ([p_i > n_k] + ½[p_i = n_k])``, an exact int64 on the
    device (no host read).

    One sort of the B positives, then two binary searches per score: a score ``n`` is below ``B − right(n)``
    positives and ties ``right(n) − left(n)`` of them, so it adds ``2B − left(n) − right(n)``. The own positives
    are counted with the rest and taken out again (rows entries). Scores must be finite (MW refuses others first).
    """
    with torch.no_grad():
        ordered = positives.detach().reshape(-1).sort().values
        flat = block.detach().reshape(-1).to(ordered.dtype)
        own = flat[torch.arange(block.size(0), device=flat.device) * block.size(1) + own_columns]
        twice_b = 2 * ordered.numel()

        def count(x: Tensor) -> Tensor:
            left = torch.searchsorted(ordered, x)
            right = torch.searchsorted(ordered, x, right=True)
            return (twice_b - left - right).sum()

        return count(flat) - count(own)
