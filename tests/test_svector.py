import functools
import warnings

import cvxpy as cp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    ar1_correlation,
    hard_correlations,
    hard_factor_models,
    near_singular_ar1,
    near_singular_equicorrelated,
    rank_deficient_ridge,
    spiked_correlation,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxknock
from jaxknock import RESULTS, maxent, mvr
from jaxknock.covariance import FactorModel, to_correlation
from jaxknock.svector import (
    _common,
    asdp,
    certificate,
    coordinate,
    equicorrelated,
    factor,
    newton,
    newton_init,
    newton_step,
    scale_to_feasible,
    sdp,
    sdp_dual_gap,
    sdp_factor,
    sdp_factor_init,
    sdp_factor_step,
    sdp_init,
    sdp_step,
)


def factor_correlation(p, k, seed, diag=1e-3):
    """The thesis benchmark: D + V Lambda V^T rescaled to a correlation matrix."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((p, k))
    lam = rng.uniform(0, 1, k)
    S = diag * np.eye(p) + (V * lam) @ V.T
    d = np.sqrt(np.diag(S))
    return S / np.outer(d, d)


def ar1(p, rho):
    i = np.arange(p)
    return rho ** np.abs(i[:, None] - i[None, :])


def _clarabel_sdp(C, gap_abs, gap_rel, feas):
    """``(optimal value, s, status)`` of the dense knockoff SDP on ``C`` by cvxpy + Clarabel."""
    p = C.shape[0]
    s = cp.Variable(p)
    prob = cp.Problem(cp.Maximize(cp.sum(s)), [2 * C - cp.diag(s) >> 0, s >= 0, s <= 1])
    with warnings.catch_warnings():
        # Clarabel flags "inaccurate" near its tolerance floor; the value is still
        # accurate to far better than the 1e-5 compared below
        warnings.simplefilter("ignore", UserWarning)
        prob.solve(solver=cp.CLARABEL, tol_gap_abs=gap_abs, tol_gap_rel=gap_rel, tol_feas=feas, max_iter=500)
    return prob.value, np.asarray(s.value), prob.status


def cvxpy_sdp(C):
    """Clarabel's optimal value, once per matrix and process (the p = 80 reference takes ~6 s)."""
    return _cvxpy_sdp_cached(np.asarray(C, dtype=np.float64).tobytes(), C.shape[0])


@functools.cache
def _cvxpy_sdp_cached(C_bytes, p):
    value, _, status = _clarabel_sdp(np.frombuffer(C_bytes).reshape(p, p), 1e-9, 1e-9, 1e-9)
    assert status in ("optimal", "optimal_inaccurate")
    return value


def equi_matrix(p, rho):
    return (1 - rho) * np.eye(p) + rho * np.ones((p, p))


def test_identity_gives_ones():
    sol = sdp(np.eye(12))  # p = 12: the closed-form tests' shape (one compiled program)
    np.testing.assert_allclose(sol.value, 1.0, atol=1e-8)
    assert int(sol.result) == RESULTS.successful


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_equicorrelated_closed_form(rho):
    C = equi_matrix(12, rho)
    expected = min(1.0, 2 * (1 - rho))
    np.testing.assert_allclose(equicorrelated(C).value, expected, atol=1e-12)
    sol = sdp(C, tol=1e-5)
    assert int(sol.result) == 0
    np.testing.assert_allclose(sol.value, expected, atol=1e-5)
    model = FactorModel(jnp.full(12, 1 - rho), jnp.full((12, 1), np.sqrt(rho)))
    np.testing.assert_allclose(sdp_factor(model, tol=1e-5).value, expected, atol=1e-5)


@pytest.mark.parametrize(
    "C",
    [
        factor_correlation(30, 2, 1),
        factor_correlation(60, 3, 2),
        np.corrcoef(np.random.default_rng(5).standard_normal((1000, 50)).T),
        factor_correlation(80, 4, 3),
    ],
    ids=["factor30", "factor60", "wishart50", "factor80"],
)
@pytest.mark.parametrize("method", ["newton", "coordinate"])
def test_sdp_matches_cvxpy(C, method):
    ref = cvxpy_sdp(C)
    sol = sdp(C, tol=1e-5, method=method)
    assert int(sol.result) == RESULTS.successful
    obj = float(sol.stats["objective"])
    assert abs(obj - ref) <= 1e-5 * max(1.0, ref)
    assert float(sol.stats["min_eig"]) >= 0  # feasible
    assert np.all(np.asarray(sol.value) >= 0) and np.all(np.asarray(sol.value) <= 1)
    # certificate is valid: OPT - 1's <= gap (OPT <= dual)
    assert ref <= float(sol.stats["dual"]) + 1e-8


def test_certified_gap_bounds_true_suboptimality():
    C = factor_correlation(40, 2, 7)
    opt = float(sdp(C, tol=1e-5).stats["dual"])
    # a deliberately unconverged iterate and an arbitrary feasible point
    rough = sdp(C, tol=1e-5, max_steps=12)
    assert int(rough.result) == RESULTS.max_steps_reached
    for s, lam in [(rough.value, 1e-3), (equicorrelated(C).value, 1e-4), (0.5 * rough.value, 1e-2)]:
        dual, gap = sdp_dual_gap(C, s, lam)
        assert float(gap) >= opt - float(jnp.sum(s)) - 1e-10
        assert float(dual) >= opt - 1e-10


def test_cholesky_factor_after_sweep_equals_fresh_factorisation():
    C = factor_correlation(70, 4, 3)
    state, b = sdp_init(C, block_size=16, lam0=1e-3)
    for _ in range(6):
        state = sdp_step(state, C, block_size=b)
    p = C.shape[0]
    s = np.asarray(state.s)
    n = s.shape[0]
    Cp = np.eye(n)
    Cp[:p, :p] = C
    fresh = np.linalg.cholesky(2 * Cp - np.diag(s))
    np.testing.assert_allclose(np.asarray(state.L), fresh, atol=1e-9)
    assert s[:p].sum() > 0


def test_covariance_input_is_rescaled():
    C = factor_correlation(25, 2, 4)
    scale = np.linspace(0.5, 3.0, 25)
    Sigma = C * np.outer(scale, scale)
    s_corr = sdp(C).value
    s_cov = sdp(Sigma).value
    np.testing.assert_allclose(s_cov, s_corr * scale**2, rtol=1e-5, atol=1e-9)


def test_permutation_equivariance_with_ties():
    # equicorrelated blocks: the SDP optimum need not be unique, so the objectives of C and P C P^T must agree
    # to the certified gaps, and each s be feasible for its own matrix
    blocks = [(4, 0.8), (3, 0.95), (4, 0.8), (6, 0.5), (8, 0.9)]
    C = np.zeros((25, 25))
    start = 0
    for k, r in blocks:
        C[start : start + k, start : start + k] = (1 - r) * np.eye(k) + r
        start += k
    perm = np.random.default_rng(0).permutation(25)
    sol, permuted = sdp(C), sdp(C[np.ix_(perm, perm)])
    assert int(sol.result) == int(permuted.result) == RESULTS.successful
    f, g = float(sol.stats["objective"]), float(permuted.stats["objective"])
    assert abs(f - g) <= float(sol.stats["gap"]) + float(permuted.stats["gap"])
    for M, s in ((C, sol.value), (C[np.ix_(perm, perm)], permuted.value)):
        assert np.linalg.eigvalsh(2 * M - np.diag(np.asarray(s)))[0] >= -1e-12


@pytest.mark.parametrize("p", [80, 300])  # 300: several coordinate blocks of 256, the last one padded
def test_sdp_factor_matches_dense(p):
    rng = np.random.default_rng(0)
    k = 4
    model = FactorModel(jnp.asarray(rng.uniform(0.1, 1.0, p)), jnp.asarray(0.5 * rng.standard_normal((p, k))))
    sf = sdp_factor(model, tol=1e-5)
    sd = sdp(model.dense(), tol=1e-5)
    assert int(sf.result) == 0 and bool(sf.stats["feasible"])
    obj_f, obj_d = float(sf.stats["objective"]), float(sd.stats["objective"])
    assert abs(obj_f - obj_d) <= 1e-5 * obj_d  # both certified within tol = 1e-5 of the optimum
    np.testing.assert_allclose(sf.value, sd.value, atol=5e-3)
    # the automatic start lam0 = max_j 1/(2 Sigma)^{-1}_jj skips sweeps, not accuracy
    slow = sdp_factor(model, tol=1e-5, lam0=0.5, decay=0.8)
    assert int(slow.result) == 0 and int(slow.stats["num_steps"]) > int(sf.stats["num_steps"])
    assert abs(float(slow.stats["objective"]) - obj_f) <= 2e-5 * obj_f


