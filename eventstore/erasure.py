"""Retention, legal hold and erasure that keep every proof valid.

The chain commits to ``data_sha256`` and ``meta_sha256``, and the Merkle tree to the chain hashes,
so the stored ``data`` and ``meta`` of an event may be replaced without touching anything a proof
covers.  An erasure empties both (zero bytes, the *tombstone*) in the one UPDATE the database's
triggers allow (migration 0009): every hashed column unchanged and an ``erasures`` row (kind
``purged`` or ``erased``, the policy or request, the admin event, the time) already there.  The same
UPDATE clears the event's digest salt (migration 0010): the digests that stay then confirm no guess of
what was erased (events stored before salts keep plain SHA-256 digests, which do; docs/proofs.md); the
same transaction replaces the erased versions' capture-once identities by where they were (migration
0011: a file's SHA-256 would confirm a guess too).  A blob
that no remaining payload names is deleted once its ``erased_blobs`` row is recorded, and that row's
key (the SHA-256 of the blob's bytes) replaced by random bytes (migration 0012).  ``verify`` checks an
erased event's tombstone against its ``erasures`` row instead of its digests.

Every policy change, hold, release, purge and erasure is an event of the admin stream
:data:`ADMIN_STREAM` (who, when, what, why, how many), written in the transaction that does it, so
the chain, the tree and the checkpoints cover them like any other event; policies and holds are
folded from that stream, never kept elsewhere.

    >>> erase(store, stream_ids=["session-1"], reason="GDPR request 2026-114")  # doctest: +SKIP
    EraseResult(events=412, blobs=3, streams=['session-1'], ...)
"""

from __future__ import annotations

import getpass
import os
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from eventstore import codec
from eventstore.errors import ContentErased, EvstoreError, HoldInForce, InvalidEvent
from eventstore.ingest import erased_source_id, is_erased_source_id
from eventstore.store import ANY, EventStore, NewEvent, _Transaction

#: The stream that records every retention policy, hold, release, purge and erasure.
ADMIN_STREAM = "evstore.admin"
#: The least a retention policy may keep payloads, unless set with ``below_floor`` (recorded).
FLOOR_DAYS = 180
BATCH = 500

ProjectOf = Callable[[str], "str | None"]  # stream id -> its project (the runs index knows it)


def actor() -> str:
    """Who runs the command: $EVSTORE_ACTOR, else the login name."""
    try:
        return os.environ.get("EVSTORE_ACTOR") or getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): say so rather than fail
        return "unknown"


_DURATION = re.compile(r"(\d+)\s*(d|w|y|days?|weeks?|years?)")


def parse_duration(text: str) -> int:
    """Days in ``text``: ``180d``, ``26w``, ``1y`` (365 days)."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not m:
        raise InvalidEvent(f'Duration "{text[:40]}" is not one evstore reads — write days, weeks or years: '
                           "180d, 26w, 1y.")
    n, unit = int(m.group(1)), m.group(2)[0]
    return n * {"d": 1, "w": 7, "y": 365}[unit]


# ------------------------------------------------------------------ policies and holds


@dataclass(frozen=True)
class Retention:
    scope: str  # "dialect", "project" or "stream"
    name: str
    keep_days: int
    below_floor: bool
    set_at: str
    set_by: str

    def describe(self) -> str:
        return f"retention {self.scope} {self.name}: keep payloads {self.keep_days} days (set {self.set_at} by {self.set_by})"


@dataclass(frozen=True)
class Hold:
    hold_id: str
    scope: str  # "stream" or "project"
    name: str
    reason: str
    added_at: str
    added_by: str

    def describe(self) -> str:
        return f'hold {self.hold_id} on {self.scope} "{self.name}" ({self.reason}; added {self.added_at} by {self.added_by})'

    def covers(self, stream_id: str, project_of: ProjectOf | None) -> bool:
        if self.scope == "stream":
            return stream_id == self.name
        return project_of is not None and project_of(stream_id) == self.name


@dataclass
class Policies:
    retention: dict[tuple[str, str], Retention] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)

    def holds_on(self, stream_id: str, project_of: ProjectOf | None) -> list[Hold]:
        return [h for h in self.holds.values() if h.covers(stream_id, project_of)]

    def policy_for(self, stream_id: str, dialect: str | None, project_of: ProjectOf | None) -> Retention | None:
        """The most specific policy: the stream's, else its project's, else its dialect's."""
        found = self.retention.get(("stream", stream_id))
        if found is None and project_of is not None:
            project = project_of(stream_id)
            found = self.retention.get(("project", project)) if project is not None else None
        if found is None and dialect is not None:
            found = self.retention.get(("dialect", dialect))
        return found


