"""A real uvicorn server in a thread on a free loopback port (tests/test_serve*.py, benchmarks)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import httpx2
import uvicorn

# The base URL of a TestClient: the server answers only to its own names (access.Policy.host_problem),
# and TestClient's default Host, "testserver", is none of them.
LOCAL = "http://127.0.0.1"


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 (a port the OS picks); yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="none", lifespan="on",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@cache
def _tls() -> ssl.SSLContext:
    """httpx's default TLS context, built once: each client otherwise loads the CA bundle again
    (about 50 ms of CPU here, for servers the tests only ever reach over plain HTTP)."""
    return httpx2.create_ssl_context()


def http_client(base: str, timeout: float = 5.0) -> httpx2.Client:
    """An HTTP client of a server under test (``with http_client(base) as http: ...``)."""
    return httpx2.Client(base_url=base, timeout=timeout, verify=_tls())
