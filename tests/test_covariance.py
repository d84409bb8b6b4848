import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import count_compiles, factor_data
from sklearn.covariance import empirical_covariance as sk_emp
from sklearn.covariance import ledoit_wolf as sk_lw

from jaxknock import RESULTS
from jaxknock.covariance import (
    FactorFit,
    FactorModel,
    LedoitWolf,
    empirical_covariance,
    estimate_factor_model,
    factor_model_from_data,
    ledoit_wolf,
    to_correlation,
)


@pytest.fixture
def X():
    rng = np.random.default_rng(0)
    return rng.standard_normal((60, 20)) @ rng.standard_normal((20, 20)) + 3.0


def test_empirical_matches_sklearn(X):
    np.testing.assert_allclose(empirical_covariance(X), sk_emp(X), atol=1e-12)


@pytest.mark.parametrize("shape", [(60, 20), (15, 40)])
def test_ledoit_wolf_matches_sklearn(shape):
    rng = np.random.default_rng(1)
    X = rng.standard_normal(shape) @ rng.standard_normal((shape[1], shape[1]))
    S, delta = ledoit_wolf(X)
    S_ref, delta_ref = sk_lw(X)
    np.testing.assert_allclose(S, S_ref, atol=1e-10, rtol=0)
    assert abs(float(delta) - delta_ref) < 1e-10
    assert np.linalg.eigvalsh(np.asarray(S))[0] > 0


@pytest.mark.parametrize("centred", [False, True])
def test_ledoit_wolf_one_feature_has_no_shrinkage(centred):
    """p = 1: S = mu I exactly, so delta = 0 / 0; the rounding gave shrinkage 1.0 on seed 3 (scikit-learn: 0)."""
    for seed in range(6):
        X = np.random.default_rng(seed).standard_normal((30, 1)) + 2.0
        S, delta = ledoit_wolf(X, assume_centered=centred)
        S_ref, delta_ref = sk_lw(X, assume_centered=centred)
        assert float(delta) == delta_ref == 0.0
        np.testing.assert_allclose(S, S_ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("p", [1, 4])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_ledoit_wolf_of_nonfinite_data_under_jit_is_nan(p, bad):
    # traced, so the eager check cannot run: the shrinkage was a plausible 0 beside a partly finite covariance
    X = np.random.default_rng(4).standard_normal((20, p))
    lw = jax.jit(ledoit_wolf, static_argnames="assume_centered")
    good = lw(X)
    np.testing.assert_array_equal(good.covariance, ledoit_wolf(X).covariance)  # finite data: unchanged
    X[3, 0] = bad
    for centred in (False, True):
        S, delta = lw(X, assume_centered=centred)
        assert np.isnan(float(delta)) and bool(jnp.all(jnp.isnan(S)))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_factor_model_from_data_shrinkage_of_nonfinite_data_under_jit_is_nan(key, bad):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 12)) + 2.0 * rng.standard_normal((30, 1))  # correlated: 0 < delta < 1
    fit = jax.jit(lambda X: factor_model_from_data(key, X, rank=2))
    assert 0 < float(fit(X).shrinkage) < 1
    X[2, 3] = bad
    assert np.isnan(float(fit(X).shrinkage))  # was 0, "no shrinkage", beside a NaN model


def test_to_correlation(X):
    C = to_correlation(jnp.asarray(np.cov(X.T)))
    np.testing.assert_array_equal(np.diag(C), 1.0)
    np.testing.assert_allclose(C, np.corrcoef(X.T), atol=1e-12)


def test_factor_model_operations():
    rng = np.random.default_rng(2)
    m = FactorModel(jnp.asarray(rng.uniform(0.5, 2, 30)), jnp.asarray(rng.standard_normal((30, 4))))
    dense = np.asarray(m.dense())
    v = rng.standard_normal(30)
    V = rng.standard_normal((30, 3))
    np.testing.assert_allclose(m.matvec(v), dense @ v, atol=1e-12)
    np.testing.assert_allclose(m.matvec(V), dense @ V, atol=1e-12)
    np.testing.assert_allclose(m.solve(v), np.linalg.solve(dense, v), atol=1e-10)
    np.testing.assert_allclose(m.solve(V), np.linalg.solve(dense, V), atol=1e-10)
    np.testing.assert_allclose(m.logdet(), np.linalg.slogdet(dense)[1], atol=1e-10)
    np.testing.assert_allclose(m.diagonal(), np.diag(dense), atol=1e-12)
    # a pytree: vmaps over a batch of models
    batch = jax.tree.map(lambda a: jnp.stack([a, 2 * a]), m)
    ld = jax.vmap(FactorModel.logdet)(batch)
    assert ld.shape == (2,)


