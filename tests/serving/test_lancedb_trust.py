"""A LanceDB table's saved metadata never loads a model or runs code, and a plain ``table.search(text)`` is exact
or refused.

LanceDB saves an embedding function's config in the table's schema and rebuilds the function from it when anyone
opens the table. A table made by someone else can say ``trust_remote_code: true`` and name a model folder that ships
a module creating a marker file when imported: searching it must not import that module, and must say how to
register the model in code. A plain ``table.search(text)`` ranks with LanceDB's default ``l2``, which loses a
magnitude-keeping model's ranking: it is refused for such a model (pointing to ``lancedb_search``) and exact for one
that ranks as trained under ``l2``.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path

import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES
from helpers.extras import need_extra

from st_magnitude import apply_similarity
from st_magnitude.serving.agreement import reference_ranking

lancedb = need_extra("lancedb")
pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


def _evil_folder(tiny_bert_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A model folder whose ``modules.json`` names a module of its own that writes ``marker`` when imported."""
    folder, marker = tmp_path / "evil_model", tmp_path / "marker"
    build_tiny_st(tiny_bert_dir).save(str(folder))
    (folder / "evilmod.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n")
    entries = json.loads((folder / "modules.json").read_text())
    entries.append({"idx": len(entries), "name": str(len(entries)), "path": "", "type": "evilmod.Evil"})
    (folder / "modules.json").write_text(json.dumps(entries))
    return folder, marker


def _table_with_saved_config(db_dir: Path, config: dict, dim: int = 32):
    """A table whose schema says its ``vector`` column is computed by the ``st-magnitude`` function with
    ``config`` (what LanceDB writes when a table is created with the function, made here by hand as an attacker
    would)."""
    functions = [{"source_column": "text", "vector_column": "vector", "name": "st-magnitude", "model": config}]
    schema = pa.schema(
        [("id", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), dim))],
        metadata={"embedding_functions": json.dumps(functions)},
    )
    rows = pa.table({"id": ["0", "1"], "text": ["a b", "c d"], "vector": [[0.1] * dim, [0.2] * dim]}, schema=schema)
    lancedb.connect(db_dir).create_table("docs", data=rows)
    return lancedb.connect(db_dir).open_table("docs")


def test_saved_trust_remote_code_runs_no_code_and_says_how_to_register(tiny_bert_dir, tmp_path):
    import st_magnitude.serving.lancedb  # noqa: F401  (registers "st-magnitude" as any user of the adapter does)

    folder, marker = _evil_folder(tiny_bert_dir, tmp_path)
    table = _table_with_saved_config(
        tmp_path / "db", {"name": str(folder), "trust_remote_code": True, "max_retries": 7}
    )
    started = time.monotonic()
    with pytest.raises(ValueError) as err:
        table.search("vitamin d").limit(2).to_list()
    assert not marker.exists(), "the folder's own module was imported from the table's saved metadata"
    message = str(err.value)
    assert "lancedb_embedding_function(" in message and "trust_remote_code=True" in message
    assert str(folder) in message and "saved metadata" in message
    assert time.monotonic() - started < 30, "a refusal is not transient: LanceDB must not retry it"


def test_registering_a_folder_with_foreign_code_in_code_still_needs_the_flag(tiny_bert_dir, tmp_path):
    """Registering that folder in code without ``trust_remote_code=True`` refuses its foreign module (nothing is
    imported): the flag is the caller's, said in code."""
    from st_magnitude.serving.lancedb import lancedb_embedding_function

    folder, marker = _evil_folder(tiny_bert_dir, tmp_path)
    with pytest.raises(ValueError, match="trust"):
        lancedb_embedding_function(str(folder))
    assert not marker.exists()


def _adapter_table(model, tmp_path: Path):
    from lancedb.pydantic import LanceModel, Vector

    from st_magnitude.serving.lancedb import lancedb_embedding_function

    func = lancedb_embedding_function(model)

    class Doc(LanceModel):
        id: str
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    table = lancedb.connect(tmp_path).create_table("docs", schema=Doc)
    table.add([{"id": str(i), "text": t} for i, t in enumerate(TOY_DOCS)])
    return table


def test_plain_search_is_refused_for_a_model_that_keeps_magnitude(tiny_bert_dir, tmp_path):
    from st_magnitude.serving.lancedb import lancedb_search

    model = apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm")
    table = _adapter_table(model, tmp_path)
    with pytest.raises(ValueError, match=r"lancedb_search\(table, text, model\)") as err:
        table.search(TOY_QUERIES[0]).limit(10).to_list()
    assert "l2" in str(err.value)
    # the adapter's own search is exact
    ref = reference_ranking(model, TOY_QUERIES, TOY_DOCS)
    got = [[int(r["id"]) for r in lancedb_search(table, q, model, 10).to_list()] for q in TOY_QUERIES]
    assert got == ref


def test_plain_search_is_exact_for_a_model_that_ranks_as_trained_under_l2(tiny_bert_dir, tmp_path):
    model = apply_similarity(build_tiny_st(tiny_bert_dir), "dnorm")
    table = _adapter_table(model, tmp_path)
    ref = reference_ranking(model, TOY_QUERIES, TOY_DOCS)
    got = [[int(r["id"]) for r in table.search(q).limit(10).to_list()] for q in TOY_QUERIES]
    assert got == ref


def test_a_table_reopened_in_a_new_process_needs_the_model_registered_by_name(tiny_bert_dir, tmp_path):
    """Reopening: the saved config holds only the name the model was registered under; registering that name in
    code again (a folder, or a loaded model with ``name=``) makes the table searchable."""
    from st_magnitude.serving import lancedb as adapter

    model = apply_similarity(build_tiny_st(tiny_bert_dir), "dnorm")
    adapter.lancedb_embedding_function(model, name="my-dnorm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = _adapter_table(model, tmp_path)  # registered again under an id-based name by the helper
    saved = json.loads(table.schema.metadata[b"embedding_functions"])
    assert set(saved[0]["model"]) == {"name"}, saved  # no trust_remote_code, no retry count in the saved config
    adapter._MODELS.clear()  # a new process: nothing registered
    reopened = lancedb.connect(tmp_path).open_table("docs")
    with pytest.raises(ValueError, match="not registered in this process"):
        reopened.search(TOY_QUERIES[0]).limit(3).to_list()
    adapter.lancedb_embedding_function(model, name=saved[0]["model"]["name"])
    assert len(reopened.search(TOY_QUERIES[0]).limit(3).to_list()) == 3


def test_evil_folder_fixture_really_runs_code(tiny_bert_dir, tmp_path):
    """The marker works: loading the folder with ``trust_remote_code=True`` in code does import the module."""
    from st_magnitude.model.load import load_model

    folder, marker = _evil_folder(tiny_bert_dir, tmp_path)
    with pytest.raises(Exception):  # noqa: B017, PT011  (the module has no class Evil: only the import matters)
        load_model(str(folder), trust_remote_code=True)
    assert marker.exists()
    shutil.rmtree(folder)
