"""What the paper-faithful Revela protocol needs (paper 004's claim): LM gradient checkpointing, LM clipping in the
Trainer, a raw-decoder retriever, LoRA on both models, the random-grouping control and the relevance diagnostics.

Tiny random Llama models built in code, CPU, fp32.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_TRANSFORMER
from helpers.extras import need_extra
from test_revela_loss import TEXTS, build_tiny_llama, count_calls, lm_batch

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
            lm.activation_checkpointing_enable()  # transformers 5.23's name; gradient_checkpointing_enable: LoRA test
            assert all(layer.gradient_checkpointing for layer in lm.model.layers)
        loss = RevelaLoss(None, lm, temperature=0.05, cache_grad=cache_grad, checkpoint_in_batch=checkpoint_in_batch)
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
    lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    loss = RevelaLoss(None, lm, temperature=0.05)
    ids, mask = lm_batch()
    q = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="non-reentrant"):
        loss.compute_loss_from_embeddings(q, q.detach() + 0.1, ids, mask)


def test_lm_gradient_checkpointing_with_a_lora_lm():
    peft = need_extra("peft")
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
            with pytest.warns(FutureWarning):  # the deprecated alias, through the peft wrapper
                lm.gradient_checkpointing_enable()
        loss = RevelaLoss(None, lm, temperature=0.05)
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
        loss.compute_loss_from_embeddings(q, q.detach() + 0.3, ids, mask).backward()
        grads.append((q.grad.clone(), {n: p.grad.clone() for n, p in lm.named_parameters() if p.requires_grad}))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    assert grads[0][1] and all(float(g.abs().sum()) > 0 for g in grads[0][1].values())
    for name, grad in grads[0][1].items():
        torch.testing.assert_close(grad, grads[1][1][name], atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- LM clipping


def group_dataset(group_size: int = 3):
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "query": [" ".join(t.split()[:3]) for t in TEXTS],
            "passage": TEXTS,
            "label": [i // group_size for i in range(len(TEXTS))],
        }
    )


class GradProbe:
    """A callback that copies a module's gradients in on_pre_optimizer_step (placed before or after the clipper)."""

    def __new__(cls, module, store):
        from transformers import TrainerCallback

        class _Probe(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                store.append({n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None})
                return control

        return _Probe()


def revela_trainer(model, loss, lm_tokenizer, out_dir, callbacks, **overrides):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from st_magnitude.data.revela import RevelaDataCollator, RevelaGroupBatchSampler

    kwargs = dict(
        output_dir=str(out_dir),
        per_device_train_batch_size=3,
        batch_sampler=RevelaGroupBatchSampler,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return SentenceTransformerTrainer(
        model=model,
        args=SentenceTransformerTrainingArguments(**kwargs),
        train_dataset=group_dataset(),
        loss=loss,
        data_collator=RevelaDataCollator(preprocess_fn=model.preprocess, lm_tokenizer=lm_tokenizer, lm_max_length=12),
        callbacks=callbacks,
    )


def grad_norm(grads: dict) -> float:
    return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()])))


