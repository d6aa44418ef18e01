"""The similarity family against independent references (brute-force loops, closed forms) and its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from st_magnitude.similarity import (
    CORNER_GAMMAS,
    LearnableSimilarity,
    PowerNormSimilarity,
    get_similarity,
    phi,
)

FIXED = ["cosine", "dot", "qnorm", "dnorm"]
FAMILY = [*FIXED, "learnable"]  # the φ_γ family (paper 000 eqs. 3–7)


def ref_score(q: list[float], d: list[float], name: str, gq: float = 0.5, gd: float = 0.5) -> float:
    """Paper 000 eqs. 3–7 written out with plain Python floats (no torch)."""
    dot = sum(a * b for a, b in zip(q, d))
    nq = math.sqrt(sum(a * a for a in q))
    nd = math.sqrt(sum(b * b for b in d))
    if name == "cosine":
        return dot / (nq * nd)
    if name == "dot":
        return dot
    if name == "qnorm":
        return dot / nq
    if name == "dnorm":
        return dot / nd
    if name == "learnable":
        return dot / (nq**gq * nd**gd)
    raise AssertionError(name)


@pytest.mark.parametrize("name", FAMILY)
def test_matrix_and_pairwise_equal_brute_force_loop(name):
    # Given random queries and documents with varied norms
    g = torch.Generator().manual_seed(0)
    q = torch.randn(5, 7, generator=g, dtype=torch.float64) * torch.rand(5, 1, generator=g, dtype=torch.float64) * 4
    d = torch.randn(6, 7, generator=g, dtype=torch.float64) * torch.rand(6, 1, generator=g, dtype=torch.float64) * 4
    sim = get_similarity(name).double()
    # When scoring with the matrix and pairwise forms
    matrix = sim(q, d)
    pair = sim.pairwise(q, d[:5])
    # Then every entry equals the formula evaluated in a plain loop
    assert matrix.shape == (5, 6)
    for i in range(5):
        for j in range(6):
            assert matrix[i, j].item() == pytest.approx(ref_score(q[i].tolist(), d[j].tolist(), name), rel=1e-10)
        assert pair[i].item() == pytest.approx(ref_score(q[i].tolist(), d[i].tolist(), name), rel=1e-10)


def test_learnable_corners_reproduce_fixed_variants():
    g = torch.Generator().manual_seed(1)
    q, d = torch.randn(4, 8, generator=g) * 3, torch.randn(9, 8, generator=g) * 2
    for name, (gq, gd) in CORNER_GAMMAS.items():
        learn = LearnableSimilarity()
        with torch.no_grad():  # sigmoid(±40) is 1/0 to float32 precision: the corners of the square
            learn.gamma_query_logit.fill_(40.0 if gq == 1 else -40.0)
            learn.gamma_document_logit.fill_(40.0 if gd == 1 else -40.0)
        torch.testing.assert_close(learn(q, d), get_similarity(name)(q, d), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(PowerNormSimilarity(gq, gd)(q, d), get_similarity(name)(q, d))


def test_learnable_init_and_gradients_match_paper_eqs_38_39():
    # γ = sigmoid(0) = 0.5 at init (paper 000 §4); ∂s/∂γq = −ln‖q‖·s, ∂s/∂γd = −ln‖d‖·s (eqs. 38–39)
    learn = LearnableSimilarity().double()
    assert learn.gamma_query == pytest.approx(0.5) and learn.gamma_document == pytest.approx(0.5)
    q = torch.tensor([[3.0, 4.0]], dtype=torch.float64)  # ‖q‖ = 5
    d = torch.tensor([[0.0, 2.0]], dtype=torch.float64)  # ‖d‖ = 2
    s = learn(q, d)[0, 0]
    s.backward()
    sig_grad = 0.25  # σ'(0)
    assert learn.gamma_query_logit.grad.item() == pytest.approx(-math.log(5.0) * s.item() * sig_grad)
    assert learn.gamma_document_logit.grad.item() == pytest.approx(-math.log(2.0) * s.item() * sig_grad)


finite_vecs = arrays(
    np.float64,
    st.tuples(st.integers(2, 6), st.just(5)),
    elements=st.floats(-10, 10, allow_nan=False, allow_subnormal=False),
)


def assert_same_ranking(a: torch.Tensor, b: torch.Tensor) -> None:
    """Every pair of documents is ordered the same way by both score vectors (near-ties excepted)."""
    tol_a = 1e-9 * (1 + a.abs().max().item())
    tol_b = 1e-9 * (1 + b.abs().max().item())
    for j in range(len(a)):
        for k in range(len(a)):
            da, db = (a[j] - a[k]).item(), (b[j] - b[k]).item()
            if abs(da) > tol_a and abs(db) > tol_b:
                assert (da > 0) == (db > 0), (j, k, a.tolist(), b.tolist())


@settings(max_examples=60, deadline=None)
@given(q=arrays(np.float64, (5,), elements=st.floats(-10, 10, allow_subnormal=False)), docs=finite_vecs)
def test_rank_equivalence_for_one_query(q, docs):
    # Paper 000 Prop. 4.1: for a fixed query, qnorm ranks like dot and dnorm like cosine
    qt = torch.tensor(q).unsqueeze(0)
    dt = torch.tensor(docs)
    if qt.norm() < 1e-3 or (dt.norm(dim=1) < 1e-3).any():
        return
    # the paper's statement: qnorm = dot/‖q‖ and dnorm = ‖q‖·cosine, a positive factor per query
    s = {name: get_similarity(name).double()(qt, dt)[0] for name in FIXED}
    assert_same_ranking(s["qnorm"], s["dot"])
    assert_same_ranking(s["dnorm"], s["cosine"])


@settings(max_examples=40, deadline=None)
@given(
    q=arrays(np.float64, (5,), elements=st.floats(-10, 10, allow_subnormal=False)),
    docs=finite_vecs,
    gq1=st.floats(0.0, 1.0),
    gq2=st.floats(0.0, 1.0),
    gd=st.floats(0.0, 1.0),
)
def test_only_gamma_d_changes_a_ranking(q, docs, gq1, gq2, gd):
    # Paper 000 Prop. S.2: π_{γq,γd} = π_{γq',γd}
    qt = torch.tensor(q).unsqueeze(0)
    dt = torch.tensor(docs)
    if qt.norm() < 1e-3 or (dt.norm(dim=1) < 1e-3).any():
        return
    a = PowerNormSimilarity(gq1, gd).double()(qt, dt)[0]
    b = PowerNormSimilarity(gq2, gd).double()(qt, dt)[0]
    # scores differ by one positive factor per query, so they are proportional
    ratio = a / b.where(b.abs() > 1e-12, torch.ones_like(b))
    mask = b.abs() > 1e-9
    if mask.sum() > 1:
        torch.testing.assert_close(ratio[mask], ratio[mask][0].expand(int(mask.sum())), rtol=1e-8, atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(
    a=arrays(np.float64, (4,), elements=st.floats(-5, 5, allow_subnormal=False)),
    b=arrays(np.float64, (4,), elements=st.floats(-5, 5, allow_subnormal=False)),
)
def test_symmetry_flags_match_behaviour(a, b):
    # Paper 000 Prop. 2.1: only cosine and dot are symmetric
    at, bt = torch.tensor(a).unsqueeze(0), torch.tensor(b).unsqueeze(0)
    for name in FIXED:
        sim = get_similarity(name).double()
        ab, ba = sim(at, bt).item(), sim(bt, at).item()
        if sim.symmetric:
            assert ab == pytest.approx(ba, rel=1e-9, abs=1e-12)
    assert get_similarity("cosine").symmetric and get_similarity("dot").symmetric
    assert not get_similarity("qnorm").symmetric and not get_similarity("dnorm").symmetric
    assert get_similarity("learnable").symmetric  # γq = γd at init
    assert not LearnableSimilarity(init_gamma=(0.3, 0.6)).symmetric


def test_asymmetric_variants_really_are_asymmetric():
    a = torch.tensor([[1.0, 0.0]])
    b = torch.tensor([[3.0, 1.0]])
    for name in ("qnorm", "dnorm"):
        sim = get_similarity(name)
        assert sim(a, b).item() != pytest.approx(sim(b, a).item())
    learn = LearnableSimilarity(init_gamma=(0.2, 0.8))
    assert learn(a, b).item() != pytest.approx(learn(b, a).item())


@pytest.mark.parametrize("name", FAMILY)
def test_zero_vectors_give_finite_scores_and_gradients(name):
    q = torch.zeros(2, 4, requires_grad=True)
    d = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]], requires_grad=True)
    sim = get_similarity(name)
    s = sim(q, d)
    s.sum().backward()
    assert torch.isfinite(s).all()
    assert torch.isfinite(q.grad).all() and torch.isfinite(d.grad).all()
    for p in sim.parameters():
        assert torch.isfinite(p.grad).all()


@pytest.mark.parametrize("name", FAMILY)
def test_large_norms_stay_finite_and_correct(name):
    g = torch.Generator().manual_seed(2)
    q = torch.nn.functional.normalize(torch.randn(3, 16, generator=g), dim=-1) * 1e4
    d = torch.nn.functional.normalize(torch.randn(5, 16, generator=g), dim=-1) * 1e4
    s = get_similarity(name)(q, d)
    assert torch.isfinite(s).all()
    for i in range(3):
        for j in range(5):
            assert s[i, j].item() == pytest.approx(ref_score(q[i].tolist(), d[j].tolist(), name), rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["qnorm", "dnorm", "learnable", "cosine"])
def test_half_precision_norms_do_not_overflow(name, dtype):
    q = torch.full((2, 512), 30.0, dtype=dtype)  # ‖q‖² = 460800 overflows fp16 if squared in fp16
    d = torch.full((3, 512), 1.0, dtype=dtype)
    s = get_similarity(name)(q, d)
    assert torch.isfinite(s.float()).all()


def test_empty_inputs_give_empty_scores():
    sim = get_similarity("qnorm")
    assert sim(torch.empty(0, 8), torch.randn(3, 8)).shape == (0, 3)
    assert sim.pairwise(torch.empty(0, 8), torch.empty(0, 8)).shape == (0,)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="Valid names: cosine, dot, qnorm, dnorm, learnable"):
        get_similarity("qnrom")
    with pytest.raises(ValueError, match="dimensions differ"):
        get_similarity("dot")(torch.randn(2, 4), torch.randn(2, 5))
    with pytest.raises(ValueError, match="as many queries as documents"):
        get_similarity("dot").pairwise(torch.randn(2, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        PowerNormSimilarity(1.5, 0.0)
    with pytest.raises(ValueError, match="open interval"):
        LearnableSimilarity(init_gamma=1.0)
    with pytest.raises(ValueError, match="accepts only `eps`"):
        get_similarity("qnorm", init_gamma=0.3)


def test_aliases_and_config():
    assert get_similarity("query_norm").name == "qnorm"
    assert get_similarity("Doc-Norm").name == "dnorm"
    cfg = get_similarity("dnorm").get_config_dict()
    assert cfg == {"name": "dnorm", "gamma_query": 0.0, "gamma_document": 1.0}
    assert "LearnableSimilarity" in repr(get_similarity("learnable"))


def test_phi_is_the_factorisation():
    # s(q, d) = φ_γq(q) · φ_γd(d) for any γ
    g = torch.Generator().manual_seed(3)
    q, d = torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64)
    for gq, gd in [(0.3, 0.9), (1.0, 0.0), (0.5, 0.5)]:
        expected = [[ref_score(q[i].tolist(), d[j].tolist(), "learnable", gq, gd) for j in range(4)] for i in range(3)]
        got = phi(q, gq) @ phi(d, gd).T
        torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))


def test_cosine_equals_sentence_transformers_cos_sim():
    from sentence_transformers.util import cos_sim, dot_score

    g = torch.Generator().manual_seed(4)
    q, d = torch.randn(5, 12, generator=g), torch.randn(7, 12, generator=g)
    torch.testing.assert_close(get_similarity("cosine")(q, d), cos_sim(q, d), rtol=0, atol=0)
    torch.testing.assert_close(get_similarity("dot")(q, d), dot_score(q, d), rtol=0, atol=0)


# --- one eps for every form; the zero-vector gradient is finite and exactly eps^-γ · upstream ---
@pytest.mark.parametrize("name", FIXED)
def test_zero_vector_gradient_is_the_same_in_matrix_and_pairwise_form(name):
    d = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    sim = get_similarity(name)
    grads = {}
    for form in ("matrix", "pairwise"):
        q = torch.zeros(1, 4, requires_grad=True)
        s = sim(q, d) if form == "matrix" else sim.pairwise(q, d)
        assert s.item() == 0.0
        s.sum().backward()
        grads[form] = q.grad
    gq, gd = CORNER_GAMMAS[name]
    # φ_γ(v) = v / eps^γ inside the eps-ball, so ∂(φ(q)·φ(d))/∂q = φ_γd(d) / eps^γq at q = 0
    expected = phi(d, gd) / sim.eps**gq
    torch.testing.assert_close(grads["matrix"], grads["pairwise"], rtol=1e-6, atol=0)
    torch.testing.assert_close(grads["matrix"], expected, rtol=1e-6, atol=0)
    assert torch.isfinite(grads["matrix"]).all()


# --- sim_TN stays fp32 under autocast and exact for near-aligned pairs ---
def _tn_reference(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """sim_TN from the difference a − b in float64 (paper 002 eqs. 1, 4), the same eps placement."""
    a, b = a.double(), b.double()
    dist = torch.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) + eps)
    den = torch.sqrt((a * a).sum(-1, keepdim=True) + eps) + torch.sqrt((b * b).sum(-1)[None] + eps)
    return (1 - dist / den).clamp(0, 1)


def _near_aligned(seed: int = 0, b: int = 16, n: int = 384, noise: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.nn.functional.normalize(torch.randn(b, n, generator=g, dtype=torch.float64), dim=-1) * 10
    pos = a + noise * 10 * torch.randn(b, n, generator=g, dtype=torch.float64) / n**0.5
    return a, pos


def test_tn_matrix_form_ignores_autocast():
    a, b = _near_aligned(noise=0.5)
    sim = get_similarity("tn")
    ref = sim(a.float(), b.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sim(a.float(), b.float())
        got_pair = sim.pairwise(a.float(), b.float())
    assert got.dtype == torch.float32 and got_pair.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-7)
    torch.testing.assert_close(got_pair, ref.diagonal(), rtol=0, atol=1e-6)


def test_tn_matrix_form_has_no_cancellation_floor_for_near_aligned_pairs():
    a, b = _near_aligned()
    got = get_similarity("tn")(a.float(), b.float()).double()
    # the identity ‖a‖² + ‖b‖² − 2a·b alone left errors of ≈ 4e-4 on the diagonal here
    torch.testing.assert_close(got, _tn_reference(a, b), rtol=0, atol=1e-6)


@pytest.mark.parametrize("gather_on_cpu", [True, False])  # the CPU's way and the accelerator's
def test_tn_matrix_form_equals_the_pairwise_form_on_near_aligned_pairs(monkeypatch, gather_on_cpu):
    """The matrix form's near-aligned pairs (here the diagonal) are the pairwise form's values and gradients: both
    from the difference a − b; the far pairs keep the law-of-cosines value."""
    from st_magnitude import _cpu_shortcuts

    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", gather_on_cpu)
    a, b = _near_aligned(noise=1e-3)
    a, b = a.float(), b[torch.arange(a.shape[0]).roll(1)].float()  # positives off the diagonal: b[i - 1] = pos
    sim = get_similarity("tn")
    a_m, b_m = a.clone().requires_grad_(), b.clone().requires_grad_()
    matrix = sim(a_m, b_m)
    cols = torch.arange(a.shape[0]).roll(-1)  # row i's positive is column i + 1
    pairs = matrix[torch.arange(a.shape[0]), cols]
    a_p, b_p = a.clone().requires_grad_(), b[cols].clone().requires_grad_()
    pairwise = sim.pairwise(a_p, b_p)
    torch.testing.assert_close(pairs, pairwise, rtol=0, atol=1e-7)
    pairs.sum().backward()
    pairwise.sum().backward()
    torch.testing.assert_close(a_m.grad, a_p.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b_m.grad[cols], b_p.grad, rtol=1e-5, atol=1e-6)
    far = get_similarity("tn", refine_ratio=0.0)(a, b)  # the identity alone
    off = torch.ones_like(far, dtype=torch.bool)
    off[torch.arange(a.shape[0]), cols] = False
    assert torch.equal(matrix.detach()[off], far[off])
    assert (matrix.detach()[~off] - far[~off]).abs().max() > 1e-5  # the identity's cancellation, corrected


def test_info_tn_gradient_matches_float64_reference_for_near_aligned_positives():
    from st_magnitude.losses.info_tn import info_tn_loss

    a, b = _near_aligned(noise=1e-3)
    tau = 0.01
    ref_a = a.clone().requires_grad_()
    torch.nn.functional.cross_entropy(_tn_reference(ref_a, b) / tau, torch.arange(a.shape[0])).backward()
    a32 = a.float().requires_grad_()
    info_tn_loss(a32, b.float(), tau).backward()
    rel = ((a32.grad.double() - ref_a.grad).norm() / ref_a.grad.norm()).item()
    assert rel < 1e-4  # 1.2e-2 before the near-aligned pairs were recomputed from the difference


def test_tn_refine_ratio_is_validated_and_configurable():
    assert get_similarity("tn", refine_ratio=0.0).refine_ratio == 0.0
    with pytest.raises(ValueError, match="refine_ratio"):
        get_similarity("tn", refine_ratio=2.0)
    with pytest.raises(ValueError, match="accepts only"):
        get_similarity("dot", refine_ratio=0.1)


# --- the registry: one source of truth for which names exist and what each can do ---
from st_magnitude.similarity import (  # noqa: E402
    CARRIABLE_SIMILARITY_NAMES,
    SIMILARITY_NAMES,
    CosineSimilarity,
    DNormSimilarity,
    DotSimilarity,
    QNormSimilarity,
    Similarity,
    TNSimilarity,
    gammas_of,
    is_carriable,
    name_of_gammas,
    similarity_class,
    similarity_names,
    similarity_spec,
)

#: Written out by hand from paper 000 eqs. 3–7 / Prop. 2.1 and paper 002 eqs. 1, 4 — not derived from the registry.
#: name: (class, power-norm member, fixed (γq, γd), carriable, symmetric for every parameter value, learnable)
REGISTRY_TABLE = {
    "cosine": (CosineSimilarity, True, (1.0, 1.0), True, True, False),
    "dot": (DotSimilarity, True, (0.0, 0.0), True, True, False),
    "qnorm": (QNormSimilarity, True, (1.0, 0.0), True, False, False),
    "dnorm": (DNormSimilarity, True, (0.0, 1.0), True, False, False),
    "learnable": (LearnableSimilarity, True, None, True, False, True),
    "tn": (TNSimilarity, False, None, False, True, False),
}


def test_registry_names_are_the_table():
    assert SIMILARITY_NAMES == similarity_names() == tuple(REGISTRY_TABLE)
    assert CARRIABLE_SIMILARITY_NAMES == tuple(n for n, row in REGISTRY_TABLE.items() if row[3])


@pytest.mark.parametrize("name", list(REGISTRY_TABLE))
def test_registry_answers_every_question_for_every_name(name):
    cls, power_norm, gammas, carriable, symmetric, learnable = REGISTRY_TABLE[name]
    spec = similarity_spec(name)
    assert (spec.name, spec.power_norm, spec.gammas, spec.carriable, spec.symmetric, spec.learnable) == (
        name,
        power_norm,
        gammas,
        carriable,
        symmetric,
        learnable,
    )
    # name <-> class, and the instance keeps the contract the registry promises
    assert similarity_class(name) is cls
    sim = get_similarity(name)
    assert type(sim) is cls and sim.name == name and isinstance(sim, Similarity)
    assert is_carriable(name) is carriable and gammas_of(name) == gammas
    assert isinstance(sim, PowerNormSimilarity) is power_norm
    if power_norm:  # γ only for the power-norm family
        gq, gd = sim.gammas()
        assert (sim.gamma_query, sim.gamma_document) == tuple(torch.as_tensor(g).detach().item() for g in (gq, gd))
        if gammas is not None:
            assert (sim.gamma_query, sim.gamma_document) == gammas
            assert name_of_gammas(*gammas) == name
            assert PowerNormSimilarity(*gammas).name == name
    else:  # no member that pretends: no gammas, no per-role rescaling
        for attr in ("gammas", "gamma_query", "gamma_document", "transform_query", "transform_document"):
            assert not hasattr(sim, attr), attr
    if symmetric:
        assert sim.symmetric and not sim.requires_roles
    elif not learnable:
        assert not sim.symmetric and sim.requires_roles
    else:  # learnable: symmetric only while γq == γd
        assert sim.symmetric and not get_similarity(name, init_gamma=(0.3, 0.7)).symmetric
    # every name filter agrees with the table
    for field, column in (("carriable", 3), ("symmetric", 4), ("learnable", 5), ("power_norm", 1)):
        assert (name in similarity_names(**{field: True})) is REGISTRY_TABLE[name][column]
    assert (name in similarity_names(fixed_gammas=True)) is (gammas is not None)


def test_registry_lookups_handle_aliases_fractions_and_unknown_names():
    assert is_carriable("cos_sim") and not is_carriable("sim_tn")
    assert similarity_class("Doc-Norm") is DNormSimilarity
    assert name_of_gammas(0.5, 0.5) is None and name_of_gammas(1, 0) == "qnorm"
    assert PowerNormSimilarity(0.5, 0.5).name == "power_norm"
    for lookup in (is_carriable, similarity_spec, similarity_class, gammas_of):
        with pytest.raises(ValueError, match="Valid names: cosine, dot, qnorm, dnorm, learnable, tn"):
            lookup("euclid")


def test_get_similarity_lists_the_keywords_each_class_accepts():
    with pytest.raises(ValueError, match="'qnorm' accepts only `eps`, got"):
        get_similarity("qnorm", init_gamma=0.3)
    with pytest.raises(ValueError, match="'tn' accepts only `eps` and `refine_ratio`"):
        get_similarity("tn", init_gamma=0.3)
    with pytest.raises(ValueError, match="'learnable' accepts only `eps`, `init_gamma` and `source`"):
        get_similarity("learnable", refine_ratio=0.1)  # was a bare TypeError from the constructor


def test_learnable_is_a_power_norm_member_sharing_a_source():
    owner = LearnableSimilarity(init_gamma=(0.2, 0.9))
    shared = LearnableSimilarity(source=owner)
    assert isinstance(shared, PowerNormSimilarity) and list(shared.parameters()) == []
    with torch.no_grad():
        owner.gamma_query_logit.fill_(0.0)
    assert shared.gamma_query == pytest.approx(0.5) and shared.gamma_document == pytest.approx(0.9)


# --- consumers ask the contract (isinstance / registry), so tn is refused clearly or handled, never half-used ---
def test_tn_in_exact_search_is_scored_as_is():
    from st_magnitude.evaluation.search import topk_search

    torch.manual_seed(0)
    q, d = torch.randn(3, 5), torch.randn(20, 5)
    tn = get_similarity("tn")
    values, indices = topk_search(q, d, 4, score_fn=tn)  # raised "tn ... has no gammas" before
    ref = tn(q, d).topk(4, dim=1)
    torch.testing.assert_close(values, ref.values)
    assert torch.equal(indices, ref.indices)


def test_apply_similarity_refuses_tn_by_name_and_instance(tiny_model):
    from st_magnitude import apply_similarity

    for similarity in ("tn", TNSimilarity()):
        with pytest.raises(ValueError, match="'tn' is not a per-role rescaling and cannot be carried by a model"):
            apply_similarity(tiny_model, similarity)


def test_apply_similarity_names_a_power_norm_instance_by_its_corner(tiny_model):
    from st_magnitude import apply_similarity
    from st_magnitude.model.info import carried_similarity, model_gammas

    apply_similarity(tiny_model, PowerNormSimilarity(1.0, 0.0), warn_on_strip=False)
    assert model_gammas(tiny_model) == (1.0, 0.0) and carried_similarity(tiny_model).name == "qnorm"


def test_losses_refuse_a_similarity_without_gammas(tiny_model_raw):
    from st_magnitude.losses._common import resolve_similarity

    tiny_model = tiny_model_raw
    with pytest.raises(
        TypeError, match=r"similarity must be one of \['cosine', 'dot', 'qnorm', 'dnorm', 'learnable'\]"
    ):
        resolve_similarity(tiny_model, "tn", "SomeLoss")
    assert resolve_similarity(tiny_model, PowerNormSimilarity(0.5, 0.5), "SomeLoss")[2] == "power_norm(0.5, 0.5)"


def test_score_description_of_a_similarity_without_gammas(tiny_model):
    from st_magnitude.evaluation._retrieval import resolve_score_fn

    assert resolve_score_fn(tiny_model, "tn")[1] == "tn (eps=1e-08, refine_ratio=0.1)"
    assert resolve_score_fn(tiny_model, "qnorm")[1] == "qnorm (gamma_query=1.0000, gamma_document=0.0000)"
