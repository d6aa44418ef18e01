"""What the paper-faithful Revela protocol needs (issue 14, claim 004): LM gradient checkpointing, LM clipping in the
Trainer, a raw-decoder retriever, LoRA on both models, the random-grouping control and the relevance diagnostics.

Tiny random Llama models built in code, CPU, fp32.
"""

from __future__ import annotations

import pytest
import torch
from test_revela_loss import build_tiny_llama, count_calls, lm_batch

from st_magnitude.losses.revela import RevelaLoss


# ----------------------------------------------------------------------------------------------- LM checkpointing
@pytest.mark.parametrize("checkpoint_in_batch", [False, True])
@pytest.mark.parametrize("cache_grad", [True, False])
def test_lm_gradient_checkpointing_gives_the_same_gradients(monkeypatch, checkpoint_in_batch, cache_grad):
    """transformers' gradient checkpointing of the LM's decoder layers replays both passes in backward.

    Before the fix, the replay of pass 1 ran in "in_batch" mode (the state object had been switched to pass 2),
    a different graph, and backward raised torch's CheckpointError.
    """
    calls = count_calls(monkeypatch, "in_batch_term")
    ids, mask = lm_batch()
    results = []
    n_calls = []
    for checkpointing in (False, True):
        calls.clear()
        lm = build_tiny_llama().train()  # checkpointing is active in training mode only
        if checkpointing:
            lm.gradient_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in lm.model.layers)
        loss = RevelaLoss(
            None, lm, temperature=0.05, cache_grad=cache_grad, checkpoint_in_batch=checkpoint_in_batch
        )
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
        value = loss.compute_loss_from_embeddings(q, q.detach() * 0.5 + 0.2, ids, mask)
        value.backward()
        results.append((value.detach(), q.grad.clone(), {n: p.grad.clone() for n, p in lm.named_parameters()}))
        n_calls.append(len(calls))
    # 2 layers; layer checkpointing replays pass 2 (and its in-batch term) once more in backward
    assert n_calls[1] > n_calls[0]
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    assert float(results[0][1].abs().sum()) > 0
    for name, grad in results[0][2].items():
        torch.testing.assert_close(grad, results[1][2][name], atol=1e-6, rtol=1e-5)


def test_reentrant_lm_checkpointing_is_rejected():
    """Reentrant checkpointing tracks only positional tensors: Sim (a keyword) would silently get no gradient."""
    lm = build_tiny_llama().train()
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    loss = RevelaLoss(None, lm, temperature=0.05)
    ids, mask = lm_batch()
    q = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="non-reentrant"):
        loss.compute_loss_from_embeddings(q, q.detach() + 0.1, ids, mask)


def test_lm_gradient_checkpointing_with_a_lora_lm():
    peft = pytest.importorskip("peft", reason="optional extra: pip install peft")
    ids, mask = lm_batch()
    grads = []
    for checkpointing in (False, True):
        lm = peft.get_peft_model(
            build_tiny_llama(),
            peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"]),
        )
        with torch.no_grad():  # non-zero B so that every LoRA matrix gets a gradient
            for name, p in lm.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
        lm.train()
        if checkpointing:
            lm.gradient_checkpointing_enable()
        loss = RevelaLoss(None, lm, temperature=0.05)
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
        loss.compute_loss_from_embeddings(q, q.detach() + 0.3, ids, mask).backward()
        grads.append((q.grad.clone(), {n: p.grad.clone() for n, p in lm.named_parameters() if p.requires_grad}))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    assert grads[0][1] and all(float(g.abs().sum()) > 0 for g in grads[0][1].values())
    for name, grad in grads[0][1].items():
        torch.testing.assert_close(grad, grads[1][1][name], atol=1e-6, rtol=1e-5)

