"""Run metrics over the analytics views (DuckDB): the definitions of DESIGN.md section 6.

Every metric section is declared as data (:class:`~eventstore.dialects.analytics.MetricSection`:
SQL over the views, a title, a note): each dialect declares its own in its folder
(``Dialect.analytics()``), the shared ones (gates, phase durations, a run's timeline) are in
:mod:`projections.analytics.facts`.  :func:`section` runs one over a DuckDB connection from
:func:`projections.analytics.connect`; :func:`cross_run_report` and :func:`run_report` collect
them into a :class:`Report` that :mod:`projections.report` renders (table, JSON, CSV, HTML).
This module names no dialect.
The formulas are documented in docs/metrics.md; the tests recompute each one from raw
simulator snapshots.

    >>> con = open_analytics(store)
    >>> report = cross_run_report(con, Scope(project="payments-api"))
    >>> report.section("reviewer_acceptance").rows[0]
    {'model': 'claude-opus-4', 'raised': 412, 'accepted': 171, 'ratio': 0.415, ...}
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from eventstore.dialects.analytics import Chart, MetricSection, wilson
from eventstore.errors import EvstoreError
from projections.analytics.facts import CORE_RUN_SECTIONS, catalog
from projections.prices import load_prices

if TYPE_CHECKING:
    import duckdb

    from eventstore.store import EventStore
    from projections.analytics.files import RefreshResult


@dataclass(frozen=True)
class Scope:
    """Which runs a report covers (all filters optional, combined with AND)."""

    project: str | None = None
    dialect: str | None = None
    since: str | None = None  # ISO time: runs with activity at or after it
    stream_id: str | None = None
    writer: str | None = None  # runs with an event sent by TOKEN (any machine) or TOKEN/MACHINE (meta.sent_by)

    def where(self) -> tuple[str, list[str]]:
        """The condition on ``runs`` selecting this scope, and its bound parameters (the values come
        from command lines and from ``evstore serve``'s query strings: they never become SQL text)."""
        conds, params = ["true"], []
        for col, value in (("project", self.project), ("dialect", self.dialect), ("stream_id", self.stream_id)):
            if value is not None:
                conds.append(f"{col} = ?")
                params.append(value)
        if self.since is not None:
            conds.append("last_event_at >= ?::TIMESTAMPTZ")
            params.append(_iso(self.since))
        if self.writer is not None:  # a token name has no "/": TOKEN matches its every machine
            conds.append("stream_id IN (SELECT stream_id FROM events WHERE writer = ? OR writer_token = ?)")
            params.extend([self.writer, self.writer])
        return " AND ".join(conds), params

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("project", self.project), ("dialect", self.dialect), ("since", self.since),
                                  ("stream", self.stream_id), ("writer", self.writer)) if v is not None}


def _iso(value: str) -> str:
    from projections.runs import parse_since

    return parse_since(value).isoformat()


@dataclass
class Section:
    """One block of a report: a table of rows plus summary figures and a chart hint."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    chart: Chart | None = None  # how the HTML report draws it (not part of the data: to_dict leaves it out)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "columns": self.columns, "rows": self.rows,
                "summary": self.summary, "note": self.note}

    def decoded(self) -> Section:
        """This section with its rows decoded if they are still their JSON text (taken from the report before
        and not read: :meth:`Earlier.find` with ``raw_rows``)."""
        if isinstance(self.rows, msgspec.Raw):
            return replace(self, rows=msgspec.json.decode(self.rows))
        return self


@dataclass
class Report:
    title: str
    scope: dict[str, Any]
    sections: list[Section]

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "scope": self.scope, "sections": [s.to_dict() for s in self.sections]}


#: Rows a section's result is fetched at a time (:func:`_rows`).
FETCH_ROWS = 10_000


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` as dicts of :func:`_plain` values, fetched :data:`FETCH_ROWS` at a time, each text
    held once however often it comes: a report's rows repeat their statuses, days, tags and projects (the
    task-master sections of a 10^7-event store hold 185,000 rows), each a new string from the driver."""
    rel = con.execute(sql)
    cols = [d[0] for d in rel.description or []]
    texts: dict[str, str] = {}
    out = []
    while batch := rel.fetchmany(FETCH_ROWS):
        for r in batch:
            row = {}
            for c, v in zip(cols, r, strict=True):
                t = type(v)
                if t is str:
                    v = texts.setdefault(v, v)
                elif v is not None and t is not int and t is not bool:  # what _plain leaves as it is, first
                    v = _plain(v)
                    if type(v) is str:  # a time's ISO text
                        v = texts.setdefault(v, v)
                row[c] = v
            out.append(row)
    return out


