"""Secrets as people write them (issue 32, item 2): each form the scrubber claims, one case each.

The patterns live in one list, ``eventstore.dialects.claude.secrets.PATTERNS``; every kind in it has
a case here (``test_every_pattern_has_a_case``).  A case is scrubbed as the text of a tool output
inside a transcript line (JSON: its quotes are ``\\"``, its newlines ``\\n``) and as a hook body
would carry it; what must stay (references, placeholders, names that only contain a secret word)
has cases too.  The end-to-end test ingests them on SQLite and PostgreSQL and looks for the
secrets in the database and in `log --json`.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
from claude_fixtures import SESSION
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.dialects.claude.secrets import PATTERNS, Scrubber, _is_secret_value, decode_json_escapes
from eventstore.store import EventStore

SECRET = "hunter2-Xq9"

#: (form, text holding SECRET, the kind that replaces it)
FORMS: list[tuple[str, str, str]] = [
    (".env bare", f"DB_PASSWORD={SECRET}", "env-assignment"),
    (".env double-quoted, export", f'export DB_PASSWORD="{SECRET}"', "secret-assignment"),
    (".env single-quoted", f"DB_PASSWORD='{SECRET}'", "secret-assignment"),
    (".env indented", f"  API_TOKEN={SECRET}", "env-assignment"),
    (".env lowercase", f"db_password={SECRET}", "env-assignment"),
    (".env among others", f"DEBUG=1\nAPI_KEY={SECRET}\nPORT=80", "env-assignment"),
    ("shell inline before a command", f"GITHUB_TOKEN={SECRET} ./release.sh", "env-assignment"),
    ("shell option", f"mysql --password={SECRET} db", "env-assignment"),
    ("JSON", f'{{"password": "{SECRET}"}}', "secret-assignment"),
    ("JSON camelCase prefix", f'{{"clientSecret":"{SECRET}"}}', "secret-assignment"),
    ("JSON nested, pretty", f'{{\n  "db": {{\n    "authToken": "{SECRET}"\n  }}\n}}', "secret-assignment"),
    ("YAML bare", f"database:\n  password: {SECRET}\n", "config-assignment"),
    ("YAML quoted", f"private_key: '{SECRET}'", "secret-assignment"),
    ("YAML list item", f"- credentials: {SECRET}", "config-assignment"),
    ("TOML", f'[db]\npassword = "{SECRET}"', "secret-assignment"),
    ("INI bare", f"[auth]\nsecret = {SECRET}\n", "config-assignment"),
    ("properties", f"spring.datasource.password={SECRET}", "env-assignment"),
    ("code literal", f'API_KEY = "{SECRET}"', "secret-assignment"),
    ("PHP array", f"'passwd' => '{SECRET}',", "secret-assignment"),
    ("Go", f'token := "{SECRET}"', "secret-assignment"),
    ("auth key", f"auth: {SECRET}", "config-assignment"),
    ("HTTP header", f"Authorization: Bearer {SECRET}", "authorization-header"),
    ("curl header", f"curl -H 'Authorization: Basic {SECRET}' https://x", "authorization-header"),
    ("URL password", f"postgresql://me:{SECRET}@db/x", "url-password"),
    ("AWS access key id", "AKIAIOSFODNN7EXAMPLE", "aws-access-key-id"),
    ("AWS secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-access-key"),
    ("GitHub token", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "github-token"),
    ("Anthropic key", "sk-ant-api03-" + "Zx9" * 12, "anthropic-api-key"),
    ("OpenAI key", "sk-proj-" + "Ab1" * 10, "openai-api-key"),
    ("Slack token", "xoxb-123456789012-abcdefABCDEF", "slack-token"),
    ("Google key", "AIza" + "B" * 35, "google-api-key"),
    ("Stripe key", "sk_live_" + "a1" * 12, "stripe-key"),
    ("JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "jwt"),
    ("PEM", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----", "private-key"),
    # Every prefix and variant the docs list (docs/capture.md, "What the secret scrubber catches"),
    # live and test keys alike, each its own case.
    ("PEM RSA", "-----BEGIN RSA PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END RSA PRIVATE KEY-----", "private-key"),
    ("PEM OpenSSH", "-----BEGIN OPENSSH PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END OPENSSH PRIVATE KEY-----",
     "private-key"),
    ("PEM PKCS#8", "-----BEGIN PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END PRIVATE KEY-----", "private-key"),
    ("PEM encrypted", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END ENCRYPTED PRIVATE KEY-----",
     "private-key"),
    ("AWS temporary key id (ASIA)", "ASIA" + "IOSFODNN7EXAMPL2", "aws-access-key-id"),
    *((f"AWS key id {p}", p + "IOSFODNN7EXAMPL3", "aws-access-key-id")
      for p in ("AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")),
    ("AWS secret, JSON", '{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}', "aws-secret-access-key"),
    *((f"GitHub token {p}", p + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "github-token")
      for p in ("gho_", "ghu_", "ghs_", "ghr_")),
    ("GitHub fine-grained token", "github_pat_" + "11ABCDEFG0" + "a1B2c3D4e5_F6g7H8i9J0k1L2m3N4o5P6q7R8", "github-token"),
    ("Anthropic admin key", "sk-ant-admin01-" + "Zx9" * 12, "anthropic-api-key"),
    ("OpenAI legacy key", "sk-" + "Ab1" * 16, "openai-api-key"),
    ("OpenAI service account key", "sk-svcacct-" + "Ab1" * 10, "openai-api-key"),
    ("OpenAI admin key", "sk-admin-" + "Ab1" * 10, "openai-api-key"),
    *((f"Slack token {p}", p + "123456789012-abcdefABCDEF", "slack-token")
      for p in ("xoxa-", "xoxp-", "xoxo-", "xoxs-", "xoxr-")),
    ("Stripe test key", "sk_test_" + "a1" * 12, "stripe-key"),
    ("Stripe restricted live key", "rk_live_" + "a1" * 12, "stripe-key"),
    ("Stripe restricted test key", "rk_test_" + "a1" * 12, "stripe-key"),
    ("HTTP header Token", f"Authorization: Token {SECRET}", "authorization-header"),
    ("HTTP header Digest", f"Authorization: Digest {SECRET}", "authorization-header"),
    ("HTTP header lower case", f"authorization: bearer {SECRET}", "authorization-header"),
    ("proxy header", f"Proxy-Authorization: Basic {SECRET}", "authorization-header"),
    ("header in JSON", f'{{"Authorization": "Bearer {SECRET}"}}', "authorization-header"),
]

#: Text that names a secret but holds none: left byte for byte as it was.
KEPT = [
    "input_tokens: 1200", '"max_tokens": 4096', "tokenizer = bert", "author: Jane", "secretary = Bob",
    "PASSWORD_FILE=/run/secrets/db", "password = getpass.getpass()", "password = os.environ['DB_PASSWORD']",
    "token = self.token", "password: ${DB_PASSWORD}", 'export API_TOKEN="$(cat ~/.token)"', "auth: true",
    "password:", "password: null", "if password == expected:", "The password is stored hashed.",
    'password = "<your password>"', "api_key: '***'", "token: ${{ secrets.GITHUB_TOKEN }}",
]


def _the_secret(text: str) -> str:
    for kind_secret in (SECRET, "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "MHcCAQEEIBkg"):
        if kind_secret in text:
            return kind_secret
    return text.split("'")[0] if "'" in text else text.split()[-1]


@pytest.fixture
def scrubber() -> Scrubber:
    return Scrubber(key=b"test-key")


def test_every_pattern_has_a_case() -> None:
    assert {kind for kind, _ in PATTERNS} == {kind for _, _, kind in FORMS}


@pytest.mark.parametrize(("form", "text", "kind"), FORMS, ids=[f[0] for f in FORMS])
def test_each_form_is_scrubbed_inside_a_transcript_line(form: str, text: str, kind: str, scrubber: Scrubber) -> None:
    secret = _the_secret(text)
    assert secret in text
    line = json.dumps({"type": "user", "message": {"content": [{"type": "tool_result", "content": text}]}})
    out, found = scrubber.scrub(line)
    assert secret not in out and kind in {f.kind for f in found}, (form, out)
    assert json.loads(out)["message"]["content"][0]["content"].count("[evstore-secret:") >= 1  # still valid JSON
    plain, found = scrubber.scrub(text)  # and as plain text (a hook body's raw string, a file)
    assert secret not in plain and kind in {f.kind for f in found}, (form, plain)


@pytest.mark.parametrize("text", KEPT)
def test_what_holds_no_secret_is_kept(text: str, scrubber: Scrubber) -> None:
    line = json.dumps({"content": text})
    assert scrubber.scrub(line) == (line, [])
    assert scrubber.scrub(text) == (text, [])


def test_json_escapes_are_decoded_before_matching(scrubber: Scrubber) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    escaped = "gh\\u0070_" + token[4:]
    line = '{"content": "' + escaped + '", "pass\\u0077ord": "' + SECRET + '"}'
    assert json.loads(line)["content"] == token  # what `log --json` would print
    out, found = scrubber.scrub(line)
    assert {f.kind for f in found} == {"github-token", "secret-assignment"}
    assert token not in json.dumps(json.loads(out)) and SECRET not in out
    # an escaped backslash before "u0068" is text, not an escape; controls stay escaped
    assert decode_json_escapes('"\\\\u0068 \\u0068 \\u001b \\u0022"') == '"\\\\u0068 h \\u001b \\u0022"'
    plain = '{"a": "\\u0068ello \\u001b"}'
    assert scrubber.scrub(plain) == (plain, [])  # no secret: the line keeps its bytes


_MARKER = re.compile(r"\[evstore-secret:[a-z0-9-]+:[0-9a-f]+\]")
_NAMES = st.sampled_from(["password", "passwd", "secret", "token", "api_key", "apiKey", "private_key", "credential",
                          "credentials", "auth", "access_key", "passphrase"])


@settings(max_examples=200, deadline=None)
@given(prefix=st.sampled_from(["", "DB_", "my", "x.", "github-", "Client"]), name=_NAMES,
       upper=st.booleans(), form=st.sampled_from(["env", "export", "json", "yaml", "toml", "ini"]),
       value=st.text(string.ascii_letters + string.digits + "!%+/=@^_-", min_size=8, max_size=40)
       .filter(lambda v: not v.lower().startswith(("@", "*")) and v[0] != "="))
def test_any_secret_name_in_any_form_is_scrubbed(prefix: str, name: str, upper: bool, form: str, value: str) -> None:
    key = (prefix + name).upper() if upper else prefix + name
    text = {"env": f"{key}={value}", "export": f'  export {key}="{value}"', "json": f'{{"{key}": "{value}"}}',
            "yaml": f"top:\n  {key}: {value}\n", "toml": f'{key} = "{value}"', "ini": f"[s]\n{key} = {value}"}[form]
    scrubber = Scrubber(key=b"k")
    if _is_secret_value("env-assignment", value):  # not a placeholder ("undefined") or a reference ("$X")
        line = json.dumps({"content": text})
        out, _ = scrubber.scrub(line)
        # the value is gone; the markers themselves are left out of the check (a value like
        # "config-a" is part of the marker "[evstore-secret:config-assignment:...]")
        assert value not in _MARKER.sub("", json.loads(out)["content"]), (text, out)
        assert value not in _MARKER.sub("", scrubber.scrub(text)[0])


def test_forms_never_reach_the_store_or_the_log(store_url: str, tmp_path: Path, run, monkeypatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    lines = []
    for i, (_, text, _) in enumerate(FORMS):
        rec = {"type": "user", "uuid": f"u{i}", "timestamp": "2026-03-01T10:00:00Z", "sessionId": SESSION,
               "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]}}
        lines.append(json.dumps(rec))
    lines.append(json.dumps({"type": "user", "uuid": "esc", "timestamp": "2026-03-01T10:00:01Z", "sessionId": SESSION,
                             "message": {"role": "user", "content": "token \\u0068unter"}})
                 .replace("\\\\u0068", "\\u0068").replace("token \\u0068unter", f"DB_PASSWORD=\\u0068{SECRET[1:]}"))
    f = tmp_path / f"{SESSION}.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run("ingest", "claude", str(f))
    assert r.exit_code == 0, r.output
    secrets = {_the_secret(text) for _, text, _ in FORMS}
    log = run("log", "--json", SESSION)
    assert log.exit_code == 0
    for secret in secrets:
        assert secret not in log.output and json.dumps(secret)[1:-1] not in log.output, secret
    with EventStore(store_url) as store:
        dump = json.dumps([e.to_dict() for e in store.read_stream(SESSION)])
    for secret in secrets:
        assert secret not in dump and json.dumps(secret)[1:-1] not in dump, secret
    if store_url.startswith("sqlite"):
        db = Path(store_url.split(":///", 1)[1])
        raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
        for secret in secrets:
            assert secret.encode() not in raw, secret


# What the scrubber promises about its markers and its reading of the text (issue 33): each test below
# is a promise a one-line change of secrets.py once broke without any other test noticing.


def test_a_marker_is_the_keyed_fingerprint_of_exactly_its_secret(scrubber: Scrubber) -> None:
    """``[evstore-secret:<kind>:<fingerprint>]``: HMAC-SHA256 of the secret's UTF-8 under the scrub key,
    12 hex digits; so whoever holds the key can tell which known secret leaked, and two secrets never
    share a marker."""
    import hashlib
    import hmac

    for secret in ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPL2"):
        expected = hmac.new(b"test-key", secret.encode(), hashlib.sha256).hexdigest()[:12]
        assert scrubber.scrub(f"id {secret} end")[0] == f"id [evstore-secret:aws-access-key-id:{expected}] end"
    a, b = (scrubber.scrub(f"DB_PASSWORD={s}")[0] for s in ("hunter2-Xq9", "hunter2-Xq8"))
    assert a != b and re.fullmatch(r"DB_PASSWORD=\[evstore-secret:env-assignment:[0-9a-f]{12}\]", a)


def test_a_secret_holding_a_lone_surrogate_is_scrubbed_not_a_crash(scrubber: Scrubber) -> None:
    """Text decoded from bytes that are not UTF-8 (``surrogateescape``) can put a lone surrogate inside a
    secret: it is still replaced, and its marker differs from the one of the secret without it."""
    out, found = scrubber.scrub("DB_PASSWORD=hunter2\udcff9")
    assert [f.kind for f in found] == ["env-assignment"] and "hunter2" not in out and "\udcff" not in out
    assert out != scrubber.scrub("DB_PASSWORD=hunter29")[0]


def test_a_quoted_secret_holding_brackets_is_scrubbed(scrubber: Scrubber) -> None:
    """A bracket makes a *bare* value code (``password = getpass()``, kept); inside quotes it is data."""
    for value in ("hu(nt)er2", "pa[ss]wd9", "s{e}cr3t"):
        for text in (f'password = "{value}"', f'{{"apiKey": "{value}"}}', f"DB_PASSWORD='{value}'"):
            out, found = scrubber.scrub(text)
            assert value not in out and [f.kind for f in found] == ["secret-assignment"], text
        assert scrubber.scrub(f"password = {value}")[1] == []  # bare: code


def test_a_quoted_secret_holding_the_other_quote_or_an_escape_is_scrubbed_whole(scrubber: Scrubber) -> None:
    """Passwords hold quotes and backslashes: JSON writes them as escapes, shell keeps the other quote.
    The value is read as its quotes read it (inside a JSON string too), and never past its closing quote."""
    texts = [f'{{"password": "{SECRET}\\"q"}}', f'{{"password": "a\\\\{SECRET}"}}', f'password: "{SECRET}\'s"',
             f"DB_PASSWORD='it\"s-{SECRET}'", f'{{"token": "\\u00e9{SECRET}"}}', f'export API_TOKEN="{SECRET} two"']
    for text in texts:
        for line in (text, json.dumps({"content": text})):
            out, found = scrubber.scrub(line)
            assert SECRET not in out and [f.kind for f in found] == ["secret-assignment"], (line, out)
            if line.startswith("{"):
                json.loads(out)  # still JSON
    # The value ends at its own closing quote: what follows is not swallowed, JSON or not.
    text = '{"password": "x\\\\", "user": "bob"}'
    assert json.loads(scrubber.scrub(text)[0])["user"] == "bob"
    assert json.loads(json.loads(scrubber.scrub(json.dumps({"content": text}))[0])["content"])["user"] == "bob"


def test_the_shortest_secret_value_is_two_characters(scrubber: Scrubber) -> None:
    """A value of two characters is a secret; one character (``-``, ``0``, ``y``) is a flag, kept."""
    for text in ("DB_PASSWORD=x9", 'password = "x9"', "password: x9", "Authorization: Bearer x9x9x9x9"):
        out, found = scrubber.scrub(text)
        assert found and "x9" not in out, text
    for text in ("DB_PASSWORD=9", 'password = "9"', "password: 9"):
        assert scrubber.scrub(text) == (text, []), text


@pytest.mark.parametrize(("escaped", "char"), [("\\u0020", " "), ("\\u0041", "A"), ("\\u0030", "0"),
                                               ("\\u0021", "!"), ("\\u007e", "~"), ("\\u00e9", "é"),
                                               ("\\u0058", "X"), ("\\u005a", "Z"), ("\\ud7ff", "\ud7ff"),
                                               ("\\ue000", "\ue000")])
def test_every_escape_of_a_character_json_need_not_escape_is_decoded(escaped: str, char: str) -> None:
    """Spaces, digits, capitals and punctuation written as ``\\u`` escapes are read as themselves (what
    JSON must escape, the controls below a space, stays escaped)."""
    assert decode_json_escapes(f'"a{escaped}b"') == f'"a{char}b"'
    assert decode_json_escapes('"a\\u001fb"') == '"a\\u001fb"'


@pytest.mark.parametrize("escaped", ["\\u0000", "\\u001f", "\\u0022", "\\u005c", "\\ud800", "\\udbff",
                                     "\\udc00", "\\udfff"])
def test_what_json_must_escape_and_lone_surrogate_halves_stay_escaped(escaped: str) -> None:
    """Decoding must give the same JSON value: controls, the quote and the backslash stay escapes, and so
    does each half of a surrogate pair (alone it is no character, and could not be stored as UTF-8)."""
    text = f'{{"a": "x{escaped}y"}}'
    assert decode_json_escapes(text) == text
    assert json.loads(decode_json_escapes(text)) == json.loads(text)


def test_secrets_written_with_escaped_spaces_capitals_or_digits_are_scrubbed(scrubber: Scrubber) -> None:
    token = "AKIAIOSFODNN7EXAMPLE"
    for text in ("\\u0041KIAIOSFODNN7EXAMPLE",  # an escaped capital
                 "AKIAIOSFODNN\\u0037EXAMPLE",  # an escaped digit
                 ):
        line = '{"content": "id ' + text + '"}'
        out, found = scrubber.scrub(line)
        assert token not in json.loads(out)["content"] and [f.kind for f in found] == ["aws-access-key-id"], text
    line = '{"content": "Authorization: Bearer\\u0020' + SECRET + '"}'  # an escaped space
    out, found = scrubber.scrub(line)
    assert SECRET not in json.loads(out)["content"] and [f.kind for f in found] == ["authorization-header"]


@pytest.mark.parametrize("where", ["before", "inside", "after", "between"])
def test_a_secret_is_scrubbed_wherever_it_sits_among_a_lines_long_strings(where: str) -> None:
    """A line whose long strings become blobs is looked at piece by piece (each long string once per
    scrubber): a secret in any piece, before, inside, after or between the long strings, is replaced, in
    the line and in the blobs, also when the same long strings were seen before in another line."""
    import msgspec

    from eventstore.dialects.claude.dialect import events_for_line

    long_a, long_b = "a" * 300, "b" * 300
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    fields = {"before": [secret, long_a, long_b], "inside": [long_a, f"{long_b} {secret} {long_b}", "x"],
              "after": [long_a, long_b, secret], "between": [long_a, secret, long_b]}[where]
    scrubber = Scrubber(key=b"test-key")
    plain = json.dumps({"type": "user", "uuid": "u0", "content": [long_a, long_b, "x"]}).encode()
    assert events_for_line(plain, 1, 0, scrubber, blob_threshold=100).findings == []  # seen first, no secret
    line = json.dumps({"type": "user", "uuid": "u1", "content": fields}).encode()
    got = events_for_line(line, 2, 0, scrubber, blob_threshold=100)
    stored = b"".join(msgspec.json.encode(e) for e in got.events)
    assert [f.code for f in got.findings] == ["secret-scrubbed"], where
    assert secret.encode() not in stored and not any(secret.encode() in b for b in got.blobs.values())


def test_the_scrub_key_is_evstore_scrub_key_else_a_private_key_file_made_once(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import stat

    text = "DB_PASSWORD=hunter2-Xq9"
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "the-team-key")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert Scrubber().scrub(text) == Scrubber(key=b"the-team-key").scrub(text)
    assert not (tmp_path / "evstore").exists()  # the variable given: no key file
    monkeypatch.delenv("EVSTORE_SCRUB_KEY")
    first = Scrubber().scrub(text)
    key = tmp_path / "evstore" / "scrub.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and len(key.read_bytes()) == 64
    assert first == Scrubber(key=key.read_bytes()).scrub(text) == Scrubber().scrub(text)  # made once, then read
    assert first != Scrubber(key=b"the-team-key").scrub(text)


@pytest.mark.parametrize("config", ["home", "missing folders", "existing folder"])
def test_the_key_file_is_made_where_the_docs_say_whatever_exists_of_its_folder(
        config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``~/.config/evstore/scrub.key`` (``$XDG_CONFIG_HOME/evstore/scrub.key`` when that is set), its folders
    made as needed, next to whatever the evstore folder already holds."""
    monkeypatch.delenv("EVSTORE_SCRUB_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if config == "home":
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        key = tmp_path / "home" / ".config" / "evstore" / "scrub.key"
    else:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "x" / "y"))
        key = tmp_path / "x" / "y" / "evstore" / "scrub.key"
        if config == "existing folder":
            key.parent.mkdir(parents=True)
            (key.parent / "other.toml").write_text("")
    marked = Scrubber().scrub("DB_PASSWORD=hunter2-Xq9")[0]
    assert key.is_file() and marked == Scrubber(key=key.read_bytes()).scrub("DB_PASSWORD=hunter2-Xq9")[0]


