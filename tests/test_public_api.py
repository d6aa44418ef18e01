"""The public API stays small: the names every package exports (``__all__``), pinned here and in docs/api.md.

A name added to or dropped from a package's ``__all__`` fails this test until the list below and the list in
docs/api.md say the same; run ``pytest tests/test_public_api.py -s`` to print what the packages export now.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import st_magnitude
from st_magnitude.losses._registry import loss_class_names

ROOT = Path(st_magnitude.__file__).resolve().parent
#: At most this many public names over all packages (sentence-transformers' top level has 29).
LIMIT = 80

PUBLIC = {
    "st_magnitude": [
        "AsymmetricSimilarityWarning", "MagnitudeCollapseWarning", "NormBoundWarning", "Similarity", "__version__",
        "apply_similarity", "check_symmetric_use", "convert_for_store", "get_similarity", "install_symmetry_guard",
        "is_asymmetric", "model_similarity", "similarity_names", "strip_normalize", "truncate_model",
        "uninstall_symmetry_guard",
    ],
    "st_magnitude.callbacks": [
        "GammaLoggingCallback", "LossStateCallback", "LossStatsCallback", "RevelaDiagnosticsCallback",
        "ScaleLoggingCallback", "load_loss_state", "revela_callbacks",
    ],
    "st_magnitude.data": [
        "BEIRData", "BM25Scorer", "RevelaDataCollator", "RevelaGroupBatchSampler", "build_revela_dataset", "doc_text",
        "load_beir", "subsample",
    ],
    "st_magnitude.diagnostics": [
        "Diagnosis", "component_fim_table", "cross_evaluation", "diagnose", "doc_norm_cohens_d", "norm_stats",
        "recommend_normalization", "run_kappa",
    ],
    "st_magnitude.evaluation": [
        "ContrastiveEntropyEvaluator", "DualSimilarityEvaluator", "PooledAUCEvaluator", "RoleIREvaluator",
        "ann_search", "beir_evaluate", "contrastive_entropy", "encode_roles", "encode_to_store", "evaluate_model",
        "exact_search", "topk_search",
    ],
    "st_magnitude.losses": list(loss_class_names()),  # one registry line per loss (st_magnitude/losses/_registry.py)
    "st_magnitude.model": ["load_model", "raw_model"],
    "st_magnitude.modules": [
        "DimensionProjection", "MIPSAugment", "NAPHead", "RoleNormalize", "add_dimension_projection",
    ],
    "st_magnitude.scaling": [
        "PAPER_DIMENSION_LAWS", "dimension_law", "fit_dimension_law", "fit_joint_law", "optimal_allocation",
    ],
}  # fmt: skip


def exported() -> dict[str, list[str]]:
    """``{package: sorted __all__}`` for every public package of st_magnitude that exports something (a package
    whose name starts with ``_``, such as the trust boundary ``_trust``, is internal, and so is the lab)."""
    out = {}
    for init in sorted(ROOT.rglob("__init__.py")):
        parts = init.parent.relative_to(ROOT).parts
        if any(part.startswith("_") for part in parts) or parts[:1] == ("lab",):
            continue  # internal, or the lab (compare, replicate: used through the CLI, not the library's API)
        package = ".".join(("st_magnitude", *init.parent.relative_to(ROOT).parts))
        names = importlib.import_module(package).__dict__.get("__all__", [])
        if names:
            out[package] = sorted(names)
    return out


def test_the_public_api_is_the_pinned_list_and_small():
    now = exported()
    for package, names in now.items():
        print(f"{package} ({len(names)}): {', '.join(names)}")
    print(f"total: {sum(map(len, now.values()))} public names")
    assert now == {p: sorted(n) for p, n in PUBLIC.items()}
    assert sum(map(len, now.values())) <= LIMIT


def test_no_name_is_exported_twice():
    seen: dict[str, str] = {}
    twice = []
    for package, names in exported().items():
        for name in names:
            if name in seen and name != "__version__":
                twice.append(f"{name}: {seen[name]} and {package}")
            seen[name] = package
    assert twice == []


def test_docs_api_lists_the_same_names():
    text = (ROOT.parent / "docs" / "api.md").read_text(encoding="utf-8")
    block = text.split("<!-- public-api:start -->")[1].split("<!-- public-api:end -->")[0]
    listed = {
        m.group(1): sorted(re.findall(r"`([^`]+)`", m.group(2)))
        for m in re.finditer(r"^- `([\w.]+)`: (.+)$", block, re.M)
    }
    assert listed == exported()
