"""Plots for the scaling laws (matplotlib, Agg backend): measured points + fitted curve per group; budget curves."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["dimension_fits_figure", "plot_budget_curves", "plot_dimension_fits"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def dimension_fits_figure(
    groups: Mapping[str, tuple[Sequence[float], Sequence[float], Any]],
    ylabel: str = "contrastive entropy",
    title: str | None = None,
) -> Any:
    """The figure of :func:`plot_dimension_fits`, not saved (the caller closes it)."""
    if not groups:
        raise ValueError("nothing to plot: groups is empty")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    for i, (label, (D, L, fit)) in enumerate(groups.items()):
        color = f"C{i % 10}"
        D = np.asarray(D, dtype=float)
        order = np.argsort(D)
        ax.plot(D[order], np.asarray(L, dtype=float)[order], "o", color=color, label=label)
        if fit is not None:
            grid = np.geomspace(D.min(), D.max(), 200)
            ax.plot(
                grid,
                fit.predict(grid),
                "-",
                color=color,
                alpha=0.8,
                label=f"{fit.A:.3g}/D^{fit.alpha:.2f}+{fit.delta:.3g} (R²={fit.r2:.3f})",
            )
            n_boot = len(getattr(fit, "bootstrap_params", ()))
            if n_boot:
                low, high = fit.predict_band(grid)
                ax.fill_between(grid, low, high, color=color, alpha=0.2, label=f"95% band ({n_boot} bootstrap refits)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("embedding dimension D")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    _decorate(ax)
    return fig


def plot_dimension_fits(
    groups: Mapping[str, tuple[Sequence[float], Sequence[float], Any]],
    path: str | Path,
    ylabel: str = "contrastive entropy",
    title: str | None = None,
) -> Path:
    """One panel: for each group ``label -> (D, L, fit)`` the points and, if ``fit`` is given, its fitted curve
    (``fit.predict(D)``; label shows the law and R²) and, when the fit has bootstrap refits, their pointwise 95%
    band. Log-scaled D axis. Returns the written path."""
    return _save(dimension_fits_figure(groups, ylabel=ylabel, title=title), path)


def plot_budget_curves(
    law: Any,
    budgets: Sequence[float],
    path: str | Path,
    M: float = 1e7,
    T: float = 32,
    dims: Sequence[float] | None = None,
    scorings: Sequence[str] = ("exhaustive", "ann"),
) -> Path:
    """Paper Fig. 8 style: predicted loss against D for fixed budgets (solid exhaustive, dashed ANN)."""
    from st_magnitude.scaling.cost import budget_curve, optimal_allocation

    if not budgets:
        raise ValueError("budgets is empty")
    plt = _pyplot()
    dims = np.geomspace(8, 2**17, 400) if dims is None else np.asarray(dims, dtype=float)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    optima = []
    for i, budget in enumerate(budgets):
        for scoring in scorings:
            d, _, loss = budget_curve(law, budget, dims, T=T, M=M, scoring=scoring)
            style = "-" if scoring == "exhaustive" else "--"
            ax.plot(d, loss, style, color=f"C{i % 10}", label=f"B={budget:.0e} {scoring}")
            opt = optimal_allocation(law, budget, T=T, M=M, scoring=scoring, n_gamma=20000)
            optima.append(opt.loss)
            if dims.min() <= opt.D <= dims.max():
                ax.plot([opt.D], [opt.loss], "o", color=f"C{i % 10}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("embedding dimension D")
    ax.set_ylabel("predicted loss L̂(D, N)")
    ax.set_ylim(0, 3 * max(optima))  # the curves shoot up where scoring eats the budget
    ax.set_title(f"fixed FLOPs budget per query, M={M:.0e}, T={T:g}")
    return _finish(plt, fig, ax, path)


def _decorate(ax: Any) -> None:
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _save(fig: Any, path: str | Path) -> Path:
    """Save as PNG (parent folders created) and close the figure."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    logger.info("wrote %s", path)
    return path


def _finish(plt: Any, fig: Any, ax: Any, path: str | Path) -> Path:
    """Grid and legend (the figure uses constrained layout); save and close."""
    _decorate(ax)
    return _save(fig, path)
