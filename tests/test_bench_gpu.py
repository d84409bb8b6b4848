"""benchmarks/bench_gpu.py (issue 20) runs its --small smoke sizes and survives a failing row.

Only the sampling rows run here (the cheapest to compile: all rows at --small
compile for over a minute on 2 cores); ``jaxknock bench`` runs every
benchmark, this one included, at ``--small``.
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_small_sampling_rows(bench, tmp_path, capsys):
    out = tmp_path / "rows.json"
    rows = bench.main(["--small", "--only", "sampling", "--repeats", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert [r["name"] for r in rows] == ["sampling factor R=2 n=40 p=60", "sampling dense R=2 n=40 p=60"]
    for r in rows:
        assert "error" not in r, r
        assert r["compiles_warm"] == 0 and r["code"] == 0
        assert 0 < r["warm_s"] and r["roof_s"] > 0
    assert "sampling factor R=2" in text and "FAILED" not in text and "peak" in text
    saved = json.loads(out.read_text())
    assert saved["level"] == "small" and len(saved["rows"]) == 2


def test_match_keeps_only_the_named_rows(bench, capsys):
    """``--match`` filters rows by name inside a group (how a short GPU lease runs part of ``lcd``)."""
    rows = bench.main(["--small", "--only", "sampling", "--match", "dense", "--repeats", "1"])
    assert [r["name"] for r in rows] == ["sampling dense R=2 n=40 p=60"]
    assert bench.main(["--small", "--only", "sampling", "--match", "no such row"]) == []
    capsys.readouterr()


def test_small_stability_row(bench, capsys):
    """Issue 21's GPU row: stability selection runs at the smoke size, without warm recompiles."""
    rows = bench.main(["--small", "--only", "stability", "--repeats", "1"])
    assert [r["name"] for r in rows] == ["stability B=8 L=5 n=40 p=30"]
    assert "error" not in rows[0], rows[0]
    assert rows[0]["compiles_warm"] == 0 and rows[0]["code"] == 0 and rows[0]["bad"] == 0
    assert "FAILED" not in capsys.readouterr().out


def test_failing_row_is_reported_and_the_rest_runs(bench, monkeypatch, capsys):
    def boom():
        raise MemoryError("RESOURCE_EXHAUSTED: out of memory")

    def fake_rows(sizes, dtype):
        return [
            ("broken", "sdp", boom, None, None),
            ("ok", "sdp", lambda: (), lambda: bench.jnp.ones(3) * 2, lambda out, a: {"code": 0, "flops": 6.0}),
        ]

    monkeypatch.setattr(bench, "rows_for", fake_rows)
    rows = bench.main(["--small", "--only", "sdp", "--repeats", "1"])
    text = capsys.readouterr().out
    assert rows[0]["error"].startswith("MemoryError: RESOURCE_EXHAUSTED")
    assert "broken" in text and "FAILED  MemoryError" in text
    assert "error" not in rows[1] and rows[1]["compiles_warm"] == 0


def test_bad_arguments(bench):
    with pytest.raises(SystemExit):
        bench.main(["--only", "nope"])
    with pytest.raises(SystemExit):
        bench.main(["--small", "--medium"])
