import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ar1_correlation
from scipy.stats import false_discovery_control

from jaxknock import filter as F
from jaxknock import multi
from jaxknock import statistics as S

# ----------------------------------------------------------------------------
# Thresholds and procedures against brute-force definitions
# ----------------------------------------------------------------------------


def _brute_threshold(W, q, plus):
    """Definition: min t > 0 over candidate |W_j| with ratio <= q (inf if none)."""
    best = np.inf
    for t in np.abs(W):
        if t <= 0:
            continue
        num = float(plus) + np.sum(W <= -t)
        den = max(1, np.sum(W >= t))
        if num / den <= q:
            best = min(best, t)
    return best


def _random_w(rng, R, p):
    """Statistics with ties, exact zeros and a few strong positives."""
    W = np.round(rng.standard_normal((R, p)) * 3) / 2  # half-integers: many ties
    W[:, : p // 5] += rng.uniform(2, 6, (R, p // 5))
    W[rng.random((R, p)) < 0.1] = 0.0
    return W


@pytest.mark.parametrize("plus", [True, False])
def test_knockoff_threshold_matches_brute_force(plus):
    rng = np.random.default_rng(0)
    W = _random_w(rng, 60, 40)
    for q in [0.05, 0.1, 0.2, 0.5]:
        T = np.asarray(F.knockoff_threshold(W, q, plus=plus))
        ref = np.array([_brute_threshold(w, q, plus) for w in W])
        np.testing.assert_array_equal(T, ref)
        sel = np.asarray(F.knockoff_select(W, q, plus=plus))
        np.testing.assert_array_equal(sel, W >= ref[:, None])
    assert np.isinf(float(F.knockoff_threshold(-np.abs(W[0]) - 1, 0.1)))  # nothing qualifies


def test_knockoff_threshold_jit_and_shapes():
    rng = np.random.default_rng(1)
    W = _random_w(rng, 6, 25)
    eager = F.knockoff_threshold(W, 0.2)
    jitted = jax.jit(lambda w, q: F.knockoff_threshold(w, q))(W, 0.2)
    np.testing.assert_array_equal(eager, jitted)
    T3 = F.knockoff_threshold(W.reshape(2, 3, 25), 0.2)
    np.testing.assert_array_equal(np.asarray(T3).ravel(), eager)
    assert F.knockoff_threshold(W[0], 0.2).shape == ()


@pytest.mark.parametrize("method", ["bh", "by"])
def test_bh_by_match_scipy(method):
    rng = np.random.default_rng(2)
    fn = F.benjamini_hochberg if method == "bh" else F.benjamini_yekutieli
    for m in [7, 150] * 10:
        pv = np.where(rng.random(m) < 0.3, rng.uniform(0, 1e-3, m), rng.random(m))
        for q in [0.05, 0.1, 0.3]:
            ref = false_discovery_control(pv, method=method) <= q
            np.testing.assert_array_equal(fn(pv, q), ref)
    batch = rng.random((4, 30)) ** 3
    np.testing.assert_array_equal(
        fn(batch, 0.1), np.stack([false_discovery_control(b, method=method) <= 0.1 for b in batch])
    )
    # discrete p-values (permutation p-values k / 20) sit exactly on the boundaries k q / m: ties
    # decided by rounding (the rearranged p_(k) <= k q / m lost [0.8, 0.9, 0.9, 0.6, 0.9, 0.4, 0.2] at q = 0.9)
    for _ in range(300):
        m = int(rng.integers(1, 12))
        pv = rng.integers(1, 21, m) / 20
        q = float(rng.integers(1, 20) / 20)
        np.testing.assert_array_equal(fn(pv, q), false_discovery_control(pv, method=method) <= q)
    assert not fn(np.array([0.03, 0.06, 0.09, 0.12, np.nextafter(0.15, 1.0)]), 0.15)[-1]  # p > q never rejected


def test_by_boundary_ties_harmonic_constant():
    # p-values on BY's boundary, p_(k) = k q / (m c(m)): c(m) was summed on the device; in float32
    # (x64 off) it came out ~1e-6 high and BY rejected 6 of 10 and 0 of 1000 (float64: 10, 998); in
    # float64 its rounding differed from scipy's sum and flipped 3 of 100000 exact ties
    q = 0.1
    for m in (10, 1000, 100000):
        c = np.sum(1.0 / np.arange(1, m + 1))
        pv = np.random.default_rng(m).permutation(np.arange(1, m + 1) * q / (m * c))
        if m < 100000:
            with jax.enable_x64(False):
                got = int(np.asarray(F.benjamini_yekutieli(pv, q)).sum())
            ref = int((false_discovery_control(pv.astype(np.float32).astype(np.float64), method="by") <= q).sum())
            assert abs(got - ref) <= 1 and got >= m - 1, (m, got, ref)  # float32 rounding moves one tie at most
        else:
            np.testing.assert_array_equal(F.benjamini_yekutieli(pv, q), false_discovery_control(pv, method="by") <= q)


def test_ebh_matches_definition_and_reproduces_knockoff_plus():
    rng = np.random.default_rng(3)
    for _ in range(20):
        e = np.where(rng.random(50) < 0.2, rng.uniform(5, 200, 50), rng.exponential(1.0, 50))
        q = 0.1
        order = np.sort(e)[::-1]
        ks = [k for k in range(1, 51) if order[k - 1] >= 50 / (k * q)]
        k = max(ks, default=0)
        ref = e >= order[k - 1] if k else np.zeros(50, bool)
        np.testing.assert_array_equal(F.ebh(e, q), ref)
    # e-BH on the knockoff e-values at the same level is the knockoff+ filter (Ren & Barber).
    W = _random_w(rng, 30, 40)
    for q in [0.1, 0.3]:
        e = F.knockoff_evalues(W, q)
        np.testing.assert_array_equal(F.ebh(e, q), F.knockoff_select(W, q, plus=True))
        assert np.all(np.asarray(jnp.mean(e, axis=-1)) <= 40.0)


def test_aggregation_degenerate_cases():
    rng = np.random.default_rng(4)
    W = _random_w(rng, 1, 40)[0]
    same = np.stack([W, W])  # identical replicates aggregate to the single-run filter
    single = F.knockoff_select(W, 0.2)
    np.testing.assert_array_equal(F.aggregate_ebh(same, 0.2, alpha_kn=0.2), single)
    np.testing.assert_array_equal(F.aggregate_frequency(same, 0.2, eta=1.0), single)
    two = np.stack([W, -W])
    np.testing.assert_array_equal(
        F.aggregate_frequency(two, 0.5, eta=0.5),
        np.asarray(F.knockoff_select(two, 0.5)).any(axis=0),
    )
    assert not np.any(F.aggregate_frequency(two, 0.5, eta=1.0))  # W_j and -W_j never both pass


def test_frequency_counts_the_replicates_exactly():
    """A feature selected in every one of R = 41 replicates was dropped at ``eta=1``, and one selected in 41 of
    R = 82 at ``eta=0.5``: the frequency was XLA's mean, the count times the rounded 1/R (below 1, resp. 0.5).
    A product ``eta * R`` is rounded as well: 7 of R = 25 at ``eta=0.28`` (0.28 * 25 = 7.000000000000001) meets
    the level the user typed. The reference is NumPy's frequency, the correctly rounded count / R, against
    ``eta``, on the brute-force threshold."""
    w = np.array([5.0] * 10 + [-1.0])
    cases = ((41, 1.0, 0), (82, 0.5, 41), (49, 1.0, 0), (25, 0.28, 18), (50, 0.56, 22), (100, 0.07, 93))
    for R, eta, flipped in cases:
        W = np.tile(w, (R, 1))
        W[R - flipped :] *= -1  # these replicates select nothing: the knockoff wins every pair
        count = np.sum([W[r] >= _brute_threshold(W[r], 0.2, True) for r in range(R)], axis=0)
        expected = count / R >= eta
        assert expected.sum() == 10
        assert not np.any((count - 1) / R >= eta)  # one vote fewer misses: the boundary is exact
        np.testing.assert_array_equal(F.aggregate_frequency(W, 0.2, eta=eta), expected)
        np.testing.assert_array_equal(jax.jit(lambda W, e: F.aggregate_frequency(W, 0.2, eta=e))(W, eta), expected)
    # and the smallest selecting level of the frequency aggregate sees the same vote (it was +inf)
    W = np.tile(w, (82, 1))
    W[41:] *= -1
    assert float(F.min_selecting_fdr(W, aggregate="frequency")) <= 0.2


def test_an_infinite_statistic_is_not_selected_where_no_threshold_qualifies():
    """No threshold qualifies for ``[inf, -1, -2, -3, -4]`` at 0.1 (the smallest selecting level is 1), so
    ``T = +inf``; the selection was ``W >= T``, which kept the ``W_j = +inf`` (e.g. a ``-log`` p-value of 0) as
    a discovery, with a positive knockoff e-value and in the frequency aggregate. Where ``+inf`` itself
    qualifies (ten of them at 0.1) they are still selected."""
    W = jnp.array([jnp.inf, -1.0, -2.0, -3.0, -4.0])
    assert float(F.knockoff_min_fdr(W)) == 1.0 and np.isinf(float(F.knockoff_threshold(W, 0.1)))
    assert not np.any(F.knockoff_select(W, 0.1))
    assert not np.any(jax.jit(F.knockoff_select)(W, 0.1))
    np.testing.assert_array_equal(F.knockoff_evalues(W, 0.1), np.zeros(5))
    assert not np.any(F.aggregate_frequency(jnp.stack([W, W]), 0.1, eta=0.5))
    assert not np.any(multi.group_knockoff_select(W, 0.1))
    many = jnp.array([jnp.inf] * 10 + [-1.0])
    np.testing.assert_array_equal(F.knockoff_select(many, 0.1), np.arange(11) < 10)


def test_docstring_examples():
    import doctest

    result = doctest.testmod(F, extraglobs={"jax": jax, "jnp": jnp})
    assert result.failed == 0 and result.attempted > 0


def test_bad_inputs():
    W = np.arange(10.0) - 3
    for q in [0.0, 1.0, -0.1, 1.5, np.nan]:
        with pytest.raises(ValueError, match="fdr must lie in \\(0, 1\\)"):
            F.knockoff_threshold(W, q)
    with pytest.raises(ValueError, match="fdr must lie in"):
        F.benjamini_hochberg(np.full(3, 0.5), 1.0)
    with pytest.raises(ValueError, match="W contains NaN"):
        F.knockoff_select(np.array([1.0, np.nan]), 0.1)
    with pytest.raises(ValueError, match="pvalues must lie in \\[0, 1\\]"):
        F.benjamini_yekutieli(np.array([0.1, 1.2]), 0.1)
    with pytest.raises(ValueError, match="shape \\(R, p\\)"):
        F.aggregate_ebh(W, 0.1)
    with pytest.raises(ValueError, match="alpha_kn must lie in"):
        F.aggregate_ebh(W[None], 0.1, alpha_kn=2.0)
    with pytest.raises(ValueError, match="eta must lie in"):
        F.aggregate_frequency(W[None], 0.1, eta=0.0)
    with pytest.raises(ValueError, match="non-negative"):
        F.ebh(np.array([1.0, -1.0]), 0.1)


# ----------------------------------------------------------------------------
# FDR control by simulation with exact Gaussian knockoffs
# ----------------------------------------------------------------------------

Q = 0.2


def _ar1_knockoff_model(p, rho):
    """AR(1) Sigma with the equicorrelated s = min(1, 2 lambda_min) (times 0.99 to stay off
    the PSD boundary); returns chol(Sigma), the conditional-mean map and chol of the
    conditional covariance of X~ given X."""
    Sigma = ar1_correlation(p, rho)
    s = min(1.0, 2 * np.linalg.eigvalsh(Sigma)[0]) * 0.99
    Sinv = np.linalg.inv(Sigma)
    D = s * np.eye(p)
    return (
        jnp.asarray(np.linalg.cholesky(Sigma)),
        jnp.asarray(np.eye(p) - Sinv @ D),  # E[X~ | X] = X (I - Sigma^-1 D)
        jnp.asarray(np.linalg.cholesky(2 * D - D @ Sinv @ D)),
    )


def _simulate(key, statistics, *, reps, n=200, p=100, k=20, amplitude=0.5, rho=0.4, R=5, traced=True):
    """``reps`` data sets y = X beta + noise, each with ``R`` exact knockoff copies.

    Returns ``(W_1, W_2, ...)``, one ``(reps, R, p)`` array per function in
    ``statistics`` (called as ``f(Xk, y)`` with ``Xk`` of shape ``(R, n, 2p)``),
    and the boolean signal mask. Randomness comes from ``key`` only. With
    ``traced`` the data sets run through one ``lax.map`` (the statistics are
    traced); without it the statistics are called eagerly, one data set at a
    time, as a user calls them (e.g. ``lcd``'s working-set CV engine, which
    does not trace).
    """
    chol, mean_map, cond_chol = _ar1_knockoff_model(p, rho)
    beta = np.zeros(p)
    beta[np.linspace(0, p - 1, k).astype(int)] = amplitude
    signals = beta != 0
    beta = jnp.asarray(beta)

    def data(key):
        kx, ky, kk = jax.random.split(key, 3)
        X = jax.random.normal(kx, (n, p)) @ chol.T
        y = X @ beta + jax.random.normal(ky, (n,))
        Xt = X @ mean_map + jax.random.normal(kk, (R, n, p)) @ cond_chol.T
        return jnp.concatenate([jnp.broadcast_to(X, Xt.shape), Xt], axis=-1), y

    keys = jax.random.split(key, reps)
    if traced:
        return jax.lax.map(lambda key: tuple(f(*data(key)) for f in statistics), keys), signals
    data = jax.jit(data)
    per_set = [tuple(f(*data(key)) for f in statistics) for key in keys]
    return tuple(jnp.stack(w) for w in zip(*per_set)), signals


def _fdp(selected, signals):
    selected = np.asarray(selected)
    n_sel = selected.sum(axis=-1)
    false = (selected & ~signals).sum(axis=-1)
    return false / np.maximum(n_sel, 1), (selected & signals).sum(axis=-1) / signals.sum()


def _controls(fdp, q=Q):
    """Empirical FDR <= q + 3 standard errors."""
    return fdp.mean() <= q + 3 * fdp.std(ddof=1) / np.sqrt(fdp.size)


def _check_fdr(W, signals, *, valid, min_power=(0.3, 0.05)):
    """knockoff+ on the first replicate and e-value aggregation over all of them."""
    fdp_kn, power_kn = _fdp(F.knockoff_select(W[:, 0], Q), signals)
    fdp_ebh, power_ebh = _fdp(jax.vmap(lambda w: F.aggregate_ebh(w, Q))(W), signals)
    if valid:
        assert _controls(fdp_kn), fdp_kn.mean()
        assert _controls(fdp_ebh), fdp_ebh.mean()
        assert power_kn.mean() > min_power[0] and power_ebh.mean() > min_power[1]  # has teeth
    else:
        assert not _controls(fdp_kn), fdp_kn.mean()
        assert not _controls(fdp_ebh), fdp_ebh.mean()


def _broken_marginal(Xk, y):
    """Not antisymmetric: originals get a head start over their knockoffs."""
    Xc = Xk - Xk.mean(axis=-2, keepdims=True)
    yc = y - y.mean()
    r = jnp.abs(Xc.transpose(0, 2, 1) @ yc) / (jnp.linalg.norm(Xc, axis=-2) * jnp.linalg.norm(yc))
    p = r.shape[-1] // 2
    return r[..., :p] - 0.6 * r[..., p:]


def test_fdr_control_marginal_correlation(key):
    """200 data sets, AR(1) design, p = 100: knockoff+ and e-value aggregation control
    the FDR; a statistic that favours the originals fails the same check."""
    (W, W_bad), signals = _simulate(key, [S.marginal_correlation, _broken_marginal], reps=200)
    W, W_bad = np.asarray(W), np.asarray(W_bad)
    assert W.shape == (200, 5, 100)
    _check_fdr(W, signals, valid=True)
    _check_fdr(W_bad, signals, valid=False)


def _lcd_fixed_fraction(Xk, y):
    """LCD at 0.2 * lambda_max of each design (a swap-invariant choice of lambda)."""
    Xc = Xk - Xk.mean(axis=-2, keepdims=True)
    lam = 0.2 * jnp.max(jnp.abs(Xc.transpose(0, 2, 1) @ (y - y.mean())), axis=-1) / y.shape[0]
    return S.lcd(Xk, y, lam=lam, tol=1e-6).value


def _lcd_cv(Xk, y):
    return S.lcd(Xk, y, folds=3, num_lambdas=10, eps=5e-2, tol=1e-6).value


@pytest.mark.slow
def test_fdr_control_lcd(key):
    """p = 100: 200 data sets for LCD at a fixed fraction of lambda_max (knockoff+ and
    e-values over 5 replicates; traced, so the classic path solver) and cross-validated
    LCD (100 data sets, knockoff+; eager, so the default working-set engine a user gets) control the
    FDR; shifting LCD towards the originals breaks it."""
    (W,), signals = _simulate(key, [_lcd_fixed_fraction], reps=200)
    (W_cv,), _ = _simulate(jax.random.fold_in(key, 1), [_lcd_cv], reps=100, R=1, traced=False)
    W, W_cv = np.asarray(W), np.asarray(W_cv)
    _check_fdr(W, signals, valid=True)
    _check_fdr(W + 0.5 * np.abs(W).mean(), signals, valid=False)
    fdp_cv, power_cv = _fdp(F.knockoff_select(W_cv[:, 0], Q), signals)
    assert _controls(fdp_cv) and power_cv.mean() > 0.3


# --- the smallest selecting level and the "nothing selected" explanation ---


def test_knockoff_min_fdr_is_the_selection_boundary():
    """Just above q_min the filter selects, just below it selects nothing (brute force over random W)."""
    from jaxknock.filter import knockoff_min_fdr

    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(120):  # four lengths, not fourteen: each new length compiles the eager ops again
        W = jnp.asarray(np.round(rng.standard_normal(int(rng.choice([1, 3, 8, 14]))) * 2, 0))
        for plus in (True, False):
            q_min = float(knockoff_min_fdr(W, plus=plus))
            if np.isfinite(q_min) and 0 < q_min < 0.99:
                assert bool(F.knockoff_select(W, q_min * 1.000001, plus=plus).any())
                assert not bool(F.knockoff_select(W, q_min * 0.999, plus=plus).any())
                checked += 1
    assert checked > 30
    assert float(knockoff_min_fdr(jnp.zeros(4))) == np.inf
    # knockoff+ with no negative statistics: 1 / #positives
    assert float(knockoff_min_fdr(jnp.array([3.0, 2.0, 1.0, 0.0]))) == pytest.approx(1 / 3)


def test_aggregate_ebh_of_float32_statistics_keeps_the_boundary_ties():
    # 10 statistics at +5 and 6 at -5: the knockoff+ estimate at t = 5 is (1 + 6) / 10 = 0.7 exactly, so at
    # fdr = alpha_kn = 0.7 every replicate selects the 10 and their e-value 16 / 7 meets e-BH's 16 / (10 q)
    # exactly (float64 W: the 10; ebh on the averaged knockoff_evalues: the 10). A float32 W rounded the
    # e-BH level to float32, below 0.7, against float64 e-values: nothing selected
    W = np.tile(np.array([5.0] * 10 + [-5.0] * 6, np.float32), (2, 1))
    np.testing.assert_array_equal(np.asarray(F.aggregate_ebh(W, 0.7, alpha_kn=0.7)), np.arange(16) < 10)


@pytest.mark.parametrize("x64", [True, False])
def test_knockoff_evalues_follow_the_dtype_of_w(x64):
    """A float32 ``W`` gave float64 e-values with x64 on (an integer count over ``1.0 + count``); they are in W's
    dtype, so float32 statistics select the same with x64 on and off, and the exact boundary ties of e-BH hold
    for ebh(knockoff_evalues), aggregate_ebh and aggregate_ebh_across_processes alike (a of +5, b of -5, at
    fdr = alpha_kn = (1 + b) / a: knockoff+ selects the a)."""
    from jaxknock.distributed import aggregate_ebh_across_processes

    with jax.enable_x64(x64):
        for dtype in (np.float32, np.float64 if x64 else np.float32):
            assert F.knockoff_evalues(np.array([5.0, 4.0, -1.0], dtype), 0.5).dtype == dtype
        for a, b in ((10, 6), (7, 2)):
            q = (1 + b) / a
            W = np.tile(np.array([5.0] * a + [-5.0] * b, np.float32), (3, 1))
            want = np.arange(a + b) < a
            np.testing.assert_array_equal(F.ebh(F.knockoff_evalues(W[0], q), q), want)
            np.testing.assert_array_equal(F.aggregate_ebh(W, q, alpha_kn=q), want)
            np.testing.assert_array_equal(aggregate_ebh_across_processes(W, q, num_replicates=3, alpha_kn=q), want)


def test_min_selecting_fdr_for_aggregated_replicates():
    from jaxknock.filter import min_selecting_fdr

    rng = np.random.default_rng(4)
    W = jnp.asarray(rng.standard_normal((4, 60)) + np.r_[np.full(20, 3.0), np.zeros(40)])
    q = float(min_selecting_fdr(W, aggregate="ebh"))
    assert 0 < q < 1
    assert bool(F.aggregate_ebh(W, min(q * 1.02, 0.999)).any())
    assert not bool(F.aggregate_ebh(W, q * 0.95).any())


def test_min_selecting_fdr_refuses_a_batch_of_replicates_instead_of_flattening_it():
    """``(1, R, p)`` went down the one-replicate path as ``W.reshape(-1)``: the ``R p`` statistics of ``R``
    replicates pooled into one row, a plausible level (1/7 here, where neither replicate selects below 1/4)."""
    from jaxknock.filter import min_selecting_fdr

    W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, 1.0, 2.0, 3.0, -1.0]])
    with pytest.raises(ValueError, match=r"shape \(R, p\), got \(1, 2, 5\)"):
        min_selecting_fdr(W[None])
    assert float(min_selecting_fdr(W[:1])) == float(min_selecting_fdr(W[0])) == 0.25


