"""Tamper evidence: recompute every hash chain, check the replay cache against the log, write
and check signed seals.

Failure classes: ``data`` / ``meta`` (the stored bytes no longer match their recorded SHA-256),
``blob`` (a content-addressed blob's bytes no longer match their SHA-256, or an event's
``meta.blobs`` names a blob that is not stored), ``header`` (type, ids, times or digests changed:
the event hash does not recompute), ``link``
(prev_hash is not the previous event's hash), ``sequence`` (a version is missing), ``head`` (the
stream's recorded head is not its last event: truncated tail), ``position`` (positions do not
increase with versions within a stream: events reordered), ``tree`` (positions are not gapless, or
the Merkle tree's stored nodes do not match the leaves, :mod:`eventstore.tree`), ``checkpoint`` (the
log's first N leaves no longer hash to a signed checkpoint's root), ``cache`` (a replay-cache row does not
match the log or the document folded from it), ``source`` (a ``source_versions`` row does not say
what its event's ``meta.source.id`` says, or is missing) and ``seal`` (the log no longer contains what
a signed seal covered: count, stream heads or the global order).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Protocol

import msgspec

from eventstore import chain, codec, documents, tree
from eventstore.dialects import FALLBACK, Dialect, get_dialect
from eventstore.errors import EvstoreError, IntegrityViolation, StreamNotFound
from eventstore.events import decode_event
from eventstore.records import CacheEntry, RecordedEvent
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
    purged: int = 0  # events whose payload a retention policy removed (their tombstones checked)
    erased: int = 0  # events whose payload an erasure request removed
    erased_blobs: int = 0
    failures: list[Failure] = field(default_factory=list)
    seal: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None  # the signed checkpoint checked (verify --checkpoint)
    #: verify --since: the checkpoint whose root stood for the events before it (only later ones checked).
    since: dict[str, Any] | None = None
    #: verify --since: the streams with events after the checkpoint (whose derived rows the CLI checks).
    streams_checked: list[str] = field(default_factory=list)
    #: The database engine's own file check that ran (empty: the backend has none, PostgreSQL).
    storage_check: str = ""

    @property
    def damaged(self) -> bool:
        """Whether the database engine's own check found the file damaged."""
        return any(f.field_class == "storage" for f in self.failures)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "streams": self.streams, "events": self.events, "cached": self.cached,
                "blobs": self.blobs, "purged": self.purged, "erased": self.erased,
                "erased_blobs": self.erased_blobs, "storage_check": self.storage_check or None,
                "failures": [f.to_dict() for f in self.failures], "seal": self.seal,
                **({"checkpoint": self.checkpoint} if self.checkpoint is not None else {}),
                **({"since": self.since} if self.since is not None else {})}


class EventSink(Protocol):
    """Told every event of verify's scan (by stream, then version, checked or not), so a layer above
    re-derives what it keeps from the log in the same scan instead of reading the log again (the
    runs index: ``projections.runs.IndexCheck``); ``end`` once the scan is over.  ``cur`` is the
    scan's read transaction.  The scan runs inside :func:`documents.owned_events`: what the sink
    decodes from an event's bytes is its own, folded without copies."""

    def event(self, cur: Any, e: RecordedEvent) -> None: ...

    def end(self, cur: Any) -> None: ...


