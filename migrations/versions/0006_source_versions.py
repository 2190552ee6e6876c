"""Source versions: which version of which source each snapshot event recorded, for capture-once.

One row per ingested source version: the stream, the stream version of the event whose
``meta.source.id`` names it, and that identity (``file:<path>@<sha256>``, ``git:<commit>:<path>``,
``spool:<record>``; see ``eventstore/ingest.py``).  A capture reads a stream's rows with one
indexed query (the primary key starts with the stream) to record each source version at most
once.  The rows repeat what the chain already commits to (``meta.source.id``), so ``evstore
verify`` checks them against it; like ``events`` the table is append-only (triggers).

Existing stores are filled from the events' meta: a git version from its commit and path, a file
from its name and the SHA-256 its snapshot record holds (what a folder, a file or ``watch``
captured before this revision), so the next capture of the same source records nothing again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""
import json
import os

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _identity(meta: dict) -> str | None:
    """The identity a capture of today gives the version an event's meta describes (None: none)."""
    source = meta.get("source")
    if not isinstance(source, dict) or isinstance(source.get("id"), str):
        return source.get("id") if isinstance(source, dict) else None
    git, file = source.get("git"), source.get("file")
    if isinstance(git, dict) and isinstance(git.get("commit"), str) and isinstance(file, str):
        return f"git:{git['commit']}:{file}"
    snap = meta.get("snapshot")
    if isinstance(file, str) and "claude" not in source and isinstance(snap, dict) \
            and isinstance(snap.get("sha256"), str):
        return f"file:{os.path.basename(file)}@{snap['sha256']}"
    return None


def upgrade() -> None:
    op.create_table(
        "source_versions",
        sa.Column("stream_pk", BigId, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("source_id", sa.Text, nullable=False),
        sa.ForeignKeyConstraint(["stream_pk"], ["streams.stream_pk"], name="fk_source_versions_stream_pk_streams"),
        sa.PrimaryKeyConstraint("stream_pk", "version", name="pk_source_versions"),
    )
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    # Only events whose meta names a source (a byte search: meta is canonical JSON bytes).
    has = "instr(meta, :needle) > 0" if sqlite else "position(:needle in meta) > 0"
    rows = bind.execute(sa.text(f"SELECT stream_pk, version, meta FROM events WHERE {has} ORDER BY position"),
                        {"needle": b'"source":'})
    table = sa.table("source_versions", sa.column("stream_pk"), sa.column("version"), sa.column("source_id"))
    batch = []
    for pk, version, meta in rows:
        try:
            decoded = json.loads(bytes(meta))
        except ValueError:
            continue
        ident = _identity(decoded) if isinstance(decoded, dict) else None
        if ident is not None:
            batch.append({"stream_pk": pk, "version": version, "source_id": ident})
    if batch:
        op.bulk_insert(table, batch)
    if sqlite:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER source_versions_no_{verb.lower()} BEFORE {verb} ON source_versions "
                f"BEGIN SELECT RAISE(ABORT, 'source_versions are append-only: {verb} rejected'); END"
            )
    else:
        op.execute(
            """
            CREATE FUNCTION evstore_source_versions_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'source_versions are append-only: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER source_versions_no_update_delete BEFORE UPDATE OR DELETE ON source_versions "
            "FOR EACH ROW EXECUTE FUNCTION evstore_source_versions_append_only()"
        )
        op.execute(
            "CREATE TRIGGER source_versions_no_truncate BEFORE TRUNCATE ON source_versions "
            "FOR EACH STATEMENT EXECUTE FUNCTION evstore_source_versions_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS source_versions_no_update")
        op.execute("DROP TRIGGER IF EXISTS source_versions_no_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS source_versions_no_truncate ON source_versions")
        op.execute("DROP TRIGGER IF EXISTS source_versions_no_update_delete ON source_versions")
        op.execute("DROP FUNCTION IF EXISTS evstore_source_versions_append_only()")
    op.drop_table("source_versions")
