"""Shared pieces of the knockoff samplers: HIGHEST-precision products, column means, PSD factors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock.covariance import FactorFit, FactorModel

__all__ = ["HIGHEST", "column_means", "correlation_scale", "is_factor_pair", "mm", "psd_factor", "psd_factor_checked"]

HIGHEST = lax.Precision.HIGHEST


def is_factor_pair(law) -> bool:
    """A plain ``(d, U)`` pair (``d`` 1-D, ``U`` 2-D), as :func:`~jaxknock.sample_knockoffs_factor` takes.

    Not a :class:`~jaxknock.FactorModel` or :class:`~jaxknock.FactorFit` (named tuples of two), not a 2 x 2
    nested list, and ``False`` for a ragged nested list (NumPy's ``np.ndim`` of it raises).
    """
    if not isinstance(law, (tuple, list)) or isinstance(law, (FactorModel, FactorFit)) or len(law) != 2:
        return False
    try:
        return np.ndim(law[0]) == 1 and np.ndim(law[1]) == 2
    except ValueError:
        return False


def mm(a, b):
    """``a @ b`` at ``precision=HIGHEST`` (see the precision note of :mod:`jaxknock.sampling`)."""
    return jnp.matmul(a, b, precision=HIGHEST)


def column_means(X):
    # a GEMV: XLA's CPU reduction over the leading axis is much slower (benchmarks/measured/NOTES.md, core)
    return mm(jnp.ones(X.shape[0], X.dtype), X) / X.shape[0]


def correlation_scale(Sigma, S):
    """``(d, C, S_c)``: ``d = sqrt(diag Sigma)``, ``C = Sigma / d d^T``, ``S_c = D^-1 S D^-1`` (``S`` vector or matrix).

    The dense samplers factorise ``Omega = D Omega_c D`` through the correlation-scale
    ``Omega_c = c S_c - S_c C^{-1} S_c``: the ridge and tolerances of :func:`psd_factor` are
    relative to the largest diagonal entry, which on the covariance scale swamps every
    variable whose variance is many orders of magnitude smaller (variances 1e-6 .. 1e6 gave
    knockoff covariances wrong by a factor 1e8 with no error). A unit diagonal gives
    ``d = 1`` and the same numbers bit for bit.
    """
    d = jnp.sqrt(jnp.diagonal(Sigma))
    C = Sigma / (d[:, None] * d[None, :])
    S_c = S / (d * d) if S.ndim == 1 else S / (d[:, None] * d[None, :])
    return d, C, S_c


def psd_factor(Omega, feasible=None):
    """A with ``A A^T = Omega`` for a matrix that is PSD up to rounding; never NaN for feasible ``s``.

    Tries the Cholesky factor of ``Omega + tau I`` with ``tau = p eps max(diag)``
    (a variance change far below sampling error). If that fails (Omega singular or
    slightly indefinite beyond the jitter), falls back to the eigendecomposition
    with negative eigenvalues clipped to 0, i.e. the factor of the nearest PSD
    matrix in Frobenius norm. Clipping is right only for rounding: on that
    branch ``feasible()`` (a traced flag, evaluated only there) decides, and an
    infeasible ``s`` gets an all-NaN factor, so every knockoff it produces is NaN.
    """
    Omega, L = _ridged_cholesky(Omega)

    def eig_factor():
        lam, Q = jnp.linalg.eigh(Omega)
        A = Q * jnp.sqrt(jnp.clip(lam, 0.0))
        return A if feasible is None else jnp.where(feasible(), A, jnp.nan)

    return lax.cond(jnp.all(jnp.isfinite(L)), lambda: L, eig_factor)


def _ridged_cholesky(Omega):
    """The symmetrised ``Omega`` and its Cholesky factor with a ``p eps max|diag|`` ridge (NaN if indefinite)."""
    p = Omega.shape[-1]
    eps = jnp.finfo(Omega.dtype).eps
    Omega = 0.5 * (Omega + Omega.T)
    tau = p * eps * jnp.max(jnp.abs(jnp.diagonal(Omega)))
    return Omega, jnp.linalg.cholesky(Omega + tau * jnp.eye(p, dtype=Omega.dtype))


def psd_factor_checked(Omega, tol):
    """``(A, ok)``: :func:`psd_factor` and whether ``lambda_min(Omega) >= -tol``."""
    Omega, L = _ridged_cholesky(Omega)

    def eig_factor():
        lam, Q = jnp.linalg.eigh(Omega)
        return Q * jnp.sqrt(jnp.clip(lam, 0.0)), lam[0] >= -tol

    return lax.cond(jnp.all(jnp.isfinite(L)), lambda: (L, jnp.asarray(True)), eig_factor)
