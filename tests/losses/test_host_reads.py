"""No loss reads a tensor into Python (a host sync on a GPU) in a steady-state training step, beyond what it declares.

Every registered loss, plain and cached, runs forward and backward on a tiny model on the CPU: first the calls that
run the first-calls checks (duplicate positives, RevelaLoss's batch checks), then the counted calls, with every
Python entry point of a host read tripped by a counting patch (``helpers/host_reads.py``). The reads made by
st_magnitude's own code must stay within the class's ``host_reads_per_step`` per call. The deferred checks take
their accelerator path (a device flag read every ``FINITE_CHECK_INTERVAL`` calls) so that the CPU run counts what a
GPU run would.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import TINY_TRANSFORMER
from helpers.host_reads import counting_host_reads

import st_magnitude.losses as L
from st_magnitude import _cpu_shortcuts
from st_magnitude.losses import _batch
from st_magnitude.losses._registry import loss_class_names

SENTS = ["the protein in cancer cell", "vitamin diet and heart risk", "coffee tea sleep", "exercise weight trial"]
NEGS = ["milk egg meat", "fish fat acid brain", "gene dose effect", "blood sugar level"]
COUNTED_CALLS = 2


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=60, **TINY_TRANSFORMER, num_key_value_heads=2, pad_token_id=0, attn_implementation="sdpa"
    )
    return LlamaForCausalLM(config).eval()


def _pairs(m):
    return [m.preprocess(SENTS), m.preprocess([s.split()[-1] + " " + s for s in SENTS])], None


def _triplets_with_margins(m):
    features, _ = _pairs(m)
    return [*features, m.preprocess(NEGS)], torch.tensor([[2.0, 1.0]] * len(SENTS))


def _revela(m):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 60, (3, 9), generator=g)
    lm = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return [m.preprocess(SENTS[:3]), m.preprocess(NEGS[:3]), lm], torch.zeros(3, dtype=torch.long)


#: every registered loss class: (build it on the model, its batch)
BUILDERS = {
    "PartialNormInfoNCELoss": (lambda m: L.PartialNormInfoNCELoss(m, "cosine"), _pairs),
    "CachedPartialNormInfoNCELoss": (lambda m: L.CachedPartialNormInfoNCELoss(m, "cosine", mini_batch_size=2), _pairs),
    "MWLoss": (lambda m: L.MWLoss(m, "cosine", pair_stage="grid"), _pairs),
    "CachedMWLoss": (lambda m: L.CachedMWLoss(m, "cosine", mini_batch_size=2, pair_stage="grid"), _pairs),
    "InfoTNLoss": (lambda m: L.InfoTNLoss(m, nap_head=True, warn_collapse=False), _pairs),
    "CachedInfoTNLoss": (
        lambda m: L.CachedInfoTNLoss(m, nap_head=True, warn_collapse=False, mini_batch_size=2),
        _pairs,
    ),
    "L2DirLoss": (lambda m: L.L2DirLoss(m), _pairs),
    "CachedL2DirLoss": (lambda m: L.CachedL2DirLoss(m, mini_batch_size=2), _pairs),
    "MarginContrastiveLoss": (lambda m: L.MarginContrastiveLoss(m), _triplets_with_margins),
    "BertRecipeLoss": (lambda m: L.BertRecipeLoss(m), _triplets_with_margins),
    "EttinRecipeLoss": (lambda m: L.EttinRecipeLoss(m), _pairs),
    "MagnitudeMatryoshkaLoss": (
        lambda m: L.MagnitudeMatryoshkaLoss(m, L.BertRecipeLoss(m), [32, 16]),
        _triplets_with_margins,
    ),
    "RevelaLoss": (lambda m: L.RevelaLoss(m, _tiny_llama(), temperature=0.05), _revela),
}


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    from conftest import build_tiny_st

    return build_tiny_st(tiny_bert_dir, normalize=True, dropout=0.0)


def test_every_registered_loss_is_covered():
    assert set(BUILDERS) == set(loss_class_names())


def _step(loss, features, labels) -> None:
    out = loss(features, labels)
    total = sum(out.values()) if isinstance(out, dict) else out
    total.backward()


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_steady_state_step_reads_no_more_than_the_loss_declares(tiny_model, name, monkeypatch):
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)  # the accelerators' way: deferred checks, sim_TN, MW
    build, batch = BUILDERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = build(tiny_model)
    sites = _steady_state_reads(loss, *batch(tiny_model))
    declared = loss.host_reads_per_step
    assert isinstance(declared, int) and declared >= 0
    assert len(sites) <= declared * COUNTED_CALLS, (
        f"{name} read tensors into Python {len(sites) / COUNTED_CALLS:g} times per step (declared {declared}): "
        f"{sorted(set(sites))}"
    )


def _steady_state_reads(loss, features, labels) -> list[str]:
    loss.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(_batch.DUPLICATE_CHECK_FIRST):  # the first calls' checks
            _step(loss, features, labels)
        with counting_host_reads() as sites:
            for _ in range(COUNTED_CALLS):
                _step(loss, features, labels)
    return sites


def test_revela_at_the_papers_temperature_reads_once_to_skip_zero_weight_pairs(tiny_model, monkeypatch):
    """At τ = 1e-4 Sim holds exact zeros: one ``nonzero`` per step finds the pairs the in-batch term computes."""
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)
    loss = L.RevelaLoss(tiny_model, _tiny_llama(), temperature=1e-4)
    sites = _steady_state_reads(loss, *_revela(tiny_model))
    assert loss.host_reads_per_step == 1
    assert len(sites) == COUNTED_CALLS and all("revela_attention.py" in s for s in sites), sites


def test_the_counting_patch_sees_a_read_in_the_package_and_is_removed_after():
    emb = [torch.randn(4, 32) for _ in range(2)]
    unique, item = torch.unique, torch.Tensor.item
    with counting_host_reads() as sites:
        _batch.check_finite(emb, "X")  # the immediate check: one bool() of a flag
        bool(torch.ones(()))  # the test's own read: not the package's
    assert sites and all(s.startswith("st_magnitude/losses/_batch.py:") for s in sites)
    assert "__bool__" not in vars(torch.Tensor) and torch.unique is unique and torch.Tensor.item is item


# ---------------------------------------------------------------------------------------------------------------
# MW on wide score ranges: a paged grid and the tails (scores thousands of τ apart) read what the loss declares
# ---------------------------------------------------------------------------------------------------------------
MW_WIDE = [("dot", 0.01), ("qnorm", 0.01), ("dnorm", 0.01), ("cosine", 1e-6)]


def _mw_columns(batch: int, seed: int = 0) -> list[torch.Tensor]:
    """(anchor, positive) embeddings with norms over logspace(-2, 2): dot, qnorm and dnorm scores span ~1e6 τ."""
    g = torch.Generator().manual_seed(seed)
    norms = torch.logspace(-2, 2, batch)
    return [
        torch.nn.functional.normalize(torch.randn(batch, 8, generator=g), dim=1)
        * norms[torch.randperm(batch, generator=g)][:, None]
        for _ in range(2)
    ]


def _mw_reads(loss, columns, cached: bool) -> list[str]:
    def step():
        leaves = [c.clone().requires_grad_() for c in columns]
        if cached:
            loss.calculate_loss([[x] for x in leaves], with_backward=True)
        else:
            loss.compute_loss_from_embeddings(leaves).backward()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(_batch.DUPLICATE_CHECK_FIRST):
            step()
        with counting_host_reads() as sites:
            for _ in range(COUNTED_CALLS):
                step()
    return sites


def _mw_loss(model, similarity, temperature, stage, mini_batch):
    kw = {"temperature": temperature, "pair_stage": stage}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # magnitude similarities on a normalising model: on purpose
        if mini_batch is None:
            return L.MWLoss(model, similarity, **kw)
        return L.CachedMWLoss(model, similarity, mini_batch_size=mini_batch, **kw)


def _assert_declared(loss, sites, stage, passes):
    per_step = len(sites) / COUNTED_CALLS
    # a paged grid: the range, the pages' plan, one read per pass of each chunk; pairwise: the range alone
    expected = 2 + passes if stage == "grid" else 1
    assert per_step == loss.host_reads_per_step == expected, (
        f"{per_step:g} reads per step, declared {loss.host_reads_per_step}, expected {expected}: {sorted(set(sites))}"
    )


@pytest.mark.parametrize("stage", ["grid", "pairwise"])
@pytest.mark.parametrize("mini_batch", [None, 16, 64], ids=["plain", "cached-4-chunks", "cached-1-chunk"])
@pytest.mark.parametrize("similarity,temperature", MW_WIDE)
def test_mw_on_wide_ranges_reads_what_it_declares(tiny_model, monkeypatch, similarity, temperature, mini_batch, stage):
    """Scores ~1e6 τ apart page the grid and sum most scores on the tails: the step reads the range, the pages'
    plan (every level's cost and pages at once) and one count per chunk, and declares exactly that."""
    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)
    loss = _mw_loss(tiny_model, similarity, temperature, stage, mini_batch)
    sites = _mw_reads(loss, _mw_columns(64), mini_batch is not None)
    _assert_declared(loss, sites, stage, passes=64 // (mini_batch or 64))


@pytest.mark.parametrize("mini_batch", [None, 64], ids=["plain", "cached-4-chunks"])
def test_mw_with_pages_on_the_grid_and_several_passes_reads_once_a_pass(tiny_model, monkeypatch, mini_batch):
    """B = 256 dot scores put some pages on the grid (scores split between the grid and the tails, the own
    positives among both); with passes of 4,096 scores each chunk makes several passes, each read once."""
    from st_magnitude.losses import _mw_grid

    monkeypatch.setattr(_cpu_shortcuts, "ENABLED", False)
    monkeypatch.setattr(_mw_grid, "CPU_CHUNK", 4096)
    loss = _mw_loss(tiny_model, "dot", 0.01, "grid", mini_batch)
    columns = _mw_columns(256)
    sites = _mw_reads(loss, columns, mini_batch is not None)
    chunk_scores = (mini_batch or 256) * 256
    _assert_declared(loss, sites, "grid", passes=(256 // (mini_batch or 256)) * (chunk_scores // 4096))
