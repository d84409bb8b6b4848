"""knockoff_filter / CLI / KnockoffSelector with groups= and num_knockoffs= (small, closed-form statistics)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxknock
from jaxknock.cli import main
from jaxknock.sklearn import KnockoffSelector

N, P = 240, 24


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((N, P // 2))
    X = np.repeat(Z, 2, axis=1) + 0.7 * rng.standard_normal((N, P))  # pairs of correlated features
    beta = np.zeros(P)
    beta[[0, 4, 9, 14, 18, 22]] = 1.0
    y = X @ beta + rng.standard_normal(N)
    groups = np.repeat(np.arange(P // 2) * 10, 2)  # labels 0, 10, 20, ...
    return X, y, groups


def test_knockoff_filter_groups(data):
    X, y, groups = data
    sel = jaxknock.knockoff_filter(
        jax.random.key(0), X, y, fdr=0.3, s_method="equicorrelated", statistic="correlation", groups=groups
    )
    assert sel.W.shape == (1, P // 2)
    assert set(sel.selected_groups.tolist()) <= set(groups.tolist())
    # the feature mask is the union of the selected groups
    expected = np.isin(groups, sel.selected_groups)
    np.testing.assert_array_equal(sel.mask, expected)
    assert len(sel.selected_groups) >= 3  # strong signals: most signal groups found
    S = np.asarray(sel.s_solution.value.dense())
    assert np.all(S[groups[:, None] != groups[None, :]] == 0)
    # q = 0.05 needs 20 positive statistics, more than the 12 groups: the reason counts groups (it said "features")
    none = jaxknock.knockoff_filter(
        jax.random.key(0), X, y, fdr=0.05, s_method="equicorrelated", statistic="correlation", groups=groups
    )
    assert len(none.selected_groups) == 0 and "20 groups with W_j > 0" in none.explanation


def test_knockoff_filter_multi(data):
    X, y, _ = data
    sel = jaxknock.knockoff_filter(
        jax.random.key(0), X, y, fdr=0.3, s_method="equicorrelated", statistic="correlation", num_knockoffs=3
    )
    assert sel.selected_groups is None and sel.W.shape == (1, P)
    assert sel.settings["num_knockoffs"] == 3
    assert np.isin([0, 4, 9, 14, 18, 22], sel.selected).sum() >= 3
    with pytest.raises(ValueError, match="num_knockoffs must be an integer >= 1"):
        jaxknock.knockoff_filter(jax.random.key(0), X, y, num_knockoffs=0)
    # True == 1 took the single-knockoff path unchecked (KnockoffSelector and the samplers refuse it)
    for bad in (True, np.bool_(True)):
        with pytest.raises(TypeError, match="num_knockoffs must be an integer"):
            jaxknock.knockoff_filter(jax.random.key(0), X, y, num_knockoffs=bad)
        with pytest.raises(TypeError, match="num_knockoffs"):
            KnockoffSelector(num_knockoffs=bad).fit(X, y)
    again = jaxknock.knockoff_filter(
        jax.random.key(0), X, y, fdr=0.3, s_method="equicorrelated", statistic="correlation", num_knockoffs=np.int64(3)
    )
    np.testing.assert_array_equal(again.selected, sel.selected)
    with pytest.raises(ValueError, match="groups has length 23"):
        jaxknock.knockoff_filter(jax.random.key(0), X, y, groups=np.arange(P - 1))
    with pytest.raises(TypeError, match="integer group ids"):
        jaxknock.knockoff_filter(jax.random.key(0), X, y, groups=np.arange(P) + 0.5)
    with pytest.raises(ValueError, match="s_method must be one of"):
        jaxknock.knockoff_filter(jax.random.key(0), X, y, groups=np.arange(P), s_method="sdp_factor")


def test_cli_groups_and_knockoffs(data, tmp_path, capsys):
    X, y, groups = data
    path = tmp_path / "d.csv"
    names = [f"x{j}" for j in range(P)] + ["y"]
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header=",".join(names), comments="")
    gfile = tmp_path / "groups.txt"
    np.savetxt(gfile, groups, fmt="%d")
    out = tmp_path / "r.json"
    rc = main(
        [
            "select",
            str(path),
            "--target",
            "y",
            "--method",
            "equi",
            "--statistic",
            "correlation",
            "--fdr",
            "0.3",
            "--groups",
            str(gfile),
            "--knockoffs",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    import json

    report = json.loads(out.read_text())
    assert report["settings"]["num_knockoffs"] == 2
    assert report["selected_groups"] is not None
    np.save(tmp_path / "bad.npy", np.arange(P - 1))
    rc = main(["select", str(path), "--target", "y", "--groups", str(tmp_path / "bad.npy"), "--quiet"])
    assert rc == 2 and "23 group ids but the table has 24 features" in capsys.readouterr().err
    for bad in ("inf", "1e19"):  # both were cast to -2^63: one group merged from every such id
        np.savetxt(tmp_path / "bad.txt", np.r_[groups[:-2], [bad, bad]], fmt="%s")
        rc = main(["select", str(path), "--target", "y", "--groups", str(tmp_path / "bad.txt"), "--quiet"])
        assert rc == 2 and "must hold integer group ids, found" in capsys.readouterr().err
    rc = main(["select", str(path), "--target", "y", "--knockoffs", "0", "--quiet"])
    assert rc == 2 and "--knockoffs must be a positive integer" in capsys.readouterr().err


def test_group_names_select_by_name(data, tmp_path, capsys):
    """Group names (genes, pathways) in knockoff_filter, KnockoffSelector and ``--groups`` (a text file of
    names): the same selection as integer labels, reported by name. Names were refused (TypeError / CLIError)."""
    X, y, groups = data
    names = np.array([f"g{v:03d}" for v in groups])  # zero-padded: sorted as the integers
    kw = dict(fdr=0.3, s_method="equicorrelated", statistic="correlation")
    by_id = jaxknock.knockoff_filter(jax.random.key(0), X, y, groups=groups, **kw)
    by_name = jaxknock.knockoff_filter(jax.random.key(0), X, y, groups=list(names), **kw)
    np.testing.assert_array_equal(by_name.mask, by_id.mask)
    assert len(by_id.selected_groups) >= 3
    assert by_name.selected_groups.tolist() == [f"g{v:03d}" for v in by_id.selected_groups]
    est = KnockoffSelector(
        fdr=0.3, method="equicorrelated", statistic="correlation", random_state=0, groups=list(names)
    ).fit(X, y)
    assert set(est.selection_.selected_groups.tolist()) <= set(names.tolist())
    np.testing.assert_array_equal(est.support_, np.isin(names, est.selection_.selected_groups))

    import json

    path = tmp_path / "d.csv"
    header = ",".join([f"x{j}" for j in range(P)] + ["y"])
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header=header, comments="")
    gfile, out = tmp_path / "groups.txt", tmp_path / "r.json"
    gfile.write_text(" ".join(names) + "\n")
    args = ["select", str(path), "--target", "y", "--method", "equi", "--statistic", "correlation", "--fdr", "0.3"]
    rc = main([*args, "--groups", str(gfile), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    report = json.loads(out.read_text())
    assert report["selected_groups"] and set(report["selected_groups"]) <= set(names.tolist())
    # each selected feature names its group, in the report and in the printed table
    assert all(entry["group"] == names[entry["index"]] for entry in report["selected"])
    G = len(set(names.tolist()))
    assert f"in {len(report['selected_groups'])} of {G} groups at FDR 0.3" in printed.out
    first = report["selected"][0]
    assert re.search(rf"\bx{first['index']}\s+{first['group']}\s", printed.out)


def test_sklearn_groups(data):
    X, y, groups = data
    est = KnockoffSelector(
        fdr=0.3, method="equicorrelated", statistic="correlation", random_state=0, groups=groups, num_knockoffs=2
    ).fit(X, y)
    assert est.statistics_.shape == (P // 2,)
    np.testing.assert_array_equal(est.support_, np.isin(groups, est.selection_.selected_groups))
    # a Groups index, which knockoff_filter takes, was NumPy's "inhomogeneous shape" in fit
    from jaxknock.svector.group import group_index

    again = KnockoffSelector(
        fdr=0.3, method="equicorrelated", statistic="correlation", random_state=0, groups=group_index(groups),
        num_knockoffs=2,
    ).fit(X, y)  # fmt: skip
    np.testing.assert_array_equal(again.statistics_, est.statistics_)
    np.testing.assert_array_equal(again.selection_.selected_groups, est.selection_.selected_groups)
    with pytest.raises(ValueError, match="num_knockoffs"):
        KnockoffSelector(num_knockoffs=0).fit(X, y)


def test_an_uncertified_s_warns_with_multiple_knockoffs(data, monkeypatch):
    """The ``num_knockoffs > 1`` selection dropped a failed S (or lasso) result code silently, where one
    knockoff (with or without groups) warns; now every path warns, naming the stage."""
    from jaxknock import RESULTS, _precision

    X, y, groups = data
    real = _precision.solve_s_float64

    def stagnated(*args, **kwargs):
        return real(*args, **kwargs)._replace(result=jnp.int32(RESULTS.stagnated))

    monkeypatch.setattr(_precision, "solve_s_float64", stagnated)
    common = dict(fdr=0.3, s_method="equicorrelated", statistic="correlation")
    for kw in (dict(num_knockoffs=3), dict(groups=groups, num_knockoffs=2), dict(groups=groups)):
        with pytest.warns(RuntimeWarning, match=r"\(S-vector\): the solve failed with result code 4 \(stagnated\)"):
            sel = jaxknock.knockoff_filter(jax.random.key(0), X, y, **common, **kw)
        assert int(sel.s_solution.result) == RESULTS.stagnated


def test_groups_and_multiple_knockoffs_at_p_ge_n(data, tmp_path, capsys):
    """With ``groups`` at ``p >= n`` the default was the dense SDP, which then refused ``p >= n`` and pointed
    to the factor methods, which refuse groups: no method ran. ``"auto"`` now runs the group MVR on the
    Ledoit-Wolf estimate (group FDR 0.05 +- 0.01 at q = 0.1 on AR(1) 0.9 pairs, n = 150, p = 200,
    ``bench_fdr_pn.py --group-size 2``). The CLI refused ``--knockoffs 2`` where ``auto`` chose
    ``mvr-factor`` (the library has run ``m`` knockoffs on the factor model since session 32); ``auto``
    with ``m > 1`` at ``p >= n`` is now the dense MVR (the factor model's FDR was 0.111 +- 0.006 there)."""
    X, y, groups = data
    Xw, yw, gw = X[:20], y[:20], groups  # n = 20 < p = 24
    sel = jaxknock.knockoff_filter(jax.random.key(0), Xw, yw, fdr=0.3, statistic="correlation", groups=gw)
    assert sel.settings["s_method"] == "mvr" and int(sel.s_solution.result) == 0
    assert sel.W.shape == (1, P // 2)
    with pytest.raises(ValueError, match="s_method='sdp' on a dense covariance .* use s_method='mvr' / 'maxent'"):
        jaxknock.knockoff_filter(jax.random.key(0), Xw, yw, statistic="correlation", groups=gw, s_method="sdp")
    path = tmp_path / "wide.csv"
    names = [f"x{j}" for j in range(P)] + ["y"]
    np.savetxt(path, np.column_stack([Xw, yw]), delimiter=",", header=",".join(names), comments="")
    out = tmp_path / "r.json"
    args = ["select", str(path), "--target", "y", "--statistic", "correlation", "--fdr", "0.3", "--quiet"]
    rc = main([*args, "--knockoffs", "2", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    import json

    report = json.loads(out.read_text())
    assert report["settings"]["num_knockoffs"] == 2 and report["settings"]["s_method"] == "mvr"
    rc = main([*args, "--knockoffs", "2", "--method", "mvr-factor", "--out", str(out)])  # the factor model, by name
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["settings"]["s_method"] == "mvr_factor"


def test_auto_with_multiple_knockoffs_at_p_ge_n_is_the_dense_mvr_up_to_its_size_limit():
    from jaxknock.pipeline import DENSE_MULTI_MAX_P, resolve_s_method

    assert resolve_s_method("auto", (100, 200), num_knockoffs=2) == "mvr"
    assert resolve_s_method("auto", (100, 200), num_knockoffs=2, rank=10) == "mvr_factor"
    assert resolve_s_method("auto", (100, DENSE_MULTI_MAX_P + 1), num_knockoffs=3) == "mvr_factor"
    assert resolve_s_method("auto", (100, 200)) == "mvr_factor"  # one knockoff: the factor model (FDR 0.078)
    assert resolve_s_method("auto", (600, 200), num_knockoffs=2) == "mvr"
    assert resolve_s_method("auto", (100, 200), num_knockoffs="2") == "mvr_factor"  # named later by its check


def test_group_knockoffs_at_p_ge_n_advise_only_methods_the_group_path_takes(data, monkeypatch):
    """With ``groups=`` at ``p >= n`` a dense ``"sdp"`` / ``"asdp"`` / ``"equicorrelated"`` was refused with the advice
    to use ``s_method='mvr_factor'`` or ``'sdp_factor'``, which the group path refuses in turn; the advice names
    the group solvers that run there. Checked before the covariance estimate."""
    import jaxknock.pipeline as pipeline

    monkeypatch.setattr(pipeline, "factor_model_from_data", None)  # neither the estimate nor the solve may run
    monkeypatch.setattr(pipeline, "group_s_matrix", None)
    X, y, groups = data
    for method in ("sdp", "asdp", "equicorrelated"):
        with pytest.raises(ValueError, match=r">= n = 20: .* use s_method='mvr' / 'maxent' on the") as err:
            jaxknock.knockoff_filter(
                jax.random.key(0), X[:20], y[:20], s_method=method, statistic="correlation", groups=groups
            )
        assert "factor" not in str(err.value)
    with pytest.raises(ValueError, match="use s_method='mvr_factor'"):  # no groups: the factor methods run
        jaxknock.knockoff_filter(jax.random.key(0), X[:20], y[:20], s_method="sdp", statistic="correlation")
