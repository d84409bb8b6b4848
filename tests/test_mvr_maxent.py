"""MVR and maximum-entropy S-vectors (jaxknock.svector.mrc): cvxpy + Clarabel references, certificates, m knockoffs."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import hard_correlations, near_copy_correlation

import jaxknock
from jaxknock import RESULTS
from jaxknock.svector import mrc

P = 20


def wishart_correlation(seed, p, n_factor=3):
    rng = np.random.default_rng(seed)
    S = np.cov(rng.standard_normal((n_factor * p, p)).T)
    d = np.sqrt(np.diag(S))
    return S / np.outer(d, d)


C20 = wishart_correlation(0, P)


def cvx_optimum(C, kind, m):
    """Tight cvxpy + Clarabel optimum of the MVR / ME objective (tr_inv via matrix_frac, log_det)."""
    cp = pytest.importorskip("cvxpy")
    p = C.shape[0]
    s = cp.Variable(p)
    A = (m + 1) / m * C - cp.diag(s)
    if kind == "mvr":
        obj = cp.matrix_frac(np.eye(p), A) / m + m * cp.sum(cp.inv_pos(s))
    else:
        obj = -cp.log_det(A) - m * cp.sum(cp.log(s))
    prob = cp.Problem(cp.Minimize(obj))
    # the tightest tolerance Clarabel certifies: cvxpy 1.9 + Clarabel 0.11 report ME with m = 2
    # at 1e-9 as "optimal_inaccurate" (a warning), at 1e-8 as "optimal"
    for tol in (1e-9, 1e-8):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Solution may be inaccurate", category=UserWarning)
            prob.solve(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
        if prob.status == "optimal":
            return prob.value, s.value
    raise AssertionError(f"the cvxpy + Clarabel reference did not solve to optimality: {prob.status}")


SOLVERS = {"mvr": jaxknock.mvr, "maxent": jaxknock.maxent}


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
@pytest.mark.parametrize("m", [1, 2])
def test_matches_cvxpy(kind, m):
    f_ref, s_ref = cvx_optimum(C20, kind, m)
    for method in mrc.SOLVER_METHODS:
        sol = SOLVERS[kind](jnp.asarray(C20), num_knockoffs=m, tol=1e-9, method=method)
        assert int(sol.result) == RESULTS.successful
        f = float(sol.stats["objective"])
        assert abs(f - f_ref) <= 1e-5 * abs(f_ref)
        np.testing.assert_allclose(np.asarray(sol.value), s_ref, atol=1e-4)
        # the certificate bounds the true suboptimality (up to the reference's own accuracy)
        assert f - f_ref <= float(sol.stats["gap"]) + 1e-7 * abs(f_ref)
        # feasibility of the m-knockoff constraint (m+1)/m C - diag(s) > 0
        assert np.linalg.eigvalsh((m + 1) / m * C20 - np.diag(np.asarray(sol.value)))[0] > 0
        assert float(sol.stats["min_eig"]) > 0
    # the m = 1 solution is not feasible-optimal for m = 2: s shrinks with m
    if m == 2:
        s1 = np.asarray(SOLVERS[kind](jnp.asarray(C20), tol=1e-9).value)
        assert np.mean(np.asarray(sol.value)) < np.mean(s1)


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
def test_permutation_equivariance(kind):
    # S(P C P^T) = P S(C): the blocked sweeps visit the coordinates in index order, the optimum does not depend on it
    perm = np.random.default_rng(1).permutation(P)
    sol = SOLVERS[kind](jnp.asarray(C20), tol=1e-9)
    permuted = SOLVERS[kind](jnp.asarray(C20[np.ix_(perm, perm)]), tol=1e-9)
    assert int(sol.result) == int(permuted.result) == RESULTS.successful
    np.testing.assert_allclose(np.asarray(permuted.value), np.asarray(sol.value)[perm], atol=1e-5)
    f, g = float(sol.stats["objective"]), float(permuted.stats["objective"])
    assert abs(f - g) <= float(sol.stats["gap"]) + float(permuted.stats["gap"])


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
def test_objective_ignores_block_padding(kind):
    """p not a multiple of the block: the padded coordinates (s = 1) added m each to the MVR
    objective (p = 5, Sigma = I: 11 instead of 10; p = 7, m = 3: 31 instead of 28), which also
    loosened the stopping test gap <= tol |f|."""
    for p in (4, 5, 7):
        for m in (1, 3):
            sol = SOLVERS[kind](jnp.eye(p), num_knockoffs=m, method="coordinate")
            # s = 1; MVR: tr((c - 1)^-1 I) / m + m p = p (1 + m); ME: -log det((c - 1) I) = p log m
            closed = p * (1 + m) if kind == "mvr" else p * np.log(m)
            np.testing.assert_allclose(float(sol.stats["objective"]), closed, rtol=1e-9, atol=1e-9)
    for seed, p, block in [(1, 10, 4), (2, 21, None)]:
        C = jnp.asarray(wishart_correlation(seed, p))
        for m in (1, 2):
            tol = 1e-8
            sol = SOLVERS[kind](C, num_knockoffs=m, block_size=block, tol=tol, method="coordinate")
            assert int(sol.result) == RESULTS.successful
            f, gap = mrc.mrc_objective_and_gap(C, sol.value, method=kind, num_knockoffs=m)
            np.testing.assert_allclose(float(sol.stats["objective"]), float(f), rtol=1e-10)
            np.testing.assert_allclose(float(sol.stats["gap"]), float(gap), rtol=1e-6, atol=1e-12)
            assert float(gap) <= tol * max(abs(float(f)), 1.0)


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
def test_certificate_upper_bounds_suboptimality(kind):
    """At non-optimal feasible points the gap is >= f(s) - f*, and not vacuous (within 100x)."""
    f_ref, s_ref = cvx_optimum(C20, kind, 1)
    for scale in (0.5, 0.9, 0.99):
        for tilt in (0.0, 0.2):
            s = s_ref * scale * (1 + tilt * np.linspace(-1, 1, P))
            f, gap = mrc.mrc_objective_and_gap(jnp.asarray(C20), jnp.asarray(s), method=kind)
            sub = float(f) - f_ref
            assert sub > 0
            assert float(gap) >= sub - 1e-8 * abs(f_ref)
            assert float(gap) <= 100 * sub
    # an infeasible point has no certificate
    f, gap = mrc.mrc_objective_and_gap(jnp.asarray(C20), jnp.full(P, 2.5), method=kind)
    assert np.isinf(float(f)) and np.isinf(float(gap))
    # a non-symmetric Sigma: eager calls raise; under jit it gave a finite (f, gap), now NaN
    A = np.array(C20)
    A[0, 1] += 0.3
    f, gap = jax.jit(lambda S, s: mrc.mrc_objective_and_gap(S, s, method=kind))(A, s_ref * 0.9)
    assert np.isnan(float(f)) and np.isnan(float(gap))
    with pytest.raises(ValueError, match="s must be a 1-D vector"):
        mrc.mrc_objective_and_gap(jnp.asarray(C20), np.diag(s_ref), method=kind)
    with pytest.raises(ValueError, match="s has length"):
        mrc.mrc_objective_and_gap(jnp.asarray(C20), s_ref[:3], method=kind)
    # a NaN s was reported (inf, inf), as if it were a feasible question with an infeasible answer
    with pytest.raises(ValueError, match="s contains 1 non-finite"):
        mrc.mrc_objective_and_gap(jnp.asarray(C20), np.r_[np.nan, s_ref[1:]], method=kind)


def test_closed_forms_and_covariance_scale():
    # independent features: s = 1 for both objectives (any m: (m+1)/m - s vs s^m)
    for fn in SOLVERS.values():
        np.testing.assert_allclose(np.asarray(fn(jnp.eye(P)).value), 1.0, atol=1e-6)
    # ME with m knockoffs on I: maximise log((m+1)/m - s) + m log s -> s = 1
    np.testing.assert_allclose(np.asarray(jaxknock.maxent(jnp.eye(P), num_knockoffs=3).value), 1.0, atol=1e-6)
    # covariance scale: s scales with diag(Sigma)
    dsc = np.linspace(0.5, 3.0, P)
    Sig = C20 * np.sqrt(np.outer(dsc, dsc))
    a = np.asarray(jaxknock.maxent(jnp.asarray(Sig)).value)
    b = np.asarray(jaxknock.maxent(jnp.asarray(C20)).value)
    np.testing.assert_allclose(a, b * dsc, rtol=1e-6)


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
def test_jit_and_vmap(kind):
    fn = SOLVERS[kind]
    Cs = jnp.stack([jnp.asarray(wishart_correlation(s, P)) for s in range(3)])
    batch = fn(Cs)
    loop = [fn(C) for C in Cs]
    for i, sol in enumerate(loop):
        np.testing.assert_allclose(np.asarray(batch.value[i]), np.asarray(sol.value), rtol=1e-10)
        assert int(batch.result[i]) == int(sol.result) == RESULTS.successful
    jitted = jax.jit(lambda C: fn(C).value)(Cs[0])
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(loop[0].value), rtol=1e-10)


def test_hard_matrices_feasible_certified_or_flagged():
    """Ill-conditioned inputs (the SDP tests' family, p = 10, one vmapped batch each): feasible, honest codes."""
    Cs = np.stack([C for _, C in hard_correlations(sizes=(10,))])
    for fn in SOLVERS.values():
        sol = fn(jnp.asarray(Cs), max_steps=300)
        codes = np.asarray(sol.result)
        s = np.asarray(sol.value)
        assert np.all(np.isfinite(s)) and np.all(s > 0)
        for i, C in enumerate(Cs):
            ok = codes[i] == RESULTS.successful
            assert codes[i] in (RESULTS.successful, RESULTS.stagnated, RESULTS.max_steps_reached)
            # feasible to rounding: the Cholesky factorisation of 2C - diag(s) succeeds
            np.linalg.cholesky(2 * C - np.diag(s[i]))
            if ok:
                gap, f = float(sol.stats["gap"][i]), float(sol.stats["objective"][i])
                assert gap <= 1e-6 * max(abs(f), 1.0)


def _two_by_two_objective(kind, r, s1, s2, m):
    """``f(s)`` for ``C = [[1, r], [r, 1]]`` in exact rational arithmetic (``log`` of the exact determinant)."""
    import math
    from fractions import Fraction

    c, r, s1, s2 = Fraction(m + 1, m), Fraction(r), Fraction(s1), Fraction(s2)
    a, b = c - s1, c - s2
    det = a * b - c * c * r * r
    assert det > 0 and s1 > 0 and s2 > 0
    if kind == "mvr":
        return float((a + b) / det / m + m * (1 / s1 + 1 / s2))
    return -math.log(det) - m * (math.log(s1) + math.log(s2))


@pytest.mark.parametrize("k", [1, 4])
def test_successful_means_optimal_at_the_rounding_floor(k):
    """``lambda_min(C)`` a few ulps (``r = 1 - k 2^-53``, valid: ``C`` factorises): ``H`` is the inverse of
    the rounded ``A`` and the gap formula certified another matrix. mvr / maxent said ``successful`` 2-7%
    above the optimum (exact arithmetic), the group MVR with a negative gap. Now: optimal or not successful."""
    from scipy.optimize import minimize_scalar

    r = 1.0 - k * 2.0**-53
    C = np.array([[1.0, r], [r, 1.0]])
    for kind, fn in SOLVERS.items():
        sol = fn(C)
        s = np.asarray(sol.value)
        f = _two_by_two_objective(kind, r, s[0], s[1], 1)
        bound = 2.0 * (1.0 - r)  # the symmetric optimum lies in (0, c (1 - r)); 1 - r is exact
        opt = minimize_scalar(
            lambda u: _two_by_two_objective(kind, r, u * bound, u * bound, 1),
            bounds=(1e-6, 1 - 1e-9),
            method="bounded",
            options={"xatol": 1e-12},
        ).fun
        assert int(sol.result) != RESULTS.successful or f - opt <= 1e-6 * max(abs(opt), 1.0), (kind, f, opt)
        assert float(sol.stats["gap"]) >= 0
    g = jaxknock.group_s_matrix(C, [0, 1], method="mvr")
    assert float(g.stats["gap"]) >= 0  # was -0.59 (k = 1) with successful
    if k == 1:
        assert int(sol.result) != RESULTS.successful and int(g.result) != RESULTS.successful


def test_nonconvergence_and_bad_input():
    sol = jaxknock.maxent(jnp.asarray(C20), max_steps=1)
    assert int(sol.result) == RESULTS.max_steps_reached
    assert np.isfinite(float(sol.stats["gap"])) and float(sol.stats["gap"]) > 0
    with pytest.raises(RuntimeError):
        jaxknock.maxent(jnp.asarray(C20), max_steps=1, throw=True)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_knockoffs"):
            jaxknock.mvr(jnp.eye(3), num_knockoffs=bad)
    for bad in (1.5, "2", True):
        with pytest.raises(TypeError, match="num_knockoffs"):
            jaxknock.maxent(jnp.eye(3), num_knockoffs=bad)
    with pytest.raises(ValueError, match="method must be one of"):
        mrc.mrc_objective_and_gap(jnp.eye(3), jnp.ones(3), method="sdp")
    with pytest.raises(ValueError, match="Sigma"):
        jaxknock.mvr(jnp.ones((3, 4)))
    with pytest.raises(TypeError, match="Sigma"):
        jaxknock.mvr(jnp.eye(3, dtype=jnp.float32))
    # under jit a NaN input is never reported successful
    out = jax.jit(lambda C: jaxknock.maxent(C).result)(jnp.full((3, 3), jnp.nan))
    assert int(out) != RESULTS.successful


# --------------------------------------------------------------------------
# pipeline, CLI, scikit-learn
# --------------------------------------------------------------------------


def _regression(seed=0, n=150, p=P):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)) @ np.linalg.cholesky(C20).T
    beta = np.zeros(p)
    beta[:5] = 1.0
    return X, X @ beta + rng.standard_normal(n)


