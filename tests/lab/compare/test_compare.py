"""`st-magnitude compare` end to end on a tiny model and toy BEIR folders: results, resumability, bad inputs."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.toy_beir import write_toy_beir
from helpers.toy_compare import toy_compare_config

from st_magnitude.cli import main
from st_magnitude.lab.compare.compare import run_compare
from st_magnitude.lab.compare.config import CompareConfig


@pytest.fixture
def setup(tmp_path, tiny_model):
    model_dir = tmp_path / "base"
    tiny_model.save(str(model_dir))
    data = tmp_path / "data"  # the data folder: BEIR datasets under beir/
    write_toy_beir(data / "beir" / "toy", n_docs=24, n_queries=6, split="test")
    write_toy_beir(data / "beir" / "toy", n_docs=24, n_queries=6, split="train", seed=1)
    write_toy_beir(data / "beir" / "other", n_docs=16, n_queries=4, seed=2)
    return model_dir, data


def config(model_dir, data, out, **kw) -> CompareConfig:
    """Two variants evaluated on both toy folders, with a small κ run."""
    defaults = dict(variants=("qnorm", "dnorm"), eval_data=("toy", "other"), kappa_pairs=8, kappa_bootstrap=3)
    return toy_compare_config(model_dir, data, out, **{**defaults, "learning_rate": 1e-3, **kw})


def test_compare_writes_results_and_resumes(setup, tmp_path):
    model_dir, data = setup
    out = tmp_path / "out"
    logs: list[str] = []
    result = run_compare(config(model_dir, data, out), log=logs.append)
    # Then: one row per (run, dataset), a table, a CSV, plots and the κ verdict
    assert {(r["run"], r["dataset"]) for r in result["rows"]} == {
        (f"{v}-infonce", ds) for v in ("qnorm", "dnorm") for ds in ("toy", "other")
    }
    for r in result["rows"]:
        assert 0.0 <= r["ndcg@10"] <= 1.0 and 0.0 <= r["pooled_auc"] <= 1.0
    text = (out / "results.md").read_text()
    # the toy data holds fewer than 8n pairs: the κ rule must say so, not pick a side
    assert "| qnorm-infonce | toy |" in text and "κ rule inconclusive" in text and "κ picked" not in text
    assert (out / "results.csv").read_text().startswith("run,dataset,ndcg@10")
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "metrics_other.png",
        "metrics_toy.png",
        "norms_other.png",
        "norms_toy.png",
    ]
    saved = json.loads((out / "runs" / "qnorm-infonce" / "metrics.json").read_text())
    assert saved["variant"] == "qnorm" and "pooled_auc" in saved["metrics"]["toy"]

    # Re-running skips finished variants
    logs.clear()
    again = run_compare(config(model_dir, data, out), log=logs.append)
    assert sum("skipped" in line for line in logs) == 2
    assert again["rows"] == result["rows"]

    # A run interrupted after training (no metrics yet) is evaluated, not retrained
    (out / "runs" / "dnorm-infonce" / "metrics.json").unlink()
    logs.clear()
    run_compare(config(model_dir, data, out), log=logs.append)
    assert any("[dnorm-infonce] trained earlier: evaluating" in line for line in logs)

    # A run interrupted mid-training (no finished model) is trained again and completes
    shutil.rmtree(out / "runs" / "qnorm-infonce" / "model")
    (out / "runs" / "qnorm-infonce" / "metrics.json").unlink()
    logs.clear()
    run_compare(config(model_dir, data, out), log=logs.append)
    assert any("[qnorm-infonce] training" in line for line in logs)
    assert (out / "runs" / "qnorm-infonce" / "metrics.json").exists()


def test_compare_refuses_a_changed_configuration(setup, tmp_path):
    model_dir, data = setup
    out = tmp_path / "out"
    run_compare(config(model_dir, data, out, variants=("dot",), kappa=False), log=lambda s: None)
    with pytest.raises(ValueError, match="trained with other settings"):
        run_compare(config(model_dir, data, out, variants=("dot",), steps=3, kappa=False), log=lambda s: None)


def test_compare_bad_inputs_leave_nothing_behind(setup, tmp_path, capsys):
    model_dir, data = setup
    out = tmp_path / "never"
    common = [
        "compare",
        "--data-root",
        str(data),
        "--output",
        str(out),
        "--train-data",
        "toy",
    ]
    assert main([*common, "--model", str(model_dir), "--eval-data", "toy,fiqa"]) == 2
    assert "'fiqa' is not in the data folder" in capsys.readouterr().err
    common += ["--eval-data", "toy"]
    assert main([*common, "--model", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*common, "--model", str(model_dir), "--variants", "qnorm,dnrom"]) == 2
    assert "Valid names" in capsys.readouterr().err
    assert main([*common, "--model", str(model_dir), "--loss", "hinge"]) == 2
    assert "valid losses: infonce, mw, l2dir" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    args = [
        "compare",
        "--data-root",
        str(data),
        "--output",
        str(blocker / "sub"),
        "--train-data",
        "toy",
        "--eval-data",
        "toy",
        "--model",
        str(model_dir),
    ]
    assert main(args) == 2
    assert "not a folder" in capsys.readouterr().err
    assert not out.exists()


def test_compare_over_seeds_reports_intervals_and_noise(setup, tmp_path):
    """--seeds 2: per-seed folders on one evaluation subsample, means with t-intervals, paired differences."""
    import numpy as np
    from scipy import stats as sps

    from st_magnitude.lab.compare.seeds import run_compare_seeds

    model_dir, data = setup
    out = tmp_path / "seeds"
    cfg = config(model_dir, data, out, variants=("cosine", "qnorm"), eval_data=("toy",), max_queries=4, kappa=False)
    result = run_compare_seeds(cfg, 2, log=lambda *_: None)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["plots", "seed-42", "seed-43"]
    # the seed plot: error bars of the intervals below, the untrained base of the seed folders as reference
    assert (out / "plots" / "metrics_toy_seeds.png").stat().st_size > 1000
    assert (out / "seed-42" / "base.json").is_file()
    per_seed = [
        json.loads((out / f"seed-{s}" / "runs" / "qnorm-infonce" / "metrics.json").read_text()) for s in (42, 43)
    ]
    ref = [json.loads((out / f"seed-{s}" / "runs" / "cosine-infonce" / "metrics.json").read_text()) for s in (42, 43)]
    # the same 4 subsampled queries in both seeds (the first seed's subsample)
    assert [sorted(r["metrics"]["toy"]["per_query_ndcg@10"]) for r in per_seed + ref] == [
        sorted(per_seed[0]["metrics"]["toy"]["per_query_ndcg@10"])
    ] * 4
    # mean and t-interval of the seed means, computed independently
    values = np.array([r["metrics"]["toy"]["ndcg@10"] for r in per_seed])
    row = next(r for r in result["rows"] if r["run"] == "qnorm-infonce")
    half = sps.t.ppf(0.975, 1) * values.std(ddof=1) / np.sqrt(2)
    assert row["ndcg@10"] == pytest.approx(values.mean())
    assert row["ndcg@10_low"] == pytest.approx(values.mean() - half)
    # the difference to the reference run is the mean of the per-seed mean differences
    (comp,) = result["comparisons"]
    diffs = [
        np.mean(list(a["metrics"]["toy"]["per_query_ndcg@10"].values()))
        - np.mean(list(b["metrics"]["toy"]["per_query_ndcg@10"].values()))
        for a, b in zip(per_seed, ref)
    ]
    assert comp["arm_b"] == "cosine-infonce" and comp["diff"] == pytest.approx(np.mean(diffs))
    assert comp["ci"]["low"] <= comp["diff"] <= comp["ci"]["high"]
    text = (out / "results_seeds.md").read_text()
    assert "Verdict:" in text and ("within noise" in text or "significant" in text)
    assert (out / "results_seeds.csv").read_text().startswith("run,dataset,seeds,ndcg@10,ndcg@10_low")


def test_compare_seeds_argument_is_validated(setup, tmp_path, capsys):
    model_dir, data = setup
    args = ["compare", "--model", str(model_dir), "--data-root", str(data), "--seeds", "0"]
    rc = main([*args, "--output", str(tmp_path / "x")])
    assert rc == 2 and "--seeds" in capsys.readouterr().err and not (tmp_path / "x").exists()
