"""Tests for jaxknock.naive_bayes (sparse naive Bayes)."""

import dataclasses
import itertools
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import count_compiles

from jaxknock import RESULTS, SparseNaiveBayes, class_sums_npz, iter_npz_blocks
from jaxknock.naive_bayes import (
    ClassSums,
    bernoulli,
    class_sums,
    dual,
    sparse_naive_bayes,
    sparse_naive_bayes_path,
    topk,
)

sp = pytest.importorskip("scipy.sparse")


# ---------------------------------------------------------------- references


def _bernoulli_objective(X, y, support, alpha):
    """Smoothed Bernoulli log-likelihood of the best point with the given support."""
    total = 0.0
    classes = np.unique(y)

    def ll(a, b):
        t = a / (a + b)
        return (a * np.log(t) if a else 0.0) + (b * np.log1p(-t) if b else 0.0)

    for j in range(X.shape[1]):
        ones = [X[y == c, j].sum() + alpha for c in classes]
        zeros = [(y == c).sum() - X[y == c, j].sum() + alpha for c in classes]
        if j in support:
            total += sum(ll(a, b) for a, b in zip(ones, zeros))
        else:
            total += ll(sum(ones), sum(zeros))
    return total


def _multinomial_primal(f, support):
    """Optimal multinomial log-likelihood when classes may differ only on ``support``."""
    f = np.asarray(f, dtype=float)
    g = f.sum(0)
    S = g.sum()
    mask = np.zeros(f.shape[1], bool)
    mask[list(support)] = True
    B_c = f[:, mask].sum(1)
    B = B_c.sum()
    theta = np.where(mask, (B / S) * f / np.where(B_c > 0, B_c, 1)[:, None], g / S)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sum(np.where(f > 0, f * np.log(theta), 0.0)))


def _phi_brute_force(f, k):
    m = f.shape[1]
    return max(_multinomial_primal(f, T) for T in itertools.combinations(range(m), k))


def _count_data(rng, n, m, C, informative=3, scale=2.0):
    y = np.arange(n) % C
    rate = np.full((C, m), scale)
    rate[:, :informative] *= np.exp(rng.normal(0, 1.0, (C, informative)))
    X = rng.poisson(rate[y])
    return X, y


