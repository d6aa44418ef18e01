"""Random mutations of a saved model folder never delete, write outside the output, or end in a traceback.

A property test over the model-folder reader as the commands use it: hypothesis edits one key of one ``modules.json``
entry (or a module's config file) of a small saved model to a hostile or careless value — paths such as ``.``,
``..``, ``/tmp``, a kept module's folder, a name with a NUL; types such as ``5``, ``None``, a list, a foreign class
path — and runs ``strip -o`` and in-place ``strip`` through the CLI. Each run must end with exit code 0 or with one
line and exit code 2 (never another exception); the folder beside the model is never touched; a refused in-place
strip leaves the model byte for byte; a refused ``-o`` leaves no output folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from st_magnitude.cli import main

HOSTILE_TEXT = st.sampled_from(
    [".", "./", "..", "../victim", "/tmp", "1_Pooling", "0_Transformer", "2_Normalize", "", "a\x00b", "x/../..",
     "sentence_transformers.base.modules.normalize.Normalize", "st_magnitude.cli.__main__.Evil", "os.system",
     "sentence_transformers.base.model.pickle", "\ud800"]
)  # fmt: skip
VALUES = st.one_of(
    HOSTILE_TEXT,
    st.text(max_size=12),
    st.integers(-3, 10**6),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
KEYS = st.sampled_from(["path", "type", "idx", "name", "kwargs"])


@pytest.fixture(scope="module")
def saved(tiny_bert_dir, tmp_path_factory) -> Path:
    from conftest import build_tiny_st

    folder = tmp_path_factory.mktemp("saved") / "plain"
    build_tiny_st(tiny_bert_dir).save(str(folder))  # Transformer, Pooling, Normalize
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=True), encoding="utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=st.integers(0, 2), key=KEYS, value=VALUES, in_config=st.booleans())
def test_a_mutated_model_folder_is_stripped_or_refused_in_one_line(
    saved, tmp_path_factory, entry, key, value, in_config
):
    holder = tmp_path_factory.mktemp("holder")
    model = shutil.copytree(saved, holder / "m")
    victim = holder / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    entries = json.loads((model / "modules.json").read_text())
    if in_config:  # a module's own config file
        config = model / entries[entry]["path"] / "config.json" if entries[entry]["path"] else model / "config.json"
        cfg = json.loads(config.read_text()) if config.is_file() else {}
        cfg[key] = value
        _write_json(config, cfg)
    else:
        entries[entry][key] = value
        _write_json(model / "modules.json", entries)
    before = _snapshot(model)

    out = holder / "out"
    rc = main(["strip", str(model), "-o", str(out)])
    assert rc in (0, 2)
    assert _snapshot(model) == before  # -o never edits the source
    if rc == 2:
        assert not out.exists()
    rc_in_place = main(["strip", str(model)])
    assert rc_in_place in (0, 2)
    if rc_in_place == 2:
        assert _snapshot(model) == before
    assert (victim / "keep.txt").read_text() == "keep" and sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert {p.name for p in holder.iterdir()} <= {"m", "out", "victim"}
