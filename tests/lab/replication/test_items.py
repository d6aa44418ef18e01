"""The per-item values committed beside a summary: written by the runner's summary path, read back at the trust
boundary, and enough to recompute every interval the page shows — for a synthetic run, and for every committed
result that has the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from test_claim_rules import DIMS, dim_seeds, revela_seeds, table5_seeds

from st_magnitude._trust.errors import InputFileError
from st_magnitude.lab.replication.claims import get_claim
from st_magnitude.lab.replication.items import items_path, read_items, recompute, with_items, write_items
from st_magnitude.lab.replication.runner import decide_again, has_items, summary

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "docs" / "replication" / "results"


def _record(claim_id: str, seeds: list[dict], **settings) -> dict:
    claim = get_claim(claim_id)
    settings = {**claim.settings("cpu"), **settings}
    for i, s in enumerate(seeds):
        s["seed"] = i
    return {
        "claim": claim_id,
        "profile": "cpu",
        "tag": None,
        "settings": settings,
        "seeds": seeds,
        "status": "finished",
        "decision": claim.decide(seeds, settings),
    }


def _intervals(decision: dict) -> dict:
    """Every interval a decision shows: its comparisons, judged parts and reported ones, by what they compare."""
    found = list(decision.get("comparisons", {}).values()) + list(decision.get("informational", []))
    found += [p["comparison"] for p in decision.get("parts", []) if "comparison" in p]
    return {
        f"{c['metric']}: {c['arm_a']} − {c['arm_b']} {what}": c[what] if what == "diff" else c["ci"][what]
        for c in found
        for what in ("diff", "low", "high")
    }


@pytest.mark.parametrize(
    "claim_id, seeds, settings",
    [
        ("003", lambda: dim_seeds(lambda d: 100.0 / d**1.7 + 4.5), {"fit_bootstrap": 0, "dims": DIMS}),
        ("000-table5", lambda: table5_seeds(cosine=0.3, base=1.0, one_sided={"sent1norm@0.01": 3.0}), {"n_boot": 50}),
        ("004", lambda: revela_seeds(gain=0.1, random_gain=0.0, signal=-0.05), {}),
    ],
)
def test_a_summary_and_its_items_file_recompute_every_interval(tmp_path, claim_id, seeds, settings):
    record = _record(claim_id, seeds(), **settings)
    path = tmp_path / f"{claim_id}-cpu.json"
    path.write_text(json.dumps(summary(record)), encoding="utf-8")
    assert not has_items(json.loads(path.read_text())) and has_items(record)
    written = write_items(record, path)
    assert written == items_path(path) and written.name == f"{claim_id}-cpu.items.json.gz"
    stored, again = recompute(path)
    assert _intervals(again) == pytest.approx(_intervals(stored["decision"]), rel=1e-12, abs=1e-12)
    assert again["verdict"] == stored["decision"]["verdict"]
    assert gzip.decompress(written.read_bytes())[:1] == b"{"
    # written twice, byte for byte the same file (no time stamp): a re-run that changes nothing changes no file
    before = written.read_bytes()
    write_items(record, path)
    assert written.read_bytes() == before
    # a summary judged again (no per-item values) writes no items file
    assert write_items(summary(record), tmp_path / "other.json") is None


def test_items_of_another_run_are_refused(tmp_path):
    record = _record("003", dim_seeds(lambda d: 5.3), fit_bootstrap=0)
    path = tmp_path / "003-cpu.json"
    write_items(record, path)
    items = read_items(items_path(path))
    with pytest.raises(ValueError, match="seeds"):
        with_items({**summary(record), "seeds": summary(record)["seeds"][:2]}, items)
    with pytest.raises(ValueError, match="claim"):
        with_items({**summary(record), "claim": "002"}, items)


def test_a_hostile_items_file_is_refused_at_the_boundary(tmp_path):
    plain = tmp_path / "x.items.json.gz"
    plain.write_text("{}", encoding="utf-8")
    with pytest.raises(InputFileError, match="gzip"):
        read_items(plain)
    plain.write_bytes(gzip.compress(b'{"format": "something else", "seeds": []}'))
    with pytest.raises(InputFileError, match="format"):
        read_items(plain)
    plain.write_bytes(gzip.compress(b'{"format": "st-magnitude per-item values 1", "seeds": [NaN]}'))
    with pytest.raises(InputFileError, match="NaN"):
        read_items(plain)
    from st_magnitude._trust.gzip_json import read_json_gz

    plain.write_bytes(gzip.compress(b" " * 5000 + b"{}"))  # a small file that unpacks past the bound
    with pytest.raises(InputFileError, match="unpacks to more"):
        read_json_gz(plain, max_unpacked=4096)


def _items_with_pools(tmp_path, pools: dict) -> Path:
    path = tmp_path / "001-cpu.items.json.gz"
    doc = {"format": "st-magnitude per-item values 1", "claim": "001", "profile": "cpu", "tag": None}
    doc["seeds"] = [{"seed": 0, "arms": {"mw": {"scifact": {"auc_pools": pools}}}}]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_hostile_pooled_auc_counts_are_refused_at_the_boundary(tmp_path):
    """The pair counts inside an items file: packed text that is not base64/zlib, unpacks to another size or to a
    count its pools cannot hold gets one line naming the seed and the key."""
    from st_magnitude._trust.packed import pack_bytes
    from st_magnitude.lab.replication.common import COMPACT_POOLS, compact_pools

    rng = np.random.default_rng(3)
    good = compact_pools(
        {
            "positives": rng.normal(1, 1, 6).tolist(),
            "negatives": rng.normal(0, 1, 12).tolist(),
            "positive_query": [0, 0, 1, 1, 2, 2],
            "negative_query": [0, 1, 2] * 4,
        },
        3,
    )
    assert read_items(_items_with_pools(tmp_path, good))["seeds"][0]["arms"]["mw"]["scifact"]["auc_pools"] == good
    too_big = np.full(9, 2 * 2 * 4 + 2, dtype="<u4").view(np.uint8).reshape(-1, 4).T.tobytes()  # > P·N = 2·4
    bomb = pack_bytes(b"\0" * (1 << 20))  # 1 MB of zeros in about 1 kB
    cases = [
        ({**good, "pair_counts": "not base64!"}, "seed 0.arms.mw.scifact: auc_pools.pair_counts is not base64"),
        ({**good, "pair_counts": pack_bytes(b"\0" * 35)}, "does not unpack to the 36 bytes"),
        ({**good, "pair_counts": bomb}, "does not unpack to the 36 bytes"),
        ({**good, "pair_counts": "AAAA"}, "is not zlib data"),
        ({**good, "pair_counts": pack_bytes(too_big)}, "a count above its queries' positives × negatives"),
        ({**good, "n_pos": [2, 2]}, "n_pos must be a list of 3 non-negative integers"),
        ({**good, "n_neg": [4, -4, 4]}, "n_neg must be a list of 3 non-negative integers"),
        ({**good, "n_queries": "3"}, "n_queries must be a non-negative integer"),
        ({**good, "format": "pair_counts/f32-base64"}, f"format must be '{COMPACT_POOLS}'"),
        ([1, 2], "format must be"),
    ]
    for pools, expected in cases:
        with pytest.raises(InputFileError) as info:
            read_items(_items_with_pools(tmp_path, pools))
        assert expected in str(info.value) and "\n" not in str(info.value), (pools, str(info.value))


COMMITTED = sorted(p for p in RESULTS.glob("*.json") if items_path(p).is_file())


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_every_interval_on_the_page_recomputes_from_the_committed_items(path):
    """What the page shows for this result (its summary's comparisons) is what its per-item values give."""
    stored, again = recompute(path)
    assert _intervals(again) == pytest.approx(_intervals(stored["decision"]), rel=1e-9, abs=1e-9)
    assert again["verdict"] == stored["decision"]["verdict"]


def test_every_committed_result_has_its_items_file():
    """A summary without its per-item values could not be recomputed by anyone outside: every committed result
    carries them (``not_run.json`` lists claims not run, and has none)."""
    without = sorted(p.name for p in RESULTS.glob("*.json") if p.name != "not_run.json" and p not in COMMITTED)
    assert without == []
    assert len(COMMITTED) >= 7


@pytest.mark.parametrize(
    "claim_id, seeds, settings",
    [
        ("003", lambda: dim_seeds(lambda d: 5.3 + 0.03 * min(np.log(d) - np.log(256), 0.0)), {"fit_bootstrap": 0}),
        ("000-table5", lambda: table5_seeds(cosine=0.3, base=1.0, one_sided={"sent1norm@0.01": 3.0}), {"n_boot": 50}),
    ],
)
def test_a_summary_judged_again_agrees_with_deciding_from_the_items(claim_id, seeds, settings):
    """``--redecide`` on a summary (no per-item values) reaches the verdicts ``decide`` reaches on the full record."""
    record = _record(claim_id, seeds(), **settings)
    again = summary(record)
    decide_again(again)
    assert "judged_from" in again["decision"]

    def names(d):
        return [(st["name"], st["verdict"], [p["verdict"] for p in st["parts"]]) for st in d["statements"]]

    assert names(again["decision"]) == names(record["decision"])
    assert again["verdict"] == record["decision"]["verdict"]