# ---------------------------------------------------------------- selection


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m", [300, 70000])
def test_radix_select_matches_sort(dtype, m):
    rng = np.random.default_rng(0)
    z = rng.standard_normal(m).astype(dtype)
    z[:40] = z[40]  # a block of ties
    z[50], z[51] = -0.0, 0.0
    ref = np.sort(z)[::-1]

    @jax.jit
    def select(z, k):
        top = topk.top_k(z, k)
        return topk.kth_largest(z, jnp.maximum(k, 1)), top.s, topk.top_k_mask(top).sum()

    for k in [0, 1, 2, 40, 41, 42, m // 2, m]:
        lam, s, count = select(jnp.asarray(z), k)
        if k:
            assert lam == ref[k - 1]
        rtol = 1e-6 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(s, ref[:k].sum(dtype=np.float64), atol=rtol * np.abs(ref[:k]).sum())
        assert int(count) == k


# ---------------------------------------------------------------- Bernoulli


@pytest.mark.parametrize("C", [2, 3])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_bernoulli_equals_exhaustive_search(C, alpha):
    rng = np.random.default_rng(C + int(10 * alpha))
    n, m = 40, 10
    y = np.arange(n) % C
    X = (rng.random((n, m)) < rng.uniform(0.05, 0.9, (C, m))[y]).astype(np.int64)
    X[:, 0] = 0  # an all-zero and an all-one feature: never informative
    X[:, 1] = 1
    sums = class_sums(X, y, model="bernoulli")
    for k in range(m + 1):
        sol = sparse_naive_bayes(sums, None, k, model="bernoulli", alpha=alpha)
        best = max(_bernoulli_objective(X, y, set(T), alpha) for T in itertools.combinations(range(m), k))
        mine = _bernoulli_objective(X, y, set(np.flatnonzero(sol.value.support)), alpha)
        assert int(sol.value.support.sum()) == k
        np.testing.assert_allclose(float(sol.stats["objective"]), best, rtol=1e-12)
        np.testing.assert_allclose(mine, best, rtol=1e-12)
        assert float(sol.stats["gap"]) == 0.0
        assert int(sol.result) == RESULTS.successful
        # theta: class estimates on the support, pooled estimate elsewhere
        theta = np.asarray(sol.value.theta)
        off = ~np.asarray(sol.value.support)
        assert np.allclose(theta[:, off], theta[0, off])


def test_bernoulli_never_prefers_all_zero_features():
    # The public NaiveFeatureSelection code has a sign error that ranks all-zero
    # (and other uninformative) features first; the gain here is exactly zero for them.
    rng = np.random.default_rng(3)
    n = 200
    y = np.arange(n) % 2
    X = np.zeros((n, 12), np.int64)
    X[:, :4] = rng.random((n, 4)) < np.where(y[:, None] == 1, 0.7, 0.2)  # informative
    X[:, 4:8] = rng.random((n, 4)) < 0.3  # noise
    # columns 8..11 are all zero
    sol = sparse_naive_bayes(X, y, 4, model="bernoulli", alpha=1.0)
    assert set(np.flatnonzero(sol.value.support)) == {0, 1, 2, 3}
    a, b, pooled, gain = bernoulli.bernoulli_parts(class_sums(X, y).counts, jnp.asarray([100.0, 100.0]), 1.0)
    np.testing.assert_allclose(np.asarray(gain)[8:], 0.0, atol=1e-9)
    assert np.all(np.asarray(gain) >= -1e-9)


# ---------------------------------------------------------------- multinomial


@pytest.mark.parametrize("C", [2, 3])
def test_multinomial_duality_and_shapley_folkman_bounds(C):
    rng = np.random.default_rng(7 + C)
    m = 10
    for _trial in range(2):
        X, y = _count_data(rng, 60, m, C, informative=4, scale=1.5)
        sums = class_sums(X, y)
        f = np.asarray(sums.counts) + 1.0
        phi = np.array([_phi_brute_force(f, k) for k in range(m + 1)])
        path = sparse_naive_bayes_path(sums, None, np.arange(m + 1)).value
        psi, psi_lo, obj = (np.asarray(a) for a in (path.psi, path.psi_lower, path.objective))
        tol = 1e-9 * np.abs(phi)
        assert np.all(psi >= phi - tol)  # weak duality
        assert np.all(obj <= phi + tol)  # recovered point is feasible
        assert np.all(psi_lo <= psi + tol)
        # Shapley-Folkman: psi(k - C - 2) <= phi(k)   (psi(k - 4) for two classes)
        d = C + 2
        assert np.all(psi_lo[: m + 1 - d] <= phi[d:] + tol[d:])
        # k = 0 and k = m are exact
        np.testing.assert_allclose([psi[0], psi[m]], [phi[0], phi[m]], rtol=1e-12)
        np.testing.assert_allclose(obj, phi, rtol=1e-3)  # near-optimal on these problems
        # the path equals one-at-a-time solves
        for k in (1, 5):
            sol = sparse_naive_bayes(sums, None, k)
            np.testing.assert_allclose(float(sol.stats["psi"]), psi[k], rtol=1e-12)
            np.testing.assert_allclose(float(sol.stats["objective"]), obj[k], rtol=1e-12)
            np.testing.assert_allclose(
                float(sol.stats["gap"]), float(sol.stats["psi"] - sol.stats["objective"]), rtol=1e-9
            )
            assert int(sol.value.support.sum()) == k


def test_bisection_agrees_with_frank_wolfe_for_two_classes():
    rng = np.random.default_rng(11)
    X, y = _count_data(rng, 80, 10, 2, informative=6)
    sums = class_sums(X, y)
    pb = dual.multinomial_problem(sums.counts, 1.0)
    solve = jax.jit(dual.solve_dual, static_argnames=("max_steps", "method"))
    for k in (1, 3, 5, 7):
        bis = solve(pb, k, 1e-12, max_steps=200, method="bisection")
        fw = solve(pb, k, 1e-12, max_steps=200, method="frank_wolfe")
        assert bool(bis.converged) and bool(fw.converged)
        np.testing.assert_allclose(float(bis.upper), float(fw.upper), rtol=1e-10)
        assert float(bis.lower) <= float(fw.upper) * (1 - 1e-11) or np.isclose(
            float(bis.lower), float(fw.upper), rtol=1e-10
        )


def test_multinomial_recovery_formula():
    """theta from Theorem 4: shared g/S off the support, (B/S) f_c / B_c on it."""
    rng = np.random.default_rng(5)
    X, y = _count_data(rng, 50, 10, 2)
    sol = sparse_naive_bayes(X, y, 4, alpha=0.5)
    f = np.asarray(class_sums(X, y).counts) + 0.5
    T = np.asarray(sol.value.support)
    theta = np.asarray(sol.value.theta)
    g, S = f.sum(0), f.sum()
    np.testing.assert_allclose(theta[:, ~T], np.broadcast_to(g[~T] / S, (2, (~T).sum())), rtol=1e-12)
    B_c = f[:, T].sum(1)
    np.testing.assert_allclose(theta[:, T], (B_c.sum() / S) * f[:, T] / B_c[:, None], rtol=1e-12)
    np.testing.assert_allclose(theta.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(float(sol.stats["objective"]), np.sum(f * np.log(theta)), rtol=1e-12)
    coef = np.asarray(sol.value.coef)
    assert np.all(coef[:, ~T] == 0) and np.all(coef[:, T] != 0)


# ---------------------------------------------------------------- scikit-learn at k = m


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
@pytest.mark.parametrize("C", [2, 3])
def test_full_k_reproduces_scikit_learn(model, C):
    from sklearn.naive_bayes import BernoulliNB, MultinomialNB

    rng = np.random.default_rng(C)
    X, y = _count_data(rng, 90, 10, C)
    y = np.array(["neg", "pos", "mid"])[y]  # string labels
    if model == "bernoulli":
        X = (X > 2).astype(np.int64)
        ref = BernoulliNB(alpha=0.7).fit(X, y)
    else:
        ref = MultinomialNB(alpha=0.7).fit(X, y)
    sol = sparse_naive_bayes(X, y, X.shape[1], model=model, alpha=0.7)
    nb = sol.value
    assert list(nb.classes) == list(ref.classes_)
    np.testing.assert_allclose(np.log(np.asarray(nb.theta)), ref.feature_log_prob_, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(nb.predict_proba(X)), ref.predict_proba(X), atol=1e-12)
    np.testing.assert_array_equal(nb.predict(X), ref.predict(X))
    jll = ref.predict_joint_log_proba(X)
    dec = np.asarray(nb.decision_function(X))
    if C == 2:
        np.testing.assert_allclose(dec, jll[:, 1] - jll[:, 0], rtol=1e-10, atol=1e-10)
    else:  # equal up to a per-row constant
        np.testing.assert_allclose(dec - dec[:, :1], jll - jll[:, :1], rtol=1e-10, atol=1e-10)
    assert float(sol.stats["gap"]) <= 1e-9 * abs(float(sol.stats["psi"]))


# ---------------------------------------------------------------- inputs


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_and_dense_inputs_agree(fmt):
    rng = np.random.default_rng(2)
    X, y = _count_data(rng, 70, 10, 2, informative=5, scale=0.4)
    Xs = sp.csr_matrix(X).asformat(fmt)
    dense = class_sums(X, y)
    sparse = class_sums(Xs, y)
    np.testing.assert_array_equal(np.asarray(dense.counts), np.asarray(sparse.counts))
    np.testing.assert_array_equal(np.asarray(dense.n_samples), np.asarray(sparse.n_samples))
    a = sparse_naive_bayes(X, y, 6)
    b = sparse_naive_bayes(Xs, y, 6)
    np.testing.assert_array_equal(np.asarray(a.value.support), np.asarray(b.value.support))
    np.testing.assert_array_equal(np.asarray(a.value.theta), np.asarray(b.value.theta))
    assert float(a.stats["psi"]) == float(b.stats["psi"])
    np.testing.assert_allclose(np.asarray(a.value.predict_proba(Xs)), np.asarray(a.value.predict_proba(X)), rtol=1e-12)


def test_integer_and_float32_inputs():
    rng = np.random.default_rng(4)
    X, y = _count_data(rng, 60, 10, 2)
    ref = sparse_naive_bayes(X.astype(np.float64), y, 5)
    ints = sparse_naive_bayes(X.astype(np.int32), y, 5)
    assert ints.value.theta.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(ints.value.theta), np.asarray(ref.value.theta))
    # float32 data is summed in float64 (x64 is on); float32 sums fit in float32
    assert class_sums(X.astype(np.float32), y).counts.dtype == jnp.float64
    s64 = class_sums(X, y)
    s32 = ClassSums(s64.counts.astype(jnp.float32), s64.n_samples.astype(jnp.float32), s64.classes)
    f32 = sparse_naive_bayes(s32, None, 5)
    assert f32.value.theta.dtype == jnp.float32 and f32.stats["psi"].dtype == jnp.float32
    assert int(f32.result) == RESULTS.successful
    np.testing.assert_allclose(float(f32.stats["psi"]), float(ref.stats["psi"]), rtol=1e-5)


class _FakeDaskArray:
    """The slice of the dask.array interface that class_sums uses (blocks, chunks, compute)."""

    def __init__(self, x, rows):
        self._x, self.shape, self.ndim = x, x.shape, x.ndim
        self.chunks = (tuple(rows),) + tuple((s,) for s in x.shape[1:])
        self.numblocks = (len(rows),) + (1,) * (x.ndim - 1)
        starts = np.cumsum((0,) + tuple(rows))
        self.blocks = [_Computed(x[a:b]) for a, b in zip(starts[:-1], starts[1:])]

    def compute(self):
        return self._x


class _Computed:
    def __init__(self, x):
        self._x = x

    def compute(self):
        return self._x


def test_chunked_sums_equal_one_shot():
    rng = np.random.default_rng(6)
    X, y = _count_data(rng, 90, 10, 3)
    y = y + 10
    once = class_sums(X, y)
    # streaming, where the first chunk lacks a class
    order = np.argsort(y == 12, kind="stable")
    Xo, yo = X[order], y[order]
    sums = ClassSums.empty(10)
    for start in range(0, 90, 25):
        sl = slice(start, start + 25)
        chunk = sp.csr_matrix(Xo[sl]) if start % 50 else Xo[sl]
        sums = sums.update(chunk, yo[sl])
    assert sums.classes == once.classes == (10, 11, 12)
    np.testing.assert_array_equal(np.asarray(sums.counts), np.asarray(once.counts))
    np.testing.assert_array_equal(np.asarray(sums.n_samples), np.asarray(once.n_samples))
    # merge of two halves, an iterator of chunks, a Dask-like array
    halves = class_sums(X[:45], y[:45]).merge(class_sums(X[45:], y[45:]))
    it = class_sums((X[i : i + 20], y[i : i + 20]) for i in range(0, 90, 20))
    dask = class_sums(_FakeDaskArray(X, [30, 30, 30]), y)
    dask_y = class_sums(_FakeDaskArray(X, [40, 50]), _FakeDaskArray(y, [40, 50]))
    for other in (halves, it, dask, dask_y):
        assert other.classes == once.classes
        np.testing.assert_array_equal(np.asarray(other.counts), np.asarray(once.counts))
        np.testing.assert_array_equal(np.asarray(other.n_samples), np.asarray(once.n_samples))
    a = sparse_naive_bayes(sums, None, 4)
    b = sparse_naive_bayes(X, y, 4)
    np.testing.assert_array_equal(np.asarray(a.value.theta), np.asarray(b.value.theta))


# ---------------------------------------------------------------- transformations


def test_jit_vmap_and_no_retrace():
    rng = np.random.default_rng(8)
    X, y = _count_data(rng, 60, 10, 2)
    Xj, yj = jnp.asarray(X, jnp.float64), jnp.asarray(y)
    eager = sparse_naive_bayes(Xj, yj, 5)

    @jax.jit
    def fit(X, y):
        sol = sparse_naive_bayes(X, y, 5, classes=(0, 1))
        return sol.stats["psi"], sol.value.theta, sol.value.predict_proba(X), sol.result

    psi, theta, proba, code = fit(Xj, yj)
    np.testing.assert_allclose(psi, eager.stats["psi"], rtol=1e-12)
    np.testing.assert_allclose(theta, eager.value.theta, rtol=1e-12)
    np.testing.assert_allclose(proba, eager.value.predict_proba(Xj), rtol=1e-12)
    assert int(code) == RESULTS.successful
    # vmap over k equals a Python loop
    sums = class_sums(X, y)
    ks = jnp.arange(0, 11, 2)
    batched = jax.vmap(lambda k: sparse_naive_bayes(sums, None, k).stats["psi"])(ks)
    looped = [float(sparse_naive_bayes(sums, None, int(k)).stats["psi"]) for k in ks]
    np.testing.assert_allclose(batched, looped, rtol=1e-12)
    # a new k (same shapes) does not recompile the solver
    with count_compiles("fit_core") as compiles:
        sparse_naive_bayes(sums, None, 7)
        sparse_naive_bayes(sums, None, 9)
    assert not compiles
    # predicting again on the same shapes compiles nothing (the scores' lax.cond, run eagerly
    # on closures, compiled a new program at every call)
    eager.value.predict_proba(X), eager.value.predict(X)
    with count_compiles() as compiles:
        eager.value.predict_proba(X[::-1].copy())
        eager.value.predict(X)
    assert not compiles, compiles


def test_path_is_monotone_and_batches_agree():
    rng = np.random.default_rng(9)
    X, y = _count_data(rng, 120, 10, 2, informative=8)
    ks = np.arange(11)
    one = sparse_naive_bayes_path(X, y, ks, batch_size=1)  # lax.map over k
    many = sparse_naive_bayes_path(X, y, ks, batch_size=len(ks))  # one vmap over k
    np.testing.assert_allclose(one.value.psi, many.value.psi, rtol=1e-12)
    np.testing.assert_allclose(one.value.objective, many.value.objective, rtol=1e-12)
    psi = np.asarray(one.value.psi)
    assert np.all(np.diff(psi) >= -1e-9 * np.abs(psi[1:]))  # psi(k) grows with k
    assert np.all(np.asarray(one.value.gap) >= -1e-9 * np.abs(psi))
    assert np.all(np.asarray(one.result) == RESULTS.successful)
    bern = sparse_naive_bayes_path((X > 1).astype(int), y, ks, model="bernoulli").value
    for i, k in enumerate(ks[::3]):
        ref = sparse_naive_bayes((X > 1).astype(int), y, int(k), model="bernoulli")
        np.testing.assert_allclose(bern.objective[3 * i], ref.stats["objective"], rtol=1e-12)


def test_result_codes_and_throw():
    rng = np.random.default_rng(10)
    X, y = _count_data(rng, 100, 10, 2, informative=10)
    sol = sparse_naive_bayes(X, y, 5, max_steps=1, tol=1e-15)
    assert int(sol.result) == RESULTS.max_steps_reached
    assert int(sol.stats["num_steps"]) == 1
    assert float(sol.stats["gap"]) >= 0  # the certificate stays valid
    with pytest.raises(RuntimeError, match="max_steps"):
        sparse_naive_bayes(X, y, 5, max_steps=1, tol=1e-15, throw=True)
    X3, y3 = _count_data(rng, 90, 10, 3, informative=10)
    sol3 = sparse_naive_bayes(X3, y3, 2, max_steps=1, tol=1e-15)
    assert int(sol3.result) == RESULTS.max_steps_reached
    ok = sparse_naive_bayes(X3, y3, 2, throw=True)
    assert int(ok.result) == RESULTS.successful


# ---------------------------------------------------------------- errors


def test_input_errors():
    X = np.array([[1, 0, 2], [0, 3, 1], [2, 2, 0], [1, 1, 1]])
    y = np.array([0, 1, 0, 1])
    Xneg = X.copy()
    Xneg[1, 2] = -1
    with pytest.raises(ValueError, match=r"1 negative entries: X\[1, 2\] = -1"):
        sparse_naive_bayes(Xneg, y, 1)
    with pytest.raises(ValueError, match=r"non-binary entries: X\[0, 2\] = 2"):
        sparse_naive_bayes(X, y, 1, model="bernoulli")
    with pytest.raises(ValueError, match=r"non-binary entries: X\[0, 2\] = 2"):
        sparse_naive_bayes(sp.csr_matrix(X), y, 1, model="bernoulli")
    with pytest.raises(ValueError, match=r"k must lie in \[0, 3\]"):
        sparse_naive_bayes(X, y, 4)
    with pytest.raises(ValueError, match=r"k must lie in \[0, 3\]"):
        sparse_naive_bayes(X, y, -1)
    with pytest.raises(ValueError, match=r"ks must lie in \[0, 3\]"):
        sparse_naive_bayes_path(X, y, [0, 5])
    with pytest.raises(TypeError, match="integer"):
        sparse_naive_bayes(X, y, 1.5)
    with pytest.raises(ValueError, match="at least two classes.*only label 0"):
        sparse_naive_bayes(X, np.zeros(4, int), 1)
    with pytest.raises(ValueError, match="X has 4 rows but y has 3 labels"):
        sparse_naive_bayes(X, y[:3], 1)
    with pytest.raises(ValueError, match=r"label\(s\) \(7,\) that are not in classes"):
        sparse_naive_bayes(X, np.array([0, 1, 7, 1]), 1, classes=[0, 1])
    with pytest.raises(ValueError, match="no samples"):
        sparse_naive_bayes(X, y, 1, classes=[0, 1, 2])
    for bad in (2, [[0, 1]]):  # the same error under jit (was an IndexError from the label encoding)
        with pytest.raises(ValueError, match="classes must be a 1-D sequence"):
            jax.jit(lambda X, y, c=bad: sparse_naive_bayes(X, y, 1, classes=c).result)(X, y)
    with pytest.raises(ValueError, match="all-zero counts.*alpha > 0"):
        sparse_naive_bayes(np.where(y[:, None] == 1, 0, X), y, 1, alpha=0.0)
    with pytest.raises(ValueError, match="model must be one of"):
        sparse_naive_bayes(X, y, 1, model="gaussian")
    with pytest.raises(ValueError, match="alpha"):
        sparse_naive_bayes(X, y, 1, alpha=-1.0)
    with pytest.raises(ValueError, match="non-finite"):
        sparse_naive_bayes(np.where(X == 3, np.nan, X), y, 1)
    with pytest.raises(ValueError, match="2-D"):
        sparse_naive_bayes(X[0], y, 1)
    with pytest.raises(TypeError, match="pass classes"):
        jax.jit(lambda X, y: sparse_naive_bayes(X, y, 1).stats["psi"])(jnp.asarray(X), jnp.asarray(y))
    with pytest.raises(ValueError, match="cannot merge"):
        class_sums(X, y).merge(class_sums(X[:, :2], y))


# ---------------------------------------------------------------- estimator


def test_settings_errors_name_the_argument():
    """tol=-1 / NaN ran and reported success; alpha="1" / None was numpy's isfinite error; a vector k
    a broadcasting error; max_steps=True ran as 1 while max_steps=jnp.int32(5) was refused; a text
    max_block_bytes was a comparison TypeError."""
    X = np.array([[1, 0, 2], [0, 3, 1], [2, 2, 0], [1, 1, 1]])
    y = np.array([0, 1, 0, 1])
    for bad in (-1.0, np.nan):
        with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
            sparse_naive_bayes(X, y, 1, tol=bad)
    for bad in ("1", None):
        with pytest.raises(TypeError, match="alpha must be"):
            sparse_naive_bayes(X, y, 1, alpha=bad)
    with pytest.raises(ValueError, match="k must be a single integer.*sparse_naive_bayes_path"):
        sparse_naive_bayes(X, y, np.array([1, 2]))
    with pytest.raises(ValueError, match="max_steps must be a positive integer, got True"):
        sparse_naive_bayes(X, y, 1, max_steps=True)
    sol = sparse_naive_bayes(X, y, 1, max_steps=jnp.int32(5))
    assert int(sol.stats["max_steps"]) == 5
    for bad in ("1", 0.5):  # "1" was a comparison TypeError, 64.7 ran as 64
        with pytest.raises(ValueError, match="max_block_bytes must be an integer"):
            class_sums_npz("unread.npz", y, max_block_bytes=bad)


def test_selector_estimator_and_sklearn_interop():
    from sklearn.base import clone
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(12)
    X, y = _count_data(rng, 200, 10, 2, informative=5)
    sel = SparseNaiveBayes(k=5).fit(sp.csr_matrix(X), y)
    assert sel.get_support().sum() == 5 and len(sel.get_support(indices=True)) == 5
    np.testing.assert_array_equal(sel.transform(X), X[:, sel.get_support()])
    np.testing.assert_array_equal(sel.transform(sp.csr_matrix(X)).toarray(), X[:, sel.get_support()])
    assert sel.predict(X).shape == (200,) and sel.predict_proba(X).shape == (200, 2)
    assert sel.decision_function(X).shape == (200,)
    assert sel.score(X, y) > 0.6
    assert sel.gap_ >= -1e-6 and sel.result_ == RESULTS.successful
    assert clone(sel).get_params() == {"k": 5, "model": "multinomial", "alpha": 1.0}
    pipe = make_pipeline(SparseNaiveBayes(k=5), LogisticRegression()).fit(X, y)
    assert pipe.score(X, y) > 0.6
    with pytest.raises(RuntimeError, match="not fitted"):
        SparseNaiveBayes(3).transform(X)


# ---------------------------------------------------------------- real data


def test_sentence_polarity_smoke(data_dir):
    path = os.path.join(data_dir, "sentence_polarity.zip")
    if not os.path.exists(path):
        pytest.skip("sentence_polarity.zip not available")
    from sklearn.feature_extraction.text import CountVectorizer

    docs, labels = [], []
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            for label, suffix in ((1, "rt-polarity.pos"), (0, "rt-polarity.neg")):
                if name.endswith(suffix):
                    lines = zf.read(name).decode("latin-1").splitlines()
                    docs += lines
                    labels += [label] * len(lines)
    y = np.array(labels)
    idx = np.random.default_rng(0).permutation(len(y))
    train, test = idx[:8000], idx[8000:]
    vec = CountVectorizer()
    Xtr = vec.fit_transform([docs[i] for i in train])
    Xte = vec.transform([docs[i] for i in test])
    sol = sparse_naive_bayes(Xtr, y[train], 1000)
    assert int(sol.result) == RESULTS.successful
    assert 0 <= float(sol.stats["gap"]) <= 1e-6 * abs(float(sol.stats["psi"]))
    acc = np.mean(sol.value.predict(Xte) == y[test])
    assert acc > 0.7


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scikit-learn's log of ~0 smoothing
@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_alpha_zero_predicts_the_limit_of_small_alpha(model):
    # alpha=0 fits probabilities of 0 (and, Bernoulli, 1): the linear rule computed 0 * log 0 = NaN for
    # every row, and predict() turned NaN scores into classes[-1] for every row
    from sklearn.naive_bayes import BernoulliNB, MultinomialNB

    rng = np.random.default_rng(0)
    y = np.arange(20) % 2
    X = rng.poisson(1.0, (20, 6)).astype(float)
    X[:, 2] = 0  # never seen: probability 0 in both classes
    X[y == 0, 3] = 0  # probability 0 in class 0 only
    if model == "bernoulli":
        X = (X > 0).astype(float)
        X[y == 1, 4] = 1  # probability 1 in class 1
        ref = BernoulliNB(alpha=1e-13, force_alpha=True, binarize=None).fit(X, y)
    else:
        ref = MultinomialNB(alpha=1e-13, force_alpha=True).fit(X, y)
    nb = sparse_naive_bayes(X, y, 6, model=model, alpha=0.0).value
    for Xp in (X, sp.csr_matrix(X)):
        np.testing.assert_allclose(np.asarray(nb.predict_proba(Xp)), ref.predict_proba(X), atol=1e-10)
        np.testing.assert_array_equal(nb.predict(Xp), ref.predict(X))
    np.testing.assert_allclose(np.asarray(jax.jit(nb.predict_proba)(X)), ref.predict_proba(X), atol=1e-10)
    bad = dataclasses.replace(nb, coef=nb.coef.at[0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match="no class is possible"):
        bad.predict(X)


# ------------------------------- issue 19: predict on bad counts, corrupt .npz files


def _small_fit():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    X = rng.poisson(np.where(y[:, None] == 1, 3.0, 1.0), size=(40, 6)).astype(float)
    return sparse_naive_bayes(X, y, 3).value, X


@pytest.mark.parametrize("bad", [np.nan, -1.0])
def test_predict_rejects_nan_or_negative_counts(bad):
    model, X = _small_fit()
    Xb = X.copy()
    Xb[3, 2] = bad
    with pytest.raises(ValueError, match=r"X\[3, 2\]"):
        model.predict(Xb)
    with pytest.raises(ValueError, match=r"X\[3, 2\]"):
        model.predict_proba(Xb)
    idx = jax.jit(model.predict_index)(jnp.asarray(Xb))
    assert int(idx[3]) == -1 and bool(jnp.all(idx[jnp.arange(40) != 3] >= 0))
    assert bool(jnp.all(jnp.isnan(jax.jit(model.predict_proba)(jnp.asarray(Xb))[3])))


def test_predict_rejects_sparse_x_with_the_wrong_number_of_features():
    # a scipy.sparse X is multiplied on its support columns only: 5 or 7 columns for a model of 6
    # features gave plausible labels (dense X raised)
    model, X = _small_fit()
    for Xw in (X[:, :5], np.hstack([X, X[:, :1]])):
        for fmt in ("csr", "csc"):
            with pytest.raises(ValueError, match=r"X must have shape \(n, 6\)"):
                model.predict(sp.csr_matrix(Xw).asformat(fmt))
    with pytest.raises(ValueError, match="X is empty"):
        model.predict(sp.csr_matrix(X[:0]))
    np.testing.assert_array_equal(model.predict(sp.csr_matrix(X)), model.predict(X))


def test_sparse_duplicate_entries_are_checked_as_their_sum():
    # a non-canonical CSR stores X[0, 1] = 2 as two entries of 1: each passed the Bernoulli check (dense
    # X[0, 1] = 2 raised), and the fit counted 2 for a binary feature and reported success
    X = sp.csr_matrix((np.ones(5), np.array([1, 1, 0, 2, 1]), np.array([0, 2, 3, 4, 5])), shape=(4, 3))
    assert not X.has_canonical_format and X.toarray()[0, 1] == 2
    y = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"binary X.*X\[0, 1\] = 2"):
        sparse_naive_bayes(X, y, 1, model="bernoulli")
    with pytest.raises(ValueError, match=r"binary X.*X\[0, 1\] = 2"):
        class_sums(X, y, model="bernoulli")
    # entries -1 and 2 at one place are the count 1: accepted, as the dense matrix
    Y = sp.csr_matrix((np.array([-1.0, 2.0, 1.0]), np.array([0, 0, 1]), np.array([0, 2, 3])), shape=(2, 2))
    np.testing.assert_array_equal(np.asarray(class_sums(Y, [0, 1]).counts), [[1.0, 0.0], [0.0, 1.0]])


def test_host_containers_give_the_class_sums_of_their_plain_copy():
    # a pandas DataFrame was "'DataFrame' object has no attribute 'dtype'", a big-endian or long double array
    # (dense, or the .data of a scipy.sparse matrix) "not a valid dtype for JAX type promotion", a masked
    # array JAX's "masked arrays are not supported"; a masked label was read as the label under the mask
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, size=(12, 4)).astype(float)
    y = np.repeat([0, 1], 6)
    ref = np.asarray(class_sums(X, y).counts)
    big = sp.csr_matrix(X)
    big.data = big.data.astype(">f8")
    frame = pd.DataFrame(X, columns=list("abcd")).astype("Int64")
    for Xv in (frame, X.astype(">f8"), X.astype(">i4"), X.astype(np.longdouble), np.ma.array(X), big):
        np.testing.assert_array_equal(np.asarray(class_sums(Xv, y).counts), ref)
    model = sparse_naive_bayes(X, y, 2).value
    np.testing.assert_array_equal(model.predict(X.astype(">f8")), model.predict(X))
    labels = np.ma.array(y, mask=np.arange(12) == 5)
    with pytest.raises(ValueError, match="y is a masked array with 1 masked entry"):
        class_sums(X, labels)
    with pytest.raises(ValueError, match="X is a masked array"):
        sparse_naive_bayes(np.ma.array(X, mask=X > 4), y, 2)


