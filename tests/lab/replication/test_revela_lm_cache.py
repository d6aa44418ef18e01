"""Claim 004's SmolLM2 is dequantized from the wheel's GGUF once per process, and every run gets its own copy: a
run that trains or LoRA-wraps its LM must not change the next run's (loading it anew cost ≈ 30 s per arm and seed)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from st_magnitude.lab.replication.claims import c004_revela


class _Tok:
    pad_token = None
    eos_token = "</s>"


def test_smollm2_is_loaded_once_and_each_run_gets_a_fresh_copy(monkeypatch):
    calls = []

    def fake_load(dtype):
        calls.append(dtype)
        cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).to(dtype)

    monkeypatch.setattr(c004_revela, "_SMOLLM2", {})
    import transformers

    monkeypatch.setattr(c004_revela, "smollm2_folder", lambda: ("folder", "model.gguf"))
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, dtype=None, **k: fake_load(dtype)
    )
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _Tok())

    first, tok1 = c004_revela._smollm2(torch.float32)
    reference = {k: v.clone() for k, v in first.state_dict().items()}
    with torch.no_grad():
        for p in first.parameters():
            p.add_(1.0)  # a run changing its LM
    tok1.pad_token = tok1.eos_token
    second, tok2 = c004_revela._smollm2(torch.float32)
    assert len(calls) == 1  # dequantized once
    assert second is not first and tok2.pad_token is None
    for k, v in second.state_dict().items():
        assert torch.equal(v, reference[k]), k
