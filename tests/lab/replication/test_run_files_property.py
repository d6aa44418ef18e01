"""Property: random mutations of a valid part file never write outside ``--output`` / ``--results`` and end either in a
merged result or in one :class:`InputFileError` naming a file — never another exception.

A mutation drops a key, adds one, replaces a value by another JSON type, or gives ``claim`` / ``profile`` / ``tag`` a
hostile name (``/``, ``..``, NUL, 300 characters); one to three of them, anywhere in the part (seed records and
their claim data included). The merge runs on a stub claim (no training): each example costs a few milliseconds.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_run_files import parts, stub  # noqa: F401 - fixtures

from st_magnitude._trust import InputFileError
from st_magnitude.lab.replication.merge import merge_runs

HOSTILE_NAMES = ["../../ESCAPE", "cpu/../../../ESCAPE", "a/b", "..", ".", "a\x00b", "x" * 300, "/tmp/ESCAPE", "", " "]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),  # NaN cannot be written as JSON that read_json reads; Infinity can
    st.text(max_size=20),
    st.sampled_from(HOSTILE_NAMES),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)  # noqa: E501


def _paths(obj, prefix=()):
    """Every (container path, key) in ``obj``."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in items:
        yield prefix, key
        yield from _paths(value, (*prefix, key))


def _at(obj, path):
    for key in path:
        obj = obj[key]
    return obj


@st.composite
def mutated(draw, valid: dict) -> dict:
    rec = json.loads(json.dumps(valid))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "add", "replace", "name"]))
        if kind == "name":
            rec[draw(st.sampled_from(["claim", "profile", "tag"]))] = draw(st.sampled_from(HOSTILE_NAMES))
            continue
        places = list(_paths(rec))
        if not places:
            break
        path, key = draw(st.sampled_from(places))
        container = _at(rec, path)
        if kind == "drop":
            container.pop(key)
        elif kind == "add" and isinstance(container, dict):
            container[draw(st.text(max_size=12))] = draw(VALUES)
        else:
            container[key] = draw(VALUES)
    return rec


def _outside(root: Path, allowed: list[Path]) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not any(a == p or a in p.parents for a in allowed)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_part_merges_or_is_one_input_error_and_writes_nowhere_else(parts, tmp_path, data):  # noqa: F811
    valid = [json.loads(p.read_text()) for p in parts]
    which = data.draw(st.integers(0, 1), label="mutated part")
    rec = data.draw(mutated(valid[which]), label="mutation")
    box = tmp_path / f"example-{next(COUNTER)}"
    inputs = box / "in"
    inputs.mkdir(parents=True)
    files = []
    for i, part in enumerate(valid):
        path = inputs / f"part{i}.json"
        path.write_text(json.dumps(rec if i == which else part), encoding="utf-8")
        files.append(path)
    out, results = box / "sub" / "out", box / "sub" / "results"
    try:
        merged = merge_runs(files, out, results)
    except InputFileError as exc:
        event("refused")
        assert exc.file and exc.problem, exc
        assert any(str(f) in str(exc) for f in files), exc
    else:
        event("merged")
        assert Path(merged["full_result"]).parent == out and Path(merged["summary_result"]).parent == results
    assert _outside(tmp_path, [inputs, out, results, *parts]) == []
    shutil.rmtree(box)


COUNTER = itertools.count()


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_every_hostile_name_is_refused_in_every_name_key(parts, tmp_path, name):  # noqa: F811
    for key in ("claim", "profile", "tag"):
        rec = json.loads(parts[1].read_text())
        rec[key] = name
        bad = tmp_path / f"bad-{key}.json"
        bad.write_text(json.dumps(rec))
        with pytest.raises(InputFileError, match=f"key '{key}'"):
            merge_runs([parts[0], bad], tmp_path / "out", tmp_path / "results")
        assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()
