"""Envelope analytics: accepted, rejected, repaired and failed turns as one fact table, the
``envelope_turns`` view and its metric section (declared as data: see
:mod:`eventstore.dialects.analytics`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, MetricSection, RowFunctions, Rows, Table
from eventstore.store import RecordedEvent

_attr, _b, _d, _i, _s = an.attr, an.b, an.d, an.i, an.s
_ROWS = RowFunctions()
_on = _ROWS.on


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



TABLES = (
    Table("envelope_events", (("kind", "VARCHAR"), ("skill", "VARCHAR"), ("state", "VARCHAR"),
                              ("from_state", "VARCHAR"), ("unit_id", "VARCHAR"), ("turn", "BIGINT"), ("ok", "BOOLEAN"),
                              ("occurred_at", "TIMESTAMPTZ"))),
)

VIEWS = {
    "envelope_turns": """
        SELECT stream_id, position, kind, skill, state, from_state, unit_id, turn, ok, occurred_at
        FROM envelope_events""",
}

_IN = "stream_id IN (SELECT stream_id FROM sel)"

SECTIONS = (
    MetricSection(
        "envelope_turns", "Envelope: state mix per skill, repairs, review -> fold cycles", ("skill", "state", "turns"),
        f"""SELECT skill, state, count(*) AS turns FROM envelope_turns
            WHERE kind = 'accepted' AND {_IN} GROUP BY ALL ORDER BY skill, state""",
        f"""WITH e AS (SELECT * FROM envelope_turns WHERE {_IN}),
            units AS (
                SELECT stream_id, count_if(kind = 'accepted' AND skill = 'review-change' AND state = 'NEEDS_FIXES')
                       AS folds FROM e GROUP BY stream_id)
            SELECT count_if(kind = 'accepted') AS accepted_turns, count_if(kind = 'rejected') AS rejected_turns,
                   CASE WHEN count_if(kind IN ('accepted', 'rejected')) > 0
                        THEN count_if(kind = 'rejected') / count_if(kind IN ('accepted', 'rejected')) END
                        AS repair_rate,
                   count_if(kind = 'repair' AND ok) AS repairs_ok, count_if(kind = 'failed') AS turns_failed,
                   count_if(kind = 'halted') AS halts, count_if(kind = 'no_progress') AS no_progress,
                   (SELECT avg(folds) FROM units) AS mean_review_fold_cycles,
                   (SELECT max(folds) FROM units) AS max_review_fold_cycles
            FROM e""",
        "repair rate = rejected turns / (accepted + rejected turns); a review -> fold cycle = an accepted "
        "review-change envelope in state NEEDS_FIXES (per unit = per stream).", per_run=True),
)

ANALYTICS = Analytics(version=1, tables=TABLES, rows=_ROWS, views=VIEWS, sections=SECTIONS,
                      run_views=("envelope_turns",))
