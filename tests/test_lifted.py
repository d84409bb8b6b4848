"""Tests for jaxknock.lifted (lifted and Fenchel lifted networks)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import count_compiles

from jaxknock import RESULTS
from jaxknock.lifted import (
    LiftedSpec,
    LiftedState,
    bcd,
    blocks,
    fenchel_penalty,
    fenchel_relu_regression,
    fit_lifted,
    init_lifted_state,
    inner,
    lifted_batch_step,
    lifted_bcd_step,
    lifted_objective,
    lifted_to_mlp,
    mlp_apply,
    mlp_init,
    mlp_loss,
    objective,
    predict_lifted,
    solve_simplex_cross_entropy,
    train_mlp,
    tune_lifted,
)
from jaxknock.lifted.spec import default_settings

COMBOS = [(m, l) for m in ("fenchel", "lifted") for l in ("mse", "cross_entropy")]


def _toy(key, n=240, p=5, k=3):
    """Labels of a random 2-layer teacher network (learnable, not linearly trivial)."""
    k1, k2, k3 = jax.random.split(key, 3)
    X = jax.random.normal(k1, (n, p))
    H = jax.nn.relu(X @ jax.random.normal(k2, (p, 8)))
    y = jnp.argmax(H @ jax.random.normal(k3, (8, k)), axis=1).astype(jnp.int32)
    return X, y, jax.nn.one_hot(y, k)


# Most tests share one data set, one architecture and the default settings, so
# that the jitted epoch functions are compiled once for the whole module.
SIZES = (5, 12, 3)
_X, _y, _Y = _toy(jax.random.key(0))
X_TR, Y_TR, ONEHOT_TR = _X[:120], _y[:120], _Y[:120]
X_TE, Y_TE = _X[120:], _y[120:]
ADAM = optax.adam(3e-2)


def _spec(model="fenchel", loss="cross_entropy", **kw):
    kw.setdefault("lam", 1.0)
    kw.setdefault("rho", 1e-3)
    return LiftedSpec(SIZES, loss=loss, model=model, **kw)


_bcd = jax.jit(lifted_bcd_step, static_argnames=("spec", "inner_tol", "inner_max_steps", "w_max_steps"))


# --- section 3.7: one-layer regression, the relaxation is tight ---------------


def test_one_layer_relu_regression_is_fitted_exactly(key):
    k1, k2, k3 = jax.random.split(key, 3)
    X = jax.random.normal(k1, (200, 6))
    W = jax.random.normal(k2, (6, 4))
    b = 0.3 * jax.random.normal(k3, (4,))
    Y = jax.nn.relu(X @ W + b)
    sol = fenchel_relu_regression(X, Y)
    assert sol.result == RESULTS.successful
    np.testing.assert_allclose(sol.value["w"], W, atol=1e-6)
    np.testing.assert_allclose(sol.value["b"], b, atol=1e-6)
    assert sol.stats["objective"] < 1e-12
    assert sol.stats["gradient_norm"] < 1e-6
    # The non-convex least-squares fit is zero at the convex solution.
    resid = Y - jax.nn.relu(X @ sol.value["w"] + sol.value["b"])
    assert float(jnp.max(jnp.abs(resid))) < 1e-6


def test_fenchel_penalty_is_a_fenchel_young_gap(key):
    U = jax.random.normal(key, (50, 7))
    V = jax.nn.relu(jax.random.normal(jax.random.fold_in(key, 1), (50, 7)))
    assert float(fenchel_penalty(jax.nn.relu(U), U)) == pytest.approx(0.0, abs=1e-14)
    direct = jnp.sum(0.5 * V**2 + 0.5 * jax.nn.relu(U) ** 2 - U * V)
    assert float(fenchel_penalty(V, U)) == pytest.approx(float(direct), rel=1e-12)
    assert float(fenchel_penalty(V, U)) > 0


def test_fenchel_penalty_and_mlp_loss_refuse_values_outside_their_domain(key):
    """B(V, U) is a penalty only for V >= 0: B(-1, -1) = 0 with V != relu(U), and a negative rho makes
    mlp_loss unbounded below. Both evaluated their formulas: now ValueError, NaN under jit."""
    U = -jnp.ones((2, 3))
    V = -jnp.ones((2, 3))
    with pytest.raises(ValueError, match="V must be non-negative"):
        fenchel_penalty(V, U)
    assert np.isnan(float(jax.jit(fenchel_penalty)(V, U)))
    assert float(jax.jit(fenchel_penalty)(jnp.zeros((2, 3)), U)) == 0.0
    params = mlp_init(key, [4, 3, 2])
    X, Y = jnp.ones((5, 4)), jnp.tile(jnp.array([1.0, 0.0]), (5, 1))
    for rho in (-1e-3, [0.0, -1.0]):
        with pytest.raises(ValueError, match="rho must be >= 0"):
            mlp_loss(params, X, Y, rho=rho)
    assert np.isnan(float(jax.jit(lambda r: mlp_loss(params, X, Y, rho=r))(-1e-3)))
    ok = float(jax.jit(lambda r: mlp_loss(params, X, Y, rho=r))(1e-3))
    assert np.isfinite(ok) and ok == pytest.approx(float(mlp_loss(params, X, Y, rho=1e-3)), rel=1e-12)


# --- section 2.8: dual bisection -------------------------------------------------


def _generic_simplex_xent(x0, y, lam):
    """Reference: SLSQP on min -sum y log z + lam ||z - x0||^2, z >= 0, 1^T z = 1."""
    from scipy.optimize import minimize

    def f(z):
        zc = np.maximum(z, 1e-300)
        return -np.sum(y * np.log(zc)) + lam * np.sum((z - x0) ** 2)

    def g(z):
        return -y / np.maximum(z, 1e-300) + 2 * lam * (z - x0)

    z0 = np.full_like(x0, 1.0 / x0.size)
    bounds = [(1e-12 if yi > 0 else 0.0, 1.0) for yi in y]
    res = minimize(
        f,
        z0,
        jac=g,
        method="SLSQP",
        bounds=bounds,
        tol=1e-14,
        constraints=[{"type": "eq", "fun": lambda z: z.sum() - 1, "jac": lambda z: np.ones_like(z)}],
        options={"maxiter": 1000},
    )
    return res.x


def _simplex_xent_value(z, x0, y, lam):
    idx = y > 0
    return -np.sum(y[idx] * np.log(z[idx])) + lam * np.sum((z - x0) ** 2)


@pytest.mark.parametrize("lam", [0.05, 1.0, 20.0])
def test_simplex_bisection_matches_generic_solver(key, lam):
    X0 = 2.0 * jax.random.normal(key, (6, 5))
    Y = jax.nn.one_hot(jnp.array([0, 1, 2, 3, 4, 2]), 5)
    sol = solve_simplex_cross_entropy(X0, Y, lam)
    assert sol.result == RESULTS.successful
    Z = np.asarray(sol.value)
    np.testing.assert_allclose(Z.sum(1), 1.0, atol=1e-12)
    assert Z.min() >= 0
    for i in range(X0.shape[0]):
        x0, y = np.asarray(X0[i]), np.asarray(Y[i])
        ref = _generic_simplex_xent(x0, y, lam)
        np.testing.assert_allclose(Z[i], ref, atol=1e-6)
        ref = np.maximum(ref, 1e-300) / np.maximum(ref, 1e-300).sum()  # SLSQP is feasible to ~1e-9
        ref_val = _simplex_xent_value(ref, x0, y, lam)
        assert _simplex_xent_value(Z[i], x0, y, lam) <= ref_val + 1e-9 * abs(ref_val)
    # jit equals eager.
    jitted = jax.jit(lambda a, b: solve_simplex_cross_entropy(a, b, lam).value)(X0, Y)
    np.testing.assert_allclose(jitted, Z, atol=1e-14)


def test_simplex_bisection_without_labels_is_the_simplex_projection(key):
    X0 = jax.random.normal(key, (6, 5))
    Z = np.asarray(solve_simplex_cross_entropy(X0, jnp.zeros_like(X0), 1.0).value)
    # Sort-based Euclidean projection onto the simplex.
    for x, z in zip(np.asarray(X0), Z):
        u = np.sort(x)[::-1]
        css = np.cumsum(u) - 1
        r = np.nonzero(u - css / np.arange(1, len(u) + 1) > 0)[0][-1]
        ref = np.maximum(x - css[r] / (r + 1), 0)
        np.testing.assert_allclose(z, ref, atol=1e-12)


def test_simplex_bisection_compiles_once_per_shape(key):
    """Run eagerly, the bisection loop's closures compiled a new XLA program at every call."""
    X0 = jax.random.normal(key, (3, 4))
    Y = jnp.eye(4)[:3]
    X1 = X0 + 1.0
    solve_simplex_cross_entropy(X0, Y, 1.0)
    with count_compiles() as compiles:
        sol = solve_simplex_cross_entropy(X1, Y, 2.0, tol=1e-10)
    assert not compiles and int(sol.result) == RESULTS.successful


