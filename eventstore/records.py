"""What the recorder (the backends' typed methods, :mod:`eventstore.backends`) returns: one frozen
Struct per kind of row, so no caller unpacks a row tuple by position.

:class:`RecordedEvent` is the public one (``EventStore.read_stream``, ``read_all``, projections);
the others carry what one lookup reads (a stream's head, a replay-cache row, a projection's
checkpoint, the rows ``evstore verify`` walks).  BLOB/bytea columns arrive as ``bytes`` from
both drivers (sqlite3 and psycopg 3), so the Structs hold them as they come.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventstore import codec
from eventstore.events import Event


class RecordedEvent(msgspec.Struct, frozen=True):
    """One stored event (``data``/``meta`` are the stored canonical JSON bytes)."""

    position: int
    stream_id: str
    version: int
    event_id: str
    type: str
    schema_version: int
    data: bytes
    meta: bytes
    occurred_at: str | None
    recorded_at: str
    prev_hash: bytes
    hash: bytes

    @property
    def erased(self) -> bool:
        """Whether the payload was purged or erased (``data`` and ``meta`` are the empty tombstone;
        :mod:`eventstore.erasure`): ``payload`` and ``metadata`` are then None."""
        return not self.data and not self.meta

    @property
    def payload(self) -> Any:
        """``data`` decoded to Python (None: the payload was purged or erased)."""
        return None if not self.data else codec.decode(self.data)

    @property
    def metadata(self) -> Any:
        return None if not self.meta else codec.decode(self.meta)

    def to_event(self) -> Event:
        """Decode into the catalog's typed Struct (raises UnknownEventType)."""
        from eventstore.events import decode_event

        return decode_event(self.type, self.schema_version, self.data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position, "stream_id": self.stream_id, "version": self.version,
            "event_id": self.event_id, "type": self.type, "schema_version": self.schema_version,
            "data": self.payload, "meta": self.metadata, "occurred_at": self.occurred_at,
            "recorded_at": self.recorded_at, "prev_hash": self.prev_hash.hex(), "hash": self.hash.hex(),
            **({"erased": True} if self.erased else {}),
        }


class StreamState(msgspec.Struct, frozen=True):
    """A stream's row: its surrogate key, its version and the hash of its last event."""

    stream_pk: int
    version: int
    head_hash: bytes


class RecordedIdentity(msgspec.Struct, frozen=True):
    """What an idempotent retry is compared against: where an event id was recorded and the
    digests of what was recorded under it."""

    event_id: str
    stream_id: str
    version: int
    position: int
    type: str
    data_sha256: bytes
    meta_sha256: bytes
    occurred_at: str | None
    schema_version: int
    salt: bytes | None = None  # the digests' salt (None: plain SHA-256, or erased)
    erased: bool = False  # the payload was purged or erased (its salt with it)


class StreamHead(msgspec.Struct, frozen=True):
    """What a replay needs to start: the stream's key, its version and its dialect (None: free-form)."""

    stream_pk: int
    version: int
    dialect: str | None


class StreamSummary(msgspec.Struct, frozen=True):
    """One line of ``EventStore.list_streams``."""

    stream_id: str
    dialect: str | None
    version: int


class EventPayload(msgspec.Struct, frozen=True):
    """The lean read replay folds: no meta, ids or hashes."""

    position: int
    version: int
    type: str
    schema_version: int
    data: bytes
    occurred_at: str | None
    recorded_at: str


class FactEvent(msgspec.Struct, frozen=True):
    """The lean read the analytics facts take (``EventStore.iter_fact_batches``): a
    :class:`RecordedEvent` without its event id, schema version and hashes, under the same names."""

    position: int
    stream_id: str
    version: int
    type: str
    data: bytes
    meta: bytes
    occurred_at: str | None
    recorded_at: str


class CachedState(msgspec.Struct, frozen=True):
    """The newest replay-cache row at or below a version, with the hash the log holds at its
    version (``log_hash`` None: no event there); :func:`eventstore.replay_cache.usable` decides
    whether it agrees with the log."""

    version: int
    state: bytes
    state_sha256: bytes
    event_hash: bytes
    log_hash: bytes | None


class CacheEntry(msgspec.Struct, frozen=True):
    """A replay-cache row as ``evstore verify`` checks it, with its stream and the log's hash."""

    stream_pk: int
    stream_id: str
    dialect: str | None
    name: str
    version: int
    event_hash: bytes
    state: bytes
    state_sha256: bytes
    log_hash: bytes | None


class ProjectionCheckpoint(msgspec.Struct, frozen=True):
    """How far a projection has applied the log: the projection version its tables were built
    with and the position of the last event applied."""

    name: str
    version: int
    position: int
    updated_at: str


class OrderEntry(msgspec.Struct, frozen=True):
    """An event's place in the global order, as a seal commits to it."""

    position: int
    stream_id: str
    version: int
    hash: bytes


class StoredBlob(msgspec.Struct, frozen=True):
    """A content-addressed blob as stored: its key (the raw SHA-256 its bytes should have), the
    size its row records and its bytes; readers check the digest themselves."""

    sha256: bytes
    size: int
    data: bytes


class LeafEvent(msgspec.Struct, frozen=True):
    """Where an event sits in the Merkle tree: leaf ``position - 1``, its data ``hash``."""

    position: int
    stream_id: str
    version: int
    event_id: str
    hash: bytes


class CheckpointNote(msgspec.Struct, frozen=True):
    """A signed checkpoint the store recorded (``tree_checkpoints``)."""

    checkpoint_pk: int
    origin: str
    tree_size: int
    root_hash: bytes
    note: str
    created_at: str
