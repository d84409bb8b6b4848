"""sdp_factor(method="newton"): the factor-model barrier Newton-CG path follower."""

import warnings

import cvxpy as cp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jaxknock import RESULTS
from jaxknock.covariance import FactorModel
from jaxknock.svector import factor_newton, sdp, sdp_factor
from jaxknock.svector.certificate import gap_from_inverse_diag

HONEST = (RESULTS.successful, RESULTS.stagnated)
_GAP_SEARCH, _GAP_SORT = (
    jax.jit(jax.vmap(lambda s, h, lam, search=search: gap_from_inverse_diag(s, h, lam, search=search)[0]))
    for search in (True, False)
)


def random_model(p, k, seed, dlo=0.1, scale=1.0):
    """``diag(d) + U U^T`` with ``d ~ U[dlo, 1]``; ``dlo`` tiny gives a nearly singular ``Sigma``."""
    rng = np.random.default_rng(seed)
    d = rng.uniform(dlo, 1.0, p) if dlo > 1e-4 else np.full(p, dlo)
    return FactorModel(jnp.asarray(d), jnp.asarray(scale * rng.standard_normal((p, k)) / np.sqrt(k)))


def correlation(model):
    S = np.diag(np.asarray(model.d)) + np.asarray(model.U) @ np.asarray(model.U).T
    dg = np.sqrt(np.diag(S))
    return S / np.outer(dg, dg), np.diag(S)


