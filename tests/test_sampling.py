"""Tests for jaxknock.sampling (dense, factor-model, replicates, fixed-X).

Statistical checks use fixed keys and a tolerance derived from n: for Gaussian
data the sample covariance entry G^_ij has standard deviation
sqrt((G_ii G_jj + G_ij^2) / n), and we require every standardised deviation
|G^_ij - G_ij| / sd_ij to stay below Z_MAX (a 5.5-sigma bound: with at most a
few 10^4 entries the chance of a false failure is below 1e-3 per test), while
the same statistic must exceed Z_MAX when s is perturbed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ar1_correlation, count_compiles, equicorrelated_s, random_factor_model

import jaxknock.sampling as sampling
from jaxknock import _memory, _sampling_common
from jaxknock.covariance import FactorModel
from jaxknock.sampling import (
    fixed_x_knockoffs,
    sample_knockoffs,
    sample_knockoffs_factor,
    sample_replicates,
)

Z_MAX = 5.5
N = 10_000  # one shape (N, P) for all model-X tests: fewer compilations
P, K = 70, 3  # 70 = one block of 64 plus a tail of 6


# ----------------------------------------------------------------- helpers


def joint_target(Sigma, s):
    Sigma = np.asarray(Sigma)
    off = Sigma - np.diag(np.asarray(s))
    return np.block([[Sigma, off], [off, Sigma]])


def max_z(Xall, G):
    """Largest standardised deviation of the sample covariance of Xall from G."""
    n = Xall.shape[0]
    emp = np.cov(np.asarray(Xall), rowvar=False)
    dg = np.diag(G)
    sd = np.sqrt((np.outer(dg, dg) + G**2) / n)
    return float(np.max(np.abs(emp - G) / sd))


def gaussian_rows(key, n, Sigma):
    L = np.linalg.cholesky(np.asarray(Sigma))
    return np.asarray(jax.random.normal(key, (n, L.shape[0]))) @ L.T


def max_feasible_gamma(Sigma, v):
    """Largest gamma with diag(gamma v) <= 2 Sigma (generalised eigenvalue)."""
    L = np.linalg.cholesky(Sigma)
    W = np.linalg.solve(L, np.diag(np.sqrt(v)))
    return 2.0 / np.linalg.eigvalsh(W.T @ W)[-1]


def conditional_cov(Sigma, s):
    S = np.diag(s)
    return 2 * S - S @ np.linalg.solve(Sigma, S)


def dense_noise_factor(plan, p, key, n):
    """Rebuild A (A A^T = Omega) from a factor plan and the normals G the draw uses
    for ``key``, so that the draw is exactly ``mean + G A^T``."""
    nb, m = plan.A.shape[0], plan.A.shape[1]
    Z = np.asarray(plan.Zb).reshape(nb * m, -1)
    k = Z.shape[1]
    G = [np.asarray(jax.random.normal(jax.random.fold_in(key, J), (n, m))) for J in range(nb)]
    if bool(plan.nonneg):  # A = [C^1/2, Z] with the extra normals h for Z
        A = np.hstack([np.diag(np.asarray(plan.sqrt_c).ravel()), Z])
        G.append(np.asarray(jax.random.normal(jax.random.fold_in(key, nb), (n, k))))
    else:  # block lower triangular
        A = np.zeros((nb * m, nb * m))
        for J in range(nb):
            A[J * m : (J + 1) * m, J * m : (J + 1) * m] = np.asarray(plan.A[J])
            A[(J + 1) * m :, J * m : (J + 1) * m] = Z[(J + 1) * m :] @ np.asarray(plan.F[J])
    cut, pad = p - p % m, -p % m
    real = np.r_[np.arange(cut), np.arange(cut, p) + pad]  # dummies sit before the tail
    return A[real], np.hstack(G)


@pytest.fixture(scope="module")
def ar1():
    p = 6
    Sigma = ar1_correlation(p, 0.6)
    return Sigma, equicorrelated_s(Sigma)


@pytest.fixture(scope="module")
def well():
    """Well-conditioned factor model, s at the largest feasible scaling (Omega singular)."""
    d, U = random_factor_model(11, P, K)
    Sigma = np.diag(d) + U @ U.T
    s = max_feasible_gamma(Sigma, np.diag(Sigma)) * np.diag(Sigma)
    X = gaussian_rows(jax.random.key(1), N, Sigma)
    return d, U, Sigma, s, X


@pytest.fixture(scope="module")
def indef():
    """Factor model whose c = 2s - s^2/d is indefinite (the recursive path).

    Feasibility allows s_j > 2 d_j (c_j < 0) on at most k coordinates, since
    2D - S plus a rank-k PSD term must be PSD; small d makes it happen here.
    """
    d, U = random_factor_model(1, P, K, dscale=0.03)
    Sigma = np.diag(d) + U @ U.T
    s = 0.999 * max_feasible_gamma(Sigma, np.diag(Sigma)) * np.diag(Sigma)
    assert np.min(2 * s - s**2 / d) < -1e-3  # C is indefinite
    X = gaussian_rows(jax.random.key(2), N, Sigma)
    return d, U, Sigma, s, X


def assert_swap_invariant(joint, G, subsets):
    """Swapping columns j <-> j + p for j in a subset leaves the covariance unchanged.

    The sample covariance of the swapped matrix is the permuted sample covariance,
    which must match both the unswapped one and the target within sampling error.
    """
    n, p2 = joint.shape
    p = p2 // 2
    emp = np.cov(joint, rowvar=False)
    dg = np.diag(G)
    sd = np.sqrt((np.outer(dg, dg) + G**2) / n)
    for subset in subsets:
        perm = np.arange(p2)
        perm[subset], perm[subset + p] = subset + p, subset
        emp_swapped = emp[np.ix_(perm, perm)]
        assert np.max(np.abs(emp_swapped - emp) / (np.sqrt(2) * sd)) < Z_MAX
        assert np.max(np.abs(emp_swapped - G) / sd) < Z_MAX


def random_subsets(p, seed=0):
    rng = np.random.default_rng(seed)
    return [np.arange(p), np.array([0]), np.array([3, 64, 69])] + [
        np.flatnonzero(rng.random(p) < 0.5) for _ in range(4)
    ]


# ---------------------------------------------------------- distribution


@pytest.mark.parametrize("which", ["dense", "factor"])
def test_joint_covariance_swap_and_perturbed_s(which, well):
    d, U, Sigma, s, X = well
    sampler, cov = (sample_knockoffs, Sigma) if which == "dense" else (sample_knockoffs_factor, FactorModel(d, U))
    Xk = np.asarray(sampler(jax.random.key(3), X, cov, s))
    assert np.all(np.isfinite(Xk))  # Omega is singular at this s
    joint = np.hstack([X, Xk])
    G = joint_target(Sigma, s)
    assert max_z(joint, G) < Z_MAX
    # the statistic detects a wrong s ...
    assert max_z(joint, joint_target(Sigma, 0.7 * s)) > Z_MAX
    # ... and knockoffs drawn with a perturbed s fail against the target for s
    Xk_bad = np.asarray(sampler(jax.random.key(3), X, cov, 0.5 * s))
    assert max_z(np.hstack([X, Xk_bad]), G) > Z_MAX
    assert_swap_invariant(joint, G, random_subsets(P))


def test_psd_factor_is_robust():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    lam = np.array([-1e-13, 0.0, 1e-16, 0.5, 1, 1, 2, 3])  # PSD only up to rounding
    Om = (Q * lam) @ Q.T
    A = np.asarray(_sampling_common.psd_factor(jnp.asarray(Om)))
    assert np.all(np.isfinite(A))
    np.testing.assert_allclose(A @ A.T, Om, atol=1e-12)
    Om_bad = (Q * np.array([-1e-3, 0, 0, 0.5, 1, 1, 2, 3])) @ Q.T  # clearly indefinite
    A = np.asarray(_sampling_common.psd_factor(jnp.asarray(Om_bad)))
    assert np.all(np.isfinite(A))
    np.testing.assert_allclose(A @ A.T, (Q * np.clip(np.diag(Q.T @ Om_bad @ Q), 0, None)) @ Q.T, atol=1e-12)


# ------------------------------------------------------ factor model sampler


@pytest.mark.parametrize("case", ["indefinite", "zeros_in_s", "boundary", "nonnegative"])
def test_factor_plan_is_exact(case, indef, well):
    """A A^T = Omega to 1e-10, and the draw equals mean + G A^T for the key's normals."""
    d, U, Sigma, s, X = indef
    zeros = np.flatnonzero(2 * s - s**2 / d > 0)[[0, 5, 17]]
    if case == "zeros_in_s":  # singular first block: eigen branch, X~_j = X_j
        s = s.copy()
        s[zeros] = 0.0
    elif case == "boundary":  # s at the largest feasible scaling: Omega singular
        s = max_feasible_gamma(Sigma, np.diag(Sigma)) * np.diag(Sigma)
    elif case == "nonnegative":  # c >= 0: the non-recursive factor [C^1/2, Z]
        d, U, Sigma, _, X = well
        s = 1.5 * d
    c = 2 * s - s**2 / d
    plan = sampling.replicate_plan(X, FactorModel(d, U), s)
    assert bool(plan.nonneg) == (case == "nonnegative") == bool(np.all(c >= 0))
    key = jax.random.key(6)
    A, G = dense_noise_factor(plan, P, key, N)
    np.testing.assert_allclose(A @ A.T, conditional_cov(Sigma, s), atol=1e-10)

    Y = np.asarray(sample_knockoffs_factor(key, X, FactorModel(d, U), s))
    mean = X - (X - X.mean(0)) @ np.linalg.solve(Sigma, np.diag(s))
    np.testing.assert_allclose(Y, mean + G @ A.T, atol=1e-10)
    if case == "zeros_in_s":
        np.testing.assert_allclose(Y[:, zeros], X[:, zeros], atol=1e-14)


