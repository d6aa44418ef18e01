"""The package metadata ships what it declares: the Apache-2.0 LICENSE file named by ``license-files``, and the
``deploy`` extra installs every registered serving stack."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from st_magnitude.serving._stacks import STACK_REGISTRY

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

REPO = Path(__file__).resolve().parents[1]


def test_license_file_is_declared_and_is_the_apache_2_text():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # setuptools understands a PEP 639 license expression from version 77 on
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert "setuptools>=77" in requires


def test_the_deploy_extra_installs_every_registered_stack():
    """An adapter's ImportError says ``pip install 'st-magnitude[deploy]'``: that must bring the stack's package."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    installed = {
        re.match(r"[\w.-]+", req)[0].lower()
        for req in project["dependencies"] + project["optional-dependencies"]["deploy"]
    }
    assert {spec.package for spec in STACK_REGISTRY.values()} <= installed
