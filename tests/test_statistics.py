import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import jaxknock.l1 as L
from jaxknock import RESULTS
from jaxknock import statistics as S

N, P = 80, 20  # (80, 40) designs, as in test_l1.py: compilations are shared


def _design(seed=0, binary=False):
    """A design [X, X~] (X~ a noisy copy of X) and a response depending on 4 columns."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P)) + 0.4 * rng.standard_normal((N, 1))
    Xt = 0.5 * X + np.sqrt(0.75) * rng.standard_normal((N, P))
    Xk = np.hstack([X, Xt])
    eta = X[:, :4] @ np.array([1.5, -1.0, 1.0, 0.8]) + 0.2 * Xt[:, 5]
    if binary:
        y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = eta + rng.standard_normal(N)
    return Xk, y


def _swap(Xk, idx):
    Xs = Xk.copy()
    idx = np.asarray(idx)
    Xs[:, idx], Xs[:, idx + P] = Xk[:, idx + P], Xk[:, idx]
    return Xs


def _swapped_batch(Xk):
    """[Xk, Xk with column 2 swapped, Xk with a subset swapped] and the subsets."""
    subset = np.array([0, 3, 7, 11, 19])
    return np.stack([Xk, _swap(Xk, [2]), _swap(Xk, subset)]), [np.array([2]), subset]


def _assert_flip_sign(W, subsets, atol):
    W = np.asarray(W)
    assert np.count_nonzero(W[0]) >= 3  # a statistic that is all zero proves nothing
    for r, S_ in enumerate(subsets, start=1):
        sign = np.ones(P)
        sign[S_] = -1.0
        np.testing.assert_allclose(W[r], sign * W[0], atol=atol)


STATISTICS = {
    "lcd_fixed": lambda Xk, y: S.lcd(Xk, y, lam=0.05, tol=1e-12).value,
    "lcd_cv": lambda Xk, y: S.lcd(Xk, y, folds=3, num_lambdas=15, tol=1e-12).value,
    "lcd_logistic": lambda Xk, y: S.lcd(Xk, y, lam=0.02, loss="logistic", tol=1e-12).value,
    "lsm": lambda Xk, y: S.lsm(Xk, y, num_lambdas=15, tol=1e-12).value,
    "marginal_correlation": S.marginal_correlation,
    "marginal_signed_max": lambda Xk, y: S.marginal_correlation(Xk, y, method="signed_max"),
    "sparse_centroid": S.sparse_centroid,
}
BINARY = {"lcd_logistic", "sparse_centroid"}


@pytest.mark.parametrize("name", list(STATISTICS))
def test_flip_sign(name):
    Xk, y = _design(seed=1, binary=name in BINARY)
    batch, subsets = _swapped_batch(Xk)
    W = STATISTICS[name](batch, y)
    assert W.shape == (3, P)
    _assert_flip_sign(W, subsets, atol=1e-7)


@pytest.mark.parametrize("name", ["lcd_fixed", "lcd_cv", "lsm"])
def test_lasso_statistics_flip_sign_exactly_and_ignore_the_copy_order(name):
    """Each feature's copies are fitted in an order fixed by the data, not by which copy is which, so a
    swap gives the identical fit: W flips sign to the last bit (not only to the solver tolerance)."""
    Xk, y = _design(seed=5)
    batch, subsets = _swapped_batch(Xk)
    W = np.asarray(STATISTICS[name](batch, y))
    _assert_flip_sign(W, subsets, atol=0.0)


@pytest.mark.parametrize("name", ["lcd_fixed", "lcd_cv", "lsm"])
def test_a_knockoff_equal_to_its_original_gets_w_zero(name):
    """s_j = 0 makes X~_j = X_j: swapping them changes nothing, so the flip-sign property forces W_j = 0.
    The solvers broke the tie by column position: the original won (lcd CV on 40 null data sets:
    13 positive, 0 negative, 27 zero; now 40 zero)."""
    Xk, y = _design(seed=6)
    Xk[:, P + 1] = Xk[:, 1]  # feature 1: a null feature correlated with the signals through the shared factor
    Xk[:, P + 0] = Xk[:, 0]  # feature 0: a signal; its tied copies share the credit too
    W = np.asarray(STATISTICS[name](Xk, y))
    assert W[0] == 0.0 and W[1] == 0.0 and np.count_nonzero(W) >= 3


def test_near_identical_copies_do_not_favour_the_original():
    """X~_1 = (1 - 1e-9) X_1 (a knockoff with s_1 ~ 0): a coordinate sweep gave the whole coefficient to
    whichever column it visited first, the original, in every data set. With the order fixed by the data,
    each copy comes first in about half of them."""
    signs = []
    for seed in range(30):
        Xk, y = _design(seed=100 + seed)
        Xk[:, P + 1] = (1 - 1e-9) * Xk[:, 1]
        w = float(STATISTICS["lcd_fixed"](Xk, y)[1])
        signs.append(np.sign(w))
    signs = np.array(signs)
    assert (signs > 0).sum() >= 5 and (signs < 0).sum() >= 5, signs


def test_antisymmetric_combine():
    Z = jnp.array([[3.0, 1.0, 2.0, 1.0, 2.0, 2.0]])
    np.testing.assert_array_equal(S.antisymmetric_combine(Z), [[2.0, -1.0, 0.0]])
    np.testing.assert_array_equal(S.antisymmetric_combine(Z, method="signed_max"), [[3.0, -2.0, 0.0]])
    Zs = jnp.concatenate([Z[:, 3:], Z[:, :3]], axis=1)
    for method in ["difference", "signed_max"]:
        np.testing.assert_array_equal(
            S.antisymmetric_combine(Zs, method=method), -S.antisymmetric_combine(Z, method=method)
        )
    with pytest.raises(ValueError, match="even last dimension"):
        S.antisymmetric_combine(jnp.ones(3))
    with pytest.raises(ValueError, match="method must be one of"):
        S.antisymmetric_combine(Z, method="ratio")


def test_lcd_batch_equals_loop_and_is_deterministic():
    Xk, y = _design(seed=2)
    batch, _ = _swapped_batch(Xk)
    sol = S.lcd(batch, y, lam=0.05, tol=1e-12)
    assert sol.value.shape == (3, P) and sol.result.shape == (3,)
    assert np.all(sol.result == RESULTS.successful)
    for r in range(3):
        coef = L.lasso(batch[r], y, 0.05, tol=1e-12).value
        np.testing.assert_allclose(sol.stats["coef"][r], coef, atol=1e-9)
        np.testing.assert_allclose(sol.value[r], np.abs(coef[:P]) - np.abs(coef[P:]), atol=1e-9)
    again = S.lcd(batch, y, lam=np.full(3, 0.05), tol=1e-12)  # one lambda per design
    np.testing.assert_array_equal(again.value, sol.value)
    with pytest.raises(ValueError, match="broadcast to the batch shape"):
        S.lcd(batch, y, lam=np.full(2, 0.05))


def test_lcd_at_a_fixed_penalty_on_a_design_closed_over_by_a_callers_jit():
    """``jax.jit(lambda lam: lcd(Xk, y, lam=lam))`` with concrete ``Xk``, ``y`` closed over: the finite check
    of the design called its jitted reduction inside the caller's trace and converted a tracer to a bool
    (``TracerBoolConversionError``). Reference: the eager call."""
    Xk, y = _design(seed=2)
    Xk, y = jnp.asarray(Xk), jnp.asarray(y)
    jitted = jax.jit(lambda lam: S.lcd(Xk, y, lam=lam))(0.05)
    eager = S.lcd(Xk, y, lam=0.05)
    np.testing.assert_allclose(np.asarray(jitted.value), np.asarray(eager.value), rtol=1e-9, atol=1e-12)
    assert int(jitted.result) == int(eager.result) == RESULTS.successful


def test_lcd_cv_equals_lasso_cv():
    Xk, y = _design(seed=3)
    batch, _ = _swapped_batch(Xk)
    sol = S.lcd(batch, y, folds=3, num_lambdas=15, tol=1e-12)
    ref = L.lasso_cv(Xk, y, folds=3, num_lambdas=15, tol=1e-12)
    np.testing.assert_allclose(sol.stats["coef"][0], ref.value, atol=1e-9)
    assert float(sol.stats["lam"][0]) == pytest.approx(float(ref.stats["lam"]), rel=1e-12)
    again = S.lcd(batch, y, folds=3, num_lambdas=15, tol=1e-12)
    np.testing.assert_array_equal(again.value, sol.value)  # deterministic


def test_lcd_cv_takes_any_grid_order_and_refuses_a_non_finite_grid(monkeypatch):
    """The default (working-set) CV engine refused a grid out of order, which the classic engine takes, and ran
    an infinite penalty (``lam = inf``, ``max_steps_reached``); now the grid is checked as in the classic
    engine and handed to the engine sorted (the chosen penalty does not depend on the order)."""
    from jaxknock.l1 import working_set

    Xk, y = _design(seed=3)
    grid = np.geomspace(1.0, 0.01, 6)
    seen = []

    def engine(X, y, *, lambdas, **kwargs):  # the grid the engine gets, without running it
        seen.append(np.asarray(lambdas))
        raise StopIteration

    monkeypatch.setattr(working_set, "l1_cv", engine)
    for given in (grid, np.random.default_rng(0).permutation(grid)):
        with pytest.raises(StopIteration):
            S.lcd(Xk, y, folds=3, lambdas=given)
    assert np.all(np.diff(seen[0]) < 0)
    np.testing.assert_array_equal(seen[1], seen[0])
    with pytest.raises(ValueError, match="finite"):
        S.lcd(Xk, y, folds=3, lambdas=np.append(np.inf, grid))


def test_lsm_and_classic_lcd_take_a_new_eps_without_compiling():
    """``eps`` (the depth of the default grid) was a static argument of ``lsm``'s program and of the classic
    CV engine's: a warm call with another ``eps`` compiled the whole statistic again. (Shapes of the flip-sign
    tests.)"""
    from helpers import count_compiles

    Xk, y = _design(seed=4)
    batch, _ = _swapped_batch(Xk)
    runs = [
        lambda e: S.lsm(batch, y, num_lambdas=15, tol=1e-12, eps=e).value,
        lambda e: S.lcd(batch, y, folds=3, num_lambdas=15, tol=1e-12, eps=e, engine="classic").value,
    ]
    for run in runs:
        run(1e-3)
        with count_compiles() as compiles:
            run(1e-2), run(0.05)
        assert [c.split()[1] for c in compiles] == []


def test_lsm_entry_matches_path():
    Xk, y = _design(seed=4)
    batch, _ = _swapped_batch(Xk)
    sol = S.lsm(batch, y, num_lambdas=15, tol=1e-12)
    path = L.lasso_path(Xk, y, num_lambdas=15, tol=1e-12)
    lambdas = np.asarray(path.stats["lam"])
    nonzero = np.asarray(path.value) != 0
    entry = np.array([lambdas[nz].max() if nz.any() else 0.0 for nz in nonzero.T])
    np.testing.assert_allclose(sol.stats["entry"][0], entry, rtol=1e-12)
    W = np.maximum(entry[:P], entry[P:]) * np.sign(entry[:P] - entry[P:])
    np.testing.assert_allclose(sol.value[0], W, rtol=1e-12)
    assert int(np.argmax(sol.value[0])) == 0  # the strongest signal enters first


def test_lsm_runs_the_working_set_engine_with_the_classic_entries(monkeypatch):
    """``lsm`` ran only the classic grid solver (warm-started coordinate descent on 200 penalties): on an
    AR(1) 0.9 design at n = 400, 2p = 200 a warm call took 1.3 s against 0.064 s on the working-set engine
    (session 59). ``engine="auto"`` now runs the engine on concrete input, with the classic default grid, so
    the entry penalties are the classic ones to rounding. (The settings of the tests above: their programs.)"""
    Xk, y = _design(seed=4)
    batch, _ = _swapped_batch(Xk)
    classic = S.lsm(batch, y, num_lambdas=15, tol=1e-12, engine="classic")

    def refuse(*args, **kwargs):
        raise AssertionError("the classic lsm program ran")

    monkeypatch.setattr(S, "_lsm_jit", refuse)
    auto = S.lsm(batch, y, num_lambdas=15, tol=1e-12)
    assert np.all(np.asarray(auto.result) == 0) and np.count_nonzero(np.asarray(auto.value)) > 0
    np.testing.assert_allclose(auto.stats["entry"], classic.stats["entry"], rtol=1e-12)
    np.testing.assert_allclose(auto.value, classic.value, rtol=1e-12)
    with pytest.raises(ValueError, match="intercept"):
        S.lsm(Xk, y, fit_intercept=False, engine="working_set")


def test_marginal_correlation_matches_numpy_and_batches():
    Xk, y = _design(seed=5)
    W = S.marginal_correlation(Xk, y)
    r = np.array([np.corrcoef(Xk[:, k], y)[0, 1] for k in range(2 * P)])
    np.testing.assert_allclose(W, np.abs(r[:P]) - np.abs(r[P:]), atol=1e-12)
    batch = np.stack([np.stack([Xk, Xk[::-1]]), np.stack([Xk * 2, Xk])])  # (2, 2, n, 2p)
    Wb = S.marginal_correlation(batch, y)
    assert Wb.shape == (2, 2, P)
    np.testing.assert_allclose(Wb[1, 0], W, atol=1e-12)
    jitted = jax.jit(lambda A: S.marginal_correlation(A, y))(Xk)
    np.testing.assert_allclose(jitted, W, atol=1e-12)


def test_sparse_centroid_matches_l0_problem():
    Xk, y = _design(seed=6, binary=True)
    W = np.asarray(S.sparse_centroid(Xk, 2 * y - 1))  # {-1, 1} labels work too
    pos, neg = Xk[y == 1], Xk[y == 0]
    Z = np.zeros(2 * P)
    for k in range(2 * P):
        # The l0 problem keeps theta+_k != theta-_k iff lam < cost(shared) - cost(separate).
        separate = pos[:, k].var() + neg[:, k].var()

        def shared_cost(t, k=k):
            return np.mean((pos[:, k] - t) ** 2) + np.mean((neg[:, k] - t) ** 2)

        shared = minimize_scalar(shared_cost, tol=1e-12).fun
        Z[k] = shared - separate
    np.testing.assert_allclose(W, Z[:P] - Z[P:], atol=1e-8)


def test_bad_inputs():
    Xk, y = _design(seed=7)
    with pytest.raises(ValueError, match="2p columns"):
        S.marginal_correlation(Xk[:, :-1], y)
    with pytest.raises(ValueError, match="y has 79 entries but Xk has 80 rows"):
        S.lcd(Xk, y[:-1], lam=0.1)
    with pytest.raises(ValueError, match="y is constant"):
        S.lcd(Xk, np.ones(N), lam=0.1)
    Xn = Xk.copy()
    Xn[4, 4] = np.nan
    with pytest.raises(ValueError, match="Xk contains 1 non-finite"):
        S.lsm(Xn, y)
    with pytest.raises(ValueError, match="binary labels"):
        S.sparse_centroid(Xk, y)
    with pytest.raises(ValueError, match="single class"):
        S.sparse_centroid(Xk, np.zeros(N))
    with pytest.raises(ValueError, match="decreasing order"):
        S.lsm(Xk, y, lambdas=[0.1, 0.2])
    with pytest.raises(ValueError, match="lam must be positive"):
        S.lcd(Xk, y, lam=-1.0)
    with pytest.raises(ValueError, match="shape \\(n, 2p\\)"):
        S.lcd(np.ones(4), np.ones(4))


def test_an_unknown_loss_is_named_not_blamed_on_y():
    """``loss="huber"`` with a continuous ``y`` failed with "y must hold binary labels" (the response check
    read every loss but ``"squared"`` as the logistic one) instead of naming ``loss``."""
    Xk, y = _design(seed=7)
    for fn in (lambda **k: S.lcd(Xk, y, lam=0.1, **k), lambda **k: S.lsm(Xk, y, **k)):
        with pytest.raises(ValueError, match=r"loss must be one of \('squared', 'logistic'\), got 'huber'"):
            fn(loss="huber")


def test_float64_host_design_with_an_offset_gives_the_centred_statistics():
    """With x64 off a float64 NumPy ``Xk`` was cast to float32 before it was centred: on ``Xk + 1e7`` the
    correlation statistic moved by 0.04 (of 0.65) and the lasso coefficient difference by 0.1 (of 0.82).
    Every statistic here has an intercept (is invariant to a shift of the columns), so the means now come
    out in float64 on the host first, as in ``lasso``."""
    rng = np.random.default_rng(0)
    Xk = rng.standard_normal((60, 4))
    y = Xk[:, 0] + rng.standard_normal(60)
    with jax.enable_x64(False):
        # the shared input step (_prepare) does it for every statistic; the lasso ones compile a float32
        # program each (~10 s), so the correlation stands for them here
        ref, shifted = (np.asarray(S.marginal_correlation(A, y)) for A in (Xk, Xk + 1e7))
    assert ref.dtype == np.float32
    np.testing.assert_allclose(shifted, ref, atol=2e-6)


def test_float64_response_with_a_large_mean_is_shifted_before_the_cast_to_a_float32_design():
    """With x64 on, a float32 ``Xk`` and a float64 ``y = 1e8 + e`` (``e`` of spread ~10): ``y`` was cast to
    float32 (spacing 8) before its mean came out, and the statistics were computed on a few levels of ``e``
    (here the first correlation statistic 0.16 against 0.56; on a 300 x 40 design the cross-validated ``lcd``
    was off by 0.32 of 1.9 with every fit ``successful``).
    The part of the mean beyond ``2^7`` spreads now comes out in float64 first, eagerly and under ``jit``;
    an ordinary ``y`` is cast as it was, to the bit."""
    rng = np.random.default_rng(1)
    Xk = rng.standard_normal((60, 4))  # the shape of the tests around: the programs are shared
    y = 2 * Xk[:, 0] - Xk[:, 1] + 2 * rng.standard_normal(60)
    X32 = jnp.asarray(Xk, jnp.float32)
    ref = np.asarray(S.marginal_correlation(X32, y.astype(np.float32)))
    np.testing.assert_array_equal(np.asarray(S.marginal_correlation(X32, y)), ref)  # ordinary: the same bits
    jitted = jax.jit(lambda b: S.marginal_correlation(X32, b))
    for b in (y + 1e8, jnp.asarray(y + 1e8)):
        np.testing.assert_allclose(np.asarray(S.marginal_correlation(X32, b)), ref, atol=2e-6)
        np.testing.assert_allclose(np.asarray(jitted(b)), ref, atol=2e-6)
    np.testing.assert_array_equal(np.asarray(jitted(y)), ref)


def test_cross_validated_lcd_of_a_float64_response_with_a_large_mean():
    """In float64, ``y = 1e15 + e`` (spacing 0.125, ``e`` of spread ~5: 40 levels) reached the lasso whole, and
    its rounding floors, relative to ``max |y|``, put the cross-validated penalty at ``9.0``, above every
    feature: ``W = 0`` with ``result`` ``successful``. The mean beyond ``2^7`` spreads now comes out first
    (exactly); the statistics are those of the centred response to its quantisation."""
    Xk, y = _design(seed=2)
    ref = S.lcd(Xk, y, folds=3, num_lambdas=15, tol=1e-12)  # the settings of lcd_cv above: shared programs
    sol = S.lcd(Xk, y + 1e15, folds=3, num_lambdas=15, tol=1e-12)
    assert int(sol.result) == 0
    np.testing.assert_allclose(sol.stats["lam"], ref.stats["lam"], rtol=0.05)
    np.testing.assert_allclose(sol.value, ref.value, atol=0.05)
    assert np.all(np.asarray(ref.value)[:4] > 0.3)


def test_marginal_correlation_does_not_depend_on_the_units_of_a_column_or_of_y():
    """Pearson's correlation is scale-free, but its sums of squares are not: in float32 a column in units of
    1e20 (squares overflow) or 1e-20 (squares flush to zero), or such a y, scored |r| = 0 (W moved by 0.34);
    float64 failed the same way at 1e160. Each is now scaled by an exact power of two first."""
    rng = np.random.default_rng(1)
    Xk = rng.standard_normal((60, 4))  # the shape of the test above: the float32 program is shared
    y = 2 * Xk[:, 0] - Xk[:, 1] + rng.standard_normal(60)
    big_small = Xk * np.array([1e20, 1e-20, 1.0, 1e-20])
    with jax.enable_x64(False):
        ref = np.asarray(S.marginal_correlation(Xk.astype(np.float32), y.astype(np.float32)))
        for A, b in ((big_small, y), (Xk, 1e20 * y), (Xk, 1e-20 * y)):
            W = np.asarray(S.marginal_correlation(A.astype(np.float32), b.astype(np.float32)))
            np.testing.assert_allclose(W, ref, atol=1e-6)
    W = np.asarray(S.marginal_correlation(Xk * np.array([1e160, 1e-160, 1.0, 1.0]), y))
    np.testing.assert_allclose(W, np.asarray(S.marginal_correlation(Xk, y)), atol=1e-14)


def test_sparse_centroid_keeps_the_digits_of_a_column_in_extreme_units():
    """Z_j = (mean+ - mean-)^2 / 2 is in squared units of column j: in float32 a pair (X_j, X~_j) in units of
    2^65 ~ 4e19 overflowed (inf - inf: W NaN, or inf where W = 1e38 is a float32), and one in units of 2^-62 ~
    2e-19 flushed the knockoff's Z to zero (W off in the 4th digit). Scaled by an exact power of two per pair,
    W_j is 4^k times the unit-scale W_j to the bit where it is a normal float32, else the signed inf (or 0)."""
    rng = np.random.default_rng(1)
    Xk = rng.standard_normal((60, 6))
    y = rng.random(60) < 0.5
    Xk[:, :2] += np.array([1.5, -1.0]) * y[:, None]
    ref = np.asarray(S.sparse_centroid(Xk.astype(np.float32), y))
    k = np.array([-62, 65, 80])
    W = np.asarray(S.sparse_centroid((Xk * np.exp2(np.tile(k, 2))).astype(np.float32), y))
    with np.errstate(over="ignore"):
        want = np.ldexp(ref, 2 * k)
    np.testing.assert_array_equal(W[:2], want[:2])
    assert np.isinf(want[2]) and W[2] == want[2]  # beyond float32: the signed overflow, not NaN


@pytest.mark.parametrize("name", ["lcd_fixed", "lcd_cv", "lsm"])
def test_lasso_statistics_do_not_depend_on_the_units_of_y(name):
    """lcd / lsm called directly read y in its own units: at 1e-16 lambda_max fell under the default grid's
    absolute floor (1e-15), so lsm's and the cross-validated lcd's W were all zero ("successful"); at 1e160 the
    sums of squares overflowed (every W zero or NaN). The fits now run on the unit scale: W scales with y."""
    Xk, y = _design(seed=5)
    fn = STATISTICS[name]
    ref = np.asarray(fn(Xk, y))
    assert np.count_nonzero(ref) >= 3
    for c in (1e-16, 1e160):
        lam = c * 0.05
        W = S.lcd(Xk, c * y, lam=lam, tol=1e-12).value if name == "lcd_fixed" else fn(Xk, c * y)
        np.testing.assert_allclose(np.asarray(W) / c, ref, rtol=1e-6, atol=1e-9)


def test_statistics_on_zero_rows_name_xk():
    with pytest.raises(ValueError, match="Xk needs at least 2 rows"):
        S.marginal_correlation(np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError, match="Xk needs at least 2 rows"):
        S.sparse_centroid(np.zeros((1, 2)), np.zeros(1))


def test_a_nan_label_under_jit_is_reported_not_read_as_class_zero():
    """Under jit y cannot be inspected. `y > 0` turned a NaN label into class 0 (a successful, plausible
    logistic fit) and the marginal correlation read a NaN as 'no correlation' (W = 0)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6))
    Xk = np.c_[X, X + rng.standard_normal(X.shape)]
    labels = (X[:, 0] + 0.5 * rng.standard_normal(120) > 0).astype(float)
    bad = labels.copy()
    bad[7] = np.nan
    for fit in (
        jax.jit(lambda Xk, y: S.lcd(Xk, y, loss="logistic").result),
        jax.jit(lambda Xk, y: S.lcd(Xk, y, lam=0.05, loss="logistic").result),
        jax.jit(lambda Xk, y: L.lasso_path(Xk, y, loss="logistic", num_lambdas=3).result.max()),
    ):
        assert int(fit(Xk, labels)) == RESULTS.successful
        assert int(fit(Xk, bad)) != RESULTS.successful
    corr = jax.jit(S.marginal_correlation)
    assert np.all(np.isfinite(np.asarray(corr(Xk, labels))))
    assert np.all(np.isnan(np.asarray(corr(Xk, bad))))
    assert not np.any(np.isfinite(np.asarray(jax.jit(S.sparse_centroid)(Xk, bad))))


