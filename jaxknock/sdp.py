r"""Knockoff S-vector solvers.

Gaussian model-X knockoffs need ``s`` with ``diag(s) <= 2 Sigma``; the best
(least correlated) knockoffs solve the SDP (Askari thesis eq. 4.2)

.. math::  \max_s\ 1^T s \quad \text{s.t.}\quad \mathrm{diag}(s) \preceq 2\Sigma,\ 0 \le s \le 1

for a correlation matrix ``Sigma``. Its dual is

.. math::  \min_{\Lambda \succeq 0,\ \eta \ge 0}\ 2\,\mathrm{tr}(\Lambda\Sigma) + 1^T\eta
           \quad\text{s.t.}\quad \mathrm{diag}(\Lambda) + \eta \ge 1 .

Solvers here:

* :func:`equicorrelated` - closed form ``s_j = min(1, 2 lambda_min(Sigma))``.
* :func:`sdp` - barrier coordinate ascent (FANOK, thesis Algorithm 4) on a
  dense ``Sigma``, ``O(p^3)`` per sweep, blocked so the work is matrix products.
* :func:`sdp_factor` - the same ascent for ``Sigma = D + U U^T`` (thesis
  Algorithm 5), ``O(p k^2)`` per sweep and ``O(p k)`` memory.
* :func:`asdp` - block-diagonal approximation + :func:`scale_to_feasible`.

Every solver returns a :class:`~jaxknock.Solution` whose ``value`` is ``s``
and whose ``stats`` hold ``objective`` (``1^T s`` on the correlation scale),
``min_eig`` (``lambda_min(2 Sigma - diag s)``, NaN where not cheap) and, for
the barrier solvers, a **certified duality gap**: from the barrier iterate
``A = 2 Sigma - diag(s)`` we build the dual-feasible point
``Lambda = lam A^{-1}``, ``eta = max(0, 1 - diag(Lambda))`` whose objective
upper-bounds the SDP optimum, so ``gap = dual - 1^T s >= OPT - 1^T s``.

Non-correlation input: ``Sigma`` is converted with
:func:`~jaxknock.to_correlation`, the problem is solved there and ``s`` is
mapped back by ``s_cov = s_corr * diag(Sigma)`` (the convention of knockpy
and the R ``knockoff`` package). ``objective`` and ``gap`` are reported on the
correlation scale.

The barrier solvers need float64 (enable ``jax_enable_x64``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import FactorModel, to_correlation

__all__ = [
    "equicorrelated",
    "sdp",
    "sdp_factor",
    "asdp",
    "scale_to_feasible",
    "SDPState",
    "sdp_init",
    "sdp_step",
    "sdp_dual_gap",
]

HIGHEST = lax.Precision.HIGHEST
_SDP_METHODS = ("newton", "coordinate")
_X64_WHY = "the barrier coordinate ascent (rank-one factor updates near a singular 2*Sigma - diag(s))"


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


def _validate_sigma(Sigma, *, batch_ok=True, need_x64=True):
    Sigma = _checks.as_float_array(Sigma, "Sigma")
    _checks.check_square(Sigma, batch=batch_ok)
    if Sigma.ndim > 3:
        raise ValueError(f"Sigma must be (p, p) or a batch (B, p, p), got shape {tuple(Sigma.shape)}")
    if need_x64:
        _checks.require_x64(Sigma, "Sigma", _X64_WHY)
    _checks.check_finite(Sigma, "Sigma")
    _checks.check_symmetric(Sigma)
    if _checks.is_concrete(Sigma):
        d = np.diagonal(np.asarray(Sigma), axis1=-2, axis2=-1)
        if (d <= 0).any():
            raise ValueError(
                "Sigma must have a positive diagonal (a covariance or correlation "
                f"matrix); found {int((d <= 0).sum())} non-positive diagonal entr(ies)"
            )
        _check_pd_fast(Sigma)
    return Sigma


def _check_pd_fast(Sigma):
    a = np.asarray(Sigma, dtype=np.float64)
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        _checks.check_positive_definite(a)  # raises with the smallest eigenvalue
        raise ValueError(  # numerically PD by eigenvalues but Cholesky failed
            "Sigma is numerically singular (Cholesky failed); use jaxknock.ledoit_wolf(X)"
        ) from None


def _validate_model(model):
    if not isinstance(model, FactorModel):
        raise TypeError(f"model must be a jaxknock.FactorModel(d, U), got {type(model).__name__}")
    d = _checks.as_float_array(model.d, "model.d")
    U = _checks.as_float_array(model.U, "model.U")
    if U.ndim not in (2, 3) or d.ndim != U.ndim - 1 or d.shape[-1] != U.shape[-2]:
        raise ValueError(
            f"FactorModel needs d of shape (p,) and U of shape (p, k); got d {tuple(d.shape)}, U {tuple(U.shape)}"
        )
    p, k = U.shape[-2:]
    if k >= p:
        raise ValueError(f"factor rank k = {k} must be smaller than p = {p}; use sdp(model.dense()) instead")
    _checks.require_x64(U, "model.U", _X64_WHY)
    _checks.require_x64(d, "model.d", _X64_WHY)
    _checks.check_finite(d, "model.d")
    _checks.check_finite(U, "model.U")
    if _checks.is_concrete(d) and (np.asarray(d) <= 0).any():
        raise ValueError("model.d must be strictly positive (Sigma = diag(d) + U U^T must be positive definite)")
    return FactorModel(d, U)


def _check_settings(tol, max_sweeps, decay, lam0):
    if not (tol > 0):
        raise ValueError(f"tol must be positive, got {tol}")
    if not (isinstance(max_sweeps, (int, np.integer)) and max_sweeps >= 1):
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
    if not (0 < decay < 1):
        raise ValueError(f"decay must lie in (0, 1), got {decay}")
    if lam0 is not None and not (lam0 > 0):
        raise ValueError(f"lam0 must be positive, got {lam0}")


# --------------------------------------------------------------------------
# equicorrelated
# --------------------------------------------------------------------------


def equicorrelated(Sigma) -> Solution:
    r"""Equicorrelated knockoffs: ``s_j = min(1, 2 lambda_min(Sigma))`` for all j.

    The largest constant ``s`` with ``diag(s) <= 2 Sigma`` (on the correlation
    scale; mapped back by ``diag(Sigma)``). For an equicorrelated ``Sigma``
    with correlation ``rho >= 0`` this is also the SDP optimum,
    ``min(1, 2(1 - rho))``. Cost: one ``p x p`` eigenvalue problem.

    Args:
        Sigma: ``(p, p)`` covariance / correlation matrix (or a batch).

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``
        ``{objective, min_eig, num_steps=0, max_steps=0}``.

    Example:
        >>> s = equicorrelated(jnp.eye(3)).value   # [1., 1., 1.]
    """
    Sigma = _validate_sigma(Sigma, need_x64=False)
    return _equicorrelated(Sigma)


@jax.jit
def _equicorrelated(Sigma):
    C = to_correlation(Sigma)
    lmin = jnp.linalg.eigvalsh(C)[..., 0]
    val = jnp.clip(2.0 * lmin, 0.0, 1.0)
    p = Sigma.shape[-1]
    s_corr = jnp.broadcast_to(val[..., None], Sigma.shape[:-1])
    s = s_corr * jnp.diagonal(Sigma, axis1=-2, axis2=-1)
    stats = {
        "objective": p * val,
        "min_eig": 2.0 * lmin - val,
        "num_steps": jnp.zeros_like(val, dtype=jnp.int32),
        "max_steps": 0,
    }
    return Solution(s, jnp.zeros(val.shape, jnp.int32), stats)


# --------------------------------------------------------------------------
# certified duality gap
# --------------------------------------------------------------------------


def _best_scaled_dual(alpha, beta):
    """``min_{t >= 0} t * alpha + sum_j max(0, 1 - t * beta_j)`` (exact, O(p log p)).

    The dual objective of ``Lambda = t * Lambda_0`` with ``eta`` at its best,
    where ``alpha = 2 tr(Lambda_0 Sigma)`` and ``beta = diag(Lambda_0)``. The
    function is convex piecewise linear in ``t``; its minimum is at ``t = 0``
    (value ``p``) or at a breakpoint ``t = 1 / beta_i``.
    """
    b = jnp.sort(beta, axis=-1)
    p = b.shape[-1]
    t = 1.0 / jnp.maximum(b, 1e-300)
    excl = jnp.cumsum(b, axis=-1) - b
    # at t = 1/b_i only coordinates with b_j < b_i leave eta_j > 0
    vals = t * alpha[..., None] + jnp.arange(p) - t * excl
    return jnp.minimum(jnp.min(vals, axis=-1), p)


def _gap_from_inverse_diag(s, hdiag, lam):
    """Certified dual objective / gap from ``h = diag(A^{-1})`` (correlation scale).

    Dual point ``Lambda = t lam A^{-1}`` (``t`` optimal, see
    :func:`_best_scaled_dual`), ``eta = max(0, 1 - diag Lambda)``;
    ``2 tr(Lambda_0 Sigma) = lam (p + sum_j s_j h_j)`` because
    ``Sigma = (A + diag s) / 2``.
    """
    p = s.shape[-1]
    alpha = lam * (p + jnp.sum(s * hdiag, axis=-1))
    dual = _best_scaled_dual(alpha, lam * hdiag)
    return dual, dual - jnp.sum(s, axis=-1)


def _newton_center(C2, s, lam, cap, num_steps=8, num_backtracks=30, damped=True):
    """Damped projected Newton steps on the barrier objective at fixed ``lam``.

    Used only to build a tight dual certificate: the barrier dual
    ``lam A^{-1}`` is dual-optimal for the barrier problem only at its
    maximiser, and coordinate ascent leaves the iterate off centre. The
    objective ``f(s) = 1^T s + lam logdet(2C - diag s)`` has gradient
    ``1 - lam diag(A^{-1})`` and Hessian ``-lam A^{-1} o A^{-1}``;
    ``f / lam`` is self-concordant, so the step ``1 / (1 + delta)`` with the
    Newton decrement ``delta^2 = g^T d / lam`` stays feasible and converges
    quadratically once ``delta < 1/4``. Coordinates at an active bound are
    frozen; a backtracking safeguard keeps ``A`` positive definite and ``f``
    non-decreasing. ``O(p^3)`` per step.
    """
    p = s.shape[-1]
    eye = jnp.eye(p, dtype=s.dtype)

    def f_and_chol(x):
        L = jnp.linalg.cholesky(C2 - jnp.diag(x))
        ok = jnp.all(jnp.isfinite(L))
        val = jnp.sum(x) + 2.0 * lam * jnp.sum(jnp.log(jnp.abs(jnp.diagonal(L))))
        return jnp.where(ok, val, -jnp.inf), L

    def step(_, x):
        f0, L = f_and_chol(x)
        Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
        Ai = jnp.matmul(Linv.T, Linv, precision=HIGHEST)
        g = 1.0 - lam * jnp.diagonal(Ai)
        free = ~(((x <= 0) & (g < 0)) | ((x >= cap) & (g > 0)))
        gf = jnp.where(free, g, 0.0)
        # symmetric diagonal scaling: H_ij / sqrt(H_ii H_jj) = (A^-1)_ij^2 / (h_i h_j),
        # a correlation-like matrix, far better conditioned than H itself
        hd = jnp.diagonal(Ai)
        Hs = jnp.where(free[:, None] & free[None, :], (Ai * Ai) / (hd[:, None] * hd[None, :]), eye)
        d = jnp.linalg.solve(Hs, gf / (jnp.sqrt(lam) * hd)) / (jnp.sqrt(lam) * hd)
        dec = jnp.sqrt(jnp.maximum(jnp.dot(gf, d), 0.0) / lam)
        a0 = jnp.where(damped & (dec > 0.25), 1.0 / (1.0 + dec), 1.0)

        def bt_cond(c):
            i, a, done, _ = c
            return (i < num_backtracks) & ~done

        def bt_body(c):
            i, a, _, xb = c
            xn = jnp.clip(x + a * d, 0.0, cap)
            fn, _ = f_and_chol(xn)
            better = (fn >= f0) & jnp.isfinite(fn)
            return i + 1, a * 0.5, better, jnp.where(better, xn, xb)

        init = (jnp.int32(0), a0.astype(x.dtype), jnp.zeros((), bool), x)
        _, _, _, xb = lax.while_loop(bt_cond, bt_body, init)
        return jnp.where(jnp.isfinite(f0) & jnp.all(jnp.isfinite(xb)), xb, x)

    return lax.fori_loop(0, num_steps, step, s)


def _certified_gap_dense(C, s, lam, cap):
    """Certified ``(dual, gap)`` for ``s`` from the Newton-centred barrier dual."""
    C2 = 2.0 * C
    sc = _newton_center(C2, s, lam, cap)
    L = jnp.linalg.cholesky(C2 - jnp.diag(sc))
    ok = jnp.all(jnp.isfinite(L))
    dual, _ = _gap_from_inverse_diag(sc, _inverse_diag_from_cholesky(L), lam)
    dual = jnp.where(ok, dual, jnp.inf)
    return dual, dual - jnp.sum(s)


def sdp_dual_gap(Sigma, s, lam):
    r"""Certified duality gap of ``s`` for the knockoff SDP (dense, correlation scale).

    Re-centres ``s`` on the barrier path at parameter ``lam`` with a few
    Newton steps (giving ``s_c``), takes the dual-feasible point
    ``Lambda = t lam (2C - diag s_c)^{-1}``, ``eta = max(0, 1 - diag Lambda)``
    with the best scalar ``t``, and returns ``(dual, gap)``:
    ``dual = 2 tr(Lambda C) + 1^T eta >= OPT`` by weak duality and
    ``gap = dual - 1^T s >= OPT - 1^T s``. Any ``lam > 0`` gives a valid
    bound; ``lam ~ gap / p`` gives a tight one. ``s`` is on the covariance
    scale (as returned by the solvers).
    """
    Sigma = _validate_sigma(Sigma, batch_ok=False)
    C = to_correlation(Sigma)
    s_corr = jnp.asarray(s) / jnp.diagonal(Sigma)
    cap = jnp.minimum(1.0, 2.0 * jnp.diagonal(C))
    return jax.jit(_certified_gap_dense)(C, s_corr, jnp.asarray(lam, C.dtype), cap)


def _diag_embed(v):
    return v[..., :, None] * jnp.eye(v.shape[-1], dtype=v.dtype)


def _inverse_diag_from_cholesky(L):
    """``diag((L L^T)^{-1})`` = squared column norms of ``L^{-1}``."""
    eye = jnp.broadcast_to(jnp.eye(L.shape[-1], dtype=L.dtype), L.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.sum(Linv**2, axis=-2)


# --------------------------------------------------------------------------
# barrier Newton path following (finishing phase of sdp)
# --------------------------------------------------------------------------


class NewtonState(NamedTuple):
    """State of the barrier Newton path follower (correlation scale).

    ``s`` strictly inside ``(0, cap)`` with ``2C - diag(s)`` positive definite;
    ``z0, z1`` multipliers of ``s >= 0`` and ``s <= cap``; ``dual`` the best
    certified dual bound seen so far (any iterate's certificate bounds OPT).
    """

    s: jax.Array
    z0: jax.Array
    z1: jax.Array
    lam: jax.Array
    step: jax.Array
    dual: jax.Array
    stall: jax.Array


def _is_pd(C2, s):
    return jnp.all(jnp.isfinite(jnp.linalg.cholesky(C2 - jnp.diag(s))))


def _interior_start(C2, s, cap, lam):
    """Push a (possibly bound-touching) feasible ``s`` strictly inside ``(0, cap)``.

    Coordinates at 0 move to ``1e-3 lam`` (below their Schur complement, which
    is positive), coordinates at ``cap`` move down, which keeps ``A`` positive
    definite; if rounding still breaks definiteness, fall back to ``s / 2``.
    """
    lo = jnp.minimum(1e-3 * lam, 1e-3 * cap)
    x = jnp.clip(s, lo, cap * (1.0 - 1e-6))
    return jnp.where(_is_pd(C2, x), x, jnp.clip(0.5 * s, lo, cap * (1.0 - 1e-6)))


def _newton_direction(C2, s, z0, z1, lam, cap):
    """Primal-dual Newton direction for the barrier problem at ``lam``.

    Centrality conditions: ``1 - lam diag(A^{-1}) + z0 - z1 = 0``,
    ``s z0 = lam``, ``(cap - s) z1 = lam`` with ``A = 2C - diag(s)``.
    Eliminating ``dz0, dz1`` leaves the ``p x p`` system
    ``(lam A^{-1} o A^{-1} + diag(z0/s + z1/(cap-s))) ds = g`` with
    ``g = 1 - lam diag(A^{-1}) + lam/s - lam/(cap-s)`` (the barrier gradient),
    solved by a diagonally scaled Cholesky factorisation (the Hadamard square
    of a positive definite matrix is positive definite). Also returns
    ``h = diag(A^{-1})`` for the certificate and the Newton decrement.
    """
    p = s.shape[-1]
    eye = jnp.eye(p, dtype=s.dtype)
    L = jnp.linalg.cholesky(C2 - jnp.diag(s))
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    Ai = jnp.matmul(Linv.T, Linv, precision=HIGHEST)
    h = jnp.diagonal(Ai)
    g = 1.0 - lam * h + lam / s - lam / (cap - s)
    H = lam * (Ai * Ai) + jnp.diag(z0 / s + z1 / (cap - s))
    sc = lax.rsqrt(jnp.diagonal(H))
    R = jnp.linalg.cholesky(H * sc[:, None] * sc[None, :])
    ds = sc * jax.scipy.linalg.cho_solve((R, True), sc * g)
    dz0 = (lam - s * z0 - z0 * ds) / s
    dz1 = (lam - (cap - s) * z1 + z1 * ds) / (cap - s)
    dec = jnp.sqrt(jnp.maximum(jnp.dot(g, ds), 0.0) / lam)
    return ds, dz0, dz1, h, dec


def _max_step(x, dx):
    """Largest ``t <= 1`` with ``x + t dx >= 0`` (fraction to the boundary 0.99)."""
    t = jnp.min(jnp.where(dx < 0, -x / jnp.where(dx < 0, dx, -1.0), jnp.inf))
    return jnp.minimum(1.0, 0.99 * t)


_NEWTON_PATIENCE = 32  # stall score, see _newton_path


def _newton_path(C, s0, lam0, cap, tol, max_steps, mu=0.1, center=0.3, patience=_NEWTON_PATIENCE):
    r"""Primal-dual barrier Newton path following for the knockoff SDP.

    Maximises ``1^T s + lam (logdet(2C - diag s) + sum log s + sum log(cap - s))``
    with Newton steps (see :func:`_newton_direction`), the box handled
    primal-dually; steps go 99% of the way to the box boundary and are halved
    (factor 0.7) until ``2C - diag s`` is positive definite (Cholesky test);
    ``lam <- mu lam`` once the Newton decrement is below ``center``. After
    every step the certificate of :func:`_gap_from_inverse_diag` is evaluated
    at the current iterate; the best dual bound is kept, and the loop stops
    when ``(dual - 1^T s) <= tol * 1^T s``, after ``max_steps`` steps, or when
    the bound has not improved over 8 consecutive centred iterates or 32
    uncentred steps (``patience`` is the stall score: 4 per centred, 1 per
    uncentred step; the rounding floor of the certificate, typically ~1e-6
    relative).
    Each step costs about ``3 p^3`` flops (two Cholesky factorisations, a
    triangular inverse, one product), so ``O(p^3)`` like a coordinate sweep.
    """
    C2 = 2.0 * C
    s = _interior_start(C2, s0, cap, lam0)
    inf = jnp.asarray(jnp.inf, C.dtype)
    st = NewtonState(s, lam0 / s, lam0 / (cap - s), jnp.asarray(lam0, C.dtype), jnp.int32(0), inf, jnp.int32(0))

    def rel_gap(st):
        tot = jnp.maximum(jnp.sum(st.s), 1e-12)
        return (st.dual - jnp.sum(st.s)) / tot

    def cond(st):
        return (st.step < max_steps) & ~(rel_gap(st) <= tol) & (st.stall < patience) & jnp.all(jnp.isfinite(st.s))

    def body(st):
        ds, dz0, dz1, h, dec = _newton_direction(C2, st.s, st.z0, st.z1, st.lam, cap)
        dual, _ = _gap_from_inverse_diag(st.s, h, st.lam)
        dual = jnp.where(jnp.isfinite(dual), dual, inf)
        tp = jnp.minimum(_max_step(st.s, ds), _max_step(cap - st.s, -ds))

        def shrink(c):
            t, k = c
            return t * 0.7, k + 1

        tp, _ = lax.while_loop(lambda c: (c[1] < 40) & ~_is_pd(C2, st.s + c[0] * ds), shrink, (tp, jnp.int32(0)))
        td = jnp.minimum(_max_step(st.z0, dz0), _max_step(st.z1, dz1))
        s_new = st.s + tp * ds
        best = jnp.minimum(st.dual, dual)
        sum_new = jnp.sum(s_new)
        # progress = the certified gap shrinks (a better bound or a better iterate)
        improved = ((best - sum_new) < 0.999 * (st.dual - jnp.sum(st.s))) | ~jnp.isfinite(st.dual)
        # lam stops decreasing once the central-path gap lam * (2p) is far below the
        # target: smaller values only push the iterate onto the rounding floor of the
        # PD boundary without improving what the certificate can prove
        shrink_lam = (dec < center) & (st.lam * 2 * s_new.shape[0] > 0.05 * tol * jnp.maximum(sum_new, 1e-12))
        # stall score of consecutive steps that do not shrink the certified gap:
        # 4 per centred iterate, 1 per uncentred one; stop at 32 (8 centred or
        # 32 uncentred steps). The certificate can lag for several centred steps
        # while bound-active coordinates approach the cap and then close at once
        # (ASDP blocks of a Ledoit-Wolf correlation: 3 centred steps stopped 2
        # steps short of a 1e-4 -> 2e-7 gap drop); at the rounding floor the
        # iterates may never be centred again, so uncentred steps count too.
        new = NewtonState(
            s_new,
            st.z0 + td * dz0,
            st.z1 + td * dz1,
            jnp.where(shrink_lam, st.lam * mu, st.lam),
            st.step + 1,
            best,
            jnp.where(improved, 0, st.stall + jnp.where(dec < center, 4, 1)),
        )
        ok = jnp.all(jnp.isfinite(new.s)) & jnp.all(jnp.isfinite(ds))
        return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, st._replace(stall=jnp.int32(patience)))

    st = lax.while_loop(cond, body, st)
    return st._replace(s=_snap_to_cap(C2, st.s, st.z0, st.z1, cap))


def _snap_to_cap(C2, s, z0, z1, cap):
    """Move coordinates whose upper bound is active (multiplier ``z1`` of order 1,
    dominating ``z0``) exactly onto ``cap`` when that keeps ``2C - diag s``
    positive definite: an interior method only approaches the bound to ``~lam``."""
    active = (z1 > 0.5) & (z1 > 10.0 * z0)
    x = jnp.where(active, cap, s)
    return jnp.where(_is_pd(C2, x) & (jnp.sum(x) >= jnp.sum(s)), x, s)


# --------------------------------------------------------------------------
# dense barrier coordinate ascent (Algorithm 4, blocked)
# --------------------------------------------------------------------------


class SDPState(NamedTuple):
    """State of :func:`sdp` between sweeps (correlation scale, padded to ``p_pad``).

    Attributes:
        s: ``(p_pad,)`` current iterate.
        L: ``(p_pad, p_pad)`` lower Cholesky factor of ``2 C - diag(s)``,
            maintained by rank-``b`` updates (never re-factorised).
        lam: barrier parameter used in the next sweep.
        sweep: number of sweeps done (int32).
        gap: certified duality gap after the last sweep.
        dual: dual objective after the last sweep.
    """

    s: jax.Array
    L: jax.Array
    lam: jax.Array
    sweep: jax.Array
    gap: jax.Array
    dual: jax.Array


def _coordinate_block(G, s_blk, cap, lam):
    """Exact sequential coordinate updates inside one block.

    ``G = (A^{-1})_{JJ}`` for the current ``A = 2C - diag(s)``. For coordinate
    ``j`` the Schur complement of ``A`` w.r.t. the other coordinates is
    ``sigma_j = 1 / G_jj``; Lemma 4 / eq. (4.4) of the thesis reduce to
    ``s_j <- clip(s_j + sigma_j - lam, 0, 1)`` (the new Schur complement is
    ``lam`` at an interior optimum). ``A_jj`` then drops by ``delta`` and ``G``
    gets the Sherman-Morrison update ``G + delta g g^T / (1 - delta G_jj)``
    whose denominator is ``new_sigma / sigma > 0``.
    """
    b = G.shape[0]

    def body(i, carry):
        G, s_blk, delta, cent = carry
        h = G[i, i]
        sigma = 1.0 / h
        s_old = s_blk[i]
        s_new = jnp.clip(s_old + sigma - lam, 0.0, cap[i])
        dlt = s_new - s_old
        g = G[:, i]
        G = G + (dlt / (1.0 - dlt * h)) * jnp.outer(g, g)
        cent = jnp.maximum(cent, _off_centre(s_old, s_new, sigma, lam, cap[i]))
        return G, s_blk.at[i].set(s_new), delta.at[i].set(dlt), cent

    init = (G, s_blk, jnp.zeros_like(s_blk), jnp.zeros((), G.dtype))
    _, s_blk, delta, cent = lax.fori_loop(0, b, body, init)
    return s_blk, delta, cent


def _off_centre(s_old, s_new, sigma, lam, cap):
    """Distance of one coordinate from the central path: ``|sigma / lam - 1|``.

    ``sigma`` is the coordinate's Schur complement before its update; on the
    central path it equals ``lam`` for every coordinate strictly inside its
    bounds. Coordinates held at a bound (``s = 0`` with ``sigma < lam``, or
    ``s = cap`` with ``sigma > lam``) count as centred.
    """
    at_bound = ((s_new <= 0) & (s_old <= 0)) | ((s_new >= cap) & (s_old >= cap))
    return jnp.where(at_bound, 0.0, jnp.abs(sigma / lam - 1.0))


def _block_cholesky_update(L, X, gamma, first_chunk, b):
    r"""Rank-``b`` update ``L Lbar^T = L (I + X diag(gamma) X^T) L^T``, blocked.

    The factor of ``K = I + X Gamma X^T`` has the structure
    ``K = (I + tril(X B^T, -1)) diag(dt) (I + tril(X B^T, -1))^T`` (the
    Gill-Golub-Murray-Saunders / Algorithm-6 recursion with a ``b x b`` state
    ``M``, started at ``Gamma``). Processing ``b`` rows at a time turns the
    recursion into a small LDL^T of ``I + X_R M X_R^T`` and turns
    ``Lbar = L (I + tril(X B^T, -1)) diag(sqrt dt)`` into three matrix
    products per chunk, with ``P = sum_{r > j} L[:, r] x_r^T`` carried along.
    Rows of ``X`` above the block are zero, so chunks before
    ``first_chunk`` are unchanged and skipped.
    """
    n = L.shape[0]
    nchunks = n // b
    eye_b = jnp.eye(b, dtype=L.dtype)
    upper = jnp.triu(jnp.ones((b, b), dtype=bool))
    E = lax.dynamic_slice(jnp.eye(n, dtype=L.dtype), (0, first_chunk * b), (n, b))

    def body(c, carry):
        L, P, M = carry
        r0 = c * b
        XR = lax.dynamic_slice(X, (r0, 0), (b, b))
        LR = lax.dynamic_slice(L, (0, r0), (n, b))
        XM = jnp.matmul(XR, M, precision=HIGHEST)
        S = eye_b + jnp.matmul(XM, XR.T, precision=HIGHEST)
        Cc = jnp.linalg.cholesky(S)
        dc = jnp.diagonal(Cc)
        T = dc[:, None] * lax.linalg.triangular_solve(Cc, XM, left_side=True, lower=True)
        dt = dc**2
        B = T / dt[:, None]
        M = M - jnp.matmul(T.T, B, precision=HIGHEST)
        Uc = jnp.where(upper, jnp.matmul(XR, B.T, precision=HIGHEST), 0.0)
        newLR = LR + jnp.matmul(P, B.T, precision=HIGHEST) - jnp.matmul(LR, Uc, precision=HIGHEST)
        newLR = newLR * jnp.sqrt(dt)[None, :]
        P = P - jnp.matmul(LR, XR, precision=HIGHEST)
        return lax.dynamic_update_slice(L, newLR, (0, r0)), P, M

    L, _, _ = lax.fori_loop(first_chunk, nchunks, body, (L, E, jnp.diag(gamma)))
    return L


def _sweep(state: SDPState, C2diag, b):
    """One cyclic sweep over all coordinates at the current ``lam``, block by block."""
    n = state.L.shape[0]
    nblocks = n // b
    lam = state.lam
    cap = jnp.minimum(1.0, C2diag)

    def block(k, carry):
        s, L, cent = carry
        j0 = k * b
        E = lax.dynamic_slice(jnp.eye(n, dtype=L.dtype), (0, j0), (n, b))
        X = lax.linalg.triangular_solve(L, E, left_side=True, lower=True)  # L^{-1} E_J
        G = jnp.matmul(X.T, X, precision=HIGHEST)  # (A^{-1})_{JJ}
        s_blk = lax.dynamic_slice(s, (j0,), (b,))
        s_blk, delta, c = _coordinate_block(G, s_blk, lax.dynamic_slice(cap, (j0,), (b,)), lam)
        L = _block_cholesky_update(L, X, -delta, k, b)
        return lax.dynamic_update_slice(s, s_blk, (j0,)), L, jnp.maximum(cent, c)

    s, L, cent = lax.fori_loop(0, nblocks, block, (state.s, state.L, jnp.zeros((), state.L.dtype)))
    return state._replace(s=s, L=L, sweep=state.sweep + 1), cent


def _pad_correlation(C, b):
    p = C.shape[-1]
    n = -(-p // b) * b
    if n == p:
        return C
    # padded coordinates are independent unit-variance variables: they decouple
    # from the real ones (zero correlation) and are dropped at the end
    Cp = jnp.eye(n, dtype=C.dtype)
    return Cp.at[:p, :p].set(C)


def _default_block(p):
    return int(min(p, 64 if p > 256 else max(8, -(-p // 4))))


def sdp_init(Sigma, *, lam0=None, block_size=None, s0=None) -> tuple[SDPState, int]:
    """Initial :class:`SDPState` for :func:`sdp` (``s = s0`` or 0, ``L = chol(2C - diag s)``).

    Returns ``(state, block_size)``. Use with :func:`sdp_step` to drive the
    sweeps by hand (notebooks, debugging).
    """
    Sigma = _validate_sigma(Sigma, batch_ok=False)
    p = Sigma.shape[-1]
    b = block_size or _default_block(p)
    C = _pad_correlation(to_correlation(Sigma), b)
    n = C.shape[-1]
    s = jnp.zeros(n, C.dtype) if s0 is None else jnp.zeros(n, C.dtype).at[:p].set(s0 / jnp.diagonal(Sigma))
    lam = jnp.asarray(0.5 if lam0 is None else lam0, C.dtype)
    L = jnp.linalg.cholesky(2.0 * C - jnp.diag(s))
    inf = jnp.asarray(jnp.inf, C.dtype)
    return SDPState(s, L, lam, jnp.int32(0), inf, inf), b


def sdp_step(state: SDPState, Sigma, *, block_size: int, decay: float = 0.8) -> SDPState:
    """One sweep of :func:`sdp` (all coordinates once), then ``lam <- decay * lam``."""
    C = _pad_correlation(to_correlation(jnp.asarray(Sigma)), block_size)
    state, _ = jax.jit(_sweep, static_argnums=(2,))(state, 2.0 * jnp.diagonal(C), block_size)
    return state._replace(lam=state.lam * decay)


def sdp(
    Sigma,
    *,
    tol: float = 1e-5,
    max_sweeps: int = 500,
    lam0: float | None = None,
    decay: float = 0.8,
    block_size: int | None = None,
    method: str = "newton",
    throw: bool = False,
) -> Solution:
    r"""Gaussian knockoff SDP: barrier path following, Newton (default) or FANOK Algorithm 4.

    Both methods follow the central path of the barrier problem (thesis eq. 4.3)

    .. math:: \max_{0 \le s \le 1}\ 1^T s + \lambda \log\det(2C - \mathrm{diag}(s))

    on the correlation matrix ``C`` while decreasing ``lam``, and both stop on
    the **certified** duality gap (module doc): the solver stops when
    ``gap <= tol * 1^T s`` (relative), else after ``max_sweeps`` steps with
    ``RESULTS.max_steps_reached``, or with ``RESULTS.stagnated`` once the
    certificate stops improving (its rounding floor is ~1e-6 relative on
    near-singular optima; ask for ``tol >= 1e-6``).

    ``method="newton"`` (default): primal-dual Newton steps on the barrier
    problem with the box ``0 <= s <= 1`` handled by log barriers and
    multipliers (``_newton_path``): each step solves
    ``(lam A^{-1} o A^{-1} + diag(z_0/s + z_1/(1-s))) ds = grad`` with
    ``A = 2C - diag(s)`` by Cholesky, takes 99% of the step to the box boundary
    (shortened until ``A`` is positive definite), and divides ``lam`` by 10
    once the Newton decrement is below 0.3. 20-60 steps of ``~3 p^3`` flops
    (Cholesky, triangular inverse, product) regardless of conditioning; the
    certificate is built at every iterate.

    ``method="coordinate"``: cyclic exact coordinate ascent (FANOK Algorithm 4),
    ``lam <- decay * lam`` after each sweep. The coordinate update is closed
    form (eq. 4.4 / Lemma 4): with ``sigma_j = 1 / (A^{-1})_jj`` the Schur
    complement, ``s_j <- clip(s_j + sigma_j - lam, 0, 1)``. The lower Cholesky
    factor ``L`` of ``A`` is kept current by rank-one-per-coordinate updates
    applied ``b`` coordinates at a time (``b = block_size``): for a block ``J``
    one triangular solve gives ``X = L^{-1} E_J`` and ``G = X^T X = (A^{-1})_{JJ}``;
    the ``b`` coordinate updates run sequentially on ``G`` (Sherman-Morrison on
    ``b x b``); then the ``b`` rank-one changes are folded into ``L`` by a
    blocked Gill-Golub-Murray-Saunders update (matrix products only, see
    ``_block_cholesky_update``). ``L`` is never re-factorised; ``O(p^3)`` flops
    per sweep, all in one ``lax.while_loop`` / ``lax.fori_loop``. Certification
    starts once ``lam * p <= tol * 1^T s / 4`` from a Newton-re-centred copy of
    the iterate; ``lam`` is only decreased after sweeps that found the iterate
    near the central path. It needs ~100-200 sweeps for ``tol=1e-5`` and can
    jam a few 1e-4 short of OPT on AR(1)-like matrices (the certificate
    exposes it as ``RESULTS.stagnated``), which is why Newton is the default;
    the coordinate form is the one that scales to factor models
    (:func:`sdp_factor`).

    Args:
        Sigma: ``(p, p)`` positive definite covariance or correlation matrix,
            float64, or a batch ``(B, p, p)`` (solved with ``vmap``).
        tol: relative duality-gap tolerance.
        max_sweeps: maximum number of sweeps / Newton steps.
        lam0: initial barrier parameter (default 0.5; Newton starts at ``lam0 / p``).
        decay: barrier decrease per sweep (coordinate method), in (0, 1).
        block_size: coordinates per block (coordinate method; default 64, or
            ``~p/4`` for small p).
        method: ``"newton"`` (default) or ``"coordinate"`` (Algorithm 4).
        throw: raise ``RuntimeError`` if not converged.

    Returns:
        :class:`~jaxknock.Solution`: ``value`` is ``s`` (covariance scale),
        ``stats`` has ``num_steps`` (sweeps or Newton steps; also
        ``sweeps`` and ``newton_steps``), ``max_steps``, ``objective``
        (``1^T s`` correlation scale), ``dual``, ``gap`` (certified),
        ``lam`` (final barrier parameter), ``min_eig``; ``state`` is the
        final :class:`SDPState` (coordinate) or ``NewtonState`` (Newton).

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(4) + 0.5
        >>> sdp(C).value   # ~ [1., 1., 1., 1.] (= min(1, 2(1 - 0.5)))
    """
    _check_settings(tol, max_sweeps, decay, lam0)
    Sigma = _validate_sigma(Sigma)
    p = Sigma.shape[-1]
    b = block_size or _default_block(p)
    if not (isinstance(b, (int, np.integer)) and 1 <= b):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    b = int(min(b, p))
    lam0 = 0.5 if lam0 is None else float(lam0)
    if method not in _SDP_METHODS:
        raise ValueError(f"method must be one of {_SDP_METHODS}, got {method!r}")
    fn = _sdp_jit
    if Sigma.ndim == 3:
        fn = jax.vmap(_sdp_jit, in_axes=(0, None, None, None, None, None, None))
    sol = fn(Sigma, float(tol), int(max_sweeps), lam0, float(decay), b, method)
    return raise_if_failed(sol, throw)


@jax.jit(static_argnums=(1, 2, 3, 4, 5, 6, 7, 8))
def _sdp_jit(Sigma, tol, max_sweeps, lam0, decay, b, method="newton", centrality=1.0, patience=20):
    p = Sigma.shape[-1]
    Cfull = to_correlation(Sigma)
    C = _pad_correlation(Cfull, b)
    n = C.shape[-1]
    c2 = 2.0 * jnp.diagonal(C)
    cap = jnp.minimum(1.0, 2.0 * jnp.diagonal(Cfull))
    s0 = jnp.zeros(n, C.dtype)
    inf = jnp.asarray(jnp.inf, C.dtype)
    state = SDPState(s0, jnp.linalg.cholesky(2.0 * C), jnp.asarray(lam0, C.dtype), jnp.int32(0), inf, inf)

    def body(st):
        st, cent = _sweep(st, c2, b)
        # the barrier dual certifies at best ~ lam * p: once lam is that small, stop
        # decreasing it and certify (Newton-centred dual) after every sweep
        obj = jnp.maximum(jnp.sum(st.s[:p]), 1e-12)
        worth = st.lam * p <= 0.25 * tol * obj
        dual, gap = lax.cond(
            worth,
            lambda: _certified_gap_dense(Cfull, st.s[:p], st.lam, cap),
            lambda: (inf, inf),
        )
        # path following: shrink lam only once the sweep found the iterate near the
        # central path (shrinking it faster makes coordinate ascent jam short of OPT)
        hold = (st.lam * p <= 0.02 * tol * obj) | (cent > centrality)
        return st._replace(gap=gap, dual=dual, lam=jnp.where(hold, st.lam, st.lam * decay))

    def cond(carry):
        st, stall = carry
        tot = jnp.maximum(jnp.sum(st.s[:p]), 1e-12)
        rel = st.gap / tot
        return (st.sweep < max_sweeps) & ~(rel <= tol) & jnp.all(jnp.isfinite(st.s)) & (stall < patience)

    def outer(carry):
        st, stall = carry
        new = body(st)
        # once certifying, count sweeps in which the certified gap improved by < 1%
        stalled = jnp.isfinite(new.gap) & (new.gap > 0.99 * st.gap)
        return new, jnp.where(stalled, stall + 1, 0)

    sweeps = newton_steps = jnp.int32(0)
    if method == "coordinate":
        state, stall = lax.while_loop(cond, outer, (state, jnp.int32(0)))
        s_corr, lam_end, dual, sweeps = state.s[:p], state.lam, state.dual, state.sweep
        stagnated = stall >= patience
    else:
        start = jnp.zeros(p, C.dtype)
        state = _newton_path(Cfull, start, jnp.asarray(lam0 / p, C.dtype), cap, tol, max_sweeps)
        s_corr, lam_end, dual, newton_steps = state.s, state.lam, state.dual, state.step
        stagnated = state.stall >= _NEWTON_PATIENCE
    gap = dual - jnp.sum(s_corr)
    A = 2.0 * Cfull - jnp.diag(s_corr)
    min_eig = jnp.linalg.eigvalsh(A)[0]
    finite = jnp.all(jnp.isfinite(s_corr))
    converged = gap / jnp.maximum(jnp.sum(s_corr), 1e-12) <= tol
    not_done = jnp.where(stagnated, RESULTS.stagnated, RESULTS.max_steps_reached)
    result = jnp.where(
        ~finite,
        RESULTS.nonfinite,
        # infeasible: eigvalsh says so and a Cholesky factorisation fails too (within
        # ~1e-14 of the PD boundary eigvalsh's sign is rounding noise)
        jnp.where(
            (min_eig < 0) & ~_is_pd(2.0 * Cfull, s_corr),
            RESULTS.infeasible,
            jnp.where(converged, RESULTS.successful, not_done),
        ),
    ).astype(jnp.int32)
    stats = {
        "num_steps": sweeps + newton_steps,
        "sweeps": sweeps,
        "newton_steps": newton_steps,
        "max_steps": max_sweeps,
        "objective": jnp.sum(s_corr),
        "dual": dual,
        "gap": gap,
        "lam": lam_end,
        "min_eig": min_eig,
    }
    return Solution(s_corr * jnp.diagonal(Sigma), result, stats, state)


# --------------------------------------------------------------------------
# factor-model barrier coordinate ascent (Algorithm 5)
# --------------------------------------------------------------------------


class FactorSDPState(NamedTuple):
    """State of :func:`sdp_factor`: ``s``, ``N = M^{-1}`` with
    ``M = I + 2 U^T (2D - diag s)^{-1} U``, barrier ``lam``, sweep counter and
    the last certified ``gap`` / ``dual``."""

    s: jax.Array
    N: jax.Array
    lam: jax.Array
    sweep: jax.Array
    gap: jax.Array
    dual: jax.Array


_FACTOR_BLOCK = 256


def _factor_capacitance_inverse(d, U, s):
    dt = 2.0 * d - s
    M = jnp.eye(U.shape[1], dtype=U.dtype) + 2.0 * jnp.matmul(U.T, U / dt[:, None], precision=HIGHEST)
    return jnp.linalg.inv(M)


def _factor_inverse_diag(d, U, s, N):
    """``diag(A^{-1})`` for ``A = (2D - S) + 2 U U^T`` by Woodbury, O(p k^2)."""
    dt = 2.0 * d - s
    W = U / dt[:, None]
    return 1.0 / dt - 2.0 * jnp.sum(jnp.matmul(W, N, precision=HIGHEST) * W, axis=1)


def _factor_sweep(state: FactorSDPState, d, U, tol):
    r"""One sweep of Algorithm 5.

    For coordinate ``j`` with ``dt_j = 2 d_j - s_j`` and ``a = u_j^T N u_j``,
    the Schur complement of ``A`` w.r.t. the other coordinates is
    ``sigma_j = dt_j^2 / (dt_j - 2a)`` (= ``1 / (A^{-1})_jj`` by Woodbury);
    the update is ``s_j <- clip(s_j + sigma_j - lam, 0, 1)`` and ``N`` gets the
    Sherman-Morrison update for ``M += 2 u u^T (1/dt_new - 1/dt_old)``, written as
    ``N - 2 delta N u u^T N / (dt_old dt_new + 2 delta a)`` so that no
    ``1 / dt`` appears in the update itself.
    """
    p = U.shape[0]
    lam = state.lam
    cap = jnp.minimum(1.0, 2.0 * (d + jnp.sum(U**2, axis=1)))
    # Coordinates are visited in blocks of ``b``: the inner loop carries only the
    # block's slices, so each step touches O(b + k^2) memory (a loop carrying the
    # whole p-vector copies it at every step on some backends: O(p^2) per sweep).
    b = min(_FACTOR_BLOCK, p)
    nblocks = -(-p // b)
    pad = nblocks * b - p
    # padded coordinates have u = 0, d = 1, cap = 0: their update is s = 0, no-op
    Ub = jnp.pad(U, ((0, pad), (0, 0))).reshape(nblocks, b, -1)
    db = jnp.pad(d, (0, pad), constant_values=1.0).reshape(nblocks, b)
    cb = jnp.pad(cap, (0, pad)).reshape(nblocks, b)
    sb = jnp.pad(state.s, (0, pad)).reshape(nblocks, b)

    def block(kb, carry):
        sb, N, cent = carry
        Ublk, dblk, cblk = Ub[kb], db[kb], cb[kb]

        def coord(i, carry):
            s_blk, N, cent = carry
            u = Ublk[i]
            Nu = jnp.matmul(N, u, precision=HIGHEST)
            a = jnp.dot(u, Nu, precision=HIGHEST)
            s_old = s_blk[i]
            dt_old = 2.0 * dblk[i] - s_old
            sigma = dt_old**2 / (dt_old - 2.0 * a)
            s_new = jnp.clip(s_old + sigma - lam, 0.0, cblk[i])
            dlt = s_new - s_old
            dt_new = dt_old - dlt
            denom = dt_old * dt_new + 2.0 * dlt * a
            N = N - (2.0 * dlt / denom) * jnp.outer(Nu, Nu)
            cent = jnp.maximum(cent, _off_centre(s_old, s_new, sigma, lam, cblk[i]))
            return s_blk.at[i].set(s_new), N, cent

        s_blk, N, cent = lax.fori_loop(0, b, coord, (sb[kb], N, cent))
        return sb.at[kb].set(s_blk), N, cent

    sb, N, cent = lax.fori_loop(0, nblocks, block, (sb, state.N, jnp.zeros((), U.dtype)))
    s = sb.reshape(-1)[:p]
    # refresh the k x k inverse once per sweep (O(p k^2)) to stop drift
    N = _factor_capacitance_inverse(d, U, s)
    h = _factor_inverse_diag(d, U, s, N)
    dual, gap = _gap_from_inverse_diag(s, h, lam)
    return FactorSDPState(s, N, lam, state.sweep + 1, gap, dual), cent


def _factor_is_pd(d, U, s):
    """Is ``(2D - diag s) + 2 U U^T`` positive definite? O(p k^2).

    By Haynsworth inertia additivity on ``[[Dt, U], [U^T, -I/2]]``,
    ``#neg(A) = #neg(Dt) + #neg(I + 2 U^T Dt^{-1} U)`` (for nonsingular ``Dt``).
    """
    dt = 2.0 * d - s
    M = jnp.eye(U.shape[1], dtype=U.dtype) + 2.0 * jnp.matmul(U.T, U / dt[:, None], precision=HIGHEST)
    ev = jnp.linalg.eigvalsh((M + M.T) / 2)
    neg = jnp.sum(dt < 0) + jnp.sum(ev < 0)
    return (neg == 0) & jnp.all(dt != 0) & jnp.all(jnp.isfinite(ev))


def sdp_factor(
    model: FactorModel,
    *,
    tol: float = 1e-5,
    max_sweeps: int = 500,
    lam0: float | None = None,
    decay: float = 0.6,
    throw: bool = False,
) -> Solution:
    r"""Knockoff SDP for a factor model ``Sigma = D + U U^T`` (FANOK Algorithm 5).

    Same barrier problem and coordinate update as :func:`sdp`, but
    ``A = 2 Sigma - diag(s) = Dt + 2 U U^T`` with ``Dt = 2D - diag(s)``, so
    (Lemma 5 + Woodbury) every coordinate needs only
    ``a_j = u_j^T M^{-1} u_j`` with the ``k x k`` capacitance
    ``M = I + 2 U^T Dt^{-1} U``. ``M^{-1}`` is kept current by a rank-one
    update per coordinate (``O(k^2)``) and recomputed from scratch once per
    sweep (``O(p k^2)``) to prevent drift. Total: ``O(p k^2)`` per sweep,
    ``O(p k)`` memory, no ``p x p`` array. Coordinates are visited in blocks
    of 256 so that the inner loop only carries the block (a loop carrying the
    whole ``s`` would copy it at each coordinate, ``O(p^2)`` per sweep).

    Schedule: ``lam`` starts at ``lam0`` or, by default, at
    ``min(0.5, max_j 1 / (2 Sigma)^{-1}_jj)``, the largest value at which a
    coordinate leaves ``s = 0`` (sweeps above it change nothing), and is
    multiplied by ``decay`` (default 0.6) after each sweep whose iterate is
    within a factor 2 of the central path (``|sigma_j / lam - 1| <= 1``);
    otherwise the sweep is repeated at the same ``lam``. The run stops when
    the certified relative gap is at most ``tol``: about 25-35 sweeps on the
    problems we benchmark, independent of ``p``.

    The model is first rescaled to unit diagonal
    (``d/diag``, ``U/sqrt(diag)``) and ``s`` mapped back. The certified gap uses
    ``diag(A^{-1})`` from Woodbury; feasibility ``A > 0`` is checked exactly by
    inertia (``min_eig`` is reported as NaN: not cheap for a factor model,
    ``stats['feasible']`` holds the check).

    Caveat (thesis section 4.2): ``Dt_j`` may pass through 0 when ``s_j``
    crosses ``2 d_j``; the update formula avoids dividing by it, but a
    ``Dt_j`` within rounding of 0 makes ``M`` ill-conditioned. Such runs end
    with ``RESULTS.nonfinite`` rather than a silent wrong answer.

    Args:
        model: :class:`~jaxknock.FactorModel` (float64), or one with a leading
            batch axis on ``d`` and ``U`` (solved with ``vmap``).
        tol, max_sweeps, throw: as in :func:`sdp`.
        lam0: initial barrier parameter (default: automatic, see above).
        decay: factor applied to ``lam`` after each centred sweep.

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``
        ``num_steps, max_steps, objective, dual, gap, lam, min_eig (NaN), feasible``.

    Example:
        >>> model = FactorModel(jnp.full(1000, 0.5), jnp.full((1000, 1), 0.5 ** 0.5))
        >>> s = sdp_factor(model).value   # equicorrelated rho=0.5 -> s = 1
    """
    _check_settings(tol, max_sweeps, decay, lam0)
    model = _validate_model(model)
    lam0 = None if lam0 is None else float(lam0)
    fn = _sdp_factor_jit
    if model.U.ndim == 3:
        fn = jax.vmap(_sdp_factor_jit, in_axes=(0, 0, None, None, None, None))
    sol = fn(model.d, model.U, float(tol), int(max_sweeps), lam0, float(decay))
    return raise_if_failed(sol, throw)


@jax.jit(static_argnums=(2, 3, 4, 5, 6))
def _sdp_factor_jit(d, U, tol, max_sweeps, lam0, decay, centrality=1.0):
    p, k = U.shape
    diag = d + jnp.sum(U**2, axis=1)
    dc, Uc = d / diag, U / jnp.sqrt(diag)[:, None]
    s0 = jnp.zeros(p, U.dtype)
    inf = jnp.asarray(jnp.inf, U.dtype)
    N0 = _factor_capacitance_inverse(dc, Uc, s0)
    if lam0 is not None:
        lam_start = jnp.asarray(lam0, U.dtype)
    else:
        # the largest lam at which a coordinate moves off s = 0 on the first sweep:
        # max_j sigma_j(0) = max_j 1 / (2 Sigma)^{-1}_jj; sweeps above it change nothing
        lam_start = jnp.minimum(0.5, jnp.max(1.0 / _factor_inverse_diag(dc, Uc, s0, N0)))
    state = FactorSDPState(s0, N0, lam_start, jnp.int32(0), inf, inf)

    def cond(st):
        rel = st.gap / jnp.maximum(jnp.sum(st.s), 1e-12)
        return (st.sweep < max_sweeps) & ~(rel <= tol) & jnp.all(jnp.isfinite(st.s)) & jnp.isfinite(st.lam)

    def body(st):
        st, cent = _factor_sweep(st, dc, Uc, tol)
        # once lam * p is below the target gap, keep lam and keep sweeping: extra
        # sweeps at fixed lam re-centre the iterate, which tightens the certificate
        hold = (st.lam * p <= 0.05 * tol * jnp.maximum(jnp.sum(st.s), 1e-12)) | (cent > centrality)
        return st._replace(lam=jnp.where(hold, st.lam, st.lam * decay))

    state = lax.while_loop(cond, body, state)
    s = state.s
    feasible = _factor_is_pd(dc, Uc, s)
    finite = jnp.all(jnp.isfinite(s)) & jnp.isfinite(state.gap)
    gap = jnp.where(feasible, state.gap, jnp.inf)
    converged = gap / jnp.maximum(jnp.sum(s), 1e-12) <= tol
    result = jnp.where(
        ~finite,
        RESULTS.nonfinite,
        jnp.where(~feasible, RESULTS.infeasible, jnp.where(converged, RESULTS.successful, RESULTS.max_steps_reached)),
    ).astype(jnp.int32)
    stats = {
        "num_steps": state.sweep,
        "max_steps": max_sweeps,
        "objective": jnp.sum(s),
        "dual": jnp.where(feasible, state.dual, jnp.inf),
        "gap": gap,
        "lam": state.lam,
        "min_eig": jnp.full((), jnp.nan, U.dtype),
        "feasible": feasible,
    }
    return Solution(s * diag, result, stats, state)


# --------------------------------------------------------------------------
# scale_to_feasible and ASDP
# --------------------------------------------------------------------------


def scale_to_feasible(Sigma, s, *, num_bisections: int = 60) -> Solution:
    r"""Largest ``gamma`` in ``[0, 1/max(s/diag Sigma)]`` with ``diag(gamma s) <= 2 Sigma``; returns ``gamma s``.

    Bisection on ``gamma`` with a Cholesky-success test of
    ``2 Sigma - gamma diag(s)`` (dense ``Sigma``), or the exact ``O(p k^2)``
    inertia test when ``Sigma`` is a :class:`~jaxknock.FactorModel`. This is
    the second step of ASDP and the "hybrid" route of thesis section 4.3
    (an ``s`` solved on an approximate factor model, made feasible for the
    true ``Sigma``). The upper end of the bracket keeps ``gamma s <= diag Sigma``
    (i.e. ``<= 1`` on the correlation scale).

    Args:
        Sigma: ``(p, p)`` matrix or :class:`~jaxknock.FactorModel`.
        s: ``(p,)`` non-negative candidate.
        num_bisections: bisection steps (``2^-60`` relative accuracy by default).

    Returns:
        :class:`~jaxknock.Solution` with ``value = gamma * s`` (feasible: the
        lower end of the final bracket) and ``stats = {gamma, num_steps,
        max_steps, objective}``.

    Example:
        >>> scale_to_feasible(0.5 * jnp.eye(2) + 0.5, jnp.array([2.0, 2.0])).stats["gamma"]  # 0.5
    """
    if isinstance(s, FactorModel):
        raise TypeError("scale_to_feasible(Sigma, s): Sigma first, then s")
    s = _checks.as_float_array(s, "s")
    if isinstance(Sigma, FactorModel):
        Sigma = FactorModel(*_validate_model(Sigma))
        diag = Sigma.diagonal()
        p = Sigma.p
        is_pd = lambda g: _factor_is_pd(Sigma.d, Sigma.U, g * s)
    else:
        Sigma = _validate_sigma(Sigma, batch_ok=False, need_x64=False)
        diag = jnp.diagonal(Sigma)
        p = Sigma.shape[0]
        is_pd = lambda g: jnp.all(jnp.isfinite(jnp.linalg.cholesky(2.0 * Sigma - jnp.diag(g * s))))
    if s.shape != (p,):
        raise ValueError(f"s must have shape ({p},), got {tuple(s.shape)}")
    _checks.check_finite(s, "s")
    if _checks.is_concrete(s) and (np.asarray(s) < 0).any():
        raise ValueError("s must be non-negative")

    @jax.jit
    def run(s, diag):
        hi = 1.0 / jnp.maximum(jnp.max(s / diag), 1e-300)
        hi_ok = is_pd(hi)

        def body(_, br):
            lo, hi = br
            mid = 0.5 * (lo + hi)
            ok = is_pd(mid)
            return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

        lo, _ = lax.fori_loop(0, num_bisections, body, (jnp.zeros_like(hi), hi))
        return jnp.where(hi_ok, hi, lo)

    gamma = run(s, diag)
    sol = Solution(
        gamma * s,
        jnp.int32(RESULTS.successful),
        {
            "gamma": gamma,
            "num_steps": num_bisections,
            "max_steps": num_bisections,
            "objective": jnp.sum(gamma * s / diag),
        },
    )
    return sol


def asdp(Sigma, *, block_size: int = 100, tol: float = 1e-5, max_sweeps: int = 500, throw: bool = False) -> Solution:
    r"""Approximate SDP (Candes et al. 2018; Rebjock thesis ch. 4).

    1. Approximate ``C`` (correlation) by its block-diagonal part with
       contiguous blocks of ``block_size`` coordinates (permute the variables
       beforehand, e.g. by hierarchical clustering, to put correlated ones
       together);
    2. solve every block's SDP with :func:`sdp` in one ``vmap`` over blocks
       (the last block is padded with independent unit-variance variables);
    3. :func:`scale_to_feasible`: the largest ``gamma`` with
       ``diag(gamma s) <= 2 Sigma`` on the full matrix.

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``:
        ``gamma``, ``objective``, ``min_eig``, ``num_steps`` (max sweeps over
        blocks), ``max_steps``, ``block_results`` (the blocks' result codes).

    Example:
        >>> s = asdp(jnp.eye(10) * 0.5 + 0.5, block_size=5).value
    """
    Sigma = _validate_sigma(Sigma, batch_ok=False)
    p = Sigma.shape[0]
    if not (isinstance(block_size, (int, np.integer)) and 1 <= block_size):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    bs = int(min(block_size, p))
    nb = math.ceil(p / bs)
    C = to_correlation(Sigma)
    n = nb * bs
    Cp = jnp.eye(n, dtype=C.dtype).at[:p, :p].set(C)
    idx = jnp.arange(nb)[:, None] * bs + jnp.arange(bs)[None, :]
    blocks = Cp[idx[:, :, None], idx[:, None, :]]
    inner = jax.vmap(_sdp_jit, in_axes=(0, None, None, None, None, None))
    bsol = inner(blocks, float(tol), int(max_sweeps), 0.5, 0.8, _default_block(bs))
    s_blk = bsol.value.reshape(-1)[:p]
    scaled = scale_to_feasible(C, s_blk)
    s_corr = scaled.value
    min_eig = jnp.linalg.eigvalsh(2.0 * C - jnp.diag(s_corr))[0]
    codes = jnp.atleast_1d(bsol.result)
    result = jnp.max(codes).astype(jnp.int32)
    stats = {
        "gamma": scaled.stats["gamma"],
        "objective": jnp.sum(s_corr),
        "min_eig": min_eig,
        "num_steps": jnp.max(jnp.atleast_1d(bsol.stats["num_steps"])),
        "max_steps": max_sweeps,
        "block_results": codes,
    }
    return raise_if_failed(Solution(s_corr * jnp.diagonal(Sigma), result, stats), throw)
