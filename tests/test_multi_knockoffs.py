"""Multiple simultaneous knockoffs (Gimenez & Zou 2019): sampler, statistics, filter.

Moment checks: the sample covariance of ``[X, X~1..X~m]`` against the model
``G = 1 1^T (x) (Sigma - S) + I (x) S`` with the per-entry standard deviation
``sqrt((G_ii G_jj + G_ij^2) / n)`` and a 5.5-sigma bound (as tests/test_sampling.py);
the broken variant (m independent single-knockoff draws: cross-covariance between
copies ``Sigma - 2S + S Sigma^-1 S`` instead of ``Sigma - S``) must exceed it.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ar1_correlation, random_factor_model

import jaxknock
from jaxknock import filter as kfilter
from jaxknock import multi
from jaxknock.covariance import FactorModel
from jaxknock.sampling import sample_knockoffs, sample_knockoffs_factor, sample_replicates
from jaxknock.statistics import lcd, lsm, marginal_correlation

Z_MAX = 5.5
N, P, M = 6000, 8, 3


def joint_model(Sigma, S, m):
    S = np.diag(S) if np.ndim(S) == 1 else np.asarray(S)
    return np.kron(np.ones((m + 1, m + 1)), Sigma - S) + np.kron(np.eye(m + 1), S)


def max_z(joint, G):
    n = joint.shape[0]
    emp = joint.T @ joint / n  # mean zero by construction (mu = 0)
    dg = np.diag(G)
    return float(np.max(np.abs(emp - G) / np.sqrt((np.outer(dg, dg) + G**2) / n)))


@pytest.fixture(scope="module")
def problem():
    Sigma = ar1_correlation(P, 0.5)
    s = np.full(P, 0.999 * (M + 1) / M * np.linalg.eigvalsh(Sigma)[0])  # at the boundary of feasibility
    X = np.asarray(jax.random.normal(jax.random.key(1), (N, P))) @ np.linalg.cholesky(Sigma).T
    return Sigma, s, X


def test_dense_moments_match_and_broken_fails(problem):
    Sigma, s, X = problem
    Xk = np.asarray(sample_knockoffs(jax.random.key(0), X, Sigma, s, mu=0.0, num_knockoffs=M))
    assert Xk.shape == (N, M, P)
    G = joint_model(Sigma, s, M)
    assert max_z(np.hstack([X, Xk.reshape(N, -1)]), G) < Z_MAX
    # broken: m independent single knockoffs (feasible for m = 1 since s <= 2 lambda_min)
    keys = jax.random.split(jax.random.key(0), M)
    bad = np.stack([np.asarray(sample_knockoffs(k, X, Sigma, s, mu=0.0)) for k in keys], axis=1)
    assert max_z(np.hstack([X, bad.reshape(N, -1)]), G) > Z_MAX


def test_factor_moments_match():
    d, U = random_factor_model(3, P, 2)
    Sigma = np.diag(d) + U @ U.T
    m = 2
    # a non-constant feasible s: the largest scaling of diag(Sigma) with 1.5 Sigma - S >= 0
    Lc = np.linalg.cholesky(Sigma)
    W = np.linalg.solve(Lc, np.diag(np.sqrt(np.diag(Sigma))))
    s = 0.999 * 1.5 / np.linalg.eigvalsh(W.T @ W)[-1] * np.diag(Sigma)
    X = np.asarray(jax.random.normal(jax.random.key(2), (N, P))) @ Lc.T
    Xk = np.asarray(sample_knockoffs_factor(jax.random.key(0), X, FactorModel(d, U), s, mu=0.0, num_knockoffs=m))
    assert Xk.shape == (N, m, P)
    assert max_z(np.hstack([X, Xk.reshape(N, -1)]), joint_model(Sigma, s, m)) < Z_MAX
    # same law as the dense sampler with this s: compare their moments with each other loosely
    Xd = np.asarray(sample_knockoffs(jax.random.key(0), X, Sigma, s, mu=0.0, num_knockoffs=m))
    assert max_z(np.hstack([X, Xd.reshape(N, -1)]), joint_model(Sigma, s, m)) < Z_MAX


def test_m1_unchanged_and_dense_S_equals_vector(problem):
    Sigma, s, X = problem
    s1 = np.full(P, np.linalg.eigvalsh(Sigma)[0])
    key = jax.random.key(4)
    a = sample_knockoffs(key, X[:50], Sigma, s1)
    b = sample_knockoffs(key, X[:50], Sigma, s1, num_knockoffs=1)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a dense diag(s) takes the matrix path: same normals, same numbers to rounding
    c = sample_knockoffs(key, X[:50], Sigma, np.diag(s1))
    np.testing.assert_allclose(np.asarray(c), np.asarray(a), atol=1e-9)
    R = sample_replicates(key, X[:50], Sigma, s1, 3)
    np.testing.assert_array_equal(
        np.asarray(R[1]), np.asarray(sample_knockoffs(jax.random.split(key, 3)[1], X[:50], Sigma, s1))
    )


def test_jit_vmap_replicates(problem):
    Sigma, s, X = problem
    X = X[:40]
    f = jax.jit(lambda k, X: sample_knockoffs(k, X, Sigma, s, num_knockoffs=M))
    key = jax.random.key(5)
    keys = jax.random.split(key, 3)
    batched = jax.vmap(f, in_axes=(0, None))(keys, X)  # jit + vmap in one compilation
    loop = np.stack([np.asarray(sample_knockoffs(k, X, Sigma, s, num_knockoffs=M)) for k in keys])  # eager
    np.testing.assert_allclose(np.asarray(batched), loop, atol=1e-10)
    R = sample_replicates(key, X, Sigma, s, 3, num_knockoffs=M, chunk_size=2)
    assert R.shape == (3, 40, M, P)
    np.testing.assert_allclose(np.asarray(R), loop, atol=1e-10)


def test_infeasible_raises_and_poisons_under_jit(problem):
    Sigma, _, X = problem
    s = np.full(P, 1.9 * np.linalg.eigvalsh(Sigma)[0])  # fine for m = 1, not for m = 3
    sample_knockoffs(jax.random.key(0), X[:20], Sigma, s)
    with pytest.raises(ValueError, match="num_knockoffs = 3"):
        sample_knockoffs(jax.random.key(0), X[:20], Sigma, s, num_knockoffs=3)
    out = jax.jit(lambda s: sample_knockoffs(jax.random.key(0), X[:20], Sigma, s, num_knockoffs=3))(s)
    assert np.isnan(np.asarray(out)).all()
    d, U = random_factor_model(3, P, 2)
    with pytest.raises(ValueError, match="num_knockoffs = 3"):
        sample_knockoffs_factor(jax.random.key(0), X[:20], FactorModel(d, U), 1.9 * d, num_knockoffs=3)


@pytest.mark.parametrize("bad, err", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_num_knockoffs(problem, bad, err):
    Sigma, s, X = problem
    with pytest.raises(err, match="num_knockoffs"):
        sample_knockoffs(jax.random.key(0), X[:20], Sigma, s, num_knockoffs=bad)
    with pytest.raises(err, match="num_knockoffs"):
        marginal_correlation(np.zeros((20, 16)), np.arange(20.0), num_knockoffs=bad)


# ----------------------------------------------------------------- statistics


def test_statistics_scores_shape_and_values(problem):
    Sigma, s, X = problem
    n = 120
    X = X[:n]
    Xk = np.asarray(sample_knockoffs(jax.random.key(0), X, Sigma, s, num_knockoffs=M))
    design = np.hstack([X, Xk.reshape(n, -1)])
    y = X[:, 0] + 0.5 * np.asarray(jax.random.normal(jax.random.key(9), (n,)))
    sol = lcd(design, y, lam=0.05, num_knockoffs=M)
    assert sol.value.shape == (M + 1, P)
    np.testing.assert_allclose(np.asarray(sol.value), np.abs(np.asarray(sol.stats["coef"])).reshape(M + 1, P))
    assert int(jnp.argmax(sol.value[0])) == 0
    Zl = lsm(design, y, num_lambdas=20, num_knockoffs=M).value
    assert Zl.shape == (M + 1, P)
    Zc = np.asarray(marginal_correlation(design, y, num_knockoffs=M))
    corr = np.array([abs(np.corrcoef(design[:, j], y)[0, 1]) for j in range(design.shape[1])])
    np.testing.assert_allclose(Zc, corr.reshape(M + 1, P), atol=1e-10)
    # batches: (R, n, (m+1)p) -> (R, m+1, p)
    assert marginal_correlation(np.stack([design, design]), y, num_knockoffs=M).shape == (2, M + 1, P)
    with pytest.raises(ValueError, match=r"\(m\+1\) p columns"):
        marginal_correlation(design[:, :-1], y, num_knockoffs=M)


def reference_threshold(kappa, tau, q, m, plus=True):
    best = np.inf
    for t in tau:
        if t <= 0:
            continue
        num = (float(plus) + np.sum((kappa != 0) & (tau >= t))) / m
        den = max(1, np.sum((kappa == 0) & (tau >= t)))
        if num / den <= q:
            best = min(best, t)
    return best


def test_threshold_matches_loop_and_m1_is_knockoff_plus():
    rng = np.random.default_rng(0)
    for trial in range(20):
        m = 1 + trial % 4
        p = 30
        Z = np.abs(rng.standard_normal((m + 1, p))) * rng.integers(0, 2, (1, p))  # some all-zero ties
        Z[0, :8] += 2.0
        kappa, tau = (np.asarray(a) for a in multi.multi_knockoff_statistics(Z))
        # reference statistics
        for j in range(p):
            z = Z[:, j]
            assert (kappa[j] == 0) == (z[0] > z[1:].max())
            srt = np.sort(z)[::-1]
            assert np.isclose(tau[j], srt[0] - np.median(srt[1:]))
        for q in (0.1, 0.3):
            for plus in (True, False):
                T = float(multi.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=m, plus=plus))
                assert T == reference_threshold(kappa, tau, q, m, plus)
        if m == 1:  # W = Z0 - Z1: the same selection as knockoff+
            W = Z[0] - Z[1]
            np.testing.assert_array_equal(
                np.asarray(multi.multi_knockoff_select(Z, 0.2)), np.asarray(kfilter.knockoff_select(W, 0.2))
            )


def test_threshold_keeps_exact_boundary_ties():
    """m = 5 copies, 6 original and 2 knockoff wins at the top, q = 0.1: the estimate (1 + 2) / (5 x 6) is
    exactly 1/10 <= q, but under jit XLA computed (1 + 2) / 5 as 3 x (rounded 1/5) = 0.6000000000000001 and
    the threshold was +inf (nothing selected). The reference is the estimate as one correctly rounded
    division compared with q, as knockoff_threshold's (1 + #{W <= -t}) / #{W >= t}."""
    for m, orig, knock, q in ((5, 6, 2, 0.1), (5, 2, 2, 0.3), (3, 5, 5, 0.4), (7, 4, 1, 1 / 14)):
        Z = np.zeros((m + 1, orig + knock + 1))
        Z[0, :orig] = 5.0
        Z[1, orig : orig + knock] = 5.0
        assert (1 + knock) / (m * orig) <= q  # the boundary level qualifies
        kappa, tau = multi.multi_knockoff_statistics(Z)
        assert float(multi.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=m)) == 5.0
        expected = np.arange(Z.shape[1]) < orig
        np.testing.assert_array_equal(multi.multi_knockoff_select(Z, q), expected)
        np.testing.assert_array_equal(multi.multi_knockoff_select(Z.astype(np.float32), q), expected)


