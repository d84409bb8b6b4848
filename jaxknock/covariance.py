"""Covariance estimation: empirical, Ledoit-Wolf, correlation, factor models.

A factor model is ``Sigma = diag(d) + U U^T`` with ``d > 0`` of shape ``(p,)``
and ``U`` of shape ``(p, k)``, ``k << p``. Everything on a
:class:`FactorModel` costs ``O(p k^2)`` time and ``O(p k)`` memory; no
``p x p`` array is formed except by :meth:`FactorModel.dense`.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks, _sigma_checks
from jaxknock._deprecation import renamed_kwargs
from jaxknock._host_cast import centre_columns
from jaxknock._iterate import iterative_solve
from jaxknock._scaling import correlation_of, pow2_exponent, scale_pow2, standardise_columns
from jaxknock._solution import RESULTS, Solution, raise_if_failed

__all__ = [
    "FactorFit",
    "FactorModel",
    "LedoitWolf",
    "empirical_covariance",
    "estimate_factor_model",
    "factor_model_from_data",
    "ledoit_wolf",
    "to_correlation",
]

HIGHEST = lax.Precision.HIGHEST


class FactorModel(NamedTuple):
    """``Sigma = diag(d) + U U^T`` as a pytree (vmaps over a leading batch axis).

    A ``p x p`` covariance with ``k << p`` factors, held in ``O(p k)`` memory.
    With ``D = diag(d)``, ``d > 0``, the methods use

    * ``Sigma v = d * v + U (U^T v)`` (:meth:`matvec`, ``O(p k)`` per column);
    * ``diag(Sigma) = d + rowsum(U**2)`` (:meth:`diagonal`);
    * Woodbury, ``Sigma^{-1} = D^{-1} - D^{-1} U (I_k + U^T D^{-1} U)^{-1} U^T D^{-1}`` (:meth:`solve`);
    * the determinant lemma, ``log det Sigma = sum log d + log det(I_k + U^T D^{-1} U)`` (:meth:`logdet`);

    all through one Cholesky factor of the ``k x k`` capacitance matrix
    ``I_k + U^T D^{-1} U``. Built by :func:`estimate_factor_model` (from a
    ``p x p`` matrix) or :func:`factor_model_from_data` (from data).

    Attributes:
        d: ``(p,)`` positive diagonal.
        U: ``(p, k)`` loadings.

    Example:
        >>> import numpy as np
        >>> model = FactorModel(jnp.full(3, 0.5), jnp.full((3, 1), 0.5 ** 0.5))  # unit variances, rho = 0.5
        >>> model.p, model.rank
        (3, 1)
        >>> np.round(np.asarray(model.solve(jnp.ones(3)), float), 4).tolist()  # Sigma 1 = 2 * 1
        [0.5, 0.5, 0.5]
        >>> round(float(model.logdet()), 4)  # det = 0.5^2 * 2
        -0.6931
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

    def _check_rhs(self, v) -> jax.Array:
        # broadcasting accepted a wrong shape: v of shape (1,) was read as (v0, ..., v0), (1, p) as p equal rows
        v = jnp.asarray(v)
        if v.ndim not in (1, 2) or v.shape[0] != self.p:
            raise ValueError(f"v must have shape (p,) or (p, m) with p = {self.p}, got {v.shape}")
        return v

    def matvec(self, v: jax.Array) -> jax.Array:
        """``Sigma @ v`` for ``v`` of shape ``(p,)`` or ``(p, m)``, in O(p k m)."""
        v = self._check_rhs(v)
        dv = self.d * v if v.ndim == 1 else self.d[:, None] * v
        return dv + jnp.matmul(self.U, jnp.matmul(self.U.T, v, precision=HIGHEST), precision=HIGHEST)

    def _capacitance_cholesky(self) -> jax.Array:
        """Cholesky factor of ``I_k + U^T D^{-1} U`` (k x k)."""
        Ud = self.U / self.d[:, None]
        cap = jnp.eye(self.rank, dtype=self.U.dtype) + jnp.matmul(self.U.T, Ud, precision=HIGHEST)
        return jnp.linalg.cholesky(cap)

    def solve(self, v: jax.Array) -> jax.Array:
        """``Sigma^{-1} v`` by the Woodbury identity, O(p k^2 + p k m).

        ``Sigma^{-1} = D^{-1} - D^{-1} U (I + U^T D^{-1} U)^{-1} U^T D^{-1}``, for ``v`` of
        shape ``(p,)`` or ``(p, m)``.
        """
        v = self._check_rhs(v)
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