def test_corrupt_npz_names_the_file(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(os.urandom(200))
    good = tmp_path / "good.npz"
    sp.save_npz(good, sp.random(10, 4, density=0.5, format="csr", random_state=0))
    trunc = tmp_path / "trunc.npz"
    trunc.write_bytes(good.read_bytes()[:100])
    for path in (bad, trunc):
        with pytest.raises(ValueError, match=f"{path} is not a valid .npz file"):
            list(iter_npz_blocks(path))
        with pytest.raises(ValueError, match="is not a valid .npz file"):
            class_sums_npz([path], np.zeros(10))


def test_sparse_index_arrays_outside_the_shape_are_refused(tmp_path):
    """scipy builds a CSR matrix from ``(data, indices, indptr)`` (and ``iter_npz_blocks`` from a file) without
    checking the indices: column 3 of a 3-column row of class 0 was summed into class 1's feature 0; a
    decreasing ``indptr`` crashed in C++ (``vector::_M_default_append``)."""
    y = np.array([0, 1])
    bad = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([0, 3, 1]), np.array([0, 2, 3])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"1 column indices outside \[0, 3\), e.g. \[3\]"):
        class_sums(bad, y)
    path = tmp_path / "bad.npz"
    parts = dict(data=[1.0, 2.0, 3.0], indices=np.array([0, 3, 1], np.int32), format=np.array("csr"), shape=[2, 3])
    np.savez(path, indptr=np.array([0, 2, 3], np.int32), **parts)
    with pytest.raises(ValueError, match="column indices outside"):
        class_sums_npz([path], y)
    np.savez(path, indptr=np.array([0, 3, 2], np.int32), **parts)
    with pytest.raises(ValueError, match="invalid indptr"):
        class_sums_npz([path], y)
    model = sparse_naive_bayes(np.eye(3)[[0, 1, 2, 0]], np.array([0, 1, 1, 0]), 1).value
    with pytest.raises(ValueError, match="column indices outside"):
        model.predict(bad)


