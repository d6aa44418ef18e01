"""`st-magnitude evaluate`: the per-dataset table and clear messages for bad inputs."""

from __future__ import annotations

import pytest

from st_magnitude import apply_similarity
from st_magnitude.cli import main
from st_magnitude.evaluation.runner import evaluate_folders
from st_magnitude.model.load import require_roles

pytestmark = pytest.mark.toy_beir(n_docs=30, n_queries=8)


def test_table_has_the_four_metrics_and_states_subsampling(saved_tiny, toy, capsys):
    rc = main(["evaluate", str(saved_tiny), "--data", str(toy), "--max-corpus", "20", "--max-queries", "5"])
    out = capsys.readouterr().out
    assert rc == 0
    for col in ("ndcg@10", "recall@100", "mrr@10", "pooled_auc"):
        assert col in out
    assert "subsampled (NanoBEIR-style, seed 42): 5/8 queries, 20/30 docs" in out


def test_similarity_override_scores_raw_embeddings(tiny_model, toy):
    # the cosine model's raw embeddings under dot rank differently from cosine, under dnorm like cosine
    rows = {s: evaluate_folders(tiny_model, [toy], similarity=s)[0] for s in ("cosine", "dnorm", "dot", "qnorm")}
    own = evaluate_folders(tiny_model, [toy])[0]
    assert rows["cosine"]["ndcg@10"] == rows["dnorm"]["ndcg@10"] == own["ndcg@10"]
    assert rows["dot"]["ndcg@10"] == rows["qnorm"]["ndcg@10"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "/nonexistent/beir/scifact"], "does not exist"),
        (["--data", "{toy}", "--split", "dev"], "Available splits"),
        (["--data", "{toy}", "--require-roles"], "needs a model with query/document roles"),
    ],
)
def test_bad_inputs_exit_2_with_a_clear_message(saved_tiny, toy, capsys, args, message):
    args = [a.replace("{toy}", str(toy)) for a in args]
    rc = main(["evaluate", str(saved_tiny), *args])
    assert rc == 2 and message in capsys.readouterr().err


def test_missing_model_folder(toy, tmp_path, capsys):
    rc = main(["evaluate", str(tmp_path / "no_model"), "--data", str(toy)])
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_qrels_missing_ids_and_empty_corpus_via_cli(saved_tiny, toy, capsys):
    with open(toy / "qrels" / "test.tsv", "a", newline="") as f:
        f.write("q0\tghost\t1\r\n")
    assert main(["evaluate", str(saved_tiny), "--data", str(toy)]) == 2
    assert "test.tsv:18: corpus-id 'ghost' is not in" in capsys.readouterr().err
    assert main(["evaluate", str(saved_tiny), "--data", str(toy), "--on-missing", "drop"]) == 0
    (toy / "corpus.jsonl").write_text("")
    assert main(["evaluate", str(saved_tiny), "--data", str(toy)]) == 2
    assert "corpus is empty" in capsys.readouterr().err


def test_require_roles_accepts_converted_models(tiny_model_raw):
    with pytest.raises(ValueError, match="apply_similarity"):
        require_roles(tiny_model_raw)
    require_roles(apply_similarity(tiny_model_raw, "qnorm"))
