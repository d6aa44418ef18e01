"""A tiny BEIR folder written in code (CRLF qrels like the real release) for the evaluation / diagnostics tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

from conftest import WORDS

TOPICS = [
    "protein gene cell",
    "diet vitamin fiber",
    "heart blood risk",
    "sleep memory brain",
    "coffee tea milk",
    "exercise weight fat",
    "cancer dose trial",
    "fish egg meat",
]


def write_toy_beir(folder: Path, n_docs: int = 24, n_queries: int = 6, seed: int = 0, split: str = "test") -> Path:
    """corpus.jsonl / queries.jsonl / qrels/<split>.tsv; query i is relevant to docs 2i and 2i+1 (same topic)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    docs = []
    for j in range(n_docs):
        topic = TOPICS[(j // 2) % len(TOPICS)]
        filler = " ".join(rng.choice(WORDS[:20]) for _ in range(rng.randint(3, 12)))
        docs.append({"_id": f"d{j}", "title": f"study {j % 5}", "text": f"{topic} {filler}", "metadata": {}})
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for i in range(n_queries):
            f.write(
                json.dumps({"_id": f"q{i}", "text": f"effect of {TOPICS[i % len(TOPICS)]}", "metadata": {}}) + "\n"
            )
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8", newline="") as f:
        f.write("query-id\tcorpus-id\tscore\r\n")
        for i in range(n_queries):
            for j in (2 * i, 2 * i + 1):
                f.write(f"q{i}\td{j}\t{1 + (j % 2)}\r\n")
    return folder


def write_model_and_toy(root: Path, tiny_bert_dir: Path) -> Path:
    """``root/model`` (a tiny ST model) and ``root/toy`` (a toy BEIR folder with a test and a train split)."""
    from conftest import build_tiny_st

    build_tiny_st(tiny_bert_dir).save(str(root / "model"))
    write_toy_beir(root / "toy", n_docs=12, n_queries=4)
    write_toy_beir(root / "toy", n_docs=12, n_queries=4, split="train")
    return root
