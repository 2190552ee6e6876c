"""What the pages and the JSON API of ``evstore serve`` show, as plain data (no HTTP here).

The runs pages read the runs index through :mod:`projections.runs` (every filter a bound
parameter; text search escapes ``%`` and ``_`` so a query string matches literally).

    >>> page = runs_page(store, RunFilters(dialect="mytool", q="payments"), page=2)
    >>> [r.stream_id for r in page.rows], page.total
    >>> rows = timeline(store, "PROJ-1")
    >>> diff = side_by_side(doc_at_3, doc_at_9)
"""

from __future__ import annotations

import difflib
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from eventstore import codec
from eventstore.dialects import Dialect
from eventstore.display import printable
from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent
from eventstore.tokens import sent_by_line
from projections.runs import RunRow, count_runs, list_runs, refresh, run_choices
from projections.writers import Writer, writers

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunFilters:
    """The ``evstore runs`` filters plus a text search over stream id, task id, title and project, and
    (the metrics page's, as ``evstore metrics --writer``) the writer: TOKEN or TOKEN/MACHINE."""

    dialect: str | None = None
    project: str | None = None
    status: str | None = None
    since: str | None = None
    q: str | None = None
    writer: str | None = None

    @classmethod
    def from_query(cls, params: Any) -> RunFilters:
        def get(name: str) -> str | None:
            value = params.get(name)
            return value.strip() or None if isinstance(value, str) else None

        return cls(get("dialect"), get("project"), get("status"), get("since"), get("q"), get("writer"))

    def to_query(self) -> dict[str, str]:
        return {k: v for k, v in (("dialect", self.dialect), ("project", self.project), ("status", self.status),
                                  ("since", self.since), ("q", self.q), ("writer", self.writer)) if v}


@dataclass
class RunsPage:
    rows: list[RunRow]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.rows], "total": self.total, "page": self.page,
                "pages": self.pages, "size": self.size}


def runs_page(store: EventStore, filters: RunFilters, *, page: int = 1, size: int = PAGE_SIZE) -> RunsPage:
    """One page of the runs index, newest activity first (``evstore runs`` with an offset)."""
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise EvstoreError(f"page must be >= 1 and size 1..{MAX_PAGE_SIZE}, got page {page}, size {size}.")
    refresh(store)
    f = filters
    rows = list_runs(store, dialect=f.dialect, project=f.project, status=f.status, since=f.since, q=f.q, limit=size,
                     offset=(page - 1) * size, fresh=False)
    total = count_runs(store, dialect=f.dialect, project=f.project, status=f.status, since=f.since, q=f.q)
    return RunsPage(rows, total, page, size)


def filter_choices(store: EventStore) -> dict[str, list[str]]:
    """Distinct dialects and statuses in the index (the filter drop-downs)."""
    return run_choices(store)


# ---------------------------------------------------------------- one run


@dataclass
class TimelineRow:
    version: int
    position: int
    when: str
    type: str
    summary: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    source: dict[str, Any] | None = None
    written_by: Writer | None = None  # who wrote this state version (``projections.writers``)
    sent_by: dict[str, Any] | None = None  # who sent it to this server (meta.sent_by: token, machine)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "position": self.position, "when": self.when, "type": self.type,
                "summary": self.summary, "findings": self.findings, "source": self.source,
                "written_by": None if self.written_by is None else self.written_by.to_dict(),
                "sent_by": self.sent_by}


def timeline_row(dialect: Dialect, rec: RecordedEvent) -> TimelineRow:
    """One line of ``evstore log`` as data: the dialect's summary, findings, the snapshot's source."""
    if rec.erased:  # purged or erased: the header remains (the caller adds when and why)
        return TimelineRow(rec.version, rec.position, (rec.occurred_at or rec.recorded_at), rec.type,
                           "[content purged or erased]")
    try:
        summary = dialect.summarize(rec.to_event())
    except EvstoreError:  # a free-form event type (`append`): show its data
        summary = rec.data.decode("utf-8")[:300]
    raw = rec.meta
    meta = codec.decode(raw) if b'"findings"' in raw or b'"source"' in raw or b'"sent_by"' in raw \
        else None  # a byte probe is cheaper
    findings: list[dict[str, Any]] = []
    source = None
    if isinstance(meta, dict):
        found = meta.get("findings")
        if isinstance(found, list):
            findings = [f for f in found if isinstance(f, dict)]
        if isinstance(meta.get("source"), dict):
            source = meta["source"]
    sender = meta.get("sent_by") if isinstance(meta, dict) else None
    return TimelineRow(rec.version, rec.position, (rec.occurred_at or rec.recorded_at), rec.type, summary,
                       findings, source, sent_by=sender if isinstance(sender, dict) else None)


