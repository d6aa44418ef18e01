"""Routers nested in Routers: the trust boundary bounds the depth (12 levels took 8 s in ``inspect``, 40 levels ran
past 200 s) and checks every nested Router's keys, so a deep or looping nesting is one line naming the file and the
limit, before anything is loaded."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from st_magnitude._trust import InputFileError, check_model_folder
from st_magnitude._trust.paths import MAX_ROUTER_DEPTH
from st_magnitude.cli import main

ROUTER = "sentence_transformers.base.modules.router.Router"


def _nest(saved, out, levels: int):
    """``saved`` (a model whose root is a Router) wrapped in ``levels - 1`` more Routers, each routing both roles to
    the next one in its sub-folder ``inner``."""
    inner = out
    for _ in range(levels - 1):
        inner.mkdir(parents=True)
        (inner / "router_config.json").write_text(
            json.dumps(
                {
                    "types": {"inner": ROUTER},
                    "structure": {"query": ["inner"], "document": ["inner"]},
                    "parameters": {"default_route": None, "allow_empty_key": False, "route_mappings": {}},
                }
            )
        )
        inner = inner / "inner"
    shutil.copytree(saved, inner)
    for name in ("modules.json", "config_sentence_transformers.json", "README.md"):
        if (inner / name).exists():
            shutil.copy(inner / name, out / name)
            if inner != out:
                (inner / name).unlink()
    return out


@pytest.fixture(scope="module")
def router_model(tiny_bert_dir, tmp_path_factory):
    from conftest import build_tiny_st

    from st_magnitude import apply_similarity

    path = tmp_path_factory.mktemp("router") / "m"
    apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm").save(str(path))
    return path


def test_routers_nested_deeper_than_the_limit_are_one_line(router_model, tmp_path, capsys):
    deep = _nest(router_model, tmp_path / "deep", 12)
    capsys.readouterr()
    start = time.perf_counter()
    assert main(["inspect", str(deep)]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("st-magnitude ")]
    assert len(lines) == 1 and "Traceback" not in err
    assert "router_config.json" in lines[0] and f"at most {MAX_ROUTER_DEPTH} levels" in lines[0]


def test_the_limit_itself_is_read(router_model, tmp_path):
    check_model_folder(_nest(router_model, tmp_path / "ok", MAX_ROUTER_DEPTH))
    with pytest.raises(InputFileError, match=f"at most {MAX_ROUTER_DEPTH} levels"):
        check_model_folder(_nest(router_model, tmp_path / "over", MAX_ROUTER_DEPTH + 1))


def test_a_nested_router_key_leading_outside_is_refused(router_model, tmp_path):
    deep = _nest(router_model, tmp_path / "deep", 2)
    config = deep / "inner" / "router_config.json"
    cfg = json.loads(config.read_text())
    cfg["types"]["../../victim"] = cfg["types"].pop("query_0_Transformer")
    config.write_text(json.dumps(cfg))
    with pytest.raises(InputFileError, match=r"types key '\.\./\.\./victim' leads outside the model folder"):
        check_model_folder(deep)


def test_a_router_reached_twice_is_refused(router_model, tmp_path):
    """A key linked back to an enclosing Router would nest it without end (and fan out with every extra link)."""
    deep = _nest(router_model, tmp_path / "loop", 2)
    (deep / "inner" / "again").symlink_to(deep, target_is_directory=True)
    config = deep / "inner" / "router_config.json"
    cfg = json.loads(config.read_text())
    cfg["types"]["again"] = ROUTER
    config.write_text(json.dumps(cfg))
    with pytest.raises(InputFileError, match=r"reached twice"):
        check_model_folder(deep)
