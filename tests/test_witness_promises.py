"""The witness's promises, in process (tests/test_witness.py drives the real server in a child process).

A witness cosigns a checkpoint only when it is signed by a key it trusts for that origin, is a C2SP
checkpoint, and extends the last one it cosigned for that log (proven by a consistency proof); it
never cosigns two roots for one size, and keeps every validly signed checkpoint it refused.  Each
refusal has the status tlog-witness gives it and says why.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from eventstore.errors import EvstoreError, WitnessError
from eventstore.tlog import merkle
from eventstore.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner, sign_note
from eventstore.tlog.witness import (
    MAX_PROOF_LINES,
    Answer,
    Witness,
    add_cosignatures,
    format_request,
    submit_to_witness,
    witness_app,
)

ORIGIN = "evstore.example/log"
LOG = NoteSigner.generate(ORIGIN)
WKEY = NoteSigner.generate("witness.example/w", ALG_COSIGNATURE_V1)
LEAVES = [hashlib.sha256(b"%d" % i).digest() for i in range(40)]
FORK = [*LEAVES[:5], hashlib.sha256(b"forged").digest(), *LEAVES[6:]]
NOW = 1_764_000_000


def note(size: int, leaves: list[bytes] = LEAVES, signer: NoteSigner = LOG) -> str:
    return sign_checkpoint(Checkpoint(signer.name, size, merkle.root(leaves[:size])), signer)


def proof(old: int, new: int, leaves: list[bytes] = LEAVES) -> list[bytes]:
    return merkle.consistency_proof(old, new, lambda s, e: merkle.root(leaves[s:e]))


def request(old: int, new: int, leaves: list[bytes] = LEAVES) -> bytes:
    return format_request(old, proof(old, new, leaves), note(new, leaves))


@pytest.fixture
def w(tmp_path: Path) -> Witness:
    return Witness(tmp_path / "w.db", WKEY, [LOG.verifier])


def test_a_witness_signs_with_a_cosignature_key_and_trusts_log_keys_only(tmp_path: Path) -> None:
    with pytest.raises(EvstoreError, match=r"^A witness signs with a cosignature key \(algorithm 0x04\)\.$"):
        Witness(tmp_path / "w.db", LOG, [LOG.verifier])
    with pytest.raises(EvstoreError, match=r"^Trusted key witness\.example/w is not a log's note key \(algorithm "
                                           r"0x01\); give the log's PREFIX\.vkey\.$"):
        Witness(tmp_path / "w.db", WKEY, [LOG.verifier, WKEY.verifier])
    with pytest.raises(EvstoreError, match=r"^Cannot open the witness database .*no/such/w\.db: "):
        Witness(tmp_path / "no" / "such" / "w.db", WKEY, [LOG.verifier])


def test_a_log_may_have_several_keys(tmp_path: Path) -> None:
    second = NoteSigner.generate(ORIGIN)
    w = Witness(tmp_path / "w.db", WKEY, [LOG.verifier, second.verifier])
    assert w.trusted == {ORIGIN: [LOG.verifier, second.verifier]}
    assert w.add_checkpoint(format_request(0, [], note(3, signer=second)), now=NOW).status == 200
    assert w.add_checkpoint(request(3, 5), now=NOW).status == 200


def test_the_first_checkpoint_is_cosigned_from_size_0_with_an_empty_proof(w: Witness) -> None:
    assert w.latest(ORIGIN) is None
    a = w.add_checkpoint(format_request(0, [LEAVES[0]], note(4)), now=NOW)
    assert (a.status, a.body) == (422, "The consistency proof from size 0 must be empty.\n")
    assert w.latest(ORIGIN) is None
    a = w.add_checkpoint(request(0, 4), now=NOW)
    assert a == Answer(200, WKEY.signature_line(Checkpoint(ORIGIN, 4, merkle.root(LEAVES[:4])).body, timestamp=NOW))
    assert a.content_type == "text/plain; charset=utf-8"
    got = open_checkpoint(note(4) + a.body, LOG.verifier, require_witnesses=[WKEY.verifier])
    assert [c.timestamp for c in got.cosignatures] == [NOW]
    assert w.latest(ORIGIN) == (4, merkle.root(LEAVES[:4]))
    with sqlite3.connect(w.db) as conn:
        assert conn.execute("SELECT origin, size, root, checkpoint, cosigned_at FROM cosigned").fetchall() == [
            (ORIGIN, 4, merkle.root(LEAVES[:4]), note(4), NOW)]


def test_without_a_time_given_the_cosignature_is_stamped_now(w: Witness) -> None:
    before = int(time.time())
    a = w.add_checkpoint(request(0, 4))
    stamp = open_checkpoint(note(4) + a.body, LOG.verifier, require_witnesses=[WKEY.verifier]).cosignatures[0].timestamp
    assert before <= stamp <= int(time.time())
    with sqlite3.connect(w.db) as conn:  # and what it cosigned is kept, with that time
        assert conn.execute("SELECT size, cosigned_at FROM cosigned").fetchall() == [(4, stamp)]


def test_it_cosigns_only_checkpoints_extending_the_last_it_cosigned(w: Witness) -> None:
    assert w.add_checkpoint(request(0, 3), now=NOW).status == 200
    size = 3
    for new in (4, 7, 8, 16, 17, 33, 40):
        # a fork of any size from here is refused, and nothing moves
        fork = w.add_checkpoint(request(size, new, FORK), now=NOW) if size > 5 else None
        if fork is not None:
            assert fork.status == 422, fork
            assert w.latest(ORIGIN) == (size, merkle.root(LEAVES[:size]))
        a = w.add_checkpoint(request(size, new), now=NOW + new)
        assert a.status == 200, a
        assert w.latest(ORIGIN) == (new, merkle.root(LEAVES[:new]))
        size = new
    # the same checkpoint again is cosigned again and changes nothing
    assert w.add_checkpoint(format_request(40, [], note(40)), now=NOW).status == 200
    assert w.latest(ORIGIN) == (40, merkle.root(LEAVES[:40]))


def test_a_wrong_proof_is_422_saying_why_and_the_signed_checkpoint_is_kept(w: Witness) -> None:
    assert w.add_checkpoint(request(0, 8), now=NOW).status == 200
    bad = format_request(8, proof(8, 12, FORK), note(12, FORK))
    a = w.add_checkpoint(bad, now=NOW + 1)
    assert a.status == 422 and a.body.startswith("The consistency proof") and a.body.endswith("\n")
    assert w.refused(ORIGIN) == [(12, merkle.root(FORK[:12]), note(12, FORK), a.body[:-1])]
    with sqlite3.connect(w.db) as conn:
        assert conn.execute("SELECT origin, refused_at FROM refused").fetchall() == [(ORIGIN, NOW + 1)]
    assert w.latest(ORIGIN) == (8, merkle.root(LEAVES[:8]))
    # a proof of the right log but too short is refused too
    short = format_request(8, proof(8, 12)[:-1], note(12))
    assert w.add_checkpoint(short, now=NOW).status == 422
    assert w.refused("other/log") == []


def test_another_root_for_the_size_it_cosigned_is_409_and_kept_as_evidence(w: Witness) -> None:
    assert w.add_checkpoint(request(0, 8), now=NOW).status == 200
    a = w.add_checkpoint(format_request(8, [], note(8, FORK)), now=NOW + 2)
    assert a == Answer(409, "8\n", "text/x.tlog.size")
    assert w.refused(ORIGIN) == [(8, merkle.root(FORK[:8]), note(8, FORK), "another root for the size last cosigned")]
    assert w.latest(ORIGIN) == (8, merkle.root(LEAVES[:8]))


def test_an_old_size_other_than_the_last_cosigned_is_409_with_that_size(w: Witness) -> None:
    assert w.add_checkpoint(request(0, 0), now=NOW).status == 200
    assert w.latest(ORIGIN) == (0, merkle.EMPTY_ROOT)
    assert w.add_checkpoint(request(0, 6), now=NOW).status == 200
    for old in (0, 5, 7):
        a = w.add_checkpoint(request(old, 9), now=NOW)
        assert a == Answer(409, "6\n", "text/x.tlog.size")
    assert w.refused(ORIGIN) == []


def test_a_log_it_never_cosigned_is_at_size_0(tmp_path: Path) -> None:
    w = Witness(tmp_path / "w.db", WKEY, [LOG.verifier, _OTHER.verifier])
    assert w.add_checkpoint(request(0, 6), now=NOW).status == 200
    assert w.add_checkpoint(format_request(3, proof(3, 5), note(5, signer=_OTHER)), now=NOW) == Answer(
        409, "0\n", "text/x.tlog.size")
    assert w.add_checkpoint(format_request(0, [], note(5, signer=_OTHER)), now=NOW).status == 200
    assert (w.latest(ORIGIN), w.latest("other.example/log")) == ((6, merkle.root(LEAVES[:6])), (5, merkle.root(LEAVES[:5])))


_OTHER = NoteSigner.generate("other.example/log")


def test_unknown_origins_are_404_and_untrusted_or_broken_signatures_403(w: Witness) -> None:
    a = w.add_checkpoint(format_request(0, [], note(3, signer=_OTHER)), now=NOW)
    assert a == Answer(404, "Unknown log origin 'other.example/log'.\n")
    long_name = "x" * 300
    a = w.add_checkpoint(format_request(0, [], note(3, signer=NoteSigner.generate(long_name))), now=NOW)
    assert a == Answer(404, f"Unknown log origin {'x' * 200!r}.\n")
    impostor = NoteSigner.generate(ORIGIN)
    a = w.add_checkpoint(format_request(0, [], note(3, signer=impostor)), now=NOW)
    assert a.status == 403 and a.body.endswith("\n") and ORIGIN in a.body
    edited = note(3).replace("\n3\n", "\n4\n")
    assert w.add_checkpoint(format_request(0, [], edited), now=NOW).status == 403
    assert w.latest(ORIGIN) is None and w.refused(ORIGIN) == []


def test_the_origin_is_the_whole_first_line(w: Witness) -> None:
    """A checkpoint whose origin line is the key's name and more is of another log: 404, never cosigned."""
    body = sign_note(f"{ORIGIN} extra\n3\n{base64.b64encode(merkle.root(LEAVES[:3])).decode()}\n", [LOG])
    assert w.add_checkpoint(format_request(0, [], body), now=NOW) == Answer(404, f"Unknown log origin '{ORIGIN} extra'.\n")
    assert w.latest(ORIGIN) is None


