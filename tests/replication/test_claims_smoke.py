"""Every claim's code path end to end on tiny in-code models and synthetic data (not the real runs), plus the CLI,
the result files and the generated report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import WORDS, build_tiny_bert_dir, build_tiny_st
from helpers.toy_beir import write_toy_beir

from st_magnitude.replication.claims import CLAIM_MODULES, get_claim, list_claims
from st_magnitude.replication.report import render_report
from st_magnitude.replication.runner import redecide, run_claim

REPO = Path(__file__).resolve().parents[2]

#: evaluate on every toy query and document (no subsampling)
ALL_TOY = {"eval_corpus": None, "eval_queries": None}
#: the size of every tiny fine-tune: batch 4, 16 tokens
SMALL = {"batch_size": 4, "max_seq_length": 16, **ALL_TOY}

#: per claim: tiny settings (and which model folder to use)
TINY = {
    "000-table5": ({"train_pairs": 16, "batch_size": 4, "max_seq_length": 16, "n_boot": 20}, "bert"),
    "000-headline": ({"steps": 2, **SMALL, "kappa_pairs": 12, "kappa_bootstrap": 5, "auc_negatives": 5}, "bert"),
    "000-appf": ({"little_steps": 1, "more_steps": 2, **SMALL}, "st_normalize"),
    "001": ({"steps": 2, **SMALL, "auc_negatives": 5, "n_boot": 20}, "bert"),
    "002": ({"steps": 2, **SMALL, "auc_negatives": 5}, "bert"),
    "003": ({"dims": [2, 4, 8, 16], "steps": 1, **SMALL, "n_negatives": 8, "fit_bootstrap": 0}, "bert"),
    "004": (
        {"steps": 2, "group_size": 4, "groups": 2, "max_docs": 0, "diag_every": 1, **ALL_TOY}
        | {"max_seq_length": 16, "lm_max_length": 16},
        "bert",
    ),
}


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repl_data")
    for name in ("nfcorpus", "scifact"):
        for split in ("train", "test"):
            write_toy_beir(root / "beir" / name, n_docs=24, n_queries=8, split=split)
    sts = root / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    rng = random.Random(0)
    for split, n in (("train", 24), ("test", 30)):
        with open(sts / f"sts-{split}.csv", "w", encoding="utf-8") as f:
            for i in range(n):
                s1 = " ".join(rng.choice(WORDS) for _ in range(6))
                s2 = " ".join(rng.choice(WORDS) for _ in range(6))
                f.write(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{s1}\t{s2}\n")
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("repl_models")
    bert = build_tiny_bert_dir(root / "bert")
    st_dir = root / "st_normalize"
    build_tiny_st(bert, normalize=True).save(str(st_dir))
    return {"bert": bert, "st_normalize": st_dir}


def test_every_claim_is_registered_with_both_profiles():
    claims = list_claims()
    assert [c.id for c in claims] == list(CLAIM_MODULES)
    for c in claims:
        assert set(c.profiles) == {"cpu", "gpu"}, c.id
        assert c.statement and c.paper_number and c.verdict_rule and c.differences.get("cpu"), c.id
    with pytest.raises(ValueError, match="valid claims"):
        get_claim("999")


@pytest.mark.parametrize("claim_id", list(CLAIM_MODULES))
def test_claim_code_path_runs_on_tiny_models(claim_id, toy_data, models, tmp_path):
    overrides, model_key = TINY[claim_id]
    record = run_claim(
        claim_id,
        profile="cpu",
        seeds=2 if claim_id in ("001", "000-appf") else 1,  # both interval paths, kept fast
        data=str(toy_data),
        out=tmp_path / "out",
        results=tmp_path / "results",
        device="cpu",
        model=str(models[model_key]),
        command=f"st-magnitude replicate {claim_id} (test)",
        overrides=overrides,
    )
    assert record["status"] == "finished" and len(record["seeds"]) == (2 if claim_id in ("001", "000-appf") else 1)
    assert record["verdict"] in ("reproduces", "contradicts", "inconclusive")
    if claim_id == "004":
        assert record["verdict"] == "inconclusive"  # the cpu smoke profile's verdict is fixed in advance
    full = json.loads(Path(record["full_result"]).read_text())
    summary = json.loads((tmp_path / "results" / f"{claim_id}-cpu.json").read_text())
    assert full["decision"]["verdict"] == summary["verdict"]
    assert "per_query" not in json.dumps(summary)  # the small file drops per-item arrays
    if claim_id != "000-table5":
        arm = next(iter(full["seeds"][0]["arms"].values()))
        assert all(len(v) == 8 for v in next(iter(arm.values()))["per_query"].values())
    text = render_report(tmp_path / "results")
    assert f"| {claim_id} | cpu |" in text and f"**{record['verdict']}**" in text
    assert text.count("not run (") >= len(CLAIM_MODULES)  # every other row says why it did not run


def test_unknown_setting_and_profile_are_refused(toy_data):
    with pytest.raises(ValueError, match="unknown setting"):
        run_claim("001", data=str(toy_data), overrides={"stepz": 3})
    with pytest.raises(ValueError, match="no 'tpu' profile"):
        run_claim("001", profile="tpu", data=str(toy_data))


def test_cli_list_and_report(tmp_path, capsys):
    from st_magnitude.cli import main

    assert main(["replicate", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in CLAIM_MODULES)
    target = tmp_path / "replication.md"
    assert main(["replicate", "--report", "--results", str(tmp_path / "none"), "--report-path", str(target)]) == 0
    text = target.read_text()
    assert text.count("| not run (") == 2 * len(CLAIM_MODULES)
    assert main(["replicate"]) == 2  # no claim named: a clear error, not a traceback
    reasons = tmp_path / "reasons"
    reasons.mkdir()
    (reasons / "not_run.json").write_text(json.dumps({"003/cpu": "did not finish in time"}))
    assert "| 003 | cpu |" in render_report(reasons) and "not run (did not finish in time)" in render_report(reasons)


def test_committed_page_is_generated_from_the_committed_results():
    page, results = REPO / "docs" / "replication.md", REPO / "docs" / "replication" / "results"
    if not page.is_file() and not any(results.glob("*.json")):
        pytest.skip("no committed results and no docs/replication.md yet")
    assert page.is_file(), (
        "results are committed but docs/replication.md is missing: run `st-magnitude replicate --report`"
    )
    assert page.read_text(encoding="utf-8") == render_report(results), (
        "docs/replication.md differs from the result JSONs: run `st-magnitude replicate --report`"
    )


def test_tagged_control_run_is_an_extra_row(toy_data, models, tmp_path):
    overrides = {**TINY["000-table5"][0], "arms": ["cosine", "sent1norm"], "lambda": 0.1}
    results = tmp_path / "results"
    kw = dict(profile="cpu", seeds=1, data=str(toy_data), out=tmp_path / "out", results=results, device="cpu")
    rec = run_claim("000-table5", model=str(models["bert"]), overrides=overrides, tag="lambda0.1", **kw)
    main = json.loads((results / "000-table5-cpu-lambda0.1.json").read_text())
    again = redecide(rec["full_result"], results)  # recomputed from the stored per-item scores, same verdict
    assert again["verdict"] == rec["verdict"] and again["decision"]["arms"] == rec["decision"]["arms"]
    assert main["tag"] == "lambda0.1" and list(main["seeds"][0]["arms"]) == ["cosine", "sent1norm"]
    untagged = {**main, "tag": None}
    (results / "000-table5-cpu.json").write_text(json.dumps(untagged))
    text = render_report(results)
    assert "| 000-table5 | cpu |" in text and "| 000-table5 | cpu (lambda0.1) |" in text
    assert "### cpu (lambda0.1) profile" in text
    with pytest.raises(ValueError, match="tag must be"):
        run_claim("000-table5", tag="a b", **kw)
    with pytest.raises(ValueError, match="arms must include 'cosine'"):
        run_claim("000-table5", model=str(models["bert"]), overrides={**overrides, "arms": ["dot"]}, **kw)


def test_committed_summaries_name_no_machine_folder():
    """The small result files are committed: no --out scratch folder and no absolute path of the machine."""
    from st_magnitude.replication.runner import summary

    rec = {
        "command": "st-magnitude replicate 001 --profile cpu --seeds 3 --out /scratch/x --set 'a=[1, 2]'",
        "full_result": "/scratch/x/001-cpu-1.json",
        "seeds": [],
    }
    out = summary(rec)
    assert out["command"] == "st-magnitude replicate 001 --profile cpu --seeds 3 --set 'a=[1, 2]'"
    assert out["full_result"] == "001-cpu-1.json"
    for path in sorted((REPO / "docs" / "replication" / "results").glob("*.json")):
        text = path.read_text()
        assert "--out" not in text and '"/' not in text, path.name


def test_committed_results_were_run_with_the_current_cpu_profiles():
    """Every setting a committed (untagged) result records is the claim's current value, in the same order: a change
    to a profile that produced a committed result must come with a re-run (settings added since a run may be absent
    from its result)."""
    results = REPO / "docs" / "replication" / "results"
    checked = 0
    for f in sorted(results.glob("*.json")):
        rec = json.loads(f.read_text(encoding="utf-8"))
        if f.name == "not_run.json" or rec.get("tag"):
            continue
        claim = get_claim(rec["claim"])
        # the page renders the claim's current rule and differences next to the recorded verdict: they must match
        assert rec["verdict_rule"] == claim.verdict_rule, f"{f.name}: verdict rule changed after the run"
        assert rec["setting_differences"] == claim.differences.get(rec["profile"]), f"{f.name}: differences changed"
        profile = claim.settings(rec["profile"])
        recorded = rec["settings"]
        assert {k: profile.get(k, "<missing>") for k in recorded} == recorded, f.name
        assert [k for k in profile if k in recorded] == list(recorded), f"{f.name}: settings order changed"
        checked += 1
    if not checked:
        pytest.skip("no committed results")