@pytest.mark.parametrize("which", ["bcd", "batch"])
def test_public_steps_compile_once_per_shape(which):
    """Run eagerly, the steps' inner loops compiled new XLA programs at every call (3 per step)."""
    spec = _spec("fenchel", "mse")
    params = [mlp_init(jax.random.key(i), spec.sizes) for i in range(2)]
    X = [X_TR[:8], X_TR[8:16]]
    states = [init_lifted_state(params[i], X[i], spec) for i in range(2)]
    Y = [ONEHOT_TR[:8], ONEHOT_TR[8:16]]

    def call(i):
        if which == "bcd":
            return lifted_bcd_step(states[i], X[i], Y[i], spec, inner_max_steps=5)
        return lifted_batch_step(params[i], X[i], Y[i], spec, inner_max_steps=5)

    call(0)
    with count_compiles() as compiles:
        call(1)
    assert not compiles


def test_simplex_bisection_checks_its_inputs(key):
    """Y < 0 came back as a NaN row with RESULTS.nonfinite (and max_steps=2.5 was truncated), not a ValueError."""
    X0 = jax.random.normal(key, (3, 4))
    Y = jnp.eye(4)[:3]
    with pytest.raises(ValueError, match="Y must be non-negative"):
        solve_simplex_cross_entropy(X0, -Y, 1.0)
    with pytest.raises(ValueError, match="X0"):
        solve_simplex_cross_entropy(X0.at[0, 0].set(jnp.nan), Y, 1.0)
    for kw, name in [(dict(max_steps=2.5), "max_steps"), (dict(tol=-1.0), "tol")]:
        with pytest.raises(ValueError, match=f"{name} must be"):
            solve_simplex_cross_entropy(X0, Y, 1.0, **kw)
    assert int(solve_simplex_cross_entropy(X0, Y, 1.0).result) == RESULTS.successful
    # under jit a traced negative weight is infeasible with a NaN Z (it was a finite point of the
    # simplex, RESULTS.successful, for a row whose only label weight was negative)
    sol = jax.jit(lambda Y: solve_simplex_cross_entropy(X0, Y, 1.0))(Y.at[0, 0].set(-1.0))
    assert int(sol.result) == RESULTS.infeasible and bool(jnp.all(jnp.isnan(sol.value)))


