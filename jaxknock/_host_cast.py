"""Host data that JAX would round to float32 (x64 off), and its column means taken out in float64 first.

With ``jax_enable_x64`` off, ``jnp.asarray`` of a float64 (or integer) NumPy array is float32: the cast
keeps about 7 significant digits of each *raw* entry, so a column far from the origin (``x + 1e6``)
keeps a few levels of its deviations. Estimates that do not depend on a shift of a column (anything with
an intercept, covariances, correlations) take the means out on the host in float64 first, so the cast
rounds the deviations. Shared by :mod:`jaxknock._precision` (the filter, the statistics, the l1 entry
points) and :mod:`jaxknock.covariance` (which :mod:`jaxknock._precision` imports).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxknock._containers import host_numeric, object_numbers_as_float

__all__ = ["centre_columns", "finite_mean", "host_float64"]


def host_float64(a, ndims) -> np.ndarray | None:
    """``a`` as a float64 NumPy array when JAX would round it to float32, else ``None``.

    That is: x64 off, ``a`` a host array (NumPy, list; not a ``jax.Array`` or a
    tracer) of float64, integers or bools, with ``ndim`` in ``ndims`` and at least one
    entry. The callers leave non-finite input to the validation (see :func:`finite_mean`).
    """
    if isinstance(a, (jax.Array, str, bytes)) or a is None or jax.config.jax_enable_x64:
        return None
    try:
        h = object_numbers_as_float(np.asarray(host_numeric(a, "input")))  # a masked array's mask is not lost
    except (TypeError, ValueError):
        return None  # the validation names the problem
    wide = h.dtype.kind == "f" and h.dtype.itemsize > 4
    if not (wide or h.dtype.kind in "iub") or h.ndim not in ndims or h.size == 0:
        return None
    return h.astype(np.float64, copy=False)


def finite_mean(h: np.ndarray, axis: int) -> np.ndarray | None:
    """The mean of ``h`` along ``axis``; ``None`` when it is not finite (a NaN or an infinity in ``h``:
    the validation names it; a sum that overflows float64 is left alone the same way)."""
    mean = h.mean(axis=axis)
    return mean if np.isfinite(mean).all() else None


def centre_columns(X, ndims=(2,)):
    """A host ``X`` (``ndim`` in ``ndims``) less its column means (axis 0) in float64 when JAX would
    round it to float32; else ``X``.

    Device arrays, float32 input, non-finite input (named later by the validation) and x64 runs pass
    through untouched (the same object).
    """
    Xh = host_float64(X, ndims)
    if Xh is None or (mean := finite_mean(Xh, 0)) is None:
        return X
    return Xh - mean
