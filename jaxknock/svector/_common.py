"""Pieces shared by the S-vector solvers: settings and factor-model checks, small linear algebra.

Private to :mod:`jaxknock.svector`; the names carry no underscore because the
solver modules import them (``from jaxknock.svector import _common``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from jaxknock import _backend, _checks, _sigma_checks
from jaxknock._solution import RESULTS
from jaxknock.covariance import FactorModel, to_correlation

HIGHEST = lax.Precision.HIGHEST


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


def validate_model(model) -> FactorModel:
    """Check a :class:`~jaxknock.FactorModel` ``(d, U)`` (or a batch) for the factor-model solvers."""
    if not isinstance(model, FactorModel):
        raise TypeError(f"model must be a jaxknock.FactorModel(d, U), got {type(model).__name__}")
    given_d, given_U = getattr(model.d, "dtype", None), getattr(model.U, "dtype", None)
    d = _checks.as_float_array(model.d, "model.d")
    U = _checks.as_float_array(model.U, "model.U")
    if U.ndim not in (2, 3) or d.ndim != U.ndim - 1 or d.shape[-1] != U.shape[-2]:
        raise ValueError(
            f"FactorModel needs d of shape (p,) and U of shape (p, k); got d {tuple(d.shape)}, U {tuple(U.shape)}"
        )
    p, k = U.shape[-2:]
    if k >= p:
        raise ValueError(
            f"factor rank k = {k} must be smaller than p = {p}; solve the dense problem instead "
            "(sdp / mvr / maxent on model.dense())"
        )
    _checks.require_x64(U, "model.U", _sigma_checks.SDP_X64_WHY, given_U)
    _checks.require_x64(d, "model.d", _sigma_checks.SDP_X64_WHY, given_d)
    if _checks.is_concrete(d) and _checks.is_concrete(U):
        # one device-side reduction, three scalars back (not the model), also inside a caller's trace
        d_finite, U_finite, d_min = _checks.host_flags(_model_flags, d, U)
        if not d_finite:
            _checks.check_finite(d, "model.d")
        if not U_finite:
            _checks.check_finite(U, "model.U")
        if not (d_min > 0):
            raise ValueError("model.d must be strictly positive (Sigma = diag(d) + U U^T must be positive definite)")
    return FactorModel(d, U)


@jax.jit
def _model_flags(d, U):
    return jnp.all(jnp.isfinite(d)), jnp.all(jnp.isfinite(U)), jnp.min(d)


def factorises(C) -> jax.Array:
    """Whether ``C`` (``(p, p)`` or a stack) has a Cholesky factor: positive definite to rounding (traced).

    The test :func:`jaxknock._sigma_checks.validate_sigma` applies eagerly, for the
    solvers' cores under ``jit``: ``False`` for an indefinite or singular ``C``
    (no ``s > 0`` with ``diag(s) < c C`` exists) and for one holding NaN/Inf.
    Applied to the correlation matrix, so it does not depend on the units.
    """
    return jnp.all(jnp.isfinite(jnp.linalg.cholesky(C)), axis=(-2, -1))


def gated_correlation(Sigma, max_steps):
    """``(C, valid, steps)`` for a dense S solver's core under ``jit`` (traced).

    ``C`` is the correlation matrix of ``Sigma``; ``valid`` is
    :func:`factorises` of it (the eager ``validate_sigma`` cannot run under
    ``jit``); ``steps`` is ``max_steps`` where ``valid`` and 0 otherwise, so an
    indefinite (or NaN) ``Sigma`` is never iterated on. The solver ends with
    :func:`reject_invalid_sigma` (``infeasible``, NaN ``s``), as the group
    solvers do.
    """
    C = to_correlation(Sigma)
    valid = factorises(C)
    return C, valid, jnp.where(valid, max_steps, 0)


def reject_invalid_sigma(valid, Sigma, value, result):
    """``(value, result)`` of an S solve, made unmistakable where ``Sigma`` was not valid (traced).

    Under ``jit`` the eager value checks cannot run; where ``valid`` is
    ``False`` (:func:`factorises` or the solver's own positive-definiteness
    test failed) ``value`` (``s`` or ``S``) becomes all NaN and ``result``
    ``infeasible``, as the group solvers do, instead of whatever the iterations
    made of it (``nonfinite``, a finite ``s`` labelled ``infeasible`` or a
    plausible one). The input's own code (:func:`jaxknock._sigma_checks.traced_sigma_code`:
    ``nonfinite`` for NaN/Inf, ``infeasible`` for asymmetry or a non-positive
    diagonal) comes first, and such a ``Sigma`` gets a NaN ``value`` too (a
    non-symmetric one was iterated on, its lower triangle factorised: a finite,
    plausible ``s`` labelled ``infeasible``). Valid input passes through
    unchanged, bit for bit.
    """
    input_code = _sigma_checks.traced_sigma_code(Sigma)
    result = jnp.where(valid, result, RESULTS.infeasible)
    ok = valid & (input_code == RESULTS.successful)
    return _checks.poison(ok, value), _checks.combine_codes(input_code, result)


def reject_invalid_model(d, U, value, result):
    """``(value, result)`` of a factor-model S solve, made unmistakable where the model was not valid (traced).

    The factor-model twin of :func:`reject_invalid_sigma`. Under ``jit`` the eager
    checks of :func:`validate_model` cannot run; where ``Sigma = diag(d) + U U^T`` holds
    NaN/Inf (``nonfinite``) or some ``d_j <= 0`` (``infeasible``,
    :func:`jaxknock._sigma_checks.traced_factor_code`) the whole ``value`` becomes NaN and
    the input's code replaces the solver's. The solvers used to set the code only: one
    NaN in ``U`` left 29 of 30 entries of ``s`` finite (``mvr_factor``), a ``d_j < 0``
    all 30, a plausible answer beside a failure code. Valid input passes through
    unchanged, bit for bit.
    """
    input_code = _sigma_checks.traced_factor_code(d, U)
    return _checks.poison(input_code == RESULTS.successful, value), _checks.combine_codes(input_code, result)


def gate_traced_tol(sol, tol):
    """``sol``, or (a traced ``tol`` that is not finite and positive) its values all NaN and ``infeasible``.

    :func:`check_settings` refuses such a ``tol`` when it is concrete. A traced one reached the solvers:
    ``tol = inf`` certified the first iterate (``sdp`` / ``mvr`` / ``maxent`` / ``group_s_matrix`` under
    ``jit``: ``successful``, ``s`` of the first step), and ``NaN``, ``0`` or a negative ``tol`` ran to
    ``max_steps`` and returned that iterate, finite and plausible. A concrete ``tol`` leaves ``sol`` as it is.
    """
    if _checks.is_concrete(tol):
        return sol
    ok = jnp.isfinite(tol) & (tol > 0)
    value = jax.tree.map(lambda a: _checks.poison(ok, a), sol.value)
    return sol._replace(value=value, result=jnp.where(ok, sol.result, RESULTS.infeasible).astype(sol.result.dtype))


def check_settings(tol, max_steps, decay, lam0):
    """Check the barrier solvers' numeric settings (concrete values; traced ones pass unchecked).

    ``max_steps`` must be a Python integer; ``tol``, ``decay`` and ``lam0`` may
    be Python floats or concrete / traced scalars (the solvers trace them, so a
    new value never recompiles). Returns them for the solvers' programs, concrete
    ones as Python scalars (:func:`~jaxknock._checks.traced_float`: a NumPy or JAX
    scalar's type compiled the whole solver again), checked on the host.
    """
    tol, decay = _checks.traced_float(tol), _checks.traced_float(decay)
    lam0 = None if lam0 is None else _checks.traced_float(lam0)
    max_steps = _checks.int_setting(max_steps)
    # finite too: tol = inf "certified" any iterate (sdp, mvr: successful after one step, s ~ 1e-4)
    if _checks.is_concrete(tol) and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be positive and finite, got {tol}")
    _checks.refuse_traced(max_steps, "max_steps", "a concrete Python or NumPy integer")
    if not (_checks.is_int(max_steps) and max_steps >= 1):
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if _checks.is_concrete(decay) and not (0 < decay < 1):
        raise ValueError(f"decay must lie in (0, 1), got {decay}")
    if lam0 is not None and _checks.is_concrete(lam0) and not (np.isfinite(lam0) and lam0 > 0):
        raise ValueError(f"lam0 must be positive and finite, got {lam0}")
    return tol, max_steps, decay, lam0


def check_start(lam0, s0, p: int, block_size=None) -> None:
    """The start of the step-by-step APIs (``newton_init``, ``sdp_init``), checked as :func:`~jaxknock.sdp` does."""
    if lam0 is not None and _checks.is_concrete(lam0) and not (np.isfinite(lam0) and lam0 > 0):
        raise ValueError(f"lam0 must be positive and finite, got {lam0}")
    if s0 is not None:
        s0 = _checks.as_float_array(s0, "s0")
        if s0.shape != (p,):
            raise ValueError(f"s0 must be a vector of length p = {p}, got shape {tuple(s0.shape)}")
        _checks.check_finite(s0, "s0")
    if block_size is not None and not (
        isinstance(block_size, (int, np.integer)) and not isinstance(block_size, bool) and block_size >= 1
    ):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")


def check_start_feasible(C2, s, cap, *, strict: bool) -> None:
    r"""A given start ``s0`` of the step APIs is feasible (concrete values only; ``s`` on the correlation scale).

    Feasible: :math:`0 \le s \le` ``cap`` and ``C2 - diag(s)`` (``C2 = 2C``) positive semidefinite, or
    positive definite when ``strict`` (:func:`~jaxknock.sdp_init` factors it at the start). An infeasible
    ``s0`` gave a NaN state (``sdp_init``) or was replaced by the default start without a word
    (``newton_init``). Traced values are not checked: under ``jit`` the first stays NaN (never a plausible
    answer), the second starts from the interior point it can reach (:func:`~jaxknock.sdp` itself takes no ``s0``).
    """
    if not (_checks.is_concrete(C2) and _checks.is_concrete(s)):
        return
    C2, s, cap = (np.asarray(a, dtype=np.float64) for a in (C2, s, cap))
    slack = 64 * np.finfo(np.float64).eps * max(1.0, float(np.max(np.abs(C2))))
    if np.any(s < -slack) or np.any(s > cap + slack):
        raise ValueError(
            "s0 must satisfy 0 <= s0_j <= min(1, 2 C_jj) Sigma_jj (the box of the knockoff SDP, on Sigma's "
            f"scale); on the correlation scale it spans [{s.min():.3g}, {s.max():.3g}]"
        )
    lam_min = float(np.linalg.eigvalsh(C2 - np.diag(s))[0])
    if lam_min < (slack if strict else -slack * C2.shape[0]):
        need = "positive definite" if strict else "positive semidefinite"
        raise ValueError(
            f"s0 is infeasible: 2 Sigma - diag(s0) (scaled to a correlation) must be {need}, its smallest "
            f"eigenvalue is {lam_min:.3g}; start from a feasible s0 (e.g. the equicorrelated one) or s0=None"
        )


# --------------------------------------------------------------------------
# dense linear algebra
# --------------------------------------------------------------------------


def inverse_diag_from_cholesky(L):
    """``diag((L L^T)^{-1})`` = squared column norms of ``L^{-1}``."""
    eye = jnp.broadcast_to(jnp.eye(L.shape[-1], dtype=L.dtype), L.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.sum(Linv**2, axis=-2)


def lam_floor(dtype) -> float:
    """Smallest barrier parameter the coordinate solvers use: ``1e3 eps`` (``~2e-13`` in float64).

    At a centred iterate every free coordinate's Schur complement of
    ``2C - diag(s)`` equals ``lam``; below ~``1e3 eps`` (entries of ``2C`` are
    O(1)) that margin is rounding noise of the updated factors and an exact
    coordinate step can leave the PD cone. Problems whose optimum is that close
    to singular are certified only to ``~ lam_floor * p`` (absolute) and end
    ``stagnated`` or ``max_steps_reached``, never infeasible.
    """
    return 1e3 * float(jnp.finfo(dtype).eps)


def cholesky_if_pd(C2, s):
    """``(pd, L)``: whether ``C2 - diag(s)`` is positive definite (Cholesky succeeds), and its factor."""
    L = jnp.linalg.cholesky(C2 - jnp.diag(s))
    return jnp.all(jnp.isfinite(L)), L


def is_pd(C2, s):
    """Is ``C2 - diag(s)`` positive definite? (Cholesky succeeds.)"""
    return cholesky_if_pd(C2, s)[0]


def off_centre(s_old, s_new, sigma, lam, cap):
    """Distance of one coordinate from the central path: ``|sigma / lam - 1|``.

    ``sigma`` is the coordinate's Schur complement before its update; on the
    central path it equals ``lam`` for every coordinate strictly inside its
    bounds. Coordinates held at a bound (``s = 0`` with ``sigma < lam``, or
    ``s = cap`` with ``sigma > lam``) count as centred.
    """
    at_bound = ((s_new <= 0) & (s_old <= 0)) | ((s_new >= cap) & (s_old >= cap))
    return jnp.where(at_bound, 0.0, jnp.abs(sigma / lam - 1.0))


# --------------------------------------------------------------------------
# factor-model linear algebra (A = (2D - diag s) + 2 U U^T)
# --------------------------------------------------------------------------


def factor_capacitance_inverse(d, U, s):
    """``N = M^{-1}`` with ``M = I + 2 U^T (2D - diag s)^{-1} U`` (``k x k``)."""
    dt = 2.0 * d - s
    M = jnp.eye(U.shape[1], dtype=U.dtype) + 2.0 * jnp.matmul(U.T, U / dt[:, None], precision=HIGHEST)
    return jnp.linalg.inv(M)


def factor_inverse_diag(d, U, s, N):
    """``diag(A^{-1})`` for ``A = (2D - S) + 2 U U^T`` by Woodbury, O(p k^2)."""
    dt = 2.0 * d - s
    W = U / dt[:, None]
    return 1.0 / dt - 2.0 * jnp.sum(jnp.matmul(W, N, precision=HIGHEST) * W, axis=1)


def factor_is_pd(d, U, s) -> jax.Array:
    """Is ``(2D - diag s) + 2 U U^T`` positive definite? O(p k^2).

    Haynsworth inertia additivity on ``K = [[Dt, U], [U^T, -I/2]]`` (``Dt = 2D - diag s``,
    nonsingular): the Schur complement of ``-I/2`` is ``A = Dt + 2 U U^T`` and that
    of ``Dt`` is ``-(I + 2 U^T Dt^{-1} U) / 2 = -M / 2``, so
    ``k + #neg(A) = #neg(K) = #neg(Dt) + #pos(M)``, i.e.
    ``#neg(A) = #neg(Dt) - #neg(M)`` for nonsingular ``M``: ``A`` is positive
    definite iff ``M`` has exactly as many negative eigenvalues as ``Dt`` has
    negative entries (coordinates with ``s_j > 2 d_j`` are allowed).
    """
    dt = 2.0 * d - s
    M = jnp.eye(U.shape[1], dtype=U.dtype) + 2.0 * jnp.matmul(U.T, U / dt[:, None], precision=HIGHEST)
    return factor_is_pd_from_capacitance(dt, M)


def factor_is_pd_from_capacitance(dt, M) -> jax.Array:
    """:func:`factor_is_pd` given ``dt = 2d - s`` and the capacitance ``M = I + 2 U^T Dt^{-1} U``."""
    return factor_is_pd_from_eigvals(dt, jnp.linalg.eigvalsh((M + M.T) / 2))


def factor_is_pd_from_eigvals(dt, ev) -> jax.Array:
    """:func:`factor_is_pd` given ``dt = 2d - s`` and the eigenvalues ``ev`` of the capacitance ``M``."""
    neg = jnp.sum(dt < 0) - jnp.sum(ev < 0)
    return (neg == 0) & jnp.all(dt != 0) & jnp.all(ev != 0) & jnp.all(jnp.isfinite(ev))


def max_step(x, dx):
    """Largest ``t <= 1`` with ``x + t dx >= 0``, times the fraction to the boundary 0.99 (the Newton solvers)."""
    t = jnp.min(jnp.where(dx < 0, -x / jnp.where(dx < 0, dx, -1.0), jnp.inf))
    return jnp.minimum(1.0, 0.99 * t)


ARMIJO = 1e-4  # sufficient-decrease fraction of the MRC Newton solvers' line search
STEP_SHRINK = 0.5
MAX_SHRINKS = 40


def armijo_backtrack(trial, t0, f0, slope):
    """The MRC Newton solvers' line search: halve ``t`` from ``t0`` until the trial point is acceptable.

    ``trial(t) -> (ok, f, aux)`` evaluates the point ``s + t ds`` (``ok``: it is
    feasible; ``f``: its objective; ``aux``: what the caller keeps of it). ``t``
    is accepted when ``ok`` and ``f <= f0 + ARMIJO t slope + 100 eps |f0|`` (the
    Armijo condition up to rounding), after at most ``MAX_SHRINKS`` halvings.
    Returns ``(t, accepted, halvings, aux)``; ``accepted`` is false when no
    length passed or ``slope >= 0`` (not a descent direction), and the caller
    then keeps its point.
    """
    slack = 100.0 * jnp.finfo(jnp.result_type(f0)).eps * jnp.abs(f0)

    def accept(t, ok, f):
        return ok & (f <= f0 + ARMIJO * t * slope + slack)

    def shrink(c):
        t, n, _, _ = c
        t = t * STEP_SHRINK
        ok, f, aux = trial(t)
        return t, n + 1, accept(t, ok, f), aux

    ok0, ft0, aux0 = trial(t0)
    t, n, ok, aux = lax.while_loop(
        lambda c: (c[1] < MAX_SHRINKS) & ~c[2], shrink, (t0, jnp.int32(0), accept(t0, ok0, ft0), aux0)
    )
    return t, ok & (slope < 0), n, aux


def unit_diagonal(d, U):
    """The factor model rescaled to unit diagonal: ``(d / diag, U / sqrt(diag), diag)``, ``diag = d + rowsum(U^2)``."""
    diag = d + jnp.sum(U**2, axis=1)
    return d / diag, U / jnp.sqrt(diag)[:, None], diag


def multi_scale(m: int) -> float:
    """``(m+1)/(2m)``: ``m`` knockoffs (``diag(s) <= (m+1)/m C``) are the one-knockoff problem on this multiple of C."""
    return (m + 1.0) / (2.0 * m)


def batched_one_at_a_time(fn):
    """``fn`` of positional array arguments whose ``vmap`` solves one problem at a time on CPU.

    A ``jax.custom_batching.custom_vmap`` rule: under any ``vmap`` (a stack the
    solver is given, or a caller's own ``jax.vmap`` of a public solver) the
    batched arguments are sliced and ``fn`` runs on each slice, under ``lax.map``
    on CPU and ``vmap`` on an accelerator (:func:`jaxknock._backend.loop_over_batch`
    ``"svector_problems"``, which records why: vmap-ed Newton SDP loops hung XLA's
    CPU runtime). Unbatched arguments are shared, not broadcast. Forward
    evaluation only (the S-vector solvers are not differentiated).
    """
    wrapped = custom_vmap(fn)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        del axis_size
        flat, tree = jax.tree.flatten(args)
        flags = jax.tree.leaves(in_batched)

        def one(sliced):
            rest = iter(sliced)
            return fn(*jax.tree.unflatten(tree, [next(rest) if f else a for a, f in zip(flat, flags)]))

        batch = [a for a, f in zip(flat, flags) if f]
        out = lax.map(one, batch) if _backend.loop_over_batch("svector_problems") else jax.vmap(one)(batch)
        return out, jax.tree.map(lambda _: True, out)

    return wrapped


def solve_stack(fn, Sigma, *settings):
    """``fn(Sigma, *settings)``, or for a stack ``(B, p, p)`` the stacked solutions of every matrix.

    ``settings`` are shared by the whole stack; every ``vmap`` of ``fn`` (this
    stack's, a caller's) goes through :func:`batched_one_at_a_time`.
    """
    solve = batched_one_at_a_time(fn)
    if Sigma.ndim == 3:
        return jax.vmap(solve, in_axes=(0,) + (None,) * len(settings))(Sigma, *settings)
    return solve(Sigma, *settings)