def test_factor_and_dense_same_mean_and_covariance(indef):
    d, U, Sigma, s, X = indef
    model = FactorModel(jnp.asarray(d), jnp.asarray(U))
    # same conditional mean to 1e-10: the noise depends only on the key, so
    # Y(X) - Y(X0) = mean(X) - mean(X0), and mean(X0) = X0 when the rows of X0 are mu
    mu = np.random.default_rng(7).normal(size=P)
    X0 = np.tile(mu, (N, 1))
    key = jax.random.key(8)
    expected = X - (X - mu) @ np.linalg.solve(Sigma, np.diag(s))
    samples = {}
    for sampler, cov in ((sample_knockoffs, Sigma), (sample_knockoffs_factor, model)):
        noise = np.asarray(sampler(key, X0, cov, s, mu=mu)) - X0
        mean = np.asarray(sampler(key, X, cov, s, mu=mu)) - noise
        np.testing.assert_allclose(mean, expected, atol=1e-10)
        # mu=None uses the column means of X
        samples[sampler] = np.asarray(sampler(key, X, cov, s))
        np.testing.assert_allclose(samples[sampler], np.asarray(sampler(key, X, cov, s, mu=X.mean(0))), atol=1e-12)

    # same covariance to sampling error, both equal to the target (C indefinite)
    G = joint_target(Sigma, s)
    Xk_d, Xk_f = samples[sample_knockoffs], samples[sample_knockoffs_factor]
    assert max_z(np.hstack([X, Xk_d]), G) < Z_MAX
    assert max_z(np.hstack([X, Xk_f]), G) < Z_MAX
    cf, cd = np.cov(Xk_f, rowvar=False), np.cov(Xk_d, rowvar=False)
    dg = np.diag(Sigma)
    sd = np.sqrt((np.outer(dg, dg) + Sigma**2) / N)
    assert np.max(np.abs(cf - cd) / (np.sqrt(2) * sd)) < Z_MAX
    assert_swap_invariant(np.hstack([X, Xk_f]), G, random_subsets(P, seed=1))


