"""The factor-model knockoff draw (``Sigma = diag(d) + U U^T``): plan and batched-product draw.

The engine of :func:`jaxknock.sampling.sample_knockoffs_factor`: the
key-independent plan (the low-rank form of ``Omega = 2S - S Sigma^-1 S`` and,
when ``C = 2S - S D^-1 S`` is indefinite, the blocked ``L Delta L^T``
factorisation) and the draw, which is a few batched matrix products per chunk
of column blocks (no sequential step per block).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _feasibility, _sampling_common

__all__ = ["FACTOR_CHUNK_ELEMENTS", "FactorPlan", "block_size", "chunk_blocks", "factor_draw", "factor_plan"]

HIGHEST = _sampling_common.HIGHEST
mm = _sampling_common.mm


def block_size(p: int, k: int) -> int:
    """Block size m of the blocked L Delta L^T recursion (flops n p (m + 3k))."""
    return max(1, min(p, 64))


class FactorPlan(NamedTuple):
    """Everything the draw needs; O(p (k + m)) memory, no p x p array.

    The noise is ``y = A g`` with ``A`` block lower triangular: diagonal blocks
    ``A_J`` (``A_J A_J^T`` = the block's Schur complement) and below-diagonal
    blocks ``Z_I F_J`` (rank k), so ``A`` is never stored. When ``m`` does not
    divide ``p`` the last block is the window of the last ``m`` columns, its first
    ``m - r`` coordinates being independent dummies (``c = 1``, ``Z = 0``) that the
    draw masks out.
    """

    X: jax.Array  # (n, p)
    mu: jax.Array  # (p,)
    s_over_d: jax.Array  # (p,)
    Zb: jax.Array  # (nb, m, k) rows of Z per block (dummies: 0); Omega = diag(c) + Z Z^T
    P0: jax.Array  # (n, k) initial state (X - mu) D^-1 U N: the mean's low-rank term
    nonneg: jax.Array  # () bool, c >= 0: Omega = [C^1/2, Z][C^1/2, Z]^T, no recursion needed
    sqrt_c: jax.Array  # (nb, m) sqrt(max(c, 0)) per block
    A: jax.Array  # (nb, m, m) diagonal-block factors (zeros when nonneg)
    F: jax.Array  # (nb, k, m)


def lowrank_conditional_cov(d, U, s, scale=2.0):
    """``Omega = 2S - S Sigma^-1 S = diag(c) + Z Z^T`` (section 4.3, eq. 4.1).

    With ``Sigma^-1 = D^-1 - D^-1 U N N^T U^T D^-1`` (Woodbury, ``N N^T =
    (I + U^T D^-1 U)^-1``): ``c = 2s - s^2 / d`` (possibly negative) and
    ``Z = S D^-1 U N``. Here ``N = Lc^-T`` with ``Lc Lc^T = I + U^T D^-1 U``.
    Returns ``(c, Z, DinvU_N)`` where ``DinvU_N = D^-1 U N``.
    """
    k = U.shape[1]
    V = U / d[:, None]
    cap = jnp.eye(k, dtype=U.dtype) + _sampling_common.mm(U.T, V)
    Lc = jnp.linalg.cholesky(0.5 * (cap + cap.T))
    # (D^-1 U N)^T = Lc^-1 V^T
    VN = jax.scipy.linalg.solve_triangular(Lc, V.T, lower=True).T
    c = scale * s - s * s / d  # scale = (m + 1) / m for m knockoffs (Omega_m, see sample_knockoffs)
    Z = s[:, None] * VN
    return c, Z, VN


def factor_block(M, c, Zj):
    """One block of the blocked Algorithm 6.

    ``M`` (k x k) carries the trailing Schur complement: the covariance of the
    rows not yet factorised, given the earlier ones, is ``diag(c) + Z M Z^T``.
    The block's own Schur complement ``S_J = diag(c_J) + Z_J M Z_J^T`` (PSD even
    when ``c`` is not) is factorised as ``A_J A_J^T``, then
    ``F_J = M Z_J^T A_J^{-T}`` and ``M <- M - F_J F_J^T``.

    ``A_J`` is the Cholesky factor when every pivot exceeds the rounding level
    ``tol = 8 m eps (max|c_J| + max diag S_J)``. Otherwise (a singular block,
    e.g. at the boundary of feasibility) it is ``Q sqrt(lam)`` from the
    eigendecomposition with eigenvalues ``<= tol`` set to zero and the
    pseudo-inverse in ``F_J``: the blocked analogue of Algorithm 6's
    ``Delta_jj = 0 -> b_j = 0`` (for PSD ``Omega``, a null direction of ``S_J``
    has no covariance with later rows).
    """
    m = Zj.shape[0]
    eps = jnp.finfo(M.dtype).eps
    ZM = _sampling_common.mm(Zj, M)  # (m, k)
    S = jnp.diag(c) + _sampling_common.mm(ZM, Zj.T)
    S = 0.5 * (S + S.T)
    tol = 8 * m * eps * (jnp.max(jnp.abs(c)) + jnp.max(jnp.abs(jnp.diagonal(S))))
    L = jnp.linalg.cholesky(S)
    ok = jnp.all(jnp.isfinite(L)) & (jnp.min(jnp.diagonal(L)) ** 2 > tol)

    def cholesky_branch():
        # XLA's CPU triangular solve is slow for many right-hand sides: invert L
        # (m x m, well conditioned here since every pivot exceeds tol) and multiply.
        Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(m, dtype=L.dtype), lower=True)
        return L, _sampling_common.mm(Linv, ZM).T  # F = M Z^T L^-T

    def eigen_branch():
        lam, Q = jnp.linalg.eigh(S)
        keep = lam > tol
        lam_k = jnp.where(keep, lam, 1.0)
        A = Q * jnp.where(keep, jnp.sqrt(lam_k), 0.0)
        F = _sampling_common.mm(ZM.T, Q) * jnp.where(keep, 1.0 / jnp.sqrt(lam_k), 0.0)
        return A, F

    A, F = lax.cond(ok, cholesky_branch, eigen_branch)
    M = M - _sampling_common.mm(F, F.T)
    return 0.5 * (M + M.T), A, F


def pad_last_block(a, m, fill):
    """Insert ``m - r`` rows of ``fill`` before the last partial block of ``a``."""
    p = a.shape[0]
    pad = -p % m
    if not pad:
        return a
    filler = jnp.full((pad,) + a.shape[1:], fill, a.dtype)
    cut = p - p % m
    return jnp.concatenate([a[:cut], filler, a[cut:]])


def factor_plan(X, d, U, s, mu, force_recursion: bool = False, scale: float = 2.0) -> FactorPlan:
    n, p = X.shape
    k = U.shape[1]
    m = block_size(p, k)
    nb = -(-p // m)
    if mu is None:
        mu = _sampling_common.column_means(X)
    c, Z, VN = lowrank_conditional_cov(d, U, s, scale)
    cb = pad_last_block(c, m, 1.0).reshape(nb, m)
    Zb = pad_last_block(Z, m, 0.0).reshape(nb, m, k)
    # the recursion runs on the correlation scale (Omega = D_s Omega_c D_s, D_s = diag(Sigma)^1/2):
    # its rounding tolerances are relative to the largest entry of each block, which on the
    # covariance scale swamped a variable whose variance is orders of magnitude smaller (variances
    # 1e-10 .. 1e10 gave cross-covariances of [X, X~] wrong by 0.3 on the correlation scale). Then
    # A = D_s A_c and F = F_c (F = M Z^T A^-T is scale-free).
    sig = pad_last_block(jnp.sqrt(d + jnp.sum(U * U, axis=1)), m, 1.0).reshape(nb, m)

    def body(M, czs):
        cj, Zj, sj = czs
        M, A, F = factor_block(M, cj / (sj * sj), Zj / sj[:, None])
        return M, (A * sj[:, None], F)

    def recursion():
        # C indefinite: s > 2d somewhere, or s < 0, or NaN. Only here can s be
        # infeasible (C >= 0 means 0 <= s <= 2d), so only here is feasibility tested.
        feasible = _feasibility.feasible_factor_traced(d, U, s, ratio=scale)
        return lax.scan(body, jnp.eye(k, dtype=U.dtype), (cb, Zb, sig))[1], feasible

    def no_recursion():
        return (jnp.zeros((nb, m, m), U.dtype), jnp.zeros((nb, k, m), U.dtype)), jnp.all(d > 0)

    nonneg = jnp.all(c >= 0) & (not force_recursion)
    (A, F), feasible = lax.cond(nonneg, no_recursion, recursion)
    # (X - mu) D^-1 U N without an (n, p) temporary
    P0 = _sampling_common.mm(X, VN) - _sampling_common.mm(mu, VN)
    sqrt_c = jnp.sqrt(jnp.clip(cb, 0.0))
    # an infeasible s (or d <= 0) poisons every knockoff: s / d enters each column's mean
    s_over_d = jnp.where(feasible, s / d, jnp.nan)
    return FactorPlan(X, mu, s_over_d, Zb, P0, nonneg, sqrt_c, A, F)


# elements of the chunk temporaries of one factor draw (normals, noise, the (n, k) states per block)
FACTOR_CHUNK_ELEMENTS = 1 << 23


def chunk_blocks(n: int, nb: int, m: int, k: int) -> int:
    """Blocks per chunk of the factor draw: its temporaries ``2 n c (m + k)`` stay below a fixed budget."""
    return int(max(1, min(nb, FACTOR_CHUNK_ELEMENTS // max(1, 2 * n * (m + k)))))


def factor_draw(key, plan: FactorPlan):
    """Blocked Algorithms 7-8 as matrix products, chunked over column blocks only for memory.

    For block J (columns ``[Jm, (J+1)m)`` of the padded layout), with ``g_J``
    fresh normals (n x m) drawn from ``fold_in(key, J)``:

        X~_J = X_J - (s/d)_J (X_J - mu_J) + g_J A_J^T + W_J Z_J^T
        W_J  = W_0 + sum_{I < J} g_I F_I^T

    so the recursion of Algorithm 8 is an exclusive prefix sum of the products
    ``g_I F_I^T``: one batched product per chunk of blocks, no sequential step
    (and no ``cond``) per block. ``W_0 = (X - mu) D^-1 U N`` folds the low-rank
    part of the conditional mean into the same product as the noise: with
    ``Z = S D^-1 U N``, ``(X - mu) Sigma^-1 S = (X - mu) D^-1 S - W_0 Z^T``.
    When ``C >= 0`` the noise is ``g C^1/2 + h Z^T`` (``W_J = W_0 + h`` for all
    ``J``, ``h`` an extra ``(n, k)`` normal matrix from ``fold_in(key, nb)``).
    The chunks (``chunk_blocks``, static) run in a ``lax.scan`` carrying the
    ``(n, k)`` state; with one chunk the draw is a handful of batched GEMMs.
    The normals are the same as the block-by-block recursion's, so the draw is
    that recursion's value to rounding.
    """
    X, mu, sd = plan.X, plan.mu, plan.s_over_d
    n, p = X.shape
    nb, m = plan.A.shape[0], plan.A.shape[1]
    k = plan.Zb.shape[-1]
    dtype = X.dtype
    cb = chunk_blocks(n, nb, m, k)
    nc = -(-nb // cb)
    extra = nc * cb - nb  # zero blocks completing the last chunk; their output is dropped

    def chunked(a):
        a = jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)]) if extra else a
        return a.reshape((nc, cb) + a.shape[1:])

    blocks = chunked(jnp.arange(nb, dtype=jnp.uint32))
    normals = jax.vmap(lambda J: jax.random.normal(jax.random.fold_in(key, J), (n, m), dtype))
    ein = partial(jnp.einsum, precision=HIGHEST)

    def general(W0):
        def body(W, xs):
            J, A, F, Z = xs
            g = normals(J)  # (cb, n, m)
            T = ein("jnm,jkm->jnk", g, F)
            Ws = W + jnp.cumsum(T, axis=0) - T  # exclusive prefix sum: the state before each block
            noise = ein("jnm,jam->nja", g, A) + ein("jnk,jak->nja", Ws, Z)  # written in the output layout
            return W + jnp.sum(T, axis=0), noise

        return lax.scan(body, W0, (blocks, chunked(plan.A), chunked(plan.F), chunked(plan.Zb)))[1]

    def nonneg(W0):
        W0 = W0 + jax.random.normal(jax.random.fold_in(key, nb), (n, k), dtype)

        def body(W, xs):
            J, sc, Z = xs
            low_rank = mm(W, Z.reshape(-1, k).T).reshape(n, cb, m)  # one GEMM, already in the output layout
            return W, jnp.moveaxis(normals(J), 0, 1) * sc + low_rank

        return lax.scan(body, W0, (blocks, chunked(plan.sqrt_c), chunked(plan.Zb)))[1]

    noise = lax.cond(plan.nonneg, nonneg, general, plan.P0)  # (nc, n, cb, m), one branch per draw
    noise = (noise[0] if nc == 1 else jnp.moveaxis(noise, 0, 1)).reshape(n, nc * cb * m)[:, : nb * m]
    cut, pad = p - p % m, -p % m
    if pad:  # drop the dummies that complete the last block (they sit before the tail)
        noise = jnp.concatenate([noise[:, :cut], noise[:, cut + pad :]], axis=1)
    return X - sd * (X - mu) + noise
