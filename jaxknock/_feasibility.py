"""Feasibility of a knockoff S-vector: ``2 Sigma - diag(s) >= 0`` for dense and factor-model ``Sigma``.

The samplers check it on concrete inputs before ``jit`` (skipped for tracers)
and, when it fails, report the largest feasible scaling ``gamma`` of ``s`` and
point to ``jaxknock.scale_to_feasible``. The dense test is a Cholesky
factorisation (``O(p^3)``); the factor-model test never forms ``p x p``
(:func:`diag_plus_lowrank_is_pd`, ``O(p k^2)``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock._checks import check_positive_definite, is_concrete

__all__ = [
    "check_feasible_dense",
    "check_feasible_factor",
    "diag_plus_lowrank_is_pd",
    "diag_plus_lowrank_is_pd_device",
    "feasible_dense_traced",
    "feasible_factor_traced",
    "feasibility_tol",
    "infeasible_message",
]

HIGHEST = lax.Precision.HIGHEST


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _block_size(p: int, k: int) -> int:
    """Block size of the blocked Cholesky test (the factor sampler's block size)."""
    return max(1, min(p, 64))


def feasibility_tol(diag_sigma: np.ndarray, dtype) -> np.ndarray:
    """Slack accepted in ``2 Sigma - diag(s) >= 0``, per coordinate: ``sqrt(eps) diag(Sigma)``.

    Added to the diagonal, i.e. ``sqrt(eps) I`` on the correlation scale, so the test is
    invariant to the units of the variables (one slack relative to ``max diag(Sigma)``
    passed an ``s_j = 3 Sigma_jj`` on a variable with 1e-10 of the largest variance).
    """
    return np.sqrt(np.finfo(np.dtype(dtype)).eps) * np.maximum(np.abs(np.asarray(diag_sigma, np.float64)), 1e-300)


def infeasible_message(gamma: float, lam_min: float | None, ratio: float = 2.0) -> str:
    lam = f" (smallest eigenvalue {lam_min:.3g})" if lam_min is not None else ""
    if ratio != 2.0:  # m simultaneous knockoffs: ratio = (m + 1) / m
        m = round(1.0 / (ratio - 1.0))
        return (
            f"s is infeasible for Sigma with num_knockoffs = {m}: ({m}+1)/{m} Sigma - S is not positive "
            f"semidefinite{lam}, so the joint law of X and its {m} knockoffs is not a covariance. "
            f"The largest feasible scaling is gamma = {gamma:.6g}: solve for S with num_knockoffs={m} "
            "or scale it by gamma"
        )
    return (
        "s is infeasible for Sigma: 2 Sigma - diag(s) is not positive semidefinite"
        f"{lam}, so the knockoff covariance 2S - S Sigma^-1 S is not a covariance. "
        f"The largest feasible scaling is gamma = {gamma:.6g} (s is "
        f"{100.0 * (1.0 - gamma):.3g}% too large): use "
        "s = jaxknock.scale_to_feasible(Sigma, s)"
    )


def check_feasible_dense(Sigma, s, name: str = "Sigma", *, ratio: float = 2.0):
    """Raise unless Sigma > 0 and ratio Sigma - S >= -tol I (numpy, concrete only).

    ``S = diag(s)`` for a vector ``s``, or ``s`` itself for a ``(p, p)`` matrix
    (group knockoffs); ``ratio = (m + 1) / m`` for ``m`` simultaneous knockoffs.
    """
    if not (is_concrete(Sigma) and is_concrete(s)):
        return
    A = np.asarray(Sigma, dtype=np.float64)
    sv = np.asarray(s, dtype=np.float64)
    try:
        L = np.linalg.cholesky(A)
    except np.linalg.LinAlgError as err:
        check_positive_definite(A, name)  # raises with the smallest eigenvalue
        raise ValueError(f"{name} is numerically singular (its Cholesky factorisation failed)") from err
    tol = feasibility_tol(np.diagonal(A), Sigma.dtype)
    Smat = np.diag(sv) if sv.ndim == 1 else 0.5 * (sv + sv.T)
    B = ratio * A - Smat
    B[np.diag_indices_from(B)] += tol
    try:
        np.linalg.cholesky(B)
        return
    except np.linalg.LinAlgError:
        pass
    lam_min = float(np.linalg.eigvalsh(ratio * A - Smat)[0])
    # gamma* = ratio / lambda_max(L^-1 S L^-T)
    W = np.linalg.solve(L, np.linalg.solve(L, Smat).T)
    gamma = ratio / float(np.linalg.eigvalsh(0.5 * (W + W.T))[-1])
    raise ValueError(infeasible_message(gamma, lam_min, ratio))


@jax.jit
def _diag_plus_lowrank_is_pd_blocked(e, V):
    """True if ``diag(e) + V V^T`` is positive definite, in O(p k^2) (e may be indefinite).

    Blocked Cholesky in which the trailing Schur complement is carried as a k x k
    matrix ``M``: the Schur complement of the rows after a block is
    ``diag(e_rest) + V_rest M V_rest^T``.
    """
    p, k = V.shape
    m = _block_size(p, k)
    nb = -(-p // m)
    pad = nb * m - p  # independent dummy coordinates (e = 1, V = 0) complete the last block
    e = jnp.concatenate([e, jnp.ones(pad, e.dtype)])
    V = jnp.concatenate([V, jnp.zeros((pad, k), V.dtype)])

    def block(M, eV):
        ej, Vj = eV
        VM = _mm(Vj, M)
        L = jnp.linalg.cholesky(jnp.diag(ej) + _mm(VM, Vj.T))
        ok = jnp.all(jnp.isfinite(L))
        L = jnp.where(ok, L, jnp.eye(m, dtype=L.dtype))
        Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(m, dtype=L.dtype), lower=True)
        Ft = _mm(Linv, VM)
        return M - _mm(Ft.T, Ft), ok

    _, oks = lax.scan(block, jnp.eye(k, dtype=V.dtype), (e.reshape(nb, m), V.reshape(nb, m, k)))
    return jnp.all(oks)


@jax.jit
def _weighted_gram(e, V, positive):
    """``V_P^T diag(1 / e_P) V_P`` over the rows in ``positive`` (one GEMM)."""
    w = jnp.where(positive, 1.0 / jnp.where(positive, e, 1.0), 0.0)
    return _mm(V.T, V * w[:, None])


def diag_plus_lowrank_is_pd(e, V) -> bool:
    """True if ``E = diag(e) + V V^T`` is positive definite; ``e`` may be indefinite.

    Fast path, O(p k^2) in one GEMM: split the rows into P (``e_j`` clearly
    positive) and N (the rest). ``E_PP`` is PD, and by the Woodbury identity the
    Schur complement of ``E_PP`` is ``diag(e_N) + V_N K V_N^T`` with
    ``K = (I + V_P^T diag(e_P)^-1 V_P)^-1``, an ``|N| x |N|`` matrix tested by
    Cholesky. More than ``k`` negative ``e_j`` is infeasible outright (``E``
    is then negative on a subspace of dimension >= #neg - k). When ``|N|`` is
    large, or the fast path says "not PD" (confirmed before raising), the
    blocked Cholesky :func:`_diag_plus_lowrank_is_pd_blocked` decides.
    """
    e = jnp.asarray(e)
    p, k = V.shape
    e_np = np.asarray(e, dtype=np.float64)
    if np.all(e_np > 0):
        return True
    if int(np.sum(e_np < 0)) > k:
        return False
    scale = float(np.max(np.abs(e_np)) + np.max(np.sum(np.asarray(V, np.float64) ** 2, axis=1)))
    positive = e_np > 1e-3 * scale
    neg = np.flatnonzero(~positive)
    if neg.size > max(4 * k, 512):
        return bool(_diag_plus_lowrank_is_pd_blocked(e, V))
    G = np.asarray(_weighted_gram(e, V, jnp.asarray(positive)), np.float64)
    try:
        Lk = np.linalg.cholesky(np.eye(k) + 0.5 * (G + G.T))
        T = np.linalg.solve(Lk, np.asarray(V, np.float64)[neg].T)  # K = Lk^-T Lk^-1
        np.linalg.cholesky(np.diag(e_np[neg]) + T.T @ T)
        return True
    except np.linalg.LinAlgError:
        return bool(_diag_plus_lowrank_is_pd_blocked(e, V))


def check_feasible_factor(d, U, s, *, ratio: float = 2.0):
    """Raise unless ratio (D + U U^T) - diag(s) >= -tol I, in O(p k^2) (concrete only)."""
    if not all(is_concrete(a) for a in (d, U, s)):
        return
    tol = feasibility_tol(np.asarray(d + jnp.sum(U**2, axis=1)), d.dtype)
    V = jnp.sqrt(ratio) * U
    if bool(diag_plus_lowrank_is_pd(ratio * d - s + tol, V)):
        return
    lo, hi = 0.0, 1.0  # feasible at 0 (D > 0), infeasible at 1
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if bool(diag_plus_lowrank_is_pd(ratio * d - mid * s + tol, V)):
            lo = mid
        else:
            hi = mid
    raise ValueError(infeasible_message(lo, None, ratio))


# --- traced feasibility flags (the samplers poison their output with NaN when these are false) ---


def _traced_tol(scale, dtype, p: int):
    """Device slack: :func:`feasibility_tol` plus ``8 p eps`` for the rounding of a Cholesky in ``dtype``.

    ``scale``: ``diag(Sigma)`` (per-coordinate slack, as :func:`feasibility_tol`).

    A little looser than the eager check, which has already run on concrete input
    (in float64): the traced flag must never poison an ``s`` that the eager check
    accepted, only catch what it could not see (traced ``s``, ``Sigma``).
    """
    eps = jnp.finfo(dtype).eps
    return (jnp.sqrt(eps) + 8 * p * eps) * jnp.maximum(scale, 1e-300)


def feasible_dense_traced(Sigma, s) -> jax.Array:
    """Traced flag: ``s`` finite and ``>= 0`` and ``2 Sigma - diag(s) >= -tol I`` (one Cholesky, ``O(p^3 / 3)``).

    The samplers call it only where their own factorisation of
    ``Omega = 2S - S Sigma^-1 S`` has already failed (``lax.cond``), so a
    feasible ``s`` costs nothing extra.
    """
    p = Sigma.shape[-1]
    tol = _traced_tol(jnp.abs(jnp.diagonal(Sigma)), Sigma.dtype, p)
    B = 2.0 * Sigma - jnp.diag(s) + jnp.diag(tol)
    L = jnp.linalg.cholesky(0.5 * (B + B.T))
    return jnp.all(jnp.isfinite(L)) & jnp.all(s >= 0)


def feasible_factor_traced(d, U, s, ratio: float = 2.0) -> jax.Array:
    """Traced flag for ``Sigma = diag(d) + U U^T``: ``d > 0``, ``s >= 0`` and ``ratio Sigma - diag(s) >= -tol I``.

    The blocked ``O(p k^2 + p m^2)`` Cholesky of :func:`diag_plus_lowrank_is_pd`, on the device
    (``ratio = (m + 1) / m`` for ``m`` simultaneous knockoffs).
    """
    p = d.shape[0]
    tol = _traced_tol(d + jnp.sum(U**2, axis=1), d.dtype, p)
    pd = _diag_plus_lowrank_is_pd_blocked(ratio * d - s + tol, jnp.sqrt(ratio) * U)
    return pd & jnp.all(s >= 0) & jnp.all(d > 0)


def diag_plus_lowrank_is_pd_device(e, V) -> jax.Array:
    """Traced flag: ``diag(e) + V V^T`` positive definite (blocked Cholesky, ``O(p k^2 + p m^2)``, on the device)."""
    return _diag_plus_lowrank_is_pd_blocked(e, V)
