"""Erasure: the payload of an event (and a blob) may be replaced by an empty tombstone, nothing else.

``erasures`` records, per event position, that its ``data`` and ``meta`` were purged (a retention
policy) or erased (a request), why, and the admin event that did it; ``erased_blobs`` the same for
a blob.  The append-only triggers of ``events`` and ``blobs`` are relaxed for exactly one UPDATE:
``data`` and ``meta`` (a blob's ``data``) set to zero bytes while every other column (the ids, the
times, the digests the chain commits to, ``prev_hash`` and ``hash``) stays the same, and only when
the matching ``erasures`` / ``erased_blobs`` row exists.  ``erasures.kept`` holds the bookkeeping of the
erased meta a capture resumes from (``meta.transcript``: file, byte offset, line count, prefix digest),
so a transcript captured again is not recorded again from the start.  DELETE and TRUNCATE stay rejected; both
new tables are append-only.  The chain and the Merkle tree commit to the digests, so every proof
stays valid (docs/proofs.md, "Retention and erasure").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TABLES = ("erasures", "erased_blobs")
_SAME = " AND ".join(f"NEW.{c} = OLD.{c}" for c in (
    "position", "stream_pk", "version", "event_id", "type", "schema_version", "recorded_at", "data_sha256",
    "meta_sha256", "prev_hash", "hash"))
# SQLite: IS compares NULLs as equal; PostgreSQL: IS NOT DISTINCT FROM.
_SQLITE_EVENT_OK = (f"{_SAME} AND NEW.occurred_at IS OLD.occurred_at AND length(NEW.data) = 0 AND length(NEW.meta) = 0 "
                    "AND EXISTS (SELECT 1 FROM erasures WHERE erasures.position = OLD.position)")
_SQLITE_BLOB_OK = ("NEW.sha256 = OLD.sha256 AND NEW.size = OLD.size AND NEW.created_at = OLD.created_at "
                   "AND length(NEW.data) = 0 AND EXISTS (SELECT 1 FROM erased_blobs WHERE erased_blobs.sha256 = OLD.sha256)")


def upgrade() -> None:
    op.create_table(
        "erasures",
        sa.Column("position", BigId, nullable=False, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("admin_event_id", sa.String(36), nullable=False),
        sa.Column("erased_at", sa.String(32), nullable=False),
        sa.Column("kept", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("position", name="pk_erasures"),
    )
    op.create_table(
        "erased_blobs",
        sa.Column("sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("admin_event_id", sa.String(36), nullable=False),
        sa.Column("erased_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_erased_blobs"),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_update")
        op.execute(f"CREATE TRIGGER events_no_update BEFORE UPDATE ON events WHEN NOT ({_SQLITE_EVENT_OK}) "
                   "BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE rejected'); END")
        op.execute("DROP TRIGGER IF EXISTS blobs_no_update")
        op.execute(f"CREATE TRIGGER blobs_no_update BEFORE UPDATE ON blobs WHEN NOT ({_SQLITE_BLOB_OK}) "
                   "BEGIN SELECT RAISE(ABORT, 'blobs are append-only: UPDATE rejected'); END")
        for table in TABLES:
            for verb in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: {verb} rejected'); END"
                )
    else:
        same = _SAME.replace("NEW.", "NEW.").replace(" = ", " IS NOT DISTINCT FROM ")
        op.execute(
            f"""
            CREATE OR REPLACE FUNCTION evstore_events_append_only() RETURNS trigger AS $$
            BEGIN
                IF TG_OP = 'UPDATE' AND {same} AND NEW.occurred_at IS NOT DISTINCT FROM OLD.occurred_at
                   AND length(NEW.data) = 0 AND length(NEW.meta) = 0
                   AND EXISTS (SELECT 1 FROM erasures WHERE erasures.position = OLD.position) THEN
                    RETURN NEW;
                END IF;
                RAISE EXCEPTION 'events are append-only: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            """
            CREATE OR REPLACE FUNCTION evstore_blobs_append_only() RETURNS trigger AS $$
            BEGIN
                IF TG_OP = 'UPDATE' AND NEW.sha256 = OLD.sha256 AND NEW.size = OLD.size
                   AND NEW.created_at = OLD.created_at AND length(NEW.data) = 0
                   AND EXISTS (SELECT 1 FROM erased_blobs WHERE erased_blobs.sha256 = OLD.sha256) THEN
                    RETURN NEW;
                END IF;
                RAISE EXCEPTION 'blobs are append-only: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        for table in TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION evstore_tree_append_only()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION evstore_tree_append_only()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in TABLES:
        if sqlite:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update_delete ON {table}")
    if sqlite:
        for table in ("events", "blobs"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            op.execute(f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
                       f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: UPDATE rejected'); END")
    else:
        for table in ("events", "blobs"):
            op.execute(
                f"""
                CREATE OR REPLACE FUNCTION evstore_{table}_append_only() RETURNS trigger AS $$
                BEGIN
                    RAISE EXCEPTION '{table} are append-only: % rejected', TG_OP
                        USING ERRCODE = 'insufficient_privilege';
                END $$ LANGUAGE plpgsql
                """
            )
    op.drop_table("erased_blobs")
    op.drop_table("erasures")
