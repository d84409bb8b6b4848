"""Run anchor libraries (fanok, knockpy) in their own virtual environments.

The anchors pin incompatible stacks (fanok 0.0.4 needs ``numpy<2`` and Cython
``<3``), so each lives in its own venv under ``$JAXKNOCK_ANCHOR_DIR``
(default ``benchmarks/_anchor_venvs``, git-ignored), created on first use.
A benchmark sends a Python snippet plus ``.npz`` inputs to the anchor's
interpreter through a subprocess and reads a JSON dict back.

If an anchor cannot be installed (no network, no compiler), ``run_anchor``
returns ``None`` and the benchmark prints "n/a" for that column.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

ANCHOR_DIR = Path(os.environ.get("JAXKNOCK_ANCHOR_DIR", Path(__file__).resolve().parent / "_anchor_venvs"))

# name -> list of pip install steps (each a list of arguments after `pip install`)
ANCHORS = {
    "fanok": [
        ["numpy<2", "Cython<3", "scipy<1.14", "scikit-learn<1.4", "setuptools", "wheel"],
        ["--no-build-isolation", "fanok==0.0.4"],
    ],
    "knockpy": [["knockpy==1.3.5"]],
}


def anchor_python(name: str) -> str | None:
    """Path to the anchor venv's python, installing it if needed (None on failure)."""
    venv = ANCHOR_DIR / name
    py = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists():
        return str(py)
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for step in ANCHORS[name]:
            subprocess.run([str(py), "-m", "pip", "install", "-q", *step], check=True)
        subprocess.run([str(py), "-c", f"import {name}"], check=True)
    except (subprocess.CalledProcessError, OSError) as err:  # pragma: no cover
        print(f"[anchors] could not install {name}: {err}", file=sys.stderr)
        return None
    marker.write_text("ok\n")
    return str(py)


def run_anchor(name: str, code: str, arrays: dict[str, np.ndarray] | None = None, timeout: float = 3600) -> dict | None:
    """Run ``code`` in the anchor's interpreter and return the dict it reports.

    Inside ``code``: ``inputs`` is the loaded ``.npz`` of ``arrays`` and
    ``report(dict)`` sends the result back. Returns ``None`` if the anchor is
    unavailable or the snippet fails (its stderr is printed).
    """
    py = anchor_python(name)
    if py is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "inputs.npz"
        out = Path(tmp) / "out.json"
        np.savez(inp, **(arrays or {}))
        prelude = textwrap.dedent(
            f"""
            import json, numpy as np
            inputs = np.load({str(inp)!r})
            def report(d):
                with open({str(out)!r}, "w") as f:
                    json.dump(d, f)
            """
        )
        proc = subprocess.run(
            [py, "-c", prelude + textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not out.exists():
            print(f"[anchors] {name} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return None
        return json.loads(out.read_text())