@pytest.mark.parametrize("loss_scaling", [False, True])
def test_trainer_clips_the_lm_gradient_to_max_grad_norm(tmp_path, tiny_bert_dir, monkeypatch, loss_scaling):
    """Trainer run, gradient accumulation 2: the accumulated LM gradient is clipped to max_grad_norm, once per step.

    ``loss_scaling`` simulates fp16 training on the CPU: a GradScaler (scale 2**10) scales the loss in backward and
    the Trainer unscales every optimizer gradient in its own clipping, so the LM must be clipped after that.
    """
    from conftest import build_tiny_st
    from transformers import AutoTokenizer

    from st_magnitude.callbacks.revela import RevelaLMGradClipCallback

    lm_tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    model = build_tiny_st(tiny_bert_dir)
    lm = build_tiny_llama(vocab_size=len(lm_tokenizer))
    loss = RevelaLoss(model, lm, temperature=0.05)
    before, after, retriever = [], [], []
    clipper = RevelaLMGradClipCallback(loss)
    max_norm = 0.05
    trainer = revela_trainer(
        model,
        loss,
        lm_tokenizer,
        tmp_path / "run",
        [GradProbe(lm, before), clipper, GradProbe(lm, after), GradProbe(model, retriever)],
        max_grad_norm=max_norm,
        gradient_accumulation_steps=2,
        max_steps=1,
    )
    if loss_scaling:
        from accelerate import Accelerator

        monkeypatch.setattr(Accelerator, "mixed_precision", property(lambda self: "fp16"))
        trainer.accelerator.native_amp = True
        scaled = []

        class CountingScaler(torch.amp.GradScaler):
            def scale(self, outputs):
                scaled.append(float(outputs.detach()))
                return super().scale(outputs)

        trainer.accelerator.scaler = CountingScaler("cpu", init_scale=2.0**10)
    trainer.train()
    if loss_scaling:
        assert len(scaled) == 2  # both micro-batches went backward scaled
    assert len(before) == len(after) == 1  # one optimizer step of two micro-batches
    pre, post = before[0], after[0]
    assert pre and set(pre) == set(post)
    assert max_norm < grad_norm(pre) < 100  # unscaled: a scaled gradient would be ~1000x larger
    assert grad_norm(post) == pytest.approx(max_norm, rel=1e-4)
    coef = max_norm / grad_norm(pre)
    for name, grad in pre.items():
        torch.testing.assert_close(post[name], grad * coef, atol=1e-7, rtol=1e-4)
    assert clipper.last_grad_norm == pytest.approx(grad_norm(pre), rel=1e-4)
    assert trainer.state.log_history[0]["lm_grad_norm"] == pytest.approx(grad_norm(pre), rel=1e-3)
    # the Trainer's own clip of the retriever is untouched (its pre-clip norm is the logged grad_norm)
    assert trainer.state.log_history[0]["grad_norm"] > max_norm
    assert grad_norm(retriever[0]) == pytest.approx(max_norm, rel=1e-4)


def test_clip_callback_unscales_gradients_the_trainer_left_scaled(tiny_model):
    """If nothing unscaled the GradScaler's gradients this step, the callback does so before measuring the norm."""
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from st_magnitude.callbacks.revela import RevelaLMGradClipCallback

    lm = build_tiny_llama()
    loss = RevelaLoss(tiny_model, lm, temperature=0.05)
    ids, mask = lm_batch()
    q = torch.randn(4, 8, generator=torch.Generator().manual_seed(4))
    reference = loss.compute_loss_from_embeddings(q, q + 0.2, ids, mask)
    reference.backward()
    unscaled = {n: p.grad.clone() for n, p in lm.named_parameters()}
    lm.zero_grad()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    Accelerator(cpu=True)  # the optimizer wrapper needs an initialised accelerate state
    optimizer = AcceleratedOptimizer(torch.optim.SGD(lm.parameters(), lr=0.0), device_placement=False, scaler=scaler)
    scaler.scale(loss.compute_loss_from_embeddings(q, q + 0.2, ids, mask)).backward()
    args = TrainingArguments(output_dir="unused", report_to=[], max_grad_norm=1e9)
    callback = RevelaLMGradClipCallback(loss)
    callback.on_pre_optimizer_step(args, TrainerState(), TrainerControl(), optimizer=optimizer)
    assert callback.last_grad_norm == pytest.approx(grad_norm(unscaled), rel=1e-5)
    for name, p in lm.named_parameters():
        torch.testing.assert_close(p.grad, unscaled[name], atol=1e-7, rtol=1e-5)
    scaler.step(optimizer.optimizer)  # the scaler does not unscale a second time (it would raise or rescale)
    scaler.update()


# ----------------------------------------------------------------------------------------------- diagnostics
def test_shuffled_sim_permutes_each_row_off_the_diagonal():
    from test_revela_loss import random_sim

    loss = RevelaLoss(None, build_tiny_llama(), temperature=0.05)
    sim = random_sim(6, seed=5)
    shuffled = loss.shuffled_sim(sim, torch.Generator().manual_seed(0))
    assert torch.all(torch.diagonal(shuffled) == 0)
    torch.testing.assert_close(shuffled.sort(dim=1).values, sim.sort(dim=1).values)
    assert not torch.equal(shuffled, sim)
    again = loss.shuffled_sim(sim, torch.Generator().manual_seed(0))
    assert torch.equal(again, shuffled)  # seeded