def test_lcd_honours_explicit_solver_screen_and_max_steps(monkeypatch):
    # lcd's engine="auto" ran the working-set engine even with solver="fista",
    # screen=False (and dropped max_steps=3: "successful"); lasso_cv does not.
    rng = np.random.default_rng(5)
    Xk = rng.standard_normal((80, 20))
    y = Xk[:, :3].sum(1) + rng.standard_normal(80)
    from jaxknock.l1 import working_set

    calls = []
    real = working_set.l1_cv

    def spy(X, *args, **kwargs):
        calls.append((X.dtype, kwargs.get("max_steps")))
        return real(X, *args, **kwargs)

    monkeypatch.setattr(working_set, "l1_cv", spy)
    sol = S.lcd(Xk, y, solver="fista", screen=False, max_steps=3, num_lambdas=10)
    ref = L.lasso_cv(Xk, y, solver="fista", screen=False, max_steps=3, num_lambdas=10)
    assert not calls
    assert int(sol.result) == int(ref.result) == RESULTS.max_steps_reached
    S.lcd(Xk, y, max_steps=7, num_lambdas=10)  # the default engine gets the cap
    S.lcd(Xk.astype(np.float32), y.astype(np.float32), num_lambdas=10)  # float32 too (docstring)
    assert calls == [(np.float64, 7), (np.float32, 10_000)]