def test_jit_equals_eager_and_no_retrace():
    C = factor_correlation(30, 2, 9)  # p = 30: the eager solve is the other tests' program
    eager = sdp(C)
    traces = []

    def f(S):
        traces.append(1)
        return sdp(S).value

    jf = jax.jit(f)
    np.testing.assert_allclose(jf(C), eager.value, atol=1e-12)
    jf(factor_correlation(30, 2, 10))
    assert len(traces) == 1


def _while_loops(jaxpr, in_scan=False):
    """For every ``while`` in a jaxpr (sub-jaxprs included): whether it runs inside a ``scan``."""
    from jax.extend.core import jaxprs_in_params

    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            found.append(in_scan)
        for sub in jaxprs_in_params(eqn.params):
            found += _while_loops(sub, in_scan or eqn.primitive.name == "scan")
    return found


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the sequential rule is CPU's")
def test_batched_newton_sdp_solves_one_matrix_at_a_time_on_cpu():
    """On CPU a batch of Newton SDPs (a stack, a caller's vmap, nested vmaps, asdp's blocks; mvr / maxent too) runs as a
    scan of single solves, never as a vmap-ed while loop: those hung XLA's CPU runtime at 0% CPU in
    3 of 237 warm calls on a (10, 100, 100) stack (jaxknock/_backend.py, "svector_problems")."""
    Cs = jnp.asarray(np.stack([factor_correlation(12, 2, i) for i in range(4)]))
    assert not any(_while_loops(jax.make_jaxpr(lambda S: sdp(S).value)(Cs[0]).jaxpr))  # one matrix: no scan
    for name, fn, arg in (
        ("stack", lambda S: sdp(S).value, Cs),
        ("vmap", jax.vmap(lambda S: sdp(S).value), Cs),
        ("nested vmap", jax.vmap(jax.vmap(lambda S: sdp(S).value)), Cs.reshape(2, 2, 12, 12)),
        ("mvr stack", lambda S: mvr(S).value, Cs),
        ("maxent vmap", jax.vmap(lambda S: maxent(S).value), Cs),
    ):
        loops = _while_loops(jax.make_jaxpr(fn)(arg).jaxpr)
        assert loops and all(loops), name
    # asdp: the block solves inside the scan (its bisection on the whole matrix stays outside)
    assert any(_while_loops(jax.make_jaxpr(lambda S: asdp(S, block_size=6).value)(Cs[0]).jaxpr))
    nested = jax.vmap(jax.vmap(lambda S: sdp(S).value))(Cs.reshape(2, 2, 12, 12)).reshape(4, 12)
    loop = np.stack([np.asarray(sdp(C).value) for C in Cs])
    np.testing.assert_allclose(nested, loop, atol=1e-9)


@pytest.mark.parametrize("method", ["newton", "coordinate"])
def test_vmap_equals_loop(method):
    Cs = np.stack([factor_correlation(12, 2, i) for i in range(3)])  # p = 12: single solves shared with other tests
    batched = sdp(Cs, method=method)
    via_vmap = jax.vmap(lambda S: sdp(S, method=method).value)(jnp.asarray(Cs))
    loop = np.stack([np.asarray(sdp(C, method=method).value) for C in Cs])
    np.testing.assert_allclose(batched.value, loop, atol=1e-9)
    np.testing.assert_allclose(via_vmap, loop, atol=1e-9)
    assert batched.result.shape == (3,)
    rng = np.random.default_rng(1)
    ds = jnp.asarray(rng.uniform(0.2, 1, (2, 12)))
    Us = jnp.asarray(0.4 * rng.standard_normal((2, 12, 2)))
    fb = sdp_factor(FactorModel(ds, Us))
    for i in range(2):
        np.testing.assert_allclose(fb.value[i], sdp_factor(FactorModel(ds[i], Us[i])).value, atol=1e-9)


@pytest.mark.parametrize("method", ["newton", "coordinate"])
def test_max_steps_reported(method):
    sol = sdp(factor_correlation(30, 2, 1), max_steps=3, method=method)
    assert int(sol.result) == RESULTS.max_steps_reached
    with pytest.raises(RuntimeError, match="max_steps"):
        sdp(factor_correlation(30, 2, 1), max_steps=3, throw=True)


def test_scale_to_feasible_matches_generalised_eigenvalue():
    C = ar1(30, 0.7)
    s = np.linspace(0.2, 1.5, 30)
    sol = scale_to_feasible(C, s)
    # largest gamma with 2C - gamma diag(s) >= 0 is 2 / lambda_max(S^1/2 C^-1 S^1/2)
    Sh = np.sqrt(s)
    lam_max = np.linalg.eigvalsh(Sh[:, None] * np.linalg.inv(C) * Sh[None, :])[-1]
    expected = min(2.0 / lam_max, 1.0 / s.max())
    assert abs(float(sol.stats["gamma"]) - expected) < 1e-9
    assert np.linalg.eigvalsh(2 * C - np.diag(np.asarray(sol.value)))[0] >= -1e-12
    # factor-model route
    rng = np.random.default_rng(2)
    model = FactorModel(jnp.asarray(rng.uniform(0.2, 1, 30)), jnp.asarray(0.5 * rng.standard_normal((30, 2))))
    g_dense = scale_to_feasible(model.dense(), s).stats["gamma"]
    g_fac = scale_to_feasible(model, s).stats["gamma"]
    assert abs(float(g_dense) - float(g_fac)) < 1e-9


def test_asdp_feasible_and_below_sdp():
    C = ar1(45, 0.6)
    a = asdp(C, block_size=10)
    full = sdp(C)
    assert float(a.stats["min_eig"]) >= -1e-10
    assert float(a.stats["objective"]) <= float(full.stats["objective"]) + 1e-8
    # exact when Sigma is block diagonal with the same blocks
    blocks = [factor_correlation(10, 2, i) for i in range(3)]
    B = np.zeros((30, 30))
    for i, blk in enumerate(blocks):
        B[10 * i : 10 * i + 10, 10 * i : 10 * i + 10] = blk
    ab = asdp(B, block_size=10)
    assert abs(float(ab.stats["gamma"]) - 1.0) < 1e-6
    np.testing.assert_allclose(ab.value, np.concatenate([np.asarray(sdp(b).value) for b in blocks]), atol=1e-6)


def test_a_float64_host_sigma_with_x64_off_is_refused_for_what_jax_made_of_it():
    """With ``jax_enable_x64`` off a float64 NumPy ``Sigma`` (or factor model) is held as float32: the refusal
    says so, where it said "Sigma has dtype float32" about an array the user had passed as float64."""
    C = ar1(5, 0.5)
    model = FactorModel(np.full(5, 0.5), np.full((5, 1), 0.3))
    with jax.enable_x64(False):
        for solve, arg, name in ((sdp, C, "Sigma"), (mvr, C, "Sigma"), (jaxknock.mvr_factor, model, "model.U")):
            with pytest.raises(TypeError, match=f"{name} was given as float64, which JAX holds as float32"):
                solve(arg)
        with pytest.raises(TypeError, match="Sigma has dtype float32, but"):  # float32 given: as before
            sdp(C.astype(np.float32))


def test_bad_inputs():
    C = ar1(5, 0.5)
    with pytest.raises(ValueError, match="square"):
        sdp(np.ones((3, 4)))
    with pytest.raises(ValueError, match="symmetric"):
        sdp(C + np.triu(np.ones((5, 5)), 1) * 0.1)
    bad = C.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        sdp(bad)
    with pytest.raises(ValueError, match="not positive definite.*ledoit_wolf"):
        sdp(np.ones((4, 4)))
    with pytest.raises(TypeError, match="float64"):
        sdp(jnp.asarray(C, jnp.float32))
    with pytest.raises(ValueError, match="rank"):
        sdp_factor(FactorModel(jnp.ones(3), jnp.ones((3, 3))))
    with pytest.raises(ValueError, match="decay"):
        sdp(C, decay=1.5)
    with pytest.raises(ValueError, match="method"):
        sdp(C, method="interior")
    with pytest.raises(ValueError, match="positive diagonal"):
        sdp(-np.eye(3))


