"""Salted payload digests: ``events.salt``, destroyed with the payload on erasure.

Before this revision the chain committed to ``data_sha256 = SHA-256(data)`` and ``meta_sha256 =
SHA-256(meta)``, which stay after an erasure: anyone holding the database could confirm a guessed
erased value (a short password, an email address) by hashing the guess.  From this revision every new
event gets 16 random bytes in ``salt`` and its digests are ``SHA-256(salt || data)`` and
``SHA-256(salt || meta)`` (eventstore/chain.py ``payload_digest``).  The salt is a column of the
event's own row, so the one UPDATE an erasure may make clears it in the same statement that empties
``data`` and ``meta`` (no second table to keep in step; 17 bytes a row).  The append-only trigger now
allows that UPDATE only if ``salt`` is NULL afterwards: no erased event keeps its salt.

Events stored before keep ``salt`` NULL and their plain digests (the chain commits to them; nothing
is rewritten): what they reveal after an erasure is unchanged, and docs/proofs.md says so.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_SAME = " AND ".join(f"NEW.{c} = OLD.{c}" for c in (
    "position", "stream_pk", "version", "event_id", "type", "schema_version", "recorded_at", "data_sha256",
    "meta_sha256", "prev_hash", "hash"))


def _sqlite_event_ok(salt: bool) -> str:
    return (f"{_SAME} AND NEW.occurred_at IS OLD.occurred_at AND length(NEW.data) = 0 AND length(NEW.meta) = 0 "
            + ("AND NEW.salt IS NULL " if salt else "")
            + "AND EXISTS (SELECT 1 FROM erasures WHERE erasures.position = OLD.position)")


def _pg_function(salt: bool) -> str:
    same = _SAME.replace(" = ", " IS NOT DISTINCT FROM ")
    return f"""
        CREATE OR REPLACE FUNCTION evstore_events_append_only() RETURNS trigger AS $$
        BEGIN
            IF TG_OP = 'UPDATE' AND {same} AND NEW.occurred_at IS NOT DISTINCT FROM OLD.occurred_at
               AND length(NEW.data) = 0 AND length(NEW.meta) = 0 {"AND NEW.salt IS NULL" if salt else ""}
               AND EXISTS (SELECT 1 FROM erasures WHERE erasures.position = OLD.position) THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION 'events are append-only: % rejected', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END $$ LANGUAGE plpgsql
        """


def _triggers(salt: bool) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_update")
        op.execute(f"CREATE TRIGGER events_no_update BEFORE UPDATE ON events WHEN NOT ({_sqlite_event_ok(salt)}) "
                   "BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE rejected'); END")
    else:
        op.execute(_pg_function(salt))


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_update")  # recreated below, naming the new column
    op.add_column("events", sa.Column("salt", sa.LargeBinary(16), nullable=True))
    _triggers(salt=True)


def downgrade() -> None:
    # Going back drops the salts: the digests of salted events no longer recompute, which
    # `evstore verify` then reports (a downgrade is for undoing a fresh upgrade, not for a store in use).
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_update")  # it names the column being dropped
    else:
        _triggers(salt=False)
    op.drop_column("events", "salt")  # SQLite >= 3.35: ALTER TABLE ... DROP COLUMN
    if op.get_bind().dialect.name == "sqlite":
        _triggers(salt=False)
