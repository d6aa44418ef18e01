"""The comparison's report: results.csv, results.md (table, κ verdict) and the plots."""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path

from st_magnitude.lab.compare.config import CompareConfig
from st_magnitude.lab.compare.eval_sets import EvalSet

logger = logging.getLogger(__name__)

__all__ = ["write_reports", "kappa_verdict"]


def kappa_verdict(rows: list[dict], kappa: dict | None) -> str:
    if not kappa:
        return ""
    score = {}
    for v in ("qnorm", "dnorm"):
        vals = [r["ndcg@10"] for r in rows if r["variant"] == v and r["loss"] == "infonce"]
        if vals:
            score[v] = sum(vals) / len(vals)
    if kappa["recommendation"] not in ("qnorm", "dnorm"):  # inconclusive: there is no pick to check
        means = ", ".join(f"{v} {s:.4f}" for v, s in score.items())
        return f"κ rule inconclusive ({kappa['summary']}); no pick to check" + (
            f" (mean nDCG@10 over eval datasets: {means})." if means else "."
        )
    if len(score) < 2:
        return f"κ picked {kappa['recommendation']} (qnorm and dnorm were not both trained, so no verdict)."
    winner = max(score, key=score.get)
    ok = "won" if winner == kappa["recommendation"] else "lost"
    conf = "confident" if kappa["confident"] else "not confident (CI contains 0)"
    return (
        f"κ picked {kappa['recommendation']} ({conf}); mean nDCG@10 over eval datasets: qnorm "
        f"{score['qnorm']:.4f}, dnorm {score['dnorm']:.4f} → the pick {ok}."
    )


def write_reports(
    out: Path,
    rows: list[dict],
    norms: dict,
    kappa: dict | None,
    config: CompareConfig,
    eval_sets: Sequence[EvalSet],
    base_desc: str,
    device: str,
    base: dict | None = None,
) -> str:
    """results.csv, results.md and plots/; ``base`` (the untrained base model's ``metrics`` and ``norms``) is the
    plots' dashed reference and a line of results.md."""
    from st_magnitude.lab.compare.plots import plot_bars, plot_norms

    cols = [
        "run",
        "dataset",
        "ndcg@10",
        "recall@100",
        "mrr@10",
        "pooled_auc",
        "per_query_auc",
        "ndcg@10_cosine_raw",
        "ndcg@10_dot_raw",
        "train_loss",
        "train_seconds",
    ]
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# st-magnitude compare ({config.profile} profile)",
        "",
        f"Base model: {base_desc}; device: {device}; train data: {config.train_data} "
        f"({config.steps} steps × batch {config.batch_size}, lr {config.learning_rate}, "
        f"max_seq_length {config.max_seq_length}, seed {config.seed}).",
        "",
    ]
    for es in eval_sets:
        lines.append(
            f"- {es.name}: {len(es.query_ids)} queries, {len(es.doc_ids)} documents"
            + (f" — {es.data.note}" if es.data.note else " (full test split)")
        )
    lines += [
        "",
        "| run | dataset | nDCG@10 | Recall@100 | MRR@10 | pooled AUC | per-query AUC |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['dataset']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | "
            f"{r['mrr@10']:.4f} | {r['pooled_auc']:.4f} | {r['per_query_auc']:.4f} |"
        )
    lines += [
        "",
        f"One seed ({config.seed}): no confidence intervals, so no difference above is shown to exceed noise; "
        "`--seeds 5` repeats every run and reports 95% intervals (results_seeds.md).",
    ]
    if base:
        cells = [f"{ds} nDCG@10 {m['ndcg@10']:.4f}" for ds, m in base["metrics"].items()]
        lines += ["", f"Untrained base model ({base_desc}, the plots' dashed reference): {', '.join(cells)}."]
    verdict = kappa_verdict(rows, kappa)
    if kappa:
        lines += ["", f"κ rule (base model): {kappa['summary']}", "", verdict]
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    made = [
        plot_bars(rows, plots, reference=base["metrics"] if base else None),
        plot_norms(norms, plots, reference=base["norms"] if base else None),
    ]
    lines += ["", "Plots: " + ", ".join(str(Path(p).relative_to(out)) for group in made for p in group)]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text
