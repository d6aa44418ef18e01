"""The README's "swap the similarity" example really runs (with the offline all-MiniLM-L6-v2 wheel)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(marker: str) -> str:
    text = README.read_text()
    match = re.search(rf"<!-- {marker}:start -->\s*```python\n(.*?)```\s*<!-- {marker}:end -->", text, re.S)
    assert match, f"README has no {marker} block"
    return match.group(1)


def test_readme_swap_example_runs(minilm_dir, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    code = readme_block("swap-example")
    assert len([line for line in code.splitlines() if line.strip()]) <= 14
    code = code.replace('"sentence-transformers/all-MiniLM-L6-v2"', repr(str(minilm_dir)))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    # the saved model loads in stock ST and scores with its roles
    reloaded = SentenceTransformer(os.fspath(tmp_path / "qnorm-minilm"), device="cpu")
    q = reloaded.encode_query(["what lowers blood pressure?"], convert_to_tensor=True)
    assert abs(float(q.norm()) - 1.0) < 1e-5
    d = reloaded.encode_document(["Green tea reduced blood pressure in a trial."], convert_to_tensor=True)
    assert abs(float(d.norm()) - 1.0) > 1e-3
