"""The LoRA paths check peft against transformers before touching a model, and say which versions and the fix."""

import importlib.metadata

import pytest
from helpers.extras import need_extra

need_extra("peft")

from st_magnitude._peft import require_peft  # noqa: E402


def test_require_peft_returns_peft_when_transformers_accepts_it():
    assert require_peft().__name__ == "peft"


def test_require_peft_names_both_versions_and_the_fix_when_transformers_needs_newer(monkeypatch):
    from transformers.integrations import peft as hf_peft

    monkeypatch.setattr(hf_peft, "MIN_PEFT_VERSION", "999.0")
    with pytest.raises(ImportError) as err:
        require_peft()
    message = str(err.value)
    assert f"transformers {importlib.metadata.version('transformers')} needs peft >= 999.0" in message
    assert f"peft {importlib.metadata.version('peft')} is installed" in message
    assert "requirements/lock.txt" in message


def test_lora_config_checks_versions_before_building(monkeypatch):
    from transformers.integrations import peft as hf_peft

    from st_magnitude.losses.revela_setup import revela_lora_config

    monkeypatch.setattr(hf_peft, "MIN_PEFT_VERSION", "999.0")
    with pytest.raises(ImportError, match="needs peft >= 999.0"):
        revela_lora_config(r=4)
