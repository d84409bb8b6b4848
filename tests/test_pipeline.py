import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ar1_regression as make_data

from jaxknock.cli.demo import power_fdp
from jaxknock.pipeline import knockoff_filter


@pytest.mark.parametrize("s_method", ["equicorrelated", "sdp", "asdp", "sdp_factor"])
def test_strong_signals_are_found(key, s_method):
    X, y, beta = make_data()
    rank = 3 if s_method == "sdp_factor" else None  # rank with another method is an error
    sel = knockoff_filter(
        key, X, y, fdr=0.2, s_method=s_method, rank=rank, statistic="lcd", lam=0.05, asdp_block_size=10
    )
    power, fdp = power_fdp(sel.selected, beta)
    assert power >= 0.75
    assert fdp <= 0.4
    assert sel.W.shape == (1, 30)
    assert set(sel.timings) == {"covariance", "s_vector", "sampling", "statistics", "selection"}


def test_default_keeps_power_where_sdp_knockoffs_lose_it():
    """The default (MVR) on blocks of 10 features correlated 0.5 with the law known: there the SDP's
    ``s = 1`` makes ``2 Sigma - diag(s)`` singular, each feature is recovered from the others and the
    knockoffs, and the SDP's power collapses (Spector & Janson 2022); ``"auto"`` was ``"sdp"`` until
    session 35 and fails this test."""
    p, n, b = 60, 600, 10
    C = np.kron(np.eye(p // b), np.full((b, b), 0.5))
    np.fill_diagonal(C, 1.0)
    L = np.linalg.cholesky(C)
    power = {"auto": [], "sdp": []}
    for seed in range(6):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, p)) @ L.T
        signals = rng.choice(p, 12, replace=False)
        beta = np.zeros(p)
        beta[signals] = 0.35 * rng.choice([-1.0, 1.0], 12)
        y = X @ beta + rng.standard_normal(n)
        for method in power:
            sel = knockoff_filter(
                jax.random.key(seed), X, y, fdr=0.2, s_method=method, Sigma=C, statistic="lcd", lam=0.02
            )
            power[method].append(np.isin(signals, np.asarray(sel.selected)).mean())
            if method == "auto":
                assert sel.settings["s_method"] == "mvr"
    assert np.mean(power["sdp"]) <= 0.5  # the pathology is there (mean 0.28 when this was written)
    assert np.mean(power["auto"]) >= 0.9  # and the default does not have it (1.0)


def test_replicates_aggregation_and_determinism(key):
    X, y, beta = make_data(seed=1)
    a = knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6)
    b = knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6)
    assert a.W.shape == (6, 30)
    np.testing.assert_array_equal(np.asarray(a.W), np.asarray(b.W))
    np.testing.assert_array_equal(a.selected, b.selected)
    c = knockoff_filter(
        jax.random.key(7), X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6
    )
    assert not np.array_equal(np.asarray(a.W), np.asarray(c.W))
    freq = knockoff_filter(
        key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6, aggregate="frequency"
    )
    assert freq.mask.shape == (30,)


def test_binary_response_uses_logistic(key):
    X, y, beta = make_data(seed=2, amp=1.5)
    yb = (y > 0).astype(float)
    sel = knockoff_filter(key, X, yb, fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.02)
    assert sel.settings["loss"] == "logistic"
    power, fdp = power_fdp(sel.selected, beta)
    assert power >= 0.8 and fdp <= 0.3


def test_bad_inputs(key):
    X, y, _ = make_data(n=50, p=10)
    with pytest.raises(ValueError, match="shape"):
        knockoff_filter(key, X, y[:-1])
    with pytest.raises(ValueError, match=r"got \(50, 1\) \(a column: pass y.ravel\(\)\)"):
        knockoff_filter(key, X, y[:, None])  # e.g. df[["target"]].to_numpy()
    with pytest.raises(ValueError, match="constant"):
        knockoff_filter(key, X, np.ones(50))
    with pytest.raises(ValueError, match="fdr"):
        knockoff_filter(key, X, y, fdr=1.5)
    for dense in ("sdp", "asdp", "equicorrelated"):  # a dense method asked for by name
        with pytest.raises(ValueError, match=f"p = 10 >= n = 8: s_method='{dense}' .* use s_method='mvr_factor'"):
            knockoff_filter(key, X[:8], y[:8], s_method=dense)
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        knockoff_filter(key, bad, y)
    with pytest.raises(ValueError, match="s_method"):
        knockoff_filter(key, X, y, s_method="magic")
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        knockoff_filter(0, X, y)  # an int seed: before, an error from inside JAX's key handling
    # messages in the filter's own terms (they named a folds argument it does not have, or raised
    # numpy's TypeError from sorting None among floats, or took plus="no" as True)
    with pytest.raises(ValueError, match="X has 4 rows: the cross-validated lasso statistic"):
        knockoff_filter(key, X[:4, :2], y[:4])
    binary = (np.arange(50) == 7).astype(float)  # one row of class 1
    with pytest.raises(ValueError, match="1 row\\(s\\) of one class"):
        knockoff_filter(key, X, binary)
    with pytest.raises(ValueError, match="y mixes values that cannot be compared"):
        knockoff_filter(key, X, [None] + list(y[1:]))
    with pytest.raises(TypeError, match="plus must be True"):
        knockoff_filter(key, X, y, plus="no")
    with pytest.raises(ValueError, match="s_method='sdp_factor' needs a factor rank"):
        knockoff_filter(key, X[:, :1], y, s_method="sdp_factor")


def test_the_advice_for_too_few_rows_runs(key):
    """The too-few-rows message advises ``lam=`` or ``statistic='correlation'``; with a binary ``y`` on
    4 rows that advice failed too ("folds must be an integer in [2, n_samples=4]": the filter built the
    stratified CV folds for statistics that have none)."""
    X, _, _ = make_data(n=50, p=10)
    y = np.array([0.0, 1.0, 0.0, 1.0])
    for kw in ({"statistic": "correlation"}, {"lam": 0.1}):
        sel = knockoff_filter(key, X[:4, :2], y, **kw)
        assert np.asarray(sel.W).shape[-1] == 2 and np.all(np.isfinite(np.asarray(sel.W)))


