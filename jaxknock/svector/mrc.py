r"""Minimum-reconstructability S-vectors (Spector & Janson 2022): MVR and maximum entropy, dense ``Sigma``.

With ``m >= 1`` simultaneous knockoffs (Gimenez & Zou 2019) the joint
covariance of ``[X, X~1, ..., X~m]`` is ``G = I (x) S + 1 1^T (x) (Sigma - S)``
(``S = diag(s)``), whose eigen-blocks are ``(m+1) Sigma - m S`` (once) and
``S`` (``m`` times). With the correlation ``C``, ``c = (m+1)/m`` and
``A = c C - diag(s)`` this gives

* MVR, ``min tr(G^{-1})``:    ``f(s) = tr(A^{-1}) / m + m sum_j 1/s_j``;
* ME,  ``max log det G``:      ``f(s) = -log det A - m sum_j log s_j``
  (``= -log det G + p log m``),

both over ``A > 0`` (no box ``s <= 1``: the literature definitions have none,
and neither knockpy's ``solve_mvr`` / ``solve_maxent`` nor Knockoffs.jl cap
them; ``A > 0`` already bounds ``s_j < c``). For ``m = 1`` these are
``tr(G_S^{-1})`` and ``-log det G_S``.

Two solvers share the state, certificate and stopping rule below: damped
Newton steps on ``s`` (``method="newton"``, the default;
:mod:`~jaxknock.svector.mrc_newton`) and the coordinate descent of knockpy and
Knockoffs.jl (``method="coordinate"``), described here.

**Coordinate updates (closed form).** Fix all coordinates but ``j``; with
``H = A^{-1}``, ``z = H_jj``, ``sigma = 1/z`` (the Schur complement of ``A``
at ``j``), ``kappa = sigma + s_j`` (that of ``c C - diag(s_{-j}, 0)``) and
``q = ||H e_j||^2``, moving ``s_j`` to ``x`` changes ``A`` by a rank one term,
``log det A`` by ``log((kappa - x)/sigma)`` and ``tr A^{-1}`` by
``q sigma^2 / (kappa - x) - q sigma``. Setting the derivative to zero:

* ME:  ``x = m kappa / (m + 1)``;
* MVR: ``x = m kappa / (m + sqrt(q) sigma)``

(both in ``(0, kappa)``, the feasible interval, and the unique minimiser of a
convex function of ``x``). ``H`` is kept current by Sherman-Morrison,
``H <- H + rho h h^T`` with ``h = H e_j`` and ``rho = (x - s_j) sigma / (kappa - x)``.

**Blocked sweeps.** Coordinates are visited ``b`` at a time: the sequential
updates of a block need only ``H_JJ`` and (MVR) ``(H^2)_JJ = H_{:J}^T H_{:J}``,
which are updated in ``b x b`` (``(H^2)_JJ`` by the expanded square of the
rank-one change); the block's total change ``Delta`` is then folded into
``H`` by Woodbury, ``H <- H + H_{:J} Delta (I - H_JJ Delta)^{-1} H_{J:}``,
one ``p x b`` by ``b x p`` product. A sweep is ``~2 p^3`` flops of matrix
products; ``H`` is recomputed from a Cholesky factorisation of ``A`` after
each sweep (no drift; the factorisation is also the feasibility test and gives
``log det A``).

**Certified gaps** (Lagrange duality on ``X = A``; for every ``Z > 0`` the
dual function is a lower bound on the optimum ``f*``):

* ME: ``g(Z) = log det Z + sum_j [m log(Z_jj / m) + m] - c tr(Z C) + p``
  at ``Z = A^{-1}`` gives ``f(s) - g = m sum_j [t_j - 1 - log t_j]`` with
  ``t_j = s_j (A^{-1})_jj / m``;
* MVR: ``g(Z) = (2/sqrt m) tr Z^{1/2} + 2 sqrt(m) sum_j sqrt(Z_jj) - c tr(Z C)``
  at ``Z = A^{-2} / m`` gives ``f(s) - g = sum_j (m - s_j c_j)^2 / (m s_j)`` with
  ``c_j = ||A^{-1} e_j||_2``.

Both vanish exactly at the stationary point (``s_j z_j = m`` resp.
``s_j c_j = m``), so ``gap >= f(s) - f*`` with equality at the optimum.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _aot, _checks, _sigma_checks
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import to_correlation
from jaxknock.svector import _common, certificate, mrc_newton
from jaxknock.svector._common import HIGHEST

__all__ = ["MRCState", "mvr", "maxent", "mrc_objective_and_gap"]

MRC_METHODS = ("mvr", "maxent")
SOLVER_METHODS = ("newton", "coordinate")


class MRCState(NamedTuple):
    """State of the MVR / ME coordinate descent (correlation scale, padded to a multiple of the block).

    ``s`` (``P,``), ``H = A^{-1}`` (``P x P``; padded coordinates are
    decoupled, with ``C = I`` and ``s = 1``, their own optimum), ``objective``
    and certified ``gap`` of the real coordinates, the previous objective
    ``prev`` and the sweep (or Newton step) counter. The Newton method does not pad (``P = p``).
    """

    s: jax.Array
    H: jax.Array
    objective: jax.Array
    gap: jax.Array
    prev: jax.Array
    sweep: jax.Array


# --------------------------------------------------------------------------
# objective and certificate
# --------------------------------------------------------------------------


def objective_and_gap(kind, s, hdiag, logdet, trace, colnorm2, m):
    """``(f(s), certified gap)`` from ``diag(A^{-1})``, ``log det A``, ``tr A^{-1}`` and ``||A^{-1} e_j||^2``."""
    if kind == "maxent":
        f = -logdet - m * jnp.sum(jnp.log(s))
        t = s * hdiag / m
        gap = m * jnp.sum(t - 1.0 - jnp.log(t))
    else:
        f = trace / m + m * jnp.sum(1.0 / s)
        cn = jnp.sqrt(colnorm2)
        gap = jnp.sum((m - s * cn) ** 2 / (m * s))
    return f, gap


def _dense_certificate(kind, C2, s, m, p, L=None):
    """``(H, f, gap, feasible)`` at ``s`` (padded ``P``; ``f`` and ``gap`` over the first ``p`` coordinates).

    ``L``: the Cholesky factor of ``C2 - diag(s)`` when the caller has it (the Newton line search's).
    """
    P = s.shape[0]
    if L is None:
        L = jnp.linalg.cholesky(C2 - jnp.diag(s))
    feasible = jnp.all(jnp.isfinite(L))
    eye = jnp.eye(P, dtype=L.dtype)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    H = jnp.matmul(Linv.T, Linv, precision=HIGHEST)
    # the padded coordinates are decoupled (H is block diagonal), so the real ones' terms are exact;
    # the pads (s = 1) must not enter f: m sum 1/s added m per pad to the MVR objective
    hdiag = jnp.diagonal(H)[:p]
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)[:p]))
    colnorm2 = jnp.sum(H * H, axis=0)[:p]
    f, gap = objective_and_gap(kind, s[:p], hdiag, logdet, jnp.sum(hdiag), colnorm2, m)
    return H, f, gap, feasible


def inverse_error(kind, C2, H, m, times_s):
    r"""What ``H`` not being exactly ``A^{-1}`` (``A = c C - S``) can add to the certified gap.

    The gap formulas assume ``H = A^{-1}``. ``H`` is the inverse of the
    *rounded* ``A`` (``c C_jj - s_j`` rounds ``s_j`` away once it is below an
    ulp of ``c``), so near the rounding floor (``eps kappa(A)`` not small) the
    formulas certify another matrix. With the residual ``R = (c C) H - S H - I``
    (``A^{-1} = H (I + R)^{-1}``), weak duality at the same dual point gives
    exactly ``f(s) - g = gap + tr(H R (I + R)^{-1} R) / m`` (MVR) and
    ``gap + tr R - log det(I + R)`` (ME; ``I + R`` is similar to a positive
    definite matrix, so its eigenvalues ``1 + mu_i`` are real and positive).
    With ``r = ||R||_F < 1`` (``>= |mu_i|`` and ``||R||_2``) these are at most
    ``||H||_2 r^2 / (m (1 - r))`` (``||H||_2 <= tr H``) and ``r^2 / (2 (1 - r))``;
    ``inf`` when ``r >= 1``. ``R`` is itself computed in floating point, so the
    term is an estimate of the same order as the error it measures.

    ``times_s(H)`` is ``S H`` (``s[:, None] * H`` for a diagonal ``S``, a block
    product for the group MVR), kept apart from ``c C H``: ``c C - S`` rounds a
    tiny ``S`` away, which is the error ``R`` must see. One ``p^3`` product,
    evaluated once at the end of a solve and only where ``eps ||cC||_inf tr H
    > 1e-8`` (an upper bound on ``eps kappa(A)``: ``||A||_2 <= ||cC||_inf``,
    ``||A^{-1}||_2 <= tr H``); below that the term is 0 (``r ~ eps kappa`` and
    the term ``< 1e-12 f``).
    """

    def bound():
        R = jnp.matmul(C2, H, precision=HIGHEST) - times_s(H) - jnp.eye(H.shape[0], dtype=H.dtype)
        r = jnp.sqrt(jnp.sum(R * R))
        if kind == "maxent":
            err = r * r / (2.0 * (1.0 - r))
        else:
            err = jnp.trace(H) * r * r / (m * (1.0 - r))
        return jnp.where(r < 1.0, err, jnp.inf)

    kappa = jnp.max(jnp.sum(jnp.abs(C2), axis=1)) * jnp.trace(H)
    near_floor = ~(jnp.finfo(H.dtype).eps * kappa <= 1e-8)  # NaN: compute
    return lax.cond(near_floor, bound, lambda: jnp.zeros((), H.dtype))


def recertified(result, gap, objective, tol):
    """``result`` with ``successful`` turned ``stagnated`` unless ``gap <= tol * max(|objective|, 1)`` (finite)."""
    met = jnp.isfinite(gap) & (gap <= tol * jnp.maximum(jnp.abs(objective), 1.0))
    return jnp.where((result == RESULTS.successful) & ~met, RESULTS.stagnated, result)


def coordinate_value(kind, s_j, z, q, m):
    """The exact minimiser ``x`` of ``f`` in coordinate ``j`` and the Sherman-Morrison weight ``rho``."""
    sigma = 1.0 / z
    kappa = sigma + s_j
    if kind == "maxent":
        x = m * kappa / (m + 1.0)
    else:
        x = m * kappa / (m + jnp.sqrt(q) * sigma)
    rho = (x - s_j) * sigma / (kappa - x)
    return x, rho


# --------------------------------------------------------------------------
# one blocked sweep
# --------------------------------------------------------------------------


def _sweep(kind, s, H, m, b):
    P = s.shape[0]
    nb = P // b
    eye_b = jnp.eye(b, dtype=H.dtype)

    def block(kb, carry):
        s, H = carry
        j0 = kb * b
        V = lax.dynamic_slice_in_dim(H, j0, b, axis=1)
        G0 = lax.dynamic_slice_in_dim(V, j0, b, axis=0)
        Q0 = jnp.matmul(V.T, V, precision=HIGHEST) if kind == "mvr" else jnp.zeros_like(G0)
        sJ = lax.dynamic_slice_in_dim(s, j0, b)

        def coord(i, c):
            sJ, G, Q = c
            g = G[:, i]
            x, rho = coordinate_value(kind, sJ[i], g[i], Q[i, i], m)
            if kind == "mvr":
                qv = Q[:, i]
                Q = Q + rho * (jnp.outer(qv, g) + jnp.outer(g, qv)) + (rho * rho * Q[i, i]) * jnp.outer(g, g)
            G = G + rho * jnp.outer(g, g)
            return sJ.at[i].set(x), G, Q

        sJ_new, _, _ = lax.fori_loop(0, b, coord, (sJ, G0, Q0))
        delta = sJ_new - sJ
        # Woodbury for A - E_J diag(delta) E_J^T: K = Delta (I - G0 Delta)^{-1} (symmetric)
        K = jnp.linalg.solve(eye_b - delta[:, None] * G0, jnp.diag(delta))
        K = 0.5 * (K + K.T)
        H = H + jnp.matmul(jnp.matmul(V, K, precision=HIGHEST), V.T, precision=HIGHEST)
        return lax.dynamic_update_slice_in_dim(s, sJ_new, j0, axis=0), H

    return lax.fori_loop(0, nb, block, (s, H))


def default_block(p: int) -> int:
    """Coordinates per block: 64, or ``~p/4`` (at least 1) for small ``p``."""
    return int(max(1, min(64, -(-p // 4))))


# --------------------------------------------------------------------------
# init / step / terminate and the driven solve
# --------------------------------------------------------------------------


def _pad(C, m, b):
    p = C.shape[0]
    P = -(-p // b) * b
    c = (m + 1.0) / m
    C2 = c * jnp.eye(P, dtype=C.dtype)
    C2 = C2.at[:p, :p].set(c * C)
    # start in the interior, A = c (C - lambda_min/2 I) (knockpy starts at lambda_min too);
    # padded coordinates: C = I with s = 1, their exact optimum for both objectives
    start = jnp.clip(0.5 * c * certificate.smallest_eigenvalue(C), 0.0, 1.0)
    s0 = jnp.where(jnp.arange(P) < p, start, 1.0).astype(C.dtype)
    return C2, s0


def mrc_init(kind, C2, s0, m, p) -> MRCState:
    """Initial state at ``s0`` (``s_j = min(1, c lambda_min(C) / 2)`` on the real coordinates)."""
    H, f, gap, _ = _dense_certificate(kind, C2, s0, m, p)
    inf = jnp.asarray(jnp.inf, C2.dtype)
    return MRCState(s0, H, inf, inf, inf, jnp.int32(0))


def mrc_step(state: MRCState, kind, C2, m, p, b) -> MRCState:
    """One blocked sweep, then ``H``, ``f`` and the certified gap from a fresh Cholesky factorisation."""
    s, _ = _sweep(kind, state.s, state.H, m, b)
    H, f, gap, feasible = _dense_certificate(kind, C2, s, m, p)
    gap = jnp.where(feasible, gap, jnp.inf)
    return MRCState(s, H, f, gap, state.objective, state.sweep + 1)


def mrc_newton_init(kind, C2, s0, m, p) -> MRCState:
    """Initial state of the Newton method at ``s0``, with ``f(s0)`` and its certified gap (no padding)."""
    H, f, gap, feasible = _dense_certificate(kind, C2, s0, m, p)
    inf = jnp.asarray(jnp.inf, C2.dtype)
    return MRCState(s0, H, f, jnp.where(feasible, gap, inf), inf, jnp.int32(0))


def mrc_newton_step(state: MRCState, kind, C2, m, p) -> MRCState:
    """One damped Newton step (:mod:`~jaxknock.svector.mrc_newton`), then ``H``, ``f`` and the certified gap."""
    s, L = mrc_newton.newton_update(kind, C2, state.s, state.H, state.objective, m)
    H, f, gap, feasible = _dense_certificate(kind, C2, s, m, p, L)
    gap = jnp.where(feasible, gap, jnp.inf)
    return MRCState(s, H, f, gap, state.objective, state.sweep + 1)


def interior_start(init: MRCState, p):
    r"""Whether the initial state is strictly feasible: ``s_j > 0`` and ``A = c C - diag(s)`` factorised.

    The start ``s_j = min(1, c lambda_min(C) / 2)`` is interior in exact arithmetic whenever ``C > 0``.
    A ``C`` singular to rounding (a duplicated or affinely shifted feature, a sample correlation with
    ``n <= p``) can factorise while its computed ``lambda_min`` is ``<= 0`` (start ``s = 0``, where
    ``f = inf``) or while ``c C - diag(s)`` at the start does not factorise (``H`` and ``f`` NaN); no
    step can leave such a point, and the Newton method ran all ``max_steps`` steps on it and returned
    ``nonfinite`` with that finite ``s`` (0 or ~3e-16). Such a ``Sigma`` is treated as the cores treat
    one whose correlation does not factorise (``infeasible``, NaN ``s``; eagerly a ``ValueError``).
    ``H`` is NaN exactly when the Cholesky factorisation at the start failed.
    """
    return jnp.all(init.s[:p] > 0) & jnp.all(jnp.isfinite(init.H))


def mvr_coordinates_certified(kind, s, H, m, p, tol):
    r"""MVR: whether every coordinate's term of the certified gap is at most ``tol`` times its term of ``f``.

    The MVR gap is ``sum_j (m - s_j c_j)^2 / (m s_j)`` (``c_j = ||A^{-1} e_j||``) and ``f >= m sum_j 1/s_j``;
    the test ``(m - s_j c_j)^2 / (m s_j) <= tol m / s_j``, i.e. ``(1 - s_j c_j / m)^2 <= tol`` for every
    ``j`` (the stationarity condition ``s_j c_j = m`` to a relative ``sqrt(tol)``), implies
    ``gap <= tol f``. Alone, ``gap <= tol f`` certifies nothing about coordinates whose ``m / s_j`` is a
    small part of ``f``: with one near-duplicate pair (correlation ``1 - 1e-9``, ``f ~ 3e9``, almost all of
    it from the pair's ``s ~ 1e-9``) the Newton method stopped ``successful`` with the other 39
    coordinates at 0.017 against an optimum of 0.44-0.46 (``1e-12``: at 1.7e-5). True for ``"maxent"``
    (its terms ``m (t_j - 1 - log t_j)`` are already on the scale of ``f``'s ``-m log s_j``, not ``1/s_j``).
    """
    return mvr_norms_certified(kind, s[:p], jnp.sum(H * H, axis=0)[:p] if kind == "mvr" else None, m, tol)


def mvr_norms_certified(kind, s, colnorm2, m, tol):
    """:func:`mvr_coordinates_certified` from the squared column norms ``||A^{-1} e_j||^2`` (the factor-model
    solvers' Woodbury diagonals): ``(1 - s_j ||A^{-1} e_j|| / m)^2 <= tol`` for every ``j``; true for maxent."""
    if kind != "mvr":
        return jnp.ones((), bool)
    t = s * jnp.sqrt(colnorm2) / m
    return jnp.all((1.0 - t) ** 2 <= tol)


def mrc_terminate(state: MRCState, tol, coordinates_ok=True):
    """``successful`` once ``gap <= tol * max(|f|, 1)``; ``stagnated`` if a sweep (step) no longer lowers ``f``.

    ``coordinates_ok``: a further condition for ``successful`` (the dense solvers' :func:`mvr_coordinates_certified`).
    """
    scale = jnp.maximum(jnp.abs(state.objective), 1.0)
    done = jnp.isfinite(state.gap) & (state.gap <= tol * scale) & coordinates_ok
    # rounding floor: a sweep that changes f by less than ~1e3 eps |f| will not certify tol
    stuck = (
        (state.sweep > 2)
        & jnp.isfinite(state.objective)
        & (state.prev - state.objective <= 1e3 * jnp.finfo(scale.dtype).eps * scale)
    )
    code = jnp.where(done, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)
    return done | stuck, code


def solve_dense_mrc(Sigma, tol, max_steps, m, *, kind, b, method="newton", min_eig="bound") -> Solution:
    """The unvalidated, traceable core of :func:`mvr` / :func:`maxent` for one ``(p, p)`` matrix.

    ``method="newton"`` ignores ``b`` (no blocks, no padding).
    """
    p = Sigma.shape[-1]
    # under jit an indefinite (or NaN) Sigma is infeasible with a NaN s, without iterating on it
    C, valid, max_steps_run = _common.gated_correlation(Sigma, max_steps)
    m = jnp.asarray(m, C.dtype)
    if method == "newton":
        C2, s0 = _pad(C, m, 1)
        init = mrc_newton_init(kind, C2, s0, m, p)
        step = functools.partial(mrc_newton_step, kind=kind, C2=C2, m=m, p=p)
    else:
        C2, s0 = _pad(C, m, b)
        init = mrc_init(kind, C2, s0, m, p)
        step = functools.partial(mrc_step, kind=kind, C2=C2, m=m, p=p, b=b)
    # a C that factorises but is singular to rounding can leave the start outside A > 0, s > 0
    valid = valid & interior_start(init, p)
    it = iterative_solve(
        init,
        step,
        lambda st: mrc_terminate(st, tol, mvr_coordinates_certified(kind, st.s, st.H, m, p, tol)),
        max_steps=jnp.where(valid, max_steps_run, 0),
        finite=lambda st: jnp.all(jnp.isfinite(st.s)),
    )
    st = it.state
    s_corr = st.s[:p]
    # near the rounding floor H is the inverse of another matrix: a small formula gap certifies nothing
    gap = st.gap + inverse_error(kind, C2, st.H, m, lambda H: st.s[:, None] * H)
    # (a successful result already has every coordinate certified: terminate requires it)
    code = recertified(it.result, gap, st.objective, tol)
    A = C2[:p, :p] - jnp.diag(s_corr)
    if min_eig == "none":
        feasible, me = _common.is_pd(C2[:p, :p], s_corr), jnp.full((), jnp.nan, C.dtype)
    else:
        feasible, me = certificate.min_eig_bound(A)
    finite = jnp.all(jnp.isfinite(s_corr)) & jnp.isfinite(st.objective)
    result = jnp.where(
        ~finite, RESULTS.nonfinite, jnp.where(~feasible | jnp.any(s_corr <= 0), RESULTS.infeasible, code)
    ).astype(jnp.int32)
    s, result = _common.reject_invalid_sigma(valid, Sigma, s_corr * jnp.diagonal(Sigma), result)
    stats = {
        "num_steps": it.num_steps,
        "max_steps": max_steps,
        "objective": st.objective,
        "gap": jnp.where(feasible, gap, jnp.inf),
        "min_eig": me,
    }
    return Solution(s, result, stats, st)


@functools.partial(jax.jit, static_argnames=("kind", "b", "method"))
def _mrc_jit(Sigma, tol, max_steps, m, *, kind, b, method):
    def one(S, tol, max_steps, m):
        return solve_dense_mrc(S, tol, max_steps, m, kind=kind, b=b, method=method)

    return _common.solve_stack(one, Sigma, tol, max_steps, m)  # a stack: one matrix at a time on CPU


def solve_kind(kind, Sigma, num_knockoffs, tol, max_steps, block_size, method, throw):
    """:func:`mvr` (``kind="mvr"``) or :func:`maxent` (``kind="maxent"``) with every argument given.

    Their shared body; also the dense rescue of :mod:`jaxknock.svector.mrc_factor`.
    """
    _checks.check_choice(method, SOLVER_METHODS, "method")
    tol, max_steps, _, _ = _common.check_settings(tol, max_steps, 0.5, None)
    m = _checks.check_num_knockoffs(num_knockoffs)
    Sigma = _sigma_checks.validate_sigma(Sigma)
    p = Sigma.shape[-1]
    b = default_block(p) if block_size is None else block_size
    if not (_checks.is_int(b) and b >= 1):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    # a fresh process with the compilation cache on loads the traced program (jaxknock/_aot.py)
    b = int(min(b, p)) if method == "coordinate" else 1  # the Newton method has no blocks: one program
    sol = _aot.call(_mrc_jit, Sigma, tol, max_steps, float(m), kind=kind, b=b, method=method)
    raise_if_no_interior_start(sol, Sigma)
    if method == "newton":
        block = default_block(p) if block_size is None else int(min(block_size, p))
        sol = coordinate_rescue(sol, lambda: _aot.call(_mrc_jit, Sigma, tol, max_steps, float(m), kind=kind, b=block,
                                                       method="coordinate"))  # fmt: skip
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)


def coordinate_rescue(sol: Solution, coordinate) -> Solution:
    """Eagerly, the coordinate method's solution where the Newton method's ended without a certificate.

    The Newton step reads every coordinate's gradient and curvature from ``A^{-1}`` at once. With a copy
    of a feature at correlation ``1 - delta`` (``delta <= 1e-8``: a near copy in a user's ``Sigma``),
    ``A^{-1}`` carries absolute errors of order ``kappa(A) eps ||A^{-1}||``, and the MVR's Newton iterate
    stagnated on 23 of 24 such matrices (p = 20-120, one to three copies, session 55), mostly with the
    other features' ``s`` far below their optimum (median 0.000-0.28 on 20 of them). The coordinate
    method, whose closed-form updates of one coordinate at a time keep the near-null direction out of the
    others, certified 21 of the 24; the other 3 ended ``stagnated`` with gaps 20-80 times smaller than
    Newton's. So a ``stagnated`` Newton solve of one concrete matrix (not one that spent the caller's
    ``max_steps``) is solved again by the coordinate method (``coordinate()``: its own compiled program,
    built only then), which is kept when it is ``successful`` or has the smaller certified gap. Under
    ``jit``, and for a batch, the Newton solution is returned as it is.
    """
    if not all(_checks.is_concrete(a) for a in (sol.value, sol.result)) or np.ndim(sol.result) != 0:
        return sol
    if int(sol.result) != RESULTS.stagnated:  # max_steps_reached: the caller's budget, spent as asked
        return sol
    alt = coordinate()
    if int(alt.result) == RESULTS.successful:
        return alt
    gap, alt_gap = (float(x.stats["gap"]) for x in (sol, alt))
    better = int(alt.result) in (RESULTS.stagnated, RESULTS.max_steps_reached) and alt_gap < gap
    return alt if better else sol


def raise_if_no_interior_start(sol: Solution, Sigma) -> None:
    """Eagerly, a ``ValueError`` where the core rejected a validated ``Sigma`` (:func:`interior_start`).

    The core marks a rejected matrix ``infeasible`` with an all-NaN ``s``
    (:func:`~jaxknock.svector._common.reject_invalid_sigma`); after the eager
    validation of ``Sigma`` only a start outside ``A > 0`` does so. Under ``jit``
    (traced ``Sigma``) the solution is returned as it is.
    """
    if not (_checks.is_concrete(Sigma) and _checks.is_concrete(sol.value) and _checks.is_concrete(sol.result)):
        return
    # on the host (a result code and p values per member): eager device operations were four compiled programs
    result, value = jax.device_get((sol.result, sol.value))  # one explicit transfer
    rejected = (np.asarray(result) == int(RESULTS.infeasible)) & np.isnan(value).all(axis=-1)
    if rejected.any():
        where = f" (batch member {int(np.argmax(rejected.ravel()))})" if rejected.ndim else ""
        raise ValueError(
            f"Sigma{where} is singular to working precision: its correlation matrix C factorises, but "
            "(m+1)/m C - diag(s) has no strictly feasible s > 0 the solver can start from (lambda_min(C) "
            "is at the rounding level); use jaxknock.ledoit_wolf(X) or add a small ridge to the diagonal"
        )


_SHARED_DOC = r"""
    Solvers, both driven by :func:`jaxknock._iterate.iterative_solve` from
    ``s_j = min(1, c lambda_min(C) / 2)``:

    * ``method="newton"`` (default, :mod:`~jaxknock.svector.mrc_newton`):
      damped Newton steps on ``s`` with the exact Hessian (``A^{-1} o A^{-1} +
      diag(m / s^2)`` for ME, ``(2/m) A^{-1} o A^{-2} + diag(2 m / s^3)`` for
      MVR), solved by Cholesky, and a backtracking line search that keeps
      ``A > 0`` and ``s > 0`` (Armijo). ``~2.5 p^3`` (ME) / ``~4.5 p^3`` (MVR)
      flops per step, in a few LAPACK / BLAS calls; 3-11 steps on every
      matrix measured, including raw sample correlations of near-square
      designs, where the coordinate descent needs hundreds to thousands of
      sweeps (maximum entropy, ``p = 200``, ``n = 203``: 9 steps against 1508
      sweeps).
    * ``method="coordinate"``: cyclic coordinate descent with the closed-form
      coordinate updates and blocked Sherman-Morrison / Woodbury updates of
      ``A^{-1}`` described in :mod:`jaxknock.svector.mrc` (``~3 p^3`` flops
      per sweep, all in matrix products; ``block_size`` is its block, and is
      not used by the Newton method). Knockpy's and Knockoffs.jl's algorithm.
    * A Newton solve of one concrete matrix that ends ``stagnated`` (a near
      copy of a feature, correlation ``1 - 1e-9``, makes ``A^{-1}`` too
      inexact for the Newton step) is solved again by the coordinate method,
      whose solution is returned when it is ``successful`` or has the smaller
      gap (:func:`coordinate_rescue`); not under ``jit``.

    After every step or sweep the **certified gap** (see the module
    docstring) is computed from a fresh Cholesky factorisation of
    ``A = c C - diag(s)``; it satisfies ``gap >= f(s) - f*``. At the end,
    where ``A`` may be near the rounding floor, the gap also holds the bound
    of ``A^{-1}`` being computed for the rounded ``A`` (:func:`inverse_error`):
    with ``lambda_min(C)`` a few ulps no answer is ``successful``.

    Tolerance: stops with ``successful`` once ``gap <= tol * max(|f(s)|, 1)``
    (relative to the objective, absolute when it is below 1) and, for MVR,
    every coordinate's term of the gap is at most ``tol`` times its term
    ``m / s_j`` of ``f`` (:func:`mvr_coordinates_certified`: a near-duplicate
    pair with ``s ~ 1e-9`` dominates ``f``, and ``gap <= tol f`` alone let the
    other coordinates stop far from their optimum); with
    ``stagnated`` when a step lowers ``f`` by less than ``1e3 eps |f|``
    (rounding floor; the reported gap is still a valid bound), else with
    ``max_steps_reached``.

    ``Sigma`` is converted with :func:`~jaxknock.to_correlation`, solved on
    the correlation scale and ``s`` mapped back by ``diag(Sigma)``;
    ``objective`` and ``gap`` are on the correlation scale. Float64 is required
    (the iterates approach the PD boundary; Cholesky updates); a float32
    ``Sigma`` is rejected. ``tol`` and ``max_steps`` are traced (no
    recompilation); ``num_knockoffs`` is traced too, ``method``,
    ``block_size`` and the shape are static. A batch ``(B, p, p)`` is solved one matrix after another
    on CPU, with ``vmap`` on an accelerator.

    Under jit (value checks skipped) a ``Sigma`` with NaN/Inf gives
    ``nonfinite``; a non-symmetric one, one with a non-positive diagonal, or
    one whose correlation matrix has no Cholesky factor (indefinite or
    singular), or one so close to singular that the start is not strictly
    feasible (:func:`interior_start`), gives ``infeasible`` (without
    iterating, except on a non-symmetric one); ``s`` is then all NaN (as :func:`~jaxknock.sdp` and
    the group solvers). Eagerly they raise ``ValueError``.

    Args:
        Sigma: ``(p, p)`` positive definite covariance / correlation (float64),
            or a batch ``(B, p, p)``.
        num_knockoffs: ``m >= 1`` simultaneous knockoffs: the constraint is
            ``(m+1)/m C - diag(s) > 0`` and the objective that of ``G`` above.
        tol: relative certified-gap tolerance.
        max_steps: maximum number of Newton steps or sweeps (default 2000, for
            the coordinate method: on raw sample correlations with ``n / p =
            1.15`` maximum entropy needed 610-1072 sweeps at p = 200-400; a
            solve that converges sooner stops sooner).
        method: ``"newton"`` (default) or ``"coordinate"``.
        block_size: coordinates per block of ``method="coordinate"`` (default
            64, ``~p/4`` for small ``p``); checked, and not used by ``"newton"``.
        throw: raise ``RuntimeError`` unless ``successful``.

    Returns:
        :class:`~jaxknock.Solution`: ``value`` is ``s`` (covariance scale);
        ``stats``: ``num_steps`` (Newton steps or sweeps), ``max_steps``, ``objective``
        (``f(s)``), ``gap`` (certified, ``inf`` if infeasible), ``min_eig`` (a
        certified lower bound on ``lambda_min(c C - diag s)``, as in
        :func:`~jaxknock.sdp`); ``state`` is the final :class:`MRCState`.
"""


def mvr(
    Sigma,
    *,
    num_knockoffs: int = 1,
    tol: float = 1e-6,
    max_steps: int = 2000,
    method: str = "newton",
    block_size=None,
    throw=False,
):
    r"""Minimum variance-based reconstructability (MVR) knockoffs (Spector & Janson 2022).

    .. math:: \min_s\ \tfrac1m \mathrm{tr}\big((cC - \mathrm{diag}\,s)^{-1}\big) + m \sum_j 1/s_j
              \quad\text{s.t.}\quad cC - \mathrm{diag}\,s \succ 0,\ c = (m+1)/m,

    i.e. ``min tr(G_S^{-1})`` for the joint covariance of ``[X, X~1..X~m]``
    (knockpy's ``solve_mvr`` for ``m = 1``, Knockoffs.jl's MVR for general ``m``).
    The certified gap is ``sum_j (m - s_j ||A^{-1} e_j||)^2 / (m s_j)``.
    """
    return solve_kind("mvr", Sigma, num_knockoffs, tol, max_steps, block_size, method, throw)


def maxent(
    Sigma,
    *,
    num_knockoffs: int = 1,
    tol: float = 1e-6,
    max_steps: int = 2000,
    method: str = "newton",
    block_size=None,
    throw=False,
):
    r"""Maximum-entropy (ME, a.k.a. MMI) knockoffs (Spector & Janson 2022; Gimenez & Zou 2019).

    .. math:: \min_s\ -\log\det(cC - \mathrm{diag}\,s) - m \sum_j \log s_j
              \quad\text{s.t.}\quad cC - \mathrm{diag}\,s \succ 0,\ c = (m+1)/m,

    i.e. ``max log det G_S`` (``= -f + p log m``; knockpy's ``solve_maxent``
    for ``m = 1``, Knockoffs.jl's default). The certified gap is
    ``m sum_j [t_j - 1 - log t_j]`` with ``t_j = s_j (A^{-1})_jj / m``.
    """
    return solve_kind("maxent", Sigma, num_knockoffs, tol, max_steps, block_size, method, throw)


_EXAMPLE_MVR = """
    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(4) + 0.5
        >>> sol = mvr(C)
        >>> bool(sol.successful), bool(sol.stats["gap"] <= 1e-6 * sol.stats["objective"])
        (True, True)
        >>> s2 = mvr(C, num_knockoffs=2).value       # m = 2: (3/2) C - diag(s) > 0
"""
_EXAMPLE_ME = """
    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> s = maxent(jnp.eye(3)).value             # independent features: s = 1
        >>> bool(jnp.allclose(s, 1.0))
        True
"""
mvr.__doc__ += _SHARED_DOC + _EXAMPLE_MVR
maxent.__doc__ += _SHARED_DOC + _EXAMPLE_ME


def mrc_objective_and_gap(Sigma, s, *, method: str = "mvr", num_knockoffs: int = 1):
    """``(f(s), certified gap)`` of :func:`mvr` / :func:`maxent` at any feasible ``s`` (covariance scale).

    ``f(s) - f* <= gap``; ``(inf, inf)`` when ``c C - diag(s)`` is not positive definite.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> f, gap = mrc_objective_and_gap(jnp.eye(2), jnp.ones(2), method="maxent")
        >>> float(f), float(gap)   # s = 1 is optimal for independent features
        (-0.0, 0.0)
    """
    _checks.check_choice(method, MRC_METHODS, "method")
    m = _checks.check_num_knockoffs(num_knockoffs)
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False)
    s = _checks.as_float_array(s, "s")
    _checks.check_ndim(s, 1, "s", f"a 1-D vector of length p = {Sigma.shape[0]}")
    if s.shape[0] != Sigma.shape[0]:
        raise ValueError(f"s has length {s.shape[0]} but Sigma is {Sigma.shape[0]} x {Sigma.shape[0]}")
    _checks.check_finite(s, "s")  # a NaN s gave (inf, inf), as if it were merely infeasible
    return _objective_gap_jit(Sigma, s.astype(Sigma.dtype), float(m), kind=method)


@functools.partial(jax.jit, static_argnames=("kind",))
def _objective_gap_jit(Sigma, s, m, *, kind):
    p = Sigma.shape[-1]
    C = to_correlation(Sigma)
    c = (m + 1.0) / m
    s_corr = s / jnp.diagonal(Sigma)
    H, f, gap, feasible = _dense_certificate(kind, c * C, s_corr, m, p)
    gap = gap + inverse_error(kind, c * C, H, m, lambda H: s_corr[:, None] * H)
    bad = ~feasible | jnp.any(s <= 0)
    f, gap = jnp.where(bad, jnp.inf, f), jnp.where(bad, jnp.inf, gap)
    # a Sigma that validate_sigma would refuse (traced: non-symmetric, NaN, non-positive diagonal): NaN
    return _checks.poison(_sigma_checks.traced_sigma_code(Sigma) == 0, f, gap)
