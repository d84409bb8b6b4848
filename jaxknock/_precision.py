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

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._checks import HOST_FLOATS
from jaxknock._host_cast import centre_columns, finite_mean, host_float64
from jaxknock._solution import Solution
from jaxknock.covariance import FactorModel

__all__ = [
    "HostShift",
    "cast_floats",
    "centre_before_cast",
    "centre_for_fit",
    "shift_response_mean",
    "solve_s_float64",
    "uncentred_intercept",
]


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
    if mu is None:
        return centre_columns(X), None
    Xh = host_float64(X, (2,))
    if Xh is None or finite_mean(Xh, 0) is None:
        return X, mu
    mh = np.asarray(mu, dtype=np.float64) if np.asarray(mu).dtype.kind in "fiu" else None
    if mh is None or mh.shape != (Xh.shape[1],) or not np.isfinite(mh).all():
        return X, mu  # checked (and named) by _filter_inputs.standardise_by_law
    return Xh - mh, np.zeros_like(mh)


# a continuous y is shifted only when its mean is at least 2^7 times its spread: its deviations then hold
# 7 bits fewer than its entries, which a float32 cast rounds and a lasso's magnitude floors read wrongly
_RESPONSE_SHIFT_BITS = 8


def shift_response_mean(y):
    """A continuous ``y`` whose mean dwarfs its spread, with that mean taken out in ``y``'s own precision.

    Every statistic of the filter on a continuous ``y`` (the lasso statistics fit an intercept, the
    marginal correlation centres) is invariant to a shift of ``y``, but two steps read its raw entries:
    the cast of a float64 ``y`` to a float32 design's dtype keeps about 7 significant digits of each
    entry (``1e8 + e`` with ``e`` of spread ~10, float32 spacing 8, kept a few levels of ``e``: statistics
    off by half, nulls selected, every fit ``successful``), and in float64 the lasso's rounding floors are
    relative to ``max |y|`` (``1e15 + e``: the cross-validated ``lcd`` chose ``lam = 4.5``, above every
    feature, and returned ``W = 0``, ``successful``). Here ``y`` loses ``c``, its mean rounded to a multiple
    of ``2^(e + 8)`` (``2^e > max |y - mean|``), so ``c = 0`` -- ``y`` untouched, the same object -- unless
    the mean is at least ``2^7`` times the spread, and after the shift the mean is below that (the
    subtraction is exact to ``y``'s own rounding). A NumPy ``y`` stays NumPy; a concrete JAX array is
    read on the host (its ``n`` entries: a dozen eager device operations were as many compiled programs in
    a fresh process) and, if shifted, shifted on the device; a tracer is shifted on the device. A constant
    or non-finite ``y`` (refused by the validation; NaN under ``jit``) is not shifted.
    """
    if not hasattr(y, "dtype") or not jnp.issubdtype(y.dtype, jnp.floating) or np.ndim(y) != 1 or np.size(y) == 0:
        return y
    if isinstance(y, jax.core.Tracer) or not (isinstance(y, np.ndarray) or np.dtype(y.dtype) in HOST_FLOATS):
        shift, keep = _response_shift(y, jnp)
        return jnp.where(keep, y, y - shift)
    shift, keep = _response_shift(np.asarray(jax.device_get(y)), np)  # explicit: n values, once
    if keep:
        return y
    return y - shift if isinstance(y, np.ndarray) else y - float(shift)  # a Python float keeps y's dtype (exact)


def _response_shift(y, xp):
    """``(shift, keep)`` of :func:`shift_response_mean`, in ``y``'s dtype, by NumPy or jax.numpy (``xp``)."""
    mean = xp.mean(y)
    spread = xp.max(xp.abs(y - mean))
    unit = xp.ldexp(xp.ones((), y.dtype), xp.frexp(spread)[1] + _RESPONSE_SHIFT_BITS)
    shift = xp.round(mean / unit) * unit
    keep = (shift == 0) | ~xp.isfinite(shift) | ~(spread > 0)
    return shift, keep