def test_lcd_refuses_a_boolean_or_text_lam():
    """``lcd(lam=True)`` ran at the penalty 1.0 and ``lam="0.1"`` at 0.1: ``jnp.asarray`` converted them before
    the check (the filter checks ``lam`` itself; ``lcd`` called directly did not)."""
    Xk, y = _design(seed=3)
    for lam in (True, "0.1"):
        with pytest.raises(TypeError, match="lam must be a real number"):
            S.lcd(Xk, y, lam=lam)


def test_lcd_at_a_given_lam_refuses_the_cross_validations_settings():
    """With ``lam`` given, ``lambdas``, ``patience``, ``folds`` and ``engine="working_set"`` were silently ignored
    (the fit at ``lam`` came back `successful` whatever they said)."""
    Xk, y = _design(seed=3)
    for kw, name in (
        (dict(lambdas=[0.2, 0.1]), "lambdas"),
        (dict(patience=3), "patience"),
        (dict(folds=3), "folds"),
        (dict(folds=np.arange(N) % 2), "folds"),
        (dict(engine="working_set"), "engine"),
    ):
        with pytest.raises(ValueError, match=name):
            S.lcd(Xk, y, lam=0.1, **kw)


def test_lcd_working_set_engine_checks_patience_and_grid():
    """The working-set CV engine (the default) took ``patience`` and ``num_lambdas`` unchecked:
    ``patience=0`` / ``-1`` / ``2.5`` / ``True`` and ``num_lambdas=2.5`` ran, and a 0-d array failed with
    JAX's "Non-hashable static arguments"; the classic engine rejected them all."""
    Xk, y = _design(seed=3)
    for bad in (0, -1, 2.5, True, np.array([3])):  # a 0-d integer array is an integer (``_checks.is_int``)
        with pytest.raises(ValueError, match="patience must be None or a positive integer"):
            S.lcd(Xk, y, patience=bad)
    with pytest.raises(ValueError, match="num_lambdas must be a positive integer, got 2.5"):
        S.lcd(Xk, y, num_lambdas=2.5)
