"""The event log: streams, events (append-only), projection checkpoints, and cached documents in a
table then named ``snapshots`` (0004 renames it ``replay_cache``: a snapshot is an observed file version).

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "streams",
        sa.Column("stream_pk", BigId, primary_key=True, autoincrement=True),
        sa.Column("stream_id", sa.String(255), nullable=False),
        sa.Column("dialect", sa.String(64), nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("head_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("stream_pk", name="pk_streams"),
        sa.UniqueConstraint("stream_id", name="uq_streams_stream_id"),
    )
    op.create_table(
        "events",
        sa.Column("position", BigId, primary_key=True, autoincrement=False),
        sa.Column("stream_pk", BigId, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("schema_version", sa.SmallInteger, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("meta", sa.LargeBinary, nullable=False),
        sa.Column("occurred_at", sa.String(32), nullable=True),
        sa.Column("recorded_at", sa.String(32), nullable=False),
        sa.Column("data_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("meta_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("prev_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.ForeignKeyConstraint(["stream_pk"], ["streams.stream_pk"], name="fk_events_stream_pk_streams"),
        sa.UniqueConstraint("stream_pk", "version", name="uq_events_stream_pk"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    )
    op.create_index("ix_events_type_position", "events", ["type", "position"])
    op.create_table(
        "projection_checkpoints",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_projection_checkpoints"),
    )
    op.create_table(
        "snapshots",
        sa.Column("stream_pk", BigId, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("stream_pk", "name", "version", name="pk_snapshots"),
        sa.ForeignKeyConstraint(["stream_pk"], ["streams.stream_pk"], name="fk_snapshots_stream_pk_streams"),
    )
    # Append-only, enforced by the database itself.
    if op.get_bind().dialect.name == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events "
                f"BEGIN SELECT RAISE(ABORT, 'events are append-only: {verb} rejected'); END"
            )
    else:
        op.execute(
            """
            CREATE FUNCTION evstore_events_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'events are append-only: % rejected', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events "
            "FOR EACH ROW EXECUTE FUNCTION evstore_events_append_only()"
        )
        op.execute(
            "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION evstore_events_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_update")
        op.execute("DROP TRIGGER IF EXISTS events_no_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS events_no_truncate ON events")
        op.execute("DROP TRIGGER IF EXISTS events_no_update_delete ON events")
        op.execute("DROP FUNCTION IF EXISTS evstore_events_append_only()")
    op.drop_table("snapshots")
    op.drop_table("projection_checkpoints")
    op.drop_index("ix_events_type_position", table_name="events")
    op.drop_table("events")
    op.drop_table("streams")