class HostShift(NamedTuple):
    """The float64 means :func:`centre_for_fit` took out on the host (``None``: nothing taken out)."""

    x_mean: np.ndarray | None = None  # (..., m) column means of X
    y_mean: np.ndarray | None = None  # (...,) mean of y

    @property
    def applied(self) -> bool:
        return self.x_mean is not None or self.y_mean is not None


def centre_for_fit(X, y, *, centre_y: bool):
    """``(X, y, shift)``: a model with an intercept fitted to host data centred in float64 first.

    :func:`centre_before_cast` for a regression whose fit is invariant to a
    shift of the columns of ``X`` (any model with an unpenalised intercept) and,
    with ``centre_y`` (least squares with an intercept), of ``y``: a float64
    or integer NumPy ``X`` of shape ``(n, m)`` or ``(R, n, m)`` (``y``:
    ``(n,)`` or ``(R, n)``) loses its column means (its mean) in float64
    before JAX rounds it to float32, so the cast rounds the deviations. Only
    with x64 off; device arrays, tracers, float32 and non-finite input pass
    through. ``shift`` says what was taken out; :func:`uncentred_intercept`
    puts it back into the intercept.
    """
    x_mean = y_mean = None
    Xh = host_float64(X, (2, 3))
    if Xh is not None and (x_mean := finite_mean(Xh, -2)) is not None:
        X = Xh - x_mean[..., None, :]
    yh = host_float64(y, (1, 2)) if centre_y else None
    if yh is not None and (y_mean := finite_mean(yh, -1)) is not None:
        y = yh - y_mean[..., None]
    return X, y, HostShift(x_mean, y_mean)


def uncentred_intercept(intercept, coef, shift: HostShift) -> np.ndarray:
    """The intercept of the model on the caller's data, ``b0 + mean(y) - mean(X) @ coef``, in float64.

    ``intercept`` ``(...)`` and ``coef`` ``(..., m)`` are a fit to the data
    :func:`centre_for_fit` centred (``shift``); a batch ``(R, ...)`` of fits
    has ``shift`` means with the leading ``R``, and a path ``(..., L)`` of
    intercepts ``(..., L, m)`` coefficients. Computed on the host in float64
    from the coefficients as they are (float32), so that
    ``X @ coef + intercept`` reproduces the fitted predictions on the
    original ``X`` exactly up to float64 rounding; a float32 intercept
    could not (at ``mean(X) = 1.7e9`` and ``sum(coef) = 0.1`` its spacing is 16).
    NaN entries (an unsolved point of a path) stay NaN. A traced fit (host data
    with a traced grid or ``tol`` under ``jit``) has no values to read: there the
    same formula runs on the device in the fit's dtype.
    """
    if isinstance(intercept, jax.core.Tracer) or isinstance(coef, jax.core.Tracer):
        xp, dtype = jnp, jnp.result_type(intercept)  # was a TracerArrayConversionError
        b0, c = jnp.asarray(intercept), jnp.asarray(coef)
    else:
        xp, dtype = np, np.float64
        b0 = np.asarray(jax.device_get(intercept), np.float64)
        c = np.asarray(jax.device_get(coef), np.float64) if shift.x_mean is not None else None
    extra = b0.ndim - (0 if shift.y_mean is None else np.ndim(shift.y_mean))
    if shift.y_mean is not None:
        b0 = b0 + xp.asarray(np.reshape(shift.y_mean, np.shape(shift.y_mean) + (1,) * extra), dtype)
    if shift.x_mean is not None:
        xm = shift.x_mean
        xm = np.reshape(xm, xm.shape[:-1] + (1,) * (c.ndim - xm.ndim) + xm.shape[-1:])
        b0 = b0 - xp.sum(c * xp.asarray(xm, dtype), axis=-1)
    return b0
