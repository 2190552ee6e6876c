"""Stored document snapshots (table ``snapshots``): the newest at or below a version."""

from __future__ import annotations

import zlib
from typing import Any

from eventstore import codec
from eventstore.store import EventStore, utcnow


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
    return int(rows[0][0]), codec.decode(zlib.decompress(bytes(rows[0][1])))


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
