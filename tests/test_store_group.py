"""`EventStore.append_group` (the group commit of `evstore serve`'s appends), SQLite and PostgreSQL:
each item succeeds or fails alone, in list order, as if appended by itself; what failed leaves nothing
behind, and the log stays gapless and verifiable."""

from __future__ import annotations

from typing import Any

from conftest import exec_sql

from eventstore.errors import ConcurrencyError, DuplicateEventId, InvalidEvent
from eventstore.store import AppendResult, EventStore, GroupAppend, NewEvent
from eventstore.verify import verify

ID = "0190e6a1-0000-7000-8000-00000000000{}"


def ev(n: int, event_id: str | None = None, **data: Any) -> NewEvent:
    return NewEvent("t.noted", {"n": n, **data}, event_id=event_id)


def test_items_succeed_or_fail_alone_in_order(store_url: str) -> None:
    with EventStore(store_url) as store:
        store.append("a", [ev(1), ev(2)])
        refused = RuntimeError("refused before anything was written")
        items = [
            GroupAppend.of("b", [ev(1), ev(2)], expected_version="no stream"),  # 0: a new stream
            GroupAppend.of("a", [ev(3)], expected_version=0),  # 1: a conflict (a is at 2)
            GroupAppend.of("c", [ev(1, ID.format(1))]),  # 2: a client event id
            GroupAppend.of("d", [ev(9, ID.format(1))]),  # 3: the same id, other content and stream
            GroupAppend.of("c", [ev(1, ID.format(1))]),  # 4: item 2 again: the idempotent retry
            GroupAppend.of("b", [ev(3)], expected_version=2),  # 5: sees item 0's write
            GroupAppend.of("e", [ev(1)]),  # 6: refused by `before`
            GroupAppend.of("f", [ev(1), ev(2, ID.format(2)), ev(3, ID.format(2), x=1)]),  # 7: a changed repeat
            GroupAppend.of("a", [ev(3)], expected_version=2),  # 8: after the conflict, right
            GroupAppend.of("g", [ev(1)]),  # 9: replaced below
        ]
        items[9] = GroupAppend.of("g", [NewEvent("t.noted", {"n": 1}, meta={"blobs": ["ab" * 32]})])  # unknown blob
        seen: list[Any] = []

        def before(cur: Any) -> dict[int, Exception]:
            seen.append(cur)
            return {6: refused}

        out = store.append_group(items, before=before)
        assert len(seen) == 1 and len(out) == len(items)
        assert isinstance(out[0], AppendResult) and (out[0].version, out[0].positions) == (2, [3, 4])
        assert isinstance(out[1], ConcurrencyError)
        assert isinstance(out[2], AppendResult) and out[2].positions == [5] and not out[2].duplicate
        assert isinstance(out[3], DuplicateEventId)
        assert isinstance(out[4], AppendResult) and out[4].duplicate and out[4].positions == [5]
        assert isinstance(out[5], AppendResult) and (out[5].version, out[5].positions) == (3, [6])
        assert out[6] is refused
        assert isinstance(out[7], DuplicateEventId)
        assert isinstance(out[8], AppendResult) and (out[8].version, out[8].positions) == (3, [7])
        assert isinstance(out[9], InvalidEvent)
        every = list(store.iter_all())
        assert [e.position for e in every] == list(range(1, 8))  # gapless: the failed items took no position
        assert [(e.stream_id, e.version) for e in every] == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("c", 1),
                                                              ("b", 3), ("a", 3)]
        assert {s.stream_id for s in store.list_streams()} == {"a", "b", "c"}  # d, e, f, g: no stream left
        assert verify(store).ok
        store.append("a", [ev(4)], expected_version=3)  # the store goes on from there
        assert verify(store).ok


def test_a_group_that_writes_nothing_commits_nothing(store_url: str) -> None:
    with EventStore(store_url) as store:
        store.append("a", [ev(1, ID.format(1))])
        out = store.append_group([GroupAppend.of("a", [ev(1, ID.format(1))]),
                                  GroupAppend.of("a", [ev(2)], expected_version=5)])
        assert isinstance(out[0], AppendResult) and out[0].duplicate and isinstance(out[1], ConcurrencyError)
        assert store.max_position() == 1 and verify(store).ok