def test_empty_selection_explains_why_and_the_smallest_level():
    from jaxknock.pipeline import explain_empty_selection

    # 5 positive statistics: knockoff+ at q = 0.1 needs 10
    msg = explain_empty_selection(jnp.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0]), 0.1)
    assert "needs at least ceil(1/0.1) = 10" in msg and "only 5" in msg
    assert "smallest target FDR that selects something is 0.2" in msg
    # enough positives, but matched by negatives at every threshold: too weak
    W = jnp.asarray(np.r_[np.arange(1.0, 21.0), -18.5, -19.5, -20.5])
    msg = explain_empty_selection(W, 0.1)
    assert "too weak" in msg and "at the best threshold, t = 1, 20 features with W_j >= t are matched by 3" in msg
    # 8 strong statistics over symmetric noise: no negative statistic below the best threshold, the "+1" of
    # knockoff+ binds (1/8 > 0.1). It read "the statistics were too weak: 19 positive statistics are matched
    # by 5 negative ones", pointing at the statistics rather than at the size of the selection
    noise = np.random.default_rng(0).normal(scale=0.01, size=30)
    W = jnp.asarray(np.r_[np.linspace(0.8, 0.6, 8), noise])
    msg = explain_empty_selection(W, 0.1)
    assert "too weak" not in msg and "keeps 8 features with no W_j <= -t" in msg
    assert "smallest target FDR that selects something is 0.125" in msg


