"""Generate ``docs/replication.md`` from the summary JSONs (``st-magnitude replicate --report docs/replication.md``).
Never edit the page by hand: every number on it comes from a result file, and every claim × profile gets a row —
"not run (reason)" when no result exists."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, read_json
from st_magnitude.lab.replication.claim import PROFILES
from st_magnitude.lab.replication.claims import list_claims
from st_magnitude.lab.replication.forest import judged_comparisons, write_forest
from st_magnitude.lab.replication.items import items_path
from st_magnitude.lab.replication.markdown import md_code, md_text
from st_magnitude.lab.replication.run_file import read_run

__all__ = ["COVERAGE_FILE", "FOREST_PATH", "NOT_RUN_FILE", "recorded_costs", "render_report", "write_report"]

#: ``{"<claim>/<profile>": "why it has no result"}`` in the results folder (e.g. a run that did not finish in time)
NOT_RUN_FILE = "not_run.json"
#: the interval's simulated coverage, beside the results folder (``benchmarks/bench_interval_coverage.py --write``)
COVERAGE_FILE = "interval_coverage.json"
#: the forest plot, relative to the page's folder
FOREST_PATH = "replication/forest.png"
#: the summary table's snippet name: other pages include the generated table (``--8<-- "docs/replication.md:summary"``)
SUMMARY_SNIPPET = "summary"

HEADER = """# Replication: does each paper's key claim hold here?

