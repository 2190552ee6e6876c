"""Tamper evidence: recompute every hash chain, check the replay cache against the log, write
and check signed seals.

Failure classes: ``data`` / ``meta`` (the stored bytes no longer match their recorded SHA-256),
``blob`` (a content-addressed blob's bytes no longer match their SHA-256, or an event's
``meta.blobs`` names a blob that is not stored), ``header`` (type, ids, times or digests changed:
the event hash does not recompute), ``link``
(prev_hash is not the previous event's hash), ``sequence`` (a version is missing), ``head`` (the
stream's recorded head is not its last event: truncated tail), ``position`` (positions do not
increase with versions within a stream: events reordered), ``cache`` (a replay-cache row does not
match the log or the document folded from it), ``source`` (a ``source_versions`` row does not say
what its event's ``meta.source.id`` says, or is missing) and ``seal`` (the log no longer contains what
a signed seal covered: count, stream heads or the global order).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eventstore import chain, codec, documents
from eventstore.dialects import FALLBACK, Dialect, get_dialect
from eventstore.errors import EvstoreError, IntegrityViolation, StreamNotFound
from eventstore.events import decode_event
from eventstore.replay_cache import cache_name
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
        if not self.stream_id:  # a blob no event of the checked streams refers to
            return f"{self.field_class} — {self.detail}"
        return f'stream "{self.stream_id}" version {self.version}: {self.field_class} — {self.detail}'


@dataclass
class VerifyReport:
    streams: int = 0
    events: int = 0
    cached: int = 0  # replay-cache rows checked
    blobs: int = 0  # content-addressed blobs re-hashed
    failures: list[Failure] = field(default_factory=list)
    seal: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "streams": self.streams, "events": self.events, "cached": self.cached,
                "blobs": self.blobs,
                "failures": [f.to_dict() for f in self.failures], "seal": self.seal}


def verify(store: EventStore, stream_id: str | None = None,
           progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Recompute every chain (or one stream's), report the first chain failure per stream, and
    check every replay-cache row against the log."""
    report = VerifyReport()
    if stream_id and store.stream_info(stream_id) is None:
        raise StreamNotFound(f'No stream "{stream_id}"; `evstore runs` lists the streams.')
    with store.reading() as cur:
        current: str | None = None
        prev = chain.GENESIS
        expect_version = 0
        last_position = 0
        failed = False
        head: tuple[int, bytes] = (0, chain.GENESIS)
        referenced: dict[bytes, tuple[str, int]] = {}  # blob digest -> first (stream, version) naming it
        sources: dict[tuple[str, int], tuple[str | None, str | None]] = {}  # -> (meta.source.id, derived)

        def close_stream() -> None:
            if current is not None and not failed and (expect_version, prev) != head:
                report.failures.append(Failure(current, expect_version, "head",
                                               f"stream head says version {head[0]} but the chain ends at "
                                               f"version {expect_version} (events missing or head rewritten)"))

        for r in store.backend.chain_links(cur, stream_id):
            sid = r.stream_id
            if sid != current:
                close_stream()
                current, prev, expect_version, last_position, failed = sid, chain.GENESIS, 0, 0, False
                head = (r.stream_version, bytes(r.head_hash))
                report.streams += 1
            e = r.event
            if e is None:  # stream without events
                continue
            version, position = e.version, e.position
            report.events += 1
            if progress and report.events % 10000 == 0:
                progress(report.events)
            # Positions are not in the per-event chain (the signed seal covers the global
            # order); within a stream they must still grow with the versions.
            if position <= last_position:
                report.failures.append(Failure(sid, version, "position",
                                               f"position {position} is not after position {last_position} of the "
                                               "stream's previous event (events reordered)"))
            last_position = position
            if failed:
                continue
            data, meta = bytes(e.data), bytes(e.meta)
            data_sha, meta_sha, prev_hash, h = bytes(e.data_sha256), bytes(e.meta_sha256), bytes(e.prev_hash), bytes(e.hash)
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
            elif chain.event_hash(prev_hash, sid, version, e.event_id, e.type, e.schema_version, e.occurred_at,
                                  e.recorded_at, data_sha, meta_sha) != h:
                problem = ("header", "event hash does not recompute (type, ids, times or digests changed)")
            if problem:
                report.failures.append(Failure(sid, version, *problem))
                failed = True
                continue
            prev, expect_version = h, version
            if b'"blobs"' in meta:
                _note_blobs(meta, sid, version, referenced, report)
            if b'"source":' in meta:
                _note_source(meta, sid, version, sources)
        close_stream()
    _verify_sources(store, stream_id, sources, report)
    _verify_cache(store, stream_id, report)
    _verify_blobs(store, referenced, report, every=stream_id is None)
    return report


