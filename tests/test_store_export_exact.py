"""A cosine / L2 store export ranks exactly as the trained model does, or is refused.

The reference is independent of the package's scoring: the raw embeddings of the backbone (the same tiny model
without its Normalize), scored with the trained similarity written out here, ``q·d / (‖q‖^γq ‖d‖^γd)``, and ranked by
brute force in float64. The export's vectors are ranked under cosine / L2 by brute force too.

- A trained learnable γ (here 0.665 / 0.676) survives ``convert MODEL learnable --store cosine|l2`` and
  ``convert_for_store`` (before, both reset it to 0.5 / 0.5, and the export ranked like γ = 0.5).
- ``--default-route document`` with a cosine / L2 export of qnorm is refused (before, a role-less query got the
  documents' extra coordinate: the ranking was wrong, silently); with ``--store dot`` it stays exact.
- ``--max-norm`` outside (0, 1e18], a margin outside [1, 10], non-UTF-8 ``--norm-texts``: one line (before: every
  cosine score 0, every later encode raising, a traceback). A full disk: one line, no output folder.
- Saving an export prints no ``NormBoundWarning`` from the model card's example documents.
"""

from __future__ import annotations

import errno
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES

from st_magnitude import NormBoundWarning, apply_similarity, convert_for_store
from st_magnitude.cli import main
from st_magnitude.model.load import load_model
from st_magnitude.modules import MIPSAugment

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")

TRAINED = (0.665, 0.676)


@pytest.fixture(scope="module")
def folders(tiny_bert_dir, tmp_path_factory):
    """A learnable model whose γ moved to 0.665 / 0.676 (as training leaves it), a plain cosine model, documents."""
    root = tmp_path_factory.mktemp("store_export")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_similarity(build_tiny_st(tiny_bert_dir), "learnable", init_gamma=TRAINED).save(str(root / "learnable"))
        build_tiny_st(tiny_bert_dir).save(str(root / "plain"))
    (root / "docs.txt").write_text("\n".join(TOY_DOCS) + "\n")
    return root


@pytest.fixture(scope="module")
def raw(tiny_bert_dir):
    """The backbone's raw embeddings of the toy queries and documents (float64)."""
    backbone = build_tiny_st(tiny_bert_dir, normalize=False)
    return backbone.encode(TOY_QUERIES).astype(np.float64), backbone.encode(TOY_DOCS).astype(np.float64)


def trained_ranking(raw, gq: float, gd: float, k: int = 10) -> list[list[int]]:
    q, d = raw
    scores = (q @ d.T) / np.linalg.norm(q, axis=1)[:, None] ** gq / np.linalg.norm(d, axis=1)[None, :] ** gd
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def store_ranking(q: np.ndarray, d: np.ndarray, metric: str, k: int = 10) -> list[list[int]]:
    q, d = q.astype(np.float64), d.astype(np.float64)
    if metric == "cosine":
        scores = (q @ d.T) / np.linalg.norm(q, axis=1)[:, None] / np.linalg.norm(d, axis=1)[None, :]
    elif metric == "l2":
        scores = -((q[:, None, :] - d[None, :, :]) ** 2).sum(-1)
    else:
        scores = q @ d.T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def one_line(err: str) -> bool:
    """stderr holds one line besides transformers' own weight-loading progress bar."""
    return len([line for line in err.splitlines() if line.strip() and "it/s]" not in line]) == 1


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return float(np.mean([x == y for x, y in zip(a, b)]))


def test_the_reference_tells_the_trained_gamma_from_the_initial_one(raw):
    assert agreement(trained_ranking(raw, *TRAINED), trained_ranking(raw, 0.5, 0.5)) < 0.5


