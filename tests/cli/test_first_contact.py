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
import importlib.util
import json
import pickle

import pytest
import torch
from conftest import TRAIN_SENTENCES, build_tiny_st
from helpers.toy_beir import write_toy_beir

from st_magnitude import apply_similarity
from st_magnitude.cli import main

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
    """A qnorm folder loaded with plain ``SentenceTransformer(path)`` never met the package until its loss; its
    model card already says how to fine-tune it."""
    from sentence_transformers import SentenceTransformer

    from st_magnitude.losses import PartialNormInfoNCELoss

    monkeypatch.chdir(tmp_path)
    apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm", warn_on_strip=False).save(str(tmp_path / "qnorm"))
    model = SentenceTransformer(str(tmp_path / "qnorm"))
    with pytest.raises(ValueError) as exc:
        _fit(model, PartialNormInfoNCELoss(model))
    _refused_in_one_line(exc, "qnorm")
    card = (tmp_path / "qnorm" / "README.md").read_text(encoding="utf-8")
    assert "use `SentenceTransformerTrainer`" in card and "legacy `model.fit` cannot pass" in card  # the card says so


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


# ----------------------------------------------------------------------------------------------------------------
# the CLI: one output vocabulary, the kept counts before the run, mteb's table, offline hints that point somewhere
# ----------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tiny_bert_dir, tmp_path_factory):
    """A saved tiny model and a toy BEIR folder: query i is judged relevant to documents 2i and 2i + 1."""
    root = tmp_path_factory.mktemp("first_contact")
    build_tiny_st(tiny_bert_dir).save(str(root / "model"))
    write_toy_beir(root / "toy", n_docs=30, n_queries=8)
    return root


def _table_row(out: str, dataset: str) -> list[str]:
    """The cells of ``dataset``'s row in a printed format_table."""
    (line,) = [line for line in out.splitlines() if line.split()[:2] == [dataset, "test"]]
    return line.split()


