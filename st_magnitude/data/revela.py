"""Related-chunk batches for :class:`~st_magnitude.losses.revela.RevelaLoss` (paper 004, Revela, §3.1 / §5.2).

Revela's in-batch attention only teaches the retriever something when the chunks of one batch are related: the
paper's "Revela-random" ablation (chunks shuffled across batches) collapses to BEIR nDCG@10 ≈ 4.
This module builds such batches for ``SentenceTransformerTrainer``:

* :func:`chunk_text` splits a document into chunks of at most ``max_words`` (paper: 120) words made of complete
  sentences (a single sentence longer than the limit is cut at word boundaries — our choice, the paper is silent).
* :func:`build_revela_dataset` groups the chunks into sets of ``group_size`` related chunks — ``"sequential"``
  (interleave the chunks of a window of consecutive documents, paper §5.2 / Fig. 7) or ``"bm25"`` (a seed
  document plus its Okapi-BM25 nearest documents, our choice for corpora whose order carries no topic, e.g. BEIR
  SciFact), or ``"random"`` (the paper's "Revela-random" control: chunks of the whole corpus shuffled, then cut
  into groups) — and returns a :class:`datasets.Dataset` with columns ``query`` (first half of the chunk, REPLUG/Revela
  §3.3), ``passage`` (the chunk) and ``label`` (the group id). Rows of a group are contiguous.
* :class:`RevelaGroupBatchSampler` makes every batch exactly one group (pass it as
  ``SentenceTransformerTrainingArguments(batch_sampler=RevelaGroupBatchSampler)`` with
  ``per_device_train_batch_size=group_size``); group order and the order inside a group are shuffled each epoch
  (paper App. A.2). :class:`RevelaLoss` re-checks that a batch holds a single group label.
* :class:`RevelaDataCollator` tokenizes as the stock collator and additionally tokenizes the raw ``passage`` text
  with the LM's tokenizer into ``lm_input_ids`` / ``lm_attention_mask`` (the third feature dict the loss receives).
"""

from __future__ import annotations

import logging
import math
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sentence_transformers.base.sampler import DefaultBatchSampler
from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator

from st_magnitude.data.bm25 import bm25_scores
from st_magnitude.data.text import doc_text

logger = logging.getLogger(__name__)

