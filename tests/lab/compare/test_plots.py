"""The compare plots as figure objects (not pixels): labelled axes, error bars from the seeds, the untrained base
as a reference line, and norm panels that share one x-axis and one set of bins, queries included."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.patches import Rectangle

from st_magnitude.lab.compare.plots import METRICS, metric_bars_figure, norms_figure, plot_bars, plot_norms

ROWS = [
    {"run": "cosine-infonce", "dataset": "nfcorpus", "ndcg@10": 0.40, "recall@100": 0.56, "mrr@10": 0.51,
     "pooled_auc": 0.51},
    {"run": "qnorm-infonce", "dataset": "nfcorpus", "ndcg@10": 0.29, "recall@100": 0.43, "mrr@10": 0.48,
     "pooled_auc": 0.55},
]  # fmt: skip
BASE = {"ndcg@10": 0.33, "recall@100": 0.50, "mrr@10": 0.49, "pooled_auc": 0.52}


def _with_ci(rows):
    intervals = [
        {**{f"{m}_low": r[m] - 0.02 for m in METRICS}, **{f"{m}_high": r[m] + 0.03 for m in METRICS}} for r in rows
    ]
    return [{**r, "seeds": 3, **ci} for r, ci in zip(rows, intervals)]


def test_bars_are_labelled_and_carry_the_base_reference():
    fig = metric_bars_figure(ROWS, "nfcorpus", reference=BASE)
    try:
        (ax,) = fig.axes
        assert ax.get_xlabel() == "metric" and ax.get_ylabel() == "score (higher is better)"
        assert [t.get_text() for t in ax.get_xticklabels()] == list(METRICS)
        assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]  # one seed: no error bars
        (ref,) = [c for c in ax.collections if c.get_label() == "untrained base"]
        heights = sorted({round(seg[0][1], 6) for seg in ref.get_segments()})
        assert heights == sorted(BASE.values())
        assert fig.get_layout_engine() is not None  # constrained: the title is not cut off
        assert "untrained base" in [t.get_text() for t in fig.legends[0].get_texts()]
    finally:
        plt.close(fig)


def test_bars_with_seed_intervals_draw_error_bars_of_the_interval():
    rows = _with_ci(ROWS)
    fig = metric_bars_figure(rows, "nfcorpus")
    try:
        (ax,) = fig.axes
        errorbars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(errorbars) == len(rows)
        _, _, (lines,) = errorbars[0].lines
        for segment, metric in zip(lines.get_segments(), METRICS):
            (x0, y_low), (x1, y_high) = segment
            assert y_low == pytest.approx(rows[0][f"{metric}_low"]) and y_high == pytest.approx(
                rows[0][f"{metric}_high"]
            )
        assert "mean of 3 seeds, 95% CI" in ax.get_title()
    finally:
        plt.close(fig)


def _norms(scale: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"relevant": list(scale * (1 + 0.1 * rng.random(20))), "other": list(scale * (1 + 0.1 * rng.random(50))),
            "query": list(scale * 0.8 * (1 + 0.1 * rng.random(10)))}  # fmt: skip


def test_norm_panels_share_the_x_axis_and_bins_and_show_queries():
    norms = {"cosine-infonce": {"nfcorpus": _norms(2.8, 0)}, "dot-infonce": {"nfcorpus": _norms(0.7, 1)}}
    base = _norms(2.8, 2)
    fig = norms_figure(norms, "nfcorpus", reference=base)
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["untrained base", "cosine-infonce", "dot-infonce"]
        assert len({ax.get_xlim() for ax in axes}) == 1  # one x-range: the collapse is a visible shift
        widths = {round(p.get_width(), 9) for ax in axes for p in ax.patches if isinstance(p, Rectangle)}
        assert len(widths) == 1  # the same bins in every panel
        for ax in axes:
            assert ax.get_xlabel() == "raw norm ‖v‖"
            labels = [t.get_text() for t in ax.get_legend().get_texts()]
            assert any(label.startswith("queries (10)") for label in labels)
        assert axes[0].get_ylabel() == "density"
        assert "base docs" in [t.get_text() for t in axes[2].get_legend().get_texts()]
        lo, hi = axes[0].get_xlim()
        assert lo <= 0.7 and hi >= 2.8 * 1.1  # both the collapsed and the base norms are inside
    finally:
        plt.close(fig)


def test_plot_writers_name_their_files(tmp_path):
    bars = plot_bars(_with_ci(ROWS), tmp_path, reference={"nfcorpus": BASE}, suffix="_seeds")
    norms = plot_norms(
        {"cosine-infonce": {"nfcorpus": _norms(2.8, 0)}}, tmp_path, reference={"nfcorpus": _norms(3, 1)}
    )
    assert [p.rsplit("/", 1)[-1] for p in bars + norms] == ["metrics_nfcorpus_seeds.png", "norms_nfcorpus.png"]
    assert all((tmp_path / p.rsplit("/", 1)[-1]).stat().st_size > 1000 for p in bars + norms)
    assert not plt.get_fignums()  # the writers close their figures


def test_bars_refuse_an_unknown_dataset():
    with pytest.raises(ValueError, match="no rows for dataset 'scifact'"):
        metric_bars_figure(ROWS, "scifact")
