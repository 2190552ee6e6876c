"""Projection states: the runs index's folded documents, so a fresh process need not re-fold a stream.

The inline runs index describes each stream's current document, which it folds from the stream's
events; a process that has not seen a stream yet (a server's worker just started) folded the whole
history on its first append to it, under the store's append lock.  From this revision the index
keeps each stream's document every so many events in ``projection_states`` (one row per stream and
name, written in the append's transaction), bound to the log like a replay-cache row: the hash of
the event at its version and the SHA-256 of its stored state, checked on every read.  The table is
a cache: it starts empty and fills as streams grow; an erasure deletes a stream's rows.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "projection_states",
        sa.Column("stream_pk", BigId, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("event_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("state_sha256", sa.LargeBinary(32), nullable=False),
        sa.PrimaryKeyConstraint("stream_pk", "name", name="pk_projection_states"),
        sa.ForeignKeyConstraint(["stream_pk"], ["streams.stream_pk"], name="fk_projection_states_stream_pk_streams"),
    )


def downgrade() -> None:
    op.drop_table("projection_states")