def verify(store: EventStore, stream_id: str | None = None,
           progress: Callable[[int], None] | None = None, *, after_position: int = 0,
           sink: EventSink | None = None, stage: Callable[[str], None] | None = None) -> VerifyReport:
    """Recompute every chain (or one stream's), report the first chain failure per stream, and
    check every replay-cache row against the log.

    ``after_position``: check only the events after it (:func:`verify_since` passes a checkpoint's
    size, once the leaves up to it hash to its signed root): each stream's first such event links to
    its stored predecessor, whose hash that root covers; the blobs, sources, replay-cache rows and
    heads checked are those of the streams with such events; no engine file check, no tree check
    (:func:`verify_since` checks the tree).  ``sink``: told each event of the scan (:class:`EventSink`);
    ``stage``: told what is checked after the scan (for a progress line)."""
    report = VerifyReport(storage_check=store.backend.storage_check_name if not after_position else "")
    if stream_id is None and report.storage_check:
        # The engine's own check first: a damaged page (of an index, say) that the chain walk below
        # never reads, and a clear report instead of a read failing half-way.
        with store.reading() as cur:
            problems = store.backend.storage_check(cur)
        if problems:
            report.failures.extend(Failure("", 0, "storage", f"{report.storage_check}: {' '.join(p.split())}")
                                   for p in problems)
            return report
    if stream_id and store.stream_info(stream_id) is None:
        raise StreamNotFound(f'No stream "{stream_id}"; `evstore runs` lists the streams.')
    with store.reading() as cur:
        erasures = store.backend.erasure_rows(cur)
    referenced: dict[bytes, tuple[str, int]] = {}  # blob digest -> first (stream, version) naming it
    sources: dict[tuple[str, int], _SourceSaid] = {}  # -> (meta.source.id, what derives the legacy id)
    tombstoned: set[tuple[str, int]] = set()  # erased events: their meta (and source id) is gone
    touched: dict[str, int] = {}  # verify --since: stream -> its first version after the checkpoint
    failures = report.failures
    fail = failures.append
    sha = chain.sha256
    event_hash = chain.event_hash
    genesis = chain.GENESIS
    with store.reading() as cur, documents.owned_events() if sink is not None else contextlib.nullcontext():
        current: str | None = None
        prev = genesis
        expect_version = 0
        last_position = 0
        failed = False
        head: tuple[int, bytes] = (0, genesis)
        events = 0
        streams = 0

        # The source rows are read beside the log, in the same order (by stream id, then version: both
        # queries sort on the same column), and compared a stream at a time: memory holds one stream's.
        merged = not after_position
        source_rows = store.backend.source_rows(cur, stream_id) if merged else iter(())
        next_row = next(source_rows, None)

        def close_stream() -> None:
            nonlocal next_row
            if current is not None and not failed and (expect_version, prev) != head:
                fail(Failure(current, expect_version, "head", f"stream head says version {head[0]} but the chain "
                             f"ends at version {expect_version} (events missing or head rewritten)"))
            if merged and current is not None:
                rows: dict[tuple[str, int], str] = {}
                while next_row is not None and next_row[0] == current:
                    rows[(current, next_row[1])] = next_row[2]
                    next_row = next(source_rows, None)
                _compare_sources(rows, sources, report, tombstoned)
                sources.clear()
                tombstoned.clear()

        # One row per event, unpacked in the loop's header: the loop is verify's cost (one scan and
        # three SHA-256 per event), so it builds no object per event and looks nothing up globally.
        for (sid, head_version, head_hash, version, event_id, type_, schema_version, data, meta, occurred_at,
             recorded_at, data_sha, meta_sha, prev_hash, h, position, salt) in store.backend.chain_rows(
                cur, stream_id, after_position):
            if sid != current:
                close_stream()
                current, prev, expect_version, last_position, failed = sid, genesis, 0, 0, False
                head = (head_version, head_hash)
                streams += 1
                if after_position and version is not None:
                    touched[sid] = version
                    if version > 1:  # its predecessor is before the checkpoint: a leaf of its root
                        before = store.backend.leaf_event(cur, stream_id=sid, version=version - 1)
                        if before is None:
                            fail(Failure(sid, version, "sequence", f"version {version - 1}, the one before the first "
                                         "version after the checkpoint, is missing"))
                            failed = True
                        else:
                            prev, expect_version, last_position = before.hash, version - 1, before.position
            if version is None:  # stream without events
                continue
            events += 1
            if progress and events % 10000 == 0:
                progress(events)
            # Positions are not in the per-event chain (the signed seal covers the global
            # order); within a stream they must still grow with the versions.
            if position <= last_position:
                fail(Failure(sid, version, "position", f"position {position} is not after position {last_position} "
                             "of the stream's previous event (events reordered)"))
            last_position = position
            if sink is not None:
                sink.event(cur, RecordedEvent(position, sid, version, event_id, type_, schema_version, data, meta,
                                              occurred_at, recorded_at, prev_hash, h))
            if failed:
                continue
            # A data/meta mismatch does not break the chain (it commits to the recorded digests, so an
            # audited redaction stays local): report it and keep checking the rest of the stream.
            erasure = erasures.get(position) if erasures else None
            if erasure is not None or (not data and not meta):
                # A tombstone: both emptied, as its erasures row says (eventstore/erasure.py).
                if erasure is None:
                    fail(Failure(sid, version, "data", "data and meta are empty but no erasure is recorded for "
                                 "this event (payload removed without a record)"))
                elif data or meta:
                    fail(Failure(sid, version, "data", f"recorded as {erasure[0]} at {erasure[3]} but the stored "
                                 "payload is not the empty tombstone"))
                elif salt is not None:
                    fail(Failure(sid, version, "data", f"recorded as {erasure[0]} at {erasure[3]} but the event still "
                                 "holds its digests' salt (a guess of the erased payload could be confirmed against them)"))
                else:
                    tombstoned.add((sid, version))
                    if erasure[0] == "purged":
                        report.purged += 1
                    else:
                        report.erased += 1
            elif salt is None:
                if sha(data).digest() != data_sha:
                    fail(Failure(sid, version, "data", "stored data does not match its recorded SHA-256"))
                if sha(meta).digest() != meta_sha:
                    fail(Failure(sid, version, "meta", "stored meta does not match its recorded SHA-256"))
            else:  # salted digests (revision 0010): SHA-256(salt || payload)
                if sha(salt + data).digest() != data_sha:
                    fail(Failure(sid, version, "data", "stored data does not match its recorded SHA-256"))
                if sha(salt + meta).digest() != meta_sha:
                    fail(Failure(sid, version, "meta", "stored meta does not match its recorded SHA-256"))
            if version != expect_version + 1:
                fail(Failure(sid, version, "sequence", f"expected version {expect_version + 1}, found {version}"))
                failed = True
                continue
            if prev_hash != prev:
                fail(Failure(sid, version, "link", "prev_hash is not the previous event's hash"))
                failed = True
                continue
            if event_hash(prev_hash, sid, version, event_id, type_, schema_version, occurred_at, recorded_at,
                          data_sha, meta_sha) != h:
                fail(Failure(sid, version, "header", "event hash does not recompute (type, ids, times or digests "
                             "changed)"))
                failed = True
                continue
            prev, expect_version = h, version
            if b'"blobs"' in meta or b'"source":' in meta:
                _note_meta(meta, sid, version, referenced, sources, report)
        close_stream()
        if progress and events % 10000:
            progress(events)  # and once at the end of the scan
        if next_row is not None:  # rows of no stream the scan met (none in one transaction)
            rest = {(next_row[0], next_row[1]): next_row[2]}
            rest.update(((sid, v), ident) for sid, v, ident in source_rows)
            _compare_sources(rest, {}, report, set())
        if sink is not None:
            sink.end(cur)
        report.streams, report.events = streams, events
    if stage is not None:
        stage("checking the replay cache and the blobs")
    if after_position:
        report.streams_checked = list(touched)
        for sid, first in touched.items():
            _verify_sources(store, sid, {k: v for k, v in sources.items() if k[0] == sid}, report,
                            erased=tombstoned, from_version=first)
            _verify_cache(store, sid, report)
        _verify_blobs(store, referenced, report, every=False)
        return report
    _verify_cache(store, stream_id, report)
    _verify_blobs(store, referenced, report, every=stream_id is None)
    if stream_id is None:
        if stage is not None:
            stage("recomputing the Merkle tree from every leaf")
        report.failures.extend(verify_tree(store))
    return report


