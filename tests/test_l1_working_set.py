"""Tests of jaxknock.l1.working_set against scikit-learn (lasso_path, LassoCV, LogisticRegression)."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LassoCV, LogisticRegression, lasso_path

import jaxknock
from jaxknock import RESULTS
from jaxknock.l1.working_set import fold_rows, l1_cv, l1_path


def _kkt(X, y, b, b0, lam, loss="squared"):
    n = X.shape[0]
    eta = b0 + X @ b
    mu = 1 / (1 + np.exp(-eta)) if loss == "logistic" else eta
    r = y - mu
    g = (X.T @ r - X.sum(0) * r.mean()) / n
    v = np.where(b != 0, np.abs(g - lam * np.sign(b)), np.maximum(np.abs(g) - lam, 0))
    return v.max() / lam


def _data(n, m, seed=0, dup=0, loss="squared"):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) + 0.3 * rng.standard_normal((n, 1))
    if dup:
        X[:, m - dup :] = X[:, :dup]
    beta = np.zeros(m)
    beta[:5] = [1.5, -1.0, 0.8, 0.5, -0.5]
    eta = X @ beta + 0.5
    if loss == "squared":
        return X, eta + rng.standard_normal(n)
    return X, (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)


@pytest.mark.parametrize(
    "n, m, dup, method",
    [
        (120, 30, 0, "cov"),
        (120, 30, 0, "homotopy"),
        (60, 300, 0, "auto"),
        (60, 300, 0, "naive"),
        (80, 40, 5, "cov"),
        (80, 40, 5, "homotopy"),
        (80, 40, 0, "naive"),
    ],
    ids=["dense", "dense-homotopy", "p>>n", "p>>n-naive", "collinear", "collinear-homotopy", "naive"],
)
def test_path_matches_sklearn(n, m, dup, method):
    X, y = _data(n, m, dup=dup)
    sol = l1_path(X, y, num_lambdas=25, eps=1e-2, method=method, tol=1e-8)
    assert int(sol.result) == RESULTS.successful
    lams = np.asarray(sol.stats["lambdas"])
    path = np.asarray(sol.stats["coef_path"])
    b0s = np.asarray(sol.stats["intercept_path"])
    _, ref, _ = lasso_path(X - X.mean(0), y - y.mean(), alphas=lams, tol=1e-12, max_iter=200_000)
    for k in range(lams.size):
        assert _kkt(X, y, path[k], b0s[k], lams[k]) < 1e-4
        if not dup:  # duplicated columns make the solution non-unique (fitted values are)
            np.testing.assert_allclose(path[k], ref[:, k], atol=1e-5)
        np.testing.assert_allclose(X @ path[k], (X - X.mean(0)) @ ref[:, k] + X.mean(0) @ path[k], atol=1e-4)
    assert float(sol.stats["kkt"]) < 1e-4


def _assert_matches_lassocv(sol, X, y, ids):
    """``sol`` (an ``l1_cv`` on the fold ids ``ids``) against a tight ``LassoCV`` on the same folds and grid:
    CV errors, chosen lambda and coefficients. Returns the fitted ``LassoCV``."""
    cv = [(np.flatnonzero(ids != k), np.flatnonzero(ids == k)) for k in range(int(ids.max()) + 1)]
    lams = np.asarray(sol.stats["lambdas"])
    sk = LassoCV(alphas=lams, cv=cv, tol=1e-12, max_iter=200_000).fit(X, y)
    np.testing.assert_allclose(np.asarray(sol.stats["cv_error"]), sk.mse_path_, rtol=1e-6, atol=1e-8)
    assert float(sol.stats["lam"]) == pytest.approx(sk.alpha_)
    np.testing.assert_allclose(np.asarray(sol.value), sk.coef_, atol=1e-5)
    return sk


@pytest.mark.parametrize("method", ["homotopy", "cov", "naive"])
def test_cv_matches_lassocv(method):
    X, y = _data(150, 40, seed=1)
    ids, rows = fold_rows(4, 150)
    sol = l1_cv(X, y, folds=ids, num_lambdas=30, early_stop=False, method=method)
    sk = _assert_matches_lassocv(sol, X, y, ids)
    assert float(sol.stats["intercept"]) == pytest.approx(sk.intercept_, abs=1e-5)
    assert float(sol.stats["gap"]) < 1e-6
    assert int(sol.result) == RESULTS.successful


def test_auto_is_the_homotopy_when_p_exceeds_n_unless_its_cache_does_not_fit(monkeypatch):
    # m > 4 n ran coordinate descent with residual updates ("naive"): 15-77x slower than the
    # homotopy at n = 300-600, m = 2000-4000 (issue 17, session 18)
    from jaxknock import _memory

    X, y = _data(60, 400, seed=4)
    kw = dict(folds=5, num_lambdas=40)
    auto, hom, naive = (l1_cv(X, y, method=m, **kw) for m in ("auto", "homotopy", "naive"))
    np.testing.assert_array_equal(np.asarray(auto.value), np.asarray(hom.value))
    assert float(auto.stats["kkt"]) < 1e-10  # exact between kinks; coordinate descent stops at tol
    assert not np.array_equal(np.asarray(auto.value), np.asarray(naive.value))
    # a Gram cache that would take more than a quarter of free memory: residual updates instead
    monkeypatch.setattr(_memory, "device_memory_bytes", lambda devices=None: 1 << 20)
    small = l1_cv(X, y, method="auto", **kw)
    np.testing.assert_array_equal(np.asarray(small.value), np.asarray(naive.value))
    assert int(small.stats["lam_index"]) == int(hom.stats["lam_index"])


def test_lockstep_batch_too_large_for_memory_runs_in_chunks(monkeypatch):
    """A lock-step batch whose homotopy caches do not fit together runs in balanced chunks of
    replicates (the last one padded), with the answers of the whole batch in lock step; before,
    ``method="auto"`` fell back to coordinate descent with residual updates for the whole batch."""
    from jaxknock import _memory

    data = [_data(150, 60, seed=s) for s in range(3)]
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    kw = dict(folds=5, num_lambdas=40, batch_mode="lockstep")
    whole = l1_cv(Xs, ys, method="homotopy", **kw)
    # room for the caches of two designs (W + chunk = 68 columns and 68 slots, 6 members), not three
    one = _memory.gram_cache_bytes(6, 68, 68, 8)
    monkeypatch.setattr(_memory, "device_memory_bytes", lambda devices=None: 4 * (2 * one + one // 2))
    chunked = l1_cv(Xs, ys, method="auto", **kw)  # chunks of 2: the second padded with a copy
    np.testing.assert_array_equal(np.asarray(chunked.value), np.asarray(whole.value))
    np.testing.assert_array_equal(np.asarray(chunked.stats["lam_index"]), np.asarray(whole.stats["lam_index"]))
    np.testing.assert_array_equal(np.asarray(chunked.stats["cv_error"]), np.asarray(whole.stats["cv_error"]))
    assert np.all(np.asarray(chunked.result) == RESULTS.successful)
    assert np.all(np.asarray(chunked.stats["kkt"]) < 1e-10)  # the homotopy, not coordinate descent


def test_cv_early_stop_same_choice():
    X, y = _data(200, 50, seed=2)  # the shape of the whole-grid float64 tests below: their programs are shared
    full = l1_cv(X, y, folds=5, early_stop=False)
    early = l1_cv(X, y, folds=5)
    assert int(early.stats["lam_index"]) == int(full.stats["lam_index"])
    assert int(early.stats["num_lambdas_solved"]) < 100
    np.testing.assert_allclose(np.asarray(early.value), np.asarray(full.value), atol=1e-6)
    i1 = int(full.stats["lam_index_1se"])
    assert i1 <= int(full.stats["lam_index_min"])


@pytest.mark.parametrize("n, m", [(200, 20), (60, 150)], ids=["dense", "p>>n"])
def test_logistic_matches_sklearn(n, m):
    X, y = _data(n, m, seed=3, loss="logistic")
    lams = np.geomspace(0.08, 0.01, 6)
    sol = l1_path(X, y, lams, loss="logistic")
    assert int(sol.result) == RESULTS.successful
    path = np.asarray(sol.stats["coef_path"])
    b0s = np.asarray(sol.stats["intercept_path"])
    for k, lam in enumerate(lams):
        assert _kkt(X, y, path[k], b0s[k], lam, "logistic") < 1e-4
        # liblinear penalises the intercept: give it a huge constant column instead
        big = 1e4
        ref = LogisticRegression(
            l1_ratio=1.0,
            C=1 / (n * lam),
            solver="liblinear",
            tol=1e-10,
            max_iter=100_000,
            intercept_scaling=big,
            random_state=0,
        ).fit(X, y)
        np.testing.assert_allclose(path[k], ref.coef_.ravel(), atol=2e-4)
    assert float(sol.stats["gap"]) < 1e-5


def test_logistic_max_steps_bounds_the_epochs_of_a_grid_penalty():
    """Near-duplicate columns (pairs 1e-6 apart) stall the proximal Newton loop short of the KKT target.

    ``max_steps`` bounds the CD epochs per solve summed over the Newton steps (it bounded the outer
    and every inner loop separately: ~5000 epochs per penalty at max_steps=100, a quadratic cost),
    and a stalled solve is flagged, never reported successful."""
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((150, 20))
    X = np.concatenate([Z, Z + 1e-6 * rng.standard_normal((150, 20))], axis=1)
    eta = Z[:, :3] @ np.array([1.0, -1.0, 0.5])
    y = (rng.random(150) < 1 / (1 + np.exp(-eta))).astype(float)
    sol = l1_cv(X, y, loss="logistic", num_lambdas=20, early_stop=False, max_steps=50)
    # epochs: <= max_steps per solve; a penalty takes one solve per KKT round (a few)
    assert int(sol.stats["num_steps"]) <= 50 * 20 * 4
    if int(sol.result) == RESULTS.successful:
        assert float(sol.stats["kkt"]) <= 1e-3
    else:
        assert int(sol.result) == RESULTS.max_steps_reached


def _equicorrelated_logistic_design(n=400, m=200):
    """Equicorrelated columns (one factor, rho = 0.8), six +-1 signals among the first columns, Bernoulli ``y``."""
    rng = np.random.default_rng(0)
    X = np.sqrt(0.8) * rng.standard_normal((n, 1)) + np.sqrt(0.2) * rng.standard_normal((n, m))
    beta = np.zeros(m)
    beta[:6] = rng.choice([-1, 1], 6)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ beta)))).astype(float)
    return X, y


def test_logistic_cv_on_strongly_correlated_columns_converges_within_the_default_budget():
    """Equicorrelated columns (rho = 0.8), n = 400, m = 200: coordinate descent alone crawled (78 000
    epochs, and a grid penalty ran out of its 10 000-epoch budget: ``max_steps_reached``); the active-set
    Newton steps of the inner solves (``_ws_naive.active_newton``) converge in ~2 000 epochs.
    The chosen fit is checked against scikit-learn's liblinear at the same penalty."""
    X, y = _equicorrelated_logistic_design()
    n = X.shape[0]
    sol = l1_cv(X, y, loss="logistic", tol=1e-4)
    assert int(sol.result) == RESULTS.successful
    assert int(sol.stats["num_steps"]) < 10_000
    b, lam = np.asarray(sol.value), float(sol.stats["lam"])
    assert _kkt(X, y, b, float(sol.stats["intercept"]), lam, "logistic") < 2e-4
    ref = LogisticRegression(
        l1_ratio=1.0, C=1 / (n * lam), solver="liblinear", tol=1e-7, max_iter=100_000, intercept_scaling=1e4,
        random_state=0,
    ).fit(X, y)  # fmt: skip
    # tol 1e-7: 6e-6 from the engine's fit in 22 liblinear iterations; tol 1e-10 took 37 s of CI for 3e-6
    np.testing.assert_allclose(b, ref.coef_.ravel(), atol=1e-4)


