r"""The generic inner solvers of the block steps, and the simplex bisection.

* :func:`accelerated`: Nesterov-accelerated fixed-point iteration with
  gradient restart (the X-blocks' projected gradient, :func:`nonneg_apg`);
* :func:`accelerated_mm`: accelerated majorise-minimise, each step one ridge
  solve with a fixed factorisation (the cross-entropy last W-block);
* :func:`cg_mm`: nonlinear conjugate gradient preconditioned by the
  majorise-minimise step, with an exact line search per output column (the
  Fenchel hidden W-blocks);
* :func:`solve_simplex_cross_entropy`: the exact dual bisection of the lifted
  cross-entropy output step (thesis section 2.8).

Each loop is driven by :func:`jaxknock._iterate.iterative_solve`: it stops when
the relative change ``err`` is at most ``tol`` (``successful``), when the step
budget is spent (``max_steps_reached``) or when ``err`` is NaN (``nonfinite``).
The iterations start from a given first step, so their step counts include it.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxknock import _backend
from jaxknock._checks import as_float_array, check_count, check_finite, check_real, is_concrete, poison
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution
from jaxknock.lifted._common import HI, Info, fista_next, guard, rel_change

__all__ = [
    "accelerated",
    "accelerated_mm",
    "cg_mm",
    "nonneg_apg",
    "simplex_xent",
    "solve_simplex_cross_entropy",
]


def _tol_reached(tol):
    """``terminate`` of :func:`iterative_solve`: done when the state's ``err <= tol``."""

    def terminate(state):
        return state.err <= tol, jnp.int32(RESULTS.successful)

    return terminate


def _err_defined(state):
    """``finite`` of :func:`iterative_solve`: a NaN ``err`` stops the loop (an Inf one does not)."""
    return ~jnp.isnan(state.err)


class _Momentum(NamedTuple):
    """State of :func:`accelerated`: iterate, previous iterate, FISTA ``t``, last relative step."""

    z: Any
    z_prev: Any
    t: jax.Array
    err: jax.Array