# ------------------------------------------------ vmap, jit, determinism


@pytest.fixture(scope="module")
def small_problem(well):
    d, U, Sigma, s, X = well
    return X, Sigma, FactorModel(jnp.asarray(d), jnp.asarray(U)), 0.9 * s


@pytest.mark.parametrize("which", ["dense", "factor"])
def test_vmap_equals_loop_and_determinism(which, small_problem):
    X, Sigma, model, s = small_problem
    sampler, cov = (sample_knockoffs, Sigma) if which == "dense" else (sample_knockoffs_factor, model)
    key = jax.random.key(13)
    keys = jax.random.split(key, 3)
    batched = jax.vmap(sampler, in_axes=(0, None, None, None))(keys, X, cov, s)
    looped = jnp.stack([sampler(k, X, cov, s) for k in keys])
    np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=1e-12)
    # deterministic for a key, different for different keys
    np.testing.assert_array_equal(sampler(key, X, cov, s), sampler(key, X, cov, s))
    assert not np.allclose(looped[0], looped[1])
    # jit equals eager, and the internal kernels are not retraced for the same shapes
    jitted = jax.jit(sampler)(key, X, cov, s)
    np.testing.assert_allclose(jitted, sampler(key, X, cov, s), rtol=1e-12, atol=1e-12)
    with count_compiles("_plan") as plans, count_compiles("draw_replicate") as draws:
        sampler(keys[2], X + 1.0, cov, s)
    assert not plans and not draws


def test_dtype_follows_inputs(small_problem):
    X, Sigma, model, s = small_problem
    key = jax.random.key(0)
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    out = sample_knockoffs(key, f32(X), f32(Sigma), f32(s))
    assert out.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(out)))
    out = sample_knockoffs_factor(key, f32(X), FactorModel(f32(model.d), f32(model.U)), f32(s))
    assert out.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(out)))


# ------------------------------------------------------------- replicates


@pytest.mark.parametrize("which", ["dense", "factor"])
def test_sample_replicates_matches_vmap(which, small_problem):
    X, Sigma, model, s = small_problem
    sampler, cov = (sample_knockoffs, Sigma) if which == "dense" else (sample_knockoffs_factor, model)
    key = jax.random.key(14)
    R = 5
    ref = jax.vmap(sampler, in_axes=(0, None, None, None))(jax.random.split(key, R), X, cov, s)
    for chunk in (None, 2):
        out = sample_replicates(key, X, cov, s, R, chunk_size=chunk)
        assert out.shape == (R,) + X.shape
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    chunks = list(sample_replicates(key, X, cov, s, R, chunk_size=2, stream=True))
    assert [c.shape[0] for c in chunks] == [2, 2, 1]
    np.testing.assert_allclose(jnp.concatenate(chunks), ref, rtol=1e-12, atol=1e-12)


def test_sample_replicates_takes_a_d_u_pair_as_the_factor_sampler_does(small_problem):
    """``sample_knockoffs_factor`` takes a ``(d, U)`` pair; ``sample_replicates`` / ``replicate_plan`` sent one
    to the dense path ("Sigma must be a numeric array: ... inhomogeneous shape"). A 2 x 2 nested list stays
    a dense ``Sigma``."""
    X, _, model, s = small_problem
    key = jax.random.key(3)
    ref = sample_replicates(key, X, model, s, 3)
    for pair in ((model.d, model.U), [np.asarray(model.d), np.asarray(model.U)]):
        np.testing.assert_array_equal(sample_replicates(key, X, pair, s, 3), ref)
    X2 = np.asarray(X)[:, :2]
    dense = sample_replicates(key, X2, [[1.0, 0.5], [0.5, 1.0]], np.full(2, 0.5), 2)
    np.testing.assert_array_equal(
        dense, sample_replicates(key, X2, np.array([[1.0, 0.5], [0.5, 1.0]]), np.full(2, 0.5), 2)
    )


