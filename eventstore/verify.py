"""Tamper evidence: recompute every hash chain; write and check HMAC-signed checkpoints.

Field classes named in failures: ``data`` / ``meta`` (the stored bytes no longer match their
recorded SHA-256), ``header`` (type, ids, times or digests changed: the event hash does not
recompute), ``link`` (prev_hash is not the previous event's hash), ``sequence`` (a version is
missing) and ``head`` (the stream's recorded head is not its last event: truncated tail).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from eventstore import chain
from eventstore.errors import EvstoreError, IntegrityViolation
from eventstore.store import EventStore, utcnow


@dataclass
class Failure:
    stream_id: str
    version: int
    field_class: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream_id, "version": self.version, "field": self.field_class, "detail": self.detail}

    def __str__(self) -> str:
        return f'stream "{self.stream_id}" version {self.version}: {self.field_class} — {self.detail}'


@dataclass
class VerifyReport:
    streams: int = 0
    events: int = 0
    failures: list[Failure] = field(default_factory=list)
    checkpoint: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "streams": self.streams, "events": self.events,
                "failures": [f.to_dict() for f in self.failures], "checkpoint": self.checkpoint}


_SQL_EVENTS = (
    "SELECT s.stream_id, s.version, s.head_hash, e.version, e.event_id, e.type, e.schema_version, e.data, "
    "e.meta, e.occurred_at, e.recorded_at, e.data_sha256, e.meta_sha256, e.prev_hash, e.hash, e.position "
    "FROM streams s LEFT JOIN events e ON e.stream_pk = s.stream_pk {where} ORDER BY s.stream_id, e.version"
)


def verify(store: EventStore, stream_id: str | None = None,
           progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Recompute every chain (or one stream's); report the first failure per stream."""
    report = VerifyReport()
    where = "WHERE s.stream_id = :sid" if stream_id else ""
    if stream_id and store.stream_info(stream_id) is None:
        from eventstore.errors import StreamNotFound

        raise StreamNotFound(f'No stream "{stream_id}"; `evstore runs` lists the streams.')
    with store.engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=5000).execute(
            text(_SQL_EVENTS.format(where=where)), {"sid": stream_id} if stream_id else {})
        current: str | None = None
        prev = chain.GENESIS
        expect_version = 0
        failed = False
        head: tuple[int, bytes] = (0, chain.GENESIS)

        def close_stream() -> None:
            if current is not None and not failed and (expect_version, prev) != head:
                report.failures.append(Failure(current, expect_version, "head",
                                               f"stream head says version {head[0]} but the chain ends at "
                                               f"version {expect_version} (events missing or head rewritten)"))

        for r in result:
            sid = r[0]
            if sid != current:
                close_stream()
                current, prev, expect_version, failed = sid, chain.GENESIS, 0, False
                head = (r[1], bytes(r[2]))
                report.streams += 1
            if r[3] is None:  # stream without events
                continue
            report.events += 1
            if progress and report.events % 10000 == 0:
                progress(report.events)
            if failed:
                continue
            version = r[3]
            data, meta = bytes(r[7]), bytes(r[8])
            data_sha, meta_sha, prev_hash, h = bytes(r[11]), bytes(r[12]), bytes(r[13]), bytes(r[14])
            # A data/meta mismatch does not break the chain (it commits to the recorded digests, so an
            # audited redaction stays local): report it and keep checking the rest of the stream.
            if chain.digest(data) != data_sha:
                report.failures.append(Failure(sid, version, "data", "stored data does not match its recorded SHA-256"))
            if chain.digest(meta) != meta_sha:
                report.failures.append(Failure(sid, version, "meta", "stored meta does not match its recorded SHA-256"))
            problem: tuple[str, str] | None = None
            if version != expect_version + 1:
                problem = ("sequence", f"expected version {expect_version + 1}, found {version}")
            elif prev_hash != prev:
                problem = ("link", "prev_hash is not the previous event's hash")
            elif chain.event_hash(prev_hash, sid, version, r[4], r[5], r[6], r[9], r[10], data_sha, meta_sha) != h:
                problem = ("header", "event hash does not recompute (type, ids, times or digests changed)")
            if problem:
                report.failures.append(Failure(sid, version, *problem))
                failed = True
                continue
            prev, expect_version = h, version
        close_stream()
    return report


# ------------------------------------------------------------------ checkpoints


def _signing_key() -> bytes:
    key = os.environ.get("EVSTORE_SIGNING_KEY")
    if not key:
        raise EvstoreError("EVSTORE_SIGNING_KEY is not set; export a secret key to sign and check checkpoints.")
    return key.encode()


def _state_at(store: EventStore, max_position: int) -> tuple[int, int, str]:
    """(event count, stream count, Merkle root over stream heads) as of ``max_position``."""
    sql = text(
        "SELECT s.stream_id, e.version, e.hash FROM events e JOIN streams s ON s.stream_pk = e.stream_pk "
        "JOIN (SELECT stream_pk, MAX(version) AS v FROM events WHERE position <= :p GROUP BY stream_pk) last "
        "ON last.stream_pk = e.stream_pk AND last.v = e.version ORDER BY s.stream_id"
    )
    with store.engine.connect() as conn:
        count = conn.execute(text("SELECT COUNT(*) FROM events WHERE position <= :p"), {"p": max_position}).scalar_one()
        heads = conn.execute(sql, {"p": max_position}).all()
    leaves = [chain.head_leaf(sid, v, bytes(h)) for sid, v, h in heads]
    return int(count), len(heads), chain.merkle_root(leaves).hex()


def make_checkpoint(store: EventStore) -> dict[str, Any]:
    """A signed digest of the whole log, to keep somewhere the store's writers cannot reach."""
    key = _signing_key()
    max_pos = store.max_position()
    count, n_streams, root = _state_at(store, max_pos)
    digest = {"format": "evstore.checkpoint.v1", "event_count": count, "stream_count": n_streams,
              "max_position": max_pos, "merkle_root": root, "created_at": utcnow()}
    return {**digest, "signature": chain.sign(digest, key)}


def check_checkpoint(store: EventStore, checkpoint: dict[str, Any]) -> list[Failure]:
    """Failures if the log no longer contains exactly what the checkpoint signed."""
    key = _signing_key()
    sig = checkpoint.get("signature", "")
    digest = {k: v for k, v in checkpoint.items() if k != "signature"}
    if not isinstance(sig, str) or not chain.signature_ok(digest, sig, key):
        return [Failure("*", 0, "checkpoint", "signature does not verify (wrong key or edited checkpoint)")]
    try:
        max_pos = int(checkpoint["max_position"])
        count, _, root = _state_at(store, max_pos)
    except (KeyError, TypeError, ValueError) as exc:
        raise IntegrityViolation(f"Checkpoint is malformed: {exc!r}") from exc
    out = []
    if count != checkpoint["event_count"]:
        out.append(Failure("*", 0, "checkpoint", f"{checkpoint['event_count']} events up to position {max_pos} "
                           f"were signed, {count} are stored (history truncated or inserted)"))
    if root != checkpoint["merkle_root"]:
        out.append(Failure("*", 0, "checkpoint", "Merkle root over stream heads differs (history rewritten)"))
    return out