def test_knockoff_filter_mvr_maxent_and_known_sigma():
    X, y = _regression()
    key = jax.random.key(0)
    sel = jaxknock.knockoff_filter(key, X, y, s_method="maxent", statistic="correlation")
    Xs = (X - X.mean(0)) / X.std(0)
    C_lw = jaxknock.to_correlation(jaxknock.ledoit_wolf(jnp.asarray(Xs))[0])
    np.testing.assert_allclose(
        np.asarray(sel.s_solution.value), np.asarray(jaxknock.maxent(C_lw, tol=1e-4).value), rtol=1e-8
    )
    # a known Sigma skips estimation: s is the solution on that matrix (scaled: s on the correlation scale)
    Sig = 4.0 * C20
    sel = jaxknock.knockoff_filter(key, X * 2.0, y, s_method="mvr", statistic="correlation", Sigma=Sig, mu=np.zeros(P))
    np.testing.assert_allclose(
        np.asarray(sel.s_solution.value), np.asarray(jaxknock.mvr(jnp.asarray(C20), tol=1e-4).value), rtol=1e-8
    )
    with pytest.raises(ValueError, match="s_method must be one of .*'mvr', 'maxent'"):
        jaxknock.knockoff_filter(key, X, y, s_method="mmi")
    with pytest.raises(ValueError, match="Sigma must have shape"):
        jaxknock.knockoff_filter(key, X, y, s_method="mvr", Sigma=np.eye(3))
    with pytest.raises(ValueError, match="mu"):
        jaxknock.knockoff_filter(key, X, y, s_method="mvr", mu=np.zeros(P))