def test_logistic_cv_runs():
    X, y = _data(200, 30, seed=4, loss="logistic")
    sol = l1_cv(X, y, folds=4, num_lambdas=30, loss="logistic")
    assert int(sol.result) == RESULTS.successful
    assert float(sol.stats["kkt"]) < 1e-4
    b = np.asarray(sol.value)
    assert _kkt(X, y, b, float(sol.stats["intercept"]), float(sol.stats["lam"]), "logistic") < 1e-4
    assert np.all(b[:3] != 0)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_a_grid_below_lambda_max_by_far_is_certified_at_the_gradients_rounding_floor(loss):
    """``lambdas=[1e-12]`` (a user's grid that starts far below lambda_max): the KKT target was relative to
    the grid's first penalty, ``100 eps * 1e-12`` in absolute terms, under the gradient's rounding (~1e-17),
    and both engines ended ``max_steps_reached`` (the logistic one after 10 000 epochs) on problems the
    classic engine solves. The floor now scales with lambda_max; the fit is the one at 1e-10 up to ~1e-10."""
    X, y = _data(200, 6, seed=0, loss=loss)
    tiny, small = (l1_cv(X, y, folds=3, lambdas=[lam], loss=loss) for lam in (1e-12, 1e-10))
    for sol in (tiny, small):
        assert int(sol.result) == RESULTS.successful, sol.stats["num_steps"]
    np.testing.assert_allclose(np.asarray(tiny.value), np.asarray(small.value), atol=1e-7)


def test_jit_equals_eager_and_vmap_equals_loop():
    Xs, ys = zip(*[_data(80, 30, seed=s) for s in range(2)])
    Xs, ys = np.stack(Xs), np.stack(ys)
    batched = l1_cv(Xs, ys, folds=4, num_lambdas=20, max_features=32)
    for r in range(2):
        one = l1_cv(Xs[r], ys[r], folds=4, num_lambdas=20, max_features=32)
        np.testing.assert_allclose(np.asarray(batched.value[r]), np.asarray(one.value), atol=1e-10)
        assert int(batched.stats["lam_index"][r]) == int(one.stats["lam_index"])
    # the public entry point under an outer jit equals the eager call
    f = jax.jit(lambda X, y: l1_cv(X, y, folds=4, num_lambdas=20, max_features=32).value)
    np.testing.assert_allclose(np.asarray(f(Xs[0], ys[0])), np.asarray(batched.value[0]), atol=1e-10)


def test_traced_grid_and_input_under_jit():
    """A concrete grid closed over by an outer jit was a TracerBoolConversionError (its checks were jnp
    comparisons, staged under the trace); a traced bad grid or a NaN in X came back max_steps_reached with
    all-zero coefficients. Now: the same fit, or nonfinite with NaN coefficients. A traced ``tol`` of ``inf``
    (any iterate certified), ``NaN``, ``0`` or ``-1`` gave `successful`: now nonfinite too."""
    X, y = map(jnp.asarray, _data(30, 5, seed=1))
    lams = np.array([0.3, 0.1, 0.03])
    eager = l1_path(X, y, lams, max_features=8)
    closed = jax.jit(lambda X, y: l1_path(X, y, lams, max_features=8))(X, y)
    np.testing.assert_allclose(np.asarray(closed.value), np.asarray(eager.value), atol=1e-10)
    f = jax.jit(lambda X, y, lams, tol: l1_path(X, y, lams, tol=tol, max_features=8))
    cases = [
        (X, lams, 1e-5),
        (X, lams[::-1], 1e-5),
        (X, -lams, 1e-5),
        (X, np.where(lams == 0.1, np.nan, lams), 1e-5),
        (jnp.asarray(X).at[0, 0].set(np.nan), lams, 1e-5),
        *[(X, lams, bad) for bad in (np.inf, np.nan, 0.0, -1.0)],
    ]
    for i, (Xb, lb, tol) in enumerate(cases):
        sol = f(Xb, y, jnp.asarray(lb), tol)
        if i == 0:
            assert int(sol.result) == RESULTS.successful
            np.testing.assert_allclose(np.asarray(sol.value), np.asarray(eager.value), atol=1e-10)
        else:
            assert int(sol.result) == RESULTS.nonfinite and bool(jnp.all(jnp.isnan(sol.value))), i
    assert f._cache_size() == 1


def test_capacity_overflow_code_and_regrowth():
    X, y = _data(100, 60, seed=5)
    small = l1_cv(X, y, folds=3, early_stop=False, max_features=8)
    assert int(small.result) == RESULTS.max_steps_reached
    assert bool(small.stats["overflow"])
    grown = l1_cv(X, y, folds=3, early_stop=False)  # starts at 128 >= m: no overflow
    assert int(grown.result) == RESULTS.successful


def test_input_errors():
    with pytest.raises(ValueError, match="y must have shape"):
        l1_cv(np.zeros((10, 3)), np.zeros(9))
    with pytest.raises(ValueError, match="decreasing"):
        l1_path(np.ones((10, 3)), np.arange(10.0), [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):  # ran: lam = inf, max_steps_reached
        l1_cv(np.ones((10, 3)), np.arange(10.0), lambdas=[np.inf, 0.1])
    with pytest.raises(ValueError, match="loss"):
        l1_cv(np.zeros((10, 3)), np.zeros(10), loss="hinge")


def test_engine_settings_are_checked_and_named():
    """``l1_cv`` / ``l1_path`` took ``tol=-1`` / ``NaN`` / ``inf`` (``inf``: any iterate certified), ``max_steps=2.5``,
    ``patience=0``, ``max_features=0`` and ``num_lambdas=2.5`` as given; ``early_stop="no"`` / ``throw="no"``
    were truthy or failed inside JAX, ``max_features=-3`` / ``2.5`` failed in an array update naming nothing."""
    X, y = _data(30, 6, seed=2)
    cases = [
        (dict(tol=-1.0), "tol"),
        (dict(tol=np.nan), "tol"),
        (dict(tol=np.inf), "tol"),
        (dict(max_steps=2.5), "max_steps"),
        (dict(max_steps=-1), "max_steps"),
        (dict(max_steps=True), "max_steps"),
        (dict(max_features=0), "max_features"),
        (dict(max_features=-3), "max_features"),
        (dict(max_features=2.5), "max_features"),
        (dict(num_lambdas=2.5), "num_lambdas"),
        (dict(early_stop="no"), "early_stop"),
        (dict(throw="no"), "throw"),
    ]
    for kw, name in cases:
        for f in (l1_cv, l1_path):
            with pytest.raises((ValueError, TypeError), match=name):
                f(X, y, **kw)
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="patience"):
            l1_cv(X, y, patience=bad)


