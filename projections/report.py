"""Render a :class:`~projections.metrics.Report` as a text table, JSON, CSV or one HTML file.

The HTML report is self-contained: inline CSS and inline SVG charts, no script, no font or
network fetch, so it opens the same from a mail attachment or a CI artefact.  Each metric section
declares its chart, if any (:class:`~eventstore.dialects.analytics.Chart`: horizontal bars with
optional interval whiskers, or grouped vertical bars); this module draws them and names no section.

    >>> text = render(report, "html")
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore.dialects.analytics import Chart
from eventstore.display import printable

if TYPE_CHECKING:  # only for annotations: `evstore serve` imports this module, and DuckDB when a metrics page is asked for
    from projections.metrics import Report, Section

FORMATS = ("table", "json", "csv", "html")


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return to_json(report.to_dict())
    if fmt == "csv":
        return to_csv(report)
    if fmt == "html":
        return to_html(report)
    if fmt == "table":
        return to_table(report)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


#: JSON text pieces joined at a time (:func:`to_json`).
JSON_BATCH = 65_536
#: A report's rows encoded at a time, a column at a time (:func:`_rows_json`).
JSON_ROWS = 10_000


def to_json(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False, default=str)`` and a newline, the same text.

    A report's rows (``value["sections"][i]["rows"]``: flat objects of the same keys, nearly all of its text)
    are written a column at a time (:func:`_rows_json`); the rest, and rows that are not such, as
    :func:`_dumps` writes them.  ``json.dumps`` with an indent is its pure-Python encoder, a generator step
    per key, value and separator: 1.15 s for the 48 MB report of a 10^7-event store."""
    return json_pieces(value)[0]


def json_pieces(value: Any, known: Mapping[int, str] | None = None) -> tuple[str, list[tuple[int, int]]]:
    """:func:`to_json`'s text, and where in it each section's object is (``value["sections"][i]``: its first and
    past its last byte in the text's UTF-8; none if ``value`` is not a report's dict).  ``known``: the text of a section's
    object, by its index, already written (a section an earlier report's rendering holds: the same section
    gives the same text), used as it is instead of written again."""
    known = known or {}
    sections = value.get("sections") if isinstance(value, dict) else None
    if isinstance(sections, list):  # rows left as their JSON text (metrics.Earlier): decoded, unless known
        sections = [s if i in known else _rows_decoded(s) for i, s in enumerate(sections)]
    if not sections or not isinstance(sections, list) or not all(
            isinstance(s, dict) and (isinstance(s.get("rows"), list) or i in known) for i, s in enumerate(sections)):
        if isinstance(sections, list):  # not a report's dict: every section written as json.dumps does
            value = {**value, "sections": [_rows_decoded(s) for s in sections]}
        return _dumps(value) + "\n", []
    return _spliced(_dumps, value, (known[i] if i in known else _section_json(s) for i, s in enumerate(sections)),
                    "\n    ", ",\n    ", "\n  ]", end="\n")


def _spliced(dump: Callable[[Any], str], value: dict[str, Any], pieces: Iterable[str], first: str, sep: str,
             close: str, *, end: str = "") -> tuple[str, list[tuple[int, int]]]:
    """``dump(value)`` with its ``sections`` list written as ``pieces``, the text of each section (``first`` before
    the first, ``sep`` before each other, ``close`` ending the list: ASCII), then ``end``, and where in the text's
    UTF-8 each piece is.  One join: the text of a 10^7-event report is 48 MB, and a copy of it more is as much."""
    token = f"\x00sections-{uuid.uuid4().hex}"  # a text no value can hold by chance: the sections' place
    before, _token, after = dump({**value, "sections": token}).partition(json.dumps(token))
    parts, spans, at = [before, "["], [], _utf8_length(before) + 1
    for i, piece in enumerate(pieces):
        lead = sep if i else first
        parts += [lead, piece]
        at += len(lead)
        spans.append((at, at + _utf8_length(piece)))
        at = spans[-1][1]
    parts += [close, after, end]
    return "".join(parts), spans