@pytest.mark.parametrize("which", ["bcd", "batch"])
def test_public_steps_refuse_bad_values_and_poison_them_under_jit(which):
    """A negative lam / rho / gamma or a NaN X raises eagerly and NaN-poisons the step under jit.

    The safeguarded block solves kept the old block when the new one was NaN or unbounded, so a
    traced negative rho (or gamma) returned finite weights and a NaN X a finite, changed state.
    """
    spec = _spec("fenchel", "mse")
    X, Y = X_TR[:8], ONEHOT_TR[:8]
    params = mlp_init(jax.random.key(1), spec.sizes)
    state = init_lifted_state(params, X, spec)
    hyper = spec.hyper(X.dtype)

    def call(X, hyper):
        if which == "bcd":
            return lifted_bcd_step(state, X, Y, spec, hyper, inner_max_steps=5)[0]
        return lifted_batch_step(params, X, Y, spec, hyper, inner_max_steps=5)

    cases = [("lam", X, hyper._replace(lam=-hyper.lam)), ("rho", X, hyper._replace(rho=-hyper.rho))]
    cases += [("gamma", X, hyper._replace(gamma=-hyper.gamma)), ("X", X.at[0, 0].set(jnp.nan), hyper)]
    for name, Xb, hb in cases:
        with pytest.raises(ValueError, match=name):
            call(Xb, hb)
    # one compiled program for the good input and the four bad ones (each batch member its own flag)
    Xs, hypers = jax.tree_util.tree_map(lambda *a: jnp.stack(a), (X, hyper), *[c[1:] for c in cases])
    out = jax.jit(jax.vmap(call))(Xs, hypers)
    for i, name in enumerate(["good"] + [c[0] for c in cases]):
        leaves = [a[i] for a in jax.tree_util.tree_leaves(out) if jnp.issubdtype(a.dtype, jnp.floating)]
        assert leaves and all(bool(jnp.all(jnp.isnan(a) != (i == 0))) for a in leaves), name


# --- subproblem optimality conditions ---------------------------------------


@jax.jit
def _w_step_cases(X, V, T, Y, W0, b0):
    N = X.shape[0]
    lam, rho, gamma = 2.0, 0.3, 0.7

    def fenchel(kernel, cg=False):
        # cg: conjugate gradient with per-column line search (the default for
        # Fenchel hidden layers); otherwise accelerated majorise-minimise.
        return blocks.w_solve(
            X,
            W0,
            b0,
            s=lam / N,
            target=lambda U: V + jnp.minimum(U, 0.0),
            data_value=lambda U: lam * fenchel_penalty(V, U) / N,
            rho=rho,
            gamma=gamma,
            W0=W0,
            b0=b0,
            kernel=kernel,
            exact=False,
            tol=1e-12,
            max_steps=2000,
            line=blocks.fenchel_line(V, lam / N) if cg else None,
        )

    xent = blocks.w_solve(
        X,
        W0,
        b0,
        s=0.5 / N,
        target=lambda U: U - 2.0 * (jax.nn.softmax(U) - Y),
        data_value=lambda U: objective.loss_sum(Y, U, "cross_entropy") / N,
        rho=rho,
        gamma=gamma,
        W0=W0,
        b0=b0,
        kernel=True,
        exact=False,
        tol=1e-12,
        max_steps=5000,
    )
    ridge = blocks.w_solve(
        X,
        W0,
        b0,
        s=2 * lam / N,
        target=T,
        data_value=lambda U: lam * jnp.sum((T - U) ** 2) / N,
        rho=rho,
        gamma=0.0,
        W0=W0,
        b0=b0,
        kernel=False,
        exact=True,
        tol=0.0,
        max_steps=1,
    )
    return fenchel(False), fenchel(True), xent, ridge, fenchel(False, True), fenchel(True, True)


def test_w_steps_satisfy_optimality_and_kernel_equals_primal(key):
    k1, k2, k3 = jax.random.split(key, 3)
    N, p, q = 30, 40, 6  # N <= p: the kernel (Woodbury) form applies
    lam, rho, gamma = 2.0, 0.3, 0.7
    X = jax.nn.relu(jax.random.normal(k1, (N, p)))
    V = jax.nn.relu(jax.random.normal(k2, (N, q)))
    T = jax.random.normal(k2, (N, q))
    Y = jax.nn.one_hot(jnp.arange(N) % q, q)
    W0 = 0.1 * jax.random.normal(k3, (p, q))
    b0 = jnp.full((q,), 0.05)
    cases = _w_step_cases(X, V, T, Y, W0, b0)
    (primal, info_p, _), (kern, info_k, _), (xent, info_x, _), (ridge, _, _) = cases[:4]
    assert info_p.failures == 0 and info_k.failures == 0 and info_x.failures == 0
    # Conjugate gradient with line search reaches the same minimiser in both forms.
    for layer, info, _ in cases[4:]:
        assert info.failures == 0
        np.testing.assert_allclose(layer["w"], primal["w"], atol=1e-8)
        np.testing.assert_allclose(layer["b"], primal["b"], atol=1e-8)
    # The tracked predictions U = A Theta (reused for the reported objective)
    # match a fresh product, in the primal and in the kernel (Woodbury) form.
    for layer, _, U_tracked in cases:
        np.testing.assert_allclose(U_tracked, X @ layer["w"] + layer["b"], atol=1e-9)
    np.testing.assert_allclose(kern["w"], primal["w"], atol=1e-8)
    np.testing.assert_allclose(kern["b"], primal["b"], atol=1e-8)
    # Stationarity of (3.19): (lam/N) A^T (relu(U) - V) + 2 rho W + 2 gamma (Theta - Theta0) = 0.
    U = X @ primal["w"] + primal["b"]
    R = lam * (jax.nn.relu(U) - V) / N
    gW = X.T @ R + 2 * rho * primal["w"] + 2 * gamma * (primal["w"] - W0)
    gb = R.sum(0) + 2 * gamma * (primal["b"] - b0)
    assert float(jnp.max(jnp.abs(gW))) < 1e-9 and float(jnp.max(jnp.abs(gb))) < 1e-9
    # Cross-entropy last layer (3.20): softmax-regression stationarity.
    R = (jax.nn.softmax(X @ xent["w"] + xent["b"]) - Y) / N
    gW = X.T @ R + 2 * rho * xent["w"] + 2 * gamma * (xent["w"] - W0)
    gb = R.sum(0) + 2 * gamma * (xent["b"] - b0)
    assert float(jnp.max(jnp.abs(gW))) < 1e-8 and float(jnp.max(jnp.abs(gb))) < 1e-8
    # Ridge (lifted W-step) equals the normal equations solved by numpy.
    A = np.hstack([np.asarray(X), np.ones((N, 1))])
    D = np.diag(np.r_[np.full(p, rho), 0.0])
    ref = np.linalg.solve(2 * lam / N * A.T @ A + 2 * D, 2 * lam / N * A.T @ np.asarray(T))
    np.testing.assert_allclose(np.vstack([ridge["w"], ridge["b"][None]]), ref, atol=1e-8)


