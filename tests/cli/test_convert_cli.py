"""`st-magnitude strip / convert / inspect` on tiny saved models, including bad inputs."""

from __future__ import annotations

import json

import pytest

from st_magnitude.cli import main


def test_convert_then_inspect(saved_tiny, tmp_path, capsys):
    out = tmp_path / "qnorm"
    with pytest.warns(UserWarning):
        assert main(["convert", str(saved_tiny), "qnorm", "-o", str(out)]) == 0
    assert "gamma_query=1.000 gamma_document=0.000" in capsys.readouterr().out
    assert main(["inspect", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["modules"] == ["Router"] and info["needs_roles"] and info["converted"]
    assert (info["gamma_query"], info["gamma_document"]) == (1.0, 0.0)


def test_strip_command(saved_tiny, tmp_path, capsys):
    with pytest.warns(UserWarning):
        assert main(["strip", str(saved_tiny), "-o", str(tmp_path / "s")]) == 0
    types = [m["type"] for m in json.loads((tmp_path / "s" / "modules.json").read_text())]
    assert not any(t.endswith("Normalize") for t in types)


def test_bad_inputs_give_clear_messages(saved_tiny, tmp_path, capsys):
    assert main(["convert", str(saved_tiny), "qnrom", "-o", str(tmp_path / "x")]) == 2
    assert "Valid names: cosine, dot, qnorm, dnorm, learnable" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "missing"), "dot", "-o", str(tmp_path / "y")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    assert main(["convert", str(saved_tiny), "dot", "-o", str(tmp_path / "full")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["strip", str(tmp_path / "missing")]) == 2
    assert "modules.json" in capsys.readouterr().err
