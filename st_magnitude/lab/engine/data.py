"""Training data of the lab: seeded (query, relevant document) pairs from a BEIR split, and STS-B pairs.

compare and replicate draw their pairs through :func:`st_magnitude.data.eval_set.shuffled_pairs`, so the same seed
gives the same order in both; they differ only in how many they keep (compare a pool of 3n for the no-duplicates
sampler, replicate exactly n).
"""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["load_sts", "retrieval_pairs", "training_pairs"]


def training_pairs(folder: Path, n: int, seed: int) -> dict[str, list[str]]:
    """n seeded (query, relevant document) pairs from the dataset's train split (dev/test if there is none)."""
    from st_magnitude.data.beir import load_beir
    from st_magnitude.data.eval_set import shuffled_pairs

    split = next((s for s in ("train", "dev", "test") if (folder / "qrels" / f"{s}.tsv").is_file()), None)
    if split is None:
        raise FileNotFoundError(f"{folder} has no qrels to train on")
    pairs = shuffled_pairs(load_beir(folder, split), seed)  # an unknown id is an error, not a dropped pair
    # one positive per query per batch is what the no-duplicates sampler enforces; keep the pool large enough
    pairs = pairs[: max(n * 3, n)]
    return {"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs], "split": split}


def retrieval_pairs(folder: Path, n: int, seed: int, split: str = "train") -> dict[str, list[str]]:
    """``n`` seeded (query, relevant document) pairs from a BEIR split (each query at most once per 3 pairs)."""
    from st_magnitude.data.beir import load_beir
    from st_magnitude.data.eval_set import shuffled_pairs

    pairs = shuffled_pairs(load_beir(folder, split, on_missing="drop"), seed)
    if not pairs:
        raise ValueError(f"{folder} ({split}) has no positive pairs")
    if n > len(pairs):
        raise ValueError(f"asked for {n} training pairs but {folder.name}/{split} has only {len(pairs)}")
    pairs = pairs[:n]
    return {"anchor": [p[0] for p in pairs], "positive": [p[1] for p in pairs]}


def load_sts(folder: Path, split: str, max_pairs: int | None = None) -> dict[str, list]:
    """STS-B (``sts-{split}.csv``, tab separated): sentence1, sentence2 and the score scaled to [0, 1]."""
    path = folder / f"sts-{split}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (STS-B splits: train, dev, test)")
    from st_magnitude._trust import InputFileError
    from st_magnitude._trust.lines import iter_lines

    s1, s2, score = [], [], []
    for lineno, line in iter_lines(path):  # UTF-8 checked per line, split at "\n" only
        row = next(csv.reader([line.rstrip("\r\n")], delimiter="\t", quoting=csv.QUOTE_NONE), [])
        if len(row) < 7:
            continue
        try:
            value = float(row[4])
        except ValueError:
            value = float("nan")
        if not 0.0 <= value <= 5.0:  # NaN included
            raise InputFileError(path, f"score {row[4]!r} is not a number in [0, 5] (column 5)", where=str(lineno))
        s1.append(row[5])
        s2.append(row[6])
        score.append(value / 5.0)
    if max_pairs:
        s1, s2, score = s1[:max_pairs], s2[:max_pairs], score[:max_pairs]
    return {"sentence1": s1, "sentence2": s2, "score": score}