def test_engine_folds_need_two_folds_and_both_classes():
    """One fold id left the only member without training rows (``max_steps_reached``, no error); a logistic
    training fold of one class gave a `successful` CV (``lasso_cv`` refuses both)."""
    X, y = _data(30, 6, seed=2)
    with pytest.raises(ValueError, match="at least 2"):
        l1_cv(X, y, folds=np.zeros(30, int))
    labels = np.repeat([0.0, 1.0], 15)
    with pytest.raises(ValueError, match="single class"):
        l1_cv(X, labels, folds=np.repeat([0, 1], 15), loss="logistic")


def test_traced_labels_with_a_single_class_training_fold_are_voided():
    """Under ``jit`` (traced labels, given fold ids) a logistic training fold of one class came back `successful`;
    eager calls refuse it. Now ``nonfinite`` with NaN coefficients and penalty (per replicate of a batch)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 4))
    bad = np.zeros(30)
    bad[4] = 1.0
    good = bad.copy()
    good[[12, 25]] = 1.0
    f = jax.jit(lambda y: l1_cv(X, y, loss="logistic", folds=np.repeat(np.arange(3), 10), num_lambdas=3))
    sol = f(bad)
    assert int(sol.result) == RESULTS.nonfinite and np.all(np.isnan(sol.value)) and np.isnan(sol.stats["lam"])
    sol = f(good)
    assert int(sol.result) == RESULTS.successful and np.all(np.isfinite(sol.value))


def test_homotopy_wide_folds_match_lassocv():
    """n_f < m (each training fold has fewer rows than features): the homotopy engine, whole grid, vs LassoCV."""
    X, y = _data(80, 150, seed=3)
    ids, _ = fold_rows(4, 80)
    cv = [(np.flatnonzero(ids != k), np.flatnonzero(ids == k)) for k in range(4)]
    sol = l1_cv(X, y, folds=ids, num_lambdas=30, eps=1e-2, early_stop=False, method="homotopy")
    assert int(sol.result) == RESULTS.successful
    lams = np.asarray(sol.stats["lambdas"])
    sk = LassoCV(alphas=lams, cv=cv, tol=1e-12, max_iter=500_000).fit(X, y)
    np.testing.assert_allclose(np.asarray(sol.stats["cv_error"]), sk.mse_path_, rtol=1e-5, atol=1e-7)
    assert float(sol.stats["lam"]) == pytest.approx(sk.alpha_)
    np.testing.assert_allclose(np.asarray(sol.value), sk.coef_, atol=1e-6)
    assert float(sol.stats["kkt"]) < 1e-8


def test_homotopy_float32_whole_grid_certified_at_its_rounding_floor():
    """float32 down to 1e-3 lambda_max: the relative KKT floor grows like eps lam0 / lam, so the whole
    default grid is certified (a fixed 1000 eps bound flagged this correct path as not converged)."""
    X, y = _data(200, 50, seed=4)
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    s32 = l1_cv(X32, y32, method="homotopy", early_stop=False)
    s64 = l1_cv(X, y, method="homotopy", early_stop=False)
    assert int(s32.result) == RESULTS.successful and int(s64.result) == RESULTS.successful
    assert float(s32.stats["kkt"]) > 1000 * np.finfo(np.float32).eps  # the case the old bound refused
    lams = np.asarray(s32.stats["lambdas"], np.float64)
    path = np.asarray(s32.stats["coef_path"], np.float64)
    b0s = np.asarray(s32.stats["intercept_path"], np.float64)
    floor = 100 * np.finfo(np.float32).eps * lams[0] / lams
    for k in range(lams.size):  # the float32 path, checked in float64, is within its rounding floor
        assert _kkt(X32.astype(np.float64), y32.astype(np.float64), path[k], b0s[k], lams[k]) < max(1e-3, floor[k])
    assert abs(int(s32.stats["lam_index"]) - int(s64.stats["lam_index"])) <= 1


def test_homotopy_sign_flip_badly_scaled_columns():
    """Column scales 1e-3..1e3: a dropped coefficient's correlation crosses to the other sign before
    the next grid penalty (fold 2, lambda 73 here); only its same-sign re-entry may be barred.

    Barring any re-entry for one event left that fold's solution with a KKT violation of 0.5 at the
    grid penalty (result code 1, a CV error off scikit-learn's)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 50))
    y = X[:, :3] @ np.array([1.0, -1.0, 0.5]) + rng.standard_normal(200)
    X = X * np.logspace(-3, 3, 50)
    ids, _ = fold_rows(5, 200)
    cv = [(np.flatnonzero(ids != k), np.flatnonzero(ids == k)) for k in range(5)]
    sol = l1_cv(X, y, folds=ids, num_lambdas=100, eps=1e-3, early_stop=False, method="homotopy")
    assert int(sol.result) == RESULTS.successful
    assert float(sol.stats["kkt"]) < 1e-8
    lams = np.asarray(sol.stats["lambdas"])
    sk = LassoCV(alphas=lams, cv=cv, tol=1e-14, max_iter=1_000_000).fit(X, y)
    np.testing.assert_allclose(np.asarray(sol.stats["cv_error"]), sk.mse_path_, rtol=1e-7)


def test_homotopy_float32_same_choice_as_float64():
    """A float32 design stays float32, is certified at its own rounding level, and picks float64's lambda."""
    X, y = _data(150, 60, seed=3)
    s64 = l1_cv(X, y, method="homotopy", num_lambdas=40)
    s32 = l1_cv(X.astype(np.float32), y.astype(np.float32), method="homotopy", num_lambdas=40)
    assert s32.value.dtype == np.float32
    assert int(s32.result) == RESULTS.successful and int(s64.result) == RESULTS.successful
    assert abs(int(s32.stats["lam_index"]) - int(s64.stats["lam_index"])) <= 1
    b32, b64 = np.asarray(s32.value, float), np.asarray(s64.value)
    assert _kkt(X, y, b32, float(s32.stats["intercept"]), float(s32.stats["lam"])) < 1e-3
    if int(s32.stats["lam_index"]) == int(s64.stats["lam_index"]):
        big = np.abs(b64) > 1e-3 * np.abs(b64).max()
        assert np.array_equal(b32[big] != 0, b64[big] != 0)


@pytest.mark.parametrize("method, m", [("homotopy", 1), ("cov", 3), ("naive", 5)])
def test_fewer_features_than_a_candidate_chunk(method, m):
    """m < 8 (the engine's smallest chunk of strong-rule candidates): failed in lax.top_k before; = LassoCV."""
    X, y = _data(90, 5, seed=7)
    X = X[:, :m]
    ids, _ = fold_rows(3, 90)
    cv = [(np.flatnonzero(ids != k), np.flatnonzero(ids == k)) for k in range(3)]
    sol = l1_cv(X, y, folds=ids, num_lambdas=20, early_stop=False, method=method)
    assert int(sol.result) == RESULTS.successful
    lams = np.asarray(sol.stats["lambdas"])
    sk = LassoCV(alphas=lams, cv=cv, tol=1e-12, max_iter=200_000).fit(X, y)
    np.testing.assert_allclose(np.asarray(sol.stats["cv_error"]), sk.mse_path_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(sol.value), sk.coef_, atol=1e-5)


@pytest.mark.parametrize("m", [3])
def test_logistic_fewer_features_than_a_candidate_chunk(m):
    X, y = _data(120, 5, seed=8, loss="logistic")
    X = X[:, :m]
    lams = np.geomspace(0.05, 0.005, 5)
    sol = l1_path(X, y, lams, loss="logistic")
    assert int(sol.result) == RESULTS.successful
    path, b0s = np.asarray(sol.stats["coef_path"]), np.asarray(sol.stats["intercept_path"])
    assert max(_kkt(X, y, path[k], b0s[k], lam, "logistic") for k, lam in enumerate(lams)) < 1e-4


def test_l1_cv_checks_and_maps_the_response():
    # {-1, 1} labels were read as they are (the log-loss of y = -1: coefficients of 5.7e7,
    # max_steps_reached); NaN in X and a constant y ran to max_steps_reached / lam = nan.
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 12))
    y = X[:, :2].sum(1) + 0.5 * rng.standard_normal(40)
    pm = np.sign(y)
    sol = l1_cv(X, pm, loss="logistic", folds=4, num_lambdas=10)
    ref = l1_cv(X, (pm > 0).astype(float), loss="logistic", folds=4, num_lambdas=10)
    assert int(sol.result) == RESULTS.successful
    np.testing.assert_array_equal(sol.value, ref.value)
    with pytest.raises(ValueError, match="y must hold binary labels"):
        l1_cv(X, pm + 1.0, loss="logistic")
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains"):
        l1_cv(Xn, y)
    yn = y.copy()
    yn[3] = np.nan
    with pytest.raises(ValueError, match="y contains"):
        l1_cv(X, yn)
    with pytest.raises(ValueError, match="y is constant"):
        l1_cv(X, np.ones(40))
    with pytest.raises(ValueError, match="y is constant"):
        l1_cv(np.stack([X, X]), np.stack([y, np.ones(40)]))  # one constant response in a batch


