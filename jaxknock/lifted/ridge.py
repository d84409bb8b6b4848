r"""Ridge systems of the W-blocks: primal (Cholesky) and kernel (Woodbury) forms.

Every W-block step is a ridge regression with a fixed system

.. math::

    \min_\Theta\; \frac s2 \|A\Theta - T\|_F^2 + c_w\|W - \tilde W_0\|_F^2 + c_b\|b - b_0\|^2,
    \qquad A = [X, 1],\; \Theta = [W; b^T],

whose factorisation is computed once per W-step: the ``(p+1) x (p+1)``
Cholesky factor of ``s A^T A + 2 diag(c)`` (:func:`primal_ridge`) or, for
batches not wider than the layer input, the ``N x N`` kernel inverse
``((2/s) I + X X^T / c_w + 1 1^T / c_b)^{-1}`` (:func:`kernel_ridge`), whose
iterates carry their kernel coefficients (one ``N x N`` product per step).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from jaxknock.lifted._common import HI, colsum, mm

__all__ = [
    "Ridge",
    "gram_blocks",
    "kernel_factor",
    "kernel_ridge",
    "primal_factor",
    "primal_ridge",
    "ridge_weights",
    "stack_theta",
]


class Ridge(NamedTuple):
    """``min_Theta (s/2)||A Theta - T||^2 + c_w||W - W0t||^2 + c_b||b - b0t||^2``.

    ``A = [X, 1]``; the iterate ``z`` is ``Theta = [W; b^T]`` (primal form) or
    the pair ``(z, alpha = Minv z)`` of a target offset ``z = T - U_base`` and
    its kernel coefficients, ``Theta = Theta0t + C^{-1} A^T alpha`` (Woodbury
    form, for ``N <= p``); the iterations combine iterates and directions leaf
    by leaf (``jax.tree``).
    """

    U_of: Any
    solve: Any
    reg_of: Any
    theta_of: Any
    # U_lin(D) = U(z + D) - U(z): the image of a direction (computed directly, so
    # that small directions are not differences of large predictions);
    # reg_line(z, U(z), D, U_lin(D)) -> (b, c) per column (output unit), with
    # reg(z + t D) = reg(z) + 2 t b + t^2 c.
    U_lin: Any = None
    reg_line: Any = None
    # step(T, z) = solve(T) - z, formed so that a small step is not the
    # difference of two large solutions (the kernel pair: Minv applied to the
    # difference of targets)
    step: Any = None


def stack_theta(W, b):
    """``Theta = [W; b^T]``."""
    return jnp.concatenate([W, b[None, :]], axis=0)


def gram_blocks(X):
    """``(X^T X, X^T 1)``: the Gram blocks of ``A = [X, 1]``."""
    return jnp.matmul(X.T, X, precision=HI), jnp.sum(X, axis=0)


def _ridge_diag(p, c_w, c_b, dtype):
    return jnp.concatenate([jnp.full((p,), c_w, dtype), jnp.reshape(c_b, (1,)).astype(dtype)])


def primal_factor(X, s, c_w, c_b, gram=None):
    """Cholesky factor of ``s A^T A + 2 diag(c)``, ``A = [X, 1]`` (lower)."""
    N, p = X.shape
    dtype = X.dtype
    G, xs = gram_blocks(X) if gram is None else gram
    top = jnp.concatenate([G, xs[:, None]], axis=1)
    bot = jnp.concatenate([xs, jnp.asarray([N], dtype)])[None, :]
    H = s * jnp.concatenate([top, bot], axis=0) + 2.0 * jnp.diag(_ridge_diag(p, c_w, c_b, dtype))
    # The jitter only enlarges the curvature model (still a majoriser) and keeps
    # the factorisation well defined for rank-deficient data with rho = 0.
    jitter = 10.0 * jnp.finfo(dtype).eps * jnp.trace(H) / (p + 1)
    return jnp.linalg.cholesky(H + jitter * jnp.eye(p + 1, dtype=dtype))


def primal_ridge(X, s, c_w, c_b, W0t, b0t, gram=None, factor=None) -> Ridge:
    """The :class:`Ridge` system in the primal ``Theta`` form (Cholesky ``factor`` if precomputed)."""
    p = X.shape[1]
    cdiag = _ridge_diag(p, c_w, c_b, X.dtype)
    chol = (primal_factor(X, s, c_w, c_b, gram) if factor is None else factor, True)
    theta0 = stack_theta(W0t, b0t)

    def U_of(theta):
        return mm(X, theta[:-1]) + theta[-1]

    def solve(T):
        rhs = s * jnp.concatenate([mm(X.T, T), jnp.sum(T, axis=0)[None]], axis=0)
        return cho_solve(chol, rhs + 2.0 * cdiag[:, None] * theta0)

    def reg_of(theta):
        return jnp.sum(cdiag[:, None] * (theta - theta0) ** 2)

    def reg_line(theta, U, D, UD):
        return (colsum(cdiag[:, None] * (theta - theta0) * D), colsum(cdiag[:, None] * D * D))

    return Ridge(U_of, solve, reg_of, lambda theta: theta, U_of, reg_line, lambda T, theta: solve(T) - theta)


def kernel_factor(X, s, c_w, c_b):
    """``Minv = (K + (2/s) I)^{-1}`` with ``K = X X^T / c_w + 1 1^T / c_b``."""
    N = X.shape[0]
    K = jnp.matmul(X, X.T, precision=HI) / c_w + 1.0 / c_b
    eye = jnp.eye(N, dtype=X.dtype)
    # (2/s) I + K has condition number 1 + s ||K|| / 2, modest for the batch sizes
    # this form is used for, so an explicit inverse is accurate. It is formed as
    # L^{-T} L^{-1} from the Cholesky factor: one triangular solve and one
    # product (faster on CPU than two triangular solves against I; see
    # benchmarks/measured/NOTES.md, "lifted").
    Linv = solve_triangular(jnp.linalg.cholesky(K + (2.0 / s) * eye), eye, lower=True)
    return jnp.matmul(Linv.T, Linv, precision=HI)


def kernel_ridge(X, s, c_w, c_b, W0t, b0t, U_base, factor=None) -> Ridge:
    """The :class:`Ridge` system in the kernel (Woodbury) form (``Minv`` ``factor`` if precomputed)."""
    Minv = kernel_factor(X, s, c_w, c_b) if factor is None else factor
    # The iterate is the pair (z, alpha) with z = T - U_base and alpha = Minv z
    # (the kernel coefficients); as K Minv = I - (2/s) Minv,
    # U = U_base + z - (2/s) alpha. Each solve is one N x N product, and the
    # pair is carried through the (linear) updates of the iterations, so that
    # neither U nor the weights ever need another product with Minv, and the
    # coefficients of a direction are exact (not recovered from a difference
    # of predictions).

    def U_lin(D):
        return D[0] - (2.0 / s) * D[1]

    def U_of(z):
        return U_base + U_lin(z)

    def solve(T):
        z = T - U_base
        return z, mm(Minv, z)

    def step(T, z):
        d = T - U_base - z[0]
        return d, mm(Minv, d)

    def reg_of(z):
        return jnp.vdot(z[1], U_lin(z), precision=HI)  # alpha^T K alpha

    def theta_of(z):
        alpha = z[1]
        return stack_theta(W0t + mm(X.T, alpha) / c_w, b0t + colsum(alpha) / c_b)

    def reg_line(z, U, D, UD):
        # reg = alpha^T K alpha with K alpha = U(z) - U_base and K alpha_D = U_lin(D):
        # a quadratic in t along z + t D with per-column coefficients
        alpha_D = D[1]
        return colsum(alpha_D * (U - U_base)), colsum(alpha_D * UD)

    return Ridge(U_of, solve, reg_of, theta_of, U_lin, reg_line, step)


def ridge_weights(rho, gamma):
    """``(c_w, c_b)``: the weights of ``||W - W0t||^2`` and ``||b - b0||^2`` in a W-block."""
    return rho + gamma, gamma
