r"""Barrier Newton path following for the factor-model knockoff SDP, ``Sigma = D + U U^T``.

The parallel counterpart of the coordinate ascent of :mod:`~jaxknock.svector.factor`:
its sequential depth (loop trips) does not grow with ``p``. On the unit-diagonal
model ``(d, U)`` it follows the central path of

.. math:: \max_s\ 1^T s + \lambda \bigl(\log\det A + \textstyle\sum_j \log s_j
          + \sum_j \log(c_j - s_j)\bigr),\qquad A = 2\Sigma - \mathrm{diag}(s) = \mathrm{diag}(e) + 2 U U^T,

``e = 2d - s``, with primal-dual Newton steps as :mod:`~jaxknock.svector.newton`
does for a dense ``Sigma``. By Woodbury
``B = A^{-1} = E - W Q W^T`` with ``E = diag(1/e)``, ``W = E U`` (``p x k``),
``Q = 2 M^{-1}``, ``M = I + 2 U^T E U`` (``k x k``). The Newton system
``(lam B o B + Z) ds = g`` (``Z`` the box multipliers over the slacks) is
solved by conjugate gradients preconditioned by its diagonal; one product with
``B o B`` is

.. math:: \bigl((B\circ B) v\bigr)_j = v_j \frac{1 - 2 e_j r_j}{e_j^2}
          + (WQ)_j\, (W^T \mathrm{diag}(v) W)\, (WQ)_j^T,\qquad r_j = (WQ)_j W_j^T ,

``4 p k^2`` flops as matrix products, nothing ``p x p``. ``diag(B) = 1/e - r``
gives the gradient and the certificate of
:func:`~jaxknock.svector.certificate.gap_from_inverse_diag`, the same as
:func:`~jaxknock.sdp_factor` (``method="coordinate"``) reports.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import Iteration, iterative_solve
from jaxknock._solution import RESULTS
from jaxknock.svector import _common
from jaxknock.svector._common import HIGHEST
from jaxknock.svector.certificate import gap_from_inverse_diag

__all__ = ["FactorNewtonState"]

PATIENCE = 32
# CG: relative residual asked of each inexact Newton direction, and the iteration cap
CG_RTOL = 1e-6
CG_MAX_ITERS = 200
# a coordinate with |2 d_j - s_j| below this fraction of 2 d_j + s_j makes the
# Woodbury terms 1 / e_j lose all accuracy: such trial points are shortened
_E_FLOOR = 1e-9


class FactorNewtonState(NamedTuple):
    """State of the factor-model Newton path follower (unit-diagonal model).

    ``s`` strictly inside ``(0, cap)`` with ``A`` positive definite; ``z0, z1``
    multipliers of ``s >= 0`` and ``s <= cap``; ``lam`` the barrier parameter;
    ``step`` Newton steps taken; ``dual`` the best certified dual bound so far;
    ``stall`` the stall score; ``cg_iters`` conjugate-gradient iterations and
    ``trips`` sequential loop trips (Newton steps + CG iterations + step
    shortenings) so far; ``M`` the ``k x k`` capacitance ``I + 2 U^T diag(1/e) U``
    at ``s`` (kept from the feasibility test that accepted ``s``).
    """

    s: jax.Array
    z0: jax.Array
    z1: jax.Array
    lam: jax.Array
    step: jax.Array
    dual: jax.Array
    stall: jax.Array
    cg_iters: jax.Array
    trips: jax.Array
    M: jax.Array


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def capacitance(d, U, s):
    """``M = I + 2 U^T diag(1/e) U`` with ``e = 2d - s`` (``k x k``, ``2 p k^2`` flops)."""
    return jnp.eye(U.shape[1], dtype=U.dtype) + 2.0 * _mm(U.T, U / (2.0 * d - s)[:, None])


def woodbury(d, U, s, M=None):
    """``(e, W, WQ, r, h)``: ``A^{-1} = diag(1/e) - W Q W^T`` with ``W = diag(1/e) U``,
    ``Q = 2 M^{-1}``, ``WQ = W Q``, ``r_j = (WQ)_j W_j^T`` and ``h = diag(A^{-1}) = 1/e - r``."""
    e = 2.0 * d - s
    W = U / e[:, None]
    M = capacitance(d, U, s) if M is None else M
    Q = 2.0 * jnp.linalg.inv(0.5 * (M + M.T))
    WQ = _mm(W, Q)
    r = jnp.sum(WQ * W, axis=1)
    return e, W, WQ, r, 1.0 / e - r


def hadamard_matvec(e, W, WQ, r, v):
    """``(A^{-1} o A^{-1}) v`` in ``O(p k^2)`` (see the module docstring)."""
    K = _mm(W.T, v[:, None] * W)
    return v * (1.0 - 2.0 * e * r) / (e * e) + jnp.sum(_mm(WQ, K) * WQ, axis=1)


def _pcg(matvec, b, pdiag, rtol, max_iters):
    """Preconditioned CG for ``matvec(x) = b`` (SPD), Jacobi preconditioner ``pdiag``.

    Stops at ``||r||_{P^{-1}} <= rtol ||b||_{P^{-1}}`` or after ``max_iters`` iterations; returns ``(x, iterations)``.
    """
    x0 = jnp.zeros_like(b)
    z0 = b / pdiag
    rz0 = jnp.dot(b, z0)

    def cond(c):
        _, _, _, _, rz, i = c
        # residual in the preconditioned norm ``r^T P^{-1} r`` (scale-free: the
        # diagonal of the barrier Hessian spans many decades near the optimum)
        return (i < max_iters) & (rz > rtol**2 * rz0)

    def body(c):
        x, r, z, pdir, rz, i = c
        Ap = matvec(pdir)
        alpha = rz / jnp.dot(pdir, Ap)
        x = x + alpha * pdir
        r = r - alpha * Ap
        z = r / pdiag
        rz_new = jnp.dot(r, z)
        pdir = z + (rz_new / rz) * pdir
        return x, r, z, pdir, rz_new, i + 1

    init = (x0, b, z0, z0, rz0, jnp.int32(0))
    x, _, _, _, _, it = lax.while_loop(cond, body, init)
    return x, it


def _max_step(x, dx):
    t = jnp.min(jnp.where(dx < 0, -x / jnp.where(dx < 0, dx, -1.0), jnp.inf))
    return jnp.minimum(1.0, 0.99 * t)


def _acceptable(d, U, s):
    """``(ok, M)``: ``A(s)`` positive definite (exact inertia test) and no ``e_j`` within
    rounding of 0; ``M`` the capacitance at ``s``."""
    e = 2.0 * d - s
    M = capacitance(d, U, s)
    far = jnp.all(jnp.abs(e) > _E_FLOOR * (2.0 * d + jnp.abs(s)))
    return far & _common.factor_is_pd_from_capacitance(e, M), M


def path_init(d, U, lam0, cap) -> FactorNewtonState:
    """Start ``x_j = min(1e-3 lam0, 1e-3 cap_j, 1 / (2 p h_j))``, ``h = diag((2 Sigma)^{-1})``.

    There ``diag(x)^{1/2} (2 Sigma)^{-1} diag(x)^{1/2}`` has trace at most 1/2, so
    ``2 Sigma - diag(x) >= Sigma``: strictly feasible for every valid model.
    """
    p = U.shape[0]
    *_, h = woodbury(d, U, jnp.zeros(p, U.dtype))
    s = jnp.minimum(jnp.minimum(1e-3 * lam0, 1e-3 * cap), 0.5 / (p * h))
    inf = jnp.asarray(jnp.inf, U.dtype)
    zero = jnp.int32(0)
    lam0 = jnp.asarray(lam0, U.dtype)
    return FactorNewtonState(s, lam0 / s, lam0 / (cap - s), lam0, zero, inf, zero, zero, zero, capacitance(d, U, s))


def path_step(st: FactorNewtonState, d, U, cap, tol, mu, cg_max, center=0.3, patience=PATIENCE):
    """One primal-dual Newton step (CG-solved), the certificate, ``lam`` and stall updates."""
    inf = jnp.asarray(jnp.inf, st.s.dtype)
    s, z0, z1, lam = st.s, st.z0, st.z1, st.lam
    e, W, WQ, r, h = woodbury(d, U, s, st.M)
    dual, _ = gap_from_inverse_diag(s, h, lam)
    dual = jnp.where(jnp.isfinite(dual), dual, inf)
    g = 1.0 - lam * h + lam / s - lam / (cap - s)
    zdiag = z0 / s + z1 / (cap - s)
    pdiag = lam * h * h + zdiag
    # inexact Newton: the direction only steers the path, the certificate never depends on it
    ds, cg_it = _pcg(lambda v: lam * hadamard_matvec(e, W, WQ, r, v) + zdiag * v, g, pdiag, CG_RTOL, cg_max)
    dz0 = (lam - s * z0 - z0 * ds) / s
    dz1 = (lam - (cap - s) * z1 + z1 * ds) / (cap - s)
    dec = jnp.sqrt(jnp.maximum(jnp.dot(g, ds), 0.0) / lam)
    tp = jnp.minimum(_max_step(s, ds), _max_step(cap - s, -ds))

    def shrink(c):
        t, k, _, _ = c
        return t * 0.7, k + 1, *_acceptable(d, U, s + 0.7 * t * ds)

    tp, n_shrink, ok_pd, M_new = lax.while_loop(
        lambda c: (c[1] < 40) & ~c[2], shrink, (tp, jnp.int32(0), *_acceptable(d, U, s + tp * ds))
    )
    tp = jnp.where(ok_pd, tp, 0.0)
    M_new = jnp.where(ok_pd, M_new, st.M)
    td = jnp.minimum(_max_step(z0, dz0), _max_step(z1, dz1))
    s_new = s + tp * ds
    best = jnp.minimum(st.dual, dual)
    sum_new = jnp.sum(s_new)
    improved = ((best - sum_new) < 0.999 * (st.dual - jnp.sum(s))) | ~jnp.isfinite(st.dual)
    p = s.shape[0]
    shrink_lam = (dec < center) & (lam * 2 * p > 0.05 * tol * jnp.maximum(sum_new, 1e-12))
    waiting = shrink_lam & (lam * 2 * p > st.dual - jnp.sum(s))
    stall = jnp.where(improved | waiting, jnp.where(improved, 0, st.stall), st.stall + jnp.where(dec < center, 4, 1))
    new = FactorNewtonState(
        s_new,
        z0 + td * dz0,
        z1 + td * dz1,
        jnp.where(shrink_lam, lam * mu, lam),
        st.step + 1,
        best,
        stall,
        st.cg_iters + cg_it,
        st.trips + 1 + cg_it + n_shrink,
        M_new,
    )
    ok = jnp.all(jnp.isfinite(new.s)) & jnp.all(jnp.isfinite(ds))
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(ok, a, b), new, st._replace(stall=jnp.int32(patience), trips=new.trips)
    )


def relative_gap(st) -> jax.Array:
    tot = jnp.maximum(jnp.sum(st.s), 1e-12)
    return (st.dual - jnp.sum(st.s)) / tot


def path_terminate(st: FactorNewtonState, tol, patience=PATIENCE):
    """``(done, code)``: certified to ``tol`` (``successful``) or stall score at ``patience`` (``stagnated``)."""
    certified = relative_gap(st) <= tol
    done = certified | (st.stall >= patience)
    return done, jnp.where(certified, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)


def _snap_to_cap(d, U, s, z0, z1, cap):
    """Move coordinates whose upper bound is active (``z1`` of order 1, dominating ``z0``)
    onto ``cap`` when ``A`` stays positive definite: an interior method only gets ``~lam`` close."""
    active = (z1 > 0.5) & (z1 > 10.0 * z0)
    x = jnp.where(active, cap, s)
    return jnp.where(_acceptable(d, U, x)[0] & (jnp.sum(x) >= jnp.sum(s)), x, s)


def solve_path(d, U, lam0, cap, tol, mu, max_steps, cg_max=CG_MAX_ITERS) -> Iteration:
    """Run the path follower until certified, stagnated or ``max_steps`` Newton steps (unit-diagonal model).

    ``lam0`` is the starting barrier parameter (an array); ``mu`` the factor
    applied to ``lam`` after a centred step. Bound-active coordinates of the
    final iterate are snapped onto the cap.
    """
    it = iterative_solve(
        path_init(d, U, lam0, cap),
        lambda st: path_step(st, d, U, cap, tol, mu, cg_max),
        lambda st: path_terminate(st, tol),
        max_steps=max_steps,
        finite=lambda st: jnp.all(jnp.isfinite(st.s)),
    )
    st = it.state
    return it._replace(state=st._replace(s=_snap_to_cap(d, U, st.s, st.z0, st.z1, cap)))