def test_a_factor_model_without_factors_is_sampled_as_diagonal():
    """``FactorModel(d, U)`` with ``U`` of shape ``(p, 0)`` (``Sigma = diag(d)``, a valid law that the S solvers
    take) was refused by the factor sampler, "model.U must have at least one column (rank k >= 1)", and so
    by ``knockoff_filter(Sigma=...)`` after its S solve. It is now drawn as the same law with one zero
    column: bit for bit that draw, and its linear part is exactly ``I - D^-1 S`` (knockoffs from
    ``X = I`` and ``X = 0`` with one key differ by it)."""
    p = 5
    d, s = jnp.linspace(0.5, 2.0, p), jnp.linspace(0.2, 0.9, p)
    empty, zero = FactorModel(d, jnp.zeros((p, 0))), FactorModel(d, jnp.zeros((p, 1)))
    key, mu = jax.random.key(0), jnp.zeros(p)
    draw = lambda X, model: np.asarray(sample_knockoffs_factor(key, jnp.asarray(X), model, s, mu=mu))
    np.testing.assert_array_equal(draw(np.eye(p), empty), draw(np.eye(p), zero))
    linear = draw(np.eye(p), empty) - draw(np.zeros((p, p)), empty)
    np.testing.assert_allclose(linear, np.diag(1.0 - np.asarray(s / d)), rtol=0, atol=1e-6)
    X = jax.random.normal(jax.random.key(1), (4, p))
    np.testing.assert_array_equal(sample_replicates(key, X, empty, s, 2), sample_replicates(key, X, zero, s, 2))


def test_sample_replicates_memory(monkeypatch, small_problem):
    X, Sigma, model, s = small_problem
    n, p = X.shape
    b = 8
    shared, per_rep = _memory.knockoff_bytes(n, p, 3, b, block_size=64)
    assert per_rep == (3 * n * p + 4 * n * (64 + 3)) * b  # the documented formula (two chunks of blocks)
    assert sampling.plan_bytes(sampling.replicate_plan(X, model, s)) == (shared, per_rep)

    def chunk(R, stream, memory):
        return _memory.replicate_chunk(R, n, p, b, shared, per_rep, stream=stream, memory_bytes=memory)

    # materialised: the result plus exactly 3 replicates in flight fit in half the memory
    budget = shared + 10 * n * p * b + 3 * per_rep
    assert chunk(10, False, 2 * budget) == 3
    # streamed: each replicate also holds its share of the yielded chunk
    assert chunk(10, True, 2 * budget) == (budget - shared) // (per_rep + n * p * b)
    assert chunk(10**6, True, 2 * budget) >= 1
    # at least one replicate when it fits in all of the available memory
    assert chunk(1, True, shared + per_rep + n * p * b) == 1
    with pytest.raises(ValueError, match="one replicate needs"):
        chunk(1, True, shared + per_rep)
    dense_shared, dense_rep = _memory.knockoff_bytes(n, p, None, b)
    assert (dense_shared, dense_rep) == ((n * p + p * p) * b, 3 * n * p * b)
    assert sampling.plan_bytes(sampling.replicate_plan(X, Sigma, s)) == (dense_shared, dense_rep)
    # the (R, n, p) result does not fit: ask for streaming (raised before any work)
    monkeypatch.setattr(_memory, "device_memory_bytes", lambda devices=None: budget)
    with pytest.raises(ValueError, match="stream=True"):
        sample_replicates(jax.random.key(0), X, model, s, 1000)
    monkeypatch.undo()
    assert _memory.device_memory_bytes() > 0


def test_sample_replicates_bad_args(small_problem):
    X, Sigma, _, s = small_problem
    with pytest.raises(ValueError, match="num_replicates"):
        sample_replicates(jax.random.key(0), X, Sigma, s, 0)
    with pytest.raises(TypeError, match="num_replicates"):
        sample_replicates(jax.random.key(0), X, Sigma, s, 2.0)
    with pytest.raises(ValueError, match="chunk_size"):
        sample_replicates(jax.random.key(0), X, Sigma, s, 2, chunk_size=0)


def test_sample_replicates_settings_as_jax_integers_and_bool_stream():
    # jnp.int32(2) replicates or chunk size was refused as "must be an int" (np.int32(2) passed);
    # stream="no" / None were truthy and returned an iterator instead of the array
    p, Sigma, X, _ = _poison_case()
    key, s = jax.random.key(0), jnp.full(p, 0.5)
    ref = sample_replicates(key, X, Sigma, s, 2, chunk_size=1)
    out = sample_replicates(key, X, Sigma, s, jnp.int32(2), chunk_size=jnp.int32(1))
    np.testing.assert_array_equal(out, ref)
    for flag in ("no", None):
        with pytest.raises(TypeError, match="stream must be True or False"):
            sample_replicates(key, X, Sigma, s, 2, stream=flag)


# ------------------------------------------------------------------ fixed-X


