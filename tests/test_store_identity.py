"""The store's identity: created with its schema, immutable, the same for every connection."""

import uuid

import pytest
from sqlalchemy.exc import DBAPIError

from eventstore.store import EventStore


def test_store_id_is_created_with_the_store_and_immutable(store_url):
    with EventStore(store_url) as s:
        sid = s.store_id()
        assert str(uuid.UUID(sid)) == sid
        for sql in ("UPDATE store_identity SET store_id = 'x'", "DELETE FROM store_identity",
                    "INSERT INTO store_identity (store_id, created_at) VALUES ('y', 'z')"):
            with pytest.raises(DBAPIError, match="store_identity is immutable"):
                with s.engine.begin() as c:
                    c.exec_driver_sql(sql)
    with EventStore(store_url) as again:
        assert again.store_id() == sid


def test_two_stores_have_different_ids(tmp_path):
    from tests.conftest import migrated

    a = migrated(f"sqlite:///{tmp_path}/a.db")
    b = migrated(f"sqlite:///{tmp_path}/b.db")
    with EventStore(a) as sa, EventStore(b) as sb:
        assert sa.store_id() != sb.store_id()
