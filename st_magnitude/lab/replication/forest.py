"""The forest plot at the top of ``docs/replication.md``: every judged comparison of every result — the estimate, its
95% interval, the verdict rule's threshold and the verdict (colour). Built by
``st-magnitude replicate --report PAGE``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["VERDICT_COLOURS", "judged_comparisons", "write_forest"]

VERDICT_COLOURS = {
    "reproduces": "#1a9850",
    "contradicts": "#d73027",
    "inconclusive": "#7f7f7f",
    "not reached at this budget": "#5e9fd6",  # a gate failed: the rule's parts are drawn but were not judged
}

_CLAIM_RULE = re.compile(r"([<>])\s*([+-]?[0-9.]+(?:e[+-]?[0-9]+)?)\s*$")


def _threshold(part: dict[str, Any]) -> tuple[str, float] | None:
    """``(expect, threshold)`` of a judged part: its own fields, or parsed from the rule text of an older result."""
    if "threshold" in part and "expect" in part:
        return part["expect"], float(part["threshold"])
    m = _CLAIM_RULE.search(part.get("claim", ""))
    if not m:
        return None
    return ("greater" if m.group(1) == ">" else "less"), float(m.group(2))


def _walk(decision: dict[str, Any]):
    for part in decision.get("parts", []):
        if "comparison" in part:
            yield part
        yield from _walk(part)


def judged_comparisons(label: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per judged interval of a finished result: ``{label, what, estimate, low, high, expect, threshold,
    verdict}``. When a gate failed ("not reached at this budget"), every row carries that verdict instead of the
    part's. A part two statements share (the paper's number is one λ of the mechanism) is drawn once."""
    from st_magnitude.lab.replication.gates import NOT_REACHED

    rows = []
    decision = record.get("decision", {})
    gated = NOT_REACHED if decision.get("gate_note") or decision.get("verdict") == NOT_REACHED else None
    seen = set()
    for part in _walk(decision):
        c, rule = part["comparison"], _threshold(part)
        key = (c["metric"], c["arm_a"], c["arm_b"], rule)
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            {
                "label": label,
                "what": f"{c['metric']}: {c['arm_a']} − {c['arm_b']}",
                "estimate": c["diff"],
                "low": c["ci"]["low"],
                "high": c["ci"]["high"],
                "expect": rule[0] if rule else None,
                "threshold": rule[1] if rule else None,
                "verdict": gated or part["verdict"],
            }
        )
    return rows


def write_forest(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Draw ``rows`` (from :func:`judged_comparisons`) top to bottom and save a PNG (no timestamp in its metadata,
    so an unchanged page gives an unchanged file)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(11, 0.42 * n + 1.4))
    for i, r in enumerate(rows):
        y = n - 1 - i
        colour = VERDICT_COLOURS.get(r["verdict"], "black")
        ax.plot([r["low"], r["high"]], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
        ax.plot([r["estimate"]], [y], "o", color=colour, ms=5)
        if r["threshold"] is not None:  # a bar at the threshold and an arrowhead on the claimed side
            ax.plot([r["threshold"]], [y], marker="|", color="black", ms=14, mew=1.8)
            side = ">" if r["expect"] == "greater" else "<"
            ax.annotate(
                side,
                (r["threshold"], y),
                xytext=(6 if side == ">" else -6, 0),
                textcoords="offset points",
                ha="center",
                va="center",
                fontsize=9,
                fontweight="bold",
            )
    ax.axvline(0.0, color="black", lw=0.6, ls=":")
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{r['label']}  {r['what']}" for r in reversed(rows)] or ["no judged comparison yet"])
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("difference a − b (each comparison in its own metric's units), 95% interval")
    shown = {r["verdict"] for r in rows} | {"reproduces", "contradicts", "inconclusive"}
    handles = [Line2D([], [], color=c, lw=2.2, marker="o", label=v) for v, c in VERDICT_COLOURS.items() if v in shown]
    handles.append(
        Line2D(
            [],
            [],
            color="black",
            lw=0,
            marker="|",
            ms=11,
            mew=1.8,
            label="rule's threshold (< or > marks the claimed side)",
        )
    )
    height = 0.42 * n + 1.4
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