def test_evaluate_dash_o_writes_the_rows_into_the_folder_and_says_what_it_kept_first(world, tmp_path, capsys):
    """``-o DIR`` as every command spells it; ``--max-corpus 12`` keeps the 16 judged documents and says so before
    the model is loaded (the first line the run prints about the data, above the table)."""
    out = tmp_path / "new" / "eval"
    code = main(["evaluate", str(world / "model"), "--data", str(world / "toy"), "-o", str(out), "--max-corpus", "12"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    kept = "toy (test): 8 of 8 queries, 16 of 30 documents (16 judged + 0 seeded distractors); more than max-corpus 12"
    assert kept in printed and printed.index(kept) < printed.index("model:"), printed
    (row,) = json.loads((out / "evaluation.json").read_text())
    assert (row["dataset"], row["queries"], row["corpus"]) == ("toy", 8, 16)
    assert _table_row(printed, "toy")[4] == f"{row['ndcg@10']:.4f}"


@pytest.mark.parametrize(
    "command, output",
    [
        ("evaluate M --data T", ""),
        ("evaluate M --data T", "blocked"),  # blocked/evaluation.json is a folder
        ("scaling choose --budget 1e9", ""),
        ("scaling choose --budget 1e9", "blocked"),  # blocked/choices.json is a folder
        ("diagnose M --data T", ""),
    ],
)
def test_an_output_folder_that_cannot_take_the_files_is_one_line_before_any_work(
    world, tmp_path, monkeypatch, capsys, command, output
):
    """``-o ''`` is no folder (it wrote into the current one); a folder whose file name is taken by a folder is
    refused before the run, not after it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blocked" / "evaluation.json").mkdir(parents=True)
    (tmp_path / "blocked" / "choices.json").mkdir()
    argv = [{"M": str(world / "model"), "T": str(world / "toy")}.get(a, a) for a in command.split()]
    assert main([*argv, "-o", output]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert ("--output is empty" if output == "" else "is a folder") in line, line
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["blocked", "choices.json", "evaluation.json"]


def test_the_kept_counts_are_printed_before_the_model_is_loaded(world, monkeypatch, capsys):
    import st_magnitude.evaluation.runner as runner

    def not_yet(*args, **kwargs):
        raise OSError("stopped where the long part begins")

    monkeypatch.setattr(runner, "load_model", not_yet)
    assert main(["evaluate", str(world / "model"), "--data", str(world / "toy"), "--max-corpus", "20"]) == 2
    captured = capsys.readouterr()
    assert "toy (test): 8 of 8 queries, 20 of 30 documents (16 judged + 4 seeded distractors)" in captured.out
    assert "more than max-corpus" not in captured.out and "stopped where" in captured.err


def test_max_corpus_says_it_is_not_a_cap_in_every_command_that_takes_it():
    import argparse

    from st_magnitude.cli import build_parser

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from walk(child)
            elif "--max-corpus" in action.option_strings and action.type is not int:  # compare: a profile override
                yield action

    helps = [action.help for action in walk(build_parser())]
    assert len(helps) >= 4 and all("not a cap" in h and "every judged document" in h for h in helps), helps


#: ``mteb run`` needs the optional mteb (Python >= 3.11).
needs_mteb = pytest.mark.skipif(importlib.util.find_spec("mteb") is None, reason="mteb is not installed")


@needs_mteb
def test_mteb_run_prints_the_table_evaluate_prints(world, tmp_path, monkeypatch, capsys):
    """The same toy subsample through ``evaluate`` (the reference) and ``mteb run``: the same header, the same
    counts and the same nDCG@10 / Recall@100 / MRR@10 cells."""
    monkeypatch.chdir(tmp_path)
    sub = ["--max-queries", "4", "--max-corpus", "20"]
    assert main(["evaluate", str(world / "model"), "--data", str(world / "toy"), *sub]) == 0
    reference = capsys.readouterr().out
    assert main(["mteb", "run", "-m", str(world / "model"), "-t", str(world / "toy"), "-o", "res", *sub]) == 0
    printed = capsys.readouterr().out
    header = next(line for line in reference.splitlines() if line.startswith("dataset"))
    assert header in printed.splitlines()
    assert _table_row(printed, "toy")[:7] == _table_row(reference, "toy")[:7]
    assert "toy (test): 4 of 8 queries, 20 of 30 documents" in printed.split("model:")[0]  # before the run


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, no data setting of the user's own; returns the data folder to fill."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("ST_MAGNITUDE_DATA", str(data))
    return data


def _offline_error(world, tmp_path, capsys) -> str:
    assert main(["mteb", "run", "-m", str(world / "model"), "-t", "SciFact", "-o", str(tmp_path / "r")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@needs_mteb
def test_offline_mteb_points_at_the_local_copy_that_exists(world, tmp_path, offline, capsys):
    write_toy_beir(offline / "beir" / "scifact", n_docs=6, n_queries=2)
    line = _offline_error(world, tmp_path, capsys)
    assert f"-t {offline / 'beir' / 'scifact'}" in line, line
    assert (offline / "beir" / "scifact" / "corpus.jsonl").is_file()


@needs_mteb
def test_offline_mteb_without_a_local_copy_says_what_it_looked_at_and_how_to_get_it(world, tmp_path, offline, capsys):
    write_toy_beir(offline / "beir" / "nfcorpus", n_docs=6, n_queries=2)
    line = _offline_error(world, tmp_path, capsys)
    assert f"No local BEIR folder found: {offline / 'beir'}" in line and "holds nfcorpus" in line, line
    assert "resolve_dataset('scifact')" in line and "Pass the local BEIR folder instead" not in line, line


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "M", "--data", "toyset"],
        ["diagnose", "M", "--data", "toyset", "-o", "d"],
        pytest.param(["mteb", "run", "-m", "M", "-t", "toyset", "-o", "r"], marks=needs_mteb),
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_dataset_name_where_a_folder_goes_names_the_data_folders_copy(world, tmp_path, monkeypatch, capsys, argv):
    """``compare`` takes dataset names, the other commands folders: a bare name whose folder the data folder
    holds is answered with that folder's path (and without one, nothing is suggested)."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    monkeypatch.setenv("ST_MAGNITUDE_DATA", str(data))
    data.mkdir()
    argv = [str(world / "model") if a == "M" else a for a in argv]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "toyset" in line and "data folder holds" not in line, line
    write_toy_beir(data / "beir" / "toyset", n_docs=6, n_queries=2)
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(data / "beir" / "toyset") in line and "data folder holds" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing written