def describe_source(source: dict[str, Any]) -> str:
    """One line for an ingested snapshot's source: file, git commit, then whatever else it names
    (session, tool call, ...)."""
    parts = []
    if source.get("file") or source.get("dir"):
        parts.append(str(source.get("file") or source.get("dir")))
    git = source.get("git")
    if isinstance(git, dict):
        parts.append(f"git {str(git.get('commit') or '')[:12]} in {git.get('repo') or '?'}")
    for key, value in source.items():
        if key not in ("file", "dir", "git"):
            parts.append(f"{key} {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}")
    return " · ".join(parts)


def timeline(store: EventStore, stream_id: str, dialect: Dialect, *, after: int = 0,
             limit: int | None = None) -> list[TimelineRow]:
    upto = None if limit is None else after + limit
    rows = [timeline_row(dialect, rec) for rec in store.read_stream(stream_id, after_version=after, upto_version=upto)]
    gone = [r for r in rows if r.summary == "[content purged or erased]"]
    if gone:  # when, and under which policy or request
        from eventstore.erasure import describe, explain

        erased = explain(store, [r.position for r in gone])
        for r in gone:
            r.summary = f"[content {describe(erased.get(r.position))}]"
    found = writers(store, stream_id)
    for row in rows:
        row.written_by = found.get(row.version)
    return rows


def version_options(latest: int, selected: int | None) -> Markup:
    """``<option>``s for versions ``latest`` down to 0 (built here: a template loop over 1,000
    versions, three times, was most of a long run's page time)."""
    return Markup("".join(f'<option value="{v}"{" selected" if v == selected else ""}>{v}</option>'
                          for v in range(latest, -1, -1)))


def timeline_html(rows: list[TimelineRow], run_path: str) -> Markup:
    """The timeline's ``<tr>``s (the run page renders up to 2,000; every value escaped here)."""
    out = []
    for r in rows:
        v = r.version
        cells = [f'<tr id="v{v}"><td class="num">{v}</td><td class="nowrap">{escape(r.when[:19].replace("T", " "))}'
                 f'</td><td class="mono">{escape(r.type)}</td><td class="summary">{escape(r.summary)}']
        if r.findings:
            cells.append('<ul class="findings">')
            for f in r.findings[:20]:
                cells.append(f"<li>! {escape(f.get('path') or '/')}: [{escape(f.get('code'))}] "
                             f"{escape(f.get('message'))}</li>")
            if len(r.findings) > 20:
                cells.append(f"<li>… {len(r.findings) - 20} more finding(s)</li>")
            cells.append("</ul>")
        if r.source:
            cells.append(f'<div class="source">source: <span class="mono">{escape(describe_source(r.source))}'
                         "</span></div>")
        if r.written_by is not None:
            cells.append(f'<div class="source">{escape(r.written_by.line())}</div>')
        if r.sent_by is not None:
            cells.append(f'<div class="source">{escape(sent_by_line(r.sent_by))}</div>')
        cells.append(f'</td><td class="nowrap"><a href="{run_path}?version={v}#state">state</a>')
        if v > 1:
            cells.append(f' · <a href="{run_path}?version={v}&amp;from={v - 1}&amp;to={v}#diff">diff</a>')
        cells.append("</td></tr>\n")
        out.append("".join(cells))
    return Markup("".join(out))


def source_of(rows: list[TimelineRow], version: int) -> TimelineRow | None:
    """The event closing the ingested snapshot that produced ``version`` (None: not ingested)."""
    for row in rows:
        if row.version >= version and row.source is not None:
            return row
    return None


# ---------------------------------------------------------------- documents


def json_tree(value: Any, *, open_depth: int = 2) -> Markup:
    """The document as nested ``<details>`` (collapsible without script); every text escaped."""
    out: list[str] = []
    _tree(out, None, value, 0, open_depth)
    return Markup("".join(out))


def _scalar(value: Any) -> str:
    kind = "null" if value is None else "bool" if isinstance(value, bool) else \
        "num" if isinstance(value, (int, float)) else "str"
    # json.dumps escapes control characters; escape() makes the result inert HTML text.
    return f'<span class="j-{kind}">{escape(json.dumps(value, ensure_ascii=False))}</span>'


