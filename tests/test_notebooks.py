"""The notebooks run top to bottom on a demo store they create, and every code cell prints."""

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
    root = str(NOTEBOOKS.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    for i, cell in enumerate(code):
        assert not any(o.get("output_type") == "error" for o in cell.outputs), f"cell {i} raised"
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        data = [o for o in cell.outputs if o.get("output_type") in ("execute_result", "display_data")]
        assert text.strip() or data, f"cell {i} of {name} produced no output:\n{cell.source[:200]}"
