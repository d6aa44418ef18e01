"""The sizes of a stored pooled-AUC pool (``n_pos``, ``n_neg``) must be those of the pools the run scored.

Before, an ``n_neg`` raised by hand (2⁷⁰, or 501 where the run kept 500 negatives per query) passed every value check
and ``replicate --redecide`` wrote a different pooled-AUC interval without a word. The reference is the run's own
record: the committed 001 result, whose ``metrics.pooled_auc`` every stored pool gives again exactly.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from st_magnitude._trust.errors import InputFileError
from st_magnitude.cli import main
from st_magnitude.lab.replication.common import compact_pools, pooled_auc_statistic
from st_magnitude.lab.replication.items import items_path, read_items, recompute, with_items
from st_magnitude.lab.replication.pool_sizes import check_pool_sizes

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "replication" / "results"
SUMMARY = RESULTS / "001-cpu.json"


def _copy(tmp_path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copy(SUMMARY, folder / SUMMARY.name)
    shutil.copy(items_path(SUMMARY), items_path(folder / SUMMARY.name))
    return folder / SUMMARY.name


def _edit_items(summary: Path, key: str, index: int, value) -> None:
    path = items_path(summary)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["seeds"][0]["arms"]["mw"]["scifact"]["auc_pools"][key][index] = value(
        doc["seeds"][0]["arms"]["mw"]["scifact"]["auc_pools"][key][index]
    )
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_every_committed_pool_gives_the_pooled_auc_its_run_recorded():
    full = with_items(json.loads(SUMMARY.read_text()), read_items(items_path(SUMMARY)))
    check_pool_sizes(full["seeds"], full["settings"]["auc_negatives"])  # the reference: no refusal
    pools = full["seeds"][0]["arms"]["mw"]["scifact"]["auc_pools"]
    grouped = pooled_auc_statistic(pools)
    auc = grouped.pair_counts().sum() / (grouped._sizes[0].sum() * grouped._sizes[1].sum())
    assert auc == full["seeds"][0]["arms"]["mw"]["scifact"]["metrics"]["pooled_auc"]  # exactly


CASES = {
    "n_neg 2^70": ("n_neg", lambda n: 2**70, r"auc_pools\.n_neg must be a list of 300 non-negative integers \(at"),
    "n_neg 2^53 + 1": ("n_neg", lambda n: 2**53 + 1, r"auc_pools\.n_neg must be a list of 300 non-negative integers"),
    "n_neg over the run's cap": (
        "n_neg",
        lambda n: n + 1,
        r"seed 0\.arms\.mw\.scifact\.auc_pools\.n_neg\[5\]: is 501, more than the 500 negatives the run kept",
    ),
    "n_neg 2^40": ("n_neg", lambda n: 2**40, r"n_neg\[5\]: is 1099511627776, more than the 500 negatives"),
    "n_pos one more": (
        "n_pos",
        lambda n: n + 1,
        r"seed 0\.arms\.mw\.scifact\.auc_pools: its pair counts and sizes .* give a pooled AUC of 0\.52\d+, not the "
        r"0\.5271632055 the run computed",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_redecide_refuses_sizes_that_are_not_the_scored_pools_naming_the_file(case, tmp_path, capsys):
    key, change, message = CASES[case]
    summary = _copy(tmp_path)
    _edit_items(summary, key, 5, change)
    before = {p.name: p.read_bytes() for p in summary.parent.iterdir()}
    assert main(["replicate", "--redecide", str(summary)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(items_path(summary)) in err[0], err
    assert __import__("re").search(message, err[0]), err[0]
    assert {p.name: p.read_bytes() for p in summary.parent.iterdir()} == before  # nothing rewritten
    with pytest.raises(InputFileError, match=message):
        recompute(summary)


def test_a_full_result_with_changed_sizes_is_refused_naming_it(tmp_path, capsys):
    full = with_items(json.loads(SUMMARY.read_text()), read_items(items_path(SUMMARY)))
    full["seeds"][1]["arms"]["infonce"]["nfcorpus"]["auc_pools"]["n_pos"][0] += 1
    path = tmp_path / "001-cpu-full.json"
    path.write_text(json.dumps(full))
    before = path.read_bytes()
    assert main(["replicate", "--redecide", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: seed 1.arms.infonce.nfcorpus.auc_pools: its pair counts" in err[0], err
    assert path.read_bytes() == before


def _seed(shift: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    raw = {
        "positives": (rng.normal(shift, 1, 8)).tolist(),
        "negatives": rng.normal(0, 1, 20).tolist(),
        "positive_query": [0, 0, 1, 1, 2, 2, 3, 3],
        "negative_query": [0, 1, 2, 3] * 5,
    }
    from st_magnitude.evaluation.auc import pooled_auc_score

    auc = pooled_auc_score(np.array(raw["positives"]), np.array(raw["negatives"]))
    arm = {"metrics": {"pooled_auc": auc}, "auc_pools": compact_pools(raw, 4), "per_query": {"ndcg@10": [0.5] * 4}}
    return {"seed": seed, "arms": {"a": {"d": arm}}}


def test_the_interval_itself_refuses_changed_sizes():
    from st_magnitude.lab.replication.claims._shared import compare_auc

    seeds = [_seed(1.0, s) for s in range(2)]
    assert compare_auc(seeds, "a", "a", "d", n_boot=20).per_seed_diff == (0.0, 0.0)  # consistent pools decide
    seeds[1]["arms"]["a"]["d"]["auc_pools"]["n_neg"][2] = 2**40  # under the reader's bound, over what was scored
    with pytest.raises(ValueError, match=r"seed 1\.arms\.a\.d\.auc_pools: its pair counts and sizes"):
        compare_auc(seeds, "a", "a", "d", n_boot=20)
    del seeds[1]["arms"]["a"]["d"]["metrics"]["pooled_auc"]
    with pytest.raises(ValueError, match=r"seed 1\.arms\.a\.d\.metrics\.pooled_auc: is None"):
        compare_auc(seeds, "a", "a", "d", n_boot=20)


@pytest.mark.parametrize("cap", [True, "500", 5.0, None])
def test_a_cap_that_is_no_integer_is_not_used(cap):
    check_pool_sizes([_seed(0.5)], cap)  # the AUC check still holds; only an integer setting caps n_neg
