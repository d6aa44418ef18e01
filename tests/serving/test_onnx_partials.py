"""A killed export leaves its staging folder (``.OUT.XXXXXXXX.partial``) beside the output; the next export to the
same output removes it (its owner is gone: the flock it held on the folder was released by the kernel), and leaves a
staging folder alone while its export runs, and the partials of other outputs. Only a stage the package marked
when it made it counts (``tests/test_stale_stages.py`` tries the folders named like one that do not).

Before, every killed export left its ``.partial`` folder for good.
"""

from __future__ import annotations

import fcntl
import os

import pytest
from conftest import build_tiny_st
from helpers.onnx_marks import ONNX_MARKS
from helpers.stages import killed_stage

from st_magnitude._trust.stages import MARKER

pytestmark = ONNX_MARKS  # the export needs onnx (pip install 'st-magnitude[deploy]')


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    return build_tiny_st(tiny_bert_dir)


def _partial(folder, name: str):
    stage = folder / name
    (stage / "sub").mkdir(parents=True)
    (stage / "query.onnx").write_bytes(b"half a graph")
    return stage


def test_the_next_export_removes_what_a_killed_export_left(model, tmp_path):
    from st_magnitude.serving.onnx import export_onnx

    stale = killed_stage(tmp_path / "out", suffix=".partial", run="export")  # a killed export of out
    other = _partial(tmp_path, ".out.y.k1ll3d_9.partial")  # of the output out.y
    live = _partial(tmp_path, ".out.runn1ng0.partial")  # an export of out still running: it holds the flock
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        export_onnx(model, tmp_path / "out", optimize=False)
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "query.onnx").is_file()
    assert not stale.exists()
    assert other.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.runn1ng0.partial", ".out.y.k1ll3d_9.partial", "out"]
    assert not (tmp_path / "out" / MARKER).exists()  # the marker is no file of the export


def test_a_symlink_named_like_a_partial_is_not_followed(model, tmp_path):
    from st_magnitude.serving.onnx import export_onnx

    victim = _partial(tmp_path, "victim")
    (tmp_path / ".out.s1mlink0.partial").symlink_to(victim)
    export_onnx(model, tmp_path / "out", optimize=False)
    assert (victim / "query.onnx").read_bytes() == b"half a graph"