@pytest.mark.parametrize("fdr", [None, [0.1], "0.1"])
def test_fdr_of_the_wrong_type_names_fdr(fdr):
    W = jnp.array([3.0, -1.0, 2.0])
    with pytest.raises((TypeError, ValueError), match="fdr"):
        F.knockoff_select(W, fdr)
    with pytest.raises((TypeError, ValueError), match="fdr"):
        F.benjamini_hochberg(jnp.array([0.01, 0.5]), fdr)


def test_invalid_inputs_under_jit_select_nothing_instead_of_a_plausible_set():
    """Eager calls raise on these; under jit they selected 29 of 30 (BH), 25 of 30 (e-BH) or used a
    finite knockoff threshold computed around a NaN statistic."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal(30) + 2.0
    pv = rng.random(30) * 0.01
    e = rng.exponential(100.0, 30)
    first = np.arange(30) == 0
    assert F.knockoff_select(W, 0.1).sum() > 0 and F.benjamini_hochberg(pv, 0.1).sum() > 0
    assert F.ebh(e, 0.1).sum() > 0
    assert np.isnan(float(jax.jit(F.knockoff_threshold)(np.where(first, np.nan, W), 0.1)))
    assert not np.asarray(jax.jit(F.knockoff_select)(np.where(first, np.nan, W), 0.1)).any()
    assert np.isnan(np.asarray(jax.jit(F.knockoff_evalues)(np.where(first, np.nan, W), 0.1))).all()
    for bad in (np.nan, 1.5, -0.1):
        assert not np.asarray(jax.jit(F.benjamini_hochberg)(np.where(first, bad, pv), 0.1)).any()
        assert not np.asarray(jax.jit(F.benjamini_yekutieli)(np.where(first, bad, pv), 0.1)).any()
    for bad in (np.nan, -1.0):
        assert not np.asarray(jax.jit(F.ebh)(np.where(first, bad, e), 0.1)).any()
    # a traced level outside (0, 1): eager calls raise; under jit it gave T = 1.0 (fdr 1.5) or
    # rejected everything (BH at fdr 2.0)
    for level in (1.5, 2.0, 0.0, -0.1, np.nan):
        assert np.isnan(float(jax.jit(F.knockoff_threshold)(W, level)))
        assert not np.asarray(jax.jit(F.knockoff_select)(W, level)).any()
        for fn, x in ((F.benjamini_hochberg, pv), (F.benjamini_yekutieli, pv), (F.ebh, e)):
            assert not np.asarray(jax.jit(fn)(x, level)).any()
        Z = np.stack([np.abs(W), np.zeros(30), np.zeros(30)])
        assert not np.asarray(jax.jit(multi.multi_knockoff_select)(Z, level)).any()
    # rows are independent: a bad row does not silence a good one
    both = jax.jit(F.benjamini_hochberg)(np.stack([np.where(first, np.nan, pv), pv]), 0.1)
    assert not np.asarray(both[0]).any() and np.array_equal(
        np.asarray(both[1]), np.asarray(F.benjamini_hochberg(pv, 0.1))
    )


def test_a_failed_replicate_or_copy_voids_the_aggregate_under_jit():
    """aggregate_frequency kept the other replicates' vote (30 of 30 selected with one NaN replicate);
    multi-knockoff selection thresholded around a NaN score."""
    from jaxknock.multi import multi_knockoff_select

    rng = np.random.default_rng(1)
    W = rng.standard_normal((4, 30)) + 2.0
    assert np.asarray(jax.jit(F.aggregate_frequency)(W, 0.1)).sum() > 0
    W[0, 0] = np.nan
    assert not np.asarray(jax.jit(F.aggregate_frequency)(W, 0.1)).any()
    assert not np.asarray(jax.jit(F.aggregate_ebh)(W, 0.1)).any()
    Z = np.abs(rng.standard_normal((3, 30)))
    Z[0, :10] += 3.0
    assert np.asarray(jax.jit(multi_knockoff_select)(Z, 0.3)).sum() > 0
    Z[0, 17] = np.nan
    assert not np.asarray(jax.jit(multi_knockoff_select)(Z, 0.3)).any()


def test_traced_plus_is_named():
    """``jax.jit(F.knockoff_select)(W, q, plus=False)`` traces ``plus``; ``bool(plus)`` was JAX's
    TracerBoolConversionError. It is a static switch: named, with the static_argnames remedy, which works."""
    W = jnp.array([5.0, 4.0, 3.0, 2.0, -1.0])
    fns = [F.knockoff_threshold, F.knockoff_select, F.knockoff_evalues]
    for fn in fns:
        with pytest.raises(TypeError, match="plus must be a Python bool, not a traced value"):
            jax.jit(fn)(W, 0.5, plus=False)
    for agg in (F.aggregate_ebh, F.aggregate_frequency):
        with pytest.raises(TypeError, match="plus must be a Python bool"):
            jax.jit(agg)(jnp.stack([W, W]), 0.5, plus=False)
    static = jax.jit(F.knockoff_select, static_argnames=("plus",))(W, 0.5, plus=False)
    np.testing.assert_array_equal(static, F.knockoff_select(W, 0.5, plus=False))


def test_smallest_selecting_level_of_a_nan_statistic_is_nan_under_jit():
    """Eager calls raise on a NaN statistic; under jit knockoff_min_fdr ignored it and returned a
    plausible level (0.25 for [NaN, 4, 3, 2, -1]), min_selecting_fdr returned +inf ("no level selects")."""
    from jaxknock.filter import knockoff_min_fdr, min_selecting_fdr

    W = jnp.array([np.nan, 4.0, 3.0, 2.0, -1.0])
    assert np.isnan(float(jax.jit(knockoff_min_fdr)(W)))
    assert np.isnan(float(jax.jit(min_selecting_fdr)(W)))
    assert np.isnan(float(jax.jit(min_selecting_fdr)(jnp.stack([W, jnp.abs(W)]))))
    # rows are independent
    both = jax.jit(knockoff_min_fdr)(jnp.stack([W, W.at[0].set(5.0)]))
    assert np.isnan(float(both[0])) and float(both[1]) == pytest.approx(0.25)


def test_empty_selection_explanation_names_no_level_of_one_or_more():
    """knockoff_min_fdr can exceed 1 ((1 + 1) / 1 for W = [1, -2]); the explanation called that "the smallest
    target FDR that selects something", a level no filter accepts."""
    from jaxknock.pipeline import explain_empty_selection

    msg = explain_empty_selection(jnp.array([1.0, -2.0]), 0.1)
    assert "no target FDR below 1 selects anything" in msg and "selects something is" not in msg


