r"""Damped Newton-CG for the factor-model MVR and maximum-entropy S-vectors (``method="newton"``).

The parallel counterpart of the coordinate descent of :mod:`~jaxknock.svector.mrc_factor`:
its sequential depth (loop trips) does not grow with ``p``. Objectives, certified
gaps and stopping rule are those of :mod:`~jaxknock.svector.mrc`; with
``B = A^{-1}``, ``A = c C - diag(s)`` (unit-diagonal model, ``c = (m+1)/m``) and
``dA / ds_j = -e_j e_j^T`` (so ``dB / ds_j = B e_j e_j^T B``):

* ME, ``f = -log det A - m sum log s``: gradient ``g_j = B_jj - m / s_j``,
  Hessian ``B o B + diag(m / s^2)``;
* MVR, ``f = tr(B) / m + m sum 1/s``: gradient ``g_j = (B^2)_jj / m - m / s_j^2``
  (``d tr B / ds_j = (B^2)_jj``), Hessian ``(2/m) B o B^2 + diag(2 m / s^3)``.

Both Hessians are positive definite (Schur products of positive definite
matrices plus a positive diagonal): ``f`` is strictly convex on the open set
``{s > 0, A > 0}`` and tends to ``+inf`` at its boundary.

**Woodbury.** With ``e = c d - s``, ``A = diag(e) + c U U^T`` is written as
``diag(e) + 2 U' U'^T`` with ``U' = sqrt(c/2) U`` (the form of
:mod:`~jaxknock.svector._woodbury`): ``B = diag(1/e) - W Q W^T``, ``W = diag(1/e) U'``,
``Q = 2 M^{-1}``, ``M = I + 2 U'^T diag(1/e) U'`` (``k x k``). With ``X = W Q``,
``r_j = X_j W_j^T`` and ``P = W^T W``:

* ``diag(B) = 1/e - r``; ``(B^2)_jj = ||B e_j||^2 = 1/e_j^2 - 2 r_j / e_j + X_j P X_j^T``;
* ``log det A = sum_j log|e_j| + log det M`` (determinant lemma), ``tr B = sum_j diag(B)_j``;
* ``(B o B) v = v (1 - 2 e r) / e^2 + rowsum(X o (X K))``, ``K = U'^T diag(v / e^2) U'``
  (:func:`~jaxknock.svector.factor_newton.hadamard_matvec_cg`);
* ``(B o B^2) v = v (q / e - r / e^2) + rowsum(X o (X K_1 / e + X K_2)) - rowsum((X K_3) o (X P))``
  with ``q = diag(B^2)``, ``K_1 = U'^T diag(v/e^2) U'``, ``K_2 = U'^T diag(v/e^3) U'``,
  ``K_3 = U'^T diag(v/e) X`` (expanding ``B^2 = E^2 - E W Q W^T - W Q W^T E + X P X^T``,
  ``E = diag(1/e)``).

Every product is ``O(p k^2)`` flops of matrix products; nothing is ``p x p``.

**Step.** The Newton system ``H ds = -g`` is solved inexactly by
Jacobi-preconditioned conjugate gradients (relative residual
``min(0.1, sqrt(relative gap))``, at most ``CG_MAX_ITERS``), so the direction
is a descent direction. The step length starts at the fraction to the
boundary of ``s > 0`` (0.99 of the longest step, at most 1) and is halved
until the trial point passes the exact inertia test of ``A > 0`` (the ``k x k``
capacitance's eigenvalues, :func:`~jaxknock.svector._common.factor_is_pd_from_eigvals`;
its eigendecomposition is kept for the next step) and the Armijo condition
``f(s + t ds) <= f(s) + 1e-4 t g^T ds`` (up to ``100 eps |f|`` of rounding),
``f`` by the determinant lemma / Woodbury trace. A step that finds no such
point leaves ``s`` unchanged, and the shared stopping rule then reports
``stagnated``. After each step the certified gap of :mod:`~jaxknock.svector.mrc`
is evaluated with the Woodbury diagonals: the certificate never depends on the
accuracy of the Newton direction.

Float64 throughout (``A`` approaches singularity near the optimum; the
Woodbury terms ``1 / e_j`` lose accuracy in float32).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import Iteration, iterative_solve
from jaxknock.svector import _common, _woodbury, factor_newton, mrc

__all__ = [
    "FactorMRCNewtonState",
    "gradient_and_preconditioner",
    "hessian_matvec",
    "newton_derivatives",
    "newton_init",
    "newton_step",
]

CG_MAX_ITERS = 100
# a coordinate with |c d_j - s_j| below this fraction of c d_j + s_j makes the Woodbury
# terms 1 / e_j lose all accuracy: such trial points are rejected (halved)
_E_FLOOR = 1e-9


class Derivatives(NamedTuple):
    """Woodbury quantities at ``s``: ``X = W Q``, ``r``, ``h = diag(B)``, ``q = diag(B^2)`` (MVR; ``h`` for ME),
    ``Y = X P`` (MVR; ``X`` for ME), ``logdet = log det A``, ``f`` and the certified ``gap``."""

    X: jax.Array
    r: jax.Array
    h: jax.Array
    q: jax.Array
    Y: jax.Array
    logdet: jax.Array
    f: jax.Array
    gap: jax.Array


class FactorMRCNewtonState(NamedTuple):
    """State of the MVR / ME Newton-CG solver (unit-diagonal model).

    ``s`` with ``s > 0`` and ``A = c C - diag(s)`` positive definite; ``evals, evecs`` the
    eigendecomposition of the ``k x k`` capacitance at ``s`` and (MVR; 0 for ME) ``P = W^T W``
    (all three kept from the trial point that was accepted); ``der`` the
    :class:`Derivatives` at ``s``; ``objective`` ``f(s)`` and
    its certified ``gap``; ``prev`` the objective before the last step; ``sweep`` the
    Newton steps taken (named as in :class:`~jaxknock.svector.mrc.MRCState`: the
    stopping rule :func:`~jaxknock.svector.mrc.mrc_terminate` is shared); ``cg_iters``
    conjugate-gradient iterations and ``trips`` sequential loop trips (Newton steps +
    CG iterations + step halvings) so far.
    """

    s: jax.Array
    evals: jax.Array
    evecs: jax.Array
    P: jax.Array
    der: Derivatives
    objective: jax.Array
    gap: jax.Array
    prev: jax.Array
    sweep: jax.Array
    cg_iters: jax.Array
    trips: jax.Array


def _logdet(e, evals):
    return jnp.sum(jnp.log(jnp.abs(e))) + jnp.sum(jnp.log(jnp.abs(evals)))


def _capacitance(kind, ops, e):
    """``(evals, evecs, P)``: the capacitance's eigendecomposition and (MVR) ``P = W^T W``, one
    ``p x k x k`` product for ME, one ``p x k x 2k`` product for MVR (``P = 0`` for ME)."""
    k = ops.U.shape[1]
    if kind == "mvr":
        G = _woodbury.mm(jnp.concatenate([ops.Ut / e[None, :], ops.Ut / (e * e)[None, :]], axis=0), ops.U)
        M = jnp.eye(k, dtype=e.dtype) + 2.0 * G[:k]
        evals, evecs = jnp.linalg.eigh(0.5 * (M + M.T))
        return evals, evecs, G[k:]
    evals, evecs = _woodbury.capacitance_eig(ops, e)
    return evals, evecs, jnp.zeros((k, k), e.dtype)


def _derive(kind, ops, s, e, evals, evecs, P, m) -> Derivatives:
    X, r, h = _woodbury.woodbury_eig(ops, e, evals, evecs)
    logdet = _logdet(e, evals)
    if kind == "mvr":
        Y = _woodbury.mm(X, P)
        q = 1.0 / (e * e) - 2.0 * r / e + jnp.sum(X * Y, axis=1)
    else:
        q, Y = h, X
    f, gap = mrc.objective_and_gap(kind, s, h, logdet, jnp.sum(h), q, m)
    return Derivatives(X, r, h, q, Y, logdet, f, gap)


def newton_derivatives(kind, d, U, s, m) -> Derivatives:
    """:class:`Derivatives` at ``s`` for the unit-diagonal model ``(d, U)`` with ``m`` knockoffs.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> d, U, s = jnp.full(4, 0.5), jnp.full((4, 1), 0.5**0.5), jnp.full(4, 0.5)
        >>> der = newton_derivatives("mvr", d, U, s, 1)
        >>> B = jnp.linalg.inv(2 * (jnp.diag(d) + U @ U.T) - jnp.diag(s))   # A^{-1}, c = 2
        >>> bool(jnp.allclose(der.h, jnp.diag(B))), bool(jnp.allclose(der.q, jnp.diag(B @ B)))
        (True, True)
    """
    c = (m + 1.0) / m
    ops = factor_newton.operands(jnp.sqrt(0.5 * c) * U)
    e = c * d - s
    return _derive(kind, ops, s, e, *_capacitance(kind, ops, e), m)


def mvr_hessian_matvec(ops, e, der: Derivatives, v):
    """``(B o B^2) v`` in ``O(p k^2)`` (see the module docstring); ``ops`` from
    :func:`~jaxknock.svector.factor_newton.operands` of ``U' = sqrt(c/2) U``."""
    X, r, q, Y = der.X, der.r, der.q, der.Y
    w = v / e
    cols = jnp.concatenate([ops.U * (w / e)[:, None], ops.U * (w / (e * e))[:, None], X * w[:, None]], axis=1)
    K = _woodbury.mm(ops.Ut, cols)  # [K1 | K2 | K3], k x 3k
    XK = lax.optimization_barrier(_woodbury.mm(X, K))
    k = X.shape[1]
    low = jnp.sum(X * (XK[:, :k] / e[:, None] + XK[:, k : 2 * k]), axis=1) - jnp.sum(XK[:, 2 * k :] * Y, axis=1)
    return v * (q / e - r / (e * e)) + low


