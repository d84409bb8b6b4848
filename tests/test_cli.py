"""The command line: every subcommand on small data, every bad input gets a one-line error and exit code 2."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import independent_regression as regression_table

from jaxknock import cli
from jaxknock.cli.progress import Progress, progress_enabled

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- helpers


def write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def reg_csv(tmp_path_factory):
    X, y = regression_table()
    path = tmp_path_factory.mktemp("data") / "reg.csv"
    header = [f"g{j}" for j in range(X.shape[1])] + ["y"]
    return write_csv(path, header, np.column_stack([X, y]).tolist())


@pytest.fixture(scope="module")
def reg_npz(tmp_path_factory):
    X, y = regression_table()
    path = tmp_path_factory.mktemp("data") / "reg.npz"
    np.savez(path, X=np.column_stack([X, y]), columns=np.array([f"g{j}" for j in range(X.shape[1])] + ["y"]))
    return str(path)


def count_table(n=120, m=15, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    rate = np.ones((2, m))
    rate[1, :3] = 4.0
    return rng.poisson(rate[y]), y


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_error(argv, capsys, *fragments):
    code, out, err = run(argv, capsys)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxknock: error: "), err
    assert "Traceback" not in err
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    return lines[0]


# ---------------------------------------------------------------- select


def test_an_unwritable_report_path_fails_before_the_work(reg_csv, tmp_path, capsys):
    """--out into a missing folder ran the whole selection, printed it, then failed on the write."""
    missing = tmp_path / "no" / "such" / "r.json"
    line = assert_error(["select", reg_csv, "--target", "y", "--out", str(missing)], capsys, "does not exist")
    assert "selected" not in line
    assert_error(["stability", reg_csv, "--target", "y", "--out", str(tmp_path)], capsys, "is a directory")


def test_report_is_strict_json(tmp_path):
    """The thresholds of a selection that selects nothing (inf) and an alpha=0 log-odds (+-inf) were
    written as bare Infinity, which is not JSON: jq and JSON.parse refused the whole report."""
    from jaxknock.cli.report import write_json

    path = tmp_path / "r.json"
    write_json(path, {"thresholds": [np.inf], "w": np.float64(-np.inf), "x": float("nan"), "a": np.array([1.5, 2])})

    def refuse(constant):
        raise ValueError(constant)

    assert json.loads(path.read_text(), parse_constant=refuse) == {
        "thresholds": ["inf"], "w": "-inf", "x": "nan", "a": [1.5, 2.0]
    }  # fmt: skip


def test_select_csv_finds_signals_and_writes_report(reg_csv, tmp_path, capsys):
    out_json = tmp_path / "result.json"
    code, out, err = run(
        ["select", reg_csv, "--target", "y", "--method", "equi", "--statistic", "lsm", "--out", str(out_json)], capsys
    )
    assert code == 0, err
    assert "selected" in out and "of 30 features at FDR 0.1" in out
    report = json.loads(out_json.read_text())
    assert set(report) >= {"inputs", "settings", "versions", "device", "timings", "selected"}
    assert report["inputs"]["rows"] == 200 and report["inputs"]["features"] == 30
    assert report["settings"]["method"] == "equi" and report["settings"]["statistic"] == "lsm"
    assert report["versions"]["jax"] and report["device"]["platform"]
    assert {"covariance", "s_vector", "sampling", "statistics", "selection", "total"} <= set(report["timings"])
    names = [s["name"] for s in report["selected"]]
    truth = {f"g{j}" for j in range(12)}
    assert len(set(names) & truth) >= 8  # strong signals found
    assert len(set(names) - truth) <= 2  # few false discoveries
    for s in report["selected"]:  # printed with their statistics
        assert s["name"] in out and s["W"] > 0


def test_select_two_label_text_target_is_coded_and_reported(tmp_path, capsys):
    """A case / control column (the usual binary outcome) was refused as 'not numeric'; now coded 0/1
    (sorted labels), fitted with the logistic loss, and the coding is printed and written to the report."""
    X, y = regression_table()
    labels = np.where(y > np.median(y), "case", "control")
    header = [f"g{j}" for j in range(X.shape[1])] + ["status"]
    path = write_csv(tmp_path / "cc.csv", header, [[*map(str, row), lab] for row, lab in zip(X.tolist(), labels)])
    out_json = tmp_path / "cc.json"
    code, out, err = run(["select", path, "--target", "status", "--method", "equi", "--out", str(out_json)], capsys)
    assert code == 0, err
    assert "(coded 0 = 'case', 1 = 'control')" in out
    report = json.loads(out_json.read_text())
    assert report["inputs"]["target_levels"] == {"0": "case", "1": "control"}
    assert report["settings"]["loss"] == "logistic"
    three = np.array(["a", "b", "c"])[np.arange(len(y)) % 3]
    path3 = write_csv(tmp_path / "c3.csv", header, [[*map(str, row), lab] for row, lab in zip(X.tolist(), three)])
    assert_error(["select", path3, "--target", "status"], capsys, "target column 'status' holds 3 text labels")
    feature_text = write_csv(tmp_path / "ft.csv", ["g0", "g1", "y"], [["a", "1", "2"], ["b", "3", "4"]] * 10)
    assert_error(["select", feature_text, "--target", "y"], capsys, "column 'g0' is not numeric")


def test_select_npz_replicates_and_quiet(reg_npz, capsys):
    code, out, err = run(
        [
            "select",
            reg_npz,
            "--target",
            "y",
            "--method",
            "equi",
            "--statistic",
            "lsm",
            "--replicates",
            "2",
            "--aggregate",
            "frequency",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0, err
    assert "selected in" in out and "100%" in out  # per-feature selection frequency
    assert err == ""  # quiet: no progress, no notes
    assert "features, 200 rows" not in out


def _knockoff_plus_threshold(w, q):
    """Knockoff+ threshold of one row, by direct search (the reference for the CLI's frequencies)."""
    for t in np.sort(np.abs(w[w != 0])):
        if (1 + np.sum(w <= -t)) / max(1, np.sum(w >= t)) <= q:
            return t
    return np.inf


def test_select_ebh_frequency_counts_nonzero_evalues(reg_npz, capsys):
    # e-BH averages e-values made at fdr / 2: the per-feature frequency must count the replicates giving a
    # non-zero e-value (W >= T at fdr / 2), not those selecting at fdr (it read "selected in 100%" for
    # features e-BH itself could not select)
    from jaxknock import Solution
    from jaxknock.cli.select import summarise_selection
    from jaxknock.pipeline import Selection

    rng = np.random.default_rng(3)
    p, R, fdr = 60, 4, 0.2
    W = rng.normal(size=(R, p)) + np.concatenate([np.linspace(4.0, 0.5, 20), np.zeros(p - 20)])
    at_fdr = np.array([_knockoff_plus_threshold(w, fdr) for w in W])
    at_half = np.array([_knockoff_plus_threshold(w, fdr / 2) for w in W])
    expected = (W >= at_half[:, None]).mean(axis=0)
    assert np.any(expected != (W >= at_fdr[:, None]).mean(axis=0))  # the two counts differ on this W
    everything = np.ones(p, bool)
    s_sol = Solution(np.ones(p), np.int32(0), {})
    settings = {"fdr": fdr, "aggregate": "ebh", "plus": True}
    sel = Selection(np.arange(p), everything, W, at_fdr, s_sol, None, {}, settings)
    selections, *_ = summarise_selection(sel, [f"f{j}" for j in range(p)])
    got = np.array([s["frequency"] for s in sorted(selections, key=lambda s: s["index"])])
    np.testing.assert_allclose(got, expected)

    options = "--target y --method equi --statistic lsm --replicates 2 --fdr 0.4".split()
    code, out, err = run(["select", reg_npz, *options], capsys)
    assert code == 0, err
    assert "e-BH over 2 replicates" in out and "e > 0 in (at FDR 0.2)" in out


def test_select_sdp_factor_and_npy_index_target(tmp_path, capsys):
    X, y = regression_table(n=120, p=20, signals=10, seed=1)
    path = tmp_path / "t.npy"
    np.save(path, np.column_stack([y, X]))
    code, out, err = run(
        [
            "select",
            str(path),
            "--target",
            "0",
            "--method",
            "sdp-factor",
            "--rank",
            "3",
            "--statistic",
            "correlation",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0, err
    assert "of 20 features" in out


@pytest.mark.parametrize(
    "shape, extra, resolved",
    [((120, 20), [], "mvr"), ((40, 60), [], "mvr_factor"), ((120, 20), ["--rank", "3"], "mvr_factor")],
)
def test_select_default_method_is_the_librarys_auto(tmp_path, capsys, shape, extra, resolved):
    """The CLI's default S-vector method was ``asdp`` while its help promised sdp-factor for p >= n:
    a table with more features than rows was refused unless ``--method sdp-factor`` was typed. The
    default is now ``auto``, as :func:`knockoff_filter` and ``KnockoffSelector``: the report records
    what it resolved to, and a wide table runs."""
    n, p = shape
    X, y = regression_table(n=n, p=p, signals=5, seed=2)
    path = write_csv(tmp_path / "t.csv", [f"g{j}" for j in range(p)] + ["y"], np.column_stack([X, y]).tolist())
    out_json = tmp_path / "r.json"
    argv = ["select", path, "--target", "y", "--statistic", "correlation", "--out", str(out_json), *extra]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert f"method auto ({resolved.replace('_', '-')})" in out
    report = json.loads(out_json.read_text())
    assert report["settings"]["method"] == "auto" and report["settings"]["s_method"] == resolved
    assert report["s_vector"]["result"] == "successful"


def test_select_subprocess_no_traceback(tmp_path):
    bad = write_csv(tmp_path / "bad.csv", ["a", "b", "y"], [[1, 2, 3]] * 20)
    proc = subprocess.run(
        [sys.executable, "-m", "jaxknock", "select", bad, "--target", "y"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "constant" in proc.stderr


def test_persistent_compile_cache_and_opt_out(tmp_path, reg_csv, monkeypatch):
    """The CLI fills a per-user compilation cache (JAXKNOCK_CACHE_DIR here); the opt-outs turn it off."""
    from jaxknock.cache import compilation_cache_dir as compile_cache_dir
    from jaxknock.cli.common import enable_compile_cache

    base = {k: v for k, v in os.environ.items() if k != "JAXKNOCK_NO_COMPILE_CACHE"}
    on = tmp_path / "on"
    cmd = [sys.executable, "-m", "jaxknock", "select", str(reg_csv), "--target", "y", "--quiet", "--method", "equi"]
    proc = subprocess.run(cmd, env=dict(base, JAXKNOCK_CACHE_DIR=str(on)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert on.is_dir() and any(on.iterdir())
    # opt-outs (in process: no compilation involved)
    monkeypatch.setenv("JAXKNOCK_CACHE_DIR", str(tmp_path / "off"))
    monkeypatch.delenv("JAXKNOCK_NO_COMPILE_CACHE", raising=False)
    assert compile_cache_dir() == str(tmp_path / "off")
    assert enable_compile_cache(False) is None  # --no-compile-cache
    for word in ("0", "false", "No", " off "):  # "false" opted out: any non-empty value but "0" did
        monkeypatch.setenv("JAXKNOCK_NO_COMPILE_CACHE", word)
        assert compile_cache_dir() == str(tmp_path / "off"), word
    monkeypatch.setenv("JAXKNOCK_NO_COMPILE_CACHE", "1")
    assert compile_cache_dir() is None and enable_compile_cache(True) is None
    assert not (tmp_path / "off").exists()
    from jaxknock.cli import build_parser

    assert build_parser().parse_args(["--no-compile-cache", "demo"]).no_compile_cache


@pytest.fixture
def bad_files(tmp_path):
    X, y = regression_table(n=40, p=5, signals=2)
    header = ["a", "b", "c", "d", "e", "y"]
    rows = np.column_stack([X, y]).tolist()
    f = {}
    f["text"] = write_csv(
        tmp_path / "text.csv", header, [r[:2] + ["hello"] + r[3:] if i == 3 else r for i, r in enumerate(rows)]
    )
    f["nan"] = write_csv(
        tmp_path / "nan.csv", header, [r[:1] + [""] + r[2:] if i == 5 else r for i, r in enumerate(rows)]
    )
    f["const"] = write_csv(tmp_path / "const.csv", header, [r[:3] + [7.0] + r[4:] for r in rows])
    f["const_target"] = write_csv(tmp_path / "const_target.csv", header, [r[:5] + [1.0] for r in rows])
    f["few"] = write_csv(tmp_path / "few.csv", header, rows[:6])
    f["wide"] = write_csv(
        tmp_path / "wide.csv",
        [f"x{j}" for j in range(30)] + ["y"],
        np.random.default_rng(0).standard_normal((20, 31)).tolist(),
    )
    f["empty"] = tmp_path / "empty.csv"
    f["empty"].write_text("")
    f["noheader"] = write_csv(tmp_path / "noheader.csv", ["1", "2", "3"], [[4, 5, 6]])
    f["ragged"] = tmp_path / "ragged.csv"
    f["ragged"].write_text("a,b,y\n1,2,3\n4,5\n")
    f["dup"] = write_csv(tmp_path / "dup.csv", ["a", "a", "y"], [[1, 2, 3]])
    f["headeronly"] = write_csv(tmp_path / "headeronly.csv", header, [])
    f["binary"] = tmp_path / "binary.csv"
    f["binary"].write_bytes(b"\xff\xfe\x00\x81\x82" * 50)
    f["xlsx"] = tmp_path / "data.xlsx"
    f["xlsx"].write_text("not really")
    f["badnpy"] = tmp_path / "bad.npy"
    f["badnpy"].write_bytes(b"garbage")
    f["npy1d"] = tmp_path / "one.npy"
    np.save(f["npy1d"], np.arange(10.0))
    f["npzstr"] = tmp_path / "str.npz"
    np.savez(f["npzstr"], a=np.array(["x"] * 20), y=np.arange(20.0))
    f["npzlen"] = tmp_path / "len.npz"
    np.savez(f["npzlen"], a=np.arange(20.0), y=np.arange(21.0))
    sp = pytest.importorskip("scipy.sparse")
    f["sparse"] = tmp_path / "sparse.npz"
    sp.save_npz(f["sparse"], sp.csr_matrix(np.eye(5)))
    return {k: str(v) for k, v in f.items()}


@pytest.mark.parametrize(
    "case, extra, fragments",
    [
        ("missing", [], ["does not exist"]),
        ("dir", [], ["is a directory"]),
        ("xlsx", [], ["unsupported file type '.xlsx'", ".csv, .npz or .npy"]),
        ("empty", [], ["is empty", "header row"]),
        ("noheader", [], ["no header row", "add a row of column names"]),
        ("ragged", [], ["line 3 has 2 fields but the header has 3"]),
        ("dup", [], ["duplicate column name(s) ['a']"]),
        ("headeronly", [], ["no data rows"]),
        ("binary", [], ["cannot decode"]),
        ("badnpy", [], ["not a readable .npy"]),
        ("npy1d", [], ["must be 2-D"]),
        ("npzstr", [], ["array 'a' is not numeric"]),
        ("npzlen", [], ["different lengths"]),
        ("sparse", [], ["scipy.sparse matrix", "jaxknock snb"]),
        ("const", ["--target", "why"], ["target column 'why' is not in", "available: a, b, c, d, e, y"]),
        ("text", [], ["column 'c' is not numeric (row 4 has 'hello')", "encode it as numbers or drop"]),
        ("nan", [], ["missing/NaN/Inf value(s) in column(s) b", "impute or drop"]),
        ("const", [], ["constant column(s) d", "drop them"]),
        ("const_target", [], ["target column 'y' is constant"]),
        ("few", [], ["only 6 rows", "at least 10"]),
        ("wide", ["--method", "asdp"], ["20 rows for 30 features", "--method asdp on a dense", "mvr-factor"]),
        ("wide", ["--method", "equi"], ["--method equi on a dense covariance"]),
        ("text", ["--fdr", "1.5"], ["--fdr must lie strictly between 0 and 1"]),
        ("text", ["--replicates", "0"], ["--replicates must be a positive integer"]),
        ("text", ["--method", "sdp", "--rank", "3"], ["--rank only applies to --method mvr-factor or sdp-factor"]),
        ("wide", ["--method", "sdp", "--knockoffs", "2"], ["--method sdp on a dense covariance"]),
        ("wide", ["--method", "sdp-factor", "--rank", "25"], ["--rank must be smaller than min(rows, features) = 20"]),
        ("text", ["--lam", "-1"], ["--lam must be positive"]),
        # reached knockoff_filter after the table was read, in its Python names (lam=, aggregate='frequency')
        ("text", ["--lam", "0.1", "--statistic", "lsm"], ["--lam only applies to --statistic lcd"]),
        ("text", ["--knockoffs", "2", "--replicates", "2"], ["--replicates > 1 needs --aggregate frequency"]),
    ],
)
def test_select_bad_input(bad_files, tmp_path, capsys, case, extra, fragments):
    path = {"missing": str(tmp_path / "nope.csv"), "dir": str(tmp_path)}.get(case) or bad_files[case]
    target = [] if "--target" in extra else ["--target", "y"]
    assert_error(["select", path, *target, *extra], capsys, *fragments)


def test_select_unwritable_report(reg_csv, tmp_path, capsys):
    assert_error(
        [
            "select",
            reg_csv,
            "--target",
            "y",
            "--method",
            "equi",
            "--statistic",
            "correlation",
            "--out",
            str(tmp_path / "no" / "such" / "dir.json"),
        ],
        capsys,
        "cannot write the report",
    )


def test_argparse_errors_return_code(capsys):
    assert cli.main(["select", "x.csv"]) == 2  # --target is required
    assert "--target" in capsys.readouterr().err
    assert cli.main(["select", "x.csv", "--target", "y", "--method", "nope"]) == 2
    assert cli.main(["--help"]) == 0


@pytest.mark.parametrize("command", ["select", "demo", "stability", "randsel"])
def test_a_seed_outside_the_key_range_is_an_argument_error(command, capsys):
    """``--seed 2**63`` (or ``2**63 - 1``, which the demo increments) passed argparse and failed in
    ``jax.random.key`` after the data was loaded, with NumPy's ``OverflowError`` traceback."""
    extra = ["x.csv", "--target", "y"] if command in ("select", "stability", "randsel") else []
    for bad in (str(2**63), str(2**63 - 1), str(-(2**63) - 1)):
        assert cli.main([command, *extra, "--seed", bad]) == 2
        assert "argument --seed: must be an integer in [-2**63, 2**63 - 1)" in capsys.readouterr().err


# ---------------------------------------------------------------- snb


def test_snb_csv_with_text_labels(tmp_path, capsys):
    X, y = count_table()
    path = write_csv(
        tmp_path / "counts.csv",
        [f"w{j}" for j in range(X.shape[1])] + ["label"],
        [list(r) + [["neg", "pos"][c]] for r, c in zip(X.tolist(), y)],
    )
    out_json = tmp_path / "snb.json"
    code, out, err = run(["snb", path, "--target", "label", "-k", "3", "--out", str(out_json)], capsys)
    assert code == 0, err
    assert "selected 3 features" in out and "log-odds (pos vs neg)" in out
    rep = json.loads(out_json.read_text())
    assert rep["inputs"]["classes"] == ["neg", "pos"] and len(rep["selected"]) == 3
    assert rep["gap"] >= -1e-9 and 0.5 < rep["train_accuracy"] <= 1
    assert {"versions", "device", "timings", "settings"} <= set(rep)


def test_snb_csv_numeric_labels_written_differently_are_one_class(tmp_path):
    """Labels ``1`` and ``1.0`` (or ``01``) in one CSV column were two classes of text: four classes for
    a binary target, a report of the wrong classes; ``select`` reads them as one number."""
    import argparse

    from jaxknock.cli.snb import load_snb

    X, y = count_table(n=24, m=4)
    labels = [["0", "-0"][i % 2] if c == 0 else ["1", "1.0", "01"][i % 3] for i, c in enumerate(y)]
    path = write_csv(
        tmp_path / "counts.csv", ["a", "b", "c", "d", "label"], [r + [v] for r, v in zip(X.tolist(), labels)]
    )
    args = argparse.Namespace(data=path, target="label", labels=None, model="multinomial", k=2)
    names, X_read, y_read = load_snb(args)
    assert names == ["a", "b", "c", "d"] and np.unique(y_read).tolist() == ["0", "1"]
    np.testing.assert_array_equal(y_read == "1", y == 1)
    labels_file = tmp_path / "labels.txt"  # --labels FILE (one per line) for a sparse .npz: the same
    labels_file.write_text("\n".join(labels) + "\n")
    from jaxknock.cli.snb import load_labels

    assert np.unique(load_labels(labels_file)).tolist() == ["0", "1"]


def test_snb_sparse_npz_matches_library(tmp_path, capsys):
    sp = pytest.importorskip("scipy.sparse")
    import jaxknock as jk

    X, y = count_table()
    path = tmp_path / "m.npz"
    sp.save_npz(path, sp.csr_matrix(np.column_stack([X, y])))
    code, out, err = run(
        ["snb", str(path), "--target", str(X.shape[1]), "-k", "2", "--model", "bernoulli", "--quiet"], capsys
    )
    assert code == 2  # counts are not binary: refused with a clear message
    assert "--model bernoulli needs binary" in err
    Xb = (X > 1).astype(int)
    sp.save_npz(path, sp.csr_matrix(Xb))
    labels = tmp_path / "labels.npy"
    np.save(labels, y)
    code, out, err = run(["snb", str(path), "--labels", str(labels), "-k", "2", "--model", "bernoulli"], capsys)
    assert code == 0, err
    ref = np.flatnonzero(np.asarray(jk.sparse_naive_bayes(Xb, y, 2, model="bernoulli").value.support))
    for j in ref:
        assert f"x{j} " in out


@pytest.mark.parametrize(
    "case, argv_tail, fragments",
    [
        ("neg", ["--target", "label", "-k", "2"], ["negative values", ">= 0"]),
        ("single", ["--target", "label", "-k", "2"], ["single class"]),
        ("counts", ["--target", "label", "-k", "99"], ["-k must lie in [0, 3]"]),
        ("counts", ["--target", "lab", "-k", "1"], ["target column 'lab' is not in", "label"]),
        ("counts", ["-k", "1"], ["give the label column with --target"]),
        ("counts", ["--target", "label", "-k", "1", "--alpha", "-1"], ["--alpha must be >= 0"]),
        ("nan", ["--target", "label", "-k", "1"], ["missing/NaN/Inf"]),
        ("text", ["--target", "label", "-k", "1"], ["column 'b' is not numeric"]),
        ("sparse", ["-k", "1"], ["give --target COLUMN_INDEX", "--labels FILE"]),
        ("sparse", ["--labels", "LABELS", "-k", "1"], ["3 labels for 4 rows"]),
        ("badnpz", ["--target", "0", "-k", "1"], ["not a scipy.sparse .npz"]),
        ("json", ["--target", "0", "-k", "1"], ["unsupported file type '.json'"]),
    ],
)
def test_snb_bad_input(tmp_path, capsys, case, argv_tail, fragments):
    header = ["a", "b", "c", "label"]
    rows = {
        "neg": [[1, -2, 0, "x"], [0, 1, 1, "y"]],
        "single": [[1, 2, 0, "x"], [0, 1, 1, "x"]],
        "counts": [[1, 2, 0, "x"], [0, 1, 1, "y"]],
        "nan": [[1, "nan", 0, "x"], [0, 1, 1, "y"]],
        "text": [[1, "many", 0, "x"], [0, 1, 1, "y"]],
    }
    if case in rows:
        path = write_csv(tmp_path / f"{case}.csv", header, rows[case])
    elif case in ("sparse", "badnpz"):
        sp = pytest.importorskip("scipy.sparse")
        path = str(tmp_path / "m.npz")
        if case == "sparse":
            sp.save_npz(path, sp.csr_matrix(np.ones((4, 3))))
        else:
            np.savez(path, a=np.arange(3))
    else:
        path = str(tmp_path / "d.json")
        Path(path).write_text("{}")
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\na\n")
    argv_tail = [str(labels) if a == "LABELS" else a for a in argv_tail]
    assert_error(["snb", path, *argv_tail], capsys, *fragments)


# ---------------------------------------------------------------- bench


def test_bench_runs_scripts_small(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_ok.py").write_text("import sys\nprint('ran with', sys.argv[1:])\n")
    (bench / "bench_other.py").write_text("print('other')\n")
    code, out, err = run(["bench", "--bench-dir", str(bench), "--only", "ok"], capsys)
    assert code == 0, err
    assert "ran with ['--small']" in out and "bench_ok.py" in out and "other" not in out
    (bench / "bench_fail.py").write_text("raise SystemExit('boom')\n")
    code, out, err = run(["bench", "--bench-dir", str(bench), "--quiet"], capsys)
    assert code == 2
    assert "bench_fail.py failed: boom" in err and "1 benchmark(s) failed: bench_fail.py" in err
    assert "FAILED" in out and "ran with" not in out  # quiet: summary table only


def test_bench_bad_options(tmp_path, capsys):
    assert_error(["bench", "--bench-dir", str(tmp_path / "none")], capsys, "does not exist")
    assert_error(["bench", "--only", "nope"], capsys, "unknown benchmark(s) ['nope']", "sdp")
    assert_error(["bench", "--bench-dir", str(tmp_path)], capsys, "no bench_*.py scripts")


def test_real_benchmarks_accept_small_flag():
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        assert "--small" in script.read_text(), script.name


# ---------------------------------------------------------------- demo


def test_demo_plot_without_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert_error(["demo", "--plot", str(tmp_path / "x.png")], capsys, "needs matplotlib", "pip install matplotlib")


def test_demo_bad_arguments(capsys):
    assert_error(["demo", "--p", "0"], capsys, "--p must be a positive integer")
    assert_error(["demo", "--n", "20", "--p", "10", "--rank", "10"], capsys, "--rank < min(--n, --p)")


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--fdr", "1.5"], "--fdr must lie strictly between 0 and 1"),
        (["--amplitude", "nan"], "--amplitude must be a finite number"),
        (["--n", "4"], "--n must be at least 10"),
        (["--plot", "no/such/folder/out.png"], "cannot write the plot to no/such/folder/out.png"),
    ],
)
def test_demo_bad_options_fail_before_the_work(monkeypatch, capsys, extra, fragment):
    """``--fdr 1.5`` failed after the covariance and solver tables (as knockoff_filter's ``fdr``), ``--amplitude
    nan`` as "y contains non-finite value(s)", an unwritable ``--plot`` after everything had run."""
    from jaxknock.cli import demo

    monkeypatch.setattr(demo, "_require_matplotlib", lambda option: None)
    code, out, err = run(["demo", "--n", "20", "--p", "6", "--rank", "2", "--signals", "2", "--quiet", *extra], capsys)
    assert code == 2 and out == "" and err.startswith("jaxknock: error: ") and fragment in err, (out, err)


# the small demo itself (with --plot when matplotlib is installed) runs in tests/test_readme.py


# ---------------------------------------------------------------- progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_only_on_tty():
    tty = FakeTTY()
    with Progress(4, "replicates", stream=tty) as bar:
        for _ in range(4):
            bar.update()
    text = tty.getvalue()
    assert "[" + "#" * 30 + "] 4/4 replicates" in text and text.endswith("\n") and "\r" in text
    pipe = io.StringIO()
    with Progress(4, "replicates", stream=pipe) as bar:
        bar.update(4)
    assert pipe.getvalue() == ""
    quiet = FakeTTY()
    with Progress(4, stream=quiet, enabled=progress_enabled(quiet, quiet=True)) as bar:
        bar.update()
    assert quiet.getvalue() == ""
    assert progress_enabled(FakeTTY()) and not progress_enabled(io.StringIO())


def test_demo_progress_is_drawn_where_stderr_is_a_terminal(monkeypatch):
    """The demo's solver bar is drawn on stderr but was enabled when *stdout* was a terminal: ``jaxknock demo
    2> log`` wrote the carriage-return redraws into the log (and a terminal stderr with stdout piped got none)."""
    import types

    from jaxknock.cli import build_parser, demo

    class Stop(Exception):
        pass

    seen = []

    def bar(total, desc, enabled):
        seen.append(enabled)
        raise Stop

    import jaxknock

    p = 4  # numpy stand-ins, no JAX work before the bar: the test is about its stream only
    data = (np.ones((10, p)), np.ones(10), np.ones(p), np.eye(p))
    monkeypatch.setattr(demo, "synthetic_factor_data", lambda *a: data)
    fake = (types.SimpleNamespace(dense=lambda: np.eye(p)), 0.0)
    monkeypatch.setattr(demo, "timed", lambda fn, *a: ((np.eye(p), 0.0) if fn.__name__ == "ledoit_wolf" else fake, 0.0))
    monkeypatch.setattr(jaxknock, "to_correlation", lambda S: S)
    monkeypatch.setattr(demo, "Progress", bar)
    args = build_parser().parse_args(["demo", "--n", "10", "--p", str(p), "--rank", "1", "--signals", "1"])
    for out, err in ((FakeTTY(), io.StringIO()), (io.StringIO(), FakeTTY())):
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        with pytest.raises(Stop):
            demo.run_demo(args)
    assert seen == [False, True]


def test_select_progress_silent_when_not_tty(reg_csv, capsys):
    # capsys streams are not TTYs: no progress characters in either stream
    code, out, err = run(["select", reg_csv, "--target", "y", "--method", "equi", "--statistic", "correlation"], capsys)
    assert code == 0 and "\r" not in out + err and "#" not in err


def test_corrupt_npz_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"\x00garbage" * 40)
    assert_error(["snb", str(bad), "--target", "0", "-k", "2"], capsys, str(bad), "not a valid .npz file")
    assert_error(["select", str(bad), "--target", "x0"], capsys, str(bad), "not a valid .npz file")


def test_snb_continuous_target_is_one_line_naming_the_target(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, size=(30, 4))
    target = rng.normal(size=30).round(3)
    path = tmp_path / "cont.csv"
    rows = ["a,b,c,d,score"] + [",".join(map(str, list(x) + [t])) for x, t in zip(X, target)]
    path.write_text("\n".join(rows) + "\n")
    assert_error(["snb", str(path), "--target", "score", "-k", "2"], capsys, "target column 'score'", "continuous")


_CACHE_CHILD = """
import sys, jax
jax.config.update("jax_enable_x64", True)
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
import numpy as np, jaxknock
assert jaxknock.enable_compilation_cache(sys.argv[1]) == sys.argv[1]
rng = np.random.default_rng(0)
X = rng.standard_normal((40, 12)); y = X[:, 0] + rng.standard_normal(40)
sol = jaxknock.lasso_cv(X, y, num_lambdas=8, folds=3)
print(len(hits), float(sol.stats["lam"]))
"""


def test_enable_compilation_cache_second_process_loads_programs(tmp_path):
    """``jaxknock.enable_compilation_cache``: a second process on the same shapes reads the
    compiled programs from disk (JAX's cache-hit events) and gets the same answer."""
    env = {k: v for k, v in os.environ.items() if k != "JAXKNOCK_NO_COMPILE_CACHE"}
    cmd = [sys.executable, "-c", _CACHE_CHILD, str(tmp_path / "cache")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert any((tmp_path / "cache").iterdir())
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    hits1, lam1 = first.stdout.split()
    hits2, lam2 = second.stdout.split()
    assert int(hits1) == 0 and int(hits2) >= 1
    assert lam1 == lam2
    # the engine's traced program is kept too (jaxknock/_aot.py): the second process did not trace it
    assert len(list((tmp_path / "cache" / "jaxknock-exports").glob("*.pkl"))) == 1
    # and the engine's capacities (jaxknock/_capacity.py): the second process starts where the first ended
    assert (tmp_path / "cache" / "jaxknock-capacity.json").is_file()


def _exported_again(*args, **kwargs):
    """Stands in for ``_aot.export_program`` where a program must be loaded from disk, not exported."""
    raise AssertionError("exported again")


def test_exported_programs_on_disk_give_the_plain_answer(tmp_path, monkeypatch):
    """``_aot.call``: exported once, loaded from disk by a "fresh process" (nothing in memory, exporting
    forbidden), the same answer as the plain call; shapes and static arguments are in the key; inside
    ``jit`` the plain call; a failed export is remembered and not retried."""
    import jax

    from jaxknock import _aot
    from jaxknock.l1 import working_set

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 15))
    y = X[:, 0] - X[:, 1] + rng.standard_normal(60)
    cv = lambda X, y: working_set.l1_cv(X, y, folds=3, num_lambdas=12)
    plain, plain45 = cv(X, y), cv(X[:45], y[:45])  # the tests run without the compilation cache: plain calls
    monkeypatch.setattr(_aot, "export_directory", lambda: tmp_path)
    monkeypatch.setattr(_aot, "LOADED", {})
    first = cv(X, y)
    assert len(list(tmp_path.glob("*.pkl"))) == 1

    monkeypatch.setattr(_aot, "LOADED", {})
    with monkeypatch.context() as m:
        m.setattr(_aot, "export_program", _exported_again)
        second = cv(X, y)
    for sol in (first, second):
        np.testing.assert_array_equal(np.asarray(sol.value), np.asarray(plain.value))
        assert float(sol.stats["lam"]) == float(plain.stats["lam"]) and int(sol.result) == int(plain.result)
    # shapes and static arguments are in the key (a small program: exporting it is cheap); inside a
    # trace the plain call, no entry
    cumsum = jax.jit(jax.numpy.cumsum, static_argnames="axis")
    for x, axis in ((X, 0), (X[:50], 0), (X, 1), (X, 1)):
        np.testing.assert_array_equal(np.asarray(_aot.call(cumsum, x, axis=axis)), np.asarray(cumsum(x, axis=axis)))
    assert len(list(tmp_path.glob("*.pkl"))) == 4
    jax.jit(lambda x: _aot.call(cumsum, x, axis=0))(X[:40])
    assert len(list(tmp_path.glob("*.pkl"))) == 4

    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("cannot export")

    monkeypatch.setattr(_aot, "export_program", failing)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(cv(X[:45], y[:45]).value), np.asarray(plain45.value))
    assert len(calls) == 1 and len(list(tmp_path.glob("*.failed"))) == 1


def test_the_s_vector_solvers_programs_are_exported_too(tmp_path, monkeypatch):
    """The default S-vector solvers (dense and factor-model MVR, whose traced programs cost a fresh process
    about 0.2 s of its first call with the compilation cache on) go through ``_aot.call``: one entry each,
    loaded again without exporting, and the plain call's ``s``."""
    import jax.numpy as jnp

    import jaxknock
    from jaxknock import _aot

    rng = np.random.default_rng(1)
    U = rng.standard_normal((30, 2)) * 0.5
    model = jaxknock.FactorModel(jnp.full(30, 0.6), jnp.asarray(U))
    Sigma = model.dense()
    plain = [jaxknock.mvr(Sigma), jaxknock.mvr_factor(model)]
    monkeypatch.setattr(_aot, "export_directory", lambda: tmp_path)
    monkeypatch.setattr(_aot, "LOADED", {})
    exported = [jaxknock.mvr(Sigma), jaxknock.mvr_factor(model)]
    assert len(list(tmp_path.glob("*.pkl"))) == 2
    monkeypatch.setattr(_aot, "LOADED", {})  # a "fresh process": loads from disk, must not export
    monkeypatch.setattr(_aot, "export_program", _exported_again)
    loaded = [jaxknock.mvr(Sigma), jaxknock.mvr_factor(model)]
    assert len(list(tmp_path.glob("*.pkl"))) == 2
    for sol, ref in zip(exported + loaded, plain + plain):
        np.testing.assert_array_equal(np.asarray(sol.value), np.asarray(ref.value))
        assert int(sol.result) == int(ref.result) == 0


def _exported_then_loaded(run, tmp_path, monkeypatch):
    """``(names exported, first result, second result)``: ``run()`` with ``_aot``'s directory at ``tmp_path``,
    once exporting (no export may fail), then as a "fresh process" that must load every program from disk."""
    from jaxknock import _aot

    monkeypatch.setattr(_aot, "export_directory", lambda: tmp_path)
    monkeypatch.setattr(_aot, "LOADED", {})
    exported = []
    export = _aot.export_program
    with monkeypatch.context() as m:
        m.setattr(_aot, "export_program", lambda fn, *a: exported.append(fn.__name__) or export(fn, *a))
        first = run()
    assert not list(tmp_path.glob("*.failed"))
    monkeypatch.setattr(_aot, "LOADED", {})  # a "fresh process": loads from disk, must not export
    monkeypatch.setattr(_aot, "export_program", _exported_again)
    return exported, first, run()


@pytest.mark.parametrize("statistic", ["lsm", "lcd_fixed_lam"])
def test_the_other_lasso_statistics_programs_are_exported_too(statistic, tmp_path, monkeypatch):
    """The signed-max statistic's path program and scores, and the LCD at a given ``lam`` (its fixed-penalty
    program), go through ``_aot.call`` as the default LCD's CV does: exported, loaded again without exporting,
    and the plain call's ``W``."""
    from jaxknock import statistics

    rng = np.random.default_rng(3)
    Xk = rng.standard_normal((50, 8))
    y = Xk[:, 0] + 0.3 * rng.standard_normal(50)
    if statistic == "lsm":
        run, names = lambda: statistics.lsm(Xk, y, num_lambdas=20, engine="classic"), {"_lsm_jit", "_lsm_statistics"}
    else:
        run, names = lambda: statistics.lcd(Xk, y, lam=0.05), {"_lcd_fixed_jit", "_lcd_statistics"}
    plain = run()
    exported, first, second = _exported_then_loaded(run, tmp_path, monkeypatch)
    assert names <= set(exported), exported
    for sol in (first, second):
        np.testing.assert_array_equal(np.asarray(sol.value), np.asarray(plain.value))
        assert int(sol.result) == int(plain.result) == 0


def test_the_filters_stage_programs_are_exported_too(tmp_path, monkeypatch):
    """``knockoff_filter``'s stage programs (standardisation, Ledoit-Wolf, sampling, canonical columns, the
    CV engine, the MVR, the LCD scores: with the cache on, their tracing was half of a fresh process's first
    call) go through ``_aot.call``: each is exported (none fails), then loaded without exporting, and ``W``
    and the selection are the plain call's."""
    import jax

    import jaxknock

    rng = np.random.default_rng(2)
    X = rng.standard_normal((60, 6))
    y = X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(60)
    run = lambda: jaxknock.knockoff_filter(jax.random.key(0), X, y, fdr=0.2)
    plain = run()
    exported, first, second = _exported_then_loaded(run, tmp_path, monkeypatch)
    stages = {"_standardise_and_split", "_lw_correlation", "_mrc_jit", "_plan_and_draw", "canonical_columns"}
    assert stages | {"cv_jit", "_lcd_statistics"} <= set(exported), exported
    assert len(list(tmp_path.glob("*.pkl"))) == len(exported)
    for sel in (first, second):
        np.testing.assert_array_equal(np.asarray(sel.W), np.asarray(plain.W))
        np.testing.assert_array_equal(sel.selected, plain.selected)


def test_exported_programs_are_keyed_by_the_settings_that_change_them(tmp_path, monkeypatch):
    """A program exported under one ``jax_threefry_partitionable`` was called under the other (the cached
    knockoffs' random bits were not the plain call's); the default matmul precision is in the key too."""
    import jax

    from jaxknock import _aot

    monkeypatch.setattr(_aot, "export_directory", lambda: tmp_path)
    monkeypatch.setattr(_aot, "LOADED", {})
    draw = jax.jit(lambda k: jax.random.bits(k, (4,)))
    key = jax.random.key(0)
    bits = []
    for setting in (True, False):
        with jax.threefry_partitionable(setting):
            bits.append(np.asarray(_aot.call(draw, key)))
    assert not np.array_equal(*bits) and len(list(tmp_path.glob("*.pkl"))) == 2
    with jax.default_matmul_precision("highest"):
        highest = _aot.program_key(draw, (key,), {})
    assert highest != _aot.program_key(draw, (key,), {})


def test_a_failed_export_in_an_unwritable_directory_is_not_retried(tmp_path, monkeypatch):
    """Where neither the entry nor the ``.failed`` marker could be written (a read-only cache directory), every
    call traced and exported the program again before falling back to the plain call."""
    import jax

    from jaxknock import _aot

    blocker = tmp_path / "file"
    blocker.write_text("")  # its "subdirectory" cannot be created, even by root
    monkeypatch.setattr(_aot, "export_directory", lambda: blocker / "exports")
    monkeypatch.setattr(_aot, "LOADED", {})
    monkeypatch.setattr(_aot, "FAILED", set(), raising=False)
    calls = []
    real = _aot.export_program
    monkeypatch.setattr(_aot, "export_program", lambda *a: calls.append(1) or real(*a))
    cumsum = jax.jit(jax.numpy.cumsum)
    x = np.arange(5.0)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_aot.call(cumsum, x)), np.cumsum(x))
    assert len(calls) == 1


def test_a_cache_directory_under_home_is_expanded(tmp_path, monkeypatch):
    """``JAXKNOCK_CACHE_DIR="~/cache"`` (quoted in a shell, or a Dockerfile ENV line) made a folder named ``~``
    in the working directory."""
    from jaxknock.cache import compilation_cache_dir

    monkeypatch.delenv("JAXKNOCK_NO_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JAXKNOCK_CACHE_DIR", "~/cache")
    assert compilation_cache_dir() == str(tmp_path / "cache")
    monkeypatch.delenv("JAXKNOCK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert compilation_cache_dir() == str(tmp_path / "xdg" / "jaxknock" / "jax")


def test_a_read_only_cache_directory_is_not_enabled(tmp_path, monkeypatch):
    """An existing directory the user cannot write to was enabled all the same: JAX then warned "Error writing
    persistent compilation cache entry" at every compilation (the docstring promises ``None``)."""
    import jax

    from jaxknock import cache

    monkeypatch.delenv("JAXKNOCK_NO_COMPILE_CACHE", raising=False)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(tmp_path) else real(p, mode, **kw))
    before = jax.config.jax_compilation_cache_dir
    got, now = cache.enable_compilation_cache(tmp_path), jax.config.jax_compilation_cache_dir
    if now != before:  # the old behaviour: put the setting back for the other tests
        from jax.experimental.compilation_cache import compilation_cache as cc

        jax.config.update("jax_compilation_cache_dir", before)
        cc.reset_cache()
    assert got is None and now == before


def test_a_report_path_naming_the_input_is_refused(reg_csv, tmp_path, capsys):
    """``--out`` naming the data file ran the selection and then overwrote the table with the JSON report."""
    data = tmp_path / "d.csv"
    data.write_bytes(Path(reg_csv).read_bytes())
    before = data.read_bytes()
    for out in (str(data), str(tmp_path / "." / "d.csv")):
        assert_error(["select", str(data), "--target", "y", "--out", out], capsys, "the report would overwrite it")
    assert data.read_bytes() == before


def test_csv_error_names_the_files_line_after_blank_lines(tmp_path, capsys):
    """A short row after blank lines was reported at its position among the non-blank rows (line 3, not 5)."""
    path = tmp_path / "gaps.csv"
    path.write_text("a,b,y\n1,2,3\n\n\n4,5\n6,7,8\n")
    assert_error(["select", str(path), "--target", "y"], capsys, "line 5 has 2 fields but the header has 3")


@pytest.mark.parametrize("first", ["1.5,,3", "1.5,NA,3"])
def test_a_headerless_csv_with_a_missing_value_in_its_first_row(tmp_path, capsys, first):
    """The first data row of a file without a header, with a missing value, was read as a header: "column 2 of
    the header has no name", or a column named "NA"."""
    path = tmp_path / "nohead.csv"
    path.write_text(first + "\n4,5,6\n7,8,9\n")
    assert_error(["select", str(path), "--target", "y"], capsys, "has no header row")
    path.write_text(",0,1\n0,5,6\n1,8,9\n")  # pandas' to_csv of unnamed columns: its index column has no name
    assert_error(["select", str(path), "--target", "y"], capsys, "target column 'y' is not in", "available: 0, 1")


def test_an_unnamed_first_column_holds_row_labels(tmp_path, capsys):
    """pandas' ``df.to_csv(path)`` (index on, the default) and R's ``write.csv`` start the header with an empty
    name: it was "column 1 of the header has no name; name every column", and naming it, as told, made the row
    numbers (or sample ids) a feature column. Excel's trailing empty columns were refused the same way."""
    from jaxknock.cli.tables import load_table

    path = tmp_path / "frame.csv"
    path.write_text('"","a","y"\n"s1",1.5,2\n"s2",2.5,3\n"s3",0.5,1\n')
    names, X, _ = load_table(path, target="y")
    assert names == ["a", "y"]
    np.testing.assert_array_equal(X, [[1.5, 2], [2.5, 3], [0.5, 1]])
    path.write_text("a,y,,\n1.5,2,,\n2.5,3,\n0.5,1,,\n")  # Excel's trailing empty columns: no name, no data
    names, X, _ = load_table(path, target="y")
    assert names == ["a", "y"]
    np.testing.assert_array_equal(X, [[1.5, 2], [2.5, 3], [0.5, 1]])
    path.write_text("a,y,\n1.5,2,\n2.5,3,7\n")  # data under no name: still refused
    assert_error(["select", str(path), "--target", "y"], capsys, "column 3 of the header has no name")
    path.write_text("a,,y\n0,1,2\n")  # any other unnamed column is still refused
    assert_error(["select", str(path), "--target", "y"], capsys, "column 2 of the header has no name")
    path.write_text(",a,y\n0,1,2\n1,3\n")  # and a short row counts the fields of the file
    assert_error(["select", str(path), "--target", "y"], capsys, "line 3 has 2 fields but the header has 3")


def test_a_missing_labels_file_is_named(tmp_path):
    """``snb --labels nope.txt`` said "data file 'nope.txt' does not exist" (the data file was there)."""
    from jaxknock.cli.common import CLIError
    from jaxknock.cli.snb import load_labels

    with pytest.raises(CLIError, match="--labels file .*nope.txt' does not exist"):
        load_labels(tmp_path / "nope.txt")


def test_a_missing_groups_file_is_named(tmp_path, capsys):
    """``--groups nope.txt`` ended with numpy's "nope.txt not found.", naming neither the option nor the problem."""
    X = np.random.default_rng(0).standard_normal((12, 4))
    np.savez(tmp_path / "t.npz", X=X, columns=np.array(["a", "b", "c", "y"]))
    argv = [
        "select",
        str(tmp_path / "t.npz"),
        "--target",
        "y",
        "--method",
        "equi",
        "--groups",
        str(tmp_path / "nope.txt"),
    ]
    assert_error(argv, capsys, "--groups file", "does not exist")


def test_npz_table_with_a_separate_target_array(tmp_path, capsys):
    """``numpy.savez(path, X=X, y=y)``: the 1-D ``y`` was dropped next to the 2-D table, and ``--target y``
    said "target column 'y' is not in" the file; it is the table's last column now (other 1-D arrays stay out)."""
    from jaxknock.cli.tables import load_table, resolve_target

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((12, 3)), rng.standard_normal(12)
    path = tmp_path / "xy.npz"
    np.savez(path, X=X, y=y, ids=np.arange(12.0), columns=np.array(["a", "b", "c"]))
    names, table, _ = load_table(path, target="y")
    assert names == ["a", "b", "c", "y"] and resolve_target(names, "y", path) == 3
    np.testing.assert_array_equal(table, np.column_stack([X, y]))
    assert load_table(path, target="b")[0] == ["a", "b", "c"]
    np.savez(tmp_path / "short.npz", X=X, y=y[:-1])
    assert_error(["select", str(tmp_path / "short.npz"), "--target", "y"], capsys, "'y' has 11 entries for the 12 rows")


def test_npz_duplicate_column_names_are_refused(tmp_path, capsys):
    """``columns`` with a name twice was taken (a CSV header is refused): the report's names were ambiguous
    and its ``W_mean`` by name kept one of the two."""
    X = np.random.default_rng(0).standard_normal((12, 4))
    np.savez(tmp_path / "dup.npz", X=X, columns=np.array(["a", "b", "a", "y"]))
    assert_error(["select", str(tmp_path / "dup.npz"), "--target", "y"], capsys, "duplicate column name(s) ['a']")


def test_a_closed_stdout_pipe_still_writes_the_report(tmp_path, monkeypatch):
    """``jaxknock ... --out r.json | head -1``: once ``head`` had exited, the next ``print`` raised
    ``BrokenPipeError``: "jaxknock: error: [Errno 32] Broken pipe", exit code 2 and no report."""
    from jaxknock.cli import parser
    from jaxknock.cli.report import print_table, write_json

    def command(args):  # a subcommand's output (a table), then its report: without the JAX work
        print("header line")
        print_table([[f"x{j}", "1.0"] for j in range(2000)], ["feature", "W"])
        write_json(args.out, {"command": "snb"})
        return 0

    monkeypatch.setattr(parser, "run_snb", command)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    stdout = io.TextIOWrapper(os.fdopen(write_end, "wb"))
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        code = cli.main(["snb", "data.csv", "-k", "2", "--out", str(tmp_path / "r.json")])
    finally:
        monkeypatch.setattr(sys, "stdout", sys.__stdout__)
        stdout.close()  # its descriptor now points at os.devnull: closing flushes nothing into the dead pipe
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text()) == {"command": "snb"}