def verify_since(store: EventStore, size: int, root: bytes, signed: Sequence[tuple[int, bytes]] = (),
                 progress: Callable[[int], None] | None = None,
                 stage: Callable[[str], None] | None = None) -> VerifyReport:
    """``verify --since``: what was appended after a signed checkpoint of ``size`` leaves and ``root``
    (its signature checked by the caller), trusting the checkpoint's root for everything before it.

    What still covers the events before it: every leaf (``events.hash``, by position) is read and
    the tree's stored nodes recomputed from them (:func:`verify_tree`: no gap, no node that differs),
    so the first ``size`` leaves must hash to ``root`` (:func:`check_tree_checkpoint`): an event
    before the checkpoint deleted, inserted, moved or rewritten with its hash fails.  What is not
    checked again before it: that an event's stored fields and payload still hash to its stored hash
    and link to its predecessor (a full ``verify`` does; the checkpoint was made of a verified log).
    After it, every event as :func:`verify` checks it (``after_position``)."""
    if size == 0:  # nothing before it: the whole log
        report = verify(store, progress=progress, stage=stage)
        report.failures.extend(check_tree_checkpoint(store, size, root, signed))
        return report
    if stage is not None:
        stage(f"recomputing the Merkle tree from every leaf, then its root at {size}")
    failures = verify_tree(store)
    gapless = not any(f.detail.startswith("position ") for f in failures)  # the leaves were all read just now
    failures += [f for f in check_tree_checkpoint(store, size, root, signed, gapless=gapless) if f not in failures]
    report = verify(store, progress=progress, after_position=size, stage=stage)
    report.failures[:0] = failures
    return report


