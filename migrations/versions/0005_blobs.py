"""Blobs: content-addressed bytes (very large tool outputs, base64 images), stored once.

An event refers to a blob by the SHA-256 of its bytes (and lists the digests it refers to in
``meta.blobs``, which the chain commits to); the same bytes in two sessions are one row.  The
table is append-only like ``events``: triggers reject UPDATE and DELETE (and TRUNCATE on
PostgreSQL); ``evstore verify`` re-hashes every blob and checks every reference resolves.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_blobs"),
    )
    if op.get_bind().dialect.name == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER blobs_no_{verb.lower()} BEFORE {verb} ON blobs "
                f"BEGIN SELECT RAISE(ABORT, 'blobs are append-only: {verb} rejected'); END"
            )
    else:
        op.execute(
            """
            CREATE FUNCTION evstore_blobs_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'blobs are append-only: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER blobs_no_update_delete BEFORE UPDATE OR DELETE ON blobs "
            "FOR EACH ROW EXECUTE FUNCTION evstore_blobs_append_only()"
        )
        op.execute(
            "CREATE TRIGGER blobs_no_truncate BEFORE TRUNCATE ON blobs "
            "FOR EACH STATEMENT EXECUTE FUNCTION evstore_blobs_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS blobs_no_update")
        op.execute("DROP TRIGGER IF EXISTS blobs_no_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS blobs_no_truncate ON blobs")
        op.execute("DROP TRIGGER IF EXISTS blobs_no_update_delete ON blobs")
        op.execute("DROP FUNCTION IF EXISTS evstore_blobs_append_only()")
    op.drop_table("blobs")