def _fail_source(store: EventStore, ident: str) -> None:
    """A trigger that aborts the insert of ``ident``'s source_versions row: the database fails the
    item after its events (and the tree nodes they complete) went in, as a real error would."""
    if store.url.startswith("sqlite"):
        exec_sql(store, f"CREATE TRIGGER boom BEFORE INSERT ON source_versions WHEN NEW.source_id = '{ident}' "
                        "BEGIN SELECT RAISE(ABORT, 'boom'); END")
    else:
        exec_sql(store, "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                        f"IF NEW.source_id = '{ident}' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$")
        exec_sql(store, "CREATE TRIGGER boom BEFORE INSERT ON source_versions FOR EACH ROW EXECUTE FUNCTION boom()")


def test_an_item_rolled_back_after_completing_tree_nodes_leaves_the_tree_of_the_items_kept(store_url: str) -> None:
    """The Merkle tree's nodes are computed as events are added: an item that completes nodes
    (16 leaves a node) and then fails must take its nodes and the tree's edge back with it."""
    with EventStore(store_url) as store:
        _fail_source(store, "boom")
        store.append("a", [ev(i) for i in range(1, 10)])  # 9 leaves: the next 7 complete a level-4 node
        failing = [*(ev(i) for i in range(1, 30)), NewEvent("t.noted", {"n": 30}, meta={"source": {"id": "boom"}})]
        out = store.append_group([
            GroupAppend.of("b", [ev(i) for i in range(1, 21)]),  # 20 leaves: positions 10-29, a node at 16
            GroupAppend.of("c", failing),  # 30 leaves (nodes at 32, 48) written, then the database refuses
            GroupAppend.of("d", [ev(i) for i in range(1, 40)]),  # 39 leaves where the failed item's were
        ])
        assert isinstance(out[0], AppendResult) and isinstance(out[1], Exception) and "boom" in str(out[1])
        assert isinstance(out[2], AppendResult) and out[2].positions == list(range(30, 69))
        report = verify(store)  # the chains, and the tree recomputed from every leaf against the stored nodes
        assert report.ok, [str(f) for f in report.failures]
        store.append("e", [ev(i) for i in range(1, 40)])  # the process's edge after the group is the right one
        report = verify(store)
        assert report.ok, [str(f) for f in report.failures]


def test_a_group_of_existing_streams_reads_them_ahead_and_writes_its_events_together(store_url: str) -> None:
    """Streams that exist: the group reads them and its recorded ids in one go and writes every event
    at the end, with no savepoint; an item failing its checks still fails alone, a retry within the
    group (its ids not written yet) is answered as a duplicate, and each stream's head moves."""
    with EventStore(store_url) as store:
        for sid in "abcd":
            store.append(sid, [ev(0)])
        store.append("d", [ev(1, ID.format(3))])
        out = store.append_group([
            GroupAppend.of("a", [ev(1), ev(2)], expected_version=1),  # 0
            GroupAppend.of("b", [ev(1)], expected_version=5),  # 1: a conflict
            GroupAppend.of("c", [ev(1, ID.format(1)), ev(2, ID.format(2))], expected_version=1),  # 2
            GroupAppend.of("c", [ev(1, ID.format(1)), ev(2, ID.format(2))], expected_version=1),  # 3: item 2 again
            GroupAppend.of("b", [ev(1, ID.format(1))]),  # 4: item 2's id, other content
            GroupAppend.of("d", [ev(1, ID.format(3)), ev(2, ID.format(4))]),  # 5: recorded and new ids mixed
            GroupAppend.of("a", [ev(3)], expected_version=3),  # 6: sees item 0's write
            GroupAppend.of("d", [ev(1, ID.format(3))]),  # 7: recorded before the group: a duplicate
        ])
        assert isinstance(out[0], AppendResult) and out[0].positions == [6, 7]
        assert isinstance(out[1], ConcurrencyError)
        assert isinstance(out[2], AppendResult) and out[2].positions == [8, 9] and not out[2].duplicate
        assert isinstance(out[3], AppendResult) and out[3].duplicate and (out[3].version, out[3].positions) == (3, [8, 9])
        assert isinstance(out[4], DuplicateEventId) and isinstance(out[5], DuplicateEventId)
        assert isinstance(out[6], AppendResult) and (out[6].version, out[6].positions) == (4, [10])
        assert isinstance(out[7], AppendResult) and out[7].duplicate and out[7].positions == [5]
        assert [store.stream_version(s) for s in "abcd"] == [4, 1, 3, 2]
        assert [e.position for e in store.iter_all()] == list(range(1, 11))
        report = verify(store)
        assert report.ok, [str(f) for f in report.failures]
        store.append_group([GroupAppend.of(s, [ev(9)], expected_version=v) for s, v in zip("abcd", [4, 1, 3, 2], strict=True)])
        assert [store.stream_version(s) for s in "abcd"] == [5, 2, 4, 3] and verify(store).ok


def test_a_later_item_completing_tree_nodes_has_the_leaves_of_the_items_before_it(store_url: str) -> None:
    """The group's first item completes no node of the Merkle tree and this process has no edge of
    the tree (another process appended last): a later item that completes nodes needs the earlier
    items' leaves, which the group writes only at its end."""
    with EventStore(store_url) as other:
        for sid in "ab":
            other.append(sid, [ev(i) for i in range(1, 5)])  # 8 leaves
    with EventStore(store_url) as store:
        other_url = store.url
        with EventStore(other_url) as other:
            other.append("a", [ev(5)], expected_version=4)  # 9 leaves: this store's edge (if any) is stale
        passes: list[Any] = []
        out = store.append_group([
            GroupAppend.of("a", [ev(6), ev(7)], expected_version=5),  # leaves 10, 11: no node completed
            GroupAppend.of("b", [ev(i) for i in range(5, 30)], expected_version=4),  # completes nodes at 16, 32
        ], before=lambda cur: passes.append(cur) or {})
        assert all(isinstance(r, AppendResult) for r in out), out
        assert len(passes) == 1  # in one pass (not again item by item after the database refused)
        report = verify(store)
        assert report.ok, [str(f) for f in report.failures]


def test_an_invalid_stream_id_fails_its_request_only_in_the_one_pass(store_url: str) -> None:
    """A stream id no backend can store (a NUL character, over 255 characters) is not read ahead with
    the group's streams (PostgreSQL refuses a NUL in any text it is sent): its request fails alone."""
    with EventStore(store_url) as store:
        store.append("a", [ev(0)])
        passes: list[Any] = []
        out = store.append_group([GroupAppend("bad\x00id", [ev(1)]), GroupAppend("x" * 300, [ev(1)]),
                                  GroupAppend.of("a", [ev(1)], expected_version=1)],
                                 before=lambda cur: passes.append(cur) or {})
        assert isinstance(out[0], InvalidEvent) and isinstance(out[1], InvalidEvent)
        assert isinstance(out[2], AppendResult) and out[2].positions == [2]
        assert len(passes) == 1 and verify(store).ok