# ------------------------------------------------------------------ the Merkle tree

def _leaf_failure(store: EventStore, leaf: int, field_class: str, detail: str) -> Failure:
    """A failure about leaf ``leaf``, named by the event stored at its position (if any)."""
    with store.reading() as cur:
        e = store.backend.leaf_event(cur, position=leaf + 1)
    if e is None:
        return Failure("*", 0, field_class, f"leaf {leaf} (position {leaf + 1}): {detail}")
    return Failure(e.stream_id, e.version, field_class, f"leaf {leaf} (position {leaf + 1}): {detail}")


_second = itemgetter(1)


class _StoredLevel:
    """The stored nodes of one tree level, read in index order beside the nodes the leaves make."""

    __slots__ = ("nodes", "next", "seen")

    def __init__(self, nodes: Iterator[tuple[int, bytes]]) -> None:
        self.nodes = nodes
        self.next = next(nodes, None)
        self.seen = 0  # 1 + the largest index read

    def _advance(self) -> None:
        assert self.next is not None
        self.seen = max(self.seen, self.next[0] + 1)
        self.next = next(self.nodes, None)

    def compare(self, idx: int, h: bytes) -> int | None:
        """Node ``idx`` as the leaves make it, against the stored ones up to it (the leaves make
        every index in order): the first stored index that differs, or None."""
        wrong = None
        while self.next is not None and self.next[0] <= idx:
            if (self.next[0] < idx or self.next[1] != h) and wrong is None:  # (below idx: an index the
                wrong = self.next[0]                                             # leaves never make, < 0)
            self._advance()
        return wrong

    def unread(self) -> int | None:
        """The first stored index not compared yet (once the leaves are all read: one they do not
        make), or None."""
        return None if self.next is None else self.next[0]