def test_malformed_requests_are_400_saying_what(w: Witness) -> None:
    cp = note(20).encode()
    cases = {
        b"\xff\xfe": "The request is not UTF-8.",
        b"old 10\n": "The request has no blank line before the checkpoint.",
        b"new 10\n\n" + cp: "The first line 'new 10' is not 'old <size>'.",
        b"old 010\n\n" + cp: "The first line 'old 010' is not 'old <size>'.",
        b"old 00\n\n" + cp: "The first line 'old 00' is not 'old <size>'.",
        b"old \n\n" + cp: "The first line 'old ' is not 'old <size>'.",
        b"old -1\n\n" + cp: "The first line 'old -1' is not 'old <size>'.",
        "old \u0661\n\n".encode() + cp: "The first line 'old \u0661' is not 'old <size>'.",
        b"old  1\n\n" + cp: "The first line 'old  1' is not 'old <size>'.",
        b"Old 1\n\n" + cp: "The first line 'Old 1' is not 'old <size>'.",
        b"new " + b"1" * 60 + b"\n\n" + cp: "The first line 'new " + "1" * 36 + "' is not 'old <size>'.",
        b"old 1" + b"0" * 60 + b"\n\n" + cp: "The old size 1" + "0" * 39 + " is too large.",
        b"old 9223372036854775808\n\n" + cp: "The old size 9223372036854775808 is too large.",
        b"old 10000000000000000000\n\n" + cp: "The old size 10000000000000000000 is too large.",
        format_request(1, [bytes(32)] * (MAX_PROOF_LINES + 1), note(20)):
            "The request has 64 consistency proof lines, more than 63.",
        b"old 10\n" + base64.b64encode(bytes(32)) + b"\nnot base64!\n\n" + cp: "Consistency proof line 2 is not base64.",
        b"old 10\n\xc3\xa9\n\n" + cp: "Consistency proof line 1 is not base64.",
        b"old 10\n" + base64.b64encode(bytes(31)) + b"\n\n" + cp: "Consistency proof line 1 is not a 32-byte hash.",
        format_request(21, [], note(20)): "The old size 21 is larger than the checkpoint's size 20.",
    }
    for body, message in cases.items():
        assert w.add_checkpoint(body, now=NOW) == Answer(400, message + "\n"), body[:60]
    # a note that is no note, and a trusted signature over a body that is no C2SP checkpoint
    assert w.add_checkpoint(b"old 0\n\nno signature\n", now=NOW).status == 400
    bad = sign_note(f"{ORIGIN}\n01\n{'A' * 43}=\n", [LOG])
    a = w.add_checkpoint(format_request(0, [], bad), now=NOW)
    assert a.status == 400 and "leading zeroes" in a.body and a.body.endswith("\n")
    assert w.latest(ORIGIN) is None and w.refused(ORIGIN) == []


