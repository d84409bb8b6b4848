"""Notebooks never rot: every notebook's code cells run top to bottom (no Jupyter needed).

``JAXKNOCK_NOTEBOOK_SMALL=1`` makes them run at tiny sizes; plots are drawn
with the non-interactive Agg backend when matplotlib is installed and skipped
(with a message) when it is not.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_all_notebooks_are_collected():
    names = {p.name for p in NOTEBOOKS}
    assert {
        "01_quickstart_sdp.ipynb",
        "02_knockoffs_power_fdr.ipynb",
        "03_sparse_naive_bayes.ipynb",
        "04_lifted_mnist.ipynb",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name}: clear the outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_code_cells_run(path):
    nb = json.loads(path.read_text())
    code = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    env = {**os.environ, "JAXKNOCK_NOTEBOOK_SMALL": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=path.parent, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
