"""A calibration report whose ECE says nothing is flagged, and saving the map leaves no temporary file behind.

Constant scores give a one-value map whose ECE on the fitting split is 0 by construction; held-out queries that are
the fitting queries give an in-sample ECE. Both warn (``UninformativeCalibrationWarning``) saying why. A full disk
while writing ``score_calibration.json`` leaves neither a half file nor ``score_calibration.json.tmp``.
"""

from __future__ import annotations

import errno
import io
import warnings

import numpy as np
import pytest
from helpers.toy_beir import write_toy_beir

from st_magnitude._warnings import UninformativeCalibrationWarning
from st_magnitude.evaluation._retrieval import AUCPools
from st_magnitude.evaluation.calibration import (
    CALIBRATION_FILENAME,
    ScoreCalibration,
    calibration_report,
    check_held_out,
    fit_calibration,
)


def _pools(pos, neg) -> AUCPools:
    pos, neg = np.asarray(pos, dtype=float), np.asarray(neg, dtype=float)
    return AUCPools(pos, neg, np.arange(len(pos)) % 3, np.arange(len(neg)) % 3)


def test_constant_scores_warn_that_ece_says_nothing():
    pools = _pools([0.7] * 6, [0.7] * 30)
    cal = fit_calibration(pools.positives, pools.negatives)
    with pytest.warns(UninformativeCalibrationWarning, match="all 36 pooled scores are equal") as rec:
        report = calibration_report(cal, pools)
    assert report["ece_calibrated"] == pytest.approx(0.0, abs=1e-12)  # the number the warning is about
    assert "says nothing" in str(rec[0].message)


def test_spread_scores_do_not_warn():
    rng = np.random.default_rng(0)
    pools = _pools(rng.normal(0.6, 0.1, 40), rng.normal(0.3, 0.1, 200))
    cal = fit_calibration(pools.positives, pools.negatives)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UninformativeCalibrationWarning)
        calibration_report(cal, pools)


def test_held_out_queries_that_are_the_fitting_queries_warn():
    fit = {"q1": "effect of diet", "q2": "heart risk"}
    with pytest.warns(UninformativeCalibrationWarning, match="2 of the 2 held-out queries .* in-sample"):
        assert check_held_out(fit, {"t1": "heart risk", "t2": "effect of diet"}) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UninformativeCalibrationWarning)
        assert check_held_out(fit, {"t1": "sleep memory"}) == 0


def test_cli_warns_when_eval_split_repeats_the_fitting_queries(saved_tiny, tmp_path):
    from st_magnitude.cli import main

    toy = tmp_path / "toy"
    for split in ("train", "test"):  # the same queries judged in both splits
        write_toy_beir(toy, n_docs=16, n_queries=6, split=split)
    with pytest.warns(UninformativeCalibrationWarning, match="6 of the 6 held-out queries"):
        assert main(["calibrate", str(saved_tiny), "--data", str(toy), "--n-negatives", "5"]) == 0


class _FullDisk:
    """A file whose writes stop after a few bytes with ENOSPC, as on a full disk."""

    def __init__(self, real):
        self.real = real

    def write(self, text):
        self.real.write(text[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.real.close()


def test_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    cal = ScoreCalibration("isotonic", [0.1, 0.9], [0.0, 1.0])
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / CALIBRATION_FILENAME).write_text("previous", encoding="utf-8")
    real_open = io.open

    def full_disk_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return _FullDisk(handle) if "w" in mode else handle

    monkeypatch.setattr(io, "open", full_disk_open)
    with pytest.raises(OSError, match="No space left"):
        cal.save(folder)
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == [CALIBRATION_FILENAME]
    assert (folder / CALIBRATION_FILENAME).read_text(encoding="utf-8") == "previous"
