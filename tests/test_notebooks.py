"""Notebooks never rot: their code cells run top to bottom (no Jupyter needed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_code_cells_run(path):
    nb = json.loads(path.read_text())
    code = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                          cwd=path.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
