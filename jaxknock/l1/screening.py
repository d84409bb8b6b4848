r"""Duality gap and dynamic GAP safe screening.

Stopping uses the duality gap at the dual point obtained by rescaling the
residual (generalised residual :math:`-f'(z)` for the logistic loss) into the
dual feasible set :math:`\{\theta : \|X_c^\top\theta\|_\infty \le \lambda\}`
(with an intercept, after making the residual's training mean zero: the dual
constraint :math:`\sum_i \theta_i = 0` of the unpenalised intercept);
a solve succeeds when ``gap <= tol * D0`` with ``D0`` the null-model deviance
per sample (``||y - ybar||^2 / n`` for least squares, exactly scikit-learn's
criterion). The same gap drives *dynamic GAP safe sphere screening*
(Fercoq, Gramfort & Salmon 2015; Ndiaye et al. 2017): feature ``j`` is
provably zero at the optimum and is frozen at zero when

.. math::

    |x_{c,j}^\top \theta| + r\,\|x_{c,j}\|_2 < \lambda,\qquad
    r = \sqrt{2\,\mathrm{gap} / (\gamma\, n)},

where :math:`\gamma = 1` (squared) or :math:`4` (logistic) is the strong
concavity of the scaled dual.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock.l1.problem import HI, Problem, loss_grad, loss_value, matvec, rmatvec
from jaxknock.l1.settings import L1Settings

__all__: list[str] = []

# Strong concavity of the per-sample dual (1 / Lipschitz constant of f'').
DUAL_CURVATURE = {"squared": 1.0, "logistic": 4.0}


def _binary_entropy(t, one_minus_t):
    """``H(t)`` with ``1 - t`` passed separately (accurate near ``t = 1``)."""
    return -(jax.scipy.special.xlogy(t, t) + jax.scipy.special.xlogy(one_minus_t, one_minus_t))


def _weighted_mean(w, n_w, v):
    return jnp.dot(w, v, precision=HI) / n_w


def logistic_dual_probabilities(w, n_w, y, z, fit_intercept):
    r"""Probabilities ``(t, 1 - t)`` near ``sigmoid(z)`` whose training mean is ``mean(y)``.

    With an unpenalised intercept the dual of the l1-logistic problem carries
    the constraint :math:`\sum_i w_i (t_i - y_i) = 0`; ``sigmoid(z)`` meets it
    only at the optimal intercept. ``t`` is ``sigmoid(z)`` scaled towards 0
    (mean too high) or ``1 - t`` towards 0 (mean too low), which keeps it in
    ``[0, 1]`` and makes the weighted mean exactly ``mean(y)``. Without an
    intercept ``t = sigmoid(z)``.
    """
    p, q = jax.nn.sigmoid(z), jax.nn.sigmoid(-z)
    if not fit_intercept:
        return p, q
    ybar = _weighted_mean(w, n_w, y)
    pbar, qbar = _weighted_mean(w, n_w, p), _weighted_mean(w, n_w, q)
    tiny = jnp.finfo(z.dtype).tiny
    # Each factor is < 1 on its branch in exact arithmetic; pbar and qbar are
    # rounded separately, so cap them at 1: on saturated (separable) data a
    # factor of 1 + eps would push t or 1 - t just below 0 and make the
    # dual's entropy NaN.
    c_down = jnp.minimum(ybar / jnp.maximum(pbar, tiny), 1.0)  # < 1 where pbar > ybar
    c_up = jnp.minimum((1.0 - ybar) / jnp.maximum(qbar, tiny), 1.0)  # < 1 where pbar < ybar
    down = pbar > ybar
    t = jnp.where(down, c_down * p, p + (1.0 - c_up) * q)
    one_minus_t = jnp.where(down, q + (1.0 - c_down) * p, c_up * q)
    return t, one_minus_t


def gap_and_screen(prob: Problem, lam, coef, z, settings: L1Settings):
    r"""Duality gap at ``coef`` and the features that GAP safe rules remove.

    The dual point is feasible: with an intercept its residual has zero
    training mean (the dual constraint of the unpenalised intercept; for the
    logistic loss see :func:`logistic_dual_probabilities`), and it is scaled
    into :math:`\|X_c^\top\theta\|_\infty \le \lambda`, so ``gap >= 0`` up to
    rounding. Returns ``(gap, keep)`` where ``keep`` is ``False`` for provably
    zero features (all ``True`` when ``settings.screen`` is off).
    """
    loss = settings.loss
    if loss == "squared":
        g = loss_grad(loss, z, prob.y)
        if settings.fit_intercept:  # the best constant shift of the residual
            g = g - _weighted_mean(prob.w, prob.n_w, g)
    else:
        t, one_minus_t = logistic_dual_probabilities(prob.w, prob.n_w, prob.y, z, settings.fit_intercept)
        g = t - prob.y
    u = prob.w * g / prob.n_w
    grad = rmatvec(prob.XT, u) - prob.mu * jnp.sum(u)  # X_c^T u
    dnorm = jnp.max(jnp.abs(grad))
    s = jnp.where(dnorm > lam, lam / jnp.where(dnorm > 0, dnorm, 1.0), 1.0)
    primal = jnp.dot(prob.w, loss_value(loss, z, prob.y), precision=HI) / prob.n_w
    primal = primal + lam * jnp.sum(jnp.abs(coef))
    if loss == "squared":
        # theta = -s u; D(theta) = theta^T y_c - (n/2) ||theta||^2
        dual = -s * jnp.dot(u, prob.y - prob.y_center, precision=HI) - 0.5 * s**2 * (
            jnp.dot(prob.w, g**2, precision=HI) / prob.n_w
        )
    else:
        # D(theta) = sum_i w_i H(y_i - n theta_i / w_i) / n, H the binary entropy,
        # at y + s (t - y) (labels y in {0, 1}, so both stay in [0, 1])
        ts = prob.y + s * (t - prob.y)
        one_minus_ts = (1.0 - prob.y) + s * (one_minus_t - (1.0 - prob.y))
        dual = jnp.dot(prob.w, _binary_entropy(ts, one_minus_ts), precision=HI) / prob.n_w
    gap = primal - dual
    if settings.screen:
        radius = jnp.sqrt(2.0 * jnp.maximum(gap, 0.0) / (DUAL_CURVATURE[loss] * prob.n_w))
        keep = s * jnp.abs(grad) + radius * prob.col_norm >= lam
    else:
        keep = jnp.ones(coef.shape, bool)
    return gap, keep


def drop_screened(prob: Problem, state, keep, settings: L1Settings):
    """Zero the newly screened coefficients and freeze them (``state.active``).

    Nothing changes once the iterate is certified (``gap <= tol * D0``): the
    returned iterate is always the one the gap refers to. Returns
    ``(state, dropped)``, ``dropped`` the ``(m,)`` mask of features zeroed now.
    """
    coef, active = state.coef, state.active
    apply = state.gap > settings.tol * prob.scale
    drop = active & ~keep & apply
    delta = jnp.where(drop, -coef, 0.0)
    coef = coef + delta
    # only when a nonzero coefficient was dropped (adding a zero update is exact, so skipping it changes nothing)
    z = lax.cond(
        jnp.any(delta != 0),
        lambda z: z + matvec(prob.XT, delta) - jnp.dot(prob.mu, delta, precision=HI),
        lambda z: z,
        state.z,
    )
    active = jnp.where(apply, active & keep, active)
    return state._replace(coef=coef, z=z, active=active), drop
