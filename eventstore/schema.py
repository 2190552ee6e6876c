"""The log schema: one ``MetaData`` with a naming convention, the single source of truth.

Alembic owns these tables (``migrations/``); ``alembic check`` keeps models and migrations in
step.  Projection tables (``proj_*``) are rebuildable data owned by their projections.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

# SQLite: INTEGER PRIMARY KEY is the rowid (cheap, monotonic); BIGINT elsewhere.
BigId = BigInteger().with_variant(Integer(), "sqlite")

streams = Table(
    "streams",
    metadata,
    Column("stream_pk", BigId, primary_key=True, autoincrement=True),
    Column("stream_id", String(255), nullable=False),
    Column("dialect", String(64), nullable=True),
    Column("version", Integer, nullable=False),
    Column("head_hash", LargeBinary(32), nullable=False),
    Column("created_at", String(32), nullable=False),
    UniqueConstraint("stream_id"),
)

events = Table(
    "events",
    metadata,
    Column("position", BigId, primary_key=True, autoincrement=False),
    Column("stream_pk", BigId, ForeignKey("streams.stream_pk"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("type", String(200), nullable=False),
    Column("schema_version", SmallInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("meta", LargeBinary, nullable=False),
    Column("occurred_at", String(32), nullable=True),
    Column("recorded_at", String(32), nullable=False),
    Column("data_sha256", LargeBinary(32), nullable=False),
    Column("meta_sha256", LargeBinary(32), nullable=False),
    Column("prev_hash", LargeBinary(32), nullable=False),
    Column("hash", LargeBinary(32), nullable=False),
    # 16 random bytes the payload digests are salted with (chain.payload_digest; migration 0010):
    # NULL for events stored before salts, and for every erased event (the erasure clears it).
    Column("salt", LargeBinary(16), nullable=True),
    UniqueConstraint("stream_pk", "version"),
    UniqueConstraint("event_id"),
)

projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", String(32), nullable=False),
)

replay_cache = Table(  # folded documents, bound to the log (eventstore/replay_cache.py)
    "replay_cache",
    metadata,
    Column("stream_pk", BigId, ForeignKey("streams.stream_pk"), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("event_hash", LargeBinary(32), nullable=False),  # events.hash at (stream_pk, version)
    Column("state", LargeBinary, nullable=False),  # zlib-compressed canonical JSON
    Column("state_sha256", LargeBinary(32), nullable=False),  # SHA-256 of state as stored
    Column("created_at", String(32), nullable=False),
)

projection_states = Table(  # a projection's folded document of one stream, bound to the log (migration 0013)
    "projection_states",
    metadata,
    Column("stream_pk", BigId, ForeignKey("streams.stream_pk"), primary_key=True),
    Column("name", String(100), primary_key=True),  # the projection, its version, the dialect and its lens version
    Column("version", Integer, nullable=False),  # the stream version the document is folded to
    Column("event_hash", LargeBinary(32), nullable=False),  # events.hash at (stream_pk, version)
    Column("state", LargeBinary, nullable=False),  # zlib-compressed canonical JSON
    Column("state_sha256", LargeBinary(32), nullable=False),  # SHA-256 of state as stored
)

store_identity = Table(
    "store_identity",
    metadata,
    Column("store_id", String(36), primary_key=True),  # a UUID created with the store (migration 0003)
    Column("created_at", String(32), nullable=False),
)

blobs = Table(  # content-addressed bytes, append-only (migration 0005)
    "blobs",
    metadata,
    Column("sha256", LargeBinary(32), primary_key=True),  # SHA-256 of data
    Column("size", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", String(32), nullable=False),
)

tree_nodes = Table(  # the log's Merkle tree, levels that are multiples of 4 (eventstore/tree.py; migration 0007)
    "tree_nodes",
    metadata,
    Column("level", SmallInteger, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),  # MTH(D[idx*2^level:(idx+1)*2^level])
    Column("hash", LargeBinary(32), nullable=False),
)

tree_checkpoints = Table(  # every signed checkpoint `evstore checkpoint` made (eventstore/checkpoints.py)
    "tree_checkpoints",
    metadata,
    Column("checkpoint_pk", BigId, primary_key=True, autoincrement=True),
    Column("origin", String(255), nullable=False),
    Column("tree_size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary(32), nullable=False),
    Column("note", Text, nullable=False),  # the signed note as written (with the witnesses' cosignatures)
    Column("created_at", String(32), nullable=False),
)

source_versions = Table(  # which source version each snapshot event recorded (migration 0006)
    "source_versions",
    metadata,
    Column("stream_pk", BigId, ForeignKey("streams.stream_pk"), primary_key=True),
    Column("version", Integer, primary_key=True),  # the event whose meta.source.id this repeats
    Column("source_id", Text, nullable=False),
)

erasures = Table(  # events whose data and meta were purged or erased (eventstore/erasure.py; migration 0009)
    "erasures",
    metadata,
    Column("position", BigId, primary_key=True, autoincrement=False),
    Column("kind", String(16), nullable=False),  # "purged" (a retention policy) or "erased" (a request)
    Column("reason", Text, nullable=False),  # the policy or the request's reason
    Column("admin_event_id", String(36), nullable=False),  # the admin stream's event that did it
    Column("erased_at", String(32), nullable=False),
    Column("kept", Text, nullable=True),  # the erased meta's capture bookkeeping (meta.transcript), JSON
)

erased_blobs = Table(  # blobs whose bytes were removed with the events naming them (migration 0009)
    "erased_blobs",
    metadata,
    Column("sha256", LargeBinary(32), primary_key=True),
    Column("admin_event_id", String(36), nullable=False),
    Column("erased_at", String(32), nullable=False),
)

api_tokens = Table(  # named tokens of `evstore serve`: only each secret's SHA-256 (eventstore/tokens.py; migration 0008)
    "api_tokens",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("scope", String(16), nullable=False),  # read | append | admin
    Column("token_sha256", LargeBinary(32), nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("expires_at", String(32), nullable=True),
    Column("revoked_at", String(32), nullable=True),
    Column("last_used_at", String(32), nullable=True),
    UniqueConstraint("token_sha256"),
)

OWNED_TABLES = frozenset(metadata.tables)