@pytest.mark.parametrize("store", ["cosine", "l2"])
def test_cli_export_keeps_the_trained_gamma_and_ranks_exactly(folders, raw, store, tmp_path, capsys):
    out = tmp_path / "export"
    argv = ["convert", str(folders / "learnable"), "learnable", "--store", store]
    assert main([*argv, "--norm-texts", str(folders / "docs.txt"), "-o", str(out)]) == 0
    assert "gamma_query=0.665 gamma_document=0.676" in capsys.readouterr().out
    model = load_model(str(out))
    sim = next(m for m in model if type(m).__name__ == "RoleNormalize").similarity()
    assert (sim.gamma_query, sim.gamma_document) == pytest.approx(TRAINED, abs=1e-6)
    q, d = model.encode_query(TOY_QUERIES), model.encode_document(TOY_DOCS)
    assert agreement(store_ranking(q, d, store), trained_ranking(raw, sim.gamma_query, sim.gamma_document)) == 1.0


@pytest.mark.parametrize("store", ["cosine", "l2"])
def test_python_export_as_the_deployment_page_shows_it_keeps_the_trained_gamma(folders, raw, store):
    model = convert_for_store(load_model(str(folders / "learnable")), "learnable", store, documents=TOY_DOCS)
    rn = next(m for m in model if type(m).__name__ == "RoleNormalize")
    assert (rn.gamma_query, rn.gamma_document) == pytest.approx(TRAINED, abs=1e-6)
    q, d = model.encode_query(TOY_QUERIES), model.encode_document(TOY_DOCS)
    assert agreement(store_ranking(q, d, store), trained_ranking(raw, *TRAINED)) == 1.0


