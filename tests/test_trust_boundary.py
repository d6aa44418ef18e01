"""The trust boundary holds by construction: outside ``st_magnitude/_trust`` no module parses a file itself.

Every JSON file, JSON line, weights file and text file the package reads from disk goes through
``st_magnitude._trust`` (which checks names, paths, types and ranges and raises ``InputFileError`` naming the file).
This test reads the package's source with ``ast`` and fails on a direct ``json.load`` / ``json.loads`` of anything
but a ``json.dumps`` round trip, and on ``safetensors`` readers, in any other module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from st_magnitude._trust import Fields, InputFileError, check_name, parse_json_line, read_json, read_lines

PACKAGE = Path(__file__).resolve().parents[1] / "st_magnitude"
FORBIDDEN = {("json", "load"), ("json", "loads")}
FORBIDDEN_NAMES = {"load_file", "safe_open"}


def _shown(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix() if PACKAGE.parent in path.parents else path.as_posix()


def _direct_readers(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if (func.value.id, func.attr) in FORBIDDEN:
                arg = node.args[0] if node.args else None
                is_round_trip = (
                    isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "dumps"
                )
                if not is_round_trip:
                    found.append(f"{_shown(path)}:{node.lineno} {func.value.id}.{func.attr}")
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in FORBIDDEN_NAMES:
            found.append(f"{_shown(path)}:{node.lineno} {name}")
    return found


def test_no_module_outside_the_boundary_parses_a_file_itself():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_trust" in path.relative_to(PACKAGE).parts:
            continue
        found += _direct_readers(path)
    assert found == [], "read these through st_magnitude._trust:\n" + "\n".join(found)


def test_the_checker_finds_a_direct_reader(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nx = json.loads(open('f').read())\ny = json.loads(json.dumps({}))\n")
    assert [hit.rsplit("/", 1)[-1] for hit in _direct_readers(bad)] == ["bad.py:2 json.loads"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": NaN}', ":1: NaN is not a number"),
        ('{"a": Infinity}', ":1: Infinity is not a number"),
        ("[" * 100_000, "nested too deeply"),
        ("[" * 70 + "]" * 70, "nested deeper than 64 levels"),
        ('{"a": "\\ud800"}', "key a holds a lone surrogate"),
        ('\n\n{"a":', ":3: not valid JSON"),
    ],
)
def test_read_json_refuses_what_no_file_of_the_package_holds(tmp_path, text, expected):
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as info:
        read_json(path)
    assert str(info.value).startswith(str(path))
    assert expected in str(info.value)


def test_read_json_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'{\n"a":\n"\xff"}')
    with pytest.raises(InputFileError, match=r"x\.json:3: byte 0xff is not UTF-8"):
        read_json(path)


def test_read_json_reads_a_valid_file_and_drops_a_bom(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes('\ufeff{"a": [1, 2.5, "é"]}'.encode())
    assert read_json(path) == {"a": [1, 2.5, "é"]}


def test_missing_and_folder_are_one_error(tmp_path):
    with pytest.raises(InputFileError, match="cannot be read"):
        read_json(tmp_path / "missing.json")
    with pytest.raises(InputFileError, match="is not a file"):
        read_json(tmp_path)


def test_json_line_names_its_line(tmp_path):
    with pytest.raises(InputFileError, match=r"c\.jsonl:7: not valid JSON"):
        parse_json_line("{", tmp_path / "c.jsonl", 7)


def test_read_lines_numbers_lines_and_refuses_bad_bytes(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\n\nb\n")
    assert read_lines(path) == [(1, "a"), (3, "b")]
    path.write_bytes(b"a\n\x80\n")
    with pytest.raises(InputFileError, match=r"t\.txt:2: byte 0x80"):
        read_lines(path)


@pytest.mark.parametrize("name", ["cpu", "my-run_2.b", "A"])
def test_check_name_accepts_plain_names(name):
    assert check_name(name, "tag") == name


@pytest.mark.parametrize("name", ["", "..", ".hidden", "a/b", "cpu/../../x", "a\\b", "a\x00", 5, None, "x" * 101])
def test_check_name_refuses_anything_that_could_leave_its_folder(name, tmp_path):
    with pytest.raises(ValueError, match="tag must be a name"):
        check_name(name, "tag")
    with pytest.raises(InputFileError, match="part.json: tag must be a name"):
        check_name(name, "tag", tmp_path / "part.json")


def test_fields_check_types_ranges_choices_and_name_the_key(tmp_path):
    f = Fields({"a": 1, "b": {"c": "x/.."}, "t": True, "n": None}, tmp_path / "f.json")
    assert f.get("a", float) == 1
    with pytest.raises(InputFileError, match=r"key 'a': must be > 1"):
        f.get("a", float, lo=1, lo_open=True)
    with pytest.raises(InputFileError, match=r"key 't': must be a number, got a boolean"):
        f.get("t", float)
    with pytest.raises(InputFileError, match=r"key 'b.c': must be a name"):
        f.sub("b").name("c")
    with pytest.raises(InputFileError, match=r"key 'z': is missing"):
        f.get("z", str)
    with pytest.raises(InputFileError, match=r"key 'a': must be one of"):
        f.get("a", int, choices=[2, 3])
    assert f.get("n", (str, type(None))) is None
    assert f.known({"a", "t"}) == {"a": 1, "t": True}
    with pytest.raises(InputFileError, match=r"key 'b': is not a key this file may have"):
        f.refuse_unknown({"a", "t", "n"})
    with pytest.raises(InputFileError, match="must hold a JSON object, got a list"):
        Fields([], tmp_path / "f.json")


def test_read_json_reads_infinity_only_when_asked_and_never_nan(tmp_path):
    """A one-seed decision in a run record holds an undefined interval (±Infinity): its reader asks for them."""
    path = tmp_path / "x.json"
    path.write_text('{"low": -Infinity, "high": Infinity}')
    with pytest.raises(InputFileError, match="-Infinity is not a number"):
        read_json(path)
    assert read_json(path, allow_infinity=True) == {"low": float("-inf"), "high": float("inf")}
    path.write_text('{"low": NaN}')
    with pytest.raises(InputFileError, match="NaN is not a number"):
        read_json(path, allow_infinity=True)
