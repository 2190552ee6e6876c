"""evstore: an event-sourced, hash-chained audit store for AI coding-agent runs.

    >>> import eventstore
    >>> store = eventstore.open("sqlite:///./.evstore/events.db", create=True)
    >>> store.append("PROJ-1", [eventstore.NewEvent("demo.note", {"text": "hello"})], expected_version="no stream")
"""

from __future__ import annotations

from eventstore.errors import (
    ConcurrencyError,
    DuplicateEventId,
    EvstoreError,
    IngestError,
    IntegrityViolation,
    InvalidEvent,
    SchemaOutOfDate,
    StreamNotFound,
    UnknownEventType,
)

# Not typing.TYPE_CHECKING: importing typing costs ~3 ms, paid by every `evstore hook claude-code`
# (importing eventstore.entry imports this package first).  Type checkers treat the name the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from eventstore.store import EventStore

__all__ = [
    "open", "ConcurrencyError", "DuplicateEventId", "EventStore", "EvstoreError", "IngestError",
    "IntegrityViolation", "InvalidEvent", "NewEvent", "RecordedEvent", "SchemaOutOfDate",
    "StreamNotFound", "UnknownEventType",
]


def open(url: str | None = None, *, create: bool = False, synchronous: str | None = None) -> EventStore:
    """The store at ``url`` (default: ``$EVSTORE_URL``, else the embedded SQLite file).

    ``create=True`` creates the store (or brings its schema to the head) first, as
    ``evstore init`` does; otherwise a database without the evstore schema is refused with
    :class:`SchemaOutOfDate`.  Close it with ``store.close()`` or use it in a ``with`` block.
    """
    from eventstore.store import EventStore

    if create:
        from eventstore import migrate
        from eventstore.config import database_url
        from eventstore.db import make_engine

        engine = make_engine(database_url(url), synchronous=synchronous)
        try:
            migrate.upgrade(engine)
        finally:
            engine.dispose()
    return EventStore(url, synchronous=synchronous)


def __getattr__(name: str) -> object:  # keep `import eventstore.errors` free of SQLAlchemy
    if name in ("EventStore", "NewEvent", "RecordedEvent", "AppendResult"):
        from eventstore import store

        return getattr(store, name)
    raise AttributeError(name)
