"""L2Dir on a CLIP-style model (image–text pairs), with a tiny random ``CLIPModel`` built in code.

sentence-transformers 6.2 wraps a saved ``CLIPModel`` folder in its generic ``Transformer`` module (text →
``get_text_features``, image → ``get_image_features``, output ``sentence_embedding``), so loading a real CLIP
checkpoint from the hub goes through the same code; only the weights are tiny (and local) here. Images are
processed by transformers' PIL image processor (no torchvision needed).
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
from conftest import TINY_TRANSFORMER, loss_parameters
from torch import nn

from st_magnitude.losses.l2dir import CachedL2DirLoss, L2DirLoss
from st_magnitude.modules.nap_head import NAPInputTap


def random_images(n: int, seed: int = 0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray((rng.random((40, 40, 3)) * 255).astype("uint8")) for _ in range(n)]


def build_tiny_clip_dir(path):
    from conftest import build_tokenizer
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor, CLIPTextConfig, CLIPVisionConfig
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    torch.manual_seed(0)
    tok = build_tokenizer()
    text = CLIPTextConfig(
        vocab_size=len(tok),
        **TINY_TRANSFORMER,
        projection_dim=16,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
    )
    vision = CLIPVisionConfig(
        hidden_size=24,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        projection_dim=16,
    )
    CLIPModel(
        CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
    ).save_pretrained(path)
    images = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=images, tokenizer=tok).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory):
    pytest.importorskip("PIL")
    return build_tiny_clip_dir(tmp_path_factory.mktemp("tiny_clip"))


@pytest.fixture
def tiny_clip_st(tiny_clip_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(tiny_clip_dir), device="cpu")


TEXTS = ["the protein cell", "coffee tea and sleep study", "fish", "blood sugar level"]


def test_st_wraps_clip_as_expected(tiny_clip_st):
    # the facts the L2Dir tap relies on: one Transformer module, projected and un-normalized embeddings
    assert len(tiny_clip_st) == 1
    assert tiny_clip_st.similarity_fn_name == "cosine"
    emb = tiny_clip_st.encode(random_images(2), convert_to_tensor=True)
    assert emb.shape == (2, 16) and not torch.allclose(emb.norm(dim=-1), torch.ones(2))


def test_tap_on_clip_reads_both_towers_before_their_final_norms(tiny_clip_st):
    model = tiny_clip_st.eval()
    tap = NAPInputTap(model, "auto")
    assert tap.final_norm_paths == {"text": "text_model.final_layer_norm", "image": "vision_model.post_layernorm"}
    assert tap.in_features() == {"text": 32, "image": 24}
    # reference: the same towers with their final norms replaced by the identity; HF then pools the un-normed
    # states itself (EOS token for text, CLS for vision)
    reference = copy.deepcopy(model)
    hf = reference[0].model
    hf.text_model.final_layer_norm = nn.Identity()
    hf.vision_model.post_layernorm = nn.Identity()
    text_features = model.preprocess(TEXTS)
    image_features = model.preprocess(random_images(3))
    with torch.no_grad():
        _, text_state = tap.embed(dict(text_features))
        _, image_state = tap.embed(dict(image_features))
        text_ref = hf.text_model(
            input_ids=text_features["input_ids"], attention_mask=text_features["attention_mask"]
        ).pooler_output
        image_ref = hf.vision_model(pixel_values=image_features["pixel_values"]).pooler_output
    torch.testing.assert_close(text_state, text_ref)
    torch.testing.assert_close(image_state, image_ref)


def _ce(logits: list[list[float]]) -> float:
    total = 0.0
    for i, row in enumerate(logits):
        m = max(row)
        total += m + math.log(sum(math.exp(x - m) for x in row)) - row[i]
    return total / len(logits)


def test_l2dir_on_text_image_pairs_matches_a_reference_and_trains_both_towers(tiny_clip_st):
    model = tiny_clip_st.eval()
    torch.manual_seed(0)
    loss = L2DirLoss(model, temperature=0.01, tn_temperature=0.02)  # the paper's CLIP/UniIR temperatures
    head = loss.nap_head
    assert head.in_features == {"text": 32, "image": 24} and head.out_features == 16  # Linear(d_tower, d_embed)
    features = [dict(model.preprocess(TEXTS)), dict(model.preprocess(random_images(4)))]
    parts = loss(copy.deepcopy(features))
    sum(parts.values()).backward()

    # reference: embeddings from encode, pre-norm states from the identity-norm copy, NAP applied by hand
    reference = copy.deepcopy(model)
    hf = reference[0].model
    hf.text_model.final_layer_norm = nn.Identity()
    hf.vision_model.post_layernorm = nn.Identity()
    with torch.no_grad():
        t_emb = model.encode(TEXTS, convert_to_tensor=True)
        i_emb = model.encode(random_images(4), convert_to_tensor=True)
        t_raw = hf.text_model(**{k: features[0][k] for k in ("input_ids", "attention_mask")}).pooler_output
        i_raw = hf.vision_model(pixel_values=features[1]["pixel_values"]).pooler_output
        t_po = head.projections["text"](t_raw).double()
        i_po = head.projections["image"](i_raw).double()
    cos = (
        torch.nn.functional.normalize(t_emb.double(), dim=-1) @ torch.nn.functional.normalize(i_emb.double(), dim=-1).T
    )
    tn = [[1 - float((a - b).norm() / (a.norm() + b.norm())) for b in i_po] for a in t_po]
    assert float(parts["infonce"].detach()) == pytest.approx(0.5 * _ce((cos / 0.01).tolist()), rel=1e-4)
    assert float(parts["infotn"].detach()) == pytest.approx(
        0.5 * _ce([[x / 0.02 for x in row] for row in tn]), rel=1e-4
    )

    # both towers, both projections and both NAP projections receive gradient
    grads = {n: p.grad for n, p in loss.named_parameters() if p.grad is not None}
    for prefix in (
        "model.0.model.text_model.",
        "model.0.model.vision_model.",
        "model.0.model.text_projection",
        "model.0.model.visual_projection",
        "nap_head.projections.text",
        "nap_head.projections.image",
    ):
        assert any(n.startswith(prefix) and float(g.abs().sum()) > 0 for n, g in grads.items()), prefix


def test_cached_l2dir_on_clip_equals_the_plain_loss(tiny_clip_st):
    model = tiny_clip_st.to(torch.float64).eval()
    features = [dict(model.preprocess(TEXTS)), dict(model.preprocess(random_images(4)))]
    features[1]["pixel_values"] = features[1]["pixel_values"].double()
    torch.manual_seed(0)
    plain = L2DirLoss(model, temperature=0.01, tn_temperature=0.02)
    plain.nap_head.double()
    cached = CachedL2DirLoss(
        copy.deepcopy(model),
        temperature=0.01,
        tn_temperature=0.02,
        nap_head=copy.deepcopy(plain.nap_head),
        mini_batch_size=2,
    )
    results = []
    for loss in (plain, cached):
        out = loss(copy.deepcopy(features))
        sum(out.values()).backward()
        results.append(({k: float(v.detach()) for k, v in out.items()}, loss_parameters(loss)))
    (parts_p, params_p), (parts_c, params_c) = results
    for key in parts_p:
        assert parts_c[key] == pytest.approx(parts_p[key], rel=1e-6)
    for name, param in params_p.items():
        if param.grad is not None:
            torch.testing.assert_close(params_c[name].grad, param.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_clip_trainer_run_on_image_text_pairs(tiny_clip_st, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from st_magnitude.callbacks import LossStateCallback
    from st_magnitude.callbacks.loss_state import LOSS_STATE_FILENAME

    dataset = Dataset.from_dict({"image": random_images(8), "text": TEXTS * 2})
    loss = L2DirLoss(tiny_clip_st, temperature=0.01, tn_temperature=0.02)
    before = {k: v.clone() for k, v in loss.nap_head.state_dict().items()}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_steps=2,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SentenceTransformerTrainer(
            model=tiny_clip_st, args=args, train_dataset=dataset, loss=loss, callbacks=[LossStateCallback(loss)]
        )
        trainer.train()
    after = loss.nap_head.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)
    assert (tmp_path / "checkpoint-2" / LOSS_STATE_FILENAME).is_file()
    assert any("infotn" in h for h in trainer.state.log_history)