def hessian_matvec(kind, ops, s, e, der: Derivatives, m, v):
    """``H v`` of the objective ``kind`` at ``s`` (see the module docstring), ``O(p k^2)``.

    ``ops`` from :func:`~jaxknock.svector.factor_newton.operands` of ``U' = sqrt(c/2) U``,
    ``e = c d - s``, ``der`` from :func:`newton_derivatives`.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> d, U, s, v = jnp.full(4, 0.5), jnp.full((4, 1), 0.5**0.5), jnp.full(4, 0.5), jnp.arange(4.0)
        >>> der = newton_derivatives("maxent", d, U, s, 1)
        >>> Hv = hessian_matvec("maxent", factor_newton.operands(U), s, 2 * d - s, der, 1, v)
        >>> B = jnp.linalg.inv(2 * (jnp.diag(d) + U @ U.T) - jnp.diag(s))
        >>> bool(jnp.allclose(Hv, (B * B) @ v + v / s**2))
        True
    """
    if kind == "mvr":
        return (2.0 / m) * mvr_hessian_matvec(ops, e, der, v) + (2.0 * m / s**3) * v
    return factor_newton.hadamard_matvec_cg(ops, e, der.X, der.r, v) + (m / (s * s)) * v


def gradient_and_preconditioner(kind, s, der: Derivatives, m):
    """``(g, diag(H))``: the gradient of the objective ``kind`` at ``s`` and the Hessian's diagonal
    (``diag(B o B) = h^2``, ``diag(B o B^2) = h q``), the Jacobi preconditioner of the CG."""
    if kind == "mvr":
        return der.q / m - m / (s * s), (2.0 / m) * der.h * der.q + 2.0 * m / s**3
    return der.h - m / s, der.h * der.h + m / (s * s)