def test_default_s_method_is_dense_for_tall_and_factor_for_wide_designs(key):
    """``s_method="auto"`` (the default): the dense MVR when n > p (the SDP until session 35), the
    factor-model MVR when p >= n
    (before, the default raised for p >= n: a user had to know to ask for sdp_factor; then it was
    sdp_factor, whose FDR under the estimated law was 0.16 at fdr=0.1 on AR(1) 0.9, n = 150, p = 200)."""
    X, y, beta = make_data(n=400, p=30, amp=1.5)  # n = 400: the shapes of the other tests' filters
    tall = knockoff_filter(key, X, y, fdr=0.2, statistic="lcd", lam=0.05)
    assert tall.settings["s_method"] == "mvr"
    same = knockoff_filter(key, X, y, fdr=0.2, s_method="mvr", statistic="lcd", lam=0.05)
    np.testing.assert_array_equal(np.asarray(tall.W), np.asarray(same.W))
    Xw, yw, beta_w = make_data(n=100, p=120, k=6, amp=1.5, seed=4)
    wide = knockoff_filter(key, Xw, yw, fdr=0.2)
    assert wide.settings["s_method"] == "mvr_factor" and wide.settings["rank"] == 25  # min(50, n // 4)
    assert int(wide.s_solution.result) == 0
    power, fdp = power_fdp(wide.selected, beta_w)
    assert power >= 0.5 and fdp <= 0.5
    # the factor-model SDP stays available; on this AR-free design both s are feasible and certified
    sdp_w = knockoff_filter(key, Xw, yw, fdr=0.2, s_method="sdp_factor", statistic="correlation")
    assert sdp_w.settings["s_method"] == "sdp_factor" and int(sdp_w.s_solution.result) == 0
    # a rank asks for the factor model; a known Sigma or groups keep a dense law
    assert knockoff_filter(key, X, y, fdr=0.2, rank=3, statistic="correlation").settings["s_method"] == "mvr_factor"
    from jaxknock.pipeline import resolve_s_method

    assert resolve_s_method("auto", (100, 120), known=True) == "mvr"
    assert resolve_s_method("auto", (100, 120), groups=np.arange(120) // 2) == "mvr"  # group MVR at p >= n
    assert resolve_s_method("auto", (3000, 120), groups=np.arange(120) // 2) == "mvr"
    assert resolve_s_method("auto", (3000, 120)) == "mvr" and resolve_s_method("auto", (121, 120)) == "mvr"
    assert resolve_s_method("sdp", (3000, 120)) == "sdp"
    assert resolve_s_method("equicorrelated", (100, 120)) == "equicorrelated"


@pytest.mark.parametrize("p", [1])
def test_fewer_features_than_the_lasso_candidate_chunk(key, p):
    """2p < 8 columns in [X, X~]: the CV lasso statistic failed in lax.top_k before."""
    X, y, _ = make_data(n=200, p=10)
    sel = knockoff_filter(key, X[:, :p], y, plus=False)
    assert sel.W.shape == (1, p) and np.all(np.isfinite(np.asarray(sel.W)))
    assert np.all(np.asarray(sel.statistic_solution.result) == 0)


def test_constant_column_found_exactly_even_when_its_computed_std_is_not_zero(key):
    """A column of 0.1s: its mean rounds, so JAX's standard deviation is 6.9e-17, not 0 (the old check
    passed it, and standardising divided by that)."""
    import jax.numpy as jnp

    X, y, _ = make_data(n=600, p=10)
    X = np.array(X)
    X[:, 4] = 0.1
    assert float(jnp.std(jnp.asarray(X[:, 4]))) != 0  # the trap the exact (max == min) check avoids
    with pytest.raises(ValueError, match=r"1 constant column\(s\) \(first: \[4\]\)"):
        knockoff_filter(key, X, y)


def test_columns_whose_squares_leave_the_floating_range_are_standardised(key):
    """A column of magnitude 1e200 (its squares overflow) became a column of zeros after standardising
    (jnp.std = inf), one of magnitude 1e-160 (squares flushed to zero) a column of NaN reported as 'X
    contains non-finite values'; both must give the filter of the same column in ordinary units."""
    X, y, _ = make_data(n=100, p=10, k=3)
    ref = knockoff_filter(key, X, y, s_method="equicorrelated", statistic="correlation")
    for factor in (1e200, 1e-160):
        Xf = np.array(X)
        Xf[:, 2] *= factor
        sel = knockoff_filter(key, Xf, y, s_method="equicorrelated", statistic="correlation")
        np.testing.assert_allclose(np.asarray(sel.W), np.asarray(ref.W), rtol=1e-9, atol=1e-12)


def test_empty_selection_carries_an_explanation(key):
    """Pure-noise response: knockoff+ at q = 0.05 (needs 20 positive statistics of 30) selects nothing and says why."""
    X, _, _ = make_data(seed=2)
    y = np.random.default_rng(5).standard_normal(X.shape[0])
    sel = knockoff_filter(key, X, y, fdr=0.05, s_method="equicorrelated", statistic="correlation")
    assert len(sel.selected) == 0
    assert sel.explanation.startswith("nothing selected: ")
    assert "smallest target FDR" in sel.explanation or "no target FDR below 1" in sel.explanation
    strong = knockoff_filter(key, *make_data()[:2], fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.05)
    assert len(strong.selected) > 0 and strong.explanation is None


def test_the_lasso_statistics_do_not_depend_on_the_units_of_y(key):
    """X is standardised, y was not. With y in units of 1e-16 the cross-validated lcd / lsm grids fell under
    their absolute floor (lambda_max <= 1e-15): W = 0 and nothing selected ([0 1 2 8] of 10 in ordinary
    units); in units of 1e-160 (lam scaled too) the squared residuals flushed to zero and the lasso stopped
    at once, "successful", with W = 0. A continuous y now reaches the lasso statistics at unit spread (an
    exact power of two) and W comes back in y's units. The settings are those of the test above."""
    X, y, _ = make_data()
    ref = knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.05)
    sel = knockoff_filter(key, X, 1e-160 * y, fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.05e-160)
    assert len(ref.selected) > 0
    np.testing.assert_array_equal(sel.selected, ref.selected)
    np.testing.assert_allclose(np.asarray(sel.W), 1e-160 * np.asarray(ref.W), rtol=1e-9, atol=1e-175)
    coef, ref_coef = (np.asarray(s.statistic_solution.stats["coef"]) for s in (sel, ref))
    np.testing.assert_allclose(coef, 1e-160 * ref_coef, rtol=1e-9, atol=1e-175)


# --- labels, dtypes and levels the way users pass them (issue 19, class 3) ---


def test_binary_labels_of_any_kind_give_the_same_selection(key):
    X, y, _ = make_data(seed=3)
    y01 = (np.asarray(y) > np.median(y)).astype(int)
    ref = knockoff_filter(key, X, y01, fdr=0.2, s_method="equicorrelated", statistic="correlation")
    for labels in (y01 + 1, np.where(y01 == 1, "case", "control"), y01.astype(bool), 2.0 * y01 - 1):
        # sorted order: "case" < "control" flips the coding, which the correlation statistic's sign ignores
        sel = knockoff_filter(key, X, labels, fdr=0.2, s_method="equicorrelated", statistic="correlation")
        np.testing.assert_allclose(np.abs(np.asarray(sel.W)), np.abs(np.asarray(ref.W)), rtol=1e-12)
        assert sel.settings["loss"] == "logistic"


@pytest.mark.parametrize(
    "y_kind, message",
    [("three_classes", "3 distinct integers"), ("three_strings", "3 distinct labels"), ("constant", "constant")],
)
def test_labels_that_are_not_a_response_are_rejected_naming_y(key, y_kind, message):
    X, _, _ = make_data(seed=3)
    n = X.shape[0]
    y = {
        "three_classes": np.arange(n) % 3,
        "three_strings": np.array(["a", "b", "c"])[np.arange(n) % 3],
        "constant": np.ones(n),
    }[y_kind]
    with pytest.raises(ValueError, match=message):
        knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation")
    # integers as a measurement: pass them as float
    if y_kind == "three_classes":
        knockoff_filter(key, X, y.astype(float), fdr=0.2, s_method="equicorrelated", statistic="correlation")


def test_float32_design_and_bad_fdr_type(key):
    X, y, _ = make_data(seed=3)
    # the SDP needs float64: only its covariance is upcast; the design stays float32 (tests/test_precision_transfers.py)
    a = knockoff_filter(key, np.asarray(X, np.float32), y, fdr=0.2, s_method="sdp", statistic="correlation")
    assert a.W.shape == (1, X.shape[1])
    assert int(a.s_solution.result) == 0
    with pytest.raises(TypeError, match="fdr must be a real number"):
        knockoff_filter(key, X, y, fdr="0.1", s_method="equicorrelated", statistic="correlation")


def test_rank_with_a_non_factor_method_names_rank(key):
    X, y, _ = make_data()
    with pytest.raises(ValueError, match="rank=3 applies to s_method='mvr_factor' or 'sdp_factor' only"):
        knockoff_filter(key, X, y, s_method="sdp", rank=3)


def test_empty_design_names_x(key):
    with pytest.raises(ValueError, match="X is empty"):
        knockoff_filter(key, np.zeros((0, 3)), np.zeros(0))


def test_own_estimates_are_not_revalidated_but_a_users_sigma_is(key, monkeypatch):
    """The estimated covariance and the certified s skip the value checks (each is a compiled program
    on a fresh process's first call); the context is scoped, and a user's Sigma is still checked."""
    from jaxknock import _checks, _sampling_checks, _sigma_checks

    indefinite = np.array([[1.0, 0.9, 0.9], [0.9, 1.0, -0.9], [0.9, -0.9, 1.0]])
    with pytest.raises(ValueError, match="Sigma"):
        _sigma_checks.validate_sigma(indefinite)
    with _checks.trusted_values():
        assert _checks.values_trusted()
        _sigma_checks.validate_sigma(indefinite)  # value checks skipped inside
        with pytest.raises(ValueError, match="square"):
            _sigma_checks.validate_sigma(np.ones((2, 3)))  # shape checks are not
    assert not _checks.values_trusted()

    def forbid_eager(fn):
        def guarded(*args, **kwargs):  # traced inside a larger program is fine: no program of its own
            if not any(isinstance(a, jax.core.Tracer) for a in args):
                raise AssertionError(f"{fn.__name__} ran on the pipeline's own estimate")
            return fn(*args, **kwargs)

        return guarded

    X, y, _ = make_data(n=200, p=10)
    with monkeypatch.context() as m:
        for mod, name in ((_sigma_checks, "_sigma_flags"), (_checks, "_diagonal"), (_sampling_checks, "_dense_flags")):
            m.setattr(mod, name, forbid_eager(getattr(mod, name)))
        sel = knockoff_filter(key, X, y, fdr=0.5, statistic="correlation")
    assert sel.mask.shape == (10,)
    equi = np.full((10, 10), -0.5) + 1.5 * np.eye(10)  # unit diagonal, smallest eigenvalue 1 - 4.5 < 0
    with pytest.raises(ValueError, match="Sigma"):
        knockoff_filter(key, X, y, Sigma=equi)


def test_binary_response_sorted_by_class_gets_stratified_folds(key):
    """Rows sorted by class (cases first) with 12 cases in 200: the first contiguous fold held every case,
    so its training rows had a single class and knockoff_filter raised; stratified folds keep 2-3 cases
    in every held-out fold."""
    from jaxknock.l1.folds import cv_folds

    X, _, _ = make_data(n=200, p=10)
    y = np.r_[np.ones(12), np.zeros(188)]
    ids = cv_folds(y, True)
    assert [int(y[ids == k].sum()) for k in range(5)] == [3, 3, 2, 2, 2]
    assert cv_folds(y, False) == 5
    sel = knockoff_filter(key, X, y, plus=False)
    assert sel.settings["loss"] == "logistic"
    assert np.all(np.asarray(sel.statistic_solution.result) == 0)


def test_a_selection_from_an_uncertified_solve_warns():
    """A failed result code of the S-vector or the statistics reaches the caller as a RuntimeWarning
    (the selection itself is returned: it keeps FDR control); all successful: no warning."""
    import warnings

    from jaxknock import RESULTS, Solution
    from jaxknock._selection import select

    W = jnp.asarray(np.random.default_rng(0).standard_normal((3, 20)))
    ok = Solution(jnp.zeros(20), jnp.int32(RESULTS.successful), {})
    codes = jnp.asarray([RESULTS.successful, RESULTS.max_steps_reached, RESULTS.successful], jnp.int32)
    stat = Solution(W, codes, {})
    with pytest.warns(
        RuntimeWarning, match=r"\(statistics\): 1 of 3 solve\(s\) failed with result code 1 \(max_steps_reached\)"
    ):
        mask, thresholds = select(W, stat, ok, {}, 0.1, True, 3, "ebh")
    assert mask.shape == (20,) and thresholds.shape == (3,)
    bad_s = ok._replace(result=jnp.int32(RESULTS.stagnated))
    with pytest.warns(RuntimeWarning, match=r"\(S-vector\): the solve failed with result code 4 \(stagnated\)"):
        select(W, stat._replace(result=jnp.zeros(3, jnp.int32)), bad_s, {}, 0.1, True, 3, "ebh")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        select(W, stat._replace(result=jnp.zeros(3, jnp.int32)), ok, {}, 0.1, True, 3, "frequency")
        select(W, None, ok, {}, 0.1, True, 3, "ebh")  # a closed-form statistic has no solution


def _block_design(seed, n, p, *, block=20, rho=0.5, nnz=20, amplitude=8.0):
    """Block-equicorrelated ``X`` (benchmarks/bench_filter_default.py's design), ``nnz`` signals."""
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(np.full((block, block), rho) + (1 - rho) * np.eye(block))
    X = (rng.standard_normal((n, p // block, block)) @ L.T).reshape(n, p)
    beta = np.zeros(p)
    signals = rng.choice(p, nnz, replace=False)
    beta[signals] = rng.choice([-1.0, 1.0], nnz) * amplitude / np.sqrt(n)
    return X, X @ beta + rng.standard_normal(n)


def test_float32_replicates_are_certified_without_a_float64_refit():
    """The default filter in float32 (jax's default precision), 8 replicates of a plain block design.

    A coefficient that reaches zero at a grid penalty could end the step a few eps on the wrong side
    of zero after the refinement, and the homotopy only dropped coefficients moving away from zero by
    the sign of the (wrong-signed) value: the KKT certificate then read a violation of 2. On this
    design the first replicate failed so, and each such replicate cost a float64 refit (a second
    compilation of the engine). Now such a coefficient is zero (``signed_coefficients``) and leaves at the next
    kink by the sign it entered with (test_l1_working_set.py).
    """
    X, y = _block_design(1, 300, 100)
    with jax.enable_x64(False):
        for R in (1, 8):
            stat = knockoff_filter(jax.random.key(0), X, y, num_replicates=R).statistic_solution
            assert stat.value.dtype == jnp.float32
            np.testing.assert_array_equal(np.asarray(stat.result), 0)
            assert not np.any(np.asarray(stat.stats["float64_refit"])), R


def test_dense_mvr_and_maxent_run_at_p_ge_n_on_the_ledoit_wolf_estimate(key):
    """At ``p >= n`` every dense method raised; ``"mvr"`` / ``"maxent"`` (knockpy's default is Ledoit-Wolf +
    MVR at any ``p``) kept the FDR there in simulation (``benchmarks/bench_fdr_pn.py``) and now run on the
    Ledoit-Wolf correlation: the same ``W`` as that estimate passed as a known ``Sigma``."""
    from jaxknock import ledoit_wolf, to_correlation

    Xw, yw, _ = make_data(n=60, p=80, k=4, amp=1.5, seed=4)
    Xs = (Xw - Xw.mean(0)) / Xw.std(0)
    Sigma = np.asarray(to_correlation(ledoit_wolf(jnp.asarray(Xs)).covariance))
    for method in ("mvr", "maxent"):
        sel = knockoff_filter(key, Xs, yw, s_method=method, statistic="correlation")
        assert sel.settings["s_method"] == method and int(sel.s_solution.result) == 0
        ref = knockoff_filter(key, Xs, yw, s_method=method, statistic="correlation", Sigma=Sigma)
        np.testing.assert_allclose(sel.s_solution.value, ref.s_solution.value, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(sel.W, ref.W, rtol=1e-6, atol=1e-9)


def test_float64_host_input_with_a_large_offset_is_not_rounded_by_the_float32_cast():
    """With x64 off, a float64 NumPy ``X`` was cast to float32 before it was centred: columns of epoch
    seconds (``1.7e9``, float32 spacing 128) that vary by minutes were rounded to a few levels, and the
    statistics depended on the offset. The shift now comes out in float64 first (``_precision.centre_before_cast``)."""
    rng = np.random.default_rng(0)
    n, p = 300, 30  # the shape of the float32 filters below (their programs)
    X = rng.standard_normal((n, p)) * 60.0
    y = X[:, :6] @ np.full(6, 0.02) + rng.standard_normal(n)
    shifted = X + 1.7e9  # float64: exact to ~2e-7
    with jax.enable_x64(False):
        runs = [
            knockoff_filter(jax.random.key(0), A, y, s_method="equicorrelated", statistic="correlation")
            for A in (X, shifted)
        ]
        assert runs[0].W.dtype == jnp.float32
        mu = np.full(p, 1.7e9)
        known = [  # a known law with its mean: the same
            knockoff_filter(jax.random.key(0), A, y, Sigma=np.eye(p) * 3600.0, mu=m, statistic="correlation")
            for A, m in ((X, np.zeros(p)), (shifted, mu))
        ]
    np.testing.assert_allclose(runs[1].W, runs[0].W, atol=2e-5)
    np.testing.assert_allclose(known[1].W, known[0].W, atol=2e-5)


@pytest.mark.parametrize("x64", [True, False])
def test_float64_response_with_a_large_offset_is_not_rounded_by_the_float32_cast(x64):
    """A float64 ``y = 1e8 + signal`` with a float32 ``X`` (x64 on) or a float64 NumPy ``X`` (x64 off) was cast
    to float32 before anything took its mean out: the float32 spacing at 1e8 is 8, the response (spread ~20)
    kept a handful of levels, the signals' statistics came out at half their value (0.14-0.19 against
    0.23-0.36) and two nulls joined the selection, with nothing flagged (with ``"lcd"`` on a design of 10
    signals: 0 selected, every fit ``successful``; a spread below 4 became "y is constant"). The offset now
    comes out in float64 first (``_precision.shift_response_mean``); a response whose mean is within
    ``2^7`` of its spread is passed on untouched, to the bit."""
    from jaxknock import _precision

    rng = np.random.default_rng(0)
    n, p = 300, 30
    X = rng.standard_normal((n, p))
    y = X[:, :6] @ np.full(6, 2.0) + 2.0 * rng.standard_normal(n)
    A = X.astype(np.float32) if x64 else X
    with jax.enable_x64(x64):
        runs = [
            knockoff_filter(jax.random.key(0), A, r, fdr=0.3, s_method="equicorrelated", statistic="correlation")
            for r in (y, y + 1e8)
        ]
    assert runs[0].W.dtype == jnp.float32
    np.testing.assert_allclose(runs[1].W, runs[0].W, atol=1e-5)
    np.testing.assert_array_equal(runs[1].selected, runs[0].selected)
    assert set(range(6)) <= set(runs[0].selected.tolist())
    for ordinary in (y, y + 100.0, y * 1e6 + 1e8):  # mean within 2^7 of the spread: the very same array
        assert _precision.shift_response_mean(ordinary) is ordinary
    shifted = _precision.shift_response_mean(y + 1e8)
    assert np.unique((y + 1e8) - shifted).size == 1 and abs(shifted.mean()) < 2**8 * np.ptp(y)  # one exact shift


def test_response_shift_of_a_concrete_jax_array_is_decided_on_the_host():
    """A concrete JAX ``y`` (the filter's case) was tested for a large mean by a dozen eager device operations,
    each its own compiled program in a fresh process (about 0.1 s with the compilation cache, 0.4 s without);
    it is now read once on the host. The decision and the shift are those of the NumPy and traced paths."""
    from helpers import count_compiles

    from jaxknock import _precision

    rng = np.random.default_rng(1)
    y = rng.standard_normal(37) * 3.0  # a length no other test compiles for
    yj = jnp.asarray(y)
    with count_compiles() as compiles, jax.transfer_guard("disallow"):
        same = _precision.shift_response_mean(yj)
    assert same is yj and compiles == []
    for big in (y + 1e8, (y + 3e5).astype(np.float32)):
        host = _precision.shift_response_mean(big)
        dev = _precision.shift_response_mean(jnp.asarray(big))
        traced = jax.jit(_precision.shift_response_mean)(jnp.asarray(big))
        assert dev.dtype == big.dtype and not np.array_equal(host, big)
        np.testing.assert_array_equal(dev, host)
        np.testing.assert_array_equal(traced, host)


@pytest.mark.parametrize("x64", [True, False])
def test_bool_design_is_its_zero_one_floats(x64):
    """A bool ``X`` (presence / absence features) was refused ("X must be a real floating array") while the
    same 0/1 features as int8 ran; it now runs as its 0/1 floats, through the same float64 centring with x64
    off (the int path's), so the statistics are those of the float design exactly."""
    rng = np.random.default_rng(0)
    X = rng.random((120, 8)) < 0.4
    y = X[:, 0] - 1.0 * X[:, 1] + 0.3 * rng.standard_normal(120)
    with jax.enable_x64(x64):
        W = [
            np.asarray(
                knockoff_filter(jax.random.key(0), A, y, fdr=0.2, s_method="equicorrelated", statistic="correlation").W
            )
            for A in (X, X.astype(np.float64))
        ]
    np.testing.assert_array_equal(W[0], W[1])


def test_bad_cv_patience_and_num_replicates_raise_before_any_work(key):
    """``cv_patience=0`` ran the S solve and the sampling, then failed (or, for 0 / 2.5 / True, ran
    unchecked) in the statistics under the name ``patience``; ``num_replicates=True`` ran as 1."""
    X, y, _ = make_data()
    for bad in (0, 2.5, True, np.array([3])):  # a 0-d integer array is an integer (``_checks.is_int``)
        with pytest.raises(ValueError, match="cv_patience must be None or a positive integer"):
            knockoff_filter(key, X, y, cv_patience=bad)
    with pytest.raises(ValueError, match="num_replicates must be a positive integer, got True"):
        knockoff_filter(key, X, y, num_replicates=True, statistic="correlation")


def test_bad_lasso_tol_and_rank_with_a_dense_law_raise_before_any_work(key, monkeypatch):
    """A bad ``lasso_tol`` failed only in the statistics, after the S solve and the sampling; ``rank=`` with
    a known ``Sigma`` (default ``s_method``) blamed ``s_method='sdp'``, which the caller had not chosen."""
    import jaxknock.pipeline as pipeline

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    X, y, _ = make_data()
    for bad in (0.0, -1e-4, float("nan"), True, "1e-4", np.array([1e-4])):
        with pytest.raises(ValueError, match="lasso_tol must be None or a positive, finite number"):
            knockoff_filter(key, X, y, lasso_tol=bad)
    Sigma = np.corrcoef(np.asarray(X), rowvar=False)
    with pytest.raises(ValueError, match="rank=3 is the rank of a factor model .* known Sigma= .* drop rank"):
        knockoff_filter(key, X, y, Sigma=Sigma, rank=3)
    with pytest.raises(ValueError, match="rank=3 is the rank of a factor model .* groups= .* drop rank"):
        knockoff_filter(key, X, y, groups=np.arange(X.shape[1]) // 2, rank=3)


def test_rank_with_a_known_law_is_refused_whatever_the_factor_method(key, monkeypatch):
    """``rank=`` with a known ``Sigma`` was refused for ``s_method="auto"`` only: with ``"mvr_factor"`` /
    ``"sdp_factor"`` (a dense law or a :class:`~jaxknock.FactorModel`) no model is fitted to ``X`` and the rank
    was dropped without a word (``settings["rank"]`` even recorded it)."""
    import jaxknock.pipeline as pipeline
    from jaxknock import FactorModel

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    X, y, _ = make_data()
    p = X.shape[1]
    model = FactorModel(jnp.ones(p), jnp.full((p, 2), 0.1))
    for Sigma in (np.eye(p), model):
        for method in ("mvr_factor", "sdp_factor"):
            with pytest.raises(ValueError, match="rank=3 is the rank of a factor model .* known Sigma= .* drop rank"):
                knockoff_filter(key, X, y, Sigma=Sigma, s_method=method, rank=3, statistic="correlation")


def test_a_penalty_for_a_statistic_without_one_is_refused_not_ignored(key, monkeypatch):
    """``lam`` is the fixed penalty of ``statistic="lcd"``; with ``"lsm"``, ``"correlation"`` or ``"centroid"``
    (and on the group / multi-knockoff path) it was silently dropped, even a nonsensical ``lam="0.1"``, and the
    result looked like a fixed-penalty run. It is refused, naming ``lam``, before the S solve."""
    import jaxknock.pipeline as pipeline

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    X, y, _ = make_data()
    yb = (np.asarray(y) > 0).astype(float)
    for statistic, lam, yy in (
        ("correlation", 0.1, y),
        ("lsm", 0.1, y),
        ("centroid", 0.1, yb),
        ("correlation", "0.1", y),
    ):
        with pytest.raises(ValueError, match=f"lam=.* statistic='lcd'; statistic='{statistic}' does not use one"):
            knockoff_filter(key, X, yy, statistic=statistic, lam=lam)
    with pytest.raises(ValueError, match="lam=0.1 is the fixed lasso penalty"):
        knockoff_filter(key, X, y, statistic="correlation", lam=0.1, num_knockoffs=2)


def test_group_and_multi_knockoff_runs_refuse_options_they_would_ignore(key, monkeypatch):
    """With ``groups=`` or ``num_knockoffs > 1``, ``mu=`` (refused without ``Sigma`` on the plain path) and
    ``chunk_size`` / ``devices`` / ``mesh`` were dropped on the way to that path: the run was neither
    centred by ``mu`` nor chunked nor sharded, and said nothing."""
    import jaxknock.pipeline as pipeline

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    monkeypatch.setattr(pipeline, "_grouped_or_multi_filter", no_s_solve)
    X, y, _ = make_data()
    p = X.shape[1]
    for opts in ({"groups": np.arange(p) // 2}, {"num_knockoffs": 2}):
        with pytest.raises(ValueError, match="mu is only used together with a known Sigma"):
            knockoff_filter(key, X, y, mu=np.zeros(p), **opts)
        for name, value in (("chunk_size", 2), ("devices", 1), ("mesh", object())):
            with pytest.raises(ValueError, match=f"{name} is not supported yet with groups= or num_knockoffs > 1"):
                knockoff_filter(key, X, y, **{name: value}, **opts)


def test_solver_settings_are_checked_under_their_own_names_before_any_work(key, monkeypatch):
    """``sdp_tol`` / ``asdp_block_size`` were checked by the solvers as ``tol`` / ``block_size`` (names the caller
    of the filter never passed), after the covariance estimate; a method without a tolerance took
    ``sdp_tol=-1`` / ``NaN`` without a word (the same call with ``groups=`` refused it)."""
    import jaxknock.pipeline as pipeline

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    monkeypatch.setattr(pipeline, "_grouped_or_multi_filter", no_s_solve)
    X, y, _ = make_data()
    for method in ("equicorrelated", "sdp"):
        for bad in (-1.0, 0.0, float("nan")):
            with pytest.raises(ValueError, match="sdp_tol must be a finite number > 0"):
                knockoff_filter(key, X, y, s_method=method, sdp_tol=bad, statistic="correlation")
    with pytest.raises(TypeError, match="sdp_tol must be a real number"):
        knockoff_filter(key, X, y, sdp_tol="1e-4", statistic="correlation")
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="asdp_block_size must be an integer >= 1"):
            knockoff_filter(key, X, y, s_method="asdp", asdp_block_size=bad, statistic="correlation")


def test_a_boolean_or_text_penalty_is_refused_naming_lam(key, monkeypatch):
    """``lam=True`` ran the fixed-penalty ``"lcd"`` at ``lam = 1.0`` and ``lam="0.1"`` at 0.1: ``lcd`` converted
    them with ``jnp.asarray`` before its own check, which refuses both."""
    import jaxknock.pipeline as pipeline

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the settings were checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    monkeypatch.setattr(pipeline, "_grouped_or_multi_filter", no_s_solve)
    X, y, _ = make_data()
    for bad in (True, "0.1", np.array([True])):
        with pytest.raises(TypeError, match="lam must be a real number"):
            knockoff_filter(key, X, y, lam=bad)


def test_a_known_law_that_is_not_numbers_is_named(key):
    """``Sigma="a"`` / ``mu="a"`` failed with NumPy's "could not convert string to float", and a ``(d, U)`` pair
    as ``Sigma`` (which the samplers take) with "inhomogeneous shape", naming no argument."""
    X, y, _ = make_data()
    p = X.shape[1]
    with pytest.raises(TypeError, match="Sigma must be a numeric array"):
        knockoff_filter(key, X, y, Sigma="a", statistic="correlation")
    with pytest.raises(TypeError, match="mu must be a numeric array"):
        knockoff_filter(key, X, y, Sigma=np.eye(p), mu="a", statistic="correlation")
    with pytest.raises(TypeError, match=r"Sigma looks like a \(d, U\) pair: pass .*FactorModel\(d, U\)"):
        knockoff_filter(key, X, y, Sigma=(np.ones(p), np.ones((p, 2))), statistic="correlation")


def test_factor_rank_takes_a_jax_integer_and_refuses_a_bool(key):
    """``rank=jnp.int32(3)`` was refused ("rank must be an integer ..., got Array(3, dtype=int32)") while
    ``np.int32(3)`` passed, and ``rank=True`` was taken as a rank of 1 (a bool is an ``int`` to Python)."""
    X, y, _ = make_data()
    with pytest.raises(ValueError, match="rank must be an integer in .*got True"):
        knockoff_filter(key, X, y, rank=True, statistic="correlation")
    a = knockoff_filter(key, X, y, s_method="mvr_factor", rank=jnp.int32(3), statistic="correlation")
    b = knockoff_filter(key, X, y, s_method="mvr_factor", rank=3, statistic="correlation")
    assert a.settings["rank"] == 3 and type(a.settings["rank"]) is int
    np.testing.assert_array_equal(a.W, b.W)


def test_half_precision_input_runs_as_float32():
    """A float16 ``X`` failed deep inside the S solve with ``NotImplementedError: Unsupported dtype float16``
    (no argument named). Half precision is exact in float32, which every stage supports: the same answers."""
    from jaxknock import lasso, ledoit_wolf

    X, y, _ = make_data(n=300, p=30)  # the shape of the float32 filters above (their programs)
    X16 = X.astype(np.float16)
    X32 = X16.astype(np.float32)
    with jax.enable_x64(False):
        a = knockoff_filter(jax.random.key(0), X16, y, s_method="equicorrelated", statistic="correlation")
        b = knockoff_filter(jax.random.key(0), X32, y, s_method="equicorrelated", statistic="correlation")
        assert a.W.dtype == jnp.float32
        np.testing.assert_array_equal(a.W, b.W)
        np.testing.assert_array_equal(
            ledoit_wolf(jnp.asarray(X16)).covariance, ledoit_wolf(jnp.asarray(X32)).covariance
        )
        np.testing.assert_array_equal(
            lasso(X16, y.astype(np.float32), 0.1).value, lasso(X32, y.astype(np.float32), 0.1).value
        )


def test_a_known_factor_model_runs_the_factor_mvr_without_a_dense_law(key, monkeypatch):
    """A known ``Sigma`` given as a :class:`~jaxknock.FactorModel` ran ``"auto"`` as the dense MVR on
    ``model.dense()`` (``p x p``). It now runs :func:`~jaxknock.mvr_factor` on the model, the same MVR optimum:
    its ``s`` matches the dense MVR of ``model.dense()`` given as a dense ``Sigma``, and no ``p x p`` law is
    formed (``FactorModel.dense`` is patched to fail)."""
    from jaxknock import FactorModel

    rng = np.random.default_rng(3)
    n, p, k = 400, 150, 3
    U = rng.normal(size=(p, k))
    share = rng.uniform(0.2, 0.7, p)  # the factors' share of each unit variance
    U *= np.sqrt(share / (U**2).sum(1))[:, None]
    d = 1.0 - share
    model = FactorModel(jnp.asarray(d), jnp.asarray(U))
    X = rng.standard_normal((n, k)) @ U.T + rng.standard_normal((n, p)) * np.sqrt(d)
    beta = np.zeros(p)
    beta[:15] = 0.5
    y = X @ beta + rng.standard_normal(n)
    dense = np.asarray(model.dense())
    ref = knockoff_filter(key, X, y, s_method="mvr", Sigma=dense, mu=np.zeros(p), lam=0.05, sdp_tol=1e-8)

    def no_dense(self):
        raise AssertionError("a p x p law was formed")

    monkeypatch.setattr(FactorModel, "dense", no_dense)
    sel = knockoff_filter(key, X, y, Sigma=model, mu=np.zeros(p), lam=0.05, sdp_tol=1e-8)
    assert sel.settings["s_method"] == "mvr_factor" and int(sel.s_solution.result) == 0
    np.testing.assert_allclose(sel.s_solution.value, ref.s_solution.value, rtol=1e-3, atol=1e-6)
    power, fdp = power_fdp(sel.selected, beta)
    assert power >= 0.8 and fdp <= 0.3


def test_a_known_factor_model_with_as_many_factors_as_features_runs_the_dense_criterion(key):
    """``Sigma=FactorModel(d, U)`` with ``U`` of shape ``(8, 10)`` (or ``(8, 8)``), a valid law, raised under
    ``s_method="auto"`` / ``"mvr_factor"``: "factor rank k = 8 must be smaller than p = 8; solve the dense
    problem instead (sdp / mvr / maxent on model.dense())", naming a call the user never made. Such a model
    has no low rank to use: the factor methods now run their dense criterion on ``model.dense()``, as with a
    dense ``Sigma`` (reference: ``s_method="mvr"`` on the same model)."""
    from jaxknock import FactorModel

    rng = np.random.default_rng(5)
    n, p = 60, 8  # the shape of the known-law filters below (their programs)
    X = rng.standard_normal((n, p))
    y = 2.0 * X[:, 0] + rng.standard_normal(n)
    model = FactorModel(jnp.ones(p), jnp.asarray(0.3 * rng.standard_normal((p, 10))))
    run = lambda m: knockoff_filter(key, X, y, Sigma=model, s_method=m, statistic="correlation")
    auto, dense = run("auto"), run("mvr")
    assert auto.settings["s_method"] == "mvr_factor" and int(auto.s_solution.result) == 0
    np.testing.assert_array_equal(auto.s_solution.value, dense.s_solution.value)


def test_a_known_factor_model_with_a_bad_d_is_refused_naming_it(key, monkeypatch):
    """A known ``Sigma=FactorModel(d, U)`` with ``d`` of the wrong length failed deep in JAX ("add got
    incompatible shapes for broadcasting: (11,), (12,)"), and with a non-positive ``d`` the rescaling by the
    diagonal turned it into NaN loadings, reported as "model.U contains 24 non-finite value(s)"."""
    import jaxknock.pipeline as pipeline
    from jaxknock import FactorModel

    def no_s_solve(*a, **k):
        raise AssertionError("the S solve ran before the law was checked")

    monkeypatch.setattr(pipeline, "covariance_and_s", no_s_solve)
    X, y, _ = make_data()
    p = X.shape[1]
    U = jnp.asarray(np.random.default_rng(0).standard_normal((p, 2)) * 0.3)
    with pytest.raises(ValueError, match=r"got d of shape \(29,\) and U of shape \(30, 2\)"):
        knockoff_filter(key, X, y, Sigma=FactorModel(jnp.ones(p - 1), U), statistic="correlation")
    for d in (-jnp.ones(p), jnp.zeros(p)):
        with pytest.raises(ValueError, match="Sigma.d must be strictly positive"):
            knockoff_filter(key, X, y, Sigma=FactorModel(d, U), statistic="correlation")
    with pytest.raises(ValueError, match="Sigma.U contains 1 non-finite"):
        knockoff_filter(key, X, y, Sigma=FactorModel(jnp.ones(p), U.at[0, 0].set(jnp.nan)), statistic="correlation")


def test_a_factor_method_with_a_known_dense_sigma_runs_its_dense_criterion(key):
    """``s_method="mvr_factor"`` with a dense ``Sigma=`` ran the SDP (``_dense_s`` fell back to it for any
    factor method): ``s = 1`` on this equicorrelated 0.5 law, the power-collapse case the MVR is there to avoid,
    while ``settings["s_method"]`` said ``"mvr_factor"``. It now runs the dense MVR (the same optimum as
    :func:`~jaxknock.mvr_factor` on the law as a factor model); ``"sdp_factor"`` the dense SDP."""
    p, n = 8, 60
    C = np.full((p, p), 0.5)
    np.fill_diagonal(C, 1.0)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p)) @ np.linalg.cholesky(C).T
    y = X[:, 0] + rng.standard_normal(n)
    s = {}  # each filter run once ("mvr_factor" was run twice)
    for m in ("mvr_factor", "mvr", "sdp_factor", "sdp"):
        s[m] = knockoff_filter(key, X, y, Sigma=C, s_method=m, statistic="correlation").s_solution.value
    for factor, dense in (("mvr_factor", "mvr"), ("sdp_factor", "sdp")):
        np.testing.assert_allclose(s[factor], s[dense], rtol=1e-6)
    assert np.all(np.asarray(s["mvr_factor"]) < 0.6)  # the MVR's s, not the SDP's 1


def test_a_known_factor_law_is_prepared_in_two_programs():
    """``knockoff_filter(Sigma=FactorModel(...))`` prepared the law and standardised ``X`` op by op (about
    twenty eager programs in a first call); now the law's correlation form and the standardisation are one
    program each, with the same values as the formulas."""
    from helpers import count_compiles

    from jaxknock import FactorModel, _filter_inputs

    rng = np.random.default_rng(0)
    X = jax.device_put(rng.standard_normal((19, 6)))  # a shape no other test compiles for
    d, U = rng.uniform(0.5, 1.0, 6), rng.standard_normal((6, 2))
    with count_compiles() as compiles, jax.enable_x64(True):
        Xs, known = _filter_inputs.standardise_by_law(X, FactorModel(d, U), None)
    assert len(compiles) <= 2
    diag = d + (U**2).sum(1)
    np.testing.assert_allclose(known.dense(), (np.diag(d) + U @ U.T) / np.sqrt(np.outer(diag, diag)), rtol=1e-12)
    np.testing.assert_allclose(Xs, (np.asarray(X) - np.asarray(X).mean(0)) / np.sqrt(diag), rtol=1e-12)


def test_a_masked_y_entry_is_refused_and_object_floats_are_a_response(key):
    # np.asarray(y) dropped the mask: the value under it was fitted as the response; an object array of
    # floats (df.to_numpy() of mixed columns) was "y has 60 distinct labels ...", a response read as labels
    from jaxknock._filter_inputs import validate_inputs

    X, y, _ = make_data(n=60, p=8, k=2)
    masked = np.ma.array(y, mask=np.arange(60) == 7)
    with pytest.raises(ValueError, match="y is a masked array with 1 masked entry"):
        knockoff_filter(key, X, masked, statistic="correlation", s_method="equicorrelated")
    args = (0.2, "equicorrelated", "correlation", "ebh", 1, None)
    plain = validate_inputs(X, y, *args)
    for yv in (y.astype(object), np.ma.array(y)):
        np.testing.assert_array_equal(validate_inputs(X, yv, *args)[1], plain[1])
