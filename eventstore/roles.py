"""Least privilege on PostgreSQL: a writer role that can append and a reader role that can only read.

The writer may INSERT into the log (``events``, ``streams``, ``blobs``, ``source_versions``, the Merkle tree's
``tree_nodes`` and ``tree_checkpoints``) and read what appending needs; the
only row it may change is a stream's head (``streams.version``, ``head_hash``: appending moves
it; ``verify`` reports a rewritten head) and the inline runs index with its checkpoint and the folded
documents it keeps (``projection_states``: it trusts them no more than its own rows, which ``verify``
re-derives from the log).  It can
never UPDATE, DELETE or TRUNCATE ``events``, nor drop the triggers (only the owner can).  The
reader may only SELECT.  Both are granted on the store's schema only; running the command again
changes nothing (roles and grants are idempotent).  Roles are created ``LOGIN`` without a
password: set one (``ALTER ROLE ... PASSWORD``) or grant the role to your users.
"""

from __future__ import annotations

import re

from eventstore.errors import EvstoreError
from eventstore.store import EventStore

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: table -> what the writer may do (the reader gets SELECT on every table of the schema)
WRITER_GRANTS = {
    "events": "SELECT, INSERT",
    "blobs": "SELECT, INSERT",
    "tree_nodes": "SELECT, INSERT",
    "tree_checkpoints": "SELECT, INSERT",
    "source_versions": "SELECT, INSERT",
    "erasures": "SELECT",  # erasing needs the owner (the triggers allow the tombstone UPDATE; the writer has none)
    "erased_blobs": "SELECT",
    "streams": "SELECT, INSERT, UPDATE (version, head_hash)",
    "store_identity": "SELECT",
    "api_tokens": "SELECT, UPDATE (last_used_at)",
    "alembic_version": "SELECT",
    "replay_cache": "SELECT",
    # The runs index's folded documents (projections/runs.py): written in the append's transaction.
    "projection_states": "SELECT, INSERT, UPDATE",
    "projection_checkpoints": "SELECT, INSERT, UPDATE",
    "proj_runs": "SELECT, INSERT, UPDATE",
    "proj_file_writes": "SELECT, INSERT, UPDATE",
    "proj_state_versions": "SELECT, INSERT",
}


def check_name(name: str, option: str) -> str:
    if not _NAME.fullmatch(name):
        raise EvstoreError(f'{option} "{name}" is not a role name evstore creates: use lower-case letters, digits '
                           "and _ (at most 63, not starting with a digit).")
    return name


def create_roles(store: EventStore, writer: str, reader: str) -> list[str]:
    """Create (if absent) ``writer`` and ``reader`` and grant them their rights on the store's
    schema; returns what was done, one line each."""
    if not store.backend.has_roles:  # the backend says why (before any connection is opened)
        return store.backend.create_roles(None, writer, reader, WRITER_GRANTS)
    check_name(writer, "--writer")
    check_name(reader, "--reader")
    if writer == reader:
        raise EvstoreError("--writer and --reader must be different roles.")
    proxy = store.engine.raw_connection()
    try:
        return store.backend.create_roles(proxy.driver_connection, writer, reader, WRITER_GRANTS)
    finally:
        proxy.close()
