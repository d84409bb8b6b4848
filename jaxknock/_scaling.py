"""Exact power-of-two rescaling: sums of squares that stay in the floating range, whatever the units.

Scaling data by a power of two changes no bit of a product, a sum or a square root
(away from the subnormal range), so a statistic computed on ``X / 2^e`` and scaled back is
the plain statistic wherever that was representable, and stays finite where the plain one
overflowed (``|x| >~ 1e154`` in float64, ``1e19`` in float32) or flushed to zero.
Dividing by the data's own magnitude instead would round every entry.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["correlation_of", "pow2", "pow2_exponent", "scale_pow2", "standardise_columns"]

_INT_OF_WIDTH = {2: np.int16, 4: np.int32, 8: np.int64}


def pow2_exponent(a):
    """``e`` with ``a / 2^e`` in ``[0.5, 1)`` (``0`` where ``a`` is 0): scaling by ``2^-e`` is exact."""
    return jnp.frexp(a)[1]


def pow2(e, dtype):
    """Exactly ``2^e`` in the floating ``dtype``, for integers ``e`` in the normal range ``[minexp, maxexp - 1]``.

    Built from the exponent bits, ``(e - minexp + 1) << nmant``: no ``exp2`` or ``pow``, whose results
    for integer arguments are exact only as far as the backend's implementation goes.
    """
    info = jnp.finfo(dtype)
    itype = _INT_OF_WIDTH[jnp.dtype(dtype).itemsize]
    bits = lax.shift_left(jnp.asarray(e).astype(itype) - itype(info.minexp - 1), itype(info.nmant))
    return lax.bitcast_convert_type(bits, dtype)


def scale_pow2(a, e):
    """``a * 2^e`` for integer ``e`` (broadcasting against ``a``): ``jnp.ldexp``'s value, at a multiplication's cost.

    ``jnp.ldexp`` takes every entry apart (``frexp``, a ``pow``, selects): 7.5 ns an entry in float64 on
    XLA:CPU, 10x a multiplication, and one pass over a ``4000 x 500`` design took 15 ms of a 70 ms
    :func:`jaxknock.lasso` (``benchmarks/measured/NOTES.md``, session 63). Here ``a`` is multiplied by
    ``2^{e_1}`` and then by ``2^{e_2}``, with ``e_1 = clip(e)`` to the normal exponents and ``e_2 = e - e_1``
    (clipped too; ``1`` unless ``|e|`` leaves the normal range): each product by a power of two is exact
    where the result is a normal number, so the answer is ``jnp.ldexp``'s to the bit there, and 0, +-Inf
    and NaN are kept. Subnormal results follow the backend (XLA:CPU flushes them to zero, as its
    ``ldexp`` does).
    """
    a = jnp.asarray(a)
    info = jnp.finfo(a.dtype)
    lo, hi = int(info.minexp), int(info.maxexp) - 1
    e = jnp.asarray(e)
    e1 = jnp.clip(e, lo, hi)
    e2 = jnp.clip(e - e1, lo, hi)
    return a * pow2(e1, a.dtype) * pow2(e2, a.dtype)


def standardise_columns(X):
    """``(X_j - mean_j) / std_j`` for every column, on ``X_j / 2^{e_j}`` with ``max |X_j / 2^{e_j}|`` in ``[0.5, 1)``.

    The result does not depend on the units of any column: a column times ``1e200``
    or ``1e-160`` (whose squared deviations overflow or flush to zero) is standardised
    like the column itself. A constant column divides ``0 / 0`` (NaN), as the plain
    expression does; callers reject those first.
    """
    X = scale_pow2(X, -pow2_exponent(jnp.max(jnp.abs(X), axis=0)))
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
