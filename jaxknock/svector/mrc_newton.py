r"""Damped Newton for the dense MVR and maximum-entropy S-vectors (``method="newton"``, the default).

The same problem, certificate and stopping rule as the coordinate descent of
:mod:`~jaxknock.svector.mrc`, solved with second-order steps on ``s``. With
``H = A^{-1}``, ``A = c C - diag(s)`` (``C`` the correlation matrix,
``c = (m+1)/m``) and ``dA / ds_j = -e_j e_j^T`` (so ``dH / ds_j = H e_j e_j^T H``):

* ME, ``f = -log det A - m sum log s``: gradient ``g_j = H_jj - m / s_j``,
  Hessian ``H o H + diag(m / s^2)``;
* MVR, ``f = tr(H) / m + m sum 1/s``: gradient ``g_j = (H^2)_jj / m - m / s_j^2``,
  Hessian ``(2/m) H o H^2 + diag(2 m / s^3)``

(the formulas of :mod:`~jaxknock.svector.mrc_factor_newton`, here with ``H``
formed: both Hessians are Schur products of positive definite matrices plus a
positive diagonal, so ``f`` is strictly convex on ``{s > 0, A > 0}`` and tends
to ``+inf`` at its boundary).

**Step.** The Newton system is solved directly: the Hessian is scaled to unit
diagonal (Jacobi, ``M = D^{-1/2} Hess D^{-1/2}``) and factorised by Cholesky
(``p^3 / 3`` flops; where that fails in floating point the step falls back to
the Jacobi step ``-g / diag(Hess)``, still a descent direction). The step length
starts at the fraction to the boundary of ``s > 0`` (0.99 of the longest step,
at most 1) and is halved until ``A = c C - diag(s + t ds)`` has a Cholesky
factor and the Armijo condition ``f(s + t ds) <= f(s) + 1e-4 t g^T ds`` holds
(up to ``100 eps |f|`` of rounding). A step that finds no such point leaves
``s`` unchanged, and the shared stopping rule reports ``stagnated``. After every
step ``H``, ``f`` and the certified gap come from the Cholesky factor of the
accepted point (the line search's own, not computed again), as after a sweep
of the coordinate descent: the certificate never depends on the accuracy of
the Newton direction.

**Cost and why.** A step is ``~2.5 p^3`` flops for ME (the factorisations and
``H``) and ``~4.5 p^3`` for MVR (also ``H^2``), about a sweep of the coordinate
descent, all in a few large LAPACK / BLAS calls. Near-singular correlations
(raw sample correlations of near-square designs, strong AR(1)) leave the
coordinate descent with a tiny, slowly moving ``lambda_min(A)``; Newton steps do
not care: on sample correlations with ``p = 200`` and ``n = 203 / 230 / 300``
maximum entropy took 1508 / 466 / 182 sweeps and 9 / 8 / 8 Newton steps
(``benchmarks/measured/NOTES.md``, session 52).

Float64 throughout (``A`` approaches singularity at the optimum).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxknock.svector import _common
from jaxknock.svector._common import HIGHEST

__all__ = ["newton_direction", "newton_update"]


def _gradient_and_hessian(kind, s, H, m):
    """``(g, Hess)`` of the objective ``kind`` at ``s`` from ``H = A^{-1}`` (module docstring)."""
    if kind == "maxent":
        return jnp.diagonal(H) - m / s, H * H + jnp.diag(m / (s * s))
    H2 = jnp.matmul(H, H, precision=HIGHEST)
    H2 = 0.5 * (H2 + H2.T)
    return jnp.diagonal(H2) / m - m / (s * s), (2.0 / m) * (H * H2) + jnp.diag(2.0 * m / s**3)


def newton_direction(kind, s, H, m):
    r"""``(g, ds)``: the gradient and the Newton direction ``ds = -Hess^{-1} g`` at ``s``.

    Solved by Cholesky on the Jacobi-scaled Hessian; if that has no factor in
    floating point, ``ds = -g / diag(Hess)`` (a descent direction too).

    Example:
        >>> import jax
        >>> jax.config.update("jax_enable_x64", True)
        >>> C2 = 2.0 * (0.5 * jnp.eye(3) + 0.5)
        >>> s = jnp.full(3, 0.5)
        >>> g, ds = newton_direction("maxent", s, jnp.linalg.inv(C2 - jnp.diag(s)), 1.0)
        >>> bool(jnp.dot(g, ds) < 0)
        True
    """
    g, hess = _gradient_and_hessian(kind, s, H, m)
    dh = jnp.diagonal(hess)
    r = 1.0 / jnp.sqrt(dh)
    L = jnp.linalg.cholesky(hess * r[:, None] * r[None, :])
    y = lax.linalg.triangular_solve(L, (-g * r)[:, None], left_side=True, lower=True)
    y = lax.linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True)[:, 0]
    ds = y * r
    return g, jnp.where(jnp.all(jnp.isfinite(ds)), ds, -g / dh)


def _objective(kind, C2, s, m):
    """``(ok, f(s), (s, L))``: whether ``c C - diag(s)`` has a Cholesky factor ``L`` and ``s > 0``; the objective."""
    L = jnp.linalg.cholesky(C2 - jnp.diag(s))
    if kind == "maxent":
        f = -2.0 * jnp.sum(jnp.log(jnp.diagonal(L))) - m * jnp.sum(jnp.log(s))
    else:  # tr(A^{-1}) = ||L^{-1}||_F^2
        Linv = lax.linalg.triangular_solve(L, jnp.eye(s.shape[0], dtype=s.dtype), left_side=True, lower=True)
        f = jnp.sum(Linv * Linv) / m + m * jnp.sum(1.0 / s)
    ok = jnp.all(jnp.isfinite(L)) & jnp.all(s > 0) & jnp.isfinite(f)
    return ok, f, (s, L)


def newton_update(kind, C2, s, H, f, m):
    """``(s, L)`` after one damped Newton step (``H = A^{-1}`` and ``f = f(s)`` at ``s``).

    The line search of :func:`~jaxknock.svector._common.armijo_backtrack` from
    the fraction to the boundary of ``s > 0``; where no length is acceptable
    ``s`` is returned unchanged. ``L`` is the Cholesky factor of
    ``c C - diag(s)`` at the returned ``s``: the accepted trial point's own
    (the caller's certificate reuses it), refactorised only after a refused step.
    """
    g, ds = newton_direction(kind, s, H, m)
    t0 = _common.max_step(s, ds)
    _, ok, _, (s_t, L_t) = _common.armijo_backtrack(
        lambda t: _objective(kind, C2, s + t * ds, m), t0, f, jnp.dot(g, ds)
    )
    L = lax.cond(ok, lambda: L_t, lambda: jnp.linalg.cholesky(C2 - jnp.diag(s)))
    return jnp.where(ok, s_t, s), L
