import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import count_compiles
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LassoCV, LogisticRegression
from sklearn.linear_model import lasso_path as sk_lasso_path

import jaxknock
import jaxknock.l1 as L
from jaxknock import RESULTS
from jaxknock import statistics as S
from jaxknock.l1 import solvers
from jaxknock.l1.folds import stratified_kfold_ids

SOLVERS = ["cd", "fista"]


def _regression(seed=0, n=80, m=40, k=5, noise=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) + 0.3 * rng.standard_normal((n, 1))  # correlated columns
    beta = np.zeros(m)
    beta[:k] = rng.choice([-1.0, 1.0], k) * np.linspace(1.0, 2.0, k)
    y = X @ beta + 0.5 + noise * rng.standard_normal(n)
    return X, y


def _classification(seed=0, n=80, m=40, k=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m))
    beta = np.zeros(m)
    beta[:k] = 1.0
    prob = 1.0 / (1.0 + np.exp(-(X @ beta + 0.3)))
    y = (rng.random(n) < prob).astype(float)
    return X, y


@pytest.mark.parametrize("solver, fit_intercept", [("cd", True), ("cd", False), ("fista", True)])
def test_lasso_matches_sklearn(solver, fit_intercept):
    X, y = _regression()
    lam = 0.08
    sol = L.lasso(X, y, lam, solver=solver, fit_intercept=fit_intercept, tol=1e-12)
    ref = Lasso(alpha=lam, fit_intercept=fit_intercept, tol=1e-14, max_iter=100_000).fit(X, y)
    assert sol.result == RESULTS.successful
    np.testing.assert_allclose(sol.value, ref.coef_, atol=1e-7)
    np.testing.assert_allclose(sol.stats["intercept"], ref.intercept_, atol=1e-7)
    assert 0 < int(sol.stats["num_steps"]) < int(sol.stats["max_steps"])
    scale = np.var(y) if fit_intercept else np.mean(y**2)
    assert float(sol.stats["duality_gap"]) <= 1e-12 * scale


@pytest.mark.parametrize("solver", SOLVERS)
def test_logistic_matches_sklearn_saga(solver):
    X, y = _classification()
    n, lam = X.shape[0], 0.03
    sol = L.lasso(X, y, lam, loss="logistic", solver=solver, tol=1e-12)
    ref = LogisticRegression(l1_ratio=1.0, C=1.0 / (n * lam), solver="saga", tol=1e-13, max_iter=100_000).fit(X, y)
    assert sol.result == RESULTS.successful
    np.testing.assert_allclose(sol.value, ref.coef_[0], atol=1e-6)
    np.testing.assert_allclose(sol.stats["intercept"], ref.intercept_[0], atol=1e-6)


def test_logistic_pm1_labels_without_intercept_matches_liblinear():
    X, y01 = _classification(seed=1)
    n, lam = X.shape[0], 0.03
    sol = L.lasso(X, 2 * y01 - 1, lam, loss="logistic", fit_intercept=False, solver="cd", tol=1e-12)
    ref = LogisticRegression(
        l1_ratio=1.0,
        C=1.0 / (n * lam),
        solver="liblinear",
        fit_intercept=False,
        tol=1e-12,
        max_iter=100_000,
        random_state=0,  # liblinear shuffles coordinates; some orders stall at tol=1e-12
    ).fit(X, y01)
    np.testing.assert_allclose(sol.value, ref.coef_[0], atol=1e-6)


def test_path_matches_sklearn_lasso_path():
    X, y = _regression(seed=2)
    lambdas = L.lambda_grid(X, y, num=15, eps=1e-2)
    path = L.lasso_path(X, y, lambdas, tol=1e-12)
    Xc, yc = X - X.mean(0), y - y.mean()
    ref_lams, ref_coefs, _ = sk_lasso_path(Xc, yc, alphas=np.asarray(lambdas), tol=1e-14, max_iter=100_000)
    np.testing.assert_allclose(ref_lams, lambdas)
    np.testing.assert_allclose(path.value, ref_coefs.T, atol=1e-7)
    assert path.value.shape == (15, X.shape[1]) and path.result.shape == (15,)
    assert np.all(path.result == RESULTS.successful)
    # lambda_max: everything is zero there, something is not just below
    assert np.all(path.value[0] == 0)
    below = L.lasso(X, y, 0.99 * float(lambdas[0]), tol=1e-12).value
    assert np.count_nonzero(below) >= 1


def _path_design(kind):
    """The designs of the engine tests: dense, p >> n and duplicated columns (80 x 40 shares one program)."""
    if kind == "p>>n":
        return _regression(seed=5, n=30, m=40, k=3)
    X, y = _regression(seed=2)
    if kind == "duplicates":
        X[:, 20:] = X[:, :20]  # every column twice: the solution is not unique, its fitted values are
    return X, y


@pytest.mark.parametrize("kind", ["dense", "p>>n", "duplicates"])
def test_path_auto_engine_matches_a_tight_sklearn_lasso_path(kind):
    """lasso_path's default engine is the working-set one (its stats hold the per-lambda ``kkt``): exact against
    scikit-learn run to tol 1e-12, with per-lambda gaps as small as the classic engine's."""
    X, y = _path_design(kind)
    lambdas = np.asarray(L.lambda_grid(X, y, num=15, eps=1e-2))
    path = L.lasso_path(X, y, lambdas)
    assert np.all(path.result == RESULTS.successful) and path.stats["kkt"].shape == (15,)
    assert float(np.max(path.stats["kkt"])) < 1e-8
    Xc, yc = X - X.mean(0), y - y.mean()
    _, ref, _ = sk_lasso_path(Xc, yc, alphas=lambdas, tol=1e-12, max_iter=200_000)
    coefs = np.asarray(path.value)
    if kind == "duplicates":
        np.testing.assert_allclose(coefs @ Xc.T, ref.T @ Xc.T, atol=1e-7)
    else:
        np.testing.assert_allclose(coefs, ref.T, atol=1e-9)
    b0 = np.asarray(path.stats["intercept"])
    np.testing.assert_allclose(b0, y.mean() - coefs @ X.mean(0), atol=1e-9)
    null = 0.5 * np.mean(yc**2)
    assert np.all(np.abs(np.asarray(path.stats["gap"])) < 1e-10 * null)


def test_path_engines_report_the_same_stats():
    """Same keys, shapes and dtypes of ``stats`` on both engines (the working-set one adds ``kkt``), the same
    ``gap`` (a duality gap in objective units, not the engine's gap relative to the null deviance), and the
    same coefficients; ``num_screened`` counts the features outside the working set."""
    X, y = _path_design("dense")
    auto = L.lasso_path(X, y, num_lambdas=15, eps=1e-2)
    classic = L.lasso_path(X, y, num_lambdas=15, eps=1e-2, engine="classic")
    assert set(auto.stats) == set(classic.stats) | {"kkt"}
    for k, v in classic.stats.items():
        assert auto.stats[k].shape == v.shape == (15,) and auto.stats[k].dtype == v.dtype, k
    np.testing.assert_array_equal(auto.stats["lam"], classic.stats["lam"])
    np.testing.assert_allclose(auto.value, classic.value, atol=1e-4)  # the classic default: gap <= 1e-6 D0
    null = np.var(y)  # D0 of the classic stopping rule gap <= tol * D0
    gap_a, gap_c = np.asarray(auto.stats["gap"]), np.asarray(classic.stats["gap"])
    assert np.all(gap_c <= 1e-6 * null) and np.all(np.abs(gap_a) <= 1e-10 * null)
    # the gap's formula: the classic engine's certificate (lasso_init) at the auto engine's coefficients
    for k in (3, 14):
        state = L.lasso_init(X, y, float(auto.stats["lam"][k]), init=auto.value[k], solver="cd")
        assert float(auto.stats["gap"][k]) == pytest.approx(float(state.gap), abs=1e-14)
    assert np.all(np.diff(np.asarray(auto.stats["num_screened"])) <= 0)  # the working set only grows
    assert np.all(np.asarray(auto.stats["num_steps"]) >= 0) and int(np.sum(auto.stats["num_steps"])) > 0
    assert np.all(auto.stats["max_steps"] == 10_000)


def test_path_engine_takes_any_grid_order_and_falls_back_under_jit_and_vmap():
    """A grid out of order or with repeats: the working-set engine solves it sorted and unique, and answers in
    the caller's order, as the classic engine (which follows the given order); a traced grid runs classic."""
    X, y = _path_design("dense")
    sorted_grid = np.asarray(L.lambda_grid(X, y, num=15, eps=1e-2))  # the program of the tests above
    order = np.random.default_rng(0).permutation(15)
    grid = np.append(sorted_grid[order], sorted_grid[order[0]])
    ref = L.lasso_path(X, y, sorted_grid)
    auto = L.lasso_path(X, y, grid)
    assert "kkt" in auto.stats and np.all(auto.result == RESULTS.successful)
    np.testing.assert_array_equal(auto.stats["lam"], grid)
    np.testing.assert_array_equal(auto.value, ref.value[np.append(order, order[0])])
    for k in ("intercept", "gap", "num_steps", "num_screened", "kkt"):
        np.testing.assert_array_equal(auto.stats[k], ref.stats[k][np.append(order, order[0])])
    batch = jnp.stack([X, X[:, ::-1]]), jnp.stack([grid, grid])  # traced designs and grids: the classic engine
    traced = jax.jit(jax.vmap(lambda A, lams: L.lasso_path(A, y, lams, tol=1e-12)))(*batch)
    assert "kkt" not in traced.stats and np.all(traced.result == RESULTS.successful)
    np.testing.assert_allclose(traced.value[0], auto.value, atol=1e-8)
    np.testing.assert_allclose(traced.value[1][:, ::-1], auto.value, atol=1e-8)
    with pytest.raises(ValueError, match="intercept"):
        L.lasso_path(X, y, grid, fit_intercept=False, engine="working_set")
    with pytest.raises(ValueError, match="engine"):
        L.lasso_path(X, y, grid, engine="fast")


