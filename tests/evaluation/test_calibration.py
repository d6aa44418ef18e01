"""Calibrated scores: Brier against scikit-learn, ECE against a hand-computed case, the saved map against
scikit-learn's own predictions, and ``st-magnitude calibrate`` end to end on a toy BEIR folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.toy_beir import write_toy_beir
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss

from st_magnitude._warnings import UninformativeCalibrationWarning
from st_magnitude.evaluation.calibration import (
    CALIBRATION_FILENAME,
    ScoreCalibration,
    brier_score,
    calibrated_similarity,
    calibration_pools,
    calibration_report,
    expected_calibration_error,
    fit_calibration,
)


def test_brier_equals_sklearn():
    rng = np.random.default_rng(0)
    p, y = rng.random(200), rng.integers(0, 2, 200)
    assert brier_score(p, y) == pytest.approx(brier_score_loss(y, p), rel=1e-12)


def test_ece_hand_computed():
    # 2 bins: [0, .5] holds p = .1, .2 (labels 0, 1): |.5 − .15| · 2/5 = .14;
    # (.5, 1] holds p = .7, .8, .95 (labels 1, 0, 1): |2/3 − .816667| · 3/5 = .09  →  ECE = .23
    p, y = [0.1, 0.2, 0.7, 0.8, 0.95], [0, 1, 1, 0, 1]
    assert expected_calibration_error(p, y, n_bins=2) == pytest.approx(0.23, abs=1e-12)
    # a bin edge belongs to the lower bin, 0 to the first: bin 0 holds p = 0, .5 (labels 0, 1): |.5 − .25| · 2/3
    assert expected_calibration_error([0.0, 0.5, 1.0], [0, 1, 1], n_bins=2) == pytest.approx(1 / 6, abs=1e-12)
    assert expected_calibration_error(p, y, n_bins=1) == pytest.approx(abs(np.mean(p) - np.mean(y)), abs=1e-12)
    with pytest.raises(ValueError, match="positive int"):
        expected_calibration_error(p, y, n_bins=0)
    with pytest.raises(ValueError, match=r"lie in \[0, 1\]"):
        expected_calibration_error([1.5], [1])
    with pytest.raises(ValueError, match="labels must be 0"):
        brier_score([0.5], [2])


def _scores(seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(0.6, 0.15, 80), rng.normal(0.3, 0.15, 400)


def test_isotonic_map_equals_sklearn_predict_and_round_trips(tmp_path):
    pos, neg = _scores()
    cal = fit_calibration(pos, neg, "isotonic", meta={"similarity_fn_name": "cosine"})
    s = np.r_[pos, neg]
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    reference = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, y)
    new = np.linspace(-1.0, 1.5, 301)  # inside and outside the fitted range
    np.testing.assert_allclose(cal(new), reference.predict(new), rtol=0, atol=1e-12)
    assert np.all(np.diff(cal(new)) >= 0)  # monotone
    # saved with the model and read back
    path = cal.save(tmp_path)
    assert path.name == CALIBRATION_FILENAME
    back = ScoreCalibration.load(tmp_path)
    np.testing.assert_array_equal(back(new), cal(new))
    assert back.meta["n_positives"] == 80 and back.meta["similarity_fn_name"] == "cosine"


def test_platt_map_equals_sklearn_logistic_regression():
    pos, neg = _scores(1)
    cal = fit_calibration(pos, neg, "platt")
    s = np.r_[pos, neg].reshape(-1, 1)
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    reference = LogisticRegression(C=1e6, max_iter=1000).fit(s, y)
    new = np.linspace(-1, 1, 41)
    np.testing.assert_allclose(cal(new), reference.predict_proba(new.reshape(-1, 1))[:, 1], rtol=1e-9, atol=1e-12)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"method must be one of \['isotonic', 'platt'\], got 'sigmoid'"):
        fit_calibration([0.5], [0.1], "sigmoid")
    with pytest.raises(ValueError, match="positive and negative scores, got 0 and 1"):
        fit_calibration([], [0.1])
    with pytest.raises(ValueError, match="NaN or inf"):
        fit_calibration([np.nan], [0.1])
    with pytest.raises(FileNotFoundError, match="st-magnitude calibrate"):
        ScoreCalibration.load("/nonexistent-folder")


def test_report_and_calibrated_similarity_on_a_tiny_model(tiny_model, tmp_path):
    from st_magnitude.data.beir import load_beir

    data = load_beir(write_toy_beir(tmp_path / "toy", n_docs=16, n_queries=6))
    pools = calibration_pools(tiny_model, data.queries, data.corpus, data.qrels, n_negatives=5)
    assert len(pools.positives) == 12 and len(pools.negatives) == 30
    cal = fit_calibration(pools.positives, pools.negatives, meta={"similarity_fn_name": "cosine"})
    report = calibration_report(cal, pools)
    s = np.r_[pools.positives, pools.negatives]
    y = np.r_[np.ones(12), np.zeros(30)]
    assert report["brier_raw"] == pytest.approx(brier_score_loss(y, np.clip(s, 0, 1)))
    assert report["brier_calibrated"] == pytest.approx(brier_score_loss(y, cal(s)))
    assert report["brier_calibrated"] <= report["brier_raw"]  # in-sample, isotonic minimises the squared error
    assert report["base_rate"] == pytest.approx(12 / 42)
    # the helper: probabilities of model.similarity, from the map object or the folder it was saved to
    q = tiny_model.encode_query(["effect of diet vitamin fiber"], convert_to_tensor=True)
    d = tiny_model.encode_document(["diet vitamin fiber study", "fish egg meat"], convert_to_tensor=True)
    probs = calibrated_similarity(tiny_model, q, d, cal)
    expected = cal(tiny_model.similarity(q, d).numpy())
    np.testing.assert_allclose(probs.numpy(), expected, rtol=1e-6)
    cal.save(tmp_path / "m")
    torch.testing.assert_close(calibrated_similarity(tiny_model, q, d, tmp_path / "m"), probs)
    cal.meta["similarity_fn_name"] = "dot"
    with pytest.raises(ValueError, match="fitted on scores of similarity 'dot', but the model serves 'cosine'"):
        calibrated_similarity(tiny_model, q, d, cal)


def test_cli_calibrate_saves_the_map_into_the_model_folder(saved_tiny, tmp_path, capsys):
    from st_magnitude.cli import main

    toy = tmp_path / "toy"
    for split in ("train", "test"):
        write_toy_beir(toy, n_docs=16, n_queries=6, split=split)
    with pytest.warns(UninformativeCalibrationWarning, match="held-out queries"):  # the toy splits share queries
        code = main(["calibrate", str(saved_tiny), "--data", str(toy), "--n-negatives", "5"])
    assert code == 0
    assert (saved_tiny / CALIBRATION_FILENAME).is_file()
    rows = json.loads((saved_tiny / "calibration_report.json").read_text())  # the report rows beside the map
    assert [r["split"] for r in rows] == ["train", "test"]
    assert {"pooled_auc", "ece_raw", "ece_calibrated", "brier_raw", "brier_calibrated"} <= set(rows[0])
    assert "ECE cal" in capsys.readouterr().out
    assert main(["calibrate", str(saved_tiny), "--data", str(toy), "--method", "beta"]) == 2
    assert main(["calibrate", str(saved_tiny), "--data", str(toy), "--eval-split", "train"]) == 2
    assert "report calibration on held-out queries" in capsys.readouterr().err
