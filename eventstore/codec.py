"""Validation and canonical encoding of user-supplied JSON at the boundary.

User input is decoded strictly: UTF-8, no NaN/Infinity, at most ``MAX_DEPTH`` levels of
nesting, at most ``MAX_EVENT_BYTES`` bytes.  Errors name what and where (JSON path / line).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import msgspec

from eventstore import config
from eventstore.errors import InvalidEvent, JSONSyntaxError

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def encode(value: Any) -> bytes:
    """Canonical JSON bytes (msgspec: compact, key order kept)."""
    return _enc.encode(value)


def decode(data: bytes) -> Any:
    return _dec.decode(data)


_PLAIN = (str, int, bool, type(None))


def _fast_ok(node: Any, depth: int, limit: int) -> bool:
    """True if ``node`` is plain JSON within ``limit``; False means "look closer" (:func:`check_value`)."""
    if depth >= limit:
        return False
    if type(node) is dict:
        for k in node:
            if type(k) is not str:
                return False
        values: Any = node.values()
    else:
        values = node
    for v in values:
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            continue
        if t is float:
            if v - v != 0.0:  # NaN or +-Infinity
                return False
        elif t is dict or t is list:
            if not _fast_ok(v, depth + 1, limit):
                return False
        else:
            return False
    return True


def check_value(value: Any, where: str) -> None:
    """Reject NaN/Infinity, non-JSON types and nesting deeper than ``config.MAX_DEPTH``."""
    limit = config.MAX_DEPTH
    t = type(value)
    if t in _PLAIN or (t is float and value - value == 0.0):
        return
    if (t is dict or t is list) and _fast_ok(value, 0, limit):
        return
    # Slow path, only for bad input: find the first offending place and name its JSON path.
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        node, path, depth = stack.pop()
        t = type(node)
        if t is dict:
            if depth >= limit:
                raise InvalidEvent(f"{where}: nesting deeper than {limit} levels at {path}.")
            for k, v in node.items():
                if type(k) is not str:
                    raise InvalidEvent(f"{where}: object key {k!r} at {path} is not a string.")
                stack.append((v, f"{path}.{k}", depth + 1))
        elif t is list:
            if depth >= limit:
                raise InvalidEvent(f"{where}: nesting deeper than {limit} levels at {path}.")
            for i, v in enumerate(node):
                stack.append((v, f"{path}[{i}]", depth + 1))
        elif t is float:
            if not math.isfinite(node):
                raise InvalidEvent(f"{where}: {node!r} at {path} is not valid JSON (NaN/Infinity).")
        elif t not in _PLAIN:
            raise InvalidEvent(f"{where}: {t.__name__} at {path} is not a JSON value.")


JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
                   bool: "boolean", type(None): "null"}


def json_type(value: Any) -> str:
    return JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def encode_checked(value: Any, event_type: str, *, part: str = "data") -> bytes:
    """Validate ``value`` (the ``part`` of an event of ``event_type``, a JSON object) and return its
    canonical bytes, enforcing the size limit.  Errors read ``data of "TYPE": ...``."""
    if type(value) is not dict:
        raise InvalidEvent(f'{part} of "{event_type}": must be a JSON object, got {json_type(value)}.')
    if not _fast_ok(value, 0, config.MAX_DEPTH):
        check_value(value, f'{part} of "{event_type}"')
    try:
        data = _enc.encode(value)
    except (UnicodeEncodeError, msgspec.EncodeError) as exc:  # e.g. a lone surrogate "\ud800"
        raise InvalidEvent(f'{part} of "{event_type}": cannot be encoded as UTF-8 JSON ({exc}).') from exc
    return check_size(data, event_type, part=part)


def check_size(data: bytes, event_type: str, *, part: str = "data") -> bytes:
    """``data`` (the canonical bytes of an event's ``part``) if within ``config.MAX_EVENT_BYTES``."""
    if len(data) > config.MAX_EVENT_BYTES:
        raise InvalidEvent(
            f'{part} of "{event_type}": {len(data)} bytes exceeds the limit of {config.MAX_EVENT_BYTES} bytes '
            "(EVSTORE_MAX_EVENT_BYTES)."
        )
    return data


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def utf8_error(raw: bytes, exc: UnicodeDecodeError, where: str) -> JSONSyntaxError:
    """The error for bytes that are not UTF-8, with the line and column of the first bad byte."""
    line = raw.count(b"\n", 0, exc.start) + 1
    column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
    return JSONSyntaxError(f"{where}: not valid UTF-8 at byte {exc.start} (line {line}, column {column}).",
                           line, column)


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of ``text[index]``."""
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def _long_integer(text: str) -> tuple[int, str]:
    """Where and what is wrong when ``json`` refuses an integer literal longer than
    ``sys.get_int_max_str_digits()``.  Found after the fact: well-formed input pays nothing."""
    limit = sys.get_int_max_str_digits()
    m = re.search(rf"(?<![\w.])-?(\d{{{limit + 1},}})", text)
    why = f"evstore accepts integers of at most {limit} digits (write it as a string)"
    if m is None:  # pragma: no cover - json named a too-long integer, so one is there
        return 0, f"an integer has more than {limit} digits; {why}."
    return m.start(), f"an integer of {len(m.group(1))} digits; {why}."


def parse_json_text(raw: bytes | str, where: str, *, one_line: bool = False) -> Any:
    """Parse user JSON strictly; errors carry line and column (only the column when ``one_line``:
    ``where`` names the line, e.g. a JSONL file's)."""
    if isinstance(raw, bytes):
        if len(raw) > config.MAX_SNAPSHOT_BYTES:
            raise InvalidEvent(f"{where}: {len(raw)} bytes exceeds the limit of {config.MAX_SNAPSHOT_BYTES}.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise utf8_error(raw, exc, where) from exc
    else:
        text = raw
    if one_line:
        text = text.rstrip("\r\n")

    def at(line: int, col: int) -> str:
        return f"{where}, column {col}" if one_line else f"{where}: line {line}, column {col}"

    try:
        value = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        if one_line:
            raise JSONSyntaxError(f"{at(exc.lineno, exc.colno)}: not valid JSON: {exc.msg}.", exc.lineno, exc.colno) from exc
        raise JSONSyntaxError(f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}.",
                              exc.lineno, exc.colno) from exc
    except ValueError as exc:  # NaN / Infinity, or an integer past Python's digit limit
        if "integer string conversion" in str(exc):
            index, why = _long_integer(text)
            line, col = _position(text, index)
            raise JSONSyntaxError(f"{at(line, col)}: {why}", line, col) from exc
        raise JSONSyntaxError(f"{where}: {exc}.") from exc
    except RecursionError as exc:
        raise InvalidEvent(f"{where}: nesting deeper than {config.MAX_DEPTH} levels.") from exc
    return value