@pytest.mark.parametrize("shape", [(1,), (1, 3), (2,), (3, 3, 1)])
def test_factor_model_solve_and_matvec_refuse_a_wrong_shape(shape):
    # broadcasting took v of shape (1,) as (v0, v0, v0) and (1, 3) as three equal rows: a wrong answer
    m = FactorModel(jnp.array([1.0, 2.0, 4.0]), jnp.ones((3, 1)))
    v = jnp.ones(shape)
    for method in (m.solve, m.matvec):
        with pytest.raises(ValueError, match=re.escape(f"v must have shape (p,) or (p, m) with p = 3, got {shape}")):
            method(v)
    # the right shapes, under jit too
    dense = np.asarray(m.dense())
    np.testing.assert_allclose(jax.jit(FactorModel.solve)(m, jnp.ones((3, 2))), np.linalg.solve(dense, np.ones((3, 2))))


def test_estimate_factor_model_recovers_exact_model():
    rng = np.random.default_rng(3)
    U = rng.standard_normal((40, 3))
    d = rng.uniform(0.5, 1.0, 40)
    Sigma = np.diag(d) + U @ U.T
    sol = estimate_factor_model(Sigma, rank=3, max_steps=500, tol=1e-12)
    m = sol.value
    assert int(sol.result) == 0
    np.testing.assert_allclose(m.dense(), Sigma, atol=1e-5)
    assert float(sol.stats["objective"]) < 1e-5


def test_estimate_factor_model_reports_max_steps():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((20, 20))
    sol = estimate_factor_model(np.corrcoef(A), rank=2, max_steps=2, tol=1e-14)
    assert int(sol.result) == 1  # max_steps_reached


def test_factor_model_from_data_unit_diagonal_and_close_to_dense(key):
    n, p, k = 400, 60, 3
    X = factor_data(4, n, p, k, noise=0.5)
    model, delta = factor_model_from_data(key, X, rank=k)
    np.testing.assert_allclose(model.diagonal(), 1.0, atol=1e-12)
    Z = (X - X.mean(0)) / X.std(0)
    _, delta_ref = sk_lw(Z, assume_centered=True)
    assert abs(float(delta) - delta_ref) < 1e-10
    R = np.corrcoef(X.T)
    err = np.linalg.norm(np.asarray(model.dense()) - R) / np.linalg.norm(R)
    assert err < 0.1
    assert float(jnp.min(model.d)) >= float(delta) - 1e-12


