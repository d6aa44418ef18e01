"""Two runs to one output, and a run killed mid-way: a failed run takes back only the folders it made itself.

The cleanup rule (:func:`st_magnitude._trust.outputs.removed_on_failure`) makes the output's missing folders itself
before the command runs and records their ``(st_dev, st_ino)``; on failure it removes a folder only while it is
still the one this run made (or one this run renamed into place from its own staging folder).

Before, it decided at the start which folders the run would create: two ``export -o race`` started together, the
first wrote its export (exit 0), the second failed ("race is not empty") and its cleanup removed ``race`` -- the
winner's finished export.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.onnx_marks import ONNX_MARKS

from st_magnitude._trust.outputs import removed_on_failure
from st_magnitude._trust.stages import MARKER

REPO = Path(__file__).resolve().parents[2]


def _winner_replaces(out: Path) -> None:
    """What another run does that finishes first: its own staged folder renamed onto the (empty) output."""
    stage = out.parent / ".winner-stage"
    stage.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(stage)
    (stage / "model.onnx").write_text("the winner's export")
    if out.exists():  # the rule made it for this run
        os.rmdir(out)
    os.rename(stage, out)


@pytest.mark.parametrize("failure", [ValueError("race is not empty"), KeyboardInterrupt()], ids=["error", "Ctrl-C"])
def test_a_failed_run_keeps_the_output_another_run_put_in_place(tmp_path, failure, caplog):
    out = tmp_path / "new" / "race"
    with pytest.raises(type(failure)), removed_on_failure(out):
        _winner_replaces(out)
        raise failure
    assert (out / "model.onnx").read_text() == "the winner's export"
    assert any(f"left {out} alone" in r.getMessage() for r in caplog.records)


def test_a_failed_run_keeps_a_folder_another_run_made_first(tmp_path):
    out = tmp_path / "race"
    out.mkdir()  # the other run's mkdir won: this run never made it
    os.rmdir(out)

    made_by_other = []

    def other_run_first(path):
        os.mkdir(path)
        made_by_other.append(path)
        raise FileExistsError(path)

    import st_magnitude._trust.outputs as outputs

    real = outputs.make_dir
    outputs.make_dir = other_run_first
    try:
        with pytest.raises(ValueError), removed_on_failure(out):
            (out / "result.json").write_text("the other run's")
            raise ValueError("boom")
    finally:
        outputs.make_dir = real
    assert made_by_other == [out] and (out / "result.json").read_text() == "the other run's"


def test_a_made_folder_replaced_by_a_symlink_is_not_followed(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    out = tmp_path / "out"
    with pytest.raises(ValueError), removed_on_failure(out):
        if out.exists():
            os.rmdir(out)  # the folder the rule made, replaced by a link to a folder the user has
        out.symlink_to(keep)
        raise ValueError("boom")
    assert (keep / "notes.txt").read_text() == "precious" and out.is_symlink()


def test_a_successful_run_takes_back_a_folder_it_made_and_never_used(tmp_path):
    with removed_on_failure(tmp_path / "a" / "b"):
        assert (tmp_path / "a" / "b").is_dir()
    assert list(tmp_path.iterdir()) == []


# -- real processes -----------------------------------------------------------------------------------------------
#: a run that writes ``race`` as export does (new or empty at the start, a staging folder renamed onto it), under
#: the cleanup rule; started together (a barrier file), the one told to wait finds ``race`` taken and fails
_RUN = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from st_magnitude._trust.outputs import removed_on_failure
    from st_magnitude._trust.owned import remove_tree
    from st_magnitude._trust.stages import held_stage, unmark

    name, delay = sys.argv[1], float(sys.argv[2])
    out = Path("race").absolute()
    with removed_on_failure(out):
        print("started", flush=True)
        while not os.path.exists("go"):
            time.sleep(0.01)
        if out.exists() and any(out.iterdir()):
            raise SystemExit("race is not empty (at the start)")
        with held_stage(out, suffix=".partial", run="export") as stage:
            try:
                (stage / "model.onnx").write_text(name)
                time.sleep(delay)
                unmark(stage)
                if out.exists() and any(out.iterdir()):
                    raise ValueError("race is not empty")
                os.replace(stage, out)
            except BaseException:
                remove_tree(stage)
                raise
    """
)


@pytest.mark.parametrize("first", ["a", "b"])
def test_two_processes_to_one_output_the_loser_leaves_the_winners_output(tmp_path, first):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    delays = {"a": "0" if first == "a" else "1.5", "b": "0" if first == "b" else "1.5"}
    runs = {
        name: subprocess.Popen(
            [sys.executable, "-c", _RUN, name, delays[name]],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for name in ("a", "b")
    }
    for proc in runs.values():  # both past the start, both saw race missing
        assert proc.stdout.readline().strip() == "started"
    (tmp_path / "go").touch()
    codes = {name: proc.wait(timeout=30) for name, proc in runs.items()}
    loser = "b" if first == "a" else "a"
    assert codes == {first: 0, loser: 1}, {n: p.stderr.read() for n, p in runs.items()}
    assert "race is not empty" in runs[loser].stderr.read()
    assert (tmp_path / "race" / "model.onnx").read_text() == first  # the winner's output, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "race"]  # and no stage left


ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _export(model: Path, out: str, cwd: Path) -> subprocess.Popen:
    cli = [sys.executable, "-m", "st_magnitude.cli", "export", str(model), "-o", out, "--no-optimize"]
    return subprocess.Popen(cli, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.heavy  # two CLI exports at once: 25 s at load 3 on 2 cores, a minute at load 10 (the race on the
# rule itself, with real processes, runs in the default suite above)
@ONNX_MARKS[-1]
def test_two_exports_to_one_output_the_winners_export_survives_the_losers_failure(saved_tiny, tmp_path):
    runs = [_export(saved_tiny, "race", tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=240), p.stderr.read()) for p in runs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "not empty" in loser or "in use" in loser or "exists" in loser, loser
    race = tmp_path / "race"
    assert (race / "onnx_config.json").is_file() or any(race.glob("*.json")), sorted(os.listdir(race))
    assert not (race / MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".race")) == []  # no stage left


_KILLED_MID_EXPORT = textwrap.dedent(
    """
    import sys, time
    import st_magnitude.serving.onnx as onnx

    def stall(*args, **kwargs):  # inside the staging folder, mid-way
        print("staged", flush=True)
        time.sleep(120)

    onnx._trace = stall
    from st_magnitude.cli import main
    main(["export", sys.argv[1], "-o", "race", "--no-optimize"])
    """
)


@ONNX_MARKS[-1]  # two CLI processes importing torch, one stopped mid-way: about 20 s
def test_an_export_killed_mid_way_then_a_second_export_to_the_same_output(saved_tiny, tmp_path):
    killed = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_EXPORT, str(saved_tiny)], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert killed.stdout.readline().strip() == "staged"
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    (stage,) = tmp_path.glob(".race.*.partial")
    assert (stage / MARKER).is_file() and (tmp_path / "race").is_dir()  # what SIGKILL leaves
    second = _export(saved_tiny, "race", tmp_path)
    code, err = second.wait(timeout=240), second.stderr.read()
    assert code == 0, err
    assert f"removed {stage}, left by a killed export" in err
    assert not stage.exists() and not (tmp_path / "race" / MARKER).exists()
    assert any((tmp_path / "race").glob("*.onnx"))
