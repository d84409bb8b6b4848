"""Knockoff samplers: dense Gaussian, linear-time factor model, fixed-X, replicates.

Model-X Gaussian knockoffs (Candes et al. 2018). Given ``X ~ N(mu, Sigma)`` and
a feasible ``s`` (``0 <= diag(s) <= 2 Sigma``), each row of the knockoff
matrix is drawn from

    X~ | X  ~  N( X - (X - mu) Sigma^{-1} S ,  Omega ),
    Omega = 2 S - S Sigma^{-1} S,   S = diag(s),

so that ``[X, X~]`` has covariance ``[[Sigma, Sigma - S], [Sigma - S, Sigma]]``
and is invariant (in distribution) to swapping any subset of columns between
``X`` and ``X~``.

* :func:`sample_knockoffs` - dense ``Sigma``: ``O(n p^2 + p^3)`` time,
  ``O(p^2 + n p)`` memory.
* :func:`sample_knockoffs_factor` - factor model ``Sigma = D + U U^T``
  (:class:`jaxknock.FactorModel`): ``O(p k^2 + p m^2 + n p (m + 3k))`` time
  (``O(p k^2 + n p k)`` when ``C = 2S - S D^-1 S >= 0``) and ``O(p (n + k + m))``
  memory (block size ``m = 64``), no ``p x p`` array ever.
* :func:`sample_replicates` - many replicates at once (``vmap`` over split
  keys), materialised as ``(R, n, p)`` or streamed in memory-sized chunks.
* :func:`fixed_x_knockoffs` - the deterministic fixed-X construction of
  Barber & Candes (2015), ``n >= 2p``.

Both model-X samplers are written for one replicate, take the key first, and
are exactly ``jax.vmap``-able over ``jax.random.split(key, R)``; everything that
does not depend on the key (the factorisation of ``Omega``, the conditional
mean) is then computed once and shared by the replicates.

Input checks: shapes and dtypes raise ``ValueError``/``TypeError`` before
tracing; values (NaN, ``Sigma`` positive definite, feasibility of ``s``) are
checked on concrete inputs before ``jit``. Under ``jit``/``vmap`` (traced
``Sigma``, ``s`` or model) the samplers check the same values on the device,
reusing their own factorisation of ``Omega = 2S - S Sigma^-1 S``: a NaN or
non-symmetric ``Sigma``, a ``Sigma`` that is not positive definite, a NaN or
negative ``s``, or an infeasible ``s`` (``2 Sigma - diag(s)`` not PSD) returns
knockoffs that are entirely NaN, never finite plausible ones. A feasible ``s``
pays nothing extra (the feasibility Cholesky runs only on the branch where
the factorisation of ``Omega`` has already failed; fixed-X always runs it,
next to its eigendecomposition).

Precision: the samplers follow ``X``'s dtype (``Sigma``, ``s`` and ``mu`` are
cast to it; float64 is used only in the S solve, see ``jaxknock/_precision.py``),
so a float32 design gives float32 knockoffs. Every matrix product states
``precision=HIGHEST``: the GPU default (TF32, about ``1e-3`` relative error)
would put a deterministic ``1e-3`` error, correlated with ``X``, into the
conditional mean ``X - (X - mu) Sigma^-1 S`` and a ``1e-3`` relative error into
the covariance of the noise, i.e. break the exchangeability of ``[X, X~]``
three orders of magnitude above float32 rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import (
    _aot,
    _feasibility,
    _memory,
    _mesh,
    _sampling_checks,
    _sampling_common,
    _sampling_factor,
    _sampling_multi,
)
from jaxknock._checks import (
    as_float_array,
    check_key,
    check_ndim,
    check_num_knockoffs,
    check_square,
    int_setting,
    is_concrete,
    static_flag,
)
from jaxknock._scaling import pow2_exponent, scale_pow2
from jaxknock._sigma_checks import traced_sigma_code
from jaxknock._solution import RESULTS, Solution
from jaxknock.covariance import FactorFit, FactorModel
from jaxknock.distributed import shard_batch
from jaxknock.svector.group import BlockDiagonal

__all__ = [
    "sample_knockoffs",
    "sample_knockoffs_factor",
    "sample_replicates",
    "fixed_x_knockoffs",
]

# --------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------


def _as_s(s, p: int, *, matrix_ok: bool = False):
    if isinstance(s, Solution):  # output of the S-vector solvers
        s = s.value
    if isinstance(s, BlockDiagonal):  # group knockoffs
        s = s.dense()
    s = as_float_array(s, "s")
    if matrix_ok and s.ndim == 2:
        if s.shape != (p, p):
            raise ValueError(f"S has shape {tuple(s.shape)} but X has p = {p} columns (expected ({p}, {p}))")
        return s
    check_ndim(s, 1, "s", f"a 1-D vector of length p = {p}")
    if s.shape[0] != p:
        raise ValueError(f"s has length {s.shape[0]} but X has p = {p} columns")
    return s


def _as_X(X):
    X = as_float_array(X, "X", bools=True)
    check_ndim(X, 2, "X", "a 2-D (n, p) array")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must have at least one row and one column, got shape {X.shape}")
    return X


def _as_mu(mu, p: int):
    if mu is None:
        return None
    mu = as_float_array(mu, "mu")
    if mu.ndim == 0:
        mu = jnp.broadcast_to(mu, (p,))
    check_ndim(mu, 1, "mu", f"a scalar or a vector of length p = {p}")
    if mu.shape[0] != p:
        raise ValueError(f"mu has length {mu.shape[0]} but X has p = {p} columns")
    return mu


def _common_dtype(X, *arrays):
    """Everything in ``X``'s dtype: sampling follows the design's precision (a float64 ``s``
    from the float64 S solve does not promote a float32 design; see jaxknock/_precision.py)."""
    return [X] + [None if a is None else a.astype(X.dtype) for a in arrays]


# --------------------------------------------------------------------------
# Dense sampler
# --------------------------------------------------------------------------


class _DensePlan(NamedTuple):
    mean: jax.Array  # (n, p) conditional mean
    L: jax.Array  # (p, p), L L^T = Omega


def _dense_plan(X, Sigma, s, mu) -> _DensePlan:
    if mu is None:
        mu = _sampling_common.column_means(X)
    # on the correlation scale (Sigma = D C D, S = D S_c D): Sigma^-1 S = D^-1 (C^-1 S_c) D, Omega = D Omega_c D
    d, C, sc = _sampling_common.correlation_scale(Sigma, s)
    Lc = jnp.linalg.cholesky(0.5 * (C + C.T))
    SinvS = jax.scipy.linalg.cho_solve((Lc, True), jnp.diag(sc))  # C^-1 S_c
    Omega = 2.0 * jnp.diag(sc) - sc[:, None] * SinvS
    mean = X - _sampling_common.mm((X - mu) / d, SinvS) * d
    # traced input checks, O(p^2): a non-symmetric / NaN Sigma or a NaN s poisons the draw
    valid = (
        traced_sigma_code(Sigma, rtol=_sampling_checks.symmetry_rtol(Sigma.dtype)) == RESULTS.successful
    ) & jnp.all(jnp.isfinite(s))
    L = _sampling_common.psd_factor(Omega, lambda: _feasibility.feasible_dense_traced(C, sc)) * d[:, None]
    return _DensePlan(mean, jnp.where(valid, L, jnp.nan))


def _dense_draw(key, plan: _DensePlan):
    n, p = plan.mean.shape
    g = jax.random.normal(key, (n, p), plan.mean.dtype)
    return plan.mean + _sampling_common.mm(g, plan.L.T)


def _refuse_factor_fit(law, name: str) -> None:
    """A :class:`FactorFit` (``(model, shrinkage)``) was read as a ``(d, U)`` pair or an array: NumPy's
    "inhomogeneous shape" error (``model.d must be a numeric array: ...``), naming the wrong thing."""
    if isinstance(law, FactorFit):
        raise TypeError(
            f"{name} is a jaxknock.FactorFit (the result of factor_model_from_data): pass its .model, the factor "
            "model of the correlation matrix, with X standardised column by column ((X - mean) / std), as "
            "knockoff_filter does"
        )


def _validate_dense(X, Sigma, s, mu, m: int = 1):
    X = _as_X(X)
    n, p = X.shape
    _refuse_factor_fit(Sigma, "Sigma")
    if isinstance(Sigma, FactorModel):  # was "Sigma must be a numeric array: ... inhomogeneous shape"
        raise TypeError(
            "Sigma is a jaxknock.FactorModel: use sample_knockoffs_factor (or sample_replicates, which "
            "takes either), or pass the dense matrix Sigma.dense()"
        )
    Sigma = as_float_array(Sigma, "Sigma")
    check_square(Sigma, "Sigma")
    if Sigma.shape[0] != p:
        raise ValueError(f"Sigma has shape {tuple(Sigma.shape)} but X has p = {p} columns")
    s = _as_s(s, p, matrix_ok=True)
    mu = _as_mu(mu, p)
    X, Sigma, s, mu = _common_dtype(X, Sigma, s, mu)
    _sampling_checks.check_dense_values(X, Sigma, s, mu, ratio=(m + 1.0) / m)
    return X, Sigma, s, mu


def sample_knockoffs(key, X, Sigma, s, *, mu=None, num_knockoffs=1):
    r"""Gaussian model-X knockoffs for a dense covariance (one replicate).

    Each row is drawn independently from

    .. math::
        \tilde x \mid x \sim \mathcal N\big(x - S\Sigma^{-1}(x - \mu),\;
        \Omega = 2S - S\Sigma^{-1}S\big),\qquad S = \mathrm{diag}(s),

    as ``X~ = mean + G L^T`` with ``G`` an ``(n, p)`` matrix of standard normals
    and ``L L^T = Omega`` factorised once. ``Omega`` is often PSD only up to
    rounding (it is singular for the equicorrelated ``s``): it is symmetrised
    and Cholesky-factorised with a jitter ``tau = p eps max(diag Omega)``; if
    that still fails, the factor falls back to ``Q sqrt(max(Lambda, 0))`` from the
    eigendecomposition (the nearest PSD matrix), so the result is never NaN.
    Both work on the correlation scale (``Omega = D Omega_c D``, ``D = diag(Sigma)^{1/2}``),
    and the feasibility slack is per variable, so variables in very different
    units (variances 1e-10 .. 1e10) get the same knockoffs as in unit variance.
    Same distribution as fanok's ``GaussianKnockoffs`` and knockpy's Gaussian
    sampler.

    **Block-diagonal / dense S** (group knockoffs): ``s`` may be a ``(p, p)``
    symmetric PSD matrix or a :class:`jaxknock.svector.group.BlockDiagonal`
    (the value of :func:`jaxknock.group_s_matrix`); the formulas above hold
    with that ``S`` (``Omega`` is factorised as above).

    **Multiple knockoffs** (``num_knockoffs = m > 1``, Gimenez & Zou 2019):
    ``m`` copies whose joint law with ``X`` has every ``X~k`` with covariance
    ``Sigma`` and cross-covariance ``Sigma - S`` with ``X`` and with every other
    copy. Given ``X`` the stacked copies have mean ``mean`` (each) and
    covariance ``1 1^T (x) (S - S Sigma^-1 S) + I_m (x) S``. It is drawn from
    one ``p x p`` factorisation (the trick of He et al. 2021 / Knockoffs.jl):

    .. math::
        \tilde x_k = \text{mean} + L g_0 + (e_k - \bar e),\quad
        LL^\top = \Omega_m = \frac{m+1}{m}S - S\Sigma^{-1}S,\quad
        e_k \sim \mathcal N(0, S)\ \text{i.i.d.},

    since ``e_k - e_bar`` has covariance ``(1 - 1/m) S`` and cross-covariance
    ``-S/m``. ``Omega_m >= 0`` is exactly the feasibility condition
    ``(m+1)/m Sigma - S >= 0``: checked on concrete inputs (``ValueError``); under
    ``jit`` an infeasible ``S`` (``lambda_min(Omega_m) < -sqrt(eps) max diag``)
    returns all-NaN knockoffs. ``m = 1`` is the ordinary sampler, bit for bit.

    Cost: ``O(n p^2 + p^3)`` time, ``O(p^2 + n p)`` memory (plus ``O(m n p)``
    for ``m`` copies, and one more ``p x p`` factorisation for a dense ``S``
    with ``m > 1``). For a factor model use :func:`sample_knockoffs_factor`
    (linear in ``p``).

    Args:
        key: a ``jax.random`` key (one replicate; ``jax.vmap`` over
            ``jax.random.split(key, R)`` for many, or :func:`sample_replicates`).
        X: ``(n, p)`` observations.
        Sigma: ``(p, p)`` symmetric positive definite covariance of the rows.
        s: ``(p,)`` vector with ``0 <= diag(s) <= 2 Sigma`` (e.g. from
            ``jaxknock.sdp``); a ``Solution`` is accepted (its ``value``).
        mu: mean of the rows, ``(p,)`` or scalar; ``None`` uses the column
            means of ``X`` (as fanok and knockpy do). Pass ``mu=0`` for centred data.
        num_knockoffs: number ``m >= 1`` of simultaneous knockoff copies.

    Returns:
        ``(n, p)`` knockoff matrix ``X~`` in the dtype of ``X``; for
        ``m > 1`` an ``(n, m, p)`` array (copy ``k`` is ``[:, k, :]``), so
        ``Xk.reshape(n, m * p)`` is the knockoff part of the design
        ``[X, X~1, ..., X~m]``.

    Raises:
        ValueError: shape mismatch, NaN/Inf in the inputs, ``Sigma`` not
            positive definite, ``s < 0``, or ``s`` infeasible (the message gives
            the largest feasible scaling ``gamma``; fix with
            ``jaxknock.scale_to_feasible``).

    Example:
        >>> import jax, jax.numpy as jnp, jaxknock
        >>> Sigma = 0.5 * jnp.eye(3) + 0.5
        >>> X = jax.random.normal(jax.random.key(1), (100, 3)) @ jnp.linalg.cholesky(Sigma).T
        >>> s = jnp.full(3, 2 * jnp.linalg.eigvalsh(Sigma)[0])  # equicorrelated
        >>> Xk = jaxknock.sample_knockoffs(jax.random.key(0), X, Sigma, s)
        >>> Xk.shape
        (100, 3)
        >>> s2 = jnp.full(3, 1.5 * jnp.linalg.eigvalsh(Sigma)[0])  # (m+1)/m Sigma - S >= 0, m = 2
        >>> jaxknock.sample_knockoffs(jax.random.key(0), X, Sigma, s2, num_knockoffs=2).shape
        (100, 2, 3)
    """
    check_key(key)
    m = check_num_knockoffs(num_knockoffs)
    X, Sigma, s, mu = _validate_dense(X, Sigma, s, mu, m)
    return _draw_one(key, _plan(X, (Sigma, s), mu, "dense", m))


# --------------------------------------------------------------------------
# Factor-model sampler
# --------------------------------------------------------------------------


def _at_least_one_factor(U):
    """``U``, or one zero column where it has none: ``diag(d) + U U^T`` is the same law.

    A model without factors (``U`` of shape ``(p, 0)``, ``Sigma = diag(d)``) is valid, and the S solvers
    take it, but the draw's blocked recursion needs a ``k >= 1`` state: it was refused ("model.U must have
    at least one column"), also by :func:`~jaxknock.knockoff_filter` after the S solve of a known
    ``Sigma=FactorModel(d, U)`` with no factors. A zero column adds nothing to ``Sigma``, ``Omega`` or the
    conditional mean, and the draw's normals per column block do not depend on ``k``.
    """
    return U if U.shape[1] >= 1 else jnp.zeros((U.shape[0], 1), U.dtype)


def _validate_factor(X, model, s, mu, m: int = 1):
    X = _as_X(X)
    n, p = X.shape
    _refuse_factor_fit(model, "model")
    if isinstance(model, FactorModel):
        d, U = model.d, model.U
    elif isinstance(model, (tuple, list)) and len(model) == 2:
        d, U = model
    else:
        raise TypeError(
            "model must be a jaxknock.FactorModel(d, U) (Sigma = diag(d) + U U^T), "
            f"got {type(model).__name__}; for a dense Sigma use sample_knockoffs"
        )
    d = as_float_array(d, "model.d")
    U = as_float_array(U, "model.U")
    check_ndim(d, 1, "model.d", "a 1-D (p,) vector")
    check_ndim(U, 2, "model.U", "a 2-D (p, k) matrix")
    if d.shape[0] != p or U.shape[0] != p:
        raise ValueError(
            f"the factor model has d of shape {tuple(d.shape)} and U of shape "
            f"{tuple(U.shape)}, but X has p = {p} columns"
        )
    U = _at_least_one_factor(U)
    s = _as_s(s, p)
    mu = _as_mu(mu, p)
    X, d, U, s, mu = _common_dtype(X, d, U, s, mu)
    _sampling_checks.check_factor_values(X, d, U, s, mu, ratio=(m + 1.0) / m)
    return X, d, U, s, mu


def sample_knockoffs_factor(key, X, model, s, *, mu=None, num_knockoffs=1):
    r"""Gaussian knockoffs in linear time under a factor model (one replicate).

    For ``Sigma = D + U U^T`` (``model = FactorModel(d, U)``, ``U`` of shape
    ``(p, k)``) the conditional covariance is (thesis section 4.3, eq. 4.1)

    .. math::
        \Omega = 2S - S\Sigma^{-1}S = C + ZZ^\top,\quad C = 2S - SD^{-1}S,\quad
        Z = SD^{-1}UN,\quad NN^\top = (I_k + U^\top D^{-1}U)^{-1},

    where the diagonal ``C`` may be indefinite (``s_j > 2 d_j``, possible on at
    most ``k`` coordinates since ``2D - S + 2UU^T >= 0``). Two exact factorisations
    ``Omega = A A^T``, chosen on the data (``lax.cond``, so ``jit``/``vmap`` safe):

    * ``C >= 0``: ``A = [C^{1/2}, Z]`` (``p x (p + k)``), i.e.
      ``X~ = mean + G C^{1/2} + H Z^T`` with ``H`` an extra ``n x k`` normal
      matrix; no recursion, draw ``O(n p k)``.
    * ``C`` indefinite: ``A`` block lower triangular, a blocked form of the
      ``L Delta L^T`` factorisation of Algorithms 6-8. The trailing Schur
      complement is carried as a ``k x k`` matrix ``M``; each block of ``m``
      columns factorises its ``m x m`` Schur complement (Cholesky, or an
      eigendecomposition with the pseudo-inverse where a block is singular,
      which is Algorithm 6's ``Delta_jj = 0`` case; both on the correlation scale,
      ``Omega = D_s Omega_c D_s``, ``D_s = diag(Sigma)^{1/2}``, so variables in very
      different units get the same knockoffs as in unit variance), and the below-diagonal part
      of ``A`` is ``Z_I F_J`` (rank ``k``), never stored. The sequential
      recursions of Algorithms 7-8 become matrix products per block:
      ``X~_J = mean_J + G_J A_J^T + W Z_J^T`` and ``W += G_J F_J^T``.

    In both, the conditional mean's low-rank term is folded into ``W`` (its
    initial value), and the output is written block by block, so the only
    ``(n, p)`` array besides ``X`` is the result.

    Cost: ``O(p k^2)`` checks and set-up, plus ``O(p m (m + k))`` for the
    recursion; draw ``O(n p k)`` (``C >= 0``) or ``O(n p (m + 3k))`` (block size
    ``m = 64``). Memory ``(n p + n k + p (m + 2k)) x itemsize`` beyond ``X``; no
    ``p x p`` array is formed. Same distribution as :func:`sample_knockoffs`
    with ``Sigma = model.dense()`` and as fanok's ``LowRankGaussianKnockoffs``.

    Multiple knockoffs (``num_knockoffs = m > 1``): as in :func:`sample_knockoffs`,
    a common part ``N(mean, Omega_m)`` with ``Omega_m = (m+1)/m S - S Sigma^-1 S
    = diag(c') + Z Z^T``, ``c' = (m+1)/m s - s^2/d`` (the same factor structure,
    so the same linear-time draw), plus centred independent parts
    ``e_k - e_bar``, ``e_k ~ N(0, diag(s))``; ``O(m n p)`` more. Returns
    ``(n, m, p)``. Feasibility ``(m+1)/m Sigma - diag(s) >= 0`` is checked on
    concrete inputs in ``O(p k^2)``; under ``jit`` an infeasible ``s`` returns
    all-NaN knockoffs (as for ``m = 1``). Only
    a diagonal ``S`` (a vector ``s``): group knockoffs need the dense sampler.

    Args:
        key: a ``jax.random`` key (one replicate; vmappable over split keys).
        X: ``(n, p)`` observations.
        model: :class:`jaxknock.FactorModel` ``(d, U)`` with ``d > 0``.
        s: ``(p,)`` with ``0 <= diag(s) <= 2 (D + U U^T)`` (checked in
            ``O(p k^2)``); a ``Solution`` is accepted.
        mu: row mean, ``(p,)`` or scalar; ``None`` uses the column means of ``X``.

    Returns:
        ``(n, p)`` knockoff matrix.

    Raises:
        TypeError / ValueError: as :func:`sample_knockoffs`; infeasible ``s``
            reports the largest feasible scaling ``gamma`` and points to
            ``jaxknock.scale_to_feasible``.

    Example:
        >>> import jax, jax.numpy as jnp, jaxknock
        >>> kd, ku, kx = jax.random.split(jax.random.key(0), 3)
        >>> p, k = 1000, 5
        >>> model = jaxknock.FactorModel(jax.random.uniform(kd, (p,)) + 0.5,
        ...                              jax.random.normal(ku, (p, k)) / jnp.sqrt(k))
        >>> X = jax.random.normal(kx, (50, p))
        >>> s = jnp.full(p, 1.0)      # 2 diag(d) >= s, hence feasible
        >>> Xk = jaxknock.sample_knockoffs_factor(jax.random.key(1), X, model, s)
        >>> Xk.shape
        (50, 1000)
    """
    check_key(key)
    m = check_num_knockoffs(num_knockoffs)
    X, d, U, s, mu = _validate_factor(X, model, s, mu, m)
    return _draw_one(key, _plan(X, (d, U, s), mu, "factor", m))


# --------------------------------------------------------------------------
# Many replicates
# --------------------------------------------------------------------------


def _sampler_spec(X, Sigma, s, mu, m: int = 1):
    _refuse_factor_fit(Sigma, "Sigma")  # named, before it is read as a dense law
    if isinstance(Sigma, FactorModel) or _sampling_common.is_factor_pair(Sigma):
        X, d, U, s, mu = _validate_factor(X, Sigma, s, mu, m)
        return "factor", X, (d, U, s), mu, U.shape[1]
    X, Sig, s, mu = _validate_dense(X, Sigma, s, mu, m)
    return "dense", X, (Sig, s), mu, None


def _sampler_bytes(n: int, p: int, k: int | None, itemsize: int) -> tuple[int, int]:
    """(shared, per-replicate) bytes of the sampler for these shapes (see :func:`sample_replicates`)."""
    if k is None:
        return _memory.knockoff_bytes(n, p, None, itemsize)
    m = _sampling_factor.block_size(p, k)
    chunk = 2 * n * _sampling_factor.chunk_blocks(n, -(-p // m), m, k) * (m + k)
    return _memory.knockoff_bytes(n, p, k, itemsize, block_size=m, chunk_elements=chunk)


# The key-independent plan (factorisation of Omega, conditional mean) and the draw
# are separate jits: the plan is compiled and computed once and shared by the
# single-replicate samplers, the vmapped chunks and the streaming iterator.
@partial(jax.jit, static_argnames=("kind", "m"))
def _plan(X, params, mu, kind, m=1):
    if kind in ("factor", "factor_recursive"):
        force = kind == "factor_recursive"  # benchmarks/tests: the indefinite-C path on any data
        if m == 1:
            return _sampling_factor.factor_plan(X, *params, mu, force_recursion=force)
        base = _sampling_factor.factor_plan(X, *params, mu, force_recursion=force, scale=(m + 1.0) / m)
        s = params[2]
        return _sampling_multi.MultiFactorPlan(base, jnp.sqrt(jnp.clip(s, 0.0)), jnp.zeros((m,), X.dtype))
    if m == 1 and params[1].ndim == 1:
        return _dense_plan(X, *params, mu)
    return _sampling_multi.multi_dense_plan(X, *params, mu, m)


def replicate_plan(X, Sigma, s, *, mu=None, force_recursion: bool = False, num_knockoffs=1):
    """The key-independent part of a knockoff draw, validated and computed once.

    The plan/draw seam of the samplers (for the fused sampling + statistics
    stage of :func:`jaxknock.knockoff_filter`, benchmarks and tests):
    ``draw_replicate(key, replicate_plan(X, Sigma, s))`` equals
    ``sample_knockoffs(key, X, Sigma, s)`` (or ``sample_knockoffs_factor``
    for a :class:`jaxknock.FactorModel` or a ``(d, U)`` pair). The plan is a pytree of arrays
    (the conditional mean and the factor of ``Omega``), so it can be
    broadcast to devices; :func:`plan_bytes` gives its memory estimate.

    Args:
        X, Sigma, s, mu: as :func:`sample_knockoffs` / :func:`sample_knockoffs_factor`.
        force_recursion: factor model only; use the blocked ``L Delta L^T``
            recursion even when ``C >= 0`` (the path indefinite ``C`` needs;
            same distribution).
        num_knockoffs: ``m`` simultaneous copies (draws of shape ``(n, m, p)`` for ``m > 1``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> Sigma = 0.5 * jnp.eye(3) + 0.5
        >>> X = jax.random.normal(jax.random.key(1), (20, 3))
        >>> plan = replicate_plan(X, Sigma, jnp.full(3, 0.9))
        >>> bool(jnp.allclose(draw_replicate(jax.random.key(0), plan),
        ...                   sample_knockoffs(jax.random.key(0), X, Sigma, jnp.full(3, 0.9)), atol=1e-5))
        True
    """
    m = check_num_knockoffs(num_knockoffs)
    kind, X, params, mu, _ = _sampler_spec(X, Sigma, s, mu, m)
    if force_recursion:
        if kind != "factor":
            raise ValueError("force_recursion applies to a FactorModel only")
        kind = "factor_recursive"
    return _plan(X, params, mu, kind, m)


def draw_replicate(key, plan):
    """One knockoff replicate from a :func:`replicate_plan` (pure; ``vmap`` it over split keys)."""
    if isinstance(plan, _sampling_factor.FactorPlan):
        return _sampling_factor.factor_draw(key, plan)
    if isinstance(plan, _sampling_multi.MultiFactorPlan):
        return _sampling_multi.multi_factor_draw(key, plan)
    if isinstance(plan, _sampling_multi.MultiDensePlan):
        return _sampling_multi.multi_dense_draw(key, plan)
    return _dense_draw(key, plan)


def plan_bytes(plan) -> tuple[int, int]:
    """``(shared, per_replicate)`` bytes of drawing from ``plan`` (:func:`jaxknock._memory.knockoff_bytes`)."""
    if isinstance(plan, (_sampling_multi.MultiFactorPlan, _sampling_multi.MultiDensePlan)):  # m copies: m times
        m = plan.copies.shape[0]
        if isinstance(plan, _sampling_multi.MultiFactorPlan):
            shared, per = plan_bytes(plan.base)
        else:
            n, p = plan.mean.shape
            shared, per = _memory.knockoff_bytes(n, p, None, plan.mean.dtype.itemsize)
        return shared, (m + 1) * per
    if isinstance(plan, _sampling_factor.FactorPlan):
        n, p = plan.X.shape
        return _sampler_bytes(n, p, plan.Zb.shape[-1], plan.X.dtype.itemsize)
    n, p = plan.mean.shape
    return _memory.knockoff_bytes(n, p, None, plan.mean.dtype.itemsize)


_draw_one = jax.jit(draw_replicate)
_draw_chunk = jax.jit(jax.vmap(draw_replicate, in_axes=(0, None)))


@partial(jax.jit, static_argnames=("R", "kind", "m"))
def _plan_and_draw(key, X, params, mu, R, *, kind, m):
    """:func:`_plan` and all ``R`` replicates in one program, with the keys :func:`sample_replicates` gives them."""
    return _draw_chunk(jax.random.split(key, R), _plan(X, params, mu, kind, m))


@partial(jax.jit, donate_argnums=0)
def _write_chunk(out, chunk, start):
    return lax.dynamic_update_slice_in_dim(out, chunk, start, axis=0)


def _chunk_starts(R, chunk):
    # every chunk has the same size (one compilation); the last one is moved back
    # to end at R, recomputing a few replicates with the same keys (same values)
    return [min(start, R - chunk) for start in range(0, R, chunk)]


def _stream(keys, plan, R, chunk) -> Iterator[jax.Array]:
    done = 0
    for start in _chunk_starts(R, chunk):
        block = _draw_chunk(keys[start : start + chunk], plan)
        yield block if start == done else block[done - start :]
        done = start + chunk


def sample_replicates(
    key,
    X,
    Sigma,
    s,
    num_replicates,
    *,
    mu=None,
    chunk_size=None,
    stream=False,
    devices=None,
    mesh=None,
    num_knockoffs=1,
):
    r"""``R`` independent knockoff replicates, batched with ``vmap`` in chunks.

    Replicate ``r`` is exactly ``sampler(jax.random.split(key, R)[r], X, Sigma, s)``
    with ``sampler`` = :func:`sample_knockoffs_factor` if ``Sigma`` is a
    :class:`jaxknock.FactorModel` or a ``(d, U)`` pair, else :func:`sample_knockoffs`; the chunking
    never changes the numbers. The factorisation of ``Omega`` and the
    conditional mean are computed once and shared by all replicates.

    Memory (``b`` bytes per element, ``m`` the block size ~64, ``c`` replicates
    per chunk): shared part ``(n p + p^2) b`` dense or ``(n k + p (m + 2k)) b``
    factor; per replicate in flight ``3 n p b`` dense or ``(n p + 4 n (m + k)) b``
    factor; plus the result, ``R n p b`` when materialised, or one chunk
    ``c n p b`` held by the caller when streaming. With ``chunk_size=None`` the
    chunk is the largest ``c`` for which all of that fits in half of the
    available memory (accelerator ``memory_stats`` or the host's
    ``MemAvailable``), and at least 1. If the ``(R, n, p)`` result plus one
    replicate does not fit in the available memory, a ``ValueError`` asks for
    ``stream=True``.

    Args:
        key: a ``jax.random`` key.
        X: ``(n, p)`` observations.
        Sigma: ``(p, p)`` covariance, or a :class:`jaxknock.FactorModel` or
            ``(d, U)`` pair (as :func:`sample_knockoffs_factor` takes).
        s: ``(p,)`` feasible vector (or ``Solution``).
        num_replicates: ``R >= 1``.
        mu: row mean (``None``: column means of ``X``).
        chunk_size: replicates per ``vmap`` batch; ``None`` picks it from
            available memory.
        stream: if True, return an iterator over ``(c, n, p)`` chunks (in
            replicate order, the last one possibly shorter) instead of the full
            ``(R, n, p)`` array.
        devices, mesh: shard the replicates over devices
            (:func:`jaxknock.distributed.shard_batch`): ``None`` uses every
            device (the plain single-device path when there is only one), an
            int the first ``d`` devices, or pass a 1-D ``mesh``. The keys are
            split before sharding, so the result does not depend on the number
            of devices; ``chunk_size`` is then per device and step, and the
            memory plan (:func:`jaxknock.distributed.plan_chunk`) uses one
            device's free memory and its ``1/D`` share of the result.
        num_knockoffs: ``m`` simultaneous knockoffs per replicate (see
            :func:`sample_knockoffs`); ``s`` may also be a ``(p, p)`` or
            block-diagonal ``S`` for a dense ``Sigma``.

    Returns:
        ``(R, n, p)`` array (``(R, n, m, p)`` for ``m > 1``), or
        (``stream=True``) an iterator of chunks.

    Example:
        >>> import jax, jax.numpy as jnp, jaxknock
        >>> Sigma = 0.5 * jnp.eye(4) + 0.5
        >>> X = jax.random.normal(jax.random.key(1), (30, 4))
        >>> Xk = jaxknock.sample_replicates(jax.random.key(0), X, Sigma,
        ...                                 jnp.full(4, 0.9), 8)
        >>> Xk.shape
        (8, 30, 4)
        >>> total = sum(c.sum() for c in jaxknock.sample_replicates(
        ...     jax.random.key(0), X, Sigma, jnp.full(4, 0.9), 8, stream=True))
    """
    check_key(key)
    # a concrete JAX integer (jnp.int32(8)) is a count like np.int32(8); stream="no" / None were truthy
    num_replicates = int_setting(num_replicates, "num_replicates")
    chunk_size = None if chunk_size is None else int_setting(chunk_size, "chunk_size")
    stream = static_flag(stream, "stream")
    if isinstance(num_replicates, bool) or not isinstance(num_replicates, (int, np.integer)):
        raise TypeError(f"num_replicates must be an int, got {type(num_replicates).__name__}")
    R = int(num_replicates)
    if R < 1:
        raise ValueError(f"num_replicates must be >= 1, got {R}")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
            raise TypeError(f"chunk_size must be an int or None, got {type(chunk_size).__name__}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    m = check_num_knockoffs(num_knockoffs)
    kind, X, params, mu, k = _sampler_spec(X, Sigma, s, mu, m)
    n, p = X.shape
    if _mesh.wants_sharding(devices, mesh):
        return _sharded_replicates(
            key, X, params, mu, kind, k, R, chunk_size, stream, _mesh.resolve_mesh(devices, mesh, None), m
        )
    if chunk_size is None:
        shared, per_rep = _sampler_bytes(n, p, k, X.dtype.itemsize)
        chunk = _memory.replicate_chunk(
            R,
            n,
            p * m,
            X.dtype.itemsize,
            shared,
            per_rep * (1 if m == 1 else m + 1),
            stream=stream,
            memory_bytes=_memory.device_memory_bytes(jax.devices()[0]),
        )
    else:
        chunk = int(min(chunk_size, R))
    if chunk >= R and not stream:  # one program: the plan, the keys and every replicate
        return _aot.call(_plan_and_draw, key, X, params, mu, R=R, kind=kind, m=m)
    plan = _plan(X, params, mu, kind, m)
    keys = jax.random.split(key, R)
    if stream:
        return _stream(keys, plan, R, chunk)
    out = jnp.zeros((R, n, p) if m == 1 else (R, n, m, p), X.dtype)
    for start in _chunk_starts(R, chunk):
        out = _write_chunk(out, _draw_chunk(keys[start : start + chunk], plan), start)
    return out


def _sharded_replicates(key, X, params, mu, kind, k, R, chunk_size, stream, mesh, m=1):
    """:func:`sample_replicates` over the devices of a 1-D mesh (see its docstring)."""
    n, p = X.shape
    D = int(mesh.shape[mesh.axis_names[0]])
    b = X.dtype.itemsize * m  # m copies: m times the result and (roughly) the work
    shared, per_rep = _sampler_bytes(n, p, k, b)
    if stream:
        per_rep += n * p * b  # the chunk held by the consumer
    else:
        shared += -(-R // D) * n * p * b  # this device's share of the (R, n, p) result
    if chunk_size is None:
        chunk = _memory.plan_chunk(
            R,
            per_rep,
            shared_bytes=shared,
            num_devices=D,
            memory_bytes=_memory.device_memory_bytes(mesh),
            what="replicate",
            knob="stream=True" if not stream else "chunk_size",
        )
    else:
        chunk = int(min(chunk_size, -(-R // D)))
    keys = jax.random.split(key, R)  # before sharding: independent of D
    plan = _plan(X, params, mu, kind, m)
    if stream:
        step = D * chunk
        return (
            shard_batch(
                draw_replicate,
                keys[i : i + step],
                broadcast=(plan,),
                mesh=mesh,
                axis_name=mesh.axis_names[0],
                chunk_size=chunk,
            )
            for i in range(0, R, step)
        )
    return shard_batch(
        draw_replicate, keys, broadcast=(plan,), mesh=mesh, axis_name=mesh.axis_names[0], chunk_size=chunk
    )


# --------------------------------------------------------------------------
# Fixed-X knockoffs
# --------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("check_rank",))
def _fixed_x(Xn, s, check_rank=False):
    n, p = Xn.shape
    G = _sampling_common.mm(Xn.T, Xn)
    G = 0.5 * (G + G.T)
    Lg = jnp.linalg.cholesky(G)
    GinvS = jax.scipy.linalg.cho_solve((Lg, True), jnp.diag(s))
    A = Xn - _sampling_common.mm(Xn, GinvS)
    # C^T C = G - A^T A for the computed A (= 2S - S G^-1 S exactly): then X~^T X~ = A^T A + C^T C is G
    # to rounding however ill-conditioned G is. 2S - S (G^-1 S) with the computed G^-1 S carried its error,
    # ~eps cond(G): X~^T X~ was off by 6e-5 at lambda_min(G) = 5e-13 (a design the rank check accepts)
    Omega = G - _sampling_common.mm(A.T, A)
    Omega = 0.5 * (Omega + Omega.T)
    lam, Q = jnp.linalg.eigh(Omega)
    C = jnp.sqrt(jnp.clip(lam, 0.0))[:, None] * Q.T  # C^T C = Omega (clipped)
    # Orthonormal U~ with U~^T X = 0: Householder QR of [X, 0]; the zero columns get
    # identity reflectors, so Q[:, p:2p] = H_1...H_p e_{p+j} spans part of col(X)^perp.
    # With n >= 2p + 1 the all-ones vector goes in after X, so U~ is orthogonal to it too: the
    # knockoffs of a centred X are centred (X~^T 1 = (I - S G^-1) X^T 1 = 0), and a statistic with an
    # intercept (which centres [X, X~]) sees the fixed-X Gram exactly. U~ from [X, 0] alone had
    # X~^T 1 != 0: the centred knockoffs were shorter than their originals (squared norms 0.985-0.999
    # at n = 60, p = 20), breaking the swap symmetry of the centred Gram, and an intercept left in y
    # reached X~^T y but not X^T y
    ones = jnp.full((n, 1 if n > 2 * p else 0), 1.0, Xn.dtype)
    Qx, _ = jnp.linalg.qr(jnp.concatenate([Xn, ones, jnp.zeros_like(Xn)], axis=1))
    Ut = Qx[:, p + ones.shape[1] : 2 * p + ones.shape[1]]
    Xk = A + _sampling_common.mm(Ut, C)
    # the clipping above is right only for rounding: an infeasible or negative s
    # (traced, so not seen by the eager check) poisons the knockoffs with NaN
    ok = _feasibility.feasible_dense_traced(G, s)
    if check_rank:  # a traced X: the eager rank test on the device
        ok = ok & _sampling_checks.full_rank_flag(G)
    return jnp.where(ok, Xk, jnp.nan)


def fixed_x_knockoffs(X, s):
    r"""Fixed-X knockoffs (Barber & Candes 2015), deterministic, for ``n >= 2p``.

    After the standard normalisation ``X_j <- X_j / ||X_j||`` (so the Gram matrix
    ``Sigma = X^T X`` has unit diagonal), with ``S = diag(s)``:

    .. math::
        \tilde X = X(I - \Sigma^{-1}S) + \tilde U C,\qquad
        C^\top C = 2S - S\Sigma^{-1}S,

    where ``U~`` (``n x p``) is orthonormal and orthogonal to the columns of
    ``X``. Then exactly ``X~^T X~ = X^T X`` and ``X^T X~ = X^T X - diag(s)``.
    ``C`` comes from the eigendecomposition of ``X^T X - A^T A``, ``A = X(I - Sigma^{-1}S)``
    as computed (``= 2S - S Sigma^{-1} S``), with rounding-level negative
    eigenvalues clipped, so ``X~^T X~ = X^T X`` to rounding however ill-conditioned
    ``X`` is; ``U~`` from a Householder QR of ``[X, 1, 0]`` (``[X, 0]`` when ``n = 2p``),
    so with ``n >= 2p + 1`` it is orthogonal to the all-ones vector as well. Under ``jit``
    an infeasible ``s`` or (nearly) linearly dependent columns of a traced ``X``, which
    raise eagerly, give ``X~`` all NaN. ``X`` is not centred: if the model has an
    intercept, centre ``X`` first and take ``n >= 2p + 1``; then ``X~`` is centred too
    (``X~^T 1 = 0``) and a statistic with an intercept (``fit_intercept=True``) sees the
    fixed-X Gram exactly (at ``n = 2p`` the knockoffs keep a mean). The statistic must
    depend on the data only through ``[X, X~]^T [X, X~]`` and ``[X, X~]^T y`` (e.g. the
    lasso at a fixed ``lam``, a fraction of :func:`~jaxknock.lambda_max`): one fitted on
    subsets of the rows (the cross-validated lasso) has no fixed-X guarantee. Each column is first
    scaled by a power of two (exact), so the normalisation neither overflows nor
    flushes to zero whatever its units. Matches fanok's
    ``fixed_knockoffs`` / knockpy's fixed-X construction up to the choice of ``U~``.

    Cost: ``O(n p^2 + p^3)`` time, ``O(n p + p^2)`` memory.

    Args:
        X: ``(n, p)`` design with ``n >= 2p`` and linearly independent columns.
        s: ``(p,)`` with ``0 <= diag(s) <= 2 X_n^T X_n`` for the *normalised*
            ``X_n`` (e.g. equicorrelated ``min(1, 2 lambda_min(X_n^T X_n))``).

    Returns:
        ``(X_normalized, X_tilde)``, both ``(n, p)``.

    Example:
        >>> import jax, jax.numpy as jnp, jaxknock
        >>> X = jax.random.normal(jax.random.key(0), (40, 10))
        >>> Xn = X / jnp.linalg.norm(X, axis=0)
        >>> s = jnp.full(10, min(1.0, 2 * float(jnp.linalg.eigvalsh(Xn.T @ Xn)[0])))
        >>> Xn, Xk = jaxknock.fixed_x_knockoffs(X, s)
        >>> bool(jnp.allclose(Xk.T @ Xk, Xn.T @ Xn, atol=1e-4))
        True
    """
    X = _as_X(X)
    n, p = X.shape
    if n < 2 * p:
        raise ValueError(
            f"fixed-X knockoffs need n >= 2p, got n = {n} < 2p = {2 * p} for X of shape {(n, p)}; use model-X "
            "knockoffs (jaxknock.sample_knockoffs / sample_knockoffs_factor) instead"
        )
    s = _as_s(s, p)
    X, s = _common_dtype(X, s)
    X = _pow2_columns(X)
    _sampling_checks.check_fixed_x_values(X, s)
    Xn = X / jnp.linalg.norm(X, axis=0)
    # a traced X skipped the eager rank check: (nearly) dependent columns, whose Cholesky of G can still
    # succeed, gave finite knockoffs with X~^T X~ off by 2e-3 (float32); they are NaN now
    return Xn, _fixed_x(Xn, s, check_rank=not is_concrete(X))


@jax.jit
def _pow2_columns(X):
    """Each column on its power-of-two scale, ``max |X_j / 2^e_j|`` in ``[0.5, 1)`` (exact; NaN, Inf, 0 kept).

    The normalisation ``X_j / ||X_j||`` is then the same to the bit where ``||X_j||`` was
    representable, and does not overflow or flush to zero where it was not (columns in units
    ``1e160`` or ``1e-170`` in float64, ``1e25`` / ``1e-25`` in float32, were refused as linearly
    dependent or all-zero).
    """
    return scale_pow2(X, -pow2_exponent(jnp.max(jnp.abs(X), axis=0)))