GROUPINGS = ("bm25", "sequential", "random")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split on ``.``/``!``/``?`` followed by whitespace and an upper-case letter or digit (a plain heuristic)."""
    text = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(text) if s]


def chunk_text(text: str, max_words: int = 120) -> list[str]:
    """Pack complete sentences greedily into chunks of at most ``max_words`` words (paper §4.1: ≤ 120 words).

    A sentence longer than ``max_words`` is cut into ``max_words``-word pieces (our choice; the paper is silent).
    """
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1; got {max_words}")
    chunks: list[str] = []
    current: list[str] = []
    for sentence in split_sentences(text):
        words = sentence.split()
        while len(words) > max_words:  # an over-long sentence: flush, then cut it
            if current:
                chunks.append(" ".join(current))
                current = []
            chunks.append(" ".join(words[:max_words]))
            words = words[max_words:]
        if current and len(current) + len(words) > max_words:
            chunks.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        chunks.append(" ".join(current))
    return chunks


def first_half(text: str) -> str:
    """The first half of a chunk's words, rounded up (Revela §3.3 following REPLUG: the similarity uses the first
    half of each Wikipedia chunk as its query view). The official code halves retriever *tokens*; we halve words so
    the view is tokenizer-independent (our choice, see docs/revela.md)."""
    words = text.split()
    return " ".join(words[: max(1, math.ceil(len(words) / 2))])


def _as_texts(corpus: Mapping[str, Mapping[str, str]] | Sequence[str]) -> list[str]:
    if isinstance(corpus, Mapping):
        return [doc_text(doc, sep=". ") for doc in corpus.values()]  # the title ends a sentence of its own
    return [str(t) for t in corpus]


def build_revela_dataset(
    corpus: Mapping[str, Mapping[str, str]] | Sequence[str],
    group_size: int = 16,
    max_words: int = 120,
    grouping: str = "bm25",
    window: int = 2,
    min_words: int = 8,
    max_groups: int | None = None,
    seed: int = 0,
):
    """Chunk a corpus and group related chunks into Revela in-batch sets (no labels used).

    Args:
        corpus: BEIR-style ``{doc_id: {"title", "text"}}`` or a list of texts, in corpus order.
        group_size: chunks per in-batch set B (paper 004 §4.1: 16; must be ≥ 3, see :class:`RevelaLoss`).
        max_words: chunk length limit in words (paper 004 §4.1: 120).
        grouping: ``"bm25"`` (seed document + its BM25 nearest documents until the group is full),
            ``"sequential"`` (windows of ``window`` consecutive documents, chunks interleaved d_11, d_21, d_12, …,
            then cut into groups, paper §5.2) or ``"random"`` (all chunks shuffled with ``seed``, then cut into
            groups: unrelated chunks, the paper's "Revela-random" control). For a control on exactly
            the chunks of another grouping, use :func:`randomize_groups` on that dataset instead.
        window: documents per interleaving window for ``"sequential"``.
        min_words: chunks shorter than this are dropped (our choice: fragments carry no retrieval signal).
        max_groups: stop after this many groups (seeded subsample of seeds for ``"bm25"``).
        seed: seeds document order and the within-group shuffle.

    Returns:
        ``datasets.Dataset`` with columns ``query`` (first half of the chunk), ``passage`` (the chunk) and
        ``label`` (group id). Rows of a group are contiguous; an incomplete last group is dropped.
    """
    from datasets import Dataset

    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}; got {grouping!r}")
    if group_size < 3:
        raise ValueError(
            f"group_size must be >= 3 (with 2 chunks each row of Sim has one candidate and the retriever gets no "
            f"gradient); got {group_size}"
        )
    if window < 1:
        raise ValueError(f"window must be >= 1; got {window}")
    texts = _as_texts(corpus)
    doc_chunks = [[c for c in chunk_text(t, max_words) if len(c.split()) >= min_words] for t in texts]
    rng = random.Random(seed)
    groups: list[list[str]] = []

    if grouping == "sequential":
        stream: list[str] = []
        for start in range(0, len(doc_chunks), window):
            block = doc_chunks[start : start + window]
            for pos in range(max((len(c) for c in block), default=0)):
                stream.extend(c[pos] for c in block if pos < len(c))
        groups = [stream[k : k + group_size] for k in range(0, len(stream) - group_size + 1, group_size)]
    elif grouping == "random":
        pool = [chunk for chunks in doc_chunks for chunk in chunks]
        rng.shuffle(pool)
        groups = [pool[k : k + group_size] for k in range(0, len(pool) - group_size + 1, group_size)]
    else:
        scores = bm25_scores(texts)
        order = list(range(len(texts)))
        rng.shuffle(order)
        used = np.zeros(len(texts), dtype=bool)
        for seed_doc in order:
            if used[seed_doc] or not doc_chunks[seed_doc]:
                continue
            group: list[str] = []
            ranked = np.argsort(-scores[seed_doc], kind="stable")
            for doc in [seed_doc] + [int(d) for d in ranked if d != seed_doc]:
                if used[doc] or not doc_chunks[doc]:
                    continue
                used[doc] = True
                group.extend(doc_chunks[doc][: group_size - len(group)])
                if len(group) == group_size:
                    break
            if len(group) == group_size:
                groups.append(group)
            if max_groups is not None and len(groups) >= max_groups:
                break
    if max_groups is not None:
        groups = groups[:max_groups]
    if not groups:
        raise ValueError(
            f"no complete group of {group_size} chunks could be built from {len(texts)} documents; "
            "lower group_size or pass more documents"
        )
    rows: dict[str, list[Any]] = {"query": [], "passage": [], "label": []}
    for gid, group in enumerate(groups):
        group = list(group)
        rng.shuffle(group)  # paper App. A.2: chunks shuffled within a batch
        for chunk in group:
            rows["query"].append(first_half(chunk))
            rows["passage"].append(chunk)
            rows["label"].append(gid)
    logger.info("built %d Revela groups of %d chunks (%s grouping)", len(groups), group_size, grouping)
    return Dataset.from_dict(rows)


def randomize_groups(dataset, seed: int = 0, label_column: str = "label"):
    """The same chunks, regrouped at random: the random-grouping control for a Revela dataset.

    Every row keeps its ``query``/``passage`` text; the rows are shuffled with ``seed`` and given new group ids in
    consecutive blocks of the original group size, so the control trains on exactly the chunks, group count and
    group size of the grouped run, only without related chunks in a group (paper's "Revela-random" ablation,
    which collapses).

    Raises:
        ValueError: if the dataset has no ``label_column`` or its groups differ in size.
    """
    from datasets import Dataset

    if label_column not in dataset.column_names:
        raise ValueError(
            f"randomize_groups needs the group-id column {label_column!r}; the dataset has {dataset.column_names}"
        )
    labels = dataset[label_column]
    sizes: dict[Any, int] = {}
    for label in labels:
        sizes[label] = sizes.get(label, 0) + 1
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all groups must have the same size to be regrouped; sizes: {sorted(set(sizes.values()))}")
    group_size = next(iter(sizes.values()))
    order = list(range(len(dataset)))
    random.Random(seed).shuffle(order)
    rows = {column: [dataset[column][i] for i in order] for column in dataset.column_names if column != label_column}
    rows[label_column] = [k // group_size for k in range(len(order))]
    logger.info("regrouped %d chunks into %d random groups of %d", len(order), len(sizes), group_size)
    return Dataset.from_dict(rows)


class RevelaGroupBatchSampler(DefaultBatchSampler):
    """Yields each group (rows sharing a ``label``) as one batch; never mixes groups.

    Every group must have exactly ``batch_size`` rows (set ``per_device_train_batch_size`` to the group size).
    Group order and the order inside each group are reshuffled every epoch from ``seed + epoch``.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        drop_last: bool = False,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
            generator=generator,
            seed=seed,
        )
        columns = [c for c in (valid_label_columns or ["label"]) if c in dataset.column_names]
        if not columns:
            raise ValueError(
                f"RevelaGroupBatchSampler needs a group-id column, one of {valid_label_columns or ['label']}; "
                f"the dataset has {dataset.column_names} (build it with build_revela_dataset)"
            )
        labels = dataset[columns[0]]
        groups: dict[Any, list[int]] = {}
        for idx, label in enumerate(labels):
            groups.setdefault(label, []).append(idx)
        bad = {g: len(rows) for g, rows in groups.items() if len(rows) != batch_size}
        if bad:
            example = dict(list(bad.items())[:3])
            raise ValueError(
                f"every group must have exactly batch_size={batch_size} rows (per_device_train_batch_size must "
                f"equal the group size); group sizes that differ: {example}"
            )
        self.groups = list(groups.values())

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(self.seed + getattr(self, "epoch", 0))
        order = list(range(len(self.groups)))
        rng.shuffle(order)
        for g in order:
            rows = list(self.groups[g])
            rng.shuffle(rows)
            yield rows


