"""Closed-form S-vectors: equicorrelated knockoffs."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxknock import _checks, _sigma_checks
from jaxknock._solution import RESULTS, Solution
from jaxknock.covariance import to_correlation
from jaxknock.svector import _common
from jaxknock.svector.certificate import smallest_eigenvalue

__all__ = ["equicorrelated"]


def equicorrelated(Sigma, *, num_knockoffs: int = 1) -> Solution:
    r"""Equicorrelated knockoffs: ``s_j = min(1, 2 lambda_min(Sigma))`` for all j.

    With ``m = num_knockoffs`` simultaneous knockoffs (Gimenez & Zou 2019) the
    constraint is ``diag(s) <= (m+1)/m Sigma`` and ``s_j = min(1, (m+1)/m lambda_min)``
    (``m = 1``: the formula above, bit for bit).

    The largest constant ``s`` with ``diag(s) <= 2 Sigma`` (on the correlation
    scale; mapped back by ``diag(Sigma)``). For an equicorrelated ``Sigma``
    with correlation ``rho >= 0`` this is also the SDP optimum,
    ``min(1, 2(1 - rho))``. Cost: one tridiagonal reduction of ``C`` and a
    bisection for its smallest eigenvalue (no eigenvectors; same value as
    ``eigvalsh`` to rounding), plus the validation of ``Sigma`` (one device-side
    reduction with a Cholesky test). Any floating dtype; ``min_eig`` is exact
    (``2 lambda_min(C) - s_j``).

    Args:
        Sigma: ``(p, p)`` covariance / correlation matrix (or a batch).

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``
        ``{objective, min_eig, num_steps=0, max_steps=0}``.

    Under jit (value checks skipped): ``result`` is ``nonfinite`` for a
    ``Sigma`` with NaN/Inf, and ``infeasible`` for a non-symmetric one, one
    with a non-positive diagonal, or one whose smallest correlation eigenvalue
    is negative beyond rounding (``< -16 p eps lambda_max``: no ``s >= 0``
    satisfies ``diag(s) <= 2 Sigma``); ``s`` is then all NaN in every
    case (as the other solvers), never a plausible vector.
    Eagerly these inputs raise ``ValueError``.

    Example:
        >>> s = equicorrelated(jnp.eye(3)).value   # [1., 1., 1.]
    """
    m = _checks.check_num_knockoffs(num_knockoffs)
    Sigma = _sigma_checks.validate_sigma(Sigma, need_x64=False)
    return _equicorrelated(Sigma, (m + 1.0) / m)


@jax.jit
def _equicorrelated(Sigma, c=2.0):
    C = to_correlation(Sigma)
    lmin = smallest_eigenvalue(C)
    # negative beyond the rounding of a PSD matrix's eigenvalues: Sigma is not PSD
    # (the largest absolute row sum bounds |lambda_max| without a full eigendecomposition)
    scale = jnp.max(jnp.sum(jnp.abs(C), axis=-1), axis=-1)
    # (False for NaN eigenvalues, i.e. NaN input, whose code the input check gives: nonfinite)
    psd = lmin >= -16.0 * Sigma.shape[-1] * jnp.finfo(C.dtype).eps * scale
    val = jnp.clip(c * lmin, 0.0, 1.0)
    p = Sigma.shape[-1]
    s_corr = jnp.broadcast_to(val[..., None], Sigma.shape[:-1])
    # infeasible with a NaN s (not s = 0, clipped from lambda_min < 0), as the other solvers
    s, code = _common.reject_invalid_sigma(
        psd, Sigma, s_corr * jnp.diagonal(Sigma, axis1=-2, axis2=-1), jnp.int32(RESULTS.successful)
    )
    stats = {
        "objective": p * val,
        "min_eig": c * lmin - val,
        "num_steps": jnp.zeros_like(val, dtype=jnp.int32),
        "max_steps": 0,
    }
    return Solution(s, code, stats)
