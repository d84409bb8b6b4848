"""Exact power-of-two rescaling: sums of squares that stay in the floating range, whatever the units.

Scaling data by a power of two changes no bit of a product, a sum or a square root
(away from the subnormal range), so a statistic computed on ``X / 2^e`` and scaled back is
the plain statistic wherever that was representable, and stays finite where the plain one
overflowed (``|x| >~ 1e154`` in float64, ``1e19`` in float32) or flushed to zero.
Dividing by the data's own magnitude instead would round every entry.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["correlation_of", "pow2_exponent", "standardise_columns"]


def pow2_exponent(a):
    """``e`` with ``a / 2^e`` in ``[0.5, 1)`` (``0`` where ``a`` is 0): scaling by ``2^-e`` is exact."""
    return jnp.frexp(a)[1]


def standardise_columns(X):
    """``(X_j - mean_j) / std_j`` for every column, on ``X_j / 2^{e_j}`` with ``max |X_j / 2^{e_j}|`` in ``[0.5, 1)``.

    The result does not depend on the units of any column: a column times ``1e200``
    or ``1e-160`` (whose squared deviations overflow or flush to zero) is standardised
    like the column itself. A constant column divides ``0 / 0`` (NaN), as the plain
    expression does; callers reject those first.
    """
    X = jnp.ldexp(X, -pow2_exponent(jnp.max(jnp.abs(X), axis=0)))
    return (X - jnp.mean(X, axis=0)) / jnp.std(X, axis=0)


def correlation_of(Sigma):
    """``D^{-1/2} Sigma D^{-1/2}`` (``D = diag(Sigma)``, batched over leading axes) with exact ones on the diagonal.

    The arithmetic of :func:`jaxknock.to_correlation` without its checks (the S solvers' scale); also used by
    the eager check that ``Sigma`` factorises at that scale (``jaxknock._checks``), so both see the same bits.
    """
    d = jnp.sqrt(jnp.diagonal(Sigma, axis1=-2, axis2=-1))
    C = Sigma / (d[..., :, None] * d[..., None, :])
    p = Sigma.shape[-1]
    return jnp.where(jnp.eye(p, dtype=bool), jnp.ones((), Sigma.dtype), C)  # not 1 +- 1 ulp