class LedoitWolf(NamedTuple):
    """Result of :func:`ledoit_wolf`; unpacks as ``Sigma, delta = ledoit_wolf(X)``.

    ``covariance = (1 - delta) S + delta mu I`` with ``S`` the empirical
    covariance ``(X - mean)^T (X - mean) / n``, ``mu = tr(S) / p`` and the
    Ledoit-Wolf (2004) shrinkage ``delta = min(b2, d2) / d2``,
    ``d2 = ||S - mu I||_F^2 / p``, ``b2 = (1 / (n^2 p)) sum_i ||x_i x_i^T - S||_F^2``
    (``x_i`` the centred rows). The trace is that of ``S``, and the matrix is
    positive definite whenever ``delta > 0``.

    Attributes:
        covariance: ``(p, p)`` shrunk covariance.
        shrinkage: the Ledoit-Wolf shrinkage ``delta`` in ``[0, 1]``.

    Example:
        >>> import numpy as np
        >>> X = jax.random.normal(jax.random.key(0), (50, 10))
        >>> lw = ledoit_wolf(X)
        >>> lw.covariance.shape, 0 < float(lw.shrinkage) < 1
        ((10, 10), True)
        >>> S = np.cov(np.asarray(X, float).T, bias=True)  # the empirical covariance
        >>> bool(np.isclose(np.trace(np.asarray(lw.covariance)), np.trace(S), rtol=1e-5))
        True
    """

    covariance: jax.Array
    shrinkage: jax.Array


class FactorFit(NamedTuple):
    """Result of :func:`factor_model_from_data`; unpacks as ``model, delta = ...``.

    ``model`` approximates the shrunk sample correlation
    ``R_LW = (1 - delta) R + delta I`` by ``diag(d) + U U^T`` with
    ``U = V_k ((1 - delta) Lambda_k)^{1/2}`` (top-``k`` eigenpairs of ``R``) and
    ``d = 1 - rowsum(U^2)``, so its diagonal is exactly one.

    Attributes:
        model: :class:`FactorModel` of the correlation matrix.
        shrinkage: the Ledoit-Wolf shrinkage used (0 without shrinkage).

    Example:
        >>> import numpy as np
        >>> X = jax.random.normal(jax.random.key(1), (100, 1000))
        >>> fit = factor_model_from_data(jax.random.key(0), X, rank=5)
        >>> fit.model.U.shape, 0 < float(fit.shrinkage) < 1
        ((1000, 5), True)
        >>> d, U = np.asarray(fit.model.d), np.asarray(fit.model.U)
        >>> bool(np.allclose(d + (U**2).sum(axis=1), 1.0, atol=1e-4))  # unit diagonal
        True
    """

    model: FactorModel
    shrinkage: jax.Array


# --------------------------------------------------------------------------
# Dense estimators
# --------------------------------------------------------------------------


def _check_data(X, name="X", *, min_rows=2):
    """A finite 2-D data array with ``min_rows`` rows (2 to estimate a mean and a spread; 1 when
    the data are assumed centred: ``x x^T`` is then the covariance of one sample) and a column."""
    X = _checks.as_float_array(X, name, bools=True)
    _checks.check_ndim(X, 2, name, "a 2-D (n_samples, n_features) array")
    if X.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows (samples), got shape {tuple(X.shape)}")
    if X.shape[1] < 1:  # was JAX's "zero-size array to reduction operation max", naming nothing
        raise ValueError(f"{name} needs at least 1 column (feature), got shape {tuple(X.shape)}")
    _checks.check_finite(X, name)
    return X


