"""Store identity: one row naming this store (a UUID created with the schema).

Derived data kept outside the database (the analytics Parquet files) binds itself to this id,
so two stores never share it by accident and a deleted-and-recreated store is a new store.
The row is immutable: triggers reject UPDATE and DELETE (and TRUNCATE on PostgreSQL).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("store_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("store_id", name="pk_store_identity"),
    )
    op.bulk_insert(table, [{
        "store_id": str(uuid.uuid4()),
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }])
    if op.get_bind().dialect.name == "sqlite":
        for verb in ("UPDATE", "DELETE", "INSERT"):
            op.execute(
                f"CREATE TRIGGER store_identity_no_{verb.lower()} BEFORE {verb} ON store_identity "
                f"BEGIN SELECT RAISE(ABORT, 'store_identity is immutable: {verb} rejected'); END"
            )
    else:
        op.execute(
            """
            CREATE FUNCTION evstore_store_identity_immutable() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'store_identity is immutable: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER store_identity_immutable BEFORE INSERT OR UPDATE OR DELETE ON store_identity "
            "FOR EACH ROW EXECUTE FUNCTION evstore_store_identity_immutable()"
        )
        op.execute(
            "CREATE TRIGGER store_identity_no_truncate BEFORE TRUNCATE ON store_identity "
            "FOR EACH STATEMENT EXECUTE FUNCTION evstore_store_identity_immutable()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for verb in ("update", "delete", "insert"):
            op.execute(f"DROP TRIGGER IF EXISTS store_identity_no_{verb}")
    else:
        op.execute("DROP TRIGGER IF EXISTS store_identity_no_truncate ON store_identity")
        op.execute("DROP TRIGGER IF EXISTS store_identity_immutable ON store_identity")
        op.execute("DROP FUNCTION IF EXISTS evstore_store_identity_immutable()")
    op.drop_table("store_identity")
