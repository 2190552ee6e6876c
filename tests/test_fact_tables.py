"""Every column of the envelope, taskflow, FRIDAY and Claude Code fact tables, against rows written out here from
the log itself (an oracle the row functions did not compute).

The metric sections read only some of these columns (a kind, an ok flag), so a row function that
dropped a skill, a parsed-by or an agent passed every metric test; mutation testing found them.  These
tables are what ``evstore query`` and the notebooks show, so each column is a promise of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from analytics_fixtures import simulate_into
from claude_fixtures import write_project
from conftest import migrated

from eventstore.capture import ingest_transcripts
from eventstore.dialects.claude import events as cl
from eventstore.dialects.envelope import events as env
from eventstore.dialects.taskflow import events as tf
from eventstore.store import EventStore, RecordedEvent
from projections import analytics


def _s(value: Any) -> str | None:  # a fact keeps a string, and nothing that is no string
    return value if isinstance(value, str) else None


def _i(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _b(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


Row = tuple[Any, ...]  # what an event gives a table after its position and stream, from its payload


def _envelope(kind: str, ok: Callable[[dict[str, Any]], bool | None]) -> Callable[[dict[str, Any]], Row]:
    return lambda p: (kind, _s(p.get("skill")), _s(p.get("state")) or _s(p.get("to_state")),
                      _s(p.get("from_state")), _s(p.get("unit_id")), _i(p.get("turn")), ok(p))


ENVELOPE: dict[str, Callable[[dict[str, Any]], Row | None]] = {
    "envelope.envelope_emitted": _envelope("accepted", lambda p: True),
    "envelope.state_transitioned": _envelope("transition", lambda p: None),
    "envelope.turn_rejected": _envelope("rejected", lambda p: False),
    "envelope.repair_attempted": _envelope("repair", lambda p: _b(p.get("ok"))),
    "envelope.turn_failed": _envelope("failed", lambda p: False),
    "envelope.halted": _envelope("halted", lambda p: None),
    "envelope.no_progress_detected": _envelope("no_progress", lambda p: None),
}
TASKFLOW: dict[str, Callable[[dict[str, Any]], Row | None]] = {
    "taskflow.task_created": lambda p: ("created", None, None, _s(p.get("kind")), _s(p.get("task")),
                                        _s(p.get("parent"))),
    "taskflow.verdict_issued": lambda p: ("verdict", _s(p.get("verdict")), _s(p.get("parsed_by")), None, None, None),
    "taskflow.verdict_unparseable": lambda p: ("unparseable", "UNPARSEABLE", None, None, None, None),
    "taskflow.follow_up_task_spawned": lambda p: ("follow_up", None, None, _s(p.get("kind")), _s(p.get("task")),
                                                  _s(p.get("parent"))),
    "taskflow.autopilot_paused": lambda p: ("paused", _s(p.get("verdict")), None, None, None, None),
}
FRIDAY: dict[str, Callable[[dict[str, Any]], Row | None]] = {
    "friday.cycle_opened": lambda p: ("cycle_opened", _s(p.get("agent")), _s(p.get("cycle_type")), None),
    "friday.report_received": lambda p: ("report", _s(p.get("agent")), None, None),
    "friday.interaction_surfaced": lambda p: ("question", None, None, _s(p.get("item_id")))
    if isinstance(p.get("pending_interaction"), dict) else None,
    "friday.answer_captured": lambda p: ("answer", None, None, _s(p.get("item_id"))),
    "friday.cycle_closed": lambda p: ("cycle_closed", _s(p.get("agent")), _s(p.get("cycle_type")), None),
}


def _time(e: RecordedEvent) -> datetime | None:
    return datetime.fromisoformat(e.occurred_at) if e.occurred_at else None


def _claude(e: RecordedEvent) -> Row | None:
    if not e.type.startswith("claude."):
        return None
    p, usage = e.payload, e.payload.get("usage") if isinstance(e.payload.get("usage"), dict) else {}
    split = usage.get("cache_creation") if isinstance(usage.get("cache_creation"), dict) else {}
    when = p.get("timestamp")
    return (e.type.removeprefix("claude."), _s(p.get("model")), _s(p.get("message_id")), _s(p.get("request_id")),
            _s(p.get("tool_name")), _s(p.get("tool_use_id")), _b(p.get("is_error")), _i(usage.get("input_tokens")),
            _i(usage.get("output_tokens")), _i(usage.get("cache_read_input_tokens")),
            _i(usage.get("cache_creation_input_tokens")),
            _s(p.get("agent")) if e.type == "claude.subagent_linked" else _s(p.get("agent_id")),
            datetime.fromisoformat(when) if isinstance(when, str) and when else _time(e),
            _s(p.get("sidechain")), _s(p.get("stream")), _s(p.get("by")),
            _i(split.get("ephemeral_5m_input_tokens")), _i(split.get("ephemeral_1h_input_tokens")))


class _ByType:
    """The row of an event of a table whose rows go by event type: its payload's row, then its time."""

    def __init__(self, rows_of: dict[str, Callable[[dict[str, Any]], Row | None]]) -> None:
        self.rows_of = rows_of
        # every kind of row the table holds: a payload that gives every row function its row names them all
        self.kinds = {r[0] for f in rows_of.values() if (r := f({"pending_interaction": {}})) is not None}

    def __call__(self, e: RecordedEvent) -> Row | None:
        row = self.rows_of[e.type](e.payload) if e.type in self.rows_of else None
        return None if row is None else (*row, _time(e))


