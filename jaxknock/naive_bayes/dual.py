r"""The multinomial sparse naive Bayes dual, its solvers and the primal recovery.

With smoothed class sums ``f_c``, ``g = sum_c f_c``, ``S = 1'g`` and
``v = sum_c f_c log f_c - g log g``, the dual bound is (Theorems 4 and 5 of
Askari, d'Aspremont, El Ghaoui, "Naive Feature Selection")::

    psi(k) = K + min_{p in simplex_C} s_k(h(p)),   h(p) = v - sum_c f_c log p_c,
    K = g' log g - S log S.

* two classes: :func:`bisection_init` / :func:`bisection_step` bisect on the
  sign of the subgradient in ``a = p_0``, safeguarded and accelerated by the
  stationary point of the active piece;
* ``C > 2`` classes: :func:`fw_init` / :func:`fw_step` run fully corrective
  Frank-Wolfe on the concave dual of the dual;
* :func:`solve_dual` drives either with :func:`jaxknock._iterate.iterative_solve`
  until the certified bounds meet (``upper - lower <= tol max(1, |psi|)``);
* :func:`recover` returns the best support ``T`` (``|T| <= k``) among the
  top-``k`` sets of the dual points kept and the rounded optimal mixture of
  those sets, and :func:`theta_from_mask` its closed-form parameters.

Every dual point ``p`` certifies ``K + s_k(h(p)) >= psi(k)``; every ``x`` in
``{0 <= x <= 1, 1'x <= k}`` certifies ``K + G(x) <= psi(k)`` with
``G(x) = x'v - sum_c A_c log(A_c / 1'A)``, ``A_c = x'f_c``.

Example (the step API, for notebooks and debugging)::

    >>> import jax.numpy as jnp
    >>> pb = multinomial_problem(jnp.asarray([[5.0, 1.0, 2.0], [1.0, 4.0, 2.0]]), 1.0)
    >>> s = bisection_init(pb, 1)
    >>> for _ in range(3):
    ...     s = bisection_step(pb, s, 1)
    >>> sol = solve_dual(pb, 1, 1e-10, 100)
    >>> bool(sol.converged), bool(sol.upper >= sol.lower - 1e-9)
    (True, True)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS
from jaxknock.naive_bayes._math import class_sum, float_tiny, xlogy
from jaxknock.naive_bayes.topk import top_k, top_k_mask, top_k_weights

__all__ = [
    "Problem",
    "DualSolution",
    "BisectionState",
    "FWState",
    "multinomial_problem",
    "scores",
    "bisection_init",
    "bisection_step",
    "bisection_done",
    "fw_init",
    "fw_step",
    "solve_dual",
    "theta_from_mask",
    "recover",
]


class Problem(NamedTuple):
    """The data of the multinomial dual, built by :func:`multinomial_problem` (``C`` classes, ``m`` features).

    Attributes:
        f: ``(C, m)`` smoothed class sums ``f_c = counts_c + alpha``.
        v: ``(m,)`` ``v = sum_c f_c log f_c - g log g`` with ``g = sum_c f_c`` (elementwise).
        const: the constant ``K = g' log g - S log S``, ``S = 1'g``.
        totals: ``(C,)`` class totals ``S_c = 1'f_c``.
    """

    f: jax.Array  # (C, m) smoothed class sums
    v: jax.Array  # (m,)  sum_c f_c log f_c - g log g
    const: jax.Array  # g' log g - S log S
    totals: jax.Array  # (C,) S_c


class _Agg(NamedTuple):
    """Aggregates ``A_c = x' f_c`` and ``L = x' v`` of a point x of the dual-of-dual."""

    A: jax.Array
    L: jax.Array


def multinomial_problem(counts, alpha) -> Problem:
    r"""The constants of the multinomial sparse naive Bayes dual from class sums.

    With Laplace smoothing, ``f_c = counts_c + alpha`` (class ``c``'s smoothed
    feature sums), ``g = sum_c f_c``, ``S_c = 1'f_c`` and ``S = 1'g``, the
    sparse multinomial problem (Askari thesis, (SMNB) and Theorem 4, extended
    to ``C`` classes)::

        phi(k) = max_{theta_c in simplex} sum_c f_c' log theta_c
                 s.t. the theta_c differ on at most k features

    is bounded by ``phi(k) <= psi(k) = K + min_{p in simplex_C} s_k(h(p))`` with

    ``v = sum_c f_c log f_c - g log g``,  ``K = g' log g - S log S``,
    ``h(p) = v - sum_c f_c log p_c`` (see :func:`scores`)

    (logs and products elementwise, ``0 log 0 = 0``). This function computes
    ``f``, ``v``, ``K`` and ``S_c`` once (``O(C m)``); every dual step reuses
    them. For two classes ``p = (a, 1 - a)`` and ``h(a)`` is the thesis'
    ``h(alpha) = v - f^+ log alpha - f^- log(1 - alpha)``.

    Args:
        counts: ``(C, m)`` non-negative class sums (``ClassSums.counts``).
        alpha: Laplace smoothing ``>= 0`` (scalar, may be traced).

    Returns:
        :class:`Problem` ``(f, v, const, totals)``: ``f`` of shape ``(C, m)``,
        ``v`` of shape ``(m,)``, ``const = K`` a scalar, ``totals = (S_1..S_C)``.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> pb = multinomial_problem(jnp.asarray([[5.0, 1.0, 2.0], [1.0, 4.0, 2.0]]), 1.0)
        >>> pb.f.tolist(), pb.totals.tolist()
        ([[6.0, 2.0, 3.0], [2.0, 5.0, 3.0]], [11.0, 10.0])
        >>> np.round(np.asarray(pb.v, float), 3).tolist(), round(float(pb.const), 3)
        ([-4.499, -4.188, -4.159], -22.928)
    """
    f = counts + alpha
    g = class_sum(f)
    v = class_sum(xlogy(f, f)) - xlogy(g, g)
    totals = jnp.sum(f, axis=1)
    S = jnp.sum(totals)
    const = jnp.sum(xlogy(g, g)) - xlogy(S, S)
    return Problem(f, v, const, totals)


def scores(pb: Problem, p):
    """``h(p) = v - sum_c f_c log p_c`` (= ``g_j KL(f_.j / g_j || p)`` >= 0)."""
    logp = jnp.log(jnp.maximum(p, float_tiny(p.dtype)))
    return pb.v - class_sum(pb.f, logp)


def _evaluate(pb: Problem, p, k):
    """Upper bound ``s_k(h(p))`` and the aggregates of its (fractional) top-k set."""
    top = top_k(scores(pb, p), k)
    x = top_k_weights(top, pb.f.dtype)
    agg = _Agg(jnp.sum(pb.f * x, axis=1), jnp.sum(pb.v * x))
    return top.s.astype(pb.f.dtype), agg


def _dual_lower(agg: _Agg):
    """``G(x) = x'v - sum_c A_c log(A_c / 1'A) <= min_p s_k(h(p))`` for feasible x."""
    T = jnp.sum(agg.A)
    return agg.L - jnp.sum(xlogy(agg.A, agg.A)) + xlogy(T, T)


def _agg_p(agg: _Agg, fallback):
    T = jnp.sum(agg.A)
    return jnp.where(T > 0, agg.A / jnp.where(T > 0, T, 1), fallback)


def _line_max(A0, L0, dA, dL, gmax, iters=40):
    """Maximise the concave ``gamma -> G(A0 + gamma dA, L0 + gamma dL)`` on ``[0, gmax]``."""
    tiny = float_tiny(A0.dtype)

    def slope(gam):
        A = A0 + gam * dA
        logp = jnp.log(jnp.maximum(A, tiny)) - jnp.log(jnp.maximum(jnp.sum(A), tiny))
        return dL - jnp.sum(jnp.where(dA == 0, 0, dA * logp))

    def body(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        up = slope(mid) > 0
        return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

    lo, hi = lax.fori_loop(0, iters, body, (jnp.zeros_like(gmax), gmax))
    return 0.5 * (lo + hi)


def _converged(upper, lower, const, tol):
    gap = upper - lower
    scale = jnp.maximum(1.0, jnp.abs(const + upper))
    return jnp.isfinite(gap) & (gap <= tol * scale)


# ---- two classes: safeguarded bisection on a = p_0 ------------------------


class BisectionState(NamedTuple):
    """State of the two-class dual solve (:func:`bisection_init` / :func:`bisection_step` / :func:`bisection_done`).

    The dual variable is ``p = (a, 1 - a)``; ``[lo, hi]`` brackets the minimiser
    of ``s_k(h(a))`` and ``upper`` / ``lower`` bound its minimum (add
    ``Problem.const`` for ``psi(k)``). Aggregates are ``_Agg(A, L)``,
    ``A_c = x'f_c`` and ``L = x'v`` of a top-``k`` set ``x``.
    """

    lo: jax.Array
    hi: jax.Array
    agg_lo: _Agg  # top-k aggregates at lo (subgradient <= 0)
    agg_hi: _Agg  # top-k aggregates at hi (subgradient >= 0)
    has_lo: jax.Array
    has_hi: jax.Array
    best_a: jax.Array
    upper: jax.Array  # best s_k(h(a)) seen
    lower: jax.Array  # best certified lower bound on min_a s_k(h(a))
    set_a: jax.Array  # point whose top-k set x had the largest G(x) (a primal candidate)
    set_G: jax.Array
    cand: jax.Array  # candidate for the next step
    use_cand: jax.Array
    num_steps: jax.Array


def bisection_init(pb: Problem, k) -> BisectionState:
    r"""Start the two-class dual solve ``min_{a in [0, 1]} s_k(h(a))``, ``h(a) = v - f_0 log a - f_1 log(1 - a)``.

    ``a -> s_k(h(a))`` is convex (a maximum of the convex ``x'h(a)`` over the
    top-``k`` polytope ``{0 <= x <= 1, 1'x <= k}``). Since
    ``dh_j/da = -f_0j / a + f_1j / (1 - a)`` is positive exactly when
    ``a > f_0j / g_j``, every ``h_j`` increases right of ``max_j f_0j / g_j`` and
    decreases left of ``min_j f_0j / g_j``: the minimiser lies in the bracket

    ``[lo, hi] = [min_j f_0j / g_j, max_j f_0j / g_j]``  (over ``g_j > 0``).

    The first point evaluated is ``a0 = S_0 / S`` (clipped into the bracket), the
    exact minimiser for ``k = m``, where ``s_m(h(a)) = 1'v - S_0 log a - S_1 log(1 - a)``.
    Nothing is evaluated here: ``upper = +inf``, ``lower = -inf``.

    Args:
        pb: a two-class :class:`Problem` (``pb.f`` of shape ``(2, m)``).
        k: the sparsity level (unused here: the bracket does not depend on it;
            kept so that init and step take the same arguments).

    Returns:
        :class:`BisectionState` with the bracket ``(lo, hi)``, the candidate
        ``cand = a0`` (``use_cand = True``) and ``num_steps = 0``. Advance it
        with :func:`bisection_step` until :func:`bisection_done`; ``upper`` and
        ``lower`` bracket ``min_a s_k(h(a))``, so ``psi(k)`` lies in
        ``[pb.const + lower, pb.const + upper]``.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> pb = multinomial_problem(jnp.asarray([[5.0, 1.0, 2.0], [1.0, 4.0, 2.0]]), 1.0)
        >>> s = bisection_init(pb, 1)
        >>> np.round(np.asarray([s.lo, s.hi, s.cand], float), 4).tolist()  # [2/7, 3/4], a0 = 11/21
        [0.2857, 0.75, 0.5238]
    """
    f = pb.f
    g = class_sum(f)
    ratio = f[0] / jnp.where(g > 0, g, 1)
    lo = jnp.min(jnp.where(g > 0, ratio, jnp.inf))
    hi = jnp.max(jnp.where(g > 0, ratio, -jnp.inf))
    # the minimiser of s_k(h(a)) lies in [min_j a_j, max_j a_j]: outside, all h_j move together
    lo, hi = jnp.minimum(lo, hi), jnp.maximum(lo, hi)
    a0 = jnp.clip(pb.totals[0] / jnp.sum(pb.totals), lo, hi)  # optimal for k = m
    dt = f.dtype
    zero = _Agg(jnp.zeros(f.shape[0], dt), jnp.zeros((), dt))
    return BisectionState(
        lo=lo,
        hi=hi,
        agg_lo=zero,
        agg_hi=zero,
        has_lo=jnp.asarray(False),
        has_hi=jnp.asarray(False),
        best_a=a0,
        upper=jnp.asarray(jnp.inf, dt),
        lower=jnp.asarray(-jnp.inf, dt),
        set_a=a0,
        set_G=jnp.asarray(-jnp.inf, dt),
        cand=a0,
        use_cand=jnp.asarray(True),
        num_steps=jnp.asarray(0, jnp.int32),
    )


def _mixture_weight(agg_lo: _Agg, agg_hi: _Agg):
    """``theta`` maximising ``G(theta x_lo + (1 - theta) x_hi)``."""
    one = jnp.ones_like(agg_lo.L)
    return _line_max(agg_hi.A, agg_hi.L, agg_lo.A - agg_hi.A, agg_lo.L - agg_hi.L, one)


def bisection_step(pb: Problem, state: BisectionState, k) -> BisectionState:
    r"""One safeguarded bisection step on ``a`` for ``min_{a in [lo, hi]} s_k(h(a))`` (two classes).

    At the trial point ``a`` (the candidate ``state.cand`` when ``use_cand``,
    else the midpoint of ``[lo, hi]``) it evaluates the top-``k`` set ``x`` of
    ``h(a)`` (ties share the remaining weight), its aggregates
    ``A_c = x'f_c``, ``L = x'v`` and

    * the upper bound ``U = s_k(h(a)) = L - A_0 log a - A_1 log(1 - a)``;
    * a subgradient ``d = -A_0 / a + A_1 / (1 - a)``: ``d >= 0`` moves ``hi`` to
      ``a``, ``d <= 0`` moves ``lo`` to ``a`` (the aggregates at both ends are kept);
    * the lower bound ``G(x) = L - sum_c A_c log(A_c / 1'A)`` (weak duality:
      ``G(x) = min_p x'h(p) <= min_p s_k(h(p))`` for any feasible ``x``) and,
      once both ends are known, ``max_theta G(theta x_lo + (1 - theta) x_hi)``,
      which closes the gap at a kink of the dual.

    The next candidate is the stationary point of the active linear piece,
    ``a = A_0 / (A_0 + A_1)`` (of the optimal mixture once both ends are known),
    used only if it lies strictly inside the new bracket and, when this step
    was itself a candidate step, it at least halved the bracket; otherwise the
    next step bisects. So the bracket shrinks at least geometrically and, when
    the minimiser lies inside one piece (one top-``k`` set), the candidate
    lands on it in one step.

    Args:
        pb: a two-class :class:`Problem`.
        state: the :class:`BisectionState` from :func:`bisection_init` or a previous step.
        k: the sparsity level (``0 <= k <= m``; may be traced).

    Returns:
        The advanced :class:`BisectionState`: bracket, best point ``best_a`` with
        ``upper = min U`` seen, ``lower = max`` of the lower bounds seen, the
        primal candidate ``set_a`` (largest ``G``), ``num_steps + 1``.

    Example:
        >>> import jax.numpy as jnp
        >>> pb = multinomial_problem(jnp.asarray([[5.0, 1.0, 2.0], [1.0, 4.0, 2.0]]), 1.0)
        >>> s = bisection_init(pb, 1)
        >>> while not bisection_done(pb, s, 1e-4):
        ...     s = bisection_step(pb, s, 1)
        >>> int(s.num_steps), round(float(s.best_a), 3), bool(s.upper - s.lower <= 1e-4 * abs(pb.const + s.upper))
        (3, 0.527, True)
        >>> round(float(pb.const + s.upper), 2)  # psi(1)
        -22.09
    """
    s = state
    width = s.hi - s.lo
    a = jnp.where(s.use_cand, s.cand, 0.5 * (s.lo + s.hi))
    U, agg = _evaluate(pb, jnp.stack([a, 1 - a]), k)
    d = -agg.A[0] / a + agg.A[1] / (1 - a)  # subgradient of s_k(h(a))
    right, left = d >= 0, d <= 0
    pick = lambda c, new, old: jax.tree_util.tree_map(lambda u, w: jnp.where(c, u, w), new, old)
    hi = jnp.where(right, a, s.hi)
    lo = jnp.where(left, a, s.lo)
    agg_hi, agg_lo = pick(right, agg, s.agg_hi), pick(left, agg, s.agg_lo)
    has_hi, has_lo = s.has_hi | right, s.has_lo | left
    better = U < s.upper
    # Lower bound: best mixture of the top-k sets on both sides of the minimiser
    # (closes the gap at a kink), else the current set alone.
    theta = _mixture_weight(agg_lo, agg_hi)
    mix = _Agg(agg_hi.A + theta * (agg_lo.A - agg_hi.A), agg_hi.L + theta * (agg_lo.L - agg_hi.L))
    both = has_lo & has_hi
    G = _dual_lower(agg)
    lb = jnp.maximum(G, jnp.where(both, _dual_lower(mix), -jnp.inf))
    better_set = G > s.set_G
    a_mix = _agg_p(mix, jnp.stack([a, 1 - a]))[0]
    a_cur = _agg_p(agg, jnp.stack([a, 1 - a]))[0]  # stationary point of the active piece
    cand = jnp.where(both, a_mix, a_cur)
    # safeguard: a candidate step that did not halve the bracket is followed by bisection
    stalled = s.use_cand & (hi - lo > 0.5 * width)
    use_cand = (cand > lo) & (cand < hi) & ~stalled
    return BisectionState(
        lo=lo,
        hi=hi,
        agg_lo=agg_lo,
        agg_hi=agg_hi,
        has_lo=has_lo,
        has_hi=has_hi,
        best_a=jnp.where(better, a, s.best_a),
        upper=jnp.where(better, U, s.upper),
        lower=jnp.maximum(s.lower, lb),
        set_a=jnp.where(better_set, a, s.set_a),
        set_G=jnp.where(better_set, G, s.set_G),
        cand=cand,
        use_cand=use_cand,
        num_steps=s.num_steps + 1,
    )


def bisection_done(pb, s: BisectionState, tol):
    """Stopping test of the two-class dual solve (a boolean array; traceable).

    True when the certified bounds meet,
    ``upper - lower <= tol * max(1, |K + upper|)`` (``K = pb.const``, so the
    scale is ``|psi(k)|``), or when the bracket has collapsed to a few ulps,
    ``hi - lo <= 4 eps max(|hi|, eps)``, after at least one step (a kink the
    bounds cannot certify further in this precision).

    Args:
        pb: the two-class :class:`Problem`.
        s: a :class:`BisectionState`.
        tol: relative tolerance on the gap.

    Example:
        >>> import jax.numpy as jnp
        >>> pb = multinomial_problem(jnp.asarray([[5.0, 1.0, 2.0], [1.0, 4.0, 2.0]]), 1.0)
        >>> s = bisection_init(pb, 1)
        >>> bool(bisection_done(pb, s, 1e-4)), bool(bisection_done(pb, bisection_step(pb, s, 1), 1e-4))
        (False, False)
    """
    eps = jnp.finfo(s.lo.dtype).eps
    tight = _converged(s.upper, s.lower, pb.const, tol)
    collapsed = (s.hi - s.lo <= 4 * eps * jnp.maximum(jnp.abs(s.hi), eps)) & (s.num_steps > 0)
    return tight | collapsed


# ---- C classes: fully corrective Frank-Wolfe on the dual of the dual -------


class FWState(NamedTuple):
    """State of fully corrective Frank-Wolfe on the dual of the dual (:func:`fw_init` / :func:`fw_step`).

    ``W = max_steps + 1`` vertex slots, of which the first ``count`` are used;
    ``upper`` / ``lower`` bound ``min_p s_k(h(p))`` (add ``Problem.const`` for ``psi(k)``).
    """

    verts_A: jax.Array  # (W, C) aggregates of the top-k sets found so far
    verts_L: jax.Array  # (W,)
    verts_p: jax.Array  # (W, C) the dual points that produced them
    weights: jax.Array  # (W,) convex weights of the current point x
    count: jax.Array  # number of stored vertices
    p: jax.Array  # (C,) dual point p(x) = A(x) / 1'A(x)
    best_p: jax.Array
    upper: jax.Array
    lower: jax.Array
    num_steps: jax.Array


def _fw_inner(verts_A, verts_L, weights, count, iters):
    """Away-step Frank-Wolfe for ``max_w G(sum_j w_j vertex_j)`` over the stored vertices."""
    W = verts_L.shape[0]
    active = jnp.arange(W) < count
    tiny = float_tiny(verts_A.dtype)

    def body(_, w):
        A = w @ verts_A
        L = w @ verts_L
        logp = jnp.log(jnp.maximum(A, tiny)) - jnp.log(jnp.maximum(jnp.sum(A), tiny))
        val = verts_L - verts_A @ logp  # model values F_j(p(x)); G(x) = w' val
        G = w @ val
        s = jnp.argmax(jnp.where(active, val, -jnp.inf))
        v = jnp.argmin(jnp.where(active & (w > 0), val, jnp.inf))
        fw = val[s] - G >= G - val[v]
        wv = w[v]
        dA = jnp.where(fw, verts_A[s] - A, A - verts_A[v])
        dL = jnp.where(fw, verts_L[s] - L, L - verts_L[v])
        gmax = jnp.where(fw, 1.0, wv / jnp.maximum(1 - wv, tiny)).astype(w.dtype)
        gmax = jnp.minimum(gmax, 1 / jnp.finfo(w.dtype).eps)
        gam = _line_max(A, L, dA, dL, gmax)
        w_fw = (1 - gam) * w + gam * jax.nn.one_hot(s, W, dtype=w.dtype)
        w_aw = (1 + gam) * w - gam * jax.nn.one_hot(v, W, dtype=w.dtype)
        w = jnp.where(fw, w_fw, jnp.maximum(w_aw, 0))
        return w / jnp.sum(w)

    return lax.fori_loop(0, iters, body, weights)


def fw_init(pb: Problem, k, max_steps) -> FWState:
    r"""Start fully corrective Frank-Wolfe on the dual of the dual (any number of classes ``C``).

    The dual ``min_{p in simplex_C} s_k(h(p))`` equals (minimax) the concave
    maximisation over the top-``k`` polytope ``X_k = {0 <= x <= 1, 1'x <= k}``

    ``max_{x in X_k} G(x)``,  ``G(x) = x'v - sum_c A_c log(A_c / 1'A)``,  ``A_c = x'f_c``,

    whose inner minimiser is ``p(x) = A / 1'A``. The gradient of ``G`` is
    ``h(p(x))``, so Frank-Wolfe's linear oracle is the top-``k`` set of
    ``h(p(x))`` and its value ``s_k(h(p(x)))`` is the upper bound: the
    Frank-Wolfe gap is the certified gap ``upper - lower``. ``G`` depends on
    ``x`` only through ``(A, L = x'v)``, so a vertex is stored as ``C + 1``
    numbers, never as an ``m``-vector.

    The start is ``p0 = (S_1, ..., S_C) / S`` (optimal for ``k = m``): its top-``k``
    set is the first vertex, with weight 1.

    Args:
        pb: a :class:`Problem` (``pb.f`` of shape ``(C, m)``).
        k: the sparsity level (may be traced).
        max_steps: the step budget (static): the vertex buffers hold
            ``max_steps + 1`` vertices (a step past the budget overwrites the last one).

    Returns:
        :class:`FWState`: vertex buffers ``verts_A (W, C)``, ``verts_L (W,)``,
        ``verts_p (W, C)``, ``weights (W,)`` with ``W = max_steps + 1``,
        ``count = 1``, the current point ``p = p(x)``, ``best_p = p0`` and the
        bounds ``upper = s_k(h(p0))``, ``lower = G(x)`` on ``min_p s_k(h(p))``.
        Advance it with :func:`fw_step` until ``upper - lower`` is small.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> counts = jnp.asarray([[5.0, 1.0, 2.0, 0.0], [1.0, 4.0, 2.0, 1.0], [0.0, 1.0, 6.0, 2.0]])
        >>> pb = multinomial_problem(counts, 1.0)
        >>> s = jax.jit(fw_init, static_argnums=2)(pb, 2, 10)  # one compilation, not many small eager ones
        >>> s.verts_A.shape, int(s.count), np.round(np.asarray(s.best_p, float), 3).tolist()  # p0 = (12, 12, 13) / 37
        ((11, 3), 1, [0.324, 0.324, 0.351])
        >>> bool(s.upper >= s.lower)
        True
    """
    C = pb.f.shape[0]
    W = max_steps + 1
    p0 = pb.totals / jnp.sum(pb.totals)
    U, agg = _evaluate(pb, p0, k)
    dt = pb.f.dtype
    return FWState(
        verts_A=jnp.zeros((W, C), dt).at[0].set(agg.A),
        verts_L=jnp.zeros((W,), dt).at[0].set(agg.L),
        verts_p=jnp.zeros((W, C), dt).at[0].set(p0),
        weights=jax.nn.one_hot(0, W, dtype=dt),
        count=jnp.asarray(1, jnp.int32),
        p=_agg_p(agg, p0),
        best_p=p0,
        upper=U,
        lower=_dual_lower(agg),
        num_steps=jnp.asarray(0, jnp.int32),
    )


def fw_step(pb: Problem, state: FWState, k, inner_iters=30) -> FWState:
    r"""One fully corrective Frank-Wolfe step on ``max_{x in X_k} G(x)`` (see :func:`fw_init`).

    1. Oracle at the current ``p = p(x)``: the top-``k`` set of ``h(p)`` gives
       the upper bound ``U = s_k(h(p))`` (kept with its ``p`` if it is the best
       so far) and a new vertex ``(A, L)``, appended to the buffers.
    2. Full correction: the convex weights over all stored vertices are
       re-optimised, ``max_w G(sum_j w_j vertex_j)``, by ``inner_iters``
       away-step Frank-Wolfe iterations with an exact line search (bisection
       on the concave slope).
    3. ``p <- p(x) = A(x) / 1'A(x)`` for the new mixture ``x`` and
       ``lower <- max(lower, G(x))``.

    Every ``G(x)`` is a certified lower bound and every ``U`` an upper bound on
    ``min_p s_k(h(p))``; ``psi(k)`` lies in ``[pb.const + lower, pb.const + upper]``.

    Args:
        pb: the :class:`Problem`.
        state: the :class:`FWState` from :func:`fw_init` or a previous step.
        k: the sparsity level (may be traced).
        inner_iters: away-step iterations of the correction (static).

    Returns:
        The advanced :class:`FWState` (``count`` and ``num_steps`` one larger).

    Example:
        >>> import jax.numpy as jnp
        >>> counts = jnp.asarray([[5.0, 1.0, 2.0, 0.0], [1.0, 4.0, 2.0, 1.0], [0.0, 1.0, 6.0, 2.0]])
        >>> pb = multinomial_problem(counts, 1.0)
        >>> s = jax.jit(fw_init, static_argnums=2)(pb, 2, 10)  # max_steps = 10 (static)
        >>> step = jax.jit(fw_step)  # compiled once (eagerly, every call would trace its inner loop again)
        >>> for _ in range(5):
        ...     s = step(pb, s, 2)
        >>> int(s.count), bool(s.upper - s.lower <= 1e-4 * abs(pb.const + s.upper))
        (6, True)
    """
    s = state
    U, agg = _evaluate(pb, s.p, k)
    better = U < s.upper
    idx = jnp.minimum(s.count, s.verts_L.shape[0] - 1)
    verts_A = s.verts_A.at[idx].set(agg.A)
    verts_L = s.verts_L.at[idx].set(agg.L)
    verts_p = s.verts_p.at[idx].set(s.p)
    count = jnp.minimum(s.count + 1, s.verts_L.shape[0])
    w = _fw_inner(verts_A, verts_L, s.weights, count, inner_iters)
    x = _Agg(w @ verts_A, w @ verts_L)
    return FWState(
        verts_A=verts_A,
        verts_L=verts_L,
        verts_p=verts_p,
        weights=w,
        count=count,
        p=_agg_p(x, s.p),
        best_p=jnp.where(better, s.p, s.best_p),
        upper=jnp.where(better, U, s.upper),
        lower=jnp.maximum(s.lower, _dual_lower(x)),
        num_steps=s.num_steps + 1,
    )


class DualSolution(NamedTuple):
    """Result of :func:`solve_dual`: the bracket ``lower <= psi(k) <= upper`` and the points :func:`recover` uses."""

    p: jax.Array  # (C,) best dual point
    cand_p: jax.Array  # (J, C) dual points whose top-k sets are primal candidates
    mix_w: jax.Array  # (J,) weights of the (near-)optimal dual-of-dual point over those sets
    upper: jax.Array  # K + s_k(h(p)) >= psi(k)
    lower: jax.Array  # certified lower bound on psi(k)
    num_steps: jax.Array
    converged: jax.Array
    result: jax.Array  # RESULTS code of the dual solve (from iterative_solve)


def _bisection_finite(s: BisectionState):
    # upper/lower/set_G start at +-inf by design (nothing evaluated yet); the bracket is what must stay finite
    return jnp.isfinite(s.lo) & jnp.isfinite(s.hi)


def _fw_finite(s: FWState):
    # upper/lower are +-inf-free after fw_init, but the vertex buffers hold unused zero rows; p is the iterate
    return jnp.all(jnp.isfinite(s.p))


def solve_dual(pb: Problem, k, tol, max_steps, *, method=None) -> DualSolution:
    """Solve the multinomial dual ``min_{p in simplex} s_k(h(p))`` to relative gap ``tol``.

    Bisection on ``p = (a, 1 - a)`` for two classes (``method="bisection"``),
    fully corrective Frank-Wolfe otherwise (``method="frank_wolfe"``); both are
    driven by :func:`jaxknock._iterate.iterative_solve` with at most
    ``max_steps`` (static) steps. Returns a :class:`DualSolution` whose
    ``upper``/``lower`` bracket ``psi(k)`` and whose candidate dual points feed
    :func:`recover`.
    """
    C = pb.f.shape[0]
    method = method or ("bisection" if C == 2 else "frank_wolfe")
    success = jnp.int32(RESULTS.successful)
    if method == "bisection":
        if C != 2:
            raise ValueError("bisection needs two classes")
        it = iterative_solve(
            bisection_init(pb, k),
            lambda s: bisection_step(pb, s, k),
            lambda s: (bisection_done(pb, s, tol), success),
            max_steps=max_steps,
            finite=_bisection_finite,
        )
        s = it.state
        p = jnp.stack([s.best_a, 1 - s.best_a])
        a = jnp.stack([s.lo, s.hi, s.best_a, s.set_a])
        cand_p = jnp.stack([a, 1 - a], axis=1)
        theta = _mixture_weight(s.agg_lo, s.agg_hi)
        both = s.has_lo & s.has_hi
        mix_w = jnp.where(
            both, jnp.stack([theta, 1 - theta, 0 * theta, 0 * theta]), jnp.asarray([0, 0, 1.0, 0], theta.dtype)
        )
    else:
        it = iterative_solve(
            fw_init(pb, k, max_steps),
            lambda s: fw_step(pb, s, k),
            lambda s: (_converged(s.upper, s.lower, pb.const, tol), success),
            max_steps=max_steps,
            finite=_fw_finite,
        )
        s = it.state
        p = s.best_p
        J = min(C + 1, s.weights.shape[0])  # an optimal x mixes at most C + 1 vertices
        w_top, idx = lax.top_k(s.weights, J)
        cand_p = jnp.concatenate([s.verts_p[idx], p[None], s.p[None]], axis=0)
        mix_w = jnp.concatenate([w_top / jnp.sum(w_top), jnp.zeros(2, w_top.dtype)])
    converged = it.result == RESULTS.successful
    return DualSolution(p, cand_p, mix_w, pb.const + s.upper, pb.const + s.lower, it.num_steps, converged, it.result)


def _systematic_round(x, k):
    """A 0/1 vector with ``sum = k`` that follows the fractional ``x`` (``sum x = k``).

    Entries with ``x = 1`` are kept, ``x = 0`` dropped, and fractional ones taken
    in proportion (systematic sampling in index order), so that the aggregates
    ``sum_j x_j f_j`` are matched as well as possible -- the Shapley-Folkman
    picture, where an optimal dual-of-dual point is a mixture of few 0/1 sets.
    """
    c = jnp.cumsum(x)
    shift = jnp.asarray(k, x.dtype) - c[-1]  # absorb rounding drift in sum x
    c = c + shift * jnp.arange(1, x.shape[0] + 1, dtype=x.dtype) / x.shape[0]
    hi = jnp.floor(c + 0.5)
    lo = jnp.concatenate([jnp.zeros(1, x.dtype), hi[:-1]])
    return hi > lo


def theta_from_mask(pb: Problem, mask):
    """Theorem 4's closed form for a support mask; returns theta, log theta, objective."""
    f = pb.f
    g = class_sum(f)
    S = jnp.sum(g)
    B_c = jnp.sum(jnp.where(mask, f, 0), axis=1)
    B = jnp.sum(B_c)
    shared = g / S
    separate = (B / S) * f / jnp.where(B_c > 0, B_c, 1)[:, None]
    theta = jnp.where(mask & (B_c[:, None] > 0), separate, shared)
    log_theta = jnp.log(theta)
    return theta, log_theta, jnp.sum(jnp.where(f > 0, f * log_theta, 0))


def recover(pb: Problem, sol: DualSolution, k):
    """Support ``T`` (``|T| <= k``) of the recovered primal point and its objective.

    Candidates for ``T``: the top-``k`` of ``h(p)`` at the optimal dual point
    (the thesis' choice, Theorem 4), at the other dual points the solver kept,
    and the rounding of the optimal mixture of those sets -- this matters at a
    kink of the dual, where ties in ``h`` make the top-``k`` ambiguous and the
    optimal dual-of-dual point mixes a few sets (Shapley-Folkman). Each
    candidate's exact objective is ``K + G(1_T)``; the best one is returned.
    """
    dt = pb.f.dtype
    J, m = sol.cand_p.shape[0], pb.f.shape[1]
    same = jnp.all(sol.cand_p[:, None, :] == sol.cand_p[None, :, :], axis=-1)
    first = jnp.argmax(same, axis=1)  # first candidate with the same dual point
    unique = first == jnp.arange(J)

    def mask_at(args):
        p, fresh = args
        return lax.cond(fresh, lambda: top_k_mask(top_k(scores(pb, p), k)), lambda: jnp.zeros(m, bool))

    masks = lax.map(mask_at, (sol.cand_p, unique))  # (J, m), zero rows for duplicates
    w = jnp.zeros(J, dt).at[first].add(sol.mix_w.astype(dt))
    mixed = jnp.sum(w > 0) > 1
    rounded = lax.cond(  # a mixture only exists at a kink, between two or more sets
        mixed,
        lambda: _systematic_round(jnp.sum(jnp.where(masks, w[:, None], 0), axis=0), k),
        lambda: jnp.zeros(m, bool),
    )
    masks = jnp.concatenate([masks, rounded[None]], axis=0)
    fresh = jnp.concatenate([unique, mixed[None]])

    def value(args):  # the exact objective K + G(1_T) of a candidate, minus K
        mask, new = args

        def G():
            A = jnp.sum(jnp.where(mask, pb.f, 0), axis=1)
            return _dual_lower(_Agg(A, jnp.sum(jnp.where(mask, pb.v, 0)))).astype(dt)

        return lax.cond(new, G, lambda: jnp.asarray(-jnp.inf, dt))

    values = lax.map(value, (masks, fresh))
    best = jnp.argmax(values)
    return masks[best], pb.const + values[best]