def test_path_engine_failure_is_never_reported_as_success():
    """A step budget too small for the path: every lambda's code is a failure (the engine reports one code for
    the whole grid), not only the lambdas where it ran out; ``throw`` raises."""
    X, y = _path_design("dense")
    path = L.lasso_path(X, y, num_lambdas=15, eps=1e-2, max_steps=1)
    assert "kkt" in path.stats
    assert np.all(np.asarray(path.result) == RESULTS.max_steps_reached)
    with pytest.raises(RuntimeError):
        L.lasso_path(X, y, num_lambdas=15, eps=1e-2, max_steps=1, throw=True)
    # max_steps=0 certifies the start (the lasso family's rule): the classic engine, success at lambda_max only
    start = L.lasso_path(X, y, num_lambdas=15, eps=1e-2, max_steps=0)
    assert "kkt" not in start.stats and int(start.result[0]) == RESULTS.successful
    assert np.all(np.asarray(start.result[1:]) == RESULTS.max_steps_reached)


def test_path_engine_logistic_matches_the_classic_engine():
    X, y = _classification(seed=3)
    auto = L.lasso_path(X, y, num_lambdas=15, eps=1e-2, loss="logistic")
    tight = L.lasso_path(X, y, num_lambdas=15, eps=1e-2, loss="logistic", engine="classic", tol=1e-12)
    assert "kkt" in auto.stats and np.all(auto.result == RESULTS.successful)
    np.testing.assert_array_equal(auto.stats["lam"], tight.stats["lam"])
    np.testing.assert_allclose(auto.value, tight.value, atol=1e-4)
    np.testing.assert_allclose(auto.stats["intercept"], tight.stats["intercept"], atol=1e-4)
    gap = np.asarray(auto.stats["gap"])
    assert np.all(gap >= -1e-12) and np.all(gap <= 1e-6)  # log(2) ~ the null deviance: the classic target


def test_default_grid_floor_for_constant_design():
    # every centred column zero (or constant up to rounding): lambda_max is 0 or ~1e-17 and the default
    # grid used to hold zeros (lasso_path / lasso_cv raised "lambdas must be positive" for lambdas the user
    # never passed) or to reach 1e-20, where the path fitted rounding noise with coefficients of 1e31
    # (max_steps_reached); scikit-learn's grid is num copies of 1e-15, where every coefficient is zero.
    # Here the floor is relative to the units of the data (1e-15 on X / 2^e_X, y / 2^e_y with max |.| in [0.5, 1)).
    # The grids only (the solves compile for seconds): lambda_grid / the classic engine and the working-set engine
    from jaxknock.l1 import _ws_driver

    rng = np.random.default_rng(0)
    y = rng.normal(size=20)
    for X in (np.zeros((20, 4)), np.tile(rng.normal(size=4), (20, 1))):
        floor = np.ldexp(1e-15, np.frexp(np.abs(X).max())[1] + np.frexp(np.abs(y).max())[1])
        np.testing.assert_array_equal(L.lambda_grid(X, y, num=5), np.full(5, floor))
        np.testing.assert_array_equal(
            _ws_driver.default_grid(jnp.asarray(X), jnp.asarray(y), 1e-3, 5), np.full(5, 1e-15)
        )
    X = rng.normal(size=(20, 4))  # a usual design keeps sklearn's geometric grid
    np.testing.assert_allclose(
        L.lambda_grid(X, y, num=3, eps=1e-2), float(L.lambda_max(X, y)) * np.array([1, 0.1, 0.01])
    )