def accelerated(step_fn, z0, z1, *, tol, max_steps, check_every: int | None = None):
    """Nesterov-accelerated fixed-point iteration ``z <- step_fn(y)`` with restart.

    ``step_fn`` is a (preconditioned, projected) gradient or majorise-minimise
    step. Momentum follows FISTA's ``t_k`` sequence and is reset whenever the
    step opposes the previous direction (O'Donoghue & Candes' gradient restart).
    Stops when the relative step ``||z_{k+1} - y_k|| / ||z_{k+1}||`` (a scaled
    gradient mapping) is at most ``tol`` or after ``max_steps`` steps (``z1``,
    the first step from ``z0``, counts as one).

    The stopping test and the restart test are evaluated every ``check_every``
    steps (the last of each group): each loop iteration and each full-array
    reduction is a separate kernel launch, which dominates the cost of a step
    on small problems (measurements: ``benchmarks/measured/NOTES.md``,
    "lifted"). The groups are the steps of a first :func:`iterative_solve`; a
    second one of single checked steps uses up the remaining ``max_steps``
    exactly. (``iterative_solve``'s own ``check_every`` repeats one step
    function, whose restart test would then run, and change the iterates, at
    every step.) Returns ``(z, steps, converged)``; NaNs stop the loop
    (reported as not converged).
    """
    dtype = z1.dtype

    def momentum_step(z, zp, t):
        t_next, beta = fista_next(t)
        y = z + beta * (z - zp)
        return step_fn(y), y, t_next

    def group(m):
        def step(s):
            z, zp, t, _ = s
            for _ in range(m - 1):  # unchecked steps
                z_new, _, t = momentum_step(z, zp, t)
                z, zp = z_new, z
            z_new, y, t_next = momentum_step(z, zp, t)
            err = rel_change(z_new, y)
            restart = jnp.vdot(y - z_new, z_new - z, precision=HI) > 0
            t_next = jnp.where(restart, jnp.ones_like(t_next), t_next)
            return _Momentum(z_new, z, t_next, err)

        return step

    if check_every is None:  # the per-backend stride (every third step on CPU)
        check_every = _backend.check_every("lifted_inner")
    m = max(int(check_every), 1)
    run = functools.partial(iterative_solve, terminate=_tol_reached(tol), finite=_err_defined)
    state = _Momentum(z1, z0, jnp.asarray(1.0, dtype), rel_change(z1, z0))
    # z1 is step 1; groups of m steps while a whole group fits in max_steps
    it = run(state, group(m), max_steps=(max_steps - 1) // m)
    steps = 1 + m * it.num_steps
    if m > 1:
        it = run(it.state, group(1), max_steps=max_steps - steps)
        steps = steps + it.num_steps
    return it.state.z, steps, it.result == RESULTS.successful


class _Images(NamedTuple):
    """State of :func:`accelerated_mm`: iterate, its image ``U(z)``, the previous image, ``t``, ``err``."""

    z: Any
    Uz: jax.Array
    Uz_prev: jax.Array
    t: jax.Array
    err: jax.Array


def accelerated_mm(sysm, target, U_start, *, tol, max_steps):
    """Accelerated majorise-minimise: ``z <- solve(target(U(y)))`` with momentum and restart.

    The images ``U(z) = A Theta(z)`` of the iterates are tracked, so the
    extrapolated ``U(y)`` is a linear combination and each step costs one ridge
    solve (plus, in the primal form, one product with ``A``). Stops when the relative change of the
    predictions ``||U(z_{k+1}) - U(y_k)|| / ||U(z_{k+1})||`` is at most ``tol``.
    Returns ``(z, U(z), steps, converged)``.
    """
    z1 = sysm.solve(target(U_start))
    U1 = sysm.U_of(z1)
    err1 = rel_change(U1, U_start)
    dtype = U1.dtype

    def step(s):
        # The step from the extrapolated point y needs only its image U(y).
        _, Uz, Uzp, t, _ = s
        t_next, beta = fista_next(t)
        Uy = Uz + beta * (Uz - Uzp)
        z_new = sysm.solve(target(Uy))
        U_new = sysm.U_of(z_new)
        err = rel_change(U_new, Uy)
        restart = jnp.vdot(Uy - U_new, U_new - Uz, precision=HI) > 0
        t_next = jnp.where(restart, jnp.ones_like(t_next), t_next)
        return _Images(z_new, U_new, Uz, t_next, err)

    init = _Images(z1, U1, U1, jnp.asarray(1.0, dtype), err1)
    it = iterative_solve(init, step, _tol_reached(tol), max_steps=max_steps - 1, finite=_err_defined)
    return it.state.z, it.state.Uz, 1 + it.num_steps, it.result == RESULTS.successful


_LINE_NEWTON_STEPS = 3


def _line_step(line, U, UD, b, c, from_mm):
    """Per-column minimiser of ``f(t) = data(U + t UD) + reg(z + t D)`` (convex in ``t``).

    ``line(U, UD, t)`` returns per-column ``(data(U + t UD) - data(U), d/dt, d2/dt2)``
    and ``reg(z + t D) - reg(z) = 2 t b + t^2 c``. ``_LINE_NEWTON_STEPS`` (3)
    Newton steps on the piecewise-linear ``f'`` from ``t = 1`` (clipped at
    ``t >= 0``; fewer steps cost more solves, more save none: see
    ``benchmarks/measured/NOTES.md``, "lifted"); a column keeps the safe
    step (``t = 1`` where ``from_mm``: the direction is a majorise-minimise step,
    which that step cannot increase; else ``t = 0``) unless the Newton point is
    at least as good. One pass over the data per Newton step and one for the check.
    """

    def newton(t, d1, d2):
        g = d1 + 2.0 * (b + t * c)
        h = d2 + 2.0 * c
        return jnp.maximum(t - g / jnp.where(h > 0, h, 1.0), 0.0)

    one = jnp.ones_like(b)
    delta1, d1, d2 = line(U, UD, one)
    t = newton(one, d1, d2)
    for _ in range(_LINE_NEWTON_STEPS - 1):
        _, d1, d2 = line(U, UD, t)
        t = newton(t, d1, d2)
    change = line(U, UD, t)[0] + t * (2.0 * b + t * c)
    safe_change = jnp.where(from_mm, delta1 + 2.0 * b + c, 0.0)
    take = (change <= safe_change) & jnp.isfinite(t)
    return jnp.where(take, t, jnp.where(from_mm, one, 0.0))


class _Conjugate(NamedTuple):
    """State of :func:`cg_mm`: iterate, ``U(z)``, direction and its image, previous slopes, ``err``."""

    z: Any
    U: jax.Array
    D: Any
    UD: jax.Array
    g_prev: jax.Array
    err: jax.Array


def cg_mm(sysm, target, line, U_start, *, tol, max_steps):
    r"""Preconditioned nonlinear conjugate gradient with exact per-column line search.

    For W-blocks whose data term is a sum over output units (columns of ``U``),
    e.g. the Fenchel penalty of a hidden layer: the majorise-minimise step
    ``r = solve(target(U(z))) - z`` is the gradient preconditioned by the
    (fixed) ridge system, and the iterates move along
    ``D_k = r_k + beta_k D_{k-1}`` (Fletcher-Reeves, ``beta_k`` the ratio of the
    slopes ``f'(0)`` along ``r_k`` and ``r_{k-1}``; reset to ``r_k`` whenever
    ``D_k`` is not a descent direction) with the step chosen per column by
    :func:`_line_step`. Each iteration costs one ridge solve, like a
    majorise-minimise step, and never increases the objective. Starts with one
    majorise-minimise step from ``U_start``; stops when the relative change of
    the predictions that a majorise-minimise step would make is at most
    ``tol``. Returns ``(z, U(z), steps, converged)``.
    """
    z1 = sysm.solve(target(U_start))
    U1 = sysm.U_of(z1)
    err1 = rel_change(U1, U_start)
    zero_cols = jnp.zeros(U1.shape[-1:], U1.dtype)

    def slope(z, U, D, UD):
        b, _ = sysm.reg_line(z, U, D, UD)
        return line(U, UD, zero_cols)[1] + 2.0 * b

    def step(s):
        z, U, D, UD, g_prev, _ = s
        r = sysm.step(target(U), z)
        Ur = sysm.U_lin(r)
        # slopes f'(0) at z along r (negative unless the column is stationary) and
        # along the previous direction; the slope along r + beta D is linear in beta
        g, g_old = slope(z, U, r, Ur), slope(z, U, D, UD)
        moving = g < 0
        beta = jnp.where(moving & (g_prev < 0), g / jnp.where(g_prev < 0, g_prev, 1.0), 0.0)
        beta = jnp.where(g + beta * g_old < 0, beta, 0.0)
        Dn = jax.tree.map(lambda a, d: a + beta * d, r, D)
        UDn = Ur + beta * UD
        b, c = sysm.reg_line(z, U, Dn, UDn)
        t = jnp.where(moving, _line_step(line, U, UDn, b, c, beta == 0), 0.0)
        z_new = jax.tree.map(lambda a, d: a + t * d, z, Dn)
        U_new = U + t * UDn
        # Stationarity measure: the relative size of the majorise-minimise step
        # at z (a scaled gradient mapping), not of the step taken.
        err = rel_change(U + Ur, U)
        # A column that did not move restarts from its majorise-minimise step.
        g = jnp.where(t > 0, g, 0.0)
        return _Conjugate(z_new, U_new, Dn, UDn, g, err)

    init = _Conjugate(z1, U1, jax.tree.map(jnp.zeros_like, z1), jnp.zeros_like(U1), zero_cols, err1)
    it = iterative_solve(init, step, _tol_reached(tol), max_steps=max_steps - 1, finite=_err_defined)
    return it.state.z, it.state.U, 1 + it.num_steps, it.result == RESULTS.successful


def nonneg_apg(value_fn, grad_fn, Z0, lipschitz, *, tol, max_steps):
    """min_{Z >= 0} f(Z) by accelerated projected gradient (step 1/L) + safeguard."""
    step = 1.0 / lipschitz

    def step_fn(Y):
        return jax.nn.relu(Y - step * grad_fn(Y))

    Z1 = step_fn(Z0)
    Z, k, conv = accelerated(step_fn, Z0, Z1, tol=tol, max_steps=max_steps)
    Z, finite = guard(value_fn, Z, Z0)
    return Z, Info.one(k, conv & finite)


def solve_simplex_cross_entropy(X0, Y, lam, *, tol: float | None = None, max_steps: int = 200) -> Solution:
    r"""Row-wise cross-entropy / simplex proximal problem by dual bisection (thesis 2.8).

    For each row ``x^0`` of ``X0`` and ``y`` of ``Y`` (``y >= 0``) solves

    .. math::

        \min_z\; -\sum_i y_i \log z_i + \lambda \|z - x^0\|_2^2
        \quad \text{s.t.}\; z \ge 0,\; 1^T z = 1 .

    The Lagrangian stationarity condition gives, for the multiplier ``nu`` of
    ``1^T z = 1``, the unique non-negative root

    .. math::

        z_i(\nu) = \frac{a_i}{2} + \sqrt{\frac{a_i^2}{4} + \frac{y_i}{2\lambda}},
        \qquad a_i = x^0_i + \nu ,

    which is increasing in ``nu``; ``nu`` solves ``1^T z(nu) = 1`` and is found by
    bisection on ``[nu_lo, nu_hi]`` with the thesis' upper bound
    ``nu_hi = 1 - max_i (x^0_i + y_i / (2 lam))`` (where ``1^T z >= 1``) and the
    overflow-free lower bound ``nu_lo = -max_i x^0_i - 1^T y / (2 lam)`` (where
    every ``z_i <= y_i / (2 lam 1^T y)`` so ``1^T z <= 1``), instead of the
    thesis' ``exp(theta)`` bound that overflows for confident rows. With ``Y = 0``
    this is the Euclidean projection onto the simplex. All rows are bisected in
    parallel (a vector of multipliers); the result is renormalised to sum to one.

    Args:
      X0: ``(N, p)`` centres.
      Y: ``(N, p)`` non-negative weights (one-hot labels).
      lam: ``lambda > 0`` (scalar).
      tol: bisection width tolerance on ``nu`` relative to ``max(1, |nu|)``
        (default ``4 eps`` of the dtype).
      max_steps: maximum number of bisection steps.

    Returns:
      ``Solution(value=Z, result, stats={"num_steps", "max_steps", "bracket_width"})``.
      Concrete bad input raises ``ValueError``; under ``jit`` a negative ``Y`` gives
      ``RESULTS.infeasible`` and a NaN ``Z``, a non-positive ``lam`` or a NaN in
      ``X0`` ``RESULTS.nonfinite``.

    Example:
      >>> Z = solve_simplex_cross_entropy(jnp.zeros((1, 3)), jnp.eye(3)[:1], 1.0).value
      >>> bool(jnp.isclose(Z.sum(), 1.0))
      True
    """
    X0 = as_float_array(X0, "X0", bools=True)
    dtype = X0.dtype
    Y = jnp.asarray(Y, dtype)
    if X0.ndim != 2 or Y.shape != X0.shape:
        raise ValueError(f"X0 and Y must be 2-D arrays of the same shape, got {X0.shape} and {Y.shape}")
    if is_concrete(lam) and not float(lam) > 0:
        raise ValueError(f"lam must be positive, got {lam}")
    # Y < 0 made sqrt(a^2 + 2 y / lam) NaN: the row came back NaN with RESULTS.nonfinite, not a ValueError
    check_finite(X0, "X0")
    check_finite(Y, "Y")
    if is_concrete(Y) and bool(jnp.any(Y < 0)):
        raise ValueError("Y must be non-negative (weights of the log terms, e.g. one-hot labels)")
    tol = float(4 * jnp.finfo(dtype).eps) if tol is None else check_real(tol, "tol")
    max_steps = check_count(max_steps, "max_steps")  # int() truncated 2.5
    # one compiled program per shape and max_steps: run eagerly, the loop's closures compiled anew at every call
    sol = _simplex_xent_jit(X0, Y, jnp.asarray(lam, dtype), jnp.asarray(tol, dtype), max_steps=max_steps)
    if is_concrete(Y):
        return sol
    # A traced negative weight: the row's bracket is no longer valid and a row with no positive weight
    # came back as a finite point of the simplex, RESULTS.successful.
    ok = jnp.all(Y >= 0)
    code = jnp.where(ok, sol.result, jnp.int32(RESULTS.infeasible))
    return sol._replace(value=poison(ok, sol.value), result=code)


def _simplex_z(X0, Y, lam, nu):
    a = X0 + nu[:, None]
    c = 2.0 * Y / lam
    s = jnp.sqrt(a * a + c)
    # (a + s)/2 written stably for a < 0: c / (2 (s - a)).
    neg = c / (2.0 * jnp.where(a < 0, s - a, 1.0))
    return jnp.where(a >= 0, 0.5 * (a + s), jnp.where(c > 0, neg, 0.0))


class _Bracket(NamedTuple):
    """State of :func:`simplex_xent`: the per-row bracket of ``nu`` and its largest relative width."""

    lo: jax.Array
    hi: jax.Array
    err: jax.Array


def simplex_xent(X0, Y, lam, tol, max_steps):
    """:func:`solve_simplex_cross_entropy` for checked arrays and static ``tol``, ``max_steps``."""
    ysum = jnp.sum(Y, axis=-1)
    hi = 1.0 - jnp.max(X0 + Y / (2.0 * lam), axis=-1)
    lo = -jnp.max(X0, axis=-1) - ysum / (2.0 * lam)

    def width(lo, hi):
        return jnp.max((hi - lo) / jnp.maximum(1.0, jnp.abs(0.5 * (lo + hi))))

    def step(s):
        lo, hi, _ = s
        mid = 0.5 * (lo + hi)
        over = jnp.sum(_simplex_z(X0, Y, lam, mid), axis=-1) > 1.0
        lo, hi = jnp.where(over, lo, mid), jnp.where(over, mid, hi)
        return _Bracket(lo, hi, width(lo, hi))

    init = _Bracket(lo, hi, width(lo, hi))
    it = iterative_solve(init, step, _tol_reached(tol), max_steps=max_steps, finite=_err_defined)
    lo, hi, w = it.state
    Z = _simplex_z(X0, Y, lam, 0.5 * (lo + hi))
    Z = Z / jnp.sum(Z, axis=-1, keepdims=True)
    code = jnp.where(jnp.all(jnp.isfinite(Z)), it.result, jnp.int32(RESULTS.nonfinite))
    stats = {"num_steps": it.num_steps, "max_steps": jnp.int32(max_steps), "bracket_width": w}
    return Solution(Z, code, stats)


_simplex_xent_jit = jax.jit(simplex_xent, static_argnames=("max_steps",))