# ------------------------------------------------------------------ content-addressed blobs

def _note_blobs(meta: bytes, sid: str, version: int, referenced: dict[bytes, tuple[str, int]],
                report: VerifyReport) -> None:
    """Remember the blobs an event's ``meta.blobs`` names (the first event naming each); a name
    that is no SHA-256 digest (the store refuses one, so only an edit writes it) is a failure."""
    try:
        names = codec.decode(meta).get("blobs")
    except Exception:  # noqa: BLE001 - meta is checked against its digest above; no blobs list, nothing to note
        return
    if names is None:
        return
    for name in names if isinstance(names, list) else [names]:
        key = chain.parse_digest(name)  # the store's rule for a blob name
        if key is None:
            report.failures.append(Failure(sid, version, "blob", f"meta.blobs names {name!r:.80}, which is no "
                                                                 "SHA-256 hex digest"))
        else:
            referenced.setdefault(key, (sid, version))


def _verify_blobs(store: EventStore, referenced: dict[bytes, tuple[str, int]], report: VerifyReport,
                  *, every: bool) -> None:
    """Every blob's bytes must hash to its key (all of them, or those ``referenced`` when one
    stream is verified), and every referenced blob must be stored."""
    found: set[bytes] = set()
    with store.reading() as cur:
        for b in store.backend.stored_blobs(cur, None if every else list(referenced)):
            found.add(b.sha256)
            report.blobs += 1
            problem = None
            if chain.digest(b.data) != b.sha256:
                problem = "stored bytes do not match their SHA-256"
            elif len(b.data) != b.size:
                problem = f"holds {len(b.data)} bytes, its row says {b.size}"
            if problem:
                sid, version = referenced.get(b.sha256, ("", 0))
                report.failures.append(Failure(sid, version, "blob", f"blob {b.sha256.hex()}: {problem}"))
    for key, (sid, version) in referenced.items():
        if key not in found:
            report.failures.append(Failure(sid, version, "blob", f"blob {key.hex()} is referenced but not stored"))


# ------------------------------------------------------------------ source versions (capture-once)


def _note_source(meta: bytes, sid: str, version: int,
                 sources: dict[tuple[str, int], tuple[str | None, str | None]]) -> None:
    from eventstore.ingest import legacy_source_id

    try:
        decoded = codec.decode(meta)
    except Exception:  # a meta that does not decode is reported by the chain checks
        return
    source = decoded.get("source") if isinstance(decoded, dict) else None
    if not isinstance(source, dict):
        return
    ident = source.get("id")
    sources[(sid, version)] = (ident if isinstance(ident, str) and ident else None, legacy_source_id(decoded))


def _verify_sources(store: EventStore, stream_id: str | None,
                    sources: dict[tuple[str, int], tuple[str | None, str | None]], report: VerifyReport) -> None:
    """Each ``source_versions`` row says what its event's ``meta.source.id`` says (or, for an event
    recorded before migration 0006, what the migration derived from its meta), and each event with
    a ``meta.source.id`` has its row: a capture reads the table to decide what is recorded."""
    with store.reading() as cur:
        rows = {(sid, v): ident for sid, v, ident in store.backend.source_rows(cur, stream_id)}
    for key, ident in rows.items():
        said, derived = sources.get(key, (None, None))
        if ident != said and not (said is None and ident == derived):
            what = f"meta.source.id is {said}" if said else "its event's meta names no such source"
            report.failures.append(Failure(key[0], key[1], "source",
                                           f"source_versions says {ident} but {what}"))
    for key, (said, _) in sources.items():
        if said is not None and key not in rows:
            report.failures.append(Failure(key[0], key[1], "source",
                                           f"meta.source.id {said} has no source_versions row "
                                           "(a capture would record this version again)"))