def test_bad_inputs():
    with pytest.raises(ValueError, match="2-D"):
        ledoit_wolf(np.ones(5))
    with pytest.raises(ValueError, match="non-finite"):
        ledoit_wolf(np.array([[1.0, np.nan], [2.0, 3.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="rank"):
        estimate_factor_model(np.eye(4), rank=4)
    with pytest.raises(ValueError, match="constant column"):
        factor_model_from_data(jax.random.key(0), np.c_[np.ones(10), np.arange(10.0), np.arange(10.0) ** 2], rank=1)
    # a column of 0.1s: JAX's std is 6.9e-17 at n = 600 (the mean rounds), which an std == 0 check passed
    X = np.random.default_rng(0).standard_normal((600, 5))
    X[:, 3] = 0.1
    with pytest.raises(ValueError, match=r"1 constant column\(s\) \(first: \[3\]\)"):
        factor_model_from_data(jax.random.key(0), X, rank=2)
    # max_steps <= 0 returned the raw sketch (diag(D + U U^T) up to 4133, not 1), a negative oversample
    # a U of fewer than rank columns; a NumPy integer rank was refused
    X = np.random.default_rng(1).standard_normal((60, 8))
    for kwargs, name in (
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": -1}, "max_steps"),
        ({"oversample": -2}, "oversample"),
    ):
        with pytest.raises(ValueError, match=name):
            factor_model_from_data(jax.random.key(0), X, rank=3, **kwargs)
    model, _ = factor_model_from_data(jax.random.key(0), X, rank=np.int64(3))
    assert model.U.shape == (8, 3)


def test_named_results_unpack_like_tuples(key):
    X = factor_data(5, 80, 20, 2)
    lw = ledoit_wolf(X)
    assert isinstance(lw, LedoitWolf)
    S, delta = lw
    assert S is lw.covariance and delta is lw.shrinkage
    fit = factor_model_from_data(key, X, rank=2)
    assert isinstance(fit, FactorFit)
    model, delta = fit
    assert model is fit.model and delta is fit.shrinkage
    assert isinstance(model, FactorModel)


def test_factor_model_from_data_num_iters_is_deprecated(key):
    X = factor_data(5, 80, 20, 2)
    new = factor_model_from_data(key, X, rank=2, max_steps=3)
    with pytest.warns(DeprecationWarning, match="max_steps"):
        old = factor_model_from_data(key, X, rank=2, num_iters=3)
    np.testing.assert_array_equal(old.model.U, new.model.U)
    with pytest.raises(TypeError, match="both"):
        factor_model_from_data(key, X, rank=2, num_iters=3, max_steps=3)


def test_estimate_factor_model_compiles_once():
    Sigma = np.corrcoef(factor_data(6, 50, 12, 2).T)
    with count_compiles("_fit_factor_model") as compiles:
        a = estimate_factor_model(Sigma, rank=2, max_steps=5)
        first = len(compiles)
        # new numeric settings and new values of the same shape: no recompilation
        b = estimate_factor_model(0.9 * Sigma + 0.1 * np.eye(12), rank=2, max_steps=7, tol=1e-9, min_diag=1e-5)
    assert first <= 1 and len(compiles) == first
    assert int(a.stats["num_steps"]) <= 5 and int(b.stats["num_steps"]) <= 7


def test_estimate_factor_model_settings_of_any_scalar_type_share_one_program():
    """``tol=np.float64(1e-9)``, ``min_diag=np.float64(1e-5)`` or ``max_steps=np.int64(7)`` (strong types)
    against Python scalars (weak) compiled the fit again, and the checks of the settings ran as eager device
    operations on them (two to four programs more per type). Concrete settings enter as Python scalars now."""
    Sigma = np.corrcoef(factor_data(6, 50, 12, 2).T)
    ref = estimate_factor_model(Sigma, rank=2, max_steps=7, tol=1e-9, min_diag=1e-5)
    typed = [(np.int64(7), np.float64(1e-9), np.float64(1e-5)), (jnp.int32(7), jnp.float64(1e-9), jnp.float64(1e-5))]
    with count_compiles() as compiles:
        out = [estimate_factor_model(Sigma, rank=2, max_steps=k, tol=t, min_diag=m) for k, t, m in typed]
    assert [c.split()[1] for c in compiles] == []
    for o in out:
        np.testing.assert_array_equal(o.value.U, ref.value.U)
        np.testing.assert_array_equal(o.value.d, ref.value.d)


# ---------------------------------------- issue 19: to_correlation validates variances


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan])
def test_to_correlation_bad_variance_names_sigma_and_poisons_under_jit(bad):
    Sigma = jnp.array([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]]).at[1, 1].set(bad)
    with pytest.raises(ValueError, match="Sigma must have positive, finite variances"):
        to_correlation(Sigma)
    assert bool(jnp.all(jnp.isnan(jax.jit(to_correlation)(Sigma))))
    good = jax.jit(to_correlation)(Sigma.at[1, 1].set(1.0))
    assert bool(jnp.all(jnp.isfinite(good))) and bool(jnp.allclose(jnp.diagonal(good), 1.0))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_to_correlation_nonfinite_covariance_names_sigma(bad):
    # a NaN / Inf off the diagonal came back as a NaN "correlation", without a word
    Sigma = jnp.array([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]]).at[0, 2].set(bad)
    with pytest.raises(ValueError, match=r"Sigma contains 1 non-finite value\(s\).*index \(0, 2\)"):
        to_correlation(Sigma)
    with pytest.raises(ValueError, match=r"Sigma contains 1 non-finite"):  # a batch too
        to_correlation(jnp.stack([Sigma.at[0, 2].set(0.1), Sigma]))


def test_to_correlation_empty_names_sigma():
    with pytest.raises(ValueError, match="Sigma is empty"):
        to_correlation(jnp.zeros((0, 0)))


def test_estimate_factor_model_accepts_numpy_integer_rank():
    """``rank=np.int64(2)`` (e.g. from a NumPy computation) was refused as "rank must be an integer"."""
    A = np.random.default_rng(2).standard_normal((6, 40))
    C = np.corrcoef(A)
    ref = estimate_factor_model(C, rank=2, max_steps=5)
    sol = estimate_factor_model(C, rank=np.int64(2), max_steps=5)
    np.testing.assert_array_equal(sol.value.U, ref.value.U)
    with pytest.raises(ValueError, match="rank must be an integer"):
        estimate_factor_model(C, rank=2.0)
    with pytest.raises(ValueError, match="rank must be an integer"):
        estimate_factor_model(C, rank=True)