def _trial(kind, ops, cd, s, m):
    """``(ok, f, (evals, evecs, P))`` at a trial ``s``: exact inertia test, ``e`` away from 0, ``f(s)``."""
    e = cd - s
    evals, evecs, P = _capacitance(kind, ops, e)
    if kind == "mvr":
        # tr B = sum 1/e - tr(Q P), Q = 2 V diag(1/evals) V^T
        VPV = jnp.sum(evecs * _woodbury.mm(P, evecs), axis=0)
        trace = jnp.sum(1.0 / e) - 2.0 * jnp.sum(VPV / evals)
        f = trace / m + m * jnp.sum(1.0 / s)
    else:
        f = -_logdet(e, evals) - m * jnp.sum(jnp.log(s))
    far = jnp.all(jnp.abs(e) > _E_FLOOR * (cd + jnp.abs(s)))
    ok = far & jnp.all(s > 0) & _common.factor_is_pd_from_eigvals(e, evals) & jnp.isfinite(f)
    return ok, f, (evals, evecs, P)


def newton_init(kind, ops, cd, s0, m) -> FactorMRCNewtonState:
    """Initial state at a feasible ``s0`` (``cd = c d``; ``ops`` of ``U' = sqrt(c/2) U``)."""
    e = cd - s0
    evals, evecs, P = _capacitance(kind, ops, e)
    der = _derive(kind, ops, s0, e, evals, evecs, P, m)
    inf = jnp.asarray(jnp.inf, s0.dtype)
    zero = jnp.int32(0)
    return FactorMRCNewtonState(s0, evals, evecs, P, der, der.f, der.gap, inf, zero, zero, zero)


