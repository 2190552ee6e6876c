"""evstore: an event-sourced, hash-chained audit store for AI coding-agent runs.

    >>> from eventstore import EventStore, NewEvent
    >>> store = EventStore("sqlite:///./.evstore/events.db")
    >>> store.append("PROJ-1", [NewEvent("demo.note", {"text": "hello"})], expected_version="no stream")
"""

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

__all__ = [
    "ConcurrencyError", "DuplicateEventId", "EventStore", "EvstoreError", "IngestError",
    "IntegrityViolation", "InvalidEvent", "NewEvent", "RecordedEvent", "SchemaOutOfDate",
    "StreamNotFound", "UnknownEventType",
]


def __getattr__(name: str) -> object:  # keep `import eventstore.errors` free of SQLAlchemy
    if name in ("EventStore", "NewEvent", "RecordedEvent", "AppendResult"):
        from eventstore import store

        return getattr(store, name)
    raise AttributeError(name)
