r"""Duality gap and dynamic GAP safe screening.

Stopping uses the duality gap at the dual point obtained by rescaling the
residual (generalised residual :math:`-f'(z)` for the logistic loss) into the
dual feasible set :math:`\{\theta : \|X_c^\top\theta\|_\infty \le \lambda\}`;
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

from jaxknock.l1.problem import HI, Problem, loss_grad, loss_value, matvec, rmatvec
from jaxknock.l1.settings import L1Settings

__all__: list[str] = []

# Strong concavity of the per-sample dual (1 / Lipschitz constant of f'').
DUAL_CURVATURE = {"squared": 1.0, "logistic": 4.0}


def _binary_entropy(t):
    return -(jax.scipy.special.xlogy(t, t) + jax.scipy.special.xlogy(1.0 - t, 1.0 - t))


def gap_and_screen(prob: Problem, lam, coef, z, settings: L1Settings):
    """Duality gap at ``coef`` and the features that GAP safe rules remove.

    Returns ``(gap, keep)`` where ``keep`` is ``False`` for provably zero
    features (all ``True`` when ``settings.screen`` is off).
    """
    loss = settings.loss
    g = loss_grad(loss, z, prob.y)
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
        # D(theta) = sum_i w_i H(y_i - n theta_i / w_i) / n, H the binary entropy
        t = prob.y + s * g
        dual = jnp.dot(prob.w, _binary_entropy(t), precision=HI) / prob.n_w
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
    z = state.z + matvec(prob.XT, delta) - jnp.dot(prob.mu, delta, precision=HI)
    active = jnp.where(apply, active & keep, active)
    return state._replace(coef=coef, z=z, active=active), drop
