"""Named API tokens of ``evstore serve`` (issue 36): who may read, append or administer a team's store.

One row per token ``evstore tokens add`` made: its name (what every event written with it records
in ``meta.sent_by``), its scope (``read``, ``append`` or ``admin``), the SHA-256 of the secret
(never the secret: the token is printed once), when it was made, when it expires, when it was
revoked and when it was last used.  A name is never reused, so a name in an event always means
one token.  The secret holds at least 128 random bits, so a plain SHA-256 (not a slow password
hash) is enough to make the stored digest useless for finding it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("token_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=True),
        sa.Column("revoked_at", sa.String(32), nullable=True),
        sa.Column("last_used_at", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_api_tokens"),
        sa.UniqueConstraint("token_sha256", name="uq_api_tokens_token_sha256"),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