def test_the_largest_old_size_and_63_proof_lines_are_well_formed(w: Witness) -> None:
    a = w.add_checkpoint(format_request((1 << 63) - 1, [], note(20)), now=NOW)
    assert a.body == f"The old size {(1 << 63) - 1} is larger than the checkpoint's size 20.\n"
    a = w.add_checkpoint(format_request(0, [bytes(32)] * MAX_PROOF_LINES, note(20)), now=NOW)
    assert a == Answer(422, "The consistency proof from size 0 must be empty.\n")


def test_format_request_is_the_specs_body() -> None:
    assert format_request(3, [bytes(32), b"\xff" * 32], "NOTE\n") == (
        b"old 3\n" + base64.b64encode(bytes(32)) + b"\n" + base64.b64encode(b"\xff" * 32) + b"\n\nNOTE\n")
    assert format_request(0, [], "\u00e9\n") == "old 0\n\n\u00e9\n".encode()


def test_add_cosignatures_appends_each_line_once() -> None:
    base = note(3)
    line = WKEY.signature_line(Checkpoint(ORIGIN, 3, merkle.root(LEAVES[:3])).body, timestamp=NOW)
    assert add_cosignatures(base, [line]) == base + line
    assert add_cosignatures(base, [line.rstrip("\n")]) == base + line
    assert add_cosignatures(base + line, [line, line.rstrip("\n")]) == base + line
    assert add_cosignatures(base, []) == base
    second = WKEY.signature_line(Checkpoint(ORIGIN, 3, merkle.root(LEAVES[:3])).body, timestamp=NOW + 1)
    assert add_cosignatures(base, [line, second.rstrip("\n")]) == base + line + second


