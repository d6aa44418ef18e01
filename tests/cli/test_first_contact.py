"""What a sentence-transformers user trips on in the first hour with st-magnitude, one test per case.

- ``-o/--output`` means the same everywhere: ``evaluate MODEL --data D -o DIR`` was a usage error (it had ``--json``);
  the vocabulary test (``tests/cli/test_vocabulary.py``) keeps every command to it.
- ``model.fit(train_objectives=[(loader, MWLoss(model))])`` on a converted qnorm / dnorm model ended in ST's error
  asking for a ``router_mapping``, which ``fit`` cannot pass; it is now one line naming the Trainer, before any work,
  and the other similarities train under ``fit``.
- ``mteb run`` printed where its JSON went and no score; it prints the table ``evaluate`` prints.
- the offline ``mteb run -t SciFact`` error pointed at a BEIR folder that did not exist.
- ``--max-corpus 300`` kept 1,284 documents (every judged document stays) without saying so; the kept counts are
  printed before the long part of the run.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from conftest import TRAIN_SENTENCES, build_tiny_st

from st_magnitude import apply_similarity

#: The similarities a model can carry; under ``model.fit`` the ones ST carries with a query/document ``Router``
#: (no supported way to hand ``fit`` a router_mapping) are refused in one line, the others train.
SIMILARITIES = ("cosine", "dot", "qnorm", "dnorm", "learnable")
ROUTED = ("qnorm", "dnorm")


def _fit(model, loss, **kwargs) -> None:
    from sentence_transformers.sentence_transformer.readers import InputExample
    from torch.utils.data import DataLoader

    texts = TRAIN_SENTENCES[:6]
    examples = [InputExample(texts=[texts[i], texts[(i + 1) % 6]]) for i in range(6)]
    loader = DataLoader(examples, shuffle=False, batch_size=3)
    model.fit(train_objectives=[(loader, loss)], epochs=1, warmup_steps=0, show_progress_bar=False, **kwargs)


def _weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _moved(before, model) -> bool:
    return any(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters())


def _refused_in_one_line(exc: pytest.ExceptionInfo, name: str) -> None:
    message = str(exc.value)
    assert "\n" not in message, message
    assert "model.fit cannot pass" in message and "SentenceTransformerTrainer" in message, message
    assert "router_mapping={'anchor': 'query'" in message, message
    assert f"apply_similarity(model, {name!r}, portable=False)" in message, message


@pytest.mark.parametrize("name", SIMILARITIES)
def test_model_fit_trains_or_refuses_in_one_line_before_any_work(tiny_bert_dir, tmp_path, monkeypatch, name):
    from st_magnitude.losses import MWLoss

    monkeypatch.chdir(tmp_path)  # fit's own checkpoint folder is relative
    model = apply_similarity(build_tiny_st(tiny_bert_dir), name, warn_on_strip=False)
    before = _weights(model)
    output = tmp_path / "fitted"
    if name in ROUTED:
        with pytest.raises(ValueError) as exc:
            _fit(model, MWLoss(model), output_path=str(output))
        _refused_in_one_line(exc, name)
        assert not _moved(before, model) and list(tmp_path.iterdir()) == []  # before any work
    else:
        _fit(model, MWLoss(model), output_path=str(output))
        assert _moved(before, model)


def test_a_router_model_loaded_by_stock_st_is_refused_through_the_packages_loss(tiny_bert_dir, tmp_path, monkeypatch):
    """A qnorm folder loaded with plain ``SentenceTransformer(path)`` never met the package until its loss."""
    from sentence_transformers import SentenceTransformer

    from st_magnitude.losses import PartialNormInfoNCELoss

    monkeypatch.chdir(tmp_path)
    apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm", warn_on_strip=False).save(str(tmp_path / "qnorm"))
    model = SentenceTransformer(str(tmp_path / "qnorm"))
    with pytest.raises(ValueError) as exc:
        _fit(model, PartialNormInfoNCELoss(model))
    _refused_in_one_line(exc, "qnorm")


def test_an_st_loss_on_a_converted_model_is_refused_and_portable_false_trains(tiny_bert_dir, tmp_path, monkeypatch):
    """ST's own loss with ``apply_similarity``: the same line; the alternative it names works (the check is made
    when ``fit`` is called, not when the model was converted); a deep copy or an unpickled model checks itself."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude import get_similarity

    monkeypatch.chdir(tmp_path)
    model = apply_similarity(build_tiny_st(tiny_bert_dir), "dnorm", warn_on_strip=False)
    twin = copy.deepcopy(model)
    with pytest.raises(ValueError) as exc:
        _fit(model, MultipleNegativesRankingLoss(model, similarity_fct=get_similarity("dnorm")))
    _refused_in_one_line(exc, "dnorm")
    assert twin.fit.model is twin and pickle.loads(pickle.dumps(twin)).fit.model.encode_query(["a"]).shape == (1, 32)
    apply_similarity(model, "dnorm", warn_on_strip=False, portable=False)
    before = _weights(model)
    _fit(model, MultipleNegativesRankingLoss(model, similarity_fct=get_similarity("dnorm")))
    assert _moved(before, model)
