"""L2Dir: sim_TN, InfoTN, L2DirLoss and CachedL2DirLoss against independent references.

References are plain-Python loops over floats (paper 002 eqs. 1, 4, 6–8), the closed forms of App. A, and
sentence-transformers' own MultipleNegativesRankingLoss.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from conftest import loss_parameters
from hypothesis import given, settings
from hypothesis import strategies as st
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from st_magnitude.losses.info_tn import InfoTNCollapseWarning, InfoTNLoss
from st_magnitude.losses.l2dir import PAPER_TEMPERATURES, CachedL2DirLoss, L2DirLoss
from st_magnitude.modules.nap_head import NAPHead
from st_magnitude.similarity import (
    CARRIABLE_SIMILARITY_NAMES,
    SIMILARITY_NAMES,
    PowerNormSimilarity,
    TNSimilarity,
    get_similarity,
)

# ---------------------------------------------------------------------------------------------------------------
# plain-Python references
# ---------------------------------------------------------------------------------------------------------------


def _norm(v):
    return math.sqrt(sum(x * x for x in v))


def ref_sim_tn(q, t):
    """Eq. 4 with eq. 1: 1 − ‖q − t‖ / (‖q‖ + ‖t‖)."""
    return 1.0 - _norm([a - b for a, b in zip(q, t)]) / (_norm(q) + _norm(t))


def ref_cos(q, t):
    return sum(a * b for a, b in zip(q, t)) / (_norm(q) * _norm(t))


def ref_ce(anchors, candidates, sim, temperature):
    """Eqs. 6/7: mean over anchors of −log softmax_j(sim(a_i, c_j)/τ)[i]."""
    total = 0.0
    for i, a in enumerate(anchors):
        logits = [sim(a, c) / temperature for c in candidates]
        m = max(logits)
        log_z = m + math.log(sum(math.exp(x - m) for x in logits))
        total += log_z - logits[i]
    return total / len(anchors)


def ref_linear(head: NAPHead, rows):
    lin = head.projections["default"]
    w, b = lin.weight.detach().double().tolist(), lin.bias.detach().double().tolist()
    return [[sum(wij * xj for wij, xj in zip(wi, x)) + bi for wi, bi in zip(w, b)] for x in rows]


def _rows(t: torch.Tensor):
    return t.detach().double().tolist()


# ---------------------------------------------------------------------------------------------------------------
# sim_TN
# ---------------------------------------------------------------------------------------------------------------

vectors = st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=2, max_size=6)


def test_tn_is_registered_but_not_carriable():
    assert "tn" in SIMILARITY_NAMES and "tn" not in CARRIABLE_SIMILARITY_NAMES
    sim = get_similarity("tn")
    assert isinstance(sim, TNSimilarity) and sim.symmetric and not sim.requires_roles
    assert not isinstance(sim, PowerNormSimilarity) and not hasattr(sim, "gammas")  # no γ, no per-role rescaling
    with pytest.raises(ValueError, match="accepts only `eps`"):
        get_similarity("tn", init_gamma=0.5)


def test_tn_matrix_and_pairwise_equal_the_brute_force_loop():
    torch.manual_seed(0)
    q, d = torch.randn(4, 5) * 3, torch.randn(6, 5)
    sim = get_similarity("tn")
    matrix = sim(q, d)
    ref = torch.tensor([[ref_sim_tn(a, b) for b in _rows(d)] for a in _rows(q)], dtype=torch.float32)
    torch.testing.assert_close(matrix, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sim.pairwise(q, d[:4]), torch.diagonal(ref[:, :4]), rtol=1e-5, atol=1e-5)
    assert matrix.dtype == torch.float32  # computed in fp32 even for half inputs:
    assert sim(q.half(), d.half()).dtype == torch.float32


@settings(max_examples=60, deadline=None)
@given(vectors, vectors)
def test_tn_bounds_and_symmetry(a, b):
    n = min(len(a), len(b))
    x, y = torch.tensor([a[:n]]), torch.tensor([b[:n]])
    sim = get_similarity("tn")
    s = sim(x, y)
    assert 0.0 <= float(s) <= 1.0
    torch.testing.assert_close(s, sim(y, x).T)
    if _norm(a[:n]) > 1.0 and _norm(b[:n]) > 1.0:
        # eps inside the square roots and the fp32 expansion ‖a‖² + ‖b‖² − 2a·b cost up to ~1e-3 near x = y
        assert float(s) == pytest.approx(ref_sim_tn(a[:n], b[:n]), abs=1e-3)
        assert float(sim.pairwise(x, y)) == pytest.approx(ref_sim_tn(a[:n], b[:n]), abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(vectors, st.floats(0.05, 20.0), st.sampled_from(["matrix", "pairwise"]))
def test_tn_is_one_iff_same_direction_and_length(a, k, form):
    """Along one direction: sim_TN(x, kx) = 1 − |1 − k| / (1 + k) (App. A, t = 1): 1 only at k = 1."""
    x = torch.tensor([a], dtype=torch.float32)
    if _norm(a) < 0.1:
        return
    tn = get_similarity("tn")
    sim = tn if form == "matrix" else tn.pairwise
    assert float(sim(x, x)) == pytest.approx(1.0, abs=1e-3)  # 1 − sqrt(eps)/(2‖x‖) with the eps smoothing
    expected = 1.0 - abs(1.0 - k) / (1.0 + k)
    assert float(sim(x, k * x)) == pytest.approx(expected, abs=2e-3)
    if abs(k - 1.0) > 0.1:
        assert float(sim(x, k * x)) < 1.0 - 1e-2
    assert float(sim(x, -x)) == pytest.approx(0.0, abs=1e-6)  # opposite directions: L_TN = 1


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 3.1), st.floats(0.1, 10.0))
def test_tn_equal_norms_is_one_minus_sin_half_angle(angle, r):
    """k = 1: L_TN = sqrt((1 − cos γ)/2) = sin(γ/2), so sim_TN = 1 − sin(γ/2); < 1 for γ > 0."""
    x = torch.tensor([[r, 0.0]])
    y = torch.tensor([[r * math.cos(angle), r * math.sin(angle)]])
    s = float(get_similarity("tn")(x, y))
    assert s == pytest.approx(1.0 - math.sin(angle / 2.0), abs=1e-5)
    assert s < 1.0


@pytest.mark.parametrize("form", ["matrix", "pairwise"])
@pytest.mark.parametrize("case", ["aligned", "zero", "opposite", "one_zero"])
def test_tn_gradients_are_finite_at_the_singular_points(form, case):
    torch.manual_seed(0)
    base = torch.randn(3, 4)
    other = {"aligned": base.clone(), "zero": torch.zeros(3, 4), "opposite": -base, "one_zero": torch.zeros(3, 4)}[
        case
    ]
    if case == "zero":
        base = torch.zeros(3, 4)
    q = base.clone().requires_grad_(True)
    d = other.clone().requires_grad_(True)
    sim = get_similarity("tn")
    out = sim(q, d) if form == "matrix" else sim.pairwise(q, d)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(d.grad).all()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(("k", "t"), [(0.5, 0.3), (2.0, -0.4), (1.7, 0.9), (0.8, -0.95)])
def test_tn_partial_derivatives_match_paper_appendix_a(k, t):
    """∂L/∂t = −k/((1+k)·sqrt(1+k²−2kt)) (A-1);  ∂L/∂k = (k−1)(1+t)/((1+k)²·sqrt(k²−2kt+1)) (A-3)."""
    kk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor(t, dtype=torch.float64, requires_grad=True)
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    target = (kk * torch.stack([tt, torch.sqrt(1 - tt**2)])).unsqueeze(0)
    loss_tn = 1.0 - get_similarity("tn", eps=1e-30).pairwise(q, target)  # fp32 inside; loose tolerance
    loss_tn.sum().backward()
    root = math.sqrt(1 + k * k - 2 * k * t)
    assert float(tt.grad) == pytest.approx(-k / ((1 + k) * root), rel=1e-4, abs=1e-5)
    assert float(kk.grad) == pytest.approx((k - 1) * (1 + t) / ((1 + k) ** 2 * root), rel=1e-4, abs=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# InfoTN / L2Dir values
# ---------------------------------------------------------------------------------------------------------------


def test_info_tn_loss_warns_and_equals_the_brute_force_reference(tiny_model):
    with pytest.warns(InfoTNCollapseWarning, match="3.3"):
        loss = InfoTNLoss(tiny_model, temperature=0.05)
    torch.manual_seed(0)
    anchors, positives, negatives = torch.randn(4, 6) * 2, torch.randn(4, 6), torch.randn(4, 6) * 0.5
    value = loss.compute_loss_from_embeddings([anchors, positives, negatives])
    ref = ref_ce(_rows(anchors), _rows(positives) + _rows(negatives), ref_sim_tn, 0.05)
    assert float(value) == pytest.approx(ref, rel=1e-5)


def test_info_tn_loss_can_be_silenced_and_takes_a_head(tiny_model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", InfoTNCollapseWarning)
        loss = InfoTNLoss(tiny_model, nap_head=True, warn_collapse=False)
    assert isinstance(loss.nap_head, NAPHead)
    with pytest.raises(ValueError, match="nap_head"):
        InfoTNLoss(tiny_model, nap_head="yes", warn_collapse=False)


@pytest.mark.parametrize("lambda_", [0.0, 0.3, 0.5, 1.0])
def test_l2dir_equals_the_brute_force_reference(tiny_model, lambda_):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InfoTNCollapseWarning)
        loss = L2DirLoss(tiny_model, lambda_=lambda_, temperature=0.02, tn_temperature=0.01)
    emb = [torch.randn(3, 32) for _ in range(3)]  # anchor, positive, negative
    raw = [torch.randn(3, 32) * 4 for _ in range(3)]
    parts = loss.compute_loss_from_embeddings(emb, raw)
    po = [ref_linear(loss.nap_head, _rows(r)) for r in raw]
    nce = ref_ce(_rows(emb[0]), _rows(emb[1]) + _rows(emb[2]), ref_cos, 0.02)
    tn = ref_ce(po[0], po[1] + po[2], ref_sim_tn, 0.01)
    assert set(parts) == {"infonce", "infotn"}
    assert float(parts["infonce"].detach()) == pytest.approx(lambda_ * nce, rel=1e-5, abs=1e-6)
    assert float(parts["infotn"].detach()) == pytest.approx((1 - lambda_) * tn, rel=1e-4, abs=1e-5)
    # the logged length ratio is the positive-pair PO ratio ‖PO_q‖/‖PO_t‖
    ratios = [_norm(a) / _norm(p) for a, p in zip(po[0], po[1])]
    assert loss.last_stats["length_ratio_mean"] == pytest.approx(sum(ratios) / 3, rel=1e-5)


@pytest.mark.parametrize("n_columns", [2, 3])
def test_infonce_part_equals_sentence_transformers_mnrl(tiny_model, sentences, n_columns):
    tiny_model.eval()
    columns = [sentences[i::n_columns][: 6 // n_columns] for i in range(n_columns)]
    features = [dict(tiny_model.preprocess(c)) for c in columns]
    mnrl = MultipleNegativesRankingLoss(tiny_model, scale=1 / 0.05)(copy.deepcopy(features), None)
    full = L2DirLoss(tiny_model, lambda_=1.0, temperature=0.05)(copy.deepcopy(features))
    half = L2DirLoss(tiny_model, lambda_=0.5, temperature=0.05)(copy.deepcopy(features))
    torch.testing.assert_close(full["infonce"] + full["infotn"], mnrl)
    torch.testing.assert_close(half["infonce"] * 2, mnrl)


def test_arguments_are_validated_with_the_allowed_values(tiny_model):
    with pytest.raises(ValueError, match=r"lambda_ must lie in \[0, 1\]"):
        L2DirLoss(tiny_model, lambda_=1.5)
    with pytest.raises(
        ValueError,
        match=r"temperature \(scale = 1/temperature.*\) must be a finite number in 1e-06 ≤ temperature ≤ 1e\+06",
    ):
        L2DirLoss(tiny_model, temperature=0.0)
    with pytest.raises(
        ValueError, match=r"tn_temperature .* must be a finite number in 1e-06 ≤ tn_temperature ≤ 1e\+06"
    ):
        L2DirLoss(tiny_model, tn_temperature=float("nan"))
    with pytest.raises(ValueError, match="pre_final_norm"):
        L2DirLoss(tiny_model, nap_input="pre_norm")
    with pytest.raises(ValueError, match="NAPHead"):
        L2DirLoss(tiny_model, nap_head=torch.nn.Linear(32, 32))
    with pytest.raises(ValueError, match="nap_hidden_features"):
        L2DirLoss(tiny_model, nap_head=NAPHead(32), nap_hidden_features=16)
    with pytest.raises(ValueError, match="at least 2 input columns"):
        L2DirLoss(tiny_model)([dict(tiny_model.preprocess(["a"]))])
    with pytest.raises(ValueError, match="mini_batch_size"):
        CachedL2DirLoss(tiny_model, mini_batch_size=0)


def test_lambda_zero_warns_and_paper_settings_are_documented(tiny_model):
    with pytest.warns(InfoTNCollapseWarning):
        L2DirLoss(tiny_model, lambda_=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InfoTNCollapseWarning)
        loss = L2DirLoss(tiny_model, **PAPER_TEMPERATURES["clip"])
    assert (loss.temperature, loss.tn_temperature) == (0.01, 0.02)
    assert PAPER_TEMPERATURES["vlm"] == {"temperature": 0.02, "tn_temperature": 0.01}
    config = loss.get_config_dict()
    assert config["lambda_"] == 0.5 and config["nap_input"] == "pre_normalize"
    assert config["nap_head"]["in_features"] == 32 and config["nap_head"]["hidden_features"] is None
    assert "L2Dir" in loss.citation and loss.scale == pytest.approx(100.0)


def test_bottleneck_default_head(tiny_model):
    loss = L2DirLoss(tiny_model, nap_hidden_features=4)
    assert loss.nap_head.hidden_features == 4 and loss.nap_head.out_features == 32


# ---------------------------------------------------------------------------------------------------------------
# gradients: the backbone learns from both terms; cached == plain
# ---------------------------------------------------------------------------------------------------------------


def _grads(loss_module, features):
    loss_module.zero_grad()
    out = loss_module(copy.deepcopy(features))
    total = sum(out.values())
    total.backward()
    grads = {n: p.grad.clone() for n, p in loss_parameters(loss_module).items() if p.grad is not None}
    return float(total.detach()), {k: float(v.detach()) for k, v in out.items()}, grads


@pytest.mark.parametrize("lambda_", [0.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cached_loss_and_gradients_equal_the_plain_loss(tiny_model, sentences, lambda_, dtype):
    """GradCache must back-propagate *both* cached parts (embedding and NAP input).

    In fp64 gradients agree to 1e-5 and better; in fp32 the InfoTN path amplifies the rounding differences of
    mini-batched backward passes (different padding widths), so fp32 is checked loosely.
    """
    # Given the same model (dropout off) and the same NAP head for both losses
    model = tiny_model.to(dtype).eval()
    anchors, positives, negatives = sentences, sentences[::-1], sentences[1:] + sentences[:1]
    features = [dict(model.preprocess(c)) for c in (anchors, positives, negatives)]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InfoTNCollapseWarning)
        plain = L2DirLoss(model, lambda_=lambda_, temperature=0.05, tn_temperature=0.05)
        plain.nap_head.to(dtype)
        cached = CachedL2DirLoss(
            copy.deepcopy(model),
            lambda_=lambda_,
            temperature=0.05,
            tn_temperature=0.05,
            nap_head=copy.deepcopy(plain.nap_head),
            mini_batch_size=2,
        )
    # When both compute loss and gradients
    total_p, parts_p, grads_p = _grads(plain, features)
    total_c, parts_c, grads_c = _grads(cached, features)
    # Then the totals, the logged parts and every gradient agree (backbone *and* NAP head)
    assert total_c == pytest.approx(total_p, rel=1e-5)
    for key in parts_p:
        assert parts_c[key] == pytest.approx(parts_p[key], rel=1e-5, abs=1e-6)
    assert set(grads_c) == set(grads_p)
    assert any(k.startswith("nap_head.") for k in grads_p)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float64 else {"rtol": 1e-2, "atol": 2e-3}
    for name, grad in grads_p.items():
        torch.testing.assert_close(grads_c[name], grad, **tol, msg=name)
    backbone = [g for n, g in grads_p.items() if n.startswith("model.")]
    assert sum(float(g.abs().sum()) for g in backbone) > 0  # with λ = 0 only the NAP path reaches the backbone


def test_nap_path_gradient_reaches_the_backbone(tiny_model, sentences):
    """InfoTN alone (λ = 0) must move the backbone, through the NAP input (pre-Normalize state)."""
    tiny_model.eval()
    features = [dict(tiny_model.preprocess(sentences)), dict(tiny_model.preprocess(sentences[::-1]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InfoTNCollapseWarning)
        loss = L2DirLoss(tiny_model, lambda_=0.0)
    _, parts, grads = _grads(loss, features)
    assert parts["infonce"] == 0.0
    assert float(grads["model.0.model.embeddings.word_embeddings.weight"].abs().sum()) > 0


def test_missing_callback_is_reported_once(tiny_model, sentences, caplog):
    features = [dict(tiny_model.preprocess(sentences[:2])), dict(tiny_model.preprocess(sentences[2:4]))]
    loss = L2DirLoss(tiny_model)
    with caplog.at_level("WARNING"):
        loss(copy.deepcopy(features))
        loss(copy.deepcopy(features))
    assert sum("LossStateCallback" in r.message for r in caplog.records) == 1