def test_select_multi_counts_half_the_replicates_exactly():
    """The multi-knockoff filter keeps units selected in at least half the replicates: with R = 82 a unit
    selected in 41 was dropped (XLA's mean, 41 x rounded 1/82, is below 0.5), and the empty-selection
    explanation's smallest level was +inf for such a vote. Reference: 2 x count >= R in integers."""
    from jaxknock import _selection
    from jaxknock.pipeline import explain_empty_selection

    R, m = 82, 2
    scores = np.zeros((R, m + 1, 6))
    scores[:, 0, :5] = 5.0  # the originals win units 0..4 in every replicate ...
    scores[41:, 0, :5], scores[41:, 1, :5] = 0.0, 5.0  # ... but the knockoffs win them in 41 of 82
    W, mask, _ = _selection.select_multi(jnp.asarray(scores), None, None, {}, 0.2, True, R, m)
    votes = np.sum(np.asarray(W) > 0, axis=0)
    np.testing.assert_array_equal(mask, 2 * votes >= R)
    assert mask.sum() == 5
    msg = explain_empty_selection(W, 0.01, num_knockoffs=m, aggregate="frequency")
    assert "no target FDR below 1" not in msg and "smallest target FDR that selects something" in msg


def test_threshold_jit_vmap():
    rng = np.random.default_rng(1)
    Z = np.abs(rng.standard_normal((5, 3, 25)))
    batched = np.asarray(multi.multi_knockoff_select(Z, 0.3))
    loop = np.stack([np.asarray(multi.multi_knockoff_select(z, 0.3)) for z in Z])
    np.testing.assert_array_equal(batched, loop)
    k, t = multi.multi_knockoff_statistics(Z)
    jitted = jax.jit(lambda k, t: multi.multi_knockoff_threshold(k, t, 0.3, num_knockoffs=2))(k, t)
    np.testing.assert_array_equal(
        np.asarray(jitted), np.asarray(multi.multi_knockoff_threshold(k, t, 0.3, num_knockoffs=2))
    )
    with pytest.raises(ValueError, match="Z must have shape"):
        multi.multi_knockoff_select(np.ones((1, 4)), 0.1)