@pytest.mark.parametrize("store", ["cosine", "l2"])
def test_default_route_with_a_cosine_or_l2_export_is_refused(folders, store, tmp_path, capsys):
    out = tmp_path / "export"
    for variant in ("qnorm", "dot", "learnable"):
        argv = ["convert", str(folders / "plain"), variant, "--store", store, "--default-route", "document"]
        assert main([*argv, "--max-norm", "10", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "--store dot" in err and "dnorm" in err and one_line(err), err
        assert not out.exists()
        with pytest.raises(ValueError, match="cannot keep the ranking"):
            convert_for_store(
                load_model(str(folders / "plain")), variant, store, max_norm=10.0, default_route="document"
            )


def test_a_role_less_encode_of_an_augmented_model_is_refused(folders):
    model = convert_for_store(load_model(str(folders / "learnable")), "learnable", "cosine", max_norm=10.0)
    with pytest.raises(ValueError, match="without a query/document role"):
        model.encode(["a query"])  # before: RoleNormalize took it for a document, extra coordinate included
    from st_magnitude.model.stores import set_default_route

    with pytest.raises(ValueError, match="cannot keep the ranking"):
        set_default_route(model, "document")


def test_what_the_refusal_names_works_exactly(folders, raw, tmp_path):
    """--store dot --default-route document (role-less queries and documents) and dnorm under cosine rank exactly."""
    assert (
        main(["convert", str(folders / "plain"), "qnorm", "--default-route", "document", "-o", str(tmp_path / "a")])
        == 0
    )
    model = load_model(str(tmp_path / "a"))
    q, d = model.encode(TOY_QUERIES), model.encode(TOY_DOCS)
    assert agreement(store_ranking(q, d, "dot"), trained_ranking(raw, 1.0, 0.0)) == 1.0
    argv = ["convert", str(folders / "plain"), "dnorm", "--store", "cosine", "--default-route", "document"]
    assert main([*argv, "-o", str(tmp_path / "b")]) == 0
    model = load_model(str(tmp_path / "b"))
    q, d = model.encode(TOY_QUERIES), model.encode(TOY_DOCS)
    for metric in ("cosine", "l2"):
        assert agreement(store_ranking(q, d, metric), trained_ranking(raw, 0.0, 1.0)) == 1.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-norm", "1e20"], "0 < M ≤ 1e+18"),
        (["--max-norm", "1e308"], "0 < M ≤ 1e+18"),
        (["--norm-texts", "DOCS", "--norm-margin", "20"], "the margin must lie in [1, 10]"),
        (["--norm-texts", "DOCS", "--norm-margin", "0.5"], "the margin must lie in [1, 10]"),
        (["--norm-texts", "DOCS", "--max-norm", "1000"], "more than 10 times the largest sample document norm"),
    ],
)
def test_a_bound_outside_the_float32_range_is_refused(folders, flags, message, tmp_path, capsys):
    flags = [str(folders / "docs.txt") if f == "DOCS" else f for f in flags]
    out = tmp_path / "export"
    assert main(["convert", str(folders / "plain"), "qnorm", "--store", "cosine", *flags, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and one_line(err), err
    assert not out.exists()


def test_the_largest_allowed_bound_keeps_cosine_scores_finite_and_exact(folders, raw):
    model = convert_for_store(load_model(str(folders / "plain")), "qnorm", "cosine", max_norm=1e18)
    q, d = model.encode_query(TOY_QUERIES), model.encode_document(TOY_DOCS)
    q32, d32 = q.astype(np.float32), d.astype(np.float32)
    cos = (q32 @ d32.T) / np.linalg.norm(q32, axis=1)[:, None] / np.linalg.norm(d32, axis=1)[None, :]
    assert np.isfinite(cos).all() and (cos != 0).all()
    ranking = [list(np.argsort(-row.astype(np.float64), kind="stable")[:10]) for row in cos]
    assert agreement(ranking, trained_ranking(raw, 1.0, 0.0)) == 1.0
    with pytest.raises(ValueError, match="0 < M ≤ 1e"):
        MIPSAugment(1e20, 4)  # a saved config with such a bound is refused at load, not at every encode


def test_norm_texts_that_are_not_utf8_name_the_line(folders, tmp_path, capsys):
    bad = tmp_path / "docs.txt"
    bad.write_bytes(b"a fine document\n\xff\xfe broken\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "text": "ok"}\n[1, 2]\n')
    for path, where in ((bad, ":2: byte 0xff is not UTF-8"), (corpus, ":2: line 2 must hold a JSON object")):
        argv = ["convert", str(folders / "plain"), "qnorm", "--store", "l2", "--norm-texts", str(path)]
        assert main([*argv, "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"{path}{where}" in err and one_line(err), err


@pytest.mark.parametrize("how", ["safetensors", "json"])
def test_a_full_disk_is_one_line_and_leaves_no_output(folders, how, tmp_path, monkeypatch, capsys):
    if how == "safetensors":
        import transformers.modeling_utils as mu
        from safetensors import SafetensorError

        def full(tensors, filename, *args, **kwargs):
            Path(filename).write_bytes(b"\x10\x00")  # what a full disk leaves: a truncated file
            raise SafetensorError(
                "Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                'message: "No space left on device" })'
            )

        monkeypatch.setattr(mu, "safe_save_file", full)
    else:
        real = json.dump

        def full(obj, fp, *args, **kwargs):
            if "config_sentence_transformers" in str(getattr(fp, "name", "")):  # a descriptor-opened file: an int
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(obj, fp, *args, **kwargs)

        monkeypatch.setattr(json, "dump", full)
    out = tmp_path / "holder" / "export"
    argv = ["convert", str(folders / "plain"), "qnorm", "--store", "cosine", "--max-norm", "10", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no space left on device" in err and str(out) in err and one_line(err), err
    assert not out.exists() and not out.parent.exists()  # no partial output, no staging folder, no folder made for it


def test_saving_an_export_warns_about_no_document_it_was_not_given(folders, raw, tmp_path):
    smallest = [TOY_DOCS[i] for i in np.argsort(np.linalg.norm(raw[1], axis=1))[:3]]
    model = convert_for_store(load_model(str(folders / "plain")), "qnorm", "l2", documents=smallest, margin=1.0)
    aug = next(m for m in model if isinstance(m, MIPSAugment))
    card_documents = model.model_card_data.usage_examples or [  # what sentence-transformers encodes at save time
        "Venus is often called Earth's twin because of its similar size and proximity.",
        "Mars, known for its reddish appearance, is often referred to as the Red Planet.",
        "Saturn, famous for its rings, is sometimes mistaken for the Red Planet.",
    ]
    with pytest.warns(NormBoundWarning):  # they lie above this sample's bound: the save would have warned
        model.encode_document(card_documents)
    aug.n_over_bound = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NormBoundWarning)
        model.save(str(tmp_path / "export"))
    assert aug.n_over_bound == 0
    with pytest.warns(NormBoundWarning):  # the module still warns about documents the caller encodes
        model.encode_document(TOY_DOCS)