def test_lasso_does_not_depend_on_the_units_of_y_or_x():
    """The lasso is equivariant to the units (coef ~ c_y / c_X, lam ~ c_X c_y, intercept ~ c_y), its solvers were
    not at the edges: in float32 y and lam times 1e-20 gave all-zero coefficients and "successful" (X times 1e-20:
    max_steps_reached, y times 1e20: nonfinite), in float64 y times 1e160 nonfinite and 1e-160 zeros. Every entry
    point now solves on X / 2^e_X, y / 2^e_y (exact) and scales the answer back: under jit, and the state of
    lasso_init / lasso_step (kept in the caller's units) too. (The shapes and settings of the tests above: the
    float64 programs are shared.)"""
    X, y = _regression(seed=11)
    lam = 0.1
    with jax.enable_x64(False):
        X32, y32 = X.astype(np.float32), y.astype(np.float32)
        fit = jax.jit(lambda A, b, lam: L.lasso(A, b, lam))
        ref = fit(X32, y32, np.float32(lam))
        assert ref.successful and np.count_nonzero(ref.value) >= 3
        for cx, cy in ((1.0, 1e-20), (1e-20, 1.0), (1.0, 1e20)):
            sol = fit(X32 * np.float32(cx), y32 * np.float32(cy), np.float32(lam * cx * cy))
            assert sol.successful
            np.testing.assert_allclose(np.asarray(sol.value) * (cx / cy), ref.value, atol=2e-3)  # float32 tol 1e-4
    ref = L.lasso(X, y, lam, tol=1e-10)
    ref_state = L.lasso_step(L.lasso_init(X, y, lam, solver="cd", tol=1e-10), X, y, lam, solver="cd", tol=1e-10)
    for c in (1e-160, 1e160):
        sol = L.lasso(X, c * y, c * lam, tol=1e-10)
        assert sol.successful
        # c y is y to rounding, not exactly: the two solves may stop one sweep apart (tol 1e-10), so the match is
        # to the solver's accuracy (1.7e-10 seen on one CPU), which the failures above exceed by many orders
        np.testing.assert_allclose(sol.value / c, ref.value, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(sol.stats["intercept"] / c, ref.stats["intercept"], rtol=1e-7)
        np.testing.assert_allclose(  # vmap over y alone, X (already in [0.5, 1)) concrete
            jax.vmap(lambda b: L.lasso(X / 8, b, c * lam / 8, tol=1e-10).value)(c * y[None]).squeeze(0) / c,
            ref.value * 8,
            rtol=1e-6,
            atol=1e-9,
        )
        state = L.lasso_init(X, c * y, c * lam, solver="cd", tol=1e-10)
        state = L.lasso_step(state, X, c * y, c * lam, solver="cd", tol=1e-10)
        np.testing.assert_allclose(state.coef / c, ref_state.coef, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(state.offset / c, ref_state.offset, rtol=1e-9)


def test_cv_matches_sklearn_lassocv():
    X, y = _regression(seed=3, noise=2.0)
    sol = L.lasso_cv(X, y, folds=3, num_lambdas=15, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LassoCV(cv=3, alphas=15, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(sol.stats["lambdas"], ref.alphas_, rtol=1e-12)
    np.testing.assert_allclose(sol.stats["cv_error"], ref.mse_path_, rtol=1e-6)
    assert float(sol.stats["lam"]) == pytest.approx(ref.alpha_, rel=1e-12)
    np.testing.assert_allclose(sol.value, ref.coef_, atol=1e-7)
    np.testing.assert_allclose(sol.stats["intercept"], ref.intercept_, atol=1e-7)
    assert sol.result == RESULTS.successful


def test_cv_patience_stops_the_path_and_keeps_the_minimum():
    """Early stop along the CV path: the lambdas before the stop are solved exactly as
    without it, the rest are skipped (cv_error inf, few steps) and the CV minimum is kept."""
    X, y = _regression(seed=3, noise=2.0)
    full = L.lasso_cv(X, y, folds=3, num_lambdas=40, tol=1e-10, engine="classic")
    early = L.lasso_cv(X, y, folds=3, num_lambdas=40, tol=1e-10, patience=3, engine="classic")
    err_full, err_early = np.asarray(full.stats["cv_mean"]), np.asarray(early.stats["cv_mean"])
    best = int(full.stats["lam_index"])
    assert best < 36  # the grid continues well past the minimum
    assert int(early.stats["lam_index"]) == best
    np.testing.assert_allclose(early.value, full.value, atol=1e-9)
    solved = np.isfinite(err_early)
    assert solved[: best + 4].all() and not solved[best + 4 :].any()
    np.testing.assert_allclose(err_early[solved], err_full[solved], rtol=1e-8)
    assert int(early.stats["num_steps"]) < int(full.stats["num_steps"])
    assert early.result == RESULTS.successful
    with pytest.raises(ValueError, match="patience"):
        L.lasso_cv(X, y, patience=0)


def test_cv_default_engine_is_the_working_set_engine_and_agrees_with_classic():
    """``lasso_cv``'s default engine (working set, exact homotopy) equals the classic path
    solver on the whole grid (lambda, CV curve, coefficients); with ``patience`` it stops
    early (unsolved lambdas have cv_error inf) and keeps the same choice; under ``jit`` the
    classic engine runs; bad engine names are rejected."""
    X, y = _regression(seed=3, noise=2.0)
    ws = L.lasso_cv(X, y, folds=3, num_lambdas=40)
    classic = L.lasso_cv(X, y, folds=3, num_lambdas=40, tol=1e-12, engine="classic")
    assert "kkt" in ws.stats and "kkt" not in classic.stats  # which engine ran
    assert int(ws.stats["lam_index"]) == int(classic.stats["lam_index"])
    # the homotopy is exact up to rounding (6e-14 from the classic engine run to 1e-15); the
    # classic engine's gap of 1e-12 * D0 only puts its coefficients within ~sqrt(gap) of the
    # optimum: cv_error off by 1.2e-8 or 2.3e-7 depending on the compiler's rounding
    np.testing.assert_allclose(ws.stats["cv_error"], classic.stats["cv_error"], rtol=1e-6)
    np.testing.assert_allclose(ws.value, classic.value, atol=1e-8)
    np.testing.assert_allclose(ws.stats["intercept"], classic.stats["intercept"], atol=1e-8)
    assert ws.result == RESULTS.successful and float(ws.stats["kkt"]) < 1e-6
    early = L.lasso_cv(X, y, folds=3, num_lambdas=40, patience=3)
    solved = np.isfinite(np.asarray(early.stats["cv_mean"]))
    assert solved.sum() < 40 and int(early.stats["lam_index"]) == int(ws.stats["lam_index"])
    np.testing.assert_allclose(early.value, ws.value, atol=1e-12)
    jitted = jax.jit(lambda X, y: L.lasso_cv(X, y, folds=3, num_lambdas=10).value)(X, y)
    np.testing.assert_allclose(jitted, L.lasso_cv(X, y, folds=3, num_lambdas=10, engine="classic").value, atol=1e-12)
    with pytest.raises(ValueError, match="engine"):
        L.lasso_cv(X, y, engine="fast")
    with pytest.raises(ValueError, match="intercept"):
        L.lasso_cv(X, y, fit_intercept=False, engine="working_set")


def test_cv_default_engine_takes_any_grid_order():
    """An increasing grid (``np.logspace``) or a shuffled one: the working-set engine refused it ("lambdas must
    be decreasing") where the classic engine and ``LassoCV`` take it. It is solved sorted and answered in the
    given order: per-penalty stats permuted, ``lam_index`` into the given grid, the same fit."""
    X, y = _regression(seed=3, noise=2.0)
    grid = np.asarray(L.lasso_cv(X, y, folds=3, num_lambdas=40).stats["lambdas"])  # the program of the test above
    ref = L.lasso_cv(X, y, folds=3, lambdas=grid)
    for order in (np.arange(40)[::-1], np.random.default_rng(0).permutation(40)):
        sol = L.lasso_cv(X, y, folds=3, lambdas=grid[order])
        assert sol.result == RESULTS.successful and "kkt" in sol.stats
        np.testing.assert_array_equal(sol.stats["lambdas"], grid[order])
        for k in ("cv_error", "cv_mean", "cv_se", "coef_path", "intercept_path", "kkt_path"):
            np.testing.assert_array_equal(sol.stats[k], ref.stats[k][order], err_msg=k)
        assert int(order[int(sol.stats["lam_index"])]) == int(ref.stats["lam_index"])
        assert float(sol.stats["lam"]) == float(ref.stats["lam"])
        np.testing.assert_array_equal(sol.value, ref.value)


def test_classic_cv_breaks_ties_towards_the_largest_lambda_in_any_grid_order():
    """lasso_cv picks "the largest lambda among ties"; the classic engine scanned the grid in the given order
    and kept the first of equal CV errors, so on an increasing grid it chose the smallest of the tied all-zero
    fits above every fold's lambda_max (2 lambda_max where the working-set engine chose 4 lambda_max)."""
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(40, 5)), rng.normal(size=40)
    lm = float(L.lambda_max(X, y))
    grid = lm * np.array([4.0, 2.0, 1.5, 0.5, 0.1])
    for order in (np.arange(5), np.arange(5)[::-1]):
        sol = L.lasso_cv(X, y, folds=4, lambdas=grid[order], engine="classic")
        assert sol.stats["cv_mean"][list(order).index(0)] == sol.stats["cv_mean"][list(order).index(1)]
        assert float(sol.stats["lam"]) == grid[0], order
        assert int(order[int(sol.stats["lam_index"])]) == 0


def test_default_grid_path_and_cv_do_not_depend_on_the_units_of_y():
    """y in units of 1e-16 (float64) put lambda_max under the grid's absolute floor (1e-15): lasso_path and
    lasso_cv (both engines) returned all-zero coefficients, "successful"; y times 1e160 overflowed. The floor
    now applies on the unit scale. (Shapes and settings of the CV tests below: their programs are shared.)"""
    X, y = _regression(seed=3, noise=2.0)
    kw = {"auto": dict(folds=3, num_lambdas=15), "classic": dict(folds=3, num_lambdas=40, engine="classic")}
    ref_path = L.lasso_path(X, y, num_lambdas=15, eps=1e-2)
    ref_cv = {k: L.lasso_cv(X, y, **v) for k, v in kw.items()}
    for c in (1e-16, 1e160):
        path = L.lasso_path(X, c * y, num_lambdas=15, eps=1e-2)
        assert np.all(path.result == RESULTS.successful)
        np.testing.assert_allclose(path.stats["lam"] / c, ref_path.stats["lam"], rtol=1e-12)
        np.testing.assert_allclose(path.value / c, ref_path.value, rtol=1e-8, atol=1e-10)
        for k, v in kw.items():
            if (k == "auto") != (c > 1):  # one scale per engine: the working-set one at 1e160, classic at 1e-16
                continue
            cv = L.lasso_cv(X, c * y, **v)
            assert cv.successful
            np.testing.assert_allclose(cv.stats["lam"] / c, ref_cv[k].stats["lam"], rtol=1e-12)
            np.testing.assert_allclose(cv.value / c, ref_cv[k].value, rtol=1e-5, atol=1e-8)
            if c < 1e100:  # deviances scale with c^2 (1e320 is not a float64)
                np.testing.assert_allclose(cv.stats["cv_mean"] / c**2, ref_cv[k].stats["cv_mean"], rtol=1e-5)


def test_warm_calls_on_data_of_other_units_compile_nothing():
    """The answer's scaling back to the caller's units was one program over the arrays whose exponent is not
    zero, so its signature followed the data: a warm ``lasso_path`` / ``lasso_cv`` on ``y`` rescaled until
    ``e_y = e_X`` (the coefficients' exponent zero) compiled ``_ldexp_all`` again. (Settings of the test above.)"""
    from helpers import count_compiles

    X, y = _regression(seed=3, noise=2.0)
    ex = int(np.frexp(np.max(np.abs(X)))[1])
    ey = int(np.frexp(np.max(np.abs(y)))[1])
    runs = [
        lambda c: L.lasso_path(X, c * y, num_lambdas=15, eps=1e-2).value,
        lambda c: L.lasso_cv(X, c * y, folds=3, num_lambdas=15).value,
    ]
    for run in runs:
        ref = run(1.0)
        # y in other units, and in units with e_y = e_X (no coefficient scaling)
        scales = [3.0, 2.0 ** (ex - ey)]
        with count_compiles() as compiles:
            out = [run(c) for c in scales]
        assert compiles == []
        for c, v in zip(scales, out):
            np.testing.assert_allclose(v / c, ref, rtol=1e-10, atol=1e-12)


def test_a_new_grid_depth_eps_compiles_nothing():
    """``eps`` was a static argument of the default grid's program (``lasso_path``, ``lambda_grid``), so every
    new value (and ``jnp.float32(0.05)``, a different float) compiled the grid again; it is a traced argument
    now, as in the cross-validation engine: the same grids to the bit. (Settings of the tests above.)"""
    X, y = _regression(seed=3, noise=2.0)
    runs = [
        lambda e: L.lasso_path(X, y, num_lambdas=15, eps=e).stats["lam"],
        lambda e: L.lambda_grid(X, y, num=15, eps=e),
    ]
    for run in runs:
        run(1e-2)
        with count_compiles() as compiles:
            grids = [np.asarray(run(e)) for e in (0.05, 3e-3, np.float64(0.2))]
        assert compiles == []
        for e, grid in zip((0.05, 3e-3, 0.2), grids):
            np.testing.assert_allclose(grid[-1] / grid[0], e, rtol=1e-12)


def test_logistic_cv_equals_manual_folds():
    """Fold deviances and refit against scikit-learn fits on each training fold.

    Integer folds are stratified for the logistic loss (``StratifiedKFold``, as
    ``LogisticRegressionCV``): on rows sorted by class, contiguous folds (what
    ``folds=3`` meant before) held out one class per fold."""
    from sklearn.model_selection import StratifiedKFold

    X, y = _classification(seed=4, n=90)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    lambdas = np.geomspace(0.1, 0.01, 6)
    sol = L.lasso_cv(X, y, loss="logistic", folds=3, lambdas=lambdas, tol=1e-12)

    def fit(Xt, yt, lam):
        return LogisticRegression(
            l1_ratio=1.0, C=1.0 / (len(yt) * lam), solver="saga", tol=1e-13, max_iter=100_000
        ).fit(Xt, yt)

    errs = np.zeros((6, 3))
    for k, (tr, te) in enumerate(StratifiedKFold(3).split(X, y)):
        for i, lam in enumerate(lambdas):
            z = fit(X[tr], y[tr], lam).decision_function(X[te])
            errs[i, k] = 2 * np.mean(np.logaddexp(0, z) - y[te] * z)
    np.testing.assert_allclose(sol.stats["cv_error"], errs, rtol=1e-5)
    best = int(np.argmin(errs.mean(1)))
    assert int(sol.stats["lam_index"]) == best
    np.testing.assert_allclose(sol.value, fit(X, y, lambdas[best]).coef_[0], atol=1e-5)


def test_logistic_cv_is_equivariant_to_a_label_swap_and_a_row_permutation():
    """Metamorphic relations of the cross-validated l1-logistic fit: swapping the labels 0 <-> 1 keeps the
    stratified folds (classes are numbered by first appearance) and negates the coefficients; permuting the
    rows together with their fold ids changes nothing (to rounding)."""
    X, y = _classification(seed=4, n=90)
    lambdas = np.geomspace(0.1, 0.01, 6)
    ids = stratified_kfold_ids(y, 3)
    ref = L.lasso_cv(X, y, loss="logistic", folds=3, lambdas=lambdas, tol=1e-12)
    swapped = L.lasso_cv(X, 1 - y, loss="logistic", folds=3, lambdas=lambdas, tol=1e-12)
    perm = np.random.default_rng(0).permutation(90)
    permuted = L.lasso_cv(X[perm], y[perm], loss="logistic", folds=ids[perm], lambdas=lambdas, tol=1e-12)
    assert int(swapped.stats["lam_index"]) == int(permuted.stats["lam_index"]) == int(ref.stats["lam_index"])
    np.testing.assert_allclose(swapped.value, -ref.value, atol=1e-9)
    np.testing.assert_allclose(swapped.stats["intercept"], -ref.stats["intercept"], atol=1e-9)
    np.testing.assert_allclose(permuted.value, ref.value, atol=1e-9)
    np.testing.assert_allclose(permuted.stats["cv_error"], ref.stats["cv_error"], rtol=1e-9)


def test_explicit_fold_ids_and_kfold():
    assert L.kfold_ids(7, 3).tolist() == [0, 0, 0, 1, 1, 2, 2]
    X, y = _regression(seed=5)
    ids = L.kfold_ids(80, 3)
    a = L.lasso_cv(X, y, folds=3, num_lambdas=15)
    b = L.lasso_cv(X, y, folds=ids, num_lambdas=15)
    np.testing.assert_array_equal(a.value, b.value)


@pytest.mark.parametrize("solver", SOLVERS)
def test_vmap_equals_loop_and_jit_equals_eager(solver):
    X, y = _regression(seed=6)
    rng = np.random.default_rng(0)
    Xs = jnp.asarray(np.stack([X, X + 0.1 * rng.standard_normal(X.shape), X[:, ::-1].copy()]))
    f = lambda A: L.lasso(A, y, 0.1, solver=solver, tol=1e-10).value
    batched = jax.jit(jax.vmap(f))(Xs)
    for r in range(3):
        np.testing.assert_allclose(batched[r], f(Xs[r]), atol=1e-8)


def test_no_retrace_on_same_shapes():
    X, y = _regression(seed=7)
    L.lasso(X, y, 0.1)
    with count_compiles("fit") as compiles:
        L.lasso(X + 1.0, y * 2.0, 0.2)  # new values, same shapes: no new trace
    assert not compiles
    with count_compiles("fit") as compiles:  # the check can fail: a new shape compiles
        L.lasso(X[:-1], y[:-1], 0.2)
    assert len(compiles) == 1


@pytest.mark.parametrize(
    "call, n, most",
    [
        (lambda X, y: jaxknock.lasso_cv(X, y, folds=3, num_lambdas=10), 47, 6),
        (lambda X, y: jaxknock.lasso_path(X, y, num_lambdas=10), 45, 7),
    ],
    ids=["lasso_cv", "lasso_path"],
)
def test_first_call_compiles_few_programs(call, n, most):
    """A first call's unit scaling, default grid and restore are a few programs, not one per operation and shape.

    Shapes no other test uses, so every program is new (the session-46 code compiled 27 for ``lasso_cv``).
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 9))
    y = X[:, 0] + 0.1 * rng.standard_normal(n)
    with count_compiles() as compiles:
        jax.block_until_ready(call(X, y).value)
    assert 1 <= len(compiles) <= most, [m.split(" ")[1] for m in compiles]


def test_step_api_matches_solve():
    X, y = _regression(seed=8)
    lam = 0.1
    state = L.lasso_init(X, y, lam, solver="cd", tol=1e-10)
    for _ in range(200):
        if float(state.gap) <= 1e-10 * np.var(y):
            break
        state = L.lasso_step(state, X, y, lam, solver="cd", tol=1e-10)
    sol = L.lasso(X, y, lam, solver="cd", tol=1e-10)
    np.testing.assert_allclose(state.coef, sol.value, atol=1e-12)
    assert int(state.num_steps) == int(sol.stats["num_steps"])


def test_gap_refers_to_the_coefficients_not_a_drifted_predictor():
    """The iterations carry the linear predictor ``z`` incrementally (and the CD
    extrapolations combine stored ones with large weights), so rounding drift in
    ``z`` must not reach the certificate: after one step from a state whose ``z``
    is off by 1e-3, the gap is the gap of the returned coefficients (as a fresh
    ``lasso_init`` at them computes it). Before the fix the drift stayed in ``z``
    and the reported gap certified a predictor the coefficients do not give.
    (FISTA recomputes ``z`` at every iteration, so only CD is at stake.)"""
    X, y = _regression(seed=8)
    lam, kw = 0.1, dict(solver="cd", screen=False)
    state = L.lasso_init(X, y, lam, **kw)
    for _ in range(3):
        state = L.lasso_step(state, X, y, lam, **kw)
    drift = 1e-3 * np.random.default_rng(0).standard_normal(X.shape[0])
    state = L.lasso_step(state._replace(z=state.z + drift), X, y, lam, **kw)
    fresh = L.lasso_init(X, y, lam, init=state.coef, **kw)
    assert float(state.gap) == pytest.approx(float(fresh.gap), rel=1e-8)
    np.testing.assert_allclose(state.z, fresh.z, atol=1e-12)


def test_max_steps_reached_and_throw():
    X, y = _regression(seed=9)
    sol = L.lasso(X, y, 0.01, tol=1e-14, max_steps=2, solver="cd")
    assert sol.result == RESULTS.max_steps_reached
    assert "max_steps" in sol.messages()
    with pytest.raises(RuntimeError, match="max_steps"):
        L.lasso(X, y, 0.01, tol=1e-14, max_steps=2, solver="cd", throw=True)


def test_nonfinite_input_under_jit_sets_code():
    X, y = _regression(seed=10)
    X = X.copy()
    X[3, 2] = np.nan  # value checks are skipped on tracers; the code must report it
    code = jax.jit(lambda A: L.lasso(A, y, 0.1).result)(X)
    assert int(code) == RESULTS.nonfinite


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_safe_screening_is_safe(loss):
    if loss == "squared":
        X, y = _regression(seed=11)
        lam = 0.2
    else:
        X, y = _classification(seed=11)
        lam = 0.03
    screened = L.lasso(X, y, lam, loss=loss, tol=1e-12)
    plain = L.lasso(X, y, lam, loss=loss, tol=1e-12, screen=False)
    assert int(screened.stats["num_screened"]) > 0
    removed = ~np.asarray(screened.state.active)
    assert np.all(np.asarray(plain.value)[removed] == 0)
    np.testing.assert_allclose(screened.value, plain.value, atol=1e-6)


def test_warm_start_init():
    X, y = _regression(seed=12)
    cold = L.lasso(X, y, 0.05, tol=1e-10, solver="cd")
    warm = L.lasso(X, y, 0.05, tol=1e-10, solver="cd", init=cold.value)
    assert int(warm.stats["num_steps"]) <= 1
    np.testing.assert_allclose(warm.value, cold.value, atol=1e-8)


def test_bad_inputs():
    X, y = _regression(seed=13, n=20, m=5)
    with pytest.raises(ValueError, match="y has 19 entries but X has 20 rows"):
        L.lasso(X, y[:-1], 0.1)
    with pytest.raises(ValueError, match="y is constant"):
        L.lasso(X, np.ones(20), 0.1)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        L.lasso(Xn, y, 0.1)
    with pytest.raises(ValueError, match="y contains"):
        L.lasso(X, np.where(np.arange(20) == 3, np.inf, y), 0.1)
    with pytest.raises(ValueError, match="lam must be positive"):
        L.lasso(X, y, 0.0)
    with pytest.raises(ValueError, match="binary labels"):
        L.lasso(X, np.arange(20.0), 0.1, loss="logistic")
    with pytest.raises(ValueError, match="single class"):
        L.lasso(X, np.ones(20), 0.1, loss="logistic")
    with pytest.raises(ValueError, match="loss must be one of"):
        L.lasso(X, y, 0.1, loss="hinge")
    with pytest.raises(ValueError, match="solver must be one of"):
        L.lasso(X, y, 0.1, solver="newton")
    with pytest.raises(ValueError, match="2-D array"):
        L.lasso(X[None], y, 0.1)
    with pytest.raises(ValueError, match="folds must be"):
        L.lasso_cv(X, y, folds=1)
    with pytest.raises(ValueError, match="eps must lie in"):
        L.lasso_path(X, y, eps=2.0)
    with pytest.raises(ValueError, match="init must have shape"):
        L.lasso(X, y, 0.1, init=np.zeros(3))
    # a non-finite or text warm start: named before the solve (it returned `nonfinite` after it)
    bad = np.zeros(X.shape[1])
    bad[2] = np.nan
    for fit in (L.lasso, L.lasso_init):
        with pytest.raises(ValueError, match="init contains 1 non-finite"):
            fit(X, y, 0.1, init=bad)
    with pytest.raises(TypeError, match="init must be a numeric array"):
        L.lasso(X, y, 0.1, init=["a"] * X.shape[1])
    traced = jax.jit(lambda c: L.lasso(X, y, 0.1, init=c).result)(jnp.asarray(bad))  # under jit: a failure code
    assert int(traced) != int(jaxknock.RESULTS.successful)


def test_settings_seam_and_gap_key():
    """One L1Settings drives the package-level fit; stats['gap'] is the duality gap
    (``duality_gap`` is its deprecated twin), and a new tol does not retrace."""
    import jaxknock

    assert callable(jaxknock.lasso) and jaxknock.lasso is L.lasso
    X, y = _regression(seed=14)
    X, y = jnp.asarray(X), jnp.asarray(y)
    settings = L.make_settings(X.dtype, solver="cd", tol=1e-10)
    assert settings == L.L1Settings(
        loss="squared", fit_intercept=True, solver="cd", screen=True, tol=1e-10, max_steps=1000
    )
    sol = solvers.fit(X, y, jnp.asarray(0.1), jnp.zeros(X.shape[1]), settings)
    ref = L.lasso(X, y, 0.1, solver="cd", tol=1e-10)
    np.testing.assert_array_equal(sol.value, ref.value)
    assert float(ref.stats["gap"]) == float(ref.stats["duality_gap"])
    with count_compiles("fit") as compiles:
        L.lasso(X, y, 0.1, solver="cd", tol=1e-8, max_steps=500)  # numeric settings are traced
    assert not compiles
    with pytest.raises(ValueError, match="tol must be"):
        L.make_settings(X.dtype, tol=-1.0)


def test_text_response_names_y():
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(TypeError, match="y must be a numeric array"):
        L.lambda_max(X, np.array(["a", "b"] * 3))
    with pytest.raises(TypeError, match="y must be a numeric array"):
        L.lasso(X, ["a", "b"] * 3, 0.1)
    # a key where an array belongs (a swapped argument) is named, not JAX's "Cannot interpret 'key<fry>'"
    with pytest.raises(TypeError, match="X must be a numeric array, got a jax.random key"):
        jaxknock.fixed_x_knockoffs(jax.random.key(0), np.full(2, 0.2))


def test_a_bool_design_is_its_zero_one_floats():
    """A bool ``X`` (a 0/1 genotype or indicator matrix) was refused ("X must be a real floating array") by every
    functional entry point while the same 0/1 as int8 ran; it is now its 0/1 floats (as sklearn's ``check_array``),
    eager and under jit. Text and complex designs, and a bool W (a mask), are still refused by name."""
    rng = np.random.default_rng(0)
    X = rng.random((40, 4)) < 0.4
    Xf = X.astype(float)
    y = Xf[:, 0] - Xf[:, 1] + 0.3 * rng.standard_normal(40)
    np.testing.assert_array_equal(L.lasso(X, y, 0.05).value, L.lasso(Xf, y, 0.05).value)
    np.testing.assert_array_equal(jaxknock.ledoit_wolf(X).covariance, jaxknock.ledoit_wolf(Xf).covariance)
    Xk = np.hstack([X, rng.random((40, 4)) < 0.5])
    np.testing.assert_array_equal(jaxknock.marginal_correlation(Xk, y), jaxknock.marginal_correlation(1.0 * Xk, y))
    jitted = jax.jit(jaxknock.marginal_correlation)(jnp.asarray(Xk), jnp.asarray(y))
    np.testing.assert_allclose(jitted, jaxknock.marginal_correlation(1.0 * Xk, y), rtol=1e-12)
    for bad, what in ((X.astype(complex), "real floating"), (X.astype(str), "numeric array")):
        with pytest.raises(TypeError, match=f"X must be a {what}"):
            L.lasso(bad, y, 0.05)
    with pytest.raises(TypeError, match="W must be a real floating array, got dtype bool"):  # a mask, not statistics
        jaxknock.knockoff_select(X[0], 0.1)


def test_a_scipy_sparse_design_is_named_where_a_dense_array_is_needed():
    # it has a dtype, so it went on to numpy: "setting an array element with a sequence", naming nothing
    # (lasso, the kernels, the covariance estimators, knockoff_filter alike)
    import scipy.sparse as sp

    X = sp.csr_matrix(np.eye(6, 3))
    for call in (lambda: L.lasso(X, np.arange(6.0), 0.1), lambda: jaxknock.kernel_target_alignment(X, np.arange(6.0))):
        with pytest.raises(TypeError, match=r"X is a scipy.sparse csr_matrix.*pass X.toarray\(\)"):
            call()


def test_host_array_containers_fit_as_their_plain_float64_copy():
    # a big-endian ('>f8', as read from a FITS / network-order file) or long double array was JAX's
    # "Dtype >f8 is not a valid JAX array type", a masked array with nothing masked JAX's "masked arrays are
    # not supported", a pandas Float64 y "Cannot interpret 'Float64Dtype()' as a data type", an object
    # array of floats (df.to_numpy() of int and float columns) "got dtype object": none named an argument
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5))
    y = X[:, 0] - X[:, 1] + 0.3 * rng.standard_normal(30)
    ref = np.asarray(L.lasso(X, y, 0.05).value)
    for Xv in (X.astype(">f8"), X.astype(np.longdouble), np.ma.array(X), X.astype(object)):
        np.testing.assert_array_equal(L.lasso(Xv, y, 0.05).value, ref)
    for yv in (y.astype(">f8"), pd.Series(y).astype("Float64"), np.ma.array(y, mask=np.zeros(30, bool))):
        np.testing.assert_array_equal(L.lasso(X, yv, 0.05).value, ref)


def test_a_masked_entry_is_refused_not_fitted_as_its_hidden_value():
    # np.asarray / jnp.asarray(a, dtype) read the value under the mask as data: lambdas, fold ids (and,
    # with x64 off, X through the host centring) were fitted silently
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5))
    y = X[:, 0] + 0.3 * rng.standard_normal(30)
    mask = np.zeros(30, bool)
    mask[3] = True
    lambdas = np.ma.array([0.5, 0.2, 0.1], mask=[False, True, False])
    with pytest.raises(ValueError, match="lambdas is a masked array with 1 masked entry"):
        L.lasso_path(X, y, lambdas)
    with pytest.raises(ValueError, match="lambdas is a masked array"):
        S.lcd(np.hstack([X, X[::-1]]), y, lambdas=lambdas, folds=3)
    with pytest.raises(ValueError, match="folds is a masked array"):
        L.lasso_cv(X, y, folds=np.ma.array(np.arange(30) % 3, mask=mask), num_lambdas=4)
    with pytest.raises(ValueError, match="y is a masked array"):
        L.lasso(X, np.ma.array(y, mask=mask), 0.1)
    with jax.enable_x64(False), pytest.raises(ValueError, match="X is a masked array"):
        L.lasso(np.ma.array(X, mask=np.broadcast_to(mask[:, None], X.shape)), y, 0.1)


def test_stratified_kfold_ids_equal_scikit_learns_stratified_kfold():
    import warnings

    from sklearn.model_selection import StratifiedKFold

    from jaxknock.l1.folds import stratified_kfold_ids

    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        n, K, C = int(rng.integers(6, 60)), int(rng.integers(2, 6)), int(rng.integers(2, 4))
        y = rng.choice(np.array(["b", "a", "c"])[:C], n)  # text labels, first appearance != sorted order
        ref = np.empty(n, int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a class smaller than K: scikit-learn warns, both still split
            try:
                for k, (_, test) in enumerate(StratifiedKFold(K).split(np.zeros(n), y)):
                    ref[test] = k
            except ValueError:
                continue
        np.testing.assert_array_equal(stratified_kfold_ids(y, K), ref)
        checked += 1
    assert checked > 40
    with pytest.raises(ValueError, match="folds must be an integer"):
        stratified_kfold_ids([0, 1, 0], 4)


def _logistic_kkt(X, y, b, b0, lam):
    """Largest KKT violation of the l1-logistic problem relative to ``lam``, and ``|mean residual|``."""
    r = y - 1.0 / (1.0 + np.exp(-(X @ b + b0)))
    g = X.T @ r / X.shape[0]
    v = np.where(b != 0, np.abs(g - lam * np.sign(b)), np.maximum(np.abs(g) - lam, 0.0))
    return v.max() / lam, abs(r.mean())


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_gap_is_a_valid_certificate(solver, fit_intercept):
    # Shifted, scaled columns and a non-optimal intercept after the first steps:
    # the dual point must satisfy sum(theta) = 0 (the unpenalised intercept),
    # else the "gap" went negative (-7e-6) and a 4%-off fit was reported successful.
    warnings.simplefilter("ignore", ConvergenceWarning)
    for seed in (31, 22, 5):
        rng = np.random.default_rng(seed)
        n, p = int(rng.integers(10, 80)), int(rng.integers(2, 30))
        X = rng.standard_normal((n, p)) * rng.uniform(0.5, 3, p) + rng.uniform(-3, 3, p)
        y = (X[:, 0] + rng.standard_normal(n) > np.median(X[:, 0]) + 1.0).astype(float)
        lmax = float(L.lambda_max(X, y, loss="logistic", fit_intercept=fit_intercept))
        lams = np.array([0.6, 0.3]) * lmax
        sol = L.lasso(X, y, lams[1], loss="logistic", solver=solver, fit_intercept=fit_intercept, tol=1e-12)
        path = L.lasso_path(X, y, lams, loss="logistic", solver=solver, fit_intercept=fit_intercept, tol=1e-12)
        fits = [(sol.value, sol.stats["intercept"], sol.stats["gap"], sol.result, lams[1])]
        st = path.stats
        fits += [(path.value[i], st["intercept"][i], st["gap"][i], path.result[i], lams[i]) for i in range(2)]
        for b, b0, gap, code, lam in fits:
            b, b0 = np.asarray(b), float(b0)
            assert code == RESULTS.successful
            assert float(gap) >= -1e-13
            viol, mean_resid = _logistic_kkt(X, y, b, b0, lam)
            assert viol < 1e-4
            if fit_intercept:
                assert mean_resid < 1e-7
        if fit_intercept:
            ref = LogisticRegression(l1_ratio=1, C=1 / (n * lams[1]), solver="saga", tol=1e-15, max_iter=10**6)
        else:
            ref = LogisticRegression(
                l1_ratio=1, C=1 / (n * lams[1]), solver="liblinear", tol=1e-14, max_iter=10**6, fit_intercept=False
            )
        ref = ref.fit(X, y)
        np.testing.assert_allclose(sol.value, ref.coef_[0], atol=1e-5)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_cv_gap_is_nonnegative_with_intercept(loss):
    X, y = _classification(seed=3, n=60, m=12) if loss == "logistic" else _regression(seed=3, n=60, m=12)
    X = X * np.linspace(0.5, 3.0, X.shape[1]) + np.linspace(-3.0, 3.0, X.shape[1])
    lmax = float(L.lambda_max(X, y, loss=loss))
    sol = L.lasso_cv(X, y, folds=3, lambdas=lmax * np.array([0.5, 0.2, 0.1]), loss=loss, engine="classic", tol=1e-12)
    assert sol.result == RESULTS.successful
    assert float(sol.stats["gap"]) >= -1e-13
    if loss == "logistic":
        b, b0, lam = np.asarray(sol.value), float(sol.stats["intercept"]), float(sol.stats["lam"])
        viol, mean_resid = _logistic_kkt(X, y, b, b0, lam)
        assert viol < 1e-4 and mean_resid < 1e-7


@pytest.mark.parametrize("solver", SOLVERS)
def test_nonpositive_traced_lam_is_not_successful(solver):
    # Eagerly lam <= 0 raises; under jit it was solved and reported successful.
    X, y = _regression(seed=6, n=40, m=6)
    for bad in (-0.1, 0.0):
        code = jax.jit(lambda lam: L.lasso(X, y, lam, solver=solver).result)(bad)
        assert int(code) == RESULTS.nonfinite
    path = jax.jit(lambda lams: L.lasso_path(X, y, lams, solver=solver))(jnp.array([0.5, -0.1]))
    assert [int(c) for c in path.result] == [RESULTS.successful, RESULTS.nonfinite]
    cv = jax.jit(lambda lams: L.lasso_cv(X, y, lambdas=lams, folds=3, solver=solver))(jnp.array([0.5, -0.1]))
    assert int(cv.result) == RESULTS.nonfinite and float(cv.stats["lam"]) == 0.5
    state = jax.jit(lambda lam: L.lasso_init(X, y, lam, solver=solver))(-0.1)
    assert not np.isfinite(float(state.gap))
    with pytest.raises(ValueError, match="lam must be positive"):
        L.lasso_step(L.lasso_init(X, y, 0.1, solver=solver), X, y, -0.1, solver=solver)


def test_invalid_logistic_labels_under_jit_are_not_successful():
    # Eagerly these raise; under jit y > 0 made {1, 2} one class ("successful",
    # zero coefficients, intercept 28.6) and {0, 2} a silent {0, 1}.
    X, y01 = _classification(seed=6, n=40, m=6)
    fit = jax.jit(lambda y: L.lasso(X, y, 0.05, loss="logistic").result)
    path = jax.jit(lambda y: L.lasso_path(X, y, [0.1, 0.05], loss="logistic").result)
    cv = jax.jit(lambda y: L.lasso_cv(X, y, lambdas=[0.1, 0.05], folds=3, loss="logistic").result)
    for bad in (y01 + 1.0, 2.0 * y01, y01 - (np.arange(40) % 3 == 0), np.ones(40), np.zeros(40)):
        with pytest.raises(ValueError, match="y "):
            L.lasso(X, bad, 0.05, loss="logistic")
        assert int(fit(bad)) == RESULTS.nonfinite
        assert np.all(np.asarray(path(bad)) == RESULTS.nonfinite)
        assert int(cv(bad)) == RESULTS.nonfinite
    for good in (y01, 2.0 * y01 - 1.0):
        assert int(fit(good)) == RESULTS.successful
    np.testing.assert_allclose(
        jax.jit(lambda y: L.lasso(X, y, 0.05, loss="logistic").value)(2.0 * y01 - 1.0),
        L.lasso(X, y01, 0.05, loss="logistic").value,
        atol=1e-12,
    )


def test_empty_grid_and_non_numeric_lam_are_named():
    X, y = _regression(seed=2, n=30, m=5)
    with pytest.raises(ValueError, match="lambdas must hold at least one penalty"):
        L.lasso_path(X, y, [])  # returned an empty (0, m) path
    with pytest.raises(ValueError, match="lambdas must hold at least one penalty"):
        L.lasso_cv(X, y, lambdas=[])
    for bad in ("0.1", True, np.array([True])):
        with pytest.raises(TypeError, match="lam must be a real number"):
            L.lasso(X, y, bad)  # "0.1": numpy's isfinite TypeError; True: solved at lam = 1
    assert L.lasso(X, y, np.int64(1)).result == RESULTS.successful


def test_an_infinite_tol_is_refused():
    """``tol=inf`` certified the zero start: ``lasso`` / ``lasso_path`` / ``lasso_cv(engine="classic")`` returned
    `successful` with every coefficient zero at a penalty far below ``lambda_max``."""
    X, y = _regression(seed=14)
    for call in (
        lambda: L.lasso(X, y, 0.01, tol=np.inf),
        lambda: L.lasso_path(X, y, num_lambdas=3, tol=np.inf, engine="classic"),
        lambda: L.lasso_cv(X, y, num_lambdas=3, tol=np.inf, engine="classic"),
        lambda: L.lasso_init(X, y, 0.01, tol=np.inf),
    ):
        with pytest.raises(ValueError, match="tol must be a positive number, got inf"):
            call()


def test_throw_must_be_a_bool():
    """``throw="no"`` is truthy: a failed solve raised ``SolverError`` where the caller asked for no error (and a
    successful one passed). Text is refused, naming ``throw``."""
    X, y = _regression(seed=15)
    for call in (
        lambda: L.lasso(X, y, 0.01, throw="no"),
        lambda: L.lasso_path(X, y, num_lambdas=3, throw="False", engine="classic"),
        lambda: jaxknock.sdp(np.eye(3), throw="no"),
    ):
        with pytest.raises(TypeError, match="throw must be True or False"):
            call()


def test_the_working_set_engine_refuses_the_classic_solvers_settings():
    """``engine="working_set"`` with ``solver="fista"`` or ``screen=False`` ran the engine and ignored them."""
    X, y = _regression(seed=14)
    for f in (L.lasso_cv, L.lasso_path):
        for kw in (dict(solver="fista"), dict(screen=False)):
            with pytest.raises(ValueError, match="engine='working_set' has its own solver"):
                f(X, y, num_lambdas=3, engine="working_set", **kw)


def test_grid_fold_and_step_arguments_are_named():
    """``lambda_grid(num=0)`` blamed a ``num_lambdas`` it does not take; ``eps="0.1"`` was Python's "'<' not
    supported"; ``kfold_ids(5.0, 2)`` failed in a slice and ``kfold_ids(True, 2)`` spoke of "n_samples=True";
    ``lasso_step`` with the state of a narrower design failed inside JAX ("slice_sizes ...")."""
    X, y = _regression(seed=14, n=30, m=6)
    with pytest.raises(ValueError, match="num must be a positive integer"):
        L.lambda_grid(X, y, num=0)
    for f in (lambda: L.lambda_grid(X, y, eps="0.1"), lambda: L.lasso_path(X, y, eps="0.1")):
        with pytest.raises(TypeError, match="eps must be a real number"):
            f()
    for bad in (5.0, True, 1):
        with pytest.raises(ValueError, match="n must be an integer >= 2"):
            L.kfold_ids(bad, 2)
    np.testing.assert_array_equal(L.kfold_ids(np.int64(5), 2), [0, 0, 0, 1, 1])
    state = L.lasso_init(X[:, :4], y, 0.1)
    with pytest.raises(ValueError, match=r"state must be the LassoState .* shape \(6,\)"):
        L.lasso_step(state, X, y, 0.1)
    for started, other in (("cd", "fista"), ("fista", "cd")):  # an AttributeError of None ('t' / 'coefs')
        state = L.lasso_init(X, y, 0.1, solver=started)
        with pytest.raises(ValueError, match=f"started by lasso_init with solver='{started}'"):
            L.lasso_step(state, X, y, 0.1, solver=other)


def test_traced_folds_are_named():
    """Fold ids (or a fold count) passed through ``jax.jit`` were JAX's TracerArrayConversionError naming nothing."""
    from jaxknock.l1.working_set import l1_cv

    X, y = map(jnp.asarray, _regression(seed=14, n=30, m=6))
    ids = jnp.asarray(np.arange(30) % 3)
    for f in (lambda f: L.lasso_cv(X, y, folds=f), lambda f: l1_cv(X, y, folds=f)):
        for folds in (ids, 3):
            with pytest.raises(TypeError, match="folds must be an int or a concrete array .* traced"):
                jax.jit(f)(folds)


def test_traced_labels_with_a_single_class_training_fold_are_voided():
    """Eager calls refuse a training fold of one class; under ``jit`` (traced labels: one positive in 30 rows,
    3 stratified folds) ``lasso_cv`` and ``lcd`` came back `successful` with a plausible penalty."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 4))
    y = np.zeros(30)
    y[4] = 1.0
    f = jax.jit(lambda y: L.lasso_cv(X, y, loss="logistic", folds=3, num_lambdas=3))
    sol = f(y)
    assert int(sol.result) == RESULTS.nonfinite and np.all(np.isnan(sol.value)) and np.isnan(sol.stats["lam"])
    W = jax.jit(lambda y: S.lcd(X, y, loss="logistic", folds=3, num_lambdas=3))(y)
    assert int(W.result) == RESULTS.nonfinite and np.all(np.isnan(W.value))
    y[:3] = 1.0  # every training fold holds both classes: a fit
    assert int(f(y).result) == RESULTS.successful


def test_numpy_scalar_settings_and_traced_settings():
    """``tol=np.float32(1e-4)`` was refused as "tol must be a positive number" (only Python floats passed);
    a traced ``tol`` / ``max_steps`` was told the same, although its value was never the problem."""
    X, y = _regression(seed=14)
    ref = L.lasso(X, y, 0.1, tol=1e-4, max_steps=300)
    sol = L.lasso(X, y, 0.1, tol=np.float32(1e-4), max_steps=np.int32(300))
    assert int(sol.result) == RESULTS.successful
    np.testing.assert_array_equal(sol.value, ref.value)
    with pytest.raises(ValueError, match="tol must be a positive number, got True"):
        L.make_settings(jnp.float64, tol=True)
    # a concrete JAX scalar was refused as "tol must be a positive number, got Array(1.e-04)" (the S solvers
    # take one); now the answer of the Python float, and the refusals stay
    jax_tol = L.lasso(X, y, 0.1, tol=jnp.float64(1e-4), max_steps=jnp.int32(300))
    np.testing.assert_array_equal(jax_tol.value, ref.value)
    assert L.make_settings(jnp.float32, tol=jnp.float32(1e-4)).tol == float(np.float32(1e-4))
    for bad in (jnp.float64(-1.0), jnp.asarray([1e-4]), jnp.bool_(True)):
        with pytest.raises(ValueError, match="tol must be a positive number"):
            L.make_settings(jnp.float64, tol=bad)
    with pytest.raises(TypeError, match="tol must be a concrete .* traced"):
        jax.jit(lambda t: L.lasso(jnp.asarray(X), jnp.asarray(y), 0.1, tol=t))(1e-4)
    with pytest.raises(TypeError, match="max_steps must be a concrete .* traced"):
        jax.jit(lambda m: L.lasso(jnp.asarray(X), jnp.asarray(y), 0.1, max_steps=m))(100)


def test_traced_fit_intercept_is_named():
    """``jax.jit(lasso)(X, y, lam, fit_intercept=False)`` was a TracerBoolConversionError (lambda_max:
    "Non-hashable static arguments"): fit_intercept selects the program, so it is named as traced."""
    X, y = _regression(seed=3, n=20, m=6)
    X, y = jnp.asarray(X), jnp.asarray(y)
    for fn in (
        lambda X, y, f: L.lasso(X, y, 0.1, fit_intercept=f),
        lambda X, y, f: L.lambda_max(X, y, fit_intercept=f),
    ):
        with pytest.raises(TypeError, match="fit_intercept must be a Python bool, not a traced value"):
            jax.jit(fn)(X, y, False)


def test_text_or_none_flags_are_refused():
    """``fit_intercept="no"`` is truthy: it ran with an intercept. Text and ``None`` now raise, naming the flag."""
    X, y = _regression(seed=4, n=20, m=6)
    for bad in ("no", "False", None):
        with pytest.raises(TypeError, match="fit_intercept must be True or False"):
            L.lasso(X, y, 0.1, fit_intercept=bad)
    np.testing.assert_array_equal(
        L.lasso(X, y, 0.1, fit_intercept=np.False_).value, L.lasso(X, y, 0.1, fit_intercept=False).value
    )


def test_logistic_path_on_separable_data_is_successful_and_matches_sklearn():
    # Labels that a hyperplane separates: every penalised problem has a finite minimiser,
    # but the fitted probabilities saturate. The dual point's probabilities were rescaled by
    # a factor that rounding made 1 + eps, so 1 - t fell below zero, the dual entropy was NaN
    # and the smallest ~20 penalties of the default grid came back `nonfinite`.
    from scipy.special import expit

    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 20))
    y = (X[:, 0] > 0).astype(float)
    path = L.lasso_path(X, y, loss="logistic", solver="cd", num_lambdas=30, tol=1e-12, max_steps=10_000)
    assert np.all(np.asarray(path.result) == RESULTS.successful)
    assert np.all(np.isfinite(np.asarray(path.stats["gap"])))
    lam = float(path.stats["lam"][-1])  # 1e-3 * lambda_max: |coef_0| ~ 22, |z| up to ~40
    b, b0 = np.asarray(path.value[-1]), float(path.stats["intercept"][-1])
    g = X.T @ (expit(X @ b + b0) - y) / X.shape[0]
    viol = np.where(b != 0, np.abs(g + lam * np.sign(b)), np.maximum(np.abs(g) - lam, 0.0))
    assert viol.max() < 1e-6 * lam
    assert abs(np.mean(expit(X @ b + b0) - y)) < 1e-12
    ref = LogisticRegression(l1_ratio=1.0, C=1 / (X.shape[0] * lam), solver="saga", tol=1e-12, max_iter=10**6)
    ref = ref.fit(X, y)
    np.testing.assert_allclose(b, ref.coef_[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(b0, ref.intercept_[0], rtol=0, atol=1e-6)


def test_logistic_dual_probabilities_stay_in_the_unit_interval_when_saturated():
    # With saturated probabilities the training mean of sigmoid(z) equals mean(y) up to
    # rounding, and the rescaling factor of the branch taken came out as 1 + 2e-16 for
    # some z (e.g. seed 131 below), which gave t = -2e-16 and a NaN dual entropy.
    from jaxknock.l1.screening import logistic_dual_probabilities

    y = (np.arange(100) < 46).astype(float)
    signs = np.where(y == 1, 1.0, -1.0)
    probs = jax.jit(lambda z: logistic_dual_probabilities(jnp.ones(100), 100.0, jnp.asarray(y), z, True))
    for k in range(120, 140):
        z = signs * np.random.default_rng(k).uniform(30, 40, 100)
        t, one_minus_t = (np.asarray(a) for a in probs(jnp.asarray(z)))
        assert t.min() >= 0 and one_minus_t.min() >= 0
        assert t.max() <= 1 and one_minus_t.max() <= 1


def test_integer_folds_are_stratified_for_the_logistic_loss():
    # lasso_cv(loss="logistic", folds=K) used contiguous folds (KFold) while knockoff_filter and
    # LogisticRegressionCV stratify; on rows sorted by class they held out one class per fold.
    from jaxknock.l1.folds import resolve_folds, stratified_kfold_ids
    from jaxknock.l1.working_set import l1_cv

    X, y = _classification(seed=7, n=60, m=8)
    order = np.argsort(-y, kind="stable")  # sorted by class, class 1 first
    X, y = X[order], y[order]
    ids = stratified_kfold_ids(y, 4)
    for k in range(4):  # every held-out fold mirrors the class proportions
        assert abs(y[ids == k].mean() - y.mean()) <= 1 / np.sum(ids == k)
    lambdas = np.geomspace(0.1, 0.02, 4)
    errors = {}
    for engine in ("auto", "classic"):
        a = L.lasso_cv(X, y, folds=4, lambdas=lambdas, loss="logistic", engine=engine)
        b = L.lasso_cv(X, y, folds=ids, lambdas=lambdas, loss="logistic", engine=engine)
        errors[engine] = np.asarray(b.stats["cv_error"])
        np.testing.assert_array_equal(np.asarray(a.stats["cv_error"]), errors[engine])
    # the working-set engine's own entry point stratifies too
    a = l1_cv(X, y, folds=4, lambdas=lambdas, loss="logistic", early_stop=False)
    np.testing.assert_array_equal(np.asarray(a.stats["cv_error"]), errors["auto"])
    with pytest.raises(ValueError, match="fold ids"):
        l1_cv(np.stack([X, X]), np.stack([y, 1 - y]), folds=4, lambdas=lambdas, loss="logistic")
    # traced labels (lasso_cv under jit) get the same folds
    traced = jax.jit(lambda y: resolve_folds(60, 4, y, "logistic")[0])(jnp.asarray(y))
    np.testing.assert_array_equal(np.asarray(traced), ids)


@pytest.mark.parametrize("K", [2, 3, 5])
def test_traced_stratified_fold_ids_equal_the_concrete_ones(K):
    from jaxknock.l1.folds import binary_stratified_ids, stratified_kfold_ids

    rng = np.random.default_rng(K)
    labels = (rng.random((40, 23)) < rng.uniform(0.1, 0.9, (40, 1))).astype(float)
    labels[:, :2] = [0.0, 1.0]  # both classes present
    labels[::2, 0] = 1.0  # half the rows start with class 1 (numbered first)
    traced = jax.jit(jax.vmap(lambda lab: binary_stratified_ids(lab, K)))(jnp.asarray(labels))
    for lab, got in zip(labels, np.asarray(traced)):
        np.testing.assert_array_equal(got, stratified_kfold_ids(lab, K))


@pytest.mark.parametrize("p", [50, 200])
def test_cd_on_two_rows_reaches_the_closed_form_solution(p):
    # With an intercept the centred columns of a two-row design are all multiples of
    # u = (1, -1) / sqrt(2): X_c = u a^T, y_c = c u, and the lasso puts all its weight on the
    # column with the largest |a_j|: a_j beta_j = S(c, 2 lam / |a_j|). Cyclic CD (like
    # scikit-learn's Lasso) moved weight between near-tied columns by a constant amount per
    # epoch and stopped at max_steps_reached (1000 epochs) at small lam; the line
    # extrapolation along that move reaches the solution.
    rng = np.random.default_rng(p)
    for _ in range(3):
        X, y = rng.standard_normal((2, p)), rng.standard_normal(2)
        u = np.array([1.0, -1.0]) / np.sqrt(2.0)
        a, c = u @ (X - X.mean(0)), u @ (y - y.mean())
        j = int(np.argmax(np.abs(a)))
        for frac in (1e-2, 1e-4):
            lam = frac * float(L.lambda_max(X, y))
            sol = L.lasso(X, y, lam, solver="cd", tol=1e-12)  # near-tied columns: tight tol to pin beta
            assert sol.result == RESULTS.successful
            expected = np.zeros(p)
            expected[j] = np.sign(c) * max(abs(c) - 2 * lam / abs(a[j]), 0.0) / a[j]
            np.testing.assert_allclose(sol.value, expected, atol=1e-6 * abs(expected[j]))
            ref = Lasso(alpha=lam, tol=1e-14, max_iter=10**6).fit(X, y)
            np.testing.assert_allclose(ref.coef_, expected, atol=1e-6 * abs(expected[j]))


def test_extrapolation_never_revives_a_screened_feature():
    # Anderson extrapolation combines the last iterates, some from before a feature was
    # screened out: it set that frozen (never again updated) feature nonzero, which left a
    # provably-zero coefficient nonzero in a `successful` result, or stalled the solve.
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((5, 50)), rng.standard_normal(5)
    sol = L.lasso(X, y, 0.1 * float(L.lambda_max(X, y)), solver="cd")
    assert sol.result == RESULTS.successful
    assert np.all(np.asarray(sol.state.coef)[~np.asarray(sol.state.active)] == 0)


def _epoch_design(seed=0, n=200, m=20):
    """Columns of epoch seconds: ``1.7e9`` plus deviations of about a minute (float32 spacing at 1.7e9: 128)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * 60.0
    y = X[:, :4] @ np.full(4, 0.02) + rng.standard_normal(n)
    return X, y


def test_float64_host_x_with_an_epoch_offset_fits_as_the_centred_one():
    """With x64 off a float64 NumPy ``X`` was cast to float32 before it was centred: ``X + 1.7e9`` kept
    a few levels per column: here the CV ran out of steps with other coefficients (0.0096 for 0.0195);
    on a 300 x 40 design the lasso at one penalty ran to coefficients of ``2.8e16`` and ``lasso_cv``
    chose ``lam`` 15.8 (working set: 32.7) instead of 2.12, 20 of 21 selected features different.
    The means now come out in float64 on the host first (``centre_on_host``).
    (One float32 program compiles here: ~3 s of the test.)"""
    X, y = _epoch_design()
    with jax.enable_x64(False):
        cvs = [jaxknock.lasso_cv(A, y, folds=3, num_lambdas=8, engine="classic") for A in (X, X + 1.7e9)]
    assert cvs[0].value.dtype == jnp.float32 and int(cvs[1].result) == RESULTS.successful
    assert float(cvs[1].stats["lam"]) == float(cvs[0].stats["lam"])
    np.testing.assert_allclose(cvs[1].value, cvs[0].value, atol=1e-6)  # coefficients ~1e-2
    np.testing.assert_allclose(cvs[1].stats["cv_mean"], cvs[0].stats["cv_mean"], rtol=1e-5)


def test_float64_host_offsets_keep_the_logistic_path_and_the_response():
    """The logistic path on ``X + 1.7e9`` (its coefficients moved by 0.06 of 0.08 before) and a least
    squares ``y + 1e6`` (coefficients moved by 0.1; ``y + 1.7e9`` was rejected as constant) fit as
    the centred data."""
    X, y = _epoch_design()
    labels = (y > np.median(y)).astype(np.float64)
    with jax.enable_x64(False):
        paths = [jaxknock.lasso_path(A, labels, num_lambdas=5, loss="logistic") for A in (X, X + 1.7e9)]
        fits = [jaxknock.lasso(X, r, 0.5, solver="cd") for r in (y, y + 1e6, y + 1.7e9)]
    np.testing.assert_allclose(paths[1].value, paths[0].value, atol=1e-5)  # float32 tol 1e-4 (gap)
    np.testing.assert_array_equal(paths[1].stats["lam"], paths[0].stats["lam"])
    for fit, offset in zip(fits[1:], (1e6, 1.7e9)):
        np.testing.assert_allclose(fit.value, fits[0].value, atol=1e-6)
        assert float(fit.stats["intercept"]) - offset == pytest.approx(float(fits[0].stats["intercept"]), abs=1e-5)


def test_float64_host_offset_intercept_predicts_like_a_float64_sklearn_fit():
    """On the caller's ``X + 1.7e9`` the coefficients are those of ``X`` and the predictions
    ``X @ coef + intercept`` match scikit-learn's float64 ``Lasso`` to 1e-3 (``y`` has unit noise): the
    intercept (``-1.4e8``) is computed on the host in float64 from the float32 coefficients. A float32
    intercept would be off by up to 8 (spacing 16 at 1.4e8)."""
    X, y = _epoch_design()
    Xs = X + 1.7e9
    ref = Lasso(alpha=0.5, tol=1e-12, max_iter=100_000).fit(Xs, y)
    with jax.enable_x64(False):
        fits = [jaxknock.lasso(A, y, 0.5, solver="cd") for A in (X, Xs)]
    np.testing.assert_allclose(fits[1].value, fits[0].value, atol=1e-6)
    b0 = fits[1].stats["intercept"]
    assert np.asarray(b0).dtype == np.float64 and abs(float(b0)) > 1e7  # the offset is in it
    pred = Xs @ np.asarray(fits[1].value, np.float64) + b0
    np.testing.assert_allclose(pred, ref.predict(Xs), atol=1e-3)
    assert float(b0) - float(fits[0].stats["intercept"]) == pytest.approx(
        -1.7e9 * np.asarray(fits[1].value, np.float64).sum(), rel=1e-9
    )


def test_host_centring_leaves_traced_device_and_x64_input_alone():
    """Only a host float64 ``X`` meets the centring: under ``jit`` the input is traced, a device array
    is already float32, and with x64 on nothing is rounded; without an intercept nothing is shifted."""
    from jaxknock.l1.problem import centre_on_host

    X, y = _epoch_design(n=20, m=4)
    with jax.enable_x64(False):
        Xd = jnp.asarray(X)
        assert centre_on_host(Xd, y, loss="squared", fit_intercept=True)[0] is Xd
        assert centre_on_host(X, y, loss="squared", fit_intercept=False)[0] is X
        Xc, yc, shift = centre_on_host(X, y, loss="logistic", fit_intercept=True)
        assert yc is y and shift.y_mean is None and np.allclose(Xc.mean(0), 0.0)
        seen = []
        jax.jit(lambda A: seen.append(centre_on_host(A, y, loss="squared", fit_intercept=True)[0] is A) or A)(X)
        assert seen == [True]
    assert centre_on_host(X, y, loss="squared", fit_intercept=True)[0] is X  # x64 on (conftest)


def test_uncentred_intercept_of_batches_and_paths():
    """``b0 + mean(y) - mean(X) @ coef`` for one fit, a path ``(L, m)`` and a batch of paths ``(R, L, m)``."""
    from jaxknock._precision import HostShift, uncentred_intercept

    rng = np.random.default_rng(0)
    xm, ym = rng.standard_normal((2, 3)) * 1e9, np.array([5.0, -7.0])
    coef = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b0 = rng.standard_normal((2, 4))
    got = uncentred_intercept(b0, coef, HostShift(xm, ym))
    want = b0 + ym[:, None] - np.einsum("rlm,rm->rl", coef.astype(np.float64), xm)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    one = uncentred_intercept(b0[0, 0], coef[0, 0], HostShift(xm[0], None))
    assert one.shape == () and one == pytest.approx(want[0, 0] - ym[0], rel=1e-15)
    path = uncentred_intercept(b0[0], coef[0], HostShift(xm[0], ym[0]))
    np.testing.assert_allclose(path, want[0], rtol=1e-15)


@pytest.mark.parametrize("m", [37, 16])
def test_problem_blocks_and_column_statistics_match_their_definitions(m):
    """The block Gram matrices (one product per in-place block slice, the last block shifted to fit) and the
    column means / norms equal their definitions, also with 0/1 row weights."""
    from jaxknock.l1.problem import block_indices, full_problem, make_problem
    from jaxknock.l1.settings import make_settings

    X, y = _regression(seed=3, n=30, m=m)
    settings = make_settings(jnp.float64, solver="cd")
    w = (np.arange(30) % 3 != 0).astype(float)
    Xc = X - w @ X / w.sum()
    G = Xc.T @ (w[:, None] * Xc) / w.sum()
    idx = block_indices(m)
    prob = make_problem(jnp.asarray(X.T), jnp.asarray(y), jnp.asarray(w), settings)
    np.testing.assert_allclose(prob.gram_blocks, G[idx[:, :, None], idx[:, None, :]], rtol=1e-12, atol=1e-12)
    full = full_problem(jnp.asarray(X), jnp.asarray(y), settings)
    np.testing.assert_allclose(full.mu, X.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(full.col_norm, np.linalg.norm(X - X.mean(0), axis=0), rtol=1e-12)
    Xf = X - X.mean(0)
    blocks = (Xf.T @ Xf / 30)[idx[:, :, None], idx[:, None, :]]
    np.testing.assert_allclose(full.gram_blocks, blocks, rtol=1e-12, atol=1e-12)


def test_host_centred_fit_with_a_traced_grid_under_jit():
    """With x64 off, host float64 data are centred on the host (``centre_on_host``) even under ``jit``, where
    they are constants; a traced grid (``jax.jit`` over ``lambdas``) then made a traced intercept, and putting
    the means back read it on the host: ``TracerArrayConversionError``. It is now the same formula on the
    device, in the fit's dtype."""
    X, y = _epoch_design(n=30, m=4)
    y = y + 1e3
    with jax.enable_x64(False):
        grid = jaxknock.lambda_grid(X, y, num=3, eps=0.1)
        eager = jaxknock.lasso_path(X, y, grid, engine="classic")
        traced = jax.jit(lambda lams: jaxknock.lasso_path(X, y, lams))(grid)
    assert np.all(traced.result == RESULTS.successful) and traced.stats["intercept"].dtype == jnp.float32
    np.testing.assert_allclose(traced.value, eager.value, atol=1e-6)
    np.testing.assert_allclose(traced.stats["intercept"], eager.stats["intercept"], rtol=1e-6)
