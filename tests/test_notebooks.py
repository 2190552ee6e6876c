"""The notebooks run top to bottom on a demo store they create: every code cell shows something,
the charts are drawn (PNG images from matplotlib) and the tables are DataFrames."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("name", ["post_mortem.ipynb", "reviewer_acceptance.ipynb"])
def test_notebook_runs_and_every_code_cell_has_output(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    monkeypatch.setenv("EVSTORE_NOTEBOOK_RUNS", "24")
    monkeypatch.delenv("EVSTORE_NOTEBOOK_URL", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's demo store (tempfile.mkdtemp) goes with the test's files
    root = str(NOTEBOOKS.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any("import sqlite3" in c.source or "EventStore(" in c.source for c in code)  # the public API only
    assert code
    for i, cell in enumerate(code):
        assert not any(o.get("output_type") == "error" for o in cell.outputs), f"cell {i} raised"
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        data = [o for o in cell.outputs if o.get("output_type") in ("execute_result", "display_data")]
        assert text.strip() or data, f"cell {i} of {name} produced no output:\n{cell.source[:200]}"
    shown = [o.get("data", {}) for c in code for o in c.outputs]
    images = [d["image/png"] for d in shown if "image/png" in d]
    assert len(images) >= {"post_mortem.ipynb": 2, "reviewer_acceptance.ipynb": 4}[name]
    assert all(len(png) > 2000 for png in images)  # base64 PNGs with something drawn on them
    frames = [d["text/html"] for d in shown if "text/html" in d]
    assert len(frames) >= 3 and all("<table" in html for html in frames)  # pandas DataFrames
    assert [p.name for p in tmp_path.glob("evstore-nb-*/events.db")] == ["events.db"]  # its store, not /tmp's