def compact_json(value: Any) -> str:
    """``value`` as the API sends it: JSON without spaces, non-ASCII as it is, NaN refused."""
    return json.dumps(value, default=str, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def compact_json_pieces(value: Any, known: Mapping[int, str] | None = None) -> tuple[str, list[tuple[int, int]]]:
    """:func:`compact_json`'s text, and where each section's object is in it, as :func:`json_pieces` gives them."""
    known = known or {}
    sections = value.get("sections") if isinstance(value, dict) else None
    if not isinstance(sections, list):
        return compact_json(value), []
    return _spliced(compact_json, value, (known[i] if i in known else compact_json(_rows_decoded(s))
                                          for i, s in enumerate(sections)), "", ",", "]")


def _rows_decoded(section: Any) -> Any:
    """``section`` with its rows decoded if they are left as their JSON text (``msgspec.Raw``)."""
    if isinstance(section, dict) and isinstance(section.get("rows"), msgspec.Raw):
        return {**section, "rows": msgspec.json.decode(section["rows"])}
    return section


def _utf8_length(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (its length if it is ASCII, which CPython knows without a scan)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _section_json(section: dict[str, Any]) -> str:
    """One section's object as :func:`_dumps` writes it in a report's ``sections`` (two containers deep)."""
    token = f"\x00rows-{uuid.uuid4().hex}"  # a text no value can hold by chance: the rows' place
    before, _token, after = _dumps({**section, "rows": token}, 2).partition(json.dumps(token))
    return "".join([before, *_rows_json(section["rows"], 3), after])


def _dumps(value: Any, level: int = 0) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False, default=str)`` as it is written ``level`` containers
    deep (each line after the first indented by ``level`` steps: a newline in JSON text is always layout), joined a
    batch of pieces at a time: ``json.dumps`` with an indent lists every piece before joining them, and a
    report of 10^7 events (48 MB) peaked at 522 MB so."""
    pieces = json.JSONEncoder(indent=2, ensure_ascii=False, default=str).iterencode(value)
    text: list[str] = []
    while batch := list(itertools.islice(pieces, JSON_BATCH)):
        text.append("".join(batch))
    out = "".join(text)
    return out.replace("\n", "\n" + "  " * level) if level else out


#: How :func:`_rows_json` writes a column whose values are all of one of these types: a function the whole
#: column is mapped through in C (``float.__repr__`` only where every value is finite: NaN is ``NaN`` in JSON).
_COLUMN_TEXT: dict[type, Callable[[Any], str]] = {
    str: json.encoder.encode_basestring, int: int.__repr__, float: float.__repr__,
    bool: {True: "true", False: "false"}.__getitem__, type(None): lambda _v: "null"}


def _scalar_json(v: str | int | float | bool | None) -> str:
    """One value of a :data:`_COLUMN_TEXT` type as ``json.dumps`` writes it (a float that is not finite too)."""
    if type(v) is float and not math.isfinite(v):
        return "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"
    return _COLUMN_TEXT[type(v)](v)


def _rows_json(rows: list[Any], level: int) -> list[str]:
    """``rows`` as :func:`_dumps` writes them ``level`` containers deep, in pieces (joined once, with the
    rest of the report): where they are objects of the same keys (texts) holding texts, numbers, booleans
    and nulls, one column of values at a time (``map`` over the encoder's own functions) and one ``%``
    template a row; else as :func:`_dumps` does."""
    if not rows or not isinstance(rows[0], dict) or not rows[0]:
        return [_dumps(rows, level)]
    keys = tuple(rows[0])
    if not all(type(k) is str for k in keys) or not all(type(r) is dict and tuple(r) == keys for r in rows):
        return [_dumps(rows, level)]
    if not all(set(map(type, r.values())) <= _COLUMN_TEXT.keys() for r in rows):
        return [_dumps(rows, level)]  # another type (its str, as default=str gives it), a list or an object
    inner = "  " * (level + 2)
    row = ("{\n" + ",\n".join(f"{inner}{json.encoder.encode_basestring(k).replace('%', '%%')}: %s" for k in keys)
           + "\n" + "  " * (level + 1) + "}")
    between = ",\n" + "  " * (level + 1)
    chunks = ["[\n" + "  " * (level + 1)]
    for start in range(0, len(rows), JSON_ROWS):  # the encoded values of a few rows at a time
        some = rows[start:start + JSON_ROWS]
        columns = []
        for k in keys:
            values = [r[k] for r in some]
            kinds = set(map(type, values))
            if len(kinds) == 1 and (float not in kinds or all(map(math.isfinite, values))):
                columns.append(list(map(_COLUMN_TEXT[kinds.pop()], values)))
            else:  # mixed (a NULL among numbers), or a float that is not finite
                columns.append(list(map(_scalar_json, values)))
        if start:
            chunks.append(between)
        chunks.append(between.join(map(row.__mod__, zip(*columns, strict=True))))
    chunks.append("\n" + "  " * level + "]")
    return chunks


def renderer_digest(*more: str | os.PathLike[str]) -> str:
    """A digest of the code :func:`render` runs (this module, the display helpers, the chart declarations)
    and of the files ``more`` (a page's template and code): part of the name a rendering is kept under
    (:func:`projections.metrics.rendered`)."""
    from eventstore import display
    from eventstore.dialects import analytics
    from projections.metrics import code_digest

    return code_digest(__file__, display.__file__, analytics.__file__, *more)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def duration(seconds: float) -> str:
    """Seconds as people read a duration: 45s, 7m 27s, 2h 39m, 3d 4h."""
    s = round(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if abs(s) >= size:
            whole, rest = divmod(s, size)
            return f"{whole}{unit} {rest // sub_size}{sub}" if rest // sub_size else f"{whole}{unit}"
    return f"{s}s"


def figure(name: str, value: Any) -> str:
    """One named figure as people read it: a duration (a name ending ``_s``, seconds) as ``2h 27m``,
    anything else as :func:`_cell` does.  Every renderer (text, HTML, the web pages) uses it."""
    if name.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return duration(value)
    return _cell(value)


def heading(name: str) -> str:
    """A column or figure name as shown: ``p50_s`` reads ``p50`` (its values are durations)."""
    return name[:-2] if name.endswith("_s") else name


def column_formats(s: Section) -> list[Callable[[Any], str]]:
    """One :func:`column_format` per column of a section, over its rows."""
    return [column_format(c, [r.get(c) for r in s.rows]) for c in s.columns]


def short_title(s: Section) -> str:
    """A section's title up to its first colon or parenthesis (for the one line of sections without data)."""
    return s.title.split(" (")[0].split(":")[0]


def short_titles(sections: Sequence[Section]) -> list[str]:
    """The sections' short titles for the one line of sections without data: a title that shares its
    part before the colon with another (a dialect's sections: ``task-master: tasks``,
    ``task-master: planning changes``) keeps the part after it, so no name is listed twice."""
    cut = [short_title(s) for s in sections]
    return [c if cut.count(c) == 1 else s.title.split(" (")[0] for c, s in zip(cut, sections, strict=True)]


def without_data(report: Report) -> list[Section]:
    """The sections with no rows: listed on one line, not one block each (a store of three real
    histories must not print sixteen "(no data)" sections)."""
    return [s for s in report.sections if not s.rows]


def column_format(column: str, values: Sequence[Any]) -> Callable[[Any], str]:
    """One number format for a whole column: durations (``*_s``) as durations, shares (all within
    [-1, 1]) with 3 decimals, whole numbers with thousands separators, else one decimal."""
    floats = [v for v in values if isinstance(v, float)]
    if column.endswith("_s") and all(isinstance(v, (int, float)) or v is None for v in values):
        return lambda v: "-" if v is None else duration(v) if isinstance(v, (int, float)) else str(v)
    if not floats:
        return _cell
    if all(abs(v) <= 1 for v in floats):
        spec = ".3f"
    elif all(v.is_integer() for v in floats):
        spec = ",.0f"
    else:
        spec = ",.1f"
    return lambda v: "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def fit(widths: list[int], total: int, shrink: Sequence[int], minimum: int = 8) -> list[int]:
    """Narrow the columns ``shrink`` (indexes) so that the columns and their two-space gaps fit
    ``total`` characters: always the widest of them first (so they end up even), none below
    ``minimum``; the other columns keep their width."""
    out = list(widths)
    excess = sum(out) + 2 * (len(out) - 1) - total
    while excess > 0:
        i = max(shrink, key=lambda j: out[j], default=None)
        if i is None or out[i] <= minimum:
            break
        out[i] -= 1
        excess -= 1
    return out


def table_text(columns: Sequence[str], rows: Sequence[dict[str, Any]], *, max_width: int = 60,
               width: int | None = None, shrink: Sequence[str] = (),
               formats: Sequence[Callable[[Any], str]] | None = None) -> str:
    """A plain aligned table (no colour: it goes to files and pipes as well as terminals).

    A cell longer than ``max_width`` ends in an ellipsis; with ``width`` the ``shrink`` columns
    are narrowed (all but the first, down to 16 characters, then all of them evenly), their cells cut with an ellipsis, until the table fits.
    Numbers take one format per column (:func:`column_format`, over ``rows`` unless ``formats`` are given:
    those of a whole section when only some of its rows are shown); a ``*_s`` column is a duration.
    """
    if formats is None:
        formats = [column_format(c, [r.get(c) for r in rows]) for c in columns]
    headers = _headers(columns)
    cells = [[_cut(printable(f(r.get(c))), max_width) for c, f in zip(columns, formats, strict=True)] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    if width is not None:
        order = [columns.index(c) for c in shrink if c in columns]
        widths = fit(widths, width, order[1:], minimum=16)  # the others give way first, down to 16
        widths = fit(widths, width, order)
        headers = [_cut(h, w) for h, w in zip(headers, widths, strict=True)]
        cells = [[_cut(v, w) for v, w in zip(row, widths, strict=True)] for row in cells]
    right = [bool(rows) and all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows)
             for c in columns]
    return "\n".join(_line(values, widths, right) for values in [headers, ["-" * w for w in widths], *cells])


def _headers(columns: Sequence[str]) -> list[str]:
    return [printable(c[:-2] if c.endswith("_s") else c) for c in columns]


def _line(values: Sequence[str], widths: Sequence[int], right: Sequence[bool]) -> str:
    """One line of a text table: each value padded to its column's width (numbers to the right)."""
    return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)).rstrip()


def table_stream(columns: Sequence[str], rows: Callable[[], Iterable[dict[str, Any]]], *,
                 max_width: int = 60) -> Iterator[str]:
    """:func:`table_text`'s lines (without ``width``), one at a time, for rows of text and whole numbers: the rows
    are read twice (``rows()`` each time), first for the columns' widths and alignment, then for the lines, and
    never held (``evstore runs`` piped lists every run of the store: at 10^7 events, 207,760 rows held 687 MB).
    Nothing is yielded without rows.  A float, or a ``*_s`` column (a duration), takes a format decided over
    every value of its column: those go through :func:`table_text`."""
    headers = _headers(columns)
    widths, right, seen = [len(h) for h in headers], [True] * len(columns), False
    for r in rows():
        seen = True
        for i, c in enumerate(columns):
            v = r.get(c)
            if isinstance(v, float) or (c.endswith("_s") and isinstance(v, int)):
                raise ValueError(f"table_stream: column {c!r} holds a number whose format is the column's")
            widths[i] = max(widths[i], len(_cut(printable(_cell(v)), max_width)))
            right[i] = right[i] and (isinstance(v, int) or v is None)
    if not seen:
        return
    yield _line(headers, widths, right)
    yield _line(["-" * w for w in widths], widths, right)
    for r in rows():
        yield _line([_cut(printable(_cell(r.get(c))), max_width) for c in columns], widths, right)


#: Rows of one section shown in the text table and the HTML report (the page, too): a section of per-task or
#: per-day rows grows with the store (thousands of rows at 10^6 events) and rendering them cost more than the
#: rest of a report; ``--format json`` and ``csv`` hold every row.
ROWS_SHOWN = 500


def _more(s: Section, limit: int) -> int:
    return max(len(s.rows) - limit, 0)


def to_table(report: Report, limit: int = ROWS_SHOWN) -> str:
    return table_pieces(report, limit=limit)[0]


def table_pieces(report: Report, known: Mapping[int, str] | None = None, *,
                 limit: int = ROWS_SHOWN) -> tuple[str, list[tuple[int, int]]]:
    """:func:`to_table`'s text and where each section's block is in it (:func:`_blocks`); ``known``: the blocks of
    sections, by index, an earlier rendering holds (the same section gives the same block), used as they are."""
    title = report.title + ("  (" + ", ".join(f"{heading(k)}={figure(k, v)}" for k, v in report.scope.items()) + ")"
                            if report.scope else "")
    empty = without_data(report)
    return _blocks([title], report, known or {}, lambda s: _table_section(s, limit),
                   ["", "No data: " + "; ".join(short_titles(empty))] if empty else [])


def _table_section(s: Section, limit: int) -> str:
    out = ["", f"## {s.title}"]
    if s.summary:
        out.append("   " + "  ".join(f"{heading(k)}={figure(k, v)}" for k, v in s.summary.items()))
    hidden = _more(s, limit)  # numbered as the whole column is when some rows are not shown
    out.append(table_text(s.columns, s.rows[:limit], formats=column_formats(s) if hidden else None))
    if hidden:
        out.append(f"({hidden} more rows not shown: --format csv or json holds every row)")
    return "\n".join(out)


def _blocks(head: list[str], report: Report, known: Mapping[int, str], block: Callable[[Section], str],
            tail: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The lines ``head``, a block for each section with data (``known[i]`` for the i-th if given, else ``block`` of
    it, its rows decoded if they are still text), and ``tail``, joined by newlines and ending in one; and where in
    the text's UTF-8 each section's block is (an empty span for one without data), in the report's order."""
    empty = {id(s) for s in without_data(report)}
    lines, at = list(head), {}
    for i, s in enumerate(report.sections):
        if id(s) not in empty:
            at[i] = len(lines)
            lines.append(known[i] if i in known else block(s.decoded()))
    lines += tail
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += _utf8_length(line) + 1
    spans = [(starts[at[i]], starts[at[i]] + _utf8_length(lines[at[i]])) if i in at else (0, 0)
             for i in range(len(report.sections))]
    return "\n".join(lines) + "\n", spans


def to_csv(report: Report) -> str:
    """One CSV: ``section`` + the union of columns (a section's summary is one ``summary`` row)."""
    cols: list[str] = []
    for s in report.sections:
        for c in list(s.columns) + list(s.summary):
            if c not in cols:
                cols.append(c)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["section", "row", *cols], extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for s in report.sections:
        if s.summary:
            w.writerow({"section": s.name, "row": "summary", **s.summary})
        for r in s.rows:
            w.writerow({"section": s.name, "row": "data", **r})
    return buf.getvalue()


def rows_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()


# ---------------------------------------------------------------- SVG charts

_W, _BAR_H, _GAP, _LEFT = 640, 22, 8, 170
_COLORS = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6")


def _svg(height: int, body: str, label: str) -> str:
    return (f'<svg class="chart" role="img" aria-label="{html.escape(label)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{_W}" height="{height}" viewBox="0 0 {_W} {height}">{body}</svg>')


def _text(x: float, y: float, s: str, *, anchor: str = "start", size: int = 12) -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif" fill="#222">{html.escape(s)}</text>')


def hbar_chart(label: str, items: Sequence[tuple[str, float, float | None, float | None]], *,
               max_value: float | None = None, fmt: Callable[[float], str] = lambda v: f"{v:.2f}") -> str:
    """Horizontal bars (label, value, optional interval low/high drawn as a whisker)."""
    if not items:
        return ""
    top = max_value or max([v for _, v, _, _ in items] + [h or 0 for *_, h in items] + [1e-9])
    plot = _W - _LEFT - 60
    height = len(items) * (_BAR_H + _GAP) + 30
    parts = [f'<line x1="{_LEFT}" y1="4" x2="{_LEFT}" y2="{height - 22}" stroke="#999"/>']
    for i, (name, value, lo, hi) in enumerate(items):
        y = 6 + i * (_BAR_H + _GAP)
        w = max(1.0, plot * value / top)
        parts.append(_text(_LEFT - 6, y + _BAR_H * 0.7, name[:26], anchor="end"))
        parts.append(f'<rect class="bar" x="{_LEFT}" y="{y}" width="{w:.1f}" height="{_BAR_H}" '
                     f'fill="{_COLORS[i % len(_COLORS)]}"/>')
        if lo is not None and hi is not None:
            x1, x2, ym = _LEFT + plot * lo / top, _LEFT + plot * hi / top, y + _BAR_H / 2
            parts.append(f'<line class="ci" x1="{x1:.1f}" y1="{ym}" x2="{x2:.1f}" y2="{ym}" stroke="#000" '
                         f'stroke-width="2"/><line x1="{x1:.1f}" y1="{y + 4}" x2="{x1:.1f}" y2="{y + _BAR_H - 4}" '
                         f'stroke="#000" stroke-width="2"/><line x1="{x2:.1f}" y1="{y + 4}" x2="{x2:.1f}" '
                         f'y2="{y + _BAR_H - 4}" stroke="#000" stroke-width="2"/>')
        parts.append(_text(_LEFT + w + 6 if hi is None else _LEFT + plot * hi / top + 6, y + _BAR_H * 0.7,
                           fmt(value)))
    parts.append(_text(_LEFT, height - 6, f"0 … {fmt(top)}", size=10))
    return _svg(height, "".join(parts), label)


#: Width of one character of a 12 px sans-serif label, rounded up (for laying labels out).
_CHAR_W = 7.0


def grouped_bar_chart(label: str, groups: Sequence[str], series: dict[str, Sequence[float]], *,
                      fmt: Callable[[float], str] | None = None) -> str:
    """Vertical grouped bars: one group per x label, one bar per series, with a legend; ``fmt``
    writes the axis's top value and each bar's tooltip (default: the number as it is).

    Labels wider than their slot are turned 45 degrees (anchored at their group) and the legend
    moves below them, so no label overlaps another, the axis or the legend."""
    if not groups:
        return ""
    bottom, left = 220, 50
    top = max([v for vs in series.values() for v in vs] + [1e-9])
    names = [g[:20] for g in groups]
    turned = max(len(g) for g in names) * _CHAR_W > (_W - left - 20) / len(groups) * 0.95
    if turned:  # the first label hangs down to the left of its group: leave it room
        left = max(left, int(len(names[0]) * _CHAR_W * 0.71) + 4)
    slot = (_W - left - 20) / len(groups)
    bw = slot * 0.8 / max(1, len(series))
    band = int(max(len(g) for g in names) * _CHAR_W * 0.71) + 24 if turned else 24  # 0.71: sin 45 degrees
    height = bottom + band + 24
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{_W - 10}" y2="{bottom}" stroke="#999"/>',
             _text(left - 6, 20, fmt(top) if fmt else f"{top:,.0f}" if top >= 10 else f"{top:g}", anchor="end",
                   size=10),
             _text(left - 6, bottom, "0", anchor="end", size=10)]
    for gi, g in enumerate(names):
        x0 = left + gi * slot + slot * 0.1
        for si, (name, values) in enumerate(series.items()):
            v = values[gi]
            h = (bottom - 20) * v / top
            parts.append(f'<rect class="bar" x="{x0 + si * bw:.1f}" y="{bottom - h:.1f}" width="{bw - 2:.1f}" '
                         f'height="{max(h, 0.5):.1f}" fill="{_COLORS[si % len(_COLORS)]}"><title>{html.escape(name)}: '
                         f'{html.escape(fmt(v) if fmt else f"{v:g}")}</title></rect>')
        cx = x0 + slot * 0.4
        if turned:
            parts.append(f'<g transform="rotate(-45 {cx:.1f} {bottom + 14})">'
                         f'{_text(cx, bottom + 14, g, anchor="end")}</g>')
        else:
            parts.append(_text(cx, bottom + 16, g, anchor="middle"))
    for si, name in enumerate(series):
        x = left + 10 + si * 160
        parts.append(f'<rect class="legend" x="{x}" y="{height - 18}" width="12" height="12" '
                     f'fill="{_COLORS[si % len(_COLORS)]}"/>')
        parts.append(_text(x + 16, height - 8, name))
    return _svg(height, "".join(parts), label)


def chart(c: Chart, rows: Sequence[dict[str, Any]]) -> str:
    """The inline SVG of one declared chart over a section's rows ("" when there is nothing to draw)."""
    def label(r: dict[str, Any]) -> str:
        return c.label.format(**r)

    def num(v: Any) -> float:
        return float(v or 0) / c.scale

    # Durations (``*_s`` columns, seconds) are labelled as every table shows them (2h 27m), whatever the scale.
    durations = all(v.endswith("_s") for v in c.values)

    if c.kind == "bars":
        shown = [r for r in rows if r.get(c.values[0]) is not None]
        lo, hi = c.interval or (None, None)
        items = [(label(r), num(r[c.values[0]]), None if lo is None or r.get(lo) is None else num(r[lo]),
                  None if hi is None or r.get(hi) is None else num(r[hi])) for r in shown]
        if durations:
            return hbar_chart(c.title, items, max_value=c.max_value, fmt=lambda v: duration(v * c.scale))
        if c.integer:
            return hbar_chart(c.title, items, max_value=c.max_value, fmt=lambda v: f"{v:.0f}")
        return hbar_chart(c.title, items, max_value=c.max_value)
    if c.kind == "groups":
        shown = [r for r in rows if any(r.get(v) is not None for v in c.values)]
        names = c.series or c.values
        return grouped_bar_chart(c.title, [label(r) for r in shown],
                                 {n: [num(r.get(v)) for r in shown] for n, v in zip(names, c.values, strict=True)},
                                 fmt=(lambda v: duration(v * c.scale)) if durations else None)
    raise ValueError(f"unknown chart kind {c.kind!r}; expected bars or groups")


def section_chart(s: Section) -> str:
    """The inline SVG of a section's declared chart ("" if it declares none or has nothing to draw)."""
    return chart(s.chart, s.rows) if s.chart is not None and s.rows else ""


_CSS = """body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}
.summary{color:#444;font-size:13px}.note{color:#666;font-size:12px}svg.chart{display:block;margin:8px 0}
h2{margin-top:32px;border-bottom:1px solid #ddd}"""


def _html_table(s: Section, limit: int = ROWS_SHOWN) -> str:
    head = "".join(f"<th>{html.escape(heading(c))}</th>" for c in s.columns)
    formats = column_formats(s)  # as the text table reads
    body = "".join("<tr>" + "".join(f"<td>{html.escape(f(r.get(c)))}</td>" for c, f in zip(s.columns, formats,
                                                                                           strict=True)) + "</tr>"
                   for r in s.rows[:limit])
    hidden = _more(s, limit)
    more = f'<p class="note">{hidden} more rows not shown.</p>' if hidden else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def to_html(report: Report) -> str:
    return html_pieces(report)[0]


def html_pieces(report: Report, known: Mapping[int, str] | None = None) -> tuple[str, list[tuple[int, int]]]:
    """:func:`to_html`'s text and where each section's block is in it, as :func:`table_pieces` gives them."""
    scope = ", ".join(f"{heading(k)}={figure(k, v)}" for k, v in report.scope.items())
    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(report.title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{html.escape(report.title)}</h1>", f'<p class="summary">{html.escape(scope)}</p>']
    empty = without_data(report)
    tail = ['<p class="note" id="no-data">No data: ' + "; ".join(html.escape(x) for x in short_titles(empty)) + "</p>"
            ] if empty else []
    return _blocks(head, report, known or {}, _html_section, [*tail, "</body></html>"])


def _html_section(s: Section) -> str:
    parts = [f'<section id="{html.escape(s.name)}"><h2>{html.escape(s.title)}</h2>']
    if s.summary:
        parts.append('<p class="summary">' + " · ".join(f"{html.escape(heading(k))}: <b>{html.escape(figure(k, v))}</b>"
                                                        for k, v in s.summary.items()) + "</p>")
    if svg := section_chart(s):
        parts.append(svg)
    parts.append(_html_table(s))
    if s.note:
        parts.append(f'<p class="note">{html.escape(s.note)}</p>')
    parts.append("</section>")
    return "\n".join(parts)


__all__ = ["FORMATS", "chart", "column_format", "column_formats", "compact_json", "compact_json_pieces", "duration", "figure", "fit", "grouped_bar_chart", "hbar_chart",
           "heading", "html_pieces", "json_pieces", "render", "rows_csv", "short_title", "short_titles", "table_text", "to_csv", "without_data",
           "table_pieces", "to_html", "to_table", "ROWS_SHOWN"]
