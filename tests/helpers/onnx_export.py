"""Editing an ONNX export in a test: its config, and the digests it records (to reach the checks behind them)."""

from __future__ import annotations

import hashlib
import json

CONFIG = "st_magnitude_onnx.json"


def edit_config(folder, **change) -> None:
    path = folder / CONFIG
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


def reseal(folder) -> None:
    """Record the current sha256 of every file the config lists (what a consistent but broken export would hold), so
    that the check after the digests is what must catch a changed file. A config without digests is left as it is."""
    config = json.loads((folder / CONFIG).read_text())
    if "files" in config:
        edit_config(folder, files={n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in config["files"]})