def cvxpy_opt(C):
    """``(value, lower)``: Clarabel's optimum and the objective of its ``s`` scaled to feasibility.

    On near-singular problems Clarabel is accurate to ~1e-8 absolute only and its
    ``s`` may be slightly infeasible; ``t s`` with ``t = 1 / lambda_max(diag(s), 2C)``
    (generalised eigenvalue) is feasible, so ``lower`` is a certain lower bound on OPT.
    """
    p = C.shape[0]
    s = cp.Variable(p)
    prob = cp.Problem(cp.Maximize(cp.sum(s)), [2 * C - cp.diag(s) >> 0, s >= 0, s <= 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=500)
    assert prob.status in ("optimal", "optimal_inaccurate")
    x = np.clip(np.asarray(s.value), 0.0, 1.0)
    t = min(1.0, 1.0 / scipy.linalg.eigh(np.diag(x), 2 * C, eigvals_only=True)[-1]) * (1 - 1e-12)
    return float(prob.value), float(t * x.sum())


_MODELS30 = [
    ("moderate", random_model(30, 3, 0)),
    ("strong", random_model(30, 3, 1, scale=3.0)),
    ("near-singular-d1e-6", random_model(30, 3, 2, dlo=1e-6, scale=2.0)),
    ("near-singular-d1e-9", random_model(30, 3, 3, dlo=1e-9)),
]


@pytest.mark.parametrize("model", [m for _, m in _MODELS30], ids=[n for n, _ in _MODELS30])
def test_newton_matches_dense_sdp_and_clarabel_with_a_valid_certificate(model):
    sol = sdp_factor(model, tol=1e-6, method="newton")
    assert int(sol.result) in HONEST, RESULTS(int(sol.result)).name
    C, dg = correlation(model)
    s = np.asarray(sol.value) / dg
    # feasible: 0 <= s <= 1 and 2C - diag(s) has a Cholesky factor; at d = 1e-9 the optimum is
    # within rounding of forming 2C densely (lambda_min(2C) ~ 6e-10), so there: >= -1e-13 ||2C||
    assert np.all(s >= 0) and np.all(s <= 1 + 1e-12)
    if np.min(np.asarray(model.d)) >= 1e-6:
        np.linalg.cholesky(2 * C - np.diag(s))
    else:
        assert np.linalg.eigvalsh(2 * C - np.diag(s))[0] >= -1e-13 * 2 * np.abs(C).sum(axis=1).max()
    assert bool(sol.stats["feasible"])
    obj, gap = float(sol.stats["objective"]), float(sol.stats["gap"])
    np.testing.assert_allclose(obj, s.sum(), rtol=1e-12)
    value, lower = cvxpy_opt(C)
    # the certificate is an upper bound on OPT (>= Clarabel's feasible lower bound) and the gap is honest
    assert gap >= 0
    assert obj <= value + 1e-8
    assert lower <= obj + gap
    # and the objective equals the dense SDP's within the two certified gaps
    dense = sdp(C, tol=1e-6)
    assert abs(obj - float(dense.stats["objective"])) <= gap + float(dense.stats["gap"]) + 1e-9


def test_newton_agrees_with_coordinate_method():
    model = random_model(30, 3, 5, scale=2.0)
    a, b = sdp_factor(model, tol=1e-6, method="newton"), sdp_factor(model, tol=1e-6, method="coordinate")
    assert int(a.result) == int(b.result) == RESULTS.successful
    assert abs(float(a.stats["objective"]) - float(b.stats["objective"])) <= float(a.stats["gap"] + b.stats["gap"])
    assert int(a.stats["num_loop_trips"]) < int(b.stats["num_loop_trips"])


def test_hadamard_matvec_equals_dense():
    """``(A^{-1} o A^{-1}) v`` and ``diag(A^{-1})`` from Woodbury, including ``s_j > 2 d_j``."""
    model = random_model(20, 3, 6, dlo=1e-3, scale=2.0)
    d, U = np.asarray(model.d), np.asarray(model.U)
    s = np.linspace(0.0, 0.05, 20)  # crosses 2 d_j for several coordinates
    A = np.diag(2 * d - s) + 2 * U @ U.T
    assert np.linalg.eigvalsh(A)[0] > 0 and np.any(s > 2 * d)
    B = np.linalg.inv(A)
    v = np.random.default_rng(0).standard_normal(20)
    e, W, WQ, r, h = factor_newton.woodbury(model.d, model.U, jnp.asarray(s))
    np.testing.assert_allclose(h, np.diag(B), rtol=1e-8)
    # the product the CG runs (from the materialised U^T, in the CG dtype, float64)
    ops = factor_newton.operands(model.U)
    low = factor_newton.hadamard_matvec_cg(ops, e, WQ.astype(ops.U_cg.dtype), r, jnp.asarray(v))
    assert low.dtype == jnp.float64
    np.testing.assert_allclose(low, (B * B) @ v, rtol=1e-8)


def test_certificate_by_bisection_equals_the_sorted_one():
    """``gap_from_inverse_diag(search=True)`` (no sort) gives the sort-based dual bound, ties included."""
    rng = np.random.default_rng(11)
    for p in (2, 7, 300):
        h = np.exp(rng.normal(0.0, 3.0, (5, p)))
        h[1] = np.repeat(h[1, : (p + 2) // 3], 3)[:p]  # ties
        h[2] = 1.0  # all equal
        s = rng.uniform(0.0, 1.0, (5, p))
        s[3] = 0.0
        lam = np.exp(rng.normal(0.0, 2.0, 5))
        args = jnp.asarray(s), jnp.asarray(h), jnp.asarray(lam)
        got, ref = _GAP_SEARCH(*args), _GAP_SORT(*args)
        np.testing.assert_allclose(got, ref, rtol=1e-13)
        # not all at t = 0 (dual = p): the search itself is exercised
        assert np.any(np.asarray(ref) < p - 0.1)


def test_vmap_batch_equals_loop_and_no_recompile_on_new_tol():
    models = [random_model(30, 3, i) for i in (7, 8, 9)]
    batch = FactorModel(jnp.stack([m.d for m in models]), jnp.stack([m.U for m in models]))
    sol = sdp_factor(batch, tol=1e-5, method="newton")
    assert sol.result.shape == (3,) and sol.stats["num_loop_trips"].shape == (3,)
    for i, m in enumerate(models):
        one = sdp_factor(m, tol=1e-5, method="newton")
        np.testing.assert_allclose(sol.value[i], one.value, atol=1e-9)
    via_vmap = jax.vmap(lambda d, U: sdp_factor(FactorModel(d, U), tol=1e-5, method="newton").value)(batch.d, batch.U)
    np.testing.assert_allclose(via_vmap, sol.value, atol=1e-9)

    compiles = []

    def listener(event, duration, **kwargs):
        if "backend_compile" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.block_until_ready(
            sdp_factor(models[0], tol=3e-4, decay=0.2, lam0=0.01, max_steps=77, method="newton").value
        )
        jax.block_until_ready(sdp_factor(models[0], tol=2e-6, method="newton").value)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []


def test_loop_trips_do_not_grow_with_p():
    trips, sols = {}, {}
    for p in (50, 500):
        sol = sols[p] = sdp_factor(random_model(p, 3, 10), tol=1e-5, method="newton")
        assert int(sol.result) == RESULTS.successful
        trips[p] = int(sol.stats["num_loop_trips"])
        assert trips[p] >= int(sol.stats["num_steps"]) > 0
    assert trips[500] <= 2 * trips[50], trips
    # the step length starts from the fraction accepted before: few failed inertia tests
    steps, cg = int(sols[500].stats["num_steps"]), int(sols[500].state.cg_iters)
    assert 0 <= trips[500] - steps - cg <= steps // 2, (trips[500], steps, cg)
    # the coordinate method's depth is proportional to p
    coord = sdp_factor(random_model(500, 3, 10), tol=1e-5, method="coordinate")
    assert int(coord.stats["num_loop_trips"]) > 20 * trips[500]


def test_bad_method_is_rejected():
    with pytest.raises(ValueError, match="method"):
        sdp_factor(random_model(10, 2, 0), method="jacobi")


def test_hard_factor_models_and_bad_input_under_jit():
    """The smallest, most degenerate models (p = 2, d down to 1e-9, equal rows): certified and feasible."""
    from helpers import hard_factor_models

    for name, d, U in hard_factor_models():
        if U.shape[0] != 2:
            continue  # p = 2: the most degenerate cases, one compilation (p = 3, 10 in bench/notes)
        sol = sdp_factor(FactorModel(jnp.asarray(d), jnp.asarray(U)), method="newton")
        assert int(sol.result) == RESULTS.successful and bool(sol.stats["feasible"]), name
        assert float(sol.stats["gap"]) >= 0
        S = np.diag(d) + U @ U.T
        ev = np.linalg.eigvalsh(2 * S - np.diag(np.asarray(sol.value)))
        assert ev[0] >= -1e-13 * ev[-1], name
    f = jax.jit(lambda d, U: sdp_factor(FactorModel(d, U), method="newton").result)
    assert int(f(jnp.array([0.5, -0.1]), jnp.ones((2, 1)))) == RESULTS.infeasible
    assert int(f(jnp.array([0.5, jnp.nan]), jnp.ones((2, 1)))) == RESULTS.nonfinite
