"""An erased blob keeps no digest of its bytes.

A blob's key is the plain SHA-256 of its bytes.  Until this revision an erasure emptied the blob's
``data`` and kept the row, and ``erased_blobs`` recorded it by that key: whoever reads the database
could confirm a guess of the whole blob by hashing the guess.  Nothing needs the key once the blob is
erased (events name a blob only in their ``meta.blobs``, emptied in the same transaction).  From this
revision the erasure's transaction records the ``erased_blobs`` row, deletes the ``blobs`` row, then
replaces the ``erased_blobs`` key by random bytes.  The append-only triggers are relaxed for exactly
that: a DELETE of a blob that an ``erased_blobs`` row names, and an UPDATE of an ``erased_blobs`` row that
changes its key alone, once no blob has that key.  Blobs erased before this revision are brought in
line here.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SQLITE_BLOB_DELETE_OK = "EXISTS (SELECT 1 FROM erased_blobs WHERE erased_blobs.sha256 = OLD.sha256)"
_SQLITE_KEY_UPDATE_OK = ("NEW.admin_event_id = OLD.admin_event_id AND NEW.erased_at = OLD.erased_at "
                         "AND length(NEW.sha256) = 32 AND NOT EXISTS (SELECT 1 FROM blobs WHERE blobs.sha256 = OLD.sha256)")


def _sqlite_triggers(relaxed: bool) -> None:
    for table, verb, ok in (("blobs", "DELETE", _SQLITE_BLOB_DELETE_OK), ("erased_blobs", "UPDATE", _SQLITE_KEY_UPDATE_OK)):
        name = f"{table}_no_{verb.lower()}"
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        when = f"WHEN NOT ({ok}) " if relaxed else ""
        op.execute(f"CREATE TRIGGER {name} BEFORE {verb} ON {table} {when}"
                   f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: {verb} rejected'); END")


_PG_BLOBS = """
CREATE OR REPLACE FUNCTION evstore_blobs_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.sha256 = OLD.sha256 AND NEW.size = OLD.size
       AND NEW.created_at = OLD.created_at AND length(NEW.data) = 0
       AND EXISTS (SELECT 1 FROM erased_blobs WHERE erased_blobs.sha256 = OLD.sha256) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND %s
       AND EXISTS (SELECT 1 FROM erased_blobs WHERE erased_blobs.sha256 = OLD.sha256) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'blobs are append-only: %% rejected', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql
"""

_PG_ERASED_BLOBS = """
CREATE OR REPLACE FUNCTION evstore_erased_blobs_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.admin_event_id = OLD.admin_event_id AND NEW.erased_at = OLD.erased_at
       AND length(NEW.sha256) = 32 AND NOT EXISTS (SELECT 1 FROM blobs WHERE blobs.sha256 = OLD.sha256) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'erased_blobs are append-only: % rejected', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _sqlite_triggers(relaxed=True)
    else:
        op.execute(_PG_BLOBS % "TRUE")
        op.execute(_PG_ERASED_BLOBS)
        op.execute("DROP TRIGGER IF EXISTS erased_blobs_no_update_delete ON erased_blobs")
        op.execute("CREATE TRIGGER erased_blobs_no_update_delete BEFORE UPDATE OR DELETE ON erased_blobs "
                   "FOR EACH ROW EXECUTE FUNCTION evstore_erased_blobs_append_only()")
    # Blobs erased before: their rows go, their erased_blobs keys become random bytes.
    op.execute("DELETE FROM blobs WHERE sha256 IN (SELECT sha256 FROM erased_blobs)")
    random = "randomblob(32)" if sqlite else "decode(md5(random()::text || sha256::text) || md5(random()::text), 'hex')"
    op.execute(f"UPDATE erased_blobs SET sha256 = {random}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers(relaxed=False)
    else:
        op.execute(_PG_BLOBS % "FALSE")
        op.execute("DROP TRIGGER IF EXISTS erased_blobs_no_update_delete ON erased_blobs")
        op.execute("CREATE TRIGGER erased_blobs_no_update_delete BEFORE UPDATE OR DELETE ON erased_blobs "
                   "FOR EACH ROW EXECUTE FUNCTION evstore_tree_append_only()")
        op.execute("DROP FUNCTION IF EXISTS evstore_erased_blobs_append_only()")
