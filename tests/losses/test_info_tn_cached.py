"""CachedInfoTNLoss: the same loss and the same gradients as InfoTNLoss, and the same arguments.

The reference is the plain loss on the same tiny in-code model (dropout off), and a plain-Python loop over floats for
the value (paper 002 eq. 7), so the test fails if the cached twin caches the wrong tensor (the normalized embedding
instead of the un-normalized state), drops the head's gradient, or mixes up the chunks.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings

import pytest
import torch
from conftest import loss_parameters

from st_magnitude.losses.info_tn import CachedInfoTNLoss, InfoTNCollapseWarning, InfoTNLoss


def _ref_info_tn(anchors, candidates, temperature):
    """Eq. 7 with eq. 4 on float lists: mean over anchors of −log softmax_j(sim_TN(a_i, c_j)/τ)[i]."""

    def norm(v):
        return math.sqrt(sum(x * x for x in v))

    def sim_tn(q, t):
        return 1.0 - norm([a - b for a, b in zip(q, t)]) / (norm(q) + norm(t))

    total = 0.0
    for i, a in enumerate(anchors):
        logits = [sim_tn(a, c) / temperature for c in candidates]
        m = max(logits)
        total += m + math.log(sum(math.exp(x - m) for x in logits)) - logits[i]
    return total / len(anchors)


def _grads(loss_module, features):
    loss_module.zero_grad()
    value = loss_module(copy.deepcopy(features))
    value.backward()
    grads = {n: p.grad.clone() for n, p in loss_parameters(loss_module).items() if p.grad is not None}
    return float(value.detach()), grads


def _losses(model, nap_head, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InfoTNCollapseWarning)
        plain = InfoTNLoss(model, temperature=0.05, nap_head=nap_head, **kw)
        head = copy.deepcopy(plain.nap_head) if plain.nap_head is not None else None
        cached = CachedInfoTNLoss(copy.deepcopy(model), temperature=0.05, nap_head=head, mini_batch_size=2, **kw)
    return plain, cached


@pytest.mark.parametrize("nap_head", [False, True], ids=["raw-state", "nap-head"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cached_loss_and_gradients_equal_the_plain_loss(tiny_model, sentences, nap_head, dtype):
    # Given the same model (dropout off), three columns and, optionally, the same NAP head for both losses
    model = tiny_model.to(dtype).eval()
    anchors, positives, negatives = sentences, sentences[::-1], sentences[1:] + sentences[:1]
    features = [dict(model.preprocess(c)) for c in (anchors, positives, negatives)]
    torch.manual_seed(0)
    plain, cached = _losses(model, nap_head)
    if plain.nap_head is not None:
        plain.nap_head.to(dtype)
        cached.nap_head.to(dtype)
    # When both compute loss and gradients (the cached one over mini-batches of 2 of the 6 rows)
    value_p, grads_p = _grads(plain, features)
    value_c, grads_c = _grads(cached, features)
    # Then the values agree, and equal the loop over the un-normalized states the plain loss scored
    assert value_c == pytest.approx(value_p, rel=1e-5)
    with torch.no_grad():
        states = [plain.tap.embed(dict(f), model)[1] for f in copy.deepcopy(features)]
        vectors = plain.project(states, None)
    rows = [v.double().tolist() for v in vectors]
    assert value_p == pytest.approx(_ref_info_tn(rows[0], rows[1] + rows[2], 0.05), rel=1e-4)
    # and every gradient agrees (backbone, and the head when there is one)
    assert set(grads_c) == set(grads_p)
    assert any(k.startswith("nap_head.") for k in grads_p) == nap_head
    backbone = [g for n, g in grads_p.items() if n.startswith("model.")]
    assert backbone and sum(float(g.abs().sum()) for g in backbone) > 0
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float64 else {"rtol": 1e-2, "atol": 2e-3}
    for name, grad in grads_p.items():
        torch.testing.assert_close(grads_c[name], grad, **tol, msg=name)


def test_cached_twin_takes_the_plain_arguments_and_delegates(tiny_model):
    plain_args = list(inspect.signature(InfoTNLoss).parameters)
    cached_args = list(inspect.signature(CachedInfoTNLoss).parameters)
    assert cached_args == [*plain_args, "mini_batch_size", "mini_batch_num_tokens", "show_progress_bar"]
    with pytest.warns(InfoTNCollapseWarning):
        cached = CachedInfoTNLoss(tiny_model, temperature=0.02, mini_batch_size=4, mini_batch_num_tokens=64)
    assert isinstance(cached.loss, InfoTNLoss) and cached.temperature == 0.02
    cached.temperature = 0.03
    assert cached.loss.temperature == 0.03
    config = cached.get_config_dict()
    assert config["temperature"] == 0.03 and config["mini_batch_size"] == 4 and config["mini_batch_num_tokens"] == 64
    assert cached.citation == cached.loss.citation
    with pytest.raises(ValueError, match="mini_batch_size"):
        CachedInfoTNLoss(tiny_model, mini_batch_size=0, warn_collapse=False)
    with pytest.raises(ValueError, match=r"temperature \(.*\) must be a finite number"):
        CachedInfoTNLoss(tiny_model, temperature="learnable", warn_collapse=False)  # InfoTN has no learnable τ
