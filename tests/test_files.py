"""``write_json_atomic``: the one writer of result JSON (compare, replicate, evaluate -o)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from st_magnitude._trust.write import write_json_atomic


def test_writes_creates_parents_and_numpy_floats(tmp_path):
    path = tmp_path / "a" / "b" / "out.json"
    write_json_atomic(path, {"x": np.float32(0.5), "y": [1, 2]}, indent=1)
    assert json.loads(path.read_text()) == {"x": 0.5, "y": [1, 2]}
    assert path.read_text().startswith('{\n "x"')  # indent honoured (committed replication results use 1)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"old": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"new": object()})  # not serialisable: fails half-way through the dump
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