def test_cli_and_selector_accept_mvr_maxent():
    from jaxknock.cli.parser import build_parser

    args = build_parser().parse_args(["select", "data.csv", "--target", "y", "--method", "maxent"])
    assert args.method == "maxent"
    sk = pytest.importorskip("sklearn")
    assert sk
    from jaxknock.sklearn import KnockoffSelector

    X, y = _regression()
    sel = KnockoffSelector(method="mvr", statistic="correlation", random_state=0).fit(X, y)
    assert sel.get_support().shape == (P,)
    with pytest.raises(ValueError, match="mvr"):
        KnockoffSelector(method="bogus").fit(X, y)


# --------------------------------------------------------------------------
# factor models
# --------------------------------------------------------------------------


def test_factor_equals_dense():
    m = 2  # the general case (m = 1 is the dense tests' default); one compile per solver keeps it fast
    rng = np.random.default_rng(1)
    p, k = P, 3  # p = P: the dense solves reuse the programs compiled for C20 (same shape and block)
    d = rng.uniform(0.3, 1.0, p) * rng.uniform(0.5, 2.0)
    U = rng.standard_normal((p, k)) / np.sqrt(k)
    S = np.diag(d) + U @ U.T
    model = jaxknock.FactorModel(jnp.asarray(d), jnp.asarray(U))
    for fd, ff in ((jaxknock.mvr, jaxknock.mvr_factor), (jaxknock.maxent, jaxknock.maxent_factor)):
        a = fd(jnp.asarray(S), num_knockoffs=m, tol=1e-11)
        b = ff(model, num_knockoffs=m, tol=1e-11)
        assert int(a.result) == int(b.result) == RESULTS.successful
        assert bool(b.stats["feasible"])
        fa, fb = float(a.stats["objective"]), float(b.stats["objective"])
        assert abs(fa - fb) <= 1e-9 * abs(fa)
        np.testing.assert_allclose(np.asarray(b.value), np.asarray(a.value), atol=1e-4)
        # the factor certificate equals the dense one at the factor solution
        f2, g2 = mrc.mrc_objective_and_gap(
            jnp.asarray(S), b.value, method="mvr" if fd is jaxknock.mvr else "maxent", num_knockoffs=m
        )
        np.testing.assert_allclose(float(f2), fb, rtol=1e-10)
        np.testing.assert_allclose(float(g2), float(b.stats["gap"]), rtol=1e-4, atol=1e-12)
    # a batch of models is vmapped and equals the loop
    batch = jaxknock.FactorModel(jnp.stack([model.d, 2 * model.d]), jnp.stack([model.U, model.U]))
    sb = jaxknock.maxent_factor(batch, num_knockoffs=m)
    s1 = jaxknock.maxent_factor(jaxknock.FactorModel(2 * model.d, model.U), num_knockoffs=m)
    np.testing.assert_allclose(np.asarray(sb.value[1]), np.asarray(s1.value), rtol=1e-10)