def _kkt_violation(Z, G):
    """Projected-gradient optimality of min_{Z>=0}: G >= 0 where Z = 0, G = 0 where Z > 0."""
    return float(jnp.max(jnp.abs(jnp.where(Z > 1e-10, G, jnp.minimum(G, 0.0)))))


_x_steps = jax.jit(blocks.x_steps, static_argnums=(5, 6))


@pytest.mark.parametrize("model,loss", [("fenchel", "cross_entropy"), ("lifted", "mse")])
def test_x_steps_satisfy_kkt_conditions(key, model, loss):
    X, Y = X_TR[:40], ONEHOT_TR[:40]
    lam = 0.8
    spec = LiftedSpec((5, 7, 6, 3), loss=loss, model=model, lam=lam)
    params = mlp_init(jax.random.fold_in(key, 2), spec.sizes)
    state = init_lifted_state(params, X, spec)
    # Perturb so that the X-steps have work to do.
    hidden = tuple(
        jax.nn.relu(h + 0.3 * jax.random.normal(jax.random.fold_in(key, i), h.shape))
        for i, h in enumerate(state.hidden)
    )
    state = state._replace(hidden=hidden)
    settings = default_settings(jnp.float64, inner_tol=1e-13, inner_max_steps=20000)
    new, info = _x_steps(params, state, X, Y, spec.hyper(), spec, settings)
    assert info.failures == 0
    X1, X2 = new.hidden
    W1, b1, W2, b2 = params[1]["w"], params[1]["b"], params[2]["w"], params[2]["b"]
    U0 = X @ params[0]["w"] + params[0]["b"]
    # Backward sweep: X2 is updated with the old X1 as input, then X1 with the new X2.
    U1_old = hidden[0] @ W1 + b1
    if model == "fenchel":
        # X2 = argmin_{Z>=0} CE(Y, Z W2 + b2) + lam B(Z, U1_old)          (3.16)
        G2 = (jax.nn.softmax(X2 @ W2 + b2) - Y) @ W2.T + lam * (X2 - U1_old)
        # X1 = argmin_{Z>=0} B(X2, Z W1 + b1) + B(Z, U0)                  (3.14)
        G1 = (jax.nn.relu(X1 @ W1 + b1) - X2) @ W1.T + (X1 - U0)
    else:
        # X2 = argmin_{Z>=0} 1/2 ||Y - Z W2 - b2||^2 + lam ||Z - U1_old||^2
        G2 = (X2 @ W2 + b2 - Y) @ W2.T + 2 * lam * (X2 - U1_old)
        # X1 = argmin_{Z>=0} ||X2 - Z W1 - b1||^2 + ||Z - U0||^2          (2.13)
        G1 = 2 * (X1 @ W1 + b1 - X2) @ W1.T + 2 * (X1 - U0)
    assert float(jnp.min(X1)) >= 0 and float(jnp.min(X2)) >= 0
    assert _kkt_violation(X2, G2) < 1e-8
    assert _kkt_violation(X1, G1) < 1e-8


@pytest.mark.parametrize("check_every", [1, 3])
def test_grouped_convergence_checks_keep_step_limit_and_solution(key, check_every):
    # NNLS min_{z>=0} 1/2||A z - c||^2 by the accelerated projected gradient,
    # checked every `check_every` steps: exact step limit, and scipy's solution.
    from scipy.optimize import nnls

    A = jax.random.normal(key, (30, 12), dtype=jnp.float64)
    c = jax.random.normal(jax.random.fold_in(key, 1), (30,), dtype=jnp.float64)
    lip = float(jnp.linalg.norm(A, 2) ** 2)

    def step(z):
        return jax.nn.relu(z - A.T @ (A @ z - c) / lip)

    z0 = jnp.zeros(12, jnp.float64)
    for max_steps in (1, 2, 4, 7):
        _, k, _ = inner.accelerated(step, z0, step(z0), tol=0.0, max_steps=max_steps, check_every=check_every)
        assert int(k) == max_steps
    z, k, conv = inner.accelerated(step, z0, step(z0), tol=1e-13, max_steps=5000, check_every=check_every)
    assert bool(conv) and int(k) < 5000
    np.testing.assert_allclose(np.asarray(z), nnls(np.asarray(A), np.asarray(c))[0], atol=1e-9)


# --- BCD: monotone objective, lower bound -----------------------------------------


@pytest.mark.parametrize("model,loss", COMBOS)
def test_nonbatched_bcd_pass_does_not_increase_objective(key, model, loss):
    spec = _spec(model, loss)
    init = mlp_init(jax.random.fold_in(key, 7), SIZES)
    f0 = float(lifted_objective(init_lifted_state(init, X_TR, spec), X_TR, ONEHOT_TR, spec)["objective"])
    # Plain Algorithm 1 and the default safeguarded extrapolation between passes:
    # both never increase the objective.
    for extrapolation in (0.0, None):
        sol = fit_lifted(key, X_TR, Y_TR, spec, epochs=6, init=init, extrapolation=extrapolation)
        assert sol.result == RESULTS.successful
        values = np.r_[f0, sol.stats["objective"]]
        assert np.all(np.diff(values) <= 1e-12 * np.abs(values[1:])), values
        assert values[-1] < 0.8 * values[1]
        assert sol.stats["train_accuracy"][-1] > 0.6
        assert np.all(sol.stats["inner_solves"] > 0)
        if extrapolation == 0.0:
            plain = sol
    assert "extrapolated" not in plain.stats
    assert sol.stats["extrapolated"].sum() >= 1  # some extrapolated points were taken
    if (model, loss) != ("fenchel", "cross_entropy"):
        return
    # Accepted extrapolations pay off here: after 6 passes the objective is lower.
    assert sol.stats["objective"][-1] < plain.stats["objective"][-1]
    sol = plain
    # The jitted single pass (Algorithm 1) is the training epoch.
    state, info = _bcd(init_lifted_state(init, X_TR, spec), X_TR, ONEHOT_TR, spec)
    obj = lifted_objective(state, X_TR, ONEHOT_TR, spec)["objective"]
    assert float(obj) == pytest.approx(float(sol.stats["objective"][0]), rel=1e-10)
    assert int(info["solves"]) == int(sol.stats["inner_solves"][0])