def test_fixed_x_identities():
    rng = np.random.default_rng(15)
    n, p = 60, 25
    X = rng.normal(size=(n, p)) @ np.linalg.cholesky(ar1_correlation(p, 0.5)).T * rng.uniform(1, 5, p)
    Xn_ref = X / np.linalg.norm(X, axis=0)
    G = Xn_ref.T @ Xn_ref
    for s in (equicorrelated_s(G), 0.5 * equicorrelated_s(G)):
        Xn, Xk = fixed_x_knockoffs(X, s)
        Xn, Xk = np.asarray(Xn), np.asarray(Xk)
        np.testing.assert_allclose(Xn, Xn_ref, atol=1e-12)
        np.testing.assert_allclose(Xk.T @ Xk, G, atol=1e-8)
        np.testing.assert_allclose(Xn.T @ Xk, G - np.diag(s), atol=1e-8)
    assert np.max(np.abs(Xk - Xn)) > 0.1  # not a copy
    with pytest.raises(ValueError, match=r"n >= 2p, got n = 60 < 2p = 62"):
        fixed_x_knockoffs(rng.normal(size=(60, 31)), np.ones(31))
    with pytest.raises(ValueError, match=r"scale_to_feasible.*Sigma is X_n\^T X_n"):  # says what Sigma is
        fixed_x_knockoffs(X, 3 * equicorrelated_s(G))
    Xdep = X.copy()
    Xdep[:, 1] = 2 * Xdep[:, 0]
    with pytest.raises(ValueError, match="linearly dependent"):
        fixed_x_knockoffs(Xdep, np.full(p, 0.01))
    with pytest.raises(ValueError, match=r"X of shape \(60, 31\)"):  # names the argument
        fixed_x_knockoffs(rng.normal(size=(60, 31)), np.ones(31))


