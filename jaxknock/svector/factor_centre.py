r"""Newton centring for the factor-model coordinate ascent (``sdp_factor(method="coordinate")``).

The factor-model counterpart of :func:`jaxknock.svector.certificate.centred_dual`:
damped projected Newton steps, at fixed ``lam``, on the barrier objective

.. math:: f(s) = 1^T s + \lambda \log\det A(s),\qquad A(s) = \mathrm{diag}(2d - s) + 2 U U^T,
          \qquad 0 \le s \le c,

with gradient ``1 - lam diag(A^{-1})`` and Hessian ``-lam A^{-1} o A^{-1}``,
the Newton system solved by Jacobi-preconditioned conjugate gradients with
the Woodbury product of :func:`jaxknock.svector.factor_newton.hadamard_matvec_cg`
(``O(p k^2)`` per product, nothing ``p x p``). Coordinates at an active bound
are frozen; every step is clipped to the box and backtracked until ``A`` is
positive definite (exact inertia test) and ``f`` has not decreased, so the
centred copy is feasible with a barrier objective no lower than the start.

Why: cyclic coordinate ascent on ``f`` crawls once ``A`` is nearly singular
along a direction spread over many coordinates (each coordinate can then move
only about ``lam`` per sweep). On small factor models (``p`` 4-11, ``k`` 1-3,
random loadings) 137 of 300 runs used to end ``max_steps_reached`` after 500
sweeps at relative gaps of 0.4-35%.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxknock.svector import _common, _woodbury
from jaxknock.svector.factor_newton import hadamard_matvec_cg, operands

__all__ = ["newton_centre"]

# CG: the centring direction must be accurate (it decides how tight the certificate gets)
_CG_RTOL = 1e-8
_CG_MAX_ITERS = 200
_BACKTRACKS = 30
# Newton decrement at which the centring stops
_CENTRED = 1e-4
# a step gaining less than this fraction of the damped Newton step's promised gain ends the centring
WEAK_STEP = 0.1


def _barrier(ops, d, lam, x):
    """``(f(x), e, evals, evecs)``; ``f = -inf`` unless ``A(x)`` is positive definite."""
    e = 2.0 * d - x
    evals, evecs = _woodbury.capacitance_eig(ops, e)
    pd = _common.factor_is_pd_from_eigvals(e, evals)
    # det A = det(diag e) det M: the signs cancel when A is positive definite
    logdet = jnp.sum(jnp.log(jnp.abs(e))) + jnp.sum(jnp.log(jnp.abs(evals)))
    val = jnp.sum(x) + lam * logdet
    return jnp.where(pd & jnp.isfinite(val), val, -jnp.inf), e, evals, evecs


def _backtrack(ops, d, lam, cap, x, ds, a0, f0):
    """``(x_new, f_new, moved)``: ``clip(x + a ds, 0, cap)`` for the first ``a = a0 / 2^k`` (``k < 30``)
    with ``A`` positive definite and ``f`` no lower than ``f0``; ``(x, f0, False)`` if none."""

    def body(c):
        k, a, _, xb, fb = c
        xn = jnp.clip(x + a * ds, 0.0, cap)
        fn = _barrier(ops, d, lam, xn)[0]
        better = jnp.isfinite(fn) & (fn >= f0)
        return k + 1, 0.5 * a, better, jnp.where(better, xn, xb), jnp.where(better, fn, fb)

    init = (jnp.int32(0), jnp.asarray(a0, x.dtype), jnp.zeros((), bool), x, f0)
    _, _, moved, xb, fb = lax.while_loop(lambda c: (c[0] < _BACKTRACKS) & ~c[2], body, init)
    return xb, fb, moved


def newton_centre(d, U, s, lam, cap, max_steps=8, weak=WEAK_STEP):
    """Newton-centred copy of ``s`` at ``lam`` on the unit-diagonal factor model ``(d, U)``.

    Returns ``s`` itself when it is infeasible or no step improves ``f``;
    otherwise a point of ``[0, cap]`` with ``A`` positive definite and barrier
    objective at least that of ``s``. At most ``max_steps`` damped Newton
    steps (step ``1 / (1 + delta)`` while the Newton decrement
    ``delta > 1/4``, then full steps; at most 30 halvings each), stopping
    once ``delta <=`` :data:`_CENTRED` (the barrier objective is then within
    ``~lam delta^2 / 2`` of its maximum on the free coordinates).
    """
    ops = operands(U)
    p = U.shape[0]
    cg_max = min(p, _CG_MAX_ITERS)

    def step(c):
        x, i, _ = c
        f0, e, evals, evecs = _barrier(ops, d, lam, x)
        WQ, r, h = _woodbury.woodbury_eig(ops, e, evals, evecs)
        g = 1.0 - lam * h
        free = ~(((x <= 0) & (g < 0)) | ((x >= cap) & (g > 0)))
        gf = jnp.where(free, g, 0.0)

        def matvec(v):
            hv = lam * hadamard_matvec_cg(ops, e, WQ, r, jnp.where(free, v, 0.0))
            return jnp.where(free, hv, v)

        ds, _ = _woodbury.pcg(matvec, gf, jnp.where(free, lam * h * h, 1.0), _CG_RTOL, cg_max)
        ds = jnp.where(free, ds, 0.0)
        dec = jnp.sqrt(jnp.maximum(jnp.dot(gf, ds), 0.0) / lam)
        damped = jnp.where(dec > 0.25, 1.0 / (1.0 + dec), 1.0)
        # two steps along the direction, the better kept: clipped at the box (coordinates driven
        # past a bound land on it) and kept inside it (fraction to the boundary, as an interior
        # method; coordinates already at a bound do not limit it). Clipping bends the step when
        # the direction drives a coordinate far past its bound; the interior step never lets a
        # coordinate reach its bound.
        room_lo = jnp.where(x > 0, x, jnp.inf)
        room_hi = jnp.where(x < cap, cap - x, jnp.inf)
        inner = jnp.minimum(damped, jnp.minimum(_common.max_step(room_lo, ds), _common.max_step(room_hi, -ds)))
        x_clip, f_clip, ok_clip = _backtrack(ops, d, lam, cap, x, ds, damped, f0)
        x_in, f_in, ok_in = _backtrack(ops, d, lam, cap, x, ds, inner, f0)
        use_in = ok_in & (~ok_clip | (f_in > f_clip))
        xb, f1 = jnp.where(use_in, x_in, x_clip), jnp.where(use_in, f_in, f_clip)
        moved = ok_in | ok_clip
        ok = jnp.isfinite(f0) & jnp.all(jnp.isfinite(xb))
        # the gain a damped Newton step guarantees a self-concordant f / lam without the box:
        # lam (delta - log(1 + delta)); far less means the clipping at the box is what limits
        # the step, and further steps would cost without helping
        promised = lam * jnp.where(dec > 0.25, dec - jnp.log1p(dec), 0.5 * dec * dec)
        stuck = (f1 - f0) < weak * promised
        # stop when centred, infeasible, stuck (no halving improved f) or weak
        done = ~ok | ~moved | stuck | (dec <= _CENTRED)
        return jnp.where(ok, xb, x), i + 1, done

    x, _, _ = lax.while_loop(lambda c: (c[1] < max_steps) & ~c[2], step, (s, jnp.int32(0), jnp.zeros((), bool)))
    return x