def test_continuous_target_is_rejected_naming_y():
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, size=(30, 4)).astype(float)
    with pytest.raises(ValueError, match="y looks like a continuous target"):
        sparse_naive_bayes(X, rng.normal(size=30), 2)
    with pytest.raises(ValueError, match="y looks like a continuous target"):
        class_sums(X, np.arange(30))  # 30 classes in 30 rows
    assert class_sums(X, np.repeat([1.0, 2.0, 3.0], 10)).counts.shape == (3, 4)  # whole-number floats are labels


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_traced_label_outside_classes_is_not_silently_dropped(model):
    """Under jit y cannot be inspected: a label outside classes= gave a plausible model fitted without
    that row; now the sums are NaN-poisoned and the result code says so."""
    rng = np.random.default_rng(0)
    X = rng.poisson(1.0, (60, 12)).astype(float)
    X = (X > 1).astype(float) if model == "bernoulli" else X
    y = rng.integers(0, 2, 60)
    fit = jax.jit(lambda X, y: sparse_naive_bayes(X, y, 3, classes=(0, 1), model=model).result)
    assert int(fit(X, y)) == RESULTS.successful
    y[5] = 7
    assert int(fit(X, y)) == RESULTS.nonfinite


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_traced_invalid_counts_are_poisoned_not_successful(model):
    """Under jit, negative counts (multinomial) gave negative theta and Bernoulli X in {0, 2} gave
    P(x=1 | class) = 1.69, both reported successful; eager calls raise."""
    rng = np.random.default_rng(10)
    X = rng.poisson(1.0, (60, 12)).astype(float)
    y = np.arange(60) % 2
    X[y == 1, :2] += 2
    good = X if model == "multinomial" else (X > 0).astype(float)
    bad = X - 1.0 if model == "multinomial" else 2.0 * (X > 0)
    with pytest.raises(ValueError, match="X"):
        sparse_naive_bayes(bad, y, 3, model=model)
    fit = jax.jit(lambda A: sparse_naive_bayes(A, y, 3, classes=[0, 1], model=model))
    sol = fit(good)
    assert int(sol.result) == RESULTS.successful and np.all(np.isfinite(np.asarray(sol.value.theta)))
    sol = fit(bad)
    assert int(sol.result) == RESULTS.nonfinite
    for a in (sol.value.theta, sol.value.coef, sol.value.intercept, sol.stats["psi"], sol.stats["objective"]):
        assert np.all(np.isnan(np.asarray(a)))
    assert np.all(np.asarray(sol.value.predict_index(good)) == -1)


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_traced_k_outside_range_is_infeasible(model):
    """A traced k outside [0, m] was clamped silently (k = 13 of 12 features fitted as k = 12, successful)."""
    rng = np.random.default_rng(10)
    X = rng.poisson(1.0, (60, 12))
    X = (X > 0).astype(int) if model == "bernoulli" else X
    sums = class_sums(X, np.arange(60) % 2)
    fit = jax.jit(lambda k: sparse_naive_bayes(sums, None, k, model=model))
    for k, ok in [(-1, False), (0, True), (12, True), (13, False)]:
        sol = fit(jnp.int32(k))
        assert int(sol.result) == (RESULTS.successful if ok else RESULTS.infeasible)
        assert np.all(np.isfinite(np.asarray(sol.value.theta))) == ok
        assert np.isfinite(float(sol.stats["psi"])) == ok
    path = jax.jit(lambda ks: sparse_naive_bayes_path(sums, None, ks, model=model))(jnp.array([-1, 3, 13]))
    assert np.asarray(path.result).tolist() == [RESULTS.infeasible, RESULTS.successful, RESULTS.infeasible]
    assert np.isnan(np.asarray(path.value.psi)[[0, 2]]).all() and np.isfinite(float(path.value.psi[1]))
    # an empty class under traced labels (eager: "have no samples")
    emp = jax.jit(lambda X, y: sparse_naive_bayes(X, y, 3, classes=(0, 1), model=model).result)
    assert int(emp(X, np.zeros(60, int))) == RESULTS.infeasible


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_traced_negative_alpha_is_infeasible(model):
    """A traced alpha < 0 (eager: ValueError) fitted counts + alpha and reported success."""
    rng = np.random.default_rng(11)
    X = rng.poisson(1.0, (40, 6))
    X = (X > 0).astype(int) if model == "bernoulli" else X
    sums = class_sums(X, np.arange(40) % 2)
    fit = jax.jit(lambda a: sparse_naive_bayes(sums, None, 2, model=model, alpha=a))
    for alpha, code in [(1.0, RESULTS.successful), (-0.5, RESULTS.infeasible), (np.inf, RESULTS.nonfinite)]:
        sol = fit(alpha)
        assert int(sol.result) == code
        assert np.all(np.isfinite(np.asarray(sol.value.theta))) == (code == RESULTS.successful)
    path = jax.jit(lambda a: sparse_naive_bayes_path(sums, None, jnp.array([1, 2]), model=model, alpha=a))(-0.5)
    assert np.asarray(path.result).tolist() == [RESULTS.infeasible] * 2 and np.isnan(np.asarray(path.value.psi)).all()


