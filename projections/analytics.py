"""Analytics: domain events flattened into columnar tables, written as Parquet, read by DuckDB.

An async, checkpointed projection.  :func:`refresh` reads the log after the checkpoint (position
order, so the cost depends on the new events only), turns every domain event into rows of a
few *fact tables* (:data:`SCHEMAS`), and writes one Parquet file per table and refresh.  The
views the issue names (``runs``, ``phases``, ``review_findings``, ``review_deltas``, ...) are
DuckDB views over those facts (:data:`VIEWS`): they pick the latest state of an iteration, pair
questions with answers, and so on, at query time.

Why facts + views: flattening is *stateless* (each event maps to rows on its own), so applying
events in one batch or in a hundred gives byte-for-byte the same facts, and "incremental ==
rebuild" holds by construction; anything that needs history (latest iteration entry, previous
delta, next answer) is a window function over the facts.

Exactly once, without a database transaction (Parquet lives in a directory):

* every data file is named after the position range it covers plus a random suffix
  (``<table>/part-<after>-<upto>-<rand>.parquet``, never rewritten in place) and written to a
  temporary name, then renamed;
* ``manifest.json`` is the checkpoint *and* the list of live files; it is replaced atomically
  (a uniquely named temporary file, fsync, ``os.replace``) only after every file it lists is in
  place; a refresh writes facts every :data:`FLUSH_EVENTS` events, so memory stays bounded;
* readers (the views) open exactly the files the manifest lists, so a crash between the data
  files and the manifest leaves orphans that nobody reads; the next refresh deletes files the
  manifest does not list before it writes, and re-applies the same positions.

Bound to one store's log: the manifest names the store's identity (:meth:`EventStore.store_id`),
its checkpoint position and the hash of the event there.  Tables of another store, of a deleted
and recreated store, or of a log that no longer has that event are rebuilt by a refresh and
refused by a reader (:func:`mismatch`).  The default directory is the store's own
(:func:`eventstore.config.analytics_directory`), never the working directory's.

Several processes at once: one refresh writes at a time (an inter-process lock file,
:data:`LOCK`); readers take no lock.  A reader opens every file its manifest lists and DuckDB
reads them through those descriptors, so a refresh may delete files a newer manifest no longer
lists (compaction, rebuild) while a query still reads them (:func:`connect`).

Compaction: when a table has more than :data:`COMPACT_AT` *small* files (under
:data:`SMALL_ROWS` rows), they are merged into one file named after their combined range; big
files are never rewritten, so a refresh's cost does not grow with the store's size.  A new
manifest lists the merged file, then the small files are deleted.

Bumping :data:`FLATTEN_VERSION` rebuilds: a manifest with another version is discarded.

    >>> result = refresh(store)                   # writes the store's analytics directory
    >>> with reading(store) as con:               # DuckDB, views registered, checked against the log
    ...     con.sql("SELECT model, count(*) FROM review_findings GROUP BY ALL").fetchall()
"""

from __future__ import annotations

import datetime as dt
import decimal
import errno
import json
import os
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock

from eventstore import codec, config
from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent
from projections.engine import gc_paused

FLATTEN_VERSION = 1
NAME = "analytics"
MANIFEST = "manifest.json"
#: Held (exclusively, across processes) by the one refresh that may write a directory at a time.
LOCK = ".refresh.lock"
#: A refresh writes the facts of this many events at a time (bounded memory for any backlog).
FLUSH_EVENTS = 100_000
#: A table with more small files than this is compacted at the end of a refresh.
COMPACT_AT = 16
#: Files with fewer rows than this count as small (merged by compaction).
SMALL_ROWS = 200_000
DIALECTS = ("mapipe", "friday", "taskflow", "envelope", "generic")

_decode = codec.decode

S, I, B, F, T = pa.string(), pa.int64(), pa.bool_(), pa.float64(), pa.timestamp("us", tz="UTC")  # noqa: E741 - column-type shorthands


def _schema(*cols: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field("position", I), pa.field("stream_id", S), *[pa.field(n, t) for n, t in cols]])


#: The fact tables (one row per fact an event states; ``position`` = the event's position).
SCHEMAS: dict[str, pa.Schema] = {
    "events": _schema(("version", I), ("type", S), ("dialect", S), ("occurred_at", T), ("recorded_at", T)),
    "run_attrs": _schema(("attr", S), ("value", S)),
    "phase_events": _schema(("dialect", S), ("phase", S), ("kind", S), ("status", S), ("model", S),
                            ("retry_count", I), ("sub_step", S), ("started_at", T), ("finished_at", T),
                            ("occurred_at", T)),
    "review_iteration_events": _schema(("idx", I), ("iteration", I), ("decision", S), ("has_map", B),
                                       ("reviewers", I), ("raised", I), ("distinct_findings", I),
                                       ("accepted", I), ("blocking", I), ("important", I), ("suggestion", I),
                                       ("occurred_at", T)),
    "review_raised": _schema(("idx", I), ("reviewer", I), ("model", S), ("fingerprint", S), ("severity", S),
                             ("file", S)),
    "review_accepted": _schema(("idx", I), ("fingerprint", S)),
    "review_delta_events": _schema(("idx", I), ("previous_iteration", I), ("new", I), ("still_present", I),
                                   ("resolved", I), ("downgraded", I), ("still_present_blocking", I),
                                   ("plateau_recorded", B), ("tripped", B), ("max_recurrence", I),
                                   ("occurred_at", T)),
    "review_delta_items": _schema(("idx", I), ("kind", S), ("fingerprint", S), ("severity", S), ("file", S),
                                  ("recurrence", I)),
    "review_decision_events": _schema(("idx", I), ("verdict", S), ("approved", B)),
    "gate_events": _schema(("dialect", S), ("gate", S), ("verdict", S), ("verdict_at", T), ("sha", S), ("occurred_at", T)),
    "breaker_events": _schema(("kind", S), ("trigger", I), ("detail", S), ("phase", S), ("step", S),
                              ("iteration", I), ("tripped_at", T), ("counters", S), ("occurred_at", T)),
    "question_events": _schema(("kind", S), ("question_id", S), ("step_id", S), ("event_at", T), ("occurred_at", T)),
    "friday_events": _schema(("kind", S), ("agent", S), ("cycle_type", S), ("item_id", S), ("occurred_at", T)),
    "friday_risk": _schema(("recorded", S), ("recorded_int", I), ("computed", I), ("mismatch", B),
                           ("occurred_at", T)),
    "envelope_events": _schema(("kind", S), ("skill", S), ("state", S), ("from_state", S), ("unit_id", S),
                               ("turn", I), ("ok", B), ("occurred_at", T)),
    "taskflow_events": _schema(("kind", S), ("verdict", S), ("parsed_by", S), ("follow_kind", S), ("task", S),
                               ("parent", S), ("occurred_at", T)),
}