@dataclass
class RevelaDataCollator(SentenceTransformerDataCollator):
    """The stock collator plus the LM's own tokenization of the raw chunk text.

    The retriever columns (``query``, ``passage``) are tokenized as usual (prompts and ``router_mapping`` apply).
    The raw text of ``lm_column`` is then tokenized with ``lm_tokenizer`` (right padding, truncation to
    ``lm_max_length`` tokens, no prompt; pad = EOS when the tokenizer has no pad token, official code) into
    ``lm_input_ids`` / ``lm_attention_mask`` — the trainer hands these to the loss as its third feature dict.

    Build it with ``RevelaDataCollator(preprocess_fn=model.preprocess, lm_tokenizer=tok, prompts=args.prompts,
    router_mapping=args.router_mapping)`` and pass it as ``data_collator=`` to the trainer.
    """

    lm_tokenizer: Any = None
    lm_column: str = "passage"
    lm_max_length: int = 156
    lm_prefix: str = field(default="lm_", repr=False)

    def __post_init__(self) -> None:
        if self.lm_tokenizer is None:
            raise ValueError("RevelaDataCollator needs lm_tokenizer (the causal LM's tokenizer)")
        if self.lm_max_length < 2:
            raise ValueError(f"lm_max_length must be >= 2; got {self.lm_max_length}")

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if features and self.lm_column not in features[0]:
            raise ValueError(
                f"RevelaDataCollator: column {self.lm_column!r} (the LM text) is missing; columns are "
                f"{list(features[0].keys())}"
            )
        batch = super().__call__(features)
        texts = [row[self.lm_column] for row in features]
        tok = self.lm_tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad_id is None:
            raise ValueError("the LM tokenizer has neither a pad nor an EOS token to pad with")
        encoded = [tok(t, truncation=True, max_length=self.lm_max_length)["input_ids"] for t in texts]
        length = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(texts), length), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(texts), length), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, : len(ids)] = 1
        batch[f"{self.lm_prefix}input_ids"] = input_ids
        batch[f"{self.lm_prefix}attention_mask"] = attention_mask
        return batch