def test_fenchel_objective_lower_bounds_standard_loss(key):
    spec = _spec("fenchel", "cross_entropy")
    std = train_mlp(key, X_TR, Y_TR, SIZES, optimizer=ADAM, epochs=40, batch_size=120)
    params = std.value
    loss0 = float(mlp_loss(params, X_TR, ONEHOT_TR, loss="cross_entropy", rho=1e-3))
    # At the feed-forward X every penalty B is zero: the objectives coincide.
    terms = lifted_objective(init_lifted_state(params, X_TR, spec), X_TR, ONEHOT_TR, spec)
    assert float(terms["penalty"]) == pytest.approx(0.0, abs=1e-14)
    assert float(terms["objective"]) == pytest.approx(loss0, rel=1e-12)
    # Minimising over X (and W) from the standard solution can only go lower:
    # the Fenchel problem lower-bounds the training problem, G(lam) <= p*.
    sol = fit_lifted(key, X_TR, Y_TR, spec, epochs=3, init=params)
    assert np.all(sol.stats["objective"] < loss0)
    assert sol.stats["penalty"][-1] > 0


# --- drivers: jit / vmap / retrace / batched / divergence -------------------------


BATCHED = dict(rho=0.0, gamma=(0.003, 0.05))


def test_fit_tune_vmap_equals_loop_and_no_retrace(key):
    spec = _spec(**BATCHED)
    lams = jnp.array([0.5, 2.0])
    # Batched (Algorithm 2) training of two models in one vmapped program.
    # The inner solves stop on a tolerance, so the vmapped and the single-model
    # programs (rounded differently by XLA) agree to about that tolerance: solve
    # tightly to compare tightly.
    tight = dict(inner_tol=1e-11, inner_max_steps=2000)
    tuned = tune_lifted(key, X_TR, Y_TR, spec, lam=lams, epochs=2, batch_size=6, **tight)
    assert tuned.stats["objective"].shape == (2, 2)
    assert tuned.result.shape == (2,)
    fn = bcd.epoch_fn(spec, default_settings(jnp.float64, **tight), 6, False)
    for i, lam in enumerate(lams):
        sol = fit_lifted(key, X_TR, Y_TR, spec, epochs=2, batch_size=6, hyper=spec.hyper()._replace(lam=lam), **tight)
        assert sol.result == RESULTS.successful
        np.testing.assert_allclose(sol.stats["objective"], tuned.stats["objective"][i], rtol=1e-8)
        np.testing.assert_allclose(sol.value[0]["w"], tuned.value[0]["w"][i], atol=1e-6)
        if i == 0:
            compiled = fn._cache_size()
    assert fn._cache_size() == compiled  # the second call is not retraced
    exported = lifted_to_mlp(tuned, index=1)
    np.testing.assert_allclose(mlp_apply(exported, X_TR), mlp_apply(sol.value, X_TR), atol=1e-6)
    with pytest.raises(ValueError, match="index="):
        lifted_to_mlp(tuned)
    # Non-batched tuning over the ridge weight (rho of shape (H,)).
    spec_nb = _spec()
    tuned = tune_lifted(key, X_TR, Y_TR, spec_nb, rho=jnp.array([1e-3, 1e-2]), epochs=2)
    sol = fit_lifted(key, X_TR, Y_TR, spec_nb, epochs=2)
    np.testing.assert_allclose(sol.stats["objective"], tuned.stats["objective"][0], rtol=1e-8)
    # The vmapped Algorithm-1 epoch equals the single-model one.
    settings = default_settings(jnp.float64)
    init = mlp_init(key, SIZES)
    state = init_lifted_state(init, X_TR, spec_nb)
    hyper = spec_nb.hyper()
    stack = lambda t: jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), t)
    hyp2 = stack(hyper)._replace(lam=jnp.array([1.0, 3.0]))
    vm = bcd.epoch_fn(spec_nb, settings, None, True)(stack(state), X_TR, ONEHOT_TR, hyp2, None, None)
    one = bcd.epoch_fn(spec_nb, settings, None, False)(state, X_TR, ONEHOT_TR, hyper._replace(lam=3.0), None, None)
    np.testing.assert_allclose(vm[1]["objective"][1], one[1]["objective"], rtol=1e-10)


def test_a_spec_with_other_hyper_parameters_compiles_nothing(key):
    """The epoch programs were cached by the whole ``spec``, a static argument that holds ``lam``, ``rho`` and
    ``gamma`` too, although the programs take them traced (``spec.hyper()``): ``fit_lifted`` with
    ``LiftedSpec(sizes, lam=3.0)`` after ``lam=1.0`` compiled its epoch again (so did ``tune_lifted`` and
    ``predict_lifted(method="lifted")``). They are keyed by the spec's structure now; the fit is the one
    with the same values passed as ``hyper``. (Settings of the test above.)"""
    base, other = _spec(), _spec(lam=3.0, rho=1e-2)
    fit_lifted(key, X_TR, Y_TR, base, epochs=2)
    ref = fit_lifted(key, X_TR, Y_TR, base, epochs=2, hyper=other.hyper())
    predict_lifted(ref.value, X_TR, base, method="lifted", passes=3)
    with count_compiles() as compiles:
        sol = fit_lifted(key, X_TR, Y_TR, other, epochs=2)
        predict_lifted(ref.value, X_TR, other, method="lifted", passes=3)
    assert [c.split()[1] for c in compiles] == []
    np.testing.assert_array_equal(sol.value[0]["w"], ref.value[0]["w"])
    np.testing.assert_array_equal(sol.stats["objective"], ref.stats["objective"])


