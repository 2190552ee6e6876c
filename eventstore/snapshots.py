"""Stored document snapshots (table ``snapshots``) and folding a stream from the newest one."""

from __future__ import annotations

import zlib
from typing import Any

from eventstore import codec, documents
from eventstore.dialects.base import Dialect
from eventstore.events import decode_event
from eventstore.store import EventStore, utcnow


def snapshot_name(dialect: Dialect) -> str:
    """The name replay snapshots of ``dialect`` are kept under: a change of the dialect's lens
    version makes older snapshots invisible instead of wrong."""
    return f"replay.{dialect.name}.v{dialect.lens_version}"


def decode_state(state: bytes) -> Any:
    """A stored snapshot's document (zlib-compressed canonical JSON)."""
    return codec.decode(zlib.decompress(bytes(state)))


def fold(store: EventStore, stream_pk: int, dialect: Dialect, upto_version: int, *,
         use_snapshots: bool = True) -> tuple[Any, tuple[int, int] | None, int]:
    """The stream's document at ``upto_version``, folded from its newest snapshot (or from the
    first event): ``(doc, (version, position) of the last event folded or None, events folded)``."""
    start, doc = 0, None
    if use_snapshots:
        snap = latest_by_pk(store, stream_pk, snapshot_name(dialect), upto_version)
        if snap is not None:
            start, doc = snap
    last: tuple[int, int] | None = None
    folded = 0
    evolve = dialect.evolve
    with documents.owned_events():  # freshly decoded events: no defensive copies
        for position, version, type_, schema_version, data, _, _ in store.read_payloads(
                stream_pk, after_version=start, upto_version=upto_version):
            doc = evolve(doc, decode_event(type_, schema_version, data))
            last = (version, position)
            folded += 1
    return doc, last, folded


def latest(store: EventStore, stream_id: str, name: str, upto_version: int | None = None) -> tuple[int, Any] | None:
    """(version, document) of the newest snapshot named ``name`` at or below ``upto_version``."""
    head = store.stream_head(stream_id)
    if head is None:
        return None
    return latest_by_pk(store, head[0], name, head[1] if upto_version is None else upto_version)


def latest_by_pk(store: EventStore, stream_pk: int, name: str, upto_version: int) -> tuple[int, Any] | None:
    """:func:`latest` for a known stream key (the replay hot path: one indexed query)."""
    rows = store.fetch_all(store.backend.sql_latest_snapshot, (stream_pk, name, upto_version))
    if not rows:
        return None
    return int(rows[0][0]), decode_state(rows[0][1])


def save(store: EventStore, stream_pk: int, name: str, version: int, position: int, doc: Any) -> None:
    """Store a snapshot; a snapshot already saved for that version (by a racing reader) wins."""
    state = zlib.compress(codec.encode(doc), 6)
    be = store.backend
    raw = store._raw()
    cur = raw.cursor()
    try:
        be.begin_plain_write(raw)
        cur.execute(be.sql_insert_snapshot, (stream_pk, name, version, position, state, utcnow()))
        be.commit(raw)
    except BaseException:
        be.rollback(raw)
        raise
    finally:
        cur.close()
