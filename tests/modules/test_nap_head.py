"""NAPHead (L2Dir's Norm Alignment Projector) and the NAP input tap.

References are independent of the hooks: the state *before* a final norm is recomputed by running the same
backbone with that norm replaced by ``nn.Identity``; the state before ``Normalize`` by the same model without it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from st_magnitude.modules.nap_head import NAP_INPUTS, NAPHead, NAPInputTap, modality_key

# ---------------------------------------------------------------------------------------------------------------
# NAPHead
# ---------------------------------------------------------------------------------------------------------------


def test_default_head_is_one_linear_d_to_d_and_never_normalizes():
    # Given a head of width 8 (paper: "input and output dimensions align"; one Linear(d, d))
    torch.manual_seed(0)
    head = NAPHead(8)
    linear = head.projections["default"]
    assert isinstance(linear, nn.Linear) and linear.weight.shape == (8, 8) and linear.bias is not None
    # When projecting large vectors
    x = torch.randn(5, 8) * 50
    out = head.project(x)
    # Then the output is exactly W x + b (no normalisation anywhere)
    torch.testing.assert_close(out, x @ linear.weight.T + linear.bias)
    assert not torch.allclose(out.norm(dim=-1), torch.ones(5))


def test_bottleneck_head_matches_manual_two_layer_mlp():
    torch.manual_seed(0)
    head = NAPHead(12, hidden_features=4, activation="relu")
    first, act, second = head.projections["default"]
    assert first.weight.shape == (4, 12) and second.weight.shape == (12, 4) and isinstance(act, nn.ReLU)
    x = torch.randn(3, 12)
    ref = torch.relu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias
    torch.testing.assert_close(head.project(x), ref)
    # parameter count of the paper's VLM hypothesis (b): d -> 16 -> d with biases
    assert sum(p.numel() for p in NAPHead(1536, hidden_features=16).parameters()) == 50_704


def test_per_modality_head_routes_by_modality_and_shares_the_output_space():
    head = NAPHead({"text": 6, "image": 10}, out_features=4)
    assert head.project(torch.randn(2, 6), "text").shape == (2, 4)
    assert head.project(torch.randn(2, 10), "image").shape == (2, 4)
    with pytest.raises(ValueError, match="no projection for modality 'audio'"):
        head.project(torch.randn(2, 6), "audio")
    features = {"nap_input": torch.randn(3, 10), "modality": "image"}
    assert head(features)["nap_output"].shape == (3, 4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"in_features": 0}, "positive int"),
        ({"in_features": "8"}, "positive int"),
        ({"in_features": {"text": 4, "image": 6}}, "out_features"),
        ({"in_features": 8, "hidden_features": 0}, "hidden_features"),
        ({"in_features": 8, "hidden_features": 4, "activation": "swish"}, "gelu"),
        ({"in_features": 8, "out_features": -1}, "out_features"),
    ],
)
def test_head_rejects_bad_arguments_with_the_allowed_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NAPHead(**kwargs)


@pytest.mark.parametrize("in_features", [8, {"text": 8, "image": 6}])
def test_save_and_load_round_trip_is_exact(tmp_path, in_features):
    torch.manual_seed(1)
    head = NAPHead(in_features, out_features=5, hidden_features=3)
    head.save(str(tmp_path))
    assert (tmp_path / "model.safetensors").is_file()
    loaded = NAPHead.load(str(tmp_path))
    assert loaded.get_config_dict() == head.get_config_dict()
    for (name, a), (_, b) in zip(head.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_modality_key():
    assert modality_key(None) == "text"
    assert modality_key("image") == "image"
    assert modality_key(("image", "text")) == "image+text"


# ---------------------------------------------------------------------------------------------------------------
# the tap: encoder model (pooled embedding before Normalize)
# ---------------------------------------------------------------------------------------------------------------


def test_tap_auto_on_bert_reads_the_pooled_embedding_before_normalize(tiny_model, tiny_model_raw, sentences):
    # Given a tiny BERT + mean pooling + Normalize, and the same backbone without Normalize
    tap = NAPInputTap(tiny_model, "auto")
    assert tap.nap_input == "pre_normalize"
    assert tap.in_features() == 32
    tiny_model.eval()
    tiny_model_raw.eval()
    features = tiny_model.preprocess(sentences)
    # When the tap embeds
    with torch.no_grad():
        emb, state = tap.embed(dict(features))
        ref = tiny_model_raw(dict(tiny_model_raw.preprocess(sentences)))["sentence_embedding"]
    # Then the embedding is the normalized one and the NAP input the raw pooled state
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(len(sentences)))
    torch.testing.assert_close(state, ref)
    assert not torch.allclose(state.norm(dim=-1), torch.ones(len(sentences)))


def test_tap_on_a_model_without_normalize_uses_the_output(tiny_model_raw, sentences):
    tap = NAPInputTap(tiny_model_raw, "pre_normalize")
    with torch.no_grad():
        emb, state = tap.embed(dict(tiny_model_raw.preprocess(sentences)))
    assert torch.equal(emb, state)


def test_tap_output_mode_reads_the_normalized_embedding(tiny_model, sentences):
    tap = NAPInputTap(tiny_model, "output")
    with torch.no_grad():
        emb, state = tap.embed(dict(tiny_model.preprocess(sentences)))
    assert torch.equal(emb, state)


def test_tap_hooks_exist_only_inside_the_capture(tiny_model, sentences):
    tap = NAPInputTap(tiny_model, "pre_normalize")
    norm = tiny_model[-1]
    assert not norm._forward_pre_hooks
    with tap.capturing():
        assert norm._forward_pre_hooks
    assert not norm._forward_pre_hooks and not tiny_model._forward_hooks


def test_tap_rejects_bad_modes_and_missing_final_norm(tiny_model):
    with pytest.raises(ValueError, match=str(list(NAP_INPUTS)).replace("[", r"\[").replace("]", r"\]")):
        NAPInputTap(tiny_model, "pre_norm")
    with pytest.raises(ValueError, match="no final norm was found"):
        NAPInputTap(tiny_model, "pre_final_norm")
    with pytest.raises(ValueError, match="not found"):
        NAPInputTap(tiny_model, "pre_final_norm", final_norm="does.not.exist")


def test_tap_with_an_explicit_final_norm_on_bert(tiny_model, sentences):
    # BERT is post-LN: the last LayerNorm's input is residual + FFN output; the tap pools it like the model
    path = "encoder.layer.1.output.LayerNorm"
    tap = NAPInputTap(tiny_model, "pre_final_norm", final_norm=path)
    tiny_model.eval()
    reference = copy.deepcopy(tiny_model)
    hf = reference[0].model
    hf.get_submodule("encoder.layer.1.output").LayerNorm = nn.Identity()
    features = tiny_model.preprocess(sentences)
    with torch.no_grad():
        _, state = tap.embed(dict(features))
        token = hf(input_ids=features["input_ids"], attention_mask=features["attention_mask"]).last_hidden_state
    mask = features["attention_mask"].unsqueeze(-1).float()
    torch.testing.assert_close(state, (token * mask).sum(1) / mask.sum(1))


# ---------------------------------------------------------------------------------------------------------------
# the tap: decoder model (hidden state before the final RMSNorm)
# ---------------------------------------------------------------------------------------------------------------


def _tiny_llama_st(tmp_path, pooling_mode: str):
    from conftest import build_tokenizer
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    folder = tmp_path / "llama"
    LlamaModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    transformer = Transformer(str(folder), max_seq_length=32)
    return SentenceTransformer(
        modules=[transformer, Pooling(32, pooling_mode=pooling_mode), Normalize()], device="cpu"
    )


def _run(modules, features):
    out = dict(features)
    for module in modules:
        out = module(out)
    return out["sentence_embedding"]


@pytest.mark.parametrize("pooling_mode", ["mean", "lasttoken"])
def test_tap_on_a_decoder_reads_the_state_before_the_final_norm(tmp_path, sentences, pooling_mode):
    # Given a tiny Llama ST model (Transformer + Pooling + Normalize)
    model = _tiny_llama_st(tmp_path, pooling_mode).eval()
    tap = NAPInputTap(model, "auto")
    assert tap.nap_input == "pre_final_norm" and tap.final_norm_paths == {"text": "norm"}
    assert tap.in_features() == 32
    # And a reference copy whose final RMSNorm is the identity (so its output *is* the pre-norm state)
    reference = copy.deepcopy(model)
    reference[0].model.norm = nn.Identity()
    features = model.preprocess(sentences)
    with torch.no_grad():
        emb, state = tap.embed(dict(features))
        ref = _run(list(reference)[:2], features)  # Transformer + Pooling, no Normalize
        normed = _run(list(model)[:2], features)
    torch.testing.assert_close(state, ref)
    assert not torch.allclose(state, normed)  # the final norm really changes the state
    torch.testing.assert_close(emb, torch.nn.functional.normalize(normed, dim=-1))
