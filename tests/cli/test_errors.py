"""Bad invocations of every command: exit code 2, one line on stderr, no traceback, nothing left behind.

Run in-process through ``st_magnitude.cli.main`` (fast); only SIGINT needs a subprocess. A wrong argument gets a
clear error naming the allowed values, and the similarity names a command accepts come from one place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toy_beir import write_toy_beir

from st_magnitude.cli import build_parser, main
from st_magnitude.cli._args import similarity_names

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tiny_bert_dir, tmp_path_factory):
    """Inputs shared by the table: a saved model, good and broken BEIR folders, a CSV, a plain file."""
    from conftest import build_tiny_st

    root = tmp_path_factory.mktemp("cli_errors")
    model = root / "model"
    build_tiny_st(tiny_bert_dir).save(str(model))
    toy = write_toy_beir(root / "toy", n_docs=12, n_queries=4)
    no_id = write_toy_beir(root / "no_id", n_docs=12, n_queries=4)
    lines = (no_id / "corpus.jsonl").read_text().splitlines(keepends=True)
    lines[6] = json.dumps({"title": "t", "text": "no id here"}) + "\n"
    (no_id / "corpus.jsonl").write_text("".join(lines))
    bad_json = write_toy_beir(root / "bad_json", n_docs=12, n_queries=4)
    lines = (bad_json / "corpus.jsonl").read_text().splitlines(keepends=True)
    lines[9] = '{"_id": "d9", "text": "cut off\n'
    (bad_json / "corpus.jsonl").write_text("".join(lines))
    bad_qrels = write_toy_beir(root / "bad_qrels", n_docs=12, n_queries=4)
    with open(bad_qrels / "qrels" / "test.tsv", "a", newline="") as f:
        f.write("q1 d2 1\r\n")
    ghost = write_toy_beir(root / "ghost", n_docs=12, n_queries=4)
    with open(ghost / "qrels" / "test.tsv", "a", newline="") as f:
        f.write("q0\tghost\t1\r\n")
    csv_file = root / "sweep.csv"
    csv_file.write_text(
        "recipe,dataset,dim,contrastive_entropy\n" + "".join(f"a,b,{d},{1 + 8 / d}\n" for d in (8, 16, 32, 64))
    )
    too_few = root / "too_few.csv"  # every group has 2 dimensions: nothing can be fitted
    too_few.write_text("recipe,dataset,dim,contrastive_entropy\n" + "a,b,8,2\na,b,16,1.5\nc,b,8,2\nc,b,16,1.4\n")
    plain_file = root / "plain.txt"
    plain_file.write_text("x")
    return {
        "model": str(model),
        "toy": str(toy),
        "no_id": str(no_id),
        "bad_json": str(bad_json),
        "bad_qrels": str(bad_qrels),
        "ghost": str(ghost),
        "csv": str(csv_file),
        "too_few": str(too_few),
        "file": str(plain_file),
        "dir": str(root),
    }


# (argv with {placeholders}, text the one stderr line must contain); {out} is a fresh folder that must stay empty
BAD = [
    ("evaluate {model} --data {toy} --max-corpus 0", "expected an integer >= 1"),
    ("evaluate {model} --data {toy} --max-queries -1", "expected an integer >= 1"),
    ("evaluate {model} --data {toy} --batch-size 0", "expected an integer >= 1"),
    ("evaluate {model} --data {toy} --similarity tn", "'tn' cannot be used here"),
    ("evaluate {model} --data {toy} --similarity learnable", "'learnable' cannot be used here"),
    ("evaluate {model} --data {toy} --similarity qnrom", "Valid names: cosine, dot, qnorm, dnorm"),
    ("evaluate {model} --data {no_id}", 'corpus.jsonl:7: no "_id" field'),
    ("evaluate {model} --data {bad_json}", "corpus.jsonl:10: not valid JSON"),
    ("evaluate {model} --data {bad_qrels}", "test.tsv:10: expected 3 tab-separated columns"),
    ("evaluate {model} --data {toy} -o {file}", "is a file, not a folder"),
    ("evaluate {model} --data {toy} -o {file}/rows", "is a file, not a folder"),
    ("evaluate {model} --data {toy} -o /proc/st-magnitude-rows", "is not writable"),
    ("evaluate no-such-model --data {toy}", "does not exist"),
    ("evaluate {model} --data {ghost}", "--on-missing drop"),
    ("scaling fit {csv} -o {file}", "is a file, not a folder"),
    ("scaling fit {csv} --plot", "give -o DIR too"),
    ("scaling fit {csv} --bootstrap -3", "expected an integer >= 0"),
    ("scaling fit {csv} -o /proc/law --plot", "is not writable"),
    ("scaling choose --budget -1", "expected a finite number > 0"),
    ("scaling fit {too_few}", "nothing fitted (a/b: need at least 3 distinct dimensions"),
    ("compare --device cdu --output {out}/c", "unknown device 'cdu'"),
    ("convert no-such-model dot -o {out}/x", "does not exist"),
    ("inspect no-such-model", "does not exist"),
    ("convert {model} tn -o {out}/x", "'tn' cannot be used here"),
    ("convert {model} dot -o /proc/st-magnitude-model", "is not writable"),
    ("convert {model} dot -o {file}", "is a file, not a folder"),
    ("strip {out}/missing", "modules.json"),
    ("strip {model} -o /proc/st-magnitude-stripped", "is not writable"),
    ("diagnose {model} --data {toy} --pairs-split trian --output {out}/d", "--pairs-split 'trian'"),
    ("diagnose {model} --data {toy} --n-pairs 0 --output {out}/d", "expected an integer >= 1"),
    ("diagnose {model} --data {toy} --output {file}", "is a file, not a folder"),
    ("diagnose {model} --data {ghost} --no-kappa --output {out}/d", "test.tsv:10: corpus-id 'ghost' is not in"),
    ("mteb run -m {model} -t {out}/missing --output {out}/m", "does not exist"),
    ("mteb run -m {model} -t {ghost} --output {out}/m", "--on-missing drop"),
    ("mteb run -m {model} --output {out}/m", "needs -t"),
]


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("argv, message", BAD, ids=[a for a, _ in BAD])
def test_bad_invocation_is_one_line_exit_2_and_leaves_nothing(argv, message, world, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    before = _tree(Path(world["dir"]))
    args = [a.format(**world, out=out) for a in argv.split()]
    rc = main(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, captured.err
    assert len(lines) == 1, captured.err
    assert message in lines[0] and "Traceback" not in captured.err
    assert lines[0].startswith("st-magnitude ")
    assert _tree(out) == [], f"left behind: {_tree(out)}"
    assert _tree(Path(world["dir"])) == before


def test_mteb_run_has_the_on_missing_flag_it_advises():
    args = build_parser().parse_args(["mteb", "run", "-m", "x", "-t", "y", "--on-missing", "drop"])
    assert args.on_missing == "drop"


def test_every_similarity_choice_comes_from_one_place():
    from st_magnitude.similarity import CARRIABLE_SIMILARITY_NAMES

    assert similarity_names("carry") == tuple(CARRIABLE_SIMILARITY_NAMES)
    assert "tn" not in similarity_names("rescore") and "learnable" not in similarity_names("rescore")
    assert "tn" in similarity_names("any")
    parser = build_parser()
    for name in similarity_names("rescore"):
        assert parser.parse_args(["evaluate", "m", "--data", "d", "--similarity", name]).similarity == name
    for name in similarity_names("carry"):
        assert parser.parse_args(["convert", "m", name, "-o", "o"]).similarity == name


def test_sigint_is_one_line_not_a_traceback(world, tmp_path):
    # Ctrl-C arrives while the data are read: the command stops with one line and exit code 130
    code = (
        "import os, signal, sys\n"
        "import st_magnitude.evaluation.runner as ev\n"
        "real = ev.load_beir\n"
        "def interrupted(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        "ev.load_beir = interrupted\n"
        "from st_magnitude.cli import main\n"
        f"sys.exit(main(['evaluate', {world['model']!r}, '--data', {world['toy']!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == ["st-magnitude evaluate: interrupted"]


def test_compare_interrupted_is_the_one_interrupt_line(monkeypatch, tmp_path, capsys):
    # compare printed its own line; now it ends like every command, with its hint (the run resumes)
    import st_magnitude.lab.compare.seeds as seeds
    from st_magnitude.cli.compare import INTERRUPT_HINT

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(seeds, "run_compare_seeds", interrupted)
    assert main(["compare", "-o", str(tmp_path / "c")]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [f"st-magnitude compare: interrupted; {INTERRUPT_HINT}"]


def test_failed_diagnose_and_mteb_run_leave_no_output_folder(world, tmp_path, monkeypatch, capsys):
    # failures after the command created its output folder (the up-front checks cannot foresee them)
    import st_magnitude.diagnostics.report as report
    from st_magnitude.evaluation import mteb as our_mteb

    def fail(*args, **kwargs):
        raise ValueError("simulated failure mid-run")

    monkeypatch.setattr(report, "_diagnose_dataset", fail)
    out = tmp_path / "new" / "diag"
    assert main(["diagnose", world["model"], "--data", world["toy"], "--no-kappa", "--output", str(out)]) == 2
    assert "simulated failure mid-run" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()

    monkeypatch.setattr(our_mteb._LocalLoader, "__call__", fail)
    out = tmp_path / "mteb_out"
    assert main(["mteb", "run", "-m", world["model"], "-t", world["toy"], "--output", str(out)]) == 2
    assert "simulated failure mid-run" in capsys.readouterr().err
    assert not out.exists()
