"""The ``st-magnitude`` command.

:data:`COMMANDS` is the registry: command name -> its one-line help. Each command is the module
``st_magnitude.cli.<name>``: ``add_arguments(parser)`` declares its options, ``run(args)`` (where the command has no
sub-commands of its own) runs it and imports anything heavy, and an optional ``DESCRIPTION`` heads its ``--help``.
The options several commands share are declared once, in :mod:`st_magnitude.cli._args`.

:func:`main` builds only the parser of the command it is given (the others are listed by name and help, without
importing their modules), so ``st-magnitude --help`` and usage errors stay fast; :func:`build_parser` without an
argument builds them all. A command module that cannot be imported because an ``st_magnitude`` area (or a room of
the lab) is not in this build is left out instead of taking the other commands down.

Errors are one line on stderr with exit code 2: usage errors from the parser, and ``ValueError`` / ``OSError`` /
``ImportError`` raised by a command (``--debug`` shows the traceback instead). Everything read from disk passes the
trust boundary (:mod:`st_magnitude._trust`), whose :class:`~st_magnitude._trust.InputFileError` (a ``ValueError``)
names the file and the line or key; any other exception is a bug in the package and keeps its traceback.
Ctrl-C prints one line and exits 130; a command may add a hint to that line with
``set_defaults(interrupt_hint="...")``.

What a command writes is declared in its module's ``OUTPUTS`` (option ``dest`` -> ``"folder"``, ``"resumable"`` or
``"file"``), and :func:`main` applies the one cleanup rule to each
(:func:`st_magnitude._trust.outputs.removed_on_failure`): a failed or interrupted run takes back the folders it
created and nothing that existed before it. ``"folder"``: an output folder the run created is removed with what the
run wrote in it; ``"resumable"``: created folders are removed only when empty (what a killed run wrote is kept to
resume from); ``"file"``: the empty folders created for the file. The folders an output needs are made by that rule
before the command runs and recorded as this run's, so a failed run never removes a folder another run made (two
runs to one output). What a command reads is declared in its ``INPUTS`` (option ``dest`` -> the name its refusal
gives it; ``model`` is always one): before the command runs, no declared output may be, or lie inside, any of them,
however the path is spelled (:func:`~st_magnitude._trust.outputs.check_outside_inputs`; a command lists in
``MAY_BE_THE_MODEL`` an output that may be the model folder itself).

The arguments a command can check without its heavy imports are declared in its ``ARG_CHECKS`` (option ``dest`` -> a
check of one value, e.g. :func:`~st_magnitude.cli._args.check_model_path`), and :func:`main` runs each check on each
given value before the command runs: a missing model or data folder is one line in a fraction of a second, not after
the seconds that importing torch and sentence-transformers takes (``run`` imports those after its own cheap checks).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: The commands, in the order ``--help`` lists them: name -> one-line help (module ``st_magnitude.cli.<name>``).
COMMANDS: dict[str, str] = {
    "strip": "remove every trailing Normalize module from a saved model (file level, no weights loaded)",
    "convert": "make a model carry a similarity variant (apply_similarity) and save it",
    "export": "export a model to one ONNX graph per role (fused, optionally int8) for ONNX Runtime",
    "inspect": "print which similarity a model serves and whether it needs roles",
    "evaluate": "retrieval evaluation with the model's own roles: nDCG@10, Recall@100, MRR@10, pooled AUC per dataset",
    "mteb": "run mteb's own CLI with a local model folder and local BEIR folders as tasks",
    "diagnose": "magnitude diagnostics + which side to normalise (κ rule with a half-sampling CI); writes a report",
    "scaling": "embedding-dimension scaling laws (paper 003)",
    "calibrate": "fit score -> P(relevant) on labelled queries, save it with the model; ECE/Brier before/after",
    "compare": "fine-tune one base model with several similarity variants and compare them on BEIR datasets",
    "replicate": "reproduce a paper claim (multi-seed, 95%% CIs, verdict)",
}


_Extend = getattr(argparse, "_ExtendAction", argparse._AppendAction)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), naming the command; sub-commands inherit the class. Options are
    spelled in full (no abbreviations): a prefix such as ``--out`` or ``--data`` is not taken for ``--output`` or
    ``--data-root``."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._refuse_repeats(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_repeats(self, argv: list[str]) -> None:
        """An option of this parser that takes values, given more than once, is a usage error naming it (argparse
        keeps the last one silently: ``--data A --data B`` would read only B). ``append`` options repeat by design.
        Sub-commands check their own options (argparse hands each its part of the line)."""
        seen: dict[argparse.Action, int] = {}
        for word in argv:
            if word == "--":
                break
            if not word.startswith("-") or word == "-":
                continue
            action = self._option_string_actions.get(word.split("=", 1)[0])
            if action is None and not word.startswith("--"):
                action = self._option_string_actions.get(word[:2])  # -oVALUE
            if action is None or action.nargs == 0 or isinstance(action, (argparse._AppendAction, _Extend)):
                continue
            seen[action] = seen.get(action, 0) + 1
        for action, count in seen.items():
            if count > 1:
                flag = max(action.option_strings, key=len)
                several = f"; it takes several values after one flag: {flag} A B" if action.nargs in ("+", "*") else ""
                self.error(
                    f"{flag} given {count} times (the last would silently replace the others): give it once{several}"
                )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _command_module(name: str):
    """The module of command ``name``, or None when an ``st_magnitude`` area it needs is not in this build."""
    module_name = f"{__name__}.{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        parts = (exc.name or "").split(".")
        if parts[0] == "st_magnitude" and (len(parts) == 2 or (len(parts) == 3 and parts[1] == "lab")):
            return None  # st_magnitude.<area> or st_magnitude.lab.<room>
        raise


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command's options, or with only those of ``commands`` (the rest listed by name and
    help; parsing one of them gives no ``func``)."""
    from st_magnitude import __version__

    parser = _Parser(
        prog="st-magnitude",
        description="Magnitude-aware dense retrieval for sentence-transformers.",
    )
    parser.add_argument("--version", action="version", version=f"st-magnitude {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help in COMMANDS.items():
        if commands is not None and name not in commands:
            sub.add_parser(name, help=help)  # listed in --help; its options are never parsed in this run
            continue
        module = _command_module(name)
        if module is None:
            continue
        command_parser = sub.add_parser(name, help=help, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(command_parser)
        if hasattr(module, "run"):
            command_parser.set_defaults(func=module.run)
    return parser


def command_paths() -> list[list[str]]:
    """Every command and sub-command as the words that name it (``["scaling", "fit"]``), from the registry and the
    parsers its modules build: what a test or a benchmark walks to reach each of them."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    paths: list[list[str]] = []
    for name, command_parser in commands.choices.items():
        paths.append([name])
        for action in command_parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                paths.extend([name, sub] for sub in action.choices)
    return paths


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the CLI prints it: ``Category: message`` on one line (no source path, no code line)."""
    return f"{category.__name__}: {' '.join(str(message).split())}\n"


@contextlib.contextmanager
def _command_output(verbose: bool):
    """While a command runs: warnings print as one line each, and transformers' own reports (the per-model
    ``LOAD REPORT`` of unused checkpoint weights, which the package's loaders expect) are silenced unless ``-v``.
    Both are restored afterwards, so calling :func:`main` from Python leaves the process as it was."""
    previous_format = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    restore_verbosity = None if verbose else _quiet_transformers()
    try:
        yield
    finally:
        warnings.formatwarning = previous_format
        if restore_verbosity is not None:
            restore_verbosity()


def _quiet_transformers():
    """transformers' verbosity to ``error`` through its own switches, without importing it (``--help`` stays fast):
    ``set_verbosity_error()`` when it is imported, else ``TRANSFORMERS_VERBOSITY=error``, which it reads when it
    configures its logger. Returns the function that restores the previous state."""
    loaded = sys.modules.get("transformers.utils.logging")
    if loaded is not None:
        level = loaded.get_verbosity()
        loaded.set_verbosity_error()
        return lambda: loaded.set_verbosity(level)
    if "TRANSFORMERS_VERBOSITY" in os.environ:  # the user's choice wins
        return None
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"

    def restore() -> None:
        os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        configured = sys.modules.get("transformers.utils.logging")
        if configured is not None:
            configured.set_verbosity_warning()  # transformers' default

    return restore


#: The kinds of output a command declares in its ``OUTPUTS`` (see the module docstring).
OUTPUT_KINDS = ("folder", "resumable", "file")


@contextlib.contextmanager
def _guarded_outputs(args: argparse.Namespace) -> Iterator[None]:
    """Every output the command ``args.command`` declares in its ``OUTPUTS``: refused when it is or lies inside the
    model or another declared input (``INPUTS``), then under the one cleanup rule while the command runs."""
    from st_magnitude._trust.outputs import check_outside_inputs, removed_on_failure

    module = sys.modules.get(f"{__name__}.{args.command}")
    outputs = getattr(module, "OUTPUTS", {})
    declared = {"model": "model", **getattr(module, "INPUTS", {})}
    inputs = {name: getattr(args, dest, None) for dest, name in declared.items()}
    for dest in outputs:
        flag = "--" + dest.replace("_", "-")
        may_be = ("model",) if dest in getattr(module, "MAY_BE_THE_MODEL", ()) else ()
        check_outside_inputs(inputs, getattr(args, dest, None), flag, may_be=may_be)
    with contextlib.ExitStack() as stack:
        for dest, kind in outputs.items():
            value = getattr(args, dest, None)
            if value is None:
                continue
            if kind == "file":
                stack.enter_context(removed_on_failure(Path(value).parent, keep_contents=True))
            else:
                stack.enter_context(removed_on_failure(value, keep_contents=kind == "resumable"))
        yield


def _check_inputs(args: argparse.Namespace) -> None:
    """Every value of every argument the command ``args.command`` declares in its ``ARG_CHECKS``, checked (nothing
    heavy imported); a check raises ``ValueError`` / ``OSError``, which :func:`main` prints as one line."""
    module = sys.modules.get(f"{__name__}.{args.command}")
    for dest, check in getattr(module, "ARG_CHECKS", {}).items():
        value = getattr(args, dest, None)
        for one in value if isinstance(value, (list, tuple)) else () if value is None else (value,):
            check(one)


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top level's options take no value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    parser = build_parser([] if command is None else [command])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (one line, code 2), --help and --version: return the code
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _check_inputs(args)
        with _command_output(args.verbose), _guarded_outputs(args):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        hint = getattr(args, "interrupt_hint", None)
        print(f"st-magnitude {args.command}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130
    except (ValueError, OSError, ImportError) as exc:  # bad input, files, optional dependencies: one line
        if args.verbose or args.debug:
            raise
        print(f"st-magnitude {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
