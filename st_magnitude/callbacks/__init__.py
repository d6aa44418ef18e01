"""Trainer callbacks for st-magnitude, all in one place.

- :class:`GammaLoggingCallback`: logs the learnable γq / γd (``gamma``).
- :class:`ScaleLoggingCallback`: logs a learnable softmax scale / temperature (``scale``).
- :class:`LossStateCallback`: saves the trainable state that lives in a loss (the L2Dir NAP head, Revela's LM, a
  loss-held γ̂) with every checkpoint and restores it on resume, for any loss (``loss_state``);
  :class:`LossStatsCallback` logs the statistics a loss averages (L2Dir's length ratio).
- :class:`RevelaLMGradClipCallback`, :class:`RevelaDiagnosticsCallback`, :func:`revela_callbacks`: Revela's LM
  gradient clipping and relevance diagnostics (``revela``).
"""

from __future__ import annotations

from st_magnitude._lazy import lazy_exports

__all__ = [
    "GammaLoggingCallback",
    "LossStateCallback",
    "LossStatsCallback",
    "RevelaDiagnosticsCallback",
    "ScaleLoggingCallback",
    "load_loss_state",
    "revela_callbacks",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".gamma": ("GammaLoggingCallback",),
        ".loss_state": ("LossStateCallback", "LossStatsCallback", "load_loss_state"),
        ".scale": ("ScaleLoggingCallback",),
        ".revela": ("RevelaDiagnosticsCallback", "revela_callbacks"),
    },
)
