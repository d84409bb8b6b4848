"""Warm-started solves along a decreasing lambda path (``lax.scan``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._solution import Solution, raise_if_failed
from jaxknock.l1 import _units
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
    throw: bool = False,
) -> Solution:
    """Lasso / l1-logistic solutions along a lambda path with warm starts.

    Solves :func:`~jaxknock.lasso` at each value of ``lambdas`` in the given
    order (give them in decreasing order), each solve starting from the
    previous solution (``lax.scan``). Safe screening restarts at every lambda.
    Matches ``sklearn.linear_model.lasso_path`` (least squares) on the same grid.

    Args:
        X, y: as in :func:`~jaxknock.lasso`.
        lambdas: ``(L,)`` penalties; default :func:`~jaxknock.lambda_grid` with
            ``num_lambdas`` and ``eps``.
        num_lambdas, eps: default grid, ``lambda_max * eps**(k/(L-1))``.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: as in :func:`~jaxknock.lasso`.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` of shape ``(L, m)``,
        ``result`` of shape ``(L,)`` and ``stats`` entries of shape ``(L,)``
        (``lam``, ``intercept``, ``gap``, ``num_steps``, ...). A float64 NumPy
        ``X`` (or ``y``) with x64 off is centred on the host first, and
        ``intercept`` is then a float64 NumPy array, as in :func:`~jaxknock.lasso`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (40, 6)); y = X[:, 1]
        >>> path = lasso_path(X, y, num_lambdas=5)
        >>> path.value.shape
        (5, 6)
    """
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    settings = make_settings(
        X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    X, y, units = _units.scale_data(X, y, loss)  # solved on the unit scale (jaxknock.l1._units)
    lambdas = resolve_lambdas(X, y, lambdas, settings, num_lambdas=num_lambdas, eps=eps, units=units)
    sol = _units.restore(_path_jit(X, y, lambdas, settings), units)
    return raise_if_failed(restore_intercept(sol, shift), throw)
