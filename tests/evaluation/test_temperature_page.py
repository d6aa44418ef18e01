"""docs/temperature.md's results section is what ``benchmarks/gpu_temperature.py --render`` makes of the committed
JSON: editing a number by hand, or committing a new JSON without re-rendering, fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "temperature" / "temperature_results.json"


def _script():
    return load_script("benchmarks/gpu_temperature.py")


def test_the_results_section_is_the_rendered_committed_json(tmp_path):
    script = _script()
    page = tmp_path / "temperature.md"
    shutil.copy(REPO / "docs" / "temperature.md", page)
    script.render_docs(RESULTS, page)
    assert page.read_text(encoding="utf-8") == (REPO / "docs" / "temperature.md").read_text(encoding="utf-8")


def test_render_replaces_a_stale_section(tmp_path):
    script = _script()
    page = tmp_path / "temperature.md"
    page.write_text(f"# T\n\n{script.BEGIN}\nold numbers 0.1234\n{script.END}\nafter\n", encoding="utf-8")
    script.render_docs(RESULTS, page)
    text = page.read_text(encoding="utf-8")
    assert "old numbers" not in text and text.endswith(f"{script.END}\nafter\n")
    assert "Learnable vs fixed scale" in text and "temperature_results.json" in text
