"""In-place ``strip`` edits the folder a path leads to, links and ``..`` resolved, and a copy that fails is one line.

Before, ``strip LINK`` (LINK → MODEL) replaced the link by a stripped copy, left MODEL unstripped and a stray
``.LINK.strip-*`` beside it; ``strip MODEL/sub/..`` staged the copy inside the model it was copying, and ended in
``shutil.Error``'s thousands of characters; a model holding a FIFO or dangling links (``-o OUT``) printed every
failed file as a Python list.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from st_magnitude.cli import main
from st_magnitude.model.convert import strip_normalize

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


@pytest.fixture
def plain(tiny_model, tmp_path) -> Path:
    path = tmp_path / "place" / "MODEL"
    tiny_model.save(str(path))
    return path


def _stripped(model: Path) -> bool:
    return "Normalize" not in (model / "modules.json").read_text()


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("where", ["beside", "elsewhere"])
def test_strip_of_a_link_strips_the_folder_it_leads_to_and_keeps_the_link(plain, tmp_path, capsys, where):
    link = (plain.parent if where == "beside" else tmp_path) / "LINK"
    link.symlink_to(plain)
    inside = _tree(plain)
    assert main(["strip", str(link)]) == 0
    assert capsys.readouterr().out.strip() == f"stripped model written to {plain}"
    assert link.is_symlink() and os.readlink(link) == str(plain)  # the link is still the link
    assert _stripped(plain) and _stripped(link)
    assert _tree(plain) == [p for p in inside if not p.startswith("2_Normalize")]
    assert sorted(p.name for p in plain.parent.iterdir()) == (["LINK", "MODEL"] if where == "beside" else ["MODEL"])
    assert not [p for p in link.parent.iterdir() if ".strip-" in p.name]  # no staging folder left beside the link


def test_strip_of_a_link_in_python_strips_the_real_folder(plain):
    link = plain.parent / "LINK"
    link.symlink_to("MODEL")  # relative
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert strip_normalize(link) == plain
    assert link.is_symlink() and _stripped(plain)


@pytest.mark.parametrize("path", ["MODEL/1_Pooling/..", "MODEL/2_Normalize/../1_Pooling/..", "MODEL/."])
def test_strip_of_a_path_through_dotdot_strips_the_model_and_stages_beside_it(plain, capsys, path):
    inside = _tree(plain)
    assert main(["strip", str(plain.parent / path)]) == 0
    assert capsys.readouterr().out.strip() == f"stripped model written to {plain}"
    assert _stripped(plain)
    assert _tree(plain) == [p for p in inside if not p.startswith("2_Normalize")]  # nothing staged inside it
    assert [p.name for p in plain.parent.iterdir()] == ["MODEL"]


def test_a_dangling_link_is_one_line(tmp_path, capsys):
    (tmp_path / "LINK").symlink_to(tmp_path / "gone")
    assert main(["strip", str(tmp_path / "LINK")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "is not a saved SentenceTransformer folder" in lines[0]


def test_a_symlink_loop_is_named_in_python_too(tmp_path):
    (tmp_path / "L1").symlink_to("L2")
    (tmp_path / "L2").symlink_to("L1")
    with pytest.raises(FileNotFoundError, match=r"L1 is not a saved SentenceTransformer folder \("):
        strip_normalize(tmp_path / "L1")


@pytest.mark.parametrize("kind", ["fifo", "dangling links"])
def test_a_file_that_cannot_be_copied_is_one_line_and_nothing_is_left(plain, tmp_path, capsys, kind):
    if kind == "fifo":
        os.mkfifo(plain / "1_Pooling" / "pipe")
    else:
        for i in range(200):  # before: every failed file in one Python list, ~40,000 characters
            (plain / "1_Pooling" / f"gone{i}").symlink_to(f"nowhere{i}")
    before = {p: p.read_bytes() for p in plain.rglob("*") if p.is_file()}
    assert main(["strip", str(plain), "-o", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600, lines
    assert f"cannot copy the model {plain}: " in lines[0] and "nothing was written" in lines[0]
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if ".strip-" in p.name]
    assert {p: p.read_bytes() for p in plain.rglob("*") if p.is_file()} == before
    assert json.loads((plain / "modules.json").read_text())[-1]["path"] == "2_Normalize"
