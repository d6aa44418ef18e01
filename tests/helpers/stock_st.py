"""Saved models load in stock sentence-transformers: every such check shares ONE fresh interpreter.

Starting a Python that imports sentence-transformers costs ~15 s on the shared CPU, so the six "loads in stock ST"
tests (four corner variants and the learnable model in ``tests/test_convert.py``, the dimension projection in
``tests/modules/test_dimension_projection.py``) do not each start one. The session fixture ``stock_st`` (in
``conftest.py``) builds and saves every model with :func:`build_jobs`, runs :data:`CHILD` once over all of them
(:func:`run_in_stock_st`), and each test asserts on its own entry of the result.

The child imports only sentence-transformers. For the models that must load without the plugin, a ``sys.meta_path``
finder refuses every ``st_magnitude`` import, so a model that secretly needed the package fails to load (its entry
records the error) instead of passing by importing it; ``plugin_imported`` is recorded after each load. Models that
need ``trust_remote_code`` load last, with the block lifted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

QUERIES = ["protein in cancer cell", "coffee and sleep", "diet and heart risk"]
DOCS = ["the protein increase in cancer cell", "vitamin and diet effect on heart risk", "tea and sleep study", "fish"]
SENTENCES = [
    "the protein increase in cancer cell",
    "vitamin and diet effect on heart risk",
    "coffee tea and sleep study",
    "exercise and weight loss trial",
]

CHILD = r"""
import importlib.abc, json, sys, traceback

class BlockPlugin(importlib.abc.MetaPathFinder):
    active = True

    def find_spec(self, name, path=None, target=None):
        if self.active and (name == "st_magnitude" or name.startswith("st_magnitude.")):
            raise ImportError(f"{name} is blocked: this process plays a machine without st-magnitude")
        return None

blocker = BlockPlugin()
sys.meta_path.insert(0, blocker)
import numpy as np
from sentence_transformers import SentenceTransformer

jobs = json.load(open(sys.argv[1]))
for job in sorted(jobs, key=lambda j: j["trust"]):  # stock loads first, while the block is on
    blocker.active = not job["trust"]
    entry = {"key": job["key"], "error": None}
    try:
        model = SentenceTransformer(job["path"], device="cpu", trust_remote_code=job["trust"])
        if job["mode"] == "roles":
            q = model.encode_query(job["queries"], convert_to_tensor=True)
            d = model.encode_document(job["documents"], convert_to_tensor=True)
            arrays = {"q": q.numpy(), "d": d.numpy(), "s": model.similarity(q, d).numpy()}
        else:
            arrays = {"emb": model.encode(job["sentences"], convert_to_numpy=True)}
        np.savez(job["out"], **arrays)
        entry["similarity_fn_name"] = model.similarity_fn_name
        entry["activations"] = {
            str(i): type(m.activation_function).__name__
            for i, m in enumerate(model)
            if hasattr(m, "activation_function")
        }
    except Exception:
        entry["error"] = traceback.format_exc()[-3000:]
    entry["plugin_imported"] = any(m == "st_magnitude" or m.startswith("st_magnitude.") for m in sys.modules)
    print("RESULT " + json.dumps(entry), flush=True)
"""


@dataclass
class StockJob:
    """One saved model to load in the stock process, with what the in-process model produced before saving."""

    key: str
    path: Path
    trust: bool
    mode: str  # "roles": encode_query / encode_document / similarity; "encode": model.encode(SENTENCES)
    expected: dict[str, np.ndarray]
    result: dict[str, Any] = field(default_factory=dict)  # filled by run_in_stock_st
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def check_loaded(self) -> None:
        assert self.result, f"{self.key}: the stock process printed no result"
        assert self.result["error"] is None, f"{self.key} failed to load in stock ST:\n{self.result['error']}"


def _save_roles_model(model, key: str, root: Path, trust: bool) -> StockJob:
    q = model.encode_query(QUERIES, convert_to_tensor=True)
    d = model.encode_document(DOCS, convert_to_tensor=True)
    expected = {"q": q.numpy(), "d": d.numpy(), "s": model.similarity(q, d).numpy()}
    model.save(str(root / key))
    return StockJob(key, root / key, trust, "roles", expected)


def build_jobs(tiny_bert_dir: Path, root: Path) -> dict[str, StockJob]:
    """Build, encode and save every model the stock-ST tests check."""
    import torch
    from conftest import build_tiny_st

    from st_magnitude import apply_similarity
    from st_magnitude.modules.dimension_projection import add_dimension_projection

    jobs = {}
    for name in ("cosine", "dot", "qnorm", "dnorm"):
        model = apply_similarity(build_tiny_st(tiny_bert_dir), name, warn_on_strip=False)
        jobs[name] = _save_roles_model(model, name, root, trust=False)
    model = apply_similarity(build_tiny_st(tiny_bert_dir), "learnable", warn_on_strip=False)
    with torch.no_grad():
        model[-1].gamma_query_logit.fill_(1.3)
        model[-1].gamma_document_logit.fill_(-0.7)
    jobs["learnable"] = _save_roles_model(model, "learnable", root, trust=True)
    model = build_tiny_st(tiny_bert_dir)
    add_dimension_projection(model, 96, seed=0)
    expected = {"emb": model.encode(SENTENCES, convert_to_numpy=True)}
    model.save(str(root / "projected"))
    jobs["projected"] = StockJob("projected", root / "projected", False, "encode", expected)
    return jobs


def run_in_stock_st(jobs: dict[str, StockJob], root: Path) -> dict[str, StockJob]:
    """Load every job in one fresh interpreter; fills each job's ``result`` and ``arrays``."""
    spec = [
        {
            "key": j.key,
            "path": str(j.path),
            "trust": j.trust,
            "mode": j.mode,
            "out": str(root / f"{j.key}.out.npz"),
            "queries": QUERIES,
            "documents": DOCS,
            "sentences": SENTENCES,
        }
        for j in jobs.values()
    ]
    (root / "jobs.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root / "jobs.json")], capture_output=True, text=True, timeout=600
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            entry = json.loads(line[len("RESULT ") :])
            job = jobs[entry["key"]]
            job.result = entry
            if entry["error"] is None:
                with np.load(root / f"{job.key}.out.npz") as got:
                    job.arrays = {k: got[k] for k in got.files}
    missing = [k for k, j in jobs.items() if not j.result]
    assert not missing, f"stock process (rc={proc.returncode}) gave no result for {missing}:\n{proc.stderr[-3000:]}"
    return jobs
