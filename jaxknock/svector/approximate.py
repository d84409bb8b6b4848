r"""Approximate S-vectors: :func:`asdp` (block-diagonal SDP) and :func:`scale_to_feasible`."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _checks, _sigma_checks
from jaxknock._deprecation import renamed_kwargs
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import FactorModel
from jaxknock.svector import _common, certificate, coordinate
from jaxknock.svector.dense import solve_dense
from jaxknock.svector.newton import default_lam0

__all__ = ["asdp", "scale_to_feasible"]


def _bisect_gamma(is_pd, s, diag, num_steps):
    """``(gamma, feasible)``: the largest ``gamma`` in ``[0, 1/max(s/diag)]`` with ``is_pd(gamma)``
    (the bracket's upper end if feasible, else the lower end after ``num_steps``
    bisections; ``num_steps`` may be traced) and whether that end passed ``is_pd`` when it was tested.

    The flag is carried through the bisection rather than re-tested: at the PD
    boundary the test's outcome depends on rounding, and a re-test compiled
    differently may disagree with the one that accepted ``gamma``.
    """
    hi = 1.0 / jnp.maximum(jnp.max(s / diag), 1e-300)
    hi_ok = is_pd(hi)

    def body(_, br):
        lo, hi, lo_ok = br
        mid = 0.5 * (lo + hi)
        ok = is_pd(mid)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid), lo_ok | ok

    # gamma = 0 (s = 0) is feasible iff 2 Sigma is PD
    lo, _, lo_ok = lax.fori_loop(0, num_steps, body, (jnp.zeros_like(hi), hi, is_pd(jnp.zeros_like(hi))))
    return jnp.where(hi_ok, hi, lo), hi_ok | lo_ok


def _scale_code(input_code, s, feasible):
    """``nonfinite`` for NaN/Inf ``s``, ``infeasible`` for negative ``s`` or an unverified ``gamma s``."""
    code = jnp.where(
        ~jnp.all(jnp.isfinite(s)),
        RESULTS.nonfinite,
        jnp.where(jnp.any(s < 0) | ~feasible, RESULTS.infeasible, RESULTS.successful),
    )
    return _checks.combine_codes(input_code, code)


@jax.jit
def _gamma_dense(Sigma, s, num_steps):
    is_pd = lambda g: jnp.all(jnp.isfinite(jnp.linalg.cholesky(2.0 * Sigma - jnp.diag(g * s))))
    gamma, feasible = _bisect_gamma(is_pd, s, jnp.diagonal(Sigma), num_steps)
    return gamma, _scale_code(_sigma_checks.traced_sigma_code(Sigma), s, feasible)


@jax.jit
def _gamma_factor(d, U, s, num_steps):
    is_pd = lambda g: _common.factor_is_pd(d, U, g * s)
    gamma, feasible = _bisect_gamma(is_pd, s, d + jnp.sum(U**2, axis=1), num_steps)
    return gamma, _scale_code(_sigma_checks.traced_factor_code(d, U), s, feasible)


@renamed_kwargs(num_bisections="max_steps")
def scale_to_feasible(Sigma, s, *, max_steps: int = 60) -> Solution:
    r"""Largest ``gamma`` in ``[0, 1/max(s/diag Sigma)]`` with ``diag(gamma s) <= 2 Sigma``; returns ``gamma s``.

    Bisection on ``gamma`` with a Cholesky-success test of
    ``2 Sigma - gamma diag(s)`` (dense ``Sigma``), or the exact ``O(p k^2)``
    inertia test when ``Sigma`` is a :class:`~jaxknock.FactorModel`. This is
    the second step of ASDP and the "hybrid" route of thesis section 4.3
    (an ``s`` solved on an approximate factor model, made feasible for the
    true ``Sigma``). The upper end of the bracket keeps ``gamma s <= diag Sigma``
    (i.e. ``<= 1`` on the correlation scale). Compiled once per shape
    (``max_steps`` is traced); ``Sigma`` and ``s`` are validated by device-side
    reductions (a few scalars come back to the host).

    Args:
        Sigma: ``(p, p)`` matrix or :class:`~jaxknock.FactorModel`.
        s: ``(p,)`` non-negative candidate.
        max_steps: bisection steps (``2^-60`` relative accuracy by default;
            ``num_bisections`` is a deprecated alias).

    Returns:
        :class:`~jaxknock.Solution` with ``value = gamma * s`` (feasible: the
        lower end of the final bracket) and ``stats = {gamma, num_steps,
        max_steps, objective}``. ``result`` is ``successful`` when
        ``2 Sigma - diag(gamma s)`` passed the Cholesky (or inertia) test.

    Under jit (value checks skipped): ``s`` with a negative entry, a ``Sigma``
    that is not symmetric or whose ``2 Sigma`` fails the test even at
    ``gamma = 0``, or a factor model with ``d_j <= 0`` give ``infeasible``;
    NaN/Inf in ``s`` or ``Sigma`` give ``nonfinite``. Eagerly these raise
    ``ValueError``.

    Example:
        >>> round(float(scale_to_feasible(0.5 * jnp.eye(2) + 0.5, jnp.array([2.0, 2.0])).stats["gamma"]), 6)
        0.5
    """
    if isinstance(s, FactorModel):
        raise TypeError("scale_to_feasible(Sigma, s): Sigma first, then s")
    if not (_checks.is_int(max_steps) and max_steps >= 0):  # not a bool: True was taken as 1
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
    max_steps = int(max_steps)
    s = _checks.as_float_array(s, "s")
    if isinstance(Sigma, FactorModel):
        Sigma = FactorModel(*_common.validate_model(Sigma))
        diag = Sigma.diagonal()
        p = Sigma.p
    else:
        Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False, need_x64=False)
        diag = jnp.diagonal(Sigma)
        p = Sigma.shape[0]
    if s.shape != (p,):
        raise ValueError(f"s must have shape ({p},), got {tuple(s.shape)}")
    _checks.check_vector_nonnegative_finite(s, "s")
    if isinstance(Sigma, FactorModel):
        gamma, code = _gamma_factor(Sigma.d, Sigma.U, s, max_steps)
    else:
        gamma, code = _gamma_dense(Sigma, s, max_steps)
    return Solution(
        gamma * s,
        code,
        {
            "gamma": gamma,
            "num_steps": max_steps,
            "max_steps": max_steps,
            "objective": jnp.sum(gamma * s / diag),
        },
    )


@renamed_kwargs(max_sweeps="max_steps")
def asdp(
    Sigma,
    *,
    block_size: int = 100,
    tol: float = 1e-5,
    max_steps: int = 500,
    exact_min_eig: bool = False,
    num_knockoffs: int = 1,
    throw: bool = False,
) -> Solution:
    r"""Approximate SDP (Candes et al. 2018; Rebjock thesis ch. 4).

    1. Approximate ``C`` (correlation) by its block-diagonal part with
       contiguous blocks of ``block_size`` coordinates (permute the variables
       beforehand, e.g. by hierarchical clustering, to put correlated ones
       together);
    2. solve every block's SDP (Newton, as :func:`~jaxknock.sdp` with
       its default ``lam0``), the blocks one after another in one compiled loop
       (the last block is padded with independent unit-variance variables);
    3. :func:`scale_to_feasible`: the largest ``gamma`` with
       ``diag(gamma s) <= 2 Sigma`` on the full matrix (60 bisections).

    The three steps run in one compiled function: ``Sigma`` is validated once,
    the blocks are not validated again, and ``tol`` / ``max_steps`` are traced
    (a new value does not recompile; ``block_size`` and the shape are static).
    Needs float64 (the block SDPs, see :func:`~jaxknock.sdp`).

    ``max_steps`` bounds the Newton steps per block (``max_sweeps`` is a
    deprecated alias).

    ``num_knockoffs = m`` (Gimenez & Zou 2019) replaces ``2`` by
    ``c = (m+1)/m`` throughout: the block SDPs are :func:`~jaxknock.sdp` with
    ``num_knockoffs=m`` (``diag(s) <= c C_bb``, ``s <= 1``) and step 3 finds the
    largest ``gamma`` with ``diag(gamma s) <= c C``; ``min_eig`` then bounds
    ``lambda_min(c C - diag s)``. ``m`` is traced.

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``:
        ``gamma``, ``objective``, ``min_eig`` (a certified lower bound on
        ``lambda_min(2C - diag s)``, exact with ``exact_min_eig=True``; see
        :func:`~jaxknock.sdp`), ``num_steps`` (max steps over blocks),
        ``max_steps``, ``block_results`` (the blocks' result codes).
        ``result`` is the code of the scaling step on the full matrix (bad
        input, an unverified ``gamma s``) if it is not ``successful``, else the
        worst block's code. Under jit (value checks skipped) a ``Sigma`` whose
        correlation matrix has no Cholesky factor gives ``infeasible`` (NaN/Inf:
        ``nonfinite``) with ``s`` all NaN, as :func:`~jaxknock.sdp`; eagerly it raises.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> s = asdp(jnp.eye(10) * 0.5 + 0.5, block_size=5).value
    """
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False)
    p = Sigma.shape[0]
    if not (_checks.is_int(block_size) and 1 <= block_size):  # not a bool: True was taken as 1
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    tol, max_steps, _, _ = _common.check_settings(tol, max_steps, 0.8, None)
    m = _checks.check_num_knockoffs(num_knockoffs)
    bs = int(min(block_size, p))
    sol = _asdp_jit(Sigma, tol, max_steps, (m + 1.0) / m, bs=bs, min_eig="exact" if exact_min_eig else "bound")
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)


# bisections of scale_to_feasible inside asdp (its default)
_ASDP_BISECTIONS = 60


@functools.partial(jax.jit, static_argnames=("bs", "min_eig"))
def _asdp_jit(Sigma, tol, max_steps, c, *, bs, min_eig):
    p = Sigma.shape[0]
    nb = math.ceil(p / bs)
    # under jit an indefinite (or NaN) Sigma is infeasible with a NaN s, as sdp; its blocks need not be
    # indefinite (s finite, infeasible or nonfinite before)
    C, valid, max_steps_run = _common.gated_correlation(Sigma, max_steps)
    n = nb * bs
    Cp = jnp.eye(n, dtype=C.dtype).at[:p, :p].set(C)
    idx = jnp.arange(nb)[:, None] * bs + jnp.arange(bs)[None, :]
    blocks = Cp[idx[:, :, None], idx[:, None, :]]
    b = coordinate.default_block(bs)

    def one(B, tol, max_steps, c):
        return solve_dense(B, tol, max_steps, default_lam0(B.shape[-1]), 0.8, c, b=b, method="newton", min_eig="none")

    bsol = _common.solve_stack(one, blocks, tol, max_steps_run, c)  # one block at a time on CPU
    s_blk = bsol.value.reshape(-1)[:p]
    gamma, feasible = _bisect_gamma(
        lambda g: _common.is_pd(c * C, g * s_blk), s_blk, jnp.diagonal(C), jnp.int32(_ASDP_BISECTIONS)
    )
    # the scaling step's code on the full matrix (bad input, unverified gamma s), as scale_to_feasible
    scale_code = _scale_code(_sigma_checks.traced_sigma_code(C), s_blk, feasible)
    s_corr = gamma * s_blk
    A = c * C - jnp.diag(s_corr)
    min_eig_value = certificate.smallest_eigenvalue(A) if min_eig == "exact" else certificate.min_eig_bound(A)[1]
    codes = jnp.atleast_1d(bsol.result)
    # the worst block decides: nonfinite, then infeasible, then the largest other code
    block_code = jnp.where(
        jnp.any(codes == RESULTS.nonfinite),
        RESULTS.nonfinite,
        jnp.where(jnp.any(codes == RESULTS.infeasible), RESULTS.infeasible, jnp.max(codes)),
    )
    # scale_to_feasible's code on the full matrix (bad input, unverified gamma s) comes first
    result = _checks.combine_codes(scale_code, block_code)
    s, result = _common.reject_invalid_sigma(valid, Sigma, s_corr * jnp.diagonal(Sigma), result)
    stats = {
        "gamma": gamma,
        "objective": jnp.sum(s_corr),
        "min_eig": min_eig_value,
        "num_steps": jnp.max(jnp.atleast_1d(bsol.stats["num_steps"])),
        "max_steps": max_steps,
        "block_results": codes,
    }
    return Solution(s, result.astype(jnp.int32), stats)
