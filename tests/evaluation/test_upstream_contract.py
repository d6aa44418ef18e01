"""The private third-party symbols st-magnitude relies on (:mod:`st_magnitude.evaluation._upstream`) still work.

Each test names the upstream symbol; a failure after upgrading mteb means that symbol changed and the one function
in ``_upstream.py`` that uses it needs a new implementation.
"""

from __future__ import annotations

import types

import pytest

from st_magnitude.evaluation import _upstream

mteb = pytest.importorskip("mteb")


def test_task_registry_is_what_get_task_reads():
    """``mteb.get_task(name)`` instantiates ``mteb.get_tasks._TASKS_REGISTRY[name]``."""
    from mteb.abstasks import AbsTaskRetrieval

    registry = _upstream.mteb_task_registry()
    name = "StMagnitudeUpstreamContractTask"
    base = mteb.get_task("SciFact")
    cls = type(name, (AbsTaskRetrieval,), {"metadata": base.metadata.model_copy(update={"name": name})})
    try:
        _upstream.register_mteb_task(cls)
        task = mteb.get_task(name)
        assert type(task) is cls, (
            f"mteb {_upstream._version('mteb')}: mteb.get_task no longer reads mteb.get_tasks._TASKS_REGISTRY "
            f"(checked against mteb {_upstream.CHECKED_AGAINST['mteb']}); update register_mteb_task"
        )
    finally:
        registry.pop(name, None)


def test_model_registry_is_what_get_model_meta_reads():
    """``mteb.get_model_meta(name)`` returns ``mteb.models.model_implementations.MODEL_REGISTRY[name]``."""
    from mteb.models.model_meta import ModelMeta

    registry = _upstream.mteb_model_registry()
    name = "st-magnitude/upstream-contract-model"
    meta = ModelMeta.create_empty(overwrites=dict(name=name, revision="contract", framework=["Sentence Transformers"]))
    try:
        _upstream.register_mteb_model(name, meta)
        got = mteb.get_model_meta(name)
        assert got is meta or got.name == name, (
            f"mteb {_upstream._version('mteb')}: mteb.get_model_meta no longer reads "
            f"mteb.models.model_implementations.MODEL_REGISTRY (checked against mteb "
            f"{_upstream.CHECKED_AGAINST['mteb']}); update register_mteb_model"
        )
    finally:
        registry.pop(name, None)


def test_a_missing_or_changed_symbol_fails_loudly(monkeypatch):
    import sys

    import mteb.get_tasks  # noqa: F401  (the module; the attribute mteb.get_tasks is the function)

    module = sys.modules["mteb.get_tasks"]
    monkeypatch.delattr(module, "_TASKS_REGISTRY")
    with pytest.raises(_upstream.UpstreamChangedError, match=r"mteb .* has no `mteb\.get_tasks\._TASKS_REGISTRY`"):
        _upstream.mteb_task_registry()
    monkeypatch.setattr(module, "_TASKS_REGISTRY", types.MappingProxyType({}), raising=False)
    with pytest.raises(_upstream.UpstreamChangedError, match=r"_TASKS_REGISTRY` in mteb .* is a mappingproxy"):
        _upstream.register_mteb_task(type("T", (), {"metadata": types.SimpleNamespace(name="T")}))