def verify_tree(store: EventStore) -> list[Failure]:
    """Positions must be gapless (leaf i is position i + 1) and every stored node of the Merkle tree
    must be the one its leaves make, none missing; the first difference only (one failure per kind).

    The nodes recomputed from the leaves come level by level in index order, each compared as it
    comes with the next stored node of its level (one streamed read a level, side by side): memory
    holds a batch of each, not the tree (at 10^7 leaves, 667,000 nodes: about 60 MB as bytes)."""
    out: list[Failure] = []
    with store.reading(snapshot=True) as cur:  # leaves and nodes of one state while appends go on
        gap: list[int] = []

        def leaves() -> Any:
            n = 0
            for rows in store.backend.leaf_batches(cur, MAX_POSITION):
                # Positions are unique and come in order: the batch has no gap iff its last is n + len.
                if not gap and rows[-1][0] != n + len(rows):
                    gap.extend(n + i for i, r in enumerate(rows) if r[0] != n + i + 1)
                    del gap[1:]
                n += len(rows)
                yield from map(_second, rows)

        stored = {level: _StoredLevel(store.backend.level_nodes(cur, level))
                  for level in store.backend.tree_levels(cur)}
        made: dict[int, int] = {}  # level -> how many nodes the leaves make there
        bad: int | None = None  # the first leaf under a stored node that differs

        def differs(first: int) -> None:
            nonlocal bad
            bad = first if bad is None else min(bad, first)

        for level, idx, h in tree.all_nodes(leaves()):
            made[level] = idx + 1
            at = stored.get(level)
            if at is not None:
                wrong = at.compare(idx, h)
                if wrong is not None:
                    differs(wrong << level)
        for level, at in stored.items():
            beyond = at.unread()  # a stored node the leaves do not make
            if beyond is not None:
                differs(beyond << level)
            elif at.seen < made.get(level, 0):  # a node missing: the first one is at most here
                differs(at.seen << level)
        if any(level not in stored for level in made):  # a level the leaves make has no node stored
            differs(0)
    if gap:
        out.append(Failure("*", 0, "tree", f"position {gap[0] + 1} is missing (leaf {gap[0]}): events deleted "
                           "or positions rewritten; positions are gapless"))
    if bad is not None:
        out.append(_leaf_failure(store, bad, "tree", f"the stored Merkle tree differs from the leaves from here on "
                                 f"(within the {tree.FAN} leaves from {bad}; events or tree nodes rewritten)"))
    return out


def check_tree_checkpoint(store: EventStore, size: int, root: bytes,
                          signed: Sequence[tuple[int, bytes]] = (), *, gapless: bool = False) -> list[Failure]:
    """Failures if the log's first ``size`` leaves no longer hash to ``root`` (a signed checkpoint's),
    naming the first leaf that differs where the store can tell: a leaf missing (the log is shorter,
    or has a gap), or a stored tree node that disagrees with the leaves.  Otherwise ``signed``, the
    (size, root) of other checkpoints whose signatures the caller checked (those the store recorded),
    brackets it: after the largest one that still holds, up to the smallest one that fails.
    ``gapless``: the caller found the positions gapless already (:func:`verify_tree`); not read again."""
    last = store.max_position()
    if last < size:
        return [Failure("*", 0, "checkpoint", f"leaf {last} (position {last + 1}) is missing: the log has {last} "
                        f"events, the checkpoint covers {size} (tail truncated or events deleted)")]
    if gapless:
        return _root_check(store, size, root, signed)
    with store.reading() as cur:
        n = 0
        for position, _h in store.backend.leaves(cur, size):
            if position != n + 1:
                break
            n += 1
    if n != size:
        return [Failure("*", 0, "checkpoint", f"leaf {n} (position {n + 1}) is missing: events deleted or positions "
                        f"rewritten (the checkpoint covers {size} leaves)")]
    return _root_check(store, size, root, signed)


def _root_check(store: EventStore, size: int, root: bytes, signed: Sequence[tuple[int, bytes]]) -> list[Failure]:
    with store.tree(size) as t:
        got = t.root()
    if got == root:
        return []
    if size == 0:
        return [Failure("*", 0, "checkpoint", "the checkpoint's root is not the empty tree's")]
    located = [f for f in verify_tree(store) if f.stream_id != "*"]
    if located:
        where = f"; {located[0]}"
    else:
        low, high = _bracket(store, size, signed)
        if high - low == 1:
            where = "; " + str(_leaf_failure(store, low, "checkpoint", "the first leaf that differs (the signed "
                                             f"checkpoints of sizes {low} and {high} bracket it)"))
        else:
            where = (f"; the first leaf that differs is one of leaves {low}..{high - 1} (positions {low + 1}.."
                     f"{high}){', bracketed by the signed checkpoints recorded here' if signed else ''}: the "
                     "stored tree was rebuilt to match, so the root alone cannot say which (checkpoint more often, "
                     "or compare with a copy of the log)")
    return [Failure("*", 0, "checkpoint", f"the log's first {size} leaves hash to {got.hex()[:16]}…, not to the "
                    f"checkpoint's root {root.hex()[:16]}… (the log was rewritten after the checkpoint){where}")]


