"""Precision policy: float64 only inside the knockoff S solve; everything else follows ``X``'s dtype.

Why the S solve needs float64: its solvers (barrier coordinate ascent,
Newton, the factor-model SDP) work next to the boundary of feasibility, where
``2 Sigma - diag(s)`` is nearly singular. Their rank-one Cholesky updates,
certified duality gaps (relative ``1e-4``) and minimum-eigenvalue
certificates lose every digit in float32 (eps ``1.2e-7`` against condition
numbers of ``1e4``-``1e8``). The rest of the pipeline does not: sampling is a
conditional mean and a noise product (errors of a few float32 ulps, far below
the ``1/sqrt(n)`` sampling error), and the statistics are lasso fits or
correlations solved to a relative tolerance of ``1e-4``. On GPUs float64 is
8-60x slower than float32 and doubles the memory that bounds the replicate
chunk, so the pipeline keeps a float32 design in float32 and upcasts only the
covariance handed to the S solver, casting ``s`` back.

With ``jax_enable_x64`` off, the solve runs inside ``jax.enable_x64(True)``
(a scoped switch), so a float32 design never needs the global flag.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._solution import Solution
from jaxknock.covariance import FactorModel

__all__ = ["cast_floats", "centre_before_cast", "solve_s_float64"]


def _needs_cast(a, dtype) -> bool:
    """``a`` is a floating array of another dtype than ``dtype``."""
    return hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating) and a.dtype != dtype


def cast_floats(tree, dtype):
    """Every floating leaf of ``tree`` (arrays, ``BlockDiagonal``, ...) cast to ``dtype``; others untouched."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype) if _needs_cast(a, dtype) else a, tree)


# one small program each (eager casts compile one program per operation: in a fresh process
# with an empty compilation cache the four of the upcast and the cast back took 0.24 s)
_cast_floats = jax.jit(cast_floats, static_argnums=1)


@jax.jit
def _upcast(Sigma):
    """``Sigma`` (matrix or :class:`FactorModel`, not already float64: see :func:`_is_float64`) in float64;
    a lower-precision matrix is symmetrised exactly."""
    if isinstance(Sigma, FactorModel):
        return FactorModel(jnp.asarray(Sigma.d, jnp.float64), jnp.asarray(Sigma.U, jnp.float64))
    # a float32 estimate is symmetric only up to its own rounding; the solvers check symmetry to 1e-8
    S64 = Sigma.astype(jnp.float64)
    return 0.5 * (S64 + jnp.swapaxes(S64, -1, -2))


def _is_float64(Sigma) -> bool:
    leaves = (Sigma.d, Sigma.U) if isinstance(Sigma, FactorModel) else (Sigma,)
    return all(getattr(a, "dtype", None) == jnp.float64 for a in leaves)


def _all_of(tree, dtype) -> bool:
    """No leaf of ``tree`` needs a cast to ``dtype`` (:func:`cast_floats` would change nothing)."""
    return not any(_needs_cast(a, dtype) for a in jax.tree_util.tree_leaves(tree))


def solve_s_float64(solver, Sigma, *args, dtype, **kwargs) -> Solution:
    """``solver(Sigma, ...)`` in float64, with ``value`` (``s`` or ``S``) cast back to ``dtype``.

    ``Sigma`` is a covariance matrix or a :class:`FactorModel` in any floating
    dtype; ``stats`` stay in float64 (diagnostics: gaps, objectives).
    """
    with jax.enable_x64(True):
        up = Sigma if _is_float64(Sigma) else _upcast(Sigma)
        sol = solver(up, *args, **kwargs)
        value = sol.value if _all_of(sol.value, dtype) else _cast_floats(sol.value, jnp.dtype(dtype))
    return sol._replace(value=value)


def centre_before_cast(X, mu=None):
    """``(X, mu)``: a host ``X`` centred in float64 when JAX would round it to float32.

    With x64 off, a float64 (or integer) NumPy ``X`` is cast to float32 on its
    way to the device, and the cast keeps about 7 significant digits of each
    *raw* entry: a column of epoch seconds (``~1.7e9``, float32 spacing 128)
    that varies by minutes keeps a handful of levels, and the selection
    depends on an arbitrary offset. Every estimate of the filter is invariant
    to a shift of a column, so the shift (``mu`` when given, then returned as
    zeros; else the column means) is taken out in float64 first and the cast
    rounds the deviations, ``x_ij - mean_j``. Device arrays, float32 input,
    non-finite input (rejected later by the validation) and x64 runs pass
    through untouched.
    """
    if isinstance(X, (jax.Array, str, bytes)) or X is None or jax.config.jax_enable_x64:
        return X, mu
    try:
        Xh = np.asarray(X)
    except (TypeError, ValueError):
        return X, mu  # the validation names the problem
    wide = Xh.dtype.kind == "f" and Xh.dtype.itemsize > 4
    if not (wide or Xh.dtype.kind in "iu") or Xh.ndim != 2 or Xh.size == 0:
        return X, mu
    Xh = Xh.astype(np.float64)
    if not np.isfinite(Xh).all():
        return X, mu
    if mu is None:
        return Xh - Xh.mean(axis=0), None
    mh = np.asarray(mu, dtype=np.float64) if np.asarray(mu).dtype.kind in "fiu" else None
    if mh is None or mh.shape != (Xh.shape[1],) or not np.isfinite(mh).all():
        return X, mu  # checked (and named) by _standardise
    return Xh - mh, np.zeros_like(mh)
