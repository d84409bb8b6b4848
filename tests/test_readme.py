"""The README's Python snippets and set-up commands stay true."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


_RUN_BLOCKS = """
import json, sys, traceback
import jax
blocks = json.load(sys.stdin)
for i, code in enumerate(blocks):
    jax.config.update("jax_enable_x64", False)  # as in a fresh process: a block that wants float64 says so
    try:
        exec(compile(code, f"<README block {i}>", "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        sys.exit(f"README block {i} failed")
"""


def test_readme_python_snippets_run():
    # every block in a fresh namespace of one fresh process (a reader runs them one after
    # another; one process instead of one per block saves an import and compile per block)
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_BLOCKS], input=json.dumps(blocks), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_readme_test_command_matches_ci():
    text = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = re.search(r'pip install "\.\[test\]" && (python -m pytest[^\n]*)', text).group(1).strip()
    assert cmd in ci.splitlines()


def test_cli_demo_small_runs(tmp_path):
    try:
        import matplotlib  # noqa: F401

        png = tmp_path / "demo.png"
    except ImportError:
        png = None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxknock",
            "demo",
            "--n",
            "200",
            "--p",
            "40",
            "--rank",
            "4",
            "--signals",
            "8",
            # one replicate: a second batch shape compiled the whole pipeline again (49 s -> 13 s here); the
            # aggregated replicates are tested in tests/test_pipeline.py
            "--replicates",
            "1",
        ]
        + (["--plot", str(png)] if png else []),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sdp (dense, barrier Newton)" in proc.stdout and "sum(s)" in proc.stdout
    if png:
        assert f"plot written to {png}" in proc.stdout
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_argument_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "jaxknock", "demo", "--p", "0"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "error" in proc.stderr.lower()
