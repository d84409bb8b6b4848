"""Elementwise helpers shared by the sparse naive Bayes solvers (package-private)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["xlogy", "class_sum", "float_tiny"]


def xlogy(x, y):
    """``x log y`` with ``0 log 0 = 0`` for ``y >= 0`` that is zero only where ``x`` is.

    (Not ``jax.scipy.special.xlogy``: its select blocks the vectorised log on CPU;
    see benchmarks/measured/NOTES.md.)
    """
    return x * jnp.log(jnp.maximum(y, jnp.finfo(jnp.result_type(y)).tiny))


def class_sum(x, weights=None):
    """``sum_c weights_c x[c]`` over the (small) leading class axis.

    XLA on CPU reduces a short leading axis poorly (benchmarks/measured/NOTES.md),
    so the sum is unrolled for a few classes and a matrix-vector product otherwise.
    """
    C = x.shape[0]
    if C <= 16:
        terms = [x[c] if weights is None else weights[c] * x[c] for c in range(C)]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out
    w = jnp.ones((C,), x.dtype) if weights is None else weights
    return jnp.matmul(w, x, precision=lax.Precision.HIGHEST)


def float_tiny(dtype):
    """Smallest positive normal number of ``dtype`` (guards logs of zero)."""
    return jnp.finfo(dtype).tiny
