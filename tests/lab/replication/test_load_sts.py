"""STS-B files are read through the trust boundary: one error naming the file and line, never a traceback."""

from __future__ import annotations

import pytest

from st_magnitude._trust import InputFileError
from st_magnitude.lab.engine.data import load_sts

ROW = "main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\tA man plays a guitar.\tA man plays the guitar{i}.\n"


def _write(folder, rows: str | bytes) -> None:
    path = folder / "sts-test.csv"
    path.write_bytes(rows if isinstance(rows, bytes) else rows.encode())


def test_rows_are_read_and_scores_scaled_to_one(tmp_path):
    _write(tmp_path, "".join(ROW.format(i=i, score=s) for i, s in enumerate(["5.000", "0.0", "2.5"])) + "short\trow\n")
    data = load_sts(tmp_path, "test")
    assert data["score"] == [1.0, 0.0, 0.5]
    assert data["sentence2"][2] == "A man plays the guitar2."


@pytest.mark.parametrize("score", ["abc", "nan", "inf", "-1", "5.5"])
def test_a_score_outside_the_scale_names_its_line(tmp_path, score):
    _write(tmp_path, ROW.format(i=0, score="4.0") + ROW.format(i=1, score=score))
    with pytest.raises(InputFileError, match=r"sts-test\.csv:2: score .* is not a number in \[0, 5\]"):
        load_sts(tmp_path, "test")


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path):
    _write(tmp_path, ROW.format(i=0, score="4.0").encode() + b"x\t\xff\n")
    with pytest.raises(InputFileError, match=r"sts-test\.csv:2: byte 0xff"):
        load_sts(tmp_path, "test")


def test_a_unicode_line_separator_inside_a_sentence_keeps_the_row(tmp_path):
    _write(tmp_path, ROW.format(i=0, score="4.0").replace("guitar0", "guitar\u2028zero"))
    assert load_sts(tmp_path, "test")["sentence2"] == ["A man plays the guitar\u2028zero."]