# ------------------------------------------------------------------ the replay cache

def _verify_cache(store: EventStore, stream_id: str | None, report: VerifyReport) -> None:
    """Every cached row must name the event stored at its version, match its state digest and,
    for the dialect's current lens, equal (canonical bytes) the document folded from the events."""
    with store.reading() as cur:
        rows = store.backend.cache_entries(cur, stream_id)
    group: tuple[int, str] | None = None
    dialect: Dialect | None = None
    doc: Any = None
    at = 0
    for row in rows:
        pk, sid, name, version, state = row.stream_pk, row.stream_id, row.name, row.version, row.state
        report.cached += 1
        problem: str | None = None
        if row.log_hash is None:
            problem = "no event is stored at this version"
        elif bytes(row.event_hash) != bytes(row.log_hash):
            problem = "bound to another event than the one stored at this version"
        elif chain.digest(bytes(state)) != bytes(row.state_sha256):
            problem = "stored state does not match its recorded SHA-256"
        else:
            if group != (pk, name):
                group, doc, at, dialect = (pk, name), None, 0, None
                try:
                    dialect = get_dialect(row.dialect or FALLBACK)
                except EvstoreError:
                    pass
                if dialect is not None and cache_name(dialect) != name:
                    dialect = None  # rows of an older lens are never read
            if dialect is None:
                continue
            try:
                with documents.owned_events():
                    for e in store.read_payloads(pk, after_version=at, upto_version=version):
                        doc = dialect.evolve(doc, decode_event(e.type, e.schema_version, e.data))
                at = version
                if zlib.decompress(bytes(state)) != codec.encode(doc):
                    problem = "differs from the document folded from the events"
            except Exception as exc:  # noqa: BLE001 - a fold or decode failure is a finding, not a crash
                problem = f"cannot be checked by folding the events ({type(exc).__name__}: {exc})"
                group = None
        if problem:
            report.failures.append(Failure(sid, version, "cache", f'replay cache "{name}": {problem}'))


# ------------------------------------------------------------------ seals

# A seal's format tag keeps the name seals had before they were called seals ("checkpoint" now
# means a projection's position only): the tag is signed and stored in users' files, and a
# stable tag never changes (files written by any version still verify).
FORMAT_V1 = "evstore.checkpoint.v1"
FORMAT = "evstore.checkpoint.v2"
#: Largest position a seal may name (a signed 64-bit integer, the column's range).
MAX_POSITION = 2**63 - 1


def _signing_key() -> bytes:
    key = os.environ.get("EVSTORE_SIGNING_KEY")
    if not key:
        raise EvstoreError("EVSTORE_SIGNING_KEY is not set; export a secret key to sign and check seals.")
    return key.encode()


@dataclass
class LogState:
    """What a seal commits to, as of a position."""

    event_count: int
    stream_count: int
    merkle_root: str  # over stream heads (stream id, version, hash), by stream id (code point order)
    order_digest: str  # running SHA-256 over (position, stream id, version, hash) in position order
    heads: dict[str, tuple[int, bytes]]  # stream id -> (version, hash) of its last event

    def legacy_root(self, store: EventStore) -> str:
        """The Merkle root as v1 seals computed it: stream ids in the database's collation."""
        with store.reading() as cur:
            ordered = store.backend.stream_ids(cur)
        leaves = [chain.head_leaf(sid, *self.heads[sid]) for sid in ordered if sid in self.heads]
        return chain.merkle_root(leaves).hex()


def log_state(store: EventStore, max_position: int) -> LogState:
    """One streamed pass over the log up to ``max_position``, in position order."""
    heads: dict[str, tuple[int, bytes]] = {}
    order = chain.sha256(chain.ORDER_DOMAIN)
    count = 0
    with store.reading() as cur:
        for e in store.backend.order_entries(cur, max_position):
            count += 1
            order.update(chain.order_entry(e.position, e.stream_id, e.version, e.hash))
            if e.version > heads.get(e.stream_id, (0, b""))[0]:
                heads[e.stream_id] = (e.version, e.hash)
    leaves = [chain.head_leaf(sid, v, h) for sid, (v, h) in sorted(heads.items())]
    return LogState(count, len(heads), chain.merkle_root(leaves).hex(), order.hexdigest(), heads)