def _bracket(store: EventStore, size: int, signed: Sequence[tuple[int, bytes]]) -> tuple[int, int]:
    """(low, high): the first differing leaf is in ``[low, high)``, from the signed (size, root) pairs
    below ``size``: low is the largest size whose root still holds, high the smallest above it that fails."""
    low, high = 0, size
    for s, r in sorted({(s, r) for s, r in signed if 0 < s < size}):
        if s <= low or s >= high:
            continue
        with store.tree(s) as t:
            holds = t.root() == r
        if holds:
            low = s
        else:
            high = s
            break
    return low, high


# ------------------------------------------------------------------ content-addressed blobs and sources

#: What an event's meta says of its source: its ``meta.source.id``, else (None, the meta's ``source``
#: and ``snapshot``) from which migration 0006 derived the id of a version recorded before capture-once.
_SourceSaid = tuple[str | None, dict[str, Any] | None]


class _MetaView(msgspec.Struct):
    """The keys of an event's meta that verify reads (the rest is skipped, not built: decoding the
    whole meta was a tenth of verify's time)."""

    blobs: Any = None
    source: Any = None
    snapshot: Any = None


_meta_view = msgspec.json.Decoder(_MetaView)


def _note_meta(meta: bytes, sid: str, version: int, referenced: dict[bytes, tuple[str, int]],
               sources: dict[tuple[str, int], _SourceSaid], report: VerifyReport) -> None:
    """What an event's meta says about blobs (:func:`_note_blobs`) and its source (:func:`_note_source`)."""
    try:
        view = _meta_view.decode(meta)
    except Exception:  # noqa: BLE001 - meta is checked against its digest; no object, nothing to note
        return
    if view.blobs is not None:
        _note_blobs(view.blobs, sid, version, referenced, report)
    if isinstance(view.source, dict):
        _note_source(view, sid, version, sources)


def _note_blobs(names: Any, sid: str, version: int, referenced: dict[bytes, tuple[str, int]],
                report: VerifyReport) -> None:
    """Remember the blobs an event's ``meta.blobs`` names (the first event naming each); a name
    that is no SHA-256 digest (the store refuses one, so only an edit writes it) is a failure."""
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
        erased = store.backend.erased_blob_digests(cur)
    with store.reading() as cur:
        for b in store.backend.stored_blobs(cur, None if every else list(referenced)):
            found.add(b.sha256)
            report.blobs += 1
            problem = None
            if b.sha256 in erased:
                if b.data:
                    problem = "recorded as erased but its bytes are still stored"
                elif b.sha256 in referenced:
                    problem = "erased, yet an event whose payload remains names it"
                else:
                    report.erased_blobs += 1
            elif chain.digest(b.data) != b.sha256:
                problem = "stored bytes do not match their SHA-256"
            elif len(b.data) != b.size:
                problem = f"holds {len(b.data)} bytes, its row says {b.size}"
            if problem:
                sid, version = referenced.get(b.sha256, ("", 0))
                report.failures.append(Failure(sid, version, "blob", f"blob {b.sha256.hex()}: {problem}"))
    if every:  # an erased blob's row is gone and its erased_blobs key is random bytes (migration 0012)
        report.erased_blobs += sum(1 for key in erased if key not in found)
    for key, (sid, version) in referenced.items():
        if key not in found:
            report.failures.append(Failure(sid, version, "blob", f"blob {key.hex()} is referenced but not stored"))


# ------------------------------------------------------------------ source versions (capture-once)


