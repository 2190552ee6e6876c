"""Erased versions keep where they were, not which bytes they had.

A capture records each source version's identity in ``source_versions`` (``file:<path>@<SHA-256 of
its bytes>``, ``git:<commit>:<path>``, ``spool:<SHA-256 of the spooled record>``, ``http:<SHA-256 of
the request body>``), and an erasure kept, in ``erasures.kept``, the SHA-256 of the transcript prefix
a capture had read.  Both are plain digests of content an erasure removes: whoever reads the
database could confirm a guess of it by hashing the guess.  From this revision an erasure replaces,
in the transaction that empties the payload, the identity of the erased event's version with what
``eventstore.ingest.erased_source_id`` leaves (``file:<path>@erased``, ``git:erased:<path>``,
``spool:erased``), and keeps no prefix digest.  The append-only triggers of ``source_versions`` are
relaxed for exactly that UPDATE: the same row (stream, version), a new identity ending in ``erased``
(or, for a git version, ``git:erased:<path>``),
and the event at that version erased (its ``erasures`` row).

Stores erased before this revision are brought in line here: the identities of versions already
erased and the prefix digests kept by erasures are replaced in the same way.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""
import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_ERASED_ROW = ("NEW.stream_pk = OLD.stream_pk AND NEW.version = OLD.version AND (NEW.source_id LIKE '%erased' OR NEW.source_id LIKE 'git:erased:%') "
               "AND EXISTS (SELECT 1 FROM events e JOIN erasures x ON x.position = e.position "
               "WHERE e.stream_pk = OLD.stream_pk AND e.version = OLD.version)")


def _erased(ident: str) -> str:
    """eventstore.ingest.erased_source_id as of this revision (a migration keeps its own copy)."""
    kind, _, rest = ident.partition(":")
    if kind == "file" and "@" in rest:
        return f"file:{rest.rpartition('@')[0]}@erased"
    if kind == "git" and ":" in rest:
        return f"git:erased:{rest.partition(':')[2]}"
    return f"{kind}:erased"


def _source_triggers(relaxed: bool) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS source_versions_no_update")
        when = f"WHEN NOT ({_ERASED_ROW}) " if relaxed else ""
        op.execute(f"CREATE TRIGGER source_versions_no_update BEFORE UPDATE ON source_versions {when}"
                   "BEGIN SELECT RAISE(ABORT, 'source_versions are append-only: UPDATE rejected'); END")
        return
    allow = (f"IF TG_OP = 'UPDATE' AND {_ERASED_ROW} THEN\n                RETURN NEW;\n            END IF;"
             if relaxed else "")
    op.execute(f"""
        CREATE OR REPLACE FUNCTION evstore_source_versions_append_only() RETURNS trigger AS $$
        BEGIN
            {allow}
            RAISE EXCEPTION 'source_versions are append-only: % rejected', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END $$ LANGUAGE plpgsql
        """)


def _scrub_erased(bind: sa.engine.Connection) -> None:
    """What erasures before this revision left: plain identities and prefix digests."""
    rows = bind.execute(sa.text(
        "SELECT v.stream_pk, v.version, v.source_id FROM source_versions v JOIN events e "
        "ON e.stream_pk = v.stream_pk AND e.version = v.version JOIN erasures x ON x.position = e.position")).all()
    for pk, version, ident in rows:
        if _erased(ident) != ident:
            bind.execute(sa.text("UPDATE source_versions SET source_id = :i WHERE stream_pk = :p AND version = :v"),
                         {"i": _erased(ident), "p": pk, "v": version})
    kept = bind.execute(sa.text("SELECT position, kept FROM erasures WHERE kept IS NOT NULL")).all()
    changed = []
    for position, text in kept:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        transcript = value.get("transcript") if isinstance(value, dict) else None
        if isinstance(transcript, dict) and "prefix_sha256" in transcript:
            del transcript["prefix_sha256"]
            changed.append({"k": json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False),
                            "p": position})
    if not changed:
        return
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER IF EXISTS erasures_no_update")
    else:
        op.execute("ALTER TABLE erasures DISABLE TRIGGER erasures_no_update_delete")
    bind.execute(sa.text("UPDATE erasures SET kept = :k WHERE position = :p"), changed)
    if sqlite:
        op.execute("CREATE TRIGGER erasures_no_update BEFORE UPDATE ON erasures "
                   "BEGIN SELECT RAISE(ABORT, 'erasures are append-only: UPDATE rejected'); END")
    else:
        op.execute("ALTER TABLE erasures ENABLE TRIGGER erasures_no_update_delete")


def upgrade() -> None:
    _source_triggers(relaxed=True)
    _scrub_erased(op.get_bind())


def downgrade() -> None:
    # The identities replaced stay replaced (the digests are gone); only the trigger is strict again.
    _source_triggers(relaxed=False)
