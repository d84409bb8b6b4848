"""Prediction with trained weights: the feed-forward rule or the lifted rule (eq. 3.12 / 2.12)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._checks import as_float_array, check_count, check_finite, check_ndim
from jaxknock.lifted._inputs import check_hyper_values, check_params
from jaxknock.lifted.blocks import forward_state, x_steps
from jaxknock.lifted.mlp import mlp_apply
from jaxknock.lifted.objective import objective_rows
from jaxknock.lifted.spec import LiftedHyper, LiftedSpec, default_settings, structure

__all__ = ["predict_lifted"]


def predict_lifted(
    params,
    X,
    spec: LiftedSpec,
    *,
    method: str = "feedforward",
    hyper: LiftedHyper | None = None,
    passes: int = 20,
    inner_tol: float | None = None,
    inner_max_steps: int = 500,
):
    r"""Predict with trained weights.

    ``method="feedforward"``: the standard rule, returns ``U_L`` (logits or
    regression outputs) from :func:`mlp_apply`.

    ``method="lifted"``: the lifted prediction rule (eq. 3.12 / 2.12)

    .. math::

        \hat y = \arg\min_{y, (x_l)} \mathcal L(y, W_L x_L + b_L)
          + \lambda \sum_{l<L} B_l(x_{l+1}, W_l x_l + b_l), \quad x_0 = x .

    For ``mse`` the minimum is the feed-forward output (``y = U_L`` and the
    forward ``x_l`` make every term zero), which is returned. For
    ``cross_entropy`` ``y`` ranges over the labels: for each class ``c`` the
    X-problem with ``y = e_c`` is solved by ``passes`` sweeps of the X-steps of
    :func:`lifted_bcd_step` (one sweep is exact when a single block is free) and
    the returned scores are ``-value_c`` (so ``argmax`` gives the predicted class).

    Returns:
      ``(N, p)`` outputs / class scores.

    Example:
      >>> from jaxknock.lifted import mlp_init
      >>> spec = LiftedSpec((4, 8, 3))
      >>> params = mlp_init(jax.random.key(0), spec.sizes)
      >>> predict_lifted(params, jnp.ones((2, 4)), spec, method="lifted").shape
      (2, 3)
    """
    X = as_float_array(X, "X", bools=True)
    check_ndim(X, 2, "X")
    if X.shape[1] != spec.sizes[0]:
        raise ValueError(f"spec.sizes[0] = {spec.sizes[0]} but X has {X.shape[1]} features per row")
    check_finite(X, "X")
    params = check_params(params, spec, X.dtype)
    passes = check_count(passes, "passes")  # 0 or -1 returned the scores of the forward pass unchanged
    if hyper is not None:  # checked whatever the method: a negative lam passed the feed-forward rule silently
        check_hyper_values(hyper, batched=False)
    if method == "feedforward" or (method == "lifted" and spec.loss == "mse"):
        return mlp_apply(params, X)
    if method != "lifted":
        raise ValueError(f"method must be 'feedforward' or 'lifted', got {method!r}")
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    # one model's hyper-parameters: a per-model lam of shape (H,) failed in a broadcast that named nothing,
    # and a negative lam returned all -inf scores
    if jnp.ndim(hyper.lam) != 0:
        raise ValueError(f"hyper.lam must be a scalar (one model's hyper-parameters), got shape {jnp.shape(hyper.lam)}")
    check_hyper_values(hyper, batched=False)
    settings = default_settings(X.dtype, inner_tol=inner_tol, inner_max_steps=inner_max_steps)
    return _lifted_scores(params, X, hyper, structure(spec), settings, passes)  # hyper explicit: one program


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _lifted_scores(params, X, hyper, spec, settings, passes):
    p = spec.sizes[-1]
    # A single X-block (Fenchel, one hidden layer) is solved exactly by one sweep.
    single_block = spec.model == "fenchel" and spec.num_hidden == 1
    sweeps = 1 if single_block else passes

    def value_for_class(c):
        Y = jnp.broadcast_to(jax.nn.one_hot(c, p, dtype=X.dtype), (X.shape[0], p))
        state = forward_state(params, X, spec)

        def sweep(_, st):
            return x_steps(params, st, X, Y, hyper, spec, settings)[0]

        state = lax.fori_loop(0, sweeps, sweep, state)
        data, pen, _ = objective_rows(state, X, Y, hyper, spec)
        return data + pen

    values = jax.vmap(value_for_class)(jnp.arange(p))  # (p, N)
    return -values.T
