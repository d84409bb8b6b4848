"""The covariance an S-vector solver is given: eager validation and the traced input codes.

:func:`validate_sigma` checks a ``Sigma`` (or a ``(B, p, p)`` batch) once per public call, with its value
checks in one device reduction (:func:`_sigma_flags`, a Cholesky factorisation of ``Sigma`` and of its
correlation matrix included) and messages built on the host only once a check failed. Under ``jit`` the
values cannot be seen: :func:`traced_sigma_code` / :func:`traced_factor_code` give the ``RESULTS`` code the
solvers combine with their own (:func:`jaxknock._checks.combine_codes`). The generic array and setting
checks they build on are in :mod:`jaxknock._checks`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._checks import (
    as_float_array,
    check_finite,
    check_positive_definite,
    check_square,
    check_symmetric,
    host_flags,
    is_concrete,
    require_x64,
    values_trusted,
)
from jaxknock._scaling import correlation_of
from jaxknock._solution import RESULTS

SDP_X64_WHY = (
    "the S-vector solve (it works next to the boundary of feasibility, where 2*Sigma - diag(s) is "
    "nearly singular and float32 loses the certificate)"
)


def validate_sigma(Sigma, *, batch_ok: bool = True, need_x64: bool = True):
    """Validate a covariance / correlation matrix (or a ``(B, p, p)`` batch) for the S-vector solvers.

    Shape and dtype always; values (finite, symmetric, positive diagonal,
    positive definite) when ``Sigma`` is concrete. The value checks run on the
    device in one jitted reduction (:func:`_sigma_flags`, which includes a
    Cholesky factorisation as the positive-definiteness test) and bring back a
    handful of scalars, never the matrix; the detailed messages are built on
    the host only once a check has failed. Call it once per public call: the
    solvers' internal jitted cores do not validate again. Returns ``Sigma`` as
    a floating JAX array.
    """
    given = getattr(Sigma, "dtype", None)
    Sigma = as_float_array(Sigma, "Sigma")
    check_square(Sigma, batch=batch_ok)
    if Sigma.ndim > 3:
        raise ValueError(f"Sigma must be (p, p) or a batch (B, p, p), got shape {tuple(Sigma.shape)}")
    if need_x64:
        require_x64(Sigma, "Sigma", SDP_X64_WHY, given)
    if is_concrete(Sigma) and not values_trusted():
        finite, asym, scale, min_diag, chol_ok = (np.asarray(v) for v in host_flags(_sigma_flags, Sigma))
        if not finite:
            check_finite(Sigma, "Sigma")  # raises with the count and the first index
        if not (asym <= _SYMMETRY_RTOL * scale):
            check_symmetric(Sigma)  # raises with the asymmetry
        if not (min_diag > 0):
            d = np.diagonal(np.asarray(Sigma), axis1=-2, axis2=-1)
            raise ValueError(
                "Sigma must have a positive diagonal (a covariance or correlation "
                f"matrix); found {int((d <= 0).sum())} non-positive diagonal entr(ies)"
            )
        if not chol_ok:
            raise_not_factorisable(Sigma)  # raises with the smallest eigenvalue
    return Sigma


_SYMMETRY_RTOL = 1e-8


@jax.jit
def _sigma_flags(Sigma):
    """Device-side value checks of ``Sigma``: ``(all finite, max |S - S^T|, max |S|, min diag, Cholesky ok)``.

    One reduction per check, five scalars to transfer. The symmetry threshold is
    ``rtol * max(max |S|, 1e-300)`` as in :func:`check_symmetric` (applied on the host).
    """
    finite = jnp.all(jnp.isfinite(Sigma))
    asym = jnp.max(jnp.abs(Sigma - jnp.swapaxes(Sigma, -1, -2)))
    scale = jnp.maximum(jnp.max(jnp.abs(Sigma)), 1e-300)
    min_diag = jnp.min(jnp.diagonal(Sigma, axis1=-2, axis2=-1))
    return finite, asym, scale, min_diag, _factorises_both_scales(Sigma)


def _factorises_both_scales(Sigma):
    """Whether ``Sigma`` *and* its correlation matrix have Cholesky factors (traced, one flag for a batch).

    The solvers' jitted cores test the correlation matrix ``C = D^{-1/2} Sigma D^{-1/2}``
    (:func:`jaxknock.svector._common.factorises`, the scale they solve on). Near singularity the two
    factorisations disagree in floating point: a ``Sigma`` with a factor whose ``C`` has none passed
    this check, and ``sdp`` / ``mvr`` / ``maxent`` then returned ``infeasible`` with a NaN ``s``
    where an eager call promises a ``ValueError``. ``C`` is formed by the cores' own arithmetic
    (:func:`jaxknock._scaling.correlation_of`, same bits).
    """
    ok = jnp.all(jnp.isfinite(jnp.linalg.cholesky(Sigma)))  # symmetrises its input
    C = correlation_of(Sigma)
    return ok & jnp.all(jnp.isfinite(jnp.linalg.cholesky(C)))


def raise_not_factorisable(Sigma, name: str = "Sigma"):
    """Raise ``ValueError`` for a concrete ``Sigma`` (or batch) that :func:`_factorises_both_scales` refused.

    With the smallest eigenvalue of its correlation matrix (the solvers' scale) when that is not
    positive, else as numerically singular: positive eigenvalues, but no Cholesky factor.
    """
    a = np.asarray(Sigma, dtype=np.float64)
    d = np.sqrt(np.diagonal(a, axis1=-2, axis2=-1))
    check_positive_definite(a / (d[..., :, None] * d[..., None, :]), name)  # raises when lambda_min <= 0
    raise ValueError(
        f"{name} is numerically singular (the Cholesky factorisation of it or of its correlation matrix "
        "failed); use jaxknock.ledoit_wolf(X) or add a small ridge to the diagonal"
    )


def symmetric_flag(S, *, rtol: float = _SYMMETRY_RTOL) -> jax.Array:
    """Traced twin of :func:`check_symmetric`: ``max |S - S^T| <= rtol max(max |S|, 1e-300)`` per matrix."""
    asym = jnp.max(jnp.abs(S - jnp.swapaxes(S, -1, -2)), axis=(-2, -1))
    return asym <= rtol * jnp.maximum(jnp.max(jnp.abs(S), axis=(-2, -1)), 1e-300)


@functools.partial(jax.jit, static_argnames="rtol")  # one program where it is called eagerly (group_s_matrix)
def traced_sigma_code(Sigma, *, rtol: float = 1e-8) -> jax.Array:
    """``RESULTS`` code for the values of ``Sigma`` that :func:`validate_sigma` cannot see under ``jit``.

    Traced, no host transfer, ``O(p^2)``: ``nonfinite`` if ``Sigma`` holds
    NaN/Inf, ``infeasible`` if it is not symmetric (to ``rtol``, as
    :func:`check_symmetric`) or has a non-positive diagonal (then no ``s``
    satisfies ``diag(s) <= 2 Sigma`` for the matrix the caller meant),
    ``successful`` otherwise. Eager inputs that passed :func:`validate_sigma`
    always give ``successful``. Batched ``Sigma`` gives one code per matrix.
    Solvers combine it with their own code by :func:`combine_codes`.
    """
    finite = jnp.all(jnp.isfinite(Sigma), axis=(-2, -1))
    diag_ok = jnp.all(jnp.diagonal(Sigma, axis1=-2, axis2=-1) > 0, axis=-1)
    valid = symmetric_flag(Sigma, rtol=rtol) & diag_ok
    return jnp.where(~finite, RESULTS.nonfinite, jnp.where(valid, RESULTS.successful, RESULTS.infeasible)).astype(
        jnp.int32
    )


def traced_factor_code(d, U) -> jax.Array:
    """``RESULTS`` code for a factor model ``Sigma = diag(d) + U U^T`` under ``jit`` (traced, ``O(p k)``).

    ``nonfinite`` if ``d`` or ``U`` holds NaN/Inf, ``infeasible`` if some
    ``d_j <= 0`` (``Sigma`` need not be positive definite), else ``successful``.
    """
    finite = jnp.all(jnp.isfinite(d), axis=-1) & jnp.all(jnp.isfinite(U), axis=(-2, -1))
    positive = jnp.all(d > 0, axis=-1)
    return jnp.where(~finite, RESULTS.nonfinite, jnp.where(positive, RESULTS.successful, RESULTS.infeasible)).astype(
        jnp.int32
    )