def empirical_covariance(X, *, assume_centered: bool = False) -> jax.Array:
    """Maximum-likelihood covariance ``(X - mean)^T (X - mean) / n``.

    Matches ``sklearn.covariance.empirical_covariance``.

    Args:
        X: ``(n, p)`` data. With x64 off, a float64 (or integer) NumPy ``X`` loses its
            column means in float64 before JAX rounds it to float32 (unless ``assume_centered``):
            the cast then rounds the deviations, not the raw entries (``X + 1e6``: 1% off before).
        assume_centered: if True, do not subtract the column means.

    Returns:
        ``(p, p)`` covariance matrix.

    Example:
        >>> S = empirical_covariance(jnp.ones((5, 3)) + jnp.arange(5.)[:, None])
    """
    assume_centered = _checks.static_flag(assume_centered, "assume_centered")
    X = _check_data(X if assume_centered else centre_columns(X), min_rows=1 if assume_centered else 2)
    return _empirical_covariance(X, assume_centered)


def _empirical_covariance(X, assume_centered):
    # on X / 2^e (max |X / 2^e| < 1): the column sums and X^T X cannot overflow (|X| ~ 1e154 overflowed
    # X^T X although the covariance was representable); bit for bit the plain result where that was in range
    e = pow2_exponent(jnp.max(jnp.abs(X)))
    X = scale_pow2(X, -e)
    if not assume_centered:
        X = X - jnp.mean(X, axis=0)
    return scale_pow2(jnp.matmul(X.T, X, precision=HIGHEST) / X.shape[0], 2 * e)


def ledoit_wolf(X, *, assume_centered: bool = False):
    """Ledoit-Wolf shrunk covariance ``(1 - delta) S + delta * mu * I``.

    ``S`` is the empirical covariance, ``mu = tr(S) / p`` and ``delta`` the
    Ledoit-Wolf (2004) optimal shrinkage

    ``delta = min(b2, d2) / d2``, ``d2 = ||S - mu I||_F^2 / p``,
    ``b2 = (1 / (n^2 p)) sum_i ||x_i x_i^T - S||_F^2``,

    computed in ``O(n p^2)`` exactly as ``sklearn.covariance.ledoit_wolf``
    (to 1e-10 in float64). The result is always positive definite when
    ``delta > 0``, which is why the knockoff solvers suggest it for
    ill-conditioned or ``p > n`` data. Computed on ``X / 2^e`` (``|X / 2^e| < 1``)
    and scaled back by ``4^e``: equivariant to a global scale of ``X`` with no
    overflow of the fourth powers while the result is representable. A NaN / Inf
    in ``X`` raises a ``ValueError`` naming ``X``; under ``jit`` (traced) the
    shrinkage and the whole covariance are NaN.

    Args:
        X: ``(n, p)`` data; with x64 off a float64 (or integer) NumPy ``X`` is centred in
            float64 before the float32 cast, as in :func:`empirical_covariance`.
        assume_centered: if True, do not subtract the column means.

    Returns:
        :class:`LedoitWolf` ``(covariance, shrinkage)``: the ``(p, p)`` shrunk
        covariance and the shrinkage ``delta`` (unpacks like a tuple).

    Example:
        >>> Sigma, delta = ledoit_wolf(jax.random.normal(jax.random.key(0), (50, 10)))
        >>> Sigma.shape
        (10, 10)
    """
    assume_centered = _checks.static_flag(assume_centered, "assume_centered")
    X = _check_data(X if assume_centered else centre_columns(X), min_rows=1 if assume_centered else 2)
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
    if p == 1:  # S = mu I exactly: delta is 0 up to rounding, and beta / delta was noise (1.0 seen); scikit-learn: 0
        shrink = jnp.zeros_like(shrink)
    # a NaN / Inf in X (traced: the eager check cannot run) has no shrinkage: NaN, which also makes the whole
    # covariance NaN (the where above turned the NaN delta into a plausible 0, beside a partly finite matrix)
    shrink = jnp.where(jnp.all(jnp.isfinite(jnp.diagonal(S))), shrink, jnp.nan)
    return S, mu, shrink


@partial(jax.jit, static_argnums=1)
def _ledoit_wolf(X, assume_centered):
    return _ledoit_wolf_and_sample(X, assume_centered)[0]


def _ledoit_wolf_and_sample(X, assume_centered):
    # on X / 2^e (max |X / 2^e| < 1), scaled back by 4^e: the fourth powers and ||S||_F^2 of the shrinkage
    # left the floating range from |X| ~ 1e77 (NaN shrinkage) or ~ 1e-77 (shrinkage 0); the estimator is
    # equivariant to a global scale, and scaling by a power of two changes no bit where all was in range
    e = pow2_exponent(jnp.max(jnp.abs(X)))
    X = scale_pow2(X, -e)
    if not assume_centered:
        X = X - jnp.mean(X, axis=0)
    S, mu, shrink = _lw_shrinkage(X)
    p = X.shape[1]
    estimate = LedoitWolf(scale_pow2((1.0 - shrink) * S + shrink * mu * jnp.eye(p, dtype=S.dtype), 2 * e), shrink)
    return estimate, S


