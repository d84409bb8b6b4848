"""Exact power-of-two rescaling: sums of squares that stay in the floating range, whatever the units.

Scaling data by a power of two changes no bit of a product, a sum or a square root
(away from the subnormal range), so a statistic computed on ``X / 2^e`` and scaled back is
the plain statistic wherever that was representable, and stays finite where the plain one
overflowed (``|x| >~ 1e154`` in float64, ``1e19`` in float32) or flushed to zero.
Dividing by the data's own magnitude instead would round every entry.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["pow2_exponent", "standardise_columns"]


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
