"""Replication seeds that accumulate across short GPU runs: each run adds the next seeds of the claims first in line.

The campaign is a priority list of gpu-profile runs (``CAMPAIGN``). Its state is the committed part files under
``benchmarks/gpu/campaign/parts/<run>/`` (one full result of one seed each, written by
``st-magnitude replicate CLAIM --profile gpu --first-seed K --seeds 1``): a run with fewer than ``TARGET`` seeds there
gets its next missing seeds, highest priority first, ``--parallel`` seed processes at once, each stopped at the time
budget. Finished seeds are merged with the committed ones (``replicate --merge``; one seed alone: ``--redecide``) into
the claim's summary. On the GPU machine only ``--out`` comes back, so everything new lands there, flat::

    OUT/campaign.json                 plan, per seed: exit code, seconds; the seeds done after this run
    OUT/<run>--seed-K.json            each new finished part (commit it: `campaign.py collect OUT`)
    OUT/<claim>-gpu[-tag].json        the merged summary over every seed done (collect copies it to the results)

    bash benchmarks/gpu/campaign.sh                    # on the GPU machine (one 15-minute device call)
    python benchmarks/gpu/campaign.py status           # which seeds are done, what the next run does
    python benchmarks/gpu/campaign.py collect OUT      # here: commit the new parts and summaries
    python benchmarks/gpu/campaign.py run --dry-run --out /tmp/c    # CPU, tiny sizes, the same code path

Limits: a seed is the smallest unit (``replicate`` resumes after the last finished seed, not inside one), so a claim
whose gpu-profile seed takes longer than the budget makes no progress here (seed times on one GPU are not measured
yet; benchmarks/gpu_replication.sh's notes say 10-60 minutes); parts merge only when they ran on the same GPU model
and torch (``replicate --merge`` refuses otherwise, and campaign.json records the refusal).

Base models travel in fp16 (``prepare.sh``; 64 MiB per device call) and are unpacked to fp32 under the aliases'
package names (``campaign.sh``); the campaign.json of each run says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PARTS = HERE / "campaign" / "parts"
RESULTS = REPO / "docs" / "replication" / "results"
TARGET = 5  # seeds per claim


@dataclass(frozen=True)
class Entry:
    """One gpu-profile run of a claim; ``sets`` / ``tag`` make a variant (``replicate --set`` / ``--tag``)."""

    claim: str
    why: str
    sets: tuple[str, ...] = field(default=())
    tag: str | None = None

    @property
    def name(self) -> str:  # replicate's run name: <claim>-gpu[-tag]
        return f"{self.claim}-gpu" + (f"-{self.tag}" if self.tag else "")


#: Highest priority first. 001's gpu profile trains up to 3,000 steps (early stopped on NFCorpus dev) and is judged on
#: SciFact test, a set with about one positive per query like the paper's data. 000-appf's gpu profile is lr 5e-6 with
#: 300 vs 3,000 steps.
CAMPAIGN = (
    Entry("001", "MW vs InfoNCE pooled AUC: 1-5K steps (gpu profile, 3,000 with early stopping), judged on SciFact"),
    Entry("003", "dimension scaling: the gpu profile (3,000 steps, full test split)"),
    Entry("000-appf", "App. F: lr 5e-6, 300 vs 3,000 steps (gpu profile)"),
)


def done_seeds(entry: Entry, parts: Path = PARTS) -> dict[int, Path]:
    """{seed: part file} of the finished seeds committed for ``entry``."""
    found: dict[int, Path] = {}
    for path in sorted((parts / entry.name).glob("*.json")):
        rec = json.loads(path.read_text(encoding="utf-8"))
        if rec.get("status") == "finished":
            for s in rec.get("seeds", []):
                found[int(s["seed"])] = path
    return found


def plan(parallel: int, parts: Path = PARTS, only: list[str] | None = None) -> list[tuple[Entry, int]]:
    """The next (entry, seed) pairs, up to ``parallel``: the first entries in line with fewer than TARGET seeds."""
    todo: list[tuple[Entry, int]] = []
    for entry in CAMPAIGN:
        if only and entry.claim not in only:
            continue
        done = done_seeds(entry, parts)
        missing = [k for k in range(TARGET) if k not in done]
        todo += [(entry, k) for k in missing[: parallel - len(todo)]]
        if len(todo) >= parallel:
            break
    return todo


def _replicate(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "st_magnitude.cli", "replicate", *args], **kw)


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    parts = Path(args.parts)
    todo = plan(args.parallel, parts, args.only)
    start = time.perf_counter()
    record: dict = {
        "dry_run": args.dry_run,
        "device": args.device,
        "budget_s": args.budget,
        "models": "base models carried in fp16 and unpacked to fp32 (prepare.sh, campaign.sh)"
        if not args.dry_run
        else "dry run: --model folders",
        "plan": [{"run": e.name, "seed": k, "why": e.why} for e, k in todo],
        "seeds": [],
    }
    if not todo:
        record["note"] = f"every run in the campaign has {TARGET} seeds"
    procs = []
    for entry, k in todo:
        folder = work / entry.name / f"s{k}"
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [entry.claim, "--profile", "gpu", "--first-seed", str(k), "--seeds", "1", "--output", str(folder)]
        cmd += ["--device", args.device] + [a for s in entry.sets for a in ("--set", s)]
        cmd += ["--tag", entry.tag] if entry.tag else []
        cmd += ["--dry-run"] if args.dry_run else []
        if entry.claim in args.model:
            cmd += ["--model", args.model[entry.claim]]
        if args.data_root:
            cmd += ["--data-root", args.data_root]
        logf = open(work / f"{entry.name}-s{k}.log", "w")  # noqa: SIM115 - closed when the process is collected
        proc = subprocess.Popen(
            [sys.executable, "-m", "st_magnitude.cli", "replicate", *cmd], stdout=logf, stderr=subprocess.STDOUT
        )
        procs.append((entry, k, folder, proc, logf, time.perf_counter()))
        if args.dry_run:  # one at a time on the CPU
            _wait(proc, start, args.budget)
    for entry, k, folder, proc, logf, t0 in procs:
        rc = _wait(proc, start, args.budget)
        logf.close()
        finished = [p for p in folder.glob("*.json") if json.loads(p.read_text()).get("status") == "finished"]
        row = {"run": entry.name, "seed": k, "exit": rc, "seconds": round(time.perf_counter() - t0, 1)}
        if finished:
            dest = out / f"{entry.name}--seed-{k}.json"
            shutil.copyfile(finished[0], dest)
            row["part"] = dest.name
        else:
            row["log_tail"] = (work / f"{entry.name}-s{k}.log").read_text()[-800:]
        record["seeds"].append(row)
    merged = {}
    for entry in {e for e, _ in todo}:
        new = sorted(out.glob(f"{entry.name}--seed-*.json"))
        if not new:
            continue
        all_parts = [str(p) for p in done_seeds(entry, parts).values()] + [str(p) for p in new]
        all_parts = sorted(set(all_parts))
        results = [] if args.dry_run else ["--results", str(out)]  # a dry run's result is not evidence
        if len(all_parts) >= 2:
            r = _replicate(["--merge", *all_parts, "--output", str(work / "merged"), *results], capture_output=True)
        else:
            one = work / "merged" / Path(all_parts[0]).name
            one.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(all_parts[0], one)  # --redecide rewrites its input: not the part that comes back
            r = _replicate(["--redecide", str(one), *results], capture_output=True)
        merged[entry.name] = {"parts": len(all_parts), "exit": r.returncode, "output": r.stdout.decode()[-600:]}
        if r.returncode:
            merged[entry.name]["error"] = r.stderr.decode()[-600:]
    record["merged"] = merged
    record["seconds"] = round(time.perf_counter() - start, 1)
    record["done_after"] = {
        e.name: sorted(
            set(done_seeds(e, parts)) | {s["seed"] for s in record["seeds"] if s["run"] == e.name and "part" in s}
        )
        for e in CAMPAIGN
    }
    (out / "campaign.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("plan", "seeds", "merged", "done_after")}, indent=1))
    failed = [s for s in record["seeds"] if "part" not in s] or [m for m in merged.values() if m["exit"]]
    return 1 if failed else 0


def _wait(proc: subprocess.Popen, start: float, budget: float) -> int:
    try:
        return proc.wait(timeout=max(1.0, budget - (time.perf_counter() - start)))
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def status(args) -> int:
    parts = Path(args.parts)
    for entry in CAMPAIGN:
        done = sorted(done_seeds(entry, parts))
        print(f"{entry.name:16s} {len(done)}/{TARGET} seeds done {done}  ({entry.why})")
    nxt = plan(args.parallel, parts)
    print("next run: " + (", ".join(f"{e.name} seed {k}" for e, k in nxt) or f"nothing: all at {TARGET} seeds"))
    return 0


def collect(args) -> int:
    """Copy a campaign run's returned parts into the committed parts and its summaries into the results folder."""
    src = Path(args.folder)
    record = json.loads((src / "campaign.json").read_text())
    if record.get("dry_run"):
        raise SystemExit(f"{src} holds a dry run: its parts are not evidence and are not collected")
    parts, results = Path(args.parts), Path(args.results)
    for row in record["seeds"]:
        if "part" in row:
            dest = parts / row["run"] / f"seed-{row['seed']}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / row["part"], dest)
            print(f"part: {dest}")
    for name, m in record.get("merged", {}).items():
        summary = src / f"{name}.json"
        if m["exit"] == 0 and summary.is_file():
            shutil.copyfile(summary, results / summary.name)
            print(f"summary: {results / summary.name} ({m['parts']} seeds)")
    print("then: st-magnitude replicate --report docs/replication.md   (regenerates the page)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=str(PARTS), help="the committed part files (the campaign's state)")
    p.add_argument("--parallel", type=int, default=3, help="seed processes at once")
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run the next seeds and merge them")
    r.add_argument("--out", required=True)
    r.add_argument("--work", default=None, help="scratch folder (default OUT/../campaign-work)")
    r.add_argument("--budget", type=float, default=780.0, help="seconds before the seed processes are stopped")
    r.add_argument("--device", default="cuda")
    r.add_argument("--data-root", default=None, help="replicate's --data-root (default $ST_MAGNITUDE_DATA)")
    r.add_argument("--only", nargs="+", help="only these claims")
    r.add_argument("--dry-run", action="store_true", help="replicate --dry-run on the CPU, one seed at a time")
    r.add_argument("--model", action="append", default=[], metavar="CLAIM=FOLDER", help="a claim's base model")
    sub.add_parser("status", help="which seeds are done, and what the next run does")
    c = sub.add_parser("collect", help="commit what a run returned")
    c.add_argument("folder")
    c.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    if args.verb == "run":
        args.model = dict(m.split("=", 1) for m in args.model)
        args.work = args.work or str(Path(args.out).resolve().parent / "campaign-work")
        if args.dry_run:
            args.device = "cpu"
        return run(args)
    return status(args) if args.verb == "status" else collect(args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
