"""Draw the figures of the docs home page: ``python docs/figures/make_figures.py [OUT_DIR]`` (default: this folder).

``similarity_family.png`` — the idea in one figure: every member of the similarity family rescales the query and the
document by φ_γ(v) = v / ‖v‖^γ (γq for queries, γd for documents; paper 000 eq. 1) and then takes a dot product.
One query and two documents in 2-D: d1 short and well aligned, d2 long and less aligned. Each panel shows the
rescaled vectors and the scores, computed by ``st_magnitude.get_similarity``: the variants that keep the document's
magnitude (dot, qnorm) rank the long d2 first, those that normalise it (cosine, dnorm) rank the aligned d1 first.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from st_magnitude import get_similarity  # noqa: E402

VARIANTS = ("cosine", "dot", "qnorm", "dnorm")


def _polar(norm: float, degrees: float) -> torch.Tensor:
    return torch.tensor([norm * math.cos(math.radians(degrees)), norm * math.sin(math.radians(degrees))])


QUERY = _polar(1.6, 20.0)
DOCS = {"d1": _polar(0.7, 25.0), "d2": _polar(2.2, 55.0)}


def similarity_family_figure():
    """The figure (the caller saves and closes it)."""
    fig, axes = plt.subplots(1, len(VARIANTS), figsize=(12.0, 4.0), sharex=True, sharey=True, layout="constrained")
    circle = torch.linspace(0, 2 * math.pi, 200)
    for ax, name in zip(axes, VARIANTS):
        sim = get_similarity(name)
        gq, gd = sim.gammas()
        q = sim.transform_query(QUERY[None])[0]
        ax.plot(torch.cos(circle), torch.sin(circle), ":", color="grey", linewidth=0.8)
        ax.annotate("", xy=q.tolist(), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": "C0", "lw": 2})
        ax.text(*(q * 1.08).tolist(), "q", color="C0", fontsize=10)
        scores = []
        for i, (label, doc) in enumerate(DOCS.items()):
            d = sim.transform_document(doc[None])[0]
            score = float(sim(QUERY[None], doc[None])[0, 0])
            scores.append((score, label))
            color = f"C{i + 1}"
            ax.annotate("", xy=d.tolist(), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": color, "lw": 2})
            ax.text(*(d * 1.08).tolist(), label, color=color, fontsize=10)
        best = max(scores)[1]
        text = "\n".join(f"s(q, {label}) = {score:.2f}" for score, label in scores) + f"\nranks {best} first"
        ax.text(0.03, 0.97, text, transform=ax.transAxes, va="top", fontsize=8, family="monospace")
        ax.set_title(f"{name}: γq = {gq:g}, γd = {gd:g}", fontsize=10)
        ax.set_aspect("equal")
        ax.set_xlim(-0.3, 2.2)
        ax.set_ylim(-0.3, 2.2)
        ax.set_xlabel("dimension 1")
    axes[0].set_ylabel("dimension 2")
    formula = r"$s(q, d) = \varphi_{\gamma_q}(q) \cdot \varphi_{\gamma_d}(d)$, $\varphi_\gamma(v) = v / \|v\|^\gamma$"
    fig.suptitle(f"{formula}: one dot product, four rescalings", fontsize=11)
    return fig


def main(out_dir: str | None = None) -> list[Path]:
    out = Path(out_dir) if out_dir else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    fig = similarity_family_figure()
    path = out / "similarity_family.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    for written in main(sys.argv[1] if len(sys.argv) > 1 else None):
        print(written)
