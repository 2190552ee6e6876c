"""The promises of retention, holds and erasure, stated one by one through the API (eventstore/erasure.py).

Nothing under a hold is erased or purged, and the refusal names the hold; a policy below the floor of
180 days is refused unless ``below_floor``; only payloads past their policy are purged; every admin
event records who, what, why and how many; an erased event's content, salt and blobs are gone and
verify passes.  tests/test_erasure.py covers the same through the CLI on real transcripts; these are
quick and name the rule each checks (tests/mutation/equivalent.md).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from eventstore import erasure, replay_cache
from eventstore.erasure import (
    ADMIN_STREAM,
    FLOOR_DAYS,
    EraseResult,
    Hold,
    Policies,
    Retention,
    add_hold,
    apply_retention,
    due,
    erase,
    needles,
    parse_duration,
    policies,
    refuse,
    release_hold,
    set_retention,
)
from eventstore.errors import ContentErased, EvstoreError, HoldInForce, InvalidEvent
from eventstore.store import EventStore, NewEvent
from eventstore.verify import verify


@pytest.fixture(autouse=True)
def _actor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_ACTOR", "dpo@example.org")


def _admin(store: EventStore) -> list[tuple[str, dict[str, Any]]]:
    if store.stream_info(ADMIN_STREAM) is None:
        return []
    return [(e.type, e.payload) for e in store.read_stream(ADMIN_STREAM)]


def _payloads(store: EventStore) -> dict[tuple[str, int], bytes]:
    return {(e.stream_id, e.version): e.data for e in store.iter_all() if e.stream_id != ADMIN_STREAM}


def test_durations_are_days_weeks_or_years() -> None:
    assert [parse_duration(t) for t in ("180d", "26w", "1y", " 2 Weeks ", "3 days", "1 year", "10D")] == \
        [180, 182, 365, 14, 3, 365, 10]
    with pytest.raises(InvalidEvent, match='Duration "soon" is not one evstore reads .* 180d, 26w, 1y'):
        parse_duration("soon")
    with pytest.raises(InvalidEvent, match='"' + "x" * 40 + '" is not'):  # a long text is cut at 40
        parse_duration("x" * 100)
    with pytest.raises(InvalidEvent):
        parse_duration("180dd")


def test_the_actor_is_evstore_actor_else_the_login_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert erasure.actor() == "dpo@example.org"
    monkeypatch.setenv("EVSTORE_ACTOR", "")
    monkeypatch.setenv("LOGNAME", "login-name-7")
    assert erasure.actor() == "login-name-7"


def test_a_hold_by_a_user_the_system_cannot_name_is_recorded_by_unknown(store: EventStore,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container whose uid has no passwd entry and no USER/LOGNAME, getpass raises: the hold is still
    recorded, by "unknown"."""
    import getpass

    def no_user() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.delenv("EVSTORE_ACTOR")
    monkeypatch.setattr(getpass, "getuser", no_user)
    assert add_hold(store, "stream", "S", "matter").added_by == "unknown"


def test_policies_and_holds_describe_themselves() -> None:
    r = Retention("dialect", "claude", 200, False, "2026-01-01T00:00:00Z", "ann")
    assert r.describe() == "retention dialect claude: keep payloads 200 days (set 2026-01-01T00:00:00Z by ann)"
    h = Hold("ab12cd34", "project", "P", "matter 5", "2026-01-02T00:00:00Z", "bob")
    assert h.describe() == 'hold ab12cd34 on project "P" (matter 5; added 2026-01-02T00:00:00Z by bob)'


def test_a_hold_covers_its_stream_or_the_streams_of_its_project() -> None:
    on_stream = Hold("1", "stream", "S", "r", "t", "b")
    on_project = Hold("2", "project", "P", "r", "t", "b")
    projects = {"S": "P", "T": "Q"}.get
    assert on_stream.covers("S", None) and not on_stream.covers("T", projects)
    assert on_project.covers("S", projects) and not on_project.covers("T", projects)
    assert not on_project.covers("S", None)  # no lookup: it cannot tell (erase refuses before asking)
    assert not on_project.covers("U", projects)  # a stream of no project
    assert not Hold("3", "project", "P", "r", "t", "b").covers("P", projects)  # the project's name is not a stream


