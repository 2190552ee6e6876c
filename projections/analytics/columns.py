"""Arrow columns from Python values, without ``pyarrow.array``.

``pyarrow.array`` (and every constructor built on it: ``pa.table``, ``Schema.empty_table``,
``pq.read_table``) imports pandas the first time it runs when pandas is installed, to ask whether the
values are a pandas object: half a second of CPU (0.35-0.5 s measured), which was 40 % of an
``evstore metrics`` that had new events to flatten, and the same again at each ``evstore serve``
start.  pandas is installed wherever evstore's notebooks are (the ``notebooks`` extra), and pyarrow
has no setting to skip the question.  The fact tables hold five column types only (:func:`arrow_types`
of :mod:`projections.analytics.facts`), so their buffers are built here with the standard library and
handed to ``pa.Array.from_buffers``, which takes them as they are; each array is validated before use.
``tests/test_analytics_columns.py`` checks every type against ``pyarrow.array`` itself, nulls,
extreme values and empty columns included.

The cost: ``pyarrow.array`` converts 15-250 ns a value, these 50-370 (a column of one type takes the
stdlib's C paths; nulls and times cost most), so a full build of ``evstore demo --runs 1000`` (51,069
events) takes 0.56 s of CPU instead of 0.51 once pandas is in, and 0.2-0.5 s less in a process that has
not imported it yet (a command's or a server's first refresh: every command is such a process).  A
build has to pass half a million events before the import would have been the cheaper way.

``pyarrow.compute`` (0.03-0.07 s to import: it wraps each of Arrow's ~290 functions in Python) is imported
only for a column of ``COMPUTE_FROM`` values or more, where Arrow's running sum of string lengths and its
parse of a column of times are worth it; a shorter column is summed and parsed here (a refresh of a few
events, as after each hook call or note, imports pyarrow but not its compute functions).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import accumulate, repeat
from operator import is_not
from typing import Any

import pyarrow as pa

#: From this many values a column's string offsets are summed, and its stored times parsed, by Arrow's compute
#: functions (imported then); below it, in Python: ``accumulate`` costs about 20-30 ns a value more than Arrow's
#: sum, and ``ts`` about 450 ns a time more than Arrow's parse (at most 2 ms a column), against the import's 30-70
#: ms.  A build's columns (``files.CHUNK_EVENTS`` events a chunk) are past it.
COMPUTE_FROM = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: The longest string data one ``string`` array holds (its offsets are 32-bit).
_MAX_OFFSET = 2**31 - 1
_DIGITS = bytes.maketrans(b"\x00\x01", b"01")


def _bits(flags: Iterable[bool]) -> pa.Buffer:
    """Arrow's bitmap of ``flags``: bit ``i % 8`` of byte ``i // 8``, least significant first."""
    digits = bytes(flags)[::-1].translate(_DIGITS)  # b"\x01\x00" -> b"01": the last flag most significant
    if not digits:
        return pa.py_buffer(b"")
    # The integer's little-endian bytes are the bitmap.
    return pa.py_buffer(int(digits, 2).to_bytes((len(digits) + 7) // 8, "little"))


def column(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """An array of ``kind`` (string, int64, float64, bool or timestamp[us, UTC]) holding ``values``
    (``None`` is null); a value of the wrong type raises TypeError (OverflowError when out of range).
    Each type has a fast path for a column of one Python type (the stdlib converts it in C) and checks
    value by value otherwise."""
    values = values if isinstance(values, list) else list(values)
    n = len(values)
    if kind.id == _STRING_ID:  # a column of text and no null first: the join checks every value is text, in C
        try:
            joined = "".join(values)
        except TypeError:  # a None, or a value that is no str: the general path below
            pass
        else:
            return _strings(joined, values, None, 0)
    nulls = values.count(None)
    if nulls == n and kind in _NULLABLE:  # all null (the writer columns of a local store's events)
        return pa.nulls(n, kind)
    validity = _bits(map(is_not, values, repeat(None))) if nulls else None
    types = set(map(type, values))
    types.discard(type(None))
    if pa.types.is_string(kind):
        if types <= {str}:
            filled = [v or "" for v in values]
            return _strings("".join(filled), filled, validity, nulls)
        encoded = [b"" if v is None else _text(v) for v in values]
        data = b"".join(encoded)
        _fits(data)
        buffers = [validity, _offsets(list(map(len, encoded)), n), pa.py_buffer(data)]
    elif pa.types.is_int64(kind):
        ints = values if not nulls else [0 if v is None else v for v in values]
        if not types <= {int}:
            ints = [0 if v is None else _integer(v) for v in values]
        buffers = [validity, pa.py_buffer(array("q", ints).tobytes())]
    elif pa.types.is_float64(kind):
        floats = values if not nulls else [0.0 if v is None else v for v in values]
        if not types <= {float}:
            floats = [0.0 if v is None else _number(v) for v in values]
        buffers = [validity, pa.py_buffer(array("d", floats).tobytes())]
    elif pa.types.is_boolean(kind):
        if not types <= {bool}:
            _flag(next(v for v in values if v is not None and type(v) is not bool))  # raises, naming it
        buffers = [validity, _bits(map(bool, values))]
    elif pa.types.is_timestamp(kind) and kind.unit == "us":
        try:  # times with a zone (what the facts hold), inline: a call per value was 2/3 of the cost
            micros = _times(values) if types <= {datetime} else None
        except TypeError:  # a naive time
            micros = None
        if micros is None:
            micros = [0 if v is None else _micros(v) for v in values]
        buffers = [validity, pa.py_buffer(array("q", micros).tobytes())]
    else:
        raise TypeError(f"no column builder for {kind}")
    out = pa.Array.from_buffers(kind, n, buffers, null_count=nulls)
    out.validate()
    return out


def _strings(joined: str, texts: list[str], validity: pa.Buffer | None, nulls: int) -> pa.Array:
    """A string array of ``texts`` (nulls given as "" and marked in ``validity``), ``joined`` their concatenation."""
    data = joined.encode("utf-8")  # UnicodeEncodeError for a lone surrogate, as pyarrow refuses it
    _fits(data)
    # each value's length in bytes: its length in characters when the whole text is ASCII
    lengths = list(map(len, texts)) if len(data) == len(joined) else [len(v.encode("utf-8")) for v in texts]
    n = len(texts)
    out = pa.Array.from_buffers(pa.string(), n, [validity, _offsets(lengths, n), pa.py_buffer(data)],
                                null_count=nulls)
    out.validate()
    return out


def _fits(data: bytes) -> None:
    if len(data) > _MAX_OFFSET:
        raise OverflowError(f"a string column holds {len(data):,} bytes, over the {_MAX_OFFSET:,} one array can")


_STRING_ID = pa.string().id


def _offsets(lengths: list[int], n: int) -> pa.Buffer:
    """The int32 offsets of ``n`` values of these byte lengths (0, then their running sums): the lengths
    go into a C array from a list (the stdlib's fast path), and Arrow sums them (an ``accumulate`` into
    the array cost 2-3x as much, a Python step per value), from ``COMPUTE_FROM`` values on."""
    lengths.insert(0, 0)  # (array(typecode, list) is twice as fast as array.extend(list))
    if n < COMPUTE_FROM:  # the sums fit: _fits held the whole text to an int32
        return pa.py_buffer(array("i", accumulate(lengths)).tobytes())
    import pyarrow.compute as pc

    sized = array("i", lengths)
    summed = pc.cumulative_sum(pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(sized)]))
    return summed.buffers()[1]


#: The types :func:`column` makes an all-null column of with ``pa.nulls`` (each type's nulls are what
#: pyarrow.array makes of a list of None: zeroed values, an all-clear validity bitmap).
_NULLABLE = frozenset({pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("us", tz="UTC")})


def _times(values: list[datetime | None]) -> list[int]:
    """Microseconds since the epoch of times with a zone (0 for None; TypeError for a naive one).  The facts
    repeat one time object over the rows of an event, and the events of a snapshot: each run of the same
    object is converted once (a subtraction and a division, 200-300 ns, against 30 for the check)."""
    out: list[int] = []
    append = out.append
    last: Any = out  # no value is this list
    micros = 0
    for v in values:
        if v is not last:
            last = v
            micros = 0 if v is None else (v - _EPOCH) // _MICROSECOND
        append(micros)
    return out


def table(columns: Sequence[Sequence[Any]], schema: pa.Schema, name: str = "") -> pa.Table:
    """A table of ``schema`` whose i-th column holds ``columns[i]`` (all of one length); a value a
    column cannot take raises TypeError (OverflowError, ValueError for text that is not Unicode) naming
    the column."""
    if len(columns) != len(schema):
        raise ValueError(f"{len(columns)} columns for a schema of {len(schema)}")
    arrays = []
    for values, field in zip(columns, schema, strict=True):
        try:
            arrays.append(column(values, field.type))
        except (TypeError, ValueError, OverflowError) as exc:  # the Unicode errors are ValueErrors
            where = f"{name}.{field.name}" if name else field.name
            kind = next(k for k in (OverflowError, TypeError, ValueError) if isinstance(exc, k))
            raise kind(f"fact column {where} ({field.type}): {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=schema)


def from_arrays(arrays: Sequence[pa.Array], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(list(arrays), schema=schema)


#: evstore's stored time (``eventstore.store.iso``): UTC, microseconds, "Z".  RE2 (Arrow's) has no
#: look-ahead, so the year 0000, which Arrow reads and Python does not, is refused apart.
_STORED_TIME = r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z$"
_UTC_MICROS = pa.timestamp("us", tz="UTC")


def iso_times(values: Sequence[str | None]) -> pa.Array:
    """A timestamp[us, UTC] array of ISO 8601 texts, each what ``eventstore.dialects.analytics.ts``
    makes of it (null for None, for text that is no time and for a time without a zone).

    A column of times as the store writes them (every ``occurred_at`` and ``recorded_at``) is parsed by
    Arrow, a column at a time (about 200 ns a value, the text column included, against 500 for ``ts`` and
    the conversion of its datetime);
    anything else, a column Arrow refuses (a 30 February), or one under ``COMPUTE_FROM`` values, value by
    value with ``ts`` itself."""
    from eventstore.dialects.analytics import ts

    if len(values) < COMPUTE_FROM:
        return column([ts(v) for v in values], _UTC_MICROS)
    import pyarrow.compute as pc

    text = column(values, pa.string())
    if len(text) and pc.all(pc.match_substring_regex(text, _STORED_TIME)).as_py() is not False \
            and not pc.any(pc.starts_with(text, "0000")).as_py():
        try:
            return text.cast(_UTC_MICROS)
        except pa.ArrowInvalid:
            pass
    return column([ts(v) for v in values], _UTC_MICROS)


def empty(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` without rows (``Schema.empty_table`` without its pandas import)."""
    return table([[] for _ in schema], schema)


# What each type takes is what pyarrow.array takes for it (the tests hold the two side by side), except
# that a float with a fraction is refused for an int64 column instead of being cut to its whole part.

def _text(v: Any) -> bytes:
    """The UTF-8 bytes of a str, or of bytes that are UTF-8 text (as pyarrow takes them for a string)."""
    if type(v) is str:
        return v.encode("utf-8")  # UnicodeEncodeError for a lone surrogate, which pyarrow refuses too
    if type(v) is bytes:
        v.decode("utf-8")  # UnicodeDecodeError unless it is UTF-8 text
        return v
    raise TypeError(f"expected a str, got {type(v).__name__}: {v!r:.80}")


def _integer(v: Any) -> int:
    if type(v) is int:  # bool is not an integer here, as in pyarrow
        return v
    if type(v) is float and v.is_integer():
        return int(v)
    raise TypeError(f"expected an int, got {type(v).__name__}: {v!r:.80}")


def _number(v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) in (int, bool) and int(float(v)) == v:  # an int a double holds exactly, as pyarrow asks
        return float(v)
    raise TypeError(f"expected a float (or an int a double holds exactly), got {type(v).__name__}: {v!r:.80}")


def _flag(v: Any) -> bool:
    if type(v) is not bool:
        raise TypeError(f"expected a bool, got {type(v).__name__}: {v!r:.80}")
    return v


def _micros(v: Any) -> int:
    """Microseconds since the epoch: of a time (naive ones read as UTC, as pyarrow reads them), or an
    int taken as that count already."""
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        micros: int = (v - _EPOCH) // _MICROSECOND
        return micros
    if type(v) is int:
        return v
    raise TypeError(f"expected a datetime, got {type(v).__name__}: {v!r:.80}")
