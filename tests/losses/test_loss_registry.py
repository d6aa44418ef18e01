"""The loss registry is the one list of losses, and every loss it names keeps the one contract.

Checked against the code itself (the modules on disk, the classes' signatures and bases), not against a second list.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import st_magnitude.losses as losses_package
from st_magnitude.losses._registry import (
    LOSS_REGISTRY,
    compare_config_fields,
    compare_loss_names,
    compare_spec,
    lazy_export_table,
    loss_class_names,
)

SPECS = {spec.name: spec for spec in LOSS_REGISTRY}
CACHED_EXTRA = ("mini_batch_size", "mini_batch_num_tokens")


def _cls(spec, name):
    return getattr(importlib.import_module(f"st_magnitude.losses.{spec.module}"), name)


def test_the_package_exports_exactly_the_registry():
    assert sorted(losses_package.__all__) == sorted(loss_class_names())
    assert len(set(loss_class_names())) == len(loss_class_names())
    for module, names in lazy_export_table().items():
        assert (Path(losses_package.__file__).parent / f"{module[1:]}.py").is_file(), module
        for name in names:
            assert getattr(losses_package, name).__module__ == f"st_magnitude.losses{module}"


def test_every_public_loss_module_is_registered():
    """A loss class defined in a public module of the package, but not in the registry, is refused."""
    registered = set(loss_class_names())
    folder = Path(losses_package.__file__).parent
    for path in sorted(folder.glob("[!_]*.py")):
        module = importlib.import_module(f"st_magnitude.losses.{path.stem}")
        for name, obj in vars(module).items():
            defined_here = inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_")
            if defined_here and name.endswith("Loss"):
                assert name in registered, f"{path.name}: {name} is not in LOSS_REGISTRY"


@pytest.mark.parametrize("spec", [s for s in LOSS_REGISTRY if s.cached], ids=lambda s: s.name)
def test_every_cached_twin_takes_its_plain_arguments(spec):
    from st_magnitude.losses._common import CachedLoss, FamilyLoss

    plain, cached = _cls(spec, spec.name), _cls(spec, spec.cached)
    assert issubclass(plain, FamilyLoss) and issubclass(cached, CachedLoss)
    p = inspect.signature(plain).parameters
    c = inspect.signature(cached).parameters
    gather = ["gather_across_devices"] if "gather_across_devices" in p else []
    expected = [n for n in p if n not in gather] + [*CACHED_EXTRA, *gather, "show_progress_bar"]
    assert list(c) == expected
    for name, parameter in p.items():
        assert c[name].default == parameter.default, name


def test_compare_reads_the_registry():
    from st_magnitude.lab.compare.config import LOSSES, CompareConfig

    assert LOSSES == compare_loss_names() and {"infonce", "mw", "l2dir"} <= set(LOSSES)
    fingerprint = CompareConfig().fingerprint()
    for field in compare_config_fields():
        assert field in fingerprint and hasattr(CompareConfig, field)
    assert {"scale", "mw_temperature"} <= set(fingerprint)
    with pytest.raises(ValueError, match=f"valid losses: {', '.join(LOSSES)}"):
        compare_spec("hinge")


@pytest.mark.parametrize("name", compare_loss_names())
def test_build_loss_builds_what_the_registry_says(tiny_model, name):
    import warnings

    from st_magnitude.lab.compare.config import CompareConfig
    from st_magnitude.lab.compare.training import build_loss

    config = CompareConfig(scale=7.0, mw_temperature=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = build_loss(tiny_model, "cosine", name, config)
    spec = compare_spec(name)
    assert type(loss).__name__ == spec.name
    for keyword, field in spec.compare_kwargs:
        assert getattr(loss, keyword) == getattr(config, field)
    if spec.takes_similarity:
        assert loss.similarity_name == "cosine"
    assert loss.gather_across_devices is False  # one process
