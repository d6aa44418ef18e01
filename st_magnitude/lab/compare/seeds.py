"""``st-magnitude compare --seeds N``: the comparison repeated over seeds, with 95% intervals and a noise verdict.

Each seed is an ordinary compare run in ``OUT/seed-S/`` (its own lock, fingerprint and resume), trained with seed
``S`` on seed-``S`` training pairs and evaluated on the *same* subsample (the first seed's), so that runs can be
compared query by query. The κ rule runs once, in the first seed's folder (it depends on the base model only).

``OUT/results_seeds.md`` / ``.csv`` then hold, per run and dataset, the mean over seeds with a Student-t interval
(:func:`st_magnitude.evaluation.stats.seed_interval`), and every run's nDCG@10 difference to the reference run
(``cosine-infonce`` when trained, else the first run) with the interval of
:func:`st_magnitude.evaluation.stats.compare_arms`: a t-interval whose standard error sums the seed, query and
seed × query variance components of the per-query differences. A difference is called significant only when that
interval excludes 0; otherwise the verdict line says it is within noise.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, read_json
from st_magnitude.evaluation.stats import compare_arms, seed_interval
from st_magnitude.lab.compare import compare
from st_magnitude.lab.compare.config import PER_QUERY_KEY, CompareConfig
from st_magnitude.lab.engine import dist as _dist

logger = logging.getLogger(__name__)

__all__ = ["SEED_METRICS", "aggregate_seeds", "run_compare_seeds"]

#: Metrics summarised over seeds (mean and 95% t-interval).
SEED_METRICS = ("ndcg@10", "recall@100", "mrr@10", "pooled_auc")
REFERENCE_RUN = "cosine-infonce"


def run_compare_seeds(config: CompareConfig, n_seeds: int, log=print) -> dict[str, Any]:
    """Run the comparison for seeds ``config.seed, config.seed + 1, …`` and write the multi-seed report.

    ``n_seeds == 1`` is exactly :func:`~st_magnitude.lab.compare.compare.run_compare` (one folder, no intervals).
    The per-seed runs call it through the module, so the one workflow is the one place to change or stub.
    """
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 1:
        raise ValueError(f"--seeds must be a positive integer, got {n_seeds!r}")
    if n_seeds == 1:
        return compare.run_compare(config, log=log)
    out = Path(config.output_dir)
    log = _dist.main_only(log)  # under torchrun: one copy of every message, rank 0 writes the summary
    seeds = [config.seed + i for i in range(n_seeds)]
    eval_seed = config.subsample_seed
    folders = []
    for i, seed in enumerate(seeds):
        folder = out / f"seed-{seed}"
        log(f"== seed {seed} ({i + 1}/{n_seeds}) -> {folder}")
        cfg = dataclasses.replace(
            config, seed=seed, eval_seed=eval_seed, output_dir=str(folder), kappa=config.kappa and i == 0
        )
        compare.run_compare(cfg, log=log)
        folders.append(folder)
    summary = _dist.rank0_decides(lambda: aggregate_seeds(folders, out))
    log(summary["text"])
    return summary


def _load_runs(folder: Path) -> dict[str, dict]:
    runs = {}
    for path in sorted((folder / "runs").glob("*/metrics.json")):
        record = Fields(read_json(path), path)
        record.get("metrics", dict)
        runs[path.parent.name] = record.obj
    if not runs:
        raise FileNotFoundError(f"{folder} holds no finished runs (runs/*/metrics.json)")
    return runs


def aggregate_seeds(folders: list[Path], out: Path) -> dict[str, Any]:
    """Summarise finished per-seed compare folders (same runs and datasets) into ``out/results_seeds.{md,csv}``."""
    per_seed = [_load_runs(Path(f)) for f in folders]
    run_ids = sorted(set.intersection(*(set(r) for r in per_seed)))
    if not run_ids:
        raise ValueError(f"the seed folders share no run: {[sorted(r) for r in per_seed]}")
    datasets = sorted(set.intersection(*(set(r[run_ids[0]]["metrics"]) for r in per_seed)))
    rows = []
    for run_id in run_ids:
        for ds in datasets:
            row: dict[str, Any] = {"run": run_id, "dataset": ds, "seeds": len(per_seed)}
            for metric in SEED_METRICS:
                ci = seed_interval([r[run_id]["metrics"][ds][metric] for r in per_seed])
                row[metric] = ci.estimate
                row[f"{metric}_low"], row[f"{metric}_high"] = ci.low, ci.high
            rows.append(row)
    reference = REFERENCE_RUN if REFERENCE_RUN in run_ids else run_ids[0]
    comparisons = []
    for run_id in (r for r in run_ids if r != reference):
        for ds in datasets:
            a, b, ids = [], [], None
            for runs in per_seed:
                qa = runs[run_id]["metrics"][ds].get(PER_QUERY_KEY)
                qb = runs[reference]["metrics"][ds].get(PER_QUERY_KEY)
                if qa is None or qb is None:
                    raise ValueError(
                        f"{run_id} or {reference} on {ds} has no per-query scores (made by an older version): "
                        "use a new --output folder"
                    )
                ids = ids or sorted(qa)
                if sorted(qa) != ids or sorted(qb) != ids:
                    raise ValueError(f"{run_id} and {reference} on {ds} were scored on different queries")
                a.append([qa[q] for q in ids])
                b.append([qb[q] for q in ids])
            comparisons.append((ds, compare_arms(a, b, metric=f"nDCG@10 ({ds})", arm_a=run_id, arm_b=reference)))
    text = _report(rows, comparisons, reference, folders)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["run", "dataset", "seeds"] + [f"{m}{s}" for m in SEED_METRICS for s in ("", "_low", "_high")]
    with open(out / "results_seeds.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols)
        writer.writeheader()
        writer.writerows({k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    (out / "results_seeds.md").write_text(text)
    _plot_seed_bars(rows, folders, out)
    return {
        "rows": rows,
        "comparisons": [c.to_dict() for _, c in comparisons],
        "reference": reference,
        "output_dir": str(out),
        "text": text,
    }


def _plot_seed_bars(rows: list[dict], folders: list[Path], out: Path) -> list[str]:
    """``out/plots/metrics_<dataset>_seeds.png``: seed means with their 95% intervals as error bars, and the untrained
    base model (the same in every seed folder: one evaluation subsample) as the dashed reference."""
    from st_magnitude.lab.compare.plots import plot_bars

    base = None
    for folder in folders:
        path = Path(folder) / "base.json"
        if path.is_file():
            base = Fields(read_json(path), path).get("metrics", (dict, type(None)), None)
            break
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    return plot_bars(rows, plots, metrics=SEED_METRICS, reference=base, suffix="_seeds")


def _report(rows: list[dict], comparisons: list, reference: str, folders: list[Path]) -> str:
    n = rows[0]["seeds"]
    lines = [
        f"# st-magnitude compare over {n} seeds",
        "",
        "Per-seed folders: " + ", ".join(Path(f).name for f in folders) + " (same evaluation subsample in each).",
        "Mean over seeds with a 95% Student-t interval over the seed means.",
        "",
        "| run | dataset | nDCG@10 | Recall@100 | MRR@10 | pooled AUC |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def cell(r: dict, m: str) -> str:
        return f"{r[m]:.4f} [{r[m + '_low']:.4f}, {r[m + '_high']:.4f}]"

    for r in rows:
        lines.append(f"| {r['run']} | {r['dataset']} | " + " | ".join(cell(r, m) for m in SEED_METRICS) + " |")
    lines += [
        "",
        f"## nDCG@10 against {reference}",
        "",
        "95% interval: t on the seed + query + seed × query variance of the per-query differences "
        "(`st_magnitude.evaluation.stats.crossed_interval`); a difference is significant only when it excludes 0.",
        "",
    ]
    lines += [f"- {c.describe()}" for _, c in comparisons]
    noisy = [c for _, c in comparisons if not c.significant]
    if not comparisons:
        verdict = "Only one run: nothing to compare."
    elif len(noisy) == len(comparisons):
        verdict = f"Verdict: every difference to {reference} is within noise at {n} seeds."
    else:
        sig = [f"{c.arm_a} on {ds} ({c.diff:+.4f})" for ds, c in comparisons if c.significant]
        verdict = f"Verdict: significant against {reference}: {', '.join(sig)}; the other {len(noisy)} within noise."
    lines += ["", verdict]
    return "\n".join(lines) + "\n"
