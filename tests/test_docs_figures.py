"""docs/figures/make_figures.py draws the home page's figure from the package's own similarities."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from helpers.scripts import load_script

from tests.doc_blocks import REPO


def _module():
    return load_script("docs/figures/make_figures.py")


def test_similarity_family_figure_shows_the_scores_of_each_variant(tmp_path):
    figures = _module()
    fig = figures.similarity_family_figure()
    try:
        titles = [ax.get_title() for ax in fig.axes]
        assert titles == [
            "cosine: γq = 1, γd = 1",
            "dot: γq = 0, γd = 0",
            "qnorm: γq = 1, γd = 0",
            "dnorm: γq = 0, γd = 1",
        ]
        q, d1, d2 = figures.QUERY, figures.DOCS["d1"], figures.DOCS["d2"]
        cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
        expected = {  # φ_γq(q) · φ_γd(d) written out per corner
            "cosine": (cos(q, d1), cos(q, d2)),
            "dot": (float(q @ d1), float(q @ d2)),
            "qnorm": (cos(q, d1) * float(d1.norm()), cos(q, d2) * float(d2.norm())),
            "dnorm": (cos(q, d1) * float(q.norm()), cos(q, d2) * float(q.norm())),
        }
        for ax, (name, (s1, s2)) in zip(fig.axes, expected.items()):
            text = next(t.get_text() for t in ax.texts if t.get_text().startswith("s(q, d1)"))
            assert f"s(q, d1) = {s1:.2f}" in text and f"s(q, d2) = {s2:.2f}" in text
            assert f"ranks {'d1' if s1 > s2 else 'd2'} first" in text
        assert {name for name, (s1, s2) in expected.items() if s2 > s1} == {"dot", "qnorm"}
    finally:
        plt.close(fig)
    (written,) = figures.main(str(tmp_path))
    assert written.name == "similarity_family.png" and written.stat().st_size > 10_000


@pytest.mark.parametrize("name", ["similarity_family.png"])
def test_the_committed_figure_is_small(name):
    assert (REPO / "docs" / "figures" / name).stat().st_size < 200_000
