"""The replay cache (table ``replay_cache``): folded documents kept to shorten replays.

A cached document is never trusted on its own.  Each row is bound to the log by the hash of the
event at its version and to its bytes by the SHA-256 of its stored state; a read whose row
disagrees with either folds the stream from its first event instead (the row is not used).
Someone who can write the database can recompute an unkeyed digest, so ``evstore verify``
re-folds every cached row from the events and reports a disagreement as the ``cache`` class.
"""

from __future__ import annotations

import zlib
from typing import Any

from eventstore import chain, codec, documents
from eventstore.dialects.base import Dialect
from eventstore.events import decode_event
from eventstore.records import CachedState
from eventstore.store import EventStore, utcnow


def cache_name(dialect: Dialect) -> str:
    """The name replay documents of ``dialect`` are cached under: a change of the dialect's lens
    version makes older rows invisible instead of wrong."""
    return f"replay.{dialect.name}.v{dialect.lens_version}"


def encode_state(doc: Any) -> bytes:
    """A document as the cache stores it (zlib-compressed canonical JSON)."""
    return zlib.compress(codec.encode(doc), 6)


def decode_state(state: bytes) -> Any:
    """A cached row's document."""
    return codec.decode(zlib.decompress(bytes(state)))


def usable(row: CachedState | None) -> tuple[int, Any] | None:
    """``(version, document)`` of a cached row if it agrees with the log (its event hash is the
    stored event's, its state its digest); otherwise None."""
    if row is None:
        return None
    log_hash = row.log_hash
    if log_hash is None or bytes(row.event_hash) != bytes(log_hash) \
            or chain.digest(bytes(row.state)) != bytes(row.state_sha256):
        return None
    try:
        return row.version, decode_state(row.state)
    except Exception:  # noqa: BLE001 - a digest recomputed over garbage: fold from the events instead
        return None


def fold(store: EventStore, stream_pk: int, dialect: Dialect, upto_version: int, *,
         use_cache: bool = True) -> tuple[Any, int | None, int]:
    """The stream's document at ``upto_version``, folded from its newest usable cached row (or
    from the first event): ``(doc, version of the last event folded or None, events folded)``."""
    start, doc = 0, None
    if use_cache:
        cached = latest_by_pk(store, stream_pk, cache_name(dialect), upto_version)
        if cached is not None:
            start, doc = cached
    last: int | None = None
    folded = 0
    evolve = dialect.evolve
    with documents.owned_events():  # freshly decoded events: no defensive copies
        for e in store.read_payloads(stream_pk, after_version=start, upto_version=upto_version):
            if not e.data:  # purged or erased: the document from here on is unknown, never a wrong one
                from eventstore.erasure import refuse

                raise refuse(store, None, e.version, e.position)
            doc = evolve(doc, decode_event(e.type, e.schema_version, e.data))
            last = e.version
            folded += 1
    return doc, last, folded


def latest(store: EventStore, stream_id: str, name: str, upto_version: int | None = None) -> tuple[int, Any] | None:
    """(version, document) of the newest usable row named ``name`` at or below ``upto_version``."""
    head = store.stream_head(stream_id)
    if head is None:
        return None
    return latest_by_pk(store, head.stream_pk, name, head.version if upto_version is None else upto_version)


def latest_by_pk(store: EventStore, stream_pk: int, name: str, upto_version: int) -> tuple[int, Any] | None:
    """:func:`latest` for a known stream key (the replay hot path: one indexed query)."""
    with store.reading() as cur:
        return usable(store.backend.latest_cached_state(cur, stream_pk, name, upto_version))


def save(store: EventStore, stream_pk: int, name: str, version: int, doc: Any) -> None:
    """Cache ``doc`` as the stream's document at ``version``, bound to the hash and position of
    the event stored there (read in the same statement); a row already saved for that version
    (by a racing reader) wins."""
    state = encode_state(doc)
    with store.writing("writing the replay cache") as cur:
        store.backend.insert_cached_state(cur, stream_pk, name, version, state, chain.digest(state), utcnow())
