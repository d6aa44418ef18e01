"""``st-magnitude scaling ...``: fit scaling laws to a sweep CSV, and pick (N, D) under a FLOPs budget.

st-magnitude scaling fit runs/sweep.csv --metric contrastive_entropy --group-by recipe,dataset -o runs/law --plot
st-magnitude scaling choose --law BERT/TREC --budget 1e9 --docs 1e7 --scoring exhaustive
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, read_json, read_lines
from st_magnitude.cli._args import check_output_file, non_negative_int, positive_float

logger = logging.getLogger(__name__)

#: the columns ``scaling fit`` groups by when ``--group-by`` is not given (examples/dim_sweep.py writes both)
DEFAULT_GROUP_BY = ("recipe", "dataset")


#: What this command writes, for the CLI's one cleanup rule on failure (:mod:`st_magnitude.cli`).
OUTPUTS = {"output": "folder"}
#: The files ``-o/--output DIR`` receives: the fits (``scaling fit``; ``choose --law`` reads it), the choices
#: (``scaling choose``) and, with ``--plot``, their figures.
FITS_FILE, FITS_PLOT = "fits.json", "fits.png"
CHOICES_FILE, BUDGET_PLOT = "choices.json", "budget.png"
#: What this command reads besides ``model`` (option dest -> its name): no output may be or lie inside one.
INPUTS = {"csv": "CSV"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from st_magnitude.cli._args import add_option

    sub = parser.add_subparsers(dest="scaling_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    fit = sub.add_parser("fit", help="fit L(D) = A/D^alpha + delta (or the joint law) to a sweep CSV")
    fit.add_argument("csv", help="CSV with one row per measurement (e.g. examples/dim_sweep.py output)")
    fit.add_argument("--metric", default="contrastive_entropy", help="loss column (default: contrastive_entropy)")
    fit.add_argument("--dim-column", default="dim", help="embedding-dimension column (default: dim)")
    fit.add_argument(
        "--group-by",
        default=None,
        help="comma-separated columns; one fit per group (default: recipe,dataset, those the CSV has; a plain "
        "dim,contrastive_entropy CSV is one group)",
    )
    fit.add_argument("--joint", action="store_true", help="fit the joint law L(D, N) per group (needs --n-column)")
    fit.add_argument("--n-column", default="n_params_m", help="model size in millions (default: n_params_m)")
    fit.add_argument("--negate", action="store_true", help="fit 1 - metric (for higher-is-better metrics)")
    fit.add_argument(
        "--bootstrap", type=non_negative_int, default=0, help="residual-bootstrap refits for 95%% intervals"
    )
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument(
        "--holdout", type=non_negative_int, default=0, help="also fit without the N largest dims and predict them"
    )
    add_option(fit, "--output", help=f"write the fits to DIR/{FITS_FILE} (the folder is created if missing)")
    fit.add_argument("--plot", action="store_true", help=f"also draw the points + fitted curves to DIR/{FITS_PLOT}")
    fit.set_defaults(func=_cmd_fit)

    choose = sub.add_parser("choose", help="cost-aware (N, D) choice under a FLOPs budget (paper 003 §4.5)")
    choose.add_argument("--law", default="BERT/TREC", help="paper preset (BERT/MS, BERT/TREC, Ettin/MS, Ettin/TREC)"
                        " or a JSON file with A, B, alpha, beta, delta")  # fmt: skip
    choose.add_argument("--budget", type=positive_float, nargs="+", required=True, help="FLOPs per query")
    choose.add_argument("--docs", type=positive_float, default=1e7, help="number of indexed documents M (default 1e7)")
    choose.add_argument("--tokens", type=positive_float, default=32, help="query length T in tokens (default 32)")
    choose.add_argument("--scoring", default="exhaustive", help="exhaustive or ann")
    add_option(choose, "--output", help=f"write the choices to DIR/{CHOICES_FILE} (the folder is created if missing)")
    choose.add_argument("--plot", action="store_true", help=f"also draw the budget curves to DIR/{BUDGET_PLOT}")
    choose.set_defaults(func=_cmd_choose)


def _read_rows(path: str) -> list[dict[str, str]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"CSV not found: {path}")
    rows = list(csv.DictReader(line for _, line in read_lines(p)))  # UTF-8, a bad byte named by its line
    if not rows:
        raise ValueError(f"{path} has no data rows")
    return rows


def _float(row: dict[str, str], column: str, path: str) -> float:
    try:
        value = float(row[column])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: column {column!r} missing or not numeric in row {row}") from exc
    return value


def _output_files(args: argparse.Namespace, data_file: str, plot_file: str) -> tuple[Path | None, Path | None]:
    """The files ``-o/--output DIR`` will receive (the data, the plot with ``--plot``), checked before any work;
    ``(None, None)`` without ``-o``."""
    from st_magnitude.cli._args import check_output_dir

    if args.output is None:
        if args.plot:
            raise ValueError("--plot draws into the -o/--output folder: give -o DIR too")
        return None, None
    check_output_dir(args.output, "--output")
    files = (Path(args.output) / data_file, Path(args.output) / plot_file if args.plot else None)
    for path in files:
        if path is not None:
            check_output_file(path, "--output")
    return files


def _cmd_fit(args: argparse.Namespace) -> int:
    fits_file, plot_file = _output_files(args, FITS_FILE, FITS_PLOT)  # before the fits, not after them
    rows = _read_rows(args.csv)
    from st_magnitude._trust.write import write_json_atomic
    from st_magnitude.scaling.fit import fit_dimension_law, fit_joint_law

    targets = [str(path) for path in (fits_file, plot_file) if path]
    if targets:
        print(f"fitting {args.csv}; writing {' and '.join(targets)}")
    columns = list(rows[0])
    if args.group_by is None:  # the default groups are optional: a plain D,L CSV is one group
        group_cols = [c for c in DEFAULT_GROUP_BY if c in columns]
        absent = [c for c in DEFAULT_GROUP_BY if c not in columns]
        if absent:
            grouping = f"rows grouped by {','.join(group_cols)}" if group_cols else "all rows are one group"
            print(f"note: no {' / '.join(absent)} column in {args.csv}: {grouping} (other groups: --group-by)")
    else:
        group_cols = [c for c in args.group_by.split(",") if c]
    needed = [args.metric, args.dim_column] + group_cols + ([args.n_column] if args.joint else [])
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ValueError(f"{args.csv}: missing column(s) {missing}; available columns: {', '.join(columns)}")
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row[args.metric] in ("", "nan"):
            continue
        groups.setdefault("/".join(row[c] for c in group_cols) or "all", []).append(row)
    results: dict[str, Any] = {}
    not_fitted: dict[str, str] = {}
    plot_groups = {}
    for label, grows in sorted(groups.items()):
        D = [_float(r, args.dim_column, args.csv) for r in grows]
        L = [_float(r, args.metric, args.csv) for r in grows]
        if args.negate:
            L = [1.0 - v for v in L]
        try:
            if args.joint:
                N = [_float(r, args.n_column, args.csv) for r in grows]
                fit = fit_joint_law(D, N, L, bootstrap=args.bootstrap, seed=args.seed)
            else:
                fit = fit_dimension_law(D, L, bootstrap=args.bootstrap, seed=args.seed)
        except ValueError as exc:
            not_fitted[label] = str(exc)
            print(f"{label}: not fitted ({exc})")
            continue
        results[label] = {**fit.params(), "r2": fit.r2, "n_points": fit.n_points, "sse": fit.sse, "ci": fit.ci}
        ci = ", ".join(f"{k} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in fit.ci.items())
        print(f"{label}: {fit.formula()}  R²={fit.r2:.4f}  n={fit.n_points}" + (f"  95% CI: {ci}" if ci else ""))
        if args.holdout and not args.joint:
            from st_magnitude.scaling.fit import extrapolation_check

            try:
                check = extrapolation_check(D, L, n_holdout=args.holdout)
            except ValueError as exc:
                print(f"  held-out check skipped ({exc})")
            else:
                parts = zip(check["dims"], check["measured"], check["predicted"], check["relative_error"])
                errs = ", ".join(f"D={d:g}: measured {m:.4g}, predicted {p:.4g} ({e:+.1%})" for d, m, p, e in parts)
                print(f"  held-out (fit on smaller dims, {check['fit'].formula()}): {errs}")
                results[label]["holdout"] = {k: v for k, v in check.items() if k != "fit"}
        if not args.joint:
            plot_groups[label] = (D, L, fit)
    if not results:
        reasons = "; ".join(f"{label}: {why}" for label, why in not_fitted.items())
        raise ValueError(f"{args.csv}: nothing fitted ({reasons or f'no row has a value of {args.metric!r}'})")
    if fits_file is not None:
        write_json_atomic(fits_file, _json_numbers(results))
        print(f"fits: {fits_file}")
    if plot_file is not None and plot_groups:
        from st_magnitude.scaling.plots import plot_dimension_fits

        ylabel = f"1 - {args.metric}" if args.negate else args.metric
        print(f"plot: {plot_dimension_fits(plot_groups, plot_file, ylabel=ylabel)}")
    elif plot_file is not None:
        print("no plot: the joint law L(D, N) has no curve over D alone")
    return 0


def _json_numbers(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float as ``null`` (an undefined R² is NaN): the file stays JSON that
    ``choose --law`` and any JSON reader accept."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_numbers(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_numbers(v) for v in obj]
    return obj


def _load_law(spec: str) -> dict[str, float]:
    from st_magnitude.scaling.fit import PAPER_JOINT_LAWS

    if spec in PAPER_JOINT_LAWS:
        return PAPER_JOINT_LAWS[spec]
    path = Path(spec)
    if path.is_file():
        law = Fields(read_json(path), path, what="--law (an object with A, B, alpha, beta, delta)")
        if len(law.obj) == 1 and isinstance(next(iter(law.obj.values())), dict):  # `scaling fit --joint` fits.json
            law = law.sub(next(iter(law.obj)))
        # the law A / D^alpha + B / N^beta + delta, as `scaling fit` fits it (non-negative terms, falling in D, N)
        return {
            **{key: law.get(key, float, lo=0) for key in ("A", "B", "delta")},
            **{key: law.get(key, float, lo=0, lo_open=True) for key in ("alpha", "beta")},
        }
    raise ValueError(f"Unknown law {spec!r}. Valid presets: {', '.join(PAPER_JOINT_LAWS)}; or a JSON file path.")


def _cmd_choose(args: argparse.Namespace) -> int:
    from st_magnitude._trust.write import write_json_atomic
    from st_magnitude.scaling.cost import index_bytes, optimal_allocation

    choices_file, plot_file = _output_files(args, CHOICES_FILE, BUDGET_PLOT)
    law = _load_law(args.law)
    print("budget      gamma    N (M params)  D          L_hat    index (fp32)")
    choices = []
    for budget in args.budget:
        a = optimal_allocation(law, budget, T=args.tokens, M=args.docs, scoring=args.scoring)
        size = index_bytes(args.docs, max(1.0, math.ceil(a.D))) / 1e9
        print(f"{budget:<10.3g}  {a.gamma:.4f}   {a.N_millions:<12.4g}  {a.D:<9.1f}  {a.loss:.4f}   {size:.3g} GB")
        choices.append(
            {"budget": budget, "gamma": a.gamma, "N_millions": a.N_millions, "D": a.D, "L_hat": a.loss}
            | {"index_gb": size}
        )
    if choices_file is not None:
        write_json_atomic(choices_file, _json_numbers(choices))
        print(f"choices: {choices_file}")
    if plot_file is not None:
        from st_magnitude.scaling.plots import plot_budget_curves

        print(f"plot: {plot_budget_curves(law, args.budget, plot_file, M=args.docs, T=args.tokens)}")
    return 0
