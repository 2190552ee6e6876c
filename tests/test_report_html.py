"""The HTML report is one self-contained file whose charts render in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from analytics_fixtures import simulate_into
from conftest import migrated

from eventstore.store import EventStore
from projections import analytics
from projections.metrics import cross_run_report
from projections.report import render

CHROMIUM = os.environ.get("EVSTORE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
PALETTE = {(0x33, 0x66, 0xCC), (0xDC, 0x39, 0x12), (0xFF, 0x99, 0x00)}  # the first bar colours


@pytest.fixture(scope="module")
def html_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("html")
    url = f"sqlite:///{d}/events.db"
    migrated(url)
    store = EventStore(url)
    simulate_into(store, {"mapipe": 14, "friday": 2, "taskflow": 2, "envelope": 2}, seed=3)
    con = analytics.open_analytics(store)
    out = d / "report.html"
    out.write_text(render(cross_run_report(con), "html"), encoding="utf-8")
    store.close()
    yield out


def test_html_is_self_contained_with_five_charts(html_file: Path) -> None:
    text = html_file.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # no network: no external URL in src/href, no script, no @import
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<script" not in text and "@import" not in text
    labels = re.findall(r'<svg class="chart" role="img" aria-label="([^"]+)"', text)
    # in section order: the dialects' own sections, then the shared ones (gates, phases)
    assert labels == ["Reviewer acceptance per model with Wilson 95% interval",
                      "Findings resolved vs still present per iteration", "Circuit-breaker trips per trigger",
                      "First-pass yield per gate", "Phase duration percentiles (minutes)"]
    # interval whiskers on the acceptance chart
    assert text.count('class="ci"') >= 2


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes) into rows of pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    i = 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if f == 1:
                line[x] = (line[x] + a) & 0xFF
            elif f == 2:
                line[x] = (line[x] + b) & 0xFF
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_charts_are_visible_in_headless_chromium(html_file: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"headless Chromium not found at {CHROMIUM} (Debian: apt-get install chromium)")
    shot = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2600",
           "--hide-scrollbars", html_file.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.exists(), proc.stderr.decode(errors="replace")[-2000:]
    width, bpp, rows = _png_pixels(shot.read_bytes())
    hits: dict[tuple[int, int, int], int] = {c: 0 for c in PALETTE}
    band_hits = [0] * 13  # where (vertically) the chart pixels are: charts at several places
    for y, line in enumerate(rows):
        for x in range(0, width * bpp, bpp):
            rgb = (line[x], line[x + 1], line[x + 2])
            if rgb in hits:
                hits[rgb] += 1
                band_hits[min(12, y * 13 // len(rows))] += 1
    # Each of the first three series colours fills a visible area (bars are >= 22 px tall).
    assert all(n > 300 for n in hits.values()), hits
    # ... and in more than one place down the page (several charts, not one).
    assert sum(1 for n in band_hits if n > 100) >= 3, band_hits
