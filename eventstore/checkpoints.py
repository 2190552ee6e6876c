"""Signed checkpoints of the log and the proofs a store answers against them (issue 34).

A checkpoint is a C2SP tlog-checkpoint (origin, tree size, RFC 9162 root of the log's Merkle tree,
:mod:`eventstore.tree`) signed as a C2SP signed note by the log's key (:mod:`eventstore.tlog`); the
store records every one it makes (``tree_checkpoints``), with the cosignatures witnesses added.
A proof is computed from the nodes the store keeps, and only after the store's tree at the
checkpoint's size is checked to hash to the checkpoint's root: a store that no longer extends a
checkpoint answers with :class:`~eventstore.errors.ProofError`, never with a proof.

    >>> note = make_checkpoint(store, signer)                    # doctest: +SKIP
    >>> proof = inclusion(store, note, stream_id="PROJ-1", version=3)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from eventstore.errors import ProofError, StreamNotFound
from eventstore.records import CheckpointNote, LeafEvent
from eventstore.store import EventStore, utcnow
from eventstore.tlog import merkle
from eventstore.tlog import note as notes
from eventstore.tlog.checkpoint import Checkpoint, sign_checkpoint
from eventstore.tlog.proofs import ConsistencyProof, InclusionProof, encode_hashes
from eventstore.tree import Tree


def read_checkpoint(note_text: str, where: str = "the checkpoint") -> Checkpoint:
    """The checkpoint body of a signed note (its signatures not checked: the store's own notes, or
    a file whose signature the caller checks with the log key)."""
    try:
        text, _sigs = notes.parse_note(note_text)
        return Checkpoint.parse(text)
    except ProofError as exc:
        raise ProofError(f"{where} is not a signed checkpoint: {exc}") from exc


def make_checkpoint(store: EventStore, signer: notes.NoteSigner, *, origin: str | None = None,
                    cosign: Callable[[str, Checkpoint], str] | None = None) -> str:
    """Sign the log's current size and root as a checkpoint (origin: the key's name by default),
    let ``cosign(note, checkpoint)`` add the witnesses' cosignatures, record the result in the store
    and return it.  Nothing is recorded when ``cosign`` raises."""
    with store.tree() as t:
        t.prefetch([(0, t.size)] if t.size else [])
        checkpoint = Checkpoint(origin or signer.name, t.size, t.root())
    note = sign_checkpoint(checkpoint, signer)
    if cosign is not None:
        note = cosign(note, checkpoint)
    record_checkpoint(store, note, checkpoint)
    return note


def record_checkpoint(store: EventStore, note: str, checkpoint: Checkpoint) -> None:
    with store.writing("recording a checkpoint") as cur:
        store.backend.insert_checkpoint_note(cur, checkpoint.origin, checkpoint.size, checkpoint.root, note, utcnow())


def recorded_checkpoints(store: EventStore, *, origin: str | None = None, tree_size: int | None = None,
                         limit: int = 100) -> list[CheckpointNote]:
    """The checkpoints the store recorded (of ``origin``, at ``tree_size``, if given), newest first."""
    with store.reading() as cur:
        return store.backend.checkpoint_notes(cur, origin=origin, tree_size=tree_size, limit=limit)


def signed_heads(store: EventStore, log: notes.NoteVerifier, origin: str, limit: int = 10_000) -> list[tuple[int, bytes]]:
    """(size, root) of the checkpoints of ``origin`` the store recorded whose signature by ``log``
    verifies (a writer can delete them, not forge them): what locates a rewrite between two of them."""
    from eventstore.tlog.checkpoint import open_checkpoint

    out = []
    for recorded in recorded_checkpoints(store, origin=origin, limit=limit):
        try:
            cp = open_checkpoint(recorded.note, log, origin=origin).checkpoint
        except ProofError:
            continue
        out.append((cp.size, cp.root))
    return out


@dataclass(frozen=True)
class Signer:
    """Who signed a recorded checkpoint note: the log (a 64-byte Ed25519 signature) or a witness
    (a 72-byte timestamped cosignature, ``cosigned_at`` its POSIX time); not verified here."""

    name: str
    key_id: str
    cosigned_at: int | None


def signers(note_text: str) -> list[Signer]:
    """The signature lines of a note, as who signed (the witnesses are those with ``cosigned_at``)."""
    try:
        _text, sigs = notes.parse_note(note_text)
    except ProofError:
        return []
    return [Signer(s.name, f"{s.key_id:08x}", s.timestamp if len(s.signature) == 72 else None) for s in sigs]


def latest_checkpoint(store: EventStore) -> CheckpointNote | None:
    found = recorded_checkpoints(store, limit=1)
    return found[0] if found else None


def _recorded_ranges(proof: Callable[[Callable[[int, int], bytes]], object]) -> list[tuple[int, int]]:
    """The subtree ranges ``proof(subtree)`` asks for (its steps never depend on the hashes)."""
    ranges: list[tuple[int, int]] = []

    def record(start: int, end: int) -> bytes:
        ranges.append((start, end))
        return bytes(merkle.HASH_SIZE)

    proof(record)
    return ranges


@contextmanager
def _open_tree(store: EventStore, checkpoint: Checkpoint, what: str, *,
               leaf: dict[str, Any] | None = None) -> Iterator[tuple[Tree, LeafEvent | None]]:
    """The tree at ``checkpoint.size`` and (``leaf``: find_leaf's keywords) the event, read in one
    transaction (on PostgreSQL each transaction is round trips of its own); a ProofError saying so when
    the log is shorter than the checkpoint."""
    with store.reading() as cur:
        found = None
        if leaf is not None:
            found = store.backend.leaf_event(cur, **leaf)
            if found is None:
                what_event = f"event {leaf['event_id']}" if leaf.get("event_id") is not None else \
                    f'version {leaf["version"]} of stream "{leaf["stream_id"]}"'
                raise StreamNotFound(f"No {what_event} in the log; `evstore log` lists a stream's events.")
        last = store.backend.max_position(cur)
        if last < checkpoint.size:
            raise ProofError(f"The log has {last} events, fewer than the {checkpoint.size} {what} covers: it no "
                             "longer extends it (truncated, or another log); run `evstore verify --checkpoint`.")
        yield Tree(store.tree_source(cur), checkpoint.size), found


def _check_root(t: Tree, checkpoint: Checkpoint, what: str) -> None:
    """ProofError unless the tree ``t`` (at ``checkpoint.size``) hashes to the checkpoint's root."""
    root = t.root()
    if root != checkpoint.root:
        raise ProofError(f"The log's first {checkpoint.size} events no longer hash to the root of {what} "
                         f"({root.hex()[:16]}… here, {checkpoint.root.hex()[:16]}… signed): the log no longer "
                         "extends it (rewritten after it); run `evstore verify --checkpoint`.")


def find_leaf(store: EventStore, *, stream_id: str | None = None, version: int | None = None,
              event_id: str | None = None) -> LeafEvent:
    """The event at ``stream_id`` / ``version``, or with ``event_id``; StreamNotFound naming it."""
    with store.reading() as cur:
        found = store.backend.leaf_event(cur, stream_id=stream_id, version=version, event_id=event_id)
    if found is None:
        what = f"event {event_id}" if event_id is not None else f'version {version} of stream "{stream_id}"'
        raise StreamNotFound(f"No {what} in the log; `evstore log` lists a stream's events.")
    return found


def inclusion(store: EventStore, checkpoint_note: str, *, stream_id: str | None = None, version: int | None = None,
              event_id: str | None = None) -> InclusionProof:
    """The RFC 9162 inclusion proof of one event in the tree ``checkpoint_note`` signed."""
    checkpoint = read_checkpoint(checkpoint_note)
    keys = {"stream_id": stream_id, "version": version} if event_id is None else {"event_id": event_id}
    with _open_tree(store, checkpoint, "the checkpoint", leaf=keys) as (t, leaf):
        assert leaf is not None
        index = leaf.position - 1
        if index >= checkpoint.size:
            raise ProofError(f'Stream "{leaf.stream_id}" version {leaf.version} is leaf {index}, after the '
                             f"{checkpoint.size} leaves the checkpoint covers; make a newer checkpoint "
                             "(`evstore checkpoint`).")
        size = checkpoint.size
        t.prefetch([(0, size), *_recorded_ranges(lambda f: merkle.inclusion_proof(index, size, f))])
        _check_root(t, checkpoint, "the checkpoint")
        path = merkle.inclusion_proof(index, size, t.subtree)
    from eventstore import erasure

    erased = erasure.explain(store, [leaf.position]).get(leaf.position)
    return InclusionProof(leaf_index=index, tree_size=checkpoint.size, event_hash=leaf.hash.hex(),
                          inclusion=encode_hashes(path), checkpoint=checkpoint_note, stream=leaf.stream_id,
                          version=leaf.version, event_id=leaf.event_id,
                          content=None if erased is None else erasure.describe(erased))


def consistency(store: EventStore, old_note: str, new_note: str) -> ConsistencyProof:
    """The RFC 9162 consistency proof from the tree ``old_note`` signed to the one ``new_note`` signed."""
    old, new = read_checkpoint(old_note, "the old checkpoint"), read_checkpoint(new_note, "the new checkpoint")
    if old.origin != new.origin:
        raise ProofError(f"The checkpoints are of two logs ({old.origin!r} and {new.origin!r}).")
    if old.size > new.size:
        raise ProofError(f"The old checkpoint covers {old.size} leaves, more than the new one's {new.size}; "
                         "give the older checkpoint first.")
    with _open_tree(store, new, "the new checkpoint") as (t, _):
        ranges = _recorded_ranges(lambda f: merkle.consistency_proof(old.size, new.size, f))
        t.prefetch([*([(0, new.size)] if new.size else []), *([(0, old.size)] if old.size else []), *ranges])
        _check_root(t, new, "the new checkpoint")
        if old.size:
            got = t.subtree(0, old.size)
            if got != old.root:
                raise ProofError(f"The log's first {old.size} events no longer hash to the root of the old "
                                 f"checkpoint ({got.hex()[:16]}… here, {old.root.hex()[:16]}… signed): the log no "
                                 "longer extends it (rewritten after it); run `evstore verify --checkpoint`.")
        elif old.root != merkle.EMPTY_ROOT:
            raise ProofError("The old checkpoint is of an empty log, but its root is not the empty tree's.")
        path = merkle.consistency_proof(old.size, new.size, t.subtree)
    return ConsistencyProof(old_size=old.size, new_size=new.size, consistency=encode_hashes(path),
                            old_checkpoint=old_note, new_checkpoint=new_note)


def consistency_hashes(store: EventStore, old_size: int, new: Checkpoint) -> list[bytes]:
    """The consistency proof from ``old_size`` to ``new`` (a witness's last cosigned size to a new
    checkpoint), from the store's tree."""
    if old_size > new.size:
        raise ProofError(f"Cannot prove {old_size} leaves consistent with the {new.size} of the new checkpoint.")
    with store.tree(new.size) as t:
        t.prefetch(_recorded_ranges(lambda f: merkle.consistency_proof(old_size, new.size, f)))
        return merkle.consistency_proof(old_size, new.size, t.subtree)


def last_cosigned_size(store: EventStore, origin: str, witness: notes.NoteVerifier) -> int:
    """The tree size of the newest recorded checkpoint of ``origin`` that ``witness`` cosigned (0: none)."""
    for recorded in recorded_checkpoints(store, origin=origin, limit=1000):
        try:
            notes.open_note(recorded.note, [witness])
        except ProofError:
            continue
        return recorded.tree_size
    return 0


def cosign(store: EventStore, note: str, checkpoint: Checkpoint,
           witnesses: Sequence[tuple[str, notes.NoteVerifier]]) -> str:
    """``note`` with the cosignatures of each ``(url, witness key)``: each is sent the checkpoint and
    the consistency proof from the last size it cosigned (as recorded here; when the witness answers
    409 with another size, once more from that size).  A refusal raises WitnessError naming the
    witness and its answer."""
    from eventstore.errors import WitnessError
    from eventstore.tlog.witness import add_cosignatures, submit_to_witness

    signed = note
    for url, witness in witnesses:
        old = last_cosigned_size(store, checkpoint.origin, witness)
        try:
            lines = submit_to_witness(url, note, old, consistency_hashes(store, old, checkpoint), witness)
        except WitnessError as exc:
            if exc.status != 409 or exc.latest_size is None or exc.latest_size == old \
                    or exc.latest_size > checkpoint.size:
                raise
            old = exc.latest_size  # the witness cosigned a checkpoint this store did not record
            lines = submit_to_witness(url, note, old, consistency_hashes(store, old, checkpoint), witness)
        signed = add_cosignatures(signed, lines)
    return signed


def to_json(proof: InclusionProof | ConsistencyProof) -> dict[str, Any]:
    """The proof file's JSON object (what ``evstore prove`` prints, ``verify-proof`` reads)."""
    import msgspec

    out: dict[str, Any] = msgspec.to_builtins(proof)
    if out.get("content", "") is None:  # only an erased or purged event's proof carries the note
        del out["content"]
    return out
