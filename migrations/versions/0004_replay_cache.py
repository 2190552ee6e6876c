"""The replay cache: ``snapshots`` becomes ``replay_cache``, each row bound to the log.

A cached document is used only while it agrees with the log: each row carries the hash of the
event at its version (checked against ``events.hash`` on every read) and the SHA-256 of its
stored state; ``evstore verify`` re-folds every row.  "Snapshot" now means only an observed file
version.  The old rows were a cache and are dropped (replay refills it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.drop_table("snapshots")
    op.create_table(
        "replay_cache",
        sa.Column("stream_pk", BigId, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("event_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("state_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("stream_pk", "name", "version", name="pk_replay_cache"),
        sa.ForeignKeyConstraint(["stream_pk"], ["streams.stream_pk"], name="fk_replay_cache_stream_pk_streams"),
    )


def downgrade() -> None:
    op.drop_table("replay_cache")
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
