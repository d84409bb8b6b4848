"""Multiple simultaneous knockoffs (Gimenez & Zou 2019): the ``m > 1`` plans and draws.

The engine behind ``num_knockoffs = m`` of :func:`jaxknock.sampling.sample_knockoffs`
and :func:`jaxknock.sampling.sample_knockoffs_factor` (see their docstrings for
the construction: a common part ``N(mean, Omega_m)`` plus centred independent
parts), and the dense sampler for a matrix ``S`` (group knockoffs).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxknock import _sampling_checks, _sampling_common, _sampling_factor
from jaxknock._sigma_checks import traced_sigma_code
from jaxknock._solution import RESULTS

__all__ = [
    "MultiDensePlan",
    "MultiFactorPlan",
    "independent_parts",
    "multi_dense_draw",
    "multi_dense_plan",
    "multi_factor_draw",
]


class MultiDensePlan(NamedTuple):
    """Dense sampler for a matrix ``S`` and/or ``m > 1`` copies (see :func:`sample_knockoffs`)."""

    mean: jax.Array  # (n, p)
    L: jax.Array  # (p, p), L L^T = Omega_m = (m+1)/m S - S Sigma^-1 S
    Ls: jax.Array  # (p,) sqrt(s) or (p, p) factor of S (the independent parts, m > 1)
    ok: jax.Array  # () bool: Omega_m >= 0 (feasibility)
    copies: jax.Array  # (m,) placeholder: its shape carries m


def multi_dense_plan(X, Sigma, s, mu, m: int) -> MultiDensePlan:
    p = X.shape[1]
    if mu is None:
        mu = _sampling_common.column_means(X)
    # traced input checks, O(p^2), as the m = 1 vector sampler's: a non-symmetric Sigma (or a
    # non-symmetric matrix S, which the eager check refuses) poisons the draw instead of being
    # symmetrised into a different, plausible law
    rtol = _sampling_checks.symmetry_rtol(Sigma.dtype)
    valid = traced_sigma_code(Sigma, rtol=rtol) == RESULTS.successful
    if s.ndim == 2:
        valid = valid & (jnp.max(jnp.abs(s - s.T)) <= rtol * jnp.maximum(jnp.max(jnp.abs(s)), 1e-300))
    S = jnp.diag(s) if s.ndim == 1 else 0.5 * (s + s.T)
    # on the correlation scale (_sampling_common.correlation_scale): Omega = D Omega_c D, S = D S_c D
    d, C, S = _sampling_common.correlation_scale(Sigma, S)
    Lc = jnp.linalg.cholesky(0.5 * (C + C.T))
    SinvS = jax.scipy.linalg.cho_solve((Lc, True), S)  # C^-1 S_c
    Omega = (m + 1.0) / m * S - _sampling_common.mm(S, SinvS)
    mean = X - _sampling_common.mm((X - mu) / d, SinvS) * d
    eps = jnp.finfo(X.dtype).eps
    tol = jnp.sqrt(eps) * (jnp.max(jnp.abs(jnp.diagonal(S))) + jnp.max(jnp.abs(jnp.diagonal(Omega))))
    L, ok = _sampling_common.psd_factor_checked(Omega, tol)
    ok = ok & valid
    L = L * d[:, None]
    if m == 1:
        Ls = jnp.zeros((p,), X.dtype)  # unused
    elif s.ndim == 1:
        Ls = jnp.sqrt(jnp.clip(s, 0.0))
    else:
        Ls = _sampling_common.psd_factor(S) * d[:, None]
    return MultiDensePlan(mean, L, Ls, ok, jnp.zeros((m,), X.dtype))


def independent_parts(key, Ls, n, m, dtype):
    """``e_k - mean_k e_k`` for ``e_k ~ N(0, S)`` i.i.d., shape ``(n, m, p)``."""
    p = Ls.shape[0]
    e = jax.random.normal(key, (n, m, p), dtype)
    e = e * Ls if Ls.ndim == 1 else _sampling_common.mm(e, Ls.T)
    return e - jnp.mean(e, axis=1, keepdims=True)


def multi_dense_draw(key, plan: MultiDensePlan):
    n, p = plan.mean.shape
    m = plan.copies.shape[0]
    dtype = plan.mean.dtype
    if m == 1:
        out = plan.mean + _sampling_common.mm(jax.random.normal(key, (n, p), dtype), plan.L.T)
    else:
        k_common, k_own = jax.random.split(key)
        common = plan.mean + _sampling_common.mm(jax.random.normal(k_common, (n, p), dtype), plan.L.T)
        out = common[:, None, :] + independent_parts(k_own, plan.Ls, n, m, dtype)
    return jnp.where(plan.ok, out, jnp.nan)


class MultiFactorPlan(NamedTuple):
    """``m > 1`` copies under a factor model: the common part from a factor plan of ``Omega_m``."""

    base: _sampling_factor.FactorPlan  # plan of N(mean, Omega_m), Omega_m = (m+1)/m S - S Sigma^-1 S = diag(c') + ZZ^T
    sqrt_s: jax.Array  # (p,)
    copies: jax.Array  # (m,) placeholder: its shape carries m


def multi_factor_draw(key, plan: MultiFactorPlan):
    k_common, k_own = jax.random.split(key)
    common = _sampling_factor.factor_draw(k_common, plan.base)
    n = common.shape[0]
    return common[:, None, :] + independent_parts(k_own, plan.sqrt_s, n, plan.copies.shape[0], common.dtype)
