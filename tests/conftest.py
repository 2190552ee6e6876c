"""Shared fixtures: every contract test runs unchanged on SQLite and on PostgreSQL.

PostgreSQL tests read the server from ``EVSTORE_TEST_POSTGRES_URL`` (``.ci/run`` always sets
it) and each gets a private schema, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import settings

from eventstore import migrate
from eventstore.cli import register
from eventstore.config import corpus_path
from eventstore.db import make_engine
from eventstore.store import EventStore

# A failing property prints the blob that reproduces it (@reproduce_failure) as well as the example.
settings.register_profile("evstore", print_blob=True)
settings.load_profile("evstore")

PG_URL = os.environ.get("EVSTORE_TEST_POSTGRES_URL")
NO_PG = "EVSTORE_TEST_POSTGRES_URL is not set (no PostgreSQL server to test against)"


def _pg_url_with_schema(schema: str) -> str:
    assert PG_URL
    url = PG_URL
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, private schema."""
    if not PG_URL:
        pytest.skip(NO_PG)
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:16]
    plain = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield _pg_url_with_schema(schema)
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/store/events.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database at the migration head, on each backend in turn."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/store/events.db"
    else:
        url = request.getfixturevalue("pg_url")
    return migrated(url)


def migrated(url: str) -> str:
    """``url`` with the evstore schema at the migration head (tests that need a fresh database)."""
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def run(store_url: str) -> Callable[..., Result]:
    """``evstore --url <store> ARGS...`` through click's CliRunner (exceptions propagate)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        return runner.invoke(register(), ["--url", store_url, *args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    s = EventStore(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def corpus() -> Path:
    path = corpus_path()
    if not path.is_dir():
        pytest.skip(f"corpus not found at {path} (set EVSTORE_CORPUS)")
    return path