def test_empty_selection_explanation_gives_the_smallest_aggregated_level_to_its_digits():
    """For ``R > 1`` the smallest selecting level came from a grid whose levels are 1.7% apart: "the smallest
    target FDR that selects something is 0.336" while e-BH at 0.334 already selected (3 of these 3 cases). The
    level is refined between the selecting grid level and the one below, so the printed digits hold."""
    import re

    from jaxknock.pipeline import explain_empty_selection

    for seed in (6, 7, 8):
        rng = np.random.default_rng(seed)
        W = jnp.asarray(rng.standard_normal((3, 12)) + np.r_[np.full(5, 1.5), np.zeros(7)])
        q = float(re.search(r"selects something is ([0-9.]+)", explain_empty_selection(W, 0.01)).group(1))
        assert F.aggregate_ebh(W, min(q * 1.006, 0.999)).any()  # printed to 3 digits: 0.5% either way
        assert not F.aggregate_ebh(W, q * 0.994).any()


def test_frequency_eta_is_checked_and_may_be_traced():
    """eta is a numeric setting: under jit it was JAX's TracerBoolConversionError; text gave Python's
    "'<' not supported", True was taken for 1.0; a traced eta outside (0, 1] must select nothing
    (eta = 0 selected every feature). min_selecting_fdr checked `aggregate` only for R > 1."""
    from jaxknock.filter import min_selecting_fdr

    W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, -4.0, 5.0, 4.0, 3.0]])
    eager = F.aggregate_frequency(W, 0.5, eta=1.0)
    np.testing.assert_array_equal(jax.jit(F.aggregate_frequency)(W, 0.5, eta=1.0), eager)
    for bad in (0.0, 1.5, np.nan):
        assert not np.asarray(jax.jit(F.aggregate_frequency)(W, 0.5, eta=bad)).any()
    for bad in ("0.5", True, None):
        with pytest.raises(TypeError, match="eta"):
            F.aggregate_frequency(W, 0.5, eta=bad)
    with pytest.raises(ValueError, match="aggregate"):
        min_selecting_fdr(W[0], aggregate="bogus")


