"""``score_calibration.json`` is read through the trust boundary: a file that does not make a monotone map into
[0, 1] is refused with an ``InputFileError`` naming the file and the key, never accepted, never a KeyError.

The hostile cases are the ones a careless or hostile writer produces (unsorted thresholds, P > 1, a decreasing map,
Platt ``a`` negative or 1e308, wrong types, missing keys); a property-based test mutates a valid file at random and
checks that each mutation either loads to a valid map or is refused with ``InputFileError``, never another exception.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_magnitude._trust import InputFileError
from st_magnitude.evaluation.calibration import CALIBRATION_FILENAME, ScoreCalibration, fit_calibration

ISOTONIC = {
    "method": "isotonic",
    "x": [0.1, 0.3, 0.5, 0.8],
    "y": [0.0, 0.2, 0.6, 1.0],
    "a": 0.0,
    "b": 0.0,
    "meta": {"similarity_fn_name": "cosine", "n_positives": 3},
}
PLATT = {"method": "platt", "x": [], "y": [], "a": 12.5, "b": -4.0, "meta": {"similarity_fn_name": "dot"}}
#: scores a map is evaluated on: inside, at and outside its thresholds, and the extremes of float64
GRID = np.sort(np.r_[np.linspace(-2, 2, 81), ISOTONIC["x"], -1e308, 1e308, -1e300, 1e300, 0.0])


def _write(tmp_path, obj) -> object:
    path = tmp_path / CALIBRATION_FILENAME
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return path


def _assert_valid_map(cal: ScoreCalibration) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid-value RuntimeWarning either
        p = np.asarray(cal(GRID))
    assert np.all(np.isfinite(p)) and p.min() >= 0.0 and p.max() <= 1.0, p
    # monotone (to the rounding of one interpolation step)
    assert np.all(np.diff(p) >= -1e-12), p


@pytest.mark.parametrize("valid", [ISOTONIC, PLATT], ids=["isotonic", "platt"])
def test_a_valid_file_loads_to_a_valid_map(tmp_path, valid):
    cal = ScoreCalibration.load(_write(tmp_path, valid))
    _assert_valid_map(cal)
    assert cal.meta["similarity_fn_name"] == valid["meta"]["similarity_fn_name"]


HOSTILE = {
    "unsorted thresholds": ({**ISOTONIC, "x": [0.5, 0.1, 0.3, 0.8]}, "'x'.*increase strictly"),
    "repeated threshold": ({**ISOTONIC, "x": [0.1, 0.3, 0.3, 0.8]}, "'x'.*increase strictly"),
    "P > 1": ({**ISOTONIC, "y": [0.0, 0.2, 0.6, 1.5]}, r"'y'.*item 3 must be a probability in \[0, 1\]"),
    "P < 0": ({**ISOTONIC, "y": [-0.1, 0.2, 0.6, 1.0]}, r"'y'.*probability"),
    "decreasing map": ({**ISOTONIC, "y": [1.0, 0.6, 0.2, 0.0]}, "'y'.*must not decrease"),
    "lengths differ": ({**ISOTONIC, "y": [0.0, 1.0]}, "'x'.*one non-zero length, got 4 and 2"),
    "no thresholds": ({**ISOTONIC, "x": [], "y": []}, "'x'.*non-zero length"),
    "huge threshold": ({**ISOTONIC, "x": [-1e308, 0.3, 0.5, 1e308]}, "'x'.*within"),
    "thresholds too close": ({**ISOTONIC, "x": [0.0, 5e-324, 0.5, 0.8]}, "'x'.*too close: the map's slope overflows"),
    "huge integer": ({**PLATT, "b": 10**400}, "'b': must be a finite number"),
    "string threshold": ({**ISOTONIC, "x": [0.1, "0.3", 0.5, 0.8]}, "'x'.*item 1 must be a finite number"),
    "boolean probability": ({**ISOTONIC, "y": [False, 0.2, 0.6, True]}, "'y'.*item 0"),
    "x not a list": ({**ISOTONIC, "x": 0.5}, "'x': must be a list"),
    "isotonic without y": ({k: v for k, v in ISOTONIC.items() if k != "y"}, "'y': is missing"),
    "platt a huge": ({**PLATT, "a": 1e308}, None),  # allowed: σ saturates to 0 / 1 without overflow
    "platt a negative (decreasing)": ({**PLATT, "a": -3.0}, "'a'.*must be >= 0"),
    "platt a string": ({**PLATT, "a": "nan"}, "'a': must be a number"),
    "platt without a": ({k: v for k, v in PLATT.items() if k != "a"}, "'a': is missing"),
    "platt with thresholds": ({**PLATT, "x": [0.1], "y": [0.5]}, "'x'.*empty for a Platt map"),
    "unknown method": ({**ISOTONIC, "method": "beta"}, r"'method': must be one of \['isotonic', 'platt'\]"),
    "method missing": ({k: v for k, v in ISOTONIC.items() if k != "method"}, "'method': is missing"),
    "unknown key": ({**ISOTONIC, "X": [1.0]}, "'X': is not a key this file may have"),
    "meta not an object": ({**ISOTONIC, "meta": [1, 2]}, "'meta': must be an object"),
    "similarity name a number": ({**ISOTONIC, "meta": {"similarity_fn_name": 3}}, "'meta.similarity_fn_name'"),
    "a list, not an object": ([ISOTONIC], "must hold a JSON object"),
    "NaN": (json.dumps(ISOTONIC).replace("0.2", "NaN"), "NaN is not a number JSON allows"),
    "Infinity": (json.dumps(PLATT).replace("12.5", "Infinity"), "Infinity is not a number JSON allows"),
    "truncated": (json.dumps(ISOTONIC)[:40], "not valid JSON"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_is_refused_naming_file_and_key(tmp_path, case):
    obj, match = HOSTILE[case]
    path = _write(tmp_path, obj)
    if match is None:
        _assert_valid_map(ScoreCalibration.load(path))
        return
    with pytest.raises(InputFileError, match=match) as err:
        ScoreCalibration.load(path)
    assert str(path) in str(err.value)


def test_a_map_built_in_code_is_checked_the_same_way():
    with pytest.raises(ValueError, match="y: must not decrease"):
        ScoreCalibration("isotonic", [0.0, 1.0], [0.9, 0.1])
    with pytest.raises(ValueError, match="a: must be a finite number"):
        ScoreCalibration("platt", a=float("nan"))
    with pytest.raises(ValueError, match="Platt scaling fitted a decreasing map"):
        fit_calibration([0.1, 0.2, 0.15], [0.8, 0.9, 0.7, 0.85], "platt")  # positives score lower


# --- random mutations of a valid file -------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 1.0, -1.0, 1e308, -1e308, 5e-324, 1e300, 0.5])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
KEYS = ["method", "x", "y", "a", "b", "meta", "extra"]


def _mutate(base: dict, data: st.DataObject) -> object:
    doc = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 4), label="n mutations")):
        kind = data.draw(st.sampled_from(["set", "delete", "item", "swap", "method", "whole"]), label="kind")
        if kind == "whole":
            return data.draw(JSON_VALUES, label="whole file")
        if not isinstance(doc, dict):
            break
        key = data.draw(st.sampled_from(KEYS), label="key")
        if kind == "set":
            doc[key] = data.draw(JSON_VALUES, label="value")
        elif kind == "delete":
            doc.pop(key, None)
        elif kind == "method":
            doc["method"] = data.draw(st.sampled_from(["isotonic", "platt", "Platt", ""]), label="method")
        elif isinstance(doc.get(key), list) and doc[key]:
            items = doc[key]
            i = data.draw(st.integers(0, len(items) - 1), label="index")
            if kind == "item":
                items[i] = data.draw(JSON_VALUES, label="item")
            else:
                j = data.draw(st.integers(0, len(items) - 1), label="other index")
                items[i], items[j] = items[j], items[i]
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from([ISOTONIC, PLATT]), data=st.data())
def test_random_mutations_load_to_a_valid_map_or_are_refused(tmp_path, base, data):
    doc = _mutate(base, data)
    try:
        text = json.dumps(doc)
    except (ValueError, OverflowError):  # not writable as JSON (e.g. a huge int as float): nothing to read
        return
    path = _write(tmp_path, text)
    try:
        cal = ScoreCalibration.load(path)
    except InputFileError as err:
        assert str(path) in str(err)
        return
    _assert_valid_map(cal)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(json.dumps(ISOTONIC))), junk=st.binary(max_size=6))
def test_truncated_or_corrupted_bytes_are_refused_or_load_valid(tmp_path, cut, junk):
    raw = json.dumps(ISOTONIC).encode()
    path = tmp_path / CALIBRATION_FILENAME
    path.write_bytes(raw[:cut] + junk + raw[cut + len(junk) :])
    try:
        cal = ScoreCalibration.load(path)
    except InputFileError:
        return
    _assert_valid_map(cal)
