r"""Certified duality gaps for the knockoff SDP.

From a barrier iterate ``A = 2C - diag(s)`` (``C`` the correlation matrix) the
point ``Lambda = t lam A^{-1}``, ``eta = max(0, 1 - diag Lambda)`` is feasible
for the dual

.. math::  \min_{\Lambda \succeq 0,\ \eta \ge 0}\ 2\,\mathrm{tr}(\Lambda C) + 1^T\eta
           \quad\text{s.t.}\quad \mathrm{diag}(\Lambda) + \eta \ge 1 ,

so its objective bounds the SDP optimum from above and
``gap = dual - 1^T s >= OPT - 1^T s``.

:func:`sdp_dual_gap` is the public entry point. :func:`gap_from_inverse_diag`
(the bound from ``diag(A^{-1})``, used after every Newton step and factor
sweep) and :func:`certified_gap_dense` (the bound at a Newton-re-centred copy
of ``s``, used by the coordinate ascent) are shared within
:mod:`jaxknock.svector`.

At a degenerate optimum (``A`` with several eigenvalues near zero: AR(1) with
``rho >= 0.98``) ``t lam A^{-1}`` is a poor certificate unless ``s`` is
exactly centred; :func:`subspace_dual` optimises a dual point
``Lambda = V M V^T + tau lam V_t E_t^{-1} V_t^T`` over the near-null
eigenvectors ``V`` of ``A`` and evaluates its bound in a rounding-safe way
(the Newton path's fallback when it stagnates).

:func:`min_eig_bound` is the cheap feasibility certificate behind
``stats["min_eig"]``: a Cholesky factorisation of ``A = 2C - diag(s)`` decides
feasibility and a few triangular solves plus (usually) one more Cholesky give a
certified lower bound on ``lambda_min(A)``; :func:`smallest_eigenvalue` is the
exact value (``exact_min_eig=True``), without eigenvectors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _checks, _sigma_checks
from jaxknock.covariance import to_correlation
from jaxknock.svector import _common
from jaxknock.svector._common import HIGHEST

__all__ = ["sdp_dual_gap"]

# shifts tried (as fractions of the inverse-iteration estimate) to certify a lower bound on lambda_min
_SHIFT_LADDER = (0.99, 0.9, 0.5, 0.1, 0.01)
_POWER_STEPS = 20


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


def _best_scaled_dual_search(alpha, beta):
    """:func:`_best_scaled_dual` without a sort: ``O(p)`` passes of a bisection (same value to rounding).

    The right derivative of the objective at ``t = 1/b`` is ``alpha - c(b)`` with
    ``c(b) = sum_{beta_j < b} beta_j`` nondecreasing in ``b``, so the minimising
    breakpoint is ``1 / b*`` with ``b*`` the largest ``beta_i`` where ``c(beta_i) <= alpha``.
    The limit ``max{b : c(b) <= alpha}`` is bisected exactly over the bit patterns of
    the (positive) floats, one masked sum per bit; the objective is then evaluated
    directly at ``t = 1 / b*``. Used where a length-``p`` sort per step is a large
    share of the step (the factor-model Newton path).
    """
    b = jnp.maximum(beta, 1e-300)
    itype, nbits = (jnp.int64, 64) if b.dtype == jnp.float64 else (jnp.int32, 32)

    def as_float(bits):
        return lax.bitcast_convert_type(bits, b.dtype)

    def below(x):
        return jnp.sum(jnp.where(b < x[..., None], b, 0.0), axis=-1)

    bits = lax.bitcast_convert_type(b, itype)

    def bisect(_, c):
        lo, hi = c
        mid = lo + (hi - lo) // 2
        ok = below(as_float(mid)) <= alpha
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, hi = lax.fori_loop(0, nbits, bisect, (jnp.min(bits, axis=-1), jnp.max(bits, axis=-1)))
    lim = jnp.where(below(as_float(hi)) <= alpha, as_float(hi), as_float(lo))
    t = 1.0 / jnp.max(jnp.where(b <= lim[..., None], b, 0.0), axis=-1)
    val = t * alpha + jnp.sum(jnp.maximum(0.0, 1.0 - t[..., None] * b), axis=-1)
    return jnp.minimum(val, b.shape[-1])


def gap_from_inverse_diag(s, hdiag, lam, search=False):
    """Certified dual objective / gap from ``h = diag(A^{-1})`` (correlation scale).

    Dual point ``Lambda = t lam A^{-1}`` (``t`` optimal, see
    :func:`_best_scaled_dual`), ``eta = max(0, 1 - diag Lambda)``;
    ``2 tr(Lambda_0 Sigma) = lam (p + sum_j s_j h_j)`` because
    ``Sigma = (A + diag s) / 2``. ``search=True`` finds the optimal ``t`` by
    bisection instead of a sort (:func:`_best_scaled_dual_search`, same value).
    """
    p = s.shape[-1]
    alpha = lam * (p + jnp.sum(s * hdiag, axis=-1))
    dual = (_best_scaled_dual_search if search else _best_scaled_dual)(alpha, lam * hdiag)
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

    def pull_inside(x):
        # a start outside the PD cone by rounding (coordinate sweeps at lam ~ 1e-11 on a nearly singular
        # C leave it by ~1e-15) is shrunk towards s = 0 (feasible: C > 0) by the smallest factor
        # 1 - 4^-k, k = 20, ..., 0, that restores a Cholesky factor; it used to stay put, every
        # certificate was inf and sdp(method="coordinate") ended infeasible after max_steps sweeps.
        # No iteration (the same bits) for a feasible start.
        f0, L = f_and_chol(x)

        def body(c):
            k, _, _, _ = c
            xk = x * (1.0 - jnp.asarray(4.0, x.dtype) ** -k)
            return (k - 1, xk, *f_and_chol(xk))

        init = (jnp.asarray(20, x.dtype), x, f0, L)
        _, x, f0, L = lax.while_loop(lambda c: ~jnp.isfinite(c[2]) & (c[0] >= 0), body, init)
        return x, f0, L

    def step(_, x):
        x, f0, L = pull_inside(x)
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


def centred_dual(C, s, lam, cap, num_steps=8):
    """``(sc, L, dual)``: Newton-centred copy ``sc`` of ``s``, the Cholesky factor of ``2C - diag(sc)``, its dual bound.

    ``dual >= OPT`` for every ``sc`` (``inf`` when the factorisation fails);
    ``sc`` is feasible whenever ``dual`` is finite and its barrier objective at
    ``lam`` is at least that of ``s`` (:func:`_newton_center` never decreases it).
    """
    C2 = 2.0 * C
    sc = _newton_center(C2, s, lam, cap, num_steps=num_steps)
    L = jnp.linalg.cholesky(C2 - jnp.diag(sc))
    ok = jnp.all(jnp.isfinite(L))
    dual, _ = gap_from_inverse_diag(sc, _common.inverse_diag_from_cholesky(L), lam)
    return sc, L, jnp.where(ok, dual, jnp.inf)


def certified_gap_dense(C, s, lam, cap):
    """Certified ``(dual, gap)`` for ``s`` from the Newton-centred barrier dual (correlation scale)."""
    _, _, dual = centred_dual(C, s, lam, cap)
    return dual, dual - jnp.sum(s)


_certified_gap_dense_jit = jax.jit(certified_gap_dense)


def smallest_eigenvalue(A):
    """Exact ``lambda_min`` of a symmetric ``A`` (or a batch): tridiagonal reduction + bisection.

    Same value as ``jnp.linalg.eigvalsh(A)[..., 0]`` to rounding, but no
    eigenvectors are formed (``eigvalsh`` computes them on CPU and GPU): about
    ``4/3 p^3`` flops instead of ``~9 p^3``.
    """
    _, d, e, _ = lax.linalg.tridiagonal(A, lower=True)

    def lowest(d, e):
        return jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(0, 0))[0]

    for _ in range(A.ndim - 2):
        lowest = jax.vmap(lowest)
    return lowest(d, e)


def min_eig_bound(A):
    r"""Feasibility of ``A`` (Cholesky succeeds) and a certified lower bound on ``lambda_min(A)``.

    Returns ``(feasible, lower)``. ``feasible`` is the Cholesky test the solvers
    use everywhere (``A`` is numerically positive definite). ``lower`` satisfies
    ``lower <= lambda_min(A)`` up to the backward error of a Cholesky
    factorisation (``~ p eps ||A||``):

    1. ``B = A + sigma I`` with ``sigma = 0`` if ``A`` is feasible, else the
       first of ``1e-14 c, 1e-13 c, ..., 1e2 c`` (``c = max_j |A_jj|``), capped
       by twice the negated Gershgorin bound (which always works), for which
       ``B`` has a Cholesky factor; so ``lambda_min(A) >= -sigma``;
    2. ``20`` steps of inverse iteration with the Cholesky factor of ``B`` give
       the Rayleigh quotient ``theta`` of ``B^{-1}``, so
       ``mu = 1 / theta >= lambda_min(B)`` (an upper bound);
    3. the first shift ``t = c mu``, ``c`` in ``(0.99, 0.9, 0.5, 0.1, 0.01)``,
       for which ``B - t I`` has a Cholesky factor certifies
       ``lambda_min(B) >= t`` (else ``t = 0``), and ``lower = t - sigma``
       (at most 0 when ``A`` is infeasible).

    When the inverse iteration has converged the first shift succeeds, so the
    bound is within 1% of ``lambda_min`` and the cost is two Cholesky
    factorisations and ``40`` triangular solves (``O(p^2)`` each), against the
    ``~9 p^3`` flops of ``eigvalsh`` with eigenvectors. An infeasible ``A``
    costs a few more Cholesky factorisations (one per decade of ``sigma``);
    within rounding of the PD boundary the bound is ``~ -1e-14 c``.
    """
    p = A.shape[-1]
    eye = jnp.eye(p, dtype=A.dtype)
    L = jnp.linalg.cholesky(A)
    feasible = jnp.all(jnp.isfinite(L))
    diag = jnp.diagonal(A)
    scale = jnp.maximum(jnp.max(jnp.abs(diag)), jnp.finfo(A.dtype).tiny)
    sigma_max = jnp.maximum(-2.0 * jnp.min(2.0 * diag - jnp.sum(jnp.abs(A), axis=-1)), 1e-14 * scale)
    num_decades = 17

    def unshifted(c):
        i, _, _, ok = c
        return ~ok & (i < num_decades)

    def shift_up(c):
        i, _, _, _ = c
        sigma = jnp.where(i < num_decades - 1, jnp.minimum(1e-14 * scale * 10.0**i, sigma_max), sigma_max)
        Li = jnp.linalg.cholesky(A + sigma * eye)
        return i + 1, sigma, Li, jnp.all(jnp.isfinite(Li))

    init = (jnp.int32(0), jnp.zeros((), A.dtype), L, feasible)
    _, sigma, LB, shifted_ok = lax.while_loop(unshifted, shift_up, init)

    def power(_, c):
        v, _ = c
        w = jax.scipy.linalg.cho_solve((LB, True), v)
        return w / jnp.linalg.norm(w), jnp.dot(v, w)

    v0 = jax.random.normal(jax.random.key(0), (p,), A.dtype)
    _, theta = lax.fori_loop(0, _POWER_STEPS, power, (v0 / jnp.linalg.norm(v0), jnp.zeros((), A.dtype)))
    mu = 1.0 / theta
    ladder = jnp.asarray(_SHIFT_LADDER, A.dtype)

    def untried(c):
        i, found = c
        return (i < ladder.shape[0]) & ~found

    def try_shift(c):
        i, _ = c
        ok = jnp.all(jnp.isfinite(jnp.linalg.cholesky(A + (sigma - ladder[i] * mu) * eye)))
        return i + 1, ok

    i, found = lax.while_loop(untried, try_shift, (jnp.int32(0), jnp.zeros((), bool)))
    lower = jnp.where(found, ladder[jnp.maximum(i - 1, 0)] * mu, 0.0) - sigma
    lower = jnp.where(shifted_ok, lower, -sigma_max)  # NaN input: lower stays NaN via sigma_max
    return feasible, jnp.where(feasible, lower, jnp.minimum(lower, 0.0))


def sdp_dual_gap(Sigma, s, lam):
    r"""Certified duality gap of ``s`` for the knockoff SDP (dense, correlation scale).

    Re-centres ``s`` on the barrier path at parameter ``lam`` with a few
    Newton steps (giving ``s_c``), takes the dual-feasible point
    ``Lambda = t lam (2C - diag s_c)^{-1}``, ``eta = max(0, 1 - diag Lambda)``
    with the best scalar ``t``, and returns ``(dual, gap)``:
    ``dual = 2 tr(Lambda C) + 1^T eta >= OPT`` by weak duality and
    ``gap = dual - 1^T s >= OPT - 1^T s``. Any ``lam > 0`` gives a valid
    bound; ``lam ~ gap / p`` gives a tight one. ``s`` is on the covariance
    scale (as returned by the solvers). An ``s`` on the boundary or outside it
    by rounding (the equicorrelated ``s``: ``2C - diag s`` singular) is first
    shrunk towards 0 until ``2C - diag(s)`` has a Cholesky factor, so the bound
    stays finite (it was ``inf``).

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(4, dtype=jnp.float64) + 0.5
        >>> dual, gap = sdp_dual_gap(C, jnp.full(4, 0.9), 1e-3)
        >>> bool(gap >= 4 - 3.6 - 1e-9)   # OPT = 4 (s = 1 is optimal)
        True

    ``lam`` must be positive and finite and ``s`` a finite ``(p,)`` vector:
    eager input otherwise raises a ``ValueError`` naming it; under ``jit``
    ``(dual, gap)`` are NaN (never a "certified" bound from a negative barrier).
    """
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False)
    lam_ok = _checks.check_positive_scalar(lam, "lam", what="a positive, finite barrier parameter")
    s = _checks.as_float_array(s, "s")
    _checks.check_ndim(s, 1, "s", f"a 1-D vector of length p = {Sigma.shape[0]}")
    if s.shape[0] != Sigma.shape[0]:
        raise ValueError(f"s has length {s.shape[0]} but Sigma is {Sigma.shape[0]} x {Sigma.shape[0]}")
    _checks.check_finite(s, "s")
    C = to_correlation(Sigma)
    s_corr = s / jnp.diagonal(Sigma)
    cap = jnp.minimum(1.0, 2.0 * jnp.diagonal(C))
    dual, gap = _certified_gap_dense_jit(C, s_corr, _checks.call_scalar(lam, C.dtype), cap)
    ok = lam_ok & jnp.all(jnp.isfinite(s)) & (_sigma_checks.traced_sigma_code(Sigma) == 0)
    return _checks.poison(ok, dual, gap)


# --------------------------------------------------------------------------
# the subspace certificate (degenerate optima)
# --------------------------------------------------------------------------

# eigenvectors of A = 2C - diag(s) that carry the free part M of the subspace certificate
SUBSPACE_DIM = 16
# Newton steps of its small barrier problem (see _subspace_ipm)
_SUBSPACE_STEPS = 80
# barrier decrease per centred step of that problem
_SUBSPACE_MU_DECAY = 0.1


def _hinge_barrier(x, mu):
    r"""``phi, phi', phi''`` at ``x`` of ``phi(x) = min_{eta > max(0, 1 - x)} eta - mu log(eta) - mu log(x + eta - 1)``.

    The barrier of ``eta >= 0``, ``x + eta >= 1`` with ``eta`` eliminated, a
    smoothed ``max(0, 1 - x)``, convex. With ``c = 1 - x`` and
    ``root = sqrt(c^2 + 4 mu^2)`` the minimiser has slack
    ``r = x + eta - 1 = mu + (root - c) / 2`` and ``eta = mu + (root + c) / 2``
    (each ``root -+ c`` in a cancellation-free form), so ``phi' = -mu / r``
    and ``phi'' = mu (root - c) / (2 r^2 root)``.
    """
    c = 1.0 - x
    root = jnp.sqrt(c * c + 4.0 * mu * mu)
    small = 4.0 * mu * mu / (root + jnp.abs(c))
    q = jnp.where(c > 0, small, root - c)  # root - c
    e = jnp.where(c < 0, small, root + c)  # root + c
    r, eta = mu + 0.5 * q, mu + 0.5 * e
    return eta - mu * jnp.log(eta) - mu * jnp.log(r), -mu / r, mu * q / (2.0 * r * r * root)


def _subspace_ipm(W, cost, y0, k, mu0, mu_min):
    r"""Barrier method for ``min cost . y + sum_j max(0, 1 - (W y)_j)``, ``y = (svec M, tau)``, ``M, tau >= 0``.

    ``M = smat(y[:m])`` is ``k x k`` (``M_ab = M_ba = y_ab``); the hinge terms
    use :func:`_hinge_barrier`, ``M`` and ``tau`` the barriers
    ``-mu logdet M - mu log tau``. Newton steps with a backtracking (Armijo)
    line search on the barrier objective ``F`` that also keeps ``M`` positive
    definite (Cholesky) and ``tau > 0``; ``mu <- mu / 5`` once the Newton
    decrement of ``F / mu`` is below 1/4, down to ``mu_min``. Every iterate is
    feasible, so whatever it returns is a valid dual point; only its quality
    depends on the iteration.
    """
    n = y0.shape[0]
    m = n - 1
    ia, ib = jnp.triu_indices(k)
    half = jnp.where(ia == ib, 0.5, 1.0).astype(y0.dtype)
    mult = 2.0 * half  # d(tr(M X)) / dy_ab = mult_ab X_ab for symmetric X
    r_, c_ = (slice(None), None), (None, slice(None))

    def smat(y):
        M = jnp.zeros((k, k), y.dtype).at[ia, ib].set(y[:m])
        return M + jnp.triu(M, 1).T

    def barrier(y, mu):
        L = jnp.linalg.cholesky(smat(y))
        ok = jnp.all(jnp.isfinite(L)) & (y[m] > 0)
        phi, _, _ = _hinge_barrier(jnp.dot(W, y, precision=HIGHEST), mu)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.abs(jnp.diagonal(L)))) + jnp.log(jnp.abs(y[m]))
        val = jnp.dot(cost, y) + jnp.sum(phi) - mu * logdet
        return jnp.where(ok & jnp.isfinite(val), val, jnp.inf)

    def newton(y, mu):
        Mi = jnp.linalg.inv(smat(y))
        Mi = 0.5 * (Mi + Mi.T)
        tau = y[m]
        _, d1, d2 = _hinge_barrier(jnp.dot(W, y, precision=HIGHEST), mu)
        grad = cost + jnp.dot(d1, W, precision=HIGHEST)
        grad = grad - mu * jnp.concatenate([mult * Mi[ia, ib], (1.0 / tau)[None]])
        # Hessian of -logdet M: tr(M^-1 E_r M^-1 E_c) for the basis matrices E of y
        hld = (2.0 * half[r_] * half[c_]) * (
            Mi[ia[r_], ib[c_]] * Mi[ib[r_], ia[c_]] + Mi[ia[r_], ia[c_]] * Mi[ib[r_], ib[c_]]
        )
        H = jnp.dot(W.T * d2, W, precision=HIGHEST)
        H = H.at[:m, :m].add(mu * hld).at[m, m].add(mu / (tau * tau))
        sc = lax.rsqrt(jnp.maximum(jnp.diagonal(H), jnp.finfo(y.dtype).tiny))
        R = jnp.linalg.cholesky(H * sc[:, None] * sc[None, :])
        dy = -sc * jax.scipy.linalg.cho_solve((R, True), sc * grad)
        slope = jnp.dot(grad, dy)
        return dy, slope, jnp.sqrt(jnp.maximum(-slope, 0.0) / mu)

    def value(y):
        return jnp.dot(cost, y) + jnp.sum(jnp.maximum(0.0, 1.0 - jnp.dot(W, y, precision=HIGHEST)))

    def cond(c):
        i, _, mu, dec, _, _ = c
        return (i < _SUBSPACE_STEPS) & ((mu > mu_min) | (dec >= 0.25))

    def body(c):
        i, y, mu, _, best_y, best = c
        dy, slope, dec = newton(y, mu)
        ok = jnp.all(jnp.isfinite(dy)) & (slope < 0)
        f0 = barrier(y, mu)

        def shorten(b):
            j, a, _ = b
            return j + 1, 0.5 * a, barrier(y + 0.5 * a * dy, mu) <= f0 + 0.125 * a * slope

        one = jnp.ones((), y.dtype)
        _, a, fine = lax.while_loop(
            lambda b: (b[0] < 40) & ~b[2], shorten, (0, one, barrier(y + dy, mu) <= f0 + 0.25 * slope)
        )
        y_new = jnp.where(ok & fine, y + a * dy, y)
        # a failed step still lowers mu (its decrement reads as 0), so the loop always ends
        dec = jnp.where(ok & fine, dec, 0.0)
        mu_new = jnp.where(dec < 0.25, jnp.maximum(_SUBSPACE_MU_DECAY * mu, mu_min), mu)
        v = value(y_new)
        better = v < best
        return i + 1, y_new, mu_new, dec, jnp.where(better, y_new, best_y), jnp.where(better, v, best)

    inf = jnp.asarray(jnp.inf, y0.dtype)
    init = (jnp.int32(0), y0, jnp.asarray(mu0, y0.dtype), inf, y0, value(y0))
    return lax.while_loop(cond, body, init)[4], smat


def dual_bound_from_factor(C2, B):
    r"""A rounding-safe upper bound on ``tr(Lambda C2) + sum_j max(0, 1 - Lambda_jj)`` for ``Lambda = B B^T``.

    ``Lambda = B B^T`` (exact, not formed) is positive semidefinite whatever
    ``B`` is, so with ``eta_j = max(0, 1 - Lambda_jj)`` it is dual feasible and
    the value bounds the SDP optimum (weak duality). Rounding is accounted for
    explicitly (``u = eps``, twice the standard constants as margin):

    * ``T = sum_j b_j^T C2 b_j`` is computed as a length-``p`` dot product per
      entry of ``C2 B``, a sum of ``p`` terms per column and of ``p`` column
      sums, so ``|fl(T) - T| <= gamma_{3p+2} sum_j |b_j|^T |C2| |b_j|``
      ``<= gamma_{3p+2} rho(|C2|) ||B||_F^2`` with ``rho(|C2|)`` at most the
      largest absolute row sum of ``C2``; the bound adds ``2 (3p + 4) eps
      (rowsum ||B||_F^2 + |T|)``;
    * ``Lambda_jj = sum_k B_jk^2`` (``p`` nonnegative terms) is at least
      ``fl(Lambda_jj) (1 - 2 (p + 2) eps)``, which the hinge uses;
    * the final sum of the three terms is inflated by ``2 (p + 2) eps`` of its magnitude.
    """
    p = B.shape[0]
    eps = jnp.finfo(B.dtype).eps
    T = jnp.sum(jnp.sum(B * jnp.matmul(C2, B, precision=HIGHEST), axis=0))
    frob = jnp.sum(jnp.sum(B * B, axis=0))
    rowsum = jnp.max(jnp.sum(jnp.abs(C2), axis=1))
    err = 2.0 * (3 * p + 4) * eps * (rowsum * frob + jnp.abs(T))
    d_lo = jnp.sum(B * B, axis=1) * (1.0 - 2.0 * (p + 2) * eps)
    hinge = jnp.sum(jnp.maximum(0.0, 1.0 - d_lo))
    total = T + err + hinge
    return total + 2.0 * (p + 2) * eps * (jnp.abs(T) + err + hinge)


def subspace_factor(C, s, lam, dual0, target):
    r"""A dual bound for a degenerate optimum: ``Lambda = V M V^T + tau lam V_t E_t^{-1} V_t^T``.

    At a degenerate optimum ``A = 2C - diag(s)`` has a few eigenvalues near
    zero and the barrier dual ``t lam A^{-1}`` (:func:`gap_from_inverse_diag`)
    is a poor certificate unless ``s`` is exactly centred: ``diag(lam A^{-1})``
    then misses 1 by ``~1e-3`` on the free coordinates and a single scalar
    ``t`` cannot fix that (AR(1), ``rho = 0.99``, ``p = 200``: 1.1% against a
    true gap below 1e-7). Here, with ``A = V E V^T`` (``eigh``), the ``k`` =
    ``min(p, SUBSPACE_DIM)`` eigenvectors ``V`` of the smallest eigenvalues
    carry a free ``k x k`` block ``M >= 0`` and the others the barrier dual
    scaled by ``tau >= 0``, so ``M = lam E_k^{-1}``, ``tau = 1`` is the barrier
    dual itself. The dual restricted to this family,

    .. math:: \min_{M \succeq 0,\ \tau \ge 0}\ \mathrm{tr}(M\, V^T 2C V) + \tau g
              + \sum_j \max\bigl(0,\ 1 - (V M V^T)_{jj} - \tau a_j\bigr)

    (``a = diag`` and ``g = 2 tr(. C)`` of the tail term at ``tau = 1``), is a
    ``k(k+1)/2 + 1``-variable problem, solved by a small barrier method
    (:func:`_subspace_ipm`) from that start with ``mu`` from
    ``gap0 / (2p + n)`` (``gap0 = min(dual0, p) - 1^T s``) down to
    ``0.01 target / (2p + n)``. Its value is then **re-evaluated** for
    ``Lambda = B B^T`` with ``B = [V U W^{1/2}, V_t (tau lam / E_t)^{1/2}]``
    (``M = U W U^T``, negative rounding eigenvalues of ``M`` clipped), exactly
    positive semidefinite by construction, by the rounding-safe
    :func:`dual_bound_from_factor` (:func:`subspace_dual`): that value bounds
    ``OPT`` from above for any ``s`` and ``lam``, whatever ``eigh`` and the
    barrier method returned; their accuracy only decides how tight it is.
    Returns ``B`` (``p x p``). Cost: one ``eigh`` (``~9 p^3``), one product
    ``C B`` and ``O(p k^4)`` per barrier step.
    """
    p = s.shape[-1]
    k = min(p, SUBSPACE_DIM)
    dtype = s.dtype
    C2 = 2.0 * C
    A = C2 - jnp.diag(s)
    ev, V = jnp.linalg.eigh(0.5 * (A + A.T))
    eps = jnp.finfo(dtype).eps
    ev = jnp.maximum(ev, eps * jnp.max(jnp.abs(ev)))
    Vk, Vt, lam_t = V[:, :k], V[:, k:], lam / ev[k:]
    ia, ib = jnp.triu_indices(k)
    mult = jnp.where(ia == ib, 1.0, 2.0).astype(dtype)
    G = jnp.matmul(Vk.T, jnp.matmul(C2, Vk, precision=HIGHEST), precision=HIGHEST)
    G = 0.5 * (G + G.T)
    a = jnp.dot(Vt * Vt, lam_t, precision=HIGHEST)
    # tail cost 2 tr(lam V_t E_t^-1 V_t^T C) = lam (p - k) + s . a (no tail: tau only pays, it goes to 0)
    g = jnp.where(p > k, lam * (p - k) + jnp.dot(s, a), 1.0)
    W = jnp.concatenate([mult * Vk[:, ia] * Vk[:, ib], a[:, None]], axis=1)
    cost = jnp.concatenate([mult * G[ia, ib], g[None]])
    y0 = jnp.concatenate([jnp.where(ia == ib, lam / ev[ia], 0.0), jnp.ones(1, dtype)])
    n = y0.shape[0]
    total = jnp.sum(s)
    gap0 = jnp.where(jnp.isfinite(dual0), jnp.minimum(dual0, p), p) - total
    mu_min = 0.01 * target / (2 * p + n)
    mu0 = jnp.maximum(gap0 / (2 * p + n), mu_min)
    y, smat = _subspace_ipm(W, cost, y0, k, mu0, mu_min)
    w, U = jnp.linalg.eigh(smat(y))
    Bk = jnp.matmul(Vk, U, precision=HIGHEST) * jnp.sqrt(jnp.maximum(w, 0.0))
    Bt = Vt * jnp.sqrt(jnp.maximum(y[-1], 0.0) * lam_t)
    return jnp.concatenate([Bk, Bt], axis=1)


def subspace_dual(C, s, lam, dual0, target):
    """The subspace certificate's bound on ``OPT`` (see :func:`subspace_factor`; ``inf`` if not finite)."""
    dual = dual_bound_from_factor(2.0 * C, subspace_factor(C, s, lam, dual0, target))
    return jnp.where(jnp.isfinite(dual), dual, jnp.inf)
