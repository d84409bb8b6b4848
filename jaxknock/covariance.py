"""Covariance estimation: empirical, Ledoit-Wolf, correlation, factor models.

A factor model is ``Sigma = diag(d) + U U^T`` with ``d > 0`` of shape ``(p,)``
and ``U`` of shape ``(p, k)``, ``k << p``. Everything on a
:class:`FactorModel` costs ``O(p k^2)`` time and ``O(p k)`` memory; no
``p x p`` array is formed except by :meth:`FactorModel.dense`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST


class FactorModel(NamedTuple):
    """``Sigma = diag(d) + U U^T`` as a pytree (vmaps over a leading batch axis).

    Attributes:
        d: ``(p,)`` positive diagonal.
        U: ``(p, k)`` loadings.
    """

    d: jax.Array
    U: jax.Array

    @property
    def p(self) -> int:
        return self.U.shape[-2]

    @property
    def rank(self) -> int:
        return self.U.shape[-1]

    def dense(self) -> jax.Array:
        """The ``p x p`` matrix ``diag(d) + U U^T`` (for small p / testing)."""
        return jnp.diag(self.d) + jnp.matmul(self.U, self.U.T, precision=HIGHEST)

    def diagonal(self) -> jax.Array:
        """``diag(Sigma) = d + rowsum(U**2)`` in O(p k)."""
        return self.d + jnp.sum(self.U**2, axis=-1)

    def matvec(self, v: jax.Array) -> jax.Array:
        """``Sigma @ v`` for ``v`` of shape ``(p,)`` or ``(p, m)``, in O(p k m)."""
        dv = self.d * v if v.ndim == 1 else self.d[:, None] * v
        return dv + jnp.matmul(self.U, jnp.matmul(self.U.T, v, precision=HIGHEST), precision=HIGHEST)

    def _capacitance_cholesky(self) -> jax.Array:
        """Cholesky factor of ``I_k + U^T D^{-1} U`` (k x k)."""
        Ud = self.U / self.d[:, None]
        cap = jnp.eye(self.rank, dtype=self.U.dtype) + jnp.matmul(self.U.T, Ud, precision=HIGHEST)
        return jnp.linalg.cholesky(cap)

    def solve(self, v: jax.Array) -> jax.Array:
        """``Sigma^{-1} v`` by the Woodbury identity, O(p k^2 + p k m).

        ``Sigma^{-1} = D^{-1} - D^{-1} U (I + U^T D^{-1} U)^{-1} U^T D^{-1}``.
        """
        Lc = self._capacitance_cholesky()
        dinv = 1.0 / self.d
        Dv = dinv * v if v.ndim == 1 else dinv[:, None] * v
        t = jnp.matmul(self.U.T, Dv, precision=HIGHEST)
        t = jax.scipy.linalg.cho_solve((Lc, True), t)
        corr = jnp.matmul(self.U, t, precision=HIGHEST)
        corr = dinv * corr if v.ndim == 1 else dinv[:, None] * corr
        return Dv - corr

    def logdet(self) -> jax.Array:
        """``log det Sigma = sum log d + log det(I + U^T D^{-1} U)`` (determinant lemma)."""
        Lc = self._capacitance_cholesky()
        return jnp.sum(jnp.log(self.d)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc)))


# --------------------------------------------------------------------------
# Dense estimators
# --------------------------------------------------------------------------


def _check_data(X, name="X"):
    from jaxknock import _checks

    X = _checks.as_float_array(X, name)
    _checks.check_ndim(X, 2, name, "a 2-D (n_samples, n_features) array")
    if X.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 rows (samples), got shape {tuple(X.shape)}")
    _checks.check_finite(X, name)
    return X


def empirical_covariance(X, *, assume_centered: bool = False) -> jax.Array:
    """Maximum-likelihood covariance ``(X - mean)^T (X - mean) / n``.

    Matches ``sklearn.covariance.empirical_covariance``.

    Args:
        X: ``(n, p)`` data.
        assume_centered: if True, do not subtract the column means.

    Returns:
        ``(p, p)`` covariance matrix.

    Example:
        >>> S = empirical_covariance(jnp.ones((5, 3)) + jnp.arange(5.)[:, None])
    """
    X = _check_data(X)
    return _empirical_covariance(X, assume_centered)


def _empirical_covariance(X, assume_centered):
    if not assume_centered:
        X = X - jnp.mean(X, axis=0)
    return jnp.matmul(X.T, X, precision=HIGHEST) / X.shape[0]


def ledoit_wolf(X, *, assume_centered: bool = False):
    """Ledoit-Wolf shrunk covariance ``(1 - delta) S + delta * mu * I``.

    ``S`` is the empirical covariance, ``mu = tr(S) / p`` and ``delta`` the
    Ledoit-Wolf (2004) optimal shrinkage

    ``delta = min(b2, d2) / d2``, ``d2 = ||S - mu I||_F^2 / p``,
    ``b2 = (1 / (n^2 p)) sum_i ||x_i x_i^T - S||_F^2``,

    computed in ``O(n p^2)`` exactly as ``sklearn.covariance.ledoit_wolf``
    (to 1e-10 in float64). The result is always positive definite when
    ``delta > 0``, which is why the knockoff solvers suggest it for
    ill-conditioned or ``p > n`` data.

    Args:
        X: ``(n, p)`` data.
        assume_centered: if True, do not subtract the column means.

    Returns:
        ``(Sigma, delta)``: the ``(p, p)`` shrunk covariance and the shrinkage.

    Example:
        >>> Sigma, delta = ledoit_wolf(jax.random.normal(jax.random.key(0), (50, 10)))
    """
    X = _check_data(X)
    return _ledoit_wolf(X, assume_centered)


@jax.jit
def _lw_shrinkage(X):
    n, p = X.shape
    X2 = X**2
    S = jnp.matmul(X.T, X, precision=HIGHEST) / n
    mu = jnp.trace(S) / p
    # b2 numerator: sum_i ||x_i||^4 - n ||S||_F^2  (divided below)
    sum_x4 = jnp.sum(jnp.matmul(X2.T, X2, precision=HIGHEST))
    fro2 = jnp.sum(S**2)
    beta = (sum_x4 / n - fro2) / (p * n)
    delta = (fro2 - 2.0 * mu * jnp.trace(S) + p * mu**2) / p
    beta = jnp.minimum(beta, delta)
    shrink = jnp.where(delta > 0, beta / jnp.where(delta > 0, delta, 1.0), 0.0)
    return S, mu, shrink


def _ledoit_wolf(X, assume_centered):
    if not assume_centered:
        X = X - jnp.mean(X, axis=0)
    S, mu, shrink = _lw_shrinkage(X)
    p = X.shape[1]
    return (1.0 - shrink) * S + shrink * mu * jnp.eye(p, dtype=S.dtype), shrink


def to_correlation(Sigma) -> jax.Array:
    """``D^{-1/2} Sigma D^{-1/2}`` with ``D = diag(Sigma)`` (unit diagonal).

    Works on a batch ``(..., p, p)``. Knockoff S-vectors solved on the
    correlation matrix are mapped back by ``s_cov = s_corr * diag(Sigma)``.
    """
    d = jnp.sqrt(jnp.diagonal(Sigma, axis1=-2, axis2=-1))
    C = Sigma / (d[..., :, None] * d[..., None, :])
    # exact ones on the diagonal (avoid 1 +- 1 ulp)
    p = Sigma.shape[-1]
    return jnp.where(jnp.eye(p, dtype=bool), jnp.ones((), Sigma.dtype), C)


# --------------------------------------------------------------------------
# Factor models
# --------------------------------------------------------------------------


def estimate_factor_model(
    Sigma, rank: int, *, max_steps: int = 100, tol: float = 1e-8, min_diag: float = 1e-6, throw: bool = False
):
    """Fit ``Sigma ~ diag(d) + U U^T`` by alternating minimisation.

    Solves (Askari thesis, eq. 4.10)

    ``min_{d >= 0, U in R^{p x k}} ||Sigma - diag(d) - U U^T||_F^2``

    alternating the two exact block minimisers: for fixed ``U``,
    ``d_i = max(min_diag, Sigma_ii - (U U^T)_ii)``; for fixed ``d``,
    ``U = V_k max(Lambda_k, 0)^{1/2}`` from the top-``k`` eigenpairs of
    ``Sigma - diag(d)``. Each step costs one ``p x p`` eigendecomposition;
    for ``p`` too large to form ``Sigma`` use :func:`factor_model_from_data`.
    ``min_diag`` keeps ``d`` positive so the model is invertible.

    Args:
        Sigma: ``(p, p)`` symmetric matrix (usually a correlation matrix).
        rank: number of factors ``k``, ``1 <= k < p``.
        max_steps: alternations; ``tol``: stop when the objective decreases
            by less than ``tol * ||Sigma||_F`` in one alternation.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` a :class:`FactorModel`
        and ``stats`` holding ``num_steps``, ``max_steps``, ``objective``
        (the Frobenius residual ``||Sigma - D - U U^T||_F``) and
        ``rel_change``.

    Example:
        >>> sol = estimate_factor_model(jnp.eye(5) * 0.5 + 0.5, rank=1)
        >>> model = sol.value
    """
    from jaxknock import _checks
    from jaxknock._solution import Solution, raise_if_failed, result_code

    Sigma = _checks.as_float_array(Sigma, "Sigma")
    _checks.check_square(Sigma)
    p = Sigma.shape[0]
    if not (isinstance(rank, int) and 1 <= rank < p):
        raise ValueError(f"rank must be an integer with 1 <= rank < p = {p}, got {rank!r}")
    _checks.check_finite(Sigma, "Sigma")
    _checks.check_symmetric(Sigma)

    def fit_u(d):
        w, V = jnp.linalg.eigh(Sigma - jnp.diag(d))
        w, V = w[-rank:], V[:, -rank:]
        return V * jnp.sqrt(jnp.maximum(w, 0.0))

    def residual(d, U):
        return jnp.linalg.norm(Sigma - jnp.diag(d) - jnp.matmul(U, U.T, precision=HIGHEST))

    def fit_d(U):
        return jnp.maximum(jnp.diagonal(Sigma) - jnp.sum(U**2, axis=1), min_diag)

    scale = jnp.linalg.norm(Sigma)

    def cond(c):
        i, _, _, obj, prev = c
        rel = jnp.abs(prev - obj) / scale
        return (i < max_steps) & (rel > tol) & jnp.isfinite(obj)

    def body(c):
        i, d, U, obj, _ = c
        U = fit_u(d)
        d = fit_d(U)
        return i + 1, d, U, residual(d, U), obj

    @jax.jit
    def run(Sigma):
        d0 = jnp.full((p,), min_diag, Sigma.dtype)
        U0 = fit_u(d0)
        d0 = fit_d(U0)
        obj0 = residual(d0, U0)
        init = (jnp.int32(1), d0, U0, obj0, jnp.inf)
        return lax.while_loop(cond, body, init)

    steps, d, U, obj, prev = run(Sigma)
    rel = jnp.abs(prev - obj) / scale
    sol = Solution(
        value=FactorModel(d, U),
        result=result_code(rel <= tol, jnp.isfinite(obj)),
        stats={"num_steps": steps, "max_steps": max_steps, "objective": obj, "rel_change": rel},
    )
    return raise_if_failed(sol, throw)


def factor_model_from_data(key, X, rank: int, *, shrinkage: bool = True, num_iters: int = 6, oversample: int = 10):
    """Factor model of the correlation matrix of ``X``, never forming ``p x p``.

    Standardises the columns of ``X`` (``Z = (X - mean) / std``), so the
    sample correlation is ``R = Z^T Z / n``. With Ledoit-Wolf shrinkage
    (``R_LW = (1 - delta) R + delta I``, ``delta`` computed from the
    ``n x n`` Gram matrix ``Z Z^T`` in ``O(n^2 p)``) the model is

    ``U = V_k ((1 - delta) Lambda_k)^{1/2}``, ``d = 1 - rowsum(U^2)``

    where ``V_k, Lambda_k`` are the top-``k`` right singular vectors /
    eigenvalues of ``R`` found by randomized subspace iteration on ``Z``
    (``O(n p k)`` per iteration). The diagonal absorbs the shrinkage and the
    discarded spectrum, so ``diag(D + U U^T) = 1`` exactly and ``d >= delta``.
    Memory is ``O(n p + p k)``: suitable for ``p`` in the hundreds of thousands.

    Args:
        key: ``jax.random`` key for the randomized range finder.
        X: ``(n, p)`` data; constant columns are rejected.
        rank: number of factors ``k``.
        shrinkage: apply Ledoit-Wolf shrinkage (recommended; guarantees ``d > 0``
            when ``delta > 0``). Without it ``d`` is floored at ``1e-6``.
        num_iters: subspace (power) iterations.

    Returns:
        ``(model, delta)``: a :class:`FactorModel` of the correlation matrix and
        the shrinkage used (0 when ``shrinkage=False``).

    Example:
        >>> X = jax.random.normal(jax.random.key(1), (100, 1000))
        >>> model, delta = factor_model_from_data(jax.random.key(0), X, rank=5)
    """
    X = _check_data(X)
    n, p = X.shape
    if not (isinstance(rank, int) and 1 <= rank < min(n, p)):
        raise ValueError(f"rank must be an integer with 1 <= rank < min(n, p) = {min(n, p)}, got {rank!r}")
    std = jnp.std(X, axis=0)
    from jaxknock._checks import is_concrete

    if is_concrete(std):
        import numpy as np

        const = np.flatnonzero(np.asarray(std) == 0)
        if const.size:
            raise ValueError(f"X has {const.size} constant column(s) (first: {const[:5].tolist()}); drop them first")
    return _factor_from_data(key, X, rank, shrinkage, num_iters, oversample)


@jax.jit(static_argnames=("rank", "shrinkage", "num_iters", "oversample"))
def _factor_from_data(key, X, rank, shrinkage, num_iters, oversample):
    n, p = X.shape
    Z = (X - jnp.mean(X, axis=0)) / jnp.std(X, axis=0)
    ell = min(rank + oversample, n, p)
    Q = jax.random.normal(key, (p, ell), X.dtype)
    for _ in range(num_iters):  # static, small
        Q, _ = jnp.linalg.qr(jnp.matmul(Z.T, jnp.matmul(Z, Q, precision=HIGHEST), precision=HIGHEST))
    B = jnp.matmul(Z, Q, precision=HIGHEST)  # n x ell
    _, sv, Vt = jnp.linalg.svd(B, full_matrices=False)
    V = jnp.matmul(Q, Vt.T, precision=HIGHEST)[:, :rank]
    lam = sv[:rank] ** 2 / n
    if shrinkage:
        G = jnp.matmul(Z, Z.T, precision=HIGHEST) / n  # n x n: ||R||_F^2 = ||G||_F^2
        fro2 = jnp.sum(G**2)
        sum_x4 = jnp.sum(jnp.sum(Z**2, axis=1) ** 2)
        beta = (sum_x4 / n - fro2) / (p * n)
        dist = (fro2 - 2.0 * p + p) / p  # mu = 1 for a correlation matrix
        beta = jnp.minimum(beta, dist)
        delta = jnp.where(dist > 0, beta / jnp.where(dist > 0, dist, 1.0), 0.0)
    else:
        delta = jnp.zeros((), X.dtype)
    U = V * jnp.sqrt(jnp.maximum((1.0 - delta) * lam, 0.0))
    d = jnp.maximum(1.0 - jnp.sum(U**2, axis=1), 1e-6)
    return FactorModel(d, U), delta