def test_a_target_of_several_text_labels_is_named_as_the_target(tmp_path, capsys):
    """``y`` = ``a`` / ``b`` / ``c`` read "column 'y' is not numeric (row 1 has 'a'); encode it as numbers or
    drop the column": the target called a column to drop, and 0 / 1 / 2 would be fitted as a measurement."""
    rng = np.random.default_rng(0)
    rows = [[*rng.normal(size=3).round(3), "abc"[i % 3]] for i in range(30)]
    path = write_csv(tmp_path / "three.csv", ["a", "b", "c", "y"], rows)
    for command in ("select", "stability"):
        assert_error([command, path, "--target", "y"], capsys, "target column 'y' holds 3 text labels (a, b, c)")
    for i, r in enumerate(rows):  # a numeric target with a stray word: that row is named, as before
        r[3] = "oops" if i == 4 else f"{rng.normal():.3f}"
    path = write_csv(tmp_path / "typo.csv", ["a", "b", "c", "y"], rows)
    assert_error(["select", path, "--target", "y"], capsys, "column 'y' is not numeric (row 5 has 'oops')")


def test_a_target_of_integer_classes_gets_a_note(tmp_path, capsys):
    """A 0 / 1 / 2 target (class labels) was fitted as a continuous response without a word: the CLI reads every
    column as float, which knockoff_filter's refusal of integer class labels never sees (KnockoffSelector warns)."""
    from jaxknock.cli import build_parser
    from jaxknock.cli import stability as stability_cli
    from jaxknock.cli.select import _load_design

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3)).round(3)
    for target, noted in ((np.arange(30) % 3, True), (rng.normal(size=30).round(3), False), (np.arange(30) % 2, False)):
        path = write_csv(tmp_path / "t.csv", ["a", "b", "c", "y"], np.column_stack([X, target]).tolist())
        _load_design(build_parser().parse_args(["select", path, "--target", "y"]), "auto")
        stability_cli._load(build_parser().parse_args(["stability", path, "--target", "y"]))
        err = capsys.readouterr().err
        note = "note: target 'y' holds 3 distinct whole numbers (0, 1, 2), which look like class labels"
        assert err.count(note) == (2 if noted else 0), err