# Views over the facts (DuckDB SQL).  Each "latest state" view keeps the newest fact by position.
VIEWS: dict[str, str] = {
    "runs": """
        WITH ev AS (
            SELECT stream_id, max(dialect) AS dialect, min(coalesce(occurred_at, recorded_at)) AS started_at,
                   max(coalesce(occurred_at, recorded_at)) AS last_event_at, count(*) AS events,
                   max(version) AS version
            FROM events GROUP BY stream_id),
        attrs AS (
            SELECT stream_id, attr, arg_max(value, position) AS value FROM run_attrs GROUP BY ALL)
        SELECT ev.stream_id, ev.dialect,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'project') AS project,
               coalesce((SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'task_id'),
                        ev.stream_id) AS task_id,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'title') AS title,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'status') AS status,
               ev.started_at, ev.last_event_at, ev.events, ev.version
        FROM ev""",
    "phases": """
        SELECT stream_id, dialect, phase, started_at, arg_max(finished_at, position) AS finished_at,
               arg_max(status, position) AS status, arg_max(model, position) AS model,
               coalesce(max(retry_count), 0) AS retries,
               count_if(kind = 'failed') AS failures, count_if(kind = 'skipped') > 0 AS skipped,
               CASE WHEN arg_max(status, position) = 'done'
                    THEN epoch(arg_max(finished_at, position)) - epoch(started_at) END AS duration_s
        FROM phase_events WHERE dialect = 'mapipe' AND started_at IS NOT NULL GROUP BY stream_id, dialect, phase, started_at
        UNION ALL
        SELECT stream_id, dialect, phase, occurred_at AS started_at, next_at AS finished_at,
               CASE WHEN next_at IS NULL THEN 'in_progress' ELSE 'done' END AS status, NULL AS model, 0 AS retries,
               0 AS failures, false AS skipped, epoch(next_at) - epoch(occurred_at) AS duration_s
        FROM (SELECT *, lead(occurred_at) OVER (PARTITION BY stream_id ORDER BY position) AS next_at
              FROM phase_events WHERE dialect = 'taskflow')""",
    "review_iterations": """
        SELECT it.*, d.verdict AS decision_verdict, d.approved
        FROM (SELECT * FROM review_iteration_events
              QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1) it
        LEFT JOIN (SELECT * FROM review_decision_events
                   QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1) d
          USING (stream_id, idx)""",
    "review_findings": """
        SELECT it.stream_id, it.iteration, it.idx, r.reviewer, r.model, r.fingerprint, r.severity, r.file,
               it.has_map, a.fingerprint IS NOT NULL AS accepted
        FROM review_iterations it
        JOIN review_raised r ON r.stream_id = it.stream_id AND r.position = it.position AND r.idx = it.idx
        LEFT JOIN review_accepted a ON a.stream_id = it.stream_id AND a.position = it.position
             AND a.idx = it.idx AND a.fingerprint = r.fingerprint""",
    "review_deltas": """
        WITH d AS (
            SELECT * FROM review_delta_events
            QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1),
        still AS (
            SELECT stream_id, idx, position, list_sort(list(fingerprint)) AS fps
            FROM review_delta_items WHERE kind = 'stillPresent' GROUP BY ALL),
        j AS (
            SELECT d.*, coalesce(it.iteration, d.idx + 1) AS iteration, coalesce(s.fps, []) AS still_fps
            FROM d LEFT JOIN still s USING (stream_id, idx, position)
            LEFT JOIN review_iterations it USING (stream_id, idx))
        SELECT stream_id, iteration, idx, new, still_present, resolved, downgraded, still_present_blocking,
               CASE WHEN resolved + still_present + downgraded > 0
                    THEN resolved / (resolved + still_present + downgraded) END AS resolution_rate,
               coalesce(len(still_fps) > 0 AND still_fps = lag(still_fps) OVER w, false) AS plateau,
               plateau_recorded, tripped, max_recurrence, position
        FROM j WINDOW w AS (PARTITION BY stream_id ORDER BY iteration)""",
    "review_recurrence": """
        SELECT i.stream_id, i.idx, i.fingerprint, i.severity, i.file, i.recurrence
        FROM review_delta_items i JOIN review_deltas d USING (stream_id, idx, position)
        WHERE i.kind = 'recurrence'""",
    "gates": """
        SELECT stream_id, dialect, gate, verdict, verdict_at, sha, occurred_at, position,
               row_number() OVER (PARTITION BY stream_id, gate ORDER BY position) AS attempt
        FROM gate_events""",
    "breaker_trips": """
        SELECT stream_id, trigger, detail, phase, step, iteration, tripped_at, counters, occurred_at, position
        FROM breaker_events WHERE kind = 'tripped'""",
    "questions": """
        WITH asked AS (
            SELECT stream_id, question_id, step_id, event_at AS asked_at, min(position) AS position
            FROM question_events WHERE kind = 'asked' AND question_id IS NOT NULL GROUP BY ALL),
        answered AS (SELECT * FROM question_events WHERE kind = 'answered'),
        pairs AS (
            SELECT q.stream_id, q.question_id, q.step_id, q.asked_at, q.position,
                   arg_min(a.event_at, a.position) AS answered_at
            FROM asked q LEFT JOIN answered a ON a.stream_id = q.stream_id AND a.question_id = q.question_id
                 AND a.position > q.position
            GROUP BY ALL)
        SELECT stream_id, question_id, step_id, asked_at, answered_at,
               epoch(answered_at) - epoch(asked_at) AS latency_s, position
        FROM pairs""",
    "friday_cycles": """
        WITH e AS (
            SELECT *, sum(CASE WHEN kind = 'cycle_opened' THEN 1 ELSE 0 END)
                      OVER (PARTITION BY stream_id ORDER BY position) AS cycle_no
            FROM friday_events)
        SELECT stream_id, cycle_no, arg_min(agent, position) AS agent, arg_min(cycle_type, position) AS cycle_type,
               min(occurred_at) AS opened_at, max(occurred_at) FILTER (WHERE kind = 'cycle_closed') AS closed_at,
               1 + count_if(kind = 'report') AS rounds, count_if(kind = 'question') AS questions,
               count_if(kind = 'answer') AS answers, count_if(kind = 'cycle_closed') > 0 AS closed
        FROM e WHERE cycle_no > 0 GROUP BY stream_id, cycle_no""",
    "envelope_turns": """
        SELECT stream_id, position, kind, skill, state, from_state, unit_id, turn, ok, occurred_at
        FROM envelope_events""",
    "taskflow_verdicts": """
        SELECT stream_id, position, verdict, parsed_by, occurred_at FROM taskflow_events
        WHERE kind IN ('verdict', 'unparseable')""",
    "taskflow_follow_ups": """
        SELECT stream_id, position, follow_kind AS kind, task, parent, occurred_at FROM taskflow_events
        WHERE kind = 'follow_up'""",
}


