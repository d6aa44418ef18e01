"""A learnable scale is finite whatever its parameter holds: ``value`` clamps the logarithm before it takes the
exponential (``math.exp(1000)`` overflowed before the clamp), ``forward`` and its gradient stay finite at every
extreme an optimizer step can leave, a NaN parameter is named instead of read as a scale, and the constructor's
bounds are the losses' one range (:data:`~st_magnitude.losses._checks.SAFE_RANGE`)."""

from __future__ import annotations

import math

import pytest
import torch

from st_magnitude.losses._temperature import MAX_SCALE, MIN_SCALE, LearnableScale

FLOAT32_MAX = 3.4028234663852886e38
EXTREMES = [1000.0, 1e30, FLOAT32_MAX, math.inf, -1000.0, -1e30, -FLOAT32_MAX, -math.inf, 2.0**63, -(2.0**63)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("log_scale", EXTREMES)
def test_value_forward_and_gradient_are_finite_at_every_extreme(log_scale, dtype):
    module = LearnableScale(20.0).to(dtype)
    with torch.no_grad():
        module.log_scale.fill_(log_scale)  # what an overshooting step (or a hand-edited checkpoint) leaves
    bound = MAX_SCALE if log_scale > 0 else MIN_SCALE
    assert module.value == pytest.approx(bound, rel=1e-6)  # before any forward: no OverflowError, no inf
    value = module()
    value.backward()
    assert math.isfinite(float(value)) and float(value) == pytest.approx(bound, rel=1e-6)
    assert math.isfinite(float(module.log_scale.grad)) and float(module.log_scale.grad) == pytest.approx(bound, 1e-6)
    assert module.value == pytest.approx(bound, rel=1e-6)
    assert "inf" not in repr(module) and "nan" not in repr(module)


def test_a_nan_parameter_is_named_not_read_as_a_scale():
    module = LearnableScale(20.0)
    with torch.no_grad():
        module.log_scale.fill_(math.nan)
    with pytest.raises(ValueError, match=r"log_scale is NaN"):
        module.value  # noqa: B018
    assert "scale=nan" in repr(module)  # the repr still prints, naming it


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"init_scale": 1e300, "max_scale": 1e308}, r"max_scale must be a finite number in 1e-06 ≤ max_scale"),
        ({"init_scale": 1e-300, "min_scale": 1e-308}, r"min_scale must be a finite number in 1e-06"),
        ({"init_scale": True}, r"init_scale must be a finite number"),
        ({"init_scale": "20"}, r"init_scale must be a finite number"),
        ({"init_scale": 10**400}, r"init_scale must be a finite number .* an integer of 401 digits"),
        ({"init_scale": math.nan}, r"init_scale must be a finite number"),
        ({"init_scale": 20.0, "min_scale": 200.0}, r"need min_scale ≤ max_scale"),
        ({"init_scale": 20.0, "min_scale": 50.0}, r"init_scale must lie in \[50, 100\]"),
        ({"init_scale": 0.0}, r"init_scale must be a finite number"),
        ({"init_scale": -1}, r"init_scale must be a finite number"),
    ],
)
def test_bounds_outside_the_losses_range_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LearnableScale(**kwargs)


def test_the_widest_allowed_bounds_stay_finite_in_float32():
    module = LearnableScale(1e6, max_scale=1e6, min_scale=1e-6)
    for log_scale in (math.inf, -math.inf):
        with torch.no_grad():
            module.log_scale.fill_(log_scale)
        value = module()
        value.backward()
        assert math.isfinite(float(value)) and math.isfinite(float(module.log_scale.grad))
        module.log_scale.grad = None
