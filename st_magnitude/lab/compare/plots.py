"""Plots for ``st-magnitude compare``: per-dataset metric bars and embedding-norm histograms.

The ``*_figure`` functions build a figure (for tests and notebooks; the caller closes it); ``plot_*`` write PNGs.
Bars carry 95% error bars when the rows hold ``<metric>_low`` / ``<metric>_high`` (``compare --seeds N``) and a
dashed line for the untrained base model when a reference is given. Norm panels share one x-axis and one set of
bins, so a shrinking (collapsing) norm is visible as a shift, and show query norms beside the documents'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["metric_bars_figure", "norms_figure", "plot_bars", "plot_norms"]

METRICS = ("ndcg@10", "recall@100", "mrr@10", "pooled_auc")
#: what the norm panels show, in drawing order: (key in the norms record, legend label)
NORM_GROUPS = (("other", "other docs"), ("relevant", "relevant docs"), ("query", "queries"))


def _save(fig, path: Path, dpi: int) -> str:
    """Write and close ``fig`` (its layout is constrained: titles and legends are never cut off)."""
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return str(path)


def metric_bars_figure(
    rows: Sequence[Mapping[str, Any]],
    dataset: str,
    metrics: Sequence[str] = METRICS,
    reference: Mapping[str, float] | None = None,
):
    """Grouped bars for one dataset: one group per metric, one bar per run; 95% error bars when the rows carry
    ``<metric>_low`` / ``<metric>_high``; ``reference`` (metric -> value of the untrained base) as a dashed line."""
    sub = [r for r in rows if r["dataset"] == dataset]
    if not sub:
        raise ValueError(f"no rows for dataset {dataset!r}")
    with_ci = all(f"{m}_low" in r and f"{m}_high" in r for r in sub for m in metrics)
    fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(metrics), 4.4), layout="constrained")
    width = 0.8 / len(sub)
    for i, r in enumerate(sub):
        xs = [m + i * width for m in range(len(metrics))]
        heights = [r[m] for m in metrics]
        yerr = None
        if with_ci:
            yerr = np.array([[r[m] - r[f"{m}_low"] for m in metrics], [r[f"{m}_high"] - r[m] for m in metrics]])
        bars = ax.bar(xs, heights, width, yerr=yerr, capsize=2, label=r["run"], error_kw={"elinewidth": 0.8})
        ax.bar_label(bars, fmt="%.3f", fontsize=6, rotation=90, padding=2 if yerr is None else 8)
    shown = [j for j, m in enumerate(metrics) if reference and m in reference]
    if shown:  # one dashed segment over each metric's group of bars
        ys = [reference[metrics[j]] for j in shown]
        starts = [j - width / 2 for j in shown]
        ends = [j + width * (len(sub) - 0.5) for j in shown]
        ax.hlines(ys, starts, ends, colors="black", linestyles="--", linewidth=1, label="untrained base")
    ax.set_xticks([m + width * (len(sub) - 1) / 2 for m in range(len(metrics))], list(metrics))
    ax.set_xlabel("metric")
    ax.set_ylabel("score (higher is better)")
    ax.set_ylim(0, 1.15)
    n_seeds = sub[0].get("seeds")
    seeds = f"; mean of {n_seeds} seeds, 95% CI" if with_ci and n_seeds else ("; 95% CI" if with_ci else "")
    ax.set_title(f"{dataset}: each run scored with its own similarity{seeds}", fontsize=10)
    fig.legend(loc="outside lower center", ncol=min(4, len(sub) + 1), fontsize=7)
    return fig


def plot_bars(
    rows: list[dict],
    out_dir: Path,
    metrics: Sequence[str] = METRICS,
    reference: Mapping[str, Mapping[str, float]] | None = None,
    suffix: str = "",
) -> list[str]:
    """One PNG per dataset, ``metrics_<dataset><suffix>.png`` (:func:`metric_bars_figure`); ``reference`` maps a
    dataset to the untrained base model's metrics."""
    paths = []
    for ds in sorted({r["dataset"] for r in rows}):
        fig = metric_bars_figure(rows, ds, metrics, (reference or {}).get(ds))
        paths.append(_save(fig, Path(out_dir) / f"metrics_{ds}{suffix}.png", dpi=120))
    return paths


def norms_figure(
    norms: Mapping[str, Mapping[str, Mapping[str, list[float]]]],
    dataset: str,
    reference: Mapping[str, list[float]] | None = None,
):
    """One panel per run (and a first panel for the untrained base when ``reference`` is given): histograms of the
    raw norms (before the role rescaling) of the other documents, the relevant documents and the queries, on one
    shared x-axis with the same bins in every panel."""
    panels = [(run, norms[run][dataset]) for run in norms if dataset in norms[run]]
    if reference:
        panels.insert(0, ("untrained base", reference))
    if not panels:
        raise ValueError(f"no norms for dataset {dataset!r}")
    values = np.concatenate([np.asarray(n.get(k, []), dtype=float) for _, n in panels for k, _ in NORM_GROUPS])
    bins = np.histogram_bin_edges(values, bins=40)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(2.9 * len(panels), 3.2), sharex=True, squeeze=False, layout="constrained"
    )
    for ax, (run, n) in zip(axes[0], panels):
        for i, (key, label) in enumerate(NORM_GROUPS):
            if n.get(key):  # a NanoBEIR-style subsample can hold only judged documents
                ax.hist(n[key], bins=bins, alpha=0.55, density=True, color=f"C{i}", label=f"{label} ({len(n[key])})")
        if reference and run != "untrained base":
            base_docs = list(reference.get("other", [])) + list(reference.get("relevant", []))
            ax.hist(base_docs, bins=bins, density=True, histtype="step", color="black", linestyle="--",
                    label="base docs")  # fmt: skip
        ax.set_title(run, fontsize=9)
        ax.set_xlabel("raw norm ‖v‖")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("density")
    fig.suptitle(f"{dataset}: raw embedding norms before the role rescaling (shared x-axis)", fontsize=10)
    return fig


def plot_norms(
    norms: dict[str, dict[str, dict[str, list[float]]]],
    out_dir: Path,
    reference: Mapping[str, Mapping[str, list[float]]] | None = None,
) -> list[str]:
    """One PNG per dataset, ``norms_<dataset>.png`` (:func:`norms_figure`); ``reference`` maps a dataset to the
    untrained base model's norms."""
    paths = []
    datasets = sorted({ds for per_run in norms.values() for ds in per_run})
    for ds in datasets:
        fig = norms_figure(norms, ds, (reference or {}).get(ds))
        paths.append(_save(fig, Path(out_dir) / f"norms_{ds}.png", dpi=110))
    return paths
