"""The lasso / l1-logistic path: the working-set engine, or warm-started solves along the grid (``lax.scan``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks
from jaxknock._solution import Solution, raise_if_failed
from jaxknock.l1 import _units, _ws_naive, working_set
from jaxknock.l1.problem import (
    Problem,
    centre_on_host,
    full_problem,
    prepare_data,
    resolve_lambdas,
    restore_intercept,
)
from jaxknock.l1.settings import L1Settings, make_settings
from jaxknock.l1.solvers import solve, solve_stats

__all__ = ["lasso_path"]


def path_scan(prob: Problem, lambdas, coef0, settings: L1Settings):
    """Warm-started solves along ``lambdas`` (``lax.scan``); per-lambda ``(coefs, codes, stats)``."""

    def body(carry, lam):
        coef, offset = carry
        state, code = solve(prob, lam, coef, offset, settings)
        out = (state.coef, code, solve_stats(prob, state, lam, settings))
        return (state.coef, state.offset), out

    _, (coefs, codes, stats) = lax.scan(body, (coef0, prob.offset0), lambdas)
    return coefs, codes, stats


def path_solve(X, y, lambdas, settings: L1Settings) -> Solution:
    """The path of one design from zero coefficients (traceable; ``vmap``/``lax.map`` over designs)."""
    prob = full_problem(X, y, settings)
    coefs, codes, stats = path_scan(prob, lambdas, jnp.zeros(X.shape[1], X.dtype), settings)
    return Solution(value=coefs, result=codes, stats=stats)


_path_jit = jax.jit(path_solve)


def lasso_path(
    X,
    y,
    lambdas=None,
    *,
    num_lambdas: int = 100,
    eps: float = 1e-3,
    loss: str = "squared",
    fit_intercept: bool = True,
    tol: float | None = None,
    max_steps: int | None = None,
    solver: str = "auto",
    screen: bool = True,
    engine: str = "auto",
    throw: bool = False,
) -> Solution:
    """Lasso / l1-logistic solutions along a lambda path with warm starts.

    Solves :func:`~jaxknock.lasso` at each value of ``lambdas``, each solve
    warm-started from the previous solution. Matches
    ``sklearn.linear_model.lasso_path`` (least squares) on the same grid, which
    fits no intercept: with ``fit_intercept=False``, or on centred ``X`` and ``y``.

    Args:
        X, y: as in :func:`~jaxknock.lasso`.
        lambdas: ``(L,)`` penalties; default :func:`~jaxknock.lambda_grid` with
            ``num_lambdas`` and ``eps``.
        num_lambdas, eps: default grid, ``lambda_max * eps**(k/(L-1))``.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: as in :func:`~jaxknock.lasso`.
        engine: ``"auto"`` (default): the working-set engine
            (:func:`jaxknock.l1.working_set.l1_path`: exact homotopy on Gram
            columns for least squares, proximal Newton for the logistic loss,
            strong rules and a KKT check over all features at every lambda)
            whenever it applies, as in :func:`~jaxknock.lasso_cv`: with
            ``fit_intercept=True``, ``solver="auto"``, ``screen=True`` and
            concrete ``X``, ``y`` and ``lambdas`` (not traced); otherwise
            ``"classic"``: :func:`~jaxknock.lasso` at each lambda in the given
            order, warm-started by ``lax.scan`` (safe screening restarts at
            every lambda; the one that runs under ``jit`` / ``vmap``).
            ``"working_set"`` forces the engine (an error without an intercept).
            With the working-set engine ``tol`` is its relative KKT tolerance
            (default ``1e-5``: ``max_j dist(g_j, lam d|b_j|) <= tol lam`` at every
            lambda; the homotopy is exact between kinks, certified at
            ``max(tol, 1e-6, 1000 eps)``) and ``max_steps`` its per-lambda cap
            on epochs (homotopy: kinks) of each working-set solve and on KKT
            rounds (default ``10_000``; ``max_steps=0``, which only certifies the
            starting point, runs classic). The engine solves the grid in
            decreasing order: a grid in another order, or with repeats, is
            solved sorted and unique and its answers returned in the given
            order (the classic engine follows the given order; where the
            solution is unique the answers agree up to solver accuracy).

    Returns:
        :class:`~jaxknock.Solution` with ``value`` of shape ``(L, m)``,
        ``result`` of shape ``(L,)`` and ``stats`` entries of shape ``(L,)``:
        ``lam``, ``intercept``, ``gap`` (the duality gap of each solution, in
        objective units; also under the deprecated key ``duality_gap``),
        ``num_steps``, ``max_steps``, ``num_screened`` (features screened out:
        by the safe rules, or outside the working set). The working-set engine
        reports one result code for the whole grid (broadcast: a failure
        anywhere marks every lambda) and adds ``kkt``, the largest relative
        KKT violation at each lambda. A float64 NumPy ``X`` (or ``y``) with x64
        off is centred on the host first, and ``intercept`` is then a float64
        NumPy array, as in :func:`~jaxknock.lasso`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (40, 6)); y = X[:, 1]
        >>> path = lasso_path(X, y, num_lambdas=5)
        >>> path.value.shape, path.stats["gap"].shape
        ((5, 6), (5,))
    """
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    settings = make_settings(
        X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    X, y, units = _units.scale_data(X, y, loss)  # solved on the unit scale (jaxknock.l1._units)
    lambdas = resolve_lambdas(X, y, lambdas, settings, num_lambdas=num_lambdas, eps=eps, units=units)
    if working_set.use_path_engine(
        engine, X, y, lambdas, fit_intercept, solver=solver, screen=screen, max_steps=max_steps
    ):
        sol = _working_set_path(X, y, lambdas, loss=loss, tol=tol, max_steps=max_steps)
    else:
        sol = _path_jit(X, y, lambdas, settings)
    sol = _units.restore(sol, units)
    return raise_if_failed(restore_intercept(sol, shift), throw)


def _working_set_path(X, y, lambdas, *, loss, tol, max_steps) -> Solution:
    """:func:`lasso_path` on the working-set engine (unit-scale data), with the classic engine's stats.

    The engine runs on the distinct penalties in decreasing order; ``inv`` maps them back to the caller's grid.
    """
    if _checks.is_concrete(lambdas):
        neg, inv = np.unique(-np.asarray(lambdas), return_inverse=True)
        grid = jnp.asarray(-neg, X.dtype)
    else:  # engine="working_set" under jit: the engine takes a decreasing traced grid (else nonfinite)
        grid, inv = lambdas, None
    max_steps = 10_000 if max_steps is None else max_steps
    with _checks.trusted_values():  # lasso_path checked X and y (the engine's device check was two programs more)
        sol = working_set.l1_path(
            X, y, grid, loss=loss, tol=1e-5 if tol is None else tol, max_steps=max_steps, early_stop=False
        )
    st = sol.stats
    coefs, b0 = st["coef_path"], st["intercept_path"]
    gap, max_steps_path, num_screened, result = _classic_stats(
        X, y, coefs, b0, grid, st["working_set_path"], sol.result, max_steps, loss=loss
    )
    L = coefs.shape[0]
    stats = {
        "intercept": b0,
        "gap": gap,
        "duality_gap": gap,  # deprecated key, kept for one release
        "num_steps": st["steps_path"],
        "max_steps": max_steps_path,
        "num_screened": num_screened,
        "kkt": st["kkt_path"],
        "lam": grid,
    }
    if inv is not None and not np.array_equal(inv, np.arange(L)):
        inv = jnp.asarray(inv)
        coefs, result = coefs[inv], result[inv]
        stats = {k: v[inv] for k, v in stats.items()}
    return Solution(value=coefs, result=result, stats=stats)


@functools.partial(jax.jit, static_argnames="loss")
def _classic_stats(X, y, coefs, b0, lambdas, working_set, result, max_steps, *, loss):
    """The classic engine's per-lambda ``gap``, ``max_steps``, ``num_screened`` and ``result`` (one program).

    The gap of every ``(coefs[k], b0[k])`` at ``lambdas[k]`` is :func:`jaxknock.l1._ws_naive.absolute_gap`
    (the engine's own gap, in objective units, as the classic engine's ``state.gap``) under ``vmap``: all
    lambdas at once, two matrix products with ``X``.
    """
    one = functools.partial(_ws_naive.absolute_gap, loss=loss)
    gap = jax.vmap(one, in_axes=(None, None, 0, 0, 0))(X, y, coefs, b0, lambdas)
    L, m = coefs.shape
    num_screened = (m - working_set).astype(jnp.int32)
    return gap, jnp.full((L,), max_steps, jnp.int32), num_screened, jnp.broadcast_to(result, (L,))