def test_relevance_diagnostics_match_independent_forwards():
    from test_revela_loss import random_sim, revela_logits

    lm = build_tiny_llama().train()
    plain = copy.deepcopy(lm).eval()  # stock SDPA
    loss = RevelaLoss(None, lm, temperature=0.05)
    ids, mask = lm_batch()
    sim = random_sim(4, seed=2)
    loss.diagnostics_generator = torch.Generator().manual_seed(7)
    got = loss.relevance_diagnostics(sim, ids, mask)
    assert lm.training  # restored

    labels = ids.masked_fill(mask == 0, -100)

    def ce(logits):
        return float(
            torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        )

    shuffled = loss.shuffled_sim(sim, torch.Generator().manual_seed(7))
    with torch.no_grad():
        lm.eval()
        expected = {
            "ce_plain_lm": ce(plain(input_ids=ids, attention_mask=mask).logits),
            "ce_revela": ce(revela_logits(lm, ids, mask, sim)),
            "ce_shuffled_sim": ce(revela_logits(lm, ids, mask, shuffled)),
        }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5), key
    assert got["ce_gap_shuffled"] == pytest.approx(expected["ce_revela"] - expected["ce_shuffled_sim"], abs=1e-5)
    assert got["ce_gap_plain"] == pytest.approx(expected["ce_revela"] - expected["ce_plain_lm"], abs=1e-5)
    assert got["ce_gap_shuffled"] != 0 and got["sim_row_max"] == pytest.approx(float(sim.max(1).values.mean()))

    # shuffles=3: the mean CE over three successive permutations of the generator
    loss.diagnostics_generator = torch.Generator().manual_seed(7)
    three = loss.relevance_diagnostics(sim, ids, mask, shuffles=3)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        lm.eval()
        mean = sum(ce(revela_logits(lm, ids, mask, loss.shuffled_sim(sim, g))) for _ in range(3)) / 3
    assert three["ce_shuffled_sim"] == pytest.approx(mean, rel=1e-5)
    assert three["ce_revela"] == pytest.approx(got["ce_revela"], rel=1e-6)
    with pytest.raises(ValueError, match="shuffles"):
        loss.relevance_diagnostics(sim, ids, mask, shuffles=0)


def test_diagnostics_callback_logs_gaps_and_leaves_training_unchanged(tmp_path, tiny_bert_dir):
    from conftest import build_tiny_st
    from transformers import AutoTokenizer

    from st_magnitude.callbacks import RevelaDiagnosticsCallback, revela_callbacks

    lm_tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    runs = {}
    for every in (0, 2):
        model = build_tiny_st(tiny_bert_dir)
        lm = build_tiny_llama(vocab_size=len(lm_tokenizer))
        loss = RevelaLoss(model, lm, temperature=0.05)
        callbacks = revela_callbacks(loss, diagnostics_every=every)
        assert any(isinstance(c, RevelaDiagnosticsCallback) for c in callbacks) == bool(every)
        trainer = revela_trainer(model, loss, lm_tokenizer, tmp_path / f"run{every}", callbacks, max_steps=3)
        trainer.train()
        runs[every] = (trainer.state.log_history, loss.diagnostics, [p.detach().clone() for p in loss.parameters()])
    history, records, params = runs[2]
    assert [r["step"] for r in records] == [0, 2]
    logged = [h for h in history if "revela_ce_gap_shuffled" in h]
    assert [h["step"] for h in logged] == [1, 3]  # the record of step 0 goes out with the log after step 1
    assert logged[0]["revela_ce_gap_plain"] == pytest.approx(records[0]["ce_gap_plain"], abs=1e-4)
    assert runs[0][1] == [] and not any("revela_ce_gap_plain" in h for h in runs[0][0])
    for with_diag, without in zip(params, runs[0][2], strict=True):  # no_grad, eval mode, own generator
        torch.testing.assert_close(with_diag, without)
    with pytest.raises(ValueError, match="every"):
        RevelaDiagnosticsCallback(RevelaLoss(None, build_tiny_llama()), every=0)


# ----------------------------------------------------------------------------------------------- decoder retriever
def build_tiny_decoder_dir(path, seed: int = 0):
    """A random tiny Llama backbone and a word-level tokenizer that adds BOS but not EOS (like Llama's)."""
    from conftest import WORDS
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(WORDS) | {"query", "passage", ":"}))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        **TINY_TRANSFORMER,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory):
    return build_tiny_decoder_dir(tmp_path_factory.mktemp("tiny_decoder"))


