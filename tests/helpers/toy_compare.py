"""A small ``CompareConfig`` on the toy BEIR folders, shared by the ``st-magnitude compare`` tests."""

from __future__ import annotations

from st_magnitude.lab.compare.config import CompareConfig


def toy_compare_config(model_dir, data, out, **kw) -> CompareConfig:
    """``dot`` trained and evaluated on ``data/toy``: 2 steps of batch 4, 32 tokens, no subsampling; ``kw`` overrides
    any field."""
    paths = dict(model=str(model_dir), data_dir=str(data), output_dir=str(out))
    toy = dict(variants=("dot",), train_data="toy", eval_data=("toy",))
    small = dict(steps=2, batch_size=4, max_seq_length=32, max_corpus=None, max_queries=None)
    return CompareConfig(**{**paths, **toy, **small, **kw})
