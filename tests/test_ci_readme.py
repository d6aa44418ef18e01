"""CI runs the README's own commands: the set-up of its first block (without the main job that ends it) and its test
command, word for word, before it installs any extra (``.ci/run``: ``README_SETUP``, ``README_TESTS``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = " && ST_MAGNITUDE_DATA=../shared/data .venv/bin/st-magnitude compare --quick"


def _readme_commands() -> list[str]:
    """The README's first two ``bash`` blocks (one command line each)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)[:2]]


def _ci_value(name: str) -> str:
    match = re.search(rf"^{name}='(.*)'$", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), flags=re.M)
    assert match, f".ci/run defines no {name}='...'"
    return match.group(1)


def test_the_readme_opens_with_set_up_plus_main_job_then_the_tests():
    setup, tests = _readme_commands()
    assert setup.endswith(MAIN_JOB), setup
    assert tests.startswith(".venv/bin/python -m pytest"), tests


def test_ci_runs_the_readme_commands_word_for_word():
    setup, tests = _readme_commands()
    assert _ci_value("README_SETUP") == setup.removesuffix(MAIN_JOB)
    assert _ci_value("README_TESTS") == tests


def test_ci_runs_the_readme_commands_before_any_extra():
    """The README installs no extra beyond dev and models: a test that needs one must skip there, which CI only
    sees if it runs the README's commands before it installs the extras."""
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    order = [run.index(f'"${name}"') for name in ("README_SETUP", "README_TESTS", "EXTRAS_INSTALL")]
    assert order == sorted(order)
    assert "deploy" not in _ci_value("README_SETUP")
