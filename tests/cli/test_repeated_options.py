"""An option that takes one value (or one list of values) given twice is a usage error naming it: before, the last
one silently replaced the others (``--data A --data B`` evaluated only B)."""

from __future__ import annotations

import pytest

from st_magnitude.cli import build_parser


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        build_parser([argv[0]]).parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["evaluate", "M", "--data", "A", "--data", "B"], "--data"),
        (["evaluate", "M", "--data", "A", "--batch-size", "8", "--batch-size=16"], "--batch-size"),
        (["strip", "M", "-o", "A", "--output", "B"], "--output"),
        (["convert", "M", "qnorm", "-oA", "-o", "B"], "--output"),
        (["mteb", "run", "-m", "M", "-t", "T", "-m", "N"], "--model"),
        (["replicate", "001", "--seeds", "2", "--seeds", "3"], "--seeds"),
    ],
    ids=["--data", "--batch-size=", "-o/--output", "-oA", "mteb -m", "replicate --seeds"],
)
def test_a_single_value_option_given_twice_is_refused_naming_it(argv, flag, capsys):
    err = _usage_error(argv, capsys)
    assert f"{flag} given 2 times" in err, err


def test_the_refusal_of_a_list_option_says_how_to_give_several_values(capsys):
    err = _usage_error(["evaluate", "M", "--data", "A", "--data", "B"], capsys)
    assert "--data A B" in err, err


def test_options_meant_to_repeat_and_flags_still_parse():
    args = build_parser(["replicate"]).parse_args(["replicate", "001", "--set", "a=1", "--set", "b=2"])
    assert args.set == ["a=1", "b=2"]
    args = build_parser(["evaluate"]).parse_args(["evaluate", "M", "--data", "A", "B", "--require-roles"])
    assert args.data == ["A", "B"]
    build_parser(["evaluate"]).parse_args(["evaluate", "M", "--data", "A", "--require-roles", "--require-roles"])