@pytest.mark.parametrize(
    "C", [ar1(50, 0.5), np.corrcoef(np.random.default_rng(5).standard_normal((400, 40)).T)], ids=["ar1", "wishart40"]
)
def test_jammed_solve_is_reported_not_hidden(C):
    """Coordinate ascent can jam 1e-4 short on degenerate problems; the certificate must say so."""
    opt = cvxpy_sdp(C)
    sol = sdp(C, tol=1e-6, method="coordinate")
    obj = float(sol.stats["objective"])
    assert float(sol.stats["min_eig"]) >= 0
    assert opt - obj < 1e-3 * opt
    # the bound is valid ...
    assert float(sol.stats["dual"]) >= opt - 1e-8
    # ... and a solve that is not within tol is not reported as successful
    if opt - obj > 1e-6 * opt:
        assert int(sol.result) in (RESULTS.stagnated, RESULTS.max_steps_reached)


def _block_equicorrelated(p, rho, size):
    C = np.eye(p)
    for i in range(0, p, size):
        C[i : i + size, i : i + size] = rho
    np.fill_diagonal(C, 1.0)
    return C


def _small_ledoit_wolf(p, seed):
    rng = np.random.default_rng(seed)
    return _ledoit_wolf_correlation(_ar1_rows(rng, 2 * p, p, 0.7))


@pytest.mark.parametrize(
    "C",
    [ar1(12, 0.6), ar1(12, 0.9), _block_equicorrelated(12, 0.6, 5), None],  # one shape: one compilation
    ids=["ar1-0.6", "ar1-0.9", "block-0.6", "ledoit-wolf"],
)
def test_coordinate_certifies_small_valid_problems(C):
    """Small well-posed problems on which method="coordinate" used to stop ``stagnated``: the ascent
    fell ~1e-3 behind the central path while lam shrank (each coordinate can move only ~lam once
    2C - diag(s) is near singular along a spread-out direction) and never caught up, leaving s
    1e-4 to 5e-3 below OPT with certified gaps of 2-200%. The iterate is now Newton-re-centred
    each time lam drops tenfold (coordinate.RECENTRE_EVERY)."""
    if C is None:
        C = _small_ledoit_wolf(12, 84)
    opt = cvxpy_sdp(C)
    sol = sdp(C, method="coordinate")
    obj, dual = float(sol.stats["objective"]), float(sol.stats["dual"])
    assert RESULTS(int(sol.result)) == RESULTS.successful
    assert float(sol.stats["gap"]) <= 1e-5 * obj and float(sol.stats["min_eig"]) >= 0
    assert dual >= opt - 1e-8 * max(1.0, opt)  # valid bound
    assert abs(opt - obj) <= 1e-5 * opt  # and true (cvxpy/Clarabel at 1e-9)


@pytest.mark.parametrize(
    "C,tol",
    [
        (ar1(50, 0.5), 1e-6),
        (np.corrcoef(np.random.default_rng(5).standard_normal((400, 40)).T), 1e-6),
        (factor_correlation(90, 5, 11), 2e-6),
    ],  # near-singular optimum: certificate floor ~1.3e-6
    ids=["ar1", "wishart40", "factor90"],
)
def test_newton_certifies_where_coordinate_ascent_jams(C, tol):
    """The default Newton path follower reaches a certified ~1e-6 relative gap on the jamming problems."""
    opt = cvxpy_sdp(C)
    sol = sdp(C, tol=tol)
    obj, dual = float(sol.stats["objective"]), float(sol.stats["dual"])
    assert int(sol.result) == RESULTS.successful
    assert float(sol.stats["min_eig"]) >= 0
    assert dual >= opt - 1e-9 * max(1.0, opt)  # valid bound
    assert dual - obj <= tol * obj  # certified
    assert opt - obj <= 2e-6 * opt  # and true (cvxpy/Clarabel at 1e-9)
    assert int(sol.stats["newton_steps"]) <= 80 and int(sol.stats["sweeps"]) == 0


def test_newton_certifies_degenerate_ar1_optimum():
    """AR(1), rho = 0.99, p = 100: at the optimum 2C - diag(s) has three eigenvalues below 1e-8 and
    the barrier dual t lam A^{-1} stays 0.5% above OPT; the stall test stopped the path there,
    ``stagnated`` (before session 52). The subspace certificate closes the gap to ~4e-7 (its
    validity against Clarabel: test_subspace_certificate_bounds_opt_for_any_s)."""
    C = ar1(100, 0.99)
    sol = sdp(C)
    obj, dual = float(sol.stats["objective"]), float(sol.stats["dual"])
    assert RESULTS(int(sol.result)) == RESULTS.successful
    assert 0.0 <= dual - obj <= 1e-5 * obj and float(sol.stats["min_eig"]) >= 0
    assert_feasible(C, sol.value)
    assert int(sol.stats["newton_steps"]) <= 120


@pytest.mark.parametrize("kind", ["ar1", "wishart"])
def test_subspace_certificate_bounds_opt_for_any_s(kind):
    """Any PSD Lambda = B B^T gives the upper bound 2 tr(Lambda C) + sum_j max(0, 1 - Lambda_jj) >= OPT,
    whatever ``s`` and ``lam`` it was built from, so the subspace certificate must stay above the
    best feasible point (Clarabel's ``s`` scaled into the cone, within ~2e-7 of OPT) for that
    point, for one 1% inside, for an arbitrary (infeasible) ``s`` and for a wrong ``lam``; and it
    must be close at the near-optimal point (tight at the path's own iterate: the test above).
    Its rounding-safe evaluation is at least the plain one (numpy). A deliberately broken dual,
    ``0.9 Lambda`` with ``eta`` kept from ``Lambda`` (``diag + eta >= 1`` violated), falls
    below OPT: the same comparison detects it."""
    rng = np.random.default_rng(3)
    C = ar1(40, 0.995) if kind == "ar1" else np.corrcoef(rng.standard_normal((60, 40)).T)
    s_ref = np.clip(_cvxpy_ref_s(C), 0.0, 1.0)
    shrink = [f for f in 1.0 - np.geomspace(1e-10, 1e-3, 36) if np.linalg.eigvalsh(2 * C - np.diag(f * s_ref))[0] > 0]
    s_opt = shrink[0] * s_ref
    primal = float(np.sum(s_opt))  # feasible: <= OPT
    cases = [(s_opt, 1e-9), (0.99 * s_opt, 1e-6), (rng.uniform(0, 1, 40), 1e-3), (s_opt, 1.0)]
    factor, bound = jax.jit(certificate.subspace_factor), jax.jit(certificate.dual_bound_from_factor)
    Bs = [np.asarray(factor(C, jnp.asarray(s), lam, jnp.inf, 1e-6)) for s, lam in cases]
    duals = [float(bound(2.0 * C, B)) for B in Bs]
    assert all(d >= primal for d in duals), (duals, primal)
    assert duals[0] - primal <= 1e-4 * primal  # near-tight at Clarabel's point (not centred: 3e-5 for AR(1))
    trace, hinge = np.sum(Bs[0] * (2.0 * C @ Bs[0])), np.sum(np.maximum(0.0, 1.0 - np.sum(Bs[0] ** 2, axis=1)))
    assert duals[0] >= trace + hinge >= duals[0] - 1e-8 * primal
    assert 0.9 * trace + hinge < primal - 0.05 * primal  # the broken dual point: caught


