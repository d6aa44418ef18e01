"""JSON files and lines read from disk, and the checked view of their objects (:class:`Fields`).

:func:`read_json` refuses what :func:`json.loads` accepts but no file of this package holds: bytes that are not
UTF-8, ``NaN`` / ``Infinity``, lone surrogates (``"\\ud800"``, which later fail to be written), nesting deeper than
``max_depth`` (100,000 levels would end in a ``RecursionError``), and files over ``max_bytes``. Each refusal is an
:class:`InputFileError` naming the file and the line or key.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.text import _read_bytes, decode_utf8

#: Names read from files or flags that become parts of file names (a run's profile and tag, a claim id): a letter or
#: digit first, then letters, digits, ``-``, ``_`` or ``.``; no path separator can appear, so such a name never leaves
#: its folder.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

_MISSING = object()


def check_name(value: object, what: str, file: str | os.PathLike | None = None) -> str:
    """``value`` when it is a safe file-name part (:data:`NAME_PATTERN`), else an error naming ``what`` (an
    :class:`InputFileError` naming ``file`` when the value was read from one, a ``ValueError`` otherwise)."""
    if isinstance(value, str) and NAME_PATTERN.fullmatch(value):
        return value
    problem = (
        f"{what} must be a name of letters, digits, '-', '_' or '.' (starting with a letter or digit, at most 100 "
        f"characters), got {value!r}"
    )
    if file is not None:
        raise InputFileError(file, problem)
    raise ValueError(problem)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _infinity_only(name: str) -> float:
    if name == "NaN":
        _refuse_constant(name)
    return float(name)


def _as_null(name: str) -> None:
    return None


def _loads(
    text: str, file: str | os.PathLike, line_offset: int = 0, allow_infinity: bool = False, nan_as_null: bool = False
) -> Any:
    constant = _as_null if nan_as_null else _infinity_only if allow_infinity else _refuse_constant
    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            file, f"not valid JSON ({exc.msg}, column {exc.colno})", where=str(exc.lineno + line_offset)
        ) from None
    except ValueError as exc:  # NaN / Infinity
        raise InputFileError(file, f"{exc}; write a finite number or null", where=str(line_offset + 1)) from None
    except RecursionError:
        raise InputFileError(file, "nested too deeply to be read") from None


def _check_tree(obj: Any, file: str | os.PathLike, where: str | None, max_depth: int) -> None:
    """Depth limit and no lone surrogates, iteratively (a deep tree cannot exhaust the stack here)."""
    stack: list[tuple[Any, int, str]] = [(obj, 0, "")]
    while stack:
        node, depth, path = stack.pop()
        if depth > max_depth:
            raise InputFileError(file, f"nested deeper than {max_depth} levels (at {path or 'the top'})", where)
        if isinstance(node, str):
            _check_text(node, file, where, path)
        elif isinstance(node, dict):
            for key, value in node.items():
                _check_text(key, file, where, path)
                stack.append((value, depth + 1, f"{path}.{key}" if path else str(key)))
        elif isinstance(node, list):
            stack.extend((value, depth + 1, f"{path}[{i}]") for i, value in enumerate(node))


def _check_text(text: str, file: str | os.PathLike, where: str | None, path: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        place = f"key {path} " if path else ""
        problem = f"{place}holds a lone surrogate {text[exc.start]!r} (no character)"
        raise InputFileError(file, problem, where) from None


def read_json(
    path: str | os.PathLike,
    *,
    max_bytes: int = 1 << 28,
    max_depth: int = 64,
    allow_infinity: bool = False,
    nan_as_null: bool = False,
) -> Any:
    """The JSON value in ``path``, checked as the module docstring says; :class:`InputFileError` otherwise (a
    missing or unreadable file included). ``allow_infinity``: ``Infinity`` / ``-Infinity`` are read as ±inf (an
    undefined interval's ends in the package's own results); ``NaN`` is refused all the same. ``nan_as_null``:
    ``NaN`` / ``Infinity`` are read as ``None`` (a file another program writes: mteb's results hold NaN for an
    undefined score)."""
    path = Path(path)
    text = decode_utf8(_read_bytes(path, max_bytes), path)
    value = _loads(text, path, allow_infinity=allow_infinity, nan_as_null=nan_as_null)
    _check_tree(value, path, None, max_depth)
    return value


def parse_json_bytes(raw: bytes, file: str | os.PathLike, *, max_depth: int = 64) -> Any:
    """The JSON value in ``raw``, the bytes already read from ``file`` (a file checked by its digest), checked like
    :func:`read_json`."""
    value = _loads(decode_utf8(raw, file), file)
    _check_tree(value, file, None, max_depth)
    return value


def parse_json_line(line: str, file: str | os.PathLike, lineno: int, *, max_depth: int = 64) -> Any:
    """One JSON Lines record (line ``lineno`` of ``file``), checked like :func:`read_json`."""
    value = _loads(line, file, line_offset=lineno - 1)
    _check_tree(value, file, str(lineno), max_depth)
    return value


class Fields:
    """A JSON object read from ``file``, whose values are taken one at a time, each with its check.

    ``Fields(obj, file)`` refuses anything but an object; :meth:`get` names the key (dotted for nested objects:
    ``settings.scale``) in every error. ``where`` is the line (JSON Lines) or the position of the object in its file.
    """

    def __init__(
        self,
        obj: object,
        file: str | os.PathLike,
        where: str | None = None,
        *,
        what: str = "the file",
        prefix: str = "",
    ):
        self.file = file
        self.where = where
        self.prefix = prefix
        if not isinstance(obj, dict):
            raise InputFileError(file, f"{what} must hold a JSON object, got {_kind(obj)}", where)
        self.obj: dict[str, Any] = obj

    def error(self, key: str, problem: str) -> InputFileError:
        place = f"{self.where} " if self.where else ""
        return InputFileError(self.file, f"{place}key {self.prefix + key!r}: {problem}")

    def __contains__(self, key: str) -> bool:
        return key in self.obj

    def keys(self) -> Iterable[str]:
        return self.obj.keys()

    def get(
        self,
        key: str,
        kind: type | tuple[type, ...],
        default: Any = _MISSING,
        *,
        choices: Collection[Any] | None = None,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        hi_open: bool = False,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        """The value of ``key``: of ``kind`` (``float`` accepts ints; ``bool`` is never a number), in ``choices``,
        within ``[lo, hi]`` (``lo_open`` / ``hi_open`` exclude an end; numbers must be finite), and passing
        ``check`` (which returns a problem or ``None``). A missing key gives ``default``, or an error without one;
        ``None`` is a value only when ``type(None)`` is in ``kind``."""
        if key not in self.obj:
            if default is _MISSING:
                raise self.error(key, "is missing")
            return default
        value = self.obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if value is None and type(None) in kinds:
            return None
        if not _is_kind(value, kinds):
            names = " or ".join(_type_name(k) for k in kinds)
            raise self.error(key, f"must be {names}, got {_kind(value)} {_short(value)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not _finite(value):
                raise self.error(key, f"must be a finite number, got {value!r}")
            if lo is not None and (value < lo or (lo_open and value == lo)):
                raise self.error(key, f"must be {'>' if lo_open else '≥'} {lo}, got {value!r}")
            if hi is not None and (value > hi or (hi_open and value == hi)):
                raise self.error(key, f"must be {'<' if hi_open else '≤'} {hi}, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"must be one of {sorted(map(str, choices))}, got {_short(value)}")
        if check is not None:
            problem = check(value)
            if problem:
                raise self.error(key, problem)
        return value

    def name(self, key: str, default: Any = _MISSING) -> str | None:
        """A value that becomes part of a file name (:func:`check_name`); ``None`` when missing and
        ``default=None``."""
        value = self.get(key, (str, type(None)) if default is None else str, default)
        if value is None:
            return None
        if not NAME_PATTERN.fullmatch(value):
            raise self.error(key, f"must be a name of letters, digits, '-', '_' or '.', got {_short(value)}")
        return value

    def sub(self, key: str, default: Any = _MISSING) -> Fields:
        """The nested object at ``key`` as :class:`Fields` (``default`` is returned as it is when missing)."""
        if key not in self.obj and default is not _MISSING:
            return default
        return Fields(self.get(key, dict), self.file, self.where, prefix=f"{self.prefix}{key}.")

    def known(self, keys: Collection[str]) -> dict[str, Any]:
        """Only the ``keys`` this reader knows (unknown keys are dropped, never copied onward)."""
        return {k: v for k, v in self.obj.items() if k in keys}

    def refuse_unknown(self, keys: Collection[str]) -> None:
        """An error naming the first key not in ``keys``."""
        for key in self.obj:
            if key not in keys:
                raise self.error(key, f"is not a key this file may have (allowed: {sorted(keys)})")


def _finite(value: float) -> bool:
    """``math.isfinite``, false for an integer beyond float64's range (JSON allows ``1e400`` as ``10**400``)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_kind(value: object, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, tuple(k for k in kinds if k is not bool))


def _type_name(kind: type) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(kind, kind.__name__)


def _kind(value: object) -> str:
    return _type_name(type(value)) if not isinstance(value, bool) else "a boolean"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
