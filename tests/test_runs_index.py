"""The runs index on SQLite and PostgreSQL: inline == rebuilt == what the dialect describes."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.cli import register
from eventstore.dialects import get_dialect
from eventstore.ingest import Ingestor
from eventstore.store import EventStore, NewEvent
from projections.runs import IndexedEventStore, find_streams_by_task, list_runs, rebuild, refresh

DIALECTS = ["mapipe", "friday", "taskflow", "envelope"]


def _simulate(name: str, n: int) -> list:
    start = datetime(2025, 5, 1, n % 24, tzinfo=UTC)
    return list(get_dialect(name).simulate(random.Random(n), run_id=f"RUN-{n}", start=start))


def _expected(name: str, snaps: list, stream_id: str) -> dict:
    d = get_dialect(name)
    docs = [s.doc for s in snaps if s.doc is not None]
    info = d.describe(docs[-1])
    return {"stream_id": stream_id, "dialect": name, "project": info.project,
            "task_id": info.task_id or stream_id, "title": info.title, "status": info.status,
            "phase": info.phase, "findings": len(d.validate(docs[-1]))}


def _ingest(store: EventStore, name: str, snaps: list) -> str:
    ing = Ingestor(store, get_dialect(name))
    sid = ""
    for s in snaps:
        sid = ing.ingest(s).stream
    return sid


@pytest.fixture
def indexed(store_url: str):  # type: ignore[no-untyped-def]
    s = IndexedEventStore(store_url)
    try:
        yield s
    finally:
        s.close()


def test_inline_rows_match_the_dialects_description(indexed: EventStore) -> None:
    expected = {}
    for i, name in enumerate(DIALECTS * 2):
        snaps = _simulate(name, i)
        sid = _ingest(indexed, name, snaps)
        expected[sid] = _expected(name, snaps, sid)
        expected[sid]["events"] = indexed.stream_version(sid)
        expected[sid]["started_at"] = snaps[0].occurred_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    rows = {r.stream_id: r.to_dict() for r in list_runs(indexed, fresh=False)}
    assert set(rows) == set(expected)
    for sid, want in expected.items():
        got = rows[sid]
        assert {k: got[k] for k in want} == want, sid
    # newest first
    lasts = [r.last_event_at for r in list_runs(indexed)]
    assert lasts == sorted(lasts, reverse=True)
    # rebuild from the log gives the same rows
    before = [r.to_dict() for r in list_runs(indexed)]
    assert rebuild(indexed) == indexed.max_position()
    assert [r.to_dict() for r in list_runs(indexed)] == before


def test_appends_without_the_index_are_caught_up(store_url: str) -> None:
    name = DIALECTS[0]
    snaps = _simulate(name, 3)
    plain = EventStore(store_url)
    indexed = IndexedEventStore(store_url)
    try:
        half = len(snaps) // 2
        ing = Ingestor(plain, get_dialect(name))
        for s in snaps[:half]:
            sid = ing.ingest(s).stream
        # the next indexed append applies the gap in its own transaction
        ing2 = Ingestor(indexed, get_dialect(name))
        for s in snaps[half:]:
            ing2.ingest(s)
        row = list_runs(indexed, fresh=False)[0].to_dict()
        assert row["events"] == indexed.stream_version(sid)
        assert row["status"] == _expected(name, snaps, sid)["status"]
        # a plain append only: readers refresh first
        plain.append("other", [NewEvent("note.added", {"text": "hi"})])
        assert refresh(indexed) == 1
        other = [r for r in list_runs(indexed) if r.stream_id == "other"][0]
        assert other.events == 1 and other.dialect is None and other.status is None
    finally:
        plain.close()
        indexed.close()


def test_rolled_back_append_does_not_poison_the_document_cache(indexed: EventStore) -> None:
    name = DIALECTS[0]
    snaps = _simulate(name, 5)
    ing = Ingestor(indexed, get_dialect(name))
    sid = ing.ingest(snaps[0]).stream

    fail = [True]

    def veto(cur, backend, events):  # runs after the runs index, then aborts the append
        if fail[0]:
            raise RuntimeError("a later inline handler failed")

    indexed.add_inline(veto)
    version = indexed.stream_version(sid)
    with pytest.raises(RuntimeError):
        indexed.append(sid, [NewEvent("document.observed", {"doc": {"bogus": True}}, meta={"dialect": name})],
                       expected_version=version)
    fail[0] = False
    assert indexed.stream_version(sid) == version
    for s in snaps[1:]:
        ing.ingest(s)
    row = [r for r in list_runs(indexed, fresh=False) if r.stream_id == sid][0].to_dict()
    want = _expected(name, snaps, sid)
    assert {k: row[k] for k in want} == want


def test_find_streams_by_task_and_filters(indexed: EventStore) -> None:
    sids = {}
    for i, name in enumerate(DIALECTS):
        sids[name] = _ingest(indexed, name, _simulate(name, 10 + i))
    rows = list_runs(indexed)
    for r in rows:
        assert r.stream_id in find_streams_by_task(indexed, r.task_id)  # type: ignore[arg-type]
        assert find_streams_by_task(indexed, r.stream_id)[0] == r.stream_id
    assert find_streams_by_task(indexed, "no-such-task") == []
    for name in DIALECTS:
        assert [r.stream_id for r in list_runs(indexed, dialect=name)] == [sids[name]]
    some = rows[0]
    assert all(r.status == some.status for r in list_runs(indexed, status=some.status))
    assert list_runs(indexed, since="2999-01-01") == []
    assert len(list_runs(indexed, since="2000-01-01")) == len(rows)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                              HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(range(6))), cache=st.sampled_from([1, 2, 4096]), every=st.sampled_from([1, 3, 128]))
def test_interleaved_runs_inline_equals_rebuild(sqlite_url: str, order: list[int], cache: int, every: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots of several runs interleaved in random order, with a tiny document cache
    (forcing refolds from the log, started from the documents the index kept every ``every``
    versions): the inline index equals a rebuild from scratch."""
    import uuid

    import projections.runs as runs_module

    monkeypatch.setattr(runs_module, "STATE_EVERY", every)

    from eventstore import migrate
    from eventstore.db import make_engine

    url = sqlite_url.replace("events.db", f"{uuid.uuid4().hex}.db")
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    store = IndexedEventStore(url)
    try:
        assert store.runs_index is not None
        store.runs_index.cache_size = cache
        runs = [(DIALECTS[i % len(DIALECTS)], _simulate(DIALECTS[i % len(DIALECTS)], 20 + i)) for i in range(6)]
        ingestors = [Ingestor(store, get_dialect(n)) for n, _ in runs]
        cursors = [0] * 6
        rng = random.Random(sum(order))
        while any(cursors[i] < len(runs[i][1]) for i in range(6)):
            for i in order:
                for _ in range(rng.randint(1, 4)):
                    if cursors[i] < len(runs[i][1]):
                        ingestors[i].ingest(runs[i][1][cursors[i]])
                        cursors[i] += 1
        inline = [r.to_dict() for r in list_runs(store, fresh=False)]
        rebuild(store)
        assert [r.to_dict() for r in list_runs(store)] == inline
        assert len(inline) == 6
    finally:
        store.close()