#: table: (an event's row after its position and stream, the columns it fills)
CASES: dict[str, tuple[Callable[[RecordedEvent], Row | None], list[str]]] = {
    "envelope_events": (_ByType(ENVELOPE), ["kind", "skill", "state", "from_state", "unit_id", "turn", "ok",
                                            "occurred_at"]),
    "taskflow_events": (_ByType(TASKFLOW), ["kind", "verdict", "parsed_by", "follow_kind", "task", "parent",
                                            "occurred_at"]),
    "friday_events": (_ByType(FRIDAY), ["kind", "agent", "cycle_type", "item_id", "occurred_at"]),
    # a Claude Code session's lines (tests/claude_fixtures.py: messages, tool calls, usage, a subagent)
    "claude_events": (_claude, ["kind", "model", "message_id", "request_id", "tool_name", "tool_use_id", "is_error",
                                "input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens",
                                "agent_id", "occurred_at", "sidechain", "subagent_stream", "linked_by",
                                "cache_write_5m_tokens", "cache_write_1h_tokens"]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EventStore, Path]]:
    root = tmp_path_factory.mktemp("facts")
    store = EventStore(migrated(f"sqlite:///{root}/events.db"))
    simulate_into(store, {"envelope": 4, "taskflow": 3, "friday": 3}, seed=5)
    # kinds the simulated runs do not give, appended as the dialects' own typed events
    store.append("EXTRA-envelope", [
        env.Halted(state="HALT", skill="ship", unit_id="u-9", turn=7),
        env.NoProgressDetected(state="OK", recommended="/next", recommendation_hash="h", skill="plan", unit_id="u-9",
                               turn=8),
        env.TurnFailed(turn=9, reason="repair failed")], dialect="envelope")
    store.append("EXTRA-taskflow", [tf.VerdictUnparseable(sha256="0" * 64, reason="two verdicts")], dialect="taskflow")
    write_project(root / "projects")
    ingest_transcripts(store, [root / "projects"])
    store.append("EXTRA-claude", [  # a 1.0.x inline subagent's line and a link (the fixture has neither)
        cl.UserMessage(lineno=1, offset=0, sidechain="uuid-1", timestamp="2026-01-05T10:00:00Z"),
        cl.SubagentLinked(agent="a-1", by="agent_id", lineno=2, tool_use_id="toolu_9", stream="S/agent-a-1")],
        dialect="claude")
    analytics.refresh(store, root / "analytics")
    yield store, root / "analytics"
    store.close()


