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
          + (WQ)_j\, (U^T \mathrm{diag}(v / e^2) U)\, (WQ)_j^T,\qquad r_j = (WQ)_j W_j^T ,

``4 p k^2`` flops as matrix products, nothing ``p x p``. ``diag(B) = 1/e - r``
gives the gradient and the certificate of
:func:`~jaxknock.svector.certificate.gap_from_inverse_diag`, the same as
:func:`~jaxknock.sdp_factor` (``method="coordinate"``) reports.

Cost per Newton step (``p k^2`` products): ``U Q`` (for ``r``, ``h`` and ``W Q``),
one capacitance ``U^T diag(1/e) U`` per step-length trial (its ``k x k``
eigendecomposition gives the exact inertia test of ``A`` and, kept in the state,
``Q`` at the next step: no ``k x k`` inverse, no fresh factorisation), and two
products per CG iteration; the certificate finds its optimal scaling by
bisection (``gap_from_inverse_diag(search=True)``), not by a length-``p`` sort.
Precision: float64 throughout, the CG products at ``HIGHEST`` (``_CG_DTYPE``:
float32 CG products were measured 1.3x faster at ``p = 5 * 10^4`` with the same
iterates to 10 digits, but a vmapped batch then differs from a loop over its
members by ~1e-5 in ``s``, within the certified gaps but not reproducible, so
they are not used). The Newton direction is inexact (relative residual
``CG_RTOL = 1e-3``): it only steers the path, feasibility and the certificate
never depend on it. The step length starts from the fraction of the longest
box-feasible step accepted at the previous step (times 4; or times 1.5 of the
one accepted right after the previous decrease of ``lam``, for the step right
after one): along the path these fractions repeat from one ``lam`` stage to the
next, so most steps need one or two inertia tests instead of a backtracking
ladder from 1.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import Iteration, iterative_solve
from jaxknock.svector import _common, _woodbury
from jaxknock.svector.certificate import gap_from_inverse_diag
from jaxknock.svector.newton import path_terminate  # the dense path's stopping rule (fields s, dual, stall)

__all__ = ["FactorNewtonState"]

PATIENCE = 32
# CG: relative residual asked of each inexact Newton direction (a forcing term: the
# direction only steers the path, the certificate never depends on it), and the cap
CG_RTOL = 1e-3
CG_MAX_ITERS = 200
# a coordinate with |2 d_j - s_j| below this fraction of 2 d_j + s_j makes the
# Woodbury terms 1 / e_j lose all accuracy: such trial points are shortened
_E_FLOOR = 1e-9
# step length: first trial GROW x (last accepted fraction of the box-feasible step),
# FRESH_GROW x (the fraction accepted right after the last lam decrease) on the step
# right after one; a failed inertia test shrinks the trial by SHRINK, at most MAX_SHRINKS times
_GROW = 4.0
_FRESH_GROW = 1.5
_SHRINK = 0.5
_MAX_SHRINKS = 40
_MIN_FRAC = 1e-8
# the dtype of the CG products (float32 would be faster, see the module docstring)
_CG_DTYPE = jnp.float64