def test_lockstep_replicates_equal_sequential_replicates():
    """``batch_mode="lockstep"`` (one path loop, finished replicates idle) gives the sequential answers.

    The replicates stop at different grid steps (one has a pure-noise response), so the gating of
    finished replicates in every loop of the lock step is exercised; a small slot / working-set
    start forces the capacity regrowth on the batch.
    """
    data = [_data(150, 60, seed=s) for s in range(3)]
    rng = np.random.default_rng(9)
    data.append((data[0][0], rng.standard_normal(150)))  # null response: stops early
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    kw = dict(folds=5, num_lambdas=40, method="homotopy")
    seq = l1_cv(Xs, ys, batch_mode="sequential", **kw)
    lock = l1_cv(Xs, ys, batch_mode="lockstep", **kw)
    solved = np.asarray(seq.stats["num_lambdas_solved"])
    assert len(set(solved.tolist())) > 1, solved  # the replicates do finish at different steps
    np.testing.assert_array_equal(np.asarray(lock.stats["num_lambdas_solved"]), solved)
    np.testing.assert_array_equal(np.asarray(lock.stats["lam_index"]), np.asarray(seq.stats["lam_index"]))
    np.testing.assert_array_equal(np.asarray(lock.result), np.asarray(seq.result))
    assert np.all(np.asarray(seq.result) == RESULTS.successful)
    np.testing.assert_allclose(np.asarray(lock.value), np.asarray(seq.value), rtol=0, atol=1e-12)
    for k in ("cv_error", "coef_path", "intercept_path", "train_loss"):
        a, b = np.asarray(lock.stats[k]), np.asarray(seq.stats[k])
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=0, atol=1e-12)
    for r in range(len(data)):  # and each equals its own single-design fit
        one = l1_cv(Xs[r], ys[r], **kw)
        assert int(one.stats["lam_index"]) == int(lock.stats["lam_index"][r])
        np.testing.assert_allclose(np.asarray(lock.value[r]), np.asarray(one.value), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="batch_mode"):
        l1_cv(Xs, ys, batch_mode="parallel", **kw)


def test_slot_tiers_follow_the_untiered_path():
    """A design run alone does each grid step on half of its ``A`` active slots while they hold its active
    sets, and moves up a tier in the middle of a step when a member needs a free slot; the answers are the
    untiered lock step's (``vmap``, every kink on all ``A`` slots) to rounding.

    The active sets cross the tiers (``A = 158``: tiers 96 and 158) within coarse grid steps, so members run
    out of slots mid-step (without the move up a tier the fit stops at 96 active and reports the overflow).
    """
    from jaxknock.l1._ws_homotopy import slot_tiers

    X, y = _data(120, 150, seed=3)  # n_f = 96 training rows < m: active sets grow to the rank
    kw = dict(folds=5, num_lambdas=6, method="homotopy", early_stop=False)  # many entries per grid step
    alone = l1_cv(X, y, **kw)
    lock = l1_cv(np.stack([X, X]), np.stack([y, y]), batch_mode="lockstep", **kw)
    tiers = slot_tiers(150 + 8)
    assert tiers == (96, 158)
    assert int(alone.stats["peak_active"]) > tiers[0]  # the path climbed through the tiers
    assert int(alone.result) == RESULTS.successful
    assert int(alone.stats["lam_index"]) == int(lock.stats["lam_index"][0])
    np.testing.assert_array_equal(np.asarray(alone.stats["num_lambdas_solved"]), lock.stats["num_lambdas_solved"][0])
    np.testing.assert_allclose(np.asarray(alone.value), np.asarray(lock.value[0]), rtol=0, atol=1e-10)
    for k in ("cv_error", "coef_path"):
        a, b = np.asarray(alone.stats[k]), np.asarray(lock.stats[k][0])
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=1e-9, atol=1e-10)


def test_float32_pairs_equal_to_rounding_keep_the_cv_path_certified():
    """Two pairs of columns equal to 1e-6 (a knockoff next to its original), float32, the default engine.

    The pivot of the second column of a pair is pure float32 rounding; with the float64
    threshold (1e-10 of G_jj) it entered, and the path left the lasso solution: the KKT
    certificate failed on all six seeds tried (violations 2 to 4e6, result max_steps_reached).
    Now it counts as in the active span (``_collinear_rtol``). Reference: scikit-learn's
    LassoCV in float64 on the same folds and grid with each pair merged into one column
    (the lasso only sees the pair's summed coefficient), and a float64 KKT check.
    """
    n, m = 200, 60
    rng = np.random.default_rng(3)
    X = rng.standard_normal((n, m))
    X[:, 1] = X[:, 0] + 1e-6 * rng.standard_normal(n)
    X[:, 31] = X[:, 30] + 1e-6 * rng.standard_normal(n)
    y = X[:, 0] - X[:, 30] + 0.5 * X[:, 5] + rng.standard_normal(n)
    ids, _ = fold_rows(5, n)
    sol = l1_cv(jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32), folds=ids, early_stop=False)
    assert int(sol.result) == RESULTS.successful
    assert float(sol.stats["kkt"]) < 1e-3
    b = np.asarray(sol.value, np.float64)
    lam = float(sol.stats["lam"])
    assert _kkt(X, y, b, float(sol.stats["intercept"]), lam) < 1e-2  # float32 fit, float64 check
    keep = np.setdiff1d(np.arange(m), [1, 31])
    cv = [(np.flatnonzero(ids != k), np.flatnonzero(ids == k)) for k in range(5)]
    lams = np.asarray(sol.stats["lambdas"], np.float64)
    sk = LassoCV(alphas=lams, cv=cv, tol=1e-12, max_iter=200_000).fit(X[:, keep], y)
    assert abs(int(np.argmin(sk.mse_path_.mean(1))) - int(sol.stats["lam_index"])) <= 1  # one grid step
    merged = b[keep].copy()
    merged[0], merged[29] = b[0] + b[1], b[30] + b[31]
    ref = LassoCV(alphas=[lam], cv=cv, tol=1e-12, max_iter=200_000).fit(X[:, keep], y).coef_
    np.testing.assert_allclose(merged, ref, atol=2e-3)


def test_a_float32_response_far_from_zero_keeps_the_cv_path_certified():
    """``y = 1e6 + O(1)`` in float32: the sufficient statistics ``q``, ``var(y)`` are differences of sums
    of size 1e6 (x 1e6 for ``var``), which cancel. The engine read a KKT violation of 0.36 as optimal
    (result successful). Now the mean of ``y`` is taken out first. Reference: the float64 engine on the
    same (float32-rounded) response, and a float64 KKT check of the float32 fit."""
    n, m = 200, 50  # the shape of the float32 / float64 whole-grid tests above: their programs are shared
    X, y = _data(n, m, seed=5)
    X32, y32 = X.astype(np.float32), (y + 1e6).astype(np.float32)
    ids, _ = fold_rows(5, n)
    sol = l1_cv(jnp.asarray(X32), jnp.asarray(y32), folds=ids, early_stop=False)
    ref = l1_cv(jnp.asarray(X32, jnp.float64), jnp.asarray(y32, jnp.float64), folds=ids, early_stop=False)
    assert int(sol.result) == RESULTS.successful and int(ref.result) == RESULTS.successful
    assert abs(int(sol.stats["lam_index"]) - int(ref.stats["lam_index"])) <= 1
    b, b0, lam = np.asarray(sol.value, np.float64), float(sol.stats["intercept"]), float(sol.stats["lam"])
    assert _kkt(X32.astype(np.float64), y32.astype(np.float64), b, b0, lam) < 1e-3
    assert abs(b0 - float(ref.stats["intercept"])) < 0.2  # float32 spacing at 1e6 is 0.0625