def _log(store: EventStore) -> Iterator[RecordedEvent]:
    after = 0
    while batch := store.read_all(after_position=after, limit=1000):
        yield from batch
        after = batch[-1].position


@pytest.mark.parametrize("table", sorted(CASES))
def test_every_column_of_a_fact_table_is_the_events_value(built: tuple[EventStore, Path], table: str) -> None:
    store, out = built
    row_of, columns = CASES[table]
    expected = [(e.position, e.stream_id, *row) for e in _log(store) if (row := row_of(e)) is not None]
    with analytics.reading(store, out, fresh=False) as con:
        got = con.execute(f"SELECT position, stream_id, {', '.join(columns)} FROM {table} "  # noqa: S608 (names above)
                          "ORDER BY position, kind").fetchall()
    assert got == sorted(expected, key=lambda r: (r[0], r[2]))
    # the simulated runs give every column a value somewhere, so each column is checked, not only its nulls
    assert expected
    for i, column in enumerate(columns, start=2):
        assert column == "occurred_at" or any(r[i] is not None for r in expected), \
            f"{table}.{column}: no simulated event gives it a value"
    if isinstance(row_of, _ByType):  # and every kind of row is there
        assert {r[2] for r in expected} == row_of.kinds


def test_every_table_has_the_columns_it_declares_by_name(built: tuple[EventStore, Path]) -> None:
    """DuckDB matches names without regard to case, so a table written with ``STREAM_ID`` would still
    answer every query; ``SELECT *`` (the CSV header of ``evstore query``) shows the names as written."""
    from projections.analytics.facts import catalog

    store, out = built
    with analytics.reading(store, out, fresh=False) as con:
        for name, table in catalog().tables.items():
            described = con.execute(f"SELECT * FROM {name} LIMIT 0").description  # noqa: S608 (declared names)
            assert [d[0] for d in described or []] == [c for c, _ in table.all_columns()], name
            assert [c for c, _ in table.all_columns()][:2] == ["position", "stream_id"]


def test_a_build_on_two_processes_gives_the_serial_builds_facts(built: tuple[EventStore, Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh on forked worker processes (block by block; here half the log after a serial refresh of
    the first half, in blocks of a few events) writes the same rows in every table as the one-process
    build, and commits the same checkpoint."""
    import duckdb

    from projections.analytics import files
    from projections.analytics.facts import catalog

    store, serial = built
    pids = tmp_path / "pids"
    pids.mkdir()
    worker = files._worker

    def marked(*args: Any) -> None:  # which processes flattened (the fork inherits this wrapper)
        import os

        (pids / str(os.getpid())).touch()
        worker(*args)

    monkeypatch.setattr(files, "_worker", marked)
    out = tmp_path / "parallel"
    high = store.max_position()
    analytics.refresh(store, out, upto=high // 2, workers=1)
    r = analytics.refresh(store, out, workers=2, flush_events=60, compact=False)
    assert len(list(pids.iterdir())) == 2 and r.events == high - high // 2
    one, two = analytics.Manifest.load(serial), analytics.Manifest.load(out)
    assert one is not None and two is not None
    assert (two.position, two.hash) == (one.position, one.hash)
    ranges = [(f["after"], f["upto"]) for f in two.files["events"]]
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges  # listed in position order
    con = duckdb.connect()
    compared = 0
    for table in catalog().tables:
        rows = [con.execute(f"SELECT * FROM read_parquet({[str(p) for p in m.paths(d, table)]}) ORDER BY ALL")
                .fetchall() for m, d in ((one, serial), (two, out))]
        assert rows[0] == rows[1], table
        compared += len(rows[0])
    assert compared > high
