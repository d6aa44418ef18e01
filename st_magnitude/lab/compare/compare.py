"""``st-magnitude compare``: fine-tune one base model with several similarity variants and compare them.

Every run starts from the same base model, seed, steps and training pairs; each is evaluated with its *own*
similarity (the model carries it, :func:`st_magnitude.apply_similarity`) on in-domain and out-of-domain BEIR
datasets: nDCG@10, Recall@100, MRR@10 (pytrec_eval through BEIR), pooled ROC-AUC (paper 001 §5.1) and the per-query
AUC control. The κ recommender (paper 000 §4.5) runs on the base model first and the report says whether its pick
(qnorm or dnorm) won.

Layout of the output folder (re-running skips finished runs; an interrupted run resumes from its last whole
Trainer checkpoint, or re-evaluates a trained model; datasets added with ``--eval-data`` are evaluated on re-run)::

    OUT/.lock                  held while a process works here (pid, host, start time); a second run refuses
    OUT/config.json            the resolved configuration (a re-run that would train differently is refused)
    OUT/kappa.json             κ recommendation on the base model, with the settings that produced it
    OUT/base.json              the untrained base model's metrics and norms (the plots' reference), per evaluation
    OUT/runs/<variant>-<loss>/checkpoints/    the last whole Trainer checkpoint (removed once the model is saved)
    OUT/runs/<variant>-<loss>/train.json      whole-run train_loss / train_seconds (written before ".complete")
    OUT/runs/<variant>-<loss>/model/          the trained model (".complete", written last, marks a finished run)
    OUT/runs/<variant>-<loss>/metrics.json    metrics per evaluation dataset, with the settings of each evaluation
    OUT/results.csv, OUT/results.md, OUT/plots/*.png
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from st_magnitude._trust import Fields, read_json
from st_magnitude._trust.write import write_json_atomic
from st_magnitude.data.home import resolve_data_dir, resolve_dataset  # the one data setting (stdlib only)
from st_magnitude.lab.compare.config import (
    PER_QUERY_KEY,
    CompareConfig,
    _check_writable,
    validate,
)
from st_magnitude.lab.compare.eval_sets import EvalSet, load_eval_sets
from st_magnitude.lab.compare.reports import write_reports
from st_magnitude.lab.compare.training import train_run, trained_info
from st_magnitude.lab.engine import dist as _dist
from st_magnitude.lab.engine.data import training_pairs
from st_magnitude.lab.engine.evaluation import evaluate_sets
from st_magnitude.lab.engine.lock import OutputLock
from st_magnitude.lab.engine.models import load_base_model

logger = logging.getLogger(__name__)

__all__ = ["run_compare"]


# ----------------------------------------------------------------------------------------------------------------
# the workflow
# ----------------------------------------------------------------------------------------------------------------
def run_compare(config: CompareConfig, log=print) -> dict[str, Any]:
    """Run (or resume) the comparison; returns ``{"rows": [...], "kappa": {...}, "output_dir": ...}``."""
    import torch

    validate(config)
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if _dist.distributed():  # torchrun / accelerate launch: rank 0 writes and evaluates, all train (DDP)
        world = _dist.world_size()
        if config.batch_size % world:
            allowed = sorted({max(world, config.batch_size // world * world), -(-config.batch_size // world) * world})
            raise ValueError(
                f"--batch-size {config.batch_size} does not split evenly over {world} processes: use a multiple of "
                f"{world} (e.g. {' or '.join(map(str, allowed))}); it is the global batch, each process gets "
                "batch_size / world_size rows"
            )
        if device == "cuda":
            device = f"cuda:{_dist.local_rank()}"
        _dist.init(device)
        log = _dist.main_only(log)
    out = Path(config.output_dir)
    _check_writable(out)
    lock = _output_lock(out)
    # a second run into a busy folder stops here, before any slow preparation (rank 0 holds the lock: see below)
    _dist.rank0_decides(lambda: lock.check_free())
    data_dir = resolve_data_dir(config.data_dir)
    train_folder = resolve_dataset(config.train_data, data_dir, "train" if config.train_data else "test")
    eval_folders = {Path(n).name: resolve_dataset(n, data_dir, "test") for n in config.eval_data}
    if len(eval_folders) != len(config.eval_data):
        raise ValueError(f"two evaluation datasets share a folder name: {', '.join(config.eval_data)}")
    base_model, base_desc, base_path = load_base_model(
        config.model, device, config.max_seq_length, config.trust_remote_code
    )
    # the data is read (and validated) before anything is written: a bad corpus leaves no folder behind
    eval_sets = load_eval_sets(eval_folders, config)
    pairs = training_pairs(train_folder, config.steps * config.batch_size, config.seed)
    if len(pairs["anchor"]) < config.batch_size:
        raise ValueError(
            f"{train_folder} gives {len(pairs['anchor'])} training pairs, fewer than one batch ({config.batch_size})"
        )
    held = {"base_model": base_model if _dist.is_main() else None}  # freed once κ has run (on rank 0)
    del base_model

    # -- everything validated: start writing (one process per output folder; rank 0 of a distributed launch) ----
    _dist.rank0_decides(lambda: lock.acquire() and None)
    try:
        if lock is not None and lock.took_over:
            log(f"note: took over a stale lock left by pid {lock.took_over.get('pid')} (no longer running)")
        eval_keys = {es.name: config.eval_key(eval_folders[es.name]) for es in eval_sets}
        job = _Job(config, out, device, base_desc, base_path, train_folder, eval_sets, eval_keys, pairs, log)
        return _run_locked(job, held)
    finally:
        if lock is not None:
            lock.release()


def _output_lock(out: Path) -> OutputLock | None:
    """The folder lock, held by the first process of a distributed launch only (its peers share its work)."""
    return OutputLock(out) if _dist.is_main() else None


def _check_fingerprint(out: Path, config: CompareConfig) -> None:
    """Refuse a folder holding runs trained with other settings; a config.json without runs binds nothing."""
    cfg_path = out / "config.json"
    runs_dir = out / "runs"
    if not cfg_path.exists() or not (runs_dir.is_dir() and any(runs_dir.iterdir())):
        return
    previous = Fields(read_json(cfg_path), cfg_path).get("fingerprint", (dict, type(None)), None)
    if not previous:
        return
    current = json.loads(json.dumps(config.fingerprint()))
    changed = [f"{k} {previous.get(k)!r} there, {v!r} now" for k, v in current.items() if previous.get(k) != v]
    if changed:
        raise ValueError(
            f"{out} holds runs trained with other settings ({'; '.join(changed)}); use a new --output folder, or the "
            "same settings to resume"
        )


def _read_json(path: Path) -> dict[str, Any] | None:
    """A record this job wrote earlier (``None`` when there is none: it is computed again); a corrupt or
    hand-edited one is an :class:`~st_magnitude._trust.InputFileError` naming the file."""
    if not path.is_file():
        return None
    return Fields(read_json(path, allow_infinity=True), path).obj


@dataclass
class _Job:
    """What every step of one comparison reads: the settings, where it writes, and the data it was validated on."""

    config: CompareConfig
    out: Path
    device: str
    base_desc: str
    base_path: str
    train_folder: Path
    eval_sets: list[EvalSet]
    eval_keys: dict[str, dict]
    pairs: dict
    log: Any
    rows: list[dict] = field(default_factory=list)
    norms: dict[str, dict] = field(default_factory=dict)


def _run_locked(job: _Job, held: dict) -> dict[str, Any]:
    _dist.rank0_decides(lambda: _write_config(job))  # a refusal there stops every process
    job.log(f"output folder: {job.out}")
    job.log(f"base model: {job.base_desc} | device: {job.device} | profile: {job.config.profile}")
    for es in job.eval_sets:
        job.log(f"eval {es.name}: {es.data!r}")  # the repr carries the subsample note

    base, kappa = _dist.rank0_decides(lambda: _base_steps(job, held.pop("base_model")))  # rank 0: the base model
    held.clear()

    config = job.config
    runs = [(v, loss) for loss in config.losses for v in config.variants if not (loss == "l2dir" and v != "cosine")]
    if any(loss == "l2dir" for loss in config.losses) and any(v != "cosine" for v in config.variants):
        job.log("note: l2dir trains a cosine retriever (NAP head feeds InfoTN only); it runs once, as cosine-l2dir")
    from tqdm.auto import tqdm

    for variant, loss_name in tqdm(runs, desc="variants", unit="run", disable=not _dist.is_main()):
        _one_run(job, variant, loss_name)

    def report() -> dict[str, Any]:  # rank 0 writes the table and plots; every process returns the same result
        summary = write_reports(
            job.out, job.rows, job.norms, kappa, config, job.eval_sets, job.base_desc, job.device, base=base
        )
        job.log(summary)
        job.log(f"results in {job.out}: results.md, results.csv, plots/, runs/<run>/")
        return {"rows": job.rows, "kappa": kappa, "output_dir": str(job.out), "summary": summary}

    return _dist.rank0_decides(report)


def _write_config(job: _Job) -> None:
    _check_fingerprint(job.out, job.config)
    record = {
        "fingerprint": job.config.fingerprint(),
        "config": dataclasses.asdict(job.config),
        "base_model": job.base_desc,
    }
    record.update(device=job.device, processes=_dist.world_size())
    write_json_atomic(job.out / "config.json", record)


def _base_steps(job: _Job, base_model) -> tuple[dict, dict | None]:
    """Rank 0 only: what compare measures on the untrained base model (its metrics, then the κ rule)."""
    return _base_reference(job, base_model), _kappa_step(job, base_model)


def _base_reference(job: _Job, base_model) -> dict:
    """The untrained base model on the eval sets, the plots' reference (kept in base.json for resumed runs)."""
    path = job.out / "base.json"
    record = _read_json(path)
    if record and record.get("eval") == json.loads(json.dumps(job.eval_keys)):
        return record
    job.log("untrained base model: evaluating it as the reference of the plots")
    metrics, norms = evaluate_sets(base_model, job.eval_sets)
    record = {"metrics": metrics, "norms": norms, "eval": job.eval_keys}
    write_json_atomic(path, record)
    return record