def test_infinite_scores_are_scores_as_infinite_w_in_knockoff_select():
    """``Z`` with a ``+-inf`` score (a ``-log`` p-value of 0) was refused ("Z contains non-finite") while
    knockoff_select takes the ``m = 1`` equivalent ``W = Z0 - Z1``; it now selects what knockoff_select does,
    nothing where no threshold qualifies (``T = +inf``: not the ``tau_j = +inf``). NaN, or ``inf - inf`` (an
    original and its only knockoff both ``+inf``), raises eagerly and selects nothing under jit."""
    inf = np.inf
    for W, q in (
        (np.r_[inf, -np.arange(1.0, 11)], 0.1),
        (np.r_[[inf] * 10, -1.0], 0.1),
        (np.r_[-inf, [5.0] * 9, -1], 0.25),
    ):
        Z = np.stack([np.maximum(W, 0), np.maximum(-W, 0)])
        want = np.asarray(kfilter.knockoff_select(W, q))
        np.testing.assert_array_equal(multi.multi_knockoff_select(Z, q), want)
        np.testing.assert_array_equal(jax.jit(multi.multi_knockoff_select)(Z, q), want)
    assert want.sum() == 9
    Z3 = np.array([[inf, 1.0], [inf, 0.0], [0.0, 2.0], [0.0, 0.0]])  # m = 3: a tie at +inf is a knockoff win
    kappa, tau = multi.multi_knockoff_statistics(Z3)
    assert kappa.tolist() == [1, 2] and tau.tolist() == [inf, 2.0]
    for bad, message in ((Z3[:2], r"feature \(0,\) an undefined tau \(inf - inf\)"), (Z3 * np.nan, "Z contains NaN")):
        with pytest.raises(ValueError, match=message):
            multi.multi_knockoff_select(bad, 0.1)
        assert not np.asarray(jax.jit(multi.multi_knockoff_select)(bad, 0.1)).any()


