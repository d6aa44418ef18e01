"""Names that moved in the issue-13 restructuring still import from their old path, with a DeprecationWarning.

One row per moved name: (old module, name, new module). Append rows; the test imports the name from both paths and
checks the warning and that both give the same object.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

MOVED: list[tuple[str, str, str]] = [
    ("st_magnitude.losses", "RevelaLMCheckpointCallback", "st_magnitude.callbacks.revela"),
    # (old module, name, new module)
    ("st_magnitude.losses.margin_contrastive", "BertRecipeLoss", "st_magnitude.losses.bert_recipe"),
    ("st_magnitude.losses.margin_contrastive", "EttinRecipeLoss", "st_magnitude.losses.ettin_recipe"),
    ("st_magnitude.losses.margin_contrastive", "MagnitudeMatryoshkaLoss", "st_magnitude.losses.magnitude_matryoshka"),
    ("st_magnitude.losses.revela", "DIAGNOSTIC_KEYS", "st_magnitude.callbacks.revela"),
    ("st_magnitude.losses.revela", "RevelaDiagnosticsCallback", "st_magnitude.callbacks.revela"),
    ("st_magnitude.losses.revela", "RevelaLMCheckpointCallback", "st_magnitude.callbacks.revela"),
    ("st_magnitude.losses.revela", "RevelaLMGradClipCallback", "st_magnitude.callbacks.revela"),
    ("st_magnitude.losses.revela", "revela_callbacks", "st_magnitude.callbacks.revela"),
    ("st_magnitude.callbacks_l2dir", "NAP_HEAD_DIRNAME", "st_magnitude.losses.l2dir"),
    ("st_magnitude.callbacks_l2dir", "load_nap_head", "st_magnitude.losses.l2dir"),
    ("st_magnitude.callbacks_l2dir", "save_nap_head", "st_magnitude.losses.l2dir"),
    ("st_magnitude.replication", "ArmComparison", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "Interval", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "combine_verdicts", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "compare_arms", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "paired_bootstrap", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "paired_bootstrap_fn", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "seed_interval", "st_magnitude.evaluation.stats"),
    ("st_magnitude.replication", "verdict", "st_magnitude.evaluation.stats"),
    ("st_magnitude.revela_data", "GROUPINGS", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "RevelaDataCollator", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "RevelaGroupBatchSampler", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "build_revela_dataset", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "chunk_text", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "first_half", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "randomize_groups", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "split_sentences", "st_magnitude.data.revela"),
    ("st_magnitude.revela_data", "bm25_scores", "st_magnitude.data.bm25"),
    ("st_magnitude.scaling.bm25", "BM25Scorer", "st_magnitude.data.bm25"),
    ("st_magnitude.scaling.bm25", "tokenize", "st_magnitude.data.bm25"),
    ("st_magnitude.losses.revela_attention", "REVELA_ATTENTION", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "STATE_KWARG", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "SUPPORTED_MODEL_TYPES", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "RevelaAttentionState", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "active_pairs", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "enable_revela_attention", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "in_batch_term", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "register_revela_attention", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.losses.revela_attention", "revela_attention_forward", "st_magnitude.modules.revela_attention"),
    ("st_magnitude.integrations.cli", "TRUST_HELP", "st_magnitude.cli._args"),
    ("st_magnitude.integrations.cli", "similarity_arg", "st_magnitude.cli._args"),
    ("st_magnitude.integrations.cli", "similarity_names", "st_magnitude.cli._args"),
    ("st_magnitude.experiments.cli", "INTERRUPTED", "st_magnitude.cli.compare"),
    ("st_magnitude.replication.cli", "DEFAULT_REPORT", "st_magnitude.cli.replicate"),
    ("st_magnitude.replication.cli", "DEFAULT_RESULTS", "st_magnitude.cli.replicate"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{o}.{n}" for o, n, _ in MOVED])
def test_old_path_warns_and_resolves(old: str, name: str, new: str) -> None:
    fresh = getattr(importlib.import_module(new), name)
    old_module = importlib.import_module(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(old_module, name)
    assert value is fresh
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(new in m for m in messages), f"no DeprecationWarning naming {new}: {messages}"


def test_moved_exports_unknown_name_raises() -> None:
    import types

    from st_magnitude._lazy import moved_exports

    module = types.ModuleType("st_magnitude._fake_old")
    import sys

    sys.modules[module.__name__] = module
    try:
        getattr_, dir_ = moved_exports(module.__name__, {"X": "st_magnitude._warnings"})
        with pytest.raises(AttributeError, match="has no attribute 'Y'"):
            getattr_("Y")
        assert "X" in dir_()
        with pytest.warns(DeprecationWarning, match="from st_magnitude._warnings import X"):
            with pytest.raises(AttributeError):  # the target has no X: the error comes from the new module
                getattr_("X")
    finally:
        del sys.modules[module.__name__]
