"""num_knockoffs = m for the SDP solvers (sdp newton / coordinate, asdp, sdp_factor) against cvxpy + Clarabel."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_factor_model

import jaxknock
from jaxknock import RESULTS, FactorModel

P = 12


def wishart_correlation(seed, p, n_factor=2):
    rng = np.random.default_rng(seed)
    S = np.cov(rng.standard_normal((n_factor * p, p)).T)
    d = np.sqrt(np.diag(S))
    return S / np.outer(d, d)


def cvx_sdp(C, m):
    """``max 1^T s`` s.t. ``(m+1)/m C - diag(s) >= 0``, ``0 <= s <= 1`` (cvxpy + Clarabel, tight)."""
    cp = pytest.importorskip("cvxpy")
    p = C.shape[0]
    s = cp.Variable(p)
    cons = [(m + 1) / m * C - cp.diag(s) >> 0, s >= 0, s <= 1]
    prob = cp.Problem(cp.Maximize(cp.sum(s)), cons)
    with warnings.catch_warnings():
        # Clarabel flags "inaccurate" near its tolerance floor; the value is still far tighter than compared
        warnings.simplefilter("ignore", UserWarning)
        prob.solve(solver="CLARABEL", tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9, max_iter=500)
    assert prob.status in ("optimal", "optimal_inaccurate")
    return prob.value, np.asarray(s.value)


def factor_correlation(p, k, seed, diag):
    """``D + V Lambda V^T`` rescaled to a correlation (the thesis benchmark family)."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((p, k))
    S = diag * np.eye(p) + (V * rng.uniform(0, 1, k)) @ V.T
    d = np.sqrt(np.diag(S))
    return S / np.outer(d, d)


C_W = wishart_correlation(0, P)
# the coordinate ascent jams short of OPT on small Wishart matrices for every m (a known
# limitation, see sdp's docstring); it certifies on the thesis' factor correlations
C_CO = factor_correlation(16, 2, 1, 0.3)
FACTOR = FactorModel(*map(jnp.asarray, random_factor_model(3, P, 2)))
C_F = np.asarray(FACTOR.dense())
C_F = C_F / np.sqrt(np.outer(np.diag(C_F), np.diag(C_F)))
# the cap s <= 1 binds for m > 1 on a nearly independent design (the scaled-Sigma shortcut
# without the cap would give s = (m+1)/(2m) < 1 here)
C_I = 0.9 * np.eye(P) + 0.1 * wishart_correlation(1, P, 8)
REF = {(name, m): cvx_sdp(C, m) for name, C in (("wishart", C_W), ("near_id", C_I)) for m in (2, 3)}


def _check(sol, C, m, f_ref, tol=1e-5):
    s = np.asarray(sol.value)
    d = np.diag(C) if C is not None else 1.0
    obj = float(sol.stats["objective"])
    assert int(sol.result) == RESULTS.successful
    assert abs(obj - f_ref) <= 5 * tol * f_ref
    # certified gap bounds the true suboptimality (reference accurate to ~1e-9)
    assert f_ref - obj <= float(sol.stats["gap"]) + 1e-7 * f_ref
    assert float(sol.stats["gap"]) <= tol * obj * 1.0001
    if C is not None:
        assert np.linalg.eigvalsh((m + 1) / m * C - np.diag(s / d))[0] > -1e-9
    assert np.all(s / d <= 1 + 1e-12) and np.all(s >= 0)


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("name", ["wishart", "near_id"])
def test_sdp_newton_matches_cvxpy(name, m):
    C = C_W if name == "wishart" else C_I
    f_ref, s_ref = REF[(name, m)]
    sol = jaxknock.sdp(jnp.asarray(C), num_knockoffs=m, tol=1e-6)
    _check(sol, C, m, f_ref, 1e-6)
    assert float(sol.stats["min_eig"]) > 0
    if name == "near_id":
        np.testing.assert_allclose(np.asarray(sol.value), s_ref, atol=1e-4)
        assert np.max(np.asarray(sol.value)) > (m + 1) / (2 * m) + 0.05  # the cap 1, not c/2


@pytest.mark.parametrize("m", [2, 3])
def test_sdp_coordinate_matches_cvxpy(m):
    f_ref, _ = cvx_sdp(C_CO, m)
    sol = jaxknock.sdp(jnp.asarray(C_CO), num_knockoffs=m, tol=1e-5, method="coordinate", block_size=4)
    _check(sol, C_CO, m, f_ref, 1e-5)


@pytest.mark.parametrize("m", [2, 3])
def test_asdp_feasible_below_opt(m):
    f_ref, _ = REF[("wishart", m)]
    sol = jaxknock.asdp(jnp.asarray(C_W), block_size=6, num_knockoffs=m)
    s = np.asarray(sol.value)
    # feasible for the m-knockoff constraint (not only for 2C), tight (gamma at the boundary), below OPT
    lmin = np.linalg.eigvalsh((m + 1) / m * C_W - np.diag(s))[0]
    assert -1e-9 < lmin < 1e-6
    assert 0 <= float(sol.stats["min_eig"]) <= lmin + 1e-9
    assert 0.5 * f_ref < np.sum(s) <= f_ref + 1e-6