def test_batched_algorithm2_learns_and_uses_kernel_form(key):
    spec = _spec(**BATCHED)
    # batch_size 6 <= p_0 + 1: the first layer's W-step runs in the kernel form.
    sol = fit_lifted(key, X_TR, Y_TR, spec, epochs=4, batch_size=6, X_test=X_TE, y_test=Y_TE)
    assert sol.result == RESULTS.successful
    acc = sol.stats["test_accuracy"]
    assert acc.shape == (4,) and acc[-1] > 0.7
    assert np.all(sol.stats["epoch_time"] > 0)
    # One Algorithm-2 batch step by hand reports objective terms and inner counts.
    step = jax.jit(lifted_batch_step, static_argnames=("spec", "alternations"))
    params, metrics = step(sol.value, X_TR[:6], ONEHOT_TR[:6], spec, alternations=2)
    assert {"objective", "penalty", "violation", "steps", "failures"} <= set(metrics)
    assert params[0]["w"].shape == (5, 12)


def test_fixed_batches_reuse_first_layer_factorisations(key):
    spec = _spec(**BATCHED)
    tight = dict(inner_tol=1e-11, inner_max_steps=2000)
    settings = default_settings(jnp.float64, **tight)
    B = 7  # does not divide N = 120: the last batch is filled up with rows of the first
    parts = bcd.fixed_partition(key, X_TR.shape[0], B)
    assert parts.shape == (18, B)
    assert set(np.asarray(parts).ravel()) == set(range(X_TR.shape[0]))
    hyper = spec.hyper()
    factors = bcd.factors_fn(spec, False)(X_TR, parts, hyper)
    assert factors.shape == (18, 6, 6)  # B > p_0 = 5: the primal (p_0 + 1)^2 Cholesky factor
    order = jax.random.permutation(jax.random.key(3), 18)
    init = mlp_init(key, SIZES, dtype=jnp.float64)
    step = bcd.epoch_fn(spec, settings, B, False, True)
    state, metrics = step(LiftedState(init, (), None), X_TR, ONEHOT_TR, hyper, order, (parts, factors))
    # The same batches in the same order, each factorising its own system (one
    # jitted batch update reused for the 18 batches: eagerly, every batch would
    # compile the inner solvers' while loops again).
    update = jax.jit(bcd.batch_update, static_argnames=("spec", "settings"))
    params, objs = init, []
    for i in np.asarray(order):
        params, m = update(params, X_TR[parts[i]], ONEHOT_TR[parts[i]], hyper, spec=spec, settings=settings)
        objs.append(m["objective"])
    np.testing.assert_allclose(state.params[0]["w"], params[0]["w"], atol=1e-7)
    np.testing.assert_allclose(metrics["objective"], np.mean(objs), rtol=1e-7)
    # Through the drivers: learns, reports the one-off cost, vmaps per model,
    # and the kernel form (B <= p_0) gets B x B factors.
    sol = fit_lifted(
        key, X_TR, Y_TR, spec, epochs=3, batch_size=B, fixed_batches=True, X_test=X_TE, y_test=Y_TE, **tight
    )
    assert sol.result == RESULTS.successful and sol.stats["test_accuracy"][-1] > 0.7
    assert sol.stats["setup_time"] > 0
    tuned = tune_lifted(
        key, X_TR, Y_TR, spec, lam=jnp.array([spec.lam, 2.0]), epochs=3, batch_size=B, fixed_batches=True, **tight
    )
    np.testing.assert_allclose(tuned.stats["objective"][0], sol.stats["objective"], rtol=1e-7)
    assert bcd.factors_fn(spec, False)(X_TR, parts[:, :4], hyper).shape == (18, 4, 4)
    with pytest.raises(ValueError, match="fixed_batches applies to batched"):
        fit_lifted(key, X_TR, Y_TR, spec, epochs=1, fixed_batches=True)


def test_batched_requires_positive_gamma(key):
    with pytest.raises(ValueError, match="gamma > 0"):
        fit_lifted(key, X_TR, Y_TR, _spec(gamma=0.0), epochs=1, batch_size=20)


def test_divergence_is_reported_not_hidden(key):
    spec = _spec("fenchel", "mse")
    Xbig = X_TR * 1e200  # finite input whose products overflow
    sol = fit_lifted(key, Xbig, Y_TR, spec, epochs=3)
    assert sol.result == RESULTS.nonfinite
    assert not np.all(np.isfinite(sol.stats["objective"]))
    with pytest.raises(RuntimeError, match="NaN or Inf"):
        fit_lifted(key, Xbig, Y_TR, spec, epochs=1, throw=True)


# --- prediction, export, optax fine-tuning ------------------------------------


def test_predict_feedforward_and_lifted(key):
    spec = _spec()
    sol = fit_lifted(key, X_TR, Y_TR, spec, epochs=6)
    ff = predict_lifted(sol.value, X_TR, spec)
    np.testing.assert_allclose(ff, mlp_apply(sol.value, X_TR))
    scores = predict_lifted(sol.value, X_TR, spec, method="lifted")
    assert scores.shape == (120, 3)
    # Each class value (3.12) is at most its value at the feed-forward X.
    assert float(jnp.max(-scores + jax.nn.log_softmax(ff))) < 1e-10
    assert float(jnp.mean(jnp.argmax(scores, 1) == jnp.argmax(ff, 1))) > 0.9
    # MSE: the lifted rule is the feed-forward rule.
    np.testing.assert_allclose(predict_lifted(sol.value, X_TR, _spec(loss="mse"), method="lifted"), ff)
    s2 = predict_lifted(sol.value, X_TR[:10], _spec(model="lifted"), method="lifted", passes=5)
    assert s2.shape == (10, 3) and bool(jnp.all(jnp.isfinite(s2)))
    with pytest.raises(ValueError, match="method"):
        predict_lifted(sol.value, X_TR, spec, method="bayes")
    # the lifted rule's hyper-parameters are checked (a negative lam gave -inf scores, a per-model lam of
    # shape (2,) a broadcast error that named nothing)
    hyper = spec.hyper(X_TR.dtype)
    with pytest.raises(ValueError, match="lam must be positive"):
        predict_lifted(sol.value, X_TR, spec, method="lifted", hyper=hyper._replace(lam=-hyper.lam))
    with pytest.raises(ValueError, match="hyper.lam must be a scalar"):
        predict_lifted(sol.value, X_TR, spec, method="lifted", hyper=hyper._replace(lam=jnp.stack([hyper.lam] * 2)))


