r"""Primal-dual barrier Newton path following for the knockoff SDP (the default :func:`~jaxknock.sdp` method).

Maximises, for a decreasing barrier parameter ``lam``,

.. math:: 1^T s + \lambda \bigl(\log\det(2C - \mathrm{diag}(s)) + \textstyle\sum_j \log s_j
          + \sum_j \log(c_j - s_j)\bigr)

on the correlation matrix ``C`` (``c = min(1, 2 diag C)`` the box cap) with
Newton steps, the box handled primal-dually. After every step the certificate
of :func:`~jaxknock.svector.certificate.gap_from_inverse_diag` is evaluated at
the current iterate; the best dual bound is kept.

Three layers: :func:`newton_init` / :func:`newton_step` (public, for notebooks
and debugging), :func:`path_init` / :func:`path_step` / :func:`path_terminate`
(the same on correlation-scale arrays) and :func:`solve_path`, which drives
them with :func:`jaxknock._iterate.iterative_solve`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock import _checks, _sigma_checks
from jaxknock._iterate import Iteration, iterative_solve
from jaxknock._solution import RESULTS
from jaxknock.covariance import to_correlation
from jaxknock.svector import _common
from jaxknock.svector._common import HIGHEST
from jaxknock.svector.certificate import gap_from_inverse_diag, subspace_dual

__all__ = ["NewtonState", "default_lam0", "newton_init", "newton_step"]

# stall score at which the path stops (see path_step): 8 centred or 32 uncentred
# steps without a smaller certified gap
PATIENCE = 32
# power iterations of the line search's positive-definiteness bound (_pd_step_bound)
_PD_POWER_STEPS = 8
# fraction to the boundary of the PD cone: a step t is taken only if t / _PD_FRACTION is
# still positive definite, so 2C - diag(s) >= (1 - _PD_FRACTION) times its previous value
# (see _path_step)
_PD_FRACTION = 0.7
# rounds of the subspace certificate after a stagnated path (see solve_path)
_RESCUES = 4


def default_lam0(p: int) -> float:
    r"""The default ``lam0`` of the Newton path, ``max(0.5, p / 20)``: the barrier starts at ``lam0 / p``.

    On the central path at ``lam`` the duality gap is ``lam`` times the number of
    barrier terms (``3p``: the log-determinant and the two sides of the box), so
    ``lam0 / p`` starts the path ``3 lam0`` below the optimum. The optimum grows
    with ``p`` (``1^T s`` of a well-conditioned ``C`` is ``~0.5 p`` to ``p``); a
    ``lam0`` that does not (0.5 before session 34) asked the first centring to
    travel from ``s = 0`` to within 1% of the optimum at once. Its steps then ran
    into the positive-definite boundary (``lambda_min(2C - diag s)`` 1e-7 while
    ``lam`` was still 3e-3) and crawled there until the stall test stopped the
    path ``stagnated``, with certified gaps of 10-50%: Ledoit-Wolf estimates of
    AR(1) 0.5 designs (``n = 3p``, p = 200 and 800) and of genotype-like
    ``{0, 1, 2}`` designs (p = 150-800) failed 29 of 46 solves. ``p / 20`` keeps
    the first gap near ``0.15 p`` of a ``~p`` optimum; all 46 were certified, in
    fewer steps (33-40 against 53-65 on average). The price is paid where the
    optimum is small: raw sample correlations of near-singular designs take
    2-40% more steps (blocks of 20, p = 400-800; ``benchmarks/measured/NOTES.md``,
    session 34). Small ``p`` keeps 0.5.
    """
    return max(0.5, 0.05 * p)


class NewtonState(NamedTuple):
    """State of the barrier Newton path follower (correlation scale).

    ``s`` strictly inside ``(0, cap)`` with ``2C - diag(s)`` positive definite;
    ``z0, z1`` multipliers of ``s >= 0`` and ``s <= cap``; ``lam`` the barrier
    parameter; ``step`` the number of steps taken (int32); ``dual`` the best
    certified dual bound seen so far (any iterate's certificate bounds OPT);
    ``stall`` the stall score (int32, see :func:`path_step`).
    """

    s: jax.Array
    z0: jax.Array
    z1: jax.Array
    lam: jax.Array
    step: jax.Array
    dual: jax.Array
    stall: jax.Array


def _interior_start(C2, s, cap, lam):
    """Push a (possibly bound-touching) feasible ``s`` strictly inside ``(0, cap)``.

    Coordinates at 0 move to ``1e-3 lam`` (below their Schur complement when
    ``2C`` is well conditioned), coordinates at ``cap`` move down, which keeps
    ``A`` positive definite; if that breaks definiteness (``lambda_min(2C)``
    below ``1e-3 lam``, or rounding), fall back to ``s / 2``, and then to the
    start that is interior for every positive definite ``C``:
    ``x_j = min(1e-3 lam, 1 / (2 p h_j))`` with ``h = diag((2C)^{-1})``.
    There ``diag(x)^{1/2} (2C)^{-1} diag(x)^{1/2}`` has trace at most 1/2, so
    ``2C - diag(x) >= C`` (half of ``2C``): as well conditioned as ``C`` itself.
    """
    p = s.shape[-1]
    lo = jnp.minimum(1e-3 * lam, 1e-3 * cap)
    hi = cap * (1.0 - 1e-6)
    x = jnp.clip(s, lo, hi)
    half = jnp.clip(0.5 * s, lo, hi)
    h = _common.inverse_diag_from_cholesky(jnp.linalg.cholesky(C2))
    safe = jnp.minimum(lo, 0.5 / (p * h))
    return jnp.where(_common.is_pd(C2, x), x, jnp.where(_common.is_pd(C2, half), half, safe))


def _newton_direction(C2, s, z0, z1, lam, cap, L=None):
    """Primal-dual Newton direction for the barrier problem at ``lam``.

    Centrality conditions: ``1 - lam diag(A^{-1}) + z0 - z1 = 0``,
    ``s z0 = lam``, ``(cap - s) z1 = lam`` with ``A = 2C - diag(s)``.
    Eliminating ``dz0, dz1`` leaves the ``p x p`` system
    ``(lam A^{-1} o A^{-1} + diag(z0/s + z1/(cap-s))) ds = g`` with
    ``g = 1 - lam diag(A^{-1}) + lam/s - lam/(cap-s)`` (the barrier gradient),
    solved by a diagonally scaled Cholesky factorisation (the Hadamard square
    of a positive definite matrix is positive definite). Also returns
    ``h = diag(A^{-1})`` for the certificate and the Newton decrement.
    ``L``: the Cholesky factor of ``A`` when the caller has it (the path's
    line search computed it for the accepted step, :func:`_path_step`).
    """
    p = s.shape[-1]
    eye = jnp.eye(p, dtype=s.dtype)
    L = jnp.linalg.cholesky(C2 - jnp.diag(s)) if L is None else L
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
    return ds, dz0, dz1, h, dec, Linv


def _pd_step_bound(Linv, ds, iters=_PD_POWER_STEPS):
    r"""An upper bound on the largest ``t`` with ``A - t diag(ds)`` positive definite (``A = L L^T``).

    ``A - t diag(ds)`` is positive definite exactly for ``t < 1 / mu`` with
    ``mu`` the largest eigenvalue of ``M = L^{-1} diag(ds) L^{-T}``. Every
    Rayleigh quotient of ``M`` is at most ``mu``, so ``1 / max(RQ)`` over a few
    power iterations (``O(p^2)`` each with the explicit ``L^{-1}``) bounds the
    step from above: a step at least that long cannot be positive definite,
    and the line search skips its Cholesky test. ``inf`` when no quotient is
    positive (no bound found).
    """

    def matvec(x):
        return jnp.dot(Linv, ds * jnp.dot(x, Linv, precision=HIGHEST), precision=HIGHEST)

    def body(_, c):
        x, best = c
        y = matvec(x)
        rq = jnp.dot(x, y) / jnp.maximum(jnp.dot(x, x), jnp.finfo(x.dtype).tiny)
        return y / jnp.maximum(jnp.linalg.norm(y), jnp.finfo(x.dtype).tiny), jnp.maximum(best, rq)

    x0 = jnp.dot(Linv, jnp.maximum(ds, 0.0), precision=HIGHEST)
    _, mu = lax.fori_loop(0, iters, body, (x0, jnp.zeros((), ds.dtype)))
    # rounding margin: a quotient may exceed mu by a few ulps
    return jnp.where(mu > 0, 1.0 / (mu * (1.0 + 1e-6)), jnp.inf)


def path_init(C2, s0, lam0, cap) -> NewtonState:
    """Initial :class:`NewtonState` from a feasible ``s0`` (``C2 = 2C``, correlation scale, ``lam0`` an array)."""
    s = _interior_start(C2, s0, cap, lam0)
    inf = jnp.asarray(jnp.inf, C2.dtype)
    return NewtonState(s, lam0 / s, lam0 / (cap - s), jnp.asarray(lam0, C2.dtype), jnp.int32(0), inf, jnp.int32(0))


def path_step(st: NewtonState, C2, cap, tol, mu=0.1, center=0.3, patience=PATIENCE) -> NewtonState:
    r"""One primal-dual Newton step of the path follower (``C2 = 2C``, correlation scale).

    The step of :func:`_path_step` from a state alone (it factors ``2C - diag s`` itself).
    """
    return _path_step(st, jnp.linalg.cholesky(C2 - jnp.diag(st.s)), C2, cap, tol, mu, center, patience)[0]


def _path_step(st: NewtonState, L, C2, cap, tol, mu=0.1, center=0.3, patience=PATIENCE):
    r"""One primal-dual Newton step from ``st`` and the Cholesky factor ``L`` of ``2C - diag(st.s)``.

    Returns ``(new state, Cholesky factor of 2C - diag(new.s))``, which the
    next step's direction uses (:func:`solve_path`).

    Solves for the direction of :func:`_newton_direction`; the step goes 99%
    of the way to the box boundary and is shortened (factor 0.7) until it
    keeps a fraction to the boundary of the positive definite cone: ``t`` is
    taken only if ``2C - diag(s + t ds / f)`` is positive definite (Cholesky
    test, ``f = 0.7``), so that ``2C - diag(s_new) >= (1 - f) (2C - diag s)``
    (the matrix is affine in ``t``). ``lam <- mu lam`` once the Newton
    decrement is below ``center``. The certificate at the current iterate
    updates the best dual bound and the stall score: 4 per centred and 1 per
    uncentred step that does not shrink the certified gap, reset by one that
    does (:func:`path_terminate` stops at ``patience``, the rounding floor of
    the certificate, typically ~1e-6 relative).

    Why the fraction: a step to the edge of the cone (the test at ``t``
    itself, before session 23) could leave ``2C - diag s`` with eigenvalues
    of 1e-9 while ``lam`` was still 1e-3. There the Newton directions shrink
    to nothing, the certificate (built from ``(2C - diag s)^{-1}``) is
    useless, and the path stalled. On raw sample correlations (a valid,
    ill-conditioned input), 10 of 24 designs (block, AR(1), factor and
    equicorrelated laws, p = 200 and 400, n/p = 1.15, 1.5 and 3) stopped
    ``stagnated``, some with a certified gap of 70% (p = 400, n = 1200
    block design: 88.1 against a bound of 152.0; cvxpy + SCS gives 36.577 at
    p = 300, n = 600 where the path had stopped at 36.481). With the fraction
    21 of 24 are certified and the other 3 stop within 1e-4 of their bound;
    the 24 took 1572 steps against 1907.

    Each step costs three Cholesky factorisations (the Newton system, the
    test of the accepted step, the factor of the new iterate), a triangular
    inverse and one product, ``O(p^3)`` like a coordinate sweep. Shortenings
    that a Rayleigh-quotient bound (:func:`_pd_step_bound`) proves infeasible
    are skipped without a factorisation, so the accepted step is the one the
    tests would reach.
    """
    inf = jnp.asarray(jnp.inf, st.s.dtype)
    ds, dz0, dz1, h, dec, Linv = _newton_direction(C2, st.s, st.z0, st.z1, st.lam, cap, L)
    dual, _ = gap_from_inverse_diag(st.s, h, st.lam)
    dual = jnp.where(jnp.isfinite(dual), dual, inf)
    tp = jnp.minimum(_common.max_step(st.s, ds), _common.max_step(cap - st.s, -ds))

    ds_far = ds / _PD_FRACTION  # the test direction: PD at t / _PD_FRACTION (fraction to the boundary)

    def shrink(c):
        t, k, _, _ = c
        return (t * 0.7, k + 1, *_common.cholesky_if_pd(C2, st.s + 0.7 * t * ds_far))

    # shortenings that provably end outside the PD cone are skipped without a factorisation
    # (the same sequence of step lengths: the accepted step is the one the tests would reach)
    t_pd = _pd_step_bound(Linv, ds_far)
    tp, k0 = lax.while_loop(
        lambda c: (c[1] < 40) & (c[0] >= t_pd), lambda c: (c[0] * 0.7, c[1] + 1), (tp, jnp.int32(0))
    )
    init = (tp, k0, *_common.cholesky_if_pd(C2, st.s + tp * ds_far))
    tp, _, pd, _ = lax.while_loop(lambda c: (c[1] < 40) & ~c[2], shrink, init)
    # the accepted iterate's own factor (the test's is further out); PD at t / f makes
    # 2C - diag(s + t ds) PD, but near-singular 2C can still fail its Cholesky in rounding
    pd_here, L_try = _common.cholesky_if_pd(C2, st.s + jnp.where(pd, tp, 0.0) * ds)
    # the iterate never leaves the PD cone: a step that is still not PD after
    # 40 shortenings (near-singular 2C, rounding), or whose own factorisation fails, is not taken
    pd = pd & pd_here
    tp = jnp.where(pd, tp, 0.0)
    td = jnp.minimum(_common.max_step(st.z0, dz0), _common.max_step(st.z1, dz1))
    s_new = st.s + tp * ds
    L_new = jnp.where(pd, L_try, L)
    best = jnp.minimum(st.dual, dual)
    sum_new = jnp.sum(s_new)
    # progress = the certified gap shrinks (a better bound or a better iterate)
    improved = ((best - sum_new) < 0.999 * (st.dual - jnp.sum(st.s))) | ~jnp.isfinite(st.dual)
    # lam stops decreasing once the central-path gap lam * (2p) is far below the
    # target: smaller values only push the iterate onto the rounding floor of the
    # PD boundary without improving what the certificate can prove
    shrink_lam = (dec < center) & (st.lam * 2 * s_new.shape[0] > 0.05 * tol * jnp.maximum(sum_new, 1e-12))
    # a centred step that decreases lam while the central-path gap lam * 2p is
    # still above the certified gap is progress, not a stall: the certificate
    # cannot improve before lam reaches the scale of the gap (near-singular C:
    # OPT ~ 1e-10 is ten decreases of lam away from lam0 / p)
    waiting = shrink_lam & (st.lam * 2 * s_new.shape[0] > st.dual - jnp.sum(st.s))
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
        jnp.where(improved | waiting, jnp.where(improved, 0, st.stall), st.stall + jnp.where(dec < center, 4, 1)),
    )
    ok = jnp.all(jnp.isfinite(new.s)) & jnp.all(jnp.isfinite(ds))
    # a non-finite step keeps the last iterate and stops the path (stall = patience)
    kept = st._replace(stall=jnp.int32(patience))
    # the next step's factor: the accepted step's, or the current one when no step was taken
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, kept), jnp.where(ok & pd, L_new, L)


def relative_gap(st) -> jax.Array:
    """``(dual - 1^T s) / 1^T s`` of a :class:`NewtonState`."""
    tot = jnp.maximum(jnp.sum(st.s), 1e-12)
    return (st.dual - jnp.sum(st.s)) / tot


def path_terminate(st: NewtonState, tol, patience=PATIENCE):
    """``(done, code)``: certified to ``tol`` (``successful``) or stall score at ``patience`` (``stagnated``)."""
    certified = relative_gap(st) <= tol
    done = certified | (st.stall >= patience)
    return done, jnp.where(certified, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)


def _snap_to_cap(C2, s, z0, z1, cap):
    """Move coordinates whose upper bound is active (multiplier ``z1`` of order 1,
    dominating ``z0``) exactly onto ``cap`` when that keeps ``2C - diag s``
    positive definite: an interior method only approaches the bound to ``~lam``."""
    active = (z1 > 0.5) & (z1 > 10.0 * z0)
    x = jnp.where(active, cap, s)
    return jnp.where(_common.is_pd(C2, x) & (jnp.sum(x) >= jnp.sum(s)), x, s)


def solve_path(C, s0, lam0, cap, tol, max_steps) -> Iteration:
    r"""Run the path follower from ``s0`` until certified, stagnated or ``max_steps`` steps.

    Stops when ``(dual - 1^T s) <= tol * 1^T s``, after ``max_steps`` steps,
    or when the bound has not improved over 8 consecutive centred iterates or
    32 uncentred steps. Bound-active coordinates of the final iterate are then
    snapped onto the cap (:func:`_snap_to_cap`). Correlation scale; ``lam0``
    an array.

    A path that stops ``stagnated`` is handed to the subspace certificate
    (:func:`~jaxknock.svector.certificate.subspace_dual`), up to
    ``_RESCUES`` times: its bound replaces the best one when lower, and when
    it at least halves the certified gap the stall score is reset and the
    path goes on (the steps still count against ``max_steps``). At degenerate
    optima (AR(1), ``rho >= 0.98``) the barrier dual is a poor certificate
    while the path still creeps towards the optimum in uncentred steps; the
    stall test, fed by that certificate alone, stopped it with gaps of
    0.2-1.2% (``p = 100-500``). The rescue runs in ``while_loop`` rounds that
    a path ending otherwise never enters, so those solves are unchanged, bit
    for bit, and cost nothing more (also under ``vmap``).
    """
    C2 = 2.0 * C
    st0 = path_init(C2, s0, lam0, cap)

    def run(carry, budget):
        # the state carries the Cholesky factor of 2C - diag s (see _path_step)
        return iterative_solve(
            carry,
            lambda c: _path_step(c[0], c[1], C2, cap, tol),
            lambda c: path_terminate(c[0], tol),
            max_steps=budget,
            finite=lambda c: jnp.all(jnp.isfinite(c[0].s)),
        )

    def go_on(c):
        it, rounds, improved = c
        stuck = (it.result == RESULTS.stagnated) & (rounds <= _RESCUES) & improved
        return (rounds == 0) | stuck

    def rescue(c):
        todo, st, _ = c
        total = jnp.sum(st.s)
        dual = subspace_dual(C, st.s, st.lam, st.dual, tol * jnp.maximum(total, 1e-12))
        best = jnp.minimum(st.dual, dual)
        improved = (best - total) <= 0.5 * (st.dual - total)
        return ~todo, st._replace(dual=best, stall=jnp.where(improved, jnp.int32(0), st.stall)), improved

    def round_(c):
        # round 0 is the path itself, later rounds first try the subspace certificate: one trace of
        # the path. The rescue is a while_loop of at most one trip, not a cond: under vmap a cond
        # runs both branches for every element, a while_loop only when some element needs it.
        it, rounds, _ = c
        st, L = it.state
        _, st, improved = lax.while_loop(lambda r: r[0], rescue, (rounds > 0, st, jnp.ones((), bool)))
        more = run((st, L), jnp.asarray(max_steps, jnp.int32) - it.num_steps)
        return Iteration(more.state, more.result, it.num_steps + more.num_steps), rounds + 1, improved

    L0 = jnp.linalg.cholesky(C2 - jnp.diag(st0.s))
    init = Iteration((st0, L0), jnp.int32(RESULTS.successful), jnp.int32(0))
    it, _, _ = lax.while_loop(go_on, round_, (init, jnp.int32(0), jnp.ones((), bool)))
    st = it.state[0]
    return it._replace(state=st._replace(s=_snap_to_cap(C2, st.s, st.z0, st.z1, cap)))


# --------------------------------------------------------------------------
# public init / step
# --------------------------------------------------------------------------


def _problem(Sigma, scale=1.0):
    # m knockoffs: the one-knockoff problem on scale * C, scale = (m+1)/(2m) (as in sdp)
    C = scale * to_correlation(Sigma)
    return 2.0 * C, jnp.minimum(1.0, 2.0 * jnp.diagonal(C))


def newton_init(Sigma, *, lam0: float | None = None, s0=None, num_knockoffs: int = 1) -> NewtonState:
    """Initial :class:`NewtonState` of :func:`~jaxknock.sdp` (``method="newton"``).

    ``s0`` (covariance scale, default 0; feasible, ``ValueError`` otherwise) is pushed strictly inside the box;
    the barrier starts at ``lam0 / p`` (``lam0`` default :func:`default_lam0`), as in
    :func:`~jaxknock.sdp`. Drive it with :func:`newton_step`.
    ``num_knockoffs = m`` starts the ``m``-knockoff problem
    ``diag(s) <= (m+1)/m C`` of :func:`~jaxknock.sdp`; pass the same ``m`` to
    :func:`newton_step`.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(4, dtype=jnp.float64) + 0.5
        >>> st = newton_init(C)
        >>> for _ in range(3):
        ...     st = newton_step(st, C)
        >>> int(st.step)
        3
    """
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False)
    m = _checks.check_num_knockoffs(num_knockoffs)
    p = Sigma.shape[-1]
    _common.check_start(lam0, s0, p)
    C2, cap = _problem(Sigma, _common.multi_scale(m))
    s = jnp.zeros(p, C2.dtype) if s0 is None else jnp.asarray(s0, C2.dtype) / jnp.diagonal(Sigma)
    if s0 is not None:
        _common.check_start_feasible(C2, s, cap, strict=False)
    lam = jnp.asarray((default_lam0(p) if lam0 is None else float(lam0)) / p, C2.dtype)
    return path_init(C2, s, lam, cap)


@jax.jit
def _newton_step(state, Sigma, tol, scale):
    C2, cap = _problem(Sigma, scale)
    return path_step(state, C2, cap, tol)


def newton_step(state: NewtonState, Sigma, *, tol: float = 1e-5, num_knockoffs: int = 1) -> NewtonState:
    r"""One Newton step of :func:`~jaxknock.sdp` (``method="newton"``): exactly the step its loop drives.

    On the correlation matrix ``C`` with box cap ``c = min(1, 2 diag C)`` the
    path follower maximises, for a decreasing barrier parameter ``lam``,

    ``1^T s + lam (log det(2C - diag(s)) + sum_j log s_j + sum_j log(c_j - s_j))``

    (the box handled primal-dually through the multipliers ``z0``, ``z1``). One
    step solves for the primal-dual Newton direction, takes the longest step
    that stays 99% inside the box and keeps ``2C - diag(s)`` a fixed fraction
    inside the positive definite cone, evaluates the duality certificate of
    :func:`~jaxknock.svector.certificate.gap_from_inverse_diag` at the new
    iterate (``dual`` keeps the best bound) and sets ``lam <- 0.1 lam`` once
    the iterate is centred. As ``lam -> 0`` the iterate approaches the
    knockoff SDP ``max 1^T s`` s.t. ``diag(s) <= 2C``, ``0 <= s <= c``.

    Args:
        state: :class:`NewtonState` from :func:`newton_init` or a previous step.
        Sigma: the ``(p, p)`` covariance the state was started on (float64).
        tol: relative gap target of the solve (it stops the decrease of ``lam``
            once ``lam * 2p`` is far below it).
        num_knockoffs: as in :func:`newton_init` (traced: a new ``m`` does not recompile).

    Returns:
        The next :class:`NewtonState` (``step`` one larger). The result code of
        a state is ``path_terminate(state, tol)``; ``state.dual - sum(state.s)``
        is its certified gap (correlation scale).

    Example:
        >>> import numpy as np
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.2 * jnp.eye(4, dtype=jnp.float64) + 0.8  # equicorrelated, rho = 0.8: s = 2 (1 - rho)
        >>> st = newton_init(C)
        >>> for _ in range(100):
        ...     st = newton_step(st, C)
        ...     done, code = path_terminate(st, 1e-5)
        ...     if done:
        ...         break
        >>> RESULTS(int(code)).name, np.round(np.asarray(st.s), 3).tolist()
        ('successful', [0.4, 0.4, 0.4, 0.4])
        >>> bool(st.dual - jnp.sum(st.s) <= 1e-5 * jnp.sum(st.s))  # the certified gap
        True
    """
    scale = _common.multi_scale(_checks.check_num_knockoffs(num_knockoffs))
    return _newton_step(state, jnp.asarray(Sigma), _checks.traced_float(tol), scale)  # one program for any scalar type