@pytest.mark.parametrize(("form", "text", "kind"), FORMS, ids=[f[0] for f in FORMS])
def test_a_pattern_is_never_skipped_on_text_it_matches(form: str, text: str, kind: str) -> None:
    """Each built-in pattern runs only on lines that hold what its matches must contain (``_may_match``,
    the speed-up): that test says "cannot match" only when the pattern cannot match, for the text as it
    is, inside a JSON line, upper-cased where the pattern ignores case, with or without the caller's
    lower-cased copy."""
    from eventstore.dialects.claude.secrets import _may_match

    rx = re.compile(dict(PATTERNS)[kind], re.S)
    texts = [text, json.dumps({"content": text})]
    if kind in ("aws-secret-access-key", "secret-assignment", "env-assignment", "config-assignment"):
        texts.append(text.replace(text.split("=")[0].split(":")[0], text.split("=")[0].split(":")[0].upper(), 1))
    for t in texts:
        if rx.search(t):
            data = t.encode()
            assert _may_match(kind, data) and _may_match(kind, data, data.lower()), (form, t)


def test_extra_patterns_always_run_and_read_newlines_as_the_built_ins_do(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``Scrubber(extra=...)`` and ``EVSTORE_SECRET_PATTERNS`` (``kind<TAB>regex`` lines, ``#`` comments and
    blank lines skipped, a missing kind named ``custom``): each pattern runs on every line, whatever the
    built-ins' gates say, and its ``.`` reads a newline too."""
    monkeypatch.delenv("EVSTORE_SECRET_PATTERNS", raising=False)
    block = "BEGIN ACME\nq1w2e3\nEND ACME"
    extra = [("acme-key", r"ACME-[0-9]{8}"), ("acme-block", r"BEGIN ACME.*?END ACME")]
    scrubber = Scrubber(extra=extra, key=b"k")
    for text, kind in (("id ACME-12345678 ok", "acme-key"), (block, "acme-block"),
                       (json.dumps({"content": block}), "acme-block")):
        out, found = scrubber.scrub(text)
        assert [f.kind for f in found] == [kind] and "12345678" not in out and "q1w2e3" not in out, text
    patterns = tmp_path / "patterns.tsv"
    patterns.write_text("# our own formats\n\nacme-key\tACME-[0-9]{8}\n\tBEGIN ACME.*?END ACME\n", encoding="utf-8")
    monkeypatch.setenv("EVSTORE_SECRET_PATTERNS", str(patterns))
    scrubber = Scrubber(key=b"k")
    assert [f.kind for f in scrubber.scrub("id ACME-12345678 ok")[1]] == ["acme-key"]
    assert [f.kind for f in scrubber.scrub(block)[1]] == ["custom"]
    assert scrubber.scrub("# our own formats") == ("# our own formats", [])


def test_a_bad_extra_pattern_is_refused_naming_its_file_and_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.errors import EvstoreError

    patterns = tmp_path / "patterns.tsv"
    patterns.write_text("ok\tA{3}\n# comment\nbroken\t(unclosed\n", encoding="utf-8")
    monkeypatch.setenv("EVSTORE_SECRET_PATTERNS", str(patterns))
    with pytest.raises(EvstoreError) as err:
        Scrubber(key=b"k")
    assert str(err.value).startswith(f"{patterns}, line 3: not a regular expression (missing ), unterminated subpattern")


def test_what_scrub_reports_is_each_secrets_kind_marker_and_place(scrubber: Scrubber) -> None:
    """The findings a capture records (``secret-scrubbed``: "a KIND was replaced by MARKER") come from
    these: the kind, the very marker now in the text, and where the secret started."""
    from eventstore.dialects.claude.secrets import Scrubbed

    for text, kind, at in (("id AKIAIOSFODNN7EXAMPLE end", "aws-access-key-id", 3),
                           ("export DB_PASSWORD=hunter2-Xq9", "env-assignment", 19),
                           ('{"password": "hunter2-Xq9"}', "secret-assignment", 14)):
        out, found = scrubber.scrub(text)
        [(got_kind, marker, offset)] = [(f.kind, f.marker, f.offset) for f in found]
        assert (got_kind, offset) == (kind, at) and isinstance(found[0], Scrubbed), text
        assert re.fullmatch(rf"\[evstore-secret:{kind}:[0-9a-f]{{12}}\]", marker) and out[at:at + len(marker)] == marker


def test_the_patterns_file_is_read_as_utf8_whatever_the_locale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern may hold any character (a kind named in another language, a non-ASCII prefix); the file is
    UTF-8 also under a C (ASCII) locale, and a kind is all that comes before the first tab."""
    import locale

    patterns = tmp_path / "patterns.tsv"
    patterns.write_text("clé-api\tCLÉ-[0-9]{6}\ttail\n", encoding="utf-8")
    monkeypatch.setenv("EVSTORE_SECRET_PATTERNS", str(patterns))
    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        scrubber = Scrubber(key=b"k")
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)
    out, found = scrubber.scrub("x CLÉ-123456\ttail y")
    assert [f.kind for f in found] == ["clé-api"] and "123456" not in out