def newton_step(kind, st: FactorMRCNewtonState, ops, cd, m, cg_max=CG_MAX_ITERS) -> FactorMRCNewtonState:
    """One damped Newton-CG step, then ``f`` and the certified gap at the new point."""
    s = st.s
    e = cd - s
    der = st.der
    g, pdiag = gradient_and_preconditioner(kind, s, der, m)
    rel = st.gap / jnp.maximum(jnp.abs(st.objective), 1.0)
    rtol = jnp.clip(jnp.sqrt(jnp.where(jnp.isfinite(rel), rel, 1.0)), 1e-10, 0.1)
    ds, cg_it = _woodbury.pcg(lambda v: hessian_matvec(kind, ops, s, e, der, m, v), -g, pdiag, rtol, cg_max)
    slope = jnp.dot(g, ds)
    t0 = _common.max_step(s, ds)
    t, ok, n_shrink, eig = _common.armijo_backtrack(lambda t: _trial(kind, ops, cd, s + t * ds, m), t0, der.f, slope)
    s_new = jnp.where(ok, s + t * ds, s)
    evals, evecs, P = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), eig, (st.evals, st.evecs, st.P))
    new = _derive(kind, ops, s_new, cd - s_new, evals, evecs, P, m)
    trips = st.trips + 1 + cg_it + n_shrink
    return FactorMRCNewtonState(
        s_new, evals, evecs, P, new, new.f, new.gap, st.objective, st.sweep + 1, st.cg_iters + cg_it, trips
    )


def solve(kind, d, U, s0, tol, max_steps, m) -> Iteration:
    """Run the Newton-CG solver from a feasible ``s0`` on the unit-diagonal model ``(d, U)``
    until certified (``gap <= tol max(|f|, 1)``), stagnated or ``max_steps`` Newton steps."""
    c = (m + 1.0) / m
    ops = factor_newton.operands(jnp.sqrt(0.5 * c) * U)
    cd = c * d
    return iterative_solve(
        newton_init(kind, ops, cd, s0, m),
        lambda st: newton_step(kind, st, ops, cd, m),
        # MVR: every coordinate's stationarity too (a near copy's 1/s_j dominates f; see mrc.mvr_coordinates_certified)
        lambda st: mrc.mrc_terminate(st, tol, mrc.mvr_norms_certified(kind, st.s, st.der.q, m, tol)),
        max_steps=max_steps,
        finite=lambda st: jnp.all(jnp.isfinite(st.s)),
    )
