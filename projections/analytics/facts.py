"""Analytics facts: every domain event flattened into rows of a few fact tables (:data:`SCHEMAS`).

Flattening is *stateless*: each event maps to rows on its own (:class:`Flattener`), so applying
events in one batch or in a hundred gives byte-for-byte the same facts, and "incremental ==
rebuild" holds by construction; anything that needs history is a view (:mod:`.views`).
Bumping :data:`FLATTEN_VERSION` rebuilds every store's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from eventstore import codec
from eventstore.store import RecordedEvent

FLATTEN_VERSION = 2  # 2: claude_events
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
    # One row per transcript line / hook of a Claude Code session (usage repeats on every line of a
    # message split over several lines: the token_usage view keeps one row per message id).
    "claude_events": _schema(("kind", S), ("model", S), ("message_id", S), ("request_id", S), ("tool_name", S),
                             ("tool_use_id", S), ("is_error", B), ("input_tokens", I), ("output_tokens", I),
                             ("cache_read_tokens", I), ("cache_creation_tokens", I), ("agent_id", S),
                             ("occurred_at", T)),
}


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


# -- claude (Claude Code transcripts and hooks)

_CLAUDE_KINDS = ("user_message", "assistant_message", "tool_use", "tool_result", "summary", "compact_boundary",
                 "system", "file_history_snapshot", "attachment", "queue_operation", "unknown_record",
                 "unreadable_line", "hook")


def _claude(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    usage = _d(p.get("usage"))
    rows["claude_events"].append((
        e.position, e.stream_id, e.type.split(".", 1)[1], _s(p.get("model")), _s(p.get("message_id")),
        _s(p.get("request_id")), _s(p.get("tool_name")), _s(p.get("tool_use_id")), _b(p.get("is_error")),
        _i(usage.get("input_tokens")), _i(usage.get("output_tokens")), _i(usage.get("cache_read_input_tokens")),
        _i(usage.get("cache_creation_input_tokens")), _s(p.get("agent_id")), _ts(p.get("timestamp")) or at))


_on(*(f"claude.{kind}" for kind in _CLAUDE_KINDS))(_claude)
