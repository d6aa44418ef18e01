"""RevelaLoss on a tiny random Llama (GQA: 4 query heads, 2 KV heads) and a tiny BERT retriever, CPU, fp32."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from conftest import TINY_TRANSFORMER
from helpers.extras import need_extra
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_magnitude.callbacks import LossStateCallback
from st_magnitude.callbacks.loss_state import LOSS_STATE_FILENAME
from st_magnitude.losses.revela import RevelaLoss
from st_magnitude.losses.revela_lm import load_lm_weights, save_lm_weights
from st_magnitude.modules.revela_attention import (
    REVELA_ATTENTION,
    RevelaAttentionState,
    enable_revela_attention,
    in_batch_term,
)
from st_magnitude.similarity import get_similarity

#: Chunks of a tiny unlabeled corpus: three groups of three related texts.
TEXTS = [
    "the protein increase in cancer cell study",
    "vitamin and diet effect on heart risk",
    "coffee tea and sleep study in patients",
    "exercise and weight loss trial with fat",
    "fish fat acid brain memory and sleep",
    "blood sugar level in patients with diet",
    "gene level in brain cell and memory",
    "milk egg and meat diet for heart risk",
    "fruit vegetable fiber and blood sugar",
]


def build_tiny_llama(vocab_size: int = 60, kv_heads: int = 2, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        **TINY_TRANSFORMER,
        num_key_value_heads=kv_heads,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).eval()


def random_sim(bsz: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(bsz, bsz, generator=g).masked_fill(torch.eye(bsz, dtype=torch.bool), float("-inf"))
    return torch.softmax(logits, dim=-1)


def lm_batch(bsz: int = 4, length: int = 9, vocab: int = 60, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (bsz, length), generator=g)
    mask = torch.ones(bsz, length, dtype=torch.long)
    mask[1, length - 3 :] = 0  # right padding on two chunks
    mask[2, length - 1 :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask


def revela_logits(lm, ids, mask, sim, v_norm=True, capture=None):
    state = RevelaAttentionState(mode="record", key_mask=mask.bool(), v_norm=v_norm, capture=capture)
    lm(input_ids=ids, attention_mask=mask, revela_state=state)
    state.mode, state.sim = "in_batch", sim
    return lm(input_ids=ids, attention_mask=mask, revela_state=state).logits


# ----------------------------------------------------------------------------------------------- Sim
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bsz=st.integers(3, 8), tau=st.sampled_from([1e-4, 0.05, 1.0]), seed=st.integers(0, 1000))
def test_sim_rows_sum_to_one_with_zero_diagonal(tiny_model, bsz, tau, seed):
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=tau)
    g = torch.Generator().manual_seed(seed)
    q, p = torch.randn(bsz, 16, generator=g), torch.randn(bsz, 16, generator=g)
    sim = loss.similarity_matrix(q, p)
    assert torch.allclose(sim.sum(dim=1), torch.ones(bsz), atol=1e-5)
    assert torch.all(torch.diagonal(sim) == 0)
    # brute force: exp(cos/τ) over k != i, computed row by row in float64
    for i in range(bsz):
        cos = [float(torch.nn.functional.cosine_similarity(q[i : i + 1], p[k : k + 1]).double()) for k in range(bsz)]
        others = [k for k in range(bsz) if k != i]
        top = max(cos[k] for k in others)
        weights = {k: torch.exp(torch.tensor((cos[k] - top) / tau, dtype=torch.float64)) for k in others}
        total = sum(weights.values())
        for k in others:
            assert float(sim[i, k]) == pytest.approx(float(weights[k] / total), abs=1e-4)


# ----------------------------------------------------------------------------------------------- in-batch term
def loop_reference(q, k, v, sim, key_mask, scaling, v_norm=True, eps=1e-6):
    """b_i = Σ_{j≠i} Sim[i,j] b̃_ij with explicit loops over i, j, heads and query tokens (paper eqs. 5-7)."""
    bsz, n_heads, length, dim = q.shape
    n_rep = n_heads // k.shape[1]
    out = torch.zeros_like(q, dtype=torch.float64)
    pairs = torch.zeros(bsz, bsz, n_heads, length, dim, dtype=torch.float64)
    for i in range(bsz):
        for j in range(bsz):
            if j == i:
                continue
            keep = [t for t in range(length) if key_mask[j, t]]
            for h in range(n_heads):
                kv_h = h // n_rep  # GQA: query head h reads KV head h // n_rep
                for t_q in range(length):
                    logits = torch.stack([(q[i, h, t_q] * k[j, kv_h, t]).sum().double() * scaling for t in keep])
                    a = torch.softmax(logits, dim=0)
                    b = sum(a[n] * v[j, kv_h, t].double() for n, t in enumerate(keep))
                    if v_norm:
                        norm = sum(a[n] * v[j, kv_h, t].double().norm() for n, t in enumerate(keep))
                        b = b / (norm + eps)
                    pairs[i, j, h, t_q] = b
                    out[i, h, t_q] += float(sim[i, j]) * b
    return out, pairs


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("v_norm", [True, False])
def test_vectorised_in_batch_term_equals_loop_reference(kv_heads, v_norm):
    g = torch.Generator().manual_seed(kv_heads)
    bsz, n_heads, length, dim = 3, 4, 5, 6
    q = torch.randn(bsz, n_heads, length, dim, generator=g)
    k = torch.randn(bsz, kv_heads, length, dim, generator=g)
    v = torch.randn(bsz, kv_heads, length, dim, generator=g) * 3.0
    key_mask = torch.ones(bsz, length, dtype=torch.bool)
    key_mask[0, 3:] = False
    key_mask[2, 4:] = False
    sim = random_sim(bsz, seed=kv_heads)
    fast, fast_pairs = in_batch_term(q, k, v, sim, key_mask, dim**-0.5, v_norm=v_norm, return_pairs=True)
    ref, ref_pairs = loop_reference(q, k, v, sim, key_mask, dim**-0.5, v_norm=v_norm)
    torch.testing.assert_close(fast.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast_pairs.double(), ref_pairs, atol=1e-5, rtol=1e-5)


def sparse_sim_logits(bsz: int, seed: int) -> torch.Tensor:
    """Row logits whose softmax has exact zeros (gaps of 200 nats underflow in fp32), like the paper's τ = 1e-4."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(bsz, bsz, generator=g)
    logits = logits - 200.0 * (torch.rand(bsz, bsz, generator=g) < 0.6)
    return logits.masked_fill(torch.eye(bsz, dtype=torch.bool), float("-inf")).requires_grad_()