def test_the_most_specific_policy_wins() -> None:
    def ret(scope: str, name: str) -> Retention:
        return Retention(scope, name, 200, False, "t", "b")

    p = Policies(retention={("dialect", "claude"): ret("dialect", "claude"), ("project", "P"): ret("project", "P"),
                            ("stream", "S"): ret("stream", "S")})
    projects = {"S": "P", "T": "P", "U": None}.get
    assert p.policy_for("S", "claude", projects) == ret("stream", "S")
    assert p.policy_for("T", "claude", projects) == ret("project", "P")
    assert p.policy_for("T", "claude", None) == ret("dialect", "claude")  # no lookup: the dialect's
    assert p.policy_for("U", "claude", projects) == ret("dialect", "claude")  # no project
    assert p.policy_for("U", None, projects) is None and p.policy_for("V", "other", projects) is None
    # A project named like a stream is not the stream's policy, nor the other way round.
    q = Policies(retention={("project", "S"): ret("project", "S"), ("dialect", "S"): ret("dialect", "S")})
    assert q.policy_for("S", None, {"S": None}.get) is None


def test_the_floor_is_180_days_unless_below_floor_and_it_is_recorded(store: EventStore) -> None:
    assert FLOOR_DAYS == 180
    with pytest.raises(EvstoreError) as refused:
        set_retention(store, "dialect", "claude", 179)
    assert str(refused.value) == ("Keeping payloads 179 days is below the floor of 180 days (the EU AI Act asks for at "
                                  "least six months of logs) — pass --below-floor to set it anyway (recorded in the "
                                  "admin stream).")
    assert _admin(store) == []  # refused before anything is written
    at_floor = set_retention(store, "dialect", "claude", 180, reason="the law")
    assert at_floor is not None and (at_floor.keep_days, at_floor.below_floor, at_floor.set_by) == \
        (180, False, "dpo@example.org")
    assert at_floor.set_at == next(iter(store.read_stream(ADMIN_STREAM))).recorded_at
    below = set_retention(store, "project", "P", 30, below_floor=True, reason="test data")
    assert below is not None and (below.scope, below.name, below.keep_days, below.below_floor) == ("project", "P", 30, True)
    # below_floor given for a policy at or above the floor records nothing below it.
    above = set_retention(store, "stream", "S", 400, below_floor=True)
    assert above is not None and above.below_floor is False
    at_floor_anyway = set_retention(store, "stream", "F", 180, below_floor=True)
    assert at_floor_anyway is not None and at_floor_anyway.below_floor is False
    set_retention(store, "stream", "F", None)
    assert set_retention(store, "stream", "S", None, below_floor=True) is None  # removed
    assert set_retention(store, "stream", "never-set", None) is None  # removing what is not there: recorded, no error
    assert [(t, {k: v for k, v in d.items() if k != "reason"}) for t, d in _admin(store)] == [
        ("evstore.retention_set", {"scope": "dialect", "name": "claude", "keep_days": 180, "below_floor": False,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "project", "name": "P", "keep_days": 30, "below_floor": True,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "stream", "name": "S", "keep_days": 400, "below_floor": False,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "stream", "name": "F", "keep_days": 180, "below_floor": False,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "stream", "name": "F", "keep_days": None, "below_floor": False,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "stream", "name": "S", "keep_days": None, "below_floor": False,
                                   "by": "dpo@example.org"}),
        ("evstore.retention_set", {"scope": "stream", "name": "never-set", "keep_days": None, "below_floor": False,
                                   "by": "dpo@example.org"}),
    ]
    assert [d["reason"] for _, d in _admin(store)][:6] == ["the law", "test data", "", "", "", ""]
    assert sorted(policies(store).retention) == [("dialect", "claude"), ("project", "P")]
    with pytest.raises(InvalidEvent, match='Retention scope "team" is not dialect, project or stream'):
        set_retention(store, "team", "x", 400)


