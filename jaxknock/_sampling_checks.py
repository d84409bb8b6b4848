"""Value checks of the knockoff samplers, on the device, once per public call.

Every check of a sampler's concrete inputs (finite values, symmetric ``Sigma``,
``s >= 0`` or ``S >= 0``, ``Sigma > 0``, feasibility ``ratio Sigma - S >= 0``,
full column rank for fixed-X) runs in one jitted program on the device and
comes back as a handful of booleans through one explicit ``jax.device_get``:
no array leaves the device, so the samplers run under
``jax.transfer_guard_device_to_host("disallow")``. Only when a flag fails do
the host checks of :mod:`jaxknock._checks` / :mod:`jaxknock._feasibility` run
(explicitly allowed to transfer) to word the error; they also have the last
word, so a device Cholesky that fails from rounding alone never rejects an
input the float64 host check accepts. Traced inputs (inside ``jit``) skip this:
the samplers then poison their output with NaN on the device.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks, _feasibility
from jaxknock._checks import check_finite, check_nonnegative, check_symmetric, is_concrete

__all__ = ["check_dense_values", "check_factor_values", "check_fixed_x_values", "full_rank_flag", "symmetry_rtol"]

HIGHEST = lax.Precision.HIGHEST


def symmetry_rtol(dtype) -> float:
    """Relative asymmetry accepted in ``Sigma``: ``1e-8``, or a few ulps of a float32 estimate."""
    return max(1e-8, 16.0 * float(np.finfo(np.dtype(dtype)).eps))


def _sqrt_eps(dtype):
    return jnp.sqrt(jnp.finfo(dtype).eps)


def _finite_columns(X):
    # NaN / Inf propagate to the column sums: a GEMV, far faster than a reduction over the rows on XLA:CPU
    return jnp.all(jnp.isfinite(jnp.matmul(jnp.ones(X.shape[0], X.dtype), X, precision=HIGHEST)))


def _columns_finite_now(X) -> bool:
    """:func:`_finite_columns` of a concrete ``X``, evaluated now, also inside an outer ``jit``.

    There (``X`` closed over, ``Sigma`` or ``s`` traced) a jitted call on concrete inputs is staged
    into the outer program and returns a tracer: ``bool()`` of it was JAX's
    ``TracerBoolConversionError`` instead of the sampler.
    """
    with jax.ensure_compile_time_eval():
        return bool(jax.jit(_finite_columns)(X))


def _finite(*arrays):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays if a is not None]))


def _chol_ok(A):
    return jnp.all(jnp.isfinite(jnp.linalg.cholesky(0.5 * (A + A.T))))


def full_rank_flag(G):
    """Traced: ``lambda_min(G) > 64 p eps``, the host check's rank test of fixed-X knockoffs' normalised Gram ``G``."""
    p = G.shape[-1]
    return _chol_ok(G - 64 * p * jnp.finfo(G.dtype).eps * jnp.eye(p, dtype=G.dtype))


def _all_concrete(*arrays) -> bool:
    return all(a is None or is_concrete(a) for a in arrays)


def _fetch(fn, *args) -> bool:
    """Whether every flag of ``fn(*args)`` holds: one explicit device-to-host transfer of a few booleans
    (:func:`jaxknock._checks.host_flags`, so also inside a caller's trace)."""
    return bool(np.all(np.asarray(_checks.host_flags(fn, *args))))


@partial(jax.jit, static_argnames=("ratio", "rtol"))
def _dense_flags(X, Sigma, s, mu, ratio, rtol):
    p = Sigma.shape[0]
    eye = jnp.eye(p, dtype=Sigma.dtype)
    finite = _finite_columns(X) & _finite(Sigma, s, mu)
    asym = jnp.max(jnp.abs(Sigma - Sigma.T)) <= rtol * jnp.maximum(jnp.max(jnp.abs(Sigma)), 1e-300)
    if s.ndim == 2:  # group knockoffs: S symmetric PSD (up to sqrt(eps) of its diagonal)
        s_sym = jnp.max(jnp.abs(s - s.T)) <= rtol * jnp.maximum(jnp.max(jnp.abs(s)), 1e-300)
        S_tol = _sqrt_eps(s.dtype) * jnp.maximum(jnp.max(jnp.abs(jnp.diagonal(s))), 1e-300)
        s_ok = s_sym & _chol_ok(s + S_tol * eye)
        S = s
    else:
        s_ok = jnp.all(s >= 0)
        S = jnp.diag(s)
    # per-coordinate slack (sqrt(eps) on the correlation scale), as _feasibility.feasibility_tol
    tol = _sqrt_eps(Sigma.dtype) * jnp.maximum(jnp.abs(jnp.diagonal(Sigma)), 1e-300)
    feasible = _chol_ok(Sigma) & _chol_ok(ratio * Sigma - S + jnp.diag(tol))
    return jnp.stack([finite, asym, s_ok, feasible])


def check_dense_values(X, Sigma, s, mu, *, ratio: float = 2.0):
    """Raise ``ValueError`` unless the dense sampler's concrete inputs are valid (see the module docstring)."""
    if _checks.values_trusted() and _all_concrete(X, Sigma, s, mu):
        return  # the pipeline's own estimate and certified s (see _checks.trusted_values)
    if not _all_concrete(X, Sigma, s, mu):
        _dense_host_checks(X, Sigma, s, mu, ratio)  # partial checks of what is concrete, as before
        return
    if _fetch(_dense_flags, X, Sigma, s, mu, float(ratio), symmetry_rtol(Sigma.dtype)):
        return
    with jax.transfer_guard("allow"):
        _dense_host_checks(X, Sigma, s, mu, ratio)


def _dense_host_checks(X, Sigma, s, mu, ratio):
    if is_concrete(X) and not _columns_finite_now(X):
        check_finite(X, "X")
    check_finite(Sigma, "Sigma")
    check_finite(s, "s")
    if mu is not None:
        check_finite(mu, "mu")
    check_symmetric(Sigma, "Sigma", rtol=symmetry_rtol(Sigma.dtype))
    if s.ndim == 2:
        _check_psd_S(s)
    else:
        check_nonnegative(s, "s")
    _feasibility.check_feasible_dense(Sigma, s, ratio=ratio)


def _check_psd_S(S):
    """A dense / block-diagonal ``S`` must be symmetric positive semidefinite (concrete only)."""
    check_symmetric(S, "S", rtol=symmetry_rtol(S.dtype))
    if is_concrete(S):
        a = np.asarray(S, np.float64)
        lam = float(np.linalg.eigvalsh(0.5 * (a + a.T))[0])
        tol = np.sqrt(np.finfo(np.dtype(S.dtype)).eps) * max(float(np.max(np.abs(np.diagonal(a)))), 1e-300)
        if lam < -tol:
            raise ValueError(f"S must be positive semidefinite (every block S_g >= 0), smallest eigenvalue {lam:.3g}")


@partial(jax.jit, static_argnames=("ratio",))
def _factor_flags(X, d, U, s, mu, ratio):
    finite = _finite_columns(X) & _finite(d, U, s, mu)
    positive = jnp.all(d > 0)
    s_ok = jnp.all(s >= 0)
    tol = _sqrt_eps(d.dtype) * jnp.maximum(jnp.abs(d + jnp.sum(U**2, axis=1)), 1e-300)  # per coordinate
    e = ratio * d - s + tol
    # diag(e) + V V^T with e > 0 is PD outright; only an indefinite e needs the blocked Cholesky
    feasible = lax.cond(
        jnp.all(e > 0),
        lambda: jnp.asarray(True),
        lambda: _feasibility.diag_plus_lowrank_is_pd_device(e, jnp.sqrt(ratio) * U),
    )
    return jnp.stack([finite, positive, s_ok, feasible])


def check_factor_values(X, d, U, s, mu, *, ratio: float = 2.0):
    """Raise ``ValueError`` unless the factor sampler's concrete inputs are valid (O(p k^2) on the device)."""
    if _all_concrete(X, d, U, s, mu) and (
        _checks.values_trusted() or _fetch(_factor_flags, X, d, U, s, mu, float(ratio))
    ):
        return
    with jax.transfer_guard("allow"):
        if is_concrete(X) and not _columns_finite_now(X):
            check_finite(X, "X")
        for a, name in ((d, "model.d"), (U, "model.U"), (s, "s"), (mu, "mu")):
            if a is not None:
                check_finite(a, name)
        if is_concrete(d) and np.any(np.asarray(d) <= 0):
            dv = np.asarray(d)
            j = int(np.argmin(dv))
            raise ValueError(f"model.d must be positive (Sigma = diag(d) + U U^T with d > 0), got d[{j}] = {dv[j]:.3g}")
        check_nonnegative(s, "s")
        _feasibility.check_feasible_factor(d, U, s, ratio=ratio)


@jax.jit
def _fixed_x_flags(X, s):
    p = X.shape[1]
    norms = jnp.linalg.norm(X, axis=0)
    finite = _finite_columns(X) & _finite(s)
    s_ok = jnp.all(s >= 0)
    nonzero = jnp.all(norms > 0)
    Xn = X / jnp.where(norms > 0, norms, 1.0)
    G = jnp.matmul(Xn.T, Xn, precision=HIGHEST)
    eye = jnp.eye(p, dtype=X.dtype)
    full_rank = full_rank_flag(G)
    tol = _sqrt_eps(X.dtype) * jnp.max(jnp.diagonal(G))
    feasible = _chol_ok(2.0 * G - jnp.diag(s) + tol * eye)
    return jnp.stack([finite, s_ok, nonzero, full_rank, feasible])


def check_fixed_x_values(X, s):
    """Raise ``ValueError`` unless fixed-X knockoffs can be built from concrete ``X`` and ``s``."""
    if _all_concrete(X, s) and _fetch(_fixed_x_flags, X, s):
        return
    with jax.transfer_guard("allow"):
        if is_concrete(X) and not _columns_finite_now(X):
            check_finite(X, "X")
        check_finite(s, "s")
        check_nonnegative(s, "s")
        norms = jnp.linalg.norm(X, axis=0)
        if is_concrete(norms) and np.any(np.asarray(norms) == 0):
            j = int(np.argmin(np.asarray(norms)))
            raise ValueError(f"X has an all-zero column (column {j}); drop it first")
        Xn = X / norms
        if is_concrete(Xn):
            p = X.shape[1]
            G = np.asarray(Xn, np.float64)
            G = G.T @ G
            lam = np.linalg.eigvalsh(G)[0]
            if lam <= 64 * p * np.finfo(np.dtype(X.dtype)).eps:
                raise ValueError(
                    "X has (nearly) linearly dependent columns: the normalised Gram matrix "
                    f"has smallest eigenvalue {lam:.3g}; fixed-X knockoffs need full column rank"
                )
            try:
                _feasibility.check_feasible_dense(G.astype(np.dtype(X.dtype)), s, name="X^T X (normalised)")
            except ValueError as err:  # its wording names a Sigma the caller of fixed-X never passed
                raise ValueError(
                    f"{err}; for fixed-X knockoffs Sigma is X_n^T X_n, the Gram matrix of the normalised "
                    "X_n = X / ||X_j|| (returned first by fixed_x_knockoffs)"
                ) from None