def test_traced_tol_that_is_not_finite_and_nonnegative_is_infeasible():
    """A traced ``tol`` the eager check refuses: ``inf`` certified the first dual point (``successful``, dual
    gap 3e-3), NaN and -1 ran on and reported ``successful`` too."""
    rng = np.random.default_rng(0)
    X, y = rng.poisson(1.0, (30, 6)), np.arange(30) % 3
    sums = class_sums(X, y)
    fit = jax.jit(lambda t: sparse_naive_bayes(sums, None, 2, tol=t))
    assert int(fit(1e-10).result) == RESULTS.successful
    for tol in (np.inf, np.nan, -1.0):
        sol = fit(tol)
        assert int(sol.result) == RESULTS.infeasible and np.isnan(np.asarray(sol.value.theta)).all()
    path = jax.jit(lambda t: sparse_naive_bayes_path(sums, None, jnp.array([1, 2]), tol=t))(np.inf)
    assert np.asarray(path.result).tolist() == [RESULTS.infeasible] * 2 and np.isnan(np.asarray(path.value.psi)).all()


def test_non_numeric_inputs_are_named():
    """``predict`` took complex counts (imaginary part dropped) and failed inside JAX on text; labels of
    mixed types failed in NumPy's sort ("'<' not supported"); under jit, ``predict`` with text classes
    failed with JAX's "not a valid JAX array type"."""
    rng = np.random.default_rng(0)
    X = rng.poisson(1.0, (30, 6))
    model = sparse_naive_bayes(X, np.array(["a", "b", "c"])[np.arange(30) % 3], 2).value
    for bad in (X.astype(complex), X.astype(str)):
        with pytest.raises(TypeError, match="X must hold real counts"):
            model.predict(bad)
    with pytest.raises(ValueError, match="y holds labels of types that cannot be ordered"):
        sparse_naive_bayes(X, np.array([1, "a"] * 15, dtype=object), 2)
    with pytest.raises(TypeError, match="use predict_index"):
        jax.jit(model.predict)(X)
    np.testing.assert_array_equal(np.asarray(jax.jit(model.predict_index)(X)), np.asarray(model.predict_index(X)))