def ledoit_wolf_and_sample(X) -> tuple[LedoitWolf, jax.Array]:
    """:func:`ledoit_wolf` of ``X`` (its columns centred) and the sample covariance ``S`` it shrinks.

    ``S`` is ``(X - mean)^T (X - mean) / n`` divided by ``4^e`` (``2^e`` the power of two above
    ``max |X|``, as inside :func:`ledoit_wolf`): its correlations are the sample's, and it costs no
    second ``O(n p^2)`` product. For a caller that needs both the estimate and the data's own
    correlations (:func:`jaxknock.knockoff_filter`'s near-duplicate check, inside its jitted
    covariance stage). Jittable; ``X`` is not validated (``ledoit_wolf`` validates), which is why it is
    not exported.

    Example:
        >>> (Sigma, delta), S = ledoit_wolf_and_sample(jnp.arange(12.0).reshape(4, 3) ** 2)
        >>> S.shape
        (3, 3)
    """
    return _ledoit_wolf_and_sample(X, False)


def to_correlation(Sigma) -> jax.Array:
    """``D^{-1/2} Sigma D^{-1/2}`` with ``D = diag(Sigma)`` (unit diagonal).

    Works on a batch ``(..., p, p)``. Knockoff S-vectors solved on the
    correlation matrix are mapped back by ``s_cov = s_corr * diag(Sigma)``.

    A zero, negative or NaN variance has no correlation: eager input raises a
    ``ValueError`` naming ``Sigma``; under ``jit`` the whole matrix (of that
    batch member) is NaN. A NaN / Inf off the diagonal raises too (eagerly; it
    was passed through as a NaN correlation).

    Example:
        >>> import jax.numpy as jnp
        >>> round(float(to_correlation(jnp.array([[4.0, 2.0], [2.0, 9.0]]))[0, 1]), 4)
        0.3333
    """
    Sigma = _checks.as_float_array(Sigma, "Sigma")
    _checks.check_square(Sigma, "Sigma", batch=True)
    ok = _checks.check_variances(Sigma, "Sigma")
    _checks.check_finite_on_device(Sigma, "Sigma")
    return _to_correlation(Sigma, ok)


@jax.jit
def _to_correlation(Sigma, ok):
    return _checks.poison(ok, correlation_of(Sigma))


# --------------------------------------------------------------------------
# Factor models
# --------------------------------------------------------------------------


