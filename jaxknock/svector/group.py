r"""Group knockoffs: block-diagonal ``S`` matrices (Dai & Barber 2016; Chu et al. 2024).

Group knockoffs exchange whole groups of features: with a partition of the
``p`` features into groups ``g``, ``S`` is block diagonal, ``S = blockdiag(S_g)``,
and Gaussian knockoffs need

.. math:: S_g \succeq 0 \ \text{for every } g, \qquad \tfrac{m+1}{m}\Sigma - S \succeq 0

(``m`` simultaneous knockoffs; ``m = 1`` gives ``2 Sigma - S >= 0``).

* :class:`BlockDiagonal` - the value of a group solve: the blocks padded to a
  common size ``b`` and stacked ``(G, b, b)``, with the group index;
  :meth:`BlockDiagonal.dense` builds the ``p x p`` matrix.
* :func:`group_index` - the group structure of a label vector (host side).
* :func:`group_s_matrix` - equicorrelated, SDP, maximum-entropy and MVR group
  ``S`` (see its docstring for the definitions and algorithms).

Batching: every per-group computation (block Cholesky factors, inverses,
square roots) runs on the padded ``(G, b, b)`` stack in one vmapped call; the
padding of a block smaller than ``b`` is the identity (so Cholesky factors,
inverses and log-determinants of padded blocks are exact for the real part and
trivial for the pad).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks, _containers, _sigma_checks
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.covariance import to_correlation
from jaxknock.svector import _common, group_mvr
from jaxknock.svector.certificate import smallest_eigenvalue

__all__ = ["BlockDiagonal", "Groups", "group_index", "group_s_matrix", "GROUP_METHODS"]

GROUP_METHODS = ("equicorrelated", "sdp", "maxent", "mvr")

HIGHEST = lax.Precision.HIGHEST


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


class Groups(NamedTuple):
    """Index of a partition of ``p`` features into ``G`` groups (see :func:`group_index`).

    Attributes:
        group_of: ``(p,)`` int, the group (``0..G-1``) of each feature.
        position: ``(p,)`` int, the slot of each feature inside its group's block.
        members: ``(G, b)`` int, the feature in each slot (``p`` marks padding).
        sizes: ``(G,)`` int, the group sizes.
        labels: ``(G,)`` the original labels of the groups (numpy, sorted).
    """

    group_of: np.ndarray
    position: np.ndarray
    members: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def block_size(self) -> int:
        return int(self.members.shape[1])


def _names_as_text(g: np.ndarray, name: str) -> np.ndarray:
    """An object array of names (``np.asarray`` of a list of ``str`` mixed with NumPy strings, a
    pandas ``Series`` of names) as a text array; any other object array is refused by name."""
    if g.dtype.kind != "O":
        return g
    flat = g.reshape(-1)
    if flat.size and all(isinstance(v, str) for v in flat):
        return g.astype(str)
    if flat.size and all(isinstance(v, bytes) for v in flat):
        return g.astype(bytes)
    odd = next((v for v in flat if not isinstance(v, str)), flat[0] if flat.size else None)
    raise TypeError(
        f"{name} must hold integer group ids or group names (all strings), one per feature; found {odd!r} "
        f"of type {type(odd).__name__}"
    )


def group_index(groups, p: int | None = None, *, name: str = "groups") -> Groups:
    """The :class:`Groups` index of a vector of group labels (one per feature).

    Labels are integers (e.g. ``[3, 3, 7, 1]``; integer-valued floats, as read
    from a text file, too) or names (strings, e.g. genes or pathways:
    ``["BRCA1", "TP53", "BRCA1"]``). Groups are numbered in the order of their
    sorted labels (numeric order, or code-point order for names), features keep
    their order inside a group, and ``labels`` holds the labels themselves, so a
    selection reports the groups by name. A :class:`Groups` passes through
    unchanged (after the length check).

    Raises:
        TypeError: labels that are neither integers nor names (floats with a
            fractional part, booleans, ``None``, a mixture of numbers and names).
        ValueError: not a 1-D vector, or its length differs from ``p``, or a float label
            outside the ``int64`` range.

    Example:
        >>> g = group_index([5, 5, 2, 5])
        >>> g.group_of.tolist(), g.members.tolist()
        ([1, 1, 0, 1], [[2, 4, 4], [0, 1, 3]])
        >>> group_index(["TP53", "BRCA1", "TP53"]).labels.tolist()
        ['BRCA1', 'TP53']
    """
    if isinstance(groups, Groups):
        if p is not None and groups.group_of.shape[0] != p:
            raise ValueError(f"{name} describes {groups.group_of.shape[0]} features but there are p = {p}")
        return groups
    if not _checks.is_concrete(groups):
        raise TypeError(f"{name} must be concrete (a numpy/JAX array outside jit): the group sizes fix the shapes")
    g = _names_as_text(np.asarray(_containers.host_numeric(groups, name)), name)  # a masked label is refused
    if g.dtype == bool or g.dtype.kind not in "iufUS":
        raise TypeError(f"{name} must hold integer group ids or group names, one per feature; got dtype {g.dtype}")
    if g.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector of group ids (one per feature), got shape {g.shape}")
    if g.dtype.kind == "f":
        if not np.all(np.isfinite(g)) or np.any(g != np.round(g)):
            bad = g[~np.isfinite(g) | (g != np.round(g))][0]
            raise TypeError(f"{name} must hold integer group ids, one per feature; found the non-integer {bad!r}")
        if np.any(np.abs(g) >= 2.0**63):  # the cast below mapped every such label to -2^63: one merged group
            raise ValueError(
                f"{name} holds the float group id {g[np.abs(g) >= 2.0**63][0]!r}, outside the int64 range; "
                "pass the labels as integers"
            )
        g = g.astype(np.int64)
    if p is not None and g.shape[0] != p:
        raise ValueError(f"{name} has length {g.shape[0]} but there are p = {p} features")
    if g.shape[0] == 0:
        raise ValueError(f"{name} is empty")
    n = g.shape[0]
    labels, group_of, sizes = np.unique(g, return_inverse=True, return_counts=True)
    group_of = group_of.reshape(-1)
    order = np.argsort(group_of, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    position = np.empty(n, np.int64)
    position[order] = np.arange(n) - np.repeat(starts, sizes)
    b = int(sizes.max())
    members = np.full((labels.shape[0], b), n, np.int64)
    members[group_of, position] = np.arange(n)
    return Groups(group_of.astype(np.int32), position.astype(np.int32), members.astype(np.int32), sizes, labels)


class BlockDiagonal(NamedTuple):
    r"""A block-diagonal ``p x p`` matrix stored as padded blocks (a pytree).

    Attributes:
        blocks: ``(G, b, b)``; block ``g`` holds ``S_g`` in its leading
            ``|g| x |g|`` corner and zeros elsewhere.
        members: ``(G, b)`` feature index of each slot (``p`` for padding).
        group_of: ``(p,)`` group of each feature.
        position: ``(p,)`` slot of each feature in its block.

    Example:
        >>> import jax.numpy as jnp
        >>> g = group_index([0, 1, 0])
        >>> S = BlockDiagonal(jnp.array([[[1.0, 0.5], [0.5, 1.0]], [[2.0, 0.0], [0.0, 0.0]]]),
        ...                   *map(jnp.asarray, (g.members, g.group_of, g.position)))
        >>> S.dense().tolist()
        [[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [0.5, 0.0, 1.0]]
    """

    blocks: jax.Array
    members: jax.Array
    group_of: jax.Array
    position: jax.Array

    @property
    def shape(self) -> tuple[int, int]:
        p = self.group_of.shape[-1]
        return (p, p)

    def dense(self):
        """The ``(p, p)`` matrix (``O(p^2)`` memory; leading batch axes of ``blocks`` are kept).

        ``S[i, j] = blocks[g(i), pos(i), pos(j)]`` when ``g(i) = g(j)``, else 0. A value returned
        by ``jax.vmap`` (e.g. of :func:`group_s_matrix`) carries the batch axis on the index
        arrays too; each batch entry is then built from its own index (it was a ``(B, B, B, p)``
        mixture of the entries).
        """
        if self.group_of.ndim > 1:
            return jax.vmap(BlockDiagonal.dense)(self)
        return _dense_of_blocks(self.blocks, self.group_of, self.position)

    def diagonal(self):
        """The ``(p,)`` diagonal ``blocks[g(i), pos(i), pos(i)]`` (``(B, p)`` batched, see :meth:`dense`)."""
        if self.group_of.ndim > 1:
            return jax.vmap(BlockDiagonal.diagonal)(self)
        return self.blocks[..., self.group_of, self.position, self.position]


@jax.jit  # one program where it is called eagerly (the samplers): it was a dozen eager operations
def _dense_of_blocks(blocks, g, pos):
    vals = blocks[..., g[:, None], pos[:, None], pos[None, :]]
    return jnp.where(g[:, None] == g[None, :], vals, 0.0)


def gather_blocks(A, members, pad_identity: bool = True):
    """The ``(G, b, b)`` diagonal blocks ``A[g, g]`` of a dense ``(p, p)`` matrix, padded.

    Padding slots (``members == p``) get the identity (or zeros).
    """
    p = A.shape[-1]
    valid = members < p
    idx = jnp.where(valid, members, 0)
    B = A[idx[:, :, None], idx[:, None, :]]
    mask = valid[:, :, None] & valid[:, None, :]
    b = members.shape[1]
    pad = jnp.eye(b, dtype=A.dtype) * (~valid[:, :, None]) if pad_identity else 0.0
    return jnp.where(mask, B, 0.0) + pad


def block_diagonal(blocks, groups: Groups) -> BlockDiagonal:
    """Wrap padded ``(G, b, b)`` blocks (padding zeroed) with the index of ``groups``."""
    return BlockDiagonal(
        _zero_padding(blocks, jnp.asarray(groups.members), groups.group_of.shape[0]),
        jnp.asarray(groups.members),
        jnp.asarray(groups.group_of),
        jnp.asarray(groups.position),
    )


@functools.partial(jax.jit, static_argnums=2)
def _zero_padding(blocks, members, p):
    valid = members < p
    return jnp.where(valid[:, :, None] & valid[:, None, :], blocks, 0.0)


# --------------------------------------------------------------------------
# Group S solvers
# --------------------------------------------------------------------------


class _Normalised(NamedTuple):
    """``Sigma`` in the padded block-whitened coordinates ``C = B Sigma B^T`` (``P = G b``).

    ``B = blockdiag(L_g^-1)`` with ``L_g L_g^T = Sigma_gg``, so ``C_gg = I``; padding
    slots are independent unit coordinates (``C = I`` there).
    """

    C: jax.Array  # (G, b, G, b)
    L: jax.Array  # (G, b, b) block Cholesky factors of Sigma_gg (identity on padding)
    mask: jax.Array  # (G, b) real slots


def _normalise(Sigma, members):
    p = Sigma.shape[-1]
    G, b = members.shape
    mask = members < p
    idx = jnp.where(mask, members, 0)
    L = jnp.linalg.cholesky(gather_blocks(Sigma, members))
    eye = jnp.broadcast_to(jnp.eye(b, dtype=Sigma.dtype), (G, b, b))
    Linv = jax.scipy.linalg.solve_triangular(L, eye, lower=True)
    cols = jnp.where(mask[None], Sigma[:, idx], 0.0)  # (p, G, b)
    Y = jnp.einsum("pgj,gij->pgi", cols, Linv, precision=HIGHEST)  # Sigma B^T, grouped columns
    rows = jnp.where(mask[:, :, None, None], Y[idx], 0.0)  # (G, b, G, b)
    C = jnp.einsum("gij,gjhk->gihk", Linv, rows, precision=HIGHEST)
    pad = (~mask).astype(Sigma.dtype)
    C = C + jnp.einsum("gi,hk,gh,ik->gihk", pad, pad, jnp.eye(G, dtype=Sigma.dtype), jnp.eye(b, dtype=Sigma.dtype))
    return _Normalised(C, L, mask)


def _flat(C):
    G, b = C.shape[:2]
    M = C.reshape(G * b, G * b)
    return 0.5 * (M + M.T)


def _blocks_of(M, G, b):
    """Diagonal blocks ``(G, b, b)`` of a ``(G b, G b)`` matrix."""
    M4 = M.reshape(G, b, G, b)
    return jnp.einsum("gigj->gij", M4)


def _unwhiten(Sb, L, mask):
    """``S_g = L_g S~_g L_g^T`` with the padding zeroed."""
    S = jnp.einsum("gij,gjk,glk->gil", L, Sb, L, precision=HIGHEST)
    m2 = mask[:, :, None] & mask[:, None, :]
    return jnp.where(m2, S, 0.0)


def _feasible_scale(Cf, c):
    """A ``gamma`` in ``(0, 1]`` with ``c C - gamma I > 0``: halve from 1 until Cholesky succeeds (no eigensolve).

    The halving runs down to the smallest normal number: ``c C`` itself factorises (the solvers' gate), so
    ``c C - gamma I`` does once ``gamma`` is below its rounding (at most ~1000 halvings). It used to stop at
    ``1e-12`` and return that infeasible start when ``lambda_min(c C) < 1e-12`` (a valid, nearly singular
    ``Sigma``): the group SDP then ended ``nonfinite`` and maximum entropy ``max_steps_reached``, both with an
    infeasible ``S`` (``c Sigma - S`` with eigenvalue ``-4.5e-13``) and without one step.
    """
    eye = jnp.eye(Cf.shape[0], dtype=Cf.dtype)
    floor = jnp.finfo(Cf.dtype).tiny

    def bad(gamma):
        return ~jnp.all(jnp.isfinite(jnp.linalg.cholesky(c * Cf - gamma * eye))) & (gamma > floor)

    return 0.5 * lax.while_loop(bad, lambda g: 0.5 * g, jnp.asarray(1.0, Cf.dtype))


def _group_equicorrelated(norm: _Normalised, c):
    lmin = smallest_eigenvalue(_flat(norm.C))
    gamma = jnp.clip(c * lmin, 0.0, 1.0)
    G, b = norm.mask.shape
    eye = jnp.broadcast_to(jnp.eye(b, dtype=lmin.dtype), (G, b, b))
    # a NaN lambda_min is not successful
    code = jnp.where(lmin >= -16 * G * b * jnp.finfo(lmin.dtype).eps, RESULTS.successful, RESULTS.infeasible)
    stats = {"gamma": gamma, "min_eig": lmin, "num_steps": jnp.int32(0), "max_steps": 0}
    return _unwhiten(gamma * eye, norm.L, norm.mask), code.astype(jnp.int32), stats


class GroupSDPState(NamedTuple):
    gamma: jax.Array  # (G,)
    mu: jax.Array  # () barrier weight
    gap: jax.Array  # () certified gap of the current iterate: best dual bound so far - objective
    decrement: jax.Array  # () Newton decrement of the last step
    dual: jax.Array  # () best (smallest) certified dual bound seen so far
    stall: jax.Array  # () int32: consecutive steps without a smaller gap


# the group path stops (``stagnated``) after this many steps in a row without a smaller certified gap
_GROUP_SDP_PATIENCE = 40
# candidate dual scales t / mu of the rescaled certificate (see _group_sdp)
_RESCALED_T = (0.25, 0.5, 1.0, 2.0, 4.0)
# exact coordinate-descent sweeps over the group scales of the final certificate (see _group_sdp)
_POLISH_SWEEPS = 20


def _group_sdp(norm: _Normalised, c, tol, max_steps):
    r"""Barrier path following for ``max w^T gamma`` s.t. ``c C - diag(P gamma) >= 0``, ``0 <= gamma <= 1``.

    Certified when ``gap <= tol f``, ``f = w^T gamma`` (relative, as the ungrouped SDP; plus a rounding
    term ``c n eps``). A path that ends short of ``tol`` (``stagnated`` / ``max_steps_reached``) is
    re-certified once at its final iterate by ``polished_certificate`` and ``subspace_certificate``; the
    iterates never depend on the certificate.

    Dual (every certificate below is a value of it): with ``D(gamma) = blockdiag(gamma_g I_g)``, multipliers
    ``Lambda >= 0`` for the LMI and ``nu, eta >= 0`` for ``gamma <= 1``, ``gamma >= 0``,

    .. math:: \mathcal L = w^T\gamma + \operatorname{tr}(\Lambda (cC - D(\gamma)))
              + \nu^T(1 - \gamma) + \eta^T\gamma
              = c\operatorname{tr}(\Lambda C) + 1^T\nu
              + \sum_g \gamma_g (w_g - \operatorname{tr}_g\Lambda - \nu_g + \eta_g),

    ``tr_g Lambda = sum_{i in g} Lambda_ii``. Its supremum over ``gamma`` is finite iff every bracket is 0,
    so the smallest ``nu`` is ``max(0, w_g - tr_g Lambda)`` and every ``Lambda >= 0`` bounds
    ``OPT <= c tr(Lambda C) + sum_g max(0, w_g - tr_g Lambda)``. At an optimum with ``0 < gamma_g < 1``,
    ``tr_g Lambda = w_g`` and ``Lambda (cC - D(gamma)) = 0``: the dual lives on the null space of
    ``cC - D(gamma)``.
    """
    G, b = norm.mask.shape
    Cf = _flat(norm.C)
    n = G * b
    maskf = norm.mask.reshape(-1).astype(Cf.dtype)
    w = jnp.sum(norm.mask, axis=1).astype(Cf.dtype)  # |g|
    eye = jnp.eye(n, dtype=Cf.dtype)

    def expand(gamma):
        return jnp.repeat(gamma, b) * maskf

    def group_sums(x):  # (n,) -> (G,): the adjoint of expand
        return jnp.sum((x * maskf).reshape(G, b), axis=1)

    def chol(gamma):
        return jnp.linalg.cholesky(c * Cf - jnp.diag(expand(gamma)))

    def inverse(L):
        return jax.scipy.linalg.cho_solve((L, True), eye)

    def certificate(M, mu):
        # Any Lambda >= 0 bounds OPT by c tr(Lambda C) + sum_g max(0, |g| - sum_{i in g} Lambda_ii).
        # (1) Lambda = t M for the best t: convex piecewise linear in t with breakpoints
        #     t = |g| / sum_{i in g} M_ii, so try those (and mu).
        # (2) Lambda = diag(v) M diag(v) with v_i^2 = max(t, |g| / sum_{i in g} M_ii) for i in g, a
        #     congruence of M (so PSD) that lifts every group's diagonal to at least |g|: off the
        #     central path (or with M rounded near the boundary) the groups with t M_gg < |g| cost
        #     their whole deficit in (1) but only gamma_g times it here. t near mu.
        per_group = group_sums(jnp.diagonal(M))
        K = c * M * Cf
        ts = jnp.concatenate([w / per_group, mu[None]])
        plain = ts * jnp.sum(K) + jnp.sum(jnp.maximum(0.0, w[None, :] - ts[:, None] * per_group[None, :]), axis=1)
        ratio = w / per_group
        tr = mu * jnp.asarray(_RESCALED_T, Cf.dtype)
        v = jnp.sqrt(jnp.repeat(jnp.maximum(tr[:, None], ratio[None, :]), b, axis=1)) * maskf  # (T, n)
        rescaled = jnp.einsum("ti,ij,tj->t", v, K, v, precision=HIGHEST)
        dual = jnp.minimum(jnp.min(plain), jnp.min(rescaled))
        return jnp.where(jnp.isfinite(dual), dual, jnp.inf)

    def phi(gamma, L, mu):
        return jnp.dot(w, gamma) + mu * (
            2 * jnp.sum(jnp.log(jnp.diagonal(L))) + jnp.sum(jnp.log(gamma) + jnp.log1p(-gamma))
        )

    gamma0 = jnp.full((G,), _feasible_scale(Cf, c), Cf.dtype)
    mu0 = jnp.asarray(0.1, Cf.dtype)
    dual0 = certificate(inverse(chol(gamma0)), mu0)
    zero = jnp.asarray(0.0, Cf.dtype)
    init = GroupSDPState(gamma0, mu0, dual0 - jnp.dot(w, gamma0), zero, dual0, jnp.int32(0))
    # mu stops shrinking once the central-path gap mu (n + 2G) is far below the tolerance tol f (or the
    # rounding below): smaller values only make 2C - diag(s) numerically singular (the path then breaks
    # down with NaN steps)
    num_barrier_terms = jnp.asarray(jnp.sum(maskf) + 2 * G, Cf.dtype)
    # the objective's rounding level: the Cholesky test that keeps c C - S positive definite has a backward
    # error ~ n eps ||c C||, so where c C is singular to rounding an f of this size (lambda_min(2C) = 2.2e-16:
    # f = 6.7e-16, 1.5x the exact optimum) can be infeasible by all of itself and no relative gap is certified
    rounding = c * jnp.sum(maskf) * jnp.finfo(Cf.dtype).eps

    def certifies(gap, objective):
        # relative to the objective, as the ungrouped SDP (gap <= tol 1^T s): with tol max(1, f) a problem
        # with f << 1 (strongly correlated groups) was "successful" with S 2-4x below the optimum. A zero,
        # negative or NaN objective certifies nothing, whatever the gap (the optimum is positive)
        return gap + rounding <= tol * objective

    def step(state):
        gamma, mu = state.gamma, state.mu
        L = chol(gamma)
        M = inverse(L)
        dM = group_sums(jnp.diagonal(M))
        grad = w + mu * (-dM + 1.0 / gamma - 1.0 / (1.0 - gamma))
        M2 = (M * M * maskf[:, None] * maskf[None, :]).reshape(G, b, G, b).sum(axis=(1, 3))
        H = mu * (M2 + jnp.diag(1.0 / gamma**2 + 1.0 / (1.0 - gamma) ** 2))  # -Hessian, PD
        # solved in the scaled variables gamma / (gamma (1 - gamma)): a group next to a bound
        # has a barrier curvature of mu / gamma^2 (1e18 at gamma = 1e-9), which the scaling evens out
        sc = gamma * (1.0 - gamma)
        Hs = sc[:, None] * H * sc[None, :]
        Lh = jnp.linalg.cholesky(0.5 * (Hs + Hs.T))
        d = sc * jax.scipy.linalg.cho_solve((Lh, True), sc * grad)
        dec = jnp.dot(grad, d) / mu
        f0 = phi(gamma, L, mu)

        def ok(alpha):
            g_new = gamma + alpha * d
            Ln = chol(g_new)
            inside = jnp.all(g_new > 0) & jnp.all(g_new < 1) & jnp.all(jnp.isfinite(Ln))
            f_new = phi(g_new, jnp.where(jnp.isfinite(Ln), Ln, 1.0), mu)
            return inside & (f_new >= f0 + 0.25 * alpha * jnp.dot(grad, d))

        alpha = lax.while_loop(lambda a: (~ok(a)) & (a > 1e-10), lambda a: 0.5 * a, jnp.asarray(1.0, Cf.dtype))
        moved = (alpha > 1e-10) & jnp.all(jnp.isfinite(d))
        gamma_new = jnp.where(moved, gamma + alpha * d, gamma)
        objective = jnp.dot(w, gamma_new)
        floor = 0.05 * jnp.maximum(tol * objective, rounding) / num_barrier_terms
        mu_new = jnp.where(((dec < 0.5) | ~moved) & (mu > floor), 0.2 * mu, mu)
        dual = jnp.minimum(state.dual, certificate(inverse(chol(gamma_new)), mu))
        gap = dual - objective
        stall = jnp.where(gap < 0.999 * state.gap, 0, state.stall + 1)
        return GroupSDPState(gamma_new, mu_new, gap, dec, dual, stall)

    def terminate(state):
        done = certifies(state.gap, jnp.dot(w, state.gamma))
        stuck = state.stall >= _GROUP_SDP_PATIENCE
        return done | stuck, jnp.where(done, RESULTS.successful, RESULTS.stagnated).astype(jnp.int32)

    def polished_certificate(gamma, mu):
        # The bound of Lambda = diag(v) M diag(v), v constant on each group (the family of both
        # candidates above), as a function of v:
        #   F(v) = v^T Kb v + sum_g max(0, |g| - d_g v_g^2),  Kb = block sums of c M o C, d_g = tr M_gg.
        # Near the optimum M ~ U diag(1/lambda) U^T blows up on the null space of c C - S, the
        # barrier Hessian is singular to rounding and Newton cannot centre the iterate: the groups
        # strictly inside (0, 1) keep t d_g above |g| by ~1e-4 relative, which costs gamma_g times
        # that excess in the bound, while the groups at gamma_g = 0 need their (free) excess, so no
        # single t, nor lifting alone, removes it. F is convex in each v_g (Kb_gg = c d_g > d_g):
        # exact coordinate descent from the best candidate lowers the interior groups to exactly
        # |g| and leaves the others; every v gives a valid bound, evaluated in full at the end.
        M = inverse(chol(gamma))
        per_group = group_sums(jnp.diagonal(M))
        K = c * M * Cf * maskf[:, None] * maskf[None, :]
        Kb = K.reshape(G, b, G, b).sum(axis=(1, 3))
        Kb = 0.5 * (Kb + Kb.T)

        def bound(v2):  # v2: (..., G) squared group scales
            v = jnp.sqrt(jnp.repeat(v2, b, axis=-1)) * maskf
            quad = jnp.einsum("...i,ij,...j->...", v, K, v, precision=HIGHEST)
            return quad + jnp.sum(jnp.maximum(0.0, w - per_group * v2), axis=-1)

        ratio = w / per_group
        ts = jnp.concatenate([ratio, mu * jnp.asarray(_RESCALED_T, Cf.dtype)])
        starts = jnp.concatenate([jnp.broadcast_to(ts[:, None], (ts.shape[0], G)), jnp.maximum(ts[:, None], ratio)])
        values = bound(starts)
        best = jnp.argmin(jnp.where(jnp.isfinite(values), values, jnp.inf))
        lo = jnp.sqrt(ratio)

        def coordinate(g, v):
            a, d = Kb[g, g], per_group[g]
            r = jnp.dot(Kb[g], v) - a * v[g]
            inner = jnp.where(a > d, jnp.clip(-r / (a - d), -lo[g], lo[g]), lo[g])
            xs = jnp.stack([v[g], -r / a, inner, lo[g], -lo[g]])
            f = a * xs**2 + 2 * r * xs + jnp.maximum(0.0, w[g] - d * xs**2)
            x = xs[jnp.argmin(jnp.where(jnp.isfinite(f), f, jnp.inf))]
            return v.at[g].set(x)

        v = lax.fori_loop(0, _POLISH_SWEEPS * G, lambda k, v: coordinate(k % G, v), jnp.sqrt(starts[best]))
        dual = jnp.minimum(values[best], bound(v**2))
        return jnp.where(jnp.isfinite(dual), dual, jnp.inf)

    # the near-null eigenvectors of c C - S tried by subspace_certificate: the first r of the k = min(n, G)
    # smallest, for r = 1..8, powers of two and k (static), and r at the largest relative eigenvalue gap (traced)
    k_sub = min(n, G)
    sub_sizes = sorted({min(r, k_sub) for r in range(1, 9)} | {min(2**j, k_sub) for j in range(k_sub.bit_length() + 1)})

    def subspace_certificate(gamma):
        # Near the optimum the dual is supported on the near-null space of A = c C - S (complementary
        # slackness Lambda A = 0), where M = A^-1 is dominated by the eigenvalues 1/lambda_i that the
        # uncentred iterate has wrong (polished_certificate keeps them and can only rescale groups).
        # Here Lambda = Pi D(y) Pi with Pi = V_r V_r^T the projector onto the r eigenvectors of A with the
        # smallest eigenvalues (padding rows zeroed) and D(y) = diag(y_g on group g), y >= 0: PSD by
        # construction, with
        #   tr_g(Lambda) = (H y)_g,  H_gh = sum_{i in g, j in h} Pi_ij^2,
        #   c tr(Lambda C) = q^T y,   q_g = c sum_{i in g} (Pi C Pi)_ii,
        # so the bound q^T y + sum_g max(0, |g| - (H y)_g) is piecewise linear in y. y solves H y = |g|
        # (every group's diagonal exactly |g|, as the dual of an interior optimum needs), clipped at 0 and
        # then scaled by the best s > 0 (breakpoints |g| / (H y)_g). At the optimum
        # q^T y = tr(Lambda S) + tr(Lambda A) = sum_g gamma_g |g| + 0: the bound is f plus the
        # iterate's own suboptimality. The chosen Lambda is formed and its bound evaluated in full.
        A = c * Cf - jnp.diag(expand(gamma))
        lam, U = jnp.linalg.eigh(0.5 * (A + A.T))
        V = U[:, :k_sub] * maskf[:, None]
        Q = _mm(V.T, _mm(Cf, V))  # V^T C V
        # eigenvalues at the rounding level of A (even negative ones) count as one null space
        positive = jnp.maximum(lam, n * jnp.finfo(Cf.dtype).eps * jnp.max(jnp.abs(lam)))
        last = min(k_sub, n - 1)
        widest = jnp.argmax(positive[1 : last + 1] / positive[:last]) + 1 if last > 0 else jnp.int32(k_sub)
        sizes = jnp.concatenate([jnp.asarray(sub_sizes, jnp.int32), jnp.reshape(widest, (1,)).astype(jnp.int32)])

        def weights(r):
            Vr = V * (jnp.arange(k_sub) < r)[None, :]
            Pi = _mm(Vr, Vr.T)
            H = (Pi * Pi).reshape(G, b, G, b).sum(axis=(1, 3))
            H = 0.5 * (H + H.T)
            q = c * group_sums(jnp.sum(_mm(Vr, Q) * Vr, axis=1))
            ridge = jnp.finfo(Cf.dtype).eps * jnp.trace(H) * jnp.eye(G, dtype=Cf.dtype)
            y = jnp.maximum(jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(H + ridge), True), w), 0.0)
            t = _mm(H, y)
            s_all = jnp.where(t > 0, w / t, jnp.inf)
            values = s_all * jnp.dot(q, y) + jnp.sum(jnp.maximum(0.0, w[None, :] - s_all[:, None] * t[None, :]), axis=1)
            values = jnp.where(jnp.isfinite(values), values, jnp.inf)
            j = jnp.argmin(values)
            return values[j], s_all[j] * y

        values, ys = jax.vmap(weights)(sizes)
        best = jnp.argmin(values)
        Vr = V * (jnp.arange(k_sub) < sizes[best])[None, :]
        W = _mm(Vr.T * expand(ys[best])[None, :], Vr)  # V_r^T D(y) V_r
        Lam = _mm(Vr, _mm(0.5 * (W + W.T), Vr.T))
        dual = c * jnp.sum(Lam * Cf) + jnp.sum(jnp.maximum(0.0, w - group_sums(jnp.diagonal(Lam))))
        return jnp.where(jnp.isfinite(dual), dual, jnp.inf)

    it = iterative_solve(init, step, terminate, max_steps=max_steps)
    gamma = it.state.gamma
    objective = jnp.dot(w, gamma)
    # a path that stopped short of the tolerance (stagnated, or out of steps) gets the polished
    # certificate of its final iterate; a solve that certified is left exactly as it was
    unfinished = (it.result == RESULTS.stagnated) | (it.result == RESULTS.max_steps_reached)
    dual = lax.cond(
        unfinished,
        lambda: jnp.minimum(
            it.state.dual, jnp.minimum(polished_certificate(gamma, it.state.mu), subspace_certificate(gamma))
        ),
        lambda: it.state.dual,
    )
    gap = jnp.where(unfinished, dual - objective, it.state.gap)
    certified = unfinished & certifies(gap, objective)
    it = it._replace(result=jnp.where(certified, RESULTS.successful, it.result).astype(jnp.int32))
    Sb = gamma[:, None, None] * jnp.broadcast_to(jnp.eye(b, dtype=Cf.dtype), (G, b, b))
    stats = {"gamma": gamma, "gap": gap, "objective": objective}
    return _unwhiten(Sb, norm.L, norm.mask), it, stats


class GroupMaxentState(NamedTuple):
    S: jax.Array  # (G, b, b) whitened blocks S~_g
    Zb: jax.Array  # (G, b, b) diagonal blocks of (c C - S~)^-1
    gap: jax.Array  # () certified gap
    objective: jax.Array  # () logdet(c C - S~) + m sum_g logdet S~_g over the real (unpadded) slots


def _group_maxent(norm: _Normalised, c, m, tol, max_steps):
    r"""Scaled ascent for ``max logdet(c C - S) + m sum_g logdet S_g`` over block-diagonal ``S``.

    ``m`` knockoffs: ``log det G = p log m + logdet(c C - S) + m sum_g logdet S_g``
    for the joint covariance ``G`` of ``[X, X~1, ..., X~m]`` (Knockoffs.jl's
    ``group_maxent_obj``; the scalar :func:`~jaxknock.maxent` for singletons).
    Direction ``D_g = (m (Z_gg)^-1 - S_g) / (m + 1)`` with ``Z = (c C - S)^-1``:
    the exact block-coordinate maximiser ``m ((Z_gg)^-1 + S_g) / (m + 1)`` of
    every block at once (Knockoffs.jl's block update, applied in parallel), an
    ascent direction since ``<grad, D> = sum_g sum_i (lambda_i - m)^2 / ((m + 1) lambda_i) >= 0``
    for the eigenvalues ``lambda_i`` of ``S_g^{1/2} Z_gg S_g^{1/2}``; backtracking
    keeps ``c C - S`` and every ``S_g`` positive definite. One Cholesky and one
    triangular inverse of the ``(G b) x (G b)`` matrix per step when the full
    step is accepted (the usual case).
    """
    G, b = norm.mask.shape
    Cf = _flat(norm.C)
    n = G * b
    eye_n = jnp.eye(n, dtype=Cf.dtype)
    eye_b = jnp.broadcast_to(jnp.eye(b, dtype=Cf.dtype), (G, b, b))

    def dense_blocks(S):
        return jnp.einsum("gij,gh->gihj", S, jnp.eye(G, dtype=S.dtype)).reshape(n, n)

    real = norm.mask.astype(Cf.dtype)
    # the objective of the real slots: the padding slots are independent of everything (their Cholesky
    # diagonals are sqrt(c - s), sqrt(s)) and are left out (each added -log m at its optimum: the objective
    # depended on the padded layout, and a block-diagonal Sigma's was not the sum of its blocks'). The
    # iteration and the tolerance use the whitened one (C_gg = I); stats report the correlation scale's,
    # which the whitening shifts by (m + 1) sum_g log det R_gg: a constant that is large for strongly
    # correlated groups (-207 for four groups of five at 0.999) and would loosen a tolerance relative to it
    whitening = (m + 1) * 2 * jnp.sum(jnp.log(jnp.diagonal(norm.L, axis1=1, axis2=2)))

    def evaluate(S):
        LA = jnp.linalg.cholesky(c * Cf - dense_blocks(S))
        LS = jnp.linalg.cholesky(S)
        good = jnp.all(jnp.isfinite(LA)) & jnp.all(jnp.isfinite(LS))
        LA = jnp.where(good, LA, eye_n)
        LS = jnp.where(good, LS, eye_b)
        log_diag = jnp.log(jnp.diagonal(LA)).reshape(G, b) + m * jnp.log(jnp.diagonal(LS, axis1=1, axis2=2))
        f = 2 * jnp.sum(real * log_diag)
        return good, LA, f

    def z_blocks(LA):
        # Z = L^-T L^-1, so Z_gg = sum_k (L^-1)_{k,g}^T (L^-1)_{k,g}
        Linv = jax.scipy.linalg.solve_triangular(LA, eye_n, lower=True).reshape(n, G, b)
        return jnp.einsum("kgi,kgj->gij", Linv, Linv, precision=HIGHEST)

    def gap_of(S, Zb):
        # m sum_g [tr T_g - b - logdet T_g], T_g = S_g Z_gg / m (Fenchel duality of logdet at Z)
        SZ = jnp.einsum("gij,gjk->gik", S, Zb, precision=HIGHEST) / m
        _, logdet = jnp.linalg.slogdet(SZ)
        return m * jnp.sum(jnp.trace(SZ, axis1=1, axis2=2) - b - logdet)

    S0 = _feasible_scale(Cf, c) * eye_b
    _, LA0, f0 = evaluate(S0)
    Z0 = z_blocks(LA0)
    init = GroupMaxentState(S0, Z0, gap_of(S0, Z0), f0)

    def step(state):
        S = state.S
        target = (m / (m + 1.0)) * (jnp.linalg.inv(state.Zb) + S)
        D = 0.5 * ((target - S) + jnp.swapaxes(target - S, 1, 2))

        def attempt(alpha):
            good, LA, f = evaluate(S + alpha * D)
            return alpha, good & (f >= state.objective), LA, f

        def cond(carry):
            alpha, ok, _, _ = carry
            return (~ok) & (alpha > 1e-10)

        alpha, ok, LA, f = lax.while_loop(
            cond, lambda carry: attempt(0.5 * carry[0]), attempt(jnp.asarray(1.0, S.dtype))
        )
        S_new = jnp.where(ok, S + alpha * D, S)
        Zb = jnp.where(ok, z_blocks(LA), state.Zb)
        return GroupMaxentState(S_new, Zb, gap_of(S_new, Zb), jnp.where(ok, f, state.objective))

    def terminate(state):
        return state.gap <= tol * jnp.maximum(1.0, jnp.abs(state.objective)), jnp.int32(RESULTS.successful)

    it = iterative_solve(init, step, terminate, max_steps=max_steps)
    stats = {"gap": it.state.gap, "objective": it.state.objective + whitening}
    return _unwhiten(it.state.S, norm.L, norm.mask), it, stats


def _rescale_blocks(blocks, sd, members):
    """``S_g <- diag(sd_g) S_g diag(sd_g)``: correlation-scale blocks back to the covariance scale."""
    mask = members < sd.shape[0]
    scale = jnp.where(mask, sd[jnp.where(mask, members, 0)], 1.0)
    return blocks * scale[:, :, None] * scale[:, None, :]


@functools.partial(jax.jit, static_argnames=("method", "m"))
def _group_solve(Sigma, members, tol, max_steps, *, method, m):
    c = (m + 1.0) / m
    # every method works on the correlation matrix and maps S back by diag(Sigma)^{1/2}: the
    # whitening, the tolerances and the certificates then see the same numbers whatever the
    # units of the variables (S(D Sigma D) = D S(Sigma) D to rounding, the same result code)
    C = to_correlation(Sigma)
    # under jit validate_sigma cannot run: an indefinite Sigma (no valid S exists) is reported
    # infeasible with a NaN S, as eagerly it raises, instead of max_steps_reached / stagnated
    # with a plausible-looking S; one Cholesky, and the solvers do not iterate on it. The
    # whitening methods also need every diagonal block R_gg positive definite: an exactly
    # singular Sigma (duplicated variables in one group) can pass the full factorisation by
    # rounding while its block factor L_g is NaN (equicorrelated then said successful, S NaN)
    sigma_pd = _common.factorises(C)
    if method != "mvr":
        norm = _normalise(C, members)
        sigma_pd = sigma_pd & jnp.all(jnp.isfinite(norm.L))
    max_steps_run = jnp.where(sigma_pd, max_steps, 0)
    if method == "mvr":
        blocks, it, stats = group_mvr.solve_group_mvr(Sigma, members, c, float(m), tol, max_steps_run)
        code, stats = it.result, {"num_steps": it.num_steps, "max_steps": max_steps, **stats}
    else:
        if method == "equicorrelated":
            blocks, code, stats = _group_equicorrelated(norm, c)
        else:
            if method == "sdp":
                blocks, it, stats = _group_sdp(norm, c, tol, max_steps_run)
            else:
                blocks, it, stats = _group_maxent(norm, c, float(m), tol, max_steps_run)
            code, stats = it.result, {"num_steps": it.num_steps, "max_steps": max_steps, **stats}
        blocks = _rescale_blocks(blocks, jnp.sqrt(jnp.diagonal(Sigma)), members)
    # a NaN / Inf S is never successful
    code = jnp.where((code == RESULTS.successful) & ~jnp.all(jnp.isfinite(blocks)), RESULTS.nonfinite, code)
    blocks, code = _common.reject_invalid_sigma(sigma_pd, Sigma, blocks, code)
    return blocks, code, stats


def group_s_matrix(
    Sigma,
    groups,
    *,
    method: str = "maxent",
    num_knockoffs: int = 1,
    tol: float = 1e-6,
    max_steps: int = 500,
    throw: bool = False,
) -> Solution:
    r"""Block-diagonal ``S`` for group knockoffs (Dai & Barber 2016; Chu et al. 2024).

    With ``c = (m + 1) / m`` (``m = num_knockoffs``; ``c = 2`` for one
    knockoff) and ``D = blockdiag(Sigma_gg)``, every method returns a feasible
    ``S = blockdiag(S_g)``: ``c Sigma - S >= 0`` and every ``S_g >= 0``.
    Every method solves on the correlation matrix ``R = V^{-1/2} Sigma V^{-1/2}``,
    ``V = diag(Sigma)``, and maps back by ``S = V^{1/2} S_R V^{1/2}``, so the
    answer does not depend on the units of the variables:
    ``S(V' Sigma V') = V' S(Sigma) V'`` for a positive diagonal ``V'`` (to
    rounding, with the same result code). Equicorrelated, SDP and maximum
    entropy work in block-whitened coordinates ``C = B R B^T`` with
    ``B = blockdiag(L_g^{-1})``, ``L_g L_g^T = R_gg`` (so ``C_gg = I``), on
    the padded ``G x b`` layout (one batched computation for all groups;
    padding slots are independent unit coordinates), and map back by
    ``S_{R,g} = L_g S~_g L_g^T``.

    * ``"equicorrelated"``: ``S = gamma D`` with the largest feasible
      ``gamma <= 1``, ``gamma = min(1, c lambda_min(D^{-1/2} Sigma D^{-1/2}))``
      (``lambda_min`` of ``C``, the same spectrum). Closed form.
    * ``"sdp"`` (Dai & Barber's group SDP): ``S = blockdiag(gamma_g Sigma_gg)``
      maximising ``sum_g |g| gamma_g`` subject to ``0 <= gamma_g <= 1`` and
      ``c Sigma - S >= 0``, by barrier Newton path following over the ``G``
      scalars ``gamma_g``, ``O(p^3 + G^3)`` per step. Certified gap: any
      ``Lambda >= 0`` bounds the optimum by
      ``c tr(Lambda C) + sum_g max(0, |g| - sum_{i in g} Lambda_ii)``; the iterate
      gives ``M = (c C - diag(P gamma))^{-1}`` and the candidates ``t M`` (best
      ``t``) and ``diag(v) M diag(v)`` (``v`` lifting each group's diagonal to
      ``|g|``, robust where some ``gamma_g`` sit at 0 and ``c C - S`` is nearly
      singular); ``gap`` is the best bound seen minus ``sum_g |g| gamma_g``
      (upper-bounds the suboptimality); it is ``successful`` when
      ``gap <= tol f``, relative to the objective ``f = sum_g |g| gamma_g``
      as in :func:`jaxknock.sdp` (``gap <= tol 1^T s``), however small ``f``
      is (strongly correlated groups: ``f ~ 1e-4`` at correlation 0.9999).
      The barrier weight stops shrinking once the central-path gap is far
      below ``tol f``. Near the optimum the
      barrier Hessian is singular to rounding and Newton cannot centre the
      iterate, so a path whose gap has not shrunk for 40 steps (or that runs
      out of steps) gets a polished certificate at its final iterate: the best
      ``diag(v) M diag(v)``, ``v`` constant on each group, by exact coordinate
      descent over the ``G`` group scales, and the subspace dual
      ``Pi diag(y) Pi``, ``Pi`` the projector onto the eigenvectors of
      ``c C - S`` with the smallest eigenvalues (where complementary slackness
      puts the optimal dual; ``diag(y)`` constant on groups, ``y >= 0`` from
      ``tr_g Lambda = |g|``), evaluated in full; it ends ``successful`` if
      the better certifies ``tol``, otherwise ``stagnated`` /
      ``max_steps_reached`` (feasible, with its gap). A solve certified on the
      path is unchanged. Strongly correlated groups (equicorrelated at
      correlation 0.999-0.999999) certify down to ``tol = 1e-8``; the gap is
      exact to the rounding term ``c p eps``. For singleton groups it is the
      ungrouped SDP (:func:`jaxknock.sdp`, same ``s`` to the tolerances).
    * ``"maxent"`` (maximum entropy, the Knockoffs.jl default): maximise
      ``log det(c Sigma - S) + m sum_g log det S_g`` (the ``log det`` of the
      joint covariance of ``[X, X~1, ..., X~m]`` up to ``p log m``) over all
      block-diagonal ``S`` (full blocks). Every step moves all blocks at once towards their
      exact block-coordinate maximiser ``S_g <- m ((Z_gg)^{-1} + S_g) / (m + 1)``,
      ``Z = (c Sigma - S)^{-1}`` (Knockoffs.jl's block update, here in parallel
      and batched) with backtracking; ``O(p^3)`` per step. Certified gap
      (Fenchel duality of ``log det``): for the same ``Z``,
      ``gap = m sum_g [tr T_g - |g| - log det T_g] >= OPT - objective`` with
      ``T_g = S_g Z_gg / m``, zero exactly at the optimum (``S_g = m (Z_gg)^{-1}``); ``stats["objective"]``
      is this objective on the correlation scale (``Sigma`` -> ``R``, ``S`` -> ``S_R``), additive over
      the blocks of a block-diagonal ``Sigma``. Singleton groups: the scalar maximum-entropy ``s``.

    * ``"mvr"`` (minimum variance-based reconstructability, knockpy's group
      MVR): minimise ``tr(G^{-1}) = tr((c C - S)^{-1}) / m + m sum_g tr(S_g^{-1})``
      over block-diagonal ``S`` on the correlation scale ``C`` (``S`` mapped
      back by ``diag(Sigma)^{1/2}``), by parallel damped steps towards the
      stationary blocks ``S_g = m ((A^{-2})_gg)^{-1/2}`` with a certified
      Lagrange-dual gap; see :mod:`jaxknock.svector.group_mvr`. Singleton
      groups: :func:`~jaxknock.mvr`.

    Invalid ``Sigma`` under ``jit`` (the eager value checks cannot run): NaN/Inf
    gives ``nonfinite``; a non-symmetric ``Sigma`` gives ``infeasible``; one
    with a non-positive diagonal, or whose correlation matrix has no Cholesky
    factor (not positive definite: no valid ``S`` exists), gives ``infeasible``
    with ``S`` all NaN, for every method, without iterating. Eagerly they
    raise ``ValueError``. An exactly singular ``Sigma`` can pass that test by
    rounding (duplicated variables); equicorrelated, SDP and maximum entropy
    also report ``infeasible`` with a NaN ``S`` when a diagonal block
    ``Sigma_gg`` has no Cholesky factor (duplicates inside one group), eagerly
    too. A NaN ``S`` is never ``successful``.

    Args:
        Sigma: ``(p, p)`` covariance (symmetric positive definite), float64
            for ``"sdp"`` / ``"maxent"``.
        groups: ``(p,)`` group labels (integers or names; see
            :func:`group_index`) or a :class:`Groups`.
        method: ``"equicorrelated"``, ``"sdp"``, ``"maxent"`` or ``"mvr"``.
        num_knockoffs: ``m >= 1``.
        tol: certified-gap tolerance, ``> 0``. ``"sdp"``: ``gap <= tol objective``, relative to its
            objective ``sum_g |g| gamma_g > 0`` however small. ``"maxent"`` and ``"mvr"``:
            ``gap <= tol max(1, |objective|)`` (objectives that can be negative or near zero, a
            ``log det`` and a trace of inverses); for ``"maxent"`` the objective of the block-whitened
            problem, ``stats["objective"] - (m + 1) sum_g log det R_gg``. Not used by ``"equicorrelated"``.
        max_steps: iteration limit, a positive integer (concrete).
        throw: raise ``RuntimeError`` if the solve did not succeed.

    Returns:
        :class:`~jaxknock.Solution` whose ``value`` is a :class:`BlockDiagonal`
        (``value.dense()`` is ``S``), ``result`` a ``RESULTS`` code and
        ``stats`` ``num_steps``, ``max_steps`` and ``gap`` (iterative methods),
        ``gamma`` (equicorrelated / SDP), ``objective`` (SDP, maximum entropy, MVR) and, for
        ``"equicorrelated"``, ``min_eig``: ``lambda_min`` of the block-whitened correlation ``C``
        (the ``lambda_min`` of ``gamma``'s formula; not a bound on ``lambda_min(c Sigma - S)`` as
        the ``min_eig`` of :func:`~jaxknock.sdp`).

    Example:
        >>> import jax.numpy as jnp
        >>> Sigma = 0.5 * jnp.eye(4) + 0.5
        >>> sol = group_s_matrix(Sigma, [0, 0, 1, 1], method="equicorrelated")
        >>> sol.value.blocks.shape, round(float(sol.stats["gamma"]), 4)
        ((2, 2, 2), 0.6667)
        >>> bool(jnp.linalg.eigvalsh(2 * Sigma - sol.value.dense())[0] >= -1e-5)
        True
    """
    _checks.check_choice(method, GROUP_METHODS, "method")
    m = _checks.check_num_knockoffs(num_knockoffs)
    # as the ungrouped solvers: tol = -1 / 0 / NaN ran to max_steps, max_steps = 1.5 / 0 / True ran 1 / 0 / 1 steps
    _common.check_settings(tol, max_steps, 0.5, None)
    Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False, need_x64=method != "equicorrelated")
    g = group_index(groups, Sigma.shape[-1])
    members = jnp.asarray(g.members)
    blocks, code, stats = _group_solve(
        Sigma, members, jnp.asarray(tol, Sigma.dtype), jnp.asarray(max_steps, jnp.int32), method=method, m=m
    )
    code = _checks.combine_codes(_sigma_checks.traced_sigma_code(Sigma), code)
    sol = Solution(block_diagonal(blocks, g), code, stats)
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)