def test_the_app_answers_with_the_witness_status_and_exact_content_type(w: Witness) -> None:
    with TestClient(witness_app(w)) as http:
        assert http.get("/").text == f"C2SP tlog-witness {WKEY.verifier.vkey}\nlogs:\n  {ORIGIN}\n"
        r = http.post("/add-checkpoint", content=request(0, 5))
        assert r.status_code == 200 and r.text.startswith("\u2014 witness.example/w ")
        r = http.post("/add-checkpoint", content=request(0, 7))
        assert (r.status_code, r.headers["content-type"], r.text) == (409, "text/x.tlog.size", "5\n")
        r = http.post("/add-checkpoint", content=b"x" * (64 * 1024 + 1))
        assert (r.status_code, r.text) == (400, "Request too large.\n")
        r = http.post("/add-checkpoint", content=b"x" * (64 * 1024))
        assert (r.status_code, r.text) == (400, "The request has no blank line before the checkpoint.\n")
        assert http.get("/add-checkpoint").status_code == 405


def test_the_index_lists_every_trusted_log_sorted(tmp_path: Path) -> None:
    w = Witness(tmp_path / "w.db", WKEY, [_OTHER.verifier, LOG.verifier])
    with TestClient(witness_app(w)) as http:
        assert http.get("/").text.endswith(f"logs:\n  {ORIGIN}\n  other.example/log\n")


