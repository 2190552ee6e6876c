"""The log's Merkle tree and its signed checkpoints (issue 34).

``tree_nodes`` keeps the RFC 9162 subtree roots at the levels that are multiples of 4 (leaf ``i``
is the event at position ``i + 1``, its data the event's chain hash; eventstore/tree.py); the
append path adds the nodes each append completes, in its transaction.  This migration fills them
for the events already stored, in one pass over the log in position order.  ``tree_checkpoints``
records every signed checkpoint (C2SP tlog-checkpoint as a signed note).  Both tables are
append-only like ``events``: triggers reject UPDATE and DELETE (and TRUNCATE on PostgreSQL).

The fill is written out here (not imported from eventstore.tree): a migration must keep doing
what it did when the code it was written with has moved on.

Revision ID: 0007
Revises: 0006 (re-chained after 0006 of main; written against 0005)
Create Date: 2026-12-03
"""
import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STRIDE, FAN = 4, 16
TABLES = ("tree_nodes", "tree_checkpoints")


def _fold(hashes: list[bytes]) -> bytes:
    while len(hashes) > 1:
        hashes = [hashlib.sha256(b"\x01" + hashes[i] + hashes[i + 1]).digest() for i in range(0, len(hashes), 2)]
    return hashes[0]


def _fill(conn: sa.Connection) -> None:
    nodes = sa.table("tree_nodes", sa.column("level"), sa.column("idx"), sa.column("hash"))
    pending: dict[int, list[bytes]] = {}
    counts: dict[int, int] = {}
    rows: list[dict[str, object]] = []
    # Streamed (a server-side cursor on PostgreSQL); the option is the statement's, not the connection's.
    result = conn.execute(sa.text("SELECT hash FROM events ORDER BY position").execution_options(yield_per=5000))
    for (data,) in result:
        h, level = hashlib.sha256(b"\x00" + bytes(data)).digest(), 0
        while True:
            buf = pending.setdefault(level, [])
            buf.append(h)
            if len(buf) < FAN:
                break
            h = _fold(buf)
            buf.clear()
            level += STRIDE
            idx = counts.get(level, 0)
            counts[level] = idx + 1
            rows.append({"level": level, "idx": idx, "hash": h})
        if len(rows) >= 5000:
            conn.execute(nodes.insert(), rows)
            rows = []
    if rows:
        conn.execute(nodes.insert(), rows)


def upgrade() -> None:
    op.create_table(
        "tree_nodes",
        sa.Column("level", sa.SmallInteger, nullable=False, autoincrement=False),
        sa.Column("idx", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name="pk_tree_nodes"),
    )
    op.create_table(
        "tree_checkpoints",
        sa.Column("checkpoint_pk", BigId, nullable=False, autoincrement=True),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("tree_size", sa.BigInteger, nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_pk", name="pk_tree_checkpoints"),
    )
    _fill(op.get_bind())
    if op.get_bind().dialect.name == "sqlite":
        for table in TABLES:
            for verb in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: {verb} rejected'); END"
                )
    else:
        op.execute(
            """
            CREATE FUNCTION evstore_tree_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION '% is append-only: % rejected', TG_TABLE_NAME, TG_OP
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
    for table in TABLES:
        if op.get_bind().dialect.name == "sqlite":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update_delete ON {table}")
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP FUNCTION IF EXISTS evstore_tree_append_only()")
    op.drop_table("tree_checkpoints")
    op.drop_table("tree_nodes")
