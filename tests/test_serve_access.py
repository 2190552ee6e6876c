"""Who reaches ``evstore serve`` (issue 32, item 3): the Host header is checked against the bound address
and ``--allowed-host`` (DNS rebinding), reads beyond loopback need a token, tokens under 128 bits are
refused, and the start-up line says who can read and who can write."""

from __future__ import annotations

import base64
import html
import secrets
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import migrated
from serve_fixtures import LOCAL, http_client, serving
from starlette.testclient import TestClient

from eventstore.cli import register
from eventstore.errors import EvstoreError
from projections.serve import ServeConfig, create_app
from projections.serve.access import token_bits

TOKEN = secrets.token_urlsafe(24)
READER = secrets.token_urlsafe(24)
READS = ["/", "/api/runs", "/api/runs/r-1/events", "/api/runs/r-1/state", "/runs/r-1", "/integrity",
         "/api/integrity", "/openapi.json", "/api/runs/r-1/live?after=1"]


def basic(token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"anyone:{token}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def url(sqlite_url: str) -> str:
    url = migrated(sqlite_url)
    r = CliRunner().invoke(register(), ["--url", url, "append", "r-1", "demo.note", "--data", '{"n": 1}'])
    assert r.exit_code == 0, r.output
    return url


def client(url: str, base: str = LOCAL, **cfg: object) -> TestClient:
    return TestClient(create_app(ServeConfig(url=url, live_poll=0.05, **cfg)), base_url=base)  # type: ignore[arg-type]


def test_a_foreign_host_header_is_refused_before_anything_is_read(url: str) -> None:
    """DNS rebinding: a page on attacker.example whose name now resolves to 127.0.0.1 sends its own name."""
    with client(url, base="http://attacker.example:8765") as c:
        for path in READS:
            r = c.get(path)
            assert r.status_code == 421, path
            assert "r-1" not in r.text and "demo.note" not in r.text
        r = c.get("/api/runs")
        assert r.json()["error"] == ('Host "attacker.example" is not a name of this server (a guard against DNS '
                                     "rebinding); if clients reach it by that name, start `evstore serve` with "
                                     "--allowed-host attacker.example.")
        assert "content-security-policy" in r.headers  # the refusal carries the usual headers
        assert "--allowed-host attacker.example" in c.get("/").text  # a page for a browser
    with client(url) as c:
        for host in ("localhost:8765", "LOCALHOST.", "127.0.0.1", "127.0.0.1:8765", "[::1]:8765", "::1"):
            assert c.get("/api/runs", headers={"host": host}).status_code == 200, host
        for host in ("attacker.example", "127.0.0.1.attacker.example", "localhost.attacker.example", "10.0.0.1"):
            assert c.get("/api/runs", headers={"host": host}).status_code == 421, host
        assert c.get("/api/runs", headers={"host": ""}).status_code == 400
    with client(url, allowed_hosts=("evstore.example.org",)) as c:
        assert c.get("/api/runs", headers={"host": "EVSTORE.example.org:443"}).status_code == 200
        assert c.get("/api/runs", headers={"host": "attacker.example"}).status_code == 421
    # A server on one address answers to that address and its --allowed-host names, not to localhost.
    with client(url, base="http://10.1.2.3:8765", host="10.1.2.3", token=TOKEN) as c:
        assert c.get("/api/runs", headers=bearer(TOKEN)).status_code == 200
        for host in ("localhost", "127.0.0.1", "10.1.2.4"):
            assert c.get("/api/runs", headers={"host": host, **bearer(TOKEN)}).status_code == 421, host


def test_a_real_server_refuses_a_rebound_name(store_url: str) -> None:
    with serving(create_app(ServeConfig(url=migrated(store_url)))) as base, http_client(base) as http:
        assert http.get("/api/runs").status_code == 200
        assert http.get("/api/runs", headers={"host": "attacker.example"}).status_code == 421
        port = base.rsplit(":", 1)[1]
        assert http.get("/api/runs", headers={"host": f"localhost:{port}"}).status_code == 200


def test_reads_beyond_loopback_need_a_token(url: str) -> None:
    with client(url, host="0.0.0.0", token=TOKEN) as c:
        for path in READS:
            r = c.get(path)
            assert r.status_code == 401, path
            assert "demo.note" not in r.text
        r = c.get("/api/runs")
        assert r.json()["error"].startswith("this needs a token with read access")
        assert r.headers["www-authenticate"].startswith("Basic")  # a browser asks for it
        assert c.get("/").headers["www-authenticate"].startswith("Basic")  # a page's 401 too
        assert c.get("/api/runs", headers=bearer("wrong-" + TOKEN)).status_code == 403
        for headers in (bearer(TOKEN), basic(TOKEN)):
            assert c.get("/api/runs", headers=headers).json()["total"] == 1
            assert c.get("/openapi.json", headers=headers).status_code == 200
        assert c.get("/static/style.css").status_code == 200  # a stylesheet is no data
        # Writes still take the token only as a bearer: a browser's cached Basic credentials cannot write.
        note = {"events": [{"type": "demo.note", "data": {}}]}
        assert c.post("/api/streams/r-2/events", json=note, headers=basic(TOKEN)).status_code == 401
        assert c.post("/api/streams/r-2/events", json=note, headers=bearer(TOKEN)).status_code == 201
    # A read token reads and cannot write; with one, reads need a token on loopback too.
    with client(url, token=TOKEN, read_token=READER) as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers=bearer(READER)).json()["total"] == 2
        assert c.get("/api/runs", headers=basic(READER)).status_code == 200
        r = c.post("/api/streams/r-3/events", json={"events": [{"type": "demo.note"}]}, headers=bearer(READER))
        assert r.status_code == 403 and r.json()["error"] == "the read token may not write; use a token with write access."
        assert c.post("/api/verify", headers=bearer(READER)).status_code == 403
        assert c.get("/api/runs/r-3/events", headers=bearer(TOKEN)).status_code == 404  # nothing was written
    # On loopback without a read token reads stay open, as before.
    with client(url, token=TOKEN) as c:
        assert c.get("/api/runs").status_code == 200


