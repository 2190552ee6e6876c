"""The HTML report is one self-contained file whose charts render in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from analytics_fixtures import simulate_into
from conftest import migrated
from PIL import Image

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
                      "First-pass yield per gate", "Phase duration percentiles"]
    # interval whiskers on the acceptance chart
    assert text.count('class="ci"') >= 2


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
    # Pillow decodes the screenshot (a pure-Python PNG decoder took 4-5 s of CPU here); colours are
    # counted per horizontal band, in C (getcolors), and compared exactly.
    with Image.open(shot) as image:
        assert image.format == "PNG"
        rgb = image.convert("RGB")
    width, height = rgb.size
    hits: dict[tuple[int, int, int], int] = {c: 0 for c in PALETTE}
    band_hits = [0] * 13  # where (vertically) the chart pixels are: charts at several places
    for band in range(13):
        top, bottom = band * height // 13, (band + 1) * height // 13
        # maxcolors: the band's pixel count, so getcolors always lists them (it gives None past maxcolors)
        for count, colour in rgb.crop((0, top, width, bottom)).getcolors(maxcolors=width * (bottom - top)):
            if colour in hits:
                hits[colour] += count
                band_hits[band] += count
    # Each of the first three series colours fills a visible area (bars are >= 22 px tall).
    assert all(n > 300 for n in hits.values()), hits
    # ... and in more than one place down the page (several charts, not one).
    assert sum(1 for n in band_hits if n > 100) >= 3, band_hits