def test_space_delimited_tables_and_r_row_names_are_read(tmp_path):
    """``numpy.savetxt`` / R's ``write.table`` separate columns by spaces: the table was one column named
    "a b y" ("target column 'y' is not in ..."); R's row names (a header one name short of every row) were
    "line 2 has 4 fields but the header has 3"."""
    from jaxknock.cli.tables import load_table

    rng = np.random.default_rng(0)
    table = rng.normal(size=(12, 3))
    np.savetxt(tmp_path / "savetxt.txt", table, header="a b y")  # "# a b y", then the rows
    aligned = "".join(" ".join(f"{v:10.4f}" for v in row) + "\n" for row in table)
    (tmp_path / "aligned.txt").write_text("         a          b          y\n" + aligned)
    rows = "".join(f'"{i + 1}" ' + " ".join(repr(v) for v in row) + "\n" for i, row in enumerate(table.tolist()))
    (tmp_path / "write_table.txt").write_text('"a" "b" "y"\n' + rows)
    (tmp_path / "row_names.csv").write_text("a,b,y\n" + rows.replace(" ", ","))
    for name, decimals in (("savetxt.txt", 12), ("aligned.txt", 4), ("write_table.txt", 12), ("row_names.csv", 12)):
        names, X, levels = load_table(tmp_path / name, target="y")
        assert names == ["a", "b", "y"] and levels is None, (name, names)
        np.testing.assert_allclose(X, table.round(decimals), atol=10.0**-decimals, err_msg=name)


