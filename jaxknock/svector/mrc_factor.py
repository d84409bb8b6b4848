r"""MVR and maximum-entropy S-vectors for a factor model ``Sigma = D + U U^T``, ``O(p k^2)`` per step.

Two methods with the same certificate and stopping rule: ``method="newton"``
(default), the damped Newton-CG of :mod:`~jaxknock.svector.mrc_factor_newton`
(sequential depth independent of ``p``), and ``method="coordinate"``, the
blocked coordinate descent below (``p`` sequential coordinate updates per sweep).

The objectives, closed-form coordinate updates and certified gaps are those of
:mod:`jaxknock.svector.mrc`. On the unit-diagonal model ``(d, U)`` with
``c = (m+1)/m``, ``A = Dt + c U U^T`` with ``Dt = c D - diag(s)``; by Woodbury
``A^{-1} = Dt^{-1} - c Dt^{-1} U N U^T Dt^{-1}`` with the ``k x k``
``N = M^{-1}``, ``M = I + c U^T Dt^{-1} U``. For coordinate ``j`` (``a = u_j^T N u_j``)

* ``(A^{-1})_jj = (dt_j - c a) / dt_j^2``, so ``sigma_j = dt_j^2 / (dt_j - c a)``;
* ``||A^{-1} e_j||^2 = 1/dt_j^2 - 2 c a / dt_j^3 + c^2 (N u_j)^T P (N u_j) / dt_j^2``
  with the ``k x k`` ``P = U^T Dt^{-2} U``.

A move of ``s_j`` changes ``M`` and ``P`` by rank-one terms: ``N`` by
Sherman-Morrison, ``N <- N - c delta N u u^T N / (dt_old dt_new + c delta a)``,
and ``P <- P + u u^T (1/dt_new^2 - 1/dt_old^2)``, ``O(k^2)`` each. After each
sweep ``N`` and ``P`` are recomputed (``O(p k^2)``, no drift), and the
certificate needs ``diag(A^{-1})``, ``||A^{-1} e_j||^2`` (vectorised forms of
the two lines above), ``log det A = sum_j log|dt_j| + log|det M|`` (matrix
determinant lemma) and ``tr A^{-1}``: all ``O(p k^2)``; nothing ``p x p``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _aot, _checks
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import FactorModel
from jaxknock.svector import _common, mrc, mrc_factor_newton
from jaxknock.svector._common import HIGHEST

__all__ = ["mvr_factor", "maxent_factor", "FactorMRCState"]

_BLOCK = 256
METHODS = ("coordinate", "newton")


class FactorMRCState(NamedTuple):
    """State of :func:`mvr_factor` / :func:`maxent_factor` (unit-diagonal model): ``s``, ``N = M^{-1}``,
    ``P = U^T Dt^{-2} U``, ``objective``, certified ``gap``, previous objective, sweep counter, and whether
    every coordinate is certified too (MVR's per-coordinate stationarity; always true for maxent)."""

    s: jax.Array
    N: jax.Array
    P: jax.Array
    objective: jax.Array
    gap: jax.Array
    prev: jax.Array
    sweep: jax.Array
    certified: jax.Array


def _inner(d, U, s, c):
    dt = c * d - s
    W = U / dt[:, None]
    k = U.shape[1]
    M = jnp.eye(k, dtype=U.dtype) + c * jnp.matmul(U.T, W, precision=HIGHEST)
    N = jnp.linalg.inv(M)
    P = jnp.matmul(W.T, W, precision=HIGHEST)
    return dt, M, N, P


def _certificate(kind, d, U, s, c, m, tol):
    """``(N, P, f, gap, certified)`` at ``s``, all ``O(p k^2)``; ``certified``: for MVR, every coordinate's
    stationarity to ``sqrt(tol)`` (:func:`jaxknock.svector.mrc.mvr_norms_certified`), from the same column norms."""
    dt, M, N, P = _inner(d, U, s, c)
    UN = jnp.matmul(U, N, precision=HIGHEST)
    a = jnp.sum(UN * U, axis=1)
    hdiag = (dt - c * a) / dt**2
    colnorm2 = (
        1.0 / dt**2 - 2.0 * c * a / dt**3 + c**2 * jnp.sum(jnp.matmul(UN, P, precision=HIGHEST) * UN, axis=1) / dt**2
    )
    _, logdet_m = jnp.linalg.slogdet(M)
    logdet = jnp.sum(jnp.log(jnp.abs(dt))) + logdet_m
    f, gap = mrc.objective_and_gap(kind, s, hdiag, logdet, jnp.sum(hdiag), colnorm2, m)
    return N, P, f, gap, mrc.mvr_norms_certified(kind, s, colnorm2, m, tol)


def _sweep(kind, state, d, U, c, m):
    p, k = U.shape
    b = min(_BLOCK, p)
    nb = -(-p // b)
    pad = nb * b - p
    # padded coordinates have u = 0: their updates leave N and P unchanged, and their s is dropped
    Ub = jnp.pad(U, ((0, pad), (0, 0))).reshape(nb, b, k)
    db = jnp.pad(d, (0, pad), constant_values=1.0).reshape(nb, b)
    sb = jnp.pad(state.s, (0, pad), constant_values=0.5).reshape(nb, b)

    def block(kb, carry):
        sb, N, P = carry
        Ublk, dblk = Ub[kb], db[kb]

        def coord(i, carry):
            s_blk, N, P = carry
            u = Ublk[i]
            Nu = jnp.matmul(N, u, precision=HIGHEST)
            a = jnp.dot(u, Nu, precision=HIGHEST)
            s_old = s_blk[i]
            dt = c * dblk[i] - s_old
            z = (dt - c * a) / dt**2
            q = 1.0 / dt**2 - 2.0 * c * a / dt**3 + c**2 * jnp.dot(Nu, jnp.matmul(P, Nu, precision=HIGHEST)) / dt**2
            x, _ = mrc.coordinate_value(kind, s_old, z, q, m)
            delta = x - s_old
            dt_new = dt - delta
            N = N - (c * delta / (dt * dt_new + c * delta * a)) * jnp.outer(Nu, Nu)
            P = P + (1.0 / dt_new**2 - 1.0 / dt**2) * jnp.outer(u, u)
            return s_blk.at[i].set(x), N, P

        s_blk, N, P = lax.fori_loop(0, b, coord, (sb[kb], N, P))
        return sb.at[kb].set(s_blk), N, P

    sb, _, _ = lax.fori_loop(0, nb, block, (sb, state.N, state.P))
    return sb.reshape(-1)[:p]


def _step(kind, state, d, U, c, m, tol):
    s = _sweep(kind, state, d, U, c, m)
    N, P, f, gap, certified = _certificate(kind, d, U, s, c, m, tol)
    feasible = _common.factor_is_pd(d, U, 2.0 * s / c)
    gap = jnp.where(feasible, gap, jnp.inf)
    return FactorMRCState(s, N, P, f, gap, state.objective, state.sweep + 1, certified)


@functools.partial(jax.jit, static_argnames=("kind", "method"))
def _mrc_factor_jit(d, U, tol, max_steps, m, *, kind, method):
    dc, Uc, diag = _common.unit_diagonal(d, U)
    c = (m + 1.0) / m
    p = U.shape[0]
    # start at s_j = min(1, c d_j / 2): Dt = c D / 2 > 0 and A = Dt + c U U^T is positive definite
    s0 = jnp.minimum(1.0, 0.5 * c * dc)
    if method == "newton":
        it = mrc_factor_newton.solve(kind, dc, Uc, s0, tol, max_steps, m)
        trips = it.state.trips
        # the exact inertia test of c C - diag(s) > 0, from the capacitance kept for the final s
        feasible = _common.factor_is_pd_from_eigvals(c * dc - it.state.s, it.state.evals)
    else:
        _, _, N0, P0 = _inner(dc, Uc, s0, c)
        inf = jnp.asarray(jnp.inf, U.dtype)
        init = FactorMRCState(s0, N0, P0, inf, inf, inf, jnp.int32(0), jnp.asarray(kind != "mvr"))
        it = iterative_solve(
            init,
            lambda st: _step(kind, st, dc, Uc, c, m, tol),
            lambda st: mrc.mrc_terminate(st, tol, st.certified),
            max_steps=max_steps,
            finite=lambda st: jnp.all(jnp.isfinite(st.s)),
        )
        b = min(_BLOCK, p)
        # per sweep: one trip per coordinate (padded to whole blocks) and per block
        trips = it.num_steps * (1 + (-(-p // b)) * (b + 1))
        feasible = _common.factor_is_pd(dc, Uc, 2.0 * it.state.s / c)
    st = it.state
    finite = jnp.all(jnp.isfinite(st.s)) & jnp.isfinite(st.objective)
    result = jnp.where(
        ~finite, RESULTS.nonfinite, jnp.where(~feasible | jnp.any(st.s <= 0), RESULTS.infeasible, it.result)
    ).astype(jnp.int32)
    s, result = _common.reject_invalid_model(d, U, st.s * diag, result)
    stats = {
        "num_steps": it.num_steps,
        "num_loop_trips": jnp.asarray(trips, jnp.int32),
        "max_steps": max_steps,
        "objective": st.objective,
        "gap": jnp.where(feasible, st.gap, jnp.inf),
        "min_eig": jnp.full((), jnp.nan, U.dtype),
        "feasible": feasible,
    }
    return Solution(s, result, stats, st)


def _solve(kind, model, num_knockoffs, tol, max_steps, method, throw):
    _checks.check_choice(method, METHODS, "method")
    tol, max_steps, _, _ = _common.check_settings(tol, max_steps, 0.5, None)
    m = _checks.check_num_knockoffs(num_knockoffs)
    model = _common.validate_model(model)
    if model.U.ndim == 3:
        fn = jax.vmap(functools.partial(_mrc_factor_jit, kind=kind, method=method), in_axes=(0, 0, None, None, None))
        sol = fn(model.d, model.U, tol, max_steps, float(m))
    else:  # a fresh process with the compilation cache on loads the traced program (jaxknock/_aot.py)
        sol = _aot.call(_mrc_factor_jit, model.d, model.U, tol, max_steps, float(m), kind=kind, method=method)
        sol = dense_rescue(sol, model, kind, m, tol, max_steps)
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)


# the largest p whose stagnated factor solve is solved again densely (O(p^3) per Newton step: ~0.1 s at 1000)
DENSE_RESCUE_MAX_P = 1000


def dense_rescue(sol: Solution, model: FactorModel, kind: str, m: int, tol, max_steps) -> Solution:
    """Eagerly, the dense solver's solution of ``D + U U^T`` where the factor solve ended ``stagnated``.

    The Woodbury terms carry ``1 / Dt_j``, ``Dt_j = c d_j - s_j``: a model with near copies (two features
    with equal loadings and ``d_j`` of 1e-9..1e-10, which a user's known model can have) makes them
    ill-conditioned, and on 5 of 12 such models (p = 52-190, k = 1-5) the Newton method ended ``stagnated``
    (gap NaN on four) with ``s`` off the certified dense optimum by 40-100% on some coordinates, the
    coordinate method ``nonfinite``; the dense MVR (with its own coordinate rescue) certified all 12. So a
    ``stagnated`` solve of one concrete model with ``p <= DENSE_RESCUE_MAX_P`` (not one that spent the
    caller's ``max_steps``) is solved again by :func:`jaxknock.mvr` / :func:`jaxknock.maxent` on the dense
    matrix, kept when it is ``successful`` or has the smaller (or the only finite) certified gap; its
    stats keep this solver's keys (``num_loop_trips`` adds the dense Newton steps, ``feasible`` from its
    code) with ``stats["dense_rescue"]`` true, and its ``state`` is the dense solver's. Under ``jit``,
    for a batch and for larger ``p`` the factor solution is returned as it is.
    """
    if model.U.shape[0] > DENSE_RESCUE_MAX_P or not all(_checks.is_concrete(a) for a in (sol.value, sol.result)):
        return sol
    if np.ndim(sol.result) != 0 or int(sol.result) != RESULTS.stagnated:
        return sol
    Sigma = jnp.diag(model.d) + jnp.matmul(model.U, model.U.T, precision=HIGHEST)
    Sigma = 0.5 * (Sigma + Sigma.T)
    alt = mrc.solve_kind(kind, Sigma, m, tol, max_steps, None, "newton", False)
    alt_code = int(alt.result)
    gap, alt_gap = float(sol.stats["gap"]), float(alt.stats["gap"])
    better = alt_code in (RESULTS.stagnated, RESULTS.max_steps_reached) and (
        alt_gap < gap or (np.isnan(gap) and np.isfinite(alt_gap))
    )
    if alt_code != RESULTS.successful and not better:
        return sol
    ok = alt_code not in (RESULTS.infeasible, RESULTS.nonfinite)
    stats = dict(
        sol.stats,
        num_steps=alt.stats["num_steps"],
        num_loop_trips=sol.stats["num_loop_trips"] + jnp.asarray(alt.stats["num_steps"], jnp.int32),
        objective=alt.stats["objective"],
        gap=alt.stats["gap"],
        min_eig=alt.stats["min_eig"],
        feasible=jnp.asarray(ok),
        dense_rescue=jnp.asarray(True),
    )
    return Solution(alt.value, alt.result, stats, alt.state)


_DOC = r"""
    Same problem, certificate, tolerance semantics and result codes as the
    dense solver, for ``Sigma = D + U U^T`` given as a
    :class:`~jaxknock.FactorModel` (or a batch with a leading axis, solved with
    ``vmap``), in ``O(p k^2)`` time per step and ``O(p k)`` memory; nothing
    ``p x p``. Both methods start at ``s_j = min(1, c d_j / 2)`` on the
    unit-diagonal model and stop on the certified gap of :mod:`jaxknock.svector.mrc`
    (``gap <= tol * max(|f|, 1)`` and, for MVR, every coordinate's stationarity to
    ``sqrt(tol)`` as :func:`~jaxknock.svector.mrc.mvr_coordinates_certified`:
    ``successful``; no more decrease: ``stagnated``; else ``max_steps_reached``).

    ``method="newton"`` (default, :mod:`~jaxknock.svector.mrc_factor_newton`):
    damped Newton steps on ``s``; the Newton system (Hessian ``A^{-1} o A^{-1} +
    diag(m / s^2)`` for ME, ``(2/m) A^{-1} o A^{-2} + diag(2 m / s^3)`` for MVR,
    ``A = c C - diag(s)``) is solved by Jacobi-preconditioned conjugate gradients,
    each product ``O(p k^2)`` by Woodbury; the step length is halved from the
    fraction to the boundary of ``s > 0`` until the exact inertia test of ``A > 0``
    and the Armijo condition hold. ``num_steps`` counts Newton steps; the
    sequential depth (``num_loop_trips``: Newton steps + CG iterations + step
    halvings) does not grow with ``p``, and it is also the faster method on
    this 2-core CPU (``benchmarks/measured/bench_mrc_factor_newton.txt``).

    ``method="coordinate"`` (:mod:`jaxknock.svector.mrc_factor`): the dense
    solver's closed-form coordinate updates in sweeps of ``p`` sequential
    updates, ``O(k^2)`` each (``num_steps`` counts sweeps, ``num_loop_trips``
    one trip per coordinate and per block of 256).

    Float64 is required (``A`` approaches singularity at the optimum). ``tol``,
    ``max_steps`` and ``num_knockoffs`` are traced (no recompilation); ``method``
    is static. ``stats["min_eig"]`` is NaN (not cheap for a
    factor model); ``stats["feasible"]`` is the exact inertia test of
    ``c Sigma - diag(s) > 0``. Caveat (as for :func:`~jaxknock.sdp_factor`):
    a ``Dt_j = c d_j - s_j`` within rounding of 0 makes the Woodbury terms
    ill-conditioned; such runs end ``nonfinite`` / ``infeasible`` / ``stagnated``
    rather than with a silent wrong answer, and an eager ``stagnated`` solve of
    one model with ``p <= 1000`` is solved again densely (:func:`dense_rescue`:
    ``stats["dense_rescue"]``). Under ``jit`` a model the eager checks refuse
    (NaN/Inf in ``d`` or ``U``: ``nonfinite``; some ``d_j <= 0``: ``infeasible``)
    gives an all-NaN ``s``.

    Args:
        model: :class:`~jaxknock.FactorModel` (float64).
        num_knockoffs, tol, max_steps, throw: as in the dense solver
            (``max_steps`` counts Newton steps or sweeps).
        method: ``"newton"`` (default) or ``"coordinate"``.

    Returns:
        :class:`~jaxknock.Solution` (``value = s`` on the covariance scale;
        ``stats``: ``num_steps``, ``num_loop_trips``, ``max_steps``,
        ``objective``, ``gap``, ``min_eig`` (NaN), ``feasible``; ``state`` the
        final :class:`~jaxknock.svector.mrc_factor_newton.FactorMRCNewtonState`
        or :class:`FactorMRCState`).
"""


def mvr_factor(
    model: FactorModel,
    *,
    num_knockoffs: int = 1,
    tol: float = 1e-6,
    max_steps: int = 500,
    method: str = "newton",
    throw=False,
):
    """:func:`~jaxknock.mvr` for a factor model ``Sigma = D + U U^T``, ``O(p k^2)`` per step.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> model = FactorModel(jnp.full(500, 0.5), jnp.full((500, 1), 0.5 ** 0.5))
        >>> sol = mvr_factor(model)
        >>> bool(sol.successful)
        True
        >>> coord = mvr_factor(model, method="coordinate")   # same certified optimum
        >>> bool(abs(coord.stats["objective"] - sol.stats["objective"]) <= coord.stats["gap"] + sol.stats["gap"])
        True
    """
    return _solve("mvr", model, num_knockoffs, tol, max_steps, method, throw)


def maxent_factor(
    model: FactorModel,
    *,
    num_knockoffs: int = 1,
    tol: float = 1e-6,
    max_steps: int = 500,
    method: str = "newton",
    throw=False,
):
    """:func:`~jaxknock.maxent` for a factor model ``Sigma = D + U U^T``, ``O(p k^2)`` per step.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> model = FactorModel(jnp.full(500, 0.5), jnp.full((500, 1), 0.5 ** 0.5))
        >>> sol = maxent_factor(model)
        >>> bool(sol.successful)
        True
    """
    return _solve("maxent", model, num_knockoffs, tol, max_steps, method, throw)


mvr_factor.__doc__ += _DOC
maxent_factor.__doc__ += _DOC