def make_seal(store: EventStore, signer: chain.Signer | None = None) -> dict[str, Any]:
    """A signed digest of the whole log, to keep somewhere the store's writers cannot reach.

    ``signer``: an Ed25519 private key (:func:`chain.load_private_key`); default HMAC-SHA256
    with ``EVSTORE_SIGNING_KEY``."""
    if signer is None:
        signer = chain.HmacKey(_signing_key())
    max_pos = store.max_position()
    state = log_state(store, max_pos)
    payload = {"format": FORMAT, "store_id": store.store_id(), "event_count": state.event_count,
               "stream_count": state.stream_count, "max_position": max_pos, "merkle_root": state.merkle_root,
               "order_digest": state.order_digest, "created_at": utcnow(), "algorithm": signer.algorithm,
               "key_id": signer.key_id}
    return {**payload, "signature": signer.sign(chain.canonical(payload))}


def _checked_int(seal: dict[str, Any], key: str, hi: int) -> int:
    value = seal.get(key)
    if type(value) is not int or not 0 <= value <= hi:
        raise IntegrityViolation(f'Seal is malformed: "{key}" must be an integer from 0 to {hi}, '
                                 f"got {str(value)[:40]}.")
    return value


def check_seal(store: EventStore, seal: dict[str, Any],
                     verifier: chain.Verifier | None = None) -> list[Failure]:
    """Failures if the log no longer contains exactly what the seal signed.

    ``verifier``: an Ed25519 public key (:func:`chain.load_public_key`) for seals signed
    with one; default HMAC-SHA256 with ``EVSTORE_SIGNING_KEY``."""
    fmt = seal.get("format")
    if fmt not in (FORMAT, FORMAT_V1):
        raise IntegrityViolation(f'Seal format {str(fmt)[:40]!r} is not one evstore knows ({FORMAT}).')
    algorithm = seal.get("algorithm", chain.HmacKey.algorithm)
    if verifier is None:
        if algorithm != chain.HmacKey.algorithm:
            raise EvstoreError(f"The seal is signed with {str(algorithm)[:20]}; pass its public key "
                               "(--public-key).")
        verifier = chain.HmacKey(_signing_key())
    elif algorithm != verifier.algorithm:
        return [Failure("*", 0, "seal", f"signed with {str(algorithm)[:20]}, not with the "
                        f"{verifier.algorithm} key given")]
    sig = seal.get("signature", "")
    payload = {k: v for k, v in seal.items() if k != "signature"}
    message = chain.canonical(payload) if fmt == FORMAT else chain.legacy_encoding(payload)
    if not isinstance(sig, str) or not verifier.verify(message, sig):
        return [Failure("*", 0, "seal", "signature does not verify (wrong key or edited seal)")]
    # Signed by a key we trust, yet still data: check its shape before using it.
    max_pos = _checked_int(seal, "max_position", MAX_POSITION)
    expected_count = _checked_int(seal, "event_count", MAX_POSITION)
    out = []
    store_id = seal.get("store_id")
    if store_id is not None and store_id != store.store_id():
        out.append(Failure("*", 0, "seal", f"signed for store {str(store_id)[:36]}, this is store "
                           f"{store.store_id()} (another or a recreated store)"))
    state = log_state(store, max_pos)
    if state.event_count != expected_count:
        out.append(Failure("*", 0, "seal", f"{expected_count} events up to position {max_pos} "
                           f"were signed, {state.event_count} are stored (history truncated or inserted)"))
    root = state.merkle_root if fmt == FORMAT else state.legacy_root(store)
    if root != seal.get("merkle_root"):
        out.append(Failure("*", 0, "seal", "Merkle root over stream heads differs (history rewritten)"))
    if fmt == FORMAT and state.order_digest != seal.get("order_digest"):
        out.append(Failure("*", 0, "seal", "the global order of events differs (positions changed, "
                           "events moved, inserted or removed)"))
    return out