# ---------------------------------------------------------------- the documents the index keeps


def _long_run(store: EventStore, sid: str, n: int) -> None:
    """``n`` events of a generic run whose status changes with each, in batches of 7 (so the batches
    pass multiples of STATE_EVERY at versions that are not multiples of it)."""
    events = [NewEvent("document.observed", {"doc": {"taskId": "T-long", "status": "s0", "n": 0}},
                       meta={"dialect": "generic"})]
    events += [NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/status", "value": f"s{i}"},
                                                     {"op": "replace", "path": "/n", "value": i}]})
               for i in range(1, n)]
    for i in range(0, n, 7):
        store.append(sid, events[i:i + 7], dialect="generic")


def _folds_from(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions each cold load of the runs index starts folding after (read_payloads' after_version)."""
    from eventstore.backends.base import Backend

    starts: list[int] = []
    real = Backend.read_payloads

    def spy(self, cur, stream_pk, after_version, upto_version):  # type: ignore[no-untyped-def]
        starts.append(after_version)
        return real(self, cur, stream_pk, after_version, upto_version)

    monkeypatch.setattr(Backend, "read_payloads", spy)
    return starts


def _state_row(store: EventStore, sid: str) -> tuple:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return tuple(conn.execute(text(
            "SELECT c.version, c.event_hash, c.state, c.state_sha256 FROM projection_states c "
            "JOIN streams s ON s.stream_pk = c.stream_pk WHERE s.stream_id = :sid"), {"sid": sid}).one())


def _set_state(store: EventStore, sid: str, **values: object) -> None:
    from sqlalchemy import text

    sets = ", ".join(f"{k} = :{k}" for k in values)
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE projection_states SET {sets} WHERE stream_pk = "
                          "(SELECT stream_pk FROM streams WHERE stream_id = :sid)"), {**values, "sid": sid})