def policies(store: EventStore) -> Policies:
    """The retention policies and holds in force, folded from the admin stream."""
    out = Policies()
    if store.stream_info(ADMIN_STREAM) is None:
        return out
    for e in store.read_stream(ADMIN_STREAM):
        if not e.data:
            continue
        d, at = e.payload, e.recorded_at
        if e.type == "evstore.retention_set":
            key = (d["scope"], d["name"])
            if d.get("keep_days") is None:
                out.retention.pop(key, None)
            else:
                out.retention[key] = Retention(d["scope"], d["name"], d["keep_days"], d["below_floor"], at, d["by"])
        elif e.type == "evstore.hold_added":
            out.holds[d["hold_id"]] = Hold(d["hold_id"], d["scope"], d["name"], d["reason"], at, d["by"])
        elif e.type == "evstore.hold_released":
            out.holds.pop(d["hold_id"], None)
    return out


def _record(store: EventStore, type_: str, data: dict[str, Any]) -> str:
    event_id = str(uuid.uuid4())
    store.append(ADMIN_STREAM, [NewEvent(type_, {**data, "by": actor()}, event_id=event_id)])
    return event_id


def set_retention(store: EventStore, scope: str, name: str, keep_days: int | None, *, below_floor: bool = False,
                  reason: str = "") -> Retention | None:
    """Set (or with ``keep_days=None`` remove) the policy of a dialect, project or stream."""
    if scope not in ("dialect", "project", "stream"):
        raise InvalidEvent(f'Retention scope "{scope}" is not dialect, project or stream.')
    if keep_days is not None and keep_days < FLOOR_DAYS and not below_floor:
        raise EvstoreError(f"Keeping payloads {keep_days} days is below the floor of {FLOOR_DAYS} days (the EU AI "
                           "Act asks for at least six months of logs) — pass --below-floor to set it anyway "
                           "(recorded in the admin stream).")
    _record(store, "evstore.retention_set", {"scope": scope, "name": name, "keep_days": keep_days,
                                             "below_floor": bool(below_floor and keep_days is not None
                                                                 and keep_days < FLOOR_DAYS),
                                             "reason": reason})
    return policies(store).retention.get((scope, name))


def add_hold(store: EventStore, scope: str, name: str, reason: str) -> Hold:
    if scope not in ("stream", "project"):
        raise InvalidEvent(f'Hold scope "{scope}" is not stream or project.')
    if not reason.strip():
        raise InvalidEvent("A hold needs a reason (--reason): the matter it is kept for.")
    hold_id = uuid.uuid4().hex[:8]
    _record(store, "evstore.hold_added", {"hold_id": hold_id, "scope": scope, "name": name, "reason": reason})
    return policies(store).holds[hold_id]


def release_hold(store: EventStore, target: str, reason: str) -> list[Hold]:
    """Release the hold ``target`` names (its id, or the stream or project it is on); the released holds."""
    found = [h for h in policies(store).holds.values() if target in (h.hold_id, h.name)]
    if not found:
        raise EvstoreError(f'No hold in force is "{target}" or is on "{target}" — `evstore hold show` lists them.')
    for h in found:
        _record(store, "evstore.hold_released", {"hold_id": h.hold_id, "scope": h.scope, "name": h.name,
                                                 "reason": reason})
    return found


# ------------------------------------------------------------------ erasing


@dataclass
class EraseResult:
    kind: str  # "erased" or "purged"
    reason: str
    events: int = 0
    blobs: int = 0
    streams: list[str] = field(default_factory=list)
    batches: int = 0
    cache_rows: int = 0
    scrubbed: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # streams a hold kept (retention apply)
    #: retention apply: the streams its policy covers (not held) and the cutoff (ISO time) it purged before
    covered: list[str] = field(default_factory=list)
    before: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "events": self.events, "blobs": self.blobs,
                "streams": self.streams, "batches": self.batches, "cache_rows": self.cache_rows,
                "scrubbed": self.scrubbed, "held": self.held}


def needles(text: str) -> list[bytes]:
    """The byte strings ``text`` is stored as: raw UTF-8 (blobs) and inside a JSON string."""
    raw = text.encode("utf-8")
    quoted = msgspec.json.encode(text)[1:-1]
    return [raw] if quoted == raw else [raw, quoted]


#: Meta keys an erasure keeps (in ``erasures.kept``): what a capture resumes from, not content.
KEPT_META = ("transcript",)