@renamed_kwargs(num_iters="max_steps")
def estimate_factor_model(
    Sigma, rank: int, *, max_steps: int = 100, tol: float = 1e-8, min_diag: float = 1e-6, throw: bool = False
):
    """Fit ``Sigma ~ diag(d) + U U^T`` by alternating minimisation.

    Solves (Askari thesis, eq. 4.10)

    ``min_{d >= 0, U in R^{p x k}} ||Sigma - diag(d) - U U^T||_F^2``

    alternating the two exact block minimisers: for fixed ``U``,
    ``d_i = max(min_diag * max_j Sigma_jj, Sigma_ii - (U U^T)_ii)``; for fixed ``d``,
    ``U = V_k max(Lambda_k, 0)^{1/2}`` from the top-``k`` eigenpairs of
    ``Sigma - diag(d)``. Each step costs one ``p x p`` eigendecomposition;
    for ``p`` too large to form ``Sigma`` use :func:`factor_model_from_data`.
    The floor keeps ``d`` positive so the model is invertible; it is relative to the scale of
    ``Sigma`` (``min_diag`` itself on a correlation matrix), so ``c Sigma`` gives ``c d`` and
    ``sqrt(c) U``. The Frobenius fit weighs entries by their size: where the variances span
    orders of magnitude the small ones are barely fitted (``Sigma_ii = 1e-6`` beside ``1e6``
    came out as ``1.0``, the floor), so fit ``R = to_correlation(Sigma)`` and map back,
    ``d_i Sigma_ii`` and ``U_i sqrt(Sigma_ii)``.

    Args:
        Sigma: ``(p, p)`` symmetric positive semidefinite matrix (usually a
            correlation matrix). Singular is fine (a sample covariance with
            ``n < p``, a rank-one matrix plus a small diagonal): eigenvalues
            down to ``-50 p eps ||Sigma||_2`` (``eps`` of its dtype) are
            rounding. An indefinite ``Sigma`` (e.g. assembled from
            pairwise-complete estimates) is no covariance and raises a
            ``ValueError``; its "successful" fit used to be taken as a model
            of the data.
        rank: number of factors ``k``, ``1 <= k < p``.
        max_steps: alternations (an integer ``>= 1``); ``tol``: stop when the
            objective decreases by less than ``tol * ||Sigma||_F`` in one
            alternation (finite, ``>= 0``).
        min_diag: the floor of ``d`` relative to the largest variance:
            ``d_i >= min_diag * max_j Sigma_jj`` (was absolute: a covariance
            in units of ``1e-10`` had every ``d_i`` clamped at ``1e-6``; a
            zero ``Sigma`` keeps ``min_diag``), finite and ``> 0`` (a floor ``<= 0``
            gave a ``d`` with zero or negative entries, i.e. a model that is not
            positive definite, reported successful). Under ``jit`` a traced
            ``min_diag <= 0`` gives the result ``infeasible``.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` a :class:`FactorModel`
        and ``stats`` holding ``num_steps``, ``max_steps``, ``objective``
        (the Frobenius residual ``||Sigma - D - U U^T||_F``) and
        ``rel_change``.

    Under ``jax.jit`` (``Sigma`` traced) the value checks that raise on eager
    input become the result code: ``nonfinite`` for NaN/Inf in ``Sigma``,
    ``infeasible`` for a ``Sigma`` that is not symmetric or not positive
    semidefinite (beyond rounding, as above); then ``d``, ``U``, ``objective``
    and ``rel_change`` are NaN and no alternation runs. A traced setting that the eager
    checks refuse (``max_steps < 1``, ``tol`` not finite or negative, ``min_diag <= 0``) gives
    ``infeasible`` with the same NaN values. Under ``jax.vmap``
    each matrix of the batch gets its own code.

    Example:
        >>> sol = estimate_factor_model(jnp.eye(5) * 0.5 + 0.5, rank=1)
        >>> model = sol.value
    """
    Sigma = _checks.as_float_array(Sigma, "Sigma")
    _checks.check_square(Sigma)
    p = Sigma.shape[0]
    if not (_checks.is_int(rank) and 1 <= rank < p):
        raise ValueError(f"rank must be an integer with 1 <= rank < p = {p}, got {rank!r}")
    rank = int(rank)
    # the settings are traced by the fit (new values never recompile): concrete ones are checked here and go
    # in as Python scalars (a NumPy or JAX scalar's type compiled the fit again)
    max_steps, tol, min_diag = _checks.int_setting(max_steps), _checks.traced_float(tol), _checks.traced_float(min_diag)
    if _checks.is_concrete(max_steps) and not (_checks.is_int(max_steps) and max_steps >= 1):
        raise ValueError(f"max_steps must be an integer >= 1 (alternations), got {max_steps!r}")
    if _checks.is_concrete(tol) and not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    floor_ok = _checks.check_positive_scalar(min_diag, "min_diag")
    _checks.check_finite(Sigma, "Sigma")
    _checks.check_symmetric(Sigma)
    # positive semidefiniteness needs an eigendecomposition, which the fit's first alternation computes:
    # the fit reports it (and, when it fails, stops there with NaN values and the code infeasible), and a
    # concrete answer raises here, so eager and jitted calls share one test and one compiled program
    d, U, obj, rel, result, steps, psd, eig_min, eig_rel = _fit_factor_model(Sigma, rank, max_steps, tol, min_diag)
    if _checks.is_concrete(psd) and not bool(psd):
        eig_min, eig_rel = (float(v) for v in jax.device_get((eig_min, eig_rel)))
        raise ValueError(
            f"Sigma is not positive semidefinite: its smallest eigenvalue is {eig_min:.3g} "
            f"({eig_rel:.3g} times its largest in magnitude), "
            "beyond eigendecomposition rounding; a covariance or correlation matrix assembled from "
            "pairwise-complete or separately estimated entries can be indefinite: estimate it from the data "
            "with jaxknock.ledoit_wolf(X), or project it onto the positive semidefinite matrices first"
        )
    # a traced setting the eager checks above refuse gives no model (as a traced bad tol of the S solvers)
    concrete = _checks.is_concrete(max_steps) and _checks.is_concrete(tol)  # then checked above
    settings_ok = floor_ok if concrete else floor_ok & _fit_settings_ok(max_steps, tol)
    d, U, obj, rel = _checks.poison(settings_ok, d, U, obj, rel)
    result = jnp.where(settings_ok, result, jnp.int32(RESULTS.infeasible))
    sol = Solution(
        value=FactorModel(d, U),
        result=result,
        stats={"num_steps": steps, "max_steps": max_steps, "objective": obj, "rel_change": rel},
    )
    return raise_if_failed(sol, throw)