def _tree(out: list[str], key: str | None, value: Any, depth: int, open_depth: int) -> None:
    label = "" if key is None else f'<span class="j-key">{escape(key)}</span>: '
    if isinstance(value, (dict, list)):
        n = len(value)
        kind = f"{{{n} key{'s' if n != 1 else ''}}}" if isinstance(value, dict) else f"[{n} item{'s' if n != 1 else ''}]"
        if n == 0:
            out.append(f'<div class="j-leaf">{label}<span class="j-empty">{"{}" if isinstance(value, dict) else "[]"}'
                       "</span></div>")
            return
        out.append(f'<details class="j-node"{" open" if depth < open_depth else ""}><summary>{label}'
                   f'<span class="j-kind">{kind}</span></summary>')
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            _tree(out, str(k), v, depth + 1, open_depth)
        out.append("</details>")
    else:
        out.append(f'<div class="j-leaf">{label}{_scalar(value)}</div>')


@dataclass
class SideBySideRow:
    kind: str  # "equal" | "replace" | "delete" | "insert" | "skip"
    left_no: int | None
    left: str
    right_no: int | None
    right: str


def side_by_side(a: Any, b: Any, *, context: int = 3) -> list[SideBySideRow]:
    """Both documents pretty-printed, changed lines paired, unchanged runs cut to ``context`` lines."""
    left = json.dumps(a, indent=2, ensure_ascii=False).splitlines()
    right = json.dumps(b, indent=2, ensure_ascii=False).splitlines()
    rows: list[SideBySideRow] = []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    for gi, group in enumerate(matcher.get_grouped_opcodes(context)):
        if gi:
            rows.append(SideBySideRow("skip", None, "…", None, "…"))
        for tag, i1, i2, j1, j2 in group:
            for k in range(max(i2 - i1, j2 - j1)):
                li, rj = i1 + k, j1 + k
                lt = left[li] if li < i2 else None
                rt = right[rj] if rj < j2 else None
                rows.append(SideBySideRow(tag, li + 1 if lt is not None else None, lt or "",
                                          rj + 1 if rt is not None else None, rt or ""))
    return rows


# ---------------------------------------------------------------- integrity


def checkpoint_rows(store: EventStore, limit: int = 20) -> list[dict[str, Any]]:
    """The newest recorded checkpoints, each with the witnesses that cosigned it (name, key id, time)."""
    import base64

    from eventstore import checkpoints

    rows = []
    for c in checkpoints.recorded_checkpoints(store, limit=limit):
        signed = checkpoints.signers(c.note)
        rows.append({"origin": c.origin, "tree_size": c.tree_size, "root": base64.b64encode(c.root_hash).decode(),
                     "created_at": c.created_at, "note": c.note,
                     "witnesses": [{"name": s.name, "key_id": s.key_id,
                                    "cosigned_at": datetime.fromtimestamp(s.cosigned_at, UTC).strftime(
                                        "%Y-%m-%dT%H:%M:%SZ")}
                                   for s in signed if s.cosigned_at is not None]})
    return rows


@dataclass
class IntegrityState:
    """The last full verify this server ran (kept in memory) and the configured seal file."""

    seal_path: Path | None = None
    verifier: Any = None  # an Ed25519 public key (chain.load_public_key); None: HMAC with EVSTORE_SIGNING_KEY
    report: Any = None  # eventstore.verify.VerifyReport
    verified_at: str | None = None
    versions: dict[str, int] = field(default_factory=dict)  # stream -> version at that verify
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seal(self) -> dict[str, Any] | None:
        """The seal file's fields (or an ``error`` naming why it cannot be read)."""
        if self.seal_path is None:
            return None
        try:
            signed = codec.parse_json_text(self.seal_path.read_bytes(), str(self.seal_path))
        except (OSError, EvstoreError) as exc:
            return {"file": str(self.seal_path), "error": str(exc)}
        if type(signed) is not dict:
            return {"file": str(self.seal_path), "error": "a seal is a JSON object"}
        return {"file": str(self.seal_path), **signed}

    def run_verify(self, store: EventStore) -> Any:
        """A full verify (and the seal's check when a file and its key are there)."""
        from eventstore import verify as v

        with self.lock:  # one full verify at a time
            before = {s.stream_id: s.version for s in store.list_streams()}
            from projections.runs import IndexCheck

            derive = IndexCheck(store)  # the runs index re-derived in verify's own scan of the log
            report = v.verify(store, sink=derive)
            report.failures.extend(v.Failure(sid, version, "projection", detail)
                                   for sid, version, detail in derive.problems())
            signed = self.seal()
            if signed is not None and "error" not in signed:
                try:
                    report.failures.extend(v.check_seal(store, {k: x for k, x in signed.items() if k != "file"},
                                                        self.verifier))
                    report.seal = {"file": signed["file"], "ok": report.ok}
                except EvstoreError as exc:
                    report.seal = {"file": signed["file"], "ok": None, "error": str(exc)}
            self.report, self.versions = report, before
            self.verified_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return report

    def streams(self, store: EventStore, *, page: int, size: int = 200) -> tuple[list[dict[str, Any]], int]:
        """One page of streams with their status as of the last verify."""
        failed = {f.stream_id: f for f in self.report.failures} if self.report is not None else {}
        all_streams = store.list_streams()
        out = []
        for stream in all_streams[(page - 1) * size: page * size]:
            sid, dialect, version = stream.stream_id, stream.dialect, stream.version
            seen = self.versions.get(sid)
            if sid in failed:
                status, detail = "failed", str(failed[sid])
            elif seen is None:
                status, detail = "not verified", ""
            elif seen == version:
                status, detail = "verified", ""
            else:
                status, detail = "changed since", f"verified at version {seen}, now {version}"
            out.append({"stream": sid, "dialect": dialect, "version": version, "status": status, "detail": detail})
        return out, len(all_streams)