def test_holds_are_recorded_listed_and_released_by_id_or_name(store: EventStore) -> None:
    assert policies(store).holds == {}
    with pytest.raises(InvalidEvent, match='Hold scope "dialect" is not stream or project'):
        add_hold(store, "dialect", "claude", "matter")
    with pytest.raises(InvalidEvent, match=r"^A hold needs a reason \(--reason\): the matter it is kept for\.$"):
        add_hold(store, "stream", "S", "  ")
    a = add_hold(store, "stream", "S", "matter 1")
    b = add_hold(store, "project", "P", "matter 2")
    c = add_hold(store, "stream", "T", "matter 3")
    assert len(a.hold_id) == 8 and int(a.hold_id, 16) >= 0 and len({a.hold_id, b.hold_id, c.hold_id}) == 3
    assert (a.scope, a.name, a.reason, a.added_by) == ("stream", "S", "matter 1", "dpo@example.org")
    assert a.added_at == next(iter(store.read_stream(ADMIN_STREAM))).recorded_at
    assert policies(store).holds == {h.hold_id: h for h in (a, b, c)}
    assert release_hold(store, b.hold_id, "closed") == [b]  # by id
    assert release_hold(store, "T", "closed too") == [c]  # by what it is on
    assert policies(store).holds == {a.hold_id: a}
    assert _admin(store)[-2:] == [
        ("evstore.hold_released", {"hold_id": b.hold_id, "scope": "project", "name": "P", "reason": "closed",
                                   "by": "dpo@example.org"}),
        ("evstore.hold_released", {"hold_id": c.hold_id, "scope": "stream", "name": "T", "reason": "closed too",
                                   "by": "dpo@example.org"})]
    assert _admin(store)[0] == ("evstore.hold_added", {"hold_id": a.hold_id, "scope": "stream", "name": "S",
                                                       "reason": "matter 1", "by": "dpo@example.org"})
    with pytest.raises(EvstoreError, match='No hold in force is "P" or is on "P" — `evstore hold show` lists them'):
        release_hold(store, "P", "again")


def test_the_needles_of_a_text_are_its_utf8_and_its_json_string_form() -> None:
    assert needles("plain text") == [b"plain text"]
    assert needles('say "hi"\n') == [b'say "hi"\n', b'say \\"hi\\"\\n']
    assert needles("Ünï") == ["Ünï".encode()]  # msgspec writes UTF-8 as is


def test_an_erase_result_says_everything_it_counts() -> None:
    r = EraseResult("purged", "why", events=3, blobs=1, streams=["S"], batches=2, cache_rows=4, scrubbed=["v"],
                    held=["T"])
    assert r.to_dict() == {"kind": "purged", "reason": "why", "events": 3, "blobs": 1, "streams": ["S"], "batches": 2,
                           "cache_rows": 4, "scrubbed": ["v"], "held": ["T"]}