def test_float32_logistic_cv_solves_to_the_rounding_floor_not_past_it():
    """The proximal-Newton engine solved every grid point to a KKT violation of ``tol * lam`` (1e-5),
    below what float32 gradients can show at small penalties: the whole-grid logistic CV ran its
    step budget out (163 027 epochs, max_steps_reached) on a plain design. It now solves to
    ``max(tol, 1000 eps, 100 eps lam0 / lam)``; the chosen penalty is the float64 engine's (one grid
    step) and a float64 KKT check of the float32 fit passes."""
    n, m = 200, 50
    X, y = _data(n, m, seed=0, loss="logistic")
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    ids, _ = fold_rows(5, n)
    sol = l1_cv(jnp.asarray(X32), jnp.asarray(y32), folds=ids, loss="logistic", early_stop=False)
    ref = l1_cv(jnp.asarray(X), jnp.asarray(y), folds=ids, loss="logistic", early_stop=False)
    assert int(sol.result) == RESULTS.successful and int(ref.result) == RESULTS.successful
    assert abs(int(sol.stats["lam_index"]) - int(ref.stats["lam_index"])) <= 1
    b, b0, lam = np.asarray(sol.value, np.float64), float(sol.stats["intercept"]), float(sol.stats["lam"])
    assert _kkt(X, y, b, b0, lam, loss="logistic") < 1e-3


def test_float32_logistic_cv_on_columns_far_from_zero():
    """``X + 1e3`` in float32, logistic loss (the proximal-Newton engine): the coordinate descent's
    weighted variances ``E[x^2] - xbar^2`` cancelled, and the CV ended max_steps_reached at lambda
    index 3 (float64: 26). The engine now counts columns from their means; the reported intercept is
    that of ``X`` itself (checked by a float64 KKT check with it)."""
    n, m = 200, 50
    X, y = _data(n, m, seed=2, loss="logistic")
    X = X + 1e3
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    ids, _ = fold_rows(5, n)
    sol = l1_cv(jnp.asarray(X32), jnp.asarray(y32), folds=ids, loss="logistic")
    ref = l1_cv(jnp.asarray(X32, jnp.float64), jnp.asarray(y), folds=ids, loss="logistic")
    assert int(sol.result) == RESULTS.successful and int(ref.result) == RESULTS.successful
    assert abs(int(sol.stats["lam_index"]) - int(ref.stats["lam_index"])) <= 1
    b, b0, lam = np.asarray(sol.value, np.float64), float(sol.stats["intercept"]), float(sol.stats["lam"])
    assert _kkt(X32.astype(np.float64), y, b, b0, lam, loss="logistic") < 1e-3
    assert abs(b0 - float(ref.stats["intercept"])) < 1e-3 * abs(float(ref.stats["intercept"]))


@pytest.mark.parametrize("method", ["homotopy", "cov"])
def test_squared_loss_cv_on_columns_far_from_zero(method):
    """Columns offset by ``1e4`` / ``1e8`` (float64), squared loss: the homotopy's and the covariance engine's
    sufficient statistics (column means, ``X_c^T y_c``, the members' Gram columns) were differences of sums
    that cancelled; the CV ended ``max_steps_reached`` (1e4) or at a penalty ten times too small with
    coefficients off by 8 (1e8). The engine now counts columns from their means over all rows. Reference:
    the same CV on the design without the offset (the lasso's coefficients do not depend on it), and a KKT
    check of the reported intercept on the offset data."""
    n, m = 120, 16
    X, y = _data(n, m, seed=3)
    ids, _ = fold_rows(5, n)
    ref = l1_cv(jnp.asarray(X), jnp.asarray(y), folds=ids, method=method)
    assert int(ref.result) == RESULTS.successful
    for offset in (1e4, 1e8):
        sol = l1_cv(jnp.asarray(X + offset), jnp.asarray(y), folds=ids, method=method)
        assert int(sol.result) == RESULTS.successful, offset
        assert int(sol.stats["lam_index"]) == int(ref.stats["lam_index"])
        b, b0, lam = np.asarray(sol.value), float(sol.stats["intercept"]), float(sol.stats["lam"])
        np.testing.assert_allclose(b, np.asarray(ref.value), rtol=0, atol=1e-6 * np.max(np.abs(ref.value)))
        assert _kkt(X + offset, y, b, b0, lam) < 1e-3
        assert abs(np.mean(y - b0 - (X + offset) @ b)) < 1e-5  # the intercept of the data as they came


def test_every_coefficient_is_zero_at_lambda_max():
    """At the default grid's first penalty, ``lambda_max``, the lasso's solution is exactly zero. The grid's
    ``lambda_max`` is another sum than the engine's null-model gradient, an ulp apart, and the path moved
    that ulp: a coefficient of ``1e-16`` at ``lambda_max`` in ``lasso_path`` (seeds 1, 4, 5, 8, 10, 11 of
    these) and in the CV's ``coef_path`` (5, 10, 11). Reference: the definition, ``max_j |x_j^T (y - ybar)| / n``."""
    import jaxknock

    for seed in (1, 4, 5, 10):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((120, 30)) + rng.standard_normal((1, 30)) * 3 + 0.3 * rng.standard_normal((120, 1))
        y = X[:, 0] + rng.standard_normal(120) + 5
        path = jaxknock.lasso_path(X, y, num_lambdas=10)
        cv = jaxknock.lasso_cv(X, y, num_lambdas=10)
        lmax = np.max(np.abs((X - X.mean(0)).T @ (y - y.mean()))) / 120
        np.testing.assert_allclose(float(path.stats["lam"][0]), lmax, rtol=1e-12)
        assert not np.any(np.asarray(path.value)[0]), seed
        assert not np.any(np.asarray(cv.stats["coef_path"])[0]), seed
        assert int(path.result[0]) == RESULTS.successful and int(cv.result) == RESULTS.successful


def test_a_kink_drops_a_coefficient_at_zero_moving_against_its_sign():
    """Homotopy kink: an active coefficient at zero (or a few eps past it, as the refinement and
    ``signed_coefficients`` leave one) whose direction points against the sign it entered with leaves at once.

    Before, only a coefficient whose *value* times its direction was negative could leave: one at
    exactly zero (or already on the wrong side) moved on to the wrong side for the whole grid step,
    and the KKT certificate read a violation of 2. A coefficient on the right side still moves on.
    """
    from jaxknock.l1._ws_homotopy import Member, member_kink, signed_coefficients

    lam = jnp.float32(1.0)
    mem = Member(
        slot_c=jnp.array([0, 0], jnp.int32),
        used=jnp.array([True, False]),
        sgn=jnp.array([1.0, 0.0], jnp.float32),
        sbeta=jnp.array([0.0, 0.0], jnp.float32),
        Ginv=jnp.array([[1.0, 0.0], [0.0, 0.0]], jnp.float32),
        lam=lam,
    )
    C = jnp.eye(2, dtype=jnp.float32)  # cache Gram
    args = (C, C, jnp.array([1.0, 0.1], jnp.float32), jnp.array([True, False]), jnp.zeros(2, bool))
    rest = (jnp.ones(2, bool), jnp.float32(0.5), (jnp.int32(-1), jnp.float32(0.0)), jnp.bool_(False))
    v = jnp.array([-1.0, 0.0], jnp.float32)
    for start in (0.0, -3e-8):
        out = member_kink(mem._replace(sbeta=mem.sbeta.at[0].set(start)), v, *args, *rest)[0]
        assert not bool(out.used[0]) and float(out.lam) == 1.0  # left at t = 0
    out = member_kink(mem._replace(sbeta=mem.sbeta.at[0].set(0.8)), v, *args, *rest)[0]
    assert bool(out.used[0]) and float(out.lam) == 0.5 and np.isclose(float(out.sbeta[0]), 0.3)  # to the grid
    signed = signed_coefficients(
        mem._replace(used=jnp.array([True, True]), sgn=jnp.array([1.0, -1.0]), sbeta=jnp.array([-1e-7, -2.0]))
    )
    np.testing.assert_array_equal(signed, [0.0, -2.0])