@pytest.mark.parametrize("m", [2, 3])
def test_sdp_factor_matches_cvxpy(m):
    f_ref, _ = cvx_sdp(C_F, m)
    diag = np.diag(np.asarray(FACTOR.dense()))
    sol = jaxknock.sdp_factor(FACTOR, num_knockoffs=m, tol=1e-5)
    assert int(sol.result) == RESULTS.successful and bool(sol.stats["feasible"])
    assert abs(float(sol.stats["objective"]) - f_ref) <= 5e-5 * f_ref
    assert f_ref - float(sol.stats["objective"]) <= float(sol.stats["gap"]) + 1e-7 * f_ref
    s_corr = np.asarray(sol.value) / diag
    assert np.linalg.eigvalsh((m + 1) / m * C_F - np.diag(s_corr))[0] > -1e-9


def test_m1_unchanged_and_m_shrinks_s():
    C = jnp.asarray(C_W)
    s1 = np.asarray(jaxknock.sdp(C).value)
    np.testing.assert_array_equal(s1, np.asarray(jaxknock.sdp(C, num_knockoffs=1).value))
    s2 = np.asarray(jaxknock.sdp(C, num_knockoffs=2).value)
    assert np.sum(s2) < np.sum(s1)


@pytest.mark.parametrize("fn", [jaxknock.sdp, jaxknock.asdp])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_num_knockoffs(fn, bad):
    with pytest.raises((ValueError, TypeError), match="num_knockoffs"):
        fn(jnp.asarray(C_W), num_knockoffs=bad)
    with pytest.raises((ValueError, TypeError), match="num_knockoffs"):
        jaxknock.sdp_factor(FACTOR, num_knockoffs=bad)


@pytest.mark.parametrize("s_method", ["sdp"])
def test_pipeline_routes_num_knockoffs_to_vector_solvers(s_method):
    import jax

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, P)) @ np.linalg.cholesky(C_W).T
    y = X[:, :3] @ np.ones(3) + rng.standard_normal(60)
    sel = jaxknock.knockoff_filter(
        jax.random.key(0), X, y, fdr=0.3, s_method=s_method, statistic="correlation", num_knockoffs=2
    )
    s = np.asarray(sel.s_solution.value)
    assert s.shape == (P,) and int(sel.s_solution.result) == RESULTS.successful
    # feasible for m = 2 and not for the s of m = 1 (the solver saw num_knockoffs = 2)
    Sigma = np.asarray(jaxknock.to_correlation(jaxknock.ledoit_wolf((X - X.mean(0)) / X.std(0))[0]))
    assert np.linalg.eigvalsh(1.5 * Sigma - np.diag(s))[0] > -1e-9
    solver = {"sdp": jaxknock.sdp, "mvr": jaxknock.mvr}[s_method]
    np.testing.assert_allclose(s, np.asarray(solver(jnp.asarray(Sigma), num_knockoffs=2, tol=1e-4).value), atol=1e-6)


def test_pipeline_num_knockoffs_asdp_uses_the_block_size():
    """``knockoff_filter(s_method="asdp", asdp_block_size=b, num_knockoffs=m)`` solves with blocks of ``b``
    (it used ``asdp``'s default of 100 whatever ``b`` was)."""
    import jax

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, P)) @ np.linalg.cholesky(C_W).T
    y = X[:, :3] @ np.ones(3) + rng.standard_normal(60)
    Sigma = np.asarray(jaxknock.to_correlation(jaxknock.ledoit_wolf((X - X.mean(0)) / X.std(0))[0]))
    ref = {b: np.asarray(jaxknock.asdp(jnp.asarray(Sigma), block_size=b, num_knockoffs=2).value) for b in (4, 100)}
    assert np.max(np.abs(ref[4] - ref[100])) > 1e-3  # the block size changes the answer on this design
    for b in (4, 100):
        sel = jaxknock.knockoff_filter(
            jax.random.key(0),
            X,
            y,
            fdr=0.3,
            s_method="asdp",
            asdp_block_size=b,
            statistic="correlation",
            num_knockoffs=2,
        )
        np.testing.assert_allclose(np.asarray(sel.s_solution.value), ref[b], atol=1e-4)  # the filter solves at sdp_tol