def _blob(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_erasure_empties_content_salt_and_unnamed_blobs_and_records_who_what_why_how_many(store: EventStore) -> None:
    shared, own = b"shared image bytes", b"own image bytes"
    store.append("S", [NewEvent("t.x", {"i": 1}, meta={"blobs": [_blob(shared), _blob(own)], "transcript": {"o": 9}}),
                       NewEvent("t.x", {"i": 2}), NewEvent("t.x", {"i": 3})],
                 blobs={_blob(shared): shared, _blob(own): own})
    store.append("T", [NewEvent("t.x", {"j": 1}, meta={"blobs": [_blob(shared)]})])
    store.append("U", [NewEvent("t.x", {"k": 1})])
    state = store.stream_info("S")
    assert state is not None
    replay_cache.save(store, state.stream_pk, "test", 2, {"i": 2})  # a folded document holds content too
    seen: list[int] = []
    r = erase(store, reason="GDPR 7", stream_ids=["S", "U"], batch=2, on_batch=seen.append)
    assert (r.kind, r.reason, r.events, r.blobs, r.streams, r.batches) == ("erased", "GDPR 7", 4, 1, ["S", "U"], 2)
    assert r.cache_rows == 1  # dropped by the first batch, counted in the result
    assert [s.dialect for s in store.list_streams() if s.stream_id == ADMIN_STREAM] == [None]
    assert seen == [2, 4] and r.scrubbed == store.backend.scrub(store._raw())
    assert _payloads(store) == {("S", 1): b"", ("S", 2): b"", ("S", 3): b"", ("T", 1): b'{"j":1}', ("U", 1): b""}
    with store.reading() as cur:
        cur.execute("SELECT sha256 FROM blobs WHERE length(data) > 0")
        assert [bytes(x[0]).hex() for x in cur.fetchall()] == [_blob(shared)]  # T still names it
        cur.execute("SELECT count(*) FROM events WHERE salt IS NOT NULL AND length(data) = 0")
        assert cur.fetchone()[0] == 0
        assert store.backend.kept_meta(cur, 1) == '{"transcript":{"o":9}}'
        assert store.backend.kept_meta(cur, 2) is None
    admin = _admin(store)
    assert [t for t, _ in admin] == ["evstore.erased", "evstore.erased"]
    first = admin[0][1]
    assert first == {"reason": "GDPR 7", "events": 2, "streams": ["S"], "positions": [1, 2], "by": "dpo@example.org",
                     "selector": {"streams": ["S", "U"], "event_id": None, "match": None, "recorded_before": None}}
    assert admin[1][1]["streams"] == ["S", "U"] and admin[1][1]["positions"] == [3, 5] and admin[1][1]["events"] == 2
    rows = erasure.explain(store, [1, 4, 5])
    assert sorted(rows) == [1, 5] and rows[1][:2] == ("erased", "GDPR 7")
    assert rows[1][2] == next(iter(store.read_stream(ADMIN_STREAM))).event_id
    report = verify(store)
    assert report.ok and report.erased == 4, report.failures
    # Run again: nothing left to erase, nothing recorded.
    again = erase(store, reason="GDPR 7", stream_ids=["S"], scrub=False)
    assert (again.events, again.batches, again.scrubbed) == (0, 0, []) and len(_admin(store)) == 2


def test_an_erased_blob_keeps_no_digest_of_its_bytes_and_the_database_allows_nothing_else(store: EventStore) -> None:
    """The blob's row goes and its erased_blobs key is random bytes, so no stored value is the SHA-256 of
    the erased bytes (a guess of them is not confirmed); verify still counts it; the triggers refuse the
    DELETE of a blob not recorded as erased and any other change of an erased_blobs row."""
    from conftest import exec_sql
    from sqlalchemy.exc import DBAPIError

    gone, kept = b"a blob of a session erased", b"a blob still named"
    store.append("S", [NewEvent("t.x", {"i": 1}, meta={"blobs": [_blob(gone)]})], blobs={_blob(gone): gone})
    store.append("T", [NewEvent("t.x", {"j": 1}, meta={"blobs": [_blob(kept)]})], blobs={_blob(kept): kept})
    assert erase(store, reason="GDPR 8", stream_ids=["S"]).blobs == 1
    with store.reading() as cur:
        cur.execute("SELECT sha256 FROM blobs")
        assert [bytes(x[0]).hex() for x in cur.fetchall()] == [_blob(kept)]
        cur.execute("SELECT sha256 FROM erased_blobs")
        keys = [bytes(x[0]) for x in cur.fetchall()]
    assert len(keys) == 1 and len(keys[0]) == 32 and keys[0].hex() != _blob(gone)
    report = verify(store)
    assert report.ok and report.erased_blobs == 1 and report.blobs == 1, report.failures
    for sql in ("DELETE FROM blobs", "UPDATE erased_blobs SET admin_event_id = 'x'", "DELETE FROM erased_blobs"):
        with pytest.raises(DBAPIError):
            exec_sql(store, sql)
    store.append("U", [NewEvent("t.x", {"k": 1}, meta={"blobs": [_blob(gone)]})], blobs={_blob(gone): gone})
    assert verify(store).ok  # the same bytes stored again by a later event are a blob like any other


def test_a_match_erases_each_event_holding_the_text_or_naming_a_blob_holding_it(store: EventStore) -> None:
    img = b"...the secret-phrase in an image..."
    store.append("S", [NewEvent("t.x", {"q": 'the "secret-phrase"\n here'}), NewEvent("t.x", {"q": "other"}),
                       NewEvent("t.x", {"q": "x"}, meta={"blobs": [_blob(img)]})], blobs={_blob(img): img})
    r = erase(store, reason="r", match="secret-phrase", scrub=False)
    assert (r.events, r.blobs) == (2, 1)
    assert _payloads(store) == {("S", 1): b"", ("S", 2): b'{"q":"other"}', ("S", 3): b""}
    assert _admin(store)[0][1]["selector"]["match"] == "<text of 13 characters, not recorded>"
    store.append("T", [NewEvent("t.x", {"q": 'say "hi"\n'})])
    assert erase(store, reason="r", match='"hi"\n', scrub=False).events == 1  # found in its JSON form
    assert erase(store, reason="r", match="abcd", dry_run=True).events == 0
    erase(store, reason="r", match="abcd", scrub=False)  # four characters: allowed


def test_an_event_id_and_a_time_select_what_is_erased(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": 1}, event_id="0190f5a4-0000-7000-8000-00000000000a"),
                       NewEvent("t.x", {"i": 2})])
    r = erase(store, reason="r", event_id="0190f5a4-0000-7000-8000-00000000000a", kind="purged", scrub=False)
    assert (r.kind, r.events, _payloads(store)[("S", 2)]) == ("purged", 1, b'{"i":2}')
    assert erasure.explain(store, [1])[1][0] == "purged"
    assert erase(store, reason="r", recorded_before="2000-01-01T00:00:00Z", scrub=False).events == 0