def _kappa_step(job: _Job, base_model) -> dict | None:
    """Rank 0 only: the κ rule on the (untrained) base model, read back when computed earlier with these settings."""
    config = job.config
    if not config.kappa:
        return None
    kappa_path = job.out / "kappa.json"
    kappa = _read_json(kappa_path)
    if not (kappa and kappa.get("settings") == json.loads(json.dumps(config.kappa_key()))):
        from st_magnitude.diagnostics.kappa_rule import run_kappa

        res, secs, source = run_kappa(
            base_model,
            [job.train_folder],
            n_pairs=config.kappa_pairs,
            n_bootstrap=config.kappa_bootstrap,
            seed=config.seed,
        )
        kappa = {
            "recommendation": res.recommendation,
            "confident": res.confident,
            "delta": res.delta,
            "ci": [res.ci_low, res.ci_high],
            "summary": res.summary(),
            "seconds": secs,
            "pairs": source,
            "settings": config.kappa_key(),
        }
        write_json_atomic(kappa_path, kappa)
    job.log(f"κ rule on the base model: {kappa['summary']}")
    return kappa


def _one_run(job: _Job, variant: str, loss_name: str) -> None:
    """Train (or resume) one variant × loss run and evaluate it; rank 0 decides and records, every process trains."""
    import torch

    run_dir = job.out / "runs" / f"{variant}-{loss_name}"
    todo_names, train = _dist.rank0_decides(lambda: _plan_run(job, run_dir))
    if train:
        torch.manual_seed(job.config.seed)
        train_run(job.base_path, variant, loss_name, job.config, job.pairs, run_dir, job.device)
    # the other processes wait here
    _dist.rank0_only(lambda: _evaluate_and_record(job, run_dir, variant, loss_name, train, todo_names))