def _kept(meta: bytes) -> str | None:
    """The capture bookkeeping of ``meta`` (``meta.transcript``: file, offset, lines; not its prefix
    digest), so a transcript captured again resumes after what was erased instead of recording it again."""
    if not any(f'"{k}"'.encode() in meta for k in KEPT_META):
        return None
    try:
        decoded = codec.decode(meta)
    except Exception:  # noqa: BLE001 - nothing readable to keep
        return None
    kept = {k: decoded[k] for k in KEPT_META if isinstance(decoded, dict) and k in decoded}
    transcript = kept.get("transcript")
    if isinstance(transcript, dict):  # the SHA-256 of the bytes read would confirm a guess of an erased line
        kept["transcript"] = {k: v for k, v in transcript.items() if k not in ("prefix_sha256", "prefix_hmac")}
    return codec.encode(kept).decode() if kept else None


def _blob_names(meta: bytes) -> list[str]:
    if b'"blobs"' not in meta:
        return []
    try:
        names = codec.decode(meta).get("blobs")
    except Exception:  # noqa: BLE001 - a meta that does not decode names no blob we can read
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def erase(store: EventStore, *, reason: str, stream_ids: Sequence[str] | None = None, event_id: str | None = None,
          match: str | None = None, recorded_before: str | None = None, kind: str = "erased",
          project_of: ProjectOf | None = None, batch: int = BATCH, scrub: bool = True,
          dry_run: bool = False, on_batch: Callable[[int], None] | None = None) -> EraseResult:
    """Empty the payloads (data, meta, and the blobs nothing else names) of every event that matches
    all the filters given, outside the admin stream, in transactions of ``batch`` events, each
    recording an admin event; then make the bytes unrecoverable from the database files (``scrub``).

    ``match``: events whose data or meta contains the text (or that name a blob containing it): the
    whole payload of each is erased (its digest covers all of it; a redacted copy would be a new
    document the chain never committed to).  Refused, before anything is written, if a hold covers a
    stream it would touch.  Re-running continues where a killed run stopped (the filters select the
    payloads still stored)."""
    if not reason.strip():
        raise InvalidEvent("An erasure needs a reason (--reason): the request or policy it carries out.")
    if stream_ids is None and event_id is None and match is None and recorded_before is None:
        raise InvalidEvent("Say what to erase: a stream, an event id or a text to match.")
    if stream_ids is not None and ADMIN_STREAM in stream_ids:
        raise InvalidEvent(f'"{ADMIN_STREAM}" records every policy, hold and erasure; it is never erased (its '
                           "events hold no payload of a run: reasons, counts, stream ids).")
    if match is not None and len(match) < 4:
        raise InvalidEvent(f"--match needs at least 4 characters ({len(match)} given): a shorter text would "
                           "erase far more than meant.")
    be = store.backend
    found = needles(match) if match is not None else []
    if found:
        with store.reading() as cur:
            found += [d.hex().encode() for d in be.blobs_containing(cur, found)]
    filters: dict[str, Any] = {"exclude_stream": ADMIN_STREAM, "stream_ids": stream_ids, "event_id": event_id,
                               "needles": found, "recorded_before": recorded_before}
    result = EraseResult(kind, reason)
    # What would be touched, first: a hold refuses the whole request before anything is written.
    touched: dict[str, int] = {}
    after = 0
    while True:
        with store.reading() as cur:
            rows = be.erasable_events(cur, **filters, after_position=after, limit=5000)
        for _p, sid, _v, _m in rows:
            touched[sid] = touched.get(sid, 0) + 1
        if len(rows) < 5000:
            break
        after = rows[-1][0]
    held = policies(store)
    if project_of is None and any(h.scope == "project" for h in held.holds.values()):
        # Without the runs index's projects a project hold could not be told: never erase past one.
        raise HoldInForce(f"Project holds are in force and no project lookup was given; nothing was {kind} — "
                          "erase with `evstore erase` (it reads the projects from the runs index).")
    for sid in touched:
        holds = held.holds_on(sid, project_of)
        if holds:
            raise HoldInForce(f'Stream "{sid}" is under {holds[0].describe()}; nothing was {kind} — release it '
                              f"(`evstore hold release {holds[0].hold_id} --reason ...`) once the matter is closed.")
    result.streams = sorted(touched)
    if dry_run:
        result.events = sum(touched.values())
        return result
    selector = {"streams": list(stream_ids) if stream_ids is not None else None, "event_id": event_id,
                # the text itself is never recorded (it is what is being erased), nor its digest
                "match": None if match is None else f"<text of {len(match)} characters, not recorded>",
                "recorded_before": recorded_before}
    done_upto = 0  # positions are erased in order: each batch starts after the last one's
    while True:
        with _Transaction(store, None, ADMIN_STREAM) as txn:
            rows = be.erasable_events(txn.cur, **filters, after_position=done_upto, limit=batch)
            if not rows:
                txn.abandon()
                break
            admin_id = str(uuid.uuid4())
            streams = sorted({r[1] for r in rows})
            now = txn.now
            txn.add(ADMIN_STREAM, [NewEvent(f"evstore.{kind}", {
                "reason": reason, "selector": selector, "events": len(rows), "streams": streams,
                "positions": [rows[0][0], rows[-1][0]], "by": actor()}, event_id=admin_id)], ANY)
            be.tombstone_events(txn.cur, [(r[0], kind, reason, admin_id, now, _kept(r[3])) for r in rows])
            # Which bytes each erased version had (a file's, a spooled record's SHA-256) goes too.
            be.replace_source_ids(txn.cur, [(pk, v, erased_source_id(i)) for pk, v, i
                                            in be.source_ids_at(txn.cur, [r[0] for r in rows])
                                            if not is_erased_source_id(i)])
            candidates = {n for r in rows for n in _blob_names(r[3])}
            gone = [bytes.fromhex(n) for n in sorted(candidates) if not be.blob_still_named(txn.cur, n)]
            if gone:
                be.tombstone_blobs(txn.cur, gone, admin_id, now)
            result.cache_rows += be.drop_cached_states(txn.cur, streams)
        done_upto = rows[-1][0]
        result.events += len(rows)
        result.blobs += len(gone)
        result.batches += 1
        if on_batch is not None:
            on_batch(result.events)
    if scrub:
        result.scrubbed = be.scrub(store._raw())
    return result