def test_an_uncertified_float32_replicate_is_solved_again_in_float64(monkeypatch):
    """The engine's failure on one replicate of a float32 batch (injected): that replicate alone is
    solved again in float64 and cast back; the others are untouched, and the x64 flag is as it was."""
    from jaxknock.l1 import _ws_driver

    X, y = _data(120, 30, seed=4)
    Xb = jnp.asarray(np.stack([X, X[::-1], X[:, ::-1]]), jnp.float32)
    yb = jnp.asarray(np.stack([y, y[::-1], y]), jnp.float32)
    clean = l1_cv(Xb, yb, num_lambdas=20, batch_mode="sequential")
    assert not np.any(clean.stats["float64_refit"])
    run, dtypes = _ws_driver.run, []

    def failing(X, *a, **k):
        sol = run(X, *a, **k)
        dtypes.append(X.dtype)
        if X.dtype == jnp.float32:  # replicate 1 "failed its certificate"
            sol = sol._replace(result=sol.result.at[1].set(RESULTS.max_steps_reached))
        return sol

    monkeypatch.setattr(_ws_driver, "run", failing)
    x64 = jax.config.jax_enable_x64
    sol = l1_cv(Xb, yb, num_lambdas=20, batch_mode="sequential")
    assert dtypes == [jnp.float32, jnp.float64]
    assert jax.config.jax_enable_x64 == x64  # a scoped switch
    np.testing.assert_array_equal(sol.stats["float64_refit"], [False, True, False])
    np.testing.assert_array_equal(sol.result, [RESULTS.successful] * 3)
    assert sol.value.dtype == jnp.float32
    for r in (0, 2):
        np.testing.assert_array_equal(sol.value[r], clean.value[r])
    with jax.enable_x64(True):  # the same program as the refit's (a batch of one)
        ref = l1_cv(
            jnp.asarray(Xb[1:2], jnp.float64),
            jnp.asarray(yb[1:2], jnp.float64),
            num_lambdas=20,
            batch_mode="sequential",
        )
    np.testing.assert_array_equal(sol.value[1], np.asarray(ref.value[0], np.float32))
    assert int(sol.stats["lam_index"][1]) == int(ref.stats["lam_index"][0])


def test_a_float32_whole_grid_that_loses_its_certificate_near_the_rank_stops_and_is_solved_in_float64(monkeypatch):
    """p > n, whole grid to 1e-5 lambda_max, float32: as the folds' active sets near their rank the homotopy's
    updated inverse carries a condition number near 1 / eps, a grid step fails its certificate, and the kinks
    after it cycled to their budget (n = 500, m = 2000, default grid: 50 650 kinks, 56 s, ``max_steps_reached``,
    and no float64 refit, because the refit's test compared the path's total steps with the per-solve budget).
    Now the float32 path stops at the first uncertified penalty and the design is solved again in float64: the
    answer is the float64 one, certified."""
    from jaxknock import _capacity
    from jaxknock.l1 import _ws_driver

    rng = np.random.default_rng(0)
    n, m = 100, 300
    X = rng.standard_normal((n, m)).astype(np.float32)
    y = (X[:, :5].sum(1) + rng.standard_normal(n)).astype(np.float32)
    kw = dict(folds=3, num_lambdas=40, eps=1e-5, early_stop=False)  # stops at 23-38 of 40 on seeds 0-3
    run, solved = _ws_driver.run, {}

    def recording(X, *a, **k):
        sol = run(X, *a, **k)
        solved[str(X.dtype)] = int(sol.stats["num_lambdas_solved"])
        return sol

    monkeypatch.setattr(_ws_driver, "run", recording)
    # the capacities (and so the rounding) of this shape as a first call's, whatever ran before
    monkeypatch.setattr(_capacity, "STORE", _capacity.CapacityStore(lambda: None))
    sol = l1_cv(jnp.asarray(X), jnp.asarray(y), **kw)
    assert solved["float32"] < 40 and solved["float64"] == 40, solved  # stopped at its first failure
    assert bool(sol.stats["float64_refit"]) and int(sol.result) == RESULTS.successful
    with jax.enable_x64(True):
        ref = l1_cv(jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64), **kw)
    assert int(ref.result) == RESULTS.successful and float(ref.stats["kkt"]) < 1e-9
    assert int(sol.stats["lam_index"]) == int(ref.stats["lam_index"])
    np.testing.assert_array_equal(sol.value, np.asarray(ref.value, np.float32))


def test_a_failed_fit_is_uncertified_whatever_its_total_number_of_steps():
    """The refit's test compared ``num_steps`` (the total over the path) with ``max_steps`` (a per-solve budget):
    a 100-penalty path that failed after 50 650 kinks counted as out of budget and was not solved again."""
    from jaxknock._solution import Solution
    from jaxknock.l1._resolve import uncertified

    def sol(code, over=False):
        stats = dict(num_steps=np.int32(50_650), max_steps=np.int32(10_000), overflow=np.bool_(over))
        return Solution(np.zeros(3), np.int32(code), stats, None)

    assert uncertified(sol(RESULTS.max_steps_reached))
    assert not uncertified(sol(RESULTS.successful))
    assert not uncertified(sol(RESULTS.max_steps_reached, over=True))  # a capacity overflow grows instead


def test_active_newton_steps_each_member_on_its_own_active_set():
    """Three members whose active sets are disjoint (9 columns in all) and a system of 4 columns: each
    member's step is the exact minimiser of its quadratic model on its own 3 active columns,
    ``delta = H_AA^{-1} (g_A - lam s_A)`` with ``H`` the ``v``-weighted centred Gram (numpy solve), and the
    weighted residual moves by ``-v X_c delta``. A system built on the first columns of the union gave
    members 1 and 2 at most one of their columns."""
    from jaxknock.l1._ws_naive import active_newton

    rng = np.random.default_rng(3)
    M, n, Wc, lam = 3, 60, 12, 0.05
    XW = rng.standard_normal((Wc, n)) + 0.4 * rng.standard_normal((1, n))
    v = rng.uniform(0.05, 0.25, (M, n))
    sv, nf = v.sum(1), np.full(M, float(n))
    xm = v @ XW.T / sv[:, None]
    beta = np.zeros((M, Wc))
    for f in range(M):
        beta[f, 3 * f : 3 * f + 3] = [10.0, -10.0, 10.0]  # far from zero: the step is not cut
    vr = 0.3 * rng.standard_normal((M, n))
    g = vr @ XW.T / nf[:, None]
    valid = np.ones(Wc, bool)
    args = [jnp.asarray(a) for a in (beta, vr, g, lam, v, XW, xm, nf, sv, valid)]
    new_beta, new_vr = map(np.asarray, active_newton(*args, 4))
    for f in range(M):
        A = np.arange(3 * f, 3 * f + 3)
        Xc = XW[A] - xm[f, A][:, None]
        H = (Xc * v[f]) @ Xc.T / n
        delta = np.linalg.solve(H, g[f, A] - lam * np.sign(beta[f, A]))
        np.testing.assert_allclose(new_beta[f, A], beta[f, A] + delta, rtol=1e-10, atol=1e-12)
        others = np.setdiff1d(np.arange(Wc), A)
        assert np.all(new_beta[f, others] == 0)
        np.testing.assert_allclose(new_vr[f], vr[f] - v[f] * (delta @ Xc), rtol=1e-10, atol=1e-12)


def test_naive_inner_solve_certifies_by_the_kkt_product_not_by_small_moves():
    """``_ws_naive.solve_ws`` skips its working-set KKT product while a sweep still moves a coordinate by
    more than the tolerance (a move of ``h_j |delta|`` is a violation of that size at the start of the
    sweep), but it only reports ``done`` once the product says so. On equicorrelated columns (rho = 0.99,
    150 columns, no Newton steps) coordinate descent creeps: every move is below the tolerance long
    before the gradient is, and a solver that stopped on small moves returned a violation of 3.3x ``tol``
    here (squared loss: its one inner solve is the answer; the logistic outer loop checks again)."""
    from jaxknock.l1 import _ws_naive

    rng = np.random.default_rng(0)
    n, m, rho, tol = 200, 150, 0.99, 1e-4
    X = np.sqrt(rho) * rng.standard_normal((n, 1)) + np.sqrt(1 - rho) * rng.standard_normal((n, m))
    y = X[:, :5] @ np.ones(5) + rng.standard_normal(n)
    _, rows = fold_rows(4, n)
    excl = jnp.asarray([0, 1, 2, 3, -1], jnp.int32)
    d = _ws_naive.naive_data(jnp.asarray(X), jnp.asarray(y), jnp.asarray(rows), excl, loss="squared")
    st = _ws_naive.init_state(d, m)
    st = _ws_naive.add_features(d, st, jnp.ones(m, bool), jnp.full(m, 2.0), m, m)
    lam = 0.01 * float(jnp.max(jnp.abs(st.grad)))
    st, _, done = _ws_naive.solve_ws(d, st, lam, tol, 200_000, loss="squared", accel=False)
    assert bool(done)
    w = np.asarray(d.w)
    res = w * (y[None] - np.asarray(st.eta))
    g = (res @ X - res.sum(1)[:, None] * X.mean(0)[None]) / w.sum(1)[:, None]
    b = np.zeros((5, m))
    b[:, np.asarray(st.idx)] = np.asarray(st.beta)
    viol = np.where(b != 0, np.abs(g - lam * np.sign(b)), np.maximum(np.abs(g) - lam, 0)).max() / lam
    assert viol <= tol * (1 + 1e-6), viol