def _sample_block_correlation(p, n, seed=0, rho=0.5, block=20):
    """The raw sample correlation of ``n`` rows of a block-equicorrelated law: valid, ill-conditioned."""
    rng = np.random.default_rng(seed)
    B = np.full((block, block), rho) + (1 - rho) * np.eye(block)
    X = (rng.standard_normal((n, p // block, block)) @ np.linalg.cholesky(B).T).reshape(n, p)
    return np.corrcoef(X, rowvar=False)


@pytest.mark.parametrize("p, n, seed, reference", [(300, 600, 0, 36.577375), (400, 1200, 1, None)])
def test_newton_certifies_raw_sample_correlations(p, n, seed, reference):
    """Raw sample correlations (lambda_min 0.04-0.13): the path used to step to the edge of the PD
    cone while the barrier was still 1e-3, stall there and stop ``stagnated``, at p = 300 with
    36.481 (the optimum is 36.577: cvxpy + SCS at eps = 1e-7, a 20 s solve, the value kept here)
    and at p = 400, n = 1200 with a certified gap of 70% (88.1 against a bound of 152.0). A step
    now keeps a fraction of the distance to the cone's boundary (newton._PD_FRACTION)."""
    C = _sample_block_correlation(p, n, seed)
    sol = sdp(C, tol=1e-5)
    obj, dual = float(sol.stats["objective"]), float(sol.stats["dual"])
    assert RESULTS(int(sol.result)) == RESULTS.successful
    assert dual - obj <= 1e-5 * obj and float(sol.stats["min_eig"]) >= 0
    if reference is not None:
        assert abs(obj - reference) <= 1e-5 * reference


def _ledoit_wolf_correlation(X):
    from jaxknock.covariance import ledoit_wolf

    return np.asarray(to_correlation(ledoit_wolf(jnp.asarray(X)).covariance))


def _ar1_rows(rng, n, p, rho):
    return rng.standard_normal((n, p)) @ np.linalg.cholesky(ar1_correlation(p, rho)).T


@pytest.mark.parametrize("design", ["ar05", "genotype"])
def test_newton_default_start_certifies_well_conditioned_estimates(design):
    """Ledoit-Wolf estimates the filter solves (AR(1) 0.5 rows, n = 3p, p = 200; genotype-like
    {0, 1, 2} columns of two thresholded AR(1) 0.8 haplotypes, p = 160): with the barrier started at
    0.5 / p the first centring ran into the PD boundary and the path stopped ``stagnated`` with a
    certified gap of 10-50% (the s of the AR case 0.9% below the optimum). The default start
    (newton.default_lam0) is certified, and at least as good as that path's answer."""
    rng = np.random.default_rng(77)
    if design == "ar05":
        X = _ar1_rows(rng, 600, 200, 0.5)
    else:
        cut = np.quantile(rng.standard_normal(100_000), 1 - rng.uniform(0.1, 0.5, 160))
        X = sum((_ar1_rows(rng, 800, 160, 0.8) > cut).astype(float) for _ in range(2))
    C = _ledoit_wolf_correlation(X)
    sol = sdp(C, tol=1e-4)
    obj, dual = float(sol.stats["objective"]), float(sol.stats["dual"])
    assert RESULTS(int(sol.result)) == RESULTS.successful
    assert dual - obj <= 1e-4 * obj and float(sol.stats["min_eig"]) >= 0
    old = sdp(C, tol=1e-4, lam0=0.5)  # the old start: whatever it reaches is below the certified bound
    assert float(old.stats["objective"]) <= dual and obj >= float(old.stats["objective"]) - 1e-4 * obj
    assert int(sol.stats["newton_steps"]) <= 60


def test_newton_below_certificate_floor_reports_stagnated_not_max_steps():
    """A tolerance below what rounding lets the certificate prove (1e-13 relative) ends
    early with ``stagnated`` and a feasible ``s``, instead of running to ``max_steps``
    or drifting onto the PD boundary (found at p = 2000, where it used to run 500 steps)."""
    C = factor_correlation(60, 3, 5)
    sol = sdp(C, tol=1e-13, max_steps=400)
    assert RESULTS(int(sol.result)) == RESULTS.stagnated
    assert int(sol.stats["newton_steps"]) < 150
    assert float(sol.stats["min_eig"]) > -1e-12
    ref = sdp(C, tol=1e-5)
    assert int(ref.result) == 0
    assert abs(float(sol.stats["objective"]) - float(ref.stats["objective"])) <= 1e-5 * float(ref.stats["objective"])


def test_newton_certifies_when_bound_active_coordinates_lag():
    """An ASDP block of the demo's Ledoit-Wolf correlation (50 x 50, min eigenvalue
    0.25, 7 coordinates at the cap): the certificate stays ~2e-3 relative for a
    dozen centred steps and then drops to ~2e-7 at once. Stopping after 3 centred
    non-improving steps reported ``stagnated`` with a 0.08 gap at the optimum."""
    from jaxknock.cli import synthetic_factor_data
    from jaxknock.covariance import ledoit_wolf

    kdata, _ = jax.random.split(jax.random.key(0))
    X, _, _, _ = synthetic_factor_data(kdata, 1000, 500, 50, 50, 12.0)
    C_full = to_correlation(ledoit_wolf(X)[0])
    C = C_full[200:250, 200:250]
    sol = sdp(C, tol=1e-5)
    assert RESULTS(int(sol.result)) == RESULTS.successful
    total = float(sol.stats["objective"])
    assert float(sol.stats["gap"]) <= 1e-5 * total
    ref = cvxpy_sdp(np.asarray(C))
    assert abs(total - ref) <= 1e-5 * total
    blocks = asdp(C_full, block_size=50)
    assert np.all(np.asarray(blocks.stats["block_results"]) == int(RESULTS.successful))


# --- init / step seams: the steps the solvers' loops drive -------------------


def _drive(state, step, terminate, max_steps):
    for _ in range(max_steps):
        done, _ = terminate(state)
        if bool(done):
            break
        state = step(state)
    return state


def test_newton_step_is_the_step_sdp_drives():
    C = factor_correlation(30, 2, 1)
    sol = sdp(C, tol=1e-5)
    st = _drive(newton_init(C), lambda s: newton_step(s, C, tol=1e-5), lambda s: newton.path_terminate(s, 1e-5), 500)
    assert int(st.step) == int(sol.stats["newton_steps"])
    np.testing.assert_allclose(float(st.dual), float(sol.stats["dual"]), rtol=1e-10)
    assert float(newton.relative_gap(st)) <= 1e-5


def test_sdp_step_is_the_step_sdp_coordinate_drives():
    C = factor_correlation(30, 2, 1)
    sol = sdp(C, tol=1e-5, method="coordinate")
    state, b = sdp_init(C)
    st = _drive(
        state,
        lambda s: sdp_step(s, C, block_size=b, tol=1e-5),
        lambda s: coordinate.sweep_terminate(s, C.shape[0], 1e-5),
        500,
    )
    assert int(st.sweep) == int(sol.stats["sweeps"])
    np.testing.assert_allclose(np.asarray(st.s[:30]), np.asarray(sol.value), atol=1e-10)
    np.testing.assert_allclose(float(st.gap), float(sol.stats["gap"]), rtol=1e-6, atol=1e-12)


def test_step_apis_check_their_start_like_sdp():
    """newton_init(lam0=-1) never moved (s = 0 after 30 steps); sdp_init(block_size=0) ran as the default and
    block_size=-1 crashed in XLA; a wrong-length s0 gave a broadcasting TypeError naming nothing."""
    C = factor_correlation(6, 2, 1)
    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match="lam0"):
            newton_init(C, lam0=bad)
        with pytest.raises(ValueError, match="lam0"):
            sdp_init(C, lam0=bad)
    for init in (newton_init, lambda C, **k: sdp_init(C, **k)):
        with pytest.raises(ValueError, match="s0 must be a vector of length p = 6"):
            init(C, s0=np.zeros(3))
    for b in (0, -1, 2.5):
        with pytest.raises(ValueError, match="block_size"):
            sdp_init(C, block_size=b)


def test_step_apis_refuse_an_infeasible_start():
    """An infeasible ``s0`` gave ``sdp_init`` a NaN state and was replaced by the default start in
    ``newton_init`` without a word. A start on the boundary (``2C - diag s`` singular) is feasible for the
    Newton path (pushed inside) but cannot be factored by the coordinate method."""
    p, rho = 6, 0.9
    C = (1 - rho) * np.eye(p) + rho  # lambda_min = 0.1: the equicorrelated s is 2 * 0.1
    boundary = np.full(p, 2 * (1 - rho))
    for bad in (np.full(p, 0.9), np.full(p, 1.5), -boundary):  # not PSD; above the box (cap 1); negative
        with pytest.raises(ValueError, match="s0"):
            newton_init(C, s0=bad)
        with pytest.raises(ValueError, match="s0"):
            sdp_init(C, s0=bad)
    with pytest.raises(ValueError, match="positive definite"):
        sdp_init(C, s0=boundary)
    st = newton_init(C, s0=boundary)
    assert np.all(np.isfinite(np.asarray(st.s))) and np.all(np.asarray(st.s) < boundary)
    state, _ = sdp_init(C, s0=0.5 * boundary)
    assert np.all(np.isfinite(np.asarray(state.L)))
    np.testing.assert_allclose(np.asarray(state.s[:p]), 0.5 * boundary)
    scaled = np.diag([4.0, 1, 1, 1, 1, 1]) ** 0.5 @ C @ np.diag([4.0, 1, 1, 1, 1, 1]) ** 0.5  # covariance scale
    state, _ = sdp_init(scaled, s0=0.5 * boundary * np.diag(scaled))
    np.testing.assert_allclose(np.asarray(state.s[:p]), 0.5 * boundary)


def test_sdp_factor_step_is_the_step_sdp_factor_drives():
    rng = np.random.default_rng(0)
    model = FactorModel(jnp.asarray(rng.uniform(0.1, 1.0, 40)), jnp.asarray(0.5 * rng.standard_normal((40, 3))))
    sol = sdp_factor(model, tol=1e-5, method="coordinate")
    st = _drive(
        sdp_factor_init(model),
        lambda s: sdp_factor_step(s, model, tol=1e-5),
        lambda s: factor.factor_terminate(s, 1e-5),
        500,
    )
    assert int(st.sweep) == int(sol.stats["num_steps"])
    np.testing.assert_allclose(np.asarray(st.s) * np.asarray(model.diagonal()), np.asarray(sol.value), atol=1e-10)


def test_deprecated_step_limit_aliases():
    C = factor_correlation(30, 2, 1)
    with pytest.warns(DeprecationWarning, match="max_steps"):
        old = sdp(C, max_sweeps=3)
    new = sdp(C, max_steps=3)
    np.testing.assert_array_equal(old.value, new.value)
    assert int(old.stats["max_steps"]) == 3 and int(old.result) == RESULTS.max_steps_reached
    with pytest.warns(DeprecationWarning):
        sdp_factor(FactorModel(jnp.full(12, 0.5), jnp.full((12, 1), 0.5**0.5)), max_sweeps=2)
    with pytest.warns(DeprecationWarning):
        asdp(C, block_size=10, max_sweeps=2)
    s = np.linspace(0.2, 1.5, 30)
    with pytest.warns(DeprecationWarning, match="num_bisections"):
        g_old = scale_to_feasible(C, s, num_bisections=20).stats["gamma"]
    assert float(g_old) == float(scale_to_feasible(C, s, max_steps=20).stats["gamma"])
    with pytest.raises(TypeError, match="both"):
        sdp(C, max_sweeps=3, max_steps=3)


def test_scale_to_feasible_compiles_once_per_shape():
    C = ar1(30, 0.7)
    model = FactorModel(jnp.full(30, 0.5), jnp.full((30, 2), 0.5))
    scale_to_feasible(C, np.linspace(0.2, 1.5, 30))
    scale_to_feasible(model, np.linspace(0.2, 1.5, 30))
    compiles = []

    def listener(event, duration, **kwargs):
        if "backend_compile" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for scale in (0.5, 0.7):
            scale_to_feasible(C, np.linspace(0.1, 1.0, 30) * scale)
            scale_to_feasible(model, np.linspace(0.1, 1.0, 30) * scale)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []


# --------------------------------------------------------------------------
# ill-conditioned but valid input (issue 19, class 1)
# --------------------------------------------------------------------------

# codes a solver may honestly end with on a valid input: never infeasible / nonfinite
HONEST = (RESULTS.successful, RESULTS.stagnated, RESULTS.max_steps_reached)
HARD = hard_correlations()


def assert_feasible(C, s_corr):
    """``s >= 0`` and ``2C - diag(s)`` PSD to rounding (eigenvalues >= -1e-10 relative)."""
    s_corr = np.asarray(s_corr)
    assert np.all(np.isfinite(s_corr)) and np.all(s_corr >= 0)
    ev = np.linalg.eigvalsh(2 * C - np.diag(s_corr))
    assert ev[0] >= -1e-10 * max(1.0, np.abs(np.linalg.eigvalsh(2 * C)).max())


def assert_certificate(C, sol, ref, atol=1e-8):
    """``sum(s) <= OPT`` and ``sum(s) + gap >= OPT``, against the cvxpy reference ``(value, lower)``.

    Clarabel is only accurate to ~1e-8 absolute on near-singular problems and
    its ``s`` may be slightly infeasible; ``lower`` is the objective of its
    ``s`` scaled to feasibility, a certain lower bound on OPT.
    """
    value, lower = ref
    obj, gap = float(sol.stats["objective"]), float(sol.stats["gap"])
    assert obj <= value + atol
    assert obj + gap >= lower * (1 - 1e-12)


def _cvxpy_ref_s(C):
    """Clarabel's ``s`` (may be outside the cone by ~1e-8) for the dense SDP on ``C``."""
    return _clarabel_sdp(C, 1e-12, 1e-10, 1e-12)[1]


def _cvxpy_ref(C, cache={}):  # noqa: B006 - per-process cache of reference optima
    key = C.tobytes()
    if key not in cache:
        p = C.shape[0]
        s = cp.Variable(p)
        prob = cp.Problem(cp.Maximize(cp.sum(s)), [2 * C - cp.diag(s) >> 0, s >= 0, s <= 1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-10, tol_feas=1e-12, max_iter=500)
        s_ref = np.clip(np.asarray(s.value), 0.0, 1.0)
        lower = float(scale_to_feasible(C, s_ref).stats["objective"])
        cache[key] = (float(prob.value), lower)
    return cache[key]


@pytest.mark.parametrize("name, C", HARD, ids=[n for n, _ in HARD])
def test_hard_correlations_newton_equicorrelated_scale(name, C):
    p = C.shape[0]
    sol = sdp(C)
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    assert_feasible(C, sol.value)
    if int(sol.result) == RESULTS.successful:
        assert float(sol.stats["gap"]) <= 1e-5 * float(sol.stats["objective"])
    if p <= 10:
        assert_certificate(C, sol, _cvxpy_ref(C))
    eq = equicorrelated(C)
    assert int(eq.result) == RESULTS.successful
    assert_feasible(C, eq.value)
    sc = scale_to_feasible(C, np.ones(p))
    assert int(sc.result) == RESULTS.successful
    assert_feasible(C, sc.value)


@pytest.mark.parametrize(
    "name, C", [h for h in HARD if h[1].shape[0] <= 10], ids=[n for n, C in HARD if C.shape[0] <= 10]
)
def test_hard_correlations_coordinate(name, C):
    sol = sdp(C, method="coordinate")
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    assert_feasible(C, sol.value)
    assert_certificate(C, sol, _cvxpy_ref(C))


def _one_tiny_eigenvalue(seed, p, tiny):
    """A random correlation matrix with one eigenvalue ``tiny`` and the others in ``[0.3, 2]``."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    S = (Q * np.r_[tiny, rng.uniform(0.3, 2.0, p - 1)]) @ Q.T
    d = np.sqrt(np.diag(S))
    C = (S / np.outer(d, d) + S.T / np.outer(d, d)) / 2
    np.fill_diagonal(C, 1.0)
    return C


def test_coordinate_recovers_from_rounding_outside_the_cone():
    """One isolated eigenvalue 1e-10 (condition ~2e10): the optimum, 1^T s ~ 1.6e-5, is so small that
    the sweeps run at lam ~ 1e-11, where rounding left 2C - diag(s) indefinite by ~1e-15 before the
    first certificate. The Newton re-centring refused that start, every certificate was inf, and the
    run ended ``infeasible`` after all 500 sweeps (a valid Sigma, docstring: never infeasible). The
    start is now shrunk back into the cone; the reference is Clarabel."""
    C = _one_tiny_eigenvalue(1, 10, 1e-10)
    sol = sdp(C, method="coordinate")
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    assert np.isfinite(float(sol.stats["gap"]))
    assert_feasible(C, sol.value)
    assert_certificate(C, sol, _cvxpy_ref(C), atol=1e-10)


def test_dual_gap_of_a_boundary_s_is_finite():
    """The equicorrelated ``s`` makes 2C - diag(s) exactly singular; its certificate was inf (the
    re-centring refused the start). Closed form: OPT = p min(1, 2(1 - rho)) = 3.6 here."""
    C = 0.2 * np.eye(9) + 0.8
    dual, gap = sdp_dual_gap(C, np.full(9, 0.4), 1e-4)
    assert np.isfinite(float(dual)) and 3.6 - 1e-12 <= float(dual) <= 3.6 + 1e-2
    np.testing.assert_allclose(float(gap), float(dual) - 3.6, atol=1e-12)


@pytest.mark.parametrize(
    "name, C", [h for h in HARD if h[1].shape[0] >= 3], ids=[n for n, C in HARD if C.shape[0] >= 3]
)
def test_hard_correlations_asdp(name, C):
    sol = asdp(C, block_size=max(1, C.shape[0] // 2))
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    assert_feasible(C, sol.value)


def test_newton_starts_inside_when_lambda_min_is_tiny():
    """The interior start must be PD even when lambda_min(2C) is far below 1e-3 lam0 / p (was: step 0, infeasible)."""
    C = spiked_correlation(0, 10, 1e12)
    st = newton_init(C)
    assert np.linalg.eigvalsh(2 * C - np.diag(np.asarray(st.s)))[0] > 0
    sol = sdp(C)
    assert int(sol.result) in HONEST and int(sol.stats["num_steps"]) > 1


@pytest.mark.parametrize("name, d, U", hard_factor_models(), ids=[n for n, *_ in hard_factor_models()])
def test_hard_factor_models(name, d, U):
    model = FactorModel(jnp.asarray(d), jnp.asarray(U))
    sol = sdp_factor(model)
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    assert bool(sol.stats["feasible"])
    S = np.diag(d) + U @ U.T
    dg = np.diag(S)
    C = S / np.sqrt(np.outer(dg, dg))
    assert_feasible(C, np.asarray(sol.value) / dg)
    assert_certificate(C, sol, _cvxpy_ref(C))
    sc = scale_to_feasible(model, jnp.asarray(dg))
    assert int(sc.result) == RESULTS.successful
    assert_feasible(C, np.asarray(sc.value) / dg)


@pytest.mark.parametrize("p", [1, 2])
def test_factor_model_without_factors(p):
    sol = sdp_factor(FactorModel(jnp.full(p, 0.3), jnp.zeros((p, 0))))
    assert int(sol.result) == RESULTS.successful
    np.testing.assert_allclose(sol.value, 0.3)


def test_factor_inertia_test_allows_s_above_2d():
    """``s_j > 2 d_j`` makes ``Dt`` indefinite, yet ``A = Dt + 2 U U^T`` can be PD (was reported infeasible)."""
    d, U = jnp.array([0.2, 0.8]), jnp.array([[0.8**0.5], [0.2**0.5]])
    C = np.diag(d) + np.asarray(U @ U.T)
    for s in ([0.5, 0.1], [0.45, 0.3], [0.9, 0.9]):
        expected = np.linalg.eigvalsh(2 * C - np.diag(s))[0] > 0
        assert bool(_common.factor_is_pd(d, U, jnp.asarray(s))) == expected


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["ar1", "equi", "lowrank", "spiked"]),
    p=st.integers(1, 12),
    log_cond=st.floats(3.0, 12.0),
    seed=st.integers(0, 2**16),
)
def test_random_hard_correlations(kind, p, log_cond, seed):
    """Random members of the hard family: sdp (Newton), equicorrelated, scale_to_feasible stay feasible and honest."""
    gap_to_one = 10.0 ** (-log_cond / 2)
    if kind == "ar1":
        C = near_singular_ar1(p, 1 - gap_to_one)
    elif kind == "equi":
        C = near_singular_equicorrelated(p, 1 - gap_to_one)
    elif kind == "lowrank":
        C = rank_deficient_ridge(seed, p, max(1, p // 3), 10.0 ** (-log_cond))
    else:
        C = spiked_correlation(seed, p, 10.0**log_cond)
    sol = sdp(C)
    assert int(sol.result) in HONEST
    assert_feasible(C, sol.value)
    assert int(equicorrelated(C).result) == RESULTS.successful
    sc = scale_to_feasible(C, np.ones(p))
    assert int(sc.result) == RESULTS.successful
    assert_feasible(C, sc.value)


# --------------------------------------------------------------------------
# bad input under jit: result codes tell the truth (issue 19, class 2)
# --------------------------------------------------------------------------


def _bad_sigmas():
    C = equi_matrix(4, 0.5)
    nan = C.copy()
    nan[1, 2] = np.nan
    asym = C.copy()
    asym[0, 3] = 0.9
    indef = C.copy()
    indef[0, 1] = indef[1, 0] = -0.9
    indef[0, 2] = indef[2, 0] = 0.95
    w, V = np.linalg.eigh(equi_matrix(4, 0.3) + 0.2 * np.outer([1, -1, 1, -1], [1, 0, 0, -1]).clip(0))
    w[0] = -1e-3  # barely indefinite: ASDP's blocks are positive definite (it was infeasible with a finite s)
    mild = V @ np.diag(w) @ V.T
    d = np.sqrt(np.diag(mild))
    mild = mild / np.outer(d, d)
    mild = 0.5 * (mild + mild.T)
    np.fill_diagonal(mild, 1.0)
    return {"nan": nan, "asym": asym, "indefinite": indef, "barely_indefinite": mild}


BAD = _bad_sigmas()
SOLVERS = {
    "equicorrelated": equicorrelated,
    "newton": sdp,
    "coordinate": lambda S: sdp(S, method="coordinate"),
    "mvr": mvr,
    "maxent": maxent,
    "asdp": lambda S: asdp(S, block_size=2),
    "scale_to_feasible": lambda S: scale_to_feasible(S, jnp.ones(S.shape[0])),
}


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("solver", list(SOLVERS))
def test_bad_sigma_under_jit_is_never_successful(solver, bad):
    """Under jit the dense solvers reported an indefinite ``Sigma`` ``nonfinite`` (SDP, MVR, maximum
    entropy; ASDP with a partly NaN ``s``), or ``infeasible`` with a finite ``s`` (equicorrelated: 0;
    ASDP on a barely indefinite one). Now, as the group solvers: ``infeasible`` and ``s`` all NaN; NaN
    input ``nonfinite`` with ``s`` all NaN (``scale_to_feasible`` scales a given ``s``: its code only).
    A non-symmetric ``Sigma`` was iterated on (its lower triangle), a finite plausible ``s`` labelled
    ``infeasible``; it is now all NaN too, as the docstrings say."""
    f = SOLVERS[solver]
    S = BAD[bad]
    assert bad in ("nan", "asym") or np.linalg.eigvalsh(S)[0] < -5e-4
    with pytest.raises(ValueError):  # eager: the value checks raise
        f(S)
    sol = jax.jit(f)(jnp.asarray(S))
    code = int(sol.result)
    assert code == (RESULTS.nonfinite if bad == "nan" else RESULTS.infeasible)
    if solver != "scale_to_feasible":
        assert np.all(np.isnan(np.asarray(sol.value)))
    good = jax.jit(f)(jnp.asarray(equi_matrix(4, 0.5)))
    eager = f(equi_matrix(4, 0.5))
    assert int(good.result) == int(eager.result) == RESULTS.successful
    np.testing.assert_allclose(good.value, eager.value, rtol=1e-12, atol=0)


_FACTOR_SOLVERS = {
    f"{name}-{method}": functools.partial(fn, method=method)
    for name, fn in (("mvr", jaxknock.mvr_factor), ("maxent", jaxknock.maxent_factor), ("sdp", sdp_factor))
    for method in ("newton", "coordinate")
}


@pytest.mark.parametrize("solver", list(_FACTOR_SOLVERS))
def test_bad_factor_model_under_jit_gives_a_nan_s(solver):
    """Under jit a factor model with one NaN in ``U`` or ``d``, or a ``d_j <= 0``, got the right code
    (``nonfinite`` / ``infeasible``) beside a plausible ``s``: ``mvr_factor`` returned 5 of 6 entries
    finite for one NaN in ``U`` and all 6 for ``d_j = -1`` (only ``sdp_factor``'s Newton method gave NaN).
    Now ``s`` is all NaN, as the dense solvers' (``test_bad_sigma_under_jit_is_never_successful``).
    Reference: the eager call on the valid model, bit for bit."""
    f = _FACTOR_SOLVERS[solver]
    g = jax.jit(lambda d, U: f(FactorModel(d, U)))
    rng = np.random.default_rng(0)
    d, U = rng.uniform(0.5, 1.5, 6), rng.standard_normal((6, 2))
    bad_u, bad_d, neg_d = U.copy(), d.copy(), d.copy()
    bad_u[0, 1], bad_d[3], neg_d[2] = np.nan, np.inf, -1.0
    for dd, UU, code in ((d, bad_u, RESULTS.nonfinite), (bad_d, U, RESULTS.nonfinite), (neg_d, U, RESULTS.infeasible)):
        sol = g(jnp.asarray(dd), jnp.asarray(UU))
        assert int(sol.result) == code
        assert np.all(np.isnan(np.asarray(sol.value)))
    good, eager = g(jnp.asarray(d), jnp.asarray(U)), f(FactorModel(jnp.asarray(d), jnp.asarray(U)))
    assert int(good.result) == int(eager.result)
    assert np.all(np.isfinite(np.asarray(good.value)))
    np.testing.assert_array_equal(np.asarray(good.value), np.asarray(eager.value))


_MODEL = FactorModel(jnp.full(5, 0.5), jnp.full((5, 1), np.sqrt(0.5)))
TOL_SOLVERS = {
    "newton": lambda t: sdp(jnp.asarray(equi_matrix(5, 0.5)), tol=t),
    "mvr": lambda t: mvr(jnp.asarray(equi_matrix(5, 0.5)), tol=t),
    "group": lambda t: jaxknock.group_s_matrix(jnp.asarray(equi_matrix(5, 0.5)), [0, 0, 1, 1, 2], method="sdp", tol=t),
    "sdp_factor": lambda t: sdp_factor(_MODEL, tol=t),  # the model closed over by the caller's jit
}


@pytest.mark.parametrize("solver", list(TOL_SOLVERS))
def test_a_bad_traced_tol_is_never_successful(solver):
    """Under ``jit`` with a traced ``tol`` (the eager check refuses these): ``tol = inf`` certified the first
    iterate (``successful``, ``s`` of one step), ``NaN`` / ``0`` / ``-1`` ran to ``max_steps`` and returned
    a finite iterate. Now ``infeasible`` and NaN. ``sdp_factor`` on a model its caller's ``jit`` closes
    over raised a ``TracerBoolConversionError`` (the model's value check ran traced). Reference: the eager
    call at a valid ``tol``."""
    f = TOL_SOLVERS[solver]
    g = jax.jit(f)
    for bad in (np.inf, np.nan, 0.0, -1.0):
        sol = g(bad)
        leaves = [a for a in jax.tree.leaves(sol.value) if jnp.issubdtype(a.dtype, jnp.inexact)]
        assert int(sol.result) == RESULTS.infeasible, bad
        assert all(np.all(np.isnan(np.asarray(a))) for a in leaves), bad
    good, eager = g(1e-6), f(1e-6)
    assert int(good.result) == int(eager.result) == RESULTS.successful
    for a, b in zip(jax.tree.leaves(good.value), jax.tree.leaves(eager.value)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", ["newton", "mvr", "equicorrelated"])
def test_a_sigma_closed_over_by_a_callers_jit(solver):
    """``jax.jit(lambda t: sdp(Sigma, tol=t))`` with a concrete ``Sigma`` closed over: the eager value check
    of ``Sigma`` called its jitted flags inside the caller's trace and read tracers back
    (``TracerArrayConversionError``). It now runs at once. Reference: the eager call."""
    f = {"newton": sdp, "mvr": mvr, "equicorrelated": lambda S, tol: equicorrelated(S)}[solver]
    Sigma = jnp.asarray(equi_matrix(5, 0.5))
    jitted = jax.jit(lambda t: f(Sigma, tol=t))(1e-6)
    eager = f(Sigma, tol=1e-6)
    assert int(jitted.result) == int(eager.result) == RESULTS.successful
    np.testing.assert_allclose(np.asarray(jitted.value), np.asarray(eager.value), rtol=1e-10)
    bad = jnp.asarray(BAD["nan"])
    with pytest.raises(ValueError, match="Sigma"):  # a bad closed-over Sigma is still named, as eagerly
        jax.jit(lambda t: f(bad, tol=t))(1e-6)


@pytest.mark.parametrize("s", [[-1.0, -1.0, -1.0], [1.0, -0.5, 1.0], [1.0, np.nan, 1.0]])
def test_scale_to_feasible_bad_s_under_jit(s):
    C, s = jnp.asarray(equi_matrix(3, 0.5)), jnp.asarray(s)
    with pytest.raises(ValueError):
        scale_to_feasible(C, s)
    code = int(jax.jit(scale_to_feasible)(C, s).result)
    assert code == (RESULTS.nonfinite if np.isnan(s).any() else RESULTS.infeasible)


@pytest.mark.parametrize(
    "d, expected", [([0.5, np.nan, 0.5], RESULTS.nonfinite), ([0.5, -0.1, 0.5], RESULTS.infeasible)]
)
def test_sdp_factor_bad_model_under_jit(d, expected):
    U = jnp.full((3, 1), 0.5**0.5)
    with pytest.raises(ValueError):
        sdp_factor(FactorModel(jnp.asarray(d), U))
    f = jax.jit(lambda d, U: sdp_factor(FactorModel(d, U)))
    assert int(f(jnp.asarray(d), U).result) == expected
    assert int(f(jnp.full(3, 0.5), U).result) == RESULTS.successful


def _backend_compiles(fn):
    """Number of XLA compilations while running ``fn()``."""
    compiles = []

    def listener(event, duration, **kwargs):
        if "backend_compile" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.block_until_ready(fn().value)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(compiles)


_C12 = ar1(12, 0.6)
_MODEL12 = FactorModel(jnp.linspace(0.5, 1.0, 12), jnp.asarray(np.random.default_rng(3).standard_normal((12, 2)) / 2))


@pytest.mark.parametrize(
    "call, retuned",
    [
        (lambda: equicorrelated(_C12), None),
        (lambda: sdp(_C12), lambda: sdp(_C12, tol=3e-5, lam0=0.3, max_steps=400)),
        (
            lambda: sdp(_C12, method="coordinate"),
            lambda: sdp(_C12, method="coordinate", tol=3e-5, decay=0.7, lam0=0.4, max_steps=400),
        ),
        (lambda: sdp(np.stack([_C12] * 3)), lambda: sdp(np.stack([_C12] * 3), tol=3e-5)),
        (lambda: sdp_factor(_MODEL12), lambda: sdp_factor(_MODEL12, tol=3e-5, decay=0.5, lam0=0.3)),
        (lambda: asdp(_C12, block_size=5), lambda: asdp(_C12, block_size=5, tol=3e-5, max_steps=400)),
        (
            lambda: scale_to_feasible(_C12, np.full(12, 0.9)),
            lambda: scale_to_feasible(_C12, np.full(12, 0.9), max_steps=30),
        ),
    ],
    ids=["equicorrelated", "sdp", "sdp-coordinate", "sdp-batch", "sdp_factor", "asdp", "scale_to_feasible"],
)
def test_no_recompile_on_repeat_or_new_settings(call, retuned):
    """Numeric settings (tol, lam0, decay, max_steps) are traced: neither a repeat nor a new value compiles."""
    call()
    assert _backend_compiles(call) == 0
    if retuned is not None:
        assert _backend_compiles(retuned) == 0


def test_solvers_make_no_implicit_device_to_host_transfers():
    """Validation brings back a few scalars explicitly; nothing else leaves the device."""
    C = jnp.asarray(_C12)
    s = jnp.full(12, 0.9)
    calls = [
        lambda: equicorrelated(C),
        lambda: sdp(C),
        lambda: sdp(C, method="coordinate"),
        lambda: asdp(C, block_size=5),
        lambda: scale_to_feasible(C, s),
        lambda: sdp_factor(_MODEL12),
    ]
    for call in calls:
        call()
    with jax.transfer_guard_device_to_host("disallow"):
        for call in calls:
            jax.block_until_ready(call().value)


@pytest.mark.parametrize("C", [ar1(40, 0.6), factor_correlation(40, 3, 4)], ids=["ar1", "factor"])
def test_min_eig_is_a_certified_lower_bound(C):
    sol = sdp(C)
    s_corr = np.asarray(sol.value) / np.diag(C)
    exact = np.linalg.eigvalsh(2 * C - np.diag(s_corr))[0]
    bound = float(sol.stats["min_eig"])
    # a lower bound (up to Cholesky rounding), within 1% when inverse iteration converged
    assert 0 <= bound <= exact + 1e-12
    assert bound >= 0.5 * exact
    ex = sdp(C, exact_min_eig=True)
    assert abs(float(ex.stats["min_eig"]) - exact) <= 1e-10
    assert float(ex.stats["objective"]) == float(sol.stats["objective"])
    a = asdp(C, block_size=10, exact_min_eig=True)
    s_a = np.asarray(a.value) / np.diag(C)
    assert abs(float(a.stats["min_eig"]) - np.linalg.eigvalsh(2 * C - np.diag(s_a))[0]) <= 1e-10


def test_min_eig_bound_on_feasible_and_infeasible_matrices():
    rng = np.random.default_rng(0)
    for shift in (0.3, 1e-6, -0.2):
        G = rng.standard_normal((30, 30))
        A = G @ G.T / 30
        A = A - (np.linalg.eigvalsh(A)[0] - shift) * np.eye(30)  # lambda_min(A) = shift
        feasible, lower = certificate.min_eig_bound(jnp.asarray(A))
        assert bool(feasible) == (shift > 0)
        assert float(lower) <= shift + 1e-12
        if shift > 0:
            assert float(lower) >= 0.5 * shift
        else:
            assert float(lower) < 0
    np.testing.assert_allclose(certificate.smallest_eigenvalue(jnp.asarray(A)), np.linalg.eigvalsh(A)[0], atol=1e-12)


# --------------------------------- issue 19: throw=True names the function and the code


def test_throw_eager_names_function_and_code():
    import jaxknock

    with pytest.raises(jaxknock.SolverError, match=r"jaxknock\.sdp: .*result code 1 \(max_steps_reached\)") as err:
        sdp(factor_correlation(30, 2, 1), max_steps=3, throw=True)
    assert err.value.where == "sdp" and err.value.code == RESULTS.max_steps_reached


def test_throw_under_jit_reraised_cleanly():
    import jaxknock

    bad = jnp.array([[1.0, 2.0], [0.5, 1.0]])  # not symmetric: infeasible under jit
    f = jax.jit(lambda S: sdp(S, throw=True).value)
    with pytest.raises(RuntimeError, match=r"jaxknock\.sdp: .*result code 3 \(infeasible\)"):
        f(bad).block_until_ready()  # without the wrapper: JAX's runtime error, ending in our message
    with pytest.raises(jaxknock.SolverError) as err:
        with jaxknock.reraise_solver_errors():
            f(bad).block_until_ready()
    assert err.value.where == "sdp" and err.value.code == RESULTS.infeasible
    assert "CpuCallback" not in str(err.value) and "Traceback" not in str(err.value)
    good = jnp.array([[1.0, 0.5], [0.5, 1.0]])
    with jaxknock.reraise_solver_errors():
        assert bool(jnp.all(jnp.isfinite(f(good))))


@pytest.mark.parametrize("lam", [-1e-3, 0.0, np.nan])
def test_sdp_dual_gap_rejects_bad_barrier(lam):
    C = 0.5 * jnp.eye(4) + 0.5
    with pytest.raises(ValueError, match="lam must be a positive, finite barrier parameter"):
        sdp_dual_gap(C, jnp.full(4, 0.9), lam)
    dual, gap = jax.jit(sdp_dual_gap)(C, jnp.full(4, 0.9), lam)
    assert bool(jnp.isnan(dual)) and bool(jnp.isnan(gap))  # never a "certified" -7e300
    dual, gap = jax.jit(sdp_dual_gap)(C, jnp.full(4, 0.9), 1e-3)
    assert float(gap) >= 4 - 3.6 - 1e-9


def test_sdp_empty_sigma_names_sigma():
    with pytest.raises(ValueError, match="Sigma is empty"):
        sdp(jnp.zeros((0, 0)))


def test_block_size_and_max_steps_checks_of_the_dense_solvers():
    """sdp(block_size=0) ran as the default block (asdp / mvr raised); mvr / maxent refused a NumPy integer
    block_size; a traced max_steps was told "must be a positive integer", although its value was fine."""
    C = factor_correlation(6, 2, 1)
    for b in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="block_size must be a positive integer"):
            sdp(C, block_size=b)
    for solve in (sdp, mvr, maxent):
        np.testing.assert_array_equal(solve(C, block_size=np.int64(3)).value, solve(C, block_size=3).value)
    # asdp(block_size=True) solved 1 x 1 blocks and scale_to_feasible(max_steps=True) bisected once
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        asdp(C, block_size=True)
    with pytest.raises(ValueError, match="max_steps must be a non-negative integer"):
        scale_to_feasible(C, np.ones(6), max_steps=True)
    # tol = inf "certified" the first iterate (sdp, mvr: successful, s ~ 1e-4); lam0 = inf ran to stagnated
    for solve in (sdp, mvr, maxent, lambda C, **kw: sdp_factor(FactorModel(jnp.ones(6), jnp.ones((6, 1))), **kw)):
        with pytest.raises(ValueError, match="tol must be positive and finite"):
            solve(C, tol=np.inf)
    with pytest.raises(ValueError, match="lam0 must be positive and finite"):
        sdp(C, lam0=np.inf)
    with pytest.raises(TypeError, match="max_steps must be a concrete .* traced"):
        jax.jit(lambda m: sdp(C, max_steps=m))(5)


def test_numeric_settings_of_any_scalar_type_share_one_program():
    """The numeric settings go into the solvers' programs as traced arguments, whose type is part of the
    program's cache key: ``tol=np.float64(1e-5)`` (a strong float64), ``jnp.float32`` or ``max_steps=
    np.int64(500)`` against the default Python scalars (weakly typed) compiled the whole solver again (one
    program per settings' type for ``sdp``, ``asdp`` and ``sdp_factor``). Concrete settings now enter as
    Python scalars: one program, the same ``s`` to the bit. (Shapes the batching tests above compile.)"""
    from helpers import count_compiles, random_factor_model

    C = jnp.asarray(ar1_correlation(12, 0.5))
    model = FactorModel(*(jnp.asarray(a) for a in random_factor_model(1, 12, 2)))
    runs = {
        "sdp": lambda t, k, d, l: sdp(C, tol=t, max_steps=k, decay=d, lam0=l).value,
        "asdp": lambda t, k, d, l: asdp(C, block_size=5, tol=t, max_steps=k).value,
        "sdp_factor": lambda t, k, d, l: sdp_factor(model, tol=t, max_steps=k, decay=d, lam0=l).value,
    }
    typed = [
        (np.float64(1e-5), np.int64(500), np.float64(0.8), np.float64(1.0)),
        (jnp.float64(1e-5), jnp.int32(500), jnp.float64(0.8), jnp.float64(1.0)),
        (1e-5, 500, 0.8, 1),  # lam0 an integer
    ]
    for name, run in runs.items():
        ref = np.asarray(run(1e-5, 500, 0.8, 1.0))
        with count_compiles() as compiles:
            out = [np.asarray(run(*settings)) for settings in typed]
        assert [c.split()[1] for c in compiles] == [], name
        for o in out:
            np.testing.assert_array_equal(o, ref)


def test_dual_gap_takes_a_barrier_parameter_of_any_scalar_type_without_compiling():
    """``sdp_dual_gap``'s check of ``lam`` computed its flag on the device as eager programs of the scalar's
    type: ``lam=np.float64(0.1)``, ``jnp.float32`` or an integer after a Python float compiled one to four
    programs in a warm call. A concrete ``lam`` is checked on the host and passed as a NumPy scalar now."""
    from helpers import count_compiles

    C = ar1_correlation(12, 0.5)
    s = np.full(12, 0.5)
    ref = np.asarray(sdp_dual_gap(C, s, 1.0))
    typed = [np.float64(1.0), jnp.float64(1.0), 1, np.float32(1.0), jnp.float32(1.0)]
    with count_compiles() as compiles:
        out = [np.asarray(sdp_dual_gap(C, s, lam)) for lam in typed]
    assert [c.split()[1] for c in compiles] == []
    for o in out:
        np.testing.assert_array_equal(o, ref)


def test_step_settings_of_any_scalar_type_share_one_program():
    """The public steps take ``tol`` / ``decay`` traced, but ``tol=np.float64(1e-5)`` (a strong float64) after
    the default Python float compiled ``sdp_step`` / ``newton_step`` / ``sdp_factor_step`` again (one program
    per type). They go in as Python floats now: one program, the same state to the bit."""
    from helpers import count_compiles, random_factor_model

    # the shapes of the step tests above (p = 30; a 40 x 3 factor model): their programs, compiled once
    C = jnp.asarray(factor_correlation(30, 2, 1))
    model = FactorModel(*(jnp.asarray(a) for a in random_factor_model(1, 40, 3)))
    st, b = sdp_init(C)
    nst, fst = newton_init(C), sdp_factor_init(model)
    runs = {
        "sdp_step": lambda t, d: sdp_step(st, C, block_size=b, tol=t, decay=d),
        "newton_step": lambda t, d: newton_step(nst, C, tol=t),
        "sdp_factor_step": lambda t, d: sdp_factor_step(fst, model, tol=t, decay=d),
    }
    typed = [(np.float64(1e-5), np.float64(0.7)), (jnp.float64(1e-5), jnp.float64(0.7))]
    for name, run in runs.items():
        ref = jax.tree.leaves(run(1e-5, 0.7))
        with count_compiles() as compiles:
            out = [jax.tree.leaves(run(*settings)) for settings in typed]
        assert [c.split()[1] for c in compiles] == [], name
        for o in out:
            for a, r in zip(o, ref):
                np.testing.assert_array_equal(a, r)