def _fit_settings_ok(max_steps, tol) -> jax.Array:
    """Whether ``max_steps >= 1`` and ``tol`` is finite and ``>= 0`` (traced: the eager checks cannot run).

    Under ``jit`` a ``tol = inf`` stopped :func:`estimate_factor_model` after its first alternation and
    reported ``successful``; ``tol = NaN`` / ``-1`` and ``max_steps = 0`` returned the fit as
    ``max_steps_reached``, a plausible model. Its caller makes those ``infeasible`` with NaN values.
    """
    return (jnp.asarray(max_steps) >= 1) & jnp.isfinite(tol) & (jnp.asarray(tol) >= 0)


class _FactorFitState(NamedTuple):
    d: jax.Array
    U: jax.Array
    obj: jax.Array  # ||Sigma - D - U U^T||_F after the last alternation
    prev: jax.Array  # the objective one alternation earlier (inf at the start)


@partial(jax.jit, static_argnames=("rank",))
def _fit_factor_model(Sigma, rank, max_steps, tol, min_diag):
    """Alternating minimisation of :func:`estimate_factor_model`, driven by ``iterative_solve``.

    Compiled once per shape, dtype and ``rank``; ``max_steps``, ``tol`` and
    ``min_diag`` are traced. The first alternation forms the initial state
    and counts as step 1.

    Fitted to ``Sigma / 4^e`` (``max |Sigma / 4^e|`` in ``[1/4, 1)``; ``e = 0`` for a correlation
    matrix) with the floor ``min_diag max_i Sigma_ii / 4^e``, and scaled back: the same problem exactly, whose Frobenius
    norms no longer overflow (entries ~1e160 ended ``nonfinite`` after one step).

    Also returns the input checks of ``Sigma`` made under ``jit``: whether it is positive semidefinite
    to rounding, its smallest eigenvalue and that eigenvalue relative to the largest in magnitude (for
    the eager error). A ``Sigma`` that is non-finite (``nonfinite``), asymmetric or indefinite
    (``infeasible``) takes no alternation, and its ``d``, ``U`` and statistics are NaN.
    """
    e = 2 * (pow2_exponent(jnp.max(jnp.abs(Sigma))) // 2)
    S = scale_pow2(Sigma, -e)
    finite = jnp.all(jnp.isfinite(S))
    # check_symmetric's test (on Sigma / 4^e, exact): eigh would silently use one triangle of an asymmetric one
    symmetric = _sigma_checks.symmetric_flag(S)
    # the floor is relative to the scale of Sigma, max_i Sigma_ii (exactly 1 for a correlation matrix): an
    # absolute 1e-6 clamped every d of a covariance in units of 1e-10. A zero diagonal keeps the floor itself
    top = jnp.max(jnp.diagonal(S))
    floor = jnp.asarray(min_diag, Sigma.dtype) * jnp.where(top > 0, top, scale_pow2(jnp.ones((), Sigma.dtype), -e))
    d, U, obj, rel, result, steps, psd, eig_min, eig_rel = _fit_factor_model_unit(
        S, rank, max_steps, tol, floor, symmetric
    )
    valid = finite & symmetric & psd
    result = jnp.where(finite, jnp.where(valid, result, jnp.int32(RESULTS.infeasible)), jnp.int32(RESULTS.nonfinite))
    d, U, obj, rel = _checks.poison(valid, scale_pow2(d, e), scale_pow2(U, e // 2), scale_pow2(obj, e), rel)
    return d, U, obj, rel, result, steps, psd, scale_pow2(eig_min, e), eig_rel


# Positive semidefiniteness to rounding: lambda_min(Sigma) >= -_PSD_RTOL * p * eps * max |lambda(Sigma)|.
# A covariance computed in floating point carries a few ulps of error per entry (||E||_2 <= p max |E_ij|),
# and eigh adds a backward error of order p eps ||Sigma||_2 (Householder tridiagonalisation): both are
# linear in p, which numpy.linalg.matrix_rank's default tolerance (p eps sigma_max, C = 1) also uses.
# Measured on valid singular inputs (sample covariances and correlations with n < p or collinear
# columns, float32 and float64, p = 2..800, n up to 1e6, rank one plus 1e-12 I, scaled by 1e-100):
# -lambda_min / (p eps max |lambda|) stayed below 5 (worst: two collinear columns, n = 1e4, through
# empirical_covariance), and below 0.2 once p >= 8. C = 50 leaves a factor of ten over that, and still
# refuses lambda_min = -1e-3 max |lambda| in float32 up to p ~ 160 (in float64 at any p).
_PSD_RTOL = 50.0


def _top_factors(w, V, rank):
    """``U = V_k max(Lambda_k, 0)^{1/2}`` from ascending eigenpairs ``(w, V)``."""
    return V[:, -rank:] * jnp.sqrt(jnp.maximum(w[-rank:], 0.0))


def _fit_factor_model_unit(Sigma, rank, max_steps, tol, min_diag, symmetric):
    p = Sigma.shape[0]
    scale = jnp.linalg.norm(Sigma)

    def fit_u(d):
        return _top_factors(*jnp.linalg.eigh(Sigma - jnp.diag(d)), rank)

    def fit_d(U):
        return jnp.maximum(jnp.diagonal(Sigma) - jnp.sum(U**2, axis=1), min_diag)

    def residual(d, U):
        return jnp.linalg.norm(Sigma - jnp.diag(d) - jnp.matmul(U, U.T, precision=HIGHEST))

    def rel_change(st):
        return jnp.abs(st.prev - st.obj) / scale

    def step(st):
        U = fit_u(st.d)
        d = fit_d(U)
        return _FactorFitState(d, U, residual(d, U), st.obj)

    def terminate(st):
        # stop once the change is not above tol (NaN included, e.g. a zero Sigma) while finite
        rel = rel_change(st)
        done = ~(rel > tol) & jnp.isfinite(st.obj)
        code = jnp.where(rel <= tol, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.max_steps_reached))
        return done, code

    w, V = jnp.linalg.eigh(Sigma - jnp.diag(jnp.full((p,), min_diag, Sigma.dtype)))
    eig_min, eig_ref = _extreme_eigenvalues(Sigma, w, min_diag)
    psd = eig_min >= -_PSD_RTOL * p * jnp.finfo(Sigma.dtype).eps * eig_ref
    U0 = _top_factors(w, V, rank)
    d0 = fit_d(U0)
    init = _FactorFitState(d0, U0, residual(d0, U0), jnp.asarray(jnp.inf, Sigma.dtype))
    # an asymmetric or indefinite Sigma is refused, not fitted: no alternation (NaN takes none either)
    it = iterative_solve(
        init,
        step,
        terminate,
        max_steps=jnp.where(symmetric & psd, max_steps - 1, 0),
        finite=lambda st: jnp.isfinite(st.obj),
    )
    st = it.state
    return st.d, st.U, st.obj, rel_change(st), it.result, it.num_steps + 1, psd, eig_min, eig_min / eig_ref


def _extreme_eigenvalues(Sigma, w, shift):
    """``(lambda_min, max |lambda|)`` of ``Sigma``, given the eigenvalues ``w`` of ``Sigma - shift I``.

    The first alternation decomposes ``Sigma - min_diag I``, whose eigenvalues are those of ``Sigma``
    moved by ``-min_diag``, computed to ``eps ||Sigma - min_diag I||``: while ``|min_diag|`` is at most
    ``||Sigma||_2`` that is within twice the rounding of decomposing ``Sigma`` itself, and the test is
    free. A larger floor (a default ``1e-6`` on a matrix of scale ``1e-100``) would swamp the
    eigenvalues of ``Sigma``, which then get their own ``eigvalsh`` (under ``vmap`` both branches run).
    """
    lam = w + shift
    lam_min, lam_ref = lam[0], jnp.maximum(jnp.abs(lam[0]), jnp.abs(lam[-1]))

    def own():
        lam = jnp.linalg.eigvalsh(Sigma)
        return lam[0], jnp.maximum(jnp.abs(lam[0]), jnp.abs(lam[-1]))

    return lax.cond(jnp.abs(shift) <= lam_ref, lambda: (lam_min, lam_ref), own)


@renamed_kwargs(num_iters="max_steps")
def factor_model_from_data(key, X, rank: int, *, shrinkage: bool = True, max_steps: int = 6, oversample: int = 10):
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
    Each column is first scaled by a power of two (exact) to ``max |x_j|`` in
    ``[1/2, 1)``, so the model does not depend on the units of the columns
    (one column in units 1e200 times larger or 1e-160 times smaller gives the
    same model to rounding; powers of two give it bit for bit).

    Args:
        key: ``jax.random`` key for the randomized range finder.
        X: ``(n, p)`` data; constant columns are rejected. With x64 off a float64 (or
            integer) NumPy ``X`` is centred in float64 before the float32 cast.
        rank: number of factors ``k``.
        shrinkage: apply Ledoit-Wolf shrinkage (recommended; guarantees ``d > 0``
            when ``delta > 0``). Without it ``d`` is floored at ``1e-6``.
        max_steps: subspace (power) iterations, a fixed count (``num_iters``
            is its deprecated alias).
        oversample: extra columns of the randomized range finder.

    Returns:
        :class:`FactorFit` ``(model, shrinkage)``: a :class:`FactorModel` of the
        correlation matrix and the shrinkage used (0 when ``shrinkage=False``);
        unpacks like a tuple.

    Example:
        >>> X = jax.random.normal(jax.random.key(1), (100, 1000))
        >>> model, delta = factor_model_from_data(jax.random.key(0), X, rank=5)
    """
    _checks.check_key(key)  # an int seed failed inside jax.random.normal ("invalid PRNG key data")
    shrinkage = _checks.static_flag(shrinkage, "shrinkage")  # "no" / None were truthy: shrinkage applied
    X = _check_data(centre_columns(X))  # standardised below: a shift of a column changes nothing
    n, p = X.shape
    if not (_checks.is_int(rank) and 1 <= rank < min(n, p)):
        raise ValueError(f"rank must be an integer with 1 <= rank < min(n, p) = {min(n, p)}, got {rank!r}")
    # the subspace loop must run (max_steps = 0 returned the raw Gaussian sketch: diag(D + U U^T) up to
    # 4133 instead of 1) and keep rank columns (a negative oversample cut U to fewer than rank)
    if not (_checks.is_int(max_steps) and max_steps >= 1):
        raise ValueError(f"max_steps must be a positive integer (subspace iterations), got {max_steps!r}")
    if not (_checks.is_int(oversample) and oversample >= 0):
        raise ValueError(f"oversample must be a non-negative integer, got {oversample!r}")
    _checks.check_no_constant_columns(X, "X")
    return _factor_from_data(key, X, int(rank), shrinkage, int(max_steps), int(oversample))


@jax.jit(static_argnames=("rank", "shrinkage", "max_steps", "oversample"))
def _factor_from_data(key, X, rank, shrinkage, max_steps, oversample):
    n, p = X.shape
    # each column on its power-of-two rescaling: invariant to the units of each column (a column times 1e200
    # or 1e-160 overflowed or flushed its variance: the whole model was NaN)
    Z = standardise_columns(X)
    ell = min(rank + oversample, n, p)
    Q = jax.random.normal(key, (p, ell), X.dtype)
    for _ in range(max_steps):  # static, small
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
        delta = jnp.where(jnp.isfinite(fro2), delta, jnp.nan)  # traced NaN / Inf / constant column: not 0
    else:
        delta = jnp.zeros((), X.dtype)
    U = V * jnp.sqrt(jnp.maximum((1.0 - delta) * lam, 0.0))
    d = jnp.maximum(1.0 - jnp.sum(U**2, axis=1), 1e-6)
    return FactorFit(FactorModel(d, U), delta)
