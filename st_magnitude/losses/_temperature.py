"""A learnable softmax scale (inverse temperature) held by a loss, CLIP style.

``scale="learnable"`` (InfoNCE) or ``temperature="learnable"`` (MW, L2Dir's InfoNCE part) replaces the fixed number
by :class:`LearnableScale`: one scalar parameter ``log_scale`` with ``scale = exp(log_scale)`` and
``temperature = 1/scale = exp(−log_scale)``, initialised at the loss's default and clamped to ``1 ≤ scale ≤ 100``
(``0.01 ≤ temperature ≤ 1``), as CLIP does (Radford et al. 2021, §2.5: "directly optimized during training as a
log-parameterized multiplicative scalar ... clipped to prevent scaling the logits by more than 100").

The clamp is the one OpenCLIP applies after each optimizer step, ``logit_scale.clamp_(0, ln 100)`` (``log_scale`` in
``[0, ln 100]``, i.e. the scale in ``[1, 100]``): here it is applied in place each time the value is read, before any
graph uses it, so a step that overshoots either way is pulled back to the bound and the gradient still flows there
(``exp`` of a clamped leaf, no ``torch.clamp`` in the graph). Without the lower bound a few steps that lower the scale
drive it towards 0, where every logit is 0 and the loss learns nothing.

The parameter lives in the loss, so the machinery for loss-held parameters applies unchanged: the Trainer optimises
it (``loss.named_parameters()``; its own learning rate through ``learning_rate_mapping={r"log_scale$": 1e-2}``),
:func:`~st_magnitude.losses._common.sync_loss_held_gradients` averages its gradient over processes,
:func:`~st_magnitude.losses._common.forward_cached_scaled` scales its GradCache gradient by the accumulation divisor
and the fp16 loss scale, and :class:`~st_magnitude.callbacks.LossStateCallback` saves it with checkpoints (a saved
``log_scale`` that is NaN or infinite is refused when it is restored).
:class:`~st_magnitude.callbacks.ScaleLoggingCallback` logs it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude.losses._checks import LEARNABLE, positive_finite

__all__ = [
    "LEARNABLE",
    "MAX_SCALE",
    "MIN_SCALE",
    "LearnableScale",
    "parse_scale",
    "parse_temperature",
    "scale_tensor",
    "temperature_tensor",
    "scale_value",
    "scale_config",
    "temperature_config",
]

#: CLIP's bound on the logit scale (Radford et al. 2021, §2.5); the learnable temperature is correspondingly ≥ 0.01.
MAX_SCALE = 100.0
#: OpenCLIP's lower bound (``logit_scale.clamp_(0, ln 100)``: ``log_scale ≥ 0``); the temperature is ≤ 1.
MIN_SCALE = 1.0


class LearnableScale(nn.Module):
    """``scale = exp(log_scale)``, one trainable scalar, clamped in place to ``min_scale ≤ scale ≤ max_scale``.

    Args:
        init_scale: the starting scale (the loss's default: InfoNCE 20, MW 1/0.01 = 100, L2Dir 1/0.02 = 50).
        max_scale: upper bound of the scale (CLIP: 100).
        min_scale: lower bound of the scale (OpenCLIP: 1, ``log_scale ≥ 0``).
    """

    def __init__(self, init_scale: float, max_scale: float = MAX_SCALE, min_scale: float = MIN_SCALE) -> None:
        super().__init__()
        # every bound in SAFE_RANGE (the losses' one scale check): exp of its logarithm stays finite in float32
        min_scale = positive_finite("min_scale", min_scale, learnable=False)
        max_scale = positive_finite("max_scale", max_scale, learnable=False)
        if not min_scale <= max_scale:
            raise ValueError(f"need min_scale ≤ max_scale, got min_scale={min_scale!r}, max_scale={max_scale!r}")
        init = positive_finite("init_scale", init_scale, learnable=False)
        if not min_scale <= init <= max_scale:
            raise ValueError(f"init_scale must lie in [{min_scale:g}, {max_scale:g}], got {init_scale!r}")
        self.max_scale = float(max_scale)
        self.min_scale = float(min_scale)
        self.init_scale = float(init)
        self.log_scale = nn.Parameter(torch.tensor(math.log(init), dtype=torch.float32))

    def clamp_(self) -> None:
        """Pull ``log_scale`` back into ``[ln min_scale, ln max_scale]`` in place (a no-op unless the last step
        overshot)."""
        # .data: the clamp is not part of any graph and does not bump the version counter of a leaf that an earlier
        # chunk of the same batch may have saved (the value is unchanged then, the clamp only acts between steps)
        self.log_scale.data.clamp_(min=math.log(self.min_scale), max=math.log(self.max_scale))

    def forward(self) -> Tensor:
        """The scale as a 0-dim float32 tensor with a gradient to ``log_scale``."""
        self.clamp_()
        return self.log_scale.exp()

    @property
    def value(self) -> float:
        """The current (clamped) scale as a float: the logarithm is clamped first, so no ``log_scale`` (``±inf``,
        ``1e30``, one an optimizer step overshot to) overflows; a NaN ``log_scale`` (a diverged step) is a
        ``ValueError`` naming it, never a NaN scale."""
        log = float(self.log_scale.detach())
        if math.isnan(log):
            raise ValueError(
                "LearnableScale.log_scale is NaN (a diverged optimizer step, or a NaN gradient): it has no scale; "
                "restore a checkpoint, or lower the learning rate of log_scale"
            )
        scale = math.exp(min(max(log, math.log(self.min_scale)), math.log(self.max_scale)))  # cannot overflow
        return min(max(scale, self.min_scale), self.max_scale)  # exactly the bound there (exp∘log is off by an ulp)

    def extra_repr(self) -> str:
        shown = "nan" if math.isnan(float(self.log_scale.detach())) else f"{self.value:.4g}"
        return (
            f"scale={shown}, init_scale={self.init_scale:g}, min_scale={self.min_scale:g}, "
            f"max_scale={self.max_scale:g}"
        )


def parse_scale(value: Any, default: float, name: str = "scale") -> float | LearnableScale:
    """A fixed scale (float) or, for ``"learnable"``, a :class:`LearnableScale` starting at ``default``.

    Raises:
        ValueError: anything but a number in ``[1e-6, 1e6]`` or ``"learnable"``.
    """
    parsed = positive_finite(name, value, "inverse temperature")
    return LearnableScale(default) if parsed == LEARNABLE else parsed


def parse_temperature(value: Any, default: float, name: str = "temperature") -> float | LearnableScale:
    """A fixed temperature (float) or, for ``"learnable"``, a :class:`LearnableScale` starting at ``1/default``
    (so the temperature lies in ``[1/MAX_SCALE, 1/MIN_SCALE] = [0.01, 1]``).

    Raises:
        ValueError: anything but a number in ``[1e-6, 1e6]`` or ``"learnable"``.
    """
    parsed = positive_finite(name, value, f"scale = 1/{name}")
    return LearnableScale(1.0 / default) if parsed == LEARNABLE else parsed


def scale_tensor(scale: float | LearnableScale) -> float | Tensor:
    """What a loss multiplies its scores by: the fixed float, or the learnable scale (a tensor with a gradient)."""
    return scale() if isinstance(scale, LearnableScale) else scale


def temperature_tensor(temperature: float | LearnableScale) -> float | Tensor:
    """What a loss divides its scores by: the fixed float, or ``exp(−log_scale)`` with a gradient."""
    return 1.0 / temperature() if isinstance(temperature, LearnableScale) else temperature


def scale_value(scale: float | LearnableScale) -> float:
    """The current scale as a float (fixed or learned)."""
    return scale.value if isinstance(scale, LearnableScale) else float(scale)


def scale_config(scale: float | LearnableScale, name: str = "scale") -> dict[str, Any]:
    """The scale part of a loss's ``get_config_dict``: the number, or ``"learnable"`` with its start and current
    value."""
    if not isinstance(scale, LearnableScale):
        return {name: float(scale)}
    return {name: LEARNABLE, f"{name}_init": scale.init_scale, f"{name}_learned": round(scale.value, 6)}


def temperature_config(temperature: float | LearnableScale, name: str = "temperature") -> dict[str, Any]:
    """As :func:`scale_config`, for a loss whose hyper-parameter is a temperature (τ = 1/scale)."""
    if not isinstance(temperature, LearnableScale):
        return {name: float(temperature)}
    return {
        name: LEARNABLE,
        f"{name}_init": round(1.0 / temperature.init_scale, 9),
        f"{name}_learned": round(1.0 / temperature.value, 9),
    }
