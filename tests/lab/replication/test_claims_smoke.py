"""Every claim's code path end to end on tiny in-code models and synthetic data (not the real runs), plus the CLI,
the result files and the generated report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import WORDS, build_tiny_bert_dir, build_tiny_st
from helpers.toy_beir import write_toy_beir

from st_magnitude.evaluation.verdicts import VERDICTS
from st_magnitude.lab.replication.claims import CLAIM_MODULES, get_claim, list_claims
from st_magnitude.lab.replication.gates import NOT_REACHED
from st_magnitude.lab.replication.report import render_report
from st_magnitude.lab.replication.runner import redecide, run_claim, summary

REPO = Path(__file__).resolve().parents[3]

#: per claim: which tiny model folder stands in for the profile's base
MODEL_KEY = {claim_id: "st_normalize" if claim_id == "000-appf" else "bert" for claim_id in CLAIM_MODULES}


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repl_data")
    for name in ("nfcorpus", "scifact"):
        for split in ("train", "dev", "test"):
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
        assert set(c.can_establish) == {"cpu", "gpu"} and c.dry_run, c.id  # says what a run can establish
    with pytest.raises(ValueError, match="valid claims"):
        get_claim("999")


@pytest.mark.parametrize("claim_id", list(CLAIM_MODULES))
def test_gpu_profile_dry_run_runs_the_code_path_on_tiny_models(claim_id, toy_data, models, tmp_path, caplog):
    """``--profile gpu --dry-run``: the gpu protocol's code path (its arms, losses, gates, LoRA where it has one) at
    the claim's tiny sizes, on CPU; two seeds for some claims so both interval paths run. A protocol trains the way
    the docs tell users to, so it never triggers the library's own "add LossStateCallback" warning."""
    caplog.set_level("WARNING", logger="st_magnitude")
    seeds = 2 if claim_id in ("001", "000-appf") else 1
    record = run_claim(
        claim_id,
        profile="gpu",
        seeds=seeds,
        data=str(toy_data),
        out=tmp_path / "out",
        results=tmp_path / "results",
        device="cpu",
        model=str(models[MODEL_KEY[claim_id]]),
        command=f"st-magnitude replicate {claim_id} --profile gpu --dry-run (test)",
        dry_run=True,
    )
    claim = get_claim(claim_id)
    assert record["status"] == "finished" and len(record["seeds"]) == seeds and record["dry_run"]
    assert record["settings"] == claim.settings("gpu", dry_run=True)
    assert record["verdict"] in (*VERDICTS, NOT_REACHED) and record["decision"]["gates"]
    assert not (tmp_path / "results").exists()  # a dry run never writes the committed summaries
    assert not [r.getMessage() for r in caplog.records if "LossStateCallback" in r.getMessage()]
    full = json.loads(Path(record["full_result"]).read_text())
    assert full["decision"]["verdict"] == record["verdict"] and full["tag"] == "dry-run"
    arms = full["seeds"][0]["arms"]
    assert "base" in arms or "raw" in arms  # the untrained base is always an arm
    if claim_id != "000-table5":
        arm = next(iter(arms.values()))
        n = len(next(iter(arm.values()))["per_query"][next(iter(next(iter(arm.values()))["per_query"]))])
        assert n >= 2


def test_cpu_profile_dry_run_and_report(toy_data, models, tmp_path):
    """The cpu profile's own code path where it differs from the gpu one (004: a frozen LM, no LoRA), and the
    report built from a summary."""
    record = run_claim(
        "004",
        profile="cpu",
        data=str(toy_data),
        out=tmp_path / "out",
        device="cpu",
        model=str(models["bert"]),
        dry_run=True,
        seeds=1,
    )
    assert record["settings"]["lm_frozen"] and record["settings"]["lm_lora_r"] == 0
    results = tmp_path / "results"
    results.mkdir()
    (results / "004-cpu.json").write_text(json.dumps({**summary(record), "tag": None, "dry_run": False}))
    text = render_report(results)
    assert "| 004 | cpu |" in text and f"**{record['verdict']}**" in text


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
    assert main(["replicate", "--report", str(target), "--results", str(tmp_path / "none")]) == 0
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
        "results are committed but docs/replication.md is missing: "
        "run `st-magnitude replicate --report docs/replication.md`"
    )
    assert page.read_text(encoding="utf-8") == render_report(results), (
        "docs/replication.md differs from the result JSONs: run `st-magnitude replicate --report docs/replication.md`"
    )
    # a rule changed after a run was seen is never presented as fixed before running
    sections = {s.split(":", 1)[0]: s for s in page.read_text(encoding="utf-8").split("\n## ")[1:]}
    for c in list_claims():
        revised = "**Verdict rule** (revised after running: " in sections[c.id]
        assert revised == bool(c.revised) and (revised or "**Verdict rule** (fixed before running)" in sections[c.id])


def test_tagged_control_run_is_an_extra_row(toy_data, models, tmp_path):
    overrides = {**get_claim("000-table5").dry_run, "arms": ["cosine", "sent1norm"], "lambdas": [0.1]}
    results = tmp_path / "results"
    kw = dict(profile="cpu", seeds=1, data=str(toy_data), out=tmp_path / "out", results=results, device="cpu")
    rec = run_claim("000-table5", model=str(models["bert"]), overrides=overrides, tag="lambda0.1", **kw)
    main = json.loads((results / "000-table5-cpu-lambda0.1.json").read_text())
    again = redecide(rec["full_result"], results)  # recomputed from the stored per-item scores, same verdict
    assert again["verdict"] == rec["verdict"] and again["decision"]["arms"] == rec["decision"]["arms"]
    assert main["tag"] == "lambda0.1" and list(main["seeds"][0]["arms"]) == ["base", "cosine", "sent1norm@0.1"]
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
    """The small result files are committed: no --output scratch folder, no --data-root and no absolute path of the
    machine, whichever way the folder options are spelled."""
    from st_magnitude.lab.replication.runner import summary

    kept = "st-magnitude replicate 001 --profile cpu --seeds 3 --set 'a=[1, 2]' --set o=1"
    for folders in (
        "--output /scratch/x --data-root /data",
        "-o /scratch/x --data-root=/data",
        "--output=/scratch/x",
        "-o/scratch/x",
    ):
        rec = {"command": f"{kept} {folders}", "full_result": "/scratch/x/001-cpu-1.json", "seeds": []}
        out = summary(rec)
        assert out["command"] == kept, folders
        assert out["full_result"] == "001-cpu-1.json"
    for path in sorted((REPO / "docs" / "replication" / "results").glob("*.json")):
        text = path.read_text()
        assert "--output" not in text and "--data-root" not in text and '"/' not in text, path.name


#: committed results whose profile has changed since they ran, and the settings that changed (the page's section says
#: so; the re-run replaces the entry)
RERUN_PENDING: dict[str, list[str]] = {}


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
        profile = claim.settings(rec["profile"])
        recorded = rec["settings"]
        changed = sorted(k for k in recorded if profile.get(k, "<missing>") != recorded[k])
        # a profile changed while its re-run is under way: only the named settings, and the page says so
        assert changed == RERUN_PENDING.get(f.name, []), f"{f.name}: settings {changed} changed since the run"
        if not changed:
            assert rec["setting_differences"] == claim.differences.get(rec["profile"]), f"{f.name}: differences"
        assert [k for k in profile if k in recorded] == list(recorded), f"{f.name}: settings order changed"
        checked += 1
    if not checked:
        pytest.skip("no committed results")