# ----------------------------------------------------------------- FDR by simulation


def _abs_corr(design, y):
    Xc = design - design.mean(axis=-2, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    return np.abs(
        np.einsum("dnk,dn->dk", Xc, yc) / (np.linalg.norm(Xc, axis=-2) * np.linalg.norm(yc, axis=-1)[:, None])
    )


def test_fdr_by_simulation_multi_and_broken():
    """40 data sets (n = 200, p = 40, AR(1) 0.6, 8 signals), m = 3, q = 0.2, |corr| scores.

    Valid knockoffs: mean FDP <= q within 2 standard errors. Broken (knockoffs
    drawn independently of X: cross-covariance 0 instead of Sigma - S): nulls next
    to signals win, the mean FDP is far above q.
    """
    D, n, p, m, q = 40, 200, 40, 3, 0.2
    Sigma = ar1_correlation(p, 0.6)
    s = np.full(p, min(1.0, (m + 1) / m * np.linalg.eigvalsh(Sigma)[0]))
    L = np.linalg.cholesky(Sigma)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((D, n, p)) @ L.T
    beta = np.zeros((D, p))
    for r in range(D):
        beta[r, rng.choice(p, 8, replace=False)] = 0.35 * rng.choice([-1, 1], 8)
    y = np.einsum("dnp,dp->dn", X, beta) + rng.standard_normal((D, n))
    draw = jax.jit(jax.vmap(lambda k, x: sample_knockoffs(k, x, Sigma, s, mu=0.0, num_knockoffs=m)))
    Xk = np.asarray(draw(jax.random.split(jax.random.key(0), D), X))
    Xi = (rng.standard_normal((D, n, m, p)) @ L.T).astype(Xk.dtype)  # broken
    null = beta == 0

    def fdp(K):
        Z = _abs_corr(np.concatenate([X, K.reshape(D, n, -1)], axis=-1), y).reshape(D, m + 1, p)
        sel = np.asarray(multi.multi_knockoff_select(Z, q))
        return (sel & null).sum(1) / np.maximum(sel.sum(1), 1), (sel & ~null).sum(1) / 8

    f_ok, power = fdp(Xk)
    f_bad, _ = fdp(Xi)
    se = f_ok.std() / np.sqrt(D)
    assert f_ok.mean() <= q + 2 * se, (f_ok.mean(), se)
    assert power.mean() > 0.2  # not vacuous
    assert f_bad.mean() > q + 0.2, f_bad.mean()


def test_public_exports():
    for name in ("multi_knockoff_statistics", "multi_knockoff_threshold", "multi_knockoff_select"):
        assert getattr(jaxknock, name) is getattr(multi, name)


def test_empty_selection_explanation_uses_the_multi_knockoff_estimate():
    """With m copies the multi-knockoff+ FDP estimate is (1 + #{W <= -t}) / (m #{W >= t}) on the signed tau
    (Selection.W), so it selects from ceil(1/(m q)) positive statistics on, at levels 1/m of knockoff+'s.
    The explanation used the single-knockoff formula: "needs ceil(1/0.1) = 10" and a smallest level of
    1/3 where the multi-knockoff filter selects from 1/6 on."""
    from jaxknock.pipeline import Selection, explain_empty_selection

    W = jnp.array([3.0, 2.0, 1.0, -0.5])
    kappa, tau = (W <= 0).astype(jnp.int32), jnp.abs(W)

    def selects(q):
        return bool(((kappa == 0) & (tau >= multi.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=2))).any())

    assert selects(1 / 6 + 1e-9) and not selects(1 / 6 - 1e-3)  # the reference: the multi-knockoff filter
    msg = explain_empty_selection(W, 0.1, num_knockoffs=2)
    assert "ceil(1/(2 x 0.1)) = 5" in msg and "only 3" in msg
    assert "smallest target FDR that selects something is 0.167" in msg
    settings = dict(fdr=0.1, plus=True, aggregate="frequency", num_knockoffs=2)
    sel = Selection(np.zeros(0, int), np.zeros(4, bool), W[None], jnp.full(1, jnp.inf), None, None, {}, settings)
    assert sel.explanation == msg
    # two replicates (frequency aggregation, the only one with m > 1): the grid level is the boundary
    W2 = jnp.stack([W, jnp.array([3.0, 2.0, -1.0, -0.5])])
    q = float(
        re.search(
            r"selects something is ([0-9.]+)", explain_empty_selection(W2, 0.1, num_knockoffs=2, aggregate="frequency")
        ).group(1)
    )
    kappa2, tau2 = (W2 <= 0).astype(jnp.int32), jnp.abs(W2)

    def selects2(q):
        T = multi.multi_knockoff_threshold(kappa2, tau2, q, num_knockoffs=2)
        return bool((jnp.mean((kappa2 == 0) & (tau2 >= T[:, None]), axis=0) >= 0.5).any())

    assert selects2(q * 1.01) and not selects2(q * 0.97)


