"""Stored document snapshots (table ``snapshots``): the newest at or below a version."""

from __future__ import annotations

import zlib
from typing import Any

from sqlalchemy import and_, delete, select

from eventstore import codec
from eventstore.schema import snapshots, streams
from eventstore.store import EventStore, utcnow


def latest(store: EventStore, stream_id: str, name: str, upto_version: int | None = None) -> tuple[int, Any] | None:
    """(version, document) of the newest snapshot named ``name`` at or below ``upto_version``."""
    q = (select(snapshots.c.version, snapshots.c.state)
         .join(streams, streams.c.stream_pk == snapshots.c.stream_pk)
         .where(and_(streams.c.stream_id == stream_id, snapshots.c.name == name)))
    if upto_version is not None:
        q = q.where(snapshots.c.version <= upto_version)
    q = q.order_by(snapshots.c.version.desc()).limit(1)
    with store.engine.connect() as conn:
        row = conn.execute(q).first()
    if row is None:
        return None
    return int(row[0]), codec.decode(zlib.decompress(bytes(row[1])))


def latest_by_pk(store: EventStore, stream_pk: int, name: str, upto_version: int) -> tuple[int, Any] | None:
    """Like :func:`latest`, for a known stream key, on the store's held connection (hot path)."""
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


def drop(store: EventStore, name: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(delete(snapshots).where(snapshots.c.name == name))