@pytest.mark.parametrize("kv_heads", [1, 3])
def test_skipping_zero_weight_pairs_is_exact(kv_heads):
    """Pairs with Sim = 0 are not computed; the output and every gradient that leaves the softmax are unchanged."""
    bsz, n_heads, length, dim = 5, 3, 4, 6
    g = torch.Generator().manual_seed(kv_heads)
    q = torch.randn(bsz, n_heads, length, dim, generator=g, requires_grad=True)
    k = torch.randn(bsz, kv_heads, length, dim, generator=g, requires_grad=True)
    v = torch.randn(bsz, kv_heads, length, dim, generator=g, requires_grad=True)
    key_mask = torch.ones(bsz, length, dtype=torch.bool)
    key_mask[1, 2:] = False
    logits = sparse_sim_logits(bsz, seed=kv_heads)
    sim = torch.softmax(logits, dim=-1)
    n_zero = int(((sim == 0) & ~torch.eye(bsz, dtype=torch.bool)).sum())
    assert 0 < n_zero < bsz * (bsz - 1) - bsz  # some pairs skipped, every row keeps at least one
    weights = torch.randn(bsz, n_heads, length, dim, generator=g)
    results = []
    for skip in (False, True):
        out = in_batch_term(q, k, v, sim, key_mask, dim**-0.5, skip_zero_pairs=skip)
        grads = torch.autograd.grad((out * weights).sum(), (q, k, v, logits), retain_graph=True)
        results.append((out.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-6, rtol=1e-6)
    for dense, sparse in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(dense, sparse, atol=1e-6, rtol=1e-6)
    # and against the loop reference, which sums over every j != i
    ref, _ = loop_reference(q.detach(), k.detach(), v.detach(), sim.detach(), key_mask, dim**-0.5)
    torch.testing.assert_close(results[1][0].double(), ref, atol=1e-5, rtol=1e-5)


def test_only_nonzero_pairs_reach_the_attention_kernel(monkeypatch):
    from st_magnitude.modules import revela_attention

    batches = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        batches.append(query.shape[0])
        return original(query, *args, **kwargs)

    monkeypatch.setattr(revela_attention.F, "scaled_dot_product_attention", spy)
    bsz = 6
    sim = torch.softmax(sparse_sim_logits(bsz, seed=3), dim=-1).detach()
    q = torch.randn(bsz, 2, 3, 4)
    in_batch_term(q, q[:, :1], q[:, :1], sim, None, 0.5)
    assert batches == [int(((sim != 0) & ~torch.eye(bsz, dtype=torch.bool)).sum())]
    batches.clear()
    in_batch_term(q, q[:, :1], q[:, :1], sim, None, 0.5, skip_zero_pairs=False)
    assert batches == [bsz * (bsz - 1)]


def count_calls(monkeypatch, name: str) -> list[int]:
    """Replace ``revela_attention.<name>`` by a wrapper that appends to the returned list on every call."""
    from st_magnitude.modules import revela_attention

    calls: list[int] = []
    original = getattr(revela_attention, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(revela_attention, name, counting)
    return calls


def test_pairs_are_found_once_per_forward_and_again_for_a_new_sim(monkeypatch):
    calls = count_calls(monkeypatch, "active_pairs")
    lm = build_tiny_llama()
    enable_revela_attention(lm)
    ids, mask = lm_batch(bsz=5)
    sims = [torch.softmax(sparse_sim_logits(5, seed=s), dim=-1).detach() for s in (1, 2)]
    assert not torch.equal(sims[0] != 0, sims[1] != 0)
    state = RevelaAttentionState(mode="record", key_mask=mask.bool())
    lm(input_ids=ids, attention_mask=mask, revela_state=state)
    state.mode = "in_batch"
    reused = []
    for sim in sims:  # the same state, a new Sim: the pairs must follow it
        state.sim = sim
        reused.append(lm(input_ids=ids, attention_mask=mask, revela_state=state).logits)
    assert len(calls) == 2  # once per forward, not once per layer (2 layers)
    for sim, logits in zip(sims, reused):
        torch.testing.assert_close(logits, revela_logits(lm, ids, mask, sim))


def test_in_batch_term_rejects_bad_heads():
    q = torch.randn(3, 3, 4, 2)
    k = torch.randn(3, 2, 4, 2)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        in_batch_term(q, k, k, random_sim(3), None, 1.0)


# ----------------------------------------------------------------------------------------------- LM plumbing
def test_attention_off_and_zero_sim_equal_plain_lm():
    lm = build_tiny_llama()
    plain = copy.deepcopy(lm)  # stays on stock SDPA
    ids, mask = lm_batch()
    reference = plain(input_ids=ids, attention_mask=mask).logits
    enable_revela_attention(lm)
    assert lm.config._attn_implementation == REVELA_ATTENTION
    torch.testing.assert_close(lm(input_ids=ids, attention_mask=mask).logits, reference, atol=1e-6, rtol=0)
    state = RevelaAttentionState(mode="off")
    torch.testing.assert_close(
        lm(input_ids=ids, attention_mask=mask, revela_state=state).logits, reference, atol=1e-6, rtol=0
    )
    zero = revela_logits(lm, ids, mask, torch.zeros(4, 4))
    torch.testing.assert_close(zero, reference, atol=1e-6, rtol=0)
    # and a real Sim does change the logits (the check above can fail)
    assert (revela_logits(lm, ids, mask, random_sim(4)) - reference).abs().max() > 1e-3


def test_loss_with_in_batch_off_equals_plain_lm_loss(tiny_model):
    lm = build_tiny_llama()
    plain = copy.deepcopy(lm)
    ids, mask = lm_batch()
    labels = ids.masked_fill(mask == 0, -100)
    expected = plain(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss = RevelaLoss(tiny_model, lm, in_batch=False)
    q = torch.randn(4, 8)
    got = loss.compute_loss_from_embeddings(q, q + 0.1, ids, mask)
    torch.testing.assert_close(got, expected)
    on = RevelaLoss(tiny_model, copy.deepcopy(plain), temperature=0.05).compute_loss_from_embeddings(
        q, q + 0.1, ids, mask
    )
    assert abs(float(on.detach()) - float(expected.detach())) > 1e-4


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_v_norm_bound_per_head(kv_heads):
    lm = build_tiny_llama(kv_heads=kv_heads)
    enable_revela_attention(lm)
    with torch.no_grad():  # large values: without V-norm the in-batch outputs exceed norm 1
        for layer in lm.model.layers:
            layer.self_attn.v_proj.weight.mul_(20.0)
    ids, mask = lm_batch()
    capture: dict = {}
    revela_logits(lm, ids, mask, random_sim(4), v_norm=True, capture=capture)
    assert sorted(capture) == [0, 1]
    for pairs in capture.values():  # [B, B, H, L, d]
        assert pairs.norm(dim=-1).max() <= 1.0 + 1e-5
        assert pairs.norm(dim=-1).max() > 0.5
    capture_off: dict = {}
    revela_logits(lm, ids, mask, random_sim(4), v_norm=False, capture=capture_off)
    assert max(p.norm(dim=-1).max() for p in capture_off.values()) > 1.5


def test_no_future_leakage_inside_a_chunk():
    lm = build_tiny_llama()
    enable_revela_attention(lm)
    ids, mask = lm_batch(length=10)
    sim = random_sim(4)
    base = revela_logits(lm, ids, mask, sim)
    changed = ids.clone()
    t = 4
    changed[0, t + 1 :] = (changed[0, t + 1 :] + 7) % 56 + 4  # change chunk 0 after position t
    after = revela_logits(lm, changed, mask, sim)
    torch.testing.assert_close(after[0, : t + 1], base[0, : t + 1], atol=1e-5, rtol=0)
    assert (after[0, t + 1 :] - base[0, t + 1 :]).abs().max() > 1e-4
    # other chunks attend to all of chunk 0 (full mask of eq. 5), so they do see the change
    assert (after[1] - base[1]).abs().max() > 1e-5


def test_chunk_permutation_equivariance():
    lm = build_tiny_llama()
    enable_revela_attention(lm)
    ids, mask = lm_batch()
    sim = random_sim(4, seed=3)
    base = revela_logits(lm, ids, mask, sim)
    perm = torch.tensor([2, 0, 3, 1])
    permuted = revela_logits(lm, ids[perm], mask[perm], sim[perm][:, perm])
    torch.testing.assert_close(permuted, base[perm], atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------- gradients
def tokenized(model, texts):
    return model.preprocess(texts)


def features_for(model, chunks, lm_ids, lm_mask):
    halves = [" ".join(c.split()[: max(1, len(c.split()) // 2)]) for c in chunks]
    return [tokenized(model, halves), tokenized(model, chunks), {"input_ids": lm_ids, "attention_mask": lm_mask}]


def test_gradients_reach_retriever_and_lm(tiny_model, sentences):
    lm = build_tiny_llama()
    loss = RevelaLoss(tiny_model, lm, temperature=0.05)
    ids, mask = lm_batch(bsz=3)
    out = loss(features_for(tiny_model, sentences[:3], ids, mask), torch.zeros(3, dtype=torch.long))
    out.backward()
    retriever_grads = [p.grad.abs().sum() for p in tiny_model.parameters() if p.grad is not None]
    assert retriever_grads and float(sum(retriever_grads)) > 0
    lm_grads = {n: p.grad for n, p in lm.named_parameters() if p.grad is not None}
    assert float(lm_grads["model.layers.0.self_attn.k_proj.weight"].abs().sum()) > 0
    assert float(lm_grads["model.layers.1.mlp.up_proj.weight"].abs().sum()) > 0


def test_frozen_lm_still_trains_retriever(tiny_model, sentences):
    lm = build_tiny_llama()
    loss = RevelaLoss(tiny_model, lm, temperature=0.05, train_lm=False)
    ids, mask = lm_batch(bsz=3)
    loss(features_for(tiny_model, sentences[:3], ids, mask)).backward()
    assert all(p.grad is None for p in lm.parameters())
    assert float(sum(p.grad.abs().sum() for p in tiny_model.parameters() if p.grad is not None)) > 0


@pytest.mark.parametrize("bsz", [1, 2])
def test_fewer_than_three_chunks_raise(tiny_model, sentences, bsz):
    loss = RevelaLoss(tiny_model, build_tiny_llama())
    ids, mask = lm_batch(bsz=4)
    with pytest.raises(ValueError, match="exactly zero"):
        loss(features_for(tiny_model, sentences[:bsz], ids[:bsz], mask[:bsz]))
    with pytest.raises(ValueError, match="at least 3"):
        loss.similarity_matrix(torch.randn(bsz, 4), torch.randn(bsz, 4))


def test_b2_sim_is_constant_so_retriever_gradient_vanishes():
    """The reason for the B < 3 error: with B = 2 the masked row softmax is [[0, 1], [1, 0]] for any scores."""
    scores = torch.randn(2, 2, requires_grad=True)
    sim = torch.softmax((scores / 0.05).masked_fill(torch.eye(2, dtype=torch.bool), float("-inf")), dim=-1)
    assert torch.equal(sim.detach(), torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    (sim * torch.randn(2, 2)).sum().backward()
    assert torch.count_nonzero(scores.grad) == 0


def test_mixed_groups_and_missing_lm_features_raise(tiny_model, sentences):
    loss = RevelaLoss(tiny_model, build_tiny_llama())
    ids, mask = lm_batch(bsz=3)
    feats = features_for(tiny_model, sentences[:3], ids, mask)
    with pytest.raises(ValueError, match="mixes chunks of different groups"):
        loss(feats, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="RevelaDataCollator"):
        loss(feats[:2])


def test_bad_arguments_raise(tiny_model):
    with pytest.raises(ValueError, match="temperature"):
        RevelaLoss(tiny_model, build_tiny_llama(), temperature=0)
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=30))
    with pytest.raises(ValueError, match="llama"):
        RevelaLoss(tiny_model, gpt2)
    with pytest.raises(ValueError, match="mode"):
        RevelaAttentionState(mode="both")


def test_config_and_citation(tiny_model):
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=0.05, v_norm=False)
    cfg = loss.get_config_dict()
    assert cfg["temperature"] == 0.05 and cfg["v_norm"] is False and cfg["lm"] == "llama"
    assert "Revela" in loss.citation
    assert isinstance(get_similarity("cosine"), type(loss.similarity))


# ----------------------------------------------------------------------------------------------- checkpoints
def test_save_and_load_lm_weights_roundtrip(tmp_path):
    lm = build_tiny_llama(seed=1)
    other = build_tiny_llama(seed=2)
    save_lm_weights(lm, tmp_path / "lm")
    assert any((p1 - p2).abs().max() > 0 for p1, p2 in zip(lm.parameters(), other.parameters(), strict=True))
    load_lm_weights(other, tmp_path / "lm")
    for (n1, p1), (_, p2) in zip(lm.named_parameters(), other.named_parameters(), strict=True):
        assert torch.equal(p1, p2), n1
    with pytest.raises(FileNotFoundError):
        load_lm_weights(other, tmp_path / "nothing")
    with pytest.raises(ValueError, match="do not match"):
        load_lm_weights(build_tiny_llama(vocab_size=70), tmp_path / "lm")


def _trainer(model, loss, lm_tokenizer, dataset, out_dir, max_steps):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from st_magnitude.data.revela import RevelaDataCollator, RevelaGroupBatchSampler

    args = SentenceTransformerTrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=3,
        batch_sampler=RevelaGroupBatchSampler,
        max_steps=max_steps,
        save_steps=1,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    return SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=loss,
        data_collator=RevelaDataCollator(preprocess_fn=model.preprocess, lm_tokenizer=lm_tokenizer, lm_max_length=12),
        callbacks=[LossStateCallback(loss)],
    )


def test_trainer_saves_and_restores_the_lm(tmp_path, tiny_bert_dir):
    from conftest import build_tiny_st
    from datasets import Dataset
    from transformers import AutoTokenizer

    lm_tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    texts = TEXTS[:6]
    dataset = Dataset.from_dict(
        {"query": [" ".join(t.split()[:3]) for t in texts], "passage": texts, "label": [0, 0, 0, 1, 1, 1]}
    )

    model = build_tiny_st(tiny_bert_dir)
    lm = build_tiny_llama(vocab_size=len(lm_tokenizer))
    lm_init = copy.deepcopy(lm)
    loss = RevelaLoss(model, lm, temperature=0.05)
    _trainer(model, loss, lm_tokenizer, dataset, tmp_path / "run", max_steps=2).train()
    ck1 = tmp_path / "run" / "checkpoint-1"
    assert (ck1 / LOSS_STATE_FILENAME).is_file()
    assert (tmp_path / "run" / "checkpoint-2" / LOSS_STATE_FILENAME).is_file()
    trained = {n: p.detach().clone() for n, p in lm.named_parameters()}
    assert any(not torch.equal(trained[n], p) for n, p in lm_init.named_parameters())  # the LM was trained

    # resume from checkpoint-1 with a fresh LM: it is restored before the first step, then trained to step 2
    model2 = build_tiny_st(tiny_bert_dir)
    lm2 = copy.deepcopy(lm_init)
    loss2 = RevelaLoss(model2, lm2, temperature=0.05)
    restored: dict = {}

    class Probe(LossStateCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            restored.update({n: p.detach().clone() for n, p in self.loss.lm.named_parameters()})
            return control

    trainer = _trainer(model2, loss2, lm_tokenizer, dataset, tmp_path / "run", max_steps=2)
    trainer.add_callback(Probe(loss2))  # runs after the checkpoint callback
    trainer.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    from safetensors.torch import load_file

    saved1 = load_file(str(ck1 / LOSS_STATE_FILENAME))
    assert saved1 and all(name.startswith("lm.") for name in saved1)  # the LM's trainable tensors, nothing else
    for name, tensor in saved1.items():
        assert torch.equal(restored[name.removeprefix("lm.")], tensor), name
    for name, p in lm2.named_parameters():
        torch.testing.assert_close(p.detach(), trained[name], atol=1e-5, rtol=1e-4)


def test_resume_without_saved_lm_raises(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    cb = LossStateCallback(RevelaLoss(None, build_tiny_llama()))
    state = TrainerState()
    state.global_step = 3
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    with pytest.raises(FileNotFoundError, match="RevelaLoss .*would restart"):
        cb.on_train_begin(args, state, TrainerControl())


def test_cache_grad_false_keeps_loss_and_retriever_gradient(tiny_model):
    """Detaching pass 1 changes only where the LM's gradient flows: same loss, same gradient w.r.t. Sim."""
    ids, mask = lm_batch()
    grads = {}
    for flag in (True, False):
        lm = build_tiny_llama()
        loss = RevelaLoss(tiny_model, lm, temperature=0.05, cache_grad=flag)
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
        value = loss.compute_loss_from_embeddings(q, q.detach() + 0.3, ids, mask)
        value.backward()
        grads[flag] = (value.detach(), q.grad.clone(), lm.model.layers[0].self_attn.k_proj.weight.grad.clone())
    torch.testing.assert_close(grads[True][0], grads[False][0])
    torch.testing.assert_close(grads[True][1], grads[False][1])
    assert not torch.allclose(grads[True][2], grads[False][2])  # the LM gradient differs (pass 1 path removed)


def test_lora_lm_via_peft_trains_and_checkpoints_adapters(tiny_model, sentences, tmp_path):
    peft = need_extra("peft")
    lm = peft.get_peft_model(
        build_tiny_llama(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    )
    loss = RevelaLoss(tiny_model, lm, temperature=0.05)
    assert lm.base_model.model.config._attn_implementation == REVELA_ATTENTION
    ids, mask = lm_batch(bsz=3)
    loss(features_for(tiny_model, sentences[:3], ids, mask)).backward()
    trainable = {n: p for n, p in lm.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    # LoRA B starts at 0, so at the first step only the B matrices get a gradient
    assert any(float(p.grad.abs().sum()) > 0 for n, p in trainable.items() if "lora_B" in n)
    with torch.no_grad():
        for p in trainable.values():
            p.add_(0.1)
    save_lm_weights(lm, tmp_path / "lora")
    other = peft.get_peft_model(
        build_tiny_llama(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    )
    load_lm_weights(other, tmp_path / "lora")
    for name, p in other.named_parameters():
        if "lora_" in name:
            assert torch.equal(p, trainable[name]), name


def test_checkpointed_in_batch_term_gives_the_same_gradients(tiny_model, monkeypatch):
    calls = count_calls(monkeypatch, "in_batch_term")
    ids, mask = lm_batch()
    results = []
    n_calls = []
    for flag in (False, True):
        calls.clear()
        lm = build_tiny_llama()
        loss = RevelaLoss(tiny_model, lm, temperature=0.05, checkpoint_in_batch=flag)
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
        value = loss.compute_loss_from_embeddings(q, q.detach() * 0.5 + 0.2, ids, mask)
        value.backward()
        results.append((value.detach(), q.grad.clone(), {n: p.grad.clone() for n, p in lm.named_parameters()}))
        n_calls.append(len(calls))
    assert n_calls == [2, 4]  # 2 layers; checkpointing recomputes each layer's term once in backward
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    for name, grad in results[0][2].items():
        torch.testing.assert_close(grad, results[1][2][name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "mistral", "qwen3"])
def test_other_supported_architectures(arch):
    """The same attention-interface hook works for the other accepted model types (tiny random, GQA)."""
    import transformers

    config_cls, model_cls = {
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    torch.manual_seed(0)
    config = config_cls(
        vocab_size=60,
        **TINY_TRANSFORMER,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    lm = model_cls(config).eval()
    plain = copy.deepcopy(lm)
    ids, mask = lm_batch()
    reference = plain(input_ids=ids, attention_mask=mask).logits
    enable_revela_attention(lm)
    torch.testing.assert_close(revela_logits(lm, ids, mask, torch.zeros(4, 4)), reference, atol=1e-6, rtol=0)
    capture: dict = {}
    logits = revela_logits(lm, ids, mask, random_sim(4), capture=capture)
    assert sorted(capture) == [0, 1] and (logits - reference).abs().max() > 1e-3
    assert max(p.norm(dim=-1).max() for p in capture.values()) <= 1.0 + 1e-5


def test_one_hot_sim_warns_that_the_retriever_gets_no_gradient(tiny_model):
    """At τ = 1e-4, spread-out cosines make every Sim row exactly one-hot: zero retriever gradient, and a warning."""

    from st_magnitude._warnings import ZeroRetrieverGradientWarning

    ids, mask = lm_batch()
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1).requires_grad_()
    p = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1)
    loss = RevelaLoss(tiny_model, build_tiny_llama(), temperature=1e-4)
    with pytest.warns(ZeroRetrieverGradientWarning, match="one-hot"):
        value = loss.compute_loss_from_embeddings(q, p, ids, mask)
    value.backward()
    assert bool((loss.last_sim.max(dim=1).values == 1.0).all())
    assert torch.count_nonzero(q.grad) == 0 and loss.one_hot_steps == 1

    smooth = RevelaLoss(tiny_model, build_tiny_llama(), temperature=0.05)
    q.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZeroRetrieverGradientWarning)
        smooth.compute_loss_from_embeddings(q, p, ids, mask).backward()
    assert q.grad.abs().sum() > 0 and smooth.one_hot_steps == 0