<!-- generated from docs/replication/results/*.json by
`st-magnitude replicate --report docs/replication.md --results docs/replication/results`; do not edit by hand -->

Each claim is a module in `st_magnitude/lab/replication/claims/` with the paper's statement and number, a protocol per
profile (`cpu`: small enough for a shared 2-core CPU; `gpu`: the paper-faithful one, for one H100), and a verdict
rule fixed before running (or marked "revised after running", with what changed and why). A claim may judge several
statements — the paper's number and its mechanism, say — and each gets its own verdict: **reproduces** (every part's
whole 95% interval on the claimed side of the rule's threshold), **contradicts** (a part's interval wholly on the
other side, after Holm's step-down over the statement's parts), **inconclusive** (otherwise), **not reached** (a gate
failed: the budget did not train what the claim is about, or the claim was never put to the test). The method (how
the interval is built, how well it covers, how several parts are controlled) is [below the summary](#method).
"""

METHOD = """## Method

Arms are compared on the same evaluation items (queries, or STS pairs) in every seed. The per-item difference of
two arms varies with the training seed, with the items (every seed uses the same ones) and with their interaction;
the 95% interval of the mean difference is a t-interval whose standard error sums the three variance components
(method of moments of the crossed seed × item ANOVA, Satterthwaite degrees of freedom; jackknife pseudo-values for
statistics that are not item means, such as Spearman or pooled AUC) — `st_magnitude.evaluation.stats`. Each end is
widened (never narrowed) to a bootstrap-t over items (1,999 resamples of whole item columns, each studentized by its
own crossed SE; the larger of the equal-tailed and the symmetric quantile) where that tail is longer: when a few
queries gain a lot and most nothing, the studentized mean is skewed and the symmetric t misses on one side. With one
seed the interval covers item noise only and says so. Results judged before the widening carry the plain crossed
t-interval (its method says so).

A statement with several judged parts "contradicts if any part contradicts" would, at 2.5% per one-sided part, reach
m × 2.5% false contradictions over m parts. So each statement applies Holm's step-down to the contradiction side:
with r parts not yet rejected, a part contradicts only if its interval at one-sided 0.025/r lies wholly on the wrong
side (the bounds at 0.025/j are stored with every comparison; for older results they follow from the stored SE and
degrees of freedom, which is exactly how those intervals were built). "Reproduces" needs every part at 0.025 — an
intersection–union test, which needs no correction. A part that is not an interval (003's model comparison, App.
F's flag count) is judged by its own rule and is not part of the step-down.

Re-run a row with the command in its section (shown without the `--output` and `--data-root` folders it was run
with); rebuild this page and the forest plot with `st-magnitude replicate --report docs/replication.md --results
docs/replication/results` (`--report` writes only the page it names, and `replication/forest.png` beside it). A run
writes its full JSON (per-seed, per-arm, per-query scores and pooled-AUC pools, so every interval can be recomputed)
to `--output` (default `runs/replication/`, ignored by git), and the small summary this page is built from only when
asked: `--results docs/replication/results` (a summary with more seeds is not replaced without `--force`, and
replacing one made under other settings, device or torch is named in a warning). Beside each summary written from
per-item values it writes `<summary>.items.json.gz`: those values per seed and arm, so anyone can recompute every
interval (`st_magnitude.lab.replication.items.recompute(summary_path)`;
`tests/lab/replication/test_items.py` does it for every committed result: each has its file). `st-magnitude replicate
--redecide SUMMARY` puts that file's values back and recomputes every interval; a summary without it is never
rewritten in place: with `--results DIR` (another folder) its stored comparisons are judged again there under the
current rule (statements, margins, Holm), the intervals staying the run's. Costs are the recorded ones: CPU-seconds
of the run's process and its children (`resource.getrusage`), wall time, and the load average at start → end (in
each result's section).

A killed run continues where it stopped when the same command is run again. Each seed seeds its own random number
generators, so seeds can also run as separate processes at once (`--first-seed K --seeds 1`, one process per seed on
one GPU or several machines) and be merged into one result with `st-magnitude replicate --merge FULL_JSON...
--results docs/replication/results`; the merge refuses parts that differ in settings, model, precision, device, GPU or
torch version, or that repeat a seed. A merged run's cost is its parts' CPU-seconds summed, and its wall time is the
time during which at least one part ran (parts at once count once; time between parts run in turn does not count).

The same statistics serve any two-arm comparison: collect, per seed, the per-query scores of both arms on the same
queries and call `st_magnitude.evaluation.stats.compare_arms(per_seed_a, per_seed_b, metric=..., arm_a=...,
arm_b=...)`; its `.ci` (95% interval), `.significant`, `.components` and `.describe()` ("… within noise" when the
interval contains 0) are what a results table needs.
"""


def _load(results_dir: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``{(claim, profile): [main result or None, tagged results...]}``."""
    out: dict[tuple[str, str], list[dict[str, Any] | None]] = {}
    if results_dir.is_dir():
        for f in sorted(results_dir.glob("*.json")):
            if f.name == NOT_RUN_FILE:
                continue
            rec = read_run(f)  # names, types, known keys only
            runs = out.setdefault((rec["claim"], rec["profile"]), [None])
            if rec.get("tag"):
                runs.append(rec)
            else:
                runs[0] = rec
    return out


def _note_items(results: dict, results_dir: Path) -> None:
    """Mark each result whose per-item values file is committed beside its summary (``_items_file``)."""
    for runs in results.values():
        for rec in runs:
            if rec is not None:
                name = "-".join(x for x in (rec["claim"], rec["profile"], rec.get("tag")) if x)  # the summary's
                path = items_path(results_dir / f"{name}.json")
                if path.is_file():
                    rec["_items_file"] = path.name


def _changed_settings(c, profile: str, rec: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(setting, current value, the run's)`` for each recorded setting the claim's profile has changed since."""
    if rec.get("tag") or profile not in c.profiles:
        return []
    now = c.settings(profile)
    return [(k, now[k], v) for k, v in rec.get("settings", {}).items() if k in now and now[k] != v]


def _items_file(rec: dict[str, Any]) -> str | None:
    return rec.get("_items_file")


def _label(profile: str, rec: dict[str, Any] | None) -> str:
    return f"{profile} ({md_text(rec['tag'])})" if rec is not None and rec.get("tag") else profile


def _fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def _cost(rec: dict[str, Any]) -> dict[str, str]:
    """The recorded cost of a finished run as table cells; "not recorded" where the result predates the meter."""
    r = rec.get("resources") or {}
    cpu = r.get("cpu_seconds")
    start, end = r.get("load_average_start"), r.get("load_average_end")
    return {
        "cpu": "not recorded" if cpu is None else f"{cpu:,.0f} CPU-s" if cpu >= 100 else f"{cpu:.1f} CPU-s",
        "wall": _fmt_seconds(r.get("wall_seconds", rec.get("wall_seconds"))),
        "load": f"{start[0]:.1f} → {end[0]:.1f}" if start and end else "not recorded",
    }


def recorded_costs(results_dir: str | os.PathLike) -> dict[tuple[str, str], str]:
    """``{(claim, profile): "N seeds, … CPU-s, … wall, load a → b (1-min), started …"}`` for the main (untagged)
    finished results in ``results_dir`` (for ``st-magnitude replicate --list``)."""
    out = {}
    for key, runs in _load(Path(results_dir)).items():
        rec = runs[0]
        if rec is None or rec.get("status") != "finished":
            continue
        c = _cost(rec)
        cpu = c["cpu"] if c["cpu"].endswith("CPU-s") else "CPU-s not recorded"
        out[key] = (
            f"{len(rec['seeds'])} seeds, {cpu}, {c['wall']} wall, load (1-min) {c['load']}, "
            f"started {rec.get('started_utc', '?')}, {_machine(rec['machine'], bool(rec.get('bf16')))}"
        )
    return out


def _machine(m: dict[str, Any], bf16: bool | None = None) -> str:
    dev = m.get("gpu") or f"CPU ({m.get('cpu_count')} cores, {m.get('torch_threads')} torch thread(s))"
    precision = "" if bf16 is None else ", bf16 autocast" if bf16 else ", fp32"
    return f"{dev}, torch {m.get('torch')}{precision}"


def _cell(text: str) -> str:
    """Text of the claim's own code (its Markdown kept) for a table cell or one line; text read from a result file
    goes through :func:`~st_magnitude.lab.replication.markdown.md_text` instead."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _not_run_reasons(results_dir: Path) -> dict[str, str]:
    path = results_dir / NOT_RUN_FILE
    if not path.is_file():
        return {}
    reasons = Fields(read_json(path), path)
    return {key: reasons.get(key, str) for key in reasons.keys()}


def _not_run(claim, profile: str, reasons: dict[str, str] | None = None) -> str:
    reason = (reasons or {}).get(f"{claim.id}/{profile}")
    if reason:
        return f"not run ({md_text(reason)})"
    if profile == "gpu":
        return "not run (no GPU was available in the session that produced these results)"
    return "not run (no result file yet)"


def _finished(results: dict, claims) -> list[tuple[Any, str, dict[str, Any]]]:
    return [
        (c, profile, rec)
        for c in claims
        for profile in PROFILES
        for rec in results.get((c.id, profile), [None])
        if rec is not None and rec.get("status") == "finished"
    ]


def forest_rows(results_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every judged comparison of every finished result, in page order (the forest plot's rows)."""
    results = _load(Path(results_dir))
    return [
        row
        for c, profile, rec in _finished(results, list_claims())
        for row in judged_comparisons(f"{c.id} {_label(profile, rec)}", rec)
    ]


def render_report(results_dir: str | os.PathLike, coverage: str | os.PathLike | None = None) -> str:
    """The page. ``coverage``: the interval's coverage JSON (default: :data:`COVERAGE_FILE` beside
    ``results_dir``)."""
    results = _load(Path(results_dir))
    _note_items(results, Path(results_dir))
    reasons = _not_run_reasons(Path(results_dir))
    claims = list_claims()
    coverage = Path(coverage) if coverage is not None else Path(results_dir).parent / COVERAGE_FILE
    lines = [HEADER]
    if forest_rows(results_dir):
        lines += [
            f"![Forest plot: every judged comparison, its 95% interval, the rule's threshold and the verdict]"
            f"({FOREST_PATH})",
            "",
            "Every judged comparison: the dot is the estimate, the bar its 95% interval, the black tick the verdict "
            "rule's threshold (< or > marks the claimed side); colour = verdict (green reproduces, red contradicts, "
            "grey inconclusive, blue: a gate failed, not reached at this budget). The dotted line is 0.",
            "",
        ]
    lines += ["## Summary", "", f"<!-- --8<-- [start:{SUMMARY_SNIPPET}] -->"]
    lines += [
        "| claim | profile | verdict | seeds | CPU time | wall time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    below = []
    for c in claims:
        for profile in PROFILES:
            for rec in results.get((c.id, profile), [None]):
                lines.append(_summary_row(c, profile, rec, reasons))
                finished = rec is not None and rec.get("status") == "finished"
                what = (
                    _can(c, profile, rec) if finished else f"{_not_run(c, profile, reasons)}; {_can(c, profile, rec)}"
                )
                below.append(f"- **{c.id} {_label(profile, rec)}**: {what}")
    lines += [f"<!-- --8<-- [end:{SUMMARY_SNIPPET}] -->"]
    lines += ["", "What each run can establish (and why a run is missing):", "", *below]
    lines += ["", *_method(coverage)]
    for c in claims:
        lines += [f"## {c.id}: {c.title}", "", f"**Paper {c.paper}.** {c.statement}", ""]
        lines += [
            f"Paper's number: {c.paper_number}.",
            "",
            f"**Verdict rule** ({f'revised after running: {c.revised}' if c.revised else 'fixed before running'}): "
            + c.verdict_rule,
        ]
        lines.append("")
        for profile in PROFILES:
            for i, rec in enumerate(results.get((c.id, profile), [None])):
                if i > 0 and rec is None:
                    continue
                lines += _section(c, profile, rec, reasons)
    return "\n".join(lines).rstrip() + "\n"


#: how the coverage table names each simulated noise kind
_KIND_NAMES = {
    "normal": "normal",
    "heavy": "Student-t (3 df)",
    "skewed": "skewed items (exponential, skewness 2)",
    "zero-inflated": "zero-inflated items (85% zero, skewness 5.3)",
}


def read_coverage(path: Path) -> dict[str, Any]:
    """The simulated-coverage file (``benchmarks/bench_interval_coverage.py --write``), every value the page prints
    checked at the boundary: shares and coverages in [0, 1], positive widths, the same seed counts in every row.
    Unknown keys are dropped."""
    top = Fields(read_json(path), path)
    cov: dict[str, Any] = {
        "command": top.get("command", str),
        "machine": top.get("machine", str),
        "reps": top.get("reps", int, lo=1),
        "n_boot": top.get("n_boot", int, lo=1),
        "cpu_seconds": top.get("cpu_seconds", float, lo=0),
        "rows": [],
    }
    rows = top.get("rows", list, check=lambda v: None if v else "must hold at least one row")
    for i, raw in enumerate(rows):
        row = Fields(raw, path, what=f"rows[{i}]", prefix=f"rows[{i}].")
        shares = row.get(
            "shares",
            list,
            check=lambda v: (
                None
                if len(v) == 3
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in v)
                else "must be three shares in [0, 1]"
            ),
        )
        cells = row.sub("cells")
        if i and list(cells.keys()) != list(cov["rows"][0]["cells"]):
            raise row.error("cells", f"must hold the seed counts of the first row ({list(cov['rows'][0]['cells'])})")
        out_cells = {}
        for k in cells.keys():
            cell = cells.sub(k)
            out_cells[k] = {
                "before": cell.get("before", float, lo=0, hi=1),
                "after": cell.get("after", float, lo=0, hi=1),
                "width_before": cell.get("width_before", float, lo=0, lo_open=True),
                "width_after": cell.get("width_after", float, lo=0),
            }
        if not out_cells:
            raise row.error("cells", "must hold at least one seed count")
        cov["rows"].append(
            {
                "kind": row.get("kind", str, "normal", choices=_KIND_NAMES),
                "regime": row.get("regime", str),
                "shares": shares,
                "items": row.get("items", int, lo=1),
                "cells": out_cells,
            }
        )
    return cov


def _method(coverage: Path) -> list[str]:
    lines = [METHOD]
    if not coverage.is_file():
        return [*lines, "Simulated coverage: not generated (`benchmarks/bench_interval_coverage.py --write`).", ""]
    cov = read_coverage(coverage)
    seeds = list(cov["rows"][0]["cells"])
    worst = min(c["after"] for row in cov["rows"] for c in row["cells"].values())
    lines += [
        "Simulated coverage of the 95% interval (true difference 0; before = the crossed t-interval alone, after = "
        f"with the bootstrap-t widening used here, {cov['n_boot']:,} resamples; {cov['reps']:,} replicates per cell; "
        "shares of Var(mean) from seeds / items / seed × item; seed and interaction effects normal, Student-t for "
        f"the heavy-tailed rows). Produced by `{cov['command']}` ({cov['cpu_seconds']:.0f} CPU-s on "
        f"{cov['machine']}); `tests/evaluation/test_interval_coverage.py` asserts ≥ 0.93 at a reduced size in every "
        "cell it runs but one: zero-inflated item effects at 10 seeds × 100 items sit at the target's edge and are "
        f"held to 0.92 there. Worst cell after: {worst:.3f}.",
        "",
        "| item effects | regime (shares) | items | " + " | ".join(f"{k} seeds: before → after" for k in seeds) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in seeds) + " |",
    ]
    for row in cov["rows"]:
        shares = " / ".join(f"{x:g}" for x in row["shares"])
        cells = " | ".join(
            f"{_coverage_cell(c['before'])} → {_coverage_cell(c['after'])} "
            f"(×{c['width_after'] / c['width_before']:.2f})"
            for c in (row["cells"][k] for k in seeds)
        )
        kind = _KIND_NAMES.get(row.get("kind", ""), row.get("kind", "normal"))
        lines.append(f"| {kind} | {row['regime']} ({shares}) | {row['items']} | {cells} |")
    lines += ["", "Cells below 0.93 are in bold; (×r): median width after / before.", ""]
    return lines


def _coverage_cell(x: float) -> str:
    return f"**{x:.3f}**" if x < 0.93 else f"{x:.3f}"


def _verdict_cell(rec: dict[str, Any]) -> str:
    """The verdict, or one short line per judged statement ("name: **verdict**") when they differ."""
    statements = rec["decision"].get("statements") or []
    if len(statements) < 2 or len({st["verdict"] for st in statements}) == 1:
        return f"**{md_text(rec['verdict'])}**"
    return "<br>".join(f"{md_text(st['name'])}: **{md_text(st['verdict'])}**" for st in statements)


def _summary_row(c, profile: str, rec: dict[str, Any] | None, reasons: dict[str, str]) -> str:
    if rec is None or rec.get("status") != "finished":
        return f"| {c.id} | {profile} | not run (reason below) | — | — | — |"
    cost = _cost(rec)
    return (
        f"| {c.id} | {_label(profile, rec)} | {_verdict_cell(rec)} | {len(rec['seeds'])} | {cost['cpu']} | "
        f"{cost['wall']} |"
    )


def _can(c, profile: str, rec: dict[str, Any] | None) -> str:
    """The claim's one line on what a run of this profile can establish (the claim's current text, else the
    record's)."""
    text = getattr(c, "can_establish", {}).get(profile, "")
    if text:
        return _cell(text)
    recorded = (rec or {}).get("can_establish")
    return md_text(recorded) if recorded else "—"


def _section(c, profile: str, rec: dict[str, Any] | None, reasons: dict[str, str]) -> list[str]:
    lines = [f"### {_label(profile, rec)} profile", ""]
    lines += ["Setting differences from the paper:", ""]
    lines += [f"- {_cell(x)}" for x in c.differences.get(profile, [])]
    lines.append("")
    if rec is None or rec.get("status") != "finished":
        return [*lines, f"Result: {_not_run(c, profile, reasons)}.", ""]
    cost = _cost(rec)
    lines += [f"Result: **{md_text(rec['verdict'])}** — {md_text(rec['decision'].get('ours', ''))}", ""]
    for st in rec["decision"].get("statements", []):
        ungated = f" (the rule alone: {md_text(st['ungated_verdict'])})" if st.get("ungated_verdict") else ""
        lines.append(
            f"- **{md_text(st['name'])}**: **{md_text(st['verdict'])}**{ungated} — tests: {md_text(st['tests'])}; "
            f"multiple parts: {md_text(st['multiplicity'])}"
        )
    if rec["decision"].get("statements"):
        lines.append("")
    lines += [
        f"- command: {md_code(rec['command'])}",
        f"- machine: {md_text(_machine(rec['machine'], bool(rec.get('bf16'))))}; started "
        f"{md_text(rec.get('started_utc'))}",
        f"- recorded cost for {len(rec['seeds'])} seeds: {cost['cpu']}, {cost['wall']} wall, load average (1-min) "
        f"{cost['load']}",
        "- settings: " + ", ".join(f"{md_text(k)}={md_text(v)}" for k, v in rec["settings"].items()),
    ]
    if rec.get("merged_from"):
        parts = rec["merged_from"]
        lines.append(
            f"- run as {len(parts)} parts at once or in turn (seeds "
            + "; ".join(", ".join(map(md_text, m["seeds"])) for m in parts)
            + "), merged with `st-magnitude replicate --merge`: the cost is the parts' CPU-s summed, the wall time "
            "the time during which at least one part ran"
        )
    if rec.get("verdict_rule_when_run"):
        lines.append(
            "- decided by the rule above, revised after this run was made; the run was made under: "
            + md_text(rec["verdict_rule_when_run"])
        )
    changed = _changed_settings(c, profile, rec)
    if changed:
        lines.append(
            "- **the protocol has changed since this run** ("
            + "; ".join(f"{md_text(k)}: now {md_text(now)}, this run {md_text(was)}" for k, now, was in changed)
            + "): the differences above are the current protocol's; the run needs repeating"
        )
    if rec["decision"].get("judged_from"):
        lines.append(
            f"- judged again on {md_text(rec.get('redecided_utc'))} from {md_text(rec['decision']['judged_from'])}"
        )
    items = _items_file(rec)
    if items:
        lines.append(f"- per-item values (per seed, arm and query/pair): `docs/replication/results/{items}`")
    if rec.get("redecided_utc") and not rec["decision"].get("judged_from"):
        lines.append(
            f"- comparisons and verdict recomputed from the stored per-item scores on {md_text(rec['redecided_utc'])} "
            "(`st-magnitude replicate --redecide FULL_JSON`, no retraining)"
        )
    lines.append("")
    return lines + _comparisons(rec)


def _comparisons(rec: dict[str, Any]) -> list[str]:
    d = rec["decision"]
    rows, notes = [], []
    seen = set()
    for part in d.get("parts", []):
        key = (part.get("claim"), part.get("comparison", {}).get("describe"))
        if key in seen:  # a part two statements share (the paper's number is one λ of the mechanism)
            continue
        seen.add(key)
        if "comparison" in part:
            holm = " (contradicts at 0.025 alone, not after Holm)" if part.get("holm") else ""
            rows.append((part["comparison"], f"judged → {md_text(part['verdict'])}{holm}"))
        else:  # a judged part that is not an interval (e.g. a detector's flag count)
            notes.append(
                f"- judged → {md_text(part['verdict'])}: {md_text(part.get('claim', ''))} "
                f"({md_text(part.get('reason', ''))})"
            )
    for g in d.get("gates", []):
        notes.append(f"- gate {'passed' if g['passed'] else 'FAILED'}: {md_text(g['gate'])} ({md_text(g['reason'])})")
    if d.get("gate_note"):
        notes.append(
            f"- {md_text(d['gate_note'])}; the rule alone would say: {md_text(d.get('ungated_verdict', '—'))}"
        )
    if d.get("note"):
        notes.append(f"- note: {md_text(d['note'])}")
    if "fit" in d:
        notes.append(f"- fit: {md_text(d['fit']['formula'])}, R² {d['fit']['r2']:.3f}")
    judged = {(r[0]["metric"], r[0]["arm_a"], r[0]["arm_b"]) for r in rows}
    for c in list(d.get("comparisons", {}).values()) + list(d.get("informational", [])):
        if (c["metric"], c["arm_a"], c["arm_b"]) not in judged:
            rows.append((c, "reported"))
    if not rows:
        return [*notes, ""] if notes else []
    out = [
        *([*notes, ""] if notes else []),
        "| comparison | a − b | 95% CI | per-seed differences | Var(mean): seed / item / seed×item | significant "
        "| role |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c, role in rows:
        per_seed = ", ".join(f"{x:+.4f}" for x in c["per_seed_diff"])
        out.append(
            f"| {md_text(c['metric'])}: {md_text(c['arm_a'])} − {md_text(c['arm_b'])} | {c['diff']:+.4f} | "
            f"[{c['ci']['low']:+.4f}, {c['ci']['high']:+.4f}] | {per_seed} | {_shares(c.get('components'))} | "
            f"{'yes' if c['significant'] else 'no'} | {role} |"
        )
    out.append("")
    return out


def _shares(vc: dict[str, Any] | None) -> str:
    """The share of the mean's variance from seeds, items and their interaction (the interval's components)."""
    if not vc:
        return "— (older result: union interval)"
    k, n = vc["n_seeds"], vc["n_items"]
    parts = [vc["seed"] / k, vc["item"] / n, vc["residual"] / (k * n)]
    total = sum(parts)
    if total <= 0:
        return "no variation"
    text = " / ".join(f"{100 * p / total:.0f}%" for p in parts)
    return text if vc.get("seed_noise_covered", k > 1) else f"{text} (1 seed: seed noise not covered)"


def write_report(results_dir: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Write the page to ``path`` and its forest plot to :data:`FOREST_PATH` beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(results_dir), encoding="utf-8")
    write_forest(forest_rows(results_dir), path.parent / FOREST_PATH)
    return path
