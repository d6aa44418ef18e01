"""benchmarks/bench_onnx.py --reduced on a tiny in-code model: every backend is measured against torch, side by side
per thread count (speed in CPU time, vector error, top-10 overlap, nDCG@10), and the table is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build_tiny_st
from helpers.onnx_marks import ONNX_MARKS
from helpers.scripts import load_script

from st_magnitude import apply_similarity

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_onnx.py"

pytestmark = [
    pytest.mark.toy_beir(n_docs=40, n_queries=8),
    *ONNX_MARKS,
]


def test_reduced_mode_measures_every_backend_against_torch(tiny_bert_dir, toy, tmp_path, capsys):
    bench = load_script("benchmarks/bench_onnx.py")
    model_dir = tmp_path / "tiny"
    build_tiny_st(tiny_bert_dir).save(str(model_dir))
    out = tmp_path / "result.json"
    argv = ["--reduced", "--model", str(model_dir), "--data", str(toy), "--max-seq-length", "32"]
    result = bench.main([*argv, "--backends", "fused,int8-all", "--threads", "1,2", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {(r["backend"], r["threads"]): r for r in result["rows"]}
    assert set(rows) == {(b, t) for b in ("torch", "fused", "int8-all") for t in (1, 2)}
    for (backend, threads), row in rows.items():
        torch_row = rows[("torch", threads)]
        assert row["ratio_cpu"] == pytest.approx(row["docs_per_cpu_s"] / torch_row["docs_per_cpu_s"])
        assert 0 <= row["top10_overlap"] <= 1 and row["docs_per_cpu_s"] > 0
    assert rows[("torch", 1)]["ratio_cpu"] == 1 and rows[("torch", 1)]["max_abs_error"] == 0
    assert rows[("fused", 1)]["max_abs_error"] <= 1e-5 and rows[("fused", 1)]["top10_overlap"] == 1
    assert rows[("int8-all", 1)]["max_abs_error"] > 1e-5  # quantized: measured, not equal
    # nDCG@10 of each backend on the nDCG corpus, against torch's own evaluation of the same model
    from st_magnitude.evaluation.runner import evaluate_folders

    torch_ndcg = evaluate_folders(apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm"), [toy], max_seq_length=32)
    assert result["ndcg@10"]["torch"]["ndcg@10"] == pytest.approx(torch_ndcg[0]["ndcg@10"], abs=1e-6)
    assert abs(result["ndcg@10"]["fused"]["diff_to_torch"]) <= 1e-5
    table = capsys.readouterr().out
    assert "| fused | 2 |" in table and "| int8-all | 1 |" in table


def test_openvino_backend_reads_the_plain_graphs_and_keeps_the_vectors(tiny_bert_dir, toy, tmp_path):
    pytest.importorskip("openvino", reason="the benchmark's openvino backend needs OpenVINO (not a dependency)")
    bench = load_script("benchmarks/bench_onnx.py")
    model_dir = tmp_path / "tiny"
    build_tiny_st(tiny_bert_dir).save(str(model_dir))
    argv = ["--reduced", "--model", str(model_dir), "--data", str(toy), "--max-seq-length", "32", "--threads", "1"]
    result = bench.main([*argv, "--backends", "openvino", "--parts", "speed,ndcg"])
    row = next(r for r in result["rows"] if r["backend"] == "openvino")
    assert row["max_abs_error"] <= 1e-5 and row["top10_overlap"] == 1
    assert abs(result["ndcg@10"]["openvino"]["diff_to_torch"]) <= 1e-5
    assert "openvino" in result["versions"]


def test_default_backends_leave_out_the_one_that_needs_an_extra_package():
    bench = load_script("benchmarks/bench_onnx.py")
    assert "openvino" not in bench.parse_args([]).backends
    with pytest.raises(SystemExit):
        bench.parse_args(["--backends", "tensorrt"])


def test_the_deployment_pages_openvino_table_is_the_committed_results_table():
    """The page's OpenVINO table is ``format_table`` of the committed JSON, and the full-corpus speeds it quotes are
    that JSON's."""
    bench = load_script("benchmarks/bench_onnx.py")
    repo = BENCH.parents[1]
    result = json.loads((repo / "docs" / "results" / "bench_onnx_openvino.json").read_text(encoding="utf-8"))
    page = (repo / "docs" / "deployment.md").read_text(encoding="utf-8")
    assert bench.format_table(result) in page
    assert result["command"] in page
    full = {b: result["ndcg@10"][b]["docs_per_cpu_s"] for b in ("torch", "fused", "openvino")}
    quoted = f"torch {full['torch']:.1f}, fused {full['fused']:.1f}\nand OpenVINO {full['openvino']:.1f}"
    assert quoted in page
    assert f"**{full['fused'] / full['torch']:.2f}×**" in page
