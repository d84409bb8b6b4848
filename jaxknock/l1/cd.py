r"""Cyclic coordinate descent for the lasso and l1-logistic regression.

``lax.fori_loop`` over coordinates inside the outer convergence loop over
epochs (:func:`jaxknock.l1.solvers.solve`); ``solver="auto"`` picks it on CPU
(machine notes: ``benchmarks/measured/NOTES.md``, section l1). For
least squares the coordinates are visited in blocks of 16 (one ``X_B^T r``
and one ``X_B d`` per block, the updates inside a block through the block's
Gram matrix): the iterates are exactly those of plain cyclic CD (and of
scikit-learn's ``Lasso``), with fewer, larger operations. For the logistic
loss each coordinate takes a proximal Newton step, safeguarded by the
majorisation step with curvature bound ``||x_j||^2 / (4n)``, and the
intercept a Newton step per epoch. Every ``ANDERSON_MEMORY`` epochs an
Anderson extrapolation of the last iterates is tried (Bertrand & Massias 2021),
and on the other epochs a line extrapolation along the last epoch's move
(:func:`line_extrapolate`: collinear columns, e.g. any two-row design, made
cyclic CD creep for thousands of epochs); either is kept only if it lowers
the objective.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock.l1.problem import HI, Problem, block_indices, loss_value, soft_threshold

__all__: list[str] = []

_CD_UNROLL = 4
ANDERSON_MEMORY = 5  # Anderson extrapolation of CD every 5 epochs (Bertrand & Massias 2021)
_LINE_STEPS = 2.0 ** np.arange(1, 11)  # line extrapolation along the last epoch's move
_CREEP = 0.1  # ... tried when the last two moves differ by at most this fraction


class History(NamedTuple):
    """The last ``ANDERSON_MEMORY + 1`` CD iterates (oldest first)."""

    coefs: jax.Array
    offsets: jax.Array
    zs: jax.Array
    count: jax.Array


def init_history(coef, offset, z) -> History:
    """An Anderson memory filled with the starting iterate."""
    k = ANDERSON_MEMORY + 1
    return History(
        coefs=jnp.broadcast_to(coef, (k,) + coef.shape),
        offsets=jnp.broadcast_to(offset, (k,)),
        zs=jnp.broadcast_to(z, (k,) + z.shape),
        count=jnp.zeros((), jnp.int32),
    )


def newton_offset(prob: Problem, offset, z, *, loss, fit_intercept):
    """One Newton step on the (unpenalised) offset; exact for least squares."""
    if not fit_intercept or loss == "squared":
        return offset, z
    p = jax.nn.sigmoid(z)
    grad = jnp.dot(prob.w, p - prob.y, precision=HI)
    hess = jnp.dot(prob.w, p * (1.0 - p), precision=HI)
    step = grad / jnp.maximum(hess, jnp.finfo(z.dtype).tiny)
    return offset - step, z - step


def cd_epoch_logistic(prob: Problem, lam, coef, z, active, *, loss):
    """One cyclic pass of coordinate descent for the logistic loss.

    Each coordinate takes a proximal Newton step with the exact curvature
    ``sum_i w_i p_i (1 - p_i) x_ij^2 / n``; if that does not decrease the
    objective it falls back to the majorisation step with the global bound
    ``||x_j||^2 / (4n)``, which always does. Screened features are compacted
    away (the loop runs over the first ``sum(active)`` entries of an
    active-first ordering), so screening saves work, also under ``vmap``.
    The offset is a separate Newton step (:func:`newton_offset`): the centred
    columns decouple it.
    """
    order = jnp.argsort(~active, stable=True)

    def objective(z):
        return jnp.dot(prob.w, loss_value(loss, z, prob.y), precision=HI) / prob.n_w

    def update(i, carry):
        coef, z, fval = carry
        j = order[i]
        xc = prob.XT[j] - prob.mu[j]
        p = jax.nn.sigmoid(z)
        g = jnp.dot(xc, prob.w * (p - prob.y), precision=HI) / prob.n_w
        h = jnp.dot(xc * xc, prob.w * p * (1.0 - p), precision=HI) / prob.n_w
        L = prob.lipschitz[j]
        b = coef[j]
        h = jnp.maximum(h, 1e-3 * L)
        safe_h = jnp.where(L > 0, h, 1.0)
        new = jnp.where(L > 0, soft_threshold(b - g / safe_h, lam / safe_h), b)
        z_new = z + (new - b) * xc
        f_new = objective(z_new)

        def majorised(_):
            safe_L = jnp.where(L > 0, L, 1.0)
            new = jnp.where(L > 0, soft_threshold(b - g / safe_L, lam / safe_L), b)
            z_new = z + (new - b) * xc
            return new, z_new, objective(z_new)

        accept = f_new + lam * jnp.abs(new) <= fval + lam * jnp.abs(b)
        new, z_new, f_new = lax.cond(accept, lambda _: (new, z_new, f_new), majorised, None)
        return coef.at[j].set(new), z_new, f_new

    coef, z, _ = lax.fori_loop(0, jnp.sum(active), update, (coef, z, objective(z)))
    return coef, z


def cd_epoch_blocked(prob: Problem, lam, coef, z, active):
    """One cyclic CD pass for least squares, ``CD_BLOCK`` coordinates at a time.

    Exactly the iterates of plain cyclic coordinate descent, but the
    per-coordinate ``O(n)`` work is batched per block: one ``X_B^T r``, the
    sequential updates inside the block through the precomputed block Gram
    matrix, and one ``X_B delta`` residual update. Blocks without active
    features are skipped.
    """
    idx_all = block_indices(coef.shape[0])
    nb, B = idx_all.shape
    own_start = np.arange(nb) * B  # coordinates below this belong to the previous block

    def block(bi, carry):
        coef, z = carry
        start = jnp.minimum(bi * B, coef.shape[0] - B)
        idx = start + jnp.arange(B)
        mine = (idx >= jnp.asarray(own_start)[bi]) & active[idx]
        XB = lax.dynamic_slice_in_dim(prob.XT, start, B, axis=0)
        muB = prob.mu[idx]
        G = prob.gram_blocks[bi]
        r = prob.w * (z - prob.y)
        grad = (jnp.matmul(XB, r, precision=HI) - muB * jnp.sum(r)) / prob.n_w
        b = coef[idx]
        L = prob.lipschitz[idx]
        safe_L = jnp.where(L > 0, L, 1.0)

        def coordinate(k, d):
            g = grad[k] + jnp.dot(G[k], d, precision=HI)
            new = soft_threshold(b[k] - g / safe_L[k], lam / safe_L[k])
            new = jnp.where((L[k] > 0) & mine[k], new, b[k])
            return d.at[k].set(new - b[k])

        d = lax.fori_loop(0, B, coordinate, jnp.zeros(B, coef.dtype), unroll=_CD_UNROLL)
        coef = lax.dynamic_update_slice_in_dim(coef, b + d, start, axis=0)
        # a block whose coefficients did not move (zeros staying at zero, most blocks of a sparse
        # solution) skips the pass over X_B: adding a zero update is exact, so the iterates are unchanged
        moved = lambda z: z + jnp.matmul(d, XB, precision=HI) - jnp.dot(muB, d, precision=HI)
        z = lax.cond(jnp.any(d != 0), moved, lambda z: z, z)
        return coef, z

    def maybe_block(bi, carry):
        start = jnp.minimum(bi * B, coef.shape[0] - B)
        any_active = jnp.any(lax.dynamic_slice_in_dim(active, start, B))
        return lax.cond(any_active, functools.partial(block, bi), lambda c: c, carry)

    return lax.fori_loop(0, nb, maybe_block, (coef, z))


def anderson(prob: Problem, lam, state, *, loss):
    """Record the CD iterate; every ``ANDERSON_MEMORY`` epochs try an Anderson extrapolation.

    The extrapolated point is the affine combination of the last iterates
    whose differences have minimal norm (Bertrand & Massias 2021); it is kept
    only if it lowers the objective. ``z`` is linear in (coef, offset), so it is
    extrapolated from the stored predictors without a matrix product.
    """
    h = state.history
    push = lambda buf, x: jnp.concatenate([buf[1:], x[None]])
    h = History(
        coefs=push(h.coefs, state.coef),
        offsets=push(h.offsets, state.offset),
        zs=push(h.zs, state.z),
        count=h.count + 1,
    )
    M = ANDERSON_MEMORY

    def objective(coef, z):
        data = jnp.dot(prob.w, loss_value(loss, z, prob.y), precision=HI) / prob.n_w
        return data + lam * jnp.sum(jnp.abs(coef))

    def extrapolate(state):
        U = jnp.concatenate([jnp.diff(h.coefs, axis=0), jnp.diff(h.offsets)[:, None]], axis=1)
        G = jnp.matmul(U, U.T, precision=HI)
        reg = 1e-10 * jnp.trace(G) + jnp.finfo(G.dtype).tiny
        chol = jnp.linalg.cholesky(G + reg * jnp.eye(M, dtype=G.dtype))
        c = jax.scipy.linalg.cho_solve((chol, True), jnp.ones(M, G.dtype))
        c = c / jnp.sum(c)
        coef = jnp.matmul(c, h.coefs[1:], precision=HI)
        offset = jnp.dot(c, h.offsets[1:], precision=HI)
        z = jnp.matmul(c, h.zs[1:], precision=HI)
        new, old = objective(coef, z), objective(state.coef, state.z)
        # never revive a screened feature from the iterates before it was dropped:
        # CD no longer updates it, so the solve stalled at a nonzero there
        frozen = jnp.all(state.active | (coef == 0))
        better = due & frozen & jnp.isfinite(new) & (new < old)
        pick = lambda a, b: jnp.where(better, a, b)
        return state._replace(coef=pick(coef, state.coef), offset=pick(offset, state.offset), z=pick(z, state.z))

    # Under lax.cond: on one design the extrapolation runs only when due (O(M (n + m)), but a few dozen
    # small XLA:CPU operations, 0.2 ms of a 1.5 ms epoch at 500 x 2000); under vmap it is a select.
    due = (h.count % M == 0) & (h.count > M)
    state = lax.cond(due, extrapolate, lambda s: s, state._replace(history=h))
    return line_extrapolate(prob, lam, state, h, ~due, loss=loss)


def line_extrapolate(prob: Problem, lam, state, h: History, allowed, *, loss):
    """Follow the last epoch's move further while no coefficient changes sign.

    When exactly or nearly collinear columns compete for one signal (any two
    columns of a two-row design once centred), cyclic CD moves weight from the
    weaker to the stronger column by a nearly constant amount per epoch, a
    linear creep that needs thousands of epochs (scikit-learn's ``Lasso``
    takes the same iterates) and that Anderson extrapolation cannot speed up
    (its differences are all equal). Along that move the objective is smooth
    up to the first zero crossing of a coefficient, so the iterate ``x + s d``
    (``d`` the last epoch's move) is tried for ``s = 2, 4, ..., 2^10``, each
    capped at that crossing, and the best is kept if it lowers the objective.
    Only when the last two moves differ by at most ``_CREEP`` of the last
    (a creep, or a slow geometric convergence) and the last epoch kept every
    sign (then ``z`` and the penalty are linear in ``s``: ``O(n + m)`` per
    epoch); never on an Anderson epoch.
    """
    d = h.coefs[-1] - h.coefs[-2]
    # a creep: the last two moves are nearly equal (also slow geometric convergence, rate >= ~0.9)
    creep = jnp.sum((d - (h.coefs[-2] - h.coefs[-3])) ** 2) <= _CREEP**2 * jnp.sum(d**2)
    same = jnp.all(jnp.sign(h.coefs[-1]) == jnp.sign(h.coefs[-2])) & creep
    # the line search only where it may be taken (lax.cond: a select under vmap)
    return lax.cond(allowed & same, lambda s: _line_step(prob, lam, s, h, d, loss=loss), lambda s: s, state)


def _line_step(prob: Problem, lam, state, h: History, d, *, loss):
    """The step of :func:`line_extrapolate` once it is allowed: the best ``x + s d``, kept if it is better."""
    coef, offset, z = state.coef, state.offset, state.z
    dz = h.zs[-1] - h.zs[-2]
    shrinking = coef * d < 0
    cross = jnp.min(jnp.where(shrinking, -coef / jnp.where(shrinking, d, 1.0), jnp.inf))
    steps = jnp.minimum(jnp.asarray(_LINE_STEPS, coef.dtype), cross)  # (S,)
    penalty = lam * (jnp.sum(jnp.abs(coef)) + steps * jnp.dot(jnp.sign(coef), d, precision=HI))
    zs = z[None] + steps[:, None] * dz[None]
    data = jnp.matmul(loss_value(loss, zs, prob.y[None]), prob.w, precision=HI) / prob.n_w
    values = data + penalty
    best = jnp.argmin(jnp.where(jnp.isfinite(values), values, jnp.inf))
    current = jnp.dot(prob.w, loss_value(loss, z, prob.y), precision=HI) / prob.n_w + lam * jnp.sum(jnp.abs(coef))
    new = coef + steps[best] * d
    new = jnp.where(jnp.sign(new) == jnp.sign(coef), new, 0.0)  # rounding at the crossing
    frozen = jnp.all(state.active | (new == 0))
    better = frozen & (steps[best] > 1.0) & (values[best] < current)
    pick = lambda a, b: jnp.where(better, a, b)
    return state._replace(
        coef=pick(new, coef),
        offset=pick(offset + steps[best] * (h.offsets[-1] - h.offsets[-2]), offset),
        z=pick(zs[best], z),
    )


def cd_epoch(prob: Problem, lam, state, *, loss):
    """One CD epoch (blocked for least squares), its step count and the extrapolations."""
    if loss == "squared":
        coef, z = cd_epoch_blocked(prob, lam, state.coef, state.z, state.active)
    else:
        coef, z = cd_epoch_logistic(prob, lam, state.coef, state.z, state.active, loss=loss)
    state = state._replace(coef=coef, z=z, num_steps=state.num_steps + 1)
    return anderson(prob, lam, state, loss=loss)
