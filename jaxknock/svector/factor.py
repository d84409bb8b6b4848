r"""Knockoff SDP for a factor model ``Sigma = D + U U^T`` (FANOK thesis Algorithm 5).

Barrier coordinate ascent with ``O(p k^2)`` work per sweep and ``O(p k)``
memory, its iterate Newton-centred now and then (:mod:`~jaxknock.svector.factor_centre`).
Three layers: :func:`sdp_factor_init` / :func:`sdp_factor_step` (public),
:func:`factor_init` / :func:`factor_step` / :func:`factor_terminate` (on the
unit-diagonal model), driven by
:func:`jaxknock._iterate.iterative_solve` inside :func:`sdp_factor`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _checks
from jaxknock._deprecation import renamed_kwargs
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import FactorModel
from jaxknock.svector import _common, factor_centre, factor_newton
from jaxknock.svector._common import HIGHEST
from jaxknock.svector.certificate import gap_from_inverse_diag

__all__ = ["FactorSDPState", "sdp_factor", "sdp_factor_init", "sdp_factor_step"]

_FACTOR_BLOCK = 256
_FACTOR_METHODS = ("newton", "coordinate")
# lam <- decay * lam after a centred step / sweep, per method
_DEFAULT_DECAY = {"newton": 0.05, "coordinate": 0.6}
# the coordinate method replaces its iterate by a Newton-centred copy every this many sweeps
_RECENTRE_SWEEPS = 4


class FactorSDPState(NamedTuple):
    """State of :func:`sdp_factor` (unit-diagonal model): ``s``, ``N = M^{-1}`` with
    ``M = I + 2 U^T (2D - diag s)^{-1} U``, barrier ``lam``, sweep counter and
    the last certified ``gap`` / ``dual``."""

    s: jax.Array
    N: jax.Array
    lam: jax.Array
    sweep: jax.Array
    gap: jax.Array
    dual: jax.Array


def _factor_sweep(state: FactorSDPState, d, U):
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
    cap = _box_cap(d, U)
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
            cent = jnp.maximum(cent, _common.off_centre(s_old, s_new, sigma, lam, cblk[i]))
            return s_blk.at[i].set(s_new), N, cent

        s_blk, N, cent = lax.fori_loop(0, b, coord, (sb[kb], N, cent))
        return sb.at[kb].set(s_blk), N, cent

    sb, N, cent = lax.fori_loop(0, nblocks, block, (sb, state.N, jnp.zeros((), U.dtype)))
    s = sb.reshape(-1)[:p]
    # refresh the k x k inverse once per sweep (O(p k^2)) to stop drift
    N = _common.factor_capacitance_inverse(d, U, s)
    h = _common.factor_inverse_diag(d, U, s, N)
    dual, gap = gap_from_inverse_diag(s, h, lam)
    return FactorSDPState(s, N, lam, state.sweep + 1, gap, dual), cent


def _box_cap(d, U):
    """``min(1, 2 diag Sigma)`` of the unit-diagonal (possibly ``m``-knockoff scaled) model: the bound on ``s``."""
    return jnp.minimum(1.0, 2.0 * (d + jnp.sum(U**2, axis=1)))


def factor_init(d, U, lam0=None) -> FactorSDPState:
    """Initial state at ``s = 0`` for the unit-diagonal model ``(d, U)``.

    ``lam0`` (a scalar, possibly traced) or, when it is ``None`` or NaN,
    ``min(0.5, max_j 1 / (2 Sigma)^{-1}_jj)``.
    """
    p = U.shape[0]
    s0 = jnp.zeros(p, U.dtype)
    inf = jnp.asarray(jnp.inf, U.dtype)
    N0 = _common.factor_capacitance_inverse(d, U, s0)
    # the largest lam at which a coordinate moves off s = 0 on the first sweep:
    # max_j sigma_j(0) = max_j 1 / (2 Sigma)^{-1}_jj; sweeps above it change nothing
    auto = jnp.minimum(0.5, jnp.max(1.0 / _common.factor_inverse_diag(d, U, s0, N0)))
    # lam0 may be traced; NaN stands for "automatic" (sdp_factor's lam0=None)
    lam_start = auto if lam0 is None else jnp.where(jnp.isnan(lam0), auto, jnp.asarray(lam0, U.dtype))
    return FactorSDPState(s0, N0, lam_start, jnp.int32(0), inf, inf)


def factor_step(st: FactorSDPState, d, U, tol, decay, centrality=1.0) -> FactorSDPState:
    """One sweep of Algorithm 5 on the unit-diagonal model, then the ``lam`` update.

    ``lam <- decay * lam`` unless the sweep found the iterate off the central
    path (``|sigma_j / lam - 1| > centrality`` for some coordinate) or
    ``lam * p`` is already below ``tol * 1^T s / 20``. Newton centring
    (:func:`~jaxknock.svector.factor_centre.newton_centre`) every
    ``_RECENTRE_SWEEPS``-th sweep and after a sweep at the held ``lam`` that
    did not halve the certified gap.
    """
    p = U.shape[0]
    prev_gap = st.gap
    st, cent = _factor_sweep(st, d, U)
    # once lam * p is below the target gap, keep lam and sweep on; when a sweep there
    # no longer halves the certified gap, Newton-centre the iterate at that lam
    # (sweeps alone crawl when A is nearly singular, see factor_centre)
    floor = st.lam * p <= 0.05 * tol * jnp.maximum(jnp.sum(st.s), 1e-12)
    stalled = floor & (st.gap > 0.5 * prev_gap)
    # and, with a few Newton steps, every few sweeps on the way down, so that the ascent
    # does not fall behind the central path
    periodic = st.sweep % _RECENTRE_SWEEPS == 0
    st = lax.cond(
        stalled | periodic,
        lambda: _centred(st, d, U, stalled),
        lambda: st,
    )
    hold = floor | (cent > centrality)
    return st._replace(lam=jnp.where(hold, st.lam, st.lam * decay))


def _centred(st: FactorSDPState, d, U, stalled) -> FactorSDPState:
    """``st`` with ``s`` replaced by its Newton-centred copy at ``st.lam``, ``N`` and the certificate updated.

    ``stalled`` (the sweeps stalled at the held ``lam``): up to 40 Newton steps without the weak-step stop;
    otherwise (the periodic centring) up to 8 with it.
    """
    weak = jnp.where(stalled, 0.0, factor_centre.WEAK_STEP)
    s = factor_centre.newton_centre(d, U, st.s, st.lam, _box_cap(d, U), max_steps=jnp.where(stalled, 40, 8), weak=weak)
    N = _common.factor_capacitance_inverse(d, U, s)
    dual, gap = gap_from_inverse_diag(s, _common.factor_inverse_diag(d, U, s, N), st.lam)
    # kept whenever its certificate is finite, even when that certificate is looser than the sweep's: its
    # barrier objective is no lower, and keeping only tighter certificates left runs stuck short of OPT
    ok = jnp.isfinite(gap)
    new = st._replace(s=s, N=N, gap=gap, dual=dual)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, st)


def factor_terminate(st: FactorSDPState, tol):
    """``(done, code)``: the certified relative gap is at most ``tol`` (``successful``)."""
    rel = st.gap / jnp.maximum(jnp.sum(st.s), 1e-12)
    return rel <= tol, jnp.int32(RESULTS.successful)


def _factor_finite(st: FactorSDPState):
    return jnp.all(jnp.isfinite(st.s)) & jnp.isfinite(st.lam)


@renamed_kwargs(max_sweeps="max_steps")
def sdp_factor(
    model: FactorModel,
    *,
    tol: float = 1e-5,
    max_steps: int = 500,
    lam0: float | None = None,
    decay: float | None = None,
    num_knockoffs: int = 1,
    method: str = "newton",
    throw: bool = False,
) -> Solution:
    r"""Knockoff SDP for a factor model ``Sigma = D + U U^T``: barrier Newton-CG (default) or FANOK Algorithm 5.

    Both methods solve, on the unit-diagonal model, the barrier problem

    .. math:: \max_{0 \le s \le 1}\ 1^T s + \lambda \log\det(2\Sigma - \mathrm{diag}(s))

    for decreasing ``lam`` with ``O(p k)`` memory and no ``p x p`` array, and both
    stop on the same certified duality gap (``diag(A^{-1})`` by Woodbury,
    :func:`~jaxknock.svector.certificate.gap_from_inverse_diag`).

    ``method="newton"`` (default, :mod:`~jaxknock.svector.factor_newton`):
    primal-dual Newton path following, the box handled by log barriers and
    multipliers as in :func:`~jaxknock.sdp`. The Newton system
    ``(lam A^{-1} o A^{-1} + diag(z0/s + z1/(1-s))) ds = grad`` is solved
    inexactly by Jacobi-preconditioned conjugate gradients (relative residual
    1e-3: the direction only steers the path); by
    Woodbury ``A^{-1} = diag(1/e) - W Q W^T`` (``e = 2d - s``, ``W`` ``p x k``),
    so one product with ``A^{-1} o A^{-1}`` is ``4 p k^2`` flops of matrix
    products. ``lam`` starts at ``lam0`` (default
    ``5 / p``) and is multiplied by ``decay`` (default 0.05) once the Newton
    decrement is below 0.3. The sequential depth (``stats["num_loop_trips"]``:
    Newton steps + CG iterations + step shortenings, about 90-120 on the
    thesis problems) does not grow with ``p``: every trip is a handful of
    ``O(p k^2)`` matrix products, which is what a GPU wants; on this 2-core CPU
    it is also 2.6-4x faster than the coordinate ascent at p = 10^4 and
    5 * 10^4, k = 50 (``benchmarks/bench_factor.py``). The run ends
    ``stagnated`` when the certificate stops improving (2 of 300 small random
    models, p 4-11, at relative gaps 1.0e-5 and 1.4e-4 with iterates optimal
    to ~1e-6; a Newton-centring polish certified both but added 0.7-1.1 s to
    every first call, so it is not done).

    ``method="coordinate"`` (FANOK Algorithm 5): the same barrier problem and
    coordinate update as :func:`~jaxknock.sdp`, but
    ``A = 2 Sigma - diag(s) = Dt + 2 U U^T`` with ``Dt = 2D - diag(s)``, so
    (Lemma 5 + Woodbury) every coordinate needs only
    ``a_j = u_j^T M^{-1} u_j`` with the ``k x k`` capacitance
    ``M = I + 2 U^T Dt^{-1} U``. ``M^{-1}`` is kept current by a rank-one
    update per coordinate (``O(k^2)``) and recomputed from scratch once per
    sweep (``O(p k^2)``) to prevent drift. Total: ``O(p k^2)`` per sweep,
    ``O(p k)`` memory, no ``p x p`` array. Coordinates are visited in blocks
    of 256 so that the inner loop only carries the block (a loop carrying the
    whole ``s`` would copy it at each coordinate, ``O(p^2)`` per sweep).

    Schedule (coordinate): ``lam`` starts at ``lam0`` or, by default, at
    ``min(0.5, max_j 1 / (2 Sigma)^{-1}_jj)``, the largest value at which a
    coordinate leaves ``s = 0`` (sweeps above it change nothing), and is
    multiplied by ``decay`` (default 0.6) after each sweep whose iterate is
    within a factor 2 of the central path (``|sigma_j / lam - 1| <= 1``);
    otherwise the sweep is repeated at the same ``lam``. Once ``lam * p`` is
    below ``tol * 1^T s / 20``, ``lam`` is held. Cyclic coordinate ascent on
    the barrier crawls when ``A`` is nearly singular along a direction spread
    over many coordinates (each coordinate can then move only about ``lam``
    per sweep) and falls behind the central path, so the iterate is replaced
    by a Newton-centred copy (:mod:`~jaxknock.svector.factor_centre`:
    feasible, barrier objective no lower, ``O(p k^2)`` per CG product) every
    4th sweep (at most 8 Newton steps, ended early when a step gains less than
    a tenth of what a damped Newton step promises) and after every sweep at
    the held ``lam`` that fails to halve the certified gap (at most 40
    steps). Without it 137 of 300 small random models (p 4-11, k 1-3) ended
    ``max_steps_reached`` at relative gaps of 0.4-35%; with it none of those,
    and 2 of 600 harder ones (p up to 40, k up to 4, some ``d_j = 10^-3``,
    against 184 before). The centrings cost about 50% more time on the
    thesis model at p = 10^4, k = 50 (0.64 -> 0.97 s), 27% at 5 * 10^4. The
    run stops when the certified relative gap is at most ``tol``; the number
    of sweeps barely depends on ``p`` (measured counts:
    ``benchmarks/measured/NOTES.md``).

    The model is first rescaled to unit diagonal
    (``d/diag``, ``U/sqrt(diag)``) and ``s`` mapped back. The certified gap uses
    ``diag(A^{-1})`` from Woodbury; feasibility ``A > 0`` is checked exactly by
    inertia (``min_eig`` is reported as NaN: not cheap for a factor model,
    ``stats['feasible']`` holds the check).

    Caveat (thesis section 4.2): ``Dt_j`` may pass through 0 when ``s_j``
    crosses ``2 d_j``; the update formula avoids dividing by it, but a
    ``Dt_j`` within rounding of 0 makes ``M`` ill-conditioned. Such runs end
    with ``RESULTS.nonfinite`` rather than a silent wrong answer.

    Every valid model (``d > 0``, any ``p > k >= 0``, ``d`` down to ~1e-9 of
    ``diag(Sigma)``) gives a feasible ``s``; coordinates may pass ``s_j > 2 d_j``
    (feasibility is the exact inertia test of
    :func:`~jaxknock.svector._common.factor_is_pd`). On small, nearly
    singular models the coordinate ascent can crawl (p = 2 or 3 with
    ``d ~ 1e-3``): the run then ends ``max_steps_reached`` with its valid
    certified gap.

    Under jit (value checks skipped): NaN/Inf in ``d`` or ``U`` gives
    ``nonfinite``, some ``d_j <= 0`` gives ``infeasible`` (never
    ``successful``), and then ``s`` is all NaN; eagerly they raise ``ValueError``.

    Args:
        model: :class:`~jaxknock.FactorModel` (float64), or one with a leading
            batch axis on ``d`` and ``U`` (solved with ``vmap``, in lock step: the
            coordinate method's Newton centring then runs at every sweep of the
            batch, 0.18 -> 0.44-0.50 s for 4 models at p = 2000, k = 20).
        tol, max_steps, throw: as in :func:`~jaxknock.sdp` (``max_sweeps`` is a
            deprecated alias of ``max_steps``).
        lam0: initial barrier parameter (default: ``5 / p`` for ``"newton"``,
            automatic for ``"coordinate"``, see above).
        decay: factor applied to ``lam`` after each centred step / sweep
            (default 0.05 for ``"newton"``, 0.6 for ``"coordinate"``).
        num_knockoffs: ``m >= 1`` simultaneous knockoffs: ``diag(s) <= c C``
            with ``c = (m+1)/m`` and ``0 <= s <= 1`` (``m`` is traced).
        method: ``"newton"`` (default) or ``"coordinate"`` (static). The
            Newton method is the faster one on this 2-core CPU (p = 10^4 and
            5 * 10^4, k = 50: ``benchmarks/bench_factor.py``) and the one whose
            sequential depth suits a GPU; ``"coordinate"`` is the one driven
            by :func:`sdp_factor_init` / :func:`sdp_factor_step`.

    Multiple knockoffs (exact reduction): after the rescaling to unit diagonal
    the model is scaled once more, ``d' = (c/2) d``, ``U' = sqrt(c/2) U``, so
    that ``2 Sigma' - diag(s) = c C - diag(s)``; either method, its cap
    ``min(1, 2 diag Sigma') = min(1, c) = 1`` and its certificate (the dual
    ``c tr(Lambda C) + 1^T eta`` at ``Lambda = lam A^{-1}`` is
    ``lam (p + sum_j s_j (A^{-1})_jj)`` for any ``c``) are then those of the
    ``m``-knockoff SDP, unchanged. (Scaling the model *before* the rescaling
    to unit diagonal would be undone by it, so the scale sits right after it.)

    Returns:
        :class:`~jaxknock.Solution` with ``value = s`` and ``stats``
        ``num_steps`` (Newton steps or sweeps), ``num_loop_trips`` (sequential
        loop iterations: Newton steps + CG iterations + step shortenings, or
        sweeps times coordinate updates), ``max_steps, objective, dual, gap,
        lam, min_eig (NaN), feasible``; ``state`` is the final
        :class:`~jaxknock.svector.factor_newton.FactorNewtonState` or
        :class:`FactorSDPState`.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> model = FactorModel(jnp.full(1000, 0.5), jnp.full((1000, 1), 0.5 ** 0.5))
        >>> sol = sdp_factor(model)   # equicorrelated rho=0.5 -> s = 1
        >>> bool(jnp.allclose(sol.value, 1.0, atol=1e-4)), int(sol.result)
        (True, 0)
        >>> s = sdp_factor(model, method="coordinate").value
        >>> bool(jnp.allclose(s, 1.0, atol=1e-4))
        True
    """
    if method not in _FACTOR_METHODS:
        raise ValueError(f"method must be one of {_FACTOR_METHODS}, got {method!r}")
    decay = _DEFAULT_DECAY[method] if decay is None else decay
    tol, max_steps, decay, lam0 = _common.check_settings(tol, max_steps, decay, lam0)
    m = _checks.check_num_knockoffs(num_knockoffs)
    model = _common.validate_model(model)
    # numeric settings are traced (a new tol / lam0 / decay / m does not recompile)
    lam0 = jnp.nan if lam0 is None else lam0
    fn = functools.partial(_sdp_factor_jit, method=method)
    if model.U.ndim == 3:
        # lock-step vmap (a loop of single solves was measured slower on CPU: p = 2000, k = 20, 4 models,
        # coordinate 0.43 s either way, Newton 0.125 s against 0.108 s); its conditionals run for every
        # member, so the coordinate method's Newton centring runs at every sweep of a batch
        fn = jax.vmap(fn, in_axes=(0, 0, None, None, None, None, None))
    sol = fn(model.d, model.U, tol, max_steps, lam0, decay, (m + 1.0) / m)
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)


@functools.partial(jax.jit, static_argnames="method")
def _sdp_factor_jit(d, U, tol, max_steps, lam0, decay, c=2.0, method="newton"):
    dc, Uc, diag = _common.unit_diagonal(d, U)
    # m knockoffs: 2 Sigma' - diag(s) = c C - diag(s) (see sdp_factor); the identity for c = 2
    dc, Uc = (0.5 * c) * dc, jnp.sqrt(0.5 * c) * Uc
    p = U.shape[0]
    if method == "newton":
        cap = _box_cap(dc, Uc)
        lam_start = jnp.where(jnp.isnan(lam0), 5.0 / p, jnp.asarray(lam0, U.dtype))
        it = factor_newton.solve_path(dc, Uc, lam_start, cap, tol, decay, max_steps)
        state = it.state
        s, dual = state.s, state.dual
        raw_gap = dual - jnp.sum(s)
        trips = state.trips
    else:
        it = iterative_solve(
            factor_init(dc, Uc, lam0),
            lambda st: factor_step(st, dc, Uc, tol, decay),
            lambda st: factor_terminate(st, tol),
            max_steps=max_steps,
            finite=_factor_finite,
        )
        state = it.state
        s = state.s
        dual, raw_gap = state.dual, state.gap
        b = min(_FACTOR_BLOCK, p)
        # per sweep: one trip per coordinate (padded to whole blocks) and per block
        trips = it.num_steps * (1 + (-(-p // b)) * (b + 1))
    feasible = _common.factor_is_pd(dc, Uc, s)
    finite = jnp.all(jnp.isfinite(s)) & jnp.isfinite(raw_gap)
    gap = jnp.where(feasible, raw_gap, jnp.inf)
    converged = gap / jnp.maximum(jnp.sum(s), 1e-12) <= tol
    result = jnp.where(
        ~finite,
        RESULTS.nonfinite,
        jnp.where(~feasible, RESULTS.infeasible, jnp.where(converged, RESULTS.successful, it.result)),
    ).astype(jnp.int32)
    value, result = _common.reject_invalid_model(d, U, s * diag, result)
    stats = {
        "num_steps": it.num_steps,
        "num_loop_trips": jnp.asarray(trips, jnp.int32),
        "max_steps": max_steps,
        "objective": jnp.sum(s),
        "dual": jnp.where(feasible, dual, jnp.inf),
        "gap": gap,
        "lam": state.lam,
        "min_eig": jnp.full((), jnp.nan, U.dtype),
        "feasible": feasible,
    }
    return Solution(value, result, stats, state)


# --------------------------------------------------------------------------
# public init / step
# --------------------------------------------------------------------------


def sdp_factor_init(model: FactorModel, *, lam0: float | None = None, num_knockoffs: int = 1) -> FactorSDPState:
    """Initial :class:`FactorSDPState` of ``sdp_factor(method="coordinate")`` (``s = 0``, unit-diagonal model).

    Drive it with :func:`sdp_factor_step`; ``state.s * diag(Sigma)`` maps the
    iterate back to the covariance scale. ``num_knockoffs = m``: the
    ``m``-knockoff problem of :func:`sdp_factor` (``method="coordinate"``);
    pass the same ``m`` to :func:`sdp_factor_step`.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> model = FactorModel(jnp.full(50, 0.5), jnp.full((50, 1), 0.5 ** 0.5))
        >>> st = sdp_factor_init(model)
        >>> for _ in range(2):
        ...     st = sdp_factor_step(st, model)
        >>> int(st.sweep)
        2
    """
    model = _common.validate_model(model)
    if model.U.ndim != 2:
        raise ValueError("sdp_factor_init takes one model (d of shape (p,), U of shape (p, k))")
    scale = _common.multi_scale(_checks.check_num_knockoffs(num_knockoffs))
    dc, Uc = _scaled_unit_diagonal(model.d, model.U, scale)
    return factor_init(dc, Uc, None if lam0 is None else float(lam0))


def _scaled_unit_diagonal(d, U, scale):
    # m knockoffs: the one-knockoff problem on scale * C, scale = (m+1)/(2m) (as in _sdp_factor_jit)
    dc, Uc, _ = _common.unit_diagonal(d, U)
    return scale * dc, jnp.sqrt(scale) * Uc


@jax.jit
def _sdp_factor_step(state, d, U, tol, decay, scale):
    dc, Uc = _scaled_unit_diagonal(d, U, scale)
    return factor_step(state, dc, Uc, tol, decay)


def sdp_factor_step(
    state: FactorSDPState, model: FactorModel, *, tol: float = 1e-5, decay: float = 0.6, num_knockoffs: int = 1
) -> FactorSDPState:
    r"""One sweep of ``sdp_factor(method="coordinate")`` and its ``lam`` update: exactly the step its loop drives.

    On the unit-diagonal model ``C = D + U U^T`` the sweep ascends
    ``1^T s + lam log det(2C - diag(s))`` over ``0 <= s <= min(1, 2 diag C)``
    coordinate by coordinate, as the dense method of :func:`sdp_step`, but in
    ``O(k^2)`` per coordinate: with ``dt_j = 2 d_j - s_j`` and
    ``N = (I_k + 2 U^T (2D - diag s)^{-1} U)^{-1}``, the Schur complement is
    ``sigma_j = dt_j^2 / (dt_j - 2 u_j^T N u_j)`` (Woodbury), the update
    ``s_j <- clip(s_j + sigma_j - lam, 0, c_j)``, and ``N`` follows by
    Sherman-Morrison. Then the certificate updates ``gap`` / ``dual``, the
    iterate is Newton-centred every 4th sweep and when sweeps stall at the
    held ``lam`` (see :func:`sdp_factor`), and ``lam <- decay * lam`` if the
    sweep found the iterate near the central path.

    Args:
        state: :class:`FactorSDPState` from :func:`sdp_factor_init` or a previous step.
        model: the :class:`~jaxknock.FactorModel` the state was started on (float64).
        tol: relative gap target of the solve.
        decay: factor of the barrier decrease.
        num_knockoffs: as in :func:`sdp_factor_init` (traced: a new ``m`` does not recompile).

    Returns:
        The next :class:`FactorSDPState` (``sweep`` one larger). The result code
        of a state is ``factor_terminate(state, tol)``; ``state.s * diag(Sigma)``
        is the iterate on the covariance scale.

    Example:
        >>> import numpy as np
        >>> jax.config.update("jax_enable_x64", True)
        >>> model = FactorModel(jnp.full(50, 0.2), jnp.full((50, 1), 0.8 ** 0.5))  # rho = 0.8: s = 0.4
        >>> st = sdp_factor_init(model)
        >>> for _ in range(100):
        ...     st = sdp_factor_step(st, model)
        ...     done, code = factor_terminate(st, 1e-5)
        ...     if done:
        ...         break
        >>> RESULTS(int(code)).name, np.round(np.asarray(st.s[:3]), 3).tolist()
        ('successful', [0.4, 0.4, 0.4])
    """
    scale = _common.multi_scale(_checks.check_num_knockoffs(num_knockoffs))
    tol, decay = _checks.traced_float(tol), _checks.traced_float(decay)  # one program whatever their scalar type
    return _sdp_factor_step(state, jnp.asarray(model.d), jnp.asarray(model.U), tol, decay, scale)