def test_lifted_initialisation_of_optax_network(key):
    sol = fit_lifted(key, X_TR, Y_TR, _spec("lifted", "cross_entropy"), epochs=6)
    init = lifted_to_mlp(sol, dtype=jnp.float64)
    assert [layer["w"].shape for layer in init] == [(5, 12), (12, 3)]
    lifted_acc = float(jnp.mean(jnp.argmax(mlp_apply(init, X_TE), 1) == Y_TE))
    tuned = train_mlp(key, X_TR, Y_TR, init, optimizer=ADAM, epochs=2, batch_size=120, X_test=X_TE, y_test=Y_TE)
    xavier = train_mlp(key, X_TR, Y_TR, SIZES, optimizer=ADAM, epochs=2, batch_size=120, X_test=X_TE, y_test=Y_TE)
    assert tuned.result == RESULTS.successful and xavier.result == RESULTS.successful
    assert tuned.stats["test_accuracy"].shape == (2,)
    # The lifted weights start far better than a random network.
    assert lifted_acc > 0.6
    assert tuned.stats["test_accuracy"][0] > xavier.stats["test_accuracy"][0]


def test_export_and_optax_training_name_their_bad_arguments():
    """``lifted_to_mlp(dtype=int32)`` truncated every weight (a network predicting one class);
    ``train_mlp(optimizer=None)`` failed with "'NoneType' object has no attribute 'init'"; a bad ``hyper``
    passed ``predict_lifted``'s feed-forward rule silently."""
    params = mlp_init(jax.random.key(0), SIZES)
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        lifted_to_mlp(params, dtype=jnp.int32)
    assert lifted_to_mlp(params, dtype=jnp.float32)[0]["w"].dtype == jnp.float32
    with pytest.raises(TypeError, match="optimizer must be an optax.GradientTransformation"):
        train_mlp(jax.random.key(1), X_TR, Y_TR, params, optimizer=None, epochs=1, batch_size=120)
    hyper = _spec().hyper(X_TR.dtype)
    with pytest.raises(ValueError, match="lam must be positive"):
        predict_lifted(params, X_TR, _spec(), hyper=hyper._replace(lam=-hyper.lam))


# --- bad input ---------------------------------------------------------------------


def test_bad_inputs_raise_specific_errors(key):
    X, y = X_TR, Y_TR
    spec = _spec()
    with pytest.raises(ValueError, match=r"sizes\[0\] = 6"):
        fit_lifted(key, X, y, LiftedSpec((6, 8, 3)))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        fit_lifted(key, X, y.at[0].set(3), spec)
    with pytest.raises(ValueError, match="X has no rows"):  # was a ZeroDivisionError
        fit_lifted(key, X[:0], y[:0], spec)
    with pytest.raises(ValueError, match="labels must lie"):
        fit_lifted(key, X, y.at[0].set(-1), spec)
    with pytest.raises(ValueError, match="non-finite"):
        fit_lifted(key, X.at[2, 1].set(jnp.nan), y, spec)
    with pytest.raises(ValueError, match="non-finite"):
        fit_lifted(key, X, jnp.full((120, 3), jnp.inf), _spec(loss="mse"))
    with pytest.raises(TypeError, match="integer class labels"):
        fit_lifted(key, X, y.astype(float), spec)
    with pytest.raises(ValueError, match="120 rows"):
        fit_lifted(key, X, y[:20], spec)
    with pytest.raises(ValueError, match="batch_size"):
        fit_lifted(key, X, y, spec, batch_size=121)
    with pytest.raises(ValueError, match="extrapolation .* non-batched"):
        fit_lifted(key, X, y, _spec(**BATCHED), batch_size=10, extrapolation=2.0)
    with pytest.raises(ValueError, match="extrapolation must be"):
        fit_lifted(key, X, y, spec, extrapolation=-1.0)
    with pytest.raises(ValueError, match="at least one hidden"):
        LiftedSpec((5, 3))
    with pytest.raises(ValueError, match="loss must be"):
        LiftedSpec(SIZES, loss="hinge")
    with pytest.raises(ValueError, match="rho must be"):
        LiftedSpec(SIZES, rho=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="lam must be"):
        LiftedSpec(SIZES, lam=0.0)
    with pytest.raises(ValueError, match="probability"):
        fit_lifted(key, X, jnp.ones((120, 3)), spec)
    with pytest.raises(ValueError, match="init has"):
        fit_lifted(key, X, y, spec, init=mlp_init(key, (5, 12, 4, 3)))
    with pytest.raises(ValueError, match="Y must be non-negative"):
        fenchel_relu_regression(X, -jnp.ones((120, 2)))


def test_fenchel_relu_regression_checks_rho_and_flags_traced_bad_input(key):
    """rho < 0 ran (W = 0, max_steps_reached), max_steps=2.5 was truncated; under jit a negative Y made the
    objective unbounded below and the solve reported a huge negative objective as successful."""
    X = jax.random.normal(key, (30, 3))
    Y = jax.nn.relu(X @ jnp.array([[1.0], [-1.0], [0.5]]))
    for kw, name in [(dict(rho=-1.0), "rho"), (dict(tol=-1.0), "tol"), (dict(max_steps=2.5), "max_steps")]:
        with pytest.raises(ValueError, match=f"{name} must be"):
            fenchel_relu_regression(X, Y, **kw)
    fit = jax.jit(lambda Y, rho: fenchel_relu_regression(X, Y, rho=rho, max_steps=50))
    assert int(fit(Y, 0.0).result) == RESULTS.successful
    for bad in (fit(-Y - 1.0, 0.0), fit(Y, -1.0)):
        assert int(bad.result) == RESULTS.infeasible
        assert np.isnan(np.asarray(bad.value["w"])).all() and np.isnan(float(bad.stats["objective"]))