@pytest.mark.parametrize("n", [41, 60])
def test_fixed_x_knockoffs_of_a_centred_design_are_centred(n):
    # U~ came from the QR of [X, 0] and was not orthogonal to the all-ones vector: the knockoffs of a centred X
    # had column means up to 0.1 / sqrt(n), so a statistic with an intercept (which centres [X, X~]) saw centred
    # knockoffs shorter than their originals (squared norms 0.985-0.999), not the fixed-X Gram. With n >= 2p + 1
    # U~ is orthogonal to 1 as well, and the centred Gram of [X, X~] is the fixed-X one
    rng = np.random.default_rng(3)
    p = 20
    X = rng.normal(size=(n, p)) @ np.linalg.cholesky(ar1_correlation(p, 0.5)).T + 5.0
    X -= X.mean(0)
    Xn_ref = X / np.linalg.norm(X, axis=0)
    G = Xn_ref.T @ Xn_ref
    s = equicorrelated_s(G)
    Xn, Xk = (np.asarray(a) for a in fixed_x_knockoffs(X, s))
    assert np.max(np.abs(Xk.mean(0))) < 1e-14
    Z = np.concatenate([Xn, Xk], axis=1)
    Zc = Z - Z.mean(0)
    np.testing.assert_allclose(Zc.T @ Zc, Z.T @ Z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(Xk.T @ Xk, G, rtol=0, atol=1e-12)
    np.testing.assert_allclose(Xn.T @ Xk, G - np.diag(s), rtol=0, atol=1e-12)


def _nearly_collinear_design(noise, dtype=np.float64, n=40, p=8):
    """A design whose last column is the first plus ``noise`` (``lambda_min`` of the Gram ~ ``noise^2``)."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((n, p))
    X[:, -1] = X[:, 0] + noise * rng.standard_normal(n)
    X = X.astype(dtype)
    Xn = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=0)
    return X, Xn.T @ Xn


def test_fixed_x_identities_hold_to_rounding_for_an_ill_conditioned_design():
    # C^T C was 2S - S (G^-1 S), carrying the error of the computed G^-1 S (~eps cond(G)) into X~^T X~:
    # at lambda_min(G) = 4e-13 (accepted by the rank check) X~^T X~ - X^T X was 1.6e-5; now C^T C is
    # G - A^T A for the computed A = X (I - G^-1 S), and the identity holds to 1e-11
    X, G = _nearly_collinear_design(1e-6)
    lam = np.linalg.eigvalsh(G)[0]
    assert 1e-13 < lam < 1e-12
    s = np.full(8, 0.5)
    s[[0, 7]] = lam  # large s on the well-conditioned coordinates: G^-1 S is large
    assert np.linalg.eigvalsh(2 * G - np.diag(s))[0] > 0  # feasible
    Xn, Xk = (np.asarray(a) for a in fixed_x_knockoffs(X, s))
    G = Xn.T @ Xn
    assert np.max(np.abs(Xk.T @ Xk - G)) < 1e-9
    assert np.max(np.abs(Xn.T @ Xk - (G - np.diag(s)))) < 1e-9


@pytest.mark.parametrize("noise, dtype", [(1e-7, np.float64), (1e-3, np.float32)])
def test_fixed_x_under_jit_poisons_a_nearly_dependent_design(noise, dtype):
    # eagerly refused as (nearly) linearly dependent; under jit X is traced, the rank check could not run, and
    # the knockoffs came back finite with X~^T X~ off by 7e-4 (float64) / 2e-3 (float32): now all NaN
    X, G = _nearly_collinear_design(noise, dtype)
    s = np.full(8, 0.5, dtype)
    s[[0, 7]] = np.linalg.eigvalsh(G)[0]
    with pytest.raises(ValueError, match="linearly dependent"):
        fixed_x_knockoffs(X, s)
    Xn, Xk = jax.jit(fixed_x_knockoffs)(X, s)
    assert bool(jnp.all(jnp.isnan(Xk)))
    # a full-rank design under jit: valid knockoffs
    X, _ = _nearly_collinear_design(1.0, dtype)
    Xn, Xk = (np.asarray(a, np.float64) for a in jax.jit(fixed_x_knockoffs)(X, s))
    G, atol = Xn.T @ Xn, (1e-12 if dtype == np.float64 else 1e-5)
    np.testing.assert_allclose(Xk.T @ Xk, G, rtol=0, atol=atol)
    np.testing.assert_allclose(Xn.T @ Xk, G - np.diag(s), rtol=0, atol=atol)


# --------------------------------------------------------------- bad input


def test_fixed_x_is_invariant_to_the_units_of_the_columns():
    # X_j / ||X_j|| overflowed or flushed for a column in units 1e200 / 1e-170: valid designs were
    # refused as "linearly dependent" or "all-zero"; now the columns are first scaled by powers of two
    X = np.asarray(jax.random.normal(jax.random.key(2), (12, 4)))
    s = np.full(4, 0.2)
    Xn, Xk = fixed_x_knockoffs(X, s)
    units = np.array([1e200, 1.0, 1e-170, 2.0**-60])
    Xn_u, Xk_u = fixed_x_knockoffs(X * units, s)
    np.testing.assert_allclose(Xn_u, Xn, rtol=0, atol=1e-15)  # 1e200 / 1e-170 round X; 2^-60 is exact
    np.testing.assert_allclose(Xk_u, Xk, rtol=0, atol=1e-12)


def test_dense_sampler_points_a_factor_model_to_the_factor_sampler():
    # a FactorModel given to sample_knockoffs failed in np.asarray ("inhomogeneous shape"), naming no remedy
    p, _, X, model = _poison_case()
    with pytest.raises(TypeError, match="use sample_knockoffs_factor"):
        sample_knockoffs(jax.random.key(0), X, model, jnp.full(p, 0.5))


def test_a_factor_fit_is_refused_naming_its_model():
    """A :class:`~jaxknock.FactorFit` (``factor_model_from_data``'s ``(model, shrinkage)``) was read as a ``(d, U)``
    pair or an array: "model.d must be a numeric array: ... inhomogeneous shape" (``sample_knockoffs_factor``), the
    same for ``Sigma`` (``sample_knockoffs``) and NumPy's bare ``ValueError`` (``sample_replicates``)."""
    from jaxknock.covariance import FactorFit

    p, _, X, model = _poison_case()
    fit = FactorFit(model, jnp.asarray(0.1))
    key, s = jax.random.key(0), jnp.full(p, 0.5)
    with pytest.raises(TypeError, match=r"model is a jaxknock.FactorFit .* pass its .model"):
        sample_knockoffs_factor(key, X, fit, s)
    for sampler in (sample_knockoffs, lambda *a: sample_replicates(*a, 2)):
        with pytest.raises(TypeError, match=r"Sigma is a jaxknock.FactorFit .* pass its .model"):
            sampler(key, X, fit, s)


def test_shape_errors(ar1, small_problem):
    Sigma, s = ar1
    key = jax.random.key(0)
    X = np.zeros((10, 6))
    with pytest.raises(ValueError, match=r"X must be a 2-D \(n, p\) array, got shape \(6,\)"):
        sample_knockoffs(key, np.zeros(6), Sigma, s)
    with pytest.raises(ValueError, match=r"Sigma has shape \(6, 6\) but X has p = 5"):
        sample_knockoffs(key, np.zeros((10, 5)), Sigma, s[:5])
    with pytest.raises(ValueError, match="Sigma must be square"):
        sample_knockoffs(key, X, Sigma[:, :5], s)
    with pytest.raises(ValueError, match="s has length 5 but X has p = 6"):
        sample_knockoffs(key, X, Sigma, s[:5])
    with pytest.raises(ValueError, match="mu has length 3"):
        sample_knockoffs(key, X, Sigma, s, mu=np.zeros(3))
    with pytest.raises(TypeError, match="real floating"):
        sample_knockoffs(key, X.astype(complex), Sigma, s)
    with pytest.raises(ValueError, match="single key"):
        sample_knockoffs(jax.random.split(key, 3), X, Sigma, s)
    Xf, _, model, sf = small_problem
    with pytest.raises(ValueError, match=r"but X has p = 69 columns"):
        sample_knockoffs_factor(key, Xf[:, :69], model, sf[:69])
    with pytest.raises(TypeError, match="FactorModel"):
        sample_knockoffs_factor(key, Xf, np.eye(70), sf)
    with pytest.raises(ValueError, match="model.d must be positive"):
        sample_knockoffs_factor(key, Xf, FactorModel(-model.d, model.U), sf)


def test_value_errors(ar1, indef):
    Sigma, s = ar1
    key = jax.random.key(0)
    X = np.zeros((10, 6))
    Xnan = X.copy()
    Xnan[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"X contains 1 non-finite value\(s\).*\(3, 2\)"):
        sample_knockoffs(key, Xnan, Sigma, s)
    with pytest.raises(ValueError, match="non-negative"):
        sample_knockoffs(key, X, Sigma, -s)
    with pytest.raises(ValueError, match="not positive definite"):
        sample_knockoffs(key, X, Sigma - 2 * np.eye(6), s)
    with pytest.raises(ValueError, match="symmetric"):
        sample_knockoffs(key, X, Sigma + np.triu(np.full((6, 6), 0.1), 1), s)
    # infeasible s: says by how much and points to scale_to_feasible
    gamma = max_feasible_gamma(Sigma, 1.25 * s)
    with pytest.raises(ValueError, match="scale_to_feasible") as err:
        sample_knockoffs(key, X, Sigma, 1.25 * s)
    reported = float(str(err.value).split("gamma = ")[1].split()[0])
    assert abs(reported - gamma) < 1e-5 * gamma
    assert "smallest eigenvalue" in str(err.value)

    d, U, Sig_f, s_f, _ = indef
    gamma = max_feasible_gamma(Sig_f, 1.5 * s_f)
    with pytest.raises(ValueError, match="scale_to_feasible") as err:
        sample_knockoffs_factor(key, np.zeros((4, 70)), FactorModel(d, U), 1.5 * s_f)
    reported = float(str(err.value).split("gamma = ")[1].split()[0])
    assert abs(reported - gamma) < 1e-5 * gamma
    Xnan = np.zeros((4, 70))
    Xnan[0, 0] = np.inf
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        sample_knockoffs_factor(key, Xnan, FactorModel(d, U), s_f)


# ------------------------------------------- issue 19: traced bad s is NaN-poisoned


def _poison_case():
    p = 5
    Sigma = 0.5 * jnp.eye(p) + 0.5  # lambda_min = 0.5: s <= 1 is feasible
    X = jax.random.normal(jax.random.key(1), (40, p))
    model = FactorModel(jnp.full(p, 0.5), jnp.full((p, 1), np.sqrt(0.5)))  # the same Sigma
    return p, Sigma, X, model


@pytest.mark.parametrize("value, feasible", [(1.0, True), (0.0, True), (0.6, True), (1.5, False), (-0.1, False)])
def test_samplers_under_jit_poison_infeasible_or_negative_s(value, feasible):
    p, Sigma, X, model = _poison_case()
    s = jnp.full(p, value)
    key = jax.random.key(0)
    outs = [
        jax.jit(sample_knockoffs)(key, X, Sigma, s),
        jax.jit(sample_knockoffs_factor)(key, X, model, s),
        # fixed-X: s <= 2 lambda_min(X_n^T X_n) ~ 0.8 here
        jax.jit(lambda X, s: fixed_x_knockoffs(X, s)[1])(X, s * (0.5 if feasible else 2.0)),
    ]
    for out in outs:
        if feasible:
            assert bool(jnp.all(jnp.isfinite(out)))
        else:
            assert bool(jnp.all(jnp.isnan(out)))  # never finite, plausible knockoffs


def test_samplers_under_jit_poison_bad_sigma():
    p, Sigma, X, model = _poison_case()
    s = jnp.full(p, 0.5)
    key = jax.random.key(0)
    f = jax.jit(sample_knockoffs)
    assert bool(jnp.all(jnp.isnan(f(key, X, Sigma.at[0, 1].add(0.3), s))))  # not symmetric
    assert bool(jnp.all(jnp.isnan(f(key, X, Sigma.at[0, 0].set(jnp.nan), s))))
    assert bool(jnp.all(jnp.isnan(f(key, X, Sigma, s.at[2].set(jnp.nan)))))
    bad_model = FactorModel(model.d.at[0].set(-0.5), model.U)
    assert bool(jnp.all(jnp.isnan(jax.jit(sample_knockoffs_factor)(key, X, bad_model, s))))


def test_samplers_under_jit_with_a_closed_over_design():
    # X concrete (closed over), Sigma / model traced: the partial host checks called bool() on a
    # jitted finiteness flag of X, which inside the outer trace is a tracer (TracerBoolConversionError)
    p, Sigma, X, model = _poison_case()
    key, s = jax.random.key(0), jnp.full(p, 0.5)
    assert bool(jnp.all(jnp.isfinite(jax.jit(lambda Sigma: sample_knockoffs(key, X, Sigma, s))(Sigma))))
    Xnan = X.at[0, 0].set(jnp.nan)  # the check of the concrete X still runs: ValueError, before any compile
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        jax.jit(lambda Sigma: sample_knockoffs(key, Xnan, Sigma, s))(Sigma)
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        jax.jit(lambda d: sample_knockoffs_factor(key, Xnan, FactorModel(d, model.U), s))(model.d)


def test_multi_and_matrix_s_samplers_under_jit_poison_non_symmetric_input():
    # the plan of m > 1 copies or a matrix S symmetrised a non-symmetric Sigma or S under jit and drew
    # finite knockoffs from a law the caller never gave (eager input raises "must be symmetric")
    p, Sigma, X, _ = _poison_case()
    S = 0.4 * jnp.eye(p)
    f = jax.jit(lambda Sigma, S: sample_knockoffs(jax.random.key(0), X, Sigma, S, num_knockoffs=2))
    assert bool(jnp.all(jnp.isfinite(f(Sigma, S))))
    assert bool(jnp.all(jnp.isnan(f(Sigma.at[0, 1].add(0.3), S))))
    assert bool(jnp.all(jnp.isnan(f(Sigma, S.at[0, 1].add(0.2)))))


def test_vmapped_replicates_poison_each_infeasible_member():
    p, Sigma, X, _ = _poison_case()
    ss = jnp.stack([jnp.full(p, 0.9), jnp.full(p, 1.8)])
    out = jax.vmap(lambda s: sample_knockoffs(jax.random.key(0), X, Sigma, s))(ss)
    assert bool(jnp.all(jnp.isfinite(out[0]))) and bool(jnp.all(jnp.isnan(out[1])))


def test_eager_infeasible_s_names_s():
    p, Sigma, X, model = _poison_case()
    for call in (
        lambda s: sample_knockoffs(jax.random.key(0), X, Sigma, s),
        lambda s: sample_knockoffs_factor(jax.random.key(0), X, model, s),
        lambda s: sample_replicates(jax.random.key(0), X, Sigma, s, 2),
    ):
        with pytest.raises(ValueError, match="s is infeasible"):
            call(jnp.full(p, 1.5))
        with pytest.raises(ValueError, match="s must be non-negative"):
            call(jnp.full(p, -0.1))


# ------------------------------------------------- variables in mixed units


def _mixed_units(p=5, spread=5.0):
    """AR(1) 0.8 correlation with standard deviations 10^-spread .. 10^spread (variances over 20 decades)."""
    sd = 10.0 ** np.linspace(-spread, spread, p)
    return ar1_correlation(p, 0.8), sd


@pytest.mark.parametrize("m, group", [(1, False), (2, False), (1, True)])
def test_dense_sampler_is_invariant_to_the_units_of_the_variables(m, group):
    # the ridge of Omega's factor and the feasibility slacks were relative to max diag: with variances
    # 1e-10 .. 1e10 the small variables' knockoffs got covariances wrong by 1e2 .. 1e8 (and 1e4 with
    # variances 1e-6 .. 1e6 in float32), silently; now the plan works on the correlation scale
    C, sd = _mixed_units()
    p, n = C.shape[0], 20_000
    Sigma = C * np.outer(sd, sd)
    if group:  # a block-diagonal S (group knockoffs, the matrix path)
        S_c = np.zeros((p, p))
        S_c[:2, :2], S_c[2:, 2:] = 0.3 * C[:2, :2], 0.3 * C[2:, 2:]
    else:
        S_c = np.diag(np.full(p, 0.15))  # feasible for m = 1, 2: 1.5 lambda_min(C) = 0.18
    S = S_c * np.outer(sd, sd)
    s = S if group else np.diag(S)
    Z = gaussian_rows(jax.random.key(3), n, C)
    Xk = np.asarray(sample_knockoffs(jax.random.key(4), Z * sd, Sigma, s, mu=0.0, num_knockoffs=m))
    joint = np.hstack([Z, Xk.reshape(n, -1) / np.tile(sd, m)])  # back to unit variances
    G = np.kron(np.eye(m + 1), S_c) + np.kron(np.ones((m + 1, m + 1)), C - S_c)
    assert max_z(joint, G) < Z_MAX


def test_factor_sampler_recursion_is_invariant_to_the_units_of_the_variables():
    # the blocked L Delta L^T recursion (C = 2S - S D^-1 S indefinite) compared its pivots and eigenvalues
    # with a tolerance relative to the block's largest entry: with variances 1e-10 .. 1e10 the small
    # variables' noise was clipped and Cov(X~) was wrong by 0.2 on the correlation scale; now the
    # recursion runs on the correlation scale
    C, sd = _mixed_units()
    p, n = C.shape[0], 4_000
    U_c = np.sqrt(0.5) * np.ones((p, 1))  # correlation 0.5: lambda_min = 0.5
    model = FactorModel(jnp.asarray(0.5 * sd**2), jnp.asarray(U_c * sd[:, None]))
    S = np.diag(np.full(p, 0.8))  # feasible: 2 lambda_min = 1
    plan = sampling.replicate_plan(np.zeros((n, p)), model, np.diag(S) * sd**2, mu=0.0, force_recursion=True)
    Xk = np.asarray(sampling.draw_replicate(jax.random.key(5), plan)) / sd  # X = mu = 0: X~ is the noise
    Omega = 2 * S - S @ np.linalg.solve(0.5 * np.eye(p) + U_c @ U_c.T, S)  # Cov(X~ | X), correlation scale
    assert np.max(np.abs(np.cov(Xk.T) - Omega)) < 0.1  # 5 sd of a sample covariance at n = 4000


def test_infeasible_s_on_a_small_variance_variable_is_refused():
    # s_0 = 3 Sigma_00 (3 > 2 on the correlation scale) on the variable with the smallest variance passed the
    # eager checks (slack sqrt(eps) max diag Sigma) and gave finite knockoffs under jit; now ValueError / NaN
    C, sd = _mixed_units()
    Sigma = C * np.outer(sd, sd)
    s = 0.2 * sd**2  # feasible but for s_0 (2 lambda_min(C) = 0.24)
    s[0] = 3.0 * sd[0] ** 2
    U = 0.6 * np.linalg.cholesky(C)[:, :2] * sd[:, None]  # a factor model in the same units
    model = FactorModel(jnp.asarray(np.diag(Sigma) - np.sum(U**2, axis=1)), jnp.asarray(U))
    X = gaussian_rows(jax.random.key(0), 20, C) * sd
    for call in (
        lambda s: sample_knockoffs(jax.random.key(0), X, Sigma, s),
        lambda s: sample_knockoffs_factor(jax.random.key(0), X, model, s),
    ):
        with pytest.raises(ValueError, match="s is infeasible"):
            call(jnp.asarray(s))
        assert np.all(np.isnan(np.asarray(jax.jit(call)(jnp.asarray(s)))))