def test_equicorrelated_num_knockoffs():
    lmin = np.linalg.eigvalsh(C20)[0]
    s1 = jaxknock.equicorrelated(jnp.asarray(C20))
    np.testing.assert_array_equal(
        np.asarray(s1.value), np.asarray(jaxknock.equicorrelated(jnp.asarray(C20), num_knockoffs=1).value)
    )
    np.testing.assert_allclose(np.asarray(s1.value), min(1.0, 2 * lmin), rtol=1e-8)
    s3 = jaxknock.equicorrelated(jnp.asarray(C20), num_knockoffs=3).value
    np.testing.assert_allclose(np.asarray(s3), min(1.0, 4 / 3 * lmin), rtol=1e-8)
    with pytest.raises(ValueError, match="num_knockoffs"):
        jaxknock.equicorrelated(jnp.asarray(C20), num_knockoffs=0)


def _raw_block_correlation(seed, p, n):
    """The raw sample correlation of ``n`` rows of a block law (blocks of 20 at 0.5): near singular for ``n ~ p``."""
    rng = np.random.default_rng(seed)
    B = np.full((20, 20), 0.5) + 0.5 * np.eye(20)
    X = (rng.standard_normal((n, p // 20, 20)) @ np.linalg.cholesky(B).T).reshape(n, p)
    return np.corrcoef(X, rowvar=False)


def test_maxent_default_certifies_a_raw_sample_correlation():
    """A raw sample correlation from n = 1.04 p rows (lambda_min ~ 4e-4): the coordinate descent (the
    default until session 52) needs 570 sweeps and stopped ``max_steps_reached`` at its former budget of
    500; the Newton default certifies it in a few steps, at an objective no worse than the sweeps'."""
    C = _raw_block_correlation(1, 100, 104)
    sol = jaxknock.maxent(C)
    assert RESULTS(int(sol.result)) == RESULTS.successful
    assert int(sol.stats["num_steps"]) <= 30
    coord = jaxknock.maxent(C, method="coordinate")
    assert RESULTS(int(coord.result)) == RESULTS.successful
    assert int(coord.stats["num_steps"]) > 500
    assert float(sol.stats["objective"]) <= float(coord.stats["objective"]) + float(sol.stats["gap"])
    assert RESULTS(int(jaxknock.maxent(C, max_steps=500, method="coordinate").result)) == RESULTS.max_steps_reached


@pytest.mark.parametrize("kind", ["mvr", "maxent"])
def test_newton_matches_cvxpy_on_a_near_singular_sample_correlation(kind):
    """p = 20, n = 22 (lambda_min(C) 3e-3; Clarabel reports MVR at p = 40, n = 42 "optimal_inaccurate"
    and takes ~30 s at p = 40): the Newton default against Clarabel, m = 1 and 2."""
    C = _raw_block_correlation(3, 20, 22)
    for m in (1, 2):
        f_ref, _ = cvx_optimum(C, kind, m)
        sol = SOLVERS[kind](C, num_knockoffs=m, tol=1e-9)
        assert RESULTS(int(sol.result)) == RESULTS.successful
        assert int(sol.stats["num_steps"]) <= 30
        f = float(sol.stats["objective"])
        assert abs(f - f_ref) <= 1e-6 * abs(f_ref)
        assert f - f_ref <= float(sol.stats["gap"]) + 1e-7 * abs(f_ref)
        np.linalg.cholesky((m + 1) / m * C - np.diag(np.asarray(sol.value)))


def test_newton_step_is_a_descent_step_and_stays_feasible():
    """One Newton step from the solvers' start lowers f and keeps c C - diag(s) > 0 and s > 0; the shared
    line search refuses a non-descent slope and a trial point that is never feasible."""
    from jaxknock.svector import mrc_newton

    C = jnp.asarray(_raw_block_correlation(3, 40, 42))
    m = jnp.asarray(1.0)
    # m = 1: c = 2, A = 2C - diag(s), from s_j = min(1, lambda_min(C)) as the solvers start
    C2 = 2.0 * C
    s0 = jnp.full(40, min(1.0, float(np.linalg.eigvalsh(np.asarray(C))[0])))
    for kind in ("mvr", "maxent"):
        st = mrc.mrc_newton_init(kind, C2, s0, m, 40)
        new = mrc.mrc_newton_step(st, kind, C2, m, 40)
        assert float(new.objective) < float(st.objective)
        assert np.all(np.asarray(new.s) > 0)
        np.linalg.cholesky(np.asarray(C2) - np.diag(np.asarray(new.s)))
        g, ds = mrc_newton.newton_direction(kind, st.s, st.H, m)
        assert float(jnp.dot(g, ds)) < 0
    # the shared line search: a non-descent slope or a trial that is never feasible is refused
    from jaxknock.svector import _common

    def always(t):
        return jnp.asarray(True), jnp.asarray(0.0), ()

    assert not bool(_common.armijo_backtrack(always, 1.0, 0.0, 1.0)[1])  # slope >= 0
    t, ok, n, _ = _common.armijo_backtrack(lambda t: (jnp.asarray(False), jnp.asarray(0.0), ()), 1.0, 0.0, -1.0)
    assert not bool(ok) and int(n) == _common.MAX_SHRINKS
    t, ok, n, _ = _common.armijo_backtrack(lambda t: (t < 0.3, -t, ()), 1.0, 0.0, -1.0)
    assert bool(ok) and float(t) == 0.25 and int(n) == 2


def _affine_duplicate_covariance(seed):
    """The sample covariance of 30 rows of 6 features, the last ``3 x_0 + 2``: exactly singular, and only
    rounding decides whether ``Sigma``, its correlation ``C`` and ``2C - diag(s)`` at the start factorise."""
    X = np.random.default_rng(seed).standard_normal((30, 6))
    X[:, -1] = 3.0 * X[:, 0] + 2.0
    return np.cov(X, rowvar=False)


def test_singular_to_rounding_sigma_is_refused_not_iterated():
    """Seed 9: ``Sigma`` factorises, ``C`` does not: the eager check tested ``Sigma`` only, and sdp / mvr /
    maxent returned ``infeasible`` with a NaN ``s`` where a ``ValueError`` is documented. Seeds 7 and 13:
    ``C`` factorises but the start ``s = c lambda_min(C) / 2`` is 0 (computed ``lambda_min <= 0``) or
    outside ``A > 0``: the Newton method ran all 2000 steps and returned ``nonfinite`` with that finite
    ``s`` (0 resp. ~1e-16). Now: a ``ValueError`` eagerly, ``infeasible`` with NaN ``s`` after 0 steps under jit."""
    S = _affine_duplicate_covariance(9)
    for fn in (jaxknock.sdp, jaxknock.mvr, jaxknock.maxent):
        with pytest.raises(ValueError, match="Sigma is not positive definite|Sigma is numerically singular"):
            fn(S)
    jitted = jax.jit(jaxknock.maxent)
    for seed in (7, 13):
        S = _affine_duplicate_covariance(seed)
        for fn in SOLVERS.values():
            with pytest.raises(ValueError, match="Sigma is singular to working precision"):
                fn(S)
        sol = jitted(S)
        assert RESULTS(int(sol.result)) == RESULTS.infeasible, seed
        assert int(sol.stats["num_steps"]) == 0 and np.all(np.isnan(np.asarray(sol.value)))


def _near_duplicate_pair(p, delta):
    """AR(1) ``rho = 0.5`` on ``p - 1`` features plus a copy of feature 0 at correlation ``1 - delta``."""
    q = p - 1
    base = 0.5 ** np.abs(np.arange(q)[:, None] - np.arange(q)[None, :])
    C = np.eye(p)
    C[:q, :q] = base
    C[q, :q] = C[:q, q] = (1.0 - delta) * base[0]
    return C


@pytest.mark.parametrize("method", mrc.SOLVER_METHODS)
def test_mvr_successful_certifies_every_coordinate(method):
    """MVR's ``f`` is dominated by ``m / s_j`` of a near-duplicate pair (``s ~ delta``), so ``gap <= tol f``
    said nothing about the other coordinates: the Newton default stopped ``successful`` with them at
    0.007 (``delta = 1e-9``, p = 20; optimum 0.43-0.46) and 2.5% off at ``delta = 1e-6``. ``successful``
    now also needs each coordinate's stationarity ``s_j ||A^{-1} e_j|| = m`` to ``sqrt(tol)``."""
    for delta in (1e-6, 1e-9):
        C = _near_duplicate_pair(P, delta)  # p = P: the programs compiled for C20
        sol = jaxknock.mvr(C, method=method)
        s = np.asarray(sol.value)
        t = s * np.linalg.norm(np.linalg.inv(2.0 * C - np.diag(s)), axis=0)
        if delta == 1e-6:
            assert RESULTS(int(sol.result)) == RESULTS.successful
        if RESULTS(int(sol.result)) == RESULTS.successful:
            assert np.max((1.0 - t) ** 2) <= 2e-6, (delta, np.max((1.0 - t) ** 2))
        assert np.min(s[1:-1]) > 0.3, (delta, np.min(s[1:-1]))  # the optimum: 0.43-0.46


def test_interior_start_check_reads_the_result_on_the_host():
    """The eager check behind "Sigma is singular to working precision" ran four eager device operations (four
    compiled programs in every fresh process); it now reads the result code and ``s`` in one explicit transfer,
    and still raises for a rejected member only."""
    from helpers import count_compiles

    from jaxknock._solution import Solution

    Sigma = jnp.eye(13)  # a size no other test compiles for
    ok = Solution(value=jnp.full((2, 13), 0.5), result=jnp.array([0, 3], jnp.int32), stats={})
    with count_compiles() as compiles, jax.transfer_guard("disallow"):
        mrc.raise_if_no_interior_start(ok, Sigma)  # member 1 is infeasible but has a finite s: not a rejection
    assert compiles == []
    rejected = ok._replace(value=ok.value.at[1].set(jnp.nan))
    with pytest.raises(ValueError, match=r"Sigma \(batch member 1\) is singular"):
        mrc.raise_if_no_interior_start(rejected, Sigma)


def test_mvr_newton_stagnation_on_a_near_copy_is_solved_by_the_coordinate_method():
    """A copy of an inner AR(1) feature at correlation ``1 - 1e-9``: the Newton default ended ``stagnated``
    with the other coordinates' ``s`` at a median of 0.09 (certified optimum: 0.44-0.50), and
    ``knockoff_filter(Sigma=...)`` on such a law lost most of its power (0.32 against 0.80 over six seeds,
    p = 60 with two copies). Eagerly, the coordinate method now solves it again and certifies it; under
    ``jit`` the Newton result is returned as it is, with its honest code."""
    C = near_copy_correlation(21, 1e-9)
    sol = jaxknock.mvr(C)
    s = np.asarray(sol.value)
    assert RESULTS(int(sol.result)) == RESULTS.successful
    t = s * np.linalg.norm(np.linalg.inv(2.0 * C - np.diag(s)), axis=0)  # stationarity: s_j ||A^-1 e_j|| = 1
    assert np.max((1.0 - t) ** 2) <= 2e-6, np.max((1.0 - t) ** 2)
    others = np.setdiff1d(np.arange(20), [3])
    assert np.min(s[others]) > 0.4 and s[3] < 1e-8 and s[-1] < 1e-8  # the pair's s is bounded by 2 delta
    traced = jax.jit(lambda S: jaxknock.mvr(S))(C)
    assert RESULTS(int(traced.result)) != RESULTS.successful  # the Newton iterate, labelled as such


def test_numeric_settings_of_any_scalar_type_share_one_program():
    """``tol=np.float64(1e-6)`` or ``max_steps=np.int64(2000)`` (strong types) against the default Python
    scalars (weak) compiled the whole MVR / maximum-entropy program again, dense and factor model alike: the
    settings' type is part of a traced argument's cache key. Concrete settings now enter as Python scalars:
    one program, the same ``s`` to the bit."""
    from helpers import ar1_correlation, count_compiles, random_factor_model

    from jaxknock.covariance import FactorModel

    C = jnp.asarray(ar1_correlation(12, 0.5))
    model = FactorModel(*(jnp.asarray(a) for a in random_factor_model(1, 12, 2)))
    runs = {
        "mvr": lambda t, k: jaxknock.mvr(C, tol=t, max_steps=k).value,
        "maxent": lambda t, k: jaxknock.maxent(C, tol=t, max_steps=k).value,
        "mvr_factor": lambda t, k: jaxknock.mvr_factor(model, tol=t, max_steps=k).value,
    }
    typed = [(np.float64(1e-6), np.int64(500)), (jnp.float64(1e-6), jnp.int32(500))]
    for name, run in runs.items():
        ref = np.asarray(run(1e-6, 500))
        with count_compiles() as compiles:
            out = [np.asarray(run(*settings)) for settings in typed]
        assert [c.split()[1] for c in compiles] == [], name
        for o in out:
            np.testing.assert_array_equal(o, ref)
