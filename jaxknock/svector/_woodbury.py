r"""Woodbury pieces shared by the factor-model Newton solvers (:mod:`~jaxknock.svector.factor_newton`,
:mod:`~jaxknock.svector.mrc_factor_newton`).

Private to :mod:`jaxknock.svector`; the names carry no underscore because the
solver modules import them (``from jaxknock.svector import _woodbury``).

For ``A = diag(e) + 2 U U^T`` (``U`` ``p x k``; every factor-model solver
brings its ``c U U^T`` to this form by scaling ``U``), the capacitance is
``M = I + 2 U^T diag(1/e) U`` and ``A^{-1} = diag(1/e) - W Q W^T`` with
``W = diag(1/e) U``, ``Q = 2 M^{-1}``. ``ops`` is any object with the
attributes ``U`` (``p x k``) and ``Ut`` (``U^T`` materialised, ``k x p``), e.g.
:func:`jaxknock.svector.factor_newton.operands`.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxknock.svector._common import HIGHEST


def mm(a, b):
    """Matrix product at ``HIGHEST`` precision."""
    return jnp.matmul(a, b, precision=HIGHEST)


def capacitance_eig(ops, e):
    """Eigendecomposition ``(evals, evecs)`` of ``M = I + 2 U^T diag(1/e) U`` (``2 p k^2`` flops)."""
    M = jnp.eye(ops.U.shape[1], dtype=ops.U.dtype) + 2.0 * mm(ops.Ut / e[None, :], ops.U)
    return jnp.linalg.eigh(0.5 * (M + M.T))


def woodbury_eig(ops, e, evals, evecs):
    """``(WQ, r, h)`` from the capacitance's eigendecomposition (``Q = 2 M^{-1}``, one ``p x k x k`` product):
    ``r_j = (WQ)_j W_j^T`` and ``h = diag(A^{-1}) = 1/e - r``."""
    Q = 2.0 * mm(evecs / evals[None, :], evecs.T)
    # the barrier keeps XLA from fusing the consumers into the product (a slow loop on CPU)
    UQ = lax.optimization_barrier(mm(ops.U, Q))
    r = jnp.sum(UQ * ops.U, axis=1) / (e * e)
    return UQ / e[:, None], r, 1.0 / e - r


def pcg(matvec, b, pdiag, rtol, max_iters):
    """Preconditioned CG for ``matvec(x) = b`` (SPD), Jacobi preconditioner ``pdiag``.

    Stops at ``||r||_{P^{-1}} <= rtol ||b||_{P^{-1}}`` or after ``max_iters`` iterations; returns ``(x, iterations)``.
    """
    x0 = jnp.zeros_like(b)
    z0 = b / pdiag
    rz0 = jnp.dot(b, z0)

    def cond(c):
        _, _, _, _, rz, i = c
        # residual in the preconditioned norm ``r^T P^{-1} r`` (scale-free: the
        # diagonal of a barrier Hessian spans many decades near the optimum)
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
