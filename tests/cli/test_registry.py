"""The command registry (``st_magnitude.cli.COMMANDS``), one module per command, shared options declared once.

Each command lives in ``st_magnitude/cli/<command>.py`` and every shared option (``-o/--output``, ``--data``,
``--data-root``, ``--split/--max-*/--seed/--threads``) is declared once, in ``st_magnitude/cli/_args.py``: these tests
keep it so.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import st_magnitude.cli as cli
from st_magnitude.cli._args import OPTIONS

REPO = Path(__file__).resolve().parents[2]
CLI_DIR = REPO / "st_magnitude" / "cli"

#: A flag of OPTIONS that a command declares itself because it means something else there.
OTHER_MEANING = {
    ("mteb.py", "--device"): "mteb's own flag: a CUDA device index, passed on to mteb",
    ("scaling.py", "--seed"): "the seed of the residual bootstrap (default 0), not of a BEIR subsample",
}


#: compare's options that override its profile (ints, 0 = no subsampling), not the shared options of that name.
PROFILE = ("--batch-size", "--max-seq-length", "--max-corpus", "--max-queries", "--seed")


def _subcommands(parser) -> dict:
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def test_every_registered_command_is_a_module_of_the_cli_package():
    assert list(_subcommands(cli.build_parser())) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        module = importlib.import_module(f"st_magnitude.cli.{name}")
        assert callable(module.add_arguments), name
    modules = {p.stem for p in CLI_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(cli.COMMANDS), "a command module outside the registry (or the reverse)"


def test_shared_options_are_declared_once():
    """No command module declares a shared option itself (it uses add_options / add_option from _args)."""
    offenders = []
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.name == "_args.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
                continue
            flags = {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            for flag in sorted(flags & set(OPTIONS)):
                if (path.name, flag) not in OTHER_MEANING:
                    offenders.append(f"{path.name}:{node.lineno} {flag}")
    assert offenders == [], f"declare these through st_magnitude.cli._args.OPTIONS: {offenders}"


def test_shared_options_mean_the_same_in_every_command():
    """Each command that has a shared option has it with the declared kind, type, nargs and choices."""

    def kind(action: argparse.Action) -> tuple:
        return type(action), action.type, action.nargs, action.choices, action.const

    seen = 0
    for name, sub in _subcommands(cli.build_parser()).items():
        parsers = [sub] + [p for a in sub._actions if a.dest.endswith("_command") for p in a.choices.values()]
        for action in (a for p in parsers for a in p._actions):
            flag = next((o for o in action.option_strings if o in OPTIONS), None)
            if flag is None or (f"{name}.py", flag) in OTHER_MEANING or (name == "compare" and flag in PROFILE):
                continue  # compare's --max-corpus, --seed, ... are int overrides of its profile (0 = no subsampling)
            declared = argparse.ArgumentParser().add_argument(flag, **OPTIONS[flag])
            assert kind(action) == kind(declared), (name, flag)
            seen += 1
    assert seen >= 20


def _modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    return [m for m in json.loads(out.splitlines()[-1]) if m.startswith("st_magnitude")]


def test_help_and_a_usage_error_import_only_the_command_they_name():
    loaded = _modules_after("from st_magnitude.cli import main\nmain(['--help'])")
    assert sorted(loaded) == ["st_magnitude", "st_magnitude._lazy", "st_magnitude.cli"], loaded
    loaded = _modules_after(
        "from st_magnitude.cli import main\nmain(['evaluate', 'm', '--data', 'x', '--similarity', 'x'])"
    )
    assert "st_magnitude.cli.evaluate" in loaded
    assert not [m for m in loaded if m.startswith(("st_magnitude.lab.compare", "st_magnitude.cli.compare"))], loaded


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "m", "--data", "a", "b", "--max-corpus", "5", "--similarity", "dot", "--threads", "2"],
        ["-v", "diagnose", "m", "--data", "a", "--no-kappa", "--seed", "3"],
        ["mteb", "run", "-m", "m", "-t", "x", "--on-missing", "drop", "--batch-size", "8"],
        ["compare", "--full", "--device", "cpu", "--max-corpus", "0"],
        ["replicate", "--list"],
        ["scaling", "fit", "a.csv", "--bootstrap", "3"],
        ["convert", "m", "qnorm", "-o", "out", "--trust-remote-code"],
        ["strip", "m"],
        ["inspect", "m"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_the_one_command_parser_parses_like_the_full_one(argv):
    command = cli._command_of(argv)
    assert command == next(a for a in argv if not a.startswith("-"))
    assert vars(cli.build_parser([command]).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


def test_a_command_whose_area_is_missing_is_left_out(monkeypatch):
    for name in [m for m in sys.modules if m.startswith(("st_magnitude.cli.compare", "st_magnitude.lab.compare"))]:
        monkeypatch.delitem(sys.modules, name)

    class NotInThisBuild:  # finds st_magnitude.lab.compare nowhere, as in a build without that area
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            if fullname == "st_magnitude.lab.compare":
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)

    monkeypatch.setattr(sys, "meta_path", [NotInThisBuild(), *sys.meta_path])
    assert "compare" not in _subcommands(cli.build_parser())
    assert "evaluate" in _subcommands(cli.build_parser())


def test_python_dash_m():
    proc = subprocess.run(
        [sys.executable, "-m", "st_magnitude.cli", "--version"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.startswith("st-magnitude "), proc.stderr