def test_threshold_of_a_traced_nan_level_is_nan():
    """A traced NaN level passed (NaN <= 0 and NaN >= 1 are both False) and gave T = +inf, the answer of a
    valid level at which nothing qualifies; knockoff_threshold gives NaN, as for levels outside (0, 1)."""
    kappa = jnp.array([0, 0, 0, 0, 1])
    tau = jnp.array([5.0, 4.0, 3.0, 2.0, 1.0])
    thr = jax.jit(lambda q: multi.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=2))
    assert float(thr(0.2)) == 2.0
    for bad in (np.nan, 0.0, 1.0):
        assert np.isnan(float(thr(bad)))
    assert np.isnan(float(jax.jit(kfilter.knockoff_threshold)(tau, np.nan)))  # the single-knockoff reference


def test_threshold_checks_kappa_range():
    """kappa outside 0..m (a copy index that cannot exist) was counted as a knockoff win: kappa = 3 with m = 2
    gave a finite T. Eagerly a ValueError naming kappa; under jit (traced kappa) the row's T is NaN."""
    tau = jnp.array([[5.0, 4.0, 3.0, 2.0, 1.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
    good = jnp.array([0, 0, 0, 0, 1])
    for bad_entry in (3, -1):
        bad = good.at[4].set(bad_entry)
        with pytest.raises(ValueError, match="kappa"):
            multi.multi_knockoff_threshold(bad, tau[0], 0.2, num_knockoffs=2)
        T = jax.jit(lambda k: multi.multi_knockoff_threshold(k, tau, 0.2, num_knockoffs=2))(jnp.stack([good, bad]))
        assert float(T[0]) == 2.0 and np.isnan(float(T[1]))
    assert float(multi.multi_knockoff_threshold(good.at[4].set(2), tau[0], 0.2, num_knockoffs=2)) == 2.0  # m: valid


def test_masked_group_labels_and_masks_are_refused_by_name():
    # np.asarray(groups) dropped the mask (the label under it joined a group); a masked group_mask or a
    # big-endian integer one was JAX's "masked arrays are not supported" / "Error interpreting argument"
    groups = np.ma.array([0, 0, 1, 1, 2], mask=[False, False, True, False, False])
    with pytest.raises(ValueError, match="groups is a masked array with 1 masked entry"):
        multi.group_statistics(np.ones(5), groups)
    with pytest.raises(ValueError, match="group_mask is a masked array"):
        multi.expand_groups(np.ma.array([True, False, True], mask=[False, True, False]), [0, 0, 1, 1, 2])
    np.testing.assert_array_equal(
        multi.expand_groups(np.array([1, 0, 1], ">i4"), [0, 0, 1, 1, 2]), [True, True, False, False, True]
    )


@pytest.mark.parametrize("m", [2, 3])
def test_selection_ignores_the_order_of_the_copies_and_permutes_with_the_features(m):
    """Metamorphic: the ``m`` knockoff copies are exchangeable, so permuting the rows ``1..m`` of ``Z`` leaves
    ``kappa_j = 0``, ``tau`` and the selection unchanged, and permuting the features (columns of every row
    alike) permutes them; on small integer scores with ties at the top, at zero and at the threshold (one
    batched call per relation)."""
    rng = np.random.default_rng(m)
    B, p = 300, 10
    Z = rng.choice([0.0, 0.0, 1.0, 2.0, 3.0, 4.0], size=(B, m + 1, p))
    copies = np.concatenate([[0], 1 + rng.permutation(m)])
    perm = rng.permutation(p)
    for q in (0.2, 0.5):
        sel = np.asarray(multi.multi_knockoff_select(Z, q))
        assert 0 < sel.sum() < sel.size  # the relations are not checked on empty selections only
        np.testing.assert_array_equal(multi.multi_knockoff_select(Z[:, copies], q), sel)
        np.testing.assert_array_equal(multi.multi_knockoff_select(Z[..., perm], q), sel[:, perm])
    kappa, tau = multi.multi_knockoff_statistics(Z)
    kappa2, tau2 = multi.multi_knockoff_statistics(Z[:, copies])
    np.testing.assert_array_equal(tau2, tau)
    np.testing.assert_array_equal(np.asarray(kappa2) == 0, np.asarray(kappa) == 0)
