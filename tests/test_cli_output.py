"""What the CLI prints around a command: one-line warnings and quiet transformers inside a command only (restored
after), defaults in --help, counts in words, and diagnose's reasons when a number is undefined."""

from __future__ import annotations

import logging
import os
import warnings
from types import SimpleNamespace

import pytest

from st_magnitude.cli import _one_line_warning, main


def test_a_warning_is_one_line_without_the_source_line():
    text = _one_line_warning(
        "first line\n  second line", UserWarning, "/site/st_magnitude/cli/convert.py", 36, "x = 1"
    )
    assert text == "UserWarning: first line second line\n"


def test_a_command_runs_with_one_line_warnings_and_quiet_transformers_then_restores_both(monkeypatch, tmp_path):
    import st_magnitude.cli.scaling as scaling

    seen = {}

    def fake_fit(args):
        from transformers.utils import logging as hf_logging

        seen["format"] = warnings.formatwarning("a\nb", UserWarning, "/x/y.py", 3)
        seen["verbosity"] = hf_logging.get_verbosity()
        return 0

    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    monkeypatch.setattr(scaling, "_cmd_fit", fake_fit)
    before_format = warnings.formatwarning
    assert main(["scaling", "fit", str(tmp_path / "any.csv")]) == 0
    assert seen == {"format": "UserWarning: a b\n", "verbosity": logging.ERROR}
    from transformers.utils import logging as hf_logging

    assert warnings.formatwarning is before_format
    assert hf_logging.get_verbosity() == logging.WARNING and "TRANSFORMERS_VERBOSITY" not in os.environ
    seen.clear()
    assert main(["-v", "scaling", "fit", str(tmp_path / "any.csv")]) == 0
    assert seen["verbosity"] == logging.WARNING  # -v keeps transformers' own reports


def test_replicate_help_names_the_profile_default(capsys):
    assert main(["replicate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default: cpu" in text and "default: 5" in text


def test_counts_agree_in_number():
    from st_magnitude.cli.replicate import _count

    assert (_count(1, "seed"), _count(3, "seed"), _count(0, "seed")) == ("1 seed", "3 seeds", "0 seeds")


@pytest.mark.parametrize(
    ("relevant", "irrelevant", "note", "expected"),
    [
        (751, 0, "NanoBEIR-style subsample", "751 of the 751 documents are judged relevant"),
        (751, 0, "NanoBEIR-style subsample", "a larger --max-corpus adds unjudged documents"),
        (3633, 1, "", "this split judges nearly every document: read the label-free d"),
        (1, 40, "", "only 1 of the 41 documents are judged relevant"),
    ],
)
def test_diagnose_says_why_cohens_d_is_undefined_and_what_to_do(relevant, irrelevant, note, expected):
    from st_magnitude.cli.diagnose import _labelled_d

    ds = SimpleNamespace(cohens_d=None, cohens_d_band="undefined", n_relevant=relevant, n_irrelevant=irrelevant,
                         note=note)  # fmt: skip
    text = _labelled_d(ds)
    assert text.startswith("undefined (") and expected in text and "(undefined)" not in text
    ds.cohens_d, ds.cohens_d_band = 0.4, "small"
    assert _labelled_d(ds) == "+0.400 (small)"


def test_mteb_names_a_local_model_after_its_folder(tmp_path):
    from st_magnitude.evaluation.mteb import local_model_name

    assert local_model_name(tmp_path / "qnorm-minilm") == "local/qnorm-minilm"
    assert local_model_name(tmp_path / "runs" / "cosine-infonce" / "model") == "local/cosine-infonce-model"