def test_a_fresh_process_folds_from_the_kept_document(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long stream's document is kept every STATE_EVERY versions, in the append's transaction; a
    process that has not seen the stream folds only the events after it, and its row is the one the
    log gives folded from the first event."""
    from projections.runs import STATE_EVERY, check_index

    n = 2 * STATE_EVERY + 40
    with IndexedEventStore(store_url) as store:
        _long_run(store, "long", n)
        version, event_hash, _, _ = _state_row(store, "long")
        assert version == 2 * STATE_EVERY - (2 * STATE_EVERY) % 7 + 7  # the batch that passed 2 * STATE_EVERY
        assert bytes(event_hash) == next(iter(store.read_stream("long", after_version=version - 1))).hash
    starts = _folds_from(monkeypatch)
    with IndexedEventStore(store_url) as fresh:
        fresh.append("long", [NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/status",
                                                                     "value": "last"}]})], expected_version=n)
        assert starts == [version]
        row = [r for r in list_runs(fresh) if r.stream_id == "long"][0]
        assert (row.task_id, row.status, row.events) == ("T-long", "last", n + 1)
        assert check_index(fresh) == []


@pytest.mark.parametrize("tamper", ["state", "event_hash", "version"])
def test_a_kept_document_that_disagrees_with_the_log_is_not_used(store_url: str, tamper: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept document whose bytes do not match their digest, or bound to another event than the one at
    its version, is not used: the stream is folded from its first event, and the row is the log's."""
    from eventstore import chain, replay_cache
    from projections.runs import STATE_EVERY, check_index

    n = STATE_EVERY + 20
    with IndexedEventStore(store_url) as store:
        _long_run(store, "long", n)
        version, event_hash, state, digest = _state_row(store, "long")
        forged = replay_cache.encode_state({"taskId": "FORGED", "status": "forged", "n": -1})
        if tamper == "state":  # new bytes, the old digest
            _set_state(store, "long", state=forged)
        elif tamper == "event_hash":  # a consistent row bound to another event
            _set_state(store, "long", state=forged, state_sha256=chain.digest(forged),
                       event_hash=next(iter(store.read_stream("long", after_version=1))).hash)
        else:  # the row moved to another version, its hash left as it was
            _set_state(store, "long", version=version - 1)
    starts = _folds_from(monkeypatch)
    with IndexedEventStore(store_url) as fresh:
        fresh.append("long", [NewEvent("document.patched", {"ops": []})], expected_version=n)
        assert starts == [0]
        row = [r for r in list_runs(fresh) if r.stream_id == "long"][0]
        assert (row.task_id, row.status) == ("T-long", f"s{n - 1}")
        assert check_index(fresh) == []


def test_verify_catches_a_forged_kept_document(store_url: str) -> None:
    """A forger with the writer's rights can recompute the digest and bind a false document to the right
    event (the row is the index's own cache, trusted no more than its rows): the index then goes wrong,
    and the check that re-derives it from the first event of each stream says so."""
    from eventstore import chain, replay_cache
    from projections.runs import STATE_EVERY, check_index

    n = STATE_EVERY + 20
    with IndexedEventStore(store_url) as store:
        _long_run(store, "long", n)
        forged = replay_cache.encode_state({"taskId": "FORGED", "status": "forged", "n": -1})
        _set_state(store, "long", state=forged, state_sha256=chain.digest(forged))
    with IndexedEventStore(store_url) as fresh:
        fresh.append("long", [NewEvent("document.patched", {"ops": []})], expected_version=n)
        assert [r.task_id for r in list_runs(fresh) if r.stream_id == "long"] == ["FORGED"]
        problems = check_index(fresh)
        assert [p[0] for p in problems] == ["long"] and "FORGED" in problems[0][2]


# ---------------------------------------------------------------- CLI


def test_cli_runs_json_table_and_errors(store_url: str) -> None:
    indexed = IndexedEventStore(store_url)
    try:
        for i, name in enumerate(DIALECTS):
            _ingest(indexed, name, _simulate(name, 30 + i))
    finally:
        indexed.close()
    cli, runner = register(), CliRunner()
    res = runner.invoke(cli, ["--url", store_url, "runs", "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # NDJSON: one run per line
    assert len(rows) == len(DIALECTS)
    assert list(rows[0]) == ["stream_id", "dialect", "project", "task_id", "title", "status", "phase",
                             "started_at", "last_event_at", "events", "findings", "unreadable", "lens_failures", "sessions"]
    res = runner.invoke(cli, ["--url", store_url, "runs", "--json", "--dialect", DIALECTS[0]])
    assert [json.loads(line)["dialect"] for line in res.stdout.splitlines()] == [DIALECTS[0]]
    res = runner.invoke(cli, ["--url", store_url, "runs"])
    assert res.exit_code == 0
    for r in rows:
        assert r["stream_id"] in res.stdout
    res = runner.invoke(cli, ["--url", store_url, "runs", "--status", "no-such-status"])
    assert res.exit_code == 0 and res.stdout == "" and "no runs match" in res.stderr
    res = runner.invoke(cli, ["--url", store_url, "runs", "--since", "yesterday"])
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: --since expects an ISO date")


def test_a_run_never_starts_after_its_last_event(store_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Snapshot files whose times run backwards (copied, touched out of order): the run starts at its
    earliest event and was last active at its latest, in the index, in `runs` and once rebuilt."""
    import os

    files = []
    for i, stamp in enumerate([1_767_225_600, 1_767_222_000, 1_767_229_200]):  # 00:00, 23:00 the day before, 01:00
        f = tmp_path / f"{i}.json"
        f.write_text(json.dumps({"taskId": "BACK", "n": i}))
        os.utime(f, (stamp, stamp))
        files.append(f)
    runner = CliRunner()
    for f in files[:2]:  # one capture each: the second's time is before the first's
        assert runner.invoke(register(), ["--url", store_url, "ingest", "generic", str(f)]).exit_code == 0
    [row] = [json.loads(x) for x in runner.invoke(register(), ["--url", store_url, "runs", "--json"]).stdout.splitlines()]
    assert (row["started_at"], row["last_event_at"]) == ("2025-12-31T23:00:00.000000Z", "2026-01-01T00:00:00.000000Z")
    assert runner.invoke(register(), ["--url", store_url, "ingest", "generic", str(files[2])]).exit_code == 0
    [row] = [json.loads(x) for x in runner.invoke(register(), ["--url", store_url, "runs", "--json"]).stdout.splitlines()]
    assert (row["started_at"], row["last_event_at"]) == ("2025-12-31T23:00:00.000000Z", "2026-01-01T01:00:00.000000Z")
    store = IndexedEventStore(store_url)
    try:
        rebuild(store)
        assert [r.to_dict() for r in list_runs(store)] == [row]
    finally:
        store.close()


def test_an_erasure_takes_the_kept_documents_and_none_is_kept_again(store_url: str) -> None:
    """A kept document holds the content of the events folded into it: erasing an event of the stream
    deletes the stream's rows, and a process whose memory still holds the document folded before the
    erasure keeps none again."""
    from sqlalchemy import text

    from eventstore.erasure import erase
    from projections.runs import STATE_EVERY

    def kept() -> int:
        with store.engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM projection_states")).scalar_one())

    with IndexedEventStore(store_url) as store:
        _long_run(store, "long", STATE_EVERY + 20)
        assert kept() == 1
        first = next(iter(store.read_stream("long"))).event_id
        erase(store, reason="a request", event_id=first, scrub=False)
        assert kept() == 0
        # The document this process folded before the erasure is still in its memory: never stored again.
        store.append("long", [NewEvent("document.patched", {"ops": []}) for _ in range(STATE_EVERY)], dialect="generic")
        assert kept() == 0
