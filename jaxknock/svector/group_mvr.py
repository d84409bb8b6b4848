r"""Group MVR: minimum variance-based reconstructability with block-diagonal ``S`` (``group_s_matrix(method="mvr")``).

Definition (Spector & Janson 2022, the group form knockpy solves; Chu et al.
2024 for ``m`` knockoffs): with ``m`` simultaneous knockoffs the joint
covariance ``G`` of ``[X, X~1..X~m]`` has the eigen-blocks ``(m+1) C - m S``
(once) and ``S`` (``m`` times), so ``tr(G^{-1})`` is, with ``c = (m+1)/m``
and ``A = c C - S``,

.. math:: f(S) = \tfrac1m \mathrm{tr}(A^{-1}) + m\,\mathrm{tr}(S^{-1})
          = \tfrac1m \mathrm{tr}\big((cC - S)^{-1}\big) + m \sum_g \mathrm{tr}(S_g^{-1}),

minimised over block-diagonal ``S = blockdiag(S_g) > 0`` with ``A > 0``, on
the correlation matrix ``C`` (``Sigma`` is scaled to unit diagonal first and
``S`` mapped back by ``D^{1/2} S D^{1/2}``, the convention of
:func:`~jaxknock.mvr` and knockpy). For singleton groups this is exactly the
:func:`~jaxknock.mvr` objective. ``f`` is convex (``X -> tr X^{-1}`` is convex
on PD matrices and both arguments are affine in ``S``).

**Stationarity.** ``grad_g f = (Q_gg) / m - m S_g^{-2}`` with ``Q = A^{-2}``,
so the optimum satisfies ``S_g = T_g := m (Q_gg)^{-1/2}`` for every group.

**Solver.** Every step moves all blocks at once towards ``T``:
``S <- S + alpha (T - S)`` with backtracking (``alpha = 1, 1/2, ...``) until
``A`` and every ``S_g`` are positive definite and ``f`` does not increase.
A full step must also decrease ``f`` by ``1e-4 |<grad f, T - S>|``
(Armijo): for ``C`` block diagonal along the groups and ``m = 1``, ``T`` is
``S`` reflected through the optimum (``C = I``: ``T = 2I - S``, ``f(T) = f(S)``),
and accepting that tie would swap ``S`` and ``T`` forever.
``T - S`` is a descent direction: with ``Q_gg = m^2 T_g^{-2}``,
``<grad f, T - S> = m sum_g tr((T_g^{-2} - S_g^{-2})(T_g - S_g)) <= 0``,
the monotonicity of the gradient ``-X^{-2}`` of the convex ``tr X^{-1}``
(equality only at ``T = S``, the optimum). One step: a Cholesky factorisation
and a triangular inverse of the ``(G b) x (G b)`` matrix ``A``, the blocks
``Q_gg = (A^{-1})_{:g}^T (A^{-1})_{:g}`` and one batched ``b x b``
eigendecomposition of the ``G`` blocks (``b`` the largest group size), all on
the padded ``G x b`` layout (padding slots are independent unit coordinates
with ``S = 1``, their exact optimum, and drop out).

**Certified gap** (Lagrange duality on ``X = A``, as :mod:`jaxknock.svector.mrc`
for ``m`` knockoffs): for every ``Z > 0``,
``g(Z) = (2/sqrt m) tr Z^{1/2} + 2 sqrt(m) sum_g tr (Z_gg)^{1/2} - c tr(Z C) <= f*``.
At ``Z = A^{-2} / m``:

.. math:: f(S) - g = \sum_g \mathrm{tr}\big(m S_g^{-1} - 2 Q_{gg}^{1/2} + \tfrac1m Q_{gg} S_g\big) \ge f(S) - f^*,

zero exactly at ``S_g = T_g``; for singleton groups it is
``sum_j (m - s_j ||A^{-1} e_j||)^2 / (m s_j)``, the gap of :func:`~jaxknock.mvr`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS
from jaxknock.covariance import to_correlation
from jaxknock.svector import mrc
from jaxknock.svector._common import HIGHEST
from jaxknock.svector.certificate import smallest_eigenvalue

__all__ = ["GroupMVRState", "solve_group_mvr"]

ARMIJO = 1e-4  # sufficient-decrease fraction of a full step


class GroupMVRState(NamedTuple):
    """State of the group MVR descent (correlation scale, padded ``G x b`` layout)."""

    S: jax.Array  # (G, b, b) blocks S_g (padding: identity)
    Q: jax.Array  # (G, b, b) diagonal blocks of A^{-2}, A = c C - S
    objective: jax.Array  # () f(S) over the real slots
    gap: jax.Array  # () certified gap
    certified: jax.Array  # () bool: every group's term of the gap within tol of its term of f
    stuck: jax.Array  # () bool: the last line search found no decrease (rounding floor)


def _padded_correlation(Sigma, members):
    """``C`` permuted into the group layout ``(G b, G b)``; padding slots are independent unit coordinates."""
    p = Sigma.shape[-1]
    C = to_correlation(Sigma)
    idx = members.reshape(-1)
    valid = idx < p
    safe = jnp.where(valid, idx, 0)
    Cp = jnp.where(valid[:, None] & valid[None, :], C[safe[:, None], safe[None, :]], 0.0)
    return Cp + jnp.diag((~valid).astype(C.dtype)), C


def _block_sqrt_and_target(Q, m):
    """``(Q_gg^{1/2}, T_g = m Q_gg^{-1/2})`` by one batched eigendecomposition of the ``b x b`` blocks."""
    w, V = jnp.linalg.eigh(0.5 * (Q + jnp.swapaxes(Q, 1, 2)))
    w = jnp.maximum(w, jnp.finfo(Q.dtype).tiny)
    root = jnp.einsum("gik,gk,gjk->gij", V, jnp.sqrt(w), V, precision=HIGHEST)
    target = jnp.einsum("gik,gk,gjk->gij", V, m / jnp.sqrt(w), V, precision=HIGHEST)
    return root, target


def _real_trace(M, realb):
    """Per group, the trace of ``M_g`` over its real (not padding) slots."""
    return jnp.sum(jnp.where(realb, jnp.diagonal(M, axis1=1, axis2=2), 0.0), axis=1)


def solve_group_mvr(Sigma, members, c, m, tol, max_steps):
    """Group MVR on the padded layout of ``members`` (``(G, b)``, ``p`` marks padding); traceable.

    Returns ``(blocks, iteration, stats)``: ``blocks`` ``(G, b, b)`` on the
    covariance scale (padding not yet zeroed), the :class:`~jaxknock._iterate.Iteration`
    and ``stats`` ``{objective, gap}`` (correlation scale).
    """
    p = Sigma.shape[-1]
    G, b = members.shape
    n = G * b
    Cp, _ = _padded_correlation(Sigma, members)
    real = (members < p).reshape(-1)
    realb = real.reshape(G, b)
    eye_n = jnp.eye(n, dtype=Cp.dtype)
    eye_b = jnp.broadcast_to(jnp.eye(b, dtype=Cp.dtype), (G, b, b))
    pad_b = eye_b * (~realb)[:, :, None]

    def dense(S):
        return jnp.einsum("gij,gh->gihj", S, jnp.eye(G, dtype=S.dtype)).reshape(n, n)

    def evaluate(S):
        """``(ok, f, Linv)``: feasibility, objective over the real slots, ``L^{-1}`` of ``A``."""
        L = jnp.linalg.cholesky(c * Cp - dense(S))
        LS = jnp.linalg.cholesky(S)
        ok = jnp.all(jnp.isfinite(L)) & jnp.all(jnp.isfinite(LS))
        L = jnp.where(ok, L, eye_n)
        LS = jnp.where(ok, LS, eye_b)
        Linv = lax.linalg.triangular_solve(L, eye_n, left_side=True, lower=True)
        LSinv = lax.linalg.triangular_solve(LS, eye_b, left_side=True, lower=True)
        # diag(A^{-1}) = squared column norms of L^{-1}; diag(S_g^{-1}) likewise (real slots only:
        # A and S are block diagonal between real and padding slots, so these entries are exact)
        trA = jnp.sum(jnp.where(real, jnp.sum(Linv * Linv, axis=0), 0.0))
        trS = jnp.sum(jnp.where(realb, jnp.sum(LSinv * LSinv, axis=1), 0.0))
        return ok, trA / m + m * trS, Linv

    def q_blocks(Linv):
        Ainv = jnp.matmul(Linv.T, Linv, precision=HIGHEST).reshape(n, G, b)
        return jnp.einsum("kgi,kgj->gij", Ainv, Ainv, precision=HIGHEST)

    def group_terms(S, Q):
        """Each group's term of the gap and its term ``m tr(S_g^{-1})`` of ``f`` (real slots only)."""
        root, _ = _block_sqrt_and_target(Q, m)
        Sinv = jnp.linalg.inv(S)
        per = m * Sinv - 2.0 * root + jnp.einsum("gij,gjk->gik", Q, S, precision=HIGHEST) / m
        return _real_trace(per, realb), m * _real_trace(Sinv, realb)

    def certificate(S, Q):
        """``(gap, certified)``: the certified gap, and whether every group's term of it is at most ``tol``
        times its term of ``f``. With a near copy in another group, ``m tr(S_g^{-1})`` of that pair dominates
        ``f`` and ``gap <= tol f`` alone certified nothing about the other groups (the dense
        :func:`~jaxknock.svector.mrc.mvr_coordinates_certified`; for singleton groups the same test)."""
        per, fterm = group_terms(S, Q)
        return jnp.sum(per), jnp.all(per <= tol * fterm)

    # start: S = t I with t = min(1, c lambda_min(C)) / 2 (strictly feasible), padding at its optimum 1
    t = 0.5 * jnp.clip(c * smallest_eigenvalue(Cp), 0.0, 1.0)
    S0 = t * (eye_b - pad_b) + pad_b
    _, f0, Linv0 = evaluate(S0)
    Q0 = q_blocks(Linv0)
    init = GroupMVRState(S0, Q0, f0, *certificate(S0, Q0), jnp.zeros((), bool))

    def step(state):
        S = state.S
        _, target = _block_sqrt_and_target(state.Q, m)
        D = target - S
        D = 0.5 * (D + jnp.swapaxes(D, 1, 2))
        # directional derivative <grad f, D> (<= 0), grad_g = Q_gg / m - m S_g^{-2}
        Sinv = jnp.linalg.inv(S)
        grad = state.Q / m - m * jnp.einsum("gij,gjk->gik", Sinv, Sinv, precision=HIGHEST)
        slope = jnp.minimum(jnp.sum(grad * D), 0.0)

        def attempt(alpha):
            ok, f, Linv = evaluate(S + alpha * D)
            # the full step must decrease f sufficiently (Armijo): T is a reflection of S through the optimum
            # when C is block diagonal along the groups and m = 1 (C = I: T = 2I - S, f(T) = f(S)), and a
            # full step that only ties would oscillate S <-> T forever; shorter steps need no increase
            enough = jnp.where(alpha < 1.0, f <= state.objective, f <= state.objective + ARMIJO * alpha * slope)
            return alpha, ok & enough, f, Linv

        def cond(carry):
            alpha, ok, _, _ = carry
            return (~ok) & (alpha > 1e-10)

        alpha, ok, f, Linv = lax.while_loop(
            cond, lambda carry: attempt(0.5 * carry[0]), attempt(jnp.asarray(1.0, S.dtype))
        )
        S_new = jnp.where(ok, S + alpha * D, S)
        Q = jnp.where(ok, q_blocks(Linv), state.Q)
        return GroupMVRState(S_new, Q, jnp.where(ok, f, state.objective), *certificate(S_new, Q), ~ok)

    def terminate(state):
        done = (state.gap <= tol * jnp.maximum(1.0, jnp.abs(state.objective))) & state.certified
        code = jnp.where(done, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)
        return done | state.stuck, code

    it = iterative_solve(init, step, terminate, max_steps=max_steps, finite=lambda st: jnp.all(jnp.isfinite(st.S)))
    # near the rounding floor A^{-1} is the inverse of another matrix and the gap formula certifies nothing
    # (it even came out negative): add the residual bound of mrc.inverse_error, once, at the end
    _, _, Linv = evaluate(it.state.S)
    H = jnp.matmul(Linv.T, Linv, precision=HIGHEST)
    S_dense = dense(it.state.S)
    err = mrc.inverse_error("mvr", c * Cp, H, m, lambda H: jnp.matmul(S_dense, H, precision=HIGHEST))
    gap = jnp.maximum(it.state.gap, 0.0) + err
    # (a successful result already has every group certified: terminate requires it)
    it = it._replace(result=mrc.recertified(it.result, gap, it.state.objective, tol).astype(jnp.int32))
    # back to the covariance scale: S_g <- D_g^{1/2} S_g D_g^{1/2}
    sd = jnp.sqrt(jnp.diagonal(Sigma))
    scale = jnp.where(realb, sd[jnp.where(realb, members, 0)], 1.0)
    blocks = it.state.S * scale[:, :, None] * scale[:, None, :]
    stats = {"gap": gap, "objective": it.state.objective}
    return blocks, it, stats