class FactorNewtonState(NamedTuple):
    """State of the factor-model Newton path follower (unit-diagonal model).

    ``s`` strictly inside ``(0, cap)`` with ``A`` positive definite; ``z0, z1``
    multipliers of ``s >= 0`` and ``s <= cap``; ``lam`` the barrier parameter;
    ``step`` Newton steps taken; ``dual`` the best certified dual bound so far;
    ``stall`` the stall score; ``cg_iters`` conjugate-gradient iterations and
    ``trips`` sequential loop trips (Newton steps + CG iterations + step
    shortenings) so far; ``evals, evecs`` the eigendecomposition of the ``k x k``
    capacitance ``M = I + 2 U^T diag(1/e) U`` at ``s`` (kept from the inertia test
    that accepted ``s``); ``frac`` the accepted fraction of the longest
    box-feasible step at the last step, ``frac_fresh`` that of the last step right
    after a decrease of ``lam``, ``fresh`` whether the last step decreased
    ``lam``; ``dec`` the last Newton decrement.
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
    evals: jax.Array
    evecs: jax.Array
    frac: jax.Array
    frac_fresh: jax.Array
    fresh: jax.Array
    dec: jax.Array


class Operands(NamedTuple):
    """Loop-invariant copies of ``U`` (``p x k``): ``Ut = U^T`` materialised (``k x p``),
    so that ``U^T diag(w) U`` is a plain row-major product, and copies in the CG dtype."""

    U: jax.Array
    Ut: jax.Array
    U_cg: jax.Array
    Ut_cg: jax.Array


def operands(U) -> Operands:
    """:class:`Operands` of ``U`` (built once per solve, outside the loop)."""
    # the barrier keeps XLA from folding the transpose back into the products
    Ut = lax.optimization_barrier(jnp.transpose(U))
    return Operands(U, Ut, U.astype(_CG_DTYPE), Ut.astype(_CG_DTYPE))


def woodbury(d, U, s):
    """``(e, W, WQ, r, h)``: ``A^{-1} = diag(1/e) - W Q W^T`` with ``W = diag(1/e) U``,
    ``Q = 2 M^{-1}``, ``WQ = W Q``, ``r_j = (WQ)_j W_j^T`` and ``h = diag(A^{-1}) = 1/e - r``
    (computed as the solver does)."""
    ops = operands(U)
    e = 2.0 * d - s
    WQ, r, h = _woodbury.woodbury_eig(ops, e, *_woodbury.capacitance_eig(ops, e))
    return e, U / e[:, None], WQ, r, h


def hadamard_matvec_cg(ops: Operands, e, WQ_cg, r, v):
    """``(A^{-1} o A^{-1}) v`` as the CG uses it: the rank part ``(WQ) K (WQ)^T`` with products in
    the CG dtype (``WQ_cg`` = ``W Q`` in it), the diagonal part in ``v``'s dtype."""
    K = _woodbury.mm(ops.Ut_cg * (v / (e * e)).astype(_CG_DTYPE)[None, :], ops.U_cg)
    low = jnp.sum(lax.optimization_barrier(_woodbury.mm(WQ_cg, K)) * WQ_cg, axis=1).astype(v.dtype)
    return v * (1.0 - 2.0 * e * r) / (e * e) + low


def _acceptable(d, ops: Operands, s):
    """``(ok, (evals, evecs))``: ``A(s)`` positive definite (exact inertia test) and no ``e_j``
    within rounding of 0; the eigendecomposition of the capacitance at ``s``."""
    e = 2.0 * d - s
    evals, evecs = _woodbury.capacitance_eig(ops, e)
    far = jnp.all(jnp.abs(e) > _E_FLOOR * (2.0 * d + jnp.abs(s)))
    return far & _common.factor_is_pd_from_eigvals(e, evals), (evals, evecs)


def path_init(d, U, lam0, cap, ops: Operands | None = None) -> FactorNewtonState:
    """Start ``x_j = min(1e-3 lam0, 1e-3 cap_j, 1 / (2 p h_j))``, ``h = diag((2 Sigma)^{-1})``.

    There ``diag(x)^{1/2} (2 Sigma)^{-1} diag(x)^{1/2}`` has trace at most 1/2, so
    ``2 Sigma - diag(x) >= Sigma``: strictly feasible for every valid model.
    """
    ops = operands(U) if ops is None else ops
    p = U.shape[0]
    e0 = 2.0 * d
    *_, h = _woodbury.woodbury_eig(ops, e0, *_woodbury.capacitance_eig(ops, e0))
    s = jnp.minimum(jnp.minimum(1e-3 * lam0, 1e-3 * cap), 0.5 / (p * h))
    inf = jnp.asarray(jnp.inf, U.dtype)
    zero = jnp.int32(0)
    one = jnp.ones((), U.dtype)
    lam0 = jnp.asarray(lam0, U.dtype)
    evals, evecs = _woodbury.capacitance_eig(ops, 2.0 * d - s)
    return FactorNewtonState(
        s, lam0 / s, lam0 / (cap - s), lam0, zero, inf, zero, zero, zero, evals, evecs, one, one, jnp.bool_(False), inf
    )


