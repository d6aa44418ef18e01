"""Hostile and careless inputs to ``st-magnitude replicate``: part files for ``--merge`` and ``--redecide``, ``--set``
values, ``--tag``, read-only output folders, two runs of the same seeds, a full disk, ``--dry-run --results``.

On a stub claim (no training, seconds). Before: a part whose ``profile`` or ``tag`` held ``../`` made the merge
write outside ``--output`` / ``--results``; an extra key of a part was copied into the committed summary; malformed
parts gave tracebacks; ``--set scale=1e-320`` ran to exit 0; a read-only ``--output`` was found after training; two
identical runs trained the same seeds; a merge on a full disk left an empty ``--output``; ``--dry-run --results``
raised ``KeyError`` after the run. Now each is one line naming the file or the flag (exit 2), before any work, and
nothing is written outside the output folders.
"""

from __future__ import annotations

import errno
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from st_magnitude.cli import main
from st_magnitude.evaluation import stats, verdicts
from st_magnitude.lab.replication import runner
from st_magnitude.lab.replication.claim import Claim

SEEDS_RUN: list[int] = []


def _run_seed(ctx):
    SEEDS_RUN.append(ctx.seed)
    rng = np.random.default_rng(ctx.seed)
    base = rng.uniform(0, 1, 20)
    return {"per_query": {"a": (base + 0.2).tolist(), "b": (base + rng.normal(0, 0.05, 20)).tolist()}}


def _decide(seeds, settings):
    c = stats.compare_arms([s["per_query"]["a"] for s in seeds], [s["per_query"]["b"] for s in seeds], metric="m")
    v = verdicts.verdict(c, expect="greater", threshold=0.05)
    return {**verdicts.combine_verdicts([v]), "ours": c.describe()}


STUB = Claim(
    id="001",
    paper="001",
    title="stub",
    statement="a − b > 0.05",
    paper_number="—",
    verdict_rule="a − b > 0.05",
    profiles={p: {"steps": 1, "scale": 20.0, "temperature": 0.01, "eval_queries": None} for p in ("cpu", "gpu")},
    differences={"cpu": [], "gpu": []},
    run_seed=_run_seed,
    decide=_decide,
)


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "get_claim", lambda claim_id: STUB)
    monkeypatch.setattr("st_magnitude.lab.replication.claims.get_claim", lambda claim_id: STUB)
    monkeypatch.chdir(tmp_path)
    SEEDS_RUN.clear()
    return dict(data=str(tmp_path), device="cpu", command="st-magnitude replicate 001 (test)")


@pytest.fixture
def parts(stub, tmp_path):
    """Two valid part files (seeds 0 and 1), in ``tmp_path/box/parts`` (the merge writes under ``tmp_path/box``)."""
    folder = tmp_path / "box" / "parts"
    files = []
    for seed in (0, 1):
        rec = runner.run_claim("001", seeds=1, first_seed=seed, out=folder / str(seed), **stub)
        files.append(Path(rec["full_result"]))
    return files


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _merge(files, tmp_path, capsys, *extra) -> tuple[int, str]:
    out, results = tmp_path / "box" / "out", tmp_path / "box" / "results"
    code = main(["replicate", "--merge", *map(str, files), "--output", str(out), "--results", str(results), *extra])
    return code, capsys.readouterr().err


def _rewrite(path: Path, change) -> Path:
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))
    return path