def _plan_run(job: _Job, run_dir: Path) -> tuple[list[str], bool]:
    """(datasets to evaluate, whether to train): rank 0 reads the run's files, every process follows."""
    run_id = run_dir.name
    record = _read_json(run_dir / "metrics.json")
    # datasets this run has no metrics for, or has metrics made on other data / subsampling settings
    todo = [
        es.name
        for es in job.eval_sets
        if record is None
        or es.name not in record.get("metrics", {})
        or record.get("eval", {}).get(es.name) != json.loads(json.dumps(job.eval_keys[es.name]))
    ]
    if not todo:
        job.log(f"[{run_id}] finished earlier: skipped")
        return todo, False
    run_dir.mkdir(parents=True, exist_ok=True)
    if trained_info(run_dir) is not None:
        job.log(f"[{run_id}] trained earlier: evaluating {', '.join(todo)}")
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # left by a kill after .complete
        return todo, False
    if (run_dir / "model" / ".complete").exists():
        job.log(f"[{run_id}] its training did not finish writing (no train.json): training again")
    job.log(f"[{run_id}] training {job.config.steps} steps × batch {job.config.batch_size}")
    return todo, True


def _evaluate_and_record(
    job: _Job, run_dir: Path, variant: str, loss_name: str, train: bool, todo_names: list[str]
) -> dict:
    """Rank 0: evaluate what the plan named, write metrics.json and add the run's rows to the table."""
    metrics_path = run_dir / "metrics.json"
    record = None if train else _read_json(metrics_path)  # an earlier model's metrics do not describe this
    todo = [es for es in job.eval_sets if train or es.name in todo_names]
    if todo:
        from st_magnitude.model.load import load_model

        model = load_model(str(run_dir / "model"), device=job.device, max_seq_length=job.config.max_seq_length)
        t0 = time.perf_counter()
        metrics, norms = evaluate_sets(model, todo)
        previous = record or {}
        record = {
            "variant": variant,
            "loss": loss_name,
            "train": trained_info(run_dir),
            "metrics": {**previous.get("metrics", {}), **metrics},
            "norms": {**previous.get("norms", {}), **norms},
            "eval": {**previous.get("eval", {}), **{es.name: job.eval_keys[es.name] for es in todo}},
            "eval_seconds": previous.get("eval_seconds", 0.0) + time.perf_counter() - t0,
        }
        write_json_atomic(metrics_path, record)
    # the table holds exactly the requested datasets (records may hold more from earlier invocations)
    run_id = run_dir.name
    job.norms[run_id] = {es.name: record["norms"][es.name] for es in job.eval_sets}
    for es in job.eval_sets:
        m = record["metrics"][es.name]
        job.rows.append(
            {
                "run": run_id,
                "variant": record["variant"],
                "loss": record["loss"],
                "dataset": es.name,
                **{k: round(v, 5) for k, v in m.items() if k != PER_QUERY_KEY},
                "train_loss": round(record["train"]["train_loss"], 5),
                "train_seconds": round(record["train"]["train_seconds"], 1),
            }
        )
    return record