@pytest.mark.parametrize("method", ["sdp_factor", "mvr_factor"])
def test_pipeline_factor_methods_num_knockoffs(method):
    """``s_method="sdp_factor"`` / ``"mvr_factor"`` with ``m > 1``: that solver with num_knockoffs=m
    on the data's factor model."""
    import jax

    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, P)) @ np.linalg.cholesky(C_F).T
    y = X[:, :3] @ np.ones(3) + rng.standard_normal(60)
    key = jax.random.key(0)
    sel = jaxknock.knockoff_filter(
        key, X, y, fdr=0.3, s_method=method, rank=2, statistic="correlation", num_knockoffs=2
    )
    assert sel.W.shape == (1, P) and sel.settings["num_knockoffs"] == 2 and sel.settings["rank"] == 2
    assert sel.settings["s_method"] == method
    s = np.asarray(sel.s_solution.value)
    Xs = (X - X.mean(0)) / X.std(0)
    model, _ = jaxknock.factor_model_from_data(jax.random.split(key)[0], jnp.asarray(Xs), 2)
    solver = {"sdp_factor": jaxknock.sdp_factor, "mvr_factor": jaxknock.mvr_factor}[method]
    sols = {m: solver(model, num_knockoffs=m, tol=1e-4) for m in (1, 2)}
    ref = {m: np.asarray(sol.value) for m, sol in sols.items()}
    # the same solve as a direct call (result code included: the coordinate ascent may stop at max_steps)
    assert int(sel.s_solution.result) == int(sols[2].result)
    np.testing.assert_allclose(s, ref[2], atol=1e-6)
    assert np.max(np.abs(ref[1] - ref[2])) > 1e-3  # the solver really saw m = 2
    G = np.asarray(model.dense())
    assert np.linalg.eigvalsh(1.5 * G - np.diag(s))[0] > -1e-8
    # p >= n is fine for the factor path (never a dense estimate); rank is checked
    Xw = rng.standard_normal((20, 2 * P))
    sel = jaxknock.knockoff_filter(key, Xw, Xw[:, 0], s_method=method, rank=3, statistic="correlation", num_knockoffs=2)
    assert sel.W.shape == (1, 2 * P)
    with pytest.raises(ValueError, match="rank must be an integer"):
        jaxknock.knockoff_filter(key, X, y, s_method=method, rank=60, num_knockoffs=2)
    with pytest.raises(ValueError, match="rank=2 applies to s_method='mvr_factor' or 'sdp_factor' only"):
        jaxknock.knockoff_filter(key, X, y, s_method="mvr", rank=2, num_knockoffs=2)


# --- init / step seams with num_knockoffs = m: exactly the steps the m-knockoff solvers drive ---


def _drive(state, step, terminate, max_steps=500):
    for _ in range(max_steps):
        if bool(terminate(state)[0]):
            break
        state = step(state)
    return state


def test_newton_step_num_knockoffs_is_the_step_sdp_drives():
    from jaxknock.svector import newton

    C = jnp.asarray(C_W)
    sol = jaxknock.sdp(C, tol=1e-5, num_knockoffs=2)
    st = _drive(
        jaxknock.newton_init(C, num_knockoffs=2),
        lambda s: jaxknock.newton_step(s, C, tol=1e-5, num_knockoffs=2),
        lambda s: newton.path_terminate(s, 1e-5),
    )
    assert int(st.step) == int(sol.stats["newton_steps"])
    # the same steps in two compiled programs (one step per call / sdp's loop): equal to rounding
    np.testing.assert_allclose(float(st.dual), float(sol.stats["dual"]), rtol=1e-8)
    # and not the m = 1 problem
    assert abs(float(st.dual) - float(jaxknock.sdp(C, tol=1e-5).stats["dual"])) > 1e-3


def test_sdp_step_num_knockoffs_is_the_step_sdp_coordinate_drives():
    from jaxknock.svector import coordinate

    C = jnp.asarray(C_CO)
    sol = jaxknock.sdp(C, tol=1e-5, method="coordinate", num_knockoffs=3)
    state, b = jaxknock.sdp_init(C, num_knockoffs=3)
    st = _drive(
        state,
        lambda s: jaxknock.sdp_step(s, C, block_size=b, tol=1e-5, num_knockoffs=3),
        lambda s: coordinate.sweep_terminate(s, C.shape[0], 1e-5),
    )
    assert int(st.sweep) == int(sol.stats["sweeps"])
    np.testing.assert_allclose(np.asarray(st.s[: C.shape[0]]), np.asarray(sol.value), atol=1e-10)
    with pytest.raises(ValueError, match="num_knockoffs"):
        jaxknock.sdp_step(state, C, block_size=b, num_knockoffs=0)


def test_sdp_factor_step_num_knockoffs_is_the_step_sdp_factor_drives():
    from jaxknock.svector import factor

    sol = jaxknock.sdp_factor(FACTOR, tol=1e-5, method="coordinate", num_knockoffs=2)
    st = _drive(
        jaxknock.sdp_factor_init(FACTOR, num_knockoffs=2),
        lambda s: jaxknock.sdp_factor_step(s, FACTOR, tol=1e-5, num_knockoffs=2),
        lambda s: factor.factor_terminate(s, 1e-5),
    )
    assert int(st.sweep) == int(sol.stats["num_steps"])
    np.testing.assert_allclose(np.asarray(st.s) * np.asarray(FACTOR.diagonal()), np.asarray(sol.value), atol=1e-10)
    with pytest.raises((ValueError, TypeError), match="num_knockoffs"):
        jaxknock.sdp_factor_init(FACTOR, num_knockoffs=1.5)