def _one_line_error(code: int, err: str, *names: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.count("error:") == 1, err
    for name in names:
        assert name in err, err


# -- names read from a part become file names: never outside --output / --results ------------------------------------
@pytest.mark.parametrize(
    ("key", "value"),
    [("profile", "cpu/../../../escaped"), ("tag", "../../../escaped"), ("claim", "../001"), ("tag", "a\x00b")],
)
def test_a_part_naming_a_path_is_refused_and_nothing_is_written(parts, tmp_path, capsys, key, value):
    for part in parts:
        _rewrite(part, lambda rec: rec.update({key: value}))
    before = _files(tmp_path)
    code, err = _merge(parts, tmp_path, capsys)
    _one_line_error(code, err, str(parts[0]), f"key '{key}'")
    assert _files(tmp_path) == before  # nothing written anywhere, outside or inside
    assert not (tmp_path / "box" / "out").exists() and not (tmp_path / "box" / "results").exists()


def test_redecide_refuses_a_crafted_name_and_writes_nothing(parts, tmp_path, capsys):
    _rewrite(parts[0], lambda rec: rec.update(profile="cpu/../../../escaped", status="finished"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code = main(["replicate", "--redecide", str(parts[0]), "--results", str(tmp_path / "box" / "results")])
    _one_line_error(code, capsys.readouterr().err, str(parts[0]), "key 'profile'")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_extra_keys_of_a_part_stay_out_of_the_merged_result_and_the_summary(parts, tmp_path, capsys):
    for part in parts:
        _rewrite(part, lambda rec: rec.update(injected="<script>", machine={**rec["machine"], "note": "x"}))
    code, err = _merge(parts, tmp_path, capsys)
    assert code == 0, err
    (merged,) = (tmp_path / "box" / "out").iterdir()
    for path in (merged, tmp_path / "box" / "results" / "001-cpu.json"):
        text = path.read_text()
        assert "injected" not in text and "<script>" not in text and '"note"' not in text, path


def test_the_tag_rule_is_one_for_the_flag_the_runner_and_the_part(stub, tmp_path, capsys):
    for bad in ("../x", ".hidden", "a/b", "x" * 101):
        code = main(
            ["replicate", "001", "--tag", bad, "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"]
        )
        err = capsys.readouterr().err
        assert code == 2 and "--tag must be a name of letters, digits" in err, err
        with pytest.raises(ValueError, match="tag must be a name of letters, digits"):
            runner.run_claim("001", tag=bad, out=tmp_path / "o", **stub)
    assert not (tmp_path / "o").exists() and SEEDS_RUN == []


# -- malformed parts: one line naming the file and the key -------------------------------------------------------
def _nan_metric(path: Path) -> None:
    _rewrite(path, lambda rec: rec["seeds"][0]["per_query"]["a"].__setitem__(0, float("nan")))  # written as NaN


MALFORMED = {
    "not JSON": (lambda p: p.write_text('{"claim": "001", "seeds": ['), "not valid JSON"),
    "a list": (lambda p: p.write_text("[1, 2]"), "must hold a JSON object, got a list"),
    "no claim": (lambda p: _rewrite(p, lambda r: r.pop("claim")), "key 'claim': is missing"),
    "seeds not a list": (lambda p: _rewrite(p, lambda r: r.update(seeds={"0": {}})), "key 'seeds': must be a list"),
    "seed not an int": (lambda p: _rewrite(p, lambda r: r["seeds"][0].update(seed="0")), "key 'seeds[0].seed'"),
    "seed negative": (lambda p: _rewrite(p, lambda r: r["seeds"][0].update(seed=-1)), "key 'seeds[0].seed'"),
    "seed record not an object": (lambda p: _rewrite(p, lambda r: r.update(seeds=[5])), "key 'seeds[0]'"),
    "seed record without the claim's data": (
        lambda p: _rewrite(p, lambda r: r["seeds"][0].pop("per_query")),
        "seed records hold different keys",
    ),
    "seed records the rule cannot read": (
        lambda p: _rewrite(p, lambda r: r["seeds"][0].update(per_query=[1, 2])),
        "do not hold what claim 001's rule reads",
    ),
    "NaN metric": (_nan_metric, "NaN is not a number"),
    "no seeds": (lambda p: _rewrite(p, lambda r: r.update(seeds=[])), "holds no finished seed"),
    "settings a string": (lambda p: _rewrite(p, lambda r: r.update(settings="x")), "key 'settings'"),
    "cost a string": (
        lambda p: _rewrite(p, lambda r: r["resources"].update(cpu_seconds="1")),
        "key 'resources.cpu_seconds'",
    ),
    "a time without its offset": (
        lambda p: _rewrite(p, lambda r: r.update(started_utc="2026-01-01T10:00:00")),
        "key 'started_utc': must be an ISO 8601 time",
    ),
    "not UTF-8": (lambda p: p.write_bytes(b'{"claim": "\xff"}'), "is not UTF-8"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_part_is_one_line_naming_the_file(parts, tmp_path, capsys, case):
    damage, expected = MALFORMED[case]
    damage(parts[1])
    code, err = _merge(parts, tmp_path, capsys)
    _one_line_error(code, err, expected)
    assert str(parts[1]) in err, err
    assert not (tmp_path / "box" / "out").exists() and not (tmp_path / "box" / "results").exists()


def test_a_corrupt_summary_in_results_is_named_and_force_replaces_it(stub, tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "001-cpu.json").write_text("{")
    argv = ["replicate", "001", "--seeds", "1", "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"]
    _one_line_error(main([*argv, "--results", str(results)]), capsys.readouterr().err, "001-cpu.json")
    assert SEEDS_RUN == []  # before training
    assert main([*argv, "--results", str(results), "--force"]) == 0
    assert json.loads((results / "001-cpu.json").read_text())["status"] == "finished"


def test_an_unreadable_partial_file_is_kept_and_the_run_starts_clean(stub, tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    partial = out / "001-cpu-20260101T000000Z.json"
    partial.write_text('{"claim": "001", "profile": "cpu/../x", "status": "running", "settings": {}, "seeds": []}')
    rec = runner.run_claim("001", seeds=1, out=out, **stub)
    assert "cannot resume from it" in caplog.text and "key 'profile'" in caplog.text
    assert rec["full_result"] != str(partial) and partial.exists()


# -- --set: the profile's own checks ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("scale=1e-320", "float32's normal range"),
        ("scale=1e308", "float32's normal range"),
        ("temperature=1e-39", "float32's normal range"),
        ("temperature=0", "float32's normal range"),
        ("scale=NaN", "must be a number"),
        ("scale=Infinity", "must be a number"),
        ("scale=-20", "must be ≥ 0"),
        ("steps=2.5", "must be an integer"),
        ("steps=true", "must be an integer"),
        ("steps=1e400", "must be a finite number"),
        ("eval_queries=-1", "must be ≥ 0"),
        ("nope=1", "unknown setting 'nope'"),
        ("scale", "--set takes KEY=VALUE"),
    ],
)
def test_a_set_value_outside_the_settings_range_is_refused_before_the_run(stub, tmp_path, capsys, item, expected):
    argv = ["replicate", "001", "--set", item, "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"]
    _one_line_error(main(argv), capsys.readouterr().err, expected)
    assert SEEDS_RUN == [] and not (tmp_path / "o").exists()


def test_set_values_in_range_are_kept_with_the_settings_types(stub, tmp_path):
    from st_magnitude.lab.replication.overrides import parse_set

    overrides = parse_set(["scale=50", "temperature=1e-3", "steps=2.0", "eval_queries=10"])
    rec = runner.run_claim("001", seeds=1, out=tmp_path / "o", overrides=overrides, **stub)
    assert rec["settings"] == {"steps": 2, "scale": 50.0, "temperature": 1e-3, "eval_queries": 10}
    assert isinstance(rec["settings"]["steps"], int) and isinstance(rec["settings"]["scale"], float)


# -- output folders checked before any work -----------------------------------------------------------------------
@pytest.fixture
def read_only(monkeypatch, tmp_path):
    """``tmp_path/ro`` behaves as a read-only mount for the writability probe (root writes anywhere, so a chmod
    would not show it): creating a file or a folder there fails with EROFS."""
    import st_magnitude._trust.outputs as outputs  # the writability probe of check_output_dir

    ro = tmp_path / "ro"
    ro.mkdir()
    real = outputs.tempfile.TemporaryFile

    def probe(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).resolve() == ro.resolve():
            raise OSError(errno.EROFS, "Read-only file system", str(dir))
        return real(*args, dir=dir, **kwargs)

    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):  # nor a folder (the cleanup rule makes the output's folders ahead)
        if Path(path).parent.resolve() == ro.resolve():
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(outputs.tempfile, "TemporaryFile", probe)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return ro


@pytest.mark.parametrize("flag", ["--output", "--results"])
def test_a_read_only_output_folder_is_found_before_training(stub, tmp_path, capsys, read_only, flag):
    argv = ["replicate", "001", "--seeds", "1", "--data-root", str(tmp_path), "--device", "cpu"]
    where = {
        "--output": ["--output", str(read_only / "out")],
        "--results": ["--output", "o", "--results", str(read_only)],
    }
    _one_line_error(main([*argv, *where[flag]]), capsys.readouterr().err, flag, "is not writable")
    assert SEEDS_RUN == []


def test_a_read_only_merge_output_is_found_before_reading_the_parts(parts, tmp_path, capsys, read_only):
    code = main(["replicate", "--merge", *map(str, parts), "--output", str(read_only / "merged")])
    _one_line_error(code, capsys.readouterr().err, "--output", "is not writable")


def test_a_merge_on_a_full_disk_leaves_no_empty_folder(parts, tmp_path, capsys, monkeypatch):
    import st_magnitude._trust.write as write

    def full_disk(obj, fh, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(write.json, "dump", full_disk)
    code, err = _merge(parts, tmp_path, capsys)
    _one_line_error(code, err, "No space left on device")
    assert not (tmp_path / "box" / "out").exists() and not (tmp_path / "box" / "results").exists()


def test_a_dry_run_with_results_is_refused_before_running(stub, tmp_path, capsys):
    argv = ["replicate", "001", "--dry-run", "--data-root", str(tmp_path), "--output", "o", "--device", "cpu"]
    _one_line_error(main([*argv, "--results", "res"]), capsys.readouterr().err, "a dry run writes no summary")
    assert SEEDS_RUN == [] and not (tmp_path / "o").exists() and not (tmp_path / "res").exists()
    assert main(argv) == 0 and SEEDS_RUN == [0, 1, 2, 3, 4]


# -- one process per seed ------------------------------------------------------------------------------------------
def test_a_second_run_of_the_same_seeds_is_refused_while_other_seeds_run_beside(stub, tmp_path, capsys):
    out = tmp_path / "out"
    with runner.seed_locks(out, "001-cpu", [1]):  # a live run of seed 1 (this process holds its lock)
        argv = [
            "replicate",
            "001",
            "--seeds",
            "2",
            "--data-root",
            str(tmp_path),
            "--output",
            str(out),
            "--device",
            "cpu",
        ]
        code = main(argv)
        _one_line_error(code, capsys.readouterr().err, "seed 1 of run 001-cpu", "is in use by pid")
        assert SEEDS_RUN == []
        argv[3] = "1"
        assert main(argv) == 0 and SEEDS_RUN == [0]  # seed 0 alone runs beside it
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # locks released and removed


def test_a_hard_linked_seed_lock_is_refused_and_the_other_file_untouched(stub, tmp_path, capsys):
    """Before, the seed lock's record was written into the linked file, even though the run then failed."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.link(victim, out / ".001-cpu-seed1.lock")
    argv = ["replicate", "001", "--seeds", "2", "--data-root", str(tmp_path), "--output", str(out), "--device", "cpu"]
    _one_line_error(main(argv), capsys.readouterr().err, str(out / ".001-cpu-seed1.lock"), "has 2 names")
    assert SEEDS_RUN == [] and victim.read_text() == "precious"


def test_parts_started_in_the_same_second_write_files_of_their_own(stub, tmp_path, monkeypatch):
    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 1, 1, 10, 0, 0, tzinfo=timezone.utc)

    monkeypatch.setattr(runner, "datetime", Frozen)
    out = tmp_path / "out"
    a = runner.run_claim("001", seeds=1, first_seed=0, out=out, **stub)["full_result"]
    b = runner.run_claim("001", seeds=1, first_seed=1, out=out, **stub)["full_result"]
    assert a != b and sorted(os.listdir(out)) == [Path(a).name, Path(b).name]
    assert [json.loads(Path(p).read_text())["seeds"][0]["seed"] for p in (a, b)] == [0, 1]


@pytest.mark.parametrize(
    "recorded",
    [
        "st-magnitude replicate 003 --profile cpu --seeds 1 -o /scratch/a --data-root /data",
        "st-magnitude replicate 003 --profile cpu --seeds 1 --output=/scratch/a --data-root=/data",
        "st-magnitude replicate 003 --profile cpu --seeds 1 -o/scratch/a",
        # a part recorded before the CLI had one vocabulary
        "st-magnitude replicate 003 --profile cpu --seeds 1 --out /scratch/a --data /data",
    ],
)
def test_a_public_command_names_no_folder_of_the_machine(recorded):
    from st_magnitude.lab.replication.runner import public_command

    assert public_command(recorded) == "st-magnitude replicate 003 --profile cpu --seeds 1"