def test_traced_assume_centered_is_named():
    """``jax.jit(ledoit_wolf)(X, assume_centered=True)`` was "Non-hashable static arguments" (and
    empirical_covariance a TracerBoolConversionError); the static form works."""
    X = jnp.asarray(np.random.default_rng(3).standard_normal((20, 4)))
    for fn in (ledoit_wolf, empirical_covariance):
        with pytest.raises(TypeError, match="assume_centered must be a Python bool"):
            jax.jit(fn)(X, assume_centered=True)
    lw = jax.jit(ledoit_wolf, static_argnames=("assume_centered",))(X, assume_centered=True)
    np.testing.assert_allclose(lw.covariance, sk_lw(np.asarray(X), assume_centered=True)[0], rtol=1e-10)


def _raw_data():
    X = np.random.default_rng(0).normal(size=(60, 40))
    X[:, :5] += X[:, 5:10]
    return X


def test_factor_model_from_data_is_invariant_to_column_units():
    # a column times 1e200 (its variance overflowed) or 1e-160 (flushed to zero) made the whole model NaN
    X = _raw_data()
    Xs = X.copy()
    for j, a in [(3, 1e200), (7, 1e-160), (11, 2.0**-1000), (12, 1e300), (13, 3e-170)]:
        Xs[:, j] *= a
    key = jax.random.key(0)
    ref, fit = factor_model_from_data(key, X, 4), factor_model_from_data(key, Xs, 4)
    np.testing.assert_allclose(float(fit.shrinkage), float(ref.shrinkage), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fit.model.d), np.asarray(ref.model.d), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(fit.model.U), np.asarray(ref.model.U), rtol=0, atol=1e-12)
    # scaling a column by a power of two changes no bit
    X2 = X * 2.0 ** np.arange(-20, 20)
    np.testing.assert_array_equal(np.asarray(factor_model_from_data(key, X2, 4).model.U), np.asarray(ref.model.U))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_pow2_is_numpys_ldexp_to_the_bit(dtype):
    """The exact power-of-two scaling behind every unit-free estimator (it replaced ``jnp.ldexp``, 10x slower).

    Against NumPy's ``ldexp`` for every exponent from below the normal range to beyond it (values whose
    result needs two factors: ``1e-30 * 2^{maxexp + 40}``), with 0, -0, +-Inf, NaN and the extremes of
    the range; under ``jit`` with a traced exponent and ``vmap`` over exponents. Results NumPy gives as
    subnormals, and subnormal inputs, are left out (XLA:CPU flushes them)."""
    from jaxknock._scaling import scale_pow2

    info = np.finfo(dtype)
    rng = np.random.default_rng(0)
    decades = int(np.log10(info.max)) - 1
    vals = rng.standard_normal(400) * 10.0 ** rng.integers(-decades, decades, 400)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny, 1.0, 0.75]
    vals = np.concatenate([vals, specials]).astype(dtype)
    vals = vals[~((vals != 0) & (np.abs(vals) < info.tiny))]  # no subnormal input either
    es = np.arange(info.minexp - 60, info.maxexp + 60, dtype=np.int32)
    got = np.asarray(jax.jit(jax.vmap(scale_pow2, (None, 0)))(vals, es))
    with np.errstate(over="ignore", under="ignore"):
        want = np.ldexp(vals[None, :], es[:, None])
    compared = ~((want != 0) & (np.abs(want) < info.tiny))
    assert compared.mean() > 0.9
    np.testing.assert_array_equal(got[compared], want[compared])
    # an exponent per column, broadcast against a matrix
    A, e = (1e3 * rng.standard_normal((19, 20))).astype(dtype), rng.integers(-30, 30, 20).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(scale_pow2(A, e)), np.ldexp(A, e))


@pytest.mark.parametrize("scale", [1e80, 1e-80])
def test_ledoit_wolf_is_equivariant_to_a_global_scale(scale):
    # the fourth powers and ||S||_F^2 of the shrinkage overflowed (NaN) or underflowed (shrinkage 0)
    X = _raw_data()
    ref, fit = ledoit_wolf(X), ledoit_wolf(X * scale)
    np.testing.assert_allclose(float(fit.shrinkage), float(ref.shrinkage), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fit.covariance) / scale / scale, np.asarray(ref.covariance), rtol=1e-12)


