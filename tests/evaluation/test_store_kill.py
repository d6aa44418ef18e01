"""`encode_to_store` killed with SIGKILL at each point of its write, then run again, finishes the exact file.

A child process encodes with a deterministic fake encoder (no torch: the child starts fast) and sends itself SIGKILL
at one point: in the middle of the third block, right after the ``.npy`` file was created, or while it was being
created (a header and no rows). The same call in this process then resumes (or starts the file again when nothing
was recorded) and the result equals an uninterrupted encoding. Before, a kill right after the file was created (its
progress file was written after it) left a file the next run refused ("exists without a progress file").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from st_magnitude.evaluation.embeddings_store import encode_to_store

REPO = Path(__file__).resolve().parents[2]
TEXTS = [f"document number {i} about topic {i % 7}" for i in range(53)]

_FAKE = r"""
import hashlib
import numpy as np

class Fake:
    def __init__(self, die_in_call=None):
        self.calls, self.die_in_call = 0, die_in_call

    def encode_document(self, texts, **kwargs):
        self.calls += 1
        if self.calls == self.die_in_call:
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8] for t in texts]
        return np.stack(rows).astype(np.float32) / 255.0

    encode = encode_document
"""

_CHILD = (
    _FAKE
    + r"""
import json, os, signal, sys
import numpy as np
from st_magnitude.evaluation.embeddings_store import encode_to_store
point, texts, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
real = np.lib.format.open_memmap
def open_memmap(file, mode="r+", *args, **kwargs):
    if mode != "w+":
        return real(file, mode, *args, **kwargs)
    if point == "while the file is created":
        with open(file, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (53, 8)})
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(file, mode, *args, **kwargs)
    if point == "right after the file is created":
        os.kill(os.getpid(), signal.SIGKILL)
    return out
np.lib.format.open_memmap = open_memmap
model = Fake(3 if point == "in the third block" else None)
encode_to_store(model, texts, path, block_size=10, show_progress_bar=False)
"""
)
namespace: dict = {}
exec(_FAKE, namespace)  # noqa: S102 - the same fake encoder in this process
Fake = namespace["Fake"]


@pytest.mark.parametrize(
    "point", ["in the third block", "right after the file is created", "while the file is created"]
)
def test_a_killed_encoding_resumes_to_the_exact_file(point, tmp_path):
    reference = encode_to_store(Fake(), TEXTS, tmp_path / "ref.npy", block_size=10, show_progress_bar=False).read()
    path = tmp_path / "corpus.npy"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, point, json.dumps(TEXTS), str(path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    done = json.loads((tmp_path / "corpus.npy.progress.json").read_text())["done"]
    assert done == (20 if point == "in the third block" else 0)
    model = Fake()
    store = encode_to_store(model, TEXTS, path, block_size=10, show_progress_bar=False)
    assert model.calls == 6 - done // 10  # only the blocks not recorded
    np.testing.assert_array_equal(store.read(), reference)


def test_a_shortened_file_with_recorded_rows_is_refused_clearly(tmp_path):
    path = tmp_path / "corpus.npy"
    encode_to_store(Fake(), TEXTS[:30], path, block_size=10, show_progress_bar=False)
    progress = tmp_path / "corpus.npy.progress.json"
    state = json.loads(progress.read_text())
    progress.write_text(json.dumps({**state, "done": 20}))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 40)
    with pytest.raises(ValueError, match="shorter than 30 rows .* resume=False"):
        encode_to_store(Fake(), TEXTS[:30], path, block_size=10, show_progress_bar=False)
    progress.write_text("{not json")
    with pytest.raises(ValueError, match="not a progress file of encode_to_store"):
        encode_to_store(Fake(), TEXTS[:30], path, block_size=10, show_progress_bar=False)
