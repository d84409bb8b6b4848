"""FISTA (accelerated proximal gradient) with adaptive restart.

Every iteration is two matrix-vector products, which ``vmap`` turns into
matrix-matrix products; ``solver="auto"`` picks it on accelerators (machine
notes: ``benchmarks/measured/NOTES.md``, section l1). The
outer convergence loop (:func:`jaxknock.l1.solvers.solve`) checks the duality
gap every ``check_every("fista")`` iterations (:mod:`jaxknock._backend`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _backend
from jaxknock.l1.problem import HI, LOSS_CURVATURE, Problem, loss_grad, predict, rmatvec, soft_threshold

__all__: list[str] = []


def rounds_stride() -> int:
    """FISTA iterations per round (between two gap checks), chosen per backend."""
    return _backend.check_every("fista")


class Momentum(NamedTuple):
    """FISTA extrapolation memory."""

    coef_prev: jax.Array
    offset_prev: jax.Array
    z_prev: jax.Array
    t: jax.Array


def init_momentum(coef, offset, z) -> Momentum:
    r"""FISTA's memory at the start: the previous iterate is the current one and ``t = 1``.

    FISTA extrapolates from the last two iterates,
    ``v = beta_k + ((t_k - 1) / t_{k+1}) (beta_k - beta_{k-1})`` with
    ``t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2`` (and the same for the offset and
    the linear predictor ``z``). With ``t_1 = 1`` and ``beta_0 = beta_1`` the
    first step is a plain proximal-gradient step; :func:`restart` returns to
    this state wherever screening moved the iterate.

    Args:
        coef: ``(m,)`` coefficients of the starting point.
        offset: scalar offset of the centred model.
        z: ``(n,)`` linear predictor at ``(coef, offset)``.

    Returns:
        :class:`Momentum` ``(coef_prev=coef, offset_prev=offset, z_prev=z, t=1)``.

    Example:
        >>> mom = init_momentum(jnp.zeros(3), jnp.zeros(()), jnp.zeros(5))
        >>> mom.coef_prev.shape, float(mom.t)
        ((3,), 1.0)
    """
    return Momentum(coef, offset, z, jnp.ones((), coef.dtype))


def restart(state, changed):
    """Reset the momentum at the current iterate where ``changed`` (screening moved it)."""
    mom = state.momentum
    momentum = Momentum(
        coef_prev=jnp.where(changed, state.coef, mom.coef_prev),
        offset_prev=jnp.where(changed, state.offset, mom.offset_prev),
        z_prev=jnp.where(changed, state.z, mom.z_prev),
        t=jnp.where(changed, jnp.ones_like(mom.t), mom.t),
    )
    return state._replace(momentum=momentum)


def fista_iteration(prob: Problem, lam, state, *, loss, fit_intercept):
    """One accelerated proximal-gradient step (restarted when it stops descending)."""
    mom = state.momentum
    t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * mom.t**2))
    beta = (mom.t - 1.0) / t_next
    v = state.coef + beta * (state.coef - mom.coef_prev)
    v_off = state.offset + beta * (state.offset - mom.offset_prev)
    zv = state.z + beta * (state.z - mom.z_prev)
    u = prob.w * loss_grad(loss, zv, prob.y) / prob.n_w
    usum = jnp.sum(u)
    grad = rmatvec(prob.XT, u) - prob.mu * usum
    L = prob.lipschitz_all
    coef = jnp.where(state.active, soft_threshold(v - grad / L, lam / L), 0.0)
    if loss == "logistic" and fit_intercept:
        # X_c is orthogonal to the intercept column, so a block step of
        # 1 / sup f'' = 4 is a valid majorisation for the offset.
        offset = v_off - usum / LOSS_CURVATURE[loss]
    else:
        offset = state.offset
    z = predict(prob, coef, offset)
    restart_now = jnp.dot(v - coef, coef - state.coef, precision=HI) > 0
    momentum = Momentum(
        coef_prev=state.coef,
        offset_prev=state.offset,
        z_prev=state.z,
        t=jnp.where(restart_now, jnp.ones_like(t_next), t_next),
    )
    return state._replace(coef=coef, offset=offset, z=z, momentum=momentum)


def fista_round(prob: Problem, lam, state, *, loss, fit_intercept):
    """:func:`rounds_stride` iterations between two gap checks."""
    m = rounds_stride()
    state = lax.fori_loop(
        0,
        m,
        lambda _, s: fista_iteration(prob, lam, s, loss=loss, fit_intercept=fit_intercept),
        state,
    )
    return state._replace(num_steps=state.num_steps + m)