def test_levels_of_any_scalar_type_run_no_eager_conversion():
    """``jnp.asarray(fdr, W.dtype)`` of a JAX scalar level was an eager conversion (one compiled program per
    pair of dtypes in a process), and ``aggregate_ebh``'s default ``alpha_kn = fdr / 2`` an eager division:
    a warm call with ``fdr=jnp.float64(0.3)`` on float32 statistics compiled one or two programs. A concrete
    level enters as a NumPy scalar of the statistics' dtype now (``call_scalar``), as ``knockoff_select``'s
    did. A float16 level (a conversion no other test runs) and a float64 one, against float32 ``W``."""
    from helpers import count_compiles

    W = np.array([[5.0, 4.0, 3.0, 2.0, -1.0, 6.0, 2.5], [6.0, -4.0, 5.0, 4.0, 3.0, 1.0, 2.0]], np.float32)
    e = np.array([3.0, 0.0, 9.0, 1.5, 0.0, 4.0, 2.0], np.float32)
    calls = {
        "knockoff_evalues": lambda q: F.knockoff_evalues(W[0], q),
        "aggregate_ebh": lambda q: F.aggregate_ebh(W, q),
        "aggregate_frequency": lambda q: F.aggregate_frequency(W, q),
        "ebh": lambda q: F.ebh(e, q),
        "benjamini_hochberg": lambda q: F.benjamini_hochberg(e / 10, q),
        "multi_knockoff_select": lambda q: multi.multi_knockoff_select(W, q),
    }
    levels = [jnp.float16(0.3), jnp.float64(0.3)]
    for name, call in calls.items():
        refs = [np.asarray(call(float(q))) for q in levels]
        with count_compiles() as compiles:
            out = [np.asarray(call(q)) for q in levels]
        assert [c.split()[1] for c in compiles] == [], name
        for o, ref in zip(out, refs):
            np.testing.assert_array_equal(o, ref)


def test_aggregates_ignore_the_order_and_a_repetition_of_the_replicates_and_permute_with_the_features():
    """Metamorphic: e-BH averages the replicates' e-values and the frequency counts votes, so both are invariant
    to the order of the replicates and to repeating every replicate (``[W; W]``: the same mean, the same
    frequency), and permuting the features of every replicate alike permutes the selection; on
    half-integer statistics with ties and zeros (``_random_w``)."""
    rng = np.random.default_rng(7)
    R, p = 3, 12
    for _ in range(40):
        W = _random_w(rng, R, p)
        order, perm = rng.permutation(R), rng.permutation(p)
        q = float(rng.choice([0.1, 0.2, 0.5]))
        for aggregate in (F.aggregate_ebh, F.aggregate_frequency):
            sel = np.asarray(aggregate(W, q))
            np.testing.assert_array_equal(aggregate(W[order], q), sel)
            np.testing.assert_array_equal(aggregate(W[:, perm], q), sel[perm])
            np.testing.assert_array_equal(aggregate(np.concatenate([W, W]), q), sel)
