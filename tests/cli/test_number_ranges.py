"""A number outside what the command can use is a usage error naming the allowed range, before any work.

Before, ``export --opset 0`` / ``-5`` / ``99999`` ended in torch's exporter tracebacks after loading the model,
``--threads 2**40`` in ``ValueError: Overflow when unpacking long`` naming no option, and ``--threads 100000`` started
a hundred thousand threads per matrix product (the run never finished).
"""

from __future__ import annotations

import pytest

from st_magnitude.cli import build_parser


def _usage_error(argv: list[str], capsys) -> str:
    parser = build_parser([argv[0]])
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("opset", ["0", "-5", "13", "99999", "x"])
def test_an_opset_outside_the_exportable_range_is_refused_naming_it(opset, capsys):
    err = _usage_error(["export", "M", "-o", "O", "--opset", opset], capsys)
    assert "--opset" in err and "from 14 to 20" in err, err


@pytest.mark.parametrize("command", [["evaluate", "M", "--data", "D"], ["diagnose", "M", "--data", "D"]])
@pytest.mark.parametrize("threads", ["0", "100000", str(2**40)])
def test_a_thread_count_outside_the_usable_range_is_refused_naming_it(command, threads, capsys):
    err = _usage_error([*command, "--threads", threads], capsys)
    assert "--threads" in err and "from 1 to 1024" in err, err


@pytest.mark.parametrize("argv", [["export", "M", "-o", "O", "--opset", "14"], ["evaluate", "M", "--data", "D"]])
def test_the_range_ends_are_accepted(argv):
    build_parser([argv[0]]).parse_args([*argv, "--threads", "1024"] if argv[0] == "evaluate" else argv)
