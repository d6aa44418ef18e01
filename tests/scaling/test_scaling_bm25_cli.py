"""BM25 teacher against a brute-force formula; the `st-magnitude scaling` CLI end to end on a small CSV."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from st_magnitude.data.bm25 import BM25Scorer, tokenize
from st_magnitude.scaling.fit import dimension_law

CORPUS = {
    "d1": "Vitamin D and heart risk in a trial",
    "d2": "coffee, tea and sleep: a study of sleep",
    "d3": "fish fat acid and brain memory",
    "d4": "high blood sugar level in patients with diet",
}


def _bm25_reference(query, doc, corpus, k1=0.9, b=0.4):
    docs = {d: tokenize(t) for d, t in corpus.items()}
    avgdl = sum(len(t) for t in docs.values()) / len(docs)
    tf = Counter(tokenize(doc))
    total = 0.0
    for term in tokenize(query):
        df = sum(term in t for t in docs.values())
        if df == 0 or tf[term] == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        total += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(tokenize(doc)) / avgdl))
    return total


@pytest.mark.parametrize("query", ["sleep and coffee", "heart trial trial", "nothing matches"])
def test_bm25_matches_reference(query):
    bm25 = BM25Scorer(CORPUS)
    texts = list(CORPUS.values())
    scores = bm25([query] * len(texts), texts)
    expected = [_bm25_reference(query, t, CORPUS) for t in texts]
    np.testing.assert_allclose(scores, expected, rtol=1e-12)
    np.testing.assert_allclose(bm25.scores(query), expected, rtol=1e-12)
    unseen = "sleep sleep sleep coffee"
    assert bm25.score_text(query, unseen) == pytest.approx(_bm25_reference(query, unseen, CORPUS))


def test_bm25_top_k_and_errors():
    bm25 = BM25Scorer(CORPUS)
    assert [d for d, _ in bm25.top_k("sleep coffee", 2)][0] == "d2"
    assert "d2" not in [d for d, _ in bm25.top_k("sleep coffee", 3, exclude={"d2"})]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BM25Scorer(CORPUS, b=2)
    with pytest.raises(ValueError, match="empty"):
        BM25Scorer({})


def _write_csv(path, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_cli_fit_and_choose(tmp_path, capsys):
    from st_magnitude.cli import main

    dims = [24, 48, 96, 192, 384, 768, 1536]
    rows = []
    for recipe, (A, alpha, delta) in {"bert": (16.0, 0.5, 1.2), "ettin": (5.0, 0.7, 4.6)}.items():
        for d in dims:
            rows.append({"recipe": recipe, "dataset": "toy", "dim": d, "n_params_m": 22.7,
                         "contrastive_entropy": float(dimension_law(d, A, alpha, delta))})  # fmt: skip
    _write_csv(tmp_path / "sweep.csv", rows)
    plot, out = tmp_path / "law" / "fits.png", tmp_path / "law" / "fits.json"
    code = main(["scaling", "fit", str(tmp_path / "sweep.csv"), "-o", str(tmp_path / "law"), "--plot"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "bert/toy: L(D) = 16 / D^0.5 + 1.2" in printed and "R²=1.0000" in printed
    fits = json.loads(out.read_text())
    assert fits["ettin/toy"]["alpha"] == pytest.approx(0.7, rel=1e-3)
    assert plot.is_file() and plot.stat().st_size > 1000
    budget_png = tmp_path / "choice" / "budget.png"
    args = [
        "scaling",
        "choose",
        "--law",
        "BERT/TREC",
        "--budget",
        "1e10",
        "--docs",
        "1e6",
        "-o",
        str(budget_png.parent),
        "--plot",
    ]
    assert main(args) == 0
    assert "0.7411" in capsys.readouterr().out  # worked optimum γ̂ (closed form of paper 003 §4.5)
    assert budget_png.is_file() and budget_png.stat().st_size > 1000
    (choice,) = json.loads((budget_png.parent / "choices.json").read_text())
    assert choice["budget"] == 1e10 and round(choice["gamma"], 4) == 0.7411  # the printed row


def test_cli_errors(tmp_path, capsys):
    from st_magnitude.cli import main

    _write_csv(tmp_path / "s.csv", [{"dim": 32, "loss": 1.0}])
    assert main(["scaling", "fit", str(tmp_path / "s.csv")]) == 2
    assert "available columns: dim, loss" in capsys.readouterr().err
    assert main(["scaling", "fit", str(tmp_path / "missing.csv")]) == 2
    assert main(["scaling", "choose", "--law", "GPT/X", "--budget", "1e9"]) == 2
    assert "BERT/MS, BERT/TREC" in capsys.readouterr().err


def test_cli_holdout(tmp_path, capsys):
    from st_magnitude.cli import main

    rows = [{"recipe": "r", "dataset": "t", "dim": d, "contrastive_entropy": float(dimension_law(d, 5.0, 0.7, 1.0))}
            for d in (24, 48, 96, 192, 384, 768)]  # fmt: skip
    _write_csv(tmp_path / "s.csv", rows)
    assert main(["scaling", "fit", str(tmp_path / "s.csv"), "--holdout", "1", "-o", str(tmp_path / "f")]) == 0
    assert "held-out" in capsys.readouterr().out
    held = json.loads((tmp_path / "f" / "fits.json").read_text())["r/t"]["holdout"]
    assert held["dims"] == [768.0] and abs(held["relative_error"][0]) < 1e-4


def test_cli_fit_plain_dim_entropy_csv_with_bootstrap_band(tmp_path, capsys, monkeypatch):
    """The CSV docs/dimension_scaling.md shows (only ``dim,contrastive_entropy``) is one group, with a note;
    ``--bootstrap`` draws a band."""
    from st_magnitude.cli import main
    from st_magnitude.scaling import plots

    rng = np.random.default_rng(0)
    dims = [8, 16, 32, 64, 128, 256]
    rows = [{"dim": d, "contrastive_entropy": float(dimension_law(d, 4.0, 0.6, 1.5)) * (1 + 0.01 * rng.normal())}
            for d in dims]  # fmt: skip
    _write_csv(tmp_path / "sweep.csv", rows)
    figures = []
    real = plots.dimension_fits_figure
    monkeypatch.setattr(plots, "dimension_fits_figure", lambda *a, **k: figures.append(real(*a, **k)) or figures[-1])
    plot = tmp_path / "law" / "fits.png"
    code = main(["scaling", "fit", str(tmp_path / "sweep.csv"), "--bootstrap", "30", "-o", str(plot.parent), "--plot"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "note: no recipe / dataset column" in printed and "all rows are one group" in printed
    assert "all: L(D) =" in printed and "95% CI" in printed
    assert plot.is_file()
    (ax,) = figures[0].axes
    assert ax.get_xlabel() == "embedding dimension D" and ax.get_ylabel() == "contrastive_entropy"
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # the bootstrap band (fill_between)
    # the band holds the fitted curve: it is the 2.5/97.5 percentiles of the refits' curves
    curve = ax.lines[1].get_ydata()
    verts = bands[0].get_paths()[0].vertices
    assert verts[:, 1].min() <= curve.min() + 1e-9 and verts[:, 1].max() >= curve.max() - 1e-9


def test_fit_band_is_the_percentiles_of_the_refit_curves():
    from st_magnitude.scaling.fit import fit_dimension_law

    dims = np.array([8, 16, 32, 64, 128, 256], dtype=float)
    y = dimension_law(dims, 4.0, 0.6, 1.5) * (1 + 0.01 * np.random.default_rng(1).normal(size=dims.size))
    fit = fit_dimension_law(dims, y, bootstrap=25, seed=3)
    assert fit.bootstrap_params.shape == (25, 3)
    low, high = fit.predict_band(dims)
    loop = np.array([[A / d**alpha + delta for d in dims] for A, alpha, delta in fit.bootstrap_params])
    np.testing.assert_allclose(low, np.percentile(loop, 2.5, axis=0))
    np.testing.assert_allclose(high, np.percentile(loop, 97.5, axis=0))
    with pytest.raises(ValueError, match="bootstrap > 0"):
        fit_dimension_law(dims, y).predict_band(dims)