def test_decoder_retriever_pools_the_normalized_eos_state(tiny_decoder_dir):
    """Independent reference: the backbone's last hidden state at the appended EOS, L2-normalized."""
    from transformers import AutoModel

    from st_magnitude.losses.revela_setup import REVELA_PROMPTS, build_decoder_retriever

    model = build_decoder_retriever(str(tiny_decoder_dir), max_seq_length=8, device="cpu")
    assert {k: model.prompts[k] for k in REVELA_PROMPTS} == REVELA_PROMPTS
    tok = model[0].tokenizer
    texts = ["protein cell", "the heart risk and diet study of patients in a long trial"]  # the second is cut
    ids = [tok(t, truncation=True, max_length=8)["input_ids"] for t in texts]
    assert all(row[0] == tok.bos_token_id and row[-1] == tok.eos_token_id for row in ids)
    assert len(ids[1]) == 8  # truncated to max_seq_length, EOS kept
    backbone = AutoModel.from_pretrained(str(tiny_decoder_dir)).eval()
    expected = []
    with torch.no_grad():
        for row in ids:  # one text at a time: no padding in the reference
            hidden = backbone(input_ids=torch.tensor([row])).last_hidden_state[0, -1]
            expected.append(torch.nn.functional.normalize(hidden, dim=-1))
    got = model.encode(texts, convert_to_tensor=True)
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-4)
    for encode, prompt in ((model.encode_query, "query: "), (model.encode_document, "passage: ")):
        prompted = encode(["protein cell"], convert_to_tensor=True)
        torch.testing.assert_close(prompted, model.encode([prompt + "protein cell"], convert_to_tensor=True))
        assert not torch.allclose(prompted, got[:1])


def test_revela_trains_lora_on_a_decoder_retriever_and_a_lora_lm(tmp_path, tiny_decoder_dir):
    """The paper's setup at toy size: decoder retriever (EOS pooling, prompts) + LoRA on both models, LM gradient
    checkpointing, LM clipping and diagnostics, through the Trainer. Only the adapters change."""
    need_extra("peft")
    import peft
    from transformers import AutoTokenizer

    from st_magnitude.callbacks import revela_callbacks
    from st_magnitude.losses.revela_setup import REVELA_PROMPTS, build_decoder_retriever, revela_lora_config

    retriever = build_decoder_retriever(
        str(tiny_decoder_dir), max_seq_length=16, lora=revela_lora_config("FEATURE_EXTRACTION", r=4), device="cpu"
    )
    lm_tokenizer = AutoTokenizer.from_pretrained(str(tiny_decoder_dir))
    lm = peft.get_peft_model(build_tiny_llama(vocab_size=len(lm_tokenizer)), revela_lora_config(r=4))
    lm.activation_checkpointing_enable()
    with torch.no_grad():  # non-zero LoRA B so that both factors move from step 1
        for name, p in list(lm.named_parameters()) + list(retriever.named_parameters()):
            if "lora_B" in name:
                p.normal_(0, 0.05)
    loss = RevelaLoss(retriever, lm, temperature=0.05)
    start = {n: p.detach().clone() for n, p in loss.named_parameters()}
    trainer = revela_trainer(
        retriever,
        loss,
        lm_tokenizer,
        tmp_path / "run",
        revela_callbacks(loss, diagnostics_every=1),
        max_steps=2,
        prompts=REVELA_PROMPTS,
        max_grad_norm=1.0,
    )
    trainer.data_collator.prompts = REVELA_PROMPTS
    trainer.train()
    changed = {n for n, p in loss.named_parameters() if not torch.equal(p.detach(), start[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any(n.startswith("model.") for n in changed) and any(n.startswith("lm.") for n in changed)
    assert [r["step"] for r in loss.diagnostics] == [0, 1]
    assert all("lm_grad_norm" in h for h in trainer.state.log_history if "loss" in h)


def test_bf16_lm_with_checkpointing_tracks_the_fp32_loss():
    """A bf16 LM (what ``dtype=torch.bfloat16`` loading gives; the Trainer's bf16 flag autocasts only the retriever):
    the loss and Sim's gradient stay close to fp32, with layer checkpointing on."""
    ids, mask = lm_batch()
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        lm = build_tiny_llama().to(dtype).train()
        lm.activation_checkpointing_enable()
        q = torch.randn(4, 8, generator=torch.Generator().manual_seed(5), requires_grad=True)
        value = RevelaLoss(None, lm, temperature=0.05).compute_loss_from_embeddings(q, q.detach() + 0.2, ids, mask)
        value.backward()
        out[dtype] = (float(value.detach()), q.grad.clone())
    assert out[torch.bfloat16][0] == pytest.approx(out[torch.float32][0], rel=2e-2)
    assert torch.isfinite(out[torch.bfloat16][1]).all()
    low, full = out[torch.bfloat16][1].flatten(), out[torch.float32][1].flatten()
    assert torch.nn.functional.cosine_similarity(low, full, dim=0) > 0.9
