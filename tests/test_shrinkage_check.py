"""The Ledoit-Wolf near-duplicate check (jaxknock._shrinkage_check) and knockoff_filter's warning."""

import warnings

import jax
import numpy as np
import pytest

import jaxknock
from jaxknock._scaling import standardise_columns
from jaxknock._shrinkage_check import WARN_AT, inflation_bound
from jaxknock.covariance import ledoit_wolf_and_sample


def paired(n, p, rho, seed=0):
    """Features ``p/2 .. p-1`` are ``rho``-correlated twins of ``0 .. p/2-1``; the twins' pairs are independent."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    h = p // 2
    X[:, h:] = rho * X[:, :h] + np.sqrt(1 - rho**2) * X[:, h:]
    return X


def ar1(n, p, rho, seed=0):
    C = rho ** np.abs(np.subtract.outer(np.arange(p), np.arange(p)))
    return np.random.default_rng(seed).standard_normal((n, p)) @ np.linalg.cholesky(C).T


def actual_inflation(X):
    """``max_j v^_j / v_j``: conditional variances of the Ledoit-Wolf correlation over the sample's (numpy)."""
    lw, _ = jaxknock.ledoit_wolf(standardise_columns(jax.numpy.asarray(X)))
    lw = np.asarray(lw)
    d = np.sqrt(np.diag(lw))
    C_hat = lw / np.outer(d, d)
    v_hat = 1 / np.diag(np.linalg.inv(C_hat))
    v = 1 / np.diag(np.linalg.inv(np.corrcoef(X, rowvar=False)))
    return np.max(v_hat / v)


@pytest.mark.parametrize(
    "X",
    [paired(300, 40, 0.99), paired(300, 40, 0.9, 1), paired(2000, 20, 0.995, 2), ar1(300, 40, 0.9), ar1(200, 30, 0.99)],
    ids=["pairs-0.99", "pairs-0.9", "pairs-n2000", "ar1-0.9", "ar1-0.99"],
)
def test_bound_is_below_the_actual_inflation(X):
    """The O(p^2) bound never exceeds the actual inflation of the worst feature (computed from both inverses),
    reports that feature's sample correlation with its partner, and separates the twins from AR(1)."""
    (Sigma, delta), S = ledoit_wolf_and_sample(standardise_columns(jax.numpy.asarray(X)))
    info = inflation_bound(Sigma, delta)
    # the sample's own correlations (what the filter passes) give the same bound where delta < 1
    with_sample = inflation_bound(Sigma, delta, S)
    assert float(with_sample.bound) == pytest.approx(float(info.bound), rel=1e-9)
    assert int(with_sample.feature) == int(info.feature) and int(with_sample.count) == int(info.count)
    actual = actual_inflation(X)
    assert 0 < float(info.bound) <= actual * (1 + 1e-9)
    j, k = int(info.feature), int(info.partner)
    assert j != k and float(info.correlation) == pytest.approx(np.corrcoef(X[:, j], X[:, k])[0, 1], abs=1e-9)
    twins = X.shape[1] == 40 and np.allclose(np.corrcoef(X[:, 0], X[:, 20])[0, 1], 0.99, atol=0.02)
    if twins:
        assert float(info.bound) >= WARN_AT and int(info.count) >= 20  # every twin
    if np.abs(np.corrcoef(X[:, 0], X[:, 1])[0, 1]) > 0.8:  # AR(1): shrinkage small against 1 - rho^2
        assert float(info.bound) < 1 and int(info.count) == 0


def test_bound_edge_cases():
    """No shrinkage, one feature and an exact duplicate (bound inf); jittable."""
    X = paired(100, 6, 0.5)
    S, _ = jaxknock.ledoit_wolf(standardise_columns(jax.numpy.asarray(X)))
    assert float(inflation_bound(S, jax.numpy.zeros(())).bound) == 0.0
    one = inflation_bound(jax.numpy.ones((1, 1)), jax.numpy.asarray(0.3))
    assert float(one.bound) == 0.0 and int(one.count) == 0
    X[:, 5] = X[:, 0]
    S, d = jaxknock.ledoit_wolf(standardise_columns(jax.numpy.asarray(X)))
    dup = jax.jit(inflation_bound)(S, d)
    assert np.isinf(float(dup.bound)) and {int(dup.feature), int(dup.partner)} == {0, 5}


def test_knockoff_filter_warns_on_near_duplicates_only():
    """Twins at 0.99 in an independent design: a UserWarning naming a twin pair, from the caller's line;
    an AR(1) 0.9 design of the same size and a known Sigma: none."""
    X = paired(300, 20, 0.99)
    y = X[:, :3].sum(axis=1) + np.random.default_rng(1).standard_normal(300)
    with pytest.warns(UserWarning, match=r"near-duplicate feature\(s\) by at least 2 \(feature (\d+),") as rec:
        jaxknock.knockoff_filter(jax.random.key(0), X, y, statistic="correlation")
    (w,) = [r for r in rec if "Ledoit-Wolf" in str(r.message)]
    assert w.filename == __file__
    assert "groups=" in str(w.message) and "Sigma=" in str(w.message)
    for Xq, kw in ((ar1(300, 20, 0.9), {}), (X, {"Sigma": np.corrcoef(X, rowvar=False)})):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            jaxknock.knockoff_filter(jax.random.key(0), Xq, y, statistic="correlation", **kw)


def spiky_with_twins(seed=0):
    """(300, 20): 8 columns with a single non-zero (their fourth moments drive the Ledoit-Wolf shrinkage to
    exactly 1), 10 independent ones and a pair correlated ~0.95 (features 18, 19)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((300, 20))
    X[:, :8] = 0.0
    X[rng.integers(300, size=8), np.arange(8)] = 1.0
    X[:, 19] = 0.95 * X[:, 18] + np.sqrt(1 - 0.95**2) * X[:, 19]
    return X


def test_full_shrinkage_is_bounded_from_the_data():
    """delta = 1 leaves no correlation in the estimate (it is mu I): the bound comes from the data's own
    correlation, 1 / (1 - r^2) for the twins (it was 0 at delta = 1, so the filter never warned there)."""
    X = spiky_with_twins()
    Xs = standardise_columns(jax.numpy.asarray(X))
    (Sigma, delta), S = ledoit_wolf_and_sample(Xs)
    assert float(delta) == 1.0
    np.testing.assert_array_equal(np.asarray(Sigma), np.asarray(jaxknock.ledoit_wolf(Xs).covariance))
    r = np.corrcoef(X[:, 18], X[:, 19])[0, 1]
    info = jax.jit(inflation_bound)(Sigma, delta, S)
    assert {int(info.feature), int(info.partner)} == {18, 19}
    assert float(info.correlation) == pytest.approx(r, abs=1e-12)
    assert float(info.bound) == pytest.approx(1 / (1 - r**2), rel=1e-10) and int(info.count) == 2
    assert float(inflation_bound(Sigma, delta).bound) == 0.0  # without the data: nothing to compare


def test_knockoff_filter_warns_at_full_shrinkage():
    X = spiky_with_twins()
    y = X[:, 8:11].sum(axis=1) + np.random.default_rng(1).standard_normal(300)
    with pytest.warns(UserWarning, match=r"shrinks every correlation by 100%.*feature 1[89], correlated \+0\.9"):
        jaxknock.knockoff_filter(jax.random.key(0), X, y, statistic="correlation")