def test_empirical_covariance_of_huge_data_does_not_overflow():
    # X^T X summed n = 60 entries of ~3e307 to inf although the covariance (<= ~1e308) is representable
    X = _raw_data()
    S = np.asarray(empirical_covariance(X * 5e153))
    assert np.all(np.isfinite(S))
    np.testing.assert_allclose(S / 5e153 / 5e153, np.asarray(empirical_covariance(X)), rtol=1e-12, atol=1e-14)


def test_estimate_factor_model_of_a_huge_covariance():
    # ||Sigma||_F overflowed: nonfinite after one alternation for entries ~1e160
    S = np.cov(_raw_data().T)
    ref, fit = estimate_factor_model(S, 3), estimate_factor_model(S * 1e160, 3)
    assert int(fit.result) == int(ref.result) == 0
    np.testing.assert_allclose(np.asarray(fit.value.dense()) / 1e160, np.asarray(ref.value.dense()), rtol=0, atol=1e-6)


def test_estimate_factor_model_floor_is_relative_to_the_scale_of_sigma():
    """``min_diag`` was an absolute floor: for ``D Sigma D`` with ``D = 1e-5 I`` every ``d_i`` (~1e-12) was clamped
    at 1e-6, a model 1e4 times too noisy, reported successful. The floor is ``min_diag max_i Sigma_ii`` (the same
    on a correlation matrix), so the fit scales: ``d`` by 1e-10 and ``U`` by 1e-5, the floored ``d_0`` too."""
    rng = np.random.default_rng(3)
    B = rng.standard_normal((12, 2))
    S = B @ B.T + np.diag(rng.uniform(0.001, 0.01, 12))
    S[0, 0] = B[0] @ B[0]  # d_0 = 0: the floor
    S = S / np.sqrt(np.outer(np.diag(S), np.diag(S)))
    np.fill_diagonal(S, 1.0)
    ref, fit = estimate_factor_model(S, 2), estimate_factor_model(1e-5 * S * 1e-5, 2)
    assert int(fit.result) == int(ref.result) == 0 and float(ref.value.d[0]) == 1e-6
    np.testing.assert_allclose(np.asarray(fit.value.d) / 1e-10, np.asarray(ref.value.d), rtol=1e-9)
    np.testing.assert_allclose(np.abs(fit.value.U) / 1e-5, np.abs(ref.value.U), rtol=0, atol=1e-12)


def test_estimate_factor_model_checks_its_settings():
    # min_diag <= 0 returned d with entries -1 (or 0), a model that is not positive definite, as
    # "successful"; max_steps 0 / 2.5 and tol NaN / -1 were taken as they came (one step, or int(2.5))
    C = 0.5 * np.eye(5) + 0.5
    for kwargs, name in (
        ({"min_diag": -1.0}, "min_diag"),
        ({"min_diag": 0.0}, "min_diag"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"tol": np.nan}, "tol"),
        ({"tol": -1.0}, "tol"),
    ):
        with pytest.raises(ValueError, match=name):
            estimate_factor_model(C, rank=1, **kwargs)
    # traced: the settings stay traced (no recompilation); a floor <= 0 is reported, never successful
    fit = jax.jit(lambda floor: estimate_factor_model(C, rank=1, max_steps=3, min_diag=floor).result)
    assert int(fit(-1.0)) == 3 and int(fit(1e-6)) != 3  # infeasible


def test_estimate_factor_model_bad_traced_settings_give_no_model():
    """Under ``jit`` (settings traced, the eager checks cannot run) ``tol = inf`` stopped after one
    alternation and reported ``successful``; ``tol = NaN`` / ``-1``, ``max_steps = 0`` / ``-3`` and
    ``min_diag = -1`` returned a plausible model (``max_steps_reached``, or ``infeasible`` with finite
    ``d`` holding the floor ``-1``). Now ``infeasible`` and NaN, as the S solvers' bad traced ``tol``.
    Reference: the eager fit at valid settings, unchanged."""
    C = 0.5 * np.eye(5) + 0.5
    fit = jax.jit(lambda t, m, f: estimate_factor_model(C, rank=1, tol=t, max_steps=m, min_diag=f))
    for tol, steps, floor in (
        (np.inf, 5, 1e-6),
        (np.nan, 5, 1e-6),
        (-1.0, 5, 1e-6),
        (1e-8, 0, 1e-6),
        (1e-8, -3, 1e-6),
        (1e-8, 5, -1.0),
    ):
        sol = fit(tol, steps, floor)
        assert int(sol.result) == RESULTS.infeasible, (tol, steps, floor)
        assert all(np.all(np.isnan(np.asarray(a))) for a in (sol.value.d, sol.value.U, sol.stats["objective"]))
    good, eager = fit(1e-8, 100, 1e-6), estimate_factor_model(C, rank=1, tol=1e-8, max_steps=100, min_diag=1e-6)
    assert int(good.result) == int(eager.result) == RESULTS.successful
    np.testing.assert_array_equal(np.asarray(good.value.U), np.asarray(eager.value.U))


