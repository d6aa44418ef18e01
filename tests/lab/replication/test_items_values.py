"""Every per-item value in a ``.items.json.gz`` file is checked at the boundary: a number in its range (an nDCG in
[0, 1], a count a non-negative integer), never a string read as a number; the refusal is one line naming the file,
the seed, the key and the item."""

from __future__ import annotations

import gzip
import json

import pytest

from st_magnitude._trust.errors import InputFileError
from st_magnitude.lab.replication.items import read_items


def _seed() -> dict:
    """One seed holding every kind of per-item value, all valid."""
    return {
        "seed": 0,
        "arms": {
            "mw": {
                "scifact": {
                    "per_query": {
                        "ndcg@10": [0.0, 0.5, 1.0],
                        "recall@100": [1.0, 0.0, 0.25],
                        "mrr@10": [0.5, 1, 0],
                        "contrastive_entropy": [5.5, 0.0, 8.7],
                    },
                    "auc_pools": {
                        "positives": [1.5, 0.2],
                        "negatives": [-0.3, 0.1, 0.0],
                        "positive_query": [0, 1],
                        "negative_query": [0, 1, 2],
                    },
                },
                "sts-b": {"predictions": [61.7, -3.0, 0]},
            }
        },
        "labels": [0.5, 1.0, 0.0],
        "history": {"revela": [{"step": 0, "ce_real": 10.9, "ce_real_minus_shuffled": -0.25}]},
    }


def _write(tmp_path, seed: dict):
    path = tmp_path / "001-cpu.items.json.gz"
    doc = {"format": "st-magnitude per-item values 1", "claim": "001", "profile": "cpu", "tag": None}
    path.write_bytes(gzip.compress(json.dumps({**doc, "seeds": [seed]}).encode()))
    return path


def test_valid_per_item_values_are_read(tmp_path):
    assert read_items(_write(tmp_path, _seed()))["seeds"][0] == _seed()


def _set(seed: dict, where: str, value) -> dict:
    *keys, last = where.split(".")
    obj = seed
    for k in keys:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value
    return seed


Q = "arms.mw.scifact.per_query"
P = "arms.mw.scifact.auc_pools"
CASES = [
    (f"{Q}.ndcg@10.1", 1e6, "ndcg@10[1]: is 1000000.0, outside [0, 1]"),
    (f"{Q}.recall@100.2", -0.1, "recall@100[2]: is -0.1, outside [0, 1]"),
    (f"{Q}.mrr@10.0", 1.5, "mrr@10[0]: is 1.5, outside [0, 1]"),
    (f"{Q}.contrastive_entropy.0", -2.0, "contrastive_entropy[0]: is -2.0, outside [0, inf)"),
    (f"{Q}.ndcg@10.0", "0.5", "ndcg@10[0]: is the string '0.5', not a number"),
    (f"{Q}.ndcg@10.0", True, "ndcg@10[0]: is true, not a number"),
    (f"{Q}.ndcg@10.0", None, "ndcg@10[0]: is null, not a number"),
    (f"{Q}.ndcg@10", "0.5", "per_query.ndcg@10: must be a list of numbers, not a string"),
    (f"{Q}", [0.5], "per_query: must be an object of lists"),
    ("arms.mw.sts-b.predictions.0", "61.7", "predictions[0]: is the string '61.7', not a number"),
    ("labels.2", "1", "labels[2]: is the string '1', not a number"),
    ("history.revela.0.step", -3, "history.revela[0].step: is -3, outside [0, inf)"),
    ("history.revela.0.step", 1.5, "history.revela[0].step: is 1.5, not an integer"),
    ("history.revela.0.ce_real", "10.9", "history.revela[0].ce_real: is the string '10.9', not a number"),
    ("history.revela", {"step": 0}, "history.revela: must be a list of objects"),
    (f"{P}.positives.0", "1.5", "auc_pools.positives[0]: is the string '1.5', not a number"),
    (f"{P}.negative_query.1", -1, "auc_pools.negative_query[1]: is -1, outside [0, inf)"),
    (f"{P}.positive_query.1", 0.5, "auc_pools.positive_query[1]: is 0.5, not an integer"),
    (P, {"positives": [0.1]}, "auc_pools: misses negatives, positive_query, negative_query"),
    (f"{P}.positive_query.0", "0", "auc_pools.positive_query[0]: is the string '0', not a number"),
]


@pytest.mark.parametrize("where, value, expected", CASES, ids=[f"{w}={v!r}" for w, v, _ in CASES])
def test_a_per_item_value_out_of_its_range_or_not_a_number_is_refused_naming_it(tmp_path, where, value, expected):
    path = _write(tmp_path, _set(_seed(), where, value))
    with pytest.raises(InputFileError) as info:
        read_items(path)
    message = str(info.value)
    assert message.startswith(f"{path}: seed 0.") and expected in message and "\n" not in message, message


def test_every_per_item_key_has_its_check():
    from st_magnitude.lab.replication.item_values import CHECKS
    from st_magnitude.lab.replication.items import PER_ITEM_KEYS

    assert set(CHECKS) == set(PER_ITEM_KEYS)
