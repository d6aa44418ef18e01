"""The ``st-magnitude`` command.

Sub-commands live beside the code they drive: each area module listed in ``_COMMAND_MODULES`` exposes
``add_subcommands(subparsers)`` and is imported lazily, so ``st-magnitude --help`` stays fast and one broken area
does not take the others down.

Errors are one line on stderr with exit code 2: usage errors from the parser, and ``ValueError`` / ``OSError`` /
``ImportError`` raised by a command (``-v`` shows the traceback instead). Ctrl-C prints one line and exits 130; a
command may add a hint to that line with ``set_defaults(interrupt_hint="...")``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

logger = logging.getLogger(__name__)

_COMMAND_MODULES = (
    "st_magnitude.convert_cli",
    "st_magnitude.integrations.cli",
    "st_magnitude.diagnostics.cli",
    "st_magnitude.scaling.cli",
    "st_magnitude.experiments.cli",
    "st_magnitude.replication.cli",
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), naming the command; sub-commands inherit the class."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def build_parser() -> argparse.ArgumentParser:
    from st_magnitude import __version__

    parser = _Parser(
        prog="st-magnitude",
        description="Magnitude-aware dense retrieval for sentence-transformers.",
    )
    parser.add_argument("--version", action="version", version=f"st-magnitude {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):  # area not in this build
                continue
            raise
        module.add_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (one line, code 2), --help and --version: return the code
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        hint = getattr(args, "interrupt_hint", None)
        print(f"st-magnitude {args.command}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130
    except (ValueError, OSError, ImportError) as exc:  # bad input, files, optional dependencies: one line
        if args.verbose:
            raise
        print(f"st-magnitude {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
