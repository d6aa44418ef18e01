"""Files ``st-magnitude scaling`` reads and writes: a ``--law`` JSON is checked key by key (before: a string or
a missing key reached the arithmetic as a ``TypeError`` / ``KeyError`` traceback), a CSV that is not UTF-8 is named
with its line, and ``fit -o DIR`` writes an undefined R² to ``fits.json`` as ``null`` (before: ``NaN``, which no JSON
reader takes)."""

from __future__ import annotations

import json

import pytest

from st_magnitude._trust import read_json
from st_magnitude.cli import main

LAW = {"A": 85.5, "B": 2.6, "alpha": 1.3, "beta": 0.96, "delta": 0.3}


@pytest.mark.parametrize(
    ("law", "expected"),
    [
        ({**LAW, "A": "85"}, "key 'A': must be a number"),
        ({k: v for k, v in LAW.items() if k != "beta"}, "key 'beta': is missing"),
        ({**LAW, "alpha": 0}, "key 'alpha': must be > 0"),
        ({**LAW, "delta": -1}, "key 'delta': must be ≥ 0"),
        ({"BERT": {**LAW, "B": None}}, "key 'BERT.B': must be a number"),
        ([1, 2], "must hold a JSON object"),
    ],
)
def test_a_law_file_is_checked_key_by_key(tmp_path, capsys, law, expected):
    path = tmp_path / "law.json"
    path.write_text(json.dumps(law))
    assert main(["scaling", "choose", "--law", str(path), "--budget", "1e10"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and expected in err and "Traceback" not in err, err


def test_a_law_file_and_the_fit_output_are_read(tmp_path, capsys):
    path = tmp_path / "law.json"
    path.write_text(json.dumps({"all": {**LAW, "r2": None, "ci": {}}}))
    assert main(["scaling", "choose", "--law", str(path), "--budget", "1e10"]) == 0


def test_a_csv_that_is_not_utf8_is_named_with_its_line(tmp_path, capsys):
    path = tmp_path / "s.csv"
    path.write_bytes(b"dim,contrastive_entropy\n32,1.0\n64,\xff\n")
    assert main(["scaling", "fit", str(path)]) == 2
    assert f"{path}:3: byte 0xff is not UTF-8" in capsys.readouterr().err


def test_fit_writes_an_undefined_r2_as_null(tmp_path, capsys):
    path, out = tmp_path / "s.csv", tmp_path / "fits"
    path.write_text("dim,contrastive_entropy\n" + "".join(f"{d},2.0\n" for d in (32, 64, 128, 256)))
    assert main(["scaling", "fit", str(path), "-o", str(out)]) == 0, capsys.readouterr().err
    fits = read_json(out / "fits.json")  # NaN would be refused here
    assert fits and all(fit["r2"] is None for fit in fits.values()), fits
