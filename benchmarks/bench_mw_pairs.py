"""MW's pair stage against MNRL's cross-entropy: loss only, forward + backward, one CPU thread, B = 64 … 8,192.

Both losses get the same embeddings (384-d, unit norm: positives near their query, hard negatives near the
positive) with ``requires_grad``, and each timed call runs the library's own ``compute_loss_from_embeddings`` and
``backward()`` to the embeddings: MW (``MWLoss``, cosine, τ = 0.01) on its grid stage (``pair_stage="grid"``) and
sentence-transformers' ``MultipleNegativesRankingLoss`` (scale 100, i.e. τ = 0.01, the same scores); MW's old
pairwise stage (``pair_stage="pairwise"``, O(B³) pairs) beside them up to ``--pairwise-max``. "MW (default)" is
the stage ``pair_stage="auto"`` takes at that size, so the rows show where its rule switches.
Rounds alternate the three; each figure is the minimum over ``--repeats`` rounds of the thread's CPU time (and the
wall time, recorded too). Goal: MW ≤ 2.5× cross-entropy at B = 4,096 and time(4,096) / time(1,024) ≤ 20.

    python benchmarks/bench_mw_pairs.py --out docs/results/bench_mw_pairs.json          # the full curve (~15 min)
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
            best = {n: (float("inf"), float("inf")) for n in names}
            for _ in range(args.repeats):
                for name in names:
                    cpu, wall = cpu_time(losses[name], cols)
                    best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
            with torch.no_grad():
                scores = cols[0] @ torch.cat(cols[1:]).T
                lo, hi = float(scores.min()), float(scores.max())
            level = grid.choose_level((hi - lo) / TAU, 1 / TAU, scores.numel(), batch)
            row = {"batch": batch, "hard_negatives": hard, "scores": scores.numel(), "grid_level": level}
            row["grid_level_alpha_degree"] = list(grid.LEVELS[level])
            row["mw_stage"] = choose_pair_stage("auto", batch, scores.numel(), scores.device)
            for name, (cpu, wall) in best.items():
                row[f"{name}_cpu_s"], row[f"{name}_wall_s"] = cpu, wall
            row["mw_cpu_s"] = row[f"{row['mw_stage']}_cpu_s"]  # what pair_stage="auto" (the default) runs
            row["mw_over_ce"] = row["mw_cpu_s"] / row["ce_cpu_s"]
            rows.append(row)
            shown = "  ".join(f"{n} {best[n][0] * 1e3:9.1f} ms" for n in names)
            print(f"B={batch:5d} H={hard}  {shown}  MW/CE {row['mw_over_ce']:.2f}", flush=True)
    return {
        "what": "loss only, forward + backward to the embeddings, one CPU thread; min over repeats of thread CPU time",
        "command": "python benchmarks/bench_mw_pairs.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "threads": args.threads,
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
        "| B | H | scores | cross-entropy (MNRL) | MW (default) | MW / CE | grid stage | pairwise stage | default |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        pairwise = r.get("pairwise_cpu_s")
        pw = f"{pairwise * 1e3:,.1f} ms" if pairwise is not None else "not run"
        alpha, degree = r["grid_level_alpha_degree"]
        level = f"grid (α ≤ {alpha:g}, D = {degree})" if r["mw_stage"] == "grid" else "pairwise"
        lines.append(
            f"| {r['batch']:,} | {r['hard_negatives']} | {r['scores']:,} | {r['ce_cpu_s'] * 1e3:,.1f} ms "
            f"| {r['mw_cpu_s'] * 1e3:,.1f} ms | {r['mw_over_ce']:.2f} | {r['grid_cpu_s'] * 1e3:,.1f} ms | {pw} "
            f"| {level} |"
        )
    g = goals(result)
    summary = []
    if "mw_over_ce_at_4096" in g:
        summary.append(f"MW / cross-entropy at B = 4,096: **{g['mw_over_ce_at_4096']:.2f}** (goal ≤ 2.5)")
    if "mw_4096_over_1024" in g:
        summary.append(f"MW time(4,096) / time(1,024): **{g['mw_4096_over_1024']:.1f}** (goal ≤ 20; B² is 16)")
    return (
        f"Measured with `{result['command']}` ({result['machine']}; {result['what']}).\n\n"
        + "\n".join(lines)
        + ("\n\n" + "; ".join(summary) + "." if summary else "")
    )


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
            plan = grid.make_plan(pos, 1 / TAU, (hi - lo) / TAU, scores.numel())
            plan.alpha, plan.degree = grid._spacing(1 / TAU, alpha) / TAU, degree
            plan.h = plan.alpha * TAU
            plan.__post_init__()
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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
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
