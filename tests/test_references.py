"""Every paper key the code and docs cite ("paper 003 §3.6.1") is defined once, in docs/references.md, and each
loss's ``citation`` names the paper of its row; every repository file the package's docstrings and comments name
exists."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCES = REPO / "docs" / "references.md"
KEY = re.compile(r"\b[Pp]aper (\d{3})\b")
CITING_FILES = sorted(
    [
        *(REPO / "st_magnitude").rglob("*.py"),
        *(REPO / "benchmarks").rglob("*.py"),
        *(REPO / "docs").rglob("*.md"),
        REPO / "README.md",
    ]
)


def reference_rows() -> dict[str, dict[str, str]]:
    """``{"000": {"title", "authors", "year", "venue", "bibtex"}}`` from the table in docs/references.md."""
    rows = {}
    for line in REFERENCES.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"paper (\d{3})", cells[0]) if cells else None
        if match:
            assert match.group(1) not in rows, f"paper {match.group(1)} is defined twice in {REFERENCES.name}"
            title, authors, year, venue, bibtex = cells[1:6]
            rows[match.group(1)] = {
                "title": title,
                "authors": authors,
                "year": year,
                "venue": venue,
                "bibtex": bibtex.strip("`"),
            }
    return rows


def _normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def test_references_table_defines_the_papers():
    rows = reference_rows()
    assert sorted(rows) == ["000", "001", "002", "003", "004"]
    for key, row in rows.items():
        assert row["title"] and row["authors"] and re.fullmatch(r"\d{4}", row["year"]), (key, row)
        assert re.fullmatch(r"[a-z0-9]+", row["bibtex"]), (key, row["bibtex"])


def test_every_cited_paper_key_is_defined():
    defined = set(reference_rows())
    undefined = [
        f"{path.relative_to(REPO)}:{number}: paper {key}"
        for path in CITING_FILES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for key in KEY.findall(line)
        if key not in defined
    ]
    assert not undefined, "paper keys cited but not defined in docs/references.md:\n" + "\n".join(undefined)


def _losses_with_citation() -> list[type]:
    from st_magnitude.losses._common import CachedLoss

    losses = importlib.import_module("st_magnitude.losses")
    found = []
    for name in losses.__all__:
        obj = getattr(losses, name)
        if not inspect.isclass(obj) or issubclass(obj, CachedLoss):  # a cached loss returns its plain loss's citation
            continue
        if isinstance(inspect.getattr_static(obj, "citation", None), property):
            found.append(obj)
    return found


@pytest.mark.parametrize("loss", _losses_with_citation(), ids=lambda cls: cls.__name__)
def test_loss_citation_names_the_paper_of_its_references_row(loss):
    rows = reference_rows()
    citation = inspect.getattr_static(loss, "citation").fget(None)  # a constant: no instance (and no model) needed
    bibtex_keys = re.findall(r"@\w+\{([^,\s]+),", citation)
    ours = [key for key, row in rows.items() if row["bibtex"] in bibtex_keys]
    assert len(ours) == 1, f"{loss.__name__}.citation ({bibtex_keys}) names none or several rows of references.md"
    row = rows[ours[0]]
    entry = citation[citation.index(row["bibtex"]) :].split("\n}", 1)[0]
    assert _normalise(row["title"]) in _normalise(entry), f"{loss.__name__}: title differs from paper {ours[0]}"
    assert re.search(rf"year\s*=\s*\{{{row['year']}\}}", entry), f"{loss.__name__}: year differs from paper {ours[0]}"
    # the key the loss's own module cites first is the same paper
    module_doc = inspect.getmodule(loss).__doc__ or ""
    first_key = KEY.search(module_doc)
    assert first_key is not None, f"{inspect.getmodule(loss).__name__} docstring cites no paper key"
    assert first_key.group(1) == ours[0], (loss.__name__, first_key.group(1), ours[0])


#: a repository path a docstring or comment names: a top-level folder of the repository, then at least one more part
REPO_PATH = re.compile(r"(?<![\w./-])((?:docs|tests|benchmarks|examples|st_magnitude)/[\w./-]*\w)")


def repo_paths_named(text: str) -> list[str]:
    """The repository paths ``text`` names (``docs/x.md``, ``tests/serving/``, ``st_magnitude/model/load.py``)."""
    return [m.rstrip(".") for m in REPO_PATH.findall(text) if "*" not in m]


def test_repo_paths_named_finds_paths_and_skips_what_is_no_path():
    text = "see docs/deployment.md, tests/real/x.py and benchmarks/bench_deploy.py; a/docs/x.md, query/document"
    assert repo_paths_named(text) == ["docs/deployment.md", "tests/real/x.py", "benchmarks/bench_deploy.py"]


def test_every_repo_file_the_package_names_exists():
    missing = [
        f"{path.relative_to(REPO)}:{number}: {named}"
        for path in sorted((REPO / "st_magnitude").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for named in repo_paths_named(line)
        if not (REPO / named).exists()
    ]
    assert not missing, "the package names repository files that do not exist:\n" + "\n".join(missing)