def test_logistic_path_on_exactly_duplicated_columns_keeps_its_newton_steps():
    """The five signal columns of an equicorrelated design (rho = 0.8) duplicated exactly (a knockoff equal
    to its original): coordinate descent makes each second twin active at rounding level (``~1e-15``), the
    active set's Newton system is singular, and its plain Cholesky step did nothing (a pivot at the
    rounding floor); coordinate descent alone crawled: ``max_steps_reached`` on these four penalties (30 950
    epochs; now ~1 100), and on the whole 100-penalty path 476 685 epochs against 3 599 without the
    twins. The singular members are now solved with a weighted ridge (``_ws_naive._weighted_ridge``). Checked by the KKT
    residual over all columns and the duality gap (liblinear at tol 1e-8 did not finish in 90 s at these
    penalties; the split between twins is not unique)."""
    X, y = _equicorrelated_logistic_design()
    n, m = X.shape
    X[:, m - 5 :] = X[:, :5]
    lam_max = np.max(np.abs((X - X.mean(0)).T @ (y - y.mean()))) / n
    lams = lam_max * np.geomspace(1.0, 1e-3, 100)[[60, 65, 70, 75]]
    sol = l1_path(X, y, lams, loss="logistic", tol=1e-6)
    assert int(sol.result) == RESULTS.successful
    assert int(sol.stats["num_steps"]) < 5000
    path, b0s = np.asarray(sol.stats["coef_path"]), np.asarray(sol.stats["intercept_path"])
    for k, lam in enumerate(lams):
        assert _kkt(X, y, path[k], float(b0s[k]), lam, "logistic") < 1e-5
    assert float(sol.stats["gap"]) < 1e-6


@pytest.mark.parametrize("method", ["homotopy", "cov"])
def test_tall_design_gram_path_matches_lassocv_and_the_design_path(method, monkeypatch):
    """n >= 8 m: the KKT checks, the cache's Gram columns and the held-out errors come from the per-block Gram
    matrices (no pass over the n rows per check; 2.9x faster filter at n = 20 000, p = 50). Same answer as
    LassoCV and as the design-reading path."""
    from jaxknock.l1 import _ws_covariance

    n, m = 400, 30
    assert _ws_covariance.use_gram(n, m) and not _ws_covariance.use_gram(n, 250)
    X, y = _data(n, m, seed=3)
    ids, _ = fold_rows(5, n)
    gram = l1_cv(X, y, folds=ids, num_lambdas=30, early_stop=False, method=method)
    _assert_matches_lassocv(gram, X, y, ids)
    assert int(gram.result) == RESULTS.successful and float(gram.stats["kkt"]) < 1e-6
    monkeypatch.setattr(_ws_covariance, "use_gram", lambda n, m: False)
    rows = l1_cv(X, y, folds=ids, num_lambdas=30, early_stop=False, method=method)
    np.testing.assert_allclose(np.asarray(gram.stats["cv_error"]), np.asarray(rows.stats["cv_error"]), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(gram.value), np.asarray(rows.value), atol=1e-10)


def test_designs_from_two_rows_per_feature_keep_the_gram_matrices():
    """From n = 2 m (not only 8 m) the engine keeps the per-block Gram matrices: a path at n = 4 m read the
    design twice per KKT check (2000 x 500 AR(1): lasso_path 2.6x faster with them). The Gram path's answers
    against LassoCV and the design-reading path are checked by the tall-design test above (one engine
    compilation there; a second design here would cost two more)."""
    from jaxknock.l1 import _ws_covariance

    assert _ws_covariance.use_gram(120, 60) and not _ws_covariance.use_gram(120, 61)
    assert _ws_covariance.use_gram(2000, 500) and _ws_covariance.use_gram(4000, 1024)
    assert not _ws_covariance.use_gram(600, 400) and not _ws_covariance.use_gram(100_000, 1025)


def test_large_slot_capacities_run_their_kinks_on_quarter_tiers():
    """A whole grid of a tall design (n = 4000, m = 500: 532 slots) runs its kinks on quarters of the slots, not
    halves (a kink on 532 slots cost 4x one on 288: the inverses leave the cache); the knockoff filter's
    capacities below QUARTER_TIERS_FROM keep their two tiers (and their compiled programs)."""
    from jaxknock.l1 import _ws_homotopy as _hom

    assert _hom.slot_tiers(532) == (160, 288, 416, 532)
    assert _hom.slot_tiers(256) == (128, 256) and _hom.slot_tiers(_hom.QUARTER_TIERS_FROM - 1)[-1] < 384
    for A in (384, 501, 672, 1100):
        tiers = _hom.slot_tiers(A)
        assert len(tiers) == 4 and tiers[-1] == A and all(t % 32 == 0 for t in tiers[:-1])


def test_held_out_errors_from_the_kkt_product_equal_the_residuals():
    """float64 with the Gram matrices: each member's held-out error comes from held-out sums and the product
    G_{e_f} b_f that the KKT check forms anyway, not from a pass over the rows per penalty; it equals the
    mean squared held-out residual to rounding (also with y far from zero)."""
    from jaxknock.l1 import _ws_covariance as _cov

    n, m, W = 200, 20, 12
    X, y = _data(n, m, seed=8)
    y = y + 50.0
    _, rows = fold_rows(5, n)
    excl = np.array([0, 1, 2, 3, 4, -1], np.int32)
    args = (jnp.asarray(X), jnp.asarray(y), jnp.asarray(rows), jnp.asarray(excl))
    d_sums, d_rows = _cov.cov_data(*args, gram=True, held_sums=True), _cov.cov_data(*args, gram=True)
    assert d_sums.held is not None and d_rows.held is None
    st = _cov.init_state(d_sums, W)
    st = _cov.add_features(d_sums, st, jnp.arange(m) < W, jnp.ones(m), 4, W)
    beta = jnp.asarray(np.random.default_rng(0).standard_normal((excl.size, W)) * 0.3)
    st = jax.jit(_cov.kkt_refresh)(d_sums, st._replace(beta=beta), True)
    sums, res = jax.jit(_cov.fit_stats)(d_sums, st), jax.jit(_cov.fit_stats)(d_rows, st)
    for a, b in zip(sums, res):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
    assert float(jnp.min(sums[1][:5])) > 0


def _eqns(jaxpr):
    """Every equation of a jaxpr, those of its sub-jaxprs (loop bodies, branches) included."""
    for eq in jaxpr.eqns:
        yield eq
        for sub in jax.core.jaxprs_in_params(eq.params):
            yield from _eqns(sub)


def test_a_grid_step_neither_copies_the_inverses_nor_gathers_the_gram_blocks():
    """The homotopy's grid step (run alone, ``tiered``) starts from the anchor in a branch, not from a select of
    the anchor and the current point (a copy of every member's ``(A, A)`` inverse per grid step), and a KKT
    check with per-block Gram matrices reads them in place, not through a gather of their cache columns
    (a copy of ``B m W`` numbers per check). (Both were there before session 46.)"""
    from jaxknock.l1 import _ws_covariance as _cov
    from jaxknock.l1 import _ws_homotopy as _hom

    n, m, W, A = 400, 30, 24, 20
    X, y = _data(n, m, seed=0)
    _, rows = fold_rows(5, n)
    excl = np.array([0, 1, 2, 3, 4, -1], np.int32)
    d = _hom.cov_data(jnp.asarray(X), jnp.asarray(y), jnp.asarray(rows), jnp.asarray(excl), gram=True)
    st = _hom.init_state(d, W, A)
    M = excl.size

    def selects_of_inverses(tiered):
        f = lambda st, lam, act: _hom.solve_ws(d, st, lam, 1e-6, 100, act, tiered=tiered)
        eqs = _eqns(jax.make_jaxpr(f)(st, 0.1, True).jaxpr)
        return [e for e in eqs if e.primitive.name == "select_n" and e.outvars[0].aval.shape == (M, A, A)]

    assert selects_of_inverses(tiered=True) == []
    gathers = [
        e
        for e in _eqns(jax.make_jaxpr(lambda st: _cov.kkt_refresh(d, st, True))(st).jaxpr)
        if e.primitive.name == "gather" and e.invars[0].aval.shape == d.G.shape
    ]
    assert d.G is not None and gathers == []


