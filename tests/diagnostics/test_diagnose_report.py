"""Cross-evaluation matrix, the diagnose report and the `st-magnitude diagnose` command."""

from __future__ import annotations

import pytest
from helpers.toy_beir import write_toy_beir

from st_magnitude import apply_similarity
from st_magnitude.cli import main
from st_magnitude.data.beir import load_beir
from st_magnitude.diagnostics import cross_evaluation, diagnose

pytestmark = pytest.mark.toy_beir(n_docs=24, n_queries=6, train_seed=1)


def test_cross_evaluation_rank_equivalence(tiny_model_raw, tiny_bert_dir, toy):
    # paper 000 Prop. 4.1: qnorm ranks like dot and dnorm like cosine, whatever the training similarity
    from conftest import build_tiny_st

    qn = apply_similarity(build_tiny_st(tiny_bert_dir, normalize=False, seed=1), "qnorm")
    m = cross_evaluation({"dot": tiny_model_raw, "qnorm": qn}, load_beir(toy))
    for row in m.values():
        assert row["qnorm"] == row["dot"] and row["dnorm"] == row["cosine"]
    with pytest.raises(ValueError, match="at least one model"):
        cross_evaluation({}, load_beir(toy))


def test_diagnose_writes_report_and_plots(tiny_model, toy, tmp_path):
    out = tmp_path / "report"
    diag = diagnose(tiny_model, [toy], n_pairs=70, n_bootstrap=5, output_dir=out, max_seq_length=None)
    assert diag.kappa is not None and diag.kappa.n_pairs == 6 * 2  # all 12 train pairs (fewer than asked)
    text = (out / "report.md").read_text()
    for needle in ("Cohen's d", "Component FIM", "Cross-evaluation", "norms_toy.png"):
        assert needle in text
    # 12 pairs < 8n: never a recommendation, never "confident"
    assert "**inconclusive: no recommendation** (N = 12 pairs is below the minimum" in text
    assert "recommendation: qnorm" not in text and "recommendation: dnorm" not in text
    # the component-FIM table is one model's profile, not paper 000 Table 2
    assert "not a reproduction of paper 000 Table 2" in text and "(paper 000 Table 2 formulas" not in text
    assert (out / "norms_toy.png").stat().st_size > 1000 and (out / "roc_toy.png").stat().st_size > 1000
    ds = diag.datasets[0]
    assert ds.cross_eval["this model"]["qnorm"] == ds.cross_eval["this model"]["dot"]
    assert ds.fim_table["cosine"]["doc_mag"] == -20.0


def test_diagnose_cli_prints_recommendation(tiny_model, toy, tmp_path, capsys):
    path = tmp_path / "m"
    tiny_model.save(str(path))
    rc = main(
        [
            "diagnose",
            str(path),
            "--data",
            str(toy),
            "--n-pairs",
            "12",
            "--bootstrap",
            "3",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "κ rule" in out and "recommend" in out and "report:" in out


def test_diagnose_cli_bad_folder(tiny_model, tmp_path, capsys):
    path = tmp_path / "m"
    tiny_model.save(str(path))
    rc = main(["diagnose", str(path), "--data", str(tmp_path / "missing")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_all_documents_relevant_leaves_cohens_d_undefined(tiny_model, tmp_path):
    # a NanoBEIR-style subsample can keep only judged documents: the labelled d is undefined, not a crash/NaN
    folder = write_toy_beir(tmp_path / "allrel", n_docs=12, n_queries=6)
    diag = diagnose(tiny_model, [folder], kappa=False, max_seq_length=None, output_dir=tmp_path / "o")
    ds = diag.datasets[0]
    assert ds.cohens_d is None and ds.cohens_d_band == "undefined" and ds.n_irrelevant == 0
    assert "undefined" in (tmp_path / "o" / "report.md").read_text()


def test_label_free_d_in_the_report_ranks_by_cosine(tiny_model_raw, toy, tmp_path):
    # the report's label-free d is the cosine-ranked one on the raw embeddings, and its line does
    # not carry the "> 0 favours qnorm" reading of the labelled d
    from st_magnitude.data.beir import doc_text
    from st_magnitude.diagnostics.norms import label_free_doc_norm_cohens_d
    from st_magnitude.evaluation.ir import encode_roles
    from st_magnitude.model.load import raw_model

    diag = diagnose(tiny_model_raw, [toy], kappa=False, label_free_k=2, max_seq_length=None, output_dir=tmp_path / "o")
    data = load_beir(toy)
    q, d = encode_roles(
        raw_model(tiny_model_raw), list(data.queries.values()), [doc_text(x) for x in data.corpus.values()]
    )
    expected = label_free_doc_norm_cohens_d(q, d, k=2)[0]
    assert diag.datasets[0].cohens_d_label_free == pytest.approx(expected, rel=1e-6)
    line = next(x for x in (tmp_path / "o" / "report.md").read_text().splitlines() if "label-free" in x)
    assert "by cosine" in line and "favours" not in line


def test_kappa_pair_budget_defaults_to_8n(tiny_model, toy, tmp_path, monkeypatch):
    # the CLI / diagnose default budget comes from the embedding dim (8n), not a fixed 2000
    import st_magnitude.diagnostics.kappa_rule as kappa_rule

    asked = []
    real = kappa_rule.kappa_pairs

    def spy(folders, split="train", n_pairs=0, seed=0):
        asked.append(n_pairs)
        return real(folders, split, n_pairs, seed)

    monkeypatch.setattr(kappa_rule, "kappa_pairs", spy)
    path = tmp_path / "m"
    tiny_model.save(str(path))
    rc = main(["diagnose", str(path), "--data", str(toy), "--resamples", "3", "--output", str(tmp_path / "out")])
    assert rc == 0 and asked == [8 * tiny_model.get_embedding_dimension()]


def test_compare_profiles_size_the_kappa_step_from_the_dim():
    # compare's quick/full κ steps use the 8n default (800 / 2000 were below it for n = 384)
    from st_magnitude.lab.compare.config import PROFILES, CompareConfig

    assert PROFILES["quick"]["kappa_pairs"] is None and PROFILES["full"]["kappa_pairs"] is None
    assert CompareConfig().kappa_pairs is None


def test_diagnose_norm_plot_overlays_documents_and_queries_on_one_axis(tmp_path, monkeypatch):
    import matplotlib.figure

    from st_magnitude.diagnostics.report import _plot_norms

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: saved.append(self))
    _plot_norms([1.0, 1.1], [2.0, 2.2, 2.1], str(tmp_path / "n.png"), "toy", queries=[0.5, 0.6])
    (fig,) = saved
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["irrelevant docs (n=3)", "relevant docs (n=2)", "queries (n=2)"]
    lo, hi = ax.get_xlim()
    assert lo <= 0.5 and hi >= 2.2  # queries and documents share the bins and the axis
    assert ax.get_ylabel() == "density" and fig.get_layout_engine() is not None