def test_factor_model_from_data_checks_key_and_shrinkage():
    # an int seed failed inside jax.random ("invalid PRNG key data", naming nothing); shrinkage="no" or
    # None were truthy and applied the shrinkage the caller switched off
    X = np.random.default_rng(3).standard_normal((20, 6))
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        factor_model_from_data(0, X, rank=2)
    for flag in ("no", None):
        with pytest.raises(TypeError, match="shrinkage must be True or False"):
            factor_model_from_data(jax.random.key(0), X, rank=2, shrinkage=flag)


def test_estimators_name_x_without_columns():
    # p = 0 failed inside the power-of-two scaling with "zero-size array to reduction operation max"
    for estimator in (empirical_covariance, ledoit_wolf):
        with pytest.raises(ValueError, match="X needs at least 1 column"):
            estimator(np.zeros((5, 0)))


def test_estimators_of_centred_data_take_one_row():
    # assume_centered=True needs no mean: one sample's x x^T is its covariance (scikit-learn returns it,
    # with shrinkage 0); both estimators asked for 2 rows whatever the flag. Uncentred, 2 rows stay needed.
    x = np.array([[1.0, -2.0, 3.0]])
    for estimator in (empirical_covariance, lambda X, **kw: ledoit_wolf(X, **kw).covariance):
        np.testing.assert_allclose(estimator(x, assume_centered=True), np.outer(x, x), rtol=1e-15)
        with pytest.raises(ValueError, match="X needs at least 2 rows"):
            estimator(x)
    assert float(ledoit_wolf(x, assume_centered=True).shrinkage) == 0.0


# ------------------------- estimate_factor_model refuses an indefinite Sigma (not positive semidefinite)


