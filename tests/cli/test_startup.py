"""``st-magnitude`` answers ``--help``, usage errors and missing paths before it imports the model stack.

The mechanism, not a time: after each invocation below, in a fresh interpreter, torch / sentence-transformers /
transformers (and mteb, numpy, scipy) must not be in ``sys.modules``. Importing them is what made every command wait
seconds before it read its arguments; ``benchmarks/bench_cli_startup.py`` measures the times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import st_magnitude
from st_magnitude.cli import command_paths

HEAVY = ("torch", "sentence_transformers", "transformers", "mteb", "numpy", "scipy", "sklearn", "datasets")

HELP = [[], *command_paths()]  # the top level, every command and sub-command

# (argv with {model} / {data} / {no_corpus} / {missing} / {out}, words the one error line contains)
ERRORS = [
    ("evaluate", "required"),
    ("evaluate {missing} --data {data}", "does not exist"),
    ("evaluate {model} --data {missing}", "does not exist"),
    ("evaluate {model} --data {no_corpus}", "corpus.jsonl is missing"),
    ("evaluate {model} --data {data} --split dev", "Available splits: ['test']"),
    ("evaluate {out} --data {data}", "not a SentenceTransformer folder"),
    ("inspect {missing}", "does not exist"),
    ("strip {missing}", "modules.json"),
    ("convert {missing} qnorm -o {out}/c", "does not exist"),
    ("export {missing} -o {out}/e", "does not exist"),
    ("diagnose {missing} --data {data}", "does not exist"),
    ("diagnose {model} --data {missing}", "does not exist"),
    ("calibrate {model} --data {data}", "no qrels for split 'train'"),
    ("mteb run -m {missing} -t {data}", "does not exist"),
    ("mteb run -m {model} -t {missing}", "does not exist"),
    ("mteb run -m {model} -t {data} --split dev", "Available splits: ['test']"),
    ("compare --model {missing}", "does not exist"),
    ("compare --steps many", "invalid int value"),
    ("replicate no-such-claim", "unknown claim 'no-such-claim'"),
    ("scaling fit {missing}.csv", "CSV not found"),
    ("scaling choose --budget lots", "expected a number"),
]

_PROBE = """
import contextlib, io, json, sys
from st_magnitude.cli import main

heavy = {heavy!r}
report = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    loaded = sorted(m for m in heavy if m in sys.modules)
    report.append({{"argv": argv, "code": code, "err": err.getvalue(), "loaded": loaded}})
print(json.dumps(report))
"""


def _run_all(cases: list[list[str]]) -> list[dict]:
    """Run every ``main(argv)`` of ``cases`` in one fresh interpreter; per case its exit code, stderr and the heavy
    modules loaded so far (one process for all: nothing heavy may appear after any of them)."""
    root = Path(st_magnitude.__file__).resolve().parent.parent
    probe = _PROBE.format(heavy=HEAVY)
    proc = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(cases)], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_help_of_every_command_imports_nothing_heavy():
    report = _run_all([[*words, "--help"] for words in HELP])
    for case in report:
        assert case["code"] == 0, case
        assert case["loaded"] == [], f"st-magnitude {' '.join(case['argv'])} imported {case['loaded']}"


def test_usage_and_path_errors_come_before_any_heavy_import(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "modules.json").write_text("[]")  # enough for the path checks; never loaded here
    data = tmp_path / "beir" / "toy"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    no_corpus = tmp_path / "beir" / "no_corpus"
    no_corpus.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    places = {"model": model, "data": data, "no_corpus": no_corpus, "missing": tmp_path / "missing", "out": out}
    cases = [[w.format(**places) for w in argv.split()] for argv, _ in ERRORS]
    report = _run_all(cases)
    for case, (argv, words) in zip(report, ERRORS):
        lines = case["err"].strip().splitlines()
        assert case["code"] == 2 and len(lines) == 1 and words in lines[0], (argv, case)
        assert case["loaded"] == [], f"st-magnitude {argv} imported {case['loaded']} before its error"
    assert sorted(p.name for p in out.iterdir()) == []  # no output folder was created for a refused command


def test_every_declared_input_is_an_option_of_its_command():
    """``ARG_CHECKS`` and ``INPUTS`` name options by ``dest``: a misspelt one would silently check nothing."""
    import importlib

    from st_magnitude import cli

    for name in cli.COMMANDS:
        module = importlib.import_module(f"st_magnitude.cli.{name}")
        inputs = {**getattr(module, "ARG_CHECKS", {}), **getattr(module, "INPUTS", {})}
        sub = next(a for a in cli.build_parser([name])._actions if a.dest == "command").choices[name]
        parsers = [sub] + [p for a in sub._actions if a.dest.endswith("_command") for p in a.choices.values()]
        dests = {a.dest for p in parsers for a in p._actions}
        assert set(inputs) <= dests, f"{name}: ARG_CHECKS/INPUTS name {sorted(set(inputs) - dests)}, not options of it"
