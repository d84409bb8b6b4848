r"""The lifted training objective: per-sample losses, activation penalties, their sum.

With ``U_l = X_l W_l + 1 b_l^T`` (:func:`pre_activation`) the Fenchel lifted
objective (eq. 3.9) is

.. math::

    \frac1N \mathcal L(Y, U_L) + \frac{\lambda}{N}\sum_{l<L} B(X_{l+1}, U_l)
      + \sum_l \rho_l \|W_l\|_F^2

with the Fenchel-Young gap ``B`` of the ReLU (:func:`fenchel_penalty`); the
lifted objective (eq. 2.5 / 2.11) replaces ``B`` by ``||X_{l+1} - U_l||^2``
and, for cross-entropy, adds the simplex output term.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks
from jaxknock.lifted._common import mm
from jaxknock.lifted.spec import LiftedHyper, LiftedSpec, LiftedState

__all__ = [
    "fenchel_penalty",
    "fenchel_rows",
    "fenchel_sum",
    "lifted_objective",
    "loss_grad",
    "loss_rows",
    "loss_sum",
    "objective_rows",
    "objective_terms",
    "pre_activation",
    "xlogy_rows",
]

# ----------------------------------------------------------------------------
# Losses and penalties
# ----------------------------------------------------------------------------


def pre_activation(params, l, X_in):
    """``U_l = X_l W_l + 1 b_l^T`` of layer ``l`` for its input ``X_in``."""
    return mm(X_in, params[l]["w"]) + params[l]["b"]


def loss_rows(Y, U, loss):
    """Per-sample loss: ``1/2 ||y - u||^2`` (``mse``) or softmax cross-entropy."""
    if loss == "mse":
        return 0.5 * jnp.sum((U - Y) ** 2, axis=-1)
    return -jnp.sum(Y * jax.nn.log_softmax(U, axis=-1), axis=-1)


def loss_sum(Y, U, loss):
    """``sum_i loss_rows(Y, U, loss)_i``."""
    return jnp.sum(loss_rows(Y, U, loss))


def loss_grad(Y, U, loss):
    """Gradient of :func:`loss_sum` in ``U``."""
    if loss == "mse":
        return U - Y
    return jax.nn.softmax(U, axis=-1) - Y


def fenchel_rows(V, U):
    """Per-sample Fenchel-Young penalty ``B(v, u)`` (see :func:`fenchel_penalty`)."""
    # B(v, u) = 1/2 (v - u_+)^2 + v u_-  (the same as 1/2 v^2 + 1/2 u_+^2 - uv for
    # v >= 0, written without cancellation).
    up = jax.nn.relu(U)
    return jnp.sum(0.5 * (V - up) ** 2 + V * jax.nn.relu(-U), axis=-1)


def fenchel_sum(V, U):
    """``sum B(V, U)`` without the domain check of :func:`fenchel_penalty` (for ``V >= 0`` known, in solvers)."""
    return jnp.sum(fenchel_rows(V, U))


def fenchel_penalty(V, U):
    r"""Fenchel-Young ReLU penalty ``B(V, U) = sum 1/2 V^2 + 1/2 relu(U)^2 - U V`` (eq. 3.5).

    Defined for ``V >= 0`` (post-activations of a ReLU); ``B >= 0`` with equality iff ``V = relu(U)``.
    It is convex in ``V`` for fixed ``U`` and convex in ``U`` for fixed ``V``. A ``V``
    with a negative (or NaN) entry raises ``ValueError``; under ``jit`` the value is NaN (the formula
    there is no penalty: ``B(-1, 0) = 1/2`` and ``B(-1, 1) = 2``, while ``B(-1, -1) = -1/2`` would be negative).

    Example:
      >>> u = jnp.array([[-1.0, 2.0]])
      >>> float(fenchel_penalty(jax.nn.relu(u), u))
      0.0
    """
    V, U = jnp.asarray(V), jnp.asarray(U)
    if _checks.is_concrete(V) and not np.all((v := np.asarray(V)) >= 0):
        raise ValueError(
            f"V must be non-negative (ReLU post-activations): the Fenchel-Young penalty B(V, U) is defined for "
            f"V >= 0, got min(V) = {float(np.nanmin(v, initial=np.inf))!r} ({int(np.sum(~(v >= 0)))} entries "
            "negative or NaN)"
        )
    return jnp.where(jnp.all(V >= 0), fenchel_sum(V, U), jnp.nan)


def xlogy_rows(Y, Z):
    """Per-sample ``sum_j y_j log z_j`` with ``0 log 0 = 0``."""
    safe = jnp.where(Y > 0, Z, 1.0)
    return jnp.sum(jnp.where(Y > 0, Y * jnp.log(safe), 0.0), axis=-1)


def objective_rows(state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, pre=None):
    """Per-sample data term and activation-penalty term (unscaled by 1/N).

    ``pre``: the pre-activations ``U_l = X_l W_l + b_l`` if already known.
    """
    params, hidden = state.params, state.hidden
    L = spec.num_hidden
    lam = hyper.lam
    inputs = (X,) + tuple(hidden)
    U = [pre_activation(params, l, inputs[l]) for l in range(L + 1)] if pre is None else list(pre)
    if spec.model == "fenchel":
        data = loss_rows(Y, U[L], spec.loss)
        pen = sum(fenchel_rows(hidden[l], U[l]) for l in range(L))
    else:
        pen = sum(jnp.sum((hidden[l] - U[l]) ** 2, axis=-1) for l in range(L))
        if spec.loss == "mse":
            data = loss_rows(Y, U[L], "mse")
        else:
            data = -xlogy_rows(Y, state.output)
            pen = pen + jnp.sum((state.output - U[L]) ** 2, axis=-1)
    return data, lam * pen, U


def lifted_objective(state: LiftedState, X, Y, spec: LiftedSpec, hyper: LiftedHyper | None = None) -> dict:
    r"""Training objective of the lifted problem and its parts (per-sample means).

    Returns a dict with

    * ``objective = loss + penalty + ridge`` (eq. 3.9 for ``fenchel``, eq. 2.5 /
      2.11 for ``lifted``);
    * ``loss``: ``(1/N) L(Y, U_L)`` (or the simplex cross-entropy term);
    * ``penalty``: the weighted activation penalties ``(lam/N) sum_l B(X_{l+1}, U_l)``
      (resp. ``||X_{l+1} - U_l||^2``);
    * ``ridge``: ``sum_l rho_l ||W_l||^2``;
    * ``violation``: relative constraint violation
      ``sqrt(sum_l ||X_{l+1} - relu(U_l)||^2 / sum_l ||relu(U_l)||^2)``.

    ``Y`` is the ``N x p`` target / one-hot matrix.
    """
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    return objective_terms(state, X, Y, hyper, spec)


def objective_terms(state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, pre=None) -> dict:
    """:func:`lifted_objective` with traced ``hyper`` and optional known pre-activations ``pre``."""
    N = X.shape[0]
    data, pen, U = objective_rows(state, X, Y, hyper, spec, pre)
    ridge = sum(hyper.rho[l] * jnp.sum(state.params[l]["w"] ** 2) for l in range(spec.num_layers))
    num = sum(jnp.sum((state.hidden[l] - jax.nn.relu(U[l])) ** 2) for l in range(spec.num_hidden))
    den = sum(jnp.sum(jax.nn.relu(U[l]) ** 2) for l in range(spec.num_hidden))
    loss = jnp.sum(data) / N
    penalty = jnp.sum(pen) / N
    return {
        "objective": loss + penalty + ridge,
        "loss": loss,
        "penalty": penalty,
        "ridge": ridge,
        "violation": jnp.sqrt(num / jnp.maximum(den, jnp.finfo(X.dtype).tiny)),
    }