def test_int64_counts_beyond_int32_without_x64():
    """Without x64, ``jnp.asarray`` narrowed an int64 count of 2**32 + 5 to 5 and 2**31 to -2**31: the dense
    class sums were other data (the scipy.sparse route, summed on the host, disagreed) and ``predict``
    refused a "negative" count."""
    X = np.array([[2**32 + 5, 1], [3, 2**31], [1, 1], [2, 2]], np.int64)
    y = np.array([0, 1, 0, 1])
    with jax.enable_x64(False):
        dense = np.asarray(class_sums(X, y).counts)
        sparse = np.asarray(class_sums(sp.csr_matrix(X), y).counts)
        np.testing.assert_allclose(dense, [[2**32 + 6, 2], [5, 2**31 + 2]], rtol=1e-6)
        np.testing.assert_array_equal(dense, sparse)
        model = sparse_naive_bayes(np.arange(8).reshape(4, 2), y, 2).value
        np.testing.assert_array_equal(model.predict(X), model.predict(X.astype(np.float32)))


def test_float64_model_scores_after_x64_is_turned_off():
    """A model fitted with x64 on holds float64 arrays; with x64 turned off afterwards every score
    (``predict``, ``predict_proba``, ``decision_function``) failed in ``lax.eq`` with "requires arguments to
    have the same dtypes" and named nothing. It now scores in float32, as a pickled model loads."""
    rng = np.random.default_rng(3)
    X, y = rng.poisson(1.0, (80, 12)), np.arange(80) % 2
    model = sparse_naive_bayes(X, y, 4).value
    assert model.coef.dtype == np.float64
    ref_label, ref_proba = model.predict(X), np.asarray(model.predict_proba(X))
    with jax.enable_x64(False):
        label, proba = model.predict(X), np.asarray(model.predict_proba(X))
        margin = np.asarray(model.decision_function(sp.csr_matrix(X)))
    assert proba.dtype == np.float32 and margin.dtype == np.float32
    np.testing.assert_allclose(proba, ref_proba, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(margin, np.log(ref_proba[:, 1] / ref_proba[:, 0]), rtol=1e-4, atol=1e-5)
    sure = np.abs(ref_proba[:, 1] - 0.5) > 1e-4
    np.testing.assert_array_equal(label[sure], ref_label[sure])


def test_traced_classes_are_named():
    """``classes`` traced (passed through jit, or built with jnp inside the jitted function) was JAX's
    TracerArrayConversionError from ``np.asarray``; a concrete JAX array outside jit works."""
    rng = np.random.default_rng(0)
    X, y = rng.poisson(2.0, size=(12, 4)).astype(float), np.arange(12) % 2
    with pytest.raises(TypeError, match="classes must be concrete"):
        jax.jit(lambda X, y, c: sparse_naive_bayes(X, y, 1, classes=c).result)(X, y, jnp.array([0, 1]))
    cls = jnp.array([0, 1])
    assert int(jax.jit(lambda X, y: sparse_naive_bayes(X, y, 1, classes=cls).result)(X, y)) == RESULTS.successful


def test_update_keeps_the_given_class_order_and_appends_new_labels():
    # ClassSums.update documented "new labels are appended", but merge took the sorted union: the order given
    # to empty(classes=...) was lost on the first chunk (("b", "a") came back as ("a", "b"))
    X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0], [0, 1, 1]])
    sums = ClassSums.empty(3, classes=("b", "a")).update(X, ["a", "b", "a", "b"])
    assert sums.classes == ("b", "a")
    np.testing.assert_array_equal(np.asarray(sums.counts), [[0.0, 4.0, 1.0], [5.0, 0.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(sums.n_samples), [2.0, 2.0])
    sums = sums.update(X[:2], ["c", "a"])  # a new label is appended, the known ones keep their rows
    assert sums.classes == ("b", "a", "c")
    np.testing.assert_array_equal(np.asarray(sums.counts), [[0.0, 4.0, 1.0], [5.0, 3.0, 2.0], [1.0, 0.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(sums.n_samples), [2.0, 3.0, 1.0])


@pytest.mark.parametrize("model", ["multinomial", "bernoulli"])
def test_renamed_and_reordered_classes_give_the_same_classifier(model):
    # the labels are names: renaming them (strings), or fixing another class order (classes=, and sums
    # merged from pieces with their classes in different orders) permutes the rows of theta and nothing else
    rng = np.random.default_rng(11)
    X, y = _count_data(rng, 60, 10, 3)  # the classes and features of test_chunked_sums_equal_one_shot's fit
    X = X if model == "multinomial" else (X > 1).astype(int)
    base = sparse_naive_bayes(X, y, 3, model=model)
    names = np.array(["zeta", "alpha", "mu"])  # sorted: alpha (1), mu (2), zeta (0)
    order = [2, 0, 1]
    merged = class_sums(X[:30], y[:30], classes=order).merge(class_sums(X[30:], y[30:], classes=[1, 2, 0]))
    for sol, labels, rows in (
        (sparse_naive_bayes(X, names[y], 3, model=model), names, [1, 2, 0]),
        (sparse_naive_bayes(X, y, 3, model=model, classes=order), np.arange(3), order),
        (sparse_naive_bayes(merged, None, 3, model=model), np.arange(3), list(merged.classes)),
    ):
        np.testing.assert_array_equal(np.asarray(sol.value.support), np.asarray(base.value.support))
        np.testing.assert_allclose(np.asarray(sol.value.theta), np.asarray(base.value.theta)[rows], rtol=1e-12)
        np.testing.assert_allclose(float(sol.stats["objective"]), float(base.stats["objective"]), rtol=1e-12)
        np.testing.assert_array_equal(sol.value.predict(X), labels[np.asarray(base.value.predict(X))])