def test_labels_and_groups_files_with_a_byte_order_mark(tmp_path):
    """A ``--labels`` / ``--groups`` file saved by a Windows editor starts with a UTF-8 byte-order mark: the first
    label was the class ``'\\ufeffneg'`` (three classes for two), the first group id the name ``'\\ufeff0'``
    (a group of its own: the group-level FDR counted the wrong units)."""
    from jaxknock.cli.select import _load_groups
    from jaxknock.cli.snb import load_labels

    labels = tmp_path / "labels.txt"
    labels.write_text("neg\r\npos\r\nneg\r\n", encoding="utf-8-sig")
    assert load_labels(labels).tolist() == ["neg", "pos", "neg"]
    groups = tmp_path / "groups.txt"
    groups.write_text("0 0 1 1\n", encoding="utf-8-sig")
    assert _load_groups(groups, 4).tolist() == [0, 0, 1, 1]
    groups.write_text("BRCA1 BRCA1 TP53 TP53\n", encoding="utf-8-sig")
    assert _load_groups(groups, 4).tolist() == ["BRCA1", "BRCA1", "TP53", "TP53"]


def test_npz_with_an_object_array_names_it(tmp_path, capsys):
    """``numpy.savez(path, X=df.values, columns=df.columns.values)``, pandas' names as an object array, read
    "is not a readable .npz archive (...); save it with numpy.savez", which is what the user had done."""
    path = tmp_path / "frame.npz"
    np.savez(path, X=np.ones((12, 3)), columns=np.array(["a", "b", "y"], dtype=object))
    assert_error(["select", str(path), "--target", "y"], capsys, "array 'columns' holds Python objects (dtype object)")
    np.save(tmp_path / "table.npy", np.ones((12, 3), dtype=object), allow_pickle=True)  # and a .npy: "save it
    assert_error(["select", str(tmp_path / "table.npy"), "--target", "2"], capsys, "holds Python objects")  # with
    labels = tmp_path / "labels.npy"  # numpy.save", also what the user had done
    np.save(labels, np.array(["a", "b"] * 6, dtype=object), allow_pickle=True)
    sp = pytest.importorskip("scipy.sparse")
    sp.save_npz(tmp_path / "counts.npz", sp.csr_matrix(np.ones((12, 3))))
    argv = ["snb", str(tmp_path / "counts.npz"), "--labels", str(labels), "-k", "1"]
    assert_error(argv, capsys, "holds Python objects", "numpy.asarray(labels, dtype=str)")


