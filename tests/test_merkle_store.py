"""The Merkle tree the store keeps (eventstore/tree.py, migration 0007), on SQLite and PostgreSQL:
its roots and subtree hashes against RFC 9162 §2.1's definition written out here (not the
project's code), its nodes written in the append's transaction, the migration filling a store
that had events before it, and ``verify`` comparing the stored nodes with the leaves."""

from __future__ import annotations

import hashlib
import random

import pytest
from conftest import exec_sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from eventstore import migrate, tree
from eventstore.store import EventStore, NewEvent
from eventstore.verify import verify_tree


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, as written: MTH({}) = SHA-256(), MTH({d0}) = SHA-256(0x00 || d0),
    MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])) with k the largest power of two < n."""
    if not leaves:
        return hashlib.sha256().digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def _leaves(store: EventStore) -> list[bytes]:
    return [e.hash for e in store.iter_all()]


def _fill(store: EventStore, n: int, rng: random.Random) -> None:
    """``n`` events in appends of random sizes over a few streams (single appends and append_many)."""
    done = 0
    while done < n:
        size = min(n - done, rng.choice([1, 1, 2, 3, 15, 16, 17, 40]))
        if rng.random() < 0.3:
            store.append_many((f"s{rng.randrange(4)}", NewEvent("demo.note", {"i": done + i}), None)
                              for i in range(size))
        else:
            store.append(f"s{rng.randrange(4)}", [NewEvent("demo.note", {"i": done + i}) for i in range(size)])
        done += size


def _stored_nodes(store: EventStore) -> list[tuple[int, int, bytes]]:
    with store.reading() as cur:
        return list(store.backend.all_tree_nodes(cur))


def test_roots_and_subtrees_match_the_rfc(store: EventStore) -> None:
    rng = random.Random(34)
    _fill(store, 300, rng)
    leaves = _leaves(store)
    assert len(leaves) == 300
    for size in [1, 2, 3, 15, 16, 17, 31, 255, 256, 257, 299, 300]:
        with store.tree(size) as t:
            assert t.root() == mth(leaves[:size]), size
    with store.tree() as t:
        assert t.size == 300
        for _ in range(60):
            start = rng.randrange(300)
            end = rng.randrange(start + 1, 301)
            assert t.subtree(start, end) == mth(leaves[start:end]), (start, end)
    # 300 leaves: 18 nodes at level 4 (16 leaves each), 1 at level 8 (256 leaves)
    nodes = _stored_nodes(store)
    assert [(lv, i) for lv, i, _ in nodes] == [(4, i) for i in range(18)] + [(8, 0)]
    assert nodes == sorted(tree.all_nodes(leaves))
    assert nodes[-1][2] == mth(leaves[:256])
    assert store.tree.__doc__


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12))
def test_any_sequence_of_appends_keeps_the_nodes_of_the_leaves(sqlite_url: str, sizes: list[int]) -> None:
    """Whatever the batch sizes, the stored nodes are those the leaves make (none missing, none extra)."""
    from conftest import migrated

    with EventStore(migrated(sqlite_url)) as store:
        before = store.max_position()
        for i, n in enumerate(sizes):
            store.append(f"h{i % 3}", [NewEvent("demo.note", {"n": j}) for j in range(n)])
        leaves = _leaves(store)
        assert _stored_nodes(store) == sorted(tree.all_nodes(leaves))
        with store.tree() as t:
            assert t.root() == mth(leaves)
        assert len(leaves) == before + sum(sizes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(st.tuples(st.booleans(), st.sampled_from([1, 2, 15, 16, 17, 31, 250, 300])),
                        min_size=1, max_size=10))
def test_two_appenders_taking_turns_keep_the_nodes_of_the_leaves(sqlite_url: str,
                                                                   appends: list[tuple[bool, int]]) -> None:
    """Each process keeps the tree's right edge it last wrote; when the other one appended meanwhile
    the kept edge is of another size and must not be used (a wrong node would be written for good)."""
    from conftest import migrated

    url = migrated(sqlite_url)
    with EventStore(url) as a, EventStore(url) as b:
        for first, n in appends:
            (a if first else b).append("h", [NewEvent("demo.note", {"n": j}) for j in range(n)])
        leaves = _leaves(a)
        assert _stored_nodes(a) == sorted(tree.all_nodes(leaves))
        with b.tree() as t:
            assert t.root() == mth(leaves)


def test_one_appender_alone_reads_no_tree_row_back(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """After its first append, a process appending alone has every child a new parent needs."""
    store.append("A", [NewEvent("demo.note", {"i": i}) for i in range(20)])

    def refuse(*_: object) -> None:
        raise AssertionError("the append read the stored tree back")

    for name in ("leaf_data", "tree_nodes", "tree_ranges"):
        monkeypatch.setattr(store.backend, name, refuse)
    for n in (1, 3, 12, 16, 40, 300, 5, 4000):
        store.append("A", [NewEvent("demo.note", {"i": i}) for i in range(n)])
    monkeypatch.undo()
    leaves = _leaves(store)
    assert _stored_nodes(store) == sorted(tree.all_nodes(leaves))


def test_a_failed_append_writes_no_node(store: EventStore) -> None:
    store.append("A", [NewEvent("demo.note", {"i": i}) for i in range(15)])
    with pytest.raises(Exception):  # noqa: B017, PT011 - any failure: the point is what is left
        store.append("A", [NewEvent("demo.note", {"i": 1})], expected_version=3)
    assert _stored_nodes(store) == []
    store.append("A", [NewEvent("demo.note", {"i": 15})])
    assert [(lv, i) for lv, i, _ in _stored_nodes(store)] == [(4, 0)]


def test_the_migration_fills_the_tree_of_a_store_that_had_events(store: EventStore) -> None:
    rng = random.Random(7)
    _fill(store, 280, rng)
    leaves = _leaves(store)
    expected = _stored_nodes(store)
    assert len(expected) == 18
    migrate_to = migrate.head_revision(store.engine)
    store.close()
    _downgrade(store, "0006")
    with store.engine.connect() as conn:
        assert not store.engine.dialect.has_table(conn, "tree_nodes")
    migrate.upgrade(store.engine, migrate_to)
    reopened = EventStore(store.url)
    try:
        assert _stored_nodes(reopened) == expected
        with reopened.tree() as t:
            assert t.root() == mth(leaves)
        reopened.append("A", [NewEvent("demo.note", {"i": i}) for i in range(20)])  # 300: node 4/18, 8/0 ...
        assert _stored_nodes(reopened) == sorted(tree.all_nodes(_leaves(reopened)))
    finally:
        reopened.close()


def _downgrade(store: EventStore, revision: str) -> None:
    from alembic import command

    with store.engine.begin() as conn:
        command.downgrade(migrate._config(store.engine, conn), revision)


def test_verify_compares_the_stored_nodes_with_the_leaves(store: EventStore) -> None:
    from eventstore.verify import verify

    store.append("A", [NewEvent("demo.note", {"i": i}) for i in range(40)])
    assert verify(store).ok
    triggers = {"sqlite": "DROP TRIGGER tree_nodes_no_update",
                "postgresql": "DROP TRIGGER tree_nodes_no_update_delete ON tree_nodes"}
    exec_sql(store, triggers[store.engine.dialect.name])
    exec_sql(store, "UPDATE tree_nodes SET hash = :h WHERE level = 4 AND idx = 1", h=bytes(32))
    found = [(f.stream_id, f.version, f.field_class) for f in verify(store).failures]
    assert found == [("A", 17, "tree")]  # node 4/1 covers leaves 16..31: positions 17..32
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM tree_nodes")).scalar() == 2


def test_a_proof_reads_the_tree_in_two_statements(sqlite_url: str) -> None:
    """Prefetched: an inclusion proof (with the check of the signed root) runs a handful of statements,
    not one per subtree (what made a PostgreSQL proof cost 33 ms: a round trip each)."""
    from conftest import migrated

    from eventstore import checkpoints
    from eventstore.tlog.note import NoteSigner

    with EventStore(migrated(sqlite_url)) as store:
        for i in range(7):
            store.append(f"s{i}", [NewEvent("demo.note", {"i": j}) for j in range(99)])
        note = checkpoints.make_checkpoint(store, NoteSigner.generate("t.example"))
        seen: list[str] = []
        store._raw().set_trace_callback(seen.append)
        proof = checkpoints.inclusion(store, note, stream_id="s3", version=50)
        store._raw().set_trace_callback(None)
        reads = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
        assert len(proof.inclusion) == 10 and len(reads) <= 5, reads
        assert sum("tree_nodes" in s for s in reads) == 1 and sum("FROM events WHERE" in s for s in reads) <= 1


def test_verify_reads_leaves_and_nodes_of_one_state_while_appends_go_on(store: EventStore) -> None:
    """The tree check compares two tables; an append committed between its two reads (another
    process, on PostgreSQL's default READ COMMITTED every statement sees the latest) must not show
    as nodes without leaves, as it did in CI when `verify` ran beside appenders."""
    _fill(store, 40, random.Random(5))
    other = EventStore(store.url)
    try:
        with store.reading(snapshot=True) as cur:
            before = store.backend.max_position(cur)
            other.append("elsewhere", [NewEvent("demo.note", {"i": i}) for i in range(FAN_PLUS)])
            assert store.backend.max_position(cur) == before
            assert sum(1 for _ in store.backend.all_tree_nodes(cur)) == before // tree.FAN
        assert store.max_position() == before + FAN_PLUS
        assert verify_tree(store) == []
    finally:
        other.close()


FAN_PLUS = tree.FAN + 3


def test_several_streams_in_one_transaction_keep_the_nodes_of_the_leaves(store: EventStore) -> None:
    """append_many writes a group a stream (on PostgreSQL a COPY from 50 rows, the tree's nodes hashed
    while the server writes the rows); each group's nodes follow from the edge the group before left,
    in the same transaction: a store that never appended has no edge kept (a small first group completes
    no node and reads none; the next one reads the edge at a size this transaction made)."""
    other = EventStore(store.url)
    try:
        other.append("elsewhere", [NewEvent("demo.note", {"i": i}) for i in range(21)])  # store keeps no edge
        groups = [("a", 3), ("b", 70), ("c", 1), ("a", 200), ("d", 15), ("b", 64)]
        store.append_many((s, NewEvent("demo.note", {"s": s, "i": i}), None) for s, n in groups for i in range(n))
        leaves = _leaves(store)
        assert len(leaves) == 21 + sum(n for _, n in groups)
        assert _stored_nodes(store) == sorted(tree.all_nodes(leaves))
        # A transaction whose second group fails leaves nothing, and the edge the process keeps still
        # makes the right nodes (it was not advanced by the rolled-back groups).
        with pytest.raises(Exception):  # noqa: B017, PT011 - the version clash; the point is what is left
            store.append_many([(s, NewEvent("demo.note", {"i": i}), None) for s, i in (("a", 0),) * 80]
                              + [("b", NewEvent("demo.note", {}), 1)])
        assert _leaves(store) == leaves and _stored_nodes(store) == sorted(tree.all_nodes(leaves))
        store.append("a", [NewEvent("demo.note", {"i": i}) for i in range(90)])
        other.append("elsewhere", [NewEvent("demo.note", {"i": i}) for i in range(77)])
        store.append_many((s, NewEvent("demo.note", {"i": i}), None) for s in "ab" for i in range(60))
        leaves = _leaves(store)
        assert _stored_nodes(store) == sorted(tree.all_nodes(leaves))
        with store.tree() as t:
            assert t.root() == mth(leaves)
    finally:
        other.close()


def test_the_nodes_an_append_computes_during_its_copy_read_nothing() -> None:
    """new_nodes from an edge alone: what it holds at its exact size gives the nodes all_nodes makes;
    a missing or stale edge is an error at once (a read while PostgreSQL's COPY holds the connection
    would wait for ever, which a stale edge did before this source refused it)."""
    rng = random.Random(3)
    data = [rng.randbytes(32) for _ in range(300)]
    edge = tree.Frontier(0, {})
    made: list[tuple[int, int, bytes]] = []
    size = 0
    for n in (5, 11, 16, 1, 200, 67):
        new = tree.new_nodes(size, data[size:size + n], tree.EdgeSource(edge))
        made += new
        edge = edge.advance(data[size:size + n], new)
        size += n
    assert sorted(made) == sorted(tree.all_nodes(data))
    assert tree.new_nodes(3, data[3:10], tree.EdgeSource(None)) == []  # completes no node: asks for nothing
    with pytest.raises(RuntimeError, match="but no edge is kept"):
        tree.new_nodes(3, data[3:20], tree.EdgeSource(None))
    stale = tree.Frontier(5, {0: data[:5]})
    with pytest.raises(RuntimeError, match="the edge at 5 leaves does not hold"):
        tree.new_nodes(7, data[7:20], tree.EdgeSource(stale))


def _first_bad_reference(store: EventStore) -> int | None:
    """The first leaf under a stored node that differs, as verify computed it holding every node the
    leaves make in memory (before it compared a level at a time): the reference for the streamed one."""
    expected: dict[int, list[bytes]] = {}
    for level, _idx, h in tree.all_nodes(_leaves(store)):
        expected.setdefault(level, []).append(h)
    bad: int | None = None
    seen: dict[int, int] = {}
    for level, idx, h in _stored_nodes(store):
        want = expected.get(level, [])
        seen[level] = max(seen.get(level, 0), idx + 1)
        if idx >= len(want) or want[idx] != h:
            bad = idx << level if bad is None else min(bad, idx << level)
    for level, want in expected.items():
        if seen.get(level, 0) < len(want):
            bad = seen.get(level, 0) << level if bad is None else min(bad, seen.get(level, 0) << level)
    return bad


_TAMPER = st.lists(st.tuples(st.sampled_from(["change", "remove", "cut", "insert"]),
                             st.sampled_from([0, 3, 4, 8, 12, 16]), st.integers(min_value=0, max_value=40)),
                   max_size=5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tampering=_TAMPER)
def test_the_streamed_tree_check_finds_what_the_whole_tree_in_memory_found(
        store: EventStore, tampering: list[tuple[str, int, int]]) -> None:
    """verify_tree reads each level's stored nodes beside the nodes the leaves make (a batch of each
    in memory): for nodes changed, deleted (in the middle, at a level's end, a whole level) and added
    (past a level's end, at levels the tree does not store or has not reached) it names the leaf the
    comparison of the whole tree in memory named."""
    import re

    if store.max_position() == 0:  # once per store: 2 * 256 + 37 leaves, 34 nodes at level 4, 2 at level 8
        triggers = {"sqlite": ["DROP TRIGGER tree_nodes_no_update", "DROP TRIGGER tree_nodes_no_delete"],
                    "postgresql": ["DROP TRIGGER tree_nodes_no_update_delete ON tree_nodes"]}
        for sql in triggers[store.engine.dialect.name]:
            exec_sql(store, sql)
        store.append("A", [NewEvent("demo.note", {"i": i}) for i in range(2 * 256 + 37)])
    exec_sql(store, "DELETE FROM tree_nodes")  # the nodes the leaves make, again (the last example tampered)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO tree_nodes (level, idx, hash) VALUES (:l, :i, :h)"),
                     [{"l": lv, "i": i, "h": h} for lv, i, h in tree.all_nodes(_leaves(store))])
    assert verify_tree(store) == []
    for what, level, idx in tampering:
        if what == "change":
            exec_sql(store, "UPDATE tree_nodes SET hash = :h WHERE level = :l AND idx = :i", h=bytes(32), l=level, i=idx)
        elif what == "remove":
            exec_sql(store, "DELETE FROM tree_nodes WHERE level = :l AND idx = :i", l=level, i=idx)
        elif what == "cut":
            exec_sql(store, "DELETE FROM tree_nodes WHERE level = :l AND idx >= :i", l=level, i=idx)
        else:
            exec_sql(store, "DELETE FROM tree_nodes WHERE level = :l AND idx = :i", l=level, i=idx)
            exec_sql(store, "INSERT INTO tree_nodes (level, idx, hash) VALUES (:l, :i, :h)", l=level, i=idx,
                     h=bytes([idx]) * 32)
    found = [f for f in verify_tree(store) if f.field_class == "tree"]
    named = [int(m[1]) for f in found if (m := re.search(r"within the \d+ leaves from (\d+)", f.detail))]
    reference = _first_bad_reference(store)
    assert named == ([] if reference is None else [reference])
