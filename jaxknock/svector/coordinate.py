r"""Dense barrier coordinate ascent for the knockoff SDP (FANOK thesis Algorithm 4, blocked).

``sdp(Sigma, method="coordinate")``: cyclic exact coordinate ascent on

.. math:: \max_{0 \le s \le 1}\ 1^T s + \lambda \log\det(2C - \mathrm{diag}(s))

with ``lam`` decreased between sweeps. The lower Cholesky factor of
``A = 2C - diag(s)`` is kept current by blocked rank-``b`` updates between
Newton re-centrings (each time ``lam`` has dropped tenfold, and at every
certificate: the only re-factorisations). Three layers: :func:`sdp_init` / :func:`sdp_step` (public),
:func:`sweep_step` / :func:`sweep_terminate` (correlation-scale arrays) and
:func:`solve_sweeps`, which drives them with
:func:`jaxknock._iterate.iterative_solve`.
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
from jaxknock.svector.certificate import centred_dual

__all__ = ["SDPState", "sdp_init", "sdp_step"]

# sweeps in a row whose certified gap improves by < 1% before the ascent is declared stagnated
PATIENCE = 20
# the iterate is Newton-re-centred each time lam has dropped by this factor since the last centring
RECENTRE_EVERY = 10.0


class SDPState(NamedTuple):
    """State of the coordinate method of :func:`~jaxknock.sdp` (correlation scale, padded to ``p_pad``).

    Attributes:
        s: ``(p_pad,)`` current iterate.
        L: ``(p_pad, p_pad)`` lower Cholesky factor of ``2 C - diag(s)``,
            maintained by rank-``b`` updates (re-factorised only at a Newton re-centring).
        lam: barrier parameter used in the next sweep.
        sweep: number of sweeps done (int32).
        gap: certified duality gap after the last sweep (``inf`` until certifying).
        dual: dual objective after the last sweep.
        stall: consecutive certified sweeps whose gap improved by less than 1% (int32).
        lam_centred: ``lam`` at the last Newton re-centring of ``s`` (``lam0`` at the start).
    """

    s: jax.Array
    L: jax.Array
    lam: jax.Array
    sweep: jax.Array
    gap: jax.Array
    dual: jax.Array
    stall: jax.Array
    lam_centred: jax.Array


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
        cent = jnp.maximum(cent, _common.off_centre(s_old, s_new, sigma, lam, cap[i]))
        return G, s_blk.at[i].set(s_new), delta.at[i].set(dlt), cent

    init = (G, s_blk, jnp.zeros_like(s_blk), jnp.zeros((), G.dtype))
    _, s_blk, delta, cent = lax.fori_loop(0, b, body, init)
    return s_blk, delta, cent


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


def pad_correlation(C, b):
    """``C`` padded to a multiple of ``b`` with independent unit-variance coordinates."""
    p = C.shape[-1]
    n = -(-p // b) * b
    if n == p:
        return C
    # padded coordinates are independent unit-variance variables: they decouple
    # from the real ones (zero correlation) and are dropped at the end
    Cp = jnp.eye(n, dtype=C.dtype)
    return Cp.at[:p, :p].set(C)


def default_block(p):
    """Default coordinate block size: 64, or ``~p/4`` (at least 8) for ``p <= 256``."""
    return int(min(p, 64 if p > 256 else max(8, -(-p // 4))))


def sweep_init(C, s, lam) -> SDPState:
    """State at ``s`` (padded, correlation scale) with ``L = chol(2C - diag s)`` (``C`` padded)."""
    inf = jnp.asarray(jnp.inf, C.dtype)
    L = jnp.linalg.cholesky(2.0 * C - jnp.diag(s))
    return SDPState(s, L, lam, jnp.int32(0), inf, inf, jnp.int32(0), lam)


def sweep_step(st: SDPState, Cfull, b, tol, decay, centrality=1.0) -> SDPState:
    """One step of the coordinate method: a sweep, the certificate when worth it, the ``lam`` update.

    ``Cfull`` is the unpadded correlation matrix (the state is padded to a
    multiple of ``b``). Certification starts once ``lam * p <= tol * 1^T s / 4``
    (the barrier dual certifies at best ``~ lam * p``); ``lam <- decay * lam``
    only after sweeps that found the iterate within a factor 2 of the central
    path (:func:`~jaxknock.svector._common.off_centre` at most ``centrality``)
    and while ``lam * p`` is above ``tol * 1^T s / 50``. ``stall`` counts
    certified sweeps whose gap improved by less than 1%.

    Re-centring: each time ``lam`` has dropped :data:`RECENTRE_EVERY`-fold
    since the last one, and at every certificate, ``s`` is replaced by its
    Newton-centred copy at ``lam`` (the point the certificate is built from:
    feasible, barrier objective no lower) and ``L`` is refactorised. Without it
    the ascent falls behind the central path as ``lam`` shrinks (once
    ``2C - diag(s)`` is near singular along a direction spread over many
    coordinates each coordinate can move only ``~lam`` per sweep) and jams
    1e-4 to 5e-3 below OPT, ``stagnated``, on small AR(1), block and
    Ledoit-Wolf matrices; the ~6 re-centrings of a default solve cost about as
    much as a few sweeps each.
    """
    p = Cfull.shape[-1]
    # 2 diag(C) of the padded matrix (padded coordinates have unit variance)
    c2 = jnp.pad(2.0 * jnp.diagonal(Cfull), (0, st.s.shape[0] - p), constant_values=2.0)
    cap = jnp.minimum(1.0, 2.0 * jnp.diagonal(Cfull))
    inf = jnp.asarray(jnp.inf, Cfull.dtype)
    new, cent = _sweep(st, c2, b)
    obj = jnp.maximum(jnp.sum(new.s[:p]), 1e-12)
    floor = _common.lam_floor(Cfull.dtype)
    # at the lam floor the certificate is as tight as it will get: certify anyway
    worth = (new.lam * p <= 0.25 * tol * obj) | (new.lam <= floor)
    # coordinate ascent jams off the central path once lam is small (each coordinate can only move
    # ~lam while A = 2C - diag(s) is near singular along a direction spread over many coordinates):
    # every time lam has dropped RECENTRE_EVERY-fold, and whenever the certificate is built, the
    # iterate is replaced by its Newton-centred copy (feasible, barrier objective no lower), L refactorised
    recentre = worth | (new.lam <= st.lam_centred / RECENTRE_EVERY)

    def centre():
        sc, Lc, dual = centred_dual(Cfull, new.s[:p], new.lam, cap)
        ok = jnp.isfinite(dual)
        s = jnp.where(ok, new.s.at[:p].set(sc), new.s)
        # padded coordinates are decoupled: their block of L (and the zero block below Lc) is kept
        L = jnp.where(ok, new.L.at[:p, :p].set(Lc), new.L)
        return s, L, dual, jnp.where(ok, new.lam, st.lam_centred)

    s_c, L_c, dual, lam_centred = lax.cond(recentre, centre, lambda: (new.s, new.L, inf, st.lam_centred))
    new = new._replace(s=s_c, L=L_c, lam_centred=lam_centred)
    dual = jnp.where(worth, dual, inf)
    gap = dual - jnp.sum(new.s[:p])
    # path following: shrink lam only once the sweep found the iterate near the
    # central path (shrinking it faster makes coordinate ascent jam short of OPT)
    hold = (new.lam * p <= 0.02 * tol * obj) | (cent > centrality)
    stalled = jnp.isfinite(gap) & (gap > 0.99 * st.gap)
    return new._replace(
        gap=gap,
        dual=dual,
        lam=jnp.where(hold, new.lam, jnp.maximum(new.lam * decay, floor)),
        stall=jnp.where(stalled, st.stall + 1, 0),
    )


def sweep_terminate(st: SDPState, p, tol, patience=PATIENCE):
    """``(done, code)``: certified to ``tol`` (``successful``) or ``patience`` stalled sweeps (``stagnated``)."""
    tot = jnp.maximum(jnp.sum(st.s[:p]), 1e-12)
    certified = st.gap / tot <= tol
    done = certified | (st.stall >= patience)
    return done, jnp.where(certified, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)


def solve_sweeps(Cfull, lam0, b, tol, decay, max_steps) -> Iteration:
    """Coordinate sweeps from ``s = 0`` at ``lam0`` until certified, stagnated or ``max_steps`` sweeps."""
    C = pad_correlation(Cfull, b)
    n = C.shape[-1]
    init = sweep_init(C, jnp.zeros(n, C.dtype), jnp.asarray(lam0, C.dtype))
    return iterative_solve(
        init,
        lambda st: sweep_step(st, Cfull, b, tol, decay),
        lambda st: sweep_terminate(st, Cfull.shape[-1], tol),
        max_steps=max_steps,
        finite=lambda st: jnp.all(jnp.isfinite(st.s)),
    )


# --------------------------------------------------------------------------
# public init / step
# --------------------------------------------------------------------------


def sdp_init(Sigma, *, lam0=None, block_size=None, s0=None, num_knockoffs: int = 1) -> tuple[SDPState, int]:
    """Initial :class:`SDPState` of :func:`~jaxknock.sdp` (``method="coordinate"``).

    ``s = s0`` (covariance scale, strictly feasible: ``ValueError`` otherwise) or 0,
    ``L = chol(2C - diag s)``, ``lam = lam0``
    (default 0.5). Returns ``(state, block_size)``. Drive it with
    :func:`sdp_step` (notebooks, debugging). ``num_knockoffs = m`` starts the
    ``m``-knockoff problem ``diag(s) <= (m+1)/m C`` of :func:`~jaxknock.sdp`
    (the ``m = 1`` machinery on ``(m+1)/(2m) C``); pass the same ``m`` to
    :func:`sdp_step`.

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(6, dtype=jnp.float64) + 0.5
        >>> state, b = sdp_init(C)
        >>> for _ in range(3):
        ...     state = sdp_step(state, C, block_size=b)
        >>> int(state.sweep)
        3
    """
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False)
    m = _checks.check_num_knockoffs(num_knockoffs)
    p = Sigma.shape[-1]
    _common.check_start(lam0, s0, p, block_size)  # block_size = 0 ran as the default, -1 crashed in XLA
    b = int(block_size) if block_size is not None else default_block(p)
    C = pad_correlation(_common.multi_scale(m) * to_correlation(Sigma), b)
    n = C.shape[-1]
    s = jnp.zeros(n, C.dtype) if s0 is None else jnp.zeros(n, C.dtype).at[:p].set(s0 / jnp.diagonal(Sigma))
    if s0 is not None:
        C2 = 2.0 * C[:p, :p]
        _common.check_start_feasible(C2, s[:p], jnp.minimum(1.0, jnp.diagonal(C2)), strict=True)
    lam = jnp.asarray(0.5 if lam0 is None else lam0, C.dtype)
    return sweep_init(C, s, lam), b


@jax.jit(static_argnums=(2,))
def _sdp_step(state, Sigma, b, tol, decay, scale):
    return sweep_step(state, scale * to_correlation(Sigma), b, tol, decay)


def sdp_step(
    state: SDPState, Sigma, *, block_size: int, decay: float = 0.8, tol: float = 1e-5, num_knockoffs: int = 1
) -> SDPState:
    r"""One step of :func:`~jaxknock.sdp` (``method="coordinate"``): exactly the step its loop drives.

    The step ascends the barrier problem on the correlation matrix ``C``

    ``max_{0 <= s <= c}  1^T s + lam log det(2C - diag(s))``,  ``c = min(1, 2 diag C)``,

    by one cyclic sweep of exact coordinate maximisations: with
    ``sigma_j = 1 / ((2C - diag s)^{-1})_jj`` the Schur complement of
    coordinate ``j``, the maximiser in ``s_j`` is
    ``s_j <- clip(s_j + sigma_j - lam, 0, c_j)`` (the new Schur complement is
    ``lam`` at an interior optimum). Then the certified gap is computed once
    ``lam`` is small enough for it to be tight, and ``lam <- decay * lam`` if
    the sweep found the iterate near the central path (see :func:`sweep_step`).
    As ``lam -> 0`` the iterate approaches the knockoff SDP
    ``max 1^T s`` s.t. ``diag(s) <= 2C``, ``0 <= s <= 1``.

    Args:
        state: :class:`SDPState` from :func:`sdp_init` or a previous step.
        Sigma: the ``(p, p)`` covariance the state was started on (float64).
        block_size: the block size returned by :func:`sdp_init`.
        decay: factor of the barrier decrease.
        tol: relative gap target of the solve.
        num_knockoffs: as in :func:`sdp_init` (traced: a new ``m`` does not recompile).

    Returns:
        The next :class:`SDPState` (``sweep`` one larger). The result code of a
        state is ``sweep_terminate(state, p, tol)``; ``state.s[:p]`` is the
        iterate on the correlation scale (multiply by ``diag(Sigma)``).

    Example:
        >>> import numpy as np
        >>> from jaxknock.svector.coordinate import sweep_terminate
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.2 * jnp.eye(6, dtype=jnp.float64) + 0.8  # equicorrelated, rho = 0.8: s = 2 (1 - rho)
        >>> state, b = sdp_init(C)
        >>> for _ in range(200):
        ...     state = sdp_step(state, C, block_size=b)
        ...     done, code = sweep_terminate(state, 6, 1e-5)
        ...     if done:
        ...         break
        >>> RESULTS(int(code)).name, np.round(np.asarray(state.s[:6]), 3).tolist()
        ('successful', [0.4, 0.4, 0.4, 0.4, 0.4, 0.4])
    """
    scale = _common.multi_scale(_checks.check_num_knockoffs(num_knockoffs))
    tol, decay = _checks.traced_float(tol), _checks.traced_float(decay)  # one program whatever their scalar type
    return _sdp_step(state, jnp.asarray(Sigma), int(block_size), tol, decay, scale)
