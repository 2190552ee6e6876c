"""The ``evstore serve`` application: server-rendered pages, a JSON API and token-guarded writes.

    >>> app = create_app(ServeConfig(url="sqlite:///./.evstore/events.db", token=None))
    >>> # uvicorn.run(app, host="127.0.0.1", port=8765)

Read-only unless a token is configured.  Every page is rendered by Jinja2 with autoescape on,
every response carries a strict Content-Security-Policy (scripts and styles only from
``/static``), and no request value reaches SQL except as a bound parameter.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import logging
import threading
import time
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from eventstore import codec, config, documents, tokens
from eventstore.errors import (
    ConcurrencyError,
    ContentErased,
    DuplicateEventId,
    EvstoreError,
    InvalidEvent,
    StreamNotFound,
)
from eventstore.store import AppendResult, GroupAppend, NewEvent, stamped
from projections.report import (
    _cell,
    column_formats,
    figure,
    heading,
    renderer_digest,
    section_chart,
    short_titles,
    without_data,
)
from projections.serve import views
from projections.serve.access import Grant, HTTPError, Policy, is_loopback
from projections.serve.access import Scope as Access
from projections.serve.drainer import SpoolDrainer
from projections.serve.grouping import Committer, WriteGrants
from projections.usage import cost_text
from projections.writers import writers

if TYPE_CHECKING:
    from projections.metrics import Key, Pieces

HERE = Path(__file__).resolve().parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
EVENT_KEYS = {"type", "data", "meta", "event_id", "occurred_at", "schema_version"}
log = logging.getLogger("evstore.serve")
TIMELINE_PAGE = 2000
T = TypeVar("T")


@dataclass
class ServeConfig:
    url: str | None = None
    token: str | None = None  # reads and writes (at least 128 bits)
    read_token: str | None = None  # reads only; when set, reads need a token even on loopback
    # The address served on: the Host headers answered (see access.Policy.host_problem) and whether
    # reads need a token (anything but loopback).
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()  # more names clients reach the server by (a proxy's, a DNS name)
    analytics_dir: str | None = None
    seal: Path | None = None
    public_key: Path | None = None  # checks an Ed25519-signed seal (else HMAC, EVSTORE_SIGNING_KEY)
    live_poll: float = 0.5  # seconds between polls of a live run page
    synchronous: str | None = None
    workers: int = 6  # threads doing database work (each keeps one pooled connection)
    max_body: int = field(default_factory=lambda: config.MAX_SNAPSHOT_BYTES)
    # Folders a dialect's http hook (POST /hooks/<name>) may read the files a call names from
    # (None: the source system's own folder; see Dialect.record_http_hook).
    hook_files: tuple[Path, ...] | None = None
    # The hook spool to drain into the store while serving (None: no draining; see drainer.py).
    drain_dir: Path | None = None
    drain_interval: float = 1.0  # seconds between drains


class SecurityHeaders:
    """Adds the CSP and friends to every response (pages, API, static files, errors), and a
    ``Server-Timing: app;dur=MS`` header: the time from the request to the response's headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = f"app;dur={(time.perf_counter() - started) * 1000:.2f}".encode()
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS, (b"server-timing", took)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostCheck:
    """Answers 421 (Misdirected Request) to a request whose ``Host`` is no name of this server
    (:meth:`access.Policy.host_problem`), before any route runs: the DNS rebinding guard."""

    def __init__(self, app: ASGIApp, policy: Policy, refuse: Callable[[Request, HTTPError], Response]) -> None:
        self.app, self.policy, self.refuse = app, policy, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            problem = self.policy.host_problem(request.headers.get("host"))
            if problem is not None:
                log.warning("%s %s refused: %s", request.method, request.url.path, problem)
                await self.refuse(request, HTTPError(421 if request.headers.get("host") else 400, problem))(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


MACHINE_HEADER = "x-evstore-machine"  # the name of the machine a client sends from (meta.sent_by.machine)


class StoreTokens:
    """The store's named tokens (``evstore tokens``) for :class:`access.Policy`: read per request
    (one indexed read by the secret's SHA-256), so a revocation holds from the next request on
    every worker, with nothing to invalidate."""

    def __init__(self, store: Any, grants: WriteGrants | None = None) -> None:
        self.store = store
        self.grants = grants  # the valid ones, remembered for the appends (grouping.WriteGrants)

    def find(self, secret: str) -> Grant | str | None:
        found = tokens.find_token(self.store, secret)
        if found is None:
            return None
        problem = found.problem()
        if problem is not None:
            return problem
        grant = Grant(found.name, "", tokens.ACCESS[found.scope])
        if self.grants is not None:
            self.grants.remember(secret, grant)
        return grant

    def can_write(self) -> bool:
        return tokens.write_tokens_in_force(self.store) > 0


def sent_by(grant: Grant | None, headers: Any) -> dict[str, Any]:
    """``meta.sent_by`` of an event a request writes: the token's name and the machine the client
    names in ``X-Evstore-Machine`` (``null`` when it sends none); 400 for a name that is not one."""
    machine = headers.get(MACHINE_HEADER)
    if machine is not None:
        machine = machine.strip()
        if not machine or len(machine) > 100 or not machine.isprintable() or not machine.isascii():
            raise HTTPError(400, f"the {MACHINE_HEADER} header must be a machine name of 1 to 100 printable ASCII "
                                 "characters.")
    return {"token": grant.name if grant is not None else None, "machine": machine}


def _status_of(exc: EvstoreError) -> int:
    if isinstance(exc, StreamNotFound):
        return 404
    if isinstance(exc, ContentErased):  # purged or erased: the message says when and why
        return 410
    if isinstance(exc, (ConcurrencyError, DuplicateEventId)):
        return 409
    return 400


# The largest integer any query parameter takes (versions are 32-bit on PostgreSQL); a page number
# times a page size then stays within the 64-bit integers both databases bind.
MAX_INT_PARAM = config.MAX_INT


def _int_param(params: Any, name: str, default: int | None = None, *, minimum: int = 0) -> int | None:
    """An integer query parameter in ``minimum..MAX_INT_PARAM``; else a 400 naming it (never a 500
    from the database: SQLite's OverflowError, PostgreSQL's NumericValueOutOfRange)."""
    raw = params.get(name)
    if raw in (None, ""):
        return default
    shown = raw[:40] + ("…" if len(raw) > 40 else "")
    try:
        value = int(raw)
    except ValueError:
        raise HTTPError(400, f'query parameter "{name}" must be an integer, got "{shown}".') from None
    if value < minimum:
        raise HTTPError(400, f'query parameter "{name}" must be >= {minimum}, got {shown}.')
    if value > MAX_INT_PARAM:
        raise HTTPError(400, f'query parameter "{name}" must be at most {MAX_INT_PARAM}, got {shown}.')
    return value


def _fresh(params: Any) -> bool:
    """``?fresh=1``: fold every event instead of starting from a replay-cache row."""
    return params.get("fresh", "") in ("1", "true", "yes")


def _expected(value: Any) -> Any:
    """``expected_version`` as ``append --batch`` lines take it."""
    if value is None or value == "any":
        return "any"
    if value in ("no stream", "no-stream"):
        return "no stream"
    if type(value) is int and value >= 0:
        return value
    raise InvalidEvent(f'expected_version must be "any", "no-stream" or a version number >= 0, got {value!r}.')


def _too_large(value: Any) -> bool:
    try:
        return len(msgspec.json.encode(value)) > config.MAX_EVENT_BYTES
    except (TypeError, ValueError, msgspec.EncodeError):  # not encodable at all: not a size problem
        return False


def parse_blobs(value: Any) -> dict[str, bytes]:
    """``"blobs"`` of an append body: SHA-256 hex digest -> base64 bytes (what the events' ``meta.blobs``
    name; ``evstore push`` sends them with the events)."""
    if type(value) is not dict:
        raise InvalidEvent('request body: "blobs" must be an object of SHA-256 hex digests to base64 bytes.')
    out = {}
    for digest, data in value.items():
        if type(data) is not str:
            raise InvalidEvent(f'request body: blobs["{digest[:64]}"] must be a base64 string.')
        try:
            out[digest] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidEvent(f'request body: blobs["{digest[:64]}"] is not base64.') from None
    return out


def parse_append(body: bytes) -> tuple[list[NewEvent], Any, dict[str, bytes] | None, str | None]:
    """The body of ``POST /api/streams/{id}/events`` as events, an expected version and the blobs
    the events name (``None``: none given)."""
    obj = codec.parse_json_text(body, "request body")
    if type(obj) is not dict:
        raise InvalidEvent("request body: must be a JSON object with an \"events\" list.")
    unknown = set(obj) - {"events", "expected_version", "blobs", "dialect"}
    if unknown:
        raise InvalidEvent(f"request body: unknown key(s) {', '.join(sorted(unknown))}.")
    items = obj.get("events")
    if type(items) is not list or not items:
        raise InvalidEvent('request body: "events" must be a non-empty list.')
    events = []
    for i, item in enumerate(items):
        where = f"events[{i}]"
        if type(item) is not dict:
            raise InvalidEvent(f"{where}: each event must be a JSON object.")
        unknown = set(item) - EVENT_KEYS
        if unknown:
            raise InvalidEvent(f"{where}: unknown key(s) {', '.join(sorted(unknown))}.")
        if not isinstance(item.get("type"), str) or not item["type"]:
            raise InvalidEvent(f'{where}: "type" must be a non-empty string.')
        try:
            events.append(NewEvent(item["type"], item.get("data", {}), meta=item.get("meta"),
                                   event_id=item.get("event_id"), occurred_at=item.get("occurred_at"),
                                   schema_version=item.get("schema_version")))
        except InvalidEvent as exc:
            if _too_large(item.get("data")) or _too_large(item.get("meta")):
                raise HTTPError(413, f"{where}: {exc}") from exc
            raise InvalidEvent(f"{where}: {exc}") from exc
    blobs = parse_blobs(obj["blobs"]) if "blobs" in obj else None
    return events, _expected(obj.get("expected_version")), blobs, _dialect(obj.get("dialect"))


def _dialect(value: Any) -> str | None:
    """``"dialect"`` of an append body: the dialect a new stream is recorded with (``evstore push`` sends
    the local stream's), a known one or none."""
    if value is None:
        return None
    from eventstore.dialects import available

    if type(value) is not str or value not in available():
        raise InvalidEvent(f'request body: "dialect" must be one of {", ".join(sorted(available()))}.')
    return value


class KeptBodies:
    """The metrics page's rendered bodies, in memory, for one report position at a time (a body of another
    position is dropped when one of a new position is kept), at most :attr:`LIMIT` of them and :attr:`CHARS`
    characters in all (the filters and runs asked for most recently; the last one kept whatever its size): the
    whole store's page is 9.5 million characters at 10^7 events, and 64 filters asked for of such a store would
    have held 600 MB."""

    LIMIT = 64
    CHARS = 64 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Each body, and where each section's block is in it ((start, end) by section name), the most recent last.
        self._kept: dict[tuple[Key, str], tuple[str, dict[str, tuple[int, int]]]] = {}

    def get(self, key: Key | None, name: str) -> str | None:
        if key is None:
            return None
        with self._lock:
            kept = self._kept.pop((key, name), None)
            if kept is None:
                return None
            self._kept[(key, name)] = kept  # the most recent last
            return kept[0]

    def put(self, key: Key | None, name: str, body: str, spans: dict[str, tuple[int, int]] | None = None) -> None:
        """Keep ``body``, and where each section is in it (``spans``: :meth:`piece`)."""
        if key is None:  # no tables of this store's log to key by: nothing kept
            return
        with self._lock:
            for k in [k for k in self._kept if k[0][0] != key[0] or k == (key, name)]:
                del self._kept[k]
            self._kept[(key, name)] = (body, spans or {})
            while len(self._kept) > 1 and (len(self._kept) > self.LIMIT
                                           or sum(len(b) for b, _s in self._kept.values()) > self.CHARS):
                del self._kept[next(iter(self._kept))]  # the least recently asked for

    def piece(self, key: Key, name: str, section: str) -> str | None:
        """What the body ``name`` kept for the report of ``key`` shows of ``section``, if it is kept (the bodies of
        the position before are kept until one of a new position is)."""
        with self._lock:
            body, spans = self._kept.get((key, name), ("", {}))
            if section not in spans:
                return None
            start, end = spans[section]
            return body[start:end]


class Server:
    """The application's state: one store (thread-safe), templates, the integrity state."""

    def __init__(self, cfg: ServeConfig) -> None:
        from projections.runs import IndexedEventStore

        self.cfg = cfg
        Policy.of(host=cfg.host, token=cfg.token, read_token=cfg.read_token,
                  allowed_hosts=cfg.allowed_hosts)  # a weak token: EvstoreError, nothing opened
        self.store = IndexedEventStore(cfg.url, synchronous=cfg.synchronous)
        self.grants = WriteGrants()
        self.policy = Policy.of(host=cfg.host, token=cfg.token, read_token=cfg.read_token,
                                allowed_hosts=cfg.allowed_hosts, tokens=StoreTokens(self.store, self.grants))
        self._committer: Committer | None = None  # the appends' group commit (started by the first append)
        from eventstore import chain

        verifier = chain.load_public_key(cfg.public_key) if cfg.public_key is not None else None
        self.checks = views.IntegrityState(cfg.seal, verifier)
        self.metrics_lock = threading.Lock()  # one analytics refresh at a time
        self.bodies = KeptBodies()  # the metrics page's bodies at the current log position
        # Database work runs on a fixed pool, not Starlette's: the store keeps one connection per
        # thread, and anyio's threads (up to 40, retired when idle) would exhaust the engine's pool.
        self.pool = ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="evstore-serve")
        self.stopping = asyncio.Event()
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                               trim_blocks=True, lstrip_blocks=True, finalize=views.visible)
        self.env.filters["cell"] = _cell
        # Metric figures as the CLI and the HTML report show them (durations as 2h 27m).
        self.env.globals.update(figure=figure, heading=heading, column_formats=column_formats,
                                without_data=without_data, short_titles=short_titles)
        self.env.filters["source"] = views.describe_source
        self.env.filters["when"] = lambda s: (s or "")[:19].replace("T", " ")
        self.env.globals["writable"] = self.policy.writable
        self._session_locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
        self._locks_lock = threading.Lock()
        self.drainer = SpoolDrainer(self.store, cfg.drain_dir, interval=cfg.drain_interval) \
            if cfg.drain_dir is not None else None

    # -- helpers ----------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the database threads."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def page(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**ctx), status_code=status)

    def authorize(self, request: Request, scope: Access, form_token: str | None = None) -> Grant | None:
        """401 without a token, 403 with a wrong one or when ``scope`` is not allowed
        (:meth:`access.Policy.authorize`: the one place that decides).  Reads the store's tokens:
        call it on the database threads (:meth:`allowed`)."""
        return self.policy.authorize(request.headers, scope, form_token)

    async def allowed(self, request: Request, scope: Access, form_token: str | None = None) -> Grant | None:
        """:meth:`authorize` on the database threads (it may read the store's tokens)."""
        return await self.call(self.authorize, request, scope, form_token)

    async def read_body(self, request: Request) -> bytes:
        limit = self.cfg.max_body
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise HTTPError(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes "
                                 "(EVSTORE_MAX_SNAPSHOT_BYTES).")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, f"request body exceeds the limit of {limit} bytes (EVSTORE_MAX_SNAPSHOT_BYTES).")
            chunks.append(chunk)
        return b"".join(chunks)

    def resolve(self, stream_id: str) -> str:
        from projections.replay import resolve

        return resolve(self.store, stream_id)

    def metrics_rendered(self, filters: views.RunFilters | None, stream_id: str | None, name: str,
                         render: Callable[[Any], str], pieces: Pieces | None = None) -> str:
        """``render(report)`` of the metrics report for ``filters`` or the run ``stream_id``, computed and
        rendered once per log position and kept under ``name`` (projections.metrics.rendered): an unchanged
        store is answered with the kept text, whatever the size of the report."""
        from projections.analytics import refresh
        from projections.metrics import Scope, rendered

        with self.metrics_lock:
            refresh(self.store, self.cfg.analytics_dir)
        f = filters or views.RunFilters()
        # A filter matching nothing is named, as `evstore metrics` does (``writer``: its --writer, the runs
        # an event of TOKEN or TOKEN/MACHINE went to; the writers section then shows that writer's rows).
        return rendered(self.store, render, name, self.cfg.analytics_dir, stream_id=stream_id, fresh=False, pieces=pieces,
                        scope=None if stream_id is not None else Scope(project=f.project, dialect=f.dialect,
                                                                       since=f.since, writer=f.writer))

    def metrics_page(self, filters: views.RunFilters | None, stream_id: str | None, sid: str | None,
                     title: str) -> Response:
        """The metrics page.  Its body (the form or the back link, every section) is rendered once per log
        position, for the filters and the run it shows, and kept in this process (never read back from a
        file as HTML: what the page shows is escaped from the report's values, whoever could write the
        analytics folder): an unchanged store is answered with the kept body.  When the report must be
        computed, the page is sent progressively: the page and the report's head first, then each section
        as it is computed (one slow section does not hold back the others above it), and the whole body is
        kept at the end."""
        from projections.analytics import refresh
        from projections.metrics import Computing, Report, Scope

        with self.metrics_lock:
            refresh(self.store, self.cfg.analytics_dir)
        f = filters or views.RunFilters()
        # A filter matching nothing is named, as `evstore metrics` does (``writer``: its --writer, the runs an
        # event of TOKEN or TOKEN/MACHINE went to; the writers section then shows that writer's rows).
        computing = Computing(self.store, self.cfg.analytics_dir, stream_id=stream_id,
                              scope=None if stream_id is not None else Scope(project=f.project, dialect=f.dialect,
                                                                             since=f.since, writer=f.writer),
                              raw_rows=True)  # a section taken is rendered from its block before, or decoded then
        code = renderer_digest(HERE / "templates" / "metrics_body.html", views.__file__, __file__)
        shown = hashlib.sha256(json.dumps([filters.to_query() if filters is not None else None, sid])
                               .encode()).hexdigest()[:12]
        name = f"page-{code}-{shown}"
        body = self.bodies.get(computing.key, name)
        if body is not None:
            return self.page("metrics.html", title=title, body=views.Rendered(body))
        parts = computing.parts()
        head = next(parts)  # the report's title and scope (a filter matching nothing raises here: an error page)
        assert isinstance(head, Report)
        macros: Any = self.env.get_template("metrics_body.html").make_module(
            {"quote": lambda s: urllib.parse.quote(s, safe="")})

        def part(s: Any) -> str:
            """A section's block: as it was rendered for the report before where the section was taken from it
            (the same section renders the same; held in this process's memory only), else rendered."""
            taken = computing.taken_from(s)
            if taken is not None and (html := self.bodies.piece(taken, name, s.name)) is not None:
                return html
            s = s.decoded()
            return str(macros.section(s, section_chart(s)))

        def spans(blocks: list[tuple[str, str]], at: int) -> dict[str, tuple[int, int]]:
            """Where each section's block ((name, block): "" without data) is in a body, from offset ``at``."""
            out = {}
            for section_name, html in blocks:
                out[section_name] = (at, at + len(html))
                at += len(html)
            return out

        first = str(macros.head(head, filters, sid))
        if head.sections:  # the report was kept: the whole body at once
            blocks = [(s.name, part(s)) for s in head.sections]
            body = first + "".join(html for _n, html in blocks) + str(macros.tail(without_data(head)))
            self.bodies.put(computing.key, name, body, spans(blocks, len(first)))
            return self.page("metrics.html", title=title, body=views.Rendered(body))
        mark = "<!--evstore:metrics-body-->"
        before, after = self.env.get_template("metrics.html").render(
            title=title, body=views.Rendered(mark)).split(mark, 1)

        async def stream() -> AsyncIterator[str]:
            blocks: list[tuple[str, str]] = []
            try:
                yield before + first
                while (s := await self.call(next, parts, None)) is not None:
                    blocks.append((s.name, await self.call(part, s)))
                    if blocks[-1][1]:  # a section without data is named in the last line
                        yield blocks[-1][1]
                last = str(macros.tail(without_data(head)))
                yield last + after
                self.bodies.put(computing.key, name, first + "".join(html for _n, html in blocks) + last,
                                spans(blocks, len(first)))
            except Exception as exc:  # the page has begun: say what failed in it, keep nothing
                log.exception("metrics page: a section failed")
                yield str(Markup('<p class="note" id="metrics-error">The report could not be computed: {}</p>')
                          .format(views.visible(str(exc)))) + after
            finally:
                await self.call(parts.close)  # DuckDB's connection is closed even if the reader went away

        return StreamingResponse(stream(), media_type="text/html; charset=utf-8")

    def usage_of(self, stream_ids: list[str], *, detail: bool = False) -> tuple[dict[str, Any], str | None]:
        """Tokens and cost per stream (``detail``: the one stream's usage section), from the analytics
        tables caught up first, and what went wrong if they could not be read (the page still shows)."""
        from projections.analytics import reading, refresh
        from projections.usage import STREAM_READS, stream_costs, stream_usage

        try:
            with self.metrics_lock:
                refresh(self.store, self.cfg.analytics_dir)
            with reading(self.store, self.cfg.analytics_dir, fresh=False, sql=STREAM_READS) as con:
                if detail:
                    found = stream_usage(con, stream_ids[0])
                    return ({stream_ids[0]: found} if found else {}), None
                return stream_costs(con, stream_ids), None
        except EvstoreError as exc:
            return {}, f"usage unavailable: {exc}"

    # -- pages ------------------------------------------------------------------

    def runs(self, request: Request) -> Response:
        filters = views.RunFilters.from_query(request.query_params)
        page_no = _int_param(request.query_params, "page", 1, minimum=1) or 1
        size = _int_param(request.query_params, "size", views.PAGE_SIZE, minimum=1) or views.PAGE_SIZE
        page = views.runs_page(self.store, filters, page=page_no, size=size)
        costs, usage_problem = self.usage_of([r.stream_id for r in page.rows])
        if request.url.path.startswith("/api/"):
            return JSONResponse({**page.to_dict(), "usage": costs})
        query = filters.to_query()

        def link(n: int) -> str:
            return "/?" + urllib.parse.urlencode({**query, "page": n, **({"size": size} if size != views.PAGE_SIZE
                                                                         else {})})

        return self.page("runs.html", title="Runs", page=page, filters=filters, costs=costs,
                         usage_problem=usage_problem, cost_text=cost_text,
                         choices=views.filter_choices(self.store), link=link)

    def run(self, request: Request) -> Response:
        from projections.replay import dialect_of, replay, tail_notes, unreadable_tail

        sid = self.resolve(request.path_params["stream_id"])
        if sid != request.path_params["stream_id"]:  # a task id: send to the stream's own address
            return RedirectResponse(f"/runs/{urllib.parse.quote(sid, safe='')}", status_code=303)
        dialect = dialect_of(self.store, sid)
        q = request.query_params
        after = _int_param(q, "after", 0) or 0
        rows = views.timeline(self.store, sid, dialect, after=after, limit=TIMELINE_PAGE)
        latest = self.store.stream_version(sid)
        version = _int_param(q, "version", latest)
        v_from, v_to = _int_param(q, "from"), _int_param(q, "to")
        fresh = _fresh(q)
        state = diff = tree = None
        problem = None
        try:  # a stream whose events no dialect folds (free-form `append` types) still has a timeline
            state = replay(self.store, sid, upto_version=version, use_cache=not fresh)
            tree = views.json_tree(state.doc)
            if v_from is not None and v_to is not None:
                a = replay(self.store, sid, upto_version=v_from, use_cache=not fresh).doc
                b = replay(self.store, sid, upto_version=v_to, use_cache=not fresh).doc
                diff = {"from": v_from, "to": v_to, "ops": documents.diff(a, b), "rows": views.side_by_side(a, b)}
        except EvstoreError as exc:
            problem = str(exc)
        shown = version if state is None else state.version
        source = views.source_of(rows, shown) if shown is not None and shown > after else None
        notices = tail_notes(unreadable_tail(self.store, sid, state.version)) if state is not None else []
        run_path = "/runs/" + urllib.parse.quote(sid, safe="")
        usage, usage_problem = self.usage_of([sid], detail=True)
        story = conversation_items = None
        if after == 0:  # the first page of a run: what happened, with the sessions that wrote it
            from projections import timeline as tl

            if tl.is_session(self.store, sid):
                conversation_items = views.items_html(tl.conversation(self.store, sid))
            else:
                items = tl.task_timeline(self.store, sid)
                if any(i.kind not in ("state", "event") for i in items):  # sessions or commits to interleave
                    story = views.items_html(items)
        return self.page("run.html", title=sid, sid=sid, usage=usage.get(sid), usage_problem=usage_problem,
                         story=story, conversation=conversation_items,
                         cost_text=cost_text, dialect=dialect.name, rows=rows, latest=latest,
                         timeline_html=views.timeline_html(rows, run_path), options=views.version_options,
                         after=after, more=after + len(rows) < latest, page_size=TIMELINE_PAGE,
                         version=shown, state=state, tree=tree, diff=diff, source=source, problem=problem,
                         notices=notices,
                         quote=lambda s: urllib.parse.quote(s, safe=""), live_poll=self.cfg.live_poll,
                         fresh_link=f"{run_path}?" + urllib.parse.urlencode({**q, "fresh": 1}))

    def search(self, request: Request) -> Response:
        from projections.search import search

        q = request.query_params
        query = (q.get("q") or "").strip()
        filters = {k: (q.get(k) or None) for k in ("dialect", "stream", "type", "since")}
        hits, problem = [], None
        if query:
            try:
                hits = search(self.store, query, dialect=filters["dialect"], stream=filters["stream"],
                              type=filters["type"], since=filters["since"],
                              limit=_int_param(q, "limit", 50, minimum=1) or 50)
            except EvstoreError as exc:
                if request.url.path.startswith("/api/"):
                    raise
                problem = str(exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"query": query, "hits": [h.to_dict() for h in hits]})
        return self.page("search.html", title=f"Search: {query}" if query else "Search", query=query,
                         filters=filters, hits=hits, problem=problem, snippet=views.snippet_html,
                         hit_link=views.hit_link)

    def run_metrics(self, request: Request) -> Response:
        sid = self.resolve(request.path_params["stream_id"])
        return self.metrics_page(None, sid, sid, f"Metrics of {sid}")

    def metrics(self, request: Request) -> Response:
        filters = views.RunFilters.from_query(request.query_params)
        run_id = request.query_params.get("run")
        sid = self.resolve(run_id) if run_id else None
        if request.url.path.startswith("/api/"):
            from projections import metrics as metrics_module
            from projections import report as report_module
            from projections.metrics import code_digest
            from projections.report import compact_json, compact_json_pieces

            # the bytes JSONResponse would send, in pieces: after new events a section taken from the report
            # before is its text in that report's answer
            text = self.metrics_rendered(filters, sid, f"api-{code_digest(metrics_module.__file__, report_module.__file__)}",
                                         lambda r: compact_json(r.to_dict()),
                                         lambda r, known: compact_json_pieces(r.to_dict(), known))
            return Response(text, media_type="application/json")
        return self.metrics_page(filters, sid, None, "Metrics")

    def coverage(self, request: Request) -> Response:
        from projections.coverage import coverage, identity_text

        rows = coverage(self.store)
        if request.url.path.startswith("/api/"):
            return JSONResponse([r.to_dict() for r in rows])
        return self.page("coverage.html", title="Coverage", rows=rows, identity=identity_text,
                         quote=lambda s: urllib.parse.quote(s, safe=""))

    def integrity(self, request: Request) -> Response:
        page_no = _int_param(request.query_params, "page", 1, minimum=1) or 1
        streams, total = self.checks.streams(self.store, page=page_no)
        state = self.checks
        recorded = views.checkpoint_rows(self.store)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"verified_at": state.verified_at,
                                 "report": None if state.report is None else state.report.to_dict(),
                                 "seal": state.seal(), "checkpoints": recorded, "streams": streams, "total": total,
                                 "page": page_no})
        proof, problem = None, None
        params = request.query_params
        if params.get("stream") or params.get("event_id"):
            try:
                proof = self._inclusion(params)
            except HTTPError as exc:
                problem = exc.message
        return self.page("integrity.html", title="Integrity", state=state, seal=state.seal(),
                         streams=streams, total=total, page_no=page_no, pages=max(1, -(-total // 200)),
                         checkpoints=recorded, proof=proof, problem=problem, asked=params)

    def _latest_note(self) -> str:
        from eventstore import checkpoints

        latest = checkpoints.latest_checkpoint(self.store)
        if latest is None:
            raise HTTPError(404, "no checkpoint is recorded in this store yet; make one with `evstore checkpoint "
                                 "--key-file PREFIX.key --out FILE`.")
        return latest.note

    def api_checkpoint(self, request: Request) -> Response:
        """The latest recorded checkpoint, as the signed note text (C2SP tlog-checkpoint)."""
        return Response(self._latest_note(), media_type="text/plain; charset=utf-8")

    def _inclusion(self, params: Any) -> dict[str, Any]:
        from eventstore import checkpoints
        from eventstore.errors import ProofError

        event_id, stream = params.get("event_id") or None, params.get("stream") or None
        version = _int_param(params, "version", None, minimum=1)
        if event_id is None and (stream is None or version is None):
            raise HTTPError(400, 'give "stream" and "version", or "event_id".')
        note = self._latest_note()
        try:
            proof = checkpoints.inclusion(self.store, note, stream_id=None if event_id else stream,
                                          version=None if event_id else version, event_id=event_id)
        except StreamNotFound as exc:
            raise HTTPError(404, str(exc)) from exc
        except ProofError as exc:
            raise HTTPError(409, str(exc)) from exc
        return checkpoints.to_json(proof)

    def api_inclusion(self, request: Request) -> Response:
        """An event's inclusion proof in the latest recorded checkpoint (the file `evstore prove` writes)."""
        return JSONResponse(self._inclusion(request.query_params))

    def api_consistency(self, request: Request) -> Response:
        """The consistency proof between two recorded checkpoints, by tree size (``new``: the latest)."""
        from eventstore import checkpoints
        from eventstore.errors import ProofError

        old = _int_param(request.query_params, "old", None, minimum=0)
        if old is None:
            raise HTTPError(400, 'give "old", the tree size of an earlier recorded checkpoint.')
        new = _int_param(request.query_params, "new", None, minimum=0)
        notes = {}
        for what, size in (("old", old), ("new", new)):
            found = checkpoints.recorded_checkpoints(self.store, tree_size=size, limit=1) if size is not None \
                else checkpoints.recorded_checkpoints(self.store, limit=1)
            if not found:
                raise HTTPError(404, f"no checkpoint of size {size} is recorded here (`evstore checkpoint` records "
                                     f"each one it makes)." if size is not None else "no checkpoint is recorded yet.")
            notes[what] = found[0].note
        try:
            proof = checkpoints.consistency(self.store, notes["old"], notes["new"])
        except ProofError as exc:
            raise HTTPError(409, str(exc)) from exc
        return JSONResponse(checkpoints.to_json(proof))

    # -- JSON API ---------------------------------------------------------------

    def api_events(self, request: Request) -> Response:
        from projections.replay import dialect_of

        sid = self.resolve(request.path_params["stream_id"])
        after = _int_param(request.query_params, "after", 0)
        limit = _int_param(request.query_params, "limit", None, minimum=1)
        upto = None if limit is None else min((after or 0) + limit, MAX_INT_PARAM)
        found = writers(self.store, sid)
        dialect = dialect_of(self.store, sid)
        out = []
        for rec in self.store.read_stream(sid, after_version=after, upto_version=upto):
            row = rec.to_dict()  # as `evstore log --json`: what the dialect stored out of line put back
            if rec.erased:  # purged or erased: the header, and when and why
                from eventstore.erasure import describe, explain

                out.append({**row, "erasure": describe(explain(self.store, [rec.position]).get(rec.position))})
                continue
            row["data"] = dialect.shown_data(rec.type, row["data"], blob=self.store.read_blob)
            if rec.version in found:  # as `evstore log --json`: who wrote this state version
                row["written_by"] = found[rec.version].to_dict()
            out.append(row)
        return JSONResponse(out)

    def api_state(self, request: Request) -> Response:
        from projections.replay import replay

        sid = self.resolve(request.path_params["stream_id"])
        result = replay(self.store, sid, upto_version=_int_param(request.query_params, "version"),
                        use_cache=not _fresh(request.query_params))
        return JSONResponse({"stream": sid, "dialect": result.dialect, "version": result.version,
                             "stream_version": result.stream_version, "doc": result.doc,
                             "cached_from": result.cached_from})

    def api_diff(self, request: Request) -> Response:
        from projections.replay import diff_versions

        sid = self.resolve(request.path_params["stream_id"])
        v_from, v_to = _int_param(request.query_params, "from"), _int_param(request.query_params, "to")
        if v_from is None or v_to is None:
            raise HTTPError(400, 'query parameters "from" and "to" (versions) are required.')
        return JSONResponse(diff_versions(self.store, sid, v_from, v_to))

    def write_grant(self, headers: Any) -> tuple[Grant | None, bytes | None]:
        """An append's grant from this worker's remembered tokens (no database read: the append's
        transaction checks the token again, :mod:`projections.serve.grouping`), with the token's
        digest; ``(None, None)`` when it is none of them."""
        given = Policy._given(headers, basic=False)
        if not given or self.policy._match(given) is not None:  # the server's own token: no lookup anyway
            return None, None
        hit = self.grants.cached(given)
        return (None, None) if hit is None else hit

    def prepare(self, stream_id: str, body: bytes, writer: dict[str, Any]) -> GroupAppend:
        """The append a request's body asks for, its events stamped with their writer."""
        events, expected, blobs, dialect = parse_append(body)
        with stamped({"sent_by": writer}):
            return GroupAppend.of(stream_id, events, expected_version=expected, blobs=blobs, dialect=dialect)

    #: A body up to this size is parsed on the event loop (about 0.5 ms for 20 events): a hop to the
    #: database threads and back would cost two thread wake-ups, on a busy machine each a wait for a core.
    PARSE_INLINE = 64 * 1024

    async def append(self, stream_id: str, body: bytes, writer: dict[str, Any], token: bytes | None) -> Response:
        """Parse (a large body on the database threads), then append in the next group (``token``: the
        digest of the named token to check again in the group's transaction)."""
        item = self.prepare(stream_id, body, writer) if len(body) <= self.PARSE_INLINE else \
            await self.call(self.prepare, stream_id, body, writer)
        if self._committer is None:
            self._committer = Committer(self.store, self.grants)
        r: AppendResult = await asyncio.wrap_future(self._committer.submit(item, token))
        return JSONResponse({"stream": r.stream_id, "version": r.version, "positions": r.positions,
                             "duplicate": r.duplicate}, status_code=200 if r.duplicate else 201)

    def record_hook(self, dialect: Any, body: bytes, writer: dict[str, Any]) -> Response:
        """``POST /hooks/<dialect.http_hook>``: one http hook call, recorded by its dialect
        (:meth:`~eventstore.dialects.base.Dialect.record_http_hook`).  A body that is no hook call is
        a ``400`` JSON error (nothing written); the answer has no body, only the dialect's headers."""
        key = dialect.http_hook_key(body)  # InvalidEvent (400) naming the problem; nothing written
        # One call of a session at a time: a transcript update appends at the session stream's
        # version, which every hook event of that session moves on; without this, a burst of one
        # session's calls keeps a Stop retrying.  (Other processes' writes are met by its retries.)
        with self._locks_lock:
            lock = self._session_locks.get(f"{dialect.http_hook}/{key}")
            if lock is None:
                lock = self._session_locks[f"{dialect.http_hook}/{key}"] = threading.Lock()
        with lock, stamped({"sent_by": writer}):
            answer = dialect.record_http_hook(self.store, body, files=self.cfg.hook_files)
        for problem in answer.warnings:
            log.warning("POST /hooks/%s: %s", dialect.http_hook, problem)
        return Response(status_code=answer.status, headers=answer.headers)

    def verify(self, request: Request, *, html: bool) -> Response:
        report = self.checks.run_verify(self.store)
        if html:
            return RedirectResponse("/integrity", status_code=303)
        return JSONResponse(report.to_dict(), status_code=200 if report.ok else 409)

    async def live(self, request: Request) -> StreamingResponse:
        """Server-sent events: the run's new events as they are appended (polling the log)."""
        from projections.replay import dialect_of

        sid = await self.call(self.resolve, request.path_params["stream_id"])
        dialect = await self.call(dialect_of, self.store, sid)
        last = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        after = _int_param({"after": last}, "after", 0) or 0

        async def stream() -> AsyncIterator[str]:
            nonlocal after
            yield "retry: 2000\n\n"
            idle = 0.0
            while not self.stopping.is_set() and not await request.is_disconnected():
                rows = await self.call(views.timeline, self.store, sid, dialect, after=after, limit=500)
                if rows:
                    after = rows[-1].version
                    for chunk in views.iter_sse(rows):
                        yield chunk
                    idle = 0.0
                    continue
                if idle >= 15:  # a comment keeps proxies from closing an idle stream
                    yield ": ping\n\n"
                    idle = 0.0
                try:
                    await asyncio.wait_for(self.stopping.wait(), self.cfg.live_poll)
                except TimeoutError:
                    idle += self.cfg.live_poll

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path.startswith("/hooks/")


def hook_dialects() -> list[Any]:
    """The dialects that receive http hooks (``Dialect.http_hook``), in name order."""
    from eventstore.dialects import available, get_dialect

    return [d for d in (get_dialect(name) for name in available()) if d.http_hook]


def create_app(cfg: ServeConfig) -> Starlette:
    """The ASGI application for ``cfg`` (opens the store; closed on shutdown)."""
    server = Server(cfg)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                await server.allowed(request, "read")
                return await server.call(handler, request)
            except (HTTPError, EvstoreError) as exc:
                return error_response(request, exc)
        return endpoint

    def error_response(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPError):
            status, message, headers = exc.status, exc.message, exc.headers
        else:
            status, message, headers = _status_of(exc), str(exc), {}  # type: ignore[arg-type]
        if _wants_json(request):
            body: dict[str, Any] = {"error": message, "status": status}
            if isinstance(exc, ConcurrencyError):  # what a client needs to re-read and retry
                body["stream_version"] = exc.actual
            return JSONResponse(body, status_code=status, headers=headers)
        response = server.page("error.html", status, title=f"Error {status}", code=status, message=message)
        response.headers.update(headers)  # a page's 401 carries its challenge: the browser asks for the token
        return response

    async def append_endpoint(request: Request) -> Response:
        try:
            grant, key = server.write_grant(request.headers)  # a token this worker knows: checked at the commit
            if grant is None:
                grant = await server.allowed(request, "write")
                if grant is not None and not grant.secret:  # a named token: checked again at the commit too
                    key = tokens.digest(Policy._given(request.headers, basic=False) or "")
            writer = sent_by(grant, request.headers)
            body = await server.read_body(request)
            return await server.append(request.path_params["stream_id"], body, writer, key)
        except (HTTPError, EvstoreError) as exc:
            return error_response(request, exc)

    async def verify_endpoint(request: Request) -> Response:
        html = not request.url.path.startswith("/api/")
        try:
            form_token: str | None = None
            if html:  # the integrity page's form posts the token as a field
                body = await server.read_body(request)
                tokens = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("token")
                form_token = tokens[0] if tokens else None
            await server.allowed(request, "write", form_token)
            return await server.call(server.verify, request, html=html)
        except (HTTPError, EvstoreError) as exc:
            return error_response(request, exc)

    def hook_endpoint(dialect: Any) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                grant = await server.allowed(request, "write")
                writer = sent_by(grant, request.headers)
                body = await server.read_body(request)
                return await server.call(server.record_hook, dialect, body, writer)
            except (HTTPError, EvstoreError) as exc:
                return error_response(request, exc)
            except Exception:  # an agent's hook gets a JSON answer, never a traceback; the log gets it
                log.exception("POST %s failed", request.url.path)
                return JSONResponse({"error": "the hook call could not be recorded (see the server's log); retry it",
                                     "status": 503}, status_code=503, headers={"retry-after": "1"})
        return endpoint

    async def live_endpoint(request: Request) -> Response:
        try:
            await server.allowed(request, "read")
            return await server.live(request)
        except (HTTPError, EvstoreError) as exc:
            return error_response(request, exc)

    async def openapi(request: Request) -> Response:
        from projections.serve.openapi import spec

        try:
            await server.allowed(request, "read")
        except (HTTPError, EvstoreError) as exc:
            return error_response(request, exc)
        return JSONResponse(spec())

    async def healthz(request: Request) -> Response:
        """For load balancers: 200 when the store answers (one cheap read), else 503; no token needed
        and nothing about the store shown."""
        try:
            await server.call(server.store.stream_version, tokens.ADMIN_STREAM)
        except Exception as exc:  # noqa: BLE001 - any failure is "not healthy"; the log says which
            log.warning("GET /healthz: the store does not answer: %s", exc)
            return JSONResponse({"status": "unavailable"}, status_code=503, headers={"cache-control": "no-store"})
        return JSONResponse({"status": "ok"}, headers={"cache-control": "no-store"})

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(request, HTTPError(404, f"nothing at {request.url.path}"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        drainer = server.drainer
        draining = asyncio.create_task(drainer.run(), name="evstore-drain") if drainer is not None else None
        try:
            yield
        finally:
            server.stopping.set()
            if drainer is not None and draining is not None:
                drainer.close()  # the drain in progress stops after its current record
                await draining
                drainer.shutdown()
            if server._committer is not None:
                await asyncio.get_running_loop().run_in_executor(None, server._committer.close)
            server.pool.shutdown(wait=True, cancel_futures=True)
            server.store.close()

    routes = [
        Route("/", guarded(server.runs)),
        Route("/runs/{stream_id:path}/metrics", guarded(server.run_metrics)),
        Route("/runs/{stream_id:path}/live", live_endpoint),
        Route("/runs/{stream_id:path}", guarded(server.run)),
        Route("/metrics", guarded(server.metrics)),
        Route("/search", guarded(server.search)),
        Route("/api/search", guarded(server.search)),
        Route("/integrity", guarded(server.integrity)),
        Route("/coverage", guarded(server.coverage)),
        Route("/integrity/verify", verify_endpoint, methods=["POST"]),
        Route("/api/runs", guarded(server.runs)),
        Route("/api/runs/{stream_id:path}/events", guarded(server.api_events)),
        Route("/api/runs/{stream_id:path}/state", guarded(server.api_state)),
        Route("/api/runs/{stream_id:path}/diff", guarded(server.api_diff)),
        Route("/api/runs/{stream_id:path}/live", live_endpoint),
        Route("/api/metrics", guarded(server.metrics)),
        Route("/api/integrity", guarded(server.integrity)),
        Route("/api/coverage", guarded(server.coverage)),
        Route("/api/verify", verify_endpoint, methods=["POST"]),
        Route("/api/checkpoint", guarded(server.api_checkpoint)),
        Route("/api/proofs/inclusion", guarded(server.api_inclusion)),
        Route("/api/proofs/consistency", guarded(server.api_consistency)),
        Route("/api/streams/{stream_id:path}/events", append_endpoint, methods=["POST"]),
        *(Route(f"/hooks/{d.http_hook}", hook_endpoint(d), methods=["POST"]) for d in hook_dialects()),
        Route("/openapi.json", openapi),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found},
                    middleware=[Middleware(SecurityHeaders),
                                Middleware(HostCheck, policy=server.policy, refuse=error_response)])
    app.state.server = server
    return app


def preload(options: dict[str, Any]) -> None:
    """Import what a worker of ``evstore serve --workers N`` imports to serve (uvicorn's protocol, lifespan
    and event loop, the store's PostgreSQL and SQLite code, the append path, every dialect), in the
    parent before it forks, so that the workers share them instead of each importing them again.  Opens
    nothing: no connection, no thread, no event loop."""
    import importlib

    import uvicorn

    from eventstore.dialects import available

    for name in ("eventstore.backends.postgres", "eventstore.backends.sqlite", "projections.runs",
                 "projections.serve.grouping"):
        importlib.import_module(name)
    available()  # the dialects' modules and event catalogs (a run's page and the runs index use them)

    async def nothing(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never served
        return None

    config = uvicorn.Config(nothing, **options)
    config.load()  # the HTTP protocol and lifespan modules
    config.get_loop_factory()  # the event loop's module (a factory: no loop made)


__all__ = ["CSP", "ServeConfig", "create_app", "is_loopback", "parse_append", "preload"]
