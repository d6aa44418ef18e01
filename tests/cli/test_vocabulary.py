"""One vocabulary across the ``st-magnitude`` commands, checked on every parser ``build_parser()`` builds.

``-o/--output DIR`` is the folder a command writes into (it had five spellings: ``-o/--output``, ``--output``,
``--output-dir``, ``--output-folder``, ``--out``; and ``evaluate``, ``calibrate`` and ``scaling`` wrote their rows
through ``--json FILE`` / ``--plot FILE`` instead, so ``evaluate MODEL --data D -o DIR`` was a usage error). Every
command (and sub-command) that writes is found from the registry and its module's ``OUTPUTS``, so a new command cannot
drift; ``--data`` is BEIR dataset folder(s) everywhere, and the data folder
holding ``beir/`` and ``sts/`` is ``--data-root`` (``replicate --data`` and ``compare --data-dir`` meant that). No
default writes into the repository's ``docs/``: ``replicate --report PAGE`` names the page (it rewrote
``docs/replication.md`` unasked).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

import st_magnitude.cli as cli
from st_magnitude.cli._args import OPTIONS

#: The spellings the vocabulary replaced: none of them may come back.
RETIRED = (
    "--out",
    "--output-dir",
    "--output-folder",
    "--output-path",
    "--out-dir",
    "--data-dir",
    "--report-path",
    "--json",
    "--out-file",
    "--output-file",
)

#: The outputs a command may write besides its -o/--output folder (option ``dest`` -> why it is not in that folder).
BESIDE_THE_OUTPUT = {
    ("mteb", "prediction_folder"): "mteb's own --prediction-folder, passed on to mteb",
    ("replicate", "results"): "the summaries of every claim, shared by many runs (a folder of its own)",
    ("replicate", "report"): "the generated page, named where it goes (never a default inside docs/)",
}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser and every sub-command's (``mteb run``, ``scaling fit``), by its name."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(f"{name} {sub}".strip(), child)

    walk("", cli.build_parser())
    found.pop("")
    return found


PARSERS = _parsers()


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def _outputs(name: str) -> dict[str, str]:
    """The ``OUTPUTS`` the module of command ``name`` (``mteb run``: ``mteb``) declares."""
    return getattr(importlib.import_module(f"st_magnitude.cli.{name.split()[0]}"), "OUTPUTS", {})


#: The parsers that run something (no sub-commands of their own), by name.
LEAVES = {
    name: parser
    for name, parser in PARSERS.items()
    if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
}


def test_every_command_is_walked():
    assert set(cli.COMMANDS) <= set(PARSERS)
    assert {"mteb run", "scaling fit", "scaling choose"} <= set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_no_retired_spelling_and_every_output_option_is_dash_o_output(name):
    for action in _options(PARSERS[name]):
        flags = action.option_strings
        assert not set(flags) & set(RETIRED), f"{name}: {flags}"
        if "-o" in flags or action.dest == "output" or any(f.startswith("--out") for f in flags):
            assert flags == ["-o", "--output"], f"{name}: {flags} (the output option is -o/--output)"
            assert action.metavar == "DIR", f"{name}: {flags} writes a folder"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_command_that_writes_writes_into_dash_o_output(name):
    """A command that declares outputs writes into -o/--output DIR; any other output it has is one of the few
    named in BESIDE_THE_OUTPUT (each with its reason)."""
    dests = {a.dest: a for a in _options(LEAVES[name])}
    writes = set(_outputs(name)) & set(dests)
    if not writes:  # writes nothing (inspect): then it has no output option at all
        assert not {"output", "json", "plot"} & set(dests), name
        return
    assert "output" in writes, f"{name} writes {sorted(writes)} but has no -o/--output"
    assert dests["output"].option_strings == ["-o", "--output"] and dests["output"].metavar == "DIR", name
    beside = {dest for dest in writes - {"output"} if (name.split()[0], dest) not in BESIDE_THE_OUTPUT}
    assert not beside, f"{name}: {sorted(beside)} write outside -o/--output (write into that folder instead)"


def test_the_writers_are_found():
    """The derived list is not empty by accident: the commands known to write are in it."""
    writers = {name for name in LEAVES if set(_outputs(name)) & {a.dest for a in _options(LEAVES[name])}}
    assert {"evaluate", "calibrate", "scaling fit", "scaling choose", "mteb run", "convert", "strip"} <= writers
    assert "inspect" not in writers


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_data_is_beir_folders_and_the_data_root_is_data_root(name):
    for action in _options(PARSERS[name]):
        flags, help_text = action.option_strings, (action.help or "").lower()
        if "--data" in flags:
            assert (action.metavar, action.nargs) == ("BEIR_DIR", "+"), f"{name}: --data is BEIR dataset folder(s)"
            assert "beir" in help_text and "sts" not in help_text and "root" not in help_text, (name, action.help)
        if "--data-root" in flags:
            assert action.help == OPTIONS["--data-root"]["help"] and action.default is None, name
        if "sts/" in help_text or "holding beir" in help_text:
            assert flags == ["--data-root"], f"{name}: {flags} names the data folder: spell it --data-root"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_no_default_points_into_the_repositorys_docs(name):
    for action in _options(PARSERS[name]):
        if isinstance(action.default, str):
            assert not Path(action.default).parts[:1] == ("docs",), (name, action.option_strings, action.default)


@pytest.mark.parametrize(
    "argv",
    [
        ["replicate", "--list", "--out", "x"],  # a prefix of --output
        ["replicate", "--list", "--data", "x"],  # a prefix of --data-root, which --data no longer means
        ["compare", "--output-dir", "x"],
        ["compare", "--data-dir", "x"],
        ["mteb", "run", "-m", "m", "-t", "t", "--output-folder", "x"],
        ["replicate", "--report"],  # the page is named, never defaulted
        ["replicate", "--report", "--report-path", "page.md"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_retired_or_abbreviated_spelling_is_a_usage_error(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0], err


class _Called(Exception):
    """Raised by a stand-in for the work a command hands its options to (main lets it through)."""


def test_compare_passes_data_root_and_output_on(monkeypatch, tmp_path):
    import st_magnitude.lab.compare.seeds as seeds

    def capture(config, n_seeds, log=print):
        raise _Called(config)

    monkeypatch.setattr(seeds, "run_compare_seeds", capture)
    with pytest.raises(_Called) as called:
        cli.main(["compare", "--data-root", str(tmp_path / "data"), "-o", str(tmp_path / "out")])
    config = called.value.args[0]
    assert (config.data_dir, config.output_dir) == (str(tmp_path / "data"), str(tmp_path / "out"))


def test_replicate_passes_data_root_and_output_on(monkeypatch, tmp_path):
    import st_magnitude.lab.replication.runner as runner

    def capture(claim, **kwargs):
        raise _Called(kwargs)

    monkeypatch.setattr(runner, "run_claim", capture)
    with pytest.raises(_Called) as called:
        cli.main(["replicate", "001", "--data-root", str(tmp_path / "data"), "--output", str(tmp_path / "out")])
    kwargs = called.value.args[0]
    assert (kwargs["data"], kwargs["out"], kwargs["results"]) == (str(tmp_path / "data"), str(tmp_path / "out"), None)


def test_replicate_report_writes_only_the_page_it_names(tmp_path, monkeypatch, capsys):
    # run from a checkout-like folder: its docs/replication.md must stay as it is
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "docs" / "replication.md"
    committed.parent.mkdir()
    committed.write_text("committed page\n")
    (tmp_path / "none").mkdir()
    page = tmp_path / "site" / "replication.md"
    assert cli.main(["replicate", "--report", str(page), "--results", str(tmp_path / "none")]) == 0
    assert committed.read_text() == "committed page\n"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["docs/replication.md", "site/replication.md", "site/replication/forest.png"]