def _indefinite(p, dtype, rel=1e-3, seed=0):
    """A symmetric ``p x p`` matrix with eigenvalues in [0.5, 2] and one at ``-rel * max |eigenvalue|``."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    ev = rng.uniform(0.5, 2.0, p)
    ev[0] = -rel * ev.max()
    A = (Q * ev) @ Q.T
    return ((A + A.T) / 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_estimate_factor_model_refuses_indefinite_sigma(dtype):
    # an indefinite "covariance" (pairwise-complete estimates, a typo) was fitted and reported successful
    bad = _indefinite(40, dtype)
    good = np.corrcoef(factor_data(6, 80, 40, 2).T).astype(dtype)
    with count_compiles("_fit_factor_model") as compiles:
        ref = estimate_factor_model(good, rank=2, max_steps=5)
        with pytest.raises(ValueError, match=r"Sigma is not positive semidefinite: its smallest eigenvalue is -"):
            estimate_factor_model(bad, rank=2, max_steps=5)
        with pytest.raises(ValueError, match="Sigma is not positive semidefinite"):  # a ValueError, not SolverError
            estimate_factor_model(bad, rank=2, max_steps=5, throw=True)
    assert len(compiles) <= 1  # the check rides on the fit's first eigendecomposition: one program
    # under jit: infeasible, NaN model and statistics, no alternation; a good matrix is unchanged
    fit = jax.jit(lambda S: estimate_factor_model(S, rank=2, max_steps=5))
    sol = fit(bad)
    assert int(sol.result) == RESULTS.infeasible and int(sol.stats["num_steps"]) == 1
    for a in (*sol.value, sol.stats["objective"], sol.stats["rel_change"]):
        assert bool(jnp.all(jnp.isnan(a)))
    np.testing.assert_array_equal(fit(good).value.U, ref.value.U)
    # an asymmetric Sigma, refused eagerly by check_symmetric, was fitted from one triangle under jit
    asym = good.copy()
    asym[0, 1] += 0.5
    assert int(fit(asym).result) == RESULTS.infeasible
    # under vmap each matrix has its own code
    sols = jax.vmap(lambda S: estimate_factor_model(S, rank=2, max_steps=5))(jnp.stack([bad, good]))
    assert sols.result.tolist() == [RESULTS.infeasible, int(ref.result)]
    np.testing.assert_allclose(sols.value.U[1], ref.value.U, rtol=1e-4 if dtype == np.float32 else 1e-10)


def _collinear(n, dtype):
    """Sample covariance of two exactly collinear columns: singular, its rounding is large (~5 p eps ||S||)."""
    X = (np.random.default_rng(1).standard_normal((n, 1)) * 3.0 + 2.0) * np.array([1.0, -1.3]) + [0.0, 4.0]
    return empirical_covariance(X.astype(dtype))


def _sample_correlation(dtype, scale=1.0, p=40):
    """Correlation of n = p / 4 samples (rank n - 1), formed in ``dtype``, times ``scale``."""
    X = factor_data(7, p // 4, p, 3).astype(dtype)
    return np.asarray(to_correlation(empirical_covariance(X))) * dtype(scale)


def _rank_one_plus_small_diagonal(dtype):
    u = np.random.default_rng(2).standard_normal((40, 1))
    return (u @ u.T + 1e-12 * np.eye(40)).astype(dtype)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _sample_correlation(np.float64), id="corr-n=p/4-f64"),
        pytest.param(lambda: _sample_correlation(np.float32), id="corr-n=p/4-f32"),
        pytest.param(lambda: np.cov(factor_data(8, 10, 40, 3).T), id="numpy-cov-n=p/4-f64"),
        pytest.param(lambda: np.corrcoef(factor_data(8, 10, 40, 3).T).astype(np.float32), id="numpy-corr-cast-f32"),
        pytest.param(lambda: _sample_correlation(np.float64, 1e-100), id="corr-times-1e-100"),
        pytest.param(lambda: _sample_correlation(np.float64, 1e100), id="corr-times-1e100"),
        pytest.param(lambda: _sample_correlation(np.float32, 1e-30), id="corr-f32-times-1e-30"),
        pytest.param(lambda: _sample_correlation(np.float32, 1e30), id="corr-f32-times-1e30"),
        pytest.param(lambda: _rank_one_plus_small_diagonal(np.float64), id="rank1-plus-1e-12-f64"),
        pytest.param(lambda: _rank_one_plus_small_diagonal(np.float32), id="rank1-plus-1e-12-f32"),
        pytest.param(lambda: _collinear(10_000, np.float64), id="collinear-p=2-f64"),
        pytest.param(lambda: _collinear(10_000, np.float32), id="collinear-p=2-f32"),
    ],
)
def test_estimate_factor_model_psd_tolerance_is_rounding_only(make):
    # both sides of lambda_min >= -50 p eps max|lambda|: a singular positive semidefinite matrix, whose
    # smallest computed eigenvalues are negative by rounding, is fitted; shifted to lambda_min = -1e-3 ||S||
    # it is refused, eagerly and under jit
    S = np.asarray(make())
    p = S.shape[0]
    lam = np.linalg.eigvalsh(S.astype(np.float64) / np.max(np.abs(S)))
    assert lam[0] <= 1e3 * np.finfo(S.dtype).eps * lam[-1]  # singular to rounding: the case the tolerance is for
    rank, floor = min(2, p - 1), 1e-6  # min_diag is relative to the scale of S (max_i S_ii)
    sol = estimate_factor_model(S, rank=rank, max_steps=5, min_diag=floor)
    assert int(sol.result) in (RESULTS.successful, RESULTS.max_steps_reached)
    assert np.all(np.isfinite(np.asarray(sol.value.U))) and np.all(np.asarray(sol.value.d) > 0)
    fit = jax.jit(lambda A, floor: estimate_factor_model(A, rank=rank, max_steps=5, min_diag=floor).result)
    assert int(fit(S, floor)) == int(sol.result)
    shifted = (S - 1e-3 * np.max(np.abs(np.linalg.eigvalsh(S.astype(np.float64)))) * np.eye(p)).astype(S.dtype)
    with pytest.raises(ValueError, match="Sigma is not positive semidefinite"):
        estimate_factor_model(shifted, rank=rank, max_steps=5, min_diag=floor)
    assert int(fit(shifted, floor)) == RESULTS.infeasible


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_estimate_factor_model_psd_check_does_not_depend_on_min_diag(dtype):
    # the test reads the eigenvalues of Sigma off the fit's eigh(Sigma - min_diag I); a floor far above
    # the scale of Sigma would swamp them (-1e-3 would pass as rounding), so there Sigma is decomposed itself
    good, bad = _sample_correlation(dtype, 1e-20), _indefinite(40, dtype) * dtype(1e-20)
    for floor in (1e-26, 1e-6, 1e3):
        sol = estimate_factor_model(good, rank=2, max_steps=3, min_diag=floor)
        assert int(sol.result) != RESULTS.infeasible
        with pytest.raises(ValueError, match="Sigma is not positive semidefinite"):
            estimate_factor_model(bad, rank=2, max_steps=3, min_diag=floor)


def test_float64_data_far_from_origin_x64_off():
    # x64 off (a user's default): a float64 NumPy X + 1e6 was rounded to float32 (spacing 0.06) before its
    # means came out: the empirical / Ledoit-Wolf covariance 1% off scikit-learn's (shrinkage 0.1876 for
    # 0.1868), the factor model 4.5e-3 off its offset-0 fit. The means now come out in float64 first
    rng = np.random.default_rng(1)
    X = rng.standard_normal((120, 30)) @ (np.eye(30) + 0.3)
    sk_cov, sk_shrink = sk_lw(X)
    with jax.enable_x64(False):
        emp = empirical_covariance(X + 1e6)
        lw = ledoit_wolf(X + 1e6)
        fit0 = factor_model_from_data(jax.random.key(0), X, 3)
        fit = factor_model_from_data(jax.random.key(0), X + 1e6, 3)
        assert emp.dtype == lw.covariance.dtype == fit.model.U.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(emp), sk_emp(X), atol=1e-5 * np.abs(sk_emp(X)).max())
        np.testing.assert_allclose(np.asarray(lw.covariance), sk_cov, atol=1e-5 * np.abs(sk_cov).max())
        np.testing.assert_allclose(float(lw.shrinkage), sk_shrink, rtol=1e-4)
        np.testing.assert_allclose(np.asarray(fit.model.dense()), np.asarray(fit0.model.dense()), atol=1e-5)


def test_host_containers_estimate_the_covariance_of_their_plain_copy():
    # '>f8' / long double X were JAX's "Dtype >f8 is not a valid JAX array type", a pandas Float64 frame
    # "must be a numeric array, got dtype object" (its pd.NA is now a NaN named as such); with x64 off the
    # host centring read a masked X through np.asarray, fitting the value under the mask
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).standard_normal((15, 3))
    ref = np.asarray(ledoit_wolf(X).covariance)
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).astype("Float64")
    for Xv in (X.astype(">f8"), X.astype(np.longdouble), frame, np.ma.array(X)):
        np.testing.assert_array_equal(np.asarray(ledoit_wolf(Xv).covariance), ref)
    frame.iloc[2, 1] = pd.NA
    with pytest.raises(ValueError, match=r"X contains 1 non-finite value.*\(2, 1\)"):
        ledoit_wolf(frame)
    masked = np.ma.array(X, mask=np.arange(X.size).reshape(X.shape) == 4)
    for x64 in (True, False):
        with jax.enable_x64(x64), pytest.raises(ValueError, match="X is a masked array with 1 masked entry"):
            empirical_covariance(masked)


def _genotype_table(rng, n=15):
    """Columns of a genotype table with a bool covariate (sex) and a float one (age): int8, bool, float64."""
    return rng.integers(0, 3, n).astype(np.int8), rng.integers(0, 2, n) == 1, rng.uniform(20, 80, n)


def test_object_array_with_bool_entries_is_its_numbers():
    # np.asarray of such a table (a DataFrame's .to_numpy()) is an object array of np.int8 / np.bool_ / floats,
    # refused as "X must be a numeric array, got dtype object" although a bool X is its 0/1 (scikit-learn's
    # check_array takes it); a bool in an object array that is not data stays refused. Without pandas, so CI runs it
    g, sex, age = _genotype_table(np.random.default_rng(0))
    X = np.empty((g.size, 3), dtype=object)
    X[:, 0], X[:, 1], X[:, 2] = list(g), list(sex), list(age)
    ref = np.asarray(ledoit_wolf(np.column_stack([g, sex, age]).astype(float)).covariance)
    np.testing.assert_array_equal(np.asarray(ledoit_wolf(X).covariance), ref)
    with pytest.raises(TypeError, match="Sigma must be a numeric array, got dtype object"):
        to_correlation(np.array([[True, 0.5], [0.5, 1.0]], dtype=object))


def test_frame_with_a_bool_column_is_its_numbers():
    # the same table as a pandas DataFrame, and its .to_numpy()
    pd = pytest.importorskip("pandas")
    g, sex, age = _genotype_table(np.random.default_rng(0))
    frame = pd.DataFrame({"g": g, "sex": sex, "age": age})
    ref = np.asarray(ledoit_wolf(frame.to_numpy(dtype=float)).covariance)
    for Xv in (frame, frame.to_numpy()):
        np.testing.assert_array_equal(np.asarray(ledoit_wolf(Xv).covariance), ref)
