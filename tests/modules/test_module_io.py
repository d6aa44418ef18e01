"""RoleNormalize and NAPHead save/load through the one helper in modules/_io (config.json + weights if any)."""

from __future__ import annotations

import torch

from st_magnitude.modules import NAPHead, RoleNormalize
from st_magnitude.modules._io import ConfigWeightsModule


def test_both_modules_use_the_shared_save_and_load():
    for cls in (RoleNormalize, NAPHead):
        assert issubclass(cls, ConfigWeightsModule)
        assert "save" not in vars(cls) and "load" not in vars(cls)


def test_fixed_role_normalize_saves_no_weights(tmp_path):
    RoleNormalize(1.0, 0.0).save(str(tmp_path))
    assert (tmp_path / "config.json").is_file() and not any(tmp_path.glob("model.*"))
    loaded = RoleNormalize.load(str(tmp_path))
    assert (loaded.gamma_query, loaded.gamma_document, loaded.learnable) == (1.0, 0.0, False)


def test_learnable_role_normalize_round_trips_a_boundary_gamma(tmp_path):
    module = RoleNormalize(0.3, 0.7, learnable=True)
    with torch.no_grad():
        module.gamma_query_logit.fill_(40.0)  # γ rounds to 1.0: outside the constructor's open interval
    module.save(str(tmp_path))
    loaded = RoleNormalize.load(str(tmp_path))
    assert loaded.gamma_query_logit.item() == 40.0
    assert loaded.gamma_document_logit.item() == module.gamma_document_logit.item()