def test_version_flag(capsys):
    """``jaxknock --version`` was "the following arguments are required: command" and exit code 2."""
    import jaxknock

    code, out, err = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"jaxknock {jaxknock.__version__}", (out, err)


def test_gzip_compressed_text_tables_are_read(tmp_path, capsys):
    """``counts.tsv.gz`` / ``data.csv.gz`` (how genomics tables ship) was "unsupported file type '.gz'"."""
    import gzip

    from jaxknock.cli.snb import load_snb
    from jaxknock.cli.tables import load_table

    rng = np.random.default_rng(0)
    table = rng.normal(size=(12, 3)).round(6)
    text = "a\tb\ty\n" + "".join("\t".join(map(repr, row)) + "\n" for row in table.tolist())
    with gzip.open(tmp_path / "data.tsv.gz", "wt") as fh:
        fh.write(text)
    names, X, _ = load_table(tmp_path / "data.tsv.gz", target="y")
    assert names == ["a", "b", "y"]
    np.testing.assert_array_equal(X, table)
    X, y = count_table(n=20, m=3)
    with gzip.open(tmp_path / "counts.CSV.GZ", "wt") as fh:
        fh.write("a,b,c,label\n" + "".join(",".join(map(str, [*r, c])) + "\n" for r, c in zip(X.tolist(), y)))
    args = build_parser_args(["snb", str(tmp_path / "counts.CSV.GZ"), "--target", "label", "-k", "1"])
    names, X_read, y_read = load_snb(args)
    assert names == ["a", "b", "c"] and X_read.shape == (20, 3) and sorted(set(y_read.tolist())) == ["0", "1"]
    (tmp_path / "bad.csv.gz").write_bytes(b"not gzip at all")
    assert_error(["select", str(tmp_path / "bad.csv.gz"), "--target", "y"], capsys, "is not a readable gzip file")
    (tmp_path / "x.npy.gz").write_bytes(b"")
    assert_error(["select", str(tmp_path / "x.npy.gz"), "--target", "y"], capsys, "unsupported file type '.gz'")


def build_parser_args(argv):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("command", ["select", "stability"])
def test_out_dash_writes_the_report_to_stdout_and_nothing_else(command, reg_csv, tmp_path, capsys, monkeypatch):
    """``--out -`` wrote a file named ``-`` in the working folder; now stdout is the JSON report alone."""
    monkeypatch.chdir(tmp_path)
    extra = ["--method", "equi", "--statistic", "correlation"] if command == "select" else ["--subsamples", "10"]
    code, out, err = run([command, reg_csv, "--target", "y", "--out", "-", *extra], capsys)
    assert code == 0, err
    report = json.loads(out)  # the whole of stdout parses: the tables went to stderr
    assert report["command"] == command
    assert "report written to standard output" in err
    assert not (tmp_path / "-").exists()
