"""Drop the (type, position) index on events: appends pay for it on every row, nothing needs it.

Reading by type (``read_all(types=...)``, projections declaring ``event_types``) walks the
primary key in position order and filters, which is what those readers want anyway (they
consume the log in position order, in batches).  Measured on SQLite (synchronous=FULL, 100
events per append): the index cost about 0.4 us of the ~11 us per appended event.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_type_position", table_name="events")


def downgrade() -> None:
    op.create_index("ix_events_type_position", "events", ["type", "position"])