def iter_sse(rows: list[TimelineRow]) -> Iterator[str]:
    """Server-sent events (one ``append`` event per timeline row; its id is the version)."""
    for row in rows:  # the page's script shows these values as text: controls and bidi made visible first
        yield f"id: {row.version}\nevent: append\ndata: {json.dumps(visible(row.to_dict()), ensure_ascii=False)}\n\n"


class Rendered(Markup):
    """HTML this module's templates rendered before (every value in it went through :func:`visible`
    then): placed in a page as it is (the metrics page's kept body)."""

    __slots__ = ()


def visible(value: Any) -> Any:
    """``value`` with each string as a page shows it (:func:`eventstore.display.printable`): a
    Jinja ``finalize`` for every ``{{ }}`` of the templates, and the live rows' values."""
    if isinstance(value, Rendered):
        return value
    if isinstance(value, Markup):
        return Markup(printable(str(value), multiline=True))
    if isinstance(value, str):
        return printable(value, multiline=True)
    if isinstance(value, dict):
        return {k: visible(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible(v) for v in value]
    return value


def snippet_html(snippet: str) -> Markup:
    """A search hit's snippet as HTML: every part escaped, the matches in ``<mark>``."""
    from projections.search import MARK_END, MARK_START

    out, inside = [], False
    for part in re.split(f"([{MARK_START}{MARK_END}])", snippet):
        if part == MARK_START:
            out.append("<mark>")
            inside = True
        elif part == MARK_END:
            if inside:
                out.append("</mark>")
            inside = False
        else:
            out.append(str(escape(part)))
    if inside:
        out.append("</mark>")
    return Markup("".join(out))


def hit_link(hit: Any) -> str:
    """The run page opened at a hit's version (its timeline starting there, the row targeted)."""
    return (f"/runs/{urllib.parse.quote(hit.stream_id, safe='')}?after={max(hit.version - 1, 0)}"
            f"#v{hit.version}")


def _item_link(item: Any) -> str:
    return (f"/runs/{urllib.parse.quote(item.stream, safe='')}?after={max(item.version - 1, 0)}#v{item.version}")


def _item_html(item: Any, out: list[str]) -> None:
    when = escape((item.at or "")[:19].replace("T", " "))
    where = f"line {item.lineno}" if item.lineno is not None else f"v{item.version}"
    stream = "" if item.kind in ("state", "commit", "event") else f'<span class="mono stream">{escape(item.stream)}</span> '
    out.append(f'<li class="tl-item tl-{escape(item.kind)} depth-{item.depth}" data-kind="{escape(item.kind)}" '
               f'data-stream="{escape(item.stream)}" data-at="{escape(item.at or "")}">'
               f'<span class="nowrap when">{when}</span> <span class="kind">{escape(item.kind)}</span> {stream}'
               f'<a class="at" href="{_item_link(item)}">{escape(where)}</a> <span class="text">{escape(item.text)}</span>')
    if item.diff:
        out.append(f'<details class="tl-diff"><summary>{len(item.diff)} change(s)</summary><table class="patch"><tbody>')
        for op in item.diff[:50]:
            value = json.dumps(op.get("value"), ensure_ascii=False)[:300] if "value" in op else str(op.get("from", ""))
            out.append(f'<tr class="op-{escape(op["op"])}"><td>{escape(op["op"])}</td><td class="mono">'
                       f'{escape(op["path"] or "/")}</td><td class="mono clip-long">{escape(value)}</td></tr>')
        out.append("</tbody></table></details>")
    if item.children:
        out.append('<ol class="tl-children">')
        for child in item.children:
            _item_html(child, out)
        out.append("</ol>")
    out.append("</li>\n")


def items_html(items: list[Any]) -> Markup:
    """A timeline's or a conversation's ``<li>``s (``projections.timeline.Item``; every value escaped)."""
    out: list[str] = []
    for item in items:
        _item_html(item, out)
    return Markup("".join(out))