def test_counts_and_tolerances_are_checked_not_truncated(key):
    """``int()`` truncated epochs=2.5 / batch_size=10.7 / alternations=1.9 / init widths 6.5, parsed "2" and
    took True as 1; passes=0 or -1 returned the forward scores; a negative or NaN (inner_)tol or
    weight_decay ran; lam="1" was numpy's isfinite error; lifted_to_mlp(index=5) of 3 models returned
    the last one (JAX clamps a gather index) and index=0 of a single model blamed "several models"."""
    X, y = X_TR, Y_TR
    spec = _spec()
    for kw, name in [
        (dict(epochs=2.5), "epochs"),
        (dict(epochs="2"), "epochs"),
        (dict(epochs=True), "epochs"),
        (dict(batch_size=10.7), "batch_size"),
        (dict(alternations=1.9), "alternations"),
        (dict(inner_max_steps=2.5), "inner_max_steps"),
        (dict(inner_tol=-1.0), "inner_tol"),
        (dict(tol=float("nan")), "tol"),
    ]:
        with pytest.raises(ValueError, match=f"{name} must be"):
            fit_lifted(key, X, y, spec, **kw)
    for kw, name in [
        (dict(init=(5, 6.5, 3)), "init"),
        (dict(epochs=1.5), "epochs"),
        (dict(weight_decay=-1.0), "weight_decay"),
    ]:
        with pytest.raises(ValueError, match=name):
            train_mlp(key, X, y, **{"init": SIZES, **kw}, optimizer=ADAM, batch_size=10)
    params = mlp_init(key, SIZES)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="passes must be"):
            predict_lifted(params, X, spec, method="lifted", passes=bad)
    with pytest.raises(TypeError, match="lam must be"):
        LiftedSpec(SIZES, lam="1")
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a, 3 * a]), params)
    np.testing.assert_array_equal(lifted_to_mlp(stacked, index=jnp.int32(-1))[0]["w"], 3 * params[0]["w"])
    for bad in (3, -4, 1.5):
        with pytest.raises(ValueError, match=r"index must be an integer in \[-3, 3\)"):
            lifted_to_mlp(stacked, index=bad)
    with pytest.raises(ValueError, match="params hold one"):
        lifted_to_mlp(params, index=0)
    with pytest.raises(ValueError, match="H = 0"):  # was a tree_map TypeError
        tune_lifted(key, X, y, spec, lam=[])


# --- MNIST (skipped without the data) ------------------------------------------


def test_mnist_small_batched_fenchel(data_dir):
    path = os.path.join(data_dir, "mnist.npz")
    if not os.path.exists(path):
        pytest.skip("MNIST not available")
    d = np.load(path)
    X = d["x_train"][:2000].reshape(-1, 784).astype(np.float32) / 255
    y = d["y_train"][:2000].astype(np.int32)
    spec = LiftedSpec((784, 32, 10), loss="cross_entropy", lam=0.3, gamma=(0.003, 0.2))
    sol = fit_lifted(
        jax.random.key(0),
        X[:1000],
        y[:1000],
        spec,
        epochs=2,
        batch_size=100,
        X_test=X[1000:],
        y_test=y[1000:],
        w_max_steps=10,
    )
    assert sol.value[0]["w"].dtype == jnp.float32
    assert sol.result == RESULTS.successful
    assert sol.stats["test_accuracy"][-1] > 0.8


@pytest.mark.parametrize("sizes", [(6, 8.5, 2), (6, True, 2), (6, "8", 2)])
def test_fractional_or_non_int_sizes_are_refused_naming_sizes(sizes):
    from jaxknock.lifted import LiftedSpec

    with pytest.raises((ValueError, TypeError), match=r"sizes\[1\]"):
        LiftedSpec(sizes)
    assert LiftedSpec((6, 8.0, 2)).sizes == (6, 8, 2)  # whole-number floats are fine


def test_train_mlp_takes_a_new_weight_decay_without_compiling(key):
    """``weight_decay`` was part of the cached epoch program's key (a constant in it): every new value compiled
    the epoch again. It is a traced argument now; the same optimizer object shares one program (a new
    ``optax`` object is new code to trace, as it is to ``jax.jit``). (Settings of the tests above.)"""
    train_mlp(key, X_TR, Y_TR, SIZES, optimizer=ADAM, epochs=1, batch_size=120)
    with count_compiles() as compiles:
        sol = train_mlp(key, X_TR, Y_TR, SIZES, optimizer=ADAM, epochs=1, batch_size=120, weight_decay=1e-3)
    assert [c.split()[1] for c in compiles] == []
    assert sol.result == RESULTS.successful


def test_masked_labels_are_refused_and_nullable_integer_labels_fit(key):
    # jnp.asarray(y, int32) read a masked label as the value under its mask; a pandas Int64 y was
    # "Cannot interpret 'Int64Dtype()' as a data type"
    pd = pytest.importorskip("pandas")
    X = jax.random.normal(jax.random.key(1), (16, 3))
    y = np.asarray(X[:, 0] > 0).astype(np.int64)
    spec = LiftedSpec((3, 4, 2), lam=1.0, rho=1e-3)
    with pytest.raises(ValueError, match="y is a masked array with 1 masked entry"):
        fit_lifted(key, X, np.ma.array(y, mask=np.arange(16) == 2), spec, epochs=1)
    ref = fit_lifted(key, X, y, spec, epochs=1).value
    got = fit_lifted(key, X, pd.Series(y, dtype="Int64"), spec, epochs=1).value
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(a, b)
