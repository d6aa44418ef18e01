"""Plots for ``st-magnitude compare``: per-dataset metric bars and document-norm histograms."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: Path, dpi: int) -> str:
    """Lay out, write and close ``fig``; returns the path as a string."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return str(path)


def plot_bars(rows: list[dict], out_dir: Path, metrics=("ndcg@10", "recall@100", "mrr@10", "pooled_auc")) -> list[str]:
    """One PNG per dataset: grouped bars, one group per metric, one bar per run."""
    paths = []
    for ds in sorted({r["dataset"] for r in rows}):
        sub = [r for r in rows if r["dataset"] == ds]
        runs = [r["run"] for r in sub]
        fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(metrics), 4))
        width = 0.8 / max(1, len(runs))
        for i, r in enumerate(sub):
            xs = [m + i * width for m in range(len(metrics))]
            bars = ax.bar(xs, [r[m] for m in metrics], width, label=r["run"])
            ax.bar_label(bars, fmt="%.3f", fontsize=6, rotation=90, padding=2)
        ax.set_xticks([m + width * (len(runs) - 1) / 2 for m in range(len(metrics))], metrics)
        ax.set_ylim(0, 1.12)
        ax.set_title(f"{ds}: each run scored with its own similarity")
        ax.legend(fontsize=7, ncol=min(5, len(runs)), loc="upper center", bbox_to_anchor=(0.5, -0.1))
        paths.append(_save(fig, out_dir / f"metrics_{ds}.png", dpi=120))
    return paths


def plot_norms(norms: dict[str, dict[str, dict[str, list[float]]]], out_dir: Path) -> list[str]:
    """One PNG per dataset: raw document-norm histograms, relevant vs other, one panel per run."""
    paths = []
    datasets = sorted({ds for per_run in norms.values() for ds in per_run})
    for ds in datasets:
        runs = [r for r in norms if ds in norms[r]]
        fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3), squeeze=False)
        for ax, run in zip(axes[0], runs):
            n = norms[run][ds]
            bins = np.histogram_bin_edges(n["other"] + n["relevant"], bins=30)  # shared edges: comparable bars
            for key in ("other", "relevant"):
                if n[key]:  # a NanoBEIR-style subsample can hold only judged documents
                    ax.hist(n[key], bins=bins, alpha=0.6, density=True, label=f"{key} ({len(n[key])})")
            ax.set_title(run, fontsize=9)
            ax.set_xlabel("raw ‖d‖")
            ax.legend(fontsize=7)
        fig.suptitle(f"{ds}: raw document norms (before the role rescaling)", fontsize=10)
        paths.append(_save(fig, out_dir / f"norms_{ds}.png", dpi=110))
    return paths