def _plain(v: Any) -> Any:
    """JSON-friendly values: floats rounded to 4 places, times as ISO text."""
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 4)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if hasattr(v, "as_integer_ratio") and not isinstance(v, (int, bool)):  # Decimal
        return round(float(v), 4)
    return v


def _select(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """(Re)define ``sel``: the stream ids in scope, used by every metric below."""
    where, params = scope.where()
    con.execute(f"CREATE OR REPLACE TEMP TABLE sel AS SELECT stream_id FROM runs WHERE {where}", params)


def section(con: duckdb.DuckDBPyConnection, m: MetricSection) -> Section:
    """Run one declared metric section (``sel`` holds the stream ids in scope).  A section that does not
    fit the connection's memory limit (a report's: ``views.REPORT_MEMORY``; DuckDB spills what it can) is
    run again at a higher one, then without it (``views.fitting``): a bound on memory never fails a report."""
    from projections.analytics.views import fitting

    rows, summary = fitting(con, lambda: _section_rows(con, m))
    if m.finish is not None:
        m.finish(rows, summary)
    return Section(m.name, m.title, list(m.columns), rows, summary, m.note, m.chart)


def _section_rows(con: duckdb.DuckDBPyConnection, m: MetricSection) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if m.when is not None and not con.execute(m.when).fetchall():
        return [], {}  # nothing to show: its statements are not run
    return _rows(con, m.sql), (_rows(con, m.summary_sql)[0] if m.summary_sql else {})


def cross_run_report(con: duckdb.DuckDBPyConnection, scope: Scope | None = None, *,
                     earlier: Earlier | None = None) -> Report:
    """Every cross-run metric for the runs in ``scope``; with ``earlier`` (the report kept at an earlier position
    for the same question), its sections that no run since has changed (:meth:`Earlier.section`)."""
    head, todo = _cross_head(con, scope or Scope())
    head.sections = [_section_or_earlier(con, m, earlier) for m in todo]
    return head


def _section_or_earlier(con: duckdb.DuckDBPyConnection, m: MetricSection, earlier: Earlier | None) -> Section:
    if earlier is not None:
        s = earlier.section(con, m)
        if s is not None:
            return s
    return section(con, m)


def _cross_head(con: duckdb.DuckDBPyConnection, scope: Scope) -> tuple[Report, list[MetricSection]]:
    """The cross-run report's title and scope (no section yet), and the sections to compute."""
    _select(con, scope)
    runs = _rows(con, "SELECT count(*) AS runs FROM sel")[0]["runs"]
    return Report("evstore metrics", {**scope.to_dict(), "runs": runs}, []), [m for _d, m in catalog().sections]


def check_scope(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """Raise if no run is in ``scope``, naming the filter that matches nothing and the values that
    exist: a typo must not read as a portfolio of 0 runs (``evstore metrics``)."""
    if scope.project is None and scope.dialect is None and scope.since is None and scope.writer is None:
        return
    _select(con, scope)
    if _rows(con, "SELECT count(*) AS runs FROM sel")[0]["runs"]:
        return
    for option, column, value in (("--dialect", "dialect", scope.dialect), ("--project", "project", scope.project)):
        if value is None:
            continue
        have = [r[0] for r in con.execute(f"SELECT DISTINCT {column} FROM runs WHERE {column} IS NOT NULL "
                                          "ORDER BY 1").fetchall()]
        if value not in have:
            listed = ", ".join(have[:20]) + (f", … ({len(have)} in all)" if len(have) > 20 else "")
            raise EvstoreError(f'No run has {option} "{value}"; '
                               + (f"the {column}s are: {listed}." if have else f"no run records a {column}."))
    if scope.writer is not None:
        have = [r[0] for r in con.execute("SELECT DISTINCT writer FROM events WHERE writer IS NOT NULL UNION "
                                          "SELECT DISTINCT writer_token FROM events WHERE writer_token IS NOT NULL "
                                          "ORDER BY 1").fetchall()]
        if scope.writer not in have:
            listed = ", ".join(have[:20]) + (f", … ({len(have)} in all)" if len(have) > 20 else "")
            raise EvstoreError(f'No event was sent by --writer "{scope.writer}"; '
                               + (f"the writers (TOKEN or TOKEN/MACHINE) are: {listed}." if have else
                                  "no event came over the HTTP API (`evstore serve`).")
                               )
    given = " ".join(f"{o} {v}" for o, v in (("--project", scope.project), ("--dialect", scope.dialect),
                                             ("--since", scope.since), ("--writer", scope.writer)) if v is not None)
    latest = con.execute("SELECT max(last_event_at) FROM runs").fetchone()
    if scope.since is not None and latest and latest[0] is not None:
        raise EvstoreError(f"No run matches {given}; the latest activity is at {latest[0].isoformat()}.")
    raise EvstoreError(f"No run matches {given}: each value exists, but no run has them all.")


# ---------------------------------------------------------------- one run


def run_report(con: duckdb.DuckDBPyConnection, stream_id: str) -> Report:
    """Timeline, phases, iterations, deltas, gates and trips of one run (stream)."""
    head, todo = _run_head(con, stream_id)
    head.sections = [section(con, m) for m in todo]
    return head


def _run_head(con: duckdb.DuckDBPyConnection, stream_id: str) -> tuple[Report, list[MetricSection]]:
    """One run's report's title and scope (the run's row; no section yet), and the sections to compute."""
    _select(con, Scope(stream_id=stream_id))
    run = _rows(con, "SELECT * FROM runs WHERE stream_id IN (SELECT stream_id FROM sel)")  # its id stays bound
    if not run:
        raise EvstoreError(f'No run "{stream_id}" in the analytics tables; `evstore runs` lists the runs.')
    cat = catalog()
    own = cat.run_sections.get(run[0]["dialect"] or "", ())
    timeline, phases, gates, usage = CORE_RUN_SECTIONS
    return (Report(f"evstore metrics {stream_id}", {"stream": stream_id, **run[0]}, []),
            [timeline, phases, *own, gates, usage, *cat.every_run_sections])


# ---------------------------------------------------------------- computed once per log position


class Key(NamedTuple):
    """A kept report's key: the checkpoint of the tables it is computed from, a digest of everything it depends on
    there (:func:`_key`), and the question asked (the store, the tables' build, the catalog's version, the scope),
    whatever the position (:func:`_base`)."""

    position: int
    digest: str
    question: str


#: Bump when a kept report's layout (or what a section computes, outside its declared SQL) changes.
REPORT_FORMAT = 2
#: The folder, in the analytics directory, of the reports kept for the current log position.
REPORTS = "reports"
#: The suffix of the file beside a kept report that holds its :func:`_base`.
BASE = "base"
#: The suffix, after a rendering's name, of the file of where each section is in it (:func:`rendered`).
SPANS = "spans"
#: ``pieces`` of :func:`rendered`: (a report, the texts of sections already written by index) -> (the text, where
#: each section is in it).
Pieces = Callable[["Report", Mapping[int, str]], tuple[str, list[tuple[int, int]]]]


def report(store: EventStore, directory: str | os.PathLike[str] | None = None, *, stream_id: str | None = None,
           scope: Scope | None = None, fresh: bool = True,
           refreshed: Callable[[RefreshResult], None] | None = None) -> Report:
    """The cross-run report for ``scope`` (or with ``stream_id`` one run's), computed once per log position
    and kept: the report of tables whose checkpoint, store and catalog are the same, for the same scope, is
    read back from ``REPORTS/`` in the analytics directory without reading an event or opening DuckDB.
    A new event moves the checkpoint (after the refresh, unless ``fresh`` is False) and so the key; reports
    kept for older positions are deleted when a new one is kept.  ``refreshed`` is told what a refresh
    applied (``evstore metrics`` says it on stderr)."""
    out, key, scope = _position(store, directory, stream_id, scope, fresh, refreshed)
    return _report_at(store, out, key, stream_id, scope)


def rendered(store: EventStore, render: Callable[[Report], str], name: str,
             directory: str | os.PathLike[str] | None = None, *, stream_id: str | None = None,
             scope: Scope | None = None, fresh: bool = True,
             refreshed: Callable[[RefreshResult], None] | None = None, pieces: Pieces | None = None) -> str:
    """``render(report(...))``, kept beside the report under ``name``: on an unchanged store the text is read
    back as it was written, with neither the report decoded nor rendered again (a report's rows grow with the
    store: rendering the table of 10^6 events' report cost more than everything else `evstore metrics` does).
    ``name`` says what ``render`` makes and must change whenever its output would (a format and a digest of
    the rendering code: :func:`code_digest`); letters, digits and ``-`` only.

    ``pieces`` (``report.json_pieces``): ``render`` in parts, the text and where each section is in it, given the
    texts of sections already written.  The places are kept beside the text, and a report that takes sections
    from an earlier one (:class:`Earlier`) takes their text from that report's rendering too."""
    if not name or not all(c.isalnum() or c == "-" for c in name):
        raise ValueError(f"a rendering's name is letters, digits and '-', not {name!r}")
    out, key, scope = _position(store, directory, stream_id, scope, fresh, refreshed)
    if key is not None:
        try:
            return _text_path(out, key, name).read_bytes().decode("utf-8")  # bytes: a CSV's \r\n stays
        except (OSError, UnicodeDecodeError):
            pass  # not rendered yet at this position (or deleted under us): render it
    earlier = Earlier.find(out, key, raw_rows=True) if pieces is not None and stream_id is None else None
    # the earlier position's renderings are deleted once this one's is kept: its pieces are read from them first
    rep = _report_at(store, out, key, stream_id, scope, earlier, prune=pieces is None)
    if pieces is None:
        text = render(rep)
    else:
        text, spans = pieces(rep, earlier.pieces(name, rep) if earlier is not None else {})
    if key is not None:
        _keep_text(out, key, name, text)
        if pieces is not None:  # after the text: a reader of the places finds the text they are in
            _keep_text(out, key, f"{name}-{SPANS}",
                       json.dumps([[sec.name, a, b] for sec, (a, b) in zip(rep.sections, spans, strict=False)]))
            _prune(out, key)
    return text


class Computing:
    """The report asked for at the log's position, for a reader that shows it section by section
    (``evstore serve``'s metrics page): :meth:`parts` yields the report's head (title and scope), then
    each section as it is computed, and keeps the whole report at the end as :func:`report` does.
    ``key`` is the report's key at this position (None: not kept)."""

    def __init__(self, store: EventStore, directory: str | os.PathLike[str] | None = None, *,
                 stream_id: str | None = None, scope: Scope | None = None, raw_rows: bool = False) -> None:
        self.store, self.stream_id, self.raw_rows = store, stream_id, raw_rows  # raw_rows: Earlier.find's
        self.out, self.key, self.scope = _position(store, directory, stream_id, scope, False, None)
        self.earlier: Earlier | None = None  # the report before, once :meth:`parts` has looked for it

    def taken_from(self, s: Section) -> Key | None:
        """The key of the report before that section ``s`` (yielded by :meth:`parts`) was taken from as it was
        there (:meth:`Earlier.section`), None if it was computed: what was rendered of it for that report renders
        it at this position too.  That report answered the same question (:meth:`Earlier.find` matched its base)."""
        e = self.earlier
        if e is None or self.key is None or s.name not in e.taken:
            return None
        return Key(e.position, e.digest, self.key.question)

    def parts(self) -> Generator[Report | Section, None, None]:
        """The report (its title and scope; every section already in it if it was kept), then each section
        computed, in the report's order (each is also appended to the report yielded first).  A filter that
        matches nothing raises at the first ``next``, before anything is yielded."""
        if self.key is not None:
            kept = _kept(self.out, self.key)
            if kept is not None:
                yield kept
                return
        from projections.analytics.views import REPORT_MEMORY, reading

        with reading(self.store, self.out, fresh=False, materialize=True, memory=REPORT_MEMORY) as con:
            earlier = None
            if self.stream_id is not None:
                head, todo = _run_head(con, self.stream_id)
            else:
                check_scope(con, self.scope)
                head, todo = _cross_head(con, self.scope)
                earlier = self.earlier = Earlier.find(self.out, self.key, raw_rows=self.raw_rows)
            yield head
            for m in todo:
                s = _section_or_earlier(con, m, earlier)
                head.sections.append(s)
                yield s
        if self.key is not None:
            _keep(self.out, self.key, head)


class _Named(msgspec.Struct):
    name: str


class _Sections(msgspec.Struct):
    sections: list[msgspec.Raw]


class _RawRows(msgspec.Struct):
    """A kept section with its rows left as their JSON text (:class:`Earlier` with ``raw_rows``)."""

    name: str
    title: str
    columns: list[str]
    rows: msgspec.Raw
    summary: dict[str, Any] = {}
    note: str = ""
    chart: Chart | None = None


#: The sections the last cross-run report computed in this process took from an earlier one (the tests read it).
reused: list[str] = []


class Earlier:
    """The report kept for the same question (:func:`_base`) at the latest earlier position, if one is there (the
    reports folder holds one position's reports, and an earlier position's until a later one is kept): a section
    declared ``per_run`` (``MetricSection.per_run``: computed from the run views it reads alone) is that report's
    section, read back, when no update of the kept run views since its position changed those views' rows
    (``kept.unchanged_since``: none of the runs the new events touched has rows in them).  New events in one
    dialect's runs leave the other dialects' sections (185,000 rows of one of them at 10^7 events) as they were,
    and they are not computed again.  Sections are decoded only when taken."""

    def __init__(self, position: int, sections: dict[str, msgspec.Raw], folder: Path, stem: str,
                 raw_rows: bool = False) -> None:
        self.position, self._sections, self._folder, self._stem = position, sections, folder, stem
        self.digest = stem[len(f"{position}-"):-1]  # its key's (the stem is "POSITION-DIGEST.")
        self.raw_rows = raw_rows
        self.taken: set[str] = set()  # the sections :meth:`section` gave
        self._changes: dict[str, int] | None = None  # kept.changed_at of the report's connection

    @classmethod
    def find(cls, out: Path, key: Key | None, *, raw_rows: bool = False) -> Earlier | None:
        """The report kept at the latest position before ``key``'s for its question, if there is one.  With
        ``raw_rows`` (for a reader that never reads the rows of a section taken: :func:`rendered` in pieces),
        a section taken keeps its rows as their JSON text (``msgspec.Raw``, which a kept report is written with
        as it is), not decoded: 185,000 rows at 10^7 events, 0.35 s and about 100 MB."""
        reused.clear()
        if key is None:
            return None
        folder = out / REPORTS
        try:
            names = os.listdir(folder)
        except OSError:
            return None
        base, found = _base(key).encode(), []
        for name in names:
            at, _, rest = name.partition("-")
            if at.isdigit() and int(at) < key.position and rest.endswith(f".{BASE}"):
                found.append((int(at), name[:-len(BASE)]))  # the report's name, less its "json"
        for position, stem in sorted(found, reverse=True):  # the latest first
            try:
                if (folder / (stem + BASE)).read_bytes() != base:
                    continue
                return cls(position, _sections_of(folder / (stem + "json")), folder, stem, raw_rows)
            except (OSError, msgspec.DecodeError):
                continue  # deleted under us (a later report was kept), or not ours
        return None

    @classmethod
    def read_ahead(cls, out: Path, before: Key) -> None:
        """Read and decode now the report :meth:`find` would find for ``before``'s question at a position after
        ``before``'s (the report kept at ``before``'s position, or the latest before it), and hold it for that
        :meth:`find` (:func:`_sections_of`): what a process does while its refresh runs in a child."""
        earlier = cls.find(out, before._replace(position=before.position + 1))
        if earlier is not None:
            path = earlier._folder / (earlier._stem + "json")
            st = path.stat()
            _read_ahead.clear()
            _read_ahead[(str(path), st.st_mtime_ns, st.st_size)] = earlier._sections

    def section(self, con: duckdb.DuckDBPyConnection, m: MetricSection) -> Section | None:
        """The earlier report's section ``m`` if it is still the section at this position, else None."""
        from projections.analytics import kept

        raw = self._sections.get(m.name)
        if raw is None or not m.per_run:
            return None
        views = run_views_read(con, m)
        if self._changes is None:  # read once: a report asks for each section taken
            self._changes = kept.changed_at(con)
        if views is None or not kept.unchanged_since(con, views, self.position, self._changes):
            return None
        try:
            if self.raw_rows:
                got = msgspec.json.decode(raw, type=_RawRows)
                rows = [] if bytes(got.rows) == b"[]" else got.rows  # no rows is no rows: ``not s.rows`` holds
                s = Section(got.name, got.title, got.columns, rows, got.summary, got.note,  # type: ignore[arg-type]
                            got.chart)
            else:
                s = msgspec.json.decode(raw, type=Section)
        except msgspec.DecodeError:
            return None
        reused.append(m.name)
        self.taken.add(m.name)
        return s

    def pieces(self, name: str, rep: Report) -> dict[int, str]:
        """The text, in the earlier report's rendering ``name`` (:func:`rendered` with ``pieces``), of each
        section of ``rep`` taken from it, by its index in ``rep``: none if there is no such rendering."""
        if not self.taken:
            return {}
        try:
            spans = json.loads((self._folder / f"{self._stem}{name}-{SPANS}").read_bytes())
            where = {str(n): (int(a), int(b)) for n, a, b in spans}  # in bytes of the UTF-8 text
            text = (self._folder / f"{self._stem}{name}").read_bytes()
            return {i: text[slice(*where[sec.name])].decode("utf-8") for i, sec in enumerate(rep.sections)
                    if sec.name in self.taken and sec.name in where}
        except (OSError, ValueError, TypeError):
            return {}  # not rendered so at that position (or deleted under us): every section is written


#: A kept report's sections read ahead (:meth:`Earlier.read_ahead`), by its path, mtime and size: taken by the next
#: :func:`_sections_of` of that file as it is then.
_read_ahead: dict[tuple[str, int, int], dict[str, msgspec.Raw]] = {}


def _sections_of(path: Path) -> dict[str, msgspec.Raw]:
    """A kept report's sections, by name, each its JSON text (read ahead if it was, and the file is as it was)."""
    st = path.stat()
    ahead = _read_ahead.pop((str(path), st.st_mtime_ns, st.st_size), None)
    _read_ahead.clear()  # one report held at most, and only until it is asked for
    if ahead is not None:
        return ahead
    raw = msgspec.json.decode(path.read_bytes(), type=_Sections).sections
    return {msgspec.json.decode(r, type=_Named).name: r for r in raw}


def run_views_read(con: duckdb.DuckDBPyConnection, m: MetricSection) -> frozenset[str] | None:
    """The run views (``Analytics.run_views``) besides ``runs`` that ``m``'s SQL reads, if it reads nothing
    but those, ``runs`` and ``sel``; else None (its SQL reads a view over several runs, a link table or a
    fact table, or does not say what it reads: it is computed every time, whatever it declares)."""
    from projections.analytics.views import section_reads, table_names

    cat = catalog()
    if (cat.version, m.name) not in _read:
        read = section_reads(con, m, frozenset(table_names()))
        allowed = set(cat.run_views) | {"sel"}
        _read[(cat.version, m.name)] = (None if read is None or not read <= allowed
                                        else frozenset(read - {"sel", "runs"}) or None)
    return _read[(cat.version, m.name)]


_read: dict[tuple[Any, str], frozenset[str] | None] = {}


def code_digest(*files: str | os.PathLike[str]) -> str:
    """A short digest of the bytes of ``files`` (the modules and templates a rendering comes from), read once
    per process: part of a kept rendering's name, so a changed renderer never shows an older one's text."""
    paths = tuple(str(f) for f in files)
    if paths not in _code_digests:
        h = hashlib.sha256()
        for f in paths:
            h.update(Path(f).read_bytes())
            h.update(b"\0")
        _code_digests[paths] = h.hexdigest()[:12]
    return _code_digests[paths]


_code_digests: dict[tuple[str, ...], str] = {}


def _position(store: EventStore, directory: str | os.PathLike[str] | None, stream_id: str | None,
              scope: Scope | None, fresh: bool, refreshed: Callable[[RefreshResult], None] | None,
              ) -> tuple[Path, Key | None, Scope]:
    """The analytics folder (caught up first if ``fresh``), the key of the report asked for at its position
    (None: no tables of this store's log to key by; the report is computed and not kept), the scope."""
    from projections.analytics.files import Manifest, analytics_dir, mismatch, refresh_apart

    out = analytics_dir(store, directory)
    scope = scope or Scope()
    if fresh:
        result = refresh_apart(store, out, meanwhile=partial(_while_refreshing, store, out, stream_id, scope))
        if refreshed is not None and result.events:
            refreshed(result)
    m = Manifest.load(out, lean=True)
    key = _key(store, m, stream_id, scope) if m is not None and mismatch(store, m) is None else None
    return out, key, scope


def _while_refreshing(store: EventStore, out: Path, stream_id: str | None, scope: Scope) -> None:
    """What a report computed after new events needs, done while a child brings the tables up to date (two cores:
    the child's 0.12-0.15 s at 10^7 events hide most of it): DuckDB imported, and the report kept at the
    tables' position now, which the new report takes its unchanged sections from, read and decoded
    (:meth:`Earlier.read_ahead`)."""
    import projections.analytics.views  # noqa: F401  # DuckDB, which the report is computed with
    from projections.analytics.files import Manifest, mismatch

    m = Manifest.load(out, lean=True)
    if stream_id is None and m is not None and mismatch(store, m) is None:
        Earlier.read_ahead(out, _key(store, m, stream_id, scope))


def _report_at(store: EventStore, out: Path, key: Key | None, stream_id: str | None,
               scope: Scope, earlier: Earlier | None = None, *, prune: bool = True) -> Report:
    """The report kept at ``key``, else computed (and kept if there is a key; ``prune``: :func:`_keep`), with the
    sections it can take from ``earlier`` (by default the report :meth:`Earlier.find` finds)."""
    if key is not None:
        kept = _kept(out, key)
        if kept is not None:
            return kept
    from projections.analytics.views import REPORT_MEMORY  # DuckDB: only when the report is computed

    if earlier is None and stream_id is None:
        earlier = Earlier.find(out, key)
    rep = _computed(store, out, stream_id, scope, REPORT_MEMORY, earlier)
    if key is not None:
        _keep(out, key, rep, prune=prune)
    return rep


def _computed(store: EventStore, out: Path, stream_id: str | None, scope: Scope, memory: str | None,
              earlier: Earlier | None = None) -> Report:
    from projections.analytics.views import reading

    with reading(store, out, fresh=False, materialize=True, memory=memory) as con:  # never another store's tables
        if stream_id is not None:
            return run_report(con, stream_id)
        check_scope(con, scope)  # a filter matching nothing is named, never kept
        return cross_run_report(con, scope, earlier=earlier)


def _key(store: EventStore, m: Any, stream_id: str | None, scope: Scope) -> Key:
    """(the checkpoint, a digest of everything the report depends on): the tables (store, checkpoint and
    its hash, catalog version), the log's end (the run/session links are read from the store), what is
    asked (the scope's bound values: a relative time is resolved), what the sections compute and the price
    table they price API messages with (``$EVSTORE_PRICES`` may name another at the same log position).
    What the sections compute: while the manifest's code stamp holds (``m.code``), the stamp itself, which
    changes with any file of the code that declares them (no dialect imported); else a digest of every
    section's declaration."""
    from projections.analytics.facts import stamp_holds

    if m.code is not None and stamp_holds(m.code):  # the same key whether this process built the catalog or not
        sections = "code:" + hashlib.sha256(json.dumps(m.code, sort_keys=True).encode()).hexdigest()
    else:
        sections = _sections_digest(catalog())
    where = Scope(stream_id=stream_id).where() if stream_id is not None else scope.where()
    question = json.dumps([REPORT_FORMAT, m.store_id, m.build, m.version, "run" if stream_id is not None else "cross",
                           where, scope.to_dict()], default=str)
    parts = [question, m.position, m.hash, store.max_position(), sections, load_prices().sql_rows()]
    return Key(m.position, hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32], question)


def _base(key: Key) -> str:
    """A digest of the question ``key`` asks and of what answers it, the same at every position: what the sections
    compute (their declarations: the key's code stamp lists the modules the process that stamped had loaded,
    which is not the same in every process) and the prices.  Reports with the same base answer the same
    question at different positions (:class:`Earlier`).  Builds the catalog."""
    parts = [key.question, _sections_digest(catalog()), load_prices().sql_rows()]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


_digests: dict[str, str] = {}


def _sections_digest(cat: Any) -> str:
    """A digest of every section's declaration (SQL, columns, chart, finish's name), per catalog."""
    if cat.version not in _digests:
        text = repr([(m.name, m.title, m.columns, m.sql, m.summary_sql, m.note, m.chart,
                      getattr(m.finish, "__qualname__", None), m.when) for m in cat.every_section])
        _digests[cat.version] = hashlib.sha256(text.encode()).hexdigest()
    return _digests[cat.version]


def _path(out: Path, key: Key) -> Path:
    return out / REPORTS / f"{key.position}-{key.digest}.json"


def _text_path(out: Path, key: Key, name: str) -> Path:
    return out / REPORTS / f"{key.position}-{key.digest}.{name}"


def _kept(out: Path, key: Key) -> Report | None:
    try:
        return msgspec.json.decode(_path(out, key).read_bytes(), type=Report)
    except (OSError, msgspec.DecodeError):
        return None  # none kept (or deleted under us, or not ours): compute it


def _keep(out: Path, key: Key, rep: Report, *, prune: bool = True) -> None:
    """Keep ``rep`` if the tables are still at ``key``'s checkpoint (a refresh between the key and the
    connection would make it another position's report), and delete reports of other positions (unless
    ``prune`` is False: :func:`_prune` does it later).  A folder that cannot be written keeps nothing: the report
    was still computed and is still shown."""
    from projections.analytics import Manifest, replacing

    now = Manifest.load(out)
    if now is None or now.position != key.position:
        return
    try:
        folder = out / REPORTS
        folder.mkdir(exist_ok=True)
        with replacing(_path(out, key)) as tmp:
            tmp.write_bytes(msgspec.json.encode(rep))
        with replacing(_text_path(out, key, BASE)) as tmp:  # what a later report finds it by (Earlier), after it
            tmp.write_bytes(_base(key).encode())
    except OSError:
        return
    if prune:
        _prune(out, key)


def _prune(out: Path, key: Key) -> None:
    """Delete the reports and renderings of positions other than ``key``'s."""
    try:
        for p in (out / REPORTS).iterdir():
            if not p.name.startswith(f"{key.position}-"):
                p.unlink(missing_ok=True)
    except OSError:
        pass


def _keep_text(out: Path, key: Key, name: str, text: str) -> None:
    """Keep a rendering of the report at ``key`` (as :func:`_keep` keeps the report: only while the tables
    are at its checkpoint; nothing if the folder cannot be written)."""
    from projections.analytics import Manifest, replacing

    now = Manifest.load(out)
    if now is None or now.position != key.position:
        return
    try:
        (out / REPORTS).mkdir(exist_ok=True)
        with replacing(_text_path(out, key, name)) as tmp, open(tmp, "wb") as fh:
            for start in range(0, len(text), TEXT_CHUNK):  # not the whole text's bytes at once (48 MB at 10^7)
                fh.write(text[start:start + TEXT_CHUNK].encode("utf-8"))
    except OSError:
        pass


#: Characters of a rendering encoded and written at a time (:func:`_keep_text`).
TEXT_CHUNK = 1 << 20


__all__ = ["REPORTS", "Computing", "Report", "Scope", "Section", "check_scope", "code_digest", "cross_run_report", "rendered",
           "report", "run_report", "section", "wilson"]