def path_step(
    st: FactorNewtonState, d, U, cap, tol, mu, cg_max, center=0.3, patience=PATIENCE, ops: Operands | None = None
):
    """One primal-dual Newton step (CG-solved), the certificate, ``lam`` and stall updates."""
    ops = operands(U) if ops is None else ops
    inf = jnp.asarray(jnp.inf, st.s.dtype)
    s, z0, z1, lam = st.s, st.z0, st.z1, st.lam
    e = 2.0 * d - s
    WQ, r, h = _woodbury.woodbury_eig(ops, e, st.evals, st.evecs)
    dual, _ = gap_from_inverse_diag(s, h, lam, search=True)
    dual = jnp.where(jnp.isfinite(dual), dual, inf)
    g = 1.0 - lam * h + lam / s - lam / (cap - s)
    zdiag = z0 / s + z1 / (cap - s)
    pdiag = lam * h * h + zdiag
    WQ_cg = WQ.astype(_CG_DTYPE)
    # inexact Newton: the direction only steers the path, the certificate never depends on it
    ds, cg_it = _woodbury.pcg(
        lambda v: lam * hadamard_matvec_cg(ops, e, WQ_cg, r, v) + zdiag * v, g, pdiag, CG_RTOL, cg_max
    )
    dz0 = (lam - s * z0 - z0 * ds) / s
    dz1 = (lam - (cap - s) * z1 + z1 * ds) / (cap - s)
    dec = jnp.sqrt(jnp.maximum(jnp.dot(g, ds), 0.0) / lam)
    tmax = jnp.minimum(_common.max_step(s, ds), _common.max_step(cap - s, -ds))
    f0 = jnp.minimum(1.0, jnp.where(st.fresh, _FRESH_GROW * st.frac_fresh, _GROW * st.frac))

    def shrink(c):
        t, k, _, _ = c
        return t * _SHRINK, k + 1, *_acceptable(d, ops, s + _SHRINK * t * ds)

    tp, n_shrink, ok_pd, eig_new = lax.while_loop(
        lambda c: (c[1] < _MAX_SHRINKS) & ~c[2],
        shrink,
        (f0 * tmax, jnp.int32(0), *_acceptable(d, ops, s + f0 * tmax * ds)),
    )
    frac = jnp.where(ok_pd & (tmax > 0), tp / jnp.where(tmax > 0, tmax, 1.0), st.frac * _SHRINK)
    frac = jnp.maximum(frac, _MIN_FRAC)
    tp = jnp.where(ok_pd, tp, 0.0)
    evals, evecs = jax.tree_util.tree_map(lambda a, b: jnp.where(ok_pd, a, b), eig_new, (st.evals, st.evecs))
    td = jnp.minimum(_common.max_step(z0, dz0), _common.max_step(z1, dz1))
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
        evals,
        evecs,
        frac,
        jnp.where(st.fresh, frac, st.frac_fresh),
        shrink_lam,
        dec,
    )
    ok = jnp.all(jnp.isfinite(new.s)) & jnp.all(jnp.isfinite(ds))
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(ok, a, b), new, st._replace(stall=jnp.int32(patience), trips=new.trips)
    )


def _snap_to_cap(d, ops, s, z0, z1, cap):
    """Move coordinates whose upper bound is active (``z1`` of order 1, dominating ``z0``)
    onto ``cap`` when ``A`` stays positive definite: an interior method only gets ``~lam`` close."""
    active = (z1 > 0.5) & (z1 > 10.0 * z0)
    x = jnp.where(active, cap, s)
    return jnp.where(_acceptable(d, ops, x)[0] & (jnp.sum(x) >= jnp.sum(s)), x, s)


def solve_path(d, U, lam0, cap, tol, mu, max_steps, cg_max=CG_MAX_ITERS) -> Iteration:
    """Run the path follower until certified, stagnated or ``max_steps`` Newton steps (unit-diagonal model).

    ``lam0`` is the starting barrier parameter (an array); ``mu`` the factor
    applied to ``lam`` after a centred step. Bound-active coordinates of the
    final iterate are snapped onto the cap.
    """
    ops = operands(U)
    it = iterative_solve(
        path_init(d, U, lam0, cap, ops),
        lambda st: path_step(st, d, U, cap, tol, mu, cg_max, ops=ops),
        lambda st: path_terminate(st, tol),
        max_steps=max_steps,
        finite=lambda st: jnp.all(jnp.isfinite(st.s)),
    )
    st = it.state
    return it._replace(state=st._replace(s=_snap_to_cap(d, ops, st.s, st.z0, st.z1, cap)))
