r"""Block-coordinate descent: one pass (Algorithm 1), one batch (Algorithm 2), one epoch.

A non-batched pass (:func:`lifted_bcd_step`, thesis Algorithm 1) updates the
X-blocks backwards from ``X_L`` to ``X_1`` and then all W-blocks
(:mod:`jaxknock.lifted.blocks`); as every block is safeguarded, a pass never
increases the training objective. :func:`extrapolated_pass` follows a pass
with a safeguarded extrapolation step. A batch step (:func:`lifted_batch_step`,
Algorithm 2) re-initialises X by a forward pass of the batch and runs
``K`` X/W alternations with the proximal term
``gamma_l ||Theta_l - Theta_l^0||^2`` (eq. 3.13, 3.19, 3.20).
:func:`epoch_fn` compiles one training epoch: a pass, or a ``lax.scan`` over
shuffled (or fixed, :func:`fixed_partition`) batches.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._checks import as_float_array, check_finite
from jaxknock.lifted._common import zero_info
from jaxknock.lifted._inputs import check_hyper_values, poison_step
from jaxknock.lifted.blocks import forward_state, w_factor, w_steps, x_steps
from jaxknock.lifted.objective import objective_terms
from jaxknock.lifted.spec import LiftedHyper, LiftedSpec, LiftedState, Settings, default_settings, structure

__all__ = [
    "BETA_START",
    "DEFAULT_EXTRAPOLATION",
    "Extrapolated",
    "batch_update",
    "bcd_pass",
    "epoch_fn",
    "extrapolated_pass",
    "factors_fn",
    "fixed_partition",
    "init_lifted_state",
    "lifted_batch_step",
    "lifted_bcd_step",
]


def init_lifted_state(params, X, spec: LiftedSpec) -> LiftedState:
    """Initial lifted variables: the feed-forward pass of ``params`` (Algorithm 1, lines 2-3).

    For ``model="fenchel"`` every activation penalty is then zero (``B(relu(U), U) = 0``) and the
    objective equals the standard training loss (:func:`~jaxknock.lifted.mlp_loss` with the same ``rho``). The lifted
    penalty ``||X_{l+1} - U_l||^2`` is not: it is ``||relu(-U_l)||^2``, positive wherever a
    pre-activation is negative. With ``model="lifted"`` and the cross-entropy loss the simplex
    output is the Euclidean projection of ``U_L``, which can put zero mass on a row's label: the
    objective is then ``+inf`` until the first pass.
    """
    return forward_state(params, X, spec)


def lifted_bcd_step(
    state: LiftedState,
    X,
    Y,
    spec: LiftedSpec,
    hyper: LiftedHyper | None = None,
    *,
    inner_tol=None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
):
    r"""One pass of non-batched block-coordinate descent (thesis Algorithm 1).

    X-blocks, backwards ``l = L..1`` with the others fixed:

    * Fenchel, ``l = L``: ``min_{Z>=0} L(Y, Z W_L + b_L) + lam B(Z, U_{L-1})`` (3.15/3.16);
    * Fenchel, ``l < L``: ``min_{Z>=0} B(X_{l+1}, Z W_l + b_l) + B(Z, U_{l-1})`` (3.14);
    * lifted: the non-negative least squares (2.13) and, for cross-entropy, first
      the simplex output by bisection (2.15/2.16);

    each by accelerated projected gradient with step ``1/Lip`` (``Lip`` from
    ``||W_l||_2^2``) to relative tolerance ``inner_tol``. W-blocks, all layers:

    * Fenchel ``l < L``: ``min (lam/N) B(X_{l+1}, A_l Theta) + rho_l ||W||^2`` (3.17);
    * last layer: ridge regression (MSE) or ridge-penalised softmax regression
      (3.18); lifted: ridge regressions onto ``X_{l+1}`` (section 2.6);

    solved in closed form or by accelerated majorise-minimise with the fixed
    factorised Gram matrix of ``[X_l, 1]``. Each block is safeguarded, so the
    objective :func:`lifted_objective` does not increase.

    Under ``jax.jit`` pass ``spec`` and the keyword settings as static arguments
    (``static_argnames=("spec", "inner_tol", "inner_max_steps", "w_max_steps")``,
    or close over them); ``state``, ``X``, ``Y`` and ``hyper`` may be traced.

    Returns:
      ``(new_state, info)`` where ``info`` counts inner steps and inner solves
      that missed their tolerance. Concrete bad input raises ``ValueError``
      (a non-finite ``X`` or ``Y``, ``lam <= 0``, ``rho < 0`` or ``gamma < 0``);
      under ``jit`` the same input gives a new state with every float leaf NaN.
    """
    X, Y = _step_data(X, Y)
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    check_hyper_values(hyper, batched=False)
    settings = default_settings(X.dtype, inner_tol=inner_tol, inner_max_steps=inner_max_steps, w_max_steps=w_max_steps)
    state, info = _bcd_step_jit(state, X, Y, hyper, structure(spec), settings)
    return poison_step(state, hyper, X, Y, batched=False), info


def _step_data(X, Y):
    """``X`` and ``Y`` of a public step as float arrays, checked finite when concrete (``Y`` in ``X``'s dtype)."""
    X = as_float_array(X, "X", bools=True)
    Y = jnp.asarray(Y, X.dtype)
    check_finite(X, "X")
    check_finite(Y, "Y")
    return X, Y


@functools.partial(jax.jit, static_argnames=("spec", "settings"))
def _bcd_step_jit(state, X, Y, hyper, spec, settings):
    """:func:`bcd_pass` as one program per shape and settings (run eagerly, its loops compiled at every call)."""
    state, info, _ = bcd_pass(state, X, Y, hyper, spec, settings)
    return state, info


def bcd_pass(state, X, Y, hyper, spec, settings, gram0=None):
    """One Algorithm-1 pass: ``(state, info dict, pre-activations)``; ``gram0``: the Gram blocks of ``[X, 1]``."""
    state, xinfo = x_steps(state.params, state, X, Y, hyper, spec, settings)
    state, winfo, pre = w_steps(state, X, Y, hyper, spec, settings, gram0=gram0)
    return state, (xinfo + winfo)._asdict(), pre


class Extrapolated(NamedTuple):
    """Non-batched training carry: the iterate and the current extrapolation weight."""

    state: LiftedState
    beta: Any


BETA_START, _BETA_GROW, _BETA_SHRINK = 0.5, 1.5, 0.5
# Largest extrapolation weight used by default for non-batched training (chosen
# on MNIST 784-300-10, Fenchel, MSE: benchmarks/measured/NOTES.md, "lifted").
DEFAULT_EXTRAPOLATION = 4.0


def extrapolated_pass(carry: Extrapolated, X, Y, hyper, spec, settings, gram0=None):
    r"""One BCD pass followed by a safeguarded extrapolation step.

    With ``x_k`` the iterate before the pass and ``x_{k+1}`` after it, the
    candidate ``x_{k+1} + beta (x_{k+1} - x_k)`` (weights and biases as they are,
    hidden ``X_l`` projected onto ``X_l >= 0``, the simplex output of the
    lifted cross-entropy model not extrapolated) replaces ``x_{k+1}`` only if
    its objective is strictly lower; ``beta`` then grows by 1.5 (at most
    ``settings.extrapolation``), otherwise it halves. The objective therefore
    never increases, and block-convex problems (here, as in non-negative
    matrix factorisation, Ang & Gillis 2019) typically need far fewer passes.
    """
    state, beta = carry
    new, info, pre = bcd_pass(state, X, Y, hyper, spec, settings, gram0)
    terms = objective_terms(new, X, Y, hyper, spec, pre)

    def extend(a, b):
        return a + beta.astype(a.dtype) * (a - b)

    cand = LiftedState(
        jax.tree_util.tree_map(extend, new.params, state.params),
        tuple(jax.nn.relu(extend(a, b)) for a, b in zip(new.hidden, state.hidden)),
        new.output,
    )
    cand_terms = objective_terms(cand, X, Y, hyper, spec)
    take = cand_terms["objective"] < terms["objective"]

    def pick(a, b):
        return jnp.where(take, a, b)

    new = jax.tree_util.tree_map(pick, cand, new)
    terms = jax.tree_util.tree_map(pick, cand_terms, terms)
    beta = jnp.where(take, jnp.minimum(_BETA_GROW * beta, settings.extrapolation), _BETA_SHRINK * beta)
    return Extrapolated(new, beta), dict(terms, **info, extrapolated=take.astype(jnp.int32))


def lifted_batch_step(
    params,
    X,
    Y,
    spec: LiftedSpec,
    hyper: LiftedHyper | None = None,
    *,
    alternations: int = 1,
    inner_tol=None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
):
    r"""Algorithm 2 on one batch: forward re-initialisation of X, then K alternations.

    With ``Theta^0`` the weights at entry, each alternation does the X-steps of
    :func:`lifted_bcd_step` and the W-steps with the proximal term (3.19, 3.20)

    .. math::

        \min_\Theta\; \text{data}(A_l \Theta) + \rho_l \|W\|_F^2
        + \gamma_l \|\Theta - \Theta^0_l\|_F^2 ,

    which for batches smaller than the layer width is solved in the ``N x N``
    kernel (Woodbury) form ``Theta = Theta~0 + C^{-1} A^T alpha``.

    Under ``jax.jit`` pass ``spec`` and the keyword settings as static arguments
    (``static_argnames=("spec", "alternations", "inner_tol", "inner_max_steps",
    "w_max_steps")``, or close over them); ``params``, ``X``, ``Y`` and ``hyper``
    may be traced.

    Returns:
      ``(new_params, metrics)``; metrics hold the batch ``objective`` (without the
      proximal term), ``penalty``, ``violation`` and inner-solver counts.
      Concrete bad input raises ``ValueError`` (a non-finite ``X`` or ``Y``,
      ``lam <= 0``, ``rho < 0`` or ``gamma <= 0``); under ``jit`` the same input
      gives NaN weights and NaN float metrics.
    """
    X, Y = _step_data(X, Y)
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    check_hyper_values(hyper, batched=True)
    settings = default_settings(
        X.dtype,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        alternations=alternations,
    )
    return poison_step(_batch_step_jit(params, X, Y, hyper, structure(spec), settings), hyper, X, Y, batched=True)


@functools.partial(jax.jit, static_argnames=("spec", "settings"))
def _batch_step_jit(params, X, Y, hyper, spec, settings):
    """:func:`batch_update` as one program per shape and settings (run eagerly, its loops compiled at every call)."""
    return batch_update(params, X, Y, hyper, spec, settings)


def batch_update(params, X, Y, hyper, spec, settings, factor0=None):
    """:func:`lifted_batch_step` for traced ``hyper`` and static ``settings``; ``factor0``: the batch's
    first-layer factorisation if precomputed (:func:`~jaxknock.lifted.blocks.w_factor`)."""
    anchor = params
    state = forward_state(params, X, spec)
    info = zero_info()
    if factor0 is None:  # shared by the alternations
        factor0 = w_factor(X, hyper, spec)
    for _ in range(settings.alternations):
        state, xinfo = x_steps(state.params, state, X, Y, hyper, spec, settings)
        state, winfo, pre = w_steps(state, X, Y, hyper, spec, settings, anchor=anchor, kernel_ok=True, factor0=factor0)
        info = info + xinfo + winfo
    terms = objective_terms(state, X, Y, hyper, spec, pre)
    metrics = dict(terms, **info._asdict())
    return state.params, metrics


# ----------------------------------------------------------------------------
# Epochs
# ----------------------------------------------------------------------------


def epoch_fn(spec: LiftedSpec, settings: Settings, batch_size, vmapped: bool, fixed: bool = False):
    """Jitted epoch: one Algorithm-1 pass, or one Algorithm-2 sweep over shuffled batches.

    The signature is ``(carry, X, Y, hyper, perm, aux)``: ``aux`` is the Gram
    blocks of ``[X, 1]`` (non-batched), ``None`` (batched: ``perm`` shuffles the
    rows) or, with ``fixed`` batches, ``(parts, factors)``: the ``(nb, B)`` row
    indices of the batches and their first-layer factorisations, visited in the
    order ``perm`` (a permutation of the ``nb`` batches). One program for every
    ``lam`` / ``rho`` / ``gamma`` of ``spec`` (:func:`~jaxknock.lifted.spec.structure`).
    """
    return _epoch_fn(structure(spec), settings, batch_size, vmapped, fixed)


@functools.cache
def _epoch_fn(spec: LiftedSpec, settings: Settings, batch_size, vmapped: bool, fixed: bool):

    if batch_size is None and settings.extrapolation > 0:

        def epoch(carry, X, Y, hyper, perm, gram0):
            return extrapolated_pass(carry, X, Y, hyper, spec, settings, gram0)

    elif batch_size is None:

        def epoch(state, X, Y, hyper, perm, gram0):
            state, info, pre = bcd_pass(state, X, Y, hyper, spec, settings, gram0)
            metrics = dict(objective_terms(state, X, Y, hyper, spec, pre), **info)
            return state, metrics

    else:

        def epoch(state, X, Y, hyper, perm, aux):
            if fixed:
                parts, factors = aux

                def body(params, i):
                    ix = parts[i]
                    return batch_update(params, X[ix], Y[ix], hyper, spec, settings, factors[i])

                params, metrics = lax.scan(body, state.params, perm)
            else:
                nb = X.shape[0] // batch_size
                idx = perm[: nb * batch_size].reshape(nb, batch_size)

                def body(params, ix):
                    return batch_update(params, X[ix], Y[ix], hyper, spec, settings)

                params, metrics = lax.scan(body, state.params, idx)
            agg = {k: (jnp.sum(v) if jnp.issubdtype(v.dtype, jnp.integer) else jnp.mean(v)) for k, v in metrics.items()}
            return LiftedState(params, (), None), agg

    if vmapped:
        epoch = jax.vmap(epoch, in_axes=(0, None, None, 0, None, (None, 0) if fixed else None))
    return jax.jit(epoch)


def fixed_partition(key, N: int, batch_size: int):
    """``(nb, B)`` row indices: a random partition, the last batch filled up with
    rows of the first one when ``B`` does not divide ``N`` (every row is used)."""
    perm = jax.random.permutation(key, N)
    nb = -(-N // batch_size)
    return jnp.concatenate([perm, perm[: nb * batch_size - N]]).reshape(nb, batch_size)


def factors_fn(spec: LiftedSpec, vmapped: bool):
    """Jitted first-layer factorisations of all fixed batches (one model or a stack); one per structure."""
    return _factors_fn(structure(spec), vmapped)


@functools.cache
def _factors_fn(spec: LiftedSpec, vmapped: bool):

    def factors(X, parts, hyper):
        return lax.map(lambda ix: w_factor(X[ix], hyper, spec), parts)

    if vmapped:
        factors = jax.vmap(factors, in_axes=(None, None, 0))
    return jax.jit(factors)