class _Handler(http.server.BaseHTTPRequestHandler):
    answer: Answer | None = None  # a fixed answer instead of the witness's
    raw: tuple[int, bytes, str | None] | None = None  # or a fixed status, body bytes and content type (None: no header)
    witness: Witness
    paths: list[str]
    requests: list[tuple[str, str, str | None, bytes]] | None = None  # (method, path, content type, body) when set

    def do_POST(self) -> None:  # noqa: N802
        self.paths.append(self.path)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.requests is not None:
            self.requests.append((self.command, self.path, self.headers.get("Content-Type"), body))
        if self.raw is not None:
            status, data, content_type = self.raw
        else:
            a = self.answer or self.witness.add_checkpoint(body, now=NOW)
            status, data, content_type = a.status, a.body.encode(), a.content_type
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(w: Witness) -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"witness": w, "paths": [], "answer": None, "requests": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_submit_returns_the_verified_cosignature_line(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    lines = submit_to_witness(base + "/", note(7), 0, [], WKEY.verifier)
    assert handler.paths == ["/add-checkpoint"]
    assert lines == [WKEY.signature_line(Checkpoint(ORIGIN, 7, merkle.root(LEAVES[:7])).body, timestamp=NOW)]
    # the proof is sent as given
    assert submit_to_witness(base, note(9), 7, proof(7, 9), WKEY.verifier) == [
        WKEY.signature_line(Checkpoint(ORIGIN, 9, merkle.root(LEAVES[:9])).body, timestamp=NOW)]


def test_submit_refuses_a_key_that_is_no_witness_key() -> None:
    with pytest.raises(EvstoreError, match=rf"^{ORIGIN} is not a witness key \(algorithm 0x04\); give its "
                                           r"PREFIX\.witness\.vkey\.$"):
        submit_to_witness("http://127.0.0.1:9", note(7), 0, [], LOG.verifier)


def test_a_409_names_the_size_the_witness_holds(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    with pytest.raises(WitnessError) as info:
        submit_to_witness(base, note(9), 0, [], WKEY.verifier)
    e = info.value
    assert str(e) == (f"The witness witness.example/w at {base}/add-checkpoint refused the checkpoint: 409 Conflict: 7")
    assert (e.url, e.status, e.body, e.latest_size) == (f"{base}/add-checkpoint", 409, "7\n", 7)
    for answer in (Answer(409, "7\n", "text/plain"), Answer(409, "seven\n", "text/x.tlog.size"), Answer(422, "7\n")):
        handler.answer = answer
        with pytest.raises(WitnessError) as info:
            submit_to_witness(base, note(9), 0, [], WKEY.verifier)
        assert (info.value.status, info.value.latest_size) == (answer.status, None)
    handler.answer = Answer(422, "x" * 400)
    with pytest.raises(WitnessError) as info:
        submit_to_witness(base, note(9), 0, [], WKEY.verifier)
    assert str(info.value).endswith(": 422 Unprocessable Entity: " + "x" * 300)
    assert info.value.body == "x" * 400


def test_an_answer_other_than_200_or_without_the_cosignature_is_refused(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    handler.answer = Answer(202, "")
    with pytest.raises(WitnessError) as info:
        submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    assert str(info.value) == f"The witness witness.example/w at {base}/add-checkpoint answered 202, not 200."
    assert (info.value.status, info.value.url) == (202, f"{base}/add-checkpoint")
    line = WKEY.signature_line(Checkpoint(ORIGIN, 7, merkle.root(LEAVES[:7])).body, timestamp=NOW)
    handler.answer = Answer(200, line.rstrip("\n"))  # a line without its newline is still read
    assert submit_to_witness(base, note(7), 0, [], WKEY.verifier) == [line]
    other = NoteSigner.generate("witness.example/w", ALG_COSIGNATURE_V1)
    handler.answer = Answer(200, other.signature_line(Checkpoint(ORIGIN, 7, merkle.root(LEAVES[:7])).body))
    with pytest.raises(WitnessError, match=rf"^The witness witness\.example/w at {base}/add-checkpoint answered "
                                           r"without a valid cosignature: ") as info:
        submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    assert (info.value.status, info.value.body, info.value.url) == (200, handler.answer.body, f"{base}/add-checkpoint")


def test_a_witness_that_cannot_be_reached_is_named() -> None:
    with pytest.raises(WitnessError, match=r"^Cannot reach the witness witness\.example/w at "
                                           r"http://127\.0\.0\.1:9/add-checkpoint: .+\.$") as info:
        submit_to_witness("http://127.0.0.1:9", note(7), 0, [], WKEY.verifier, timeout=5)
    assert (info.value.status, info.value.url) == (None, "http://127.0.0.1:9/add-checkpoint")


def test_submit_posts_the_request_to_exactly_the_prefix_and_add_checkpoint(server: tuple[str, type[_Handler]]) -> None:
    """The URL is the witness's submission prefix: with or without a final slash, with a path of its own,
    the request is one POST to ``<prefix>/add-checkpoint`` of the spec's body, as UTF-8 text."""
    base, handler = server
    cases = [(base, "/add-checkpoint"), (base + "/", "/add-checkpoint"), (base + "/log/X", "/log/X/add-checkpoint"),
             (base + "/log/X/", "/log/X/add-checkpoint")]
    for url, path in cases:
        handler.answer = Answer(409, "99\n", "text/x.tlog.size")
        with pytest.raises(WitnessError) as info:
            submit_to_witness(url, note(9), 7, proof(7, 9), WKEY.verifier)
        assert info.value.url == base + path and f" at {base}{path} refused" in str(info.value)
    assert handler.requests == [("POST", path, "text/plain; charset=utf-8", format_request(7, proof(7, 9), note(9)))
                                for _, path in cases]


def test_a_witness_that_does_not_answer_in_time_is_named(tmp_path: Path) -> None:
    """The timeout bounds the wait for the answer: a witness that accepts the connection and says nothing is
    given up on, naming it (it is closed after 20 s, so without a timeout the error would be another)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def hold() -> None:
        conn, _ = listener.accept()
        done.wait(20)
        conn.close()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(WitnessError) as info:
            submit_to_witness(url, note(7), 0, [], WKEY.verifier, timeout=0.5)
    finally:
        done.set()
        t.join()
        listener.close()
    assert str(info.value) == f"Cannot reach the witness witness.example/w at {url}/add-checkpoint: timed out."
    assert (info.value.status, info.value.url) == (None, f"{url}/add-checkpoint")


def test_a_witness_that_refuses_the_connection_is_named_with_the_reason() -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as s:  # a port nobody listens on once closed
        port = s.getsockname()[1]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        pytest.skip("something listens on the port just closed")
    except OSError as exc:
        why = str(exc)
    with pytest.raises(WitnessError) as info:
        submit_to_witness(f"http://127.0.0.1:{port}", note(7), 0, [], WKEY.verifier, timeout=5)
    assert str(info.value) == f"Cannot reach the witness witness.example/w at http://127.0.0.1:{port}/add-checkpoint: {why}."


def test_answers_that_are_not_utf_8_are_read_with_replacement_characters(server: tuple[str, type[_Handler]]) -> None:
    """Whatever bytes a witness answers with, the client raises WitnessError (never a decoding error)."""
    base, handler = server
    handler.raw = (422, b"bad \xff proof\n", "text/plain")
    with pytest.raises(WitnessError) as info:
        submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    assert str(info.value).endswith(": 422 Unprocessable Entity: bad \ufffd proof")
    assert (info.value.status, info.value.body) == (422, "bad \ufffd proof\n")
    handler.raw = (200, b"\xff\xfe\n", "text/plain")
    with pytest.raises(WitnessError, match=r" answered without a valid cosignature: ") as info:
        submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    assert (info.value.status, info.value.body) == (200, "\ufffd\ufffd\n")


def test_a_409_without_the_size_content_type_names_no_size(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    for content_type in (None, "text/plain"):
        handler.raw = (409, b"7\n", content_type)
        with pytest.raises(WitnessError) as info:
            submit_to_witness(base, note(9), 0, [], WKEY.verifier)
        assert (info.value.status, info.value.latest_size, info.value.body) == (409, None, "7\n")


def test_an_answer_other_than_200_keeps_the_witness_body(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    handler.answer = Answer(202, "queued\n")
    with pytest.raises(WitnessError) as info:
        submit_to_witness(base, note(7), 0, [], WKEY.verifier)
    assert (info.value.status, info.value.body) == (202, "queued\n")


def test_each_connection_waits_for_others_and_commits_to_disk(w: Witness) -> None:
    """Requests wait up to 30 s for another request's transaction (never "database is locked" at once), the
    file is in WAL mode, and a commit is on disk before the cosignature is answered (synchronous=FULL)."""
    conn = w._connect()
    try:
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (30000,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
    finally:
        conn.close()


def test_a_proof_line_is_strict_base64(w: Witness) -> None:
    """A proof line holding anything beside the base64 of a hash is refused, even when the rest decodes."""
    good = base64.b64encode(bytes(32)).decode()
    for line in (good[:10] + "*" + good[10:], good[:10] + " " + good[10:], good + "\t"):
        body = f"old 10\n{line}\n\n".encode() + note(20).encode()
        assert w.add_checkpoint(body, now=NOW) == Answer(400, "Consistency proof line 1 is not base64.\n"), line


def test_a_database_error_while_storing_stores_nothing_and_is_raised_as_it_is(w: Witness) -> None:
    """Check-and-store is one transaction: when storing fails half-way (here the table of what it cosigned is
    gone), the size moves neither, and the database's own error reaches the caller."""
    with sqlite3.connect(w.db) as conn:
        conn.execute("DROP TABLE cosigned")
    with pytest.raises(sqlite3.OperationalError, match="(?i)no such table: cosigned"):
        w.add_checkpoint(request(0, 4), now=NOW)
    assert w.latest(ORIGIN) is None