def test_bad_erasures_are_refused_before_anything_is_written(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": 1})])
    with pytest.raises(InvalidEvent) as e:
        erase(store, reason=" ", stream_ids=["S"])
    assert str(e.value) == "An erasure needs a reason (--reason): the request or policy it carries out."
    with pytest.raises(InvalidEvent) as e:
        erase(store, reason="r")
    assert str(e.value) == "Say what to erase: a stream, an event id or a text to match."
    with pytest.raises(InvalidEvent) as e:
        erase(store, reason="r", stream_ids=["S", ADMIN_STREAM])
    assert str(e.value) == ('"evstore.admin" records every policy, hold and erasure; it is never erased (its events hold '
                            "no payload of a run: reasons, counts, stream ids).")
    with pytest.raises(InvalidEvent) as e:
        erase(store, reason="r", match="abc")
    assert str(e.value) == ("--match needs at least 4 characters (3 given): a shorter text would erase far more than "
                            "meant.")
    assert _payloads(store) == {("S", 1): b'{"i":1}'} and _admin(store) == []
    # Each filter alone is enough.
    assert erase(store, reason="r", recorded_before="2999-01-01T00:00:00Z", dry_run=True).events == 1
    assert erase(store, reason="r", stream_ids=[], dry_run=True).events == 0


def test_nothing_under_a_hold_is_erased_and_the_refusal_names_the_hold(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": 1})])
    store.append("T", [NewEvent("t.x", {"i": 2})])
    store.append("U", [NewEvent("t.x", {"i": 3})])
    h = add_hold(store, "stream", "T", "matter 9")
    with pytest.raises(HoldInForce) as e:
        erase(store, reason="r", stream_ids=["S", "T"], kind="purged")
    assert str(e.value) == (f'Stream "T" is under {h.describe()}; nothing was purged — release it '
                            f"(`evstore hold release {h.hold_id} --reason ...`) once the matter is closed.")
    with pytest.raises(HoldInForce, match=f"hold {h.hold_id}"):
        erase(store, reason="r", recorded_before="2999-01-01T00:00:00Z", dry_run=True)  # a dry run too
    assert erase(store, reason="r", stream_ids=["S"], scrub=False).events == 1  # another stream: not held
    p = add_hold(store, "project", "P", "audit")
    with pytest.raises(HoldInForce) as no_lookup:
        erase(store, reason="r", stream_ids=["U"])
    assert str(no_lookup.value) == ("Project holds are in force and no project lookup was given; nothing was erased — "
                                    "erase with `evstore erase` (it reads the projects from the runs index).")
    with pytest.raises(HoldInForce, match=f'Stream "U" is under hold {p.hold_id} on project "P"'):
        erase(store, reason="r", stream_ids=["U"], project_of={"U": "P"}.get)
    assert _payloads(store) == {("S", 1): b"", ("T", 1): b'{"i":2}', ("U", 1): b'{"i":3}'}
    release_hold(store, p.hold_id, "closed")
    assert erase(store, reason="r", stream_ids=["U"], project_of={"U": "P"}.get, scrub=False).events == 1


def test_a_dry_run_counts_and_writes_nothing(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": i}) for i in range(3)])
    store.append("T", [NewEvent("t.x", {"i": 9})])
    r = erase(store, reason="r", recorded_before="2999-01-01T00:00:00Z", dry_run=True)
    assert (r.events, r.streams, r.batches, r.scrubbed) == (4, ["S", "T"], 0, [])
    assert _admin(store) == [] and all(_payloads(store).values())


def test_only_payloads_past_their_policy_are_purged_and_holds_keep_theirs(store: EventStore) -> None:
    store.append("a", [NewEvent("t.x", {"i": 1})], dialect="claude")
    store.append("b", [NewEvent("t.x", {"i": 2})], dialect="claude")
    store.append("c", [NewEvent("t.x", {"i": 3})], dialect="other")
    store.append("d", [NewEvent("t.x", {"i": 4})], dialect="claude")
    set_retention(store, "dialect", "claude", 200)
    set_retention(store, "stream", "d", 400)
    h = add_hold(store, "stream", "b", "matter")
    recorded = datetime.fromisoformat(next(iter(store.read_stream("a"))).recorded_at.replace("Z", "+00:00"))
    now = recorded + timedelta(days=200, seconds=1)  # past 200 days, not past 400
    [(p1, cut1, s1, k1), (p2, cut2, s2, k2)] = sorted(due(store, now=now), key=lambda x: x[0].keep_days)
    assert (p1.name, s1, k1, p2.name, s2, k2) == ("claude", ["a"], ["b"], "d", ["d"], [])
    assert cut1 == (now - timedelta(days=200)).isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert cut1.endswith("Z") and len(cut1) == len("2026-01-01T00:00:00.000000Z")
    not_yet = apply_retention(store, now=recorded + timedelta(days=199))
    assert [(r.events, r.scrubbed) for r in not_yet] == [(0, []), (0, [])]  # nothing purged: nothing to scrub
    dry = apply_retention(store, now=now, dry_run=True)
    assert [(r.events, r.streams, r.held, r.scrubbed) for r in dry] == [(1, ["a"], ["b"], []), (0, [], [], [])]
    assert all(_payloads(store).values()) and [t for t, _ in _admin(store)][-1] == "evstore.hold_added"
    seen: list[int] = []
    done = apply_retention(store, now=now, batch=1, on_batch=seen.append)
    assert seen == [1]
    assert [(r.kind, r.reason, r.events, r.streams, r.held, r.batches) for r in done] == [
        ("purged", p1.describe(), 1, ["a"], ["b"], 1), ("purged", p2.describe(), 0, [], [], 0)]
    assert done[0].scrubbed == store.backend.scrub(store._raw()) and done[1].scrubbed == []
    assert _payloads(store) == {("a", 1): b"", ("b", 1): b'{"i":2}', ("c", 1): b'{"i":3}', ("d", 1): b'{"i":4}'}
    assert _admin(store)[-1][0] == "evstore.purged" and _admin(store)[-1][1]["reason"] == p1.describe()
    assert _admin(store)[-1][1]["selector"]["recorded_before"] == cut1
    assert h.hold_id in policies(store).holds
    assert verify(store).ok


def test_retention_purges_many_streams_in_groups_and_counts_them_all(store: EventStore) -> None:
    """Streams go to ``erase`` 200 at a time; the result adds up every group's events, blobs, batches
    and replay-cache rows."""
    img = b"an image of the first stream"
    store.append("s000", [NewEvent("t.x", {"i": 0}, meta={"blobs": [_blob(img)]})], dialect="claude",
                 blobs={_blob(img): img})
    store.append_many(((f"s{i:03}", NewEvent("t.x", {"i": i}), None) for i in range(1, 201)), dialect="claude")
    for sid in ("s000", "s200"):
        state = store.stream_info(sid)
        assert state is not None
        replay_cache.save(store, state.stream_pk, "test", 1, {"i": sid})
    set_retention(store, "dialect", "claude", 200)
    [dry] = apply_retention(store, now=datetime.now(UTC) + timedelta(days=201), dry_run=True)
    assert (dry.events, len(dry.streams)) == (201, 201)  # each stream counted once
    [r] = apply_retention(store, now=datetime.now(UTC) + timedelta(days=201), scrub=False)
    assert (r.events, len(r.streams), r.batches, r.blobs, r.cache_rows) == (201, 201, 2, 1, 2)
    assert not any(_payloads(store).values())
    assert [d["events"] for t, d in _admin(store) if t == "evstore.purged"] == [200, 1]


def test_retention_reads_projects_through_the_lookup_it_is_given(store: EventStore) -> None:
    """A project's policy purges its streams and a project's hold keeps them, in ``due`` and in
    ``apply_retention`` alike; with project holds in force, the lookup reaches the erasure too."""
    for sid in ("p1", "p2", "q1"):
        store.append(sid, [NewEvent("t.x", {"s": sid})])
    projects = {"p1": "P", "p2": "P", "q1": "Q"}.get
    set_retention(store, "project", "P", 200)
    add_hold(store, "stream", "p2", "matter")
    add_hold(store, "project", "Q", "audit")
    now = datetime.now(UTC) + timedelta(days=201)
    [(policy, cutoff, streams, kept)] = due(store, now=now, project_of=projects)
    assert (policy.name, streams, kept) == ("P", ["p1"], ["p2"])
    assert due(store, now=now) == []  # no lookup: no project's policy applies
    [r] = apply_retention(store, now=now, project_of=projects, scrub=False)
    assert (r.events, r.streams, r.held) == (1, ["p1"], ["p2"])
    assert _payloads(store) == {("p1", 1): b"", ("p2", 1): b'{"s":"p2"}', ("q1", 1): b'{"s":"q1"}'}
    set_retention(store, "project", "Q", 200)
    [_, held] = sorted(apply_retention(store, now=now, project_of=projects, scrub=False), key=lambda x: x.reason)
    assert (held.events, held.held) == (0, ["q1"])


def test_due_cuts_off_at_now_in_utc_by_default(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": 1})], dialect="claude")
    set_retention(store, "dialect", "claude", 200)
    before = datetime.now(UTC) - timedelta(days=200)
    [(_, cutoff, streams, _)] = due(store)
    after = datetime.now(UTC) - timedelta(days=200)
    assert cutoff.endswith("Z") and streams == ["S"]
    assert before <= datetime.fromisoformat(cutoff.replace("Z", "+00:00")) <= after


def test_what_an_erasure_keeps_of_meta_is_the_capture_bookkeeping_only(store: EventStore) -> None:
    """``transcript`` only as a value, ``blobs`` only nested or as a value: nothing is kept, no blob is
    looked for, and the erasure goes through."""
    store.append("S", [NewEvent("t.x", {"i": 1}, meta={"note": "transcript", "x": {"blobs": 1}, "y": "blobs"}),
                       NewEvent("t.x", {"i": 2}, meta={"transcript": {"offset": 5}, "other": 1})])
    r = erase(store, reason="r", stream_ids=["S"], scrub=False)
    assert (r.events, r.blobs) == (2, 0)
    with store.reading() as cur:
        assert store.backend.kept_meta(cur, 1) is None
        assert store.backend.kept_meta(cur, 2) == '{"transcript":{"offset":5}}'


def test_what_an_erasure_keeps_of_a_transcript_confirms_no_guess_of_what_was_read(store: EventStore) -> None:
    """The kept bookkeeping says where capture stopped (file, offset, lines), never a digest of the bytes
    read (plain or keyed): each would confirm a guess of an erased line."""
    where = {"file": "/p/s.jsonl", "offset": 120, "lines": 3}
    store.append("S", [NewEvent("t.x", {"i": 1}, meta={"transcript": {**where, "prefix_sha256": "ab" * 32,
                                                                      "prefix_hmac": "cd" * 32, "key_id": "k1"}}),
                       NewEvent("t.x", {"i": 2}, meta={"transcript": "a note, not an object"})])
    erase(store, reason="r", stream_ids=["S"], scrub=False)
    with store.reading() as cur:
        kept = [store.backend.kept_meta(cur, p) for p in (1, 2)]
    assert [json.loads(k or "null") for k in kept] == [{"transcript": {**where, "key_id": "k1"}},
                                                       {"transcript": "a note, not an object"}]


def test_an_erased_version_keeps_where_it_came_from_not_which_bytes_it_had(store_url: str) -> None:
    """A source version's identity holds the SHA-256 of the file (or record) read: an erasure replaces it
    by where it was, for the erased events only (a migrated store: migration 0011 allows that UPDATE)."""
    from conftest import migrated

    store = EventStore(migrated(store_url))
    def note(source: str) -> NewEvent:
        return NewEvent("t.x", {"i": 1}, meta={"source": {"id": source}})

    store.append("S", [note("file:state.json@9f86d081884c7d65"), note("spool:0123abcd")])
    store.append("T", [note("file:t.json@60303ae22b998861")])
    erase(store, reason="r", stream_ids=["S"], scrub=False)
    try:
        assert store.recorded_sources(["S", "T"]) == {
            "S": [(1, "file:state.json@erased"), (2, "spool:erased")], "T": [(1, "file:t.json@60303ae22b998861")]}
    finally:
        store.close()


def test_an_event_recorded_from_a_git_version_can_be_erased(store_url: str) -> None:
    from conftest import migrated

    store = EventStore(migrated(store_url))
    try:
        store.append("S", [NewEvent("t.x", {"i": 1}, meta={"source": {"id": "git:0123abcd:a/state.json"}})])
        erase(store, reason="r", stream_ids=["S"], scrub=False)
        assert store.recorded_sources(["S"]) == {"S": [(1, "git:erased:a/state.json")]}
    finally:
        store.close()


def test_the_refusal_to_show_erased_content_says_when_and_why(store: EventStore) -> None:
    store.append("S", [NewEvent("t.x", {"i": 1})])
    erase(store, reason="GDPR 3", stream_ids=["S"], scrub=False)
    admin_id = next(iter(store.read_stream(ADMIN_STREAM))).event_id
    kind, reason, aid, at = erasure.explain(store, [1])[1]
    assert (kind, reason, aid) == ("erased", "GDPR 3", admin_id)
    err = refuse(store, "S", 1, 1)
    assert isinstance(err, ContentErased) and str(err) == (
        f'The content of stream "S" version 1 was erased at {at} (GDPR 3; admin event {admin_id} in stream '
        '"evstore.admin") — its header, digests and chain hash remain, so `evstore verify` and every proof still '
        "hold; the content cannot be shown.")
    assert str(refuse(store, None, 1, 1)).startswith("The content of version 1 was erased at")
    assert erasure.describe(None) == "missing (an empty payload with no erasure recorded; run `evstore verify`)"


def test_without_scrub_nothing_rewrites_the_file_so_an_open_reader_does_not_stop_a_purge(sqlite_url: str) -> None:
    """The CLI purges with ``scrub=False`` and scrubs once at the end (after closing what it holds open):
    ``apply_retention`` and ``erase`` then never VACUUM, which a reader holding the file open would stop."""
    import sqlite3

    from conftest import migrated

    from eventstore.config import sqlite_file

    with EventStore(migrated(sqlite_url)) as store:
        store.append("S", [NewEvent("t.x", {"i": 1})], dialect="claude")
        store.append("T", [NewEvent("t.x", {"i": 2})], dialect="claude")
        set_retention(store, "stream", "S", 200)
        reader = sqlite3.connect(str(sqlite_file(store.url)), timeout=0.1)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 3  # a read transaction, open
            [r] = apply_retention(store, now=datetime.now(UTC) + timedelta(days=201), scrub=False)
            assert (r.events, r.scrubbed) == (1, [])
            assert erase(store, reason="r", stream_ids=["T"], scrub=False).events == 1
        finally:
            reader.close()
        assert not any(_payloads(store).values())


def test_a_hold_is_found_past_the_first_5000_payloads_an_erasure_would_touch(sqlite_url: str) -> None:
    """What an erasure would touch is read 5000 events at a time: every page is read, each event once,
    so a held stream whose events come after the first page still refuses the whole request."""
    from conftest import migrated

    with EventStore(migrated(sqlite_url)) as store:
        store.append_many(("A", NewEvent("t.x", {"i": i}), None) for i in range(5001))
        store.append("B", [NewEvent("t.x", {"i": 0})])
        everything = {"reason": "r", "recorded_before": "2999-01-01T00:00:00Z"}
        dry = erase(store, **everything, dry_run=True)  # type: ignore[arg-type]
        assert (dry.events, dry.streams) == (5002, ["A", "B"])
        h = add_hold(store, "stream", "B", "matter")
        with pytest.raises(HoldInForce, match=f'Stream "B" is under hold {h.hold_id}'):
            erase(store, **everything)  # type: ignore[arg-type]
        assert all(_payloads(store).values())  # nothing was erased