def test_tokens_under_128_bits_are_refused(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert token_bits(secrets.token_hex(16)) == 128 and token_bits(secrets.token_urlsafe(16)) >= 128
    assert token_bits("s3cret-token") < 128 and token_bits("0" * 38) < 128  # 38 digits: 126 bits
    for weak in ("hunter2", "s3cret-token", secrets.token_hex(15)):
        with pytest.raises(EvstoreError, match="too short to be secret"):
            create_app(ServeConfig(url=url, token=weak))
    with pytest.raises(EvstoreError, match="The read token is too short"):
        create_app(ServeConfig(url=url, token=TOKEN, read_token="reader"))
    monkeypatch.setenv("EVSTORE_SERVE_TOKEN", "hunter2")
    r = CliRunner().invoke(register(), ["--url", url, "serve", "--host", "0.0.0.0"])
    assert r.exit_code == 1 and r.stderr.startswith(
        "Error: The token is too short to be secret (7 characters, at most 36 bits; at least 128 are needed); "
        "make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`.")


@pytest.mark.parametrize("which", ["token", "read token"])
def test_a_weak_token_is_refused_before_the_store_is_opened(tmp_path: Path, which: str) -> None:
    """A server given a weak token (or read token) refuses to start saying so, and opens nothing first: on a
    database that does not exist yet, the error is the token's and no file is made."""
    db = tmp_path / "nowhere" / "events.db"
    cfg = ServeConfig(url=f"sqlite:///{db}", token="hunter2" if which == "token" else TOKEN,
                      read_token="reader" if which == "read token" else None)
    with pytest.raises(EvstoreError, match=f"The {which} is too short to be secret"):
        create_app(cfg)
    assert not db.exists() and not db.parent.exists()


@pytest.mark.parametrize(("args", "env", "said"), [
    ([], {}, "reads: anyone on this machine (127.0.0.1 is loopback); writes: nobody (read-only: no token)"),
    ([], {"EVSTORE_SERVE_TOKEN": TOKEN}, "reads: anyone on this machine (127.0.0.1 is loopback); "
                                         "writes: holders of the token"),
    (["--host", "0.0.0.0"], {"EVSTORE_SERVE_TOKEN": TOKEN}, "reads: holders of the token; writes: holders of the token"),
    (["--host", "0.0.0.0"], {"EVSTORE_SERVE_TOKEN": TOKEN, "EVSTORE_SERVE_READ_TOKEN": READER},
     "reads: holders of the token or the read token; writes: holders of the token"),
])
def test_the_start_up_line_says_who_reads_and_who_writes(url: str, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                         env: dict[str, str], said: str) -> None:
    from projections import prefork

    monkeypatch.delenv("EVSTORE_SERVE_TOKEN", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    started: list[object] = []
    monkeypatch.setattr(prefork, "serve", lambda sock, build, **kw: started.append(build()))
    monkeypatch.setattr(prefork, "listen", lambda host, port: socket.socket())  # nothing bound
    r = CliRunner().invoke(register(), ["--url", url, "serve", "--no-drain", *args])
    assert r.exit_code == 0, r.output
    assert started and f"({said}); Ctrl-C stops" in r.stderr.splitlines()[0]


# ---------------------------------------------------------------- integer parameters (item 7)

HUGE = "99999999999999999999"


@pytest.mark.parametrize(("path", "name"), [
    ("/api/runs?page={}", "page"), ("/?page={}", "page"), ("/api/runs?size={}", "size"),
    ("/api/runs/r-1/events?after={}", "after"), ("/api/runs/r-1/events?limit={}", "limit"),
    ("/api/runs/r-1/events?after=1&limit=2147483647", None), ("/api/runs/r-1/state?version={}", "version"),
    ("/api/runs/r-1/diff?from={}&to=1", "from"), ("/api/runs/r-1/diff?from=1&to={}", "to"),
    ("/runs/r-1?version={}", "version"), ("/runs/r-1?after={}", "after"), ("/runs/r-1?from={}&to=1", "from"),
    ("/integrity?page={}", "page"), ("/api/integrity?page={}", "page"),
    ("/api/runs/r-1/live?after={}", "after"), ("/runs/r-1/live?after={}", "after"),
    ("/api/runs?page=2147483647&size=500", None), ("/api/runs/r-1/state?version=2147483648", "version"),
])
def test_huge_integers_are_a_400_naming_the_parameter(store_url: str, path: str, name: str | None) -> None:
    """SQLite's OverflowError and PostgreSQL's NumericValueOutOfRange were a 500 with a traceback in the log."""
    url = migrated(store_url)
    CliRunner().invoke(register(), ["--url", url, "append", "r-1", "demo.note", "--data", "{}"])
    with client(url) as c:
        for value in (HUGE, "-" + HUGE, str(2**63), str(2**31)):
            r = c.get(path.format(value))
            if name is None:  # the largest value allowed is served
                assert r.status_code in (200, 404), (path, r.text)
                break
            assert r.status_code == 400, (path, value, r.text)
            error = r.json()["error"] if r.headers["content-type"].startswith("application/json") else html.unescape(r.text)
            assert f'query parameter "{name}" must be' in error, error


def test_a_huge_last_event_id_is_a_400(url: str) -> None:
    with client(url) as c:
        r = c.get("/api/runs/r-1/live", headers={"last-event-id": HUGE})
        assert r.status_code == 400 and r.json()["error"].startswith('query parameter "after" must be')


@pytest.mark.parametrize("args", [["runs", "--limit", HUGE], ["log", "r-1", "--after", HUGE],
                                  ["replay", "r-1", "--upto", HUGE], ["replay", "r-1", "--diff", "1", HUGE],
                                  ["log", "r-1", "-n", HUGE], ["log", "r-1", "--after", "-" + HUGE],
                                  ["prove", "r-1", "--version", HUGE], ["demo", "--runs", HUGE],
                                  ["demo", "--sessions", HUGE], ["demo", "--workers", HUGE],
                                  ["ingest", "claude", "--blob-threshold", HUGE, "."],
                                  ["witness", "serve", "--port", HUGE]])
def test_huge_integers_on_the_command_line_are_usage_errors(store_url: str, args: list[str]) -> None:
    url = migrated(store_url)
    CliRunner().invoke(register(), ["--url", url, "append", "r-1", "demo.note", "--data", "{}"])
    r = CliRunner().invoke(register(), ["--url", url, *args])
    assert r.exit_code == 2 and f"{HUGE} is not in the range" in r.stderr, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