def _note_source(view: _MetaView, sid: str, version: int,
                 sources: dict[tuple[str, int], _SourceSaid]) -> None:
    """Remember what an event's ``meta.source`` says its source is: its id, or what the id migration 0006
    derived for a version recorded before capture-once comes from (which needs a ``file``; derived only
    if a row is compared with it).  A source that says neither is not kept: :func:`_verify_sources`
    reads a missing key as (None, None)."""
    source = view.source
    ident = source.get("id")
    ident = ident if isinstance(ident, str) and ident else None
    if ident is not None:
        sources[(sid, version)] = (ident, None)
    elif "file" in source:  # the derived id is computed only if a row is compared with it (most events have none)
        sources[(sid, version)] = (None, {"source": source, "snapshot": view.snapshot})


def _is_erased_source_id(ident: str) -> bool:
    from eventstore.ingest import is_erased_source_id

    return is_erased_source_id(ident)


def _legacy_source_id(meta: dict[str, Any]) -> str | None:
    from eventstore.ingest import legacy_source_id

    return legacy_source_id(meta)


def _verify_sources(store: EventStore, stream_id: str | None,
                    sources: dict[tuple[str, int], _SourceSaid], report: VerifyReport,
                    erased: set[tuple[str, int]] = frozenset(),  # type: ignore[assignment]
                    from_version: int = 0) -> None:
    """:func:`_compare_sources` with the rows read here (of ``stream_id`` from ``from_version`` on:
    ``verify --since``)."""
    with store.reading() as cur:
        rows = {(sid, v): ident for sid, v, ident in store.backend.source_rows(cur, stream_id) if v >= from_version}
    _compare_sources(rows, sources, report, erased)


def _compare_sources(rows: dict[tuple[str, int], str], sources: dict[tuple[str, int], _SourceSaid],
                     report: VerifyReport, erased: set[tuple[str, int]]) -> None:
    """Each ``source_versions`` row says what its event's ``meta.source.id`` says (or, for an event
    recorded before migration 0006, what the migration derived from its meta), and each event with
    a ``meta.source.id`` has its row: a capture reads the table to decide what is recorded."""
    for key, ident in rows.items():
        if key in erased:  # its meta is gone with the payload; the row keeps the capture from re-recording it
            if not _is_erased_source_id(ident):  # ... by where it was, never by a digest of what was erased
                report.failures.append(Failure(key[0], key[1], "source",
                                               f"source_versions keeps {ident} for an erased version: a digest "
                                               "of erased content (an erasure replaces it by where it was)"))
            continue
        said, legacy = sources.get(key, (None, None))
        if ident != said and not (said is None and legacy is not None and ident == _legacy_source_id(legacy)):
            what = f"meta.source.id is {said}" if said else "its event's meta names no such source"
            report.failures.append(Failure(key[0], key[1], "source",
                                           f"source_versions says {ident} but {what}"))
    for key, (said, _) in sources.items():
        if said is not None and key not in rows:
            report.failures.append(Failure(key[0], key[1], "source",
                                           f"meta.source.id {said} has no source_versions row "
                                           "(a capture would record this version again)"))


# ------------------------------------------------------------------ the replay cache

#: Replay-cache rows verify holds at once (a page, read in a transaction of its own): each holds a document.
CACHE_PAGE = 500


def _cache_rows(store: EventStore, stream_id: str | None) -> Iterator[CacheEntry]:
    """The replay-cache rows (of one stream, if given) in order, a page at a time: the folds that check them
    read events between pages, and a store's cache grows with its long runs."""
    after: tuple[str, str, int] | None = None
    while True:
        with store.reading() as cur:
            rows = store.backend.cache_entries(cur, stream_id, after=after, limit=CACHE_PAGE)
        yield from rows
        if len(rows) < CACHE_PAGE:
            return
        after = (rows[-1].stream_id, rows[-1].name, rows[-1].version)


def _verify_cache(store: EventStore, stream_id: str | None, report: VerifyReport) -> None:
    """Every cached row must name the event stored at its version, match its state digest and,
    for the dialect's current lens, equal (canonical bytes) the document folded from the events."""
    group: tuple[int, str] | None = None
    dialect: Dialect | None = None
    doc: Any = None
    at = 0
    for row in _cache_rows(store, stream_id):
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