# ---------------------------------------------------------------- flattening


def _ts(value: Any) -> datetime | None:
    if type(value) is not str or not value:
        return None
    try:
        ts = datetime.fromisoformat(value)  # Python 3.11+ reads the "Z" suffix itself
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else None


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _i(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _b(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _fp(item: Any) -> str | None:
    """A finding's fingerprint: a string entry, or an object's ``fingerprint``."""
    return item if isinstance(item, str) else _s(_d(item).get("fingerprint"))


Rows = dict[str, list[tuple[Any, ...]]]


class Flattener:
    """Turns recorded events into fact rows (stateless: see the module docstring)."""

    def __init__(self) -> None:
        self.rows: Rows = {name: [] for name in SCHEMAS}
        self._recorded: tuple[str, datetime | None] = ("", None)  # one value per append transaction

    def add_one(self, e: RecordedEvent) -> None:
        dialect = None
        if e.meta != b"{}":
            dialect = _s(_d(_decode(e.meta)).get("dialect"))
        if not dialect:
            prefix = e.type.split(".", 1)[0]
            dialect = prefix if prefix in DIALECTS else None
        occurred = _ts(e.occurred_at)
        if e.recorded_at != self._recorded[0]:
            self._recorded = (e.recorded_at, _ts(e.recorded_at))
        self.rows["events"].append((e.position, e.stream_id, e.version, e.type, dialect, occurred,
                                    self._recorded[1]))
        handler = _HANDLERS.get(e.type)
        if handler is not None:
            handler(self.rows, e, _d(_decode(e.data)), occurred)
        elif e.type == "document.observed" and dialect in ("mapipe", "friday"):
            # A run's first snapshot is recorded whole when no domain event explains it: read
            # it as the dialect's "run started" event (RunStarted / StateInitialised) would carry it.
            doc = _d(_decode(e.data)).get("doc")
            if dialect == "mapipe":
                _run_started(self.rows, e, {"state": doc}, occurred)
            else:
                _f_init(self.rows, e, {"doc": doc}, occurred)

    def tables(self) -> dict[str, pa.Table]:
        out = {}
        for name, schema in SCHEMAS.items():
            cols: list[Sequence[Any]] = list(zip(*self.rows[name], strict=True)) if self.rows[name] else [
                [] for _ in schema]
            out[name] = pa.table([pa.array(list(c), type=f.type) for c, f in zip(cols, schema, strict=True)],
                                 schema=schema)
        return out


Handler = Callable[[Rows, RecordedEvent, dict[str, Any], "datetime | None"], None]
_HANDLERS: dict[str, Handler] = {}


def _on(*types: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for t in types:
            _HANDLERS[t] = fn
        return fn
    return deco


def _attr(rows: Rows, e: RecordedEvent, attr: str, value: Any) -> None:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        rows["run_attrs"].append((e.position, e.stream_id, attr, str(value)))


# -- mapipe


def _phase_row(rows: Rows, e: RecordedEvent, phase: str, kind: str, rec: dict[str, Any], at: datetime | None) -> None:
    rows["phase_events"].append((e.position, e.stream_id, "mapipe", phase, kind, _s(rec.get("status")),
                                 _s(rec.get("model")), _i(rec.get("retryCount")), _s(rec.get("subStep")),
                                 _ts(rec.get("startedAt")), _ts(rec.get("finishedAt")), at))


@_on("mapipe.run_started")
def _run_started(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    state = _d(p.get("state"))
    for key, attr in (("project", "project"), ("taskId", "task_id"), ("title", "title"), ("status", "status")):
        _attr(rows, e, attr, state.get(key))
    for phase, rec in _d(state.get("phases")).items():
        _phase_row(rows, e, phase, "started", _d(rec), at)


@_on("mapipe.run_status_changed")
def _run_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("mapipe.phase_started", "mapipe.phase_updated", "mapipe.phase_completed", "mapipe.phase_skipped",
     "mapipe.phase_failed")
def _phase(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    kind = e.type.split("_", 1)[1] if "_" in e.type else e.type
    _phase_row(rows, e, str(p.get("phase")), kind, _d(p.get("record")), at)


def _iteration(rows: Rows, e: RecordedEvent, idx: int, it: dict[str, Any], at: datetime | None) -> None:
    raised_total = 0
    distinct: set[str] = set()
    for r_i, reviewer in enumerate(_l(it.get("reviewers"))):
        rv = _d(reviewer)
        model = _s(rv.get("model")) or "unknown"
        seen: set[str] = set()  # one row per reviewer x distinct fingerprint
        for finding in _l(rv.get("findings")):
            fp = _fp(finding)
            if fp is None or fp in seen:
                continue
            seen.add(fp)
            f = _d(finding)
            rows["review_raised"].append((e.position, e.stream_id, idx, r_i, model, fp, _s(f.get("severity")),
                                          _s(f.get("file"))))
        raised_total += len(seen)
        distinct |= seen
    accepted = {fp for fp in (_fp(a) for a in _l(it.get("accepted"))) if fp is not None}
    for fp in sorted(accepted):
        rows["review_accepted"].append((e.position, e.stream_id, idx, fp))
    rows["review_iteration_events"].append((
        e.position, e.stream_id, idx, _i(it.get("iteration")), _s(it.get("decision")),
        isinstance(it.get("anonymizationMap"), dict), len(_l(it.get("reviewers"))), raised_total, len(distinct),
        len(accepted), _i(it.get("blocking")), _i(it.get("important")), _i(it.get("suggestion")), at))
    if isinstance(it.get("delta"), dict):
        _delta(rows, e, idx, it["delta"], at)
    if isinstance(it.get("reviewDecision"), dict):
        _decision(rows, e, idx, it["reviewDecision"])


def _delta(rows: Rows, e: RecordedEvent, idx: int, d: dict[str, Any], at: datetime | None) -> None:
    kinds = ("new", "stillPresent", "resolved", "downgraded", "stillPresentBlocking")
    for kind in kinds:
        for item in _l(d.get(kind)):
            fp = _fp(item)
            if fp is not None:
                f = _d(item)
                rows["review_delta_items"].append((e.position, e.stream_id, idx, kind, fp, _s(f.get("severity")),
                                                   _s(f.get("file")), None))
    recurrence = _d(d.get("recurrence"))
    for fp, cycles in recurrence.items():
        rows["review_delta_items"].append((e.position, e.stream_id, idx, "recurrence", fp, None, None, _i(cycles)))
    counts = [len(_l(d.get(k))) for k in kinds]
    max_rec = max((c for c in (_i(v) for v in recurrence.values()) if c is not None), default=None)
    rows["review_delta_events"].append((e.position, e.stream_id, idx, _i(d.get("previousIteration")), *counts,
                                        _b(d.get("plateau")), _b(d.get("tripped")), max_rec, at))


def _decision(rows: Rows, e: RecordedEvent, idx: int, d: dict[str, Any]) -> None:
    rows["review_decision_events"].append((e.position, e.stream_id, idx, _s(d.get("verdict")), _b(d.get("approved"))))


@_on("mapipe.review_iteration_recorded", "mapipe.review_iteration_updated")
def _review_iteration(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _iteration(rows, e, idx, _d(p.get("iteration")), at)


@_on("mapipe.review_delta_computed")
def _review_delta(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _delta(rows, e, idx, _d(p.get("delta")), at)


@_on("mapipe.review_decision_recorded")
def _review_decision(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _decision(rows, e, idx, _d(p.get("reviewDecision")))


@_on("mapipe.gate_verdict_recorded")
def _gate(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    entry = _d(p.get("entry")) if isinstance(p.get("entry"), dict) else p
    gate, verdict = _s(entry.get("gate")) or _s(p.get("gate")), _s(entry.get("verdict")) or _s(p.get("verdict"))
    rows["gate_events"].append((e.position, e.stream_id, "mapipe", gate, verdict, _ts(entry.get("at")),
                                _s(entry.get("sha")), at))


@_on("mapipe.circuit_breaker_tripped")
def _breaker(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rec = _d(p.get("record")) if isinstance(p.get("record"), dict) else p
    cp = _d(rec.get("checkpoint"))
    phase = cp.get("phase")
    counters = rec.get("counters")
    rows["breaker_events"].append((
        e.position, e.stream_id, "tripped", _i(rec.get("trigger")), _s(rec.get("detail")),
        None if phase is None else str(phase), None if cp.get("step") is None else str(cp.get("step")),
        _i(cp.get("iteration")), _ts(rec.get("trippedAt")),
        None if counters is None else codec.encode(counters).decode(), at))


@_on("mapipe.circuit_breaker_reset")
def _breaker_reset(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["breaker_events"].append((e.position, e.stream_id, "reset", None, None, None, None, None, None, None, at))


@_on("mapipe.question_asked")
def _asked(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    q = p.get("pendingQuestion")
    if isinstance(q, dict):
        rows["question_events"].append((e.position, e.stream_id, "asked", _s(q.get("id")), _s(q.get("stepId")),
                                        _ts(q.get("askedAt")) or at, at))


@_on("mapipe.question_answered")
def _answered(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    a = _d(p.get("lastAnswer"))
    rows["question_events"].append((e.position, e.stream_id, "answered", _s(a.get("questionId")),
                                    _s(a.get("stepId")), _ts(a.get("answeredAt")) or at, at))


# -- friday


def _friday(rows: Rows, e: RecordedEvent, kind: str, at: datetime | None, *, agent: Any = None,
            cycle_type: Any = None, item_id: Any = None) -> None:
    rows["friday_events"].append((e.position, e.stream_id, kind, _s(agent), _s(cycle_type), _s(item_id), at))


@_on("friday.state_initialised")
def _f_init(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    doc = _d(p.get("doc"))
    _attr(rows, e, "status", doc.get("status"))
    _attr(rows, e, "title", doc.get("request_summary"))
    _attr(rows, e, "project", _d(doc.get("context")).get("project"))
    metrics = doc.get("session_metrics")
    if isinstance(metrics, dict):  # the first write already carries metrics: no separate event
        from eventstore.dialects.friday.validate import computed_risk_score

        _f_risk(rows, e, {"risk_score": metrics.get("risk_score"), "computed_risk_score": computed_risk_score(doc)},
                at)


@_on("friday.status_changed")
def _f_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("friday.request_changed")
def _f_request(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "title", p.get("request_summary"))


@_on("friday.context_changed")
def _f_context(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "project", _d(p.get("context")).get("project"))


@_on("friday.cycle_opened")
def _f_open(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "cycle_opened", at, agent=p.get("agent"), cycle_type=p.get("cycle_type"))


@_on("friday.report_received")
def _f_report(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "report", at, agent=p.get("agent"))


@_on("friday.interaction_surfaced")
def _f_question(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    if isinstance(p.get("pending_interaction"), dict):
        _friday(rows, e, "question", at, item_id=p.get("item_id"))


@_on("friday.answer_captured")
def _f_answer(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "answer", at, item_id=p.get("item_id"))


@_on("friday.cycle_closed")
def _f_close(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "cycle_closed", at, agent=p.get("agent"), cycle_type=p.get("cycle_type"))


@_on("friday.session_metrics_recorded")
def _f_risk(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    computed = _i(p.get("computed_risk_score"))
    if computed is None:
        return
    recorded = p.get("risk_score")
    mismatch = not (_i(recorded) is not None and recorded == computed)
    rows["friday_risk"].append((e.position, e.stream_id, codec.encode(recorded).decode(), _i(recorded), computed,
                                mismatch, at))


# -- envelope


def _env(rows: Rows, e: RecordedEvent, kind: str, p: dict[str, Any], at: datetime | None, *,
         ok: bool | None = None) -> None:
    rows["envelope_events"].append((e.position, e.stream_id, kind, _s(p.get("skill")),
                                    _s(p.get("state")) or _s(p.get("to_state")), _s(p.get("from_state")),
                                    _s(p.get("unit_id")), _i(p.get("turn")), ok, at))


@_on("envelope.envelope_emitted")
def _e_emitted(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "accepted", p, at, ok=True)
    _attr(rows, e, "status", p.get("state"))
    _attr(rows, e, "task_id", p.get("unit_id"))
    _attr(rows, e, "title", _d(p.get("envelope")).get("summary"))


@_on("envelope.state_transitioned")
def _e_transition(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "transition", p, at)


@_on("envelope.turn_rejected")
def _e_rejected(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "rejected", p, at, ok=False)


@_on("envelope.repair_attempted")
def _e_repair(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "repair", p, at, ok=_b(p.get("ok")))


@_on("envelope.turn_failed")
def _e_failed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "failed", p, at, ok=False)


@_on("envelope.halted")
def _e_halted(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "halted", p, at)


@_on("envelope.no_progress_detected")
def _e_stuck(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _env(rows, e, "no_progress", p, at)


# -- taskflow


def _tf(rows: Rows, e: RecordedEvent, kind: str, at: datetime | None, *, verdict: Any = None, parsed_by: Any = None,
        follow_kind: Any = None, task: Any = None, parent: Any = None) -> None:
    rows["taskflow_events"].append((e.position, e.stream_id, kind, _s(verdict), _s(parsed_by), _s(follow_kind),
                                    _s(task), _s(parent), at))


@_on("taskflow.task_created")
def _t_created(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "task_id", p.get("task"))
    _tf(rows, e, "created", at, follow_kind=p.get("kind"), task=p.get("task"), parent=p.get("parent"))


@_on("taskflow.task_status_changed")
def _t_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("taskflow.phase_entered")
def _t_phase(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["phase_events"].append((e.position, e.stream_id, "taskflow", _s(p.get("phase")), "entered", None, None,
                                 None, None, at, None, at))


@_on("taskflow.verdict_issued")
def _t_verdict(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "verdict", at, verdict=p.get("verdict"), parsed_by=p.get("parsed_by"))


@_on("taskflow.verdict_unparseable")
def _t_unparseable(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "unparseable", at, verdict="UNPARSEABLE")


@_on("taskflow.follow_up_task_spawned")
def _t_follow(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "follow_up", at, follow_kind=p.get("kind"), task=p.get("task"), parent=p.get("parent"))


@_on("taskflow.autopilot_paused")
def _t_paused(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "paused", at, verdict=p.get("verdict"))


# ---------------------------------------------------------------- the Parquet directory


class AnalyticsIOError(EvstoreError):
    """Reading or writing analytics or export files failed (disk full, missing or read-only directory)."""


def io_error(action: str, path: str | os.PathLike[str], exc: BaseException) -> AnalyticsIOError:
    """``exc`` (an OSError or DuckDB IO error) as a one-line message naming the action and the path."""
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC:
            reason = "no space left on the device"
        elif exc.filename and str(exc.filename) != str(path) and not str(exc.filename).endswith(".tmp"):
            reason = f"{reason} ({exc.filename})"
    else:
        reason = str(exc).strip().splitlines()[0]
        if "No space left on device" in reason:
            reason = "no space left on the device"
    return AnalyticsIOError(f"cannot {action} {path}: {reason}")


@dataclass
class Manifest:
    """``manifest.json``: the checkpoint and the list of live files, bound to one store's log.

    ``store_id`` is the store's identity (:meth:`EventStore.store_id`), ``position`` the last event
    applied and ``hash`` that event's hash (hex): files built from another store, a deleted and
    recreated store, or a log that no longer holds that event are never read as this store's
    (:func:`mismatch`)."""

    version: int = FLATTEN_VERSION
    store_id: str = ""
    position: int = 0
    hash: str = ""
    files: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {t: [] for t in SCHEMAS})

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        """The manifest in ``directory`` (None if there is none, or it is not one this code wrote)."""
        try:
            data = json.loads((directory / MANIFEST).read_bytes())
            return cls(int(data["version"]), str(data.get("store_id", "")), int(data["position"]),
                       str(data.get("hash", "")), {t: list(data["files"].get(t, [])) for t in SCHEMAS})
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # not a manifest of ours: a refresh rebuilds, a reader says there are no tables
        except OSError as exc:
            raise io_error("read the analytics manifest in", directory, exc) from exc

    def save(self, directory: Path) -> None:
        # A unique temporary name: no process ever renames another's half-written manifest.
        with replacing(directory / MANIFEST) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"name": NAME, "version": self.version, "store_id": self.store_id,
                       "position": self.position, "hash": self.hash, "files": self.files}, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())

    def paths(self, directory: Path, table: str) -> list[Path]:
        return [directory / table / f["file"] for f in self.files[table]]


def mismatch(store: EventStore, m: Manifest) -> str | None:
    """Why the tables of manifest ``m`` are not ``store``'s log up to ``m.position`` (None: they are)."""
    if m.version != FLATTEN_VERSION:
        return f"they were built by flatten version {m.version}, this is version {FLATTEN_VERSION}"
    sid = store.store_id()
    if m.store_id != sid:
        return f"they were built from store {m.store_id or '(unnamed)'}, not from this store ({sid})"
    if m.position:
        at = store.read_all(after_position=m.position - 1, limit=1)
        if not at or at[0].position != m.position:
            return f"the log has no event at their checkpoint (position {m.position}) any more"
        if at[0].hash.hex() != m.hash:
            return f"the event at their checkpoint (position {m.position}) is not the one they were built from"
    return None


@dataclass
class RefreshResult:
    events: int  # log events read after the checkpoint
    position: int  # checkpoint afterwards
    rows: dict[str, int]
    files_written: int
    compacted: list[str]
    rebuilt: bool
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "position": self.position, "rows": self.rows,
                "files_written": self.files_written, "compacted": self.compacted, "rebuilt": self.rebuilt,
                "seconds": round(self.seconds, 3)}


def analytics_dir(store: EventStore, override: str | os.PathLike[str] | None = None) -> Path:
    """``override``, else ``$EVSTORE_ANALYTICS_DIR``, else the store's own folder
    (:func:`eventstore.config.analytics_directory`: beside a SQLite file, or keyed by store id)."""
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("EVSTORE_ANALYTICS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return config.analytics_directory(store.url, store.store_id())


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A uniquely named temporary path beside ``path`` that replaces ``path`` atomically when the
    block succeeds and is removed when it fails: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write(table: pa.Table, path: Path) -> None:
    with replacing(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def _part(table: str, after: int, upto: int, tag: str = "") -> str:
    # Every file name is new (random suffix): a file, once listed, is never rewritten in place, so a
    # reader holding it open reads what the manifest it loaded promised.
    return f"part-{after}-{upto}{tag}-{uuid.uuid4().hex[:8]}.parquet"


def _remove_unlisted(directory: Path, manifest: Manifest) -> None:
    """Delete files the manifest does not list (a crash's leftovers, compacted or rebuilt files).

    Only the refresh-lock holder calls this, after its manifest is in place, so nothing deleted is
    still being written; readers that opened a deleted file keep reading it (see :func:`connect`)."""
    for table in SCHEMAS:
        live = {f["file"] for f in manifest.files[table]}
        folder = directory / table
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name not in live:
                    p.unlink(missing_ok=True)


def _init(directory: Path, store_id: str) -> Manifest:
    """A fresh manifest with an empty file per table (so every view has its columns)."""
    m = Manifest(store_id=store_id)
    for table, schema in SCHEMAS.items():
        (directory / table).mkdir(exist_ok=True)
        name = _part(table, 0, 0)
        _write(schema.empty_table(), directory / table / name)
        m.files[table].append({"file": name, "after": 0, "upto": 0, "rows": 0})
    m.save(directory)
    return m


@contextmanager
def _refresh_lock(directory: Path) -> Iterator[None]:
    """One refresher per directory at a time, across processes (released if the holder dies)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = FileLock(directory / LOCK)
        lock.acquire()
    except OSError as exc:
        raise io_error("write the analytics tables in", directory, exc) from exc
    try:
        yield
    finally:
        lock.release()


def refresh(store: EventStore, directory: str | os.PathLike[str] | None = None, *, batch_size: int = 20_000,
            rebuild: bool = False, compact: bool = True, compact_at: int = COMPACT_AT, upto: int | None = None,
            progress: Callable[[int, int], None] | None = None, flush_events: int = FLUSH_EVENTS) -> RefreshResult:
    """Bring the Parquet tables up to the end of the log (or position ``upto``); returns what was written.

    Tables of another store, of a recreated store or of a log that lost their checkpoint's event
    are rebuilt (:func:`mismatch`).  Facts are written every ``flush_events`` events, so memory
    stays bounded however far behind the tables are."""
    started = time.perf_counter()
    out = analytics_dir(store, directory)
    with _refresh_lock(out):
        try:
            return _refresh(store, out, started, batch_size=batch_size, rebuild=rebuild, compact=compact,
                            compact_at=compact_at, upto=upto, progress=progress, flush_events=flush_events)
        except OSError as exc:
            raise io_error("write the analytics tables in", out, exc) from exc


def _refresh(store: EventStore, out: Path, started: float, *, batch_size: int, rebuild: bool, compact: bool,
             compact_at: int, upto: int | None, progress: Callable[[int, int], None] | None,
             flush_events: int) -> RefreshResult:
    manifest = None if rebuild else Manifest.load(out)
    fresh = manifest is None or mismatch(store, manifest) is not None
    if manifest is None or fresh:
        manifest = _init(out, store.store_id())
    _remove_unlisted(out, manifest)
    high = store.max_position() if upto is None else min(upto, store.max_position())
    total = max(high - manifest.position, 0)
    rows = {t: 0 for t in SCHEMAS}
    written = read = 0
    flat = Flattener()
    last: RecordedEvent | None = None
    with gc_paused():  # many live row tuples: young collections would walk them all
        for e in store.iter_all(after_position=manifest.position, upto_position=high, batch_size=batch_size):
            flat.add_one(e)
            last = e
            read += 1
            if progress and read % batch_size == 0:
                progress(min(read, total), total)
            if read % flush_events == 0:
                written += _commit(out, manifest, flat, last, rows)
                flat = Flattener()
        if progress and read % batch_size:
            progress(min(read, total), total)  # the last, partial batch: the bar ends full
        if last is not None and last.position > manifest.position:
            written += _commit(out, manifest, flat, last, rows)
    del flat
    compacted = compact_tables(out, manifest, at=compact_at) if compact else []
    return RefreshResult(read, manifest.position, rows if read else {}, written, compacted, fresh,
                         time.perf_counter() - started)


def _commit(out: Path, manifest: Manifest, flat: Flattener, last: RecordedEvent, rows: dict[str, int]) -> int:
    """Write the facts of the events after the checkpoint up to ``last``, then the manifest (the
    commit point: files and checkpoint become visible together); returns the files written."""
    written = 0
    for table, data in flat.tables().items():
        rows[table] += data.num_rows
        if data.num_rows == 0:
            continue
        name = _part(table, manifest.position, last.position)
        _write(data, out / table / name)
        manifest.files[table].append({"file": name, "after": manifest.position, "upto": last.position,
                                      "rows": data.num_rows})
        written += 1
    manifest.position, manifest.hash = last.position, last.hash.hex()
    manifest.save(out)
    return written


def compact_tables(directory: Path, manifest: Manifest, *, at: int = COMPACT_AT) -> list[str]:
    """Merge the small files of every table that has more than ``at`` of them (refresh lock held)."""
    done = []
    for table, schema in SCHEMAS.items():
        small = [f for f in manifest.files[table] if f["rows"] < SMALL_ROWS]
        if len(small) <= at:
            continue
        data = pa.concat_tables([pq.read_table(directory / table / f["file"], schema=schema) for f in small])
        data = data.sort_by("position")
        lo, hi = min(f["after"] for f in small), max(f["upto"] for f in small)
        name = _part(table, lo, hi, "-c")
        _write(data, directory / table / name)
        keep = [f for f in manifest.files[table] if f["rows"] >= SMALL_ROWS]
        manifest.files[table] = sorted(keep + [{"file": name, "after": lo, "upto": hi, "rows": data.num_rows}],
                                       key=lambda f: (f["after"], f["upto"]))
        done.append(table)
    if done:
        manifest.save(directory)
        _remove_unlisted(directory, manifest)
    return done


def status(store: EventStore, directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Checkpoint and lag of the Parquet tables; tables that are not this store's count as empty
    (``stale`` says why), since the next refresh rebuilds them."""
    out = analytics_dir(store, directory)
    m = Manifest.load(out)
    high = store.max_position()
    base = {"name": NAME, "directory": str(out), "version": FLATTEN_VERSION}
    if m is None:
        return {**base, "stored_version": None, "checkpoint": 0, "lag": high, "files": 0, "updated_at": None,
                "stale": None}
    try:  # the last refresh wrote the manifest (its mtime, as the runs index's updated_at is spelled)
        mtime = (out / MANIFEST).stat().st_mtime
        updated: str | None = datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="microseconds")[:-6] + "Z"
    except OSError:
        updated = None
    stale = mismatch(store, m)
    checkpoint = 0 if stale else m.position
    return {**base, "stored_version": m.version, "checkpoint": checkpoint, "lag": max(high - checkpoint, 0),
            "files": sum(len(v) for v in m.files.values()), "updated_at": updated, "stale": stale}


# ---------------------------------------------------------------- DuckDB


def _sql_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


_FD_DIR = next((d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), None)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


def _open_listed(directory: Path, attempts: int = 50) -> tuple[Manifest, dict[str, list[str]], list[int]]:
    """The manifest and, per table, a path DuckDB can read each listed file through, plus the open
    descriptors that keep those files readable.

    A refresh in another process may replace the manifest and delete the files the new one no
    longer lists (compaction, rebuild) at any moment.  Readers never lock writers out: a reader
    opens every file its manifest lists and hands DuckDB ``/proc/self/fd/N``, and an open file
    stays readable after it is deleted (POSIX), so a query reads exactly the generation its
    manifest named.  A file deleted before it could be opened means a newer manifest is in place:
    read that one."""
    for _ in range(attempts):
        m = Manifest.load(directory)
        if m is None:
            raise EvstoreError(f"No analytics tables in {directory}; run `evstore query` or `evstore metrics` "
                               "to build them.")
        fds: list[int] = []
        paths: dict[str, list[str]] = {}
        try:
            for table in SCHEMAS:
                paths[table] = []
                for p in m.paths(directory, table):
                    if _FD_DIR is None:  # no descriptor paths on this system: read the files by name
                        paths[table].append(str(p))
                        continue
                    fds.append(os.open(p, os.O_RDONLY))
                    paths[table].append(f"{_FD_DIR}/{fds[-1]}")
        except FileNotFoundError:
            _close_all(fds)
            time.sleep(0.01)
            continue
        except OSError as exc:
            _close_all(fds)
            raise io_error("read the analytics tables in", directory, exc) from exc
        return m, paths, fds
    raise EvstoreError(f"The analytics tables in {directory} changed {attempts} times while being opened; try again.")


def _connect(directory: Path, threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, Manifest,
                                                                   Callable[[], None]]:
    """(connection, its manifest, a call that closes the files it reads once the connection is closed)."""
    m, paths, fds = _open_listed(directory)
    try:
        con = duckdb.connect(":memory:")  # a database of its own: no cache shared with other connections
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        for table in SCHEMAS:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_sql_list(paths[table])})")
        for view, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {view} AS {sql}")
    except BaseException:
        _close_all(fds)
        raise
    return con, m, weakref.finalize(con, _close_all, fds)


def connect(directory: str | os.PathLike[str], *, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per fact table and per :data:`VIEWS` entry, over
    the files the manifest lists now (concurrent refreshes do not disturb it; its files are
    released when the connection is garbage-collected).  :func:`reading` also checks the tables
    belong to a store."""
    return _connect(Path(directory), threads)[0]


def _store_connect(store: EventStore, directory: str | os.PathLike[str] | None,
                   fresh: bool) -> tuple[duckdb.DuckDBPyConnection, Callable[[], None]]:
    out = analytics_dir(store, directory)
    if fresh:
        refresh(store, out)
    con, m, release = _connect(out)
    problem = mismatch(store, m)
    if problem:
        con.close()
        release()
        hint = "try again" if fresh else "run without --no-refresh to rebuild them"
        raise EvstoreError(f"The analytics tables in {out} are not this store's: {problem}; {hint}.")
    return con, release


@contextmanager
def reading(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
            fresh: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """Refresh (unless ``fresh`` is False), connect, and check the tables are ``store``'s log;
    the connection and its files are closed on exit.  Tables that are not this store's (another
    or a recreated store, a log that lost their checkpoint's event) are refused, never read."""
    con, release = _store_connect(store, directory, fresh)
    try:
        yield con
    finally:
        con.close()
        release()


def open_analytics(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
                   fresh: bool = True) -> duckdb.DuckDBPyConnection:
    """Refresh (unless ``fresh`` is False) and connect: the one call notebooks use (tables that
    are not this store's are refused, as :func:`reading` does)."""
    return _store_connect(store, directory, fresh)[0]


class QueryError(EvstoreError):
    """A DuckDB error in user SQL; the message is DuckDB's own."""


def query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` (DuckDB dialect) and fetch the whole result: (column names, rows)."""
    try:
        rel = con.execute(sql)
        columns = [d[0] for d in rel.description or []]
        rows = rel.fetchall() if rel.description else []
    except duckdb.Error as exc:
        raise QueryError(str(exc)) from exc
    return columns, rows


# ---------------------------------------------------------------- export

_EVENT_SCHEMA = pa.schema([("position", I), ("stream_id", S), ("version", I), ("event_id", S), ("type", S),
                          ("schema_version", I), ("data", S), ("meta", S), ("occurred_at", S), ("recorded_at", S),
                          ("prev_hash", S), ("hash", S)])


def _event_batch(batch: Sequence[RecordedEvent]) -> pa.Table:
    cols: list[list[Any]] = [[] for _ in _EVENT_SCHEMA]
    for e in batch:
        for col, v in zip(cols, (e.position, e.stream_id, e.version, e.event_id, e.type, e.schema_version,
                                 e.data.decode(), e.meta.decode(), e.occurred_at, e.recorded_at, e.prev_hash.hex(),
                                 e.hash.hex()), strict=True):
            col.append(v)
    return pa.table(cols, schema=_EVENT_SCHEMA)


def export_parquet(store: EventStore, target: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None,
                   *, batch_size: int = 20_000) -> dict[str, int]:
    """Write ``log.parquet`` (every stored event, data/meta as JSON text) and one Parquet file per
    analytics table and view into ``target`` (created if missing); returns rows per file name.
    Each file is written to a temporary name and renamed when whole."""
    out = Path(target)
    counts: dict[str, int] = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        with reading(store, directory) as con:
            with replacing(out / "log.parquet") as tmp, pq.ParquetWriter(tmp, _EVENT_SCHEMA,
                                                                         compression="zstd") as writer:
                n = 0
                batch: list[RecordedEvent] = []
                for e in store.iter_all(batch_size=batch_size):
                    batch.append(e)
                    if len(batch) >= batch_size:
                        writer.write_table(_event_batch(batch))
                        n += len(batch)
                        batch = []
                if batch:
                    writer.write_table(_event_batch(batch))
                    n += len(batch)
            counts["log"] = n
            for name in table_names():
                with replacing(out / f"{name}.parquet") as tmp:
                    path = str(tmp).replace("'", "''")
                    copied = con.execute(f"COPY (SELECT * FROM {name}) TO '{path}' (FORMAT parquet, "
                                         "COMPRESSION zstd)")
                    counts[name] = int(copied.fetchall()[0][0])  # COPY returns the rows it wrote
    except (OSError, duckdb.IOException) as exc:
        raise io_error("export to", out, exc) from exc
    return counts


def export_jsonl(store: EventStore, target: str | os.PathLike[str] | Any, *, table: str = "log",
                 directory: str | os.PathLike[str] | None = None, batch_size: int = 20_000) -> int:
    """One JSON object per line; returns the count.  ``table`` "log" (the default) writes every
    stored event (``RecordedEvent.to_dict()``); an analytics table or view name writes its rows
    (refreshed first; values as :func:`jsonable` makes them, as ``evstore query --json``
    prints them), so every line of a file has one shape.

    ``target`` is a path (written to a temporary name, renamed when whole) or a text stream
    (``-`` on the CLI is stdout).
    """
    enc = msgspec.json.Encoder()
    if table != "log" and table not in table_names():
        raise EvstoreError(f'No analytics table "{table}"; choose log or one of: {", ".join(table_names())}.')

    def write(fh: Any) -> int:
        n = 0
        if table == "log":
            for e in store.iter_all(batch_size=batch_size):
                fh.write(enc.encode(e.to_dict()).decode() + "\n")
                n += 1
            return n
        with reading(store, directory) as con:
            cur = con.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            while rows := cur.fetchmany(batch_size):
                for row in rows:
                    fh.write(enc.encode(jsonable(dict(zip(cols, row, strict=True)))).decode() + "\n")
                n += len(rows)
        return n

    if hasattr(target, "write"):
        return write(target)
    path = Path(target)
    try:
        if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout, a FIFO): write as it is
            with open(path, "w", encoding="utf-8") as fh:
                return write(fh)
        with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            return write(fh)  # the file is closed (flushed) before it replaces the target
    except OSError as exc:
        raise io_error("write", path, exc) from exc


def jsonable(v: Any) -> Any:
    """A DuckDB value as JSON: times in ISO 8601, decimals as numbers, bytes as hex."""
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v


def table_names() -> list[str]:
    return list(SCHEMAS) + list(VIEWS)


__all__ = ["AnalyticsIOError", "COMPACT_AT", "FLATTEN_VERSION", "Flattener", "Manifest", "RefreshResult",
           "SCHEMAS", "VIEWS", "analytics_dir", "compact_tables", "connect", "export_jsonl", "export_parquet",
           "io_error", "jsonable", "mismatch", "open_analytics", "query", "QueryError", "reading", "refresh",
           "replacing", "status", "table_names"]