@pytest.mark.parametrize("x64", [False, True])
def test_cv_grid_with_a_repeated_penalty_finishes(x64):
    """The engine takes a non-increasing grid, so a penalty may repeat; with x64 off a float64 grid
    ``[a, a (1 - 1e-9), b]`` is ``[a, a, b]`` after the cast. The strong rule's extrapolation
    ``(lam - lam_prev) / (lam_prev - lam_prev2)`` divided by zero on the step after the repeat: NaN
    scores, and the loop that moves candidates into the working set (one joins with a score >= 1) never
    ended: ``lasso_cv`` hung. Run in a thread so that a hang fails the test instead of the session."""
    X, y = _data(100, 10)
    out = {}

    def fit():
        with jax.enable_x64(x64):  # a thread-local switch: set in the thread that fits
            lm = float(jaxknock.lambda_max(X, y))
            grid = np.array([0.5, 0.5 if x64 else 0.5 * (1 - 1e-9), 0.1]) * lm
            out["rep"] = jaxknock.lasso_cv(X, y, lambdas=grid, folds=3)
            out["ref"] = jaxknock.lasso_cv(X, y, lambdas=grid[[0, 2]], folds=3)

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "lasso_cv did not finish on a grid with a repeated penalty"
    rep, ref = out["rep"], out["ref"]
    assert int(rep.result) == RESULTS.successful
    assert float(rep.stats["lam"]) == float(ref.stats["lam"])
    np.testing.assert_allclose(np.asarray(rep.value), np.asarray(ref.value), atol=1e-6)


def test_add_features_leaves_a_candidate_that_cannot_join():
    """A candidate joins the working set only with a score >= 1; the chunk loop ran while any candidate was
    out, so a NaN score (the repeated-penalty slope above) kept it running forever. Such a candidate is
    now left out and flagged as an overflow, and the others join. (The covariance engine's loop has the
    same guard; on the old code its lock-step loop hung the test process instead of the thread, so only the
    naive engine's is run here.)"""
    from jaxknock.l1 import _ws_naive as mod

    X, y = _data(40, 6)
    _, rows = fold_rows(2, 40)
    excl = jnp.asarray([0, 1, -1], jnp.int32)
    args = (jnp.asarray(X), jnp.asarray(y), jnp.asarray(rows), excl)
    d = mod.naive_data(*args, loss="squared")
    score = jnp.asarray([2.0, np.nan, 3.0, 0.5, 2.0, 0.0])
    cand = jnp.asarray([True, True, True, False, True, False])
    out = {}
    st0 = mod.init_state(d, 6)
    thread = threading.Thread(target=lambda: out.update(st=mod.add_features(d, st0, cand, score, 4, 6)), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "add_features did not finish with a NaN score"
    st = out["st"]
    assert np.asarray(st.inws).tolist() == [True, False, True, False, True, False] and int(st.size) == 3
    assert bool(st.overflow)


def test_the_engine_does_not_read_back_a_response_its_caller_checked(monkeypatch):
    """``lasso_path``, ``lasso_cv`` and ``lcd`` check ``y`` and call the engine inside ``trusted_values``, but the
    engine's ``prepare`` still copied the responses to the host to check them again: the ``(n,)`` response in
    every warm call, and ``lcd``'s ``(R, n)`` broadcast of one ``y`` over ``R`` replicates (``knockoff_filter``
    with replicates). It trusts them there now, as it trusts ``X``; a user's call of the engine is checked."""
    from jaxknock import _checks
    from jaxknock import statistics as S

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 40, 8))
    y = X[0, :, 0] + rng.standard_normal(40)
    seen = []
    check = _checks.check_model_response
    monkeypatch.setattr(_checks, "check_model_response", lambda yv, **kw: (seen.append(np.shape(yv)), check(yv, **kw)))
    S.lcd(X, y, folds=3, num_lambdas=10)
    jaxknock.lasso_cv(X[0], y, folds=3, num_lambdas=10)
    assert seen == [(40,), (40,)]  # each front end's own check, once
    with pytest.raises(ValueError, match="y is constant"):
        l1_cv(X[0], np.ones(40), folds=3, num_lambdas=10)


# The tests below clear JAX's caches (a monkeypatched setting is read when the engine is traced): last in
# the module, so that the programs compiled above stay for the tests that share them.


def _homotopy_rows(monkeypatch, X, y, rows_dtype, guard=True):
    """The homotopy CV with the kinks of a float64 design reading their Gram rows in ``rows_dtype``."""
    from jaxknock.l1 import _ws_homotopy

    monkeypatch.setattr(_ws_homotopy, "FAST_ROWS", rows_dtype)
    monkeypatch.setattr(_ws_homotopy, "FAST_ROWS_MIN_BYTES", 0)  # these small rows would stay float64
    if not guard:  # no grid step is ever judged off the path, so none is redone in float64
        monkeypatch.setattr(_ws_homotopy, "off_path", lambda mem, *_: jnp.zeros(mem.used.shape[:1], bool))
    jax.clear_caches()  # the dtype is read when the engine is traced
    return l1_cv(X, y, folds=4, num_lambdas=40, eps=1e-3, method="homotopy", early_stop=False)


_EXACT_ROWS = {}


def _homotopy_exact_rows(monkeypatch, n, m, seed, dup=0):
    """``_homotopy_rows`` in float64 on ``_data(n, m, seed, dup)``, fitted once per module: the tests below share it."""
    key = (n, m, seed, dup)
    if key not in _EXACT_ROWS:
        X, y = _data(n, m, seed=seed, dup=dup)
        _EXACT_ROWS[key] = _homotopy_rows(monkeypatch, X, y, jnp.float64)
    return _EXACT_ROWS[key]


@pytest.mark.parametrize("n, m, dup", [(150, 60, 0), (60, 240, 5)], ids=["dense", "wide-collinear"])
def test_homotopy_kinks_on_float32_rows_follow_the_float64_path(monkeypatch, n, m, dup):
    """Float32 Gram rows in the kinks of a float64 design (the default once the rows leave the cache,
    ``_ws_homotopy.rows_dtype``; forced here on small rows) give the all-float64 path."""
    X, y = _data(n, m, seed=5, dup=dup)
    exact = _homotopy_exact_rows(monkeypatch, n, m, 5, dup)
    fast = _homotopy_rows(monkeypatch, X, y, jnp.float32)
    for sol in (exact, fast):
        assert int(sol.result) == RESULTS.successful and float(sol.stats["kkt"]) < 1e-10
    assert int(fast.stats["lam_index"]) == int(exact.stats["lam_index"])
    np.testing.assert_allclose(np.asarray(fast.stats["cv_error"]), np.asarray(exact.stats["cv_error"]), rtol=1e-9)
    pf, pe = np.asarray(fast.stats["coef_path"]), np.asarray(exact.stats["coef_path"])
    np.testing.assert_allclose(pf @ X.T, pe @ X.T, atol=1e-9)  # fitted values (duplicates: not the split)
    if not dup:
        np.testing.assert_allclose(pf, pe, atol=1e-10)


def test_homotopy_grid_steps_off_the_path_are_redone_in_float64(monkeypatch):
    """Kinks on bfloat16 rows (8-bit mantissa) end many grid steps off the path; the exact check after each
    grid step redoes them with float64 rows, so the result is the float64 path's. Without the check the
    same run is visibly wrong (this is what makes the float32 rows safe)."""
    X, y = _data(150, 60, seed=5)  # the design of the float32-rows test above: its float64 fit is shared
    exact = _homotopy_exact_rows(monkeypatch, 150, 60, 5)
    rough = _homotopy_rows(monkeypatch, X, y, jnp.bfloat16)
    assert int(rough.result) == RESULTS.successful and float(rough.stats["kkt"]) < 1e-10
    assert int(rough.stats["num_steps"]) > int(exact.stats["num_steps"])  # the redone grid steps' kinks
    np.testing.assert_allclose(np.asarray(rough.stats["coef_path"]), np.asarray(exact.stats["coef_path"]), atol=1e-10)
    unguarded = _homotopy_rows(monkeypatch, X, y, jnp.bfloat16, guard=False)
    off = np.abs(np.asarray(unguarded.stats["coef_path"]) - np.asarray(exact.stats["coef_path"])).max()
    assert off > 1e-6 or float(unguarded.stats["kkt"]) > 1e-6


def test_extrapolated_gradients_admit_the_joining_features_up_front(monkeypatch):
    """On a coarse grid many features join per grid step; admitting the ones whose extrapolated gradient
    reaches the next penalty saves the redone grid steps (fewer kinks), with the same path."""
    from jaxknock.l1 import _ws_driver

    X, y = _data(300, 600, seed=2)
    sols = {}
    for margin in (-np.inf, _ws_driver.AHEAD_MARGIN):
        monkeypatch.setattr(_ws_driver, "AHEAD_MARGIN", margin)
        jax.clear_caches()
        sols[margin] = l1_cv(X, y, folds=5, num_lambdas=15, eps=1e-2, method="homotopy", early_stop=False)
    strong, ahead = sols.values()
    assert int(ahead.result) == RESULTS.successful and float(ahead.stats["kkt"]) < 1e-10
    assert int(ahead.stats["num_steps"]) < 0.8 * int(strong.stats["num_steps"])
    np.testing.assert_allclose(np.asarray(ahead.stats["cv_error"]), np.asarray(strong.stats["cv_error"]), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(ahead.stats["coef_path"]), np.asarray(strong.stats["coef_path"]), atol=1e-10)