def due(store: EventStore, *, now: datetime | None = None, project_of: ProjectOf | None = None
        ) -> list[tuple[Retention, str, list[str], list[str]]]:
    """(policy, cutoff, streams it purges, streams a hold keeps) for every policy in force."""
    p = policies(store)
    now = now or datetime.now(UTC)
    groups: dict[tuple[str, str], tuple[Retention, list[str], list[str]]] = {}
    for s in store.list_streams():
        if s.stream_id == ADMIN_STREAM:
            continue
        policy = p.policy_for(s.stream_id, s.dialect, project_of)
        if policy is None:
            continue
        entry = groups.setdefault((policy.scope, policy.name), (policy, [], []))
        (entry[2] if p.holds_on(s.stream_id, project_of) else entry[1]).append(s.stream_id)
    out = []
    for policy, streams, kept in groups.values():
        cutoff = (now - timedelta(days=policy.keep_days)).isoformat(timespec="microseconds").replace("+00:00", "Z")
        out.append((policy, cutoff, streams, kept))
    return out


def apply_retention(store: EventStore, *, now: datetime | None = None, project_of: ProjectOf | None = None,
                    dry_run: bool = False, batch: int = BATCH, scrub: bool = True,
                    on_batch: Callable[[int], None] | None = None) -> list[EraseResult]:
    """Purge the payloads past their policy, in batches, skipping held streams; one result per policy."""
    out = []
    for policy, cutoff, streams, kept in due(store, now=now, project_of=project_of):
        done = EraseResult("purged", policy.describe(), held=kept, covered=streams, before=cutoff)
        for i in range(0, len(streams), 200):
            r = erase(store, reason=policy.describe(), stream_ids=streams[i:i + 200], recorded_before=cutoff,
                      kind="purged", project_of=project_of, batch=batch, scrub=False, dry_run=dry_run,
                      on_batch=on_batch)
            done.events += r.events
            done.blobs += r.blobs
            done.batches += r.batches
            done.cache_rows += r.cache_rows
            done.streams += r.streams
        out.append(done)
    if scrub and not dry_run and any(r.events for r in out):
        out[0].scrubbed = store.backend.scrub(store._raw())
    return out


# ------------------------------------------------------------------ explaining a tombstone


def explain(store: EventStore, positions: Iterable[int]) -> dict[int, tuple[str, str, str, str]]:
    """position -> (kind, reason, admin event id, time) for those of ``positions`` that are erased."""
    wanted = list(positions)
    with store.reading() as cur:
        return store.backend.erasure_rows(cur, wanted)


def describe(row: tuple[str, str, str, str] | None) -> str:
    """``purged at T (policy ...; admin event ID)`` for an erasures row (None: no row recorded)."""
    if row is None:
        return "missing (an empty payload with no erasure recorded; run `evstore verify`)"
    kind, reason, admin_id, at = row
    return f'{kind} at {at} ({reason}; admin event {admin_id} in stream "{ADMIN_STREAM}")'


def refuse(store: EventStore, stream_id: str | None, version: int, position: int) -> ContentErased:
    """The error saying that the content of ``stream_id`` version ``version`` is gone: when, why."""
    where = f'stream "{stream_id}" version {version}' if stream_id is not None else f"version {version}"
    return ContentErased(f"The content of {where} was {describe(explain(store, [position]).get(position))} — its "
                         "header, digests and chain hash remain, so `evstore verify` and every proof still hold; "
                         "the content cannot be shown.")
