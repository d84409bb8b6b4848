"""Pieces shared by the modules of :mod:`jaxknock.lifted` (private to the package).

Full-precision column sums, the inner-solve counters :class:`Info` that every
block step reports, the relative change used as a stopping measure, FISTA's
momentum sequence and the safeguard that accepts a block only when it does not
increase its subproblem objective.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["HI", "Info", "colsum", "mm", "fista_next", "guard", "rel_change", "sum_infos", "zero_info"]

HI = lax.Precision.HIGHEST


def mm(a, b):
    """``a @ b`` at full precision (``Precision.HIGHEST``).

    Every product of the lifted solvers goes through this: the inner solves
    stop at relative tolerances down to 1e-4 (float32) and 1e-8 (float64),
    below the ~1e-3 relative error of the default GPU precision (TF32 on
    Ampere/Hopper, bf16 passes on TPU). On the CPU HIGHEST is the default, so
    the results do not change there (tests/test_backend.py).
    """
    return jnp.matmul(a, b, precision=HI)


def colsum(A):
    """Column sums ``1^T A`` as a matrix-vector product.

    Used in the per-unit line searches of the W-blocks, where a product is
    cheaper than an XLA:CPU reduction (measurements: ``benchmarks/measured/NOTES.md``,
    "lifted"); full precision, so that no GPU rounds the sum through TF32.
    """
    return jnp.matmul(jnp.ones(A.shape[:1], A.dtype), A, precision=HI)


class Info(NamedTuple):
    """Counts of the inner solves of a block step (summed over blocks with ``+``)."""

    steps: jax.Array  # int32 total inner iterations
    failures: jax.Array  # int32 number of solves that missed the tolerance
    solves: jax.Array  # int32 number of solves

    @staticmethod
    def one(steps, converged):
        return Info(
            jnp.asarray(steps, jnp.int32),
            jnp.asarray(~converged, jnp.int32),
            jnp.asarray(1, jnp.int32),
        )

    def __add__(self, other):  # type: ignore[override]
        return Info(*(a + b for a, b in zip(self, other)))


def zero_info():
    """No solves yet."""
    return Info(jnp.int32(0), jnp.int32(0), jnp.int32(0))


def sum_infos(infos):
    """The sum of a sequence of :class:`Info`."""
    out = zero_info()
    for i in infos:
        out = out + i
    return out


def rel_change(new, old):
    """``||new - old|| / ||new||`` (the denominator kept away from zero)."""
    num = jnp.sqrt(jnp.sum((new - old) ** 2))
    den = jnp.maximum(jnp.sqrt(jnp.sum(new**2)), jnp.finfo(new.dtype).tiny ** 0.5)
    return num / den


def fista_next(t):
    """FISTA's ``t_{k+1}`` and the momentum weight ``(t_k - 1) / t_{k+1}``."""
    t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
    return t_next, (t - 1.0) / t_next


def guard(value_fn, z_new, z_old):
    """Keep the old block unless the new one does not increase the block objective."""
    f_new = value_fn(z_new)
    f_old = value_fn(z_old)
    ok = f_new <= f_old
    return jnp.where(ok, z_new, z_old), jnp.isfinite(f_new)
