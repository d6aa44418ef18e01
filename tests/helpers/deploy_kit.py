"""Toy retrieval data for the deployment tests (tests/serving): seeded word-salad queries and documents."""

from __future__ import annotations

import random

from conftest import WORDS


def toy_texts(n: int, lo: int, hi: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


TOY_DOCS = toy_texts(60, 3, 14, seed=1)
TOY_QUERIES = toy_texts(8, 2, 5, seed=2)
